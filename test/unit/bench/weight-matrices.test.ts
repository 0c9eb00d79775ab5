import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { weightMatrices } from '../../../bench/lib/weight-matrices';
import { generatedModel } from '../../helpers/models';

// bench/lib/weight-matrices.ts: the matrices the bench's "body products alone" graph is built from.
describe('weightMatrices', () => {
  it("lists a Llama graph's seven products per layer in order, then its own LM head", () => {
    const dir = generatedModel('bench-matrices-llama', { numLayers: 2 });
    const m = weightMatrices(path.join(dir, 'onnx', 'model.onnx'));
    // hidden 64, 4 heads of 16, 2 KV heads, intermediate 172, vocab 512 (the default preset).
    const layer = [
      [64, 64],
      [64, 32],
      [64, 32],
      [64, 64],
      [64, 172],
      [64, 172],
      [172, 64],
    ];
    expect(m.map((x) => x.dims)).toEqual([...layer, ...layer, [64, 512]]);
    expect(m[0]?.name).toBe('model.layers.0.self_attn.q_proj.weight');
  });

  it("gives a tied head's [vocab, hidden] table as multiplied, [hidden, vocab], and the embedding once", () => {
    const dir = generatedModel('bench-matrices-gpt2', {
      architecture: 'gpt2',
      numLayers: 1,
      numHeads: 4,
      numKvHeads: 4,
      tieWordEmbeddings: true,
    });
    const m = weightMatrices(path.join(dir, 'onnx', 'model.onnx'));
    expect(m.map((x) => x.dims)).toEqual([
      [64, 192],
      [64, 64],
      [64, 172],
      [172, 64],
      [64, 512],
    ]);
  });
});
