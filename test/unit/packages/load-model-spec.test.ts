import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { detectLayout, loadModelSpec } from '../../../src/main/packages/index';
import type { KvTensorSpec } from '../../../src/shared/model-spec';
import {
  decoderGraph,
  encodeGraph,
  genaiPackage,
  hfPackage,
  onnxGenaiPackage,
  removeTempDirs,
  staticCachePackage,
  T,
  tempPackageDir,
  tokenizerJson,
  writeFiles,
} from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

function dynamicTensors(kv: { kind: string; tensors?: KvTensorSpec[] }): KvTensorSpec[] {
  expect(kv.kind).toBe('dynamic');
  return kv.tensors ?? [];
}

describe('Hugging Face / Optimum layout', () => {
  it('normalizes a Llama-style GQA package completely', async () => {
    const dir = await hfPackage();
    expect(await detectLayout(dir)).toBe('hf-optimum');
    const spec = await loadModelSpec(dir);
    const graphBytes = (await fs.stat(path.join(dir, 'onnx/model.onnx'))).size;
    expect(spec).toMatchObject({
      id: 'hf-model',
      displayName: 'hf-model',
      layout: 'hf-optimum',
      root: await fs.realpath(dir),
      modelType: 'llama',
      graphPath: path.join(await fs.realpath(dir), 'onnx/model.onnx'),
      weightsBytes: graphBytes,
      numLayers: 2,
      // 2 layers × (key + value) × 2 KV heads × head_dim 8 × 4 bytes
      bpt: 256,
      contextLength: 256,
      vocabSize: 64,
      eosTokenIds: [3, 4],
      bosTokenId: 2,
      chatTemplate: '{{ messages }}',
      backends: ['CPUExecutionProvider'],
      search: { doSample: true, temperature: 0.7, topP: 0.9, topK: 40, repetitionPenalty: 1.1, maxNewTokens: 128 },
      warnings: [],
    });
    // tokenizer_config says "pad_token": null, so the tokenizer's <pad> is not taken as one.
    expect(spec.padTokenId).toBeUndefined();
    expect(spec.graphVariants).toBeUndefined();
    expect(spec.ports.inputIds).toEqual({ name: 'input_ids', dtype: 'int64', shape: ['batch', 'sequence_length'] });
    expect(spec.ports.attentionMask?.name).toBe('attention_mask');
    expect(spec.ports.positionIds?.name).toBe('position_ids');
    expect(spec.ports.logits).toEqual({ name: 'logits', dtype: 'float32', shape: ['batch', 'sequence_length', 64] });
    const tensors = dynamicTensors(spec.kv);
    expect(tensors.map((t) => `${t.layer}:${t.role}:${t.past}->${t.present}`)).toEqual([
      '0:key:past_key_values.0.key->present.0.key',
      '0:value:past_key_values.0.value->present.0.value',
      '1:key:past_key_values.1.key->present.1.key',
      '1:value:past_key_values.1.value->present.1.value',
    ]);
    expect(tensors[0]).toMatchObject({
      dtype: 'float32',
      batchAxis: 0,
      seqAxis: 2,
      kvHeads: 2,
      headDim: 8,
      bytesPerToken: 64,
    });
    expect(spec.tokenizer).toEqual({
      tokenizerJson: path.join(await fs.realpath(dir), 'tokenizer.json'),
      tokenizerConfig: path.join(await fs.realpath(dir), 'tokenizer_config.json'),
      bosToken: '<s>',
      eosToken: '</s>',
      unkToken: '<unk>',
      addBosToken: true,
    });
    expect(spec.files.map((f) => f.path)).toEqual([
      'config.json',
      'generation_config.json',
      'onnx/model.onnx',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    expect(spec.files.find((f) => f.path === 'onnx/model.onnx')?.bytes).toBe(graphBytes);
  });

  it('defaults to the fp32 graph, lists the variants, and picks another with graphVariant', async () => {
    const dir = await hfPackage({
      'onnx/model_fp16.onnx': decoderGraph({ kvType: T.f16 }),
      'onnx/model_q4.onnx': decoderGraph({}),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.graphPath.endsWith(path.join('onnx', 'model.onnx'))).toBe(true);
    expect(spec.graphVariant).toBe('fp32');
    expect(spec.graphVariants?.map((v) => [v.name, v.path])).toEqual([
      ['fp32', 'onnx/model.onnx'],
      ['fp16', 'onnx/model_fp16.onnx'],
      ['q4', 'onnx/model_q4.onnx'],
    ]);
    expect(spec.bpt).toBe(256);
    const fp16 = await loadModelSpec(dir, { graphVariant: 'fp16' });
    expect(fp16.graphVariant).toBe('fp16');
    expect(fp16.graphPath.endsWith('model_fp16.onnx')).toBe(true);
    expect(dynamicTensors(fp16.kv)[0]?.dtype).toBe('float16');
    expect(fp16.bpt).toBe(128);
    const byPath = await loadModelSpec(dir, { graphVariant: 'onnx/model_q4.onnx' });
    expect(byPath.graphVariant).toBe('q4');
  });

  it('finds model.onnx at the root and counts external weights in weightsBytes', async () => {
    const dir = await hfPackage({
      'onnx/model.onnx': null,
      'model.onnx': decoderGraph({
        initializers: [{ name: 'w', dims: [250], external: { location: 'model.onnx_data', offset: 0, length: 1000 } }],
      }),
      'model.onnx_data': new Uint8Array(1000),
    });
    const spec = await loadModelSpec(dir);
    const graphBytes = (await fs.stat(path.join(dir, 'model.onnx'))).size;
    expect(spec.weightsBytes).toBe(graphBytes + 1000);
    expect(spec.files.map((f) => f.path)).toContain('model.onnx_data');
  });

  it('reads GPT-2 style config names', async () => {
    const dir = await hfPackage({
      'config.json': {
        model_type: 'gpt2',
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
        n_positions: 1024,
        vocab_size: 64,
        eos_token_id: 3,
        bos_token_id: 3,
      },
      'generation_config.json': null,
    });
    const spec = await loadModelSpec(dir);
    expect(spec.contextLength).toBe(1024);
    expect(spec.eosTokenIds).toEqual([3]);
    expect(spec.modelType).toBe('gpt2');
    expect(spec.search).toEqual({});
  });

  it('fills symbolic head dims from config.json and says so', async () => {
    const dir = await hfPackage({}, { kvHeads: 'num_kv_heads', headDim: 'head_dim' });
    const spec = await loadModelSpec(dir);
    const t = dynamicTensors(spec.kv)[0];
    // num_key_value_heads 2, hidden_size 32 / num_attention_heads 4 = 8
    expect(t).toMatchObject({ kvHeads: 2, headDim: 8, batchAxis: 0, seqAxis: 2, bytesPerToken: 64 });
    expect(spec.bpt).toBe(256);
    expect(
      spec.warnings.some((w) => w.includes('all 4 KV inputs') && w.includes('symbolic') && w.includes('config.json')),
    ).toBe(true);
  });

  it('takes eos from tokenizer_config when no config declares it', async () => {
    const dir = await hfPackage({
      'config.json': {
        model_type: 'llama',
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        hidden_size: 32,
        max_position_embeddings: 64,
      },
      'generation_config.json': null,
    });
    const spec = await loadModelSpec(dir);
    expect(spec.eosTokenIds).toEqual([3]);
    expect(spec.bosTokenId).toBe(2);
  });

  it('uses the default entry of a chat_template list, and chat_template.jinja over the config', async () => {
    const listDir = await hfPackage({
      'tokenizer_config.json': {
        eos_token: '</s>',
        chat_template: [
          { name: 'tool_use', template: 'T' },
          { name: 'default', template: 'D' },
        ],
      },
    });
    expect((await loadModelSpec(listDir)).chatTemplate).toBe('D');
    const jinjaDir = await hfPackage({ 'chat_template.jinja': 'J {{ x }}' });
    expect((await loadModelSpec(jinjaDir)).chatTemplate).toBe('J {{ x }}');
  });

  it("refuses a graph input no port binds (a merged decoder's use_cache_branch), saying how to export without it", async () => {
    const dir = await hfPackage({}, { extraInputs: [{ name: 'use_cache_branch', type: 9, shape: [1] }] });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'input "use_cache_branch"' });
    expect(err.message).toContain(
      'onnx/model.onnx has the input "use_cache_branch" (bool [1]), which no port binding names',
    );
    expect(err.message).toContain('--no-post-process');
  });

  it('loads a tokenizer larger than the model vocabulary with a warning', async () => {
    const dir = await hfPackage({ 'tokenizer.json': tokenizerJson(100) });
    const spec = await loadModelSpec(dir);
    expect(spec.vocabSize).toBe(64);
    expect(spec.warnings.some((w) => w.includes('knows 100 tokens') && w.includes('vocabulary is 64'))).toBe(true);
  });

  it('follows symlinks that stay inside the package', async () => {
    const dir = await hfPackage();
    await fs.rename(path.join(dir, 'tokenizer.json'), path.join(dir, 'onnx', 'tok.json'));
    await fs.symlink(path.join('onnx', 'tok.json'), path.join(dir, 'tokenizer.json'));
    const spec = await loadModelSpec(dir);
    expect(spec.tokenizer.tokenizerJson).toBe(path.join(await fs.realpath(dir), 'tokenizer.json'));
  });
});

describe('onnxruntime-genai layout', () => {
  it('normalizes a split-KV package with providers, session options and search defaults', async () => {
    const dir = await genaiPackage({}, {}, { idsType: T.i32 });
    expect(await detectLayout(dir)).toBe('ort-genai');
    const spec = await loadModelSpec(dir);
    expect(spec).toMatchObject({
      id: 'genai-model',
      layout: 'ort-genai',
      modelType: 'llama',
      contextLength: 128,
      vocabSize: 64,
      eosTokenIds: [3, 5],
      bosTokenId: 2,
      padTokenId: 0,
      numLayers: 2,
      bpt: 256,
      backends: ['CPUExecutionProvider', 'CUDAExecutionProvider', 'DmlExecutionProvider'],
      sessionOptions: { log_id: 'x', provider_options: [{ cuda: {} }, { dml: {} }] },
      search: { doSample: false, temperature: 1, topK: 1, topP: 1 },
      warnings: [],
    });
    expect(spec.ports.inputIds.dtype).toBe('int32');
    expect(spec.ports.attentionMask?.dtype).toBe('int32');
  });

  it('matches a combined past_%d cache with sparse layer indices', async () => {
    const dir = await genaiPackage(
      {
        model: {
          decoder: {
            num_hidden_layers: 3,
            inputs: { past_names: 'past_%d' },
            outputs: { present_names: 'present_%d' },
          },
        },
      },
      {},
      { kv: 'combined', layers: 3, skipLayers: [1], kvHeads: 4 },
    );
    const spec = await loadModelSpec(dir);
    const tensors = dynamicTensors(spec.kv);
    expect(tensors.map((t) => [t.layer, t.role, t.past, t.present])).toEqual([
      [0, 'combined', 'past_0', 'present_0'],
      [2, 'combined', 'past_2', 'present_2'],
    ]);
    expect(tensors[0]).toMatchObject({
      batchAxis: 1,
      seqAxis: 3,
      kvHeads: 4,
      headDim: 8,
      bytesPerToken: 2 * 4 * 8 * 4,
    });
    expect(spec.numLayers).toBe(2);
    expect(spec.bpt).toBe(512);
    expect(spec.warnings.some((w) => w.includes('num_hidden_layers') && w.includes('3'))).toBe(true);
  });

  it('binds renamed ports and KV templates from decoder.inputs/outputs', async () => {
    const names = {
      ids: 'tok',
      mask: 'mask',
      pos: 'pos',
      logits: 'scores',
      pastKey: 'pk_%d',
      pastValue: 'pv_%d',
      presentKey: 'k_out_%d',
      presentValue: 'v_out_%d',
    };
    const dir = await genaiPackage(
      {
        model: {
          decoder: {
            inputs: {
              input_ids: 'tok',
              attention_mask: 'mask',
              position_ids: 'pos',
              past_key_names: 'pk_%d',
              past_value_names: 'pv_%d',
            },
            outputs: { logits: 'scores', present_key_names: 'k_out_%d', present_value_names: 'v_out_%d' },
          },
        },
      },
      {},
      { names },
    );
    const spec = await loadModelSpec(dir);
    expect([
      spec.ports.inputIds.name,
      spec.ports.attentionMask?.name,
      spec.ports.positionIds?.name,
      spec.ports.logits.name,
    ]).toEqual(['tok', 'mask', 'pos', 'scores']);
    expect(dynamicTensors(spec.kv).map((t) => `${t.past}->${t.present}`)).toEqual([
      'pk_0->k_out_0',
      'pv_0->v_out_0',
      'pk_1->k_out_1',
      'pv_1->v_out_1',
    ]);
  });

  it('binds optional ports only when the graph has them', async () => {
    const dir = await genaiPackage({}, {}, { withPositions: false });
    const spec = await loadModelSpec(dir);
    expect(spec.ports.positionIds).toBeUndefined();
    expect(spec.ports.attentionMask?.name).toBe('attention_mask');
  });

  it('offers unknown providers verbatim with a warning', async () => {
    const dir = await genaiPackage({
      model: { decoder: { session_options: { provider_options: [{ FancyNpu: {} }] } } },
    });
    const spec = await loadModelSpec(dir);
    expect(spec.backends).toEqual(['CPUExecutionProvider', 'FancyNpuExecutionProvider']);
    expect(spec.warnings.some((w) => w.includes('FancyNpu'))).toBe(true);
  });
});

describe('onnx-genai flat layout', () => {
  it('normalizes a package whose ports come from model.io', async () => {
    const dir = await onnxGenaiPackage();
    expect(await detectLayout(dir)).toBe('onnx-genai');
    const spec = await loadModelSpec(dir);
    expect(spec).toMatchObject({
      id: 'flat-model',
      layout: 'onnx-genai',
      contextLength: 32,
      vocabSize: 64,
      eosTokenIds: [3],
      bosTokenId: 2,
      padTokenId: 0,
      numLayers: 2,
      bpt: 256,
      backends: ['CPUExecutionProvider'],
      warnings: [],
    });
    expect(spec.graphPath.endsWith('decoder.onnx')).toBe(true);
    expect(spec.tokenizer.eosToken).toBe('</s>');
  });

  it('takes eos/bos/vocab and sampling defaults from the metadata when it states them', async () => {
    const dir = await onnxGenaiPackage({
      model: { eos_token_id: [5, 6], bos_token_id: 1, vocab_size: 64 },
      generation: { temperature: 0.2, top_k: 5 },
    });
    const spec = await loadModelSpec(dir);
    expect(spec.eosTokenIds).toEqual([5, 6]);
    expect(spec.bosTokenId).toBe(1);
    expect(spec.search).toEqual({ temperature: 0.2, topK: 5 });
  });

  it('reads inference_metadata.json too', async () => {
    const dir = await onnxGenaiPackage();
    const yamlText = await fs.readFile(path.join(dir, 'inference_metadata.yaml'), 'utf8');
    const { parse } = await import('yaml');
    await writeFiles(dir, {
      'inference_metadata.yaml': null,
      'inference_metadata.json': parse(yamlText) as Record<string, unknown>,
    });
    expect((await loadModelSpec(dir)).bpt).toBe(256);
  });

  it('prefers decoder.onnx among several graphs, and graphVariant picks another by file name', async () => {
    const dir = await onnxGenaiPackage({}, { 'draft.onnx': decoderGraph({ kvType: T.f16 }) });
    expect((await loadModelSpec(dir)).graphPath.endsWith('decoder.onnx')).toBe(true);
    const draft = await loadModelSpec(dir, { graphVariant: 'draft' });
    expect(draft.graphPath.endsWith('draft.onnx')).toBe(true);
    expect(draft.bpt).toBe(128);
  });

  it('describes a static cache', async () => {
    const dir = await staticCachePackage();
    const spec = await loadModelSpec(dir);
    expect(spec.kv).toEqual({
      kind: 'static',
      cache: {
        writeIndicesInput: 'wi',
        kvSequenceLengthInput: 'len',
        writeIndicesDtype: 'int64',
        kvSequenceLengthDtype: 'int32',
        keyCacheInputs: ['k0'],
        valueCacheInputs: ['v0'],
        keyCacheOutputs: ['k0_out'],
        valueCacheOutputs: ['v0_out'],
        shape: ['batch', 24, 32],
        dtype: 'float16',
        seqAxis: 1,
      },
    });
    // (key + value) × width 32 × 2 bytes
    expect(spec.bpt).toBe(128);
    // The buffer holds 24 positions although the metadata says 32.
    expect(spec.contextLength).toBe(24);
    expect(spec.warnings.some((w) => w.includes('static cache holds 24'))).toBe(true);
  });

  it('never guesses a port the metadata does not name, even with a conventional name: it names the field to set', async () => {
    const dir = await onnxGenaiPackage({ model: { io: { attention_mask_input: undefined } } });
    const err = await refusal(loadModelSpec(dir), {
      file: 'inference_metadata.yaml',
      field: 'model.io.attention_mask_input',
    });
    expect(err.message).toContain(
      'Set `model.io.attention_mask_input` in inference_metadata.yaml to "attention_mask".',
    );
  });

  it('trusts the logits width over a differing declared vocab_size, with a warning', async () => {
    const dir = await onnxGenaiPackage({ model: { vocab_size: 100 } });
    const spec = await loadModelSpec(dir);
    expect(spec.vocabSize).toBe(64);
    expect(spec.warnings.some((w) => w.includes('`model.vocab_size` is 100') && w.includes('scores 64 tokens'))).toBe(
      true,
    );
  });

  it('falls back to the tokenizer size when the logits width is symbolic and no config states it', async () => {
    const dir = await onnxGenaiPackage({}, { 'tokenizer.json': tokenizerJson(48) }, { vocab: 'vocab' });
    const spec = await loadModelSpec(dir);
    expect(spec.vocabSize).toBe(48);
    expect(spec.warnings.some((w) => w.includes("using tokenizer.json's 48"))).toBe(true);
  });

  it('loads a graph without a KV cache as kind none with a warning', async () => {
    const dir = await onnxGenaiPackage(
      { model: { io: { kv_inputs: undefined, kv_outputs: undefined } } },
      {},
      { kv: 'none' },
    );
    const spec = await loadModelSpec(dir);
    expect(spec.kv).toEqual({ kind: 'none' });
    expect(spec.bpt).toBe(0);
    expect(spec.warnings.some((w) => w.includes('no KV cache'))).toBe(true);
  });
});

describe('detectLayout', () => {
  it('prefers the most specific marker and loadModelSpec says which markers it saw', async () => {
    const dir = await genaiPackage({}, { 'config.json': { model_type: 'llama' } });
    expect(await detectLayout(dir)).toBe('ort-genai');
    const spec = await loadModelSpec(dir);
    expect(spec.layout).toBe('ort-genai');
    expect(spec.warnings.some((w) => w.includes('genai_config.json, config.json'))).toBe(true);
  });

  it('recognises an ORT model package by manifest.json', async () => {
    const dir = await tempPackageDir();
    await writeFiles(dir, { 'manifest.json': { schema_version: '1.0', components: {} } });
    expect(await detectLayout(dir)).toBe('ort-package');
  });
});

describe('package id', () => {
  it('is a slug of the folder name', async () => {
    const dir = await hfPackage({}, {}, 'My Model (Q4) v1.5');
    const spec = await loadModelSpec(dir);
    expect(spec.id).toBe('my-model-q4-v1.5');
    expect(spec.displayName).toBe('My Model (Q4) v1.5');
  });
});

describe('graph ports in any order', () => {
  it('does not depend on the order of graph inputs', async () => {
    const graph = encodeGraph({
      inputs: [
        { name: 'past_key_values.0.value', type: T.f32, shape: ['b', 2, 'past', 8] },
        { name: 'position_ids', type: T.i64, shape: ['b', 's'] },
        { name: 'past_key_values.0.key', type: T.f32, shape: ['b', 2, 'past', 8] },
        { name: 'input_ids', type: T.i64, shape: ['b', 's'] },
      ],
      outputs: [
        { name: 'present.0.value', type: T.f32, shape: ['b', 2, 'total', 8] },
        { name: 'logits', type: T.f32, shape: ['b', 's', 64] },
        { name: 'present.0.key', type: T.f32, shape: ['b', 2, 'total', 8] },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const spec = await loadModelSpec(dir);
    expect(dynamicTensors(spec.kv).map((t) => t.role)).toEqual(['key', 'value']);
    expect(spec.ports.attentionMask).toBeUndefined();
    expect(spec.bpt).toBe(128);
  });
});

describe('loading a layout folder inside a larger package (how layout 4 delegates)', () => {
  it('names files relative to the package root and keeps paths inside the whole package', async () => {
    const { loadLayout, makeContext } = await import('../../../src/main/packages/index');
    const root = await tempPackageDir('ort-package');
    await writeFiles(root, {
      'manifest.json': { schema_version: '1.0' },
      'cpu/genai_config.json': {
        model: {
          type: 'llama',
          context_length: 64,
          eos_token_id: 3,
          vocab_size: 64,
          decoder: { filename: 'model.onnx', num_key_value_heads: 2, head_size: 8 },
        },
      },
      'cpu/tokenizer.json': tokenizerJson(64),
      'cpu/model.onnx': decoderGraph(),
    });
    const realRoot = await fs.realpath(root);
    const spec = await loadLayout('ort-genai', makeContext(path.join(realRoot, 'cpu'), realRoot));
    expect(spec.files.map((f) => f.path)).toEqual(['cpu/genai_config.json', 'cpu/model.onnx', 'cpu/tokenizer.json']);
    expect(spec.root).toBe(realRoot);
    expect(spec.id).toBe('ort-package');
    expect(spec.bpt).toBe(256);

    await writeFiles(root, { 'cpu/genai_config.json': { model: { context_length: 'x' } } });
    const err = await refusal(loadLayout('ort-genai', makeContext(path.join(realRoot, 'cpu'), realRoot)), {
      file: 'cpu/genai_config.json',
      field: 'model.context_length',
    });
    expect(err.message).toMatch(/^cpu\/genai_config\.json: `model\.context_length`/);
  });
});
