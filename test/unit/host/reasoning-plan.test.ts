import { describe, expect, it } from 'vitest';
import { closingSuffix } from '../../../src/main/host/reasoning-plan';
import type { GenerateRequest } from '../../../src/shared/contract';
import type { ModelSpec } from '../../../src/shared/model-spec';
import { reasoningOf } from '../../../src/shared/reasoning';

/** A model whose template writes the given markers (and has no on/off switch: `thinking: false` closes in the prompt). */
const modelOf = (template: string) => ({ reasoning: reasoningOf(template) }) as ModelSpec;
const req = (extra: Partial<GenerateRequest>) => ({ messages: [], ...extra }) as GenerateRequest;

describe('closingSuffix', () => {
  it('closes a reasoning in the prompt as the template writes one: a tag on its lines, Magistral’s bare', () => {
    const qwen = modelOf('{{ "<think>" }}…{{ "</think>" }}');
    const magistral = modelOf('[THINK]{{ m.reasoning_content }}[/THINK]');
    // Thinking off: an empty reasoning.
    expect(closingSuffix(req({ thinking: false }), qwen, undefined, 'user: hi\nassistant:')).toBe(
      '<think>\n\n</think>\n\n',
    );
    expect(closingSuffix(req({ thinking: false }), magistral, undefined, '[INST]hi[/INST]')).toBe('[THINK][/THINK]');
    // The prompt opened it: its close alone.
    expect(closingSuffix(req({ thinking: false }), qwen, undefined, 'assistant:<think>\n')).toBe('\n</think>\n\n');
    expect(closingSuffix(req({ thinking: false }), magistral, undefined, '[INST]hi[/INST][THINK]')).toBe('[/THINK]');
    // Thinking on: nothing closed.
    expect(closingSuffix(req({}), magistral, undefined, '[INST]hi[/INST][THINK]')).toBe('');
  });
});
