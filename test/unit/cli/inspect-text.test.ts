/**
 * `kvdesk inspect`'s text: the KV line gives each figure once when every tensor has it, and each value with its count
 * when the graph's tensors differ (it showed the first tensor's dtype as the whole cache's).
 */
import { describe, expect, it } from 'vitest';
import { inspectText } from '../../../src/cli/main';
import { checkedTemplate } from '../../../src/main/host/chat-template-pick';
import { loadModelSpec } from '../../../src/main/packages';
import { defaultModelDir } from '../../helpers/fixtures';

const kvLine = (text: string) => text.split('\n').find((l) => l.trimStart().startsWith('kv ')) ?? '';

describe('inspect text: the KV line', () => {
  it('one figure when the tensors agree, each value and its count when they differ', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a growing cache');
    const n = spec.kv.tensors.length;
    const first = spec.kv.tensors[0];
    const same = kvLine(inspectText(spec));
    expect(same).toContain(`${n} tensors, split K/V, ${first?.kvHeads} heads × ${first?.headDim} dims, float32`);
    const mixed = structuredClone(spec);
    if (mixed.kv.kind !== 'dynamic') throw new Error('unreachable');
    (mixed.kv.tensors[0] as { dtype: string }).dtype = 'float16';
    expect(kvLine(inspectText(mixed))).toContain(`dims, float16 (1 tensor) / float32 (${n - 1} tensors)`);
  });
});

describe('inspect text: the chat template line', () => {
  const templateLine = (text: string) => text.split('\n').find((l) => l.trimStart().startsWith('chat template')) ?? '';

  it('says a template it has declared unusable is present but unusable, not "yes"', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    expect(templateLine(inspectText(checkedTemplate(spec)))).toBe('  chat template  yes');
    const broken = checkedTemplate({ ...spec, chatTemplate: '{% for m in messages %}{{ m.content }' });
    const text = inspectText(broken);
    expect(templateLine(text)).toBe(
      '  chat template  present but unusable: chats are refused (see the warning below; --chat-template FILE gives another)',
    );
    expect(text).toContain("warning        The package's chat template cannot be used");
  });
});
