import { promises as fs, realpathSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import type { GraphPort, KvTensorSpec, ModelSpec } from '../../../src/shared/model-spec';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';

const made: string[] = [];
afterAll(async () => {
  await Promise.all(made.map((d) => fs.rm(d, { recursive: true, force: true })));
});

function tensors(spec: ModelSpec): KvTensorSpec[] {
  expect(spec.kv.kind).toBe('dynamic');
  return spec.kv.kind === 'dynamic' ? spec.kv.tensors : [];
}

const ONNX_GENAI = [
  'tiny-llm',
  'tiny-llm-explicit-io',
  'tiny-reasoning',
  'tiny-llm-sharedbuffer',
  'tiny-llm-scatter',
  'tiny-native-engine',
];

describe.skipIf(!haveFixtures)(`fixture packages${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`, () => {
  it('tiny-llm: onnx-genai, 1 layer, 2 KV heads × 8, f32 → bpt 128, context 16, vocab 32', async () => {
    const spec = await loadModelSpec(fixture('onnx-genai/tiny-llm'));
    expect(spec).toMatchObject({
      id: 'tiny-llm',
      layout: 'onnx-genai',
      numLayers: 1,
      bpt: 128,
      contextLength: 16,
      vocabSize: 32,
      eosTokenIds: [3],
      bosTokenId: 2,
      padTokenId: 0,
      backends: ['CPUExecutionProvider'],
      warnings: [],
    });
    expect(spec.ports.inputIds).toEqual({ name: 'input_ids', dtype: 'int64', shape: ['batch', 'sequence_len'] });
    expect(spec.ports.logits).toEqual({ name: 'logits', dtype: 'float32', shape: ['batch', 'sequence_len', 32] });
    expect(
      tensors(spec).map((t) => [
        t.role,
        t.past,
        t.present,
        t.kvHeads,
        t.headDim,
        t.batchAxis,
        t.seqAxis,
        t.bytesPerToken,
      ]),
    ).toEqual([
      ['key', 'past_key_values.0.key', 'present.0.key', 2, 8, 0, 2, 64],
      ['value', 'past_key_values.0.value', 'present.0.value', 2, 8, 0, 2, 64],
    ]);
    expect(spec.weightsBytes).toBe((await fs.stat(fixture('onnx-genai/tiny-llm/model.onnx'))).size);
  });

  it('tiny-llm-explicit-io: every port comes from model.io', async () => {
    const spec = await loadModelSpec(fixture('onnx-genai/tiny-llm-explicit-io'));
    expect(spec.bpt).toBe(128);
    expect([
      spec.ports.inputIds.name,
      spec.ports.attentionMask?.name,
      spec.ports.positionIds?.name,
      spec.ports.logits.name,
    ]).toEqual(['tokens', 'attn_mask_port', 'pos_port', 'out_logits']);
    expect(tensors(spec).map((t) => `${t.role}:${t.past}->${t.present}`)).toEqual([
      'key:cache_k_in.0->cache_k_out.0',
      'value:cache_v_in.0->cache_v_out.0',
    ]);
  });

  it('tiny-reasoning: chat template from tokenizer_config.json', async () => {
    const spec = await loadModelSpec(fixture('onnx-genai/tiny-reasoning'));
    expect(spec.chatTemplate).toContain('<think>');
    // The loader resolves symlinks when it confines paths, so compare real paths.
    expect(spec.tokenizer.tokenizerConfig).toBe(
      realpathSync(fixture('onnx-genai/tiny-reasoning/tokenizer_config.json')),
    );
    expect(spec.bpt).toBe(128);
  });

  it('tiny-llm-sharedbuffer: same I/O as tiny-llm', async () => {
    const spec = await loadModelSpec(fixture('onnx-genai/tiny-llm-sharedbuffer'));
    expect(spec.bpt).toBe(128);
    expect(tensors(spec)).toHaveLength(2);
  });

  it('tiny-llm-scatter: static cache [batch, 16, 16]', async () => {
    const spec = await loadModelSpec(fixture('onnx-genai/tiny-llm-scatter'));
    expect(spec.kv).toEqual({
      kind: 'static',
      cache: {
        writeIndicesInput: 'write_indices',
        kvSequenceLengthInput: 'nonpad_kv_seqlen',
        writeIndicesDtype: 'int64',
        kvSequenceLengthDtype: 'int64',
        keyCacheInputs: ['key_cache.0'],
        valueCacheInputs: ['value_cache.0'],
        keyCacheOutputs: ['updated_key_cache.0'],
        valueCacheOutputs: ['updated_value_cache.0'],
        shape: ['batch', 16, 16],
        dtype: 'float32',
        seqAxis: 1,
      },
    });
    expect(spec).toMatchObject({ bpt: 128, contextLength: 16, vocabSize: 32, numLayers: 1, eosTokenIds: [3] });
    expect(spec.ports.attentionMask).toBeUndefined();
  });

  it('tiny-native-engine: logits [1,1,2] make the vocabulary 2; KV [batch,1,past,1]', async () => {
    const spec = await loadModelSpec(fixture('onnx-genai/tiny-native-engine'));
    expect(spec.vocabSize).toBe(2);
    expect(spec.bpt).toBe(8);
    expect(tensors(spec)[0]).toMatchObject({ kvHeads: 1, headDim: 1, batchAxis: 0, seqAxis: 2, bytesPerToken: 4 });
    // eos 3 comes from tokenizer.json, not a config field, so it loads with a warning.
    expect(spec.eosTokenIds).toEqual([3]);
    expect(spec.warnings.some((w) => w.startsWith('eos token id 3'))).toBe(true);
  });

  it('tiny-random-gpt2-fp32: genai_config, combined KV, int32 ports, bpt 1280, tokenizer larger than vocab', async () => {
    const spec = await loadModelSpec(fixture('onnxruntime-genai/tiny-random-gpt2-fp32'));
    expect(spec).toMatchObject({
      id: 'tiny-random-gpt2-fp32',
      layout: 'ort-genai',
      modelType: 'gpt2',
      numLayers: 5,
      // 5 layers × 2 (K/V) × 4 heads × 8 × 4 bytes
      bpt: 1280,
      contextLength: 512,
      vocabSize: 1000,
      eosTokenIds: [98],
      bosTokenId: 98,
      padTokenId: 98,
      backends: ['CPUExecutionProvider'],
      sessionOptions: { 'session.use_device_allocator_for_initializers': '0', provider_options: [] },
    });
    for (const p of [spec.ports.inputIds, spec.ports.attentionMask, spec.ports.positionIds])
      expect(p?.dtype).toBe('int32');
    expect(
      tensors(spec).map((t) => [
        t.layer,
        t.role,
        t.past,
        t.present,
        t.kvHeads,
        t.headDim,
        t.batchAxis,
        t.seqAxis,
        t.bytesPerToken,
      ]),
    ).toEqual([0, 1, 2, 3, 4].map((i) => [i, 'combined', `past_${i}`, `present_${i}`, 4, 8, 1, 3, 256]));
    expect(
      spec.warnings.some((w) => w.includes('tokenizer.json knows 50295 tokens') && w.includes('vocabulary is 1000')),
    ).toBe(true);
    expect(spec.tokenizer.eosToken).toBe('<|endoftext|>');
  });

  it("a Hugging Face / Optimum package built around tiny-llm's graph", async () => {
    const dir = path.join(await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-hf-fixture-')), 'tiny-hf');
    made.push(path.dirname(dir));
    await fs.mkdir(path.join(dir, 'onnx'), { recursive: true });
    await fs.copyFile(fixture('onnx-genai/tiny-llm/model.onnx'), path.join(dir, 'onnx/model.onnx'));
    await fs.copyFile(fixture('onnx-genai/tiny-llm/tokenizer.json'), path.join(dir, 'tokenizer.json'));
    await fs.writeFile(
      path.join(dir, 'config.json'),
      JSON.stringify({
        model_type: 'gpt2',
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 2,
        hidden_size: 16,
        max_position_embeddings: 16,
        vocab_size: 32,
      }),
    );
    await fs.writeFile(
      path.join(dir, 'generation_config.json'),
      JSON.stringify({ eos_token_id: 3, bos_token_id: 2, do_sample: false }),
    );
    await fs.writeFile(
      path.join(dir, 'tokenizer_config.json'),
      JSON.stringify({ bos_token: '<bos>', eos_token: '<eos>', chat_template: [{ name: 'default', template: 'x' }] }),
    );
    const spec = await loadModelSpec(dir);
    expect(spec).toMatchObject({
      layout: 'hf-optimum',
      id: 'tiny-hf',
      bpt: 128,
      contextLength: 16,
      vocabSize: 32,
      eosTokenIds: [3],
      bosTokenId: 2,
      chatTemplate: 'x',
      search: { doSample: false },
    });
    expect(tensors(spec).map((t) => t.past)).toEqual(['past_key_values.0.key', 'past_key_values.0.value']);
  });

  describe('the streaming reader agrees with onnxruntime on every fixture graph', () => {
    const dirs = [...ONNX_GENAI.map((n) => `onnx-genai/${n}`), 'onnxruntime-genai/tiny-random-gpt2-fp32'];
    for (const rel of dirs) {
      it(rel, async () => {
        const spec = await loadModelSpec(fixture(rel));
        const session = await ort.InferenceSession.create(spec.graphPath);
        try {
          const byName = new Map<string, { type: string; shape: Array<number | string> }>();
          for (const m of [...session.inputMetadata, ...session.outputMetadata]) {
            if (m.isTensor)
              byName.set(m.name, { type: m.type, shape: m.shape.map((d) => (typeof d === 'number' ? d : String(d))) });
          }
          const ports: GraphPort[] = [spec.ports.inputIds, spec.ports.logits];
          if (spec.ports.attentionMask) ports.push(spec.ports.attentionMask);
          if (spec.ports.positionIds) ports.push(spec.ports.positionIds);
          for (const p of ports)
            expect({ name: p.name, type: p.dtype, shape: p.shape }).toEqual({ name: p.name, ...byName.get(p.name) });
          if (spec.kv.kind === 'dynamic') {
            for (const t of spec.kv.tensors) {
              expect(byName.get(t.past)).toEqual({ type: t.dtype, shape: t.shape });
              expect(session.outputNames).toContain(t.present);
            }
          }
          const bound = new Set([
            ...ports.filter((p) => p !== spec.ports.logits).map((p) => p.name),
            ...(spec.kv.kind === 'dynamic' ? spec.kv.tensors.map((t) => t.past) : []),
          ]);
          if (spec.kv.kind === 'static') {
            const c = spec.kv.cache;
            for (const n of [c.writeIndicesInput, c.kvSequenceLengthInput, ...c.keyCacheInputs, ...c.valueCacheInputs])
              bound.add(n);
          }
          expect([...session.inputNames].sort()).toEqual([...bound].sort());
        } finally {
          await session.release();
        }
      });
    }
  });
});
