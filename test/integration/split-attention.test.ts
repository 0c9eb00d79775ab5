/**
 * Attention over the past KV and the positions a run adds, apart (last-position.ts splitPlan): the copy computes
 * each attention product twice — over the past, over the added positions — and joins the results (keys: a Concat
 * of the scores; values: a sum), so no run copies the whole KV into the graph's Concat, and the copy makes no
 * presents (the engine builds them from the added positions). On the real onnxruntime-node: the copy scores as
 * the original graph (float rounding), on toy graphs and on both generated architectures; graphs whose KV is read
 * otherwise keep their Concats, with the reason; and through the engine, the same greedy tokens.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, describe, expect, it } from 'vitest';
import { GraphBuilder, int, ints, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import { LoadedDecoder, logitsGap, scoringLast } from '../../src/main/engine/decoder';
import { appendSeq } from '../../src/main/engine/kv-cache';
import { lastPositionGraph } from '../../src/main/engine/last-position';
import { loadModelSpec } from '../../src/main/packages';
import type { KvTensorSpec, ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir } from '../helpers/fixtures';
import { greedyIds } from '../helpers/generation';
import { generatedModel } from '../helpers/models';

const OPTIONS = { intraOpNumThreads: 2, graphOptimizationLevel: 'all', logSeverityLevel: 3 } as const;

/** Largest difference between two float arrays, relative to the first one's scale (at least 1). */
function gap(a: Float32Array, b: Float32Array): number {
  expect(b.length).toBe(a.length);
  return logitsGap(a, b);
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-split-attention-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Variant = 'plain' | 'negative-axis' | 'scaled' | 'unsqueezed' | 'shape-reader' | 'reshape' | 'kv-as-query';

/**
 * One attention layer over a KV of one head ([batch, 1, positions, 4]): ids → embedding h; the new keys are h/2;
 * scores = h · presentᵀ, probs = softmax, context = probs · present (the KV serves as keys and values), logits =
 * context · W. `variant` changes how the present is read.
 */
function toy(variant: Variant): { file: string; kv: KvTensorSpec } {
  const b = new GraphBuilder(`split-${variant}`);
  const ids = b.input('input_ids', 'int64', ['batch', 'seq']);
  const past = b.input('past_key', 'float32', ['batch', 1, 'past', 4]);
  const table = b.weight('embed', [16, 4], () => Float32Array.from({ length: 64 }, (_, i) => Math.sin(i * 0.7)));
  const h = b.op('Gather', [table, ids], { axis: int(0) }); // [batch, seq, 4]
  const added = b.op('Unsqueeze', [b.op('Mul', [h, b.scalar(0.5)]), b.int64([1])]); // [batch, 1, seq, 4]
  const axis = variant === 'negative-axis' ? -2 : 2;
  const present = b.op('Concat', [past, added], { axis: int(axis) }, 'present_key');
  b.output('present_key', 'float32', ['batch', 1, 'total', 4]);
  const query = b.op('Unsqueeze', [h, b.int64([1])]); // [batch, 1, seq, 4]
  let keys = present;
  if (variant === 'scaled') keys = b.op('Div', [present, b.scalar(2)]);
  let scores: string;
  if (variant === 'kv-as-query') {
    scores = b.op('MatMul', [present, b.op('Transpose', [query], { perm: ints([0, 1, 3, 2]) })]);
  } else if (variant === 'unsqueezed') {
    // The keys through an Unsqueeze at a negative axis: [batch, 1, 1, total, 4] → [batch, 1, 1, 4, total].
    const keys5 = b.op('Transpose', [b.op('Unsqueeze', [keys, b.int64([-3])])], { perm: ints([0, 1, 2, 4, 3]) });
    const query5 = b.op('Unsqueeze', [query, b.int64([2])]); // [batch, 1, 1, seq, 4]
    scores = b.op('Squeeze', [b.op('MatMul', [query5, keys5]), b.int64([2])]);
  } else scores = b.op('MatMul', [query, b.op('Transpose', [keys], { perm: ints([0, 1, 3, 2]) })]); // [batch, 1, seq, total]
  const probs = b.op('Softmax', [scores], { axis: int(-1) });
  const values = variant === 'reshape' ? b.op('Reshape', [present, b.int64([0, 1, -1, 4])]) : present;
  const context = b.op('MatMul', [variant === 'kv-as-query' ? scores : probs, values]);
  const hidden = b.op('Squeeze', [context, b.int64([1])]); // [batch, seq, 4]
  if (variant === 'shape-reader') {
    // The whole shape, and the positions alone as Hugging Face's GPT-2 reads them (key.size(-2)).
    b.op('Shape', [present], {}, 'total_shape');
    b.output('total_shape', 'int64', [4]);
    b.op('Shape', [present], { start: int(-2), end: int(-1) }, 'total_length');
    b.output('total_length', 'int64', [1]);
  }
  const head = b.weight('head', [4, 16], () => Float32Array.from({ length: 64 }, (_, i) => Math.cos(i * 0.3)));
  b.op('MatMul', [hidden, head], {}, 'logits');
  b.output('logits', 'float32', ['batch', 'seq', 16]);
  const file = path.join(dir, `${variant}.onnx`);
  writeOnnxModel(file, b, { producerName: 'test', producerVersion: '1', opsetVersion: 17, irVersion: 8 });
  const kv: KvTensorSpec = {
    layer: 0,
    role: 'key',
    past: 'past_key',
    present: 'present_key',
    dtype: 'float32',
    shape: ['batch', 1, 'past', 4],
    batchAxis: 0,
    seqAxis: 2,
    kvHeads: 1,
    headDim: 4,
    bytesPerToken: 16,
  };
  return { file, kv };
}

const ids = (rows: number[][]) =>
  new ort.Tensor('int64', BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0]?.length ?? 0]);

describe('the split copy of a toy attention layer', () => {
  it.each<Variant>(['plain', 'negative-axis', 'scaled', 'unsqueezed', 'shape-reader'])(
    'scores as the original graph, prompt then steps, and makes no present (%s)',
    async (variant) => {
      const { file, kv } = toy(variant);
      const rewrite = lastPositionGraph(file, 'logits', { kv: [kv], split: true });
      if (!rewrite.ok) throw new Error(rewrite.reason);
      expect(rewrite.split).toBe(true);
      const addedName = rewrite.kvAdded?.get('past_key') as string;
      expect(addedName).toBeDefined();
      const original = await ort.InferenceSession.create(file, OPTIONS);
      const copy = await ort.InferenceSession.create(rewrite.bytes, {
        ...OPTIONS,
        extra: { session: { model_external_initializers_file_folder_path: rewrite.folder } },
      });
      try {
        expect(copy.outputNames).not.toContain('present_key');
        expect(copy.outputNames).toContain(addedName);
        // Two rows: a five-token prompt over an empty past, then three steps of one token, then a two-token run.
        let pastOriginal: ort.Tensor = new ort.Tensor('float32', new Float32Array(0), [2, 1, 0, 4]);
        let pastCopy: ort.Tensor = pastOriginal;
        const runs = [
          [
            [1, 2, 3, 4, 5],
            [6, 7, 8, 9, 10],
          ],
          [[11], [12]],
          [[13], [14]],
          [[15], [0]],
          [
            [3, 9],
            [4, 8],
          ],
        ];
        for (const run of runs) {
          const a = await original.run({ input_ids: ids(run), past_key: pastOriginal });
          const b = await copy.run(scoringLast({ input_ids: ids(run), past_key: pastCopy }, rewrite.startsInput));
          const full = (a.logits as ort.Tensor).data as Float32Array;
          const seq = run[0]?.length as number;
          const lastRows = new Float32Array(32);
          for (let r = 0; r < 2; r++)
            lastRows.set(full.subarray((r * seq + seq - 1) * 16, (r * seq + seq) * 16), r * 16);
          expect(gap(lastRows, (b.logits as ort.Tensor).data as Float32Array)).toBeLessThan(1e-5);
          // The KV's shape, where the graph reads it: made from both sides' shapes.
          if (variant === 'shape-reader') {
            for (const name of ['total_shape', 'total_length']) {
              expect(copy.outputNames).toContain(name);
              expect((b[name] as ort.Tensor).data).toEqual((a[name] as ort.Tensor).data);
            }
          }
          pastOriginal = a.present_key as ort.Tensor;
          pastCopy = appendSeq(kv, pastCopy.dims[2] === 0 ? undefined : pastCopy, b[addedName] as ort.Tensor);
          expect(pastCopy.dims).toEqual(pastOriginal.dims);
          expect(gap(pastOriginal.data as Float32Array, pastCopy.data as Float32Array)).toBeLessThan(1e-6);
        }
      } finally {
        await original.release();
        await copy.release();
      }
    },
  );

  it('keeps the Concat, and says why, where the KV is read otherwise', () => {
    const reason = (variant: Variant) => {
      const { file, kv } = toy(variant);
      const rewrite = lastPositionGraph(file, 'logits', { kv: [kv], split: true });
      if (!rewrite.ok) throw new Error(rewrite.reason);
      expect(rewrite.split).toBeUndefined();
      return rewrite.splitReason;
    };
    expect(reason('reshape')).toBe('Reshape reads "present_key"');
    expect(reason('kv-as-query')).toBe('a MatMul reads "present_key" as its first input');
    const { file, kv } = toy('plain');
    expect(lastPositionGraph(file, 'logits', { kv: [kv] })).toMatchObject({ ok: true, splitReason: 'not asked for' });
  });
});

/** Greedy tokens of `rows` through the engine with and without the split; returns how each loaded. */
async function sameTokens(spec: ModelSpec, rows: number[][], maxNewTokens: number) {
  const engine = { intraOpNumThreads: 2, executionProviders: ['cpu'], prefillChunkTokens: 48 };
  const split = await LoadedDecoder.load(spec, engine);
  const whole = await LoadedDecoder.load(spec, { ...engine, splitAttention: false });
  try {
    const generate = (d: LoadedDecoder) => greedyIds((job, hooks) => d.generate(job, hooks), rows, maxNewTokens);
    expect(await generate(split)).toEqual(await generate(whole));
    return { split: split.logits, whole: whole.logits };
  } finally {
    await split.dispose();
    await whole.dispose();
  }
}

const prompt = (length: number, seed: number, vocab: number) =>
  Array.from({ length }, (_, i) => 3 + ((i * 37 + seed * 11) % (vocab - 3)));

describe('the engine on generated graphs', () => {
  it.each([
    ['the default model (Llama layout: grouped-query attention, rotary)', () => defaultModelDir],
    [
      'a GPT-2 layout',
      () => generatedModel('split-gpt2', { architecture: 'gpt2', numLayers: 2, numHeads: 4, numKvHeads: 4 }),
    ],
  ])('splits the attention of %s, and writes the tokens of the graph’s own Concats', async (_, dirOf) => {
    const spec = await loadModelSpec(dirOf());
    // Two rows of different lengths (left-padded), one longer than a prefill chunk.
    const rows = [prompt(70, 1, spec.vocabSize), prompt(20, 2, spec.vocabSize)];
    const loaded = await sameTokens(spec, rows, 16);
    expect(loaded.split.attention).toBe(
      "each layer's attention reads its past KV and the positions a run adds apart: no Concat copies the whole KV per step",
    );
    expect(loaded.whole.attention).toBe("attention reads the graph's Concat of the KV: turned off");
  });
});
