/**
 * A graph whose KV inputs leave the head count symbolic (`num_kv_heads`) takes it from config.json, with a
 * warning. The engine builds the cache tensors from the spec's shape: it used to be the graph's, symbol and all,
 * so every request failed "unresolved dimension num_kv_heads". Now the spec's shape carries the size, and the
 * package generates, as the same package with fixed dims does.
 */
import { describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { defaultModelDir } from '../../helpers/fixtures';
import { copyDefault, editGraph, editsHost, symbolicDim } from './edited-default';

const isKv = (name: string) => name.startsWith('past_key_values.') || name.startsWith('present.');

const edits = editsHost();

describe('KV heads symbolic in the graph, given by config.json', () => {
  it("the spec's KV shapes carry config.json's 2 heads, and the model generates what the fixed-dims one does", async () => {
    const dir = await copyDefault('symbolic-heads');
    await editGraph(dir, (g) => symbolicDim(g, isKv, 1, 'num_kv_heads'));
    const spec = await loadModelSpec(dir);
    expect(spec.warnings.some((w) => w.includes('using kv_heads = 2 from config.json'))).toBe(true);

    await edits.host.loadModel(defaultModelDir, { id: 'fixed' });
    await edits.host.loadModel(dir, { id: 'symbolic' });
    const ask = (model: string) =>
      edits.host.generate({ model, prompt: 'hello world', maxNewTokens: 6, sampling: { greedy: true } }).result;
    const fixed = await ask('fixed');
    const symbolic = await ask('symbolic');
    expect(symbolic.tokenIds).toHaveLength(6);
    expect(symbolic.tokenIds).toEqual(fixed.tokenIds);
    // A second turn in a session reuses the cache the first one left.
    const chat = await edits.host.generate({
      model: 'symbolic',
      messages: [{ role: 'user', content: 'hi' }],
      maxNewTokens: 4,
      sampling: { greedy: true },
    }).result;
    expect(chat.tokenIds.length).toBeGreaterThan(0);
    expect(spec.kv.kind).toBe('dynamic');
    if (spec.kv.kind !== 'dynamic') return;
    for (const t of spec.kv.tensors) expect(t.shape).toEqual(['batch_size', 2, 'past_sequence_length', 16]);
  });
});
