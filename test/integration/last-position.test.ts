/**
 * Logits of the last position only, on the real onnxruntime-node: the engine's
 * copy of a graph feeds the LM head the last position, returns one row of
 * logits per batch row, leaves the KV cache bit for bit as it was, and
 * generates the same greedy tokens; graphs whose head it does not recognise
 * load unchanged, with the reason.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onnx } from 'onnx-proto';
import * as ort from 'onnxruntime-node';
import { afterAll, describe, expect, it } from 'vitest';
import { GraphBuilder, int, ints, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import { LoadedDecoder, lastPositionSession, scoringLast } from '../../src/main/engine/decoder';
import { lastPositionGraph } from '../../src/main/engine/last-position';
import type { EngineSessionOptions, LogitsPositions } from '../../src/main/engine/protocol';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import type { GraphPort, ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';
import { greedyIds } from '../helpers/generation';
import { generatedModel } from '../helpers/models';
import { firstRunFeeds } from '../helpers/oracle';

const OPTIONS = { intraOpNumThreads: 2, graphOptimizationLevel: 'all', logSeverityLevel: 3 } as const;

function prompt(length: number, seed: number, vocab: number): number[] {
  return Array.from({ length }, (_, i) => 3 + ((i * 37 + seed * 11) % (vocab - 3)));
}

/**
 * Loads `spec` with and without the last-position copy, checks the greedy
 * tokens of `rows` are the same both ways, and returns how the copy loaded.
 */
async function sameTokensBothWays(
  spec: ModelSpec,
  rows: number[][],
  maxNewTokens: number,
  prefillChunkTokens?: number,
): Promise<{ fast: LogitsPositions; plain: LogitsPositions }> {
  const engine: EngineSessionOptions = { intraOpNumThreads: 2, executionProviders: ['cpu'] };
  if (prefillChunkTokens !== undefined) engine.prefillChunkTokens = prefillChunkTokens;
  const fast = await LoadedDecoder.load(spec, engine);
  const plain = await LoadedDecoder.load(spec, { ...engine, lastPositionLogits: false });
  try {
    const generate = (d: LoadedDecoder) => greedyIds((job, hooks) => d.generate(job, hooks), rows, maxNewTokens);
    expect(await generate(fast)).toEqual(await generate(plain));
    return { fast: fast.logits, plain: plain.logits };
  } finally {
    await fast.dispose();
    await plain.dispose();
  }
}

/** Runs a toy graph ([batch, seq] ids → [batch, seq, vocab] logits) and its copy on two rows of three ids. */
async function toyLogits(file: string): Promise<{ full: ort.Tensor; last: ort.Tensor }> {
  const rewrite = lastPositionGraph(file, 'logits');
  if (!rewrite.ok) throw new Error(rewrite.reason);
  const original = await ort.InferenceSession.create(file, OPTIONS);
  const copy = await ort.InferenceSession.create(rewrite.bytes, {
    ...OPTIONS,
    extra: { session: { model_external_initializers_file_folder_path: rewrite.folder } },
  });
  try {
    const feeds = { input_ids: new ort.Tensor('int64', BigInt64Array.from([1n, 5n, 9n, 2n, 7n, 3n]), [2, 3]) };
    return {
      full: (await original.run(feeds)).logits as ort.Tensor,
      last: (await copy.run(scoringLast({ ...feeds }, rewrite.startsInput))).logits as ort.Tensor,
    };
  } finally {
    await original.release();
    await copy.release();
  }
}

/** The last position of each of the two rows of `full`, as the copy should give them. */
function lastOfEachRow(full: ort.Tensor): number[] {
  const V = full.dims[2] as number;
  const data = full.data as Float32Array;
  return [...data.subarray(2 * V, 3 * V), ...data.subarray(5 * V, 6 * V)];
}

describe('the last-position copy of a generated graph', () => {
  it('returns [rows, 1, vocab] logits equal to the original last position, and the same KV bit for bit', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    const rewrite = lastPositionGraph(spec.graphPath, spec.ports.logits.name);
    if (!rewrite.ok) throw new Error(rewrite.reason);
    const original = await ort.InferenceSession.create(spec.graphPath, OPTIONS);
    const copy = await ort.InferenceSession.create(rewrite.bytes, {
      ...OPTIONS,
      extra: { session: { model_external_initializers_file_folder_path: rewrite.folder } },
    });
    try {
      const rows = [prompt(37, 1, spec.vocabSize), prompt(37, 2, spec.vocabSize)];
      const a = await original.run(firstRunFeeds(spec, rows));
      const b = await copy.run(scoringLast(firstRunFeeds(spec, rows), rewrite.startsInput));
      // Fed −5, the start input gives the last five positions of each row (a lookup draft's check).
      const startFive = { [rewrite.startsInput]: new ort.Tensor('int64', BigInt64Array.of(-5n), [1]) };
      const c = await copy.run({ ...firstRunFeeds(spec, rows), ...startFive });
      const name = spec.ports.logits.name;
      const V = a[name]?.dims[2] as number;
      expect(a[name]?.dims).toEqual([2, 37, V]);
      expect(b[name]?.dims).toEqual([2, 1, V]);
      expect(c[name]?.dims).toEqual([2, 5, V]);
      const full = a[name]?.data as Float32Array;
      const gap = (want: Float32Array, got: Float32Array) => {
        let worst = 0;
        for (let i = 0; i < V; i++) worst = Math.max(worst, Math.abs((want[i] as number) - (got[i] as number)));
        return worst;
      };
      for (let r = 0; r < 2; r++) {
        const last = b[name]?.data as Float32Array;
        expect(gap(full.subarray((r * 37 + 36) * V), last.subarray(r * V))).toBeLessThan(1e-4);
        for (let p = 0; p < 5; p++) {
          const five = c[name]?.data as Float32Array;
          expect(gap(full.subarray((r * 37 + 32 + p) * V), five.subarray((r * 5 + p) * V))).toBeLessThan(1e-4);
        }
      }
      if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a past/present graph');
      for (const t of spec.kv.tensors) {
        expect(Buffer.from(((b[t.present] as ort.Tensor).data as Float32Array).buffer)).toEqual(
          Buffer.from(((a[t.present] as ort.Tensor).data as Float32Array).buffer),
        );
      }
    } finally {
      await original.release();
      await copy.release();
    }
  });

  it('handles a tied head (Gemm on the flattened states, reshaped back to [rows, 1, vocab])', async () => {
    const spec = await loadModelSpec(
      generatedModel('tied-gpt2', {
        architecture: 'gpt2',
        numLayers: 2,
        numHeads: 4,
        numKvHeads: 4,
        tieWordEmbeddings: true,
      }),
    );
    const rewrite = lastPositionGraph(spec.graphPath, spec.ports.logits.name);
    expect(rewrite).toMatchObject({ ok: true, detail: expect.stringMatching(/^LM head Gemm fed the last position/) });
    const rows = [prompt(70, 7, spec.vocabSize), prompt(33, 8, spec.vocabSize)];
    const loaded = await sameTokensBothWays(spec, rows, 10, 48);
    expect(loaded.fast.last).toBe(true);
  });

  it('is what the engine loads, and generates the tokens of the original graph', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    // Two rows of different lengths (left-padded), a prompt longer than one chunk.
    const rows = [prompt(150, 3, spec.vocabSize), prompt(90, 4, spec.vocabSize)];
    const loaded = await sameTokensBothWays(spec, rows, 12, 64);
    expect(loaded.fast.last).toBe(true);
    expect(loaded.fast.detail).toMatch(/LM head (MatMul|Gemm) fed the last position/);
    expect(loaded.plain).toEqual({
      last: false,
      detail: 'turned off (lastPositionLogits: false)',
      batching: expect.stringMatching(/^requests share one batch, each row left-padded/),
    });
  });
});

describe('a package whose graph is a link (as a Hugging Face cache links its files to its blobs)', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /**
   * The default model with its graph (and, with `external`, a data file beside it holding its weights) as links
   * to files in the package's `blobs/` folder; `dataIn` puts the data file's blob in another folder.
   */
  function linkedPackage(external: boolean, dataIn = 'blobs'): string {
    const root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-linked-'));
    dirs.push(root);
    cpSync(defaultModelDir, root, { recursive: true });
    mkdirSync(path.join(root, 'blobs'));
    mkdirSync(path.join(root, dataIn), { recursive: true });
    const graph = path.join(root, 'onnx', 'model.onnx');
    const link = (name: string, bytes: Uint8Array, folder: string) => {
      const target = path.join(root, folder, `blob-${name}`);
      writeFileSync(target, bytes);
      rmSync(path.join(root, 'onnx', name), { force: true });
      symlinkSync(path.relative(path.join(root, 'onnx'), target), path.join(root, 'onnx', name));
    };
    const model = onnx.ModelProto.decode(readFileSync(graph));
    if (external) {
      const data: Buffer[] = [];
      let offset = 0;
      for (const t of model.graph?.initializer ?? []) {
        const raw = t.rawData;
        if (!raw || raw.length < 1024) continue;
        t.externalData = [
          { key: 'location', value: 'model.onnx_data' },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(raw.length) },
        ];
        t.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
        t.rawData = new Uint8Array(0);
        data.push(Buffer.from(raw));
        offset += raw.length;
      }
      expect(offset).toBeGreaterThan(100_000);
      link('model.onnx_data', Buffer.concat(data), dataIn);
    }
    link('model.onnx', onnx.ModelProto.encode(model).finish(), 'blobs');
    return root;
  }

  it.each([
    ['weights in the graph', false],
    ['weights in a data file beside it', true],
  ])('loads the copy (%s) and generates the tokens of the original graph', async (_, external) => {
    const spec = await loadModelSpec(linkedPackage(external));
    const loaded = await sameTokensBothWays(spec, [prompt(40, 3, spec.vocabSize)], 8);
    expect(loaded.fast.detail).toMatch(/LM head (MatMul|Gemm) fed the last position/);
    expect(loaded.fast.last).toBe(true);
  });

  it("falls back, saying why, when a data file's blob lies outside the folder of the graph's own", () => {
    const dir = linkedPackage(true, 'elsewhere');
    const rewrite = lastPositionGraph(path.join(dir, 'onnx', 'model.onnx'), 'logits');
    expect(rewrite.ok ? '' : rewrite.reason).toMatch(/external data "model.onnx_data" is not in the folder/);
  });
});

describe('graphs whose head the rewrite does not recognise', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-last-position-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** A one-layer toy: ids → embedding → (head) → logits, with the head built by `head`. */
  function toy(name: string, head: (b: GraphBuilder, hidden: string) => string): string {
    const b = new GraphBuilder(name);
    const ids = b.input('input_ids', 'int64', ['batch', 'seq']);
    const table = b.weight('embed', [16, 4], () => Float32Array.from({ length: 64 }, (_, i) => (i % 7) / 7));
    const hidden = b.op('Gather', [table, ids], { axis: int(0) });
    b.op('Identity', [head(b, hidden)], {}, 'logits');
    b.output('logits', 'float32', ['batch', 'seq', 16]);
    const file = path.join(dir, `${name}.onnx`);
    writeOnnxModel(file, b, { producerName: 'test', producerVersion: '1', opsetVersion: 17, irVersion: 8 });
    return file;
  }

  it('says why, for a head that is not a product with a weight', () => {
    const softmax = toy('softmax', (b, h) => {
      const w = b.weight('w', [4, 16], () => new Float32Array(64).fill(0.1));
      return b.op('Softmax', [b.op('MatMul', [h, w])], { axis: int(-1) });
    });
    expect(lastPositionGraph(softmax, 'logits')).toEqual({
      ok: false,
      reason: 'the logits come from Softmax, not from a MatMul or Gemm with a weight',
    });
    const computed = toy('computed-weight', (b, h) => {
      const w = b.weight('w', [4, 16], () => new Float32Array(64).fill(0.1));
      return b.op('MatMul', [h, b.op('Mul', [w, w])]);
    });
    expect(lastPositionGraph(computed, 'logits')).toEqual({
      ok: false,
      reason: 'the logits come from MatMul, not from a MatMul or Gemm with a weight',
    });
    const shared = toy('shared-hidden', (b, h) => {
      const w = b.weight('w', [4, 16], () => new Float32Array(64).fill(0.1));
      const scores = b.op('MatMul', [h, w]);
      return b.op('Add', [b.op('Tanh', [scores]), scores]);
    });
    expect(lastPositionGraph(shared, 'logits')).toMatchObject({ ok: false });
    expect(lastPositionGraph(path.join(dir, 'missing.onnx'), 'logits')).toMatchObject({
      ok: false,
      reason: expect.stringContaining('cannot read'),
    });
  });

  it('counts what an If/Loop/Scan body reads from the outer graph', () => {
    // logits = Identity(scores), and an If's then-branch also reads scores: slicing it would change that branch.
    const tensor = (name: string, dims: number[], values: number[]) =>
      onnx.TensorProto.create({ name, dims, dataType: 1, rawData: new Uint8Array(Float32Array.from(values).buffer) });
    const info = (name: string, elemType: number) =>
      onnx.ValueInfoProto.create({ name, type: { tensorType: { elemType, shape: { dim: [] } } } });
    const branch = onnx.GraphProto.create({
      name: 'then',
      node: [onnx.NodeProto.create({ opType: 'Identity', input: ['scores'], output: ['branch_out'] })],
      output: [info('branch_out', 1)],
    });
    const elseBranch = onnx.GraphProto.create({
      name: 'else',
      node: [onnx.NodeProto.create({ opType: 'Identity', input: ['scores'], output: ['else_out'] })],
      output: [info('else_out', 1)],
    });
    const graph = onnx.GraphProto.create({
      name: 'subgraph-reader',
      node: [
        onnx.NodeProto.create({ opType: 'Gather', input: ['embed', 'input_ids'], output: ['hidden'] }),
        onnx.NodeProto.create({ opType: 'MatMul', input: ['hidden', 'w'], output: ['scores'] }),
        onnx.NodeProto.create({ opType: 'Identity', input: ['scores'], output: ['logits'] }),
        onnx.NodeProto.create({
          opType: 'If',
          input: ['cond'],
          output: ['side'],
          attribute: [
            { name: 'then_branch', type: onnx.AttributeProto.AttributeType.GRAPH, g: branch },
            { name: 'else_branch', type: onnx.AttributeProto.AttributeType.GRAPH, g: elseBranch },
          ],
        }),
      ],
      initializer: [tensor('embed', [16, 4], new Array(64).fill(0.5)), tensor('w', [4, 16], new Array(64).fill(0.25))],
      input: [info('input_ids', 7), info('cond', 9)],
      output: [info('logits', 1), info('side', 1)],
    });
    const model = onnx.ModelProto.create({ irVersion: 8, opsetImport: [{ domain: '', version: 17 }], graph });
    const file = path.join(dir, 'subgraph-reader.onnx');
    writeFileSync(file, onnx.ModelProto.encode(model).finish());
    expect(lastPositionGraph(file, 'logits')).toEqual({
      ok: false,
      reason: '"scores" on the way to the logits is also read elsewhere',
    });
  });

  it('rewrites an int4 head (com.microsoft.MatMulNBits, as onnxruntime-genai exports it)', async () => {
    const K = 16;
    const N = 16;
    const tensor = (name: string, dims: number[], dataType: number, raw: Uint8Array) =>
      onnx.TensorProto.create({ name, dims, dataType, rawData: raw });
    const floats = (values: number[]) => new Uint8Array(Float32Array.from(values).buffer);
    const info = (name: string, elemType: number, dims: Array<number | string>) =>
      onnx.ValueInfoProto.create({
        name,
        type: {
          tensorType: {
            elemType,
            shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
          },
        },
      });
    const graph = onnx.GraphProto.create({
      name: 'int4-head',
      node: [
        onnx.NodeProto.create({ opType: 'Gather', input: ['embed', 'input_ids'], output: ['hidden'] }),
        onnx.NodeProto.create({
          opType: 'MatMulNBits',
          domain: 'com.microsoft',
          input: ['hidden', 'w_q4', 'w_scales'],
          output: ['logits'],
          attribute: [
            { name: 'K', type: onnx.AttributeProto.AttributeType.INT, i: K },
            { name: 'N', type: onnx.AttributeProto.AttributeType.INT, i: N },
            { name: 'bits', type: onnx.AttributeProto.AttributeType.INT, i: 4 },
            { name: 'block_size', type: onnx.AttributeProto.AttributeType.INT, i: 16 },
          ],
        }),
      ],
      initializer: [
        tensor('embed', [16, K], 1, floats(Array.from({ length: 16 * K }, (_, i) => ((i * 7) % 13) / 13 - 0.5))),
        // [N, K / block_size, block_size / 2] bytes of two 4-bit values each.
        tensor(
          'w_q4',
          [N, 1, 8],
          2,
          Uint8Array.from({ length: N * 8 }, (_, i) => (i * 37) % 256),
        ),
        tensor('w_scales', [N], 1, floats(Array.from({ length: N }, (_, i) => 0.01 * (i + 1)))),
      ],
      input: [info('input_ids', 7, ['batch', 'seq'])],
      output: [info('logits', 1, ['batch', 'seq', N])],
    });
    const model = onnx.ModelProto.create({
      irVersion: 8,
      opsetImport: [
        { domain: '', version: 17 },
        { domain: 'com.microsoft', version: 1 },
      ],
      graph,
    });
    const file = path.join(dir, 'int4-head.onnx');
    writeFileSync(file, onnx.ModelProto.encode(model).finish());
    expect(lastPositionGraph(file, 'logits')).toMatchObject({
      vocab: N,
      detail: 'LM head MatMulNBits fed the last position of "hidden"',
    });
    const { full, last } = await toyLogits(file);
    expect(last.dims).toEqual([2, 1, N]);
    expect([...(last.data as Float32Array)]).toEqual(lastOfEachRow(full));
  });

  it('falls back when the sliced axis is not the sequence (the copy would score another position)', async () => {
    // [batch, seq, 4] → Unsqueeze → [batch, 1, seq, 4]: axis 1 is a size-1 axis in front of the sequence.
    const file = toy('fold', (b, h) => {
      const w = b.weight('w', [4, 16], () => Float32Array.from({ length: 64 }, (_, i) => ((i * 3) % 7) / 7));
      const scores = b.op('MatMul', [b.op('Unsqueeze', [h, b.int64([1])]), w]);
      return b.op('Reshape', [scores, b.int64([0, -1, 16])]);
    });
    expect(lastPositionGraph(file, 'logits')).toMatchObject({ ok: true });
    const port = (name: string): GraphPort => ({ name, dtype: 'int64', shape: ['batch', 'seq'] });
    const spec = {
      graphPath: file,
      ports: { inputIds: port('input_ids'), logits: { name: 'logits', dtype: 'float32', shape: ['batch', 'seq', 16] } },
      vocabSize: 16,
      kv: { kind: 'dynamic', tensors: [] },
    } as unknown as ModelSpec;
    const loaded = await lastPositionSession(spec, OPTIONS);
    expect(loaded.session).toBeNull();
    expect(loaded.logits).toMatchObject({ last: false, detail: expect.stringContaining('was not used') });
  });

  it('rewrites a tied head written as MatMul(h, Transpose(embedding))', async () => {
    // The [16, 4] embedding table itself, turned [4, 16] by a Transpose in the graph: no second copy in the file.
    const file = toy('tied-transpose', (b, h) =>
      b.op('MatMul', [h, b.op('Transpose', ['embed'], { perm: ints([1, 0]) })]),
    );
    expect(lastPositionGraph(file, 'logits')).toMatchObject({ ok: true, vocab: 16 });
    const { full, last } = await toyLogits(file);
    expect(last.dims).toEqual([2, 1, 16]);
    expect([...(last.data as Float32Array)]).toEqual(lastOfEachRow(full));
    // Without a perm a Transpose reverses the axes: the same head.
    const plain = toy('tied-transpose-default', (b, h) => b.op('MatMul', [h, b.op('Transpose', ['embed'])]));
    expect(lastPositionGraph(plain, 'logits')).toMatchObject({ ok: true, vocab: 16 });
    // The perm is read: one that keeps the axes is not taken for the swap (the vocabulary would be the wrong dim).
    const kept = toy('transpose-identity', (b, h) => {
      const w = b.weight('w', [4, 16], () => new Float32Array(64).fill(0.1));
      return b.op('MatMul', [h, b.op('Transpose', [w], { perm: ints([0, 1]) })]);
    });
    expect(lastPositionGraph(kept, 'logits')).toMatchObject({ ok: false });
    // A Transpose of something computed is no weight.
    const computed = toy('transpose-computed', (b, h) =>
      b.op('MatMul', [h, b.op('Transpose', [b.op('Mul', ['embed', 'embed'])])]),
    );
    expect(lastPositionGraph(computed, 'logits')).toMatchObject({ ok: false });
  });

  it('rewrites a plain head and the copy scores the last position', async () => {
    const file = toy('plain', (b, h) => {
      const w = b.weight('w', [4, 16], () => Float32Array.from({ length: 64 }, (_, i) => ((i * 5) % 11) / 11));
      const bias = b.weight('bias', [16], () => Float32Array.from({ length: 16 }, (_, i) => i / 16));
      return b.op('Add', [b.op('MatMul', [h, w]), bias]);
    });
    const { full, last } = await toyLogits(file);
    expect(last.dims).toEqual([2, 1, 16]);
    expect([...(last.data as Float32Array)]).toEqual(lastOfEachRow(full));
  });
});

describe.skipIf(!haveFixtures)(
  `third-party packages (onnxruntime-genai's GPT-2, onnx-genai)${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it.each([
      'onnxruntime-genai/tiny-random-gpt2-fp32',
      'onnx-genai/tiny-llm',
      'onnx-genai/tiny-llm-explicit-io',
      'onnx-genai/tiny-llm-sharedbuffer',
      'onnx-genai/tiny-reasoning',
    ])('%s: the engine scores the last position only and generates the same tokens', async (rel) => {
      const spec = await loadModelSpec(fixture(rel));
      const rows = [prompt(6, 5, spec.vocabSize), prompt(4, 6, spec.vocabSize)];
      const loaded = await sameTokensBothWays(spec, rows, 6);
      expect(loaded.fast).toMatchObject({ last: true });
    });
  },
);

describe('the host', () => {
  it('reports how the loaded graph scores positions', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    try {
      const info = await h.loadModel(defaultModelDir);
      expect(info.logits.last).toBe(true);
      // Through the engine process: how its runs return the KV (kv-append.test.ts).
      expect(info.logits.kv).toBe(
        'runs return the positions they add, which the engine writes into room the KV keeps after its positions (masked out)',
      );
    } finally {
      await h.close();
    }
    const off = new RunnerService({ intraOpNumThreads: 2, lastPositionLogits: false });
    try {
      const info = await off.loadModel(defaultModelDir);
      expect(info.logits.last).toBe(false);
    } finally {
      await off.close();
    }
  });
});
