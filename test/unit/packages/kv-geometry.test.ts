import { describe, expect, it } from 'vitest';
import type { LoadedGraph } from '../../../src/main/packages/graph';
import {
  buildDynamicKv,
  buildStaticKv,
  fillTemplate,
  type KvFallback,
  matchKvTemplates,
  templateRegex,
} from '../../../src/main/packages/kv-geometry';
import type { OnnxValueInfo } from '../../../src/main/packages/onnx-reader';
import { makeContext } from '../../../src/main/packages/package-fs';
import { KvdeskError } from '../../../src/shared/errors';
import { T } from './package-builder';

function graph(inputs: OnnxValueInfo[], outputs: OnnxValueInfo[]): LoadedGraph {
  return {
    path: '/pkg/model.onnx',
    file: 'model.onnx',
    weightsBytes: 0,
    externalFiles: [],
    info: { irVersion: 8, opsets: [], inputs, outputs, externalData: [], initializerCount: 0, fileBytes: 0 },
  };
}

const port = (name: string, shape: Array<number | string> | undefined, elemType: number = T.f32): OnnxValueInfo => ({
  name,
  elemType,
  shape,
});
const noFallback: KvFallback = { source: 'config', fieldsHint: 'Add the fields.' };

function kvOf(
  past: Array<number | string>,
  opts: { fallback?: KvFallback; elemType?: number; role?: 'key' | 'combined' } = {},
) {
  const role = opts.role ?? 'key';
  const names =
    role === 'combined'
      ? [['past_0', 'present_0']]
      : [
          ['k', 'k_out'],
          ['v', 'v_out'],
        ];
  const g = graph(
    names.map(([p]) => port(p as string, past, opts.elemType)),
    names.map(([, o]) => port(o as string, past, opts.elemType)),
  );
  const ctx = makeContext('/pkg');
  const pairs = names.map(([p, o], i) => ({
    layer: 0,
    role: role === 'combined' ? ('combined' as const) : i === 0 ? ('key' as const) : ('value' as const),
    past: p as string,
    present: o as string,
  }));
  return { ...buildDynamicKv(ctx, g, pairs, opts.fallback ?? noFallback), warnings: ctx.warnings };
}

describe('buildDynamicKv geometry', () => {
  it('split [batch, heads, seq, dim]: batch and seq are the symbolic axes', () => {
    const kv = kvOf(['batch', 4, 'past', 64], { elemType: T.f16 });
    expect(kv.tensors[0]).toMatchObject({
      batchAxis: 0,
      seqAxis: 2,
      kvHeads: 4,
      headDim: 64,
      bytesPerToken: 4 * 64 * 2,
      dtype: 'float16',
    });
    expect(kv.bpt).toBe(2 * 4 * 64 * 2);
    expect(kv.numLayers).toBe(1);
    expect(kv.warnings).toEqual([]);
  });

  it('seq-major [batch, seq, heads, dim] takes heads from the fixed dims in order', () => {
    const kv = kvOf(['batch', 'seq', 8, 128]);
    expect(kv.tensors[0]).toMatchObject({
      batchAxis: 0,
      seqAxis: 1,
      kvHeads: 8,
      headDim: 128,
      bytesPerToken: 8 * 128 * 4,
    });
  });

  it('combined [2, batch, heads, seq, dim] counts the K/V axis in bytes per token', () => {
    const kv = kvOf([2, 'batch', 4, 'past', 8], { role: 'combined' });
    expect(kv.tensors[0]).toMatchObject({
      role: 'combined',
      batchAxis: 1,
      seqAxis: 3,
      kvHeads: 4,
      headDim: 8,
      bytesPerToken: 256,
    });
    expect(kv.bpt).toBe(256);
  });

  it('picks the sequence axis by name when heads are symbolic too, filling heads from config', () => {
    const kv = kvOf(['batch', 'num_heads', 'past_sequence_length', 64], {
      fallback: { ...noFallback, kvHeads: 2, source: 'config.json' },
    });
    expect(kv.tensors[0]).toMatchObject({ batchAxis: 0, seqAxis: 2, kvHeads: 2, headDim: 64 });
    // One line for the key and the value input alike.
    expect(kv.warnings).toHaveLength(1);
    expect(kv.warnings[0]).toContain('both KV inputs have symbolic dims');
    expect(kv.warnings[0]).toContain('using kv_heads = 2 from config.json');
  });

  it('warns when config and graph disagree, and trusts the graph', () => {
    const kv = kvOf(['batch', 4, 'past', 64], { fallback: { ...noFallback, kvHeads: 8, headDim: 64 } });
    expect(kv.tensors[0]?.kvHeads).toBe(4);
    expect(kv.warnings).toEqual(['model.onnx: both KV inputs have 4 KV heads but config says 8; the graph wins.']);
  });

  it('[batch, seq, width] splits the width by config heads', () => {
    const kv = kvOf(['batch', 'seq', 16], { fallback: { ...noFallback, kvHeads: 2, headDim: 8 } });
    expect(kv.tensors[0]).toMatchObject({ batchAxis: 0, seqAxis: 1, kvHeads: 2, headDim: 8, bytesPerToken: 64 });
    const plain = kvOf(['batch', 'seq', 16]);
    expect(plain.tensors[0]).toMatchObject({ kvHeads: 1, headDim: 16, bytesPerToken: 64 });
  });

  it('a batch fixed at 1 leaves the one symbolic axis as the sequence', () => {
    const kv = kvOf([1, 2, 'past', 8]);
    expect(kv.tensors[0]).toMatchObject({ batchAxis: 0, seqAxis: 2, kvHeads: 2, headDim: 8 });
    expect(kv.warnings.some((w) => w.includes('both KV inputs fix the batch axis to 1'))).toBe(true);
  });

  it('refuses a combined cache without the leading axis of 2', () => {
    expect(() => kvOf(['batch', 4, 'past', 8, 3], { role: 'combined' })).toThrow(
      /combined past_%d cache must have the shape \[2, batch, kv_heads, seq, head_dim\]/,
    );
  });

  it('refuses a rank it cannot read', () => {
    expect(() => kvOf(['batch', 'past'])).toThrow(KvdeskError);
    expect(() => kvOf(['batch', 'past'])).toThrow(
      /KV geometry cannot be derived: model.onnx input "k" has shape \[batch, past\]/,
    );
  });

  it('refuses a fixed head count or head size of zero', () => {
    for (const past of [
      ['batch', 0, 'past', 64],
      ['batch', 4, 'past', 0],
      ['batch', 'seq', 0],
    ]) {
      expect(() => kvOf(past), JSON.stringify(past)).toThrow(KvdeskError);
      expect(() => kvOf(past), JSON.stringify(past)).toThrow(
        /model.onnx input "k" has shape \[.*\]; a head count or head size is zero/,
      );
    }
  });

  it('refuses a symbolic width with no config', () => {
    expect(() => kvOf(['batch', 'seq', 'w'])).toThrow(/several axes are symbolic|width axis is symbolic/);
  });
});

describe('buildStaticKv', () => {
  const ref = {
    file: 'inference_metadata.yaml',
    field: 'model.io.static_cache',
    writeIndicesInput: 'wi',
    kvSequenceLengthInput: 'len',
    keyCacheInputs: ['k0', 'k1'],
    valueCacheInputs: ['v0', 'v1'],
    keyCacheOutputs: ['k0o', 'k1o'],
    valueCacheOutputs: ['v0o', 'v1o'],
  };
  const cacheShape = ['batch', 4, 128, 16];
  const g = graph(
    [
      port('wi', ['batch'], T.i64),
      port('len', ['batch'], T.i32),
      ...['k0', 'k1', 'v0', 'v1'].map((n) => port(n, cacheShape, T.bf16)),
    ],
    ['k0o', 'k1o', 'v0o', 'v1o'].map((n) => port(n, cacheShape, T.bf16)),
  );

  it('reads a 4-D cache with the sequence on axis 2', () => {
    const s = buildStaticKv(g, ref);
    expect(s.cache).toMatchObject({
      seqAxis: 2,
      dtype: 'bfloat16',
      shape: cacheShape,
      writeIndicesDtype: 'int64',
      kvSequenceLengthDtype: 'int32',
    });
    expect(s.capacity).toBe(128);
    expect(s.numLayers).toBe(2);
    // 4 tensors × (4 heads × 16) × 2 bytes
    expect(s.bpt).toBe(4 * 64 * 2);
  });

  it('counts a float32 cache at 4 bytes an element', () => {
    const flat = ['batch', 96, 24];
    const f32 = graph(
      [
        port('wi', ['batch'], T.i32),
        port('len', ['batch'], T.i32),
        ...['k0', 'k1', 'v0', 'v1'].map((n) => port(n, flat, T.f32)),
      ],
      ['k0o', 'k1o', 'v0o', 'v1o'].map((n) => port(n, flat, T.f32)),
    );
    const s = buildStaticKv(f32, ref);
    expect(s.cache).toMatchObject({ seqAxis: 1, dtype: 'float32', shape: flat });
    expect(s.capacity).toBe(96);
    // 4 tensors × 24 wide × 4 bytes
    expect(s.bpt).toBe(4 * 24 * 4);
  });

  it('refuses lists of different lengths, naming the field', () => {
    expect(() => buildStaticKv(g, { ...ref, valueCacheOutputs: ['v0o'] })).toThrow(
      'inference_metadata.yaml: `model.io.static_cache.value_cache_outputs` lists 1 ports but `model.io.static_cache.key_cache_inputs` lists 2',
    );
  });

  it('refuses a float control input', () => {
    const bad = graph([port('wi', ['batch'], T.f32), port('len', ['batch'], T.i32)], []);
    expect(() => buildStaticKv(bad, ref)).toThrow(/static-cache input "wi" .* is float32; it must be int32 or int64/);
  });
});

describe('name templates', () => {
  it('match only whole names and capture the layer', () => {
    const re = templateRegex('past_key_values.%d.key');
    expect(re.exec('past_key_values.12.key')?.[1]).toBe('12');
    expect(re.test('past_key_valuesX12.key')).toBe(false);
    expect(re.test('past_key_values.1.key_scale')).toBe(false);
    expect(fillTemplate('present.%d.value', 3)).toBe('present.3.value');
  });

  it('pair sparse layers with their present names', () => {
    const g = graph([port('past_0', []), port('past_7', []), port('input_ids', [])], []);
    expect(matchKvTemplates(g, [{ role: 'combined', past: 'past_%d', present: 'present_%d' }])).toEqual([
      { layer: 0, role: 'combined', past: 'past_0', present: 'present_0' },
      { layer: 7, role: 'combined', past: 'past_7', present: 'present_7' },
    ]);
  });
});
