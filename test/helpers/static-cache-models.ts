/**
 * Twin onnx-genai packages with the same weights: one with a growing
 * past/present cache, one with a static cache written in place (TensorScatter,
 * as onnx-genai's `static_cache` graphs do). Both use ONNX's own Attention op
 * (opset 24), so the two graphs differ only in how they keep the cache, and a
 * static-cache generation must give the past/present one's tokens.
 */
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { GraphBuilder, int, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import { tensorSeed, uniformTensor } from '../../scripts/model-gen/prng';
import { defaultModelDir } from './fixtures';

export interface TwinOptions {
  layers: number;
  hidden: number;
  heads: number;
  /** Positions the static cache holds (and the context of both). */
  capacity: number;
  seed: number;
}

/** The default model's tokenizer: 512 ids, the last three special; the graphs score the same 512. */
const VOCAB = 512;
const EOS = VOCAB - 1;

function graph(kind: 'dynamic' | 'static', o: TwinOptions): GraphBuilder {
  const b = new GraphBuilder(`twin-${kind}`);
  const d = o.hidden / o.heads;
  const w = (name: string, dims: number[], std: number) =>
    b.weight(name, dims, () =>
      uniformTensor(
        dims.reduce((a, c) => a * c, 1),
        tensorSeed(o.seed, name),
        std,
      ),
    );
  const ids = b.input('input_ids', 'int64', ['batch', 'seq']);
  const positions = b.input('position_ids', 'int64', ['batch', 'seq']);
  const writeAt = kind === 'static' ? b.input('write_indices', 'int64', ['batch']) : '';
  const seqLen = kind === 'static' ? b.input('kv_seqlen', 'int64', ['batch']) : '';
  let x = b.op('Add', [
    b.op('Gather', [w('embed', [VOCAB, o.hidden], 1), ids], { axis: int(0) }),
    b.op('Gather', [w('positions', [o.capacity, o.hidden], 1), positions], { axis: int(0) }),
  ]);
  const outputs: Array<[string, number[] | Array<string | number>]> = [];
  for (let l = 0; l < o.layers; l++) {
    const fan = 1 / Math.sqrt(o.hidden);
    const q = b.op('MatMul', [x, w(`l${l}.q`, [o.hidden, o.hidden], fan * 4)]);
    const k = b.op('MatMul', [x, w(`l${l}.k`, [o.hidden, o.hidden], fan)]);
    const v = b.op('MatMul', [x, w(`l${l}.v`, [o.hidden, o.hidden], fan)]);
    const attrs = { is_causal: int(1), q_num_heads: int(o.heads), kv_num_heads: int(o.heads) };
    let context: string;
    if (kind === 'dynamic') {
      const pastK = b.input(`past.${l}.key`, 'float32', ['batch', o.heads, 'past', d]);
      const pastV = b.input(`past.${l}.value`, 'float32', ['batch', o.heads, 'past', d]);
      [context] = b.opN('Attention', [q, k, v, '', pastK, pastV], attrs, [
        `attention.${l}`,
        `present.${l}.key`,
        `present.${l}.value`,
      ]) as [string];
      outputs.push([`present.${l}.key`, ['batch', o.heads, 'total', d]]);
      outputs.push([`present.${l}.value`, ['batch', o.heads, 'total', d]]);
    } else {
      const cacheK = b.input(`key_cache.${l}`, 'float32', ['batch', o.capacity, o.hidden]);
      const cacheV = b.input(`value_cache.${l}`, 'float32', ['batch', o.capacity, o.hidden]);
      const keys = b.op('TensorScatter', [cacheK, k, writeAt], { axis: int(1) }, `updated_key_cache.${l}`);
      const values = b.op('TensorScatter', [cacheV, v, writeAt], { axis: int(1) }, `updated_value_cache.${l}`);
      context = b.op('Attention', [q, keys, values, '', '', '', seqLen], attrs);
      outputs.push([`updated_key_cache.${l}`, ['batch', o.capacity, o.hidden]]);
      outputs.push([`updated_value_cache.${l}`, ['batch', o.capacity, o.hidden]]);
    }
    x = b.op('Add', [x, b.op('MatMul', [context, w(`l${l}.o`, [o.hidden, o.hidden], fan)])]);
    const up = b.op('Relu', [b.op('MatMul', [x, w(`l${l}.up`, [o.hidden, 2 * o.hidden], fan)])]);
    x = b.op('Add', [x, b.op('MatMul', [up, w(`l${l}.down`, [2 * o.hidden, o.hidden], fan / 2)])]);
    x = b.op('LayerNormalization', [x, b.weight(`l${l}.norm`, [o.hidden], () => new Float32Array(o.hidden).fill(1))], {
      axis: int(-1),
    });
  }
  // The end token is all but ruled out, so a greedy reply runs as long as it is asked to (tests that cancel
  // mid-reply must not see it end first).
  const bias = b.weight('head.bias', [VOCAB], () => new Float32Array(VOCAB).fill(0).fill(-1e4, EOS, EOS + 1));
  b.op('Add', [b.op('MatMul', [x, w('head', [o.hidden, VOCAB], 1 / Math.sqrt(o.hidden))]), bias], {}, 'logits');
  b.output('logits', 'float32', ['batch', 'seq', VOCAB]);
  for (const [name, shape] of outputs) b.output(name, 'float32', shape);
  return b;
}

function metadata(kind: 'dynamic' | 'static', o: TwinOptions): string {
  const list = (names: string[]) => `[${names.join(', ')}]`;
  const layers = Array.from({ length: o.layers }, (_, l) => l);
  const io =
    kind === 'dynamic'
      ? [
          `    kv_inputs: ${list(layers.flatMap((l) => [`past.${l}.key`, `past.${l}.value`]))}`,
          `    kv_outputs: ${list(layers.flatMap((l) => [`present.${l}.key`, `present.${l}.value`]))}`,
        ]
      : [
          '    static_cache:',
          '      write_indices_input: write_indices',
          '      kv_sequence_length_input: kv_seqlen',
          `      key_cache_inputs: ${list(layers.map((l) => `key_cache.${l}`))}`,
          `      value_cache_inputs: ${list(layers.map((l) => `value_cache.${l}`))}`,
          `      key_cache_outputs: ${list(layers.map((l) => `updated_key_cache.${l}`))}`,
          `      value_cache_outputs: ${list(layers.map((l) => `updated_value_cache.${l}`))}`,
        ];
  return [
    'model:',
    `  max_sequence_length: ${o.capacity}`,
    `  eos_token_id: ${EOS}`,
    '  io:',
    '    token_input: input_ids',
    '    position_ids_input: position_ids',
    '    logits_output: logits',
    ...io,
    '',
  ].join('\n');
}

/** Writes the two packages under `root` and returns their folders. */
export function writeTwinPackages(root: string, o: TwinOptions): { dynamicDir: string; staticDir: string } {
  const dirs = { dynamicDir: path.join(root, 'dynamic'), staticDir: path.join(root, 'static') };
  for (const kind of ['dynamic', 'static'] as const) {
    const dir = kind === 'dynamic' ? dirs.dynamicDir : dirs.staticDir;
    mkdirSync(dir, { recursive: true });
    writeOnnxModel(path.join(dir, 'model.onnx'), graph(kind, o), {
      producerName: 'kvdesk-tests',
      producerVersion: '1',
      opsetVersion: 24,
      irVersion: 10,
    });
    writeFileSync(path.join(dir, 'inference_metadata.yaml'), metadata(kind, o));
    copyFileSync(path.join(defaultModelDir, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
  }
  return dirs;
}
