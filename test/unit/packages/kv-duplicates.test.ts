/**
 * A KV port listed twice passes every per-layer check (each "layer" has its key and value), then every request
 * fails in the engine: such a package is refused at check time, naming the file and the repeating entry.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { genaiPackage, onnxGenaiPackage, removeTempDirs, staticCachePackage } from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

describe('onnx-genai: a KV port listed twice', () => {
  it('kv_inputs [k0, v0, k0, v0]: names the second k0', async () => {
    const dir = await onnxGenaiPackage({
      model: {
        io: {
          kv_inputs: [
            'past_key_values.0.key',
            'past_key_values.0.value',
            'past_key_values.0.key',
            'past_key_values.0.value',
          ],
          kv_outputs: ['present.0.key', 'present.0.value', 'present.0.key', 'present.0.value'],
        },
      },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.io.kv_inputs[2]' });
    expect(err.message).toContain(
      'inference_metadata.yaml: `model.io.kv_inputs[2]` repeats "past_key_values.0.key" (already `model.io.kv_inputs[0]`)',
    );
  });

  it('distinct inputs but one present output twice: names kv_outputs', async () => {
    const dir = await onnxGenaiPackage({
      model: {
        io: { kv_outputs: ['present.0.key', 'present.0.value', 'present.0.key', 'present.1.value'] },
      },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.io.kv_outputs[2]' });
    expect(err.message).toContain('repeats "present.0.key" (already `model.io.kv_outputs[0]`)');
  });

  it('a static cache whose key and value outputs are one port', async () => {
    const outs = await staticCachePackage({ key_cache_outputs: ['v0_out'] });
    const err = await refusal(loadModelSpec(outs), {
      file: 'inference_metadata.yaml',
      field: 'model.io.static_cache.value_cache_outputs[0]',
    });
    expect(err.message).toContain('repeats "v0_out" (already `model.io.static_cache.key_cache_outputs[0]`)');

    const ins = await staticCachePackage({ value_cache_inputs: ['k0'] });
    const err2 = await refusal(loadModelSpec(ins), { field: 'model.io.static_cache.value_cache_inputs[0]' });
    expect(err2.message).toContain('repeats "k0" (already `model.io.static_cache.key_cache_inputs[0]`)');
  });
});

describe('onnxruntime-genai: name templates that name one port twice', () => {
  it('past_key_names and past_value_names the same template', async () => {
    const dir = await genaiPackage({
      model: { decoder: { inputs: { past_value_names: 'past_key_values.%d.key' } } },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json' });
    expect(err.message).toContain(
      '`model.decoder.inputs.past_value_names` repeats "past_key_values.0.key" (already `model.decoder.inputs.past_key_names`): one graph input cannot be both layer 0\'s key and layer 0\'s value',
    );
  });

  it('present_key_names and present_value_names the same template', async () => {
    const dir = await genaiPackage({
      model: { decoder: { outputs: { present_value_names: 'present.%d.key' } } },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json' });
    expect(err.message).toContain('"present.0.key"');
  });
});
