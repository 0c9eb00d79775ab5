/**
 * A config that disagrees with the graph says so once per kind, not once per KV input and dimension (a 32-layer
 * model used to get 128 near-identical lines).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { decoderGraph, HF_CONFIG, hfPackage, removeTempDirs } from './package-builder';

afterAll(removeTempDirs);

const config = (over: Record<string, unknown>) => ({ ...HF_CONFIG, num_hidden_layers: 4, ...over });

describe('KV geometry warnings: one per kind', () => {
  it('config heads and head size that disagree with all 8 KV inputs: two warnings, with the count', async () => {
    const dir = await hfPackage(
      {
        'config.json': config({ num_key_value_heads: 3, head_dim: 64 }),
        'onnx/model.onnx': decoderGraph({ layers: 4 }),
      },
      {},
    );
    const spec = await loadModelSpec(dir);
    const heads = spec.warnings.filter((w) => w.includes('KV heads'));
    const size = spec.warnings.filter((w) => w.includes('head size'));
    expect(heads).toEqual([
      'onnx/model.onnx: all 8 KV inputs have 2 KV heads but config.json (num_key_value_heads / head_dim) says 3; the graph wins.',
    ]);
    expect(size).toEqual([
      'onnx/model.onnx: all 8 KV inputs have head size 8 but config.json (num_key_value_heads / head_dim) says 64; the graph wins.',
    ]);
  });

  it('symbolic head counts filled from the config: one line for all of them', async () => {
    const dir = await hfPackage({
      'config.json': config({}),
      'onnx/model.onnx': decoderGraph({ layers: 4, kvHeads: 'num_heads' }),
    });
    const spec = await loadModelSpec(dir);
    const filled = spec.warnings.filter((w) => w.includes('symbolic dims'));
    expect(filled).toHaveLength(1);
    expect(filled[0]).toContain('all 8 KV inputs have symbolic dims');
    expect(filled[0]).toContain('kv_heads = 2');
  });

  it('one layer: both its inputs in one line', async () => {
    const dir = await hfPackage({
      'config.json': config({ num_hidden_layers: 1, num_key_value_heads: 3 }),
      'onnx/model.onnx': decoderGraph({ layers: 1 }),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.warnings.filter((w) => w.includes('KV heads'))).toEqual([
      'onnx/model.onnx: both KV inputs have 2 KV heads but config.json (num_key_value_heads / head_dim) says 3; the graph wins.',
    ]);
  });
});
