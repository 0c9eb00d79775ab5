import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { detectLayout, loadModelSpec } from '../../../src/main/packages/index';
import {
  decoderGraph,
  encodeGraph,
  genaiPackage,
  HF_CONFIG,
  hfPackage,
  onnxGenaiPackage,
  removeTempDirs,
  T,
  tempPackageDir,
  tokenizerJson,
  writeFiles,
} from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

/** Exactly `bytes` of text that is not valid JSON or YAML, so parsing it would fail differently. */
function oversized(bytes: number): string {
  const head = '{ "broken": ';
  return head + 'x'.repeat(bytes - head.length);
}

describe('the folder itself', () => {
  it('refuses a path that does not exist', async () => {
    const missing = path.join(os.tmpdir(), 'kvdesk-no-such-package-7f3a');
    const err = await refusal(loadModelSpec(missing), { file: '.' });
    expect(err.message).toBe(`${missing} does not exist. Pick the folder that holds the model package.`);
  });

  it('refuses a file instead of a folder', async () => {
    const dir = await hfPackage();
    const file = path.join(dir, 'onnx', 'model.onnx');
    const err = await refusal(loadModelSpec(file), { file: '.' });
    expect(err.message).toContain(`${file} is not a directory`);
    expect(err.message).toContain('pick the folder that contains');
    await refusal(detectLayout(file));
  });

  it('refuses an empty folder', async () => {
    const dir = await tempPackageDir();
    await fs.writeFile(path.join(dir, '.DS_Store'), '');
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain(`${dir} is empty`);
    expect(err.message).toContain('genai_config.json');
  });

  it('refuses an unrecognised layout, listing what it found and what each layout needs', async () => {
    const dir = await tempPackageDir();
    await writeFiles(dir, { 'weights.bin': 'x', 'README.md': '# hi', 'tokenizer.json': tokenizerJson() });
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain(
      'is not a model package kvdesk recognises: it has README.md, tokenizer.json, weights.bin',
    );
    expect(err.message).toContain(
      '(1) onnx-genai: tokenizer.json, decoder.onnx (or one *.onnx) and inference_metadata.yaml|yml|json',
    );
    expect(err.message).toContain('(2) onnxruntime-genai: genai_config.json');
    expect(err.message).toContain(
      '(3) Hugging Face / Optimum: config.json, tokenizer.json and onnx/model.onnx (or model.onnx)',
    );
    expect(err.message).toContain('(4) ORT model package: manifest.json');
    await refusal(detectLayout(dir));
  });

  it('refuses an ORT model package for now, saying what to do', async () => {
    const dir = await tempPackageDir();
    await writeFiles(dir, { 'manifest.json': { schema_version: '1.0' } });
    const err = await refusal(loadModelSpec(dir), { file: 'manifest.json' });
    expect(err.message).toContain('Load one of its variant folders directly');
  });
});

describe('no tokenizer', () => {
  it('hf layout', async () => {
    const dir = await hfPackage({ 'tokenizer.json': null });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toMatch(
      /^No tokenizer: tokenizer\.json is missing\. kvdesk needs a Hugging Face tokenizer\.json/,
    );
  });

  it('genai layout with only slow-tokenizer files says so', async () => {
    const dir = await genaiPackage({}, { 'tokenizer.json': null, 'vocab.json': '{}', 'merges.txt': '' });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toContain('found only vocab.json, merges.txt');
    expect(err.message).toContain('save_pretrained');
  });

  it('onnx-genai layout', async () => {
    const dir = await onnxGenaiPackage({}, { 'tokenizer.json': null });
    await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
  });

  it('a tokenizer.json that is not a tokenizer', async () => {
    const dir = await hfPackage({ 'tokenizer.json': { hello: 'world' } });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json', field: 'model' });
    expect(err.message).toContain('is not a Hugging Face tokenizer.json');
  });
});

describe('a model in a format kvdesk does not run (what Ollama, LM Studio and transformers users bring)', () => {
  const getOnnx = 'optimum-cli export onnx --model <owner/name or folder> <output folder>';

  it("a .gguf file: says it is llama.cpp's format and how to get the ONNX export", async () => {
    const dir = await tempPackageDir();
    const file = path.join(dir, 'qwen2.5-0.5b-instruct-q4_k_m.gguf');
    await fs.writeFile(file, 'GGUF');
    const err = await refusal(loadModelSpec(file), { file: '.' });
    expect(err.message).toContain(`${file} is a GGUF file: GGUF is llama.cpp's format`);
    expect(err.message).toContain('kvdesk runs ONNX models');
    expect(err.message).toContain('onnx-community');
    expect(err.message).toContain(getOnnx);
  });

  it('a folder holding a .gguf file (and no config): the same, naming the file', async () => {
    const dir = await tempPackageDir();
    await writeFiles(dir, { 'model-q4_k_m.gguf': 'GGUF', 'README.md': '# hi' });
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain(`${dir} holds GGUF files (model-q4_k_m.gguf) and no ONNX graph: GGUF is llama.cpp's`);
    expect(err.message).toContain(getOnnx);
  });

  it('a transformers checkpoint (config, tokenizer, model.safetensors): says so, and how to export it', async () => {
    const dir = await hfPackage({ 'onnx/model.onnx': null, 'model.safetensors': 'weights' });
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain(
      'This folder is a transformers (PyTorch) checkpoint: its weights are in model.safetensors, but it has no ONNX graph',
    );
    expect(err.message).toContain(getOnnx);
    // Sharded weights, and GGUF beside a config, are told apart the same way.
    const sharded = await hfPackage({
      'onnx/model.onnx': null,
      'model-00001-of-00002.safetensors': 'w',
      'model-00002-of-00002.safetensors': 'w',
    });
    expect((await refusal(loadModelSpec(sharded), { file: '.' })).message).toContain(
      'weights are in model-00001-of-00002.safetensors, model-00002-of-00002.safetensors, but it has no ONNX graph',
    );
    const gguf = await hfPackage({ 'onnx/model.onnx': null, 'm.gguf': 'GGUF' });
    expect((await refusal(loadModelSpec(gguf), { file: '.' })).message).toContain(
      'This folder holds GGUF files (m.gguf)',
    );
  });

  it('a checkpoint whose config or tokenizer kvdesk would refuse first is still named a checkpoint', async () => {
    // Gemma-3 style: the text model's fields nested in text_config.
    const nested = await hfPackage({
      'onnx/model.onnx': null,
      'config.json': { model_type: 'gemma3', text_config: { max_position_embeddings: 8192 } },
      'model.safetensors': 'w',
    });
    expect((await refusal(loadModelSpec(nested), { file: '.' })).message).toContain(
      'is a transformers (PyTorch) checkpoint',
    );
    // A slow tokenizer only (tokenizer.model, no tokenizer.json).
    const slow = await hfPackage({
      'onnx/model.onnx': null,
      'tokenizer.json': null,
      'tokenizer.model': 'sp',
      'model.safetensors': 'w',
    });
    expect((await refusal(loadModelSpec(slow), { file: '.' })).message).toContain(
      'is a transformers (PyTorch) checkpoint',
    );
  });
});

describe('no ONNX graph or no rule to choose', () => {
  it('hf layout with no graph at all', async () => {
    const dir = await hfPackage({ 'onnx/model.onnx': null });
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain('No ONNX graph: the package has neither onnx/model.onnx nor model.onnx');
  });

  it('hf layout with only graphs of other names lists them', async () => {
    const dir = await hfPackage({ 'onnx/model.onnx': null, 'onnx/decoder_model_merged.onnx': decoderGraph() });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('found only onnx/decoder_model_merged.onnx');
    expect(err.detail?.candidates).toEqual(['onnx/decoder_model_merged.onnx']);
  });

  it('hf layout with onnx/model.onnx and model.onnx both', async () => {
    const dir = await hfPackage({ 'model.onnx': decoderGraph() });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain(
      'Several ONNX graphs and no rule to choose (both onnx/model.onnx and model.onnx exist)',
    );
    expect(err.message).toContain('fp32 (onnx/model.onnx), fp32 (model.onnx)');
  });

  it('hf layout with variants but no plain model.onnx: the one that runs best on a CPU, said; another by name', async () => {
    const dir = await hfPackage({
      'onnx/model.onnx': null,
      'onnx/model_fp16.onnx': decoderGraph(),
      'onnx/model_q4.onnx': decoderGraph(),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.graphVariant).toBe('q4');
    expect(spec.graphPath).toBe(path.join(dir, 'onnx/model_q4.onnx'));
    expect(spec.warnings).toContainEqual(
      'There is no plain model.onnx: kvdesk picked onnx/model_q4.onnx (q4, the one that runs best on a CPU) of fp16 (onnx/model_fp16.onnx), q4 (onnx/model_q4.onnx). Pick another in the Models view or with --variant.',
    );
    const fp16 = await loadModelSpec(dir, { graphVariant: 'fp16' });
    expect(fp16.graphVariant).toBe('fp16');
    expect(fp16.warnings.some((w) => w.includes('no plain model.onnx'))).toBe(false);
  });

  it('hf layout with an unknown graphVariant lists the offered ones', async () => {
    const dir = await hfPackage({ 'onnx/model_fp16.onnx': decoderGraph() });
    const err = await refusal(loadModelSpec(dir, { graphVariant: 'int8' }));
    expect(err.message).toContain(
      'Graph variant "int8" is not in the package; the package offers: fp32 (onnx/model.onnx), fp16 (onnx/model_fp16.onnx)',
    );
  });

  it('onnx-genai layout with no graph', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': null });
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain('No ONNX graph: the package folder has no decoder.onnx');
  });

  it('onnx-genai layout with several graphs and no decoder.onnx lists them', async () => {
    const dir = await onnxGenaiPackage(
      {},
      { 'decoder.onnx': null, 'a.onnx': decoderGraph(), 'b.onnx': decoderGraph() },
    );
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('Several ONNX graphs and no rule to choose: a.onnx, b.onnx');
    expect(err.detail?.candidates).toEqual(['a.onnx', 'b.onnx']);
    // What a person can do, by the names they can use: the CLI's --variant (no internal option name).
    expect(err.message).not.toContain('graphVariant');
    expect(err.message).toContain('Rename the decoder graph to decoder.onnx or remove the others');
    expect(err.message).toContain('--variant NAME on kvdesk generate, chat or inspect (--variant a for a.onnx)');
    // The name it suggests is one --variant takes (the CLI passes it on as graphVariant).
    expect((await loadModelSpec(dir, { graphVariant: 'a' })).graphPath).toBe(path.join(dir, 'a.onnx'));
  });

  it('genai layout whose decoder.filename does not exist', async () => {
    const dir = await genaiPackage({ model: { decoder: { filename: 'decoder.onnx' } } });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'model.decoder.filename' });
    expect(err.message).toBe(
      'genai_config.json: `model.decoder.filename` names "decoder.onnx", but decoder.onnx does not exist in the package. Add the file or fix the name.',
    );
  });
});

describe('invalid JSON / YAML', () => {
  it('genai_config.json with a trailing comma: file, line and column', async () => {
    const dir = await genaiPackage({}, { 'genai_config.json': '{\n  "model": {\n    "type": "llama",\n  }\n}\n' });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json' });
    expect(err.message).toMatch(/^genai_config\.json is not valid JSON: .* at line 4, column 3\. Fix the syntax there/);
    expect(err.detail?.line).toBe(4);
  });

  it('inference_metadata.yaml with bad indentation: file and line', async () => {
    const dir = await onnxGenaiPackage(
      {},
      { 'inference_metadata.yaml': 'model:\n  max_sequence_length: 16\n  io: [a,\nb: 1\n' },
    );
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml' });
    expect(err.message).toMatch(
      /^inference_metadata\.yaml is not valid YAML: .* at line 4, column 1\. Fix the syntax there/,
    );
    expect(err.detail?.line).toBe(4);
  });

  it('config.json that is a list, not an object', async () => {
    const dir = await hfPackage({ 'config.json': '[1, 2]' });
    const err = await refusal(loadModelSpec(dir), { file: 'config.json' });
    expect(err.message).toContain('config.json must hold a JSON object at the top level, but holds a list');
  });

  it('tokenizer.json with broken JSON', async () => {
    const dir = await hfPackage({ 'tokenizer.json': '{"model": ' });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toContain('tokenizer.json is not valid JSON');
  });

  it('generation_config.json with broken JSON', async () => {
    const dir = await hfPackage({ 'generation_config.json': '{ eos: 1 }' });
    const err = await refusal(loadModelSpec(dir), { file: 'generation_config.json' });
    expect(err.message).toContain('at line 1, column 3');
  });
});

describe('config or metadata larger than 4 MiB is refused before parsing', () => {
  const big = 4 * 1024 * 1024 + 1;
  it('genai_config.json', async () => {
    const dir = await genaiPackage({}, { 'genai_config.json': oversized(big) });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json' });
    expect(err.message).toContain('genai_config.json is 4.0 MiB');
    expect(err.message).toContain(
      'kvdesk refuses config and metadata files larger than 4.0 MiB (4194304 bytes) before reading them',
    );
    expect(err.message).not.toContain('not valid JSON');
    expect(err.detail?.bytes).toBe(4 * 1024 * 1024 + 1);
  });

  it('inference_metadata.yaml', async () => {
    const dir = await onnxGenaiPackage({}, { 'inference_metadata.yaml': oversized(big) });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml' });
    expect(err.detail?.maxBytes).toBe(4 * 1024 * 1024);
  });

  it('tokenizer_config.json', async () => {
    const dir = await hfPackage({ 'tokenizer_config.json': oversized(big) });
    await refusal(loadModelSpec(dir), { file: 'tokenizer_config.json' });
  });

  it('accepts a config of exactly 4 MiB', async () => {
    const pad = 4 * 1024 * 1024 - 200;
    const config = JSON.stringify({
      model_type: 'llama',
      num_hidden_layers: 2,
      num_key_value_heads: 2,
      num_attention_heads: 4,
      hidden_size: 32,
      max_position_embeddings: 64,
      eos_token_id: 3,
      note: '',
    });
    const text = config.replace('"note":""', `"note":"${'n'.repeat(pad)}"`);
    const padded = text + ' '.repeat(4 * 1024 * 1024 - Buffer.byteLength(text));
    expect(Buffer.byteLength(padded)).toBe(4 * 1024 * 1024);
    const dir = await hfPackage({ 'config.json': padded });
    expect((await loadModelSpec(dir)).contextLength).toBe(64);
  });
});

describe('metadata naming a port the graph does not have', () => {
  it('onnx-genai token_input: names the port, the field and the graph ports', async () => {
    const dir = await onnxGenaiPackage({ model: { io: { token_input: 'tokens' } } });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.io.token_input' });
    expect(err.message).toContain(
      'inference_metadata.yaml: `model.io.token_input` names the input "tokens", but the graph has no such input.',
    );
    expect(err.message).toContain(
      'decoder.onnx has inputs: input_ids, attention_mask, position_ids, past_key_values.0.key',
    );
    expect(err.message).toContain('outputs: logits, present.0.key');
    expect(err.detail?.port).toBe('tokens');
    expect(err.detail?.graphInputs).toContain('input_ids');
  });

  it('onnx-genai logits_output', async () => {
    const dir = await onnxGenaiPackage({ model: { io: { logits_output: 'out_logits' } } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.io.logits_output' });
    expect(err.message).toContain('names the output "out_logits"');
  });

  it('onnx-genai kv_inputs entry', async () => {
    const dir = await onnxGenaiPackage({
      model: {
        io: { kv_inputs: ['past_key_values.0.key', 'past.0.v', 'past_key_values.1.key', 'past_key_values.1.value'] },
      },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.io.kv_inputs[1]' });
    expect(err.message).toContain('names the layer 0 value past input "past.0.v"');
    expect(err.message).toContain('decoder.onnx has inputs:');
  });

  it('onnx-genai kv_outputs entry', async () => {
    const dir = await onnxGenaiPackage({
      model: { io: { kv_outputs: ['present.0.key', 'present.0.value', 'present.1.key', 'nope'] } },
    });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('present output (for "past_key_values.1.value") "nope"');
  });

  it('onnx-genai static cache port', async () => {
    const dir = await onnxGenaiPackage({
      model: {
        io: {
          kv_inputs: undefined,
          kv_outputs: undefined,
          static_cache: {
            write_indices_input: 'write_indices',
            kv_sequence_length_input: 'seqlens',
            key_cache_inputs: ['k'],
            value_cache_inputs: ['v'],
            key_cache_outputs: ['k2'],
            value_cache_outputs: ['v2'],
          },
        },
      },
    });
    const err = await refusal(loadModelSpec(dir), { field: 'model.io.static_cache.write_indices_input' });
    expect(err.message).toContain('names the static-cache control input "write_indices"');
  });

  it('genai decoder.inputs.input_ids override', async () => {
    const dir = await genaiPackage({ model: { decoder: { inputs: { input_ids: 'tokens' } } } });
    const err = await refusal(loadModelSpec(dir), {
      file: 'genai_config.json',
      field: 'model.decoder.inputs.input_ids',
    });
    expect(err.message).toContain('names the input "tokens"');
    expect(err.message).toContain('Set `model.decoder.inputs.input_ids` in genai_config.json to the right name');
  });

  it('genai graph lacking the default KV names', async () => {
    const dir = await genaiPackage({}, {}, { kv: 'combined' });
    const err = await refusal(loadModelSpec(dir), {
      file: 'genai_config.json',
      field: 'model.decoder.inputs.past_key_names',
    });
    expect(err.message).toContain(
      'no input of model.onnx matches the KV name templates "past_key_values.%d.key" / "past_key_values.%d.value" (onnxruntime-genai defaults)',
    );
    expect(err.message).toContain('past_0');
  });

  it('hf graph without input_ids', async () => {
    const dir = await hfPackage({}, { names: { ids: 'inputs_embeds' } });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx' });
    expect(err.message).toContain(
      'kvdesk expects the input "input_ids" (the layout\'s convention), but the graph has no such input',
    );
    // What to do reads as a sentence (it was "Set the graph (Optimum names…) to the right name").
    expect(err.message).toMatch(
      /\. Optimum's exports name that port "input_ids": re-export the model with `optimum-cli export onnx --task text-generation-with-past`, or use the graph that belongs to this package\.$/,
    );
  });

  it('onnx-genai metadata without model.io', async () => {
    const dir = await onnxGenaiPackage({ model: { io: undefined } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.io' });
    expect(err.message).toContain('kvdesk never guesses port names');
  });
});

describe('graph inputs kvdesk would not feed (onnxruntime refuses every request without them)', () => {
  it('onnx-genai: a misspelt attention_mask_input names the field to set and the misspelling', async () => {
    const dir = await onnxGenaiPackage({
      model: { io: { attention_mask_input: undefined, attention_mask_inputs: 'attention_mask' } },
    });
    const err = await refusal(loadModelSpec(dir), {
      file: 'inference_metadata.yaml',
      field: 'model.io.attention_mask_input',
    });
    expect(err.message).toBe(
      'decoder.onnx has the input "attention_mask" (int64 [batch, total_sequence_length]), which no port binding names, so kvdesk would not feed it and onnxruntime would refuse every request (it runs a graph only with all its inputs). ' +
        'Set `model.io.attention_mask_input` in inference_metadata.yaml to "attention_mask". inference_metadata.yaml has `model.io.attention_mask_inputs` (kvdesk reads `model.io.attention_mask_input`), which nothing reads: fix the spelling.',
    );
  });

  it('onnx-genai: KV inputs left out of kv_inputs name kv_inputs', async () => {
    const dir = await onnxGenaiPackage({
      model: {
        io: {
          kv_inputs: ['past_key_values.0.key', 'past_key_values.0.value'],
          kv_outputs: ['present.0.key', 'present.0.value'],
        },
      },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.io.kv_inputs' });
    expect(err.message).toContain(
      'has the inputs "past_key_values.1.key" (float32 [batch, 2, past_sequence_length, 8]), "past_key_values.1.value"',
    );
    expect(err.message).toContain('List it in `model.io.kv_inputs` of inference_metadata.yaml');
  });

  it('hf: an attention mask named attn_mask names the graph input and the Optimum name', async () => {
    const dir = await hfPackage({}, { names: { mask: 'attn_mask' } });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'input "attn_mask"' });
    expect(err.message).toContain('kvdesk feeds the attention mask as "attention_mask", the Optimum name');
    expect(err.message).toContain('or rename the input to "attention_mask"');
  });

  it("hf: KV inputs named past.N.key|value (not Optimum's) are refused, not run without a cache and without them", async () => {
    const dir = await hfPackage(
      {},
      {
        names: {
          pastKey: 'past.%d.key',
          pastValue: 'past.%d.value',
          presentKey: 'present.%d.key',
          presentValue: 'present.%d.value',
        },
      },
    );
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'input "past.0.key"' });
    expect(err.message).toContain('has the inputs "past.0.key"');
    expect(err.message).toContain('by the Optimum names past_key_values.N.key|value');
  });

  it('genai: a mask input the config does not name names model.decoder.inputs.attention_mask', async () => {
    const dir = await genaiPackage({}, {}, { names: { mask: 'attn_mask' } });
    const err = await refusal(loadModelSpec(dir), {
      file: 'genai_config.json',
      field: 'model.decoder.inputs.attention_mask',
    });
    expect(err.message).toContain('Set `model.decoder.inputs.attention_mask` in genai_config.json to "attn_mask".');
  });

  it('an input named in the config loads (the same genai graph, with the field set)', async () => {
    const dir = await genaiPackage(
      { model: { decoder: { inputs: { attention_mask: 'attn_mask' } } } },
      {},
      { names: { mask: 'attn_mask' } },
    );
    expect((await loadModelSpec(dir)).ports.attentionMask?.name).toBe('attn_mask');
  });
});

describe('KV cache consistency', () => {
  it('kv_inputs and kv_outputs of different lengths', async () => {
    const dir = await onnxGenaiPackage({ model: { io: { kv_outputs: ['present.0.key', 'present.0.value'] } } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.io.kv_outputs' });
    expect(err.message).toContain('lists 2 ports but `model.io.kv_inputs` lists 4');
  });

  it('an odd number of kv_inputs', async () => {
    const dir = await onnxGenaiPackage({
      model: {
        io: {
          kv_inputs: ['past_key_values.0.key', 'past_key_values.0.value', 'past_key_values.1.key'],
          kv_outputs: ['present.0.key', 'present.0.value', 'present.1.key'],
        },
      },
    });
    const err = await refusal(loadModelSpec(dir), { field: 'model.io.kv_inputs' });
    expect(err.message).toContain('an odd number');
  });

  it('a layer with a key but no value input', async () => {
    const graph = encodeGraph({
      inputs: [
        { name: 'input_ids', type: T.i64, shape: ['b', 's'] },
        { name: 'past_key_values.0.key', type: T.f32, shape: ['b', 2, 'past', 8] },
        { name: 'past_key_values.0.value', type: T.f32, shape: ['b', 2, 'past', 8] },
        { name: 'past_key_values.1.key', type: T.f32, shape: ['b', 2, 'past', 8] },
      ],
      outputs: [
        { name: 'logits', type: T.f32, shape: ['b', 's', 64] },
        { name: 'present.0.key', type: T.f32, shape: ['b', 2, 't', 8] },
        { name: 'present.0.value', type: T.f32, shape: ['b', 2, 't', 8] },
        { name: 'present.1.key', type: T.f32, shape: ['b', 2, 't', 8] },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx' });
    expect(err.message).toContain('layer 1 has no value KV input (found "past_key_values.1.key")');
  });

  it('a past input without its present output', async () => {
    const graph = encodeGraph({
      inputs: [
        { name: 'input_ids', type: T.i64, shape: ['b', 's'] },
        { name: 'past_key_values.0.key', type: T.f32, shape: ['b', 2, 'past', 8] },
        { name: 'past_key_values.0.value', type: T.f32, shape: ['b', 2, 'past', 8] },
      ],
      outputs: [
        { name: 'logits', type: T.f32, shape: ['b', 's', 64] },
        { name: 'present.0.key', type: T.f32, shape: ['b', 2, 't', 8] },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain(
      'The layer 0 value present output (for "past_key_values.0.value") "present.0.value" is not a graph output',
    );
  });

  it('present dtype differing from past dtype', async () => {
    const graph = encodeGraph({
      inputs: [
        { name: 'input_ids', type: T.i64, shape: ['b', 's'] },
        { name: 'past_key_values.0.key', type: T.f16, shape: ['b', 2, 'past', 8] },
        { name: 'past_key_values.0.value', type: T.f16, shape: ['b', 2, 'past', 8] },
      ],
      outputs: [
        { name: 'logits', type: T.f32, shape: ['b', 's', 64] },
        { name: 'present.0.key', type: T.f32, shape: ['b', 2, 't', 8] },
        { name: 'present.0.value', type: T.f16, shape: ['b', 2, 't', 8] },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain(
      'KV input "past_key_values.0.key" is float16 but its present output "present.0.key" is float32',
    );
  });
});

describe('KV geometry that cannot be derived', () => {
  it('symbolic heads and no config values: names the input and the fields to add', async () => {
    const dir = await hfPackage(
      { 'config.json': { model_type: 'llama', num_hidden_layers: 2, max_position_embeddings: 64, eos_token_id: 3 } },
      { kvHeads: 'kv_heads' },
    );
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'input "past_key_values.0.key"' });
    expect(err.message).toBe(
      'KV geometry cannot be derived: onnx/model.onnx input "past_key_values.0.key" has shape [batch, kv_heads, past_sequence_length, 8]; ' +
        'its KV-head axis is symbolic and the package config does not give it. ' +
        'Add `num_key_value_heads` and `head_dim` (or `hidden_size` and `num_attention_heads`) to config.json, or re-export the graph with fixed head dims.',
    );
  });

  it('symbolic head size in a genai package names the genai_config fields', async () => {
    const dir = await genaiPackage(
      { model: { decoder: { head_size: undefined, hidden_size: undefined } } },
      {},
      { headDim: 'head_size' },
    );
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('its head-size axis is symbolic');
    expect(err.message).toContain(
      'Add `model.decoder.num_key_value_heads` and `model.decoder.head_size` to genai_config.json',
    );
  });

  it('symbolic head dims in an onnx-genai package name model.attention', async () => {
    const dir = await onnxGenaiPackage({}, {}, { kvHeads: 'h', headDim: 'd' });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('`model.attention.num_kv_heads` and `model.attention.head_dim`');
  });

  it('a past input with no declared shape', async () => {
    const graph = encodeGraph({
      inputs: [
        { name: 'input_ids', type: T.i64, shape: ['b', 's'] },
        { name: 'past_key_values.0.key', type: T.f32 },
        { name: 'past_key_values.0.value', type: T.f32 },
      ],
      outputs: [
        { name: 'logits', type: T.f32, shape: ['b', 's', 64] },
        { name: 'present.0.key', type: T.f32 },
        { name: 'present.0.value', type: T.f32 },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain(
      'KV geometry cannot be derived: onnx/model.onnx input "past_key_values.0.key" has shape (no declared shape)',
    );
  });

  it('a fully fixed past input', async () => {
    const graph = encodeGraph({
      inputs: [
        { name: 'input_ids', type: T.i64, shape: ['b', 's'] },
        { name: 'past_key_values.0.key', type: T.f32, shape: [2, 2, 16, 8] },
        { name: 'past_key_values.0.value', type: T.f32, shape: [2, 2, 16, 8] },
      ],
      outputs: [
        { name: 'logits', type: T.f32, shape: ['b', 's', 64] },
        { name: 'present.0.key', type: T.f32, shape: [2, 2, 16, 8] },
        { name: 'present.0.value', type: T.f32, shape: [2, 2, 16, 8] },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('no axis is symbolic');
  });
});

describe('KV dtype must be float32 or float16 (bfloat16 ports: onnxruntime-node cannot open the graph)', () => {
  for (const [type, name] of [
    [T.i8, 'int8'],
    [T.f64, 'float64'],
    [T.u8, 'uint8'],
  ] as const) {
    it(`refuses ${name} KV`, async () => {
      const dir = await hfPackage({}, { kvType: type });
      const err = await refusal(loadModelSpec(dir), {
        file: 'onnx/model.onnx',
        field: 'input "past_key_values.0.key"',
      });
      expect(err.message).toBe(
        `onnx/model.onnx: KV input "past_key_values.0.key" has element type ${name}; kvdesk runs float32 and float16 KV caches only. Use a variant of the model exported with a float KV cache.`,
      );
    });
  }

  it('refuses bfloat16 KV, saying why (onnxruntime-node) and what to use instead', async () => {
    const dir = await hfPackage({}, { kvType: T.bf16 });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'input "past_key_values.0.key"' });
    expect(err.message).toBe(
      'onnx/model.onnx: input "past_key_values.0.key", input "past_key_values.0.value", input "past_key_values.1.key", input "past_key_values.1.value", and 4 more are bfloat16. ' +
        'kvdesk runs models with onnxruntime-node, which cannot open a graph whose inputs or outputs are bfloat16 (it refuses it with "Unsupported data type: 16"; bfloat16 inside the graph is fine). ' +
        'Use a float16 or float32 export of this model (e.g. optimum-cli export onnx --dtype fp16), or one whose bfloat16 ports are cast to float16 or float32 inside the graph.',
    );
    expect(err.detail?.ports).toHaveLength(8);
  });

  it('refuses a graph whose only bfloat16 port is an output kvdesk does not read', async () => {
    const graph = encodeGraph({
      inputs: [{ name: 'input_ids', type: T.i64, shape: ['batch', 'seq'] }],
      outputs: [
        { name: 'logits', type: T.f32, shape: ['batch', 'seq', 64] },
        { name: 'hidden', type: T.bf16, shape: ['batch', 'seq', 8] },
      ],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'output "hidden"' });
    expect(err.message).toMatch(/^onnx\/model\.onnx: output "hidden" is bfloat16\. /);
  });

  it('refuses a float input_ids port', async () => {
    const dir = await hfPackage({}, { idsType: T.f32 });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('input "input_ids" has element type float32; kvdesk binds it only as int32 or int64');
  });
});

describe('files that are not ONNX models', () => {
  it('text renamed to model.onnx', async () => {
    const dir = await hfPackage({ 'onnx/model.onnx': 'This is a README, not a model.\n' });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx' });
    expect(err.message).toMatch(/^onnx\/model\.onnx is not a valid ONNX model: /);
  });

  it('a damaged graph kvdesk picked itself names the other variants and how to pick one', async () => {
    const full = decoderGraph({ layers: 4 });
    const dir = await hfPackage({
      'onnx/model.onnx': null,
      'onnx/model_q4.onnx': full.subarray(0, full.length - 40),
      'onnx/model_fp16.onnx': decoderGraph({ kvType: T.f16 }),
    });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model_q4.onnx' });
    expect(err.message).toMatch(/^onnx\/model_q4\.onnx is not a valid ONNX model: .*truncated/);
    expect(err.message).toContain(
      'kvdesk picked onnx/model_q4.onnx (q4) itself, as the package has no plain model.onnx; it also has fp16 (onnx/model_fp16.onnx). ' +
        'Pick one of those: `--variant fp16` (inspect, generate, chat, serve --model), or remove or replace onnx/model_q4.onnx so that another is picked.',
    );
    expect(err.detail).toMatchObject({ picked: 'onnx/model_q4.onnx', candidates: ['onnx/model_fp16.onnx'] });
    // Picked as it says, the package loads; asked for by name, the damaged one is refused without the advice.
    expect((await loadModelSpec(dir, { graphVariant: 'fp16' })).graphPath).toMatch(/model_fp16\.onnx$/);
    const asked = await refusal(loadModelSpec(dir, { graphVariant: 'q4' }), { file: 'onnx/model_q4.onnx' });
    expect(asked.message).not.toContain('kvdesk picked');
  });

  it('a truncated protobuf', async () => {
    const full = decoderGraph({ layers: 4 });
    const dir = await genaiPackage({}, { 'model.onnx': full.subarray(0, full.length - 40) });
    const err = await refusal(loadModelSpec(dir), { file: 'model.onnx' });
    expect(err.message).toContain('model.onnx is not a valid ONNX model');
    expect(err.message).toContain('truncated');
  });
});

describe('external weights', () => {
  const withData = (length: number, location = 'model.onnx.data'): Uint8Array =>
    decoderGraph({
      initializers: [
        { name: 'embed', dims: [256], external: { location, offset: 0, length: 1024 } },
        { name: 'lm_head', dims: [length / 4], external: { location, offset: 1024, length } },
      ],
    });

  it('refuses external data shorter than the graph says, naming both files', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': withData(4096), 'model.onnx.data': new Uint8Array(3000) });
    const err = await refusal(loadModelSpec(dir), { file: 'model.onnx.data' });
    expect(err.message).toBe(
      'model.onnx.data is truncated: decoder.onnx stores initializer "lm_head" at bytes 1024..5120 of it, but model.onnx.data has only 2.9 KiB (3000 bytes). ' +
        'Re-download or re-export model.onnx.data (and decoder.onnx) completely.',
    );
    expect(err.detail).toMatchObject({
      graphFile: 'decoder.onnx',
      dataFile: 'model.onnx.data',
      expectedBytes: 5120,
      actualBytes: 3000,
    });
  });

  it('refuses external data one byte short', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': withData(4096), 'model.onnx.data': new Uint8Array(5119) });
    const err = await refusal(loadModelSpec(dir), { file: 'model.onnx.data' });
    expect(err.detail).toMatchObject({ expectedBytes: 5120, actualBytes: 5119 });
  });

  it('accepts external data of exactly the needed size', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': withData(4096), 'model.onnx.data': new Uint8Array(5120) });
    const spec = await loadModelSpec(dir);
    expect(spec.weightsBytes).toBe((await fs.stat(path.join(dir, 'decoder.onnx'))).size + 5120);
  });

  it('refuses a missing external data file', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': withData(4096) });
    const err = await refusal(loadModelSpec(dir), {
      file: 'decoder.onnx',
      field: 'initializer "embed" external_data.location',
    });
    expect(err.message).toContain('names "model.onnx.data", but model.onnx.data does not exist in the package');
  });

  it('refuses an external data location with ..', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': withData(4096, '../weights.bin') });
    const err = await refusal(loadModelSpec(dir), { file: 'decoder.onnx' });
    expect(err.message).toContain('contains ".."');
  });

  it('refuses an absolute external data location', async () => {
    const dir = await onnxGenaiPackage({}, { 'decoder.onnx': withData(4096, '/etc/passwd') });
    const err = await refusal(loadModelSpec(dir));
    expect(err.message).toContain('is the absolute path "/etc/passwd"');
  });
});

describe('paths in configs must stay inside the package', () => {
  it('absolute decoder.filename', async () => {
    const dir = await genaiPackage({ model: { decoder: { filename: '/tmp/model.onnx' } } });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'model.decoder.filename' });
    expect(err.message).toBe(
      'genai_config.json: `model.decoder.filename` is the absolute path "/tmp/model.onnx". Paths in a package must be relative to the package folder; write the file name relative to it.',
    );
  });

  it('Windows-absolute decoder.filename', async () => {
    const dir = await genaiPackage({ model: { decoder: { filename: 'C:\\models\\model.onnx' } } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.decoder.filename' });
    expect(err.message).toContain('is the absolute path');
  });

  it('decoder.filename with ..', async () => {
    const dir = await genaiPackage({ model: { decoder: { filename: 'sub/../../model.onnx' } } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.decoder.filename' });
    expect(err.message).toContain(
      'is "sub/../../model.onnx", which contains "..". Paths in a package may not leave the package folder',
    );
  });

  it('decoder.filename resolving through a symlink outside the package', async () => {
    const outside = await tempPackageDir('outside');
    await fs.writeFile(path.join(outside, 'model.onnx'), decoderGraph());
    const dir = await genaiPackage({ model: { decoder: { filename: 'linked/model.onnx' } } });
    await fs.symlink(outside, path.join(dir, 'linked'));
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'model.decoder.filename' });
    expect(err.message).toContain('linked/model.onnx resolves through a symlink to');
    expect(err.message).toContain('outside the package folder');
  });

  it('tokenizer.json symlinked outside the package', async () => {
    const outside = await tempPackageDir('outside');
    await fs.writeFile(path.join(outside, 'tokenizer.json'), tokenizerJson());
    const dir = await hfPackage({ 'tokenizer.json': null });
    await fs.symlink(path.join(outside, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toContain('outside the package folder');
  });

  it('a dangling symlink', async () => {
    const dir = await hfPackage({ 'tokenizer.json': null });
    await fs.symlink(path.join(dir, 'gone.json'), path.join(dir, 'tokenizer.json'));
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toContain('is a symlink to a file that does not exist');
  });
});

describe('missing required fields', () => {
  it('genai model.context_length', async () => {
    const dir = await genaiPackage({ model: { context_length: undefined } });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'model.context_length' });
    expect(err.message).toMatch(/^genai_config\.json: `model\.context_length` is missing\. Add the context window/);
  });

  it('genai model.eos_token_id', async () => {
    const dir = await genaiPackage({ model: { eos_token_id: undefined } });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'model.eos_token_id' });
    expect(err.message).toContain('`model.eos_token_id` is missing');
  });

  it('genai model.decoder.filename', async () => {
    const dir = await genaiPackage({ model: { decoder: { filename: undefined } } });
    await refusal(loadModelSpec(dir), { field: 'model.decoder.filename' });
  });

  it('onnx-genai model.max_sequence_length', async () => {
    const dir = await onnxGenaiPackage({ model: { max_sequence_length: undefined } });
    const err = await refusal(loadModelSpec(dir), {
      file: 'inference_metadata.yaml',
      field: 'model.max_sequence_length',
    });
    expect(err.message).toContain('`model.max_sequence_length` is missing');
  });

  it('onnx-genai eos when neither metadata nor tokenizer names one', async () => {
    const dir = await onnxGenaiPackage({}, { 'tokenizer.json': tokenizerJson(64, { '<pad>': 0, '<unk>': 1 }) });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.eos_token_id' });
    expect(err.message).toContain('No end-of-sequence token is known');
  });

  it('onnx-genai token_input', async () => {
    const dir = await onnxGenaiPackage({ model: { io: { token_input: undefined } } });
    await refusal(loadModelSpec(dir), { field: 'model.io.token_input' });
  });

  it('hf max_position_embeddings', async () => {
    const dir = await hfPackage({
      'config.json': { model_type: 'llama', num_hidden_layers: 2, num_key_value_heads: 2, eos_token_id: 3 },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'config.json', field: 'max_position_embeddings' });
    expect(err.message).toContain('also reads n_positions');
  });

  it('hf eos nowhere', async () => {
    const dir = await hfPackage({
      'config.json': { model_type: 'llama', max_position_embeddings: 64 },
      'generation_config.json': null,
      'tokenizer_config.json': { eos_token: null },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'generation_config.json', field: 'eos_token_id' });
    expect(err.message).toContain('No end-of-sequence token is known');
  });
});

describe('a file of the package that is not a file', () => {
  it('a folder named tokenizer.json, a pipe named config.json: said so (not "missing")', async () => {
    const dir = await hfPackage({ 'tokenizer.json': null });
    await fs.mkdir(path.join(dir, 'tokenizer.json'));
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toBe("tokenizer.json is a folder, not a file. Put the package's tokenizer.json there instead.");
    if (process.platform !== 'win32') {
      const piped = await hfPackage({ 'config.json': null });
      execFileSync('mkfifo', [path.join(piped, 'config.json')]);
      const err2 = await refusal(loadModelSpec(piped), { file: 'config.json' });
      expect(err2.message).toContain('config.json is a named pipe (FIFO), not a file');
    }
  });
});

describe('wrongly typed fields', () => {
  it('a number too large for a double (1e400 reads as infinity) is said so, not "null"', async () => {
    const dir = await hfPackage({
      'config.json':
        '{"model_type": "llama", "num_hidden_layers": 2, "num_key_value_heads": 2, "eos_token_id": 3, "max_position_embeddings": 1e400}',
    });
    const err = await refusal(loadModelSpec(dir), { file: 'config.json', field: 'max_position_embeddings' });
    expect(err.message).toContain('is a number too large to hold (infinity)');
    expect(err.message).not.toContain('is null');
  });

  it('context_length as a string', async () => {
    const dir = await genaiPackage({ model: { context_length: '4k' } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.context_length' });
    expect(err.message).toBe(
      'genai_config.json: `model.context_length` is "4k", not an integer. Write an integer there.',
    );
  });

  it('a zero context length', async () => {
    const dir = await onnxGenaiPackage({ model: { max_sequence_length: 0 } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.max_sequence_length' });
    expect(err.message).toContain('is 0, but must be at least 1');
  });

  it('top_p above 1', async () => {
    const dir = await hfPackage({ 'generation_config.json': { eos_token_id: 3, top_p: 1.5 } });
    const err = await refusal(loadModelSpec(dir), { file: 'generation_config.json', field: 'top_p' });
    expect(err.message).toContain('is 1.5, but must be between 0 and 1');
  });

  it('eos_token_id as a list with a string', async () => {
    const dir = await genaiPackage({ model: { eos_token_id: [1, 'two'] } });
    await refusal(loadModelSpec(dir), { field: 'model.eos_token_id[1]' });
  });

  it('a KV name template without %d', async () => {
    const dir = await genaiPackage({ model: { decoder: { inputs: { past_key_names: 'past_key' } } } });
    const err = await refusal(loadModelSpec(dir), { field: 'model.decoder.inputs.past_key_names' });
    expect(err.message).toContain('does not contain exactly one %d');
  });

  it('tokenizer_config eos_token not in tokenizer.json', async () => {
    const dir = await onnxGenaiPackage({}, { 'tokenizer_config.json': { eos_token: '<|im_end|>' } });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer_config.json', field: 'eos_token' });
    expect(err.message).toContain('is "<|im_end|>", which tokenizer.json does not contain');
  });
});

describe('token id fields', () => {
  it('reads pad_token_id -1 (older Llama conversions) as no pad id, with a warning', async () => {
    const dir = await hfPackage({ 'config.json': { ...HF_CONFIG, pad_token_id: -1 } });
    const spec = await loadModelSpec(dir);
    expect(spec.padTokenId).toBeUndefined();
    expect(spec.warnings).toContainEqual(expect.stringContaining('config.json: `pad_token_id` is -1'));
    // generation_config.json's -1 falls through to config.json's id, as an absent one would.
    const both = await hfPackage({
      'config.json': { ...HF_CONFIG, pad_token_id: 0 },
      'generation_config.json': { eos_token_id: 3, pad_token_id: -1 },
    });
    expect((await loadModelSpec(both)).padTokenId).toBe(0);
    const genai = await loadModelSpec(await genaiPackage({ model: { pad_token_id: -1 } }));
    expect(genai.padTokenId).toBeUndefined();
    expect(genai.warnings).toContainEqual(expect.stringContaining('`model.pad_token_id` is -1'));
  });

  it('refuses a pad_token_id that is no integer, without offering a list', async () => {
    const dir = await hfPackage({ 'config.json': { ...HF_CONFIG, pad_token_id: [0, 1] } });
    const err = await refusal(loadModelSpec(dir), { file: 'config.json', field: 'pad_token_id' });
    expect(err.message).toBe(
      'config.json: `pad_token_id` is a list, not a token id (one integer; null or -1 for none). Write a token id (one integer; null or -1 for none) there.',
    );
  });

  it('names the bad element of an eos_token_id list and its value', async () => {
    const dir = await hfPackage({ 'generation_config.json': { eos_token_id: [3, -1] } });
    const err = await refusal(loadModelSpec(dir), { file: 'generation_config.json', field: 'eos_token_id[1]' });
    expect(err.message).toBe(
      "generation_config.json: `eos_token_id[1]` is -1, not a token id (an integer ≥ 0). Write the token's id there, or remove it from the list.",
    );
    const text = await genaiPackage({ model: { eos_token_id: [3, '4'] } });
    const err2 = await refusal(loadModelSpec(text), { field: 'model.eos_token_id[1]' });
    expect(err2.message).toContain('`model.eos_token_id[1]` is "4", not a token id');
  });
});

describe('token ids outside the vocabulary', () => {
  it('genai eos_token_id ≥ vocab_size', async () => {
    const dir = await genaiPackage({ model: { eos_token_id: [3, 64] } });
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'model.eos_token_id' });
    expect(err.message).toBe(
      "genai_config.json: `model.eos_token_id` is 64, outside the model's vocabulary of 64 tokens (valid ids 0..63). Fix the token id (or the vocabulary size) in the package config.",
    );
    expect(err.detail).toMatchObject({ ids: [64], vocabSize: 64 });
  });

  it('genai pad_token_id ≥ vocab_size', async () => {
    const dir = await genaiPackage({ model: { pad_token_id: 70 } });
    await refusal(loadModelSpec(dir), { field: 'model.pad_token_id' });
  });

  it('hf generation_config bos_token_id ≥ vocab', async () => {
    const dir = await hfPackage({ 'generation_config.json': { eos_token_id: 3, bos_token_id: 100 } });
    const err = await refusal(loadModelSpec(dir), { file: 'generation_config.json', field: 'bos_token_id' });
    expect(err.message).toContain("is 100, outside the model's vocabulary of 64");
  });

  it('onnx-genai metadata eos_token_id ≥ the logits vocabulary', async () => {
    const dir = await onnxGenaiPackage({ model: { eos_token_id: 99 } });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml', field: 'model.eos_token_id' });
    expect(err.message).toContain('vocabulary of 64 tokens');
  });
});
