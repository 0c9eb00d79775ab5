/**
 * The project's own model generator, checked with the real onnxruntime-node and
 * the real @huggingface/tokenizers: the package is complete and consistent, the
 * graph runs prefill + decode over a growing KV cache, left-padded batches give
 * the same greedy tokens as rows alone, and generation is deterministic and
 * idempotent.
 */
import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { onnx } from 'onnx-proto';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildDecoderGraph,
  bytesPerToken,
  generateModelPackage,
  MODEL_FILE,
  type ModelGenConfig,
  parameterCount,
  presetConfig,
  SPECIAL_TOKENS,
  STAMP_FILE,
  specialTokenIds,
} from '../../scripts/model-gen/index';

const repoRoot = path.resolve(__dirname, '../..');
let workDir = '';

/** Small enough to generate and run in milliseconds; group 3 exercises GQA with an odd group. */
const TINY_LLAMA: ModelGenConfig = {
  ...presetConfig('default'),
  name: 'test-tiny-llama',
  numLayers: 2,
  hiddenSize: 48,
  numHeads: 6,
  numKvHeads: 2,
  headDim: 8,
  intermediateSize: 96,
  vocabSize: 320,
  maxPositions: 128,
  seed: 7,
};

const TINY_GPT2: ModelGenConfig = {
  ...presetConfig('gpt2-small'),
  name: 'test-tiny-gpt2',
  numLayers: 2,
  hiddenSize: 32,
  numHeads: 4,
  numKvHeads: 4,
  headDim: 8,
  intermediateSize: 128,
  vocabSize: 320,
  maxPositions: 64,
  seed: 11,
};

function readJson(file: string): Record<string, unknown> {
  return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
}

function loadTokenizer(dir: string): Tokenizer {
  return new Tokenizer(readJson(path.join(dir, 'tokenizer.json')), readJson(path.join(dir, 'tokenizer_config.json')));
}

function emptyPast(config: ModelGenConfig, batch: number): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (let layer = 0; layer < config.numLayers; layer++) {
    for (const role of ['key', 'value']) {
      feeds[`past_key_values.${layer}.${role}`] = new ort.Tensor('float32', new Float32Array(0), [
        batch,
        config.numKvHeads,
        0,
        config.headDim,
      ]);
    }
  }
  return feeds;
}

function presentAsPast(config: ModelGenConfig, out: ort.InferenceSession.OnnxValueMapType): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (let layer = 0; layer < config.numLayers; layer++) {
    for (const role of ['key', 'value']) {
      const present = out[`present.${layer}.${role}`];
      if (!present) throw new Error(`present.${layer}.${role} missing`);
      feeds[`past_key_values.${layer}.${role}`] = present as ort.Tensor;
    }
  }
  return feeds;
}

function int64(rows: number[][]): ort.Tensor {
  const width = rows[0]?.length ?? 0;
  return new ort.Tensor(
    'int64',
    BigInt64Array.from(rows.flat(), (v) => BigInt(v)),
    [rows.length, width],
  );
}

function argmax(values: Float32Array): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if ((values[i] ?? -Infinity) > (values[best] ?? -Infinity)) best = i;
  return best;
}

/**
 * Greedy decoding of several prompts as one left-padded batch, feeding present
 * back as past. Positions are cumsum(mask) − 1 with pads clamped to 0, as the
 * engine supplies them. Also returns every logit seen, to check for NaN.
 */
async function greedyBatch(
  session: ort.InferenceSession,
  config: ModelGenConfig,
  prompts: number[][],
  steps: number,
): Promise<{ tokens: number[][]; allFinite: boolean }> {
  const pad = specialTokenIds(config.vocabSize).pad;
  const width = Math.max(...prompts.map((p) => p.length));
  const mask = prompts.map((p) => [...new Array<number>(width - p.length).fill(0), ...p.map(() => 1)]);
  let ids = prompts.map((p) => [...new Array<number>(width - p.length).fill(pad), ...p]);
  let positions = mask.map((row) => {
    let seen = 0;
    return row.map((m) => {
      seen += m;
      return Math.max(seen - 1, 0);
    });
  });
  let past = emptyPast(config, prompts.length);
  const tokens: number[][] = prompts.map(() => []);
  let allFinite = true;
  for (let step = 0; step < steps; step++) {
    const out = await session.run({
      input_ids: int64(ids),
      attention_mask: int64(mask),
      position_ids: int64(positions),
      ...past,
    });
    const logits = out.logits as ort.Tensor;
    const data = logits.data as Float32Array;
    if (!data.every(Number.isFinite)) allFinite = false;
    const seq = ids[0]?.length ?? 0;
    const next = prompts.map((_, row) => {
      const start = (row * seq + seq - 1) * config.vocabSize;
      return argmax(data.subarray(start, start + config.vocabSize));
    });
    next.forEach((t, row) => {
      tokens[row]?.push(t);
    });
    ids = next.map((t) => [t]);
    for (const row of mask) row.push(1);
    positions = mask.map((row) => [row.reduce((a, b) => a + b, 0) - 1]);
    past = presentAsPast(config, out);
  }
  return { tokens, allFinite };
}

beforeAll(() => {
  workDir = mkdtempSync(path.join(tmpdir(), 'kvdesk-model-gen-'));
});

afterAll(() => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

describe('generated model package (tiny llama)', () => {
  let dir = '';
  let session: ort.InferenceSession;

  beforeAll(async () => {
    dir = path.join(workDir, 'tiny-llama');
    const result = generateModelPackage(dir, TINY_LLAMA);
    expect(result.status).toBe('generated');
    session = await ort.InferenceSession.create(path.join(dir, MODEL_FILE));
  });

  afterAll(async () => {
    await session?.release();
  });

  it('holds every file of the Optimum layout, with configs that agree with each other', () => {
    for (const file of [
      'config.json',
      'generation_config.json',
      'tokenizer.json',
      'tokenizer_config.json',
      MODEL_FILE,
      STAMP_FILE,
    ]) {
      expect(existsSync(path.join(dir, file)), file).toBe(true);
    }
    const config = readJson(path.join(dir, 'config.json'));
    expect(config).toMatchObject({
      model_type: 'llama',
      num_hidden_layers: 2,
      num_attention_heads: 6,
      num_key_value_heads: 2,
      hidden_size: 48,
      head_dim: 8,
      intermediate_size: 96,
      max_position_embeddings: 128,
      vocab_size: 320,
    });
    const ids = specialTokenIds(320);
    expect([config.bos_token_id, config.eos_token_id, config.pad_token_id]).toEqual([ids.bos, ids.eos, ids.pad]);

    const generation = readJson(path.join(dir, 'generation_config.json'));
    expect(generation.eos_token_id).toContain(config.eos_token_id);
    expect(generation.pad_token_id).toBe(config.pad_token_id);

    const tokenizerJson = readJson(path.join(dir, 'tokenizer.json')) as {
      added_tokens: Array<{ id: number; content: string; special: boolean }>;
      model: { vocab: Record<string, number>; merges: unknown[] };
    };
    expect(tokenizerJson.added_tokens.map((t) => [t.content, t.id])).toEqual(
      SPECIAL_TOKENS.map((content, i) => [content, 320 - 3 + i]),
    );
    // Byte symbols + merges + specials fill the model vocabulary exactly: no id the tokenizer emits is out of range.
    const modelIds = Object.values(tokenizerJson.model.vocab);
    expect(modelIds.length + tokenizerJson.added_tokens.length).toBe(320);
    expect(Math.max(...modelIds)).toBe(320 - 4);
    expect(new Set(modelIds).size).toBe(modelIds.length);
    expect(tokenizerJson.model.merges.length).toBeGreaterThanOrEqual(320 - 256 - 3);

    const tokenizerConfig = readJson(path.join(dir, 'tokenizer_config.json'));
    expect(tokenizerConfig.add_bos_token).toBe(false);
    expect(tokenizerConfig.model_max_length).toBe(128);
    const tokenizer = loadTokenizer(dir);
    expect(tokenizer.token_to_id(String(tokenizerConfig.eos_token))).toBe(config.eos_token_id);
    expect(tokenizer.token_to_id(String(tokenizerConfig.bos_token))).toBe(config.bos_token_id);
    expect(tokenizer.token_to_id(String(tokenizerConfig.pad_token))).toBe(config.pad_token_id);
  });

  it('declares the Optimum ports with symbolic batch/sequence dims and fixed head dims', () => {
    const expectedInputs = ['input_ids', 'attention_mask', 'position_ids'];
    const expectedOutputs = ['logits'];
    for (let layer = 0; layer < 2; layer++) {
      expectedInputs.push(`past_key_values.${layer}.key`, `past_key_values.${layer}.value`);
      expectedOutputs.push(`present.${layer}.key`, `present.${layer}.value`);
    }
    expect(session.inputNames).toEqual(expectedInputs);
    expect(session.outputNames).toEqual(expectedOutputs);
    const meta = (name: string, list: readonly ort.InferenceSession.ValueMetadata[]) => {
      const found = list.find((m) => m.name === name);
      if (!found?.isTensor) throw new Error(`${name} is not a tensor port`);
      return { type: found.type, shape: [...found.shape] };
    };
    expect(meta('input_ids', session.inputMetadata)).toEqual({
      type: 'int64',
      shape: ['batch_size', 'sequence_length'],
    });
    expect(meta('attention_mask', session.inputMetadata)).toEqual({
      type: 'int64',
      shape: ['batch_size', 'past_sequence_length + sequence_length'],
    });
    expect(meta('past_key_values.1.value', session.inputMetadata)).toEqual({
      type: 'float32',
      shape: ['batch_size', 2, 'past_sequence_length', 8],
    });
    expect(meta('logits', session.outputMetadata)).toEqual({
      type: 'float32',
      shape: ['batch_size', 'sequence_length', 320],
    });
    expect(meta('present.0.key', session.outputMetadata)).toEqual({
      type: 'float32',
      shape: ['batch_size', 2, 'past_sequence_length + sequence_length', 8],
    });
  });

  it('runs prefill then decode steps, present growing by one position per step, bpt × length = present bytes', async () => {
    const bpt = bytesPerToken(TINY_LLAMA);
    expect(bpt).toBe(2 * 2 * 2 * 8 * 4);
    const prompt = loadTokenizer(dir).encode('The boats came home.').ids;
    let ids = prompt;
    let total = 0;
    let past = emptyPast(TINY_LLAMA, 1);
    for (let step = 0; step < 5; step++) {
      const out = await session.run({
        input_ids: int64([ids]),
        attention_mask: int64([new Array<number>(total + ids.length).fill(1)]),
        position_ids: int64([ids.map((_, i) => total + i)]),
        ...past,
      });
      total += ids.length;
      expect((out.logits as ort.Tensor).dims).toEqual([1, ids.length, 320]);
      let presentBytes = 0;
      for (let layer = 0; layer < 2; layer++) {
        for (const role of ['key', 'value']) {
          const present = out[`present.${layer}.${role}`] as ort.Tensor;
          expect(present.dims).toEqual([1, 2, total, 8]);
          presentBytes += (present.data as Float32Array).byteLength;
        }
      }
      expect(presentBytes).toBe(bpt * total);
      const logits = (out.logits as ort.Tensor).data as Float32Array;
      ids = [argmax(logits.subarray((ids.length - 1) * 320))];
      past = presentAsPast(TINY_LLAMA, out);
    }
    expect(total).toBe(prompt.length + 4);
  });

  it.each([
    ['tiny llama', TINY_LLAMA],
    ['tiny gpt2', TINY_GPT2],
  ])(
    "%s: onnxruntime folds each layer's key transpose into the attention MatMul (no copy of the key cache per step)",
    async (_name, config) => {
      const source = path.join(workDir, `fold-${config.name}`);
      generateModelPackage(source, config);
      const optimized = path.join(workDir, `fold-${config.name}.optimized.onnx`);
      const folded = await ort.InferenceSession.create(path.join(source, MODEL_FILE), {
        graphOptimizationLevel: 'extended',
        optimizedModelFilePath: optimized,
      });
      await folded.release();
      const nodes = onnx.ModelProto.decode(readFileSync(optimized)).graph?.node ?? [];
      const fromKeyCache = (name: string) => /^present\.\d+\.key$/.test(name);
      // The keys reach the scores' MatMul untransposed: no Transpose reads a layer's key cache (directly or through an Unsqueeze).
      const unsqueezedKeys = new Set(
        nodes
          .filter((n) => n.opType === 'Unsqueeze' && fromKeyCache(n.input?.[0] ?? ''))
          .flatMap((n) => n.output ?? []),
      );
      const transposes = nodes.filter(
        (n) => n.opType === 'Transpose' && (fromKeyCache(n.input?.[0] ?? '') || unsqueezedKeys.has(n.input?.[0] ?? '')),
      );
      expect(transposes.map((n) => n.name)).toEqual([]);
      const transB = nodes.filter(
        (n) => n.opType === 'FusedMatMul' && n.attribute?.some((a) => a.name === 'transB' && Number(a.i) === 1),
      );
      expect(transB.length).toBe(config.numLayers);
    },
  );

  it('writes byte-identical packages for the same config, and different weights for another seed', () => {
    const again = path.join(workDir, 'tiny-llama-again');
    generateModelPackage(again, TINY_LLAMA);
    for (const file of [MODEL_FILE, 'tokenizer.json', 'config.json', STAMP_FILE]) {
      expect(readFileSync(path.join(again, file)).equals(readFileSync(path.join(dir, file))), file).toBe(true);
    }
    const reseeded = path.join(workDir, 'tiny-llama-seed-8');
    generateModelPackage(reseeded, { ...TINY_LLAMA, seed: 8 });
    // Compare the weights themselves: the file also differs through the config hash in its metadata.
    const a = readWeights(path.join(dir, MODEL_FILE));
    const b = readWeights(path.join(reseeded, MODEL_FILE));
    const name = 'model.layers.1.self_attn.k_proj.weight';
    const before = a.get(name)?.data ?? new Float32Array(0);
    const after = b.get(name)?.data ?? new Float32Array(0);
    expect(after.length).toBe(before.length);
    expect(after.length).toBeGreaterThan(0);
    expect(after.some((v, i) => v !== before[i])).toBe(true);
  });
});

describe('left padding', () => {
  const cases: Array<[string, ModelGenConfig]> = [
    ['tiny llama (GQA)', TINY_LLAMA],
    ['default preset', presetConfig('default')],
    ['tiny gpt2 (learned positions, tied head)', TINY_GPT2],
  ];
  it.each(cases)('%s: a left-padded batch gives exactly the greedy tokens of each row alone', async (label, config) => {
    const dir = path.join(workDir, `pad-${config.name}`);
    generateModelPackage(dir, config);
    const tokenizer = loadTokenizer(dir);
    const short = tokenizer.encode('Hello there').ids;
    const long = tokenizer.encode('The harbour master counted the boats twice.').ids;
    expect(long.length - short.length, 'prompts must differ in length for padding to happen').toBeGreaterThanOrEqual(3);
    const session = await ort.InferenceSession.create(path.join(dir, MODEL_FILE));
    try {
      const alone = [
        (await greedyBatch(session, config, [short], 12)).tokens[0],
        (await greedyBatch(session, config, [long], 12)).tokens[0],
      ];
      const batched = await greedyBatch(session, config, [short, long], 12);
      // Pad query rows see no key at all; a -inf mask would make them NaN.
      expect(batched.allFinite, 'logits of a left-padded batch are finite').toBe(true);
      expect(batched.tokens, label).toEqual(alone);
    } finally {
      await session.release();
    }
  });
});

describe('causal mask and KV cache', () => {
  it.each([
    ['tiny llama', TINY_LLAMA],
    ['tiny gpt2', TINY_GPT2],
  ] as Array<[string, ModelGenConfig]>)(
    '%s: prefill logits equal the logits of feeding the prompt one token at a time',
    async (_label, config) => {
      const dir = path.join(workDir, `causal-${config.name}`);
      generateModelPackage(dir, config);
      const prompt = loadTokenizer(dir).encode('Where is the station?').ids;
      const session = await ort.InferenceSession.create(path.join(dir, MODEL_FILE));
      try {
        const prefill = await session.run({
          input_ids: int64([prompt]),
          attention_mask: int64([prompt.map(() => 1)]),
          position_ids: int64([prompt.map((_, i) => i)]),
          ...emptyPast(config, 1),
        });
        const full = (prefill.logits as ort.Tensor).data as Float32Array;
        let past = emptyPast(config, 1);
        let maxDiff = 0;
        for (let i = 0; i < prompt.length; i++) {
          const out = await session.run({
            input_ids: int64([[prompt[i] ?? 0]]),
            attention_mask: int64([new Array<number>(i + 1).fill(1)]),
            position_ids: int64([[i]]),
            ...past,
          });
          const step = (out.logits as ort.Tensor).data as Float32Array;
          const row = full.subarray(i * config.vocabSize, (i + 1) * config.vocabSize);
          for (let v = 0; v < config.vocabSize; v++)
            maxDiff = Math.max(maxDiff, Math.abs((step[v] ?? 0) - (row[v] ?? 0)));
          past = presentAsPast(config, out);
        }
        // Position i of a prefill may only see tokens 0..i, exactly what the incremental run had.
        expect(maxDiff).toBeLessThan(1e-3);
      } finally {
        await session.release();
      }
    },
  );
});

/** Initializers of a generated model, decoded with onnx-proto (independently of the streaming writer). */
function readWeights(file: string): Map<string, { dims: number[]; data: Float32Array }> {
  const model = onnx.ModelProto.decode(readFileSync(file));
  const weights = new Map<string, { dims: number[]; data: Float32Array }>();
  for (const t of model.graph?.initializer ?? []) {
    if (t.dataType !== onnx.TensorProto.DataType.FLOAT || !t.rawData) continue;
    const raw = t.rawData;
    const data = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
    weights.set(t.name ?? '', { dims: (t.dims ?? []).map(Number), data });
  }
  return weights;
}

/**
 * Hugging Face Llama semantics written out plainly for one sequence (positions
 * 0..n−1): RMSNorm, rotate-half RoPE, head h reading KV head ⌊h / group⌋,
 * causal softmax, SwiGLU. Returns logits [n × vocab].
 */
function referenceLlama(config: ModelGenConfig, file: string, ids: number[]): Float32Array {
  const w = readWeights(file);
  const get = (name: string): Float32Array => {
    const found = w.get(name);
    if (!found) throw new Error(`weight ${name} missing`);
    return found.data;
  };
  const { hiddenSize: H, numHeads: NH, numKvHeads: KVH, headDim: D, intermediateSize: M, vocabSize: V } = config;
  const n = ids.length;
  const matmul = (x: Float32Array, rows: number, weight: Float32Array, inDim: number, outDim: number): Float32Array => {
    const out = new Float32Array(rows * outDim);
    for (let r = 0; r < rows; r++)
      for (let i = 0; i < inDim; i++) {
        const xv = x[r * inDim + i] ?? 0;
        for (let o = 0; o < outDim; o++)
          out[r * outDim + o] = (out[r * outDim + o] ?? 0) + xv * (weight[i * outDim + o] ?? 0);
      }
    return out;
  };
  const rms = (x: Float32Array, gain: Float32Array): Float32Array => {
    const out = new Float32Array(x.length);
    for (let r = 0; r < n; r++) {
      let ss = 0;
      for (let i = 0; i < H; i++) ss += (x[r * H + i] ?? 0) ** 2;
      const scale = 1 / Math.sqrt(ss / H + config.normEps);
      for (let i = 0; i < H; i++) out[r * H + i] = (x[r * H + i] ?? 0) * scale * (gain[i] ?? 0);
    }
    return out;
  };
  const rope = (x: Float32Array, heads: number): void => {
    for (let pos = 0; pos < n; pos++)
      for (let h = 0; h < heads; h++)
        for (let i = 0; i < D / 2; i++) {
          const angle = pos / config.ropeTheta ** ((2 * i) / D);
          const a = (pos * heads + h) * D + i;
          const x1 = x[a] ?? 0;
          const x2 = x[a + D / 2] ?? 0;
          x[a] = x1 * Math.cos(angle) - x2 * Math.sin(angle);
          x[a + D / 2] = x2 * Math.cos(angle) + x1 * Math.sin(angle);
        }
  };
  const embed = get('model.embed_tokens.weight');
  const x = new Float32Array(n * H);
  ids.forEach((id, r) => {
    x.set(embed.subarray(id * H, (id + 1) * H), r * H);
  });
  for (let layer = 0; layer < config.numLayers; layer++) {
    const p = `model.layers.${layer}`;
    const h = rms(x, get(`${p}.input_layernorm.weight`));
    const q = matmul(h, n, get(`${p}.self_attn.q_proj.weight`), H, NH * D);
    const k = matmul(h, n, get(`${p}.self_attn.k_proj.weight`), H, KVH * D);
    const v = matmul(h, n, get(`${p}.self_attn.v_proj.weight`), H, KVH * D);
    rope(q, NH);
    rope(k, KVH);
    const context = new Float32Array(n * NH * D);
    for (let head = 0; head < NH; head++) {
      const kvHead = Math.floor(head / (NH / KVH));
      for (let i = 0; i < n; i++) {
        const scores = Array.from({ length: i + 1 }, (_, j) => {
          let dot = 0;
          for (let d = 0; d < D; d++) dot += (q[(i * NH + head) * D + d] ?? 0) * (k[(j * KVH + kvHead) * D + d] ?? 0);
          return dot / Math.sqrt(D);
        });
        const max = Math.max(...scores);
        const exps = scores.map((s) => Math.exp(s - max));
        const sum = exps.reduce((a, b) => a + b, 0);
        for (let d = 0; d < D; d++) {
          let acc = 0;
          exps.forEach((e, j) => {
            acc += (e / sum) * (v[(j * KVH + kvHead) * D + d] ?? 0);
          });
          context[(i * NH + head) * D + d] = acc;
        }
      }
    }
    const attn = matmul(context, n, get(`${p}.self_attn.o_proj.weight`), NH * D, H);
    for (let i = 0; i < x.length; i++) x[i] = (x[i] ?? 0) + (attn[i] ?? 0);
    const h2 = rms(x, get(`${p}.post_attention_layernorm.weight`));
    const gate = matmul(h2, n, get(`${p}.mlp.gate_proj.weight`), H, M);
    const up = matmul(h2, n, get(`${p}.mlp.up_proj.weight`), H, M);
    const act = gate.map((g, i) => (g / (1 + Math.exp(-g))) * (up[i] ?? 0));
    const down = matmul(act, n, get(`${p}.mlp.down_proj.weight`), M, H);
    for (let i = 0; i < x.length; i++) x[i] = (x[i] ?? 0) + (down[i] ?? 0);
  }
  const logits = matmul(rms(x, get('model.norm.weight')), n, get('lm_head.weight'), H, V);
  const bias = get('lm_head.bias');
  return logits.map((l, i) => l + (bias[i % V] ?? 0));
}

describe('llama semantics', () => {
  it('matches a plain reference implementation of Hugging Face Llama (RoPE, GQA head mapping, RMSNorm, SwiGLU)', async () => {
    const dir = path.join(workDir, 'reference');
    generateModelPackage(dir, TINY_LLAMA);
    const ids = loadTokenizer(dir).encode('Every morning he wrote the numbers').ids;
    const session = await ort.InferenceSession.create(path.join(dir, MODEL_FILE));
    try {
      const out = await session.run({
        input_ids: int64([ids]),
        attention_mask: int64([ids.map(() => 1)]),
        position_ids: int64([ids.map((_, i) => i)]),
        ...emptyPast(TINY_LLAMA, 1),
      });
      const actual = (out.logits as ort.Tensor).data as Float32Array;
      const expected = referenceLlama(TINY_LLAMA, path.join(dir, MODEL_FILE), ids);
      expect(actual.length).toBe(expected.length);
      let maxDiff = 0;
      for (let i = 0; i < actual.length; i++)
        maxDiff = Math.max(maxDiff, Math.abs((actual[i] ?? 0) - (expected[i] ?? 0)));
      expect(maxDiff).toBeLessThan(1e-3);
    } finally {
      await session.release();
    }
  });
});

describe('position_ids', () => {
  async function logitsAt(session: ort.InferenceSession, config: ModelGenConfig, ids: number[], positions: number[]) {
    const out = await session.run({
      input_ids: int64([ids]),
      attention_mask: int64([ids.map(() => 1)]),
      position_ids: int64([positions]),
      ...emptyPast(config, 1),
    });
    return (out.logits as ort.Tensor).data as Float32Array;
  }
  const maxDiff = (a: Float32Array, b: Float32Array): number =>
    a.reduce((m, v, i) => Math.max(m, Math.abs(v - (b[i] ?? 0))), 0);

  it('are what the graph positions tokens by: RoPE is shift-invariant, learned positions are not', async () => {
    for (const config of [TINY_LLAMA, TINY_GPT2]) {
      const dir = path.join(workDir, `positions-${config.name}`);
      generateModelPackage(dir, config);
      const ids = loadTokenizer(dir).encode('The tide came in').ids;
      const session = await ort.InferenceSession.create(path.join(dir, MODEL_FILE));
      try {
        const base = await logitsAt(
          session,
          config,
          ids,
          ids.map((_, i) => i),
        );
        const shifted = await logitsAt(
          session,
          config,
          ids,
          ids.map((_, i) => i + 5),
        );
        const spread = await logitsAt(
          session,
          config,
          ids,
          ids.map((_, i) => 2 * i),
        );
        expect(maxDiff(base, spread), `${config.name}: spreading positions`).toBeGreaterThan(1e-2);
        if (config.architecture === 'llama')
          expect(maxDiff(base, shifted), 'rotary: relative positions only').toBeLessThan(1e-3);
        else expect(maxDiff(base, shifted), 'learned absolute positions').toBeGreaterThan(1e-2);
      } finally {
        await session.release();
      }
    }
  });
});

describe('default preset', () => {
  it('gives varied greedy text, not one token repeated', async () => {
    const config = presetConfig('default');
    expect(config).toMatchObject({ numLayers: 4, numKvHeads: 2, headDim: 16, vocabSize: 512, maxPositions: 2048 });
    expect(bytesPerToken(config)).toBe(4 * 2 * 2 * 16 * 4);
    const dir = path.join(workDir, 'default');
    generateModelPackage(dir, config);
    const tokenizer = loadTokenizer(dir);
    const session = await ort.InferenceSession.create(path.join(dir, MODEL_FILE));
    try {
      const { tokens } = await greedyBatch(session, config, [tokenizer.encode('The harbour was quiet').ids], 24);
      const generated = tokens[0] ?? [];
      expect(new Set(generated).size).toBeGreaterThanOrEqual(8);
    } finally {
      await session.release();
    }
  });
});

describe('tokenizer', () => {
  let dir = '';
  beforeAll(() => {
    dir = path.join(workDir, 'tokenizer');
    generateModelPackage(dir, presetConfig('default'));
  });

  it.each(['Hello, world! The boats are home at 7:30.', 'héllo 😀', '  spaces\tand\nnewlines  ', 'naïve café — 東京'])(
    'round-trips %j through @huggingface/tokenizers',
    (text) => {
      const tokenizer = loadTokenizer(dir);
      const { ids } = tokenizer.encode(text);
      expect(ids.every((id) => id >= 0 && id < 512 - 3)).toBe(true);
      expect(tokenizer.decode(ids)).toBe(text);
    },
  );

  it('uses the learned merges for English (fewer tokens than bytes)', () => {
    const text = 'the weather and the harbour station';
    const ids = loadTokenizer(dir).encode(text).ids;
    expect(ids.length).toBeLessThan(Buffer.byteLength(text) / 2);
  });

  it('renders the ChatML template and encodes its special tokens as single ids', () => {
    const config = readJson(path.join(dir, 'tokenizer_config.json'));
    const prompt = new Template(String(config.chat_template)).render({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi!' },
      ],
      add_generation_prompt: true,
    });
    expect(prompt).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n',
    );
    const ids = loadTokenizer(dir).encode(prompt).ids;
    const special = specialTokenIds(512);
    expect(ids[0]).toBe(special.imStart);
    expect(ids.filter((id) => id === special.imEnd)).toHaveLength(2);
    expect(ids.filter((id) => id === special.imStart)).toHaveLength(3);
  });
});

describe('benchmark presets', () => {
  it.each([
    // Parameter counts of the real checkpoints (tied heads): SmolLM-135M and GPT-2 small.
    ['llama-small', 134_515_008],
    ['gpt2-small', 124_439_808],
  ] as const)('%s has the real model shape (%i parameters) without writing 500 MB', (name, expected) => {
    const config = presetConfig(name);
    expect(parameterCount(config)).toBe(expected);
    const graph = buildDecoderGraph(config);
    // Everything but the generator's own extras (logit bias, rotary frequencies, shape constants) is a model weight.
    const weightBytes = graph.initializers
      .filter(
        (i) =>
          i.elemType === 'float32' &&
          i.dims.length > 0 &&
          i.name !== 'lm_head.bias' &&
          i.name !== 'rotary_emb.inv_freq',
      )
      .reduce((sum, i) => sum + i.dims.reduce((a, b) => a * b, 1) * 4, 0);
    expect(weightBytes).toBe(expected * 4);
    expect(graph.inputs.filter((v) => v.name?.startsWith('past_key_values.'))).toHaveLength(2 * config.numLayers);
  });
});

describe('writing packages', () => {
  it('is idempotent: an up-to-date package is left alone, force and a changed config regenerate it', () => {
    const dir = path.join(workDir, 'idempotent');
    expect(generateModelPackage(dir, TINY_LLAMA).status).toBe('generated');
    const before = statSync(path.join(dir, MODEL_FILE)).mtimeMs;
    expect(generateModelPackage(dir, TINY_LLAMA).status).toBe('up-to-date');
    expect(statSync(path.join(dir, MODEL_FILE)).mtimeMs).toBe(before);
    expect(generateModelPackage(dir, TINY_LLAMA, { force: true }).status).toBe('generated');
    expect(generateModelPackage(dir, { ...TINY_LLAMA, numLayers: 3 }).status).toBe('generated');
    expect(readJson(path.join(dir, 'config.json')).num_hidden_layers).toBe(3);
  });

  it('cleans up temporary directories a crashed run left beside the target, and leaves none of its own', () => {
    const dead = spawnSync('true').pid;
    const stale = path.join(workDir, `.crashed.tmp-${dead}-abc123`);
    mkdirSync(stale);
    writeFileSync(path.join(stale, 'config.json'), '{}');
    generateModelPackage(path.join(workDir, 'crashed'), TINY_LLAMA);
    expect(existsSync(stale)).toBe(false);
    expect(readdirSync(workDir).filter((f) => f.startsWith('.crashed.'))).toEqual([]);
  });

  it('regenerates a stamped package whose files went missing', () => {
    const dir = path.join(workDir, 'damaged');
    generateModelPackage(dir, TINY_LLAMA);
    rmSync(path.join(dir, MODEL_FILE));
    expect(generateModelPackage(dir, TINY_LLAMA).status).toBe('generated');
    expect(existsSync(path.join(dir, MODEL_FILE))).toBe(true);
  });

  it('refuses to replace a directory it did not write, even with force', () => {
    const dir = path.join(workDir, 'foreign');
    mkdirSync(dir);
    writeFileSync(path.join(dir, 'notes.txt'), 'mine');
    expect(() => generateModelPackage(dir, TINY_LLAMA, { force: true })).toThrow(
      /not written by the kvdesk model generator/,
    );
    expect(readFileSync(path.join(dir, 'notes.txt'), 'utf8')).toBe('mine');
    expect(existsSync(path.join(dir, 'config.json'))).toBe(false);
  });

  it('refuses shapes it cannot build, naming the numbers', () => {
    expect(() => generateModelPackage(path.join(workDir, 'bad'), { ...TINY_LLAMA, numKvHeads: 4 })).toThrow(
      /numHeads \(6\) must be a multiple of numKvHeads \(4\)/,
    );
    expect(existsSync(path.join(workDir, 'bad'))).toBe(false);
  });

  it('CLI: writes a shape to --out, then says it is up to date without touching it', () => {
    const out = path.join(workDir, 'cli-default');
    const run = (...extra: string[]) =>
      spawnSync(
        process.execPath,
        [
          path.join(repoRoot, 'bin/run-ts.cjs'),
          'scripts/generate-model.ts',
          '--shape',
          'default',
          '--out',
          out,
          ...extra,
        ],
        {
          cwd: repoRoot,
          encoding: 'utf8',
        },
      );
    const first = run();
    expect(first.status, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/wrote default \(llama, 4 layers/);
    const written = statSync(path.join(out, MODEL_FILE)).mtimeMs;
    const second = run();
    expect(second.status, second.stderr).toBe(0);
    expect(second.stderr).toMatch(/is up to date/);
    expect(statSync(path.join(out, MODEL_FILE)).mtimeMs).toBe(written);
    const bad = run('--seed', 'x');
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--seed must be an integer/);
    // Same preset, same generator: the CLI's package equals the library's.
    const lib = path.join(workDir, 'lib-default');
    generateModelPackage(lib, presetConfig('default'));
    expect(readFileSync(path.join(out, MODEL_FILE)).equals(readFileSync(path.join(lib, MODEL_FILE)))).toBe(true);
  });
});
