import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onnx } from 'onnx-proto';
import { stringify as toYaml } from 'yaml';

/** ONNX element types used by the test graphs. */
export const T = { f32: 1, u8: 2, i8: 3, i32: 6, i64: 7, f16: 10, f64: 11, bf16: 16 } as const;

export interface PortDef {
  name: string;
  type: number;
  /** Omit for a port with no declared shape. */
  shape?: Array<number | string | null>;
}

export interface InitializerDef {
  name: string;
  dims: number[];
  type?: number;
  /** Embedded raw bytes (skipped by the reader). */
  rawBytes?: number;
  external?: { location: string; offset?: number; length?: number };
}

export interface GraphDef {
  inputs: PortDef[];
  outputs: PortDef[];
  initializers?: InitializerDef[];
  irVersion?: number;
  opsets?: Array<{ domain: string; version: number }>;
  /** Extra dummy nodes so the reader has something to skip. */
  nodes?: number;
}

function valueInfo(p: PortDef): onnx.IValueInfoProto {
  const tensorType: onnx.TypeProto.ITensor = { elemType: p.type };
  if (p.shape !== undefined) {
    tensorType.shape = {
      dim: p.shape.map((d) => (d === null ? {} : typeof d === 'number' ? { dimValue: d } : { dimParam: d })),
    };
  }
  return { name: p.name, type: { tensorType } };
}

/** Encodes a ModelProto with the given ports (no real computation: the reader only reads headers). */
export function encodeGraph(def: GraphDef): Uint8Array {
  const initializer: onnx.ITensorProto[] = (def.initializers ?? []).map((init) => {
    const t: onnx.ITensorProto = { name: init.name, dims: init.dims, dataType: init.type ?? T.f32 };
    if (init.rawBytes !== undefined) t.rawData = new Uint8Array(init.rawBytes).fill(7);
    if (init.external !== undefined) {
      t.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
      t.externalData = [{ key: 'location', value: init.external.location }];
      if (init.external.offset !== undefined)
        t.externalData.push({ key: 'offset', value: String(init.external.offset) });
      if (init.external.length !== undefined)
        t.externalData.push({ key: 'length', value: String(init.external.length) });
    }
    return t;
  });
  const node: onnx.INodeProto[] = Array.from({ length: def.nodes ?? 3 }, (_, i) => ({
    opType: 'Identity',
    name: `n${i}`,
    input: ['x'],
    output: [`y${i}`],
  }));
  return onnx.ModelProto.encode({
    irVersion: def.irVersion ?? 8,
    producerName: 'kvdesk-tests',
    opsetImport: def.opsets ?? [{ domain: '', version: 17 }],
    graph: { name: 'g', node, input: def.inputs.map(valueInfo), output: def.outputs.map(valueInfo), initializer },
  }).finish();
}

export interface DecoderDef {
  layers?: number;
  kvHeads?: number | string;
  headDim?: number | string;
  kvType?: number;
  idsType?: number;
  vocab?: number | string;
  /** 'split' = Optimum past_key_values.N.key|value; 'combined' = past_N [2, batch, heads, seq, dim]. */
  kv?: 'split' | 'combined' | 'none';
  /** Skip these layers (sparse indices). */
  skipLayers?: number[];
  withMask?: boolean;
  withPositions?: boolean;
  names?: Partial<{
    ids: string;
    mask: string;
    pos: string;
    logits: string;
    pastKey: string;
    pastValue: string;
    presentKey: string;
    presentValue: string;
    past: string;
    present: string;
  }>;
  extraInputs?: PortDef[];
  initializers?: InitializerDef[];
}

/** A decoder graph with Optimum port names (or the given names), Llama-style split KV by default. */
export function decoderGraph(def: DecoderDef = {}): Uint8Array {
  const n = {
    ids: 'input_ids',
    mask: 'attention_mask',
    pos: 'position_ids',
    logits: 'logits',
    pastKey: 'past_key_values.%d.key',
    pastValue: 'past_key_values.%d.value',
    presentKey: 'present.%d.key',
    presentValue: 'present.%d.value',
    past: 'past_%d',
    present: 'present_%d',
    ...def.names,
  };
  const fill = (t: string, i: number): string => t.replace('%d', String(i));
  const idsType = def.idsType ?? T.i64;
  const kvType = def.kvType ?? T.f32;
  const heads = def.kvHeads ?? 2;
  const dim = def.headDim ?? 8;
  const inputs: PortDef[] = [{ name: n.ids, type: idsType, shape: ['batch', 'sequence_length'] }];
  if (def.withMask !== false) inputs.push({ name: n.mask, type: idsType, shape: ['batch', 'total_sequence_length'] });
  if (def.withPositions !== false) inputs.push({ name: n.pos, type: idsType, shape: ['batch', 'sequence_length'] });
  const outputs: PortDef[] = [{ name: n.logits, type: T.f32, shape: ['batch', 'sequence_length', def.vocab ?? 64] }];
  const kind = def.kv ?? 'split';
  for (let i = 0; i < (def.layers ?? 2); i += 1) {
    if (def.skipLayers?.includes(i) || kind === 'none') continue;
    if (kind === 'combined') {
      inputs.push({ name: fill(n.past, i), type: kvType, shape: [2, 'batch', heads, 'past_sequence_length', dim] });
      outputs.push({
        name: fill(n.present, i),
        type: kvType,
        shape: [2, 'batch', heads, 'total_sequence_length', dim],
      });
    } else {
      for (const [past, present] of [
        [n.pastKey, n.presentKey],
        [n.pastValue, n.presentValue],
      ] as const) {
        inputs.push({ name: fill(past, i), type: kvType, shape: ['batch', heads, 'past_sequence_length', dim] });
        outputs.push({ name: fill(present, i), type: kvType, shape: ['batch', heads, 'total_sequence_length', dim] });
      }
    }
  }
  inputs.push(...(def.extraInputs ?? []));
  return encodeGraph({ inputs, outputs, initializers: def.initializers ?? [] });
}

/** A small WordLevel tokenizer.json with the usual special tokens and `size` ids in all. */
export function tokenizerJson(
  size = 64,
  specials: Record<string, number> = { '<pad>': 0, '<unk>': 1, '<s>': 2, '</s>': 3 },
): string {
  const vocab: Record<string, number> = { ...specials };
  const used = new Set(Object.values(specials));
  for (let id = 0; id < size; id += 1) if (!used.has(id)) vocab[`w${id}`] = id;
  return JSON.stringify({
    version: '1.0',
    added_tokens: Object.entries(specials).map(([content, id]) => ({ id, content, special: true })),
    normalizer: null,
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: null,
    model: { type: 'WordLevel', vocab, unk_token: '<unk>' },
  });
}

export type FileContent = string | Uint8Array | Record<string, unknown> | null;

/** Writes files (objects as JSON, `null` deletes) into `dir`, creating folders. */
export async function writeFiles(dir: string, files: Record<string, FileContent>): Promise<void> {
  for (const [rel, content] of Object.entries(files)) {
    const abs = path.join(dir, rel);
    if (content === null) {
      await fs.rm(abs, { force: true });
      continue;
    }
    await fs.mkdir(path.dirname(abs), { recursive: true });
    await fs.writeFile(
      abs,
      typeof content === 'string' || content instanceof Uint8Array ? content : JSON.stringify(content, null, 2),
    );
  }
}

const made: string[] = [];

/** A fresh temp folder (named `name` inside a unique parent, so the package id is predictable). */
export async function tempPackageDir(name = 'pkg'): Promise<string> {
  const parent = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-packages-'));
  made.push(parent);
  const dir = path.join(parent, name);
  await fs.mkdir(dir);
  return dir;
}

/** Removes every temp folder made by tempPackageDir (call from afterAll). */
export async function removeTempDirs(): Promise<void> {
  await Promise.all(made.splice(0).map((d) => fs.rm(d, { recursive: true, force: true })));
}

/** hfPackage's config.json (tests that vary one field spread it). */
export const HF_CONFIG: Readonly<Record<string, unknown>> = {
  model_type: 'llama',
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  hidden_size: 32,
  max_position_embeddings: 256,
  vocab_size: 64,
  bos_token_id: 2,
  eos_token_id: 3,
};

/** hfPackage's tokenizer_config.json (tests that vary one field spread it). */
export const HF_TOKENIZER_CONFIG: Readonly<Record<string, unknown>> = {
  bos_token: '<s>',
  eos_token: { content: '</s>' },
  pad_token: null,
  add_bos_token: true,
  chat_template: '{{ messages }}',
};

/** A valid Hugging Face / Optimum package (Llama-style, GQA) with `overrides` applied. */
export async function hfPackage(
  overrides: Record<string, FileContent> = {},
  graph: DecoderDef = {},
  name = 'hf-model',
): Promise<string> {
  const dir = await tempPackageDir(name);
  await writeFiles(dir, {
    'config.json': HF_CONFIG,
    'generation_config.json': {
      eos_token_id: [3, 4],
      bos_token_id: 2,
      do_sample: true,
      temperature: 0.7,
      top_p: 0.9,
      top_k: 40,
      repetition_penalty: 1.1,
      max_new_tokens: 128,
    },
    'tokenizer.json': tokenizerJson(64),
    'tokenizer_config.json': HF_TOKENIZER_CONFIG,
    'onnx/model.onnx': decoderGraph(graph),
    ...overrides,
  });
  return dir;
}

/** A valid onnxruntime-genai package (split KV by default) with `overrides` applied. */
export async function genaiPackage(
  config: Record<string, unknown> = {},
  overrides: Record<string, FileContent> = {},
  graph: DecoderDef = {},
): Promise<string> {
  const dir = await tempPackageDir('genai-model');
  const base = {
    model: {
      type: 'llama',
      context_length: 128,
      eos_token_id: [3, 5],
      bos_token_id: 2,
      pad_token_id: 0,
      vocab_size: 64,
      decoder: {
        filename: 'model.onnx',
        num_hidden_layers: 2,
        num_key_value_heads: 2,
        num_attention_heads: 4,
        head_size: 8,
        hidden_size: 32,
        session_options: { log_id: 'x', provider_options: [{ cuda: {} }, { dml: {} }] },
      },
    },
    search: { do_sample: false, temperature: 1, top_k: 1, top_p: 1, max_length: 128 },
  };
  await writeFiles(dir, {
    'genai_config.json': deepMerge(base, config),
    'tokenizer.json': tokenizerJson(64),
    'model.onnx': decoderGraph(graph),
    ...overrides,
  });
  return dir;
}

/**
 * An onnx-genai package whose graph keeps a static KV cache of one layer (k0/v0 of [batch, 24, 32] float16, written
 * at `wi`, `len` long), with `cache` overriding entries of its metadata's `static_cache` (a port named twice…).
 */
export async function staticCachePackage(cache: Record<string, string[]> = {}): Promise<string> {
  const graph = encodeGraph({
    inputs: [
      { name: 'ids', type: T.i64, shape: ['batch', 'seq'] },
      { name: 'k0', type: T.f16, shape: ['batch', 24, 32] },
      { name: 'v0', type: T.f16, shape: ['batch', 24, 32] },
      { name: 'wi', type: T.i64, shape: ['batch'] },
      { name: 'len', type: T.i32, shape: ['batch'] },
    ],
    outputs: [
      { name: 'logits', type: T.f32, shape: ['batch', 'seq', 64] },
      { name: 'k0_out', type: T.f16, shape: ['batch', 24, 32] },
      { name: 'v0_out', type: T.f16, shape: ['batch', 24, 32] },
    ],
  });
  return onnxGenaiPackage(
    {
      model: {
        io: {
          token_input: 'ids',
          attention_mask_input: undefined,
          position_ids_input: undefined,
          kv_inputs: undefined,
          kv_outputs: undefined,
          static_cache: {
            write_indices_input: 'wi',
            kv_sequence_length_input: 'len',
            key_cache_inputs: ['k0'],
            value_cache_inputs: ['v0'],
            key_cache_outputs: ['k0_out'],
            value_cache_outputs: ['v0_out'],
            ...cache,
          },
        },
      },
    },
    { 'decoder.onnx': graph },
  );
}

/** A valid onnx-genai flat package (metadata as YAML) with `overrides` applied. */
export async function onnxGenaiPackage(
  metadata: Record<string, unknown> = {},
  overrides: Record<string, FileContent> = {},
  graph: DecoderDef = {},
): Promise<string> {
  const dir = await tempPackageDir('flat-model');
  const base = {
    model: {
      max_sequence_length: 32,
      io: {
        token_input: 'input_ids',
        attention_mask_input: 'attention_mask',
        position_ids_input: 'position_ids',
        logits_output: 'logits',
        kv_inputs: [
          'past_key_values.0.key',
          'past_key_values.0.value',
          'past_key_values.1.key',
          'past_key_values.1.value',
        ],
        kv_outputs: ['present.0.key', 'present.0.value', 'present.1.key', 'present.1.value'],
      },
    },
  };
  await writeFiles(dir, {
    'inference_metadata.yaml': toYaml(deepMerge(base, metadata)),
    'tokenizer.json': tokenizerJson(64),
    'decoder.onnx': decoderGraph(graph),
    ...overrides,
  });
  return dir;
}

/** Merges `patch` into `base`; a patch value of `undefined` deletes the key; arrays replace. */
export function deepMerge<T>(base: T, patch: Record<string, unknown>): T {
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined) delete out[k];
    else if (
      v !== null &&
      typeof v === 'object' &&
      !Array.isArray(v) &&
      typeof out[k] === 'object' &&
      out[k] !== null &&
      !Array.isArray(out[k])
    ) {
      out[k] = deepMerge(out[k], v as Record<string, unknown>);
    } else out[k] = v;
  }
  return out as T;
}

/** Every file under `dir`, relative to it with forward slashes. */
async function filesUnder(dir: string, rel = ''): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fs.readdir(path.join(dir, rel), { withFileTypes: true })) {
    const name = rel === '' ? e.name : `${rel}/${e.name}`;
    if (e.isDirectory()) out.push(...(await filesUnder(dir, name)));
    else out.push(name);
  }
  return out;
}

/**
 * Lays `pkg` out as `hf download` (without --local-dir) does in its cache:
 * `<cache>/models--me--tiny/blobs/<sha>` holds each file, and `snapshots/abc123/<path>` is a relative symlink to it.
 * Returns the snapshot folder and the repo folder.
 */
export async function asHfCache(pkg: string): Promise<{ snapshot: string; repo: string }> {
  const cache = await tempPackageDir('hub');
  const repo = path.join(cache, 'models--me--tiny');
  const snapshot = path.join(repo, 'snapshots', 'abc123');
  await fs.mkdir(path.join(repo, 'blobs'), { recursive: true });
  await fs.mkdir(path.join(repo, 'refs'), { recursive: true });
  await fs.writeFile(path.join(repo, 'refs', 'main'), 'abc123');
  for (const rel of await filesUnder(pkg)) {
    const bytes = await fs.readFile(path.join(pkg, rel));
    const sha = createHash('sha256').update(bytes).digest('hex');
    await fs.writeFile(path.join(repo, 'blobs', sha), bytes);
    const link = path.join(snapshot, ...rel.split('/'));
    await fs.mkdir(path.dirname(link), { recursive: true });
    await fs.symlink(path.relative(path.dirname(link), path.join(repo, 'blobs', sha)), link);
  }
  return { snapshot, repo };
}
