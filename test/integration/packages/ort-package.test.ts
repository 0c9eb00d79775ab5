/**
 * ORT model packages made from real models: the generated default model
 * (always present) and the tiny-llm fixture (when the shared fixtures are).
 * Each package has a CPU and a CUDA variant sharing one tokenizer through
 * `sha256:`; the variant chosen with this machine's real backend report must
 * run and produce exactly what the model produces loaded on its own.
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BackendReport, detectBackends, usableProviders } from '../../../src/main/backends';
import { RunnerService } from '../../../src/main/host/runner-service';
import { providerShortName } from '../../../src/main/packages/execution-providers';
import { loadModelSpec } from '../../../src/main/packages/index';
import type { ModelSpec } from '../../../src/shared/model-spec';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { rejection } from '../../helpers/rejection';

const CPU = 'CPUExecutionProvider';
const CUDA = 'CUDAExecutionProvider';

const made: string[] = [];
const hosts: RunnerService[] = [];
afterAll(async () => {
  await Promise.all(hosts.map((h) => h.close()));
  await Promise.all(made.map((d) => fs.rm(d, { recursive: true, force: true })));
});

let report: BackendReport[];
beforeAll(async () => {
  report = await detectBackends();
});

/** ONNX Runtime's directory digest of in-memory files (independent of the loader's implementation). */
function dirDigest(files: Record<string, Buffer>): string {
  const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
  const text = Object.keys(files)
    .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
    .map((p) => `${sha(files[p] as Buffer)}  ${p}\n`)
    .join('');
  return sha(text);
}

async function write(dir: string, rel: string, content: Buffer | string | object): Promise<void> {
  const abs = path.join(dir, rel);
  await fs.mkdir(path.dirname(abs), { recursive: true });
  await fs.writeFile(
    abs,
    Buffer.isBuffer(content) || typeof content === 'string' ? content : JSON.stringify(content, null, 2),
  );
}

/**
 * The default model as an ORT package: a CPU variant in onnxruntime-genai form
 * (tokenizer from the shared asset) and a CUDA variant in its original
 * Hugging Face form.
 */
async function defaultModelPackage(
  cpuSessionOptions: Record<string, string> = { 'session.intra_op_thread_count': '1' },
): Promise<{ dir: string; tokenizerHex: string }> {
  const parent = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-ort-int-'));
  made.push(parent);
  const dir = path.join(parent, 'default-ort');
  const src = (rel: string) => fs.readFile(path.join(defaultModelDir, rel));
  const tokenizer = {
    'tokenizer.json': await src('tokenizer.json'),
    'tokenizer_config.json': await src('tokenizer_config.json'),
  };
  const tokenizerHex = dirDigest(tokenizer);
  for (const [name, bytes] of Object.entries(tokenizer))
    await write(dir, `shared_assets/sha256-${tokenizerHex}/${name}`, bytes);
  const config = JSON.parse((await src('config.json')).toString('utf8')) as Record<string, number>;
  // generation_config.json is what the HF layout takes eos from (it may list several).
  const generation = JSON.parse((await src('generation_config.json')).toString('utf8')) as { eos_token_id?: unknown };
  await write(dir, 'cpu/model.onnx', await src('onnx/model.onnx'));
  await write(dir, 'cpu/genai_config.json', {
    model: {
      type: 'llama',
      context_length: config.max_position_embeddings,
      vocab_size: config.vocab_size,
      eos_token_id: generation.eos_token_id ?? config.eos_token_id,
      bos_token_id: config.bos_token_id,
      pad_token_id: config.pad_token_id,
      decoder: {
        filename: 'model.onnx',
        num_hidden_layers: config.num_hidden_layers,
        num_key_value_heads: config.num_key_value_heads,
        head_size: config.head_dim,
      },
    },
    tokenizer_dir: `sha256:${tokenizerHex}`,
  });
  for (const rel of [
    'config.json',
    'generation_config.json',
    'tokenizer.json',
    'tokenizer_config.json',
    'onnx/model.onnx',
  ]) {
    await write(dir, `cuda/${rel}`, await src(rel));
  }
  await write(dir, 'manifest.json', {
    schema_version: '1.0',
    package_name: 'default-ort',
    components: {
      model: {
        variants: {
          cuda: {
            ep: CUDA,
            device: 'gpu',
            additional_metadata: { precision: 'fp32' },
            executor_info: { ort: { model_file: 'onnx/model.onnx' } },
          },
          cpu: {
            ep: CPU,
            device: 'cpu',
            additional_metadata: { precision: 'fp32' },
            executor_info: {
              ort: { model_file: 'model.onnx', session_options: cpuSessionOptions },
            },
          },
        },
      },
    },
  });
  return { dir, tokenizerHex };
}

/** Logits of one step from `ids` with an empty cache, run with the spec's provider. */
async function firstLogits(spec: ModelSpec, ids: number[]): Promise<Float32Array> {
  const backend = providerShortName(spec.executionProvider ?? CPU) ?? 'cpu';
  const session = await ort.InferenceSession.create(spec.graphPath, { executionProviders: [backend] });
  try {
    const n = ids.length;
    const i64 = (values: number[]) =>
      new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), [1, values.length]);
    const feeds: Record<string, ort.Tensor> = { [spec.ports.inputIds.name]: i64(ids) };
    if (spec.ports.attentionMask) feeds[spec.ports.attentionMask.name] = i64(ids.map(() => 1));
    if (spec.ports.positionIds) feeds[spec.ports.positionIds.name] = i64(ids.map((_, i) => i));
    if (spec.kv.kind === 'dynamic') {
      for (const t of spec.kv.tensors) {
        const shape = t.shape.map((d, axis) => (axis === t.batchAxis ? 1 : axis === t.seqAxis ? 0 : (d as number)));
        feeds[t.past] = new ort.Tensor('float32', new Float32Array(0), shape);
      }
    }
    const out = await session.run(feeds);
    const logits = out[spec.ports.logits.name];
    expect(logits?.dims).toEqual([1, n, spec.vocabSize]);
    return logits?.data as Float32Array;
  } finally {
    await session.release();
  }
}

describe('an ORT package of the generated default model', () => {
  it('chooses the variant for the best backend this machine really has, CPU here unless CUDA works', async () => {
    const { dir, tokenizerHex } = await defaultModelPackage();
    const available = usableProviders(report);
    expect(available).toContain(CPU);
    const spec = await loadModelSpec(dir, { availableBackends: available });
    const cudaWorks = available.includes(CUDA);
    expect(spec.selectedVariant).toBe(cudaWorks ? 'cuda' : 'cpu');
    expect(spec.executionProvider).toBe(cudaWorks ? CUDA : CPU);
    expect(spec.variants?.map((v) => [v.name, v.ep, v.usable, v.layout])).toEqual([
      ['cuda', CUDA, cudaWorks, 'hf-optimum'],
      ['cpu', CPU, true, 'ort-genai'],
    ]);
    // Both variants are the same model: the same figures whichever was chosen.
    const direct = await loadModelSpec(defaultModelDir);
    for (const v of spec.variants ?? []) {
      expect(v).toMatchObject({
        bpt: direct.bpt,
        contextLength: direct.contextLength,
        weightsBytes: direct.weightsBytes,
      });
    }
    if (!cudaWorks) {
      expect(spec.tokenizer.tokenizerJson).toBe(
        path.join(await fs.realpath(dir), `shared_assets/sha256-${tokenizerHex}/tokenizer.json`),
      );
      expect(spec.sessionConfigEntries).toEqual({ 'session.intra_op_thread_count': '1' });
    }
  });

  it('loads the CPU variant when only CPU is usable, and it computes what the model computes on its own', async () => {
    const { dir } = await defaultModelPackage();
    const spec = await loadModelSpec(dir, { availableBackends: [CPU] });
    expect(spec.selectedVariant).toBe('cpu');
    expect(spec.layout).toBe('ort-package');
    const direct = await loadModelSpec(defaultModelDir);
    expect(spec.eosTokenIds).toEqual(direct.eosTokenIds);
    expect(spec.bosTokenId).toBe(direct.bosTokenId);
    expect(spec.vocabSize).toBe(direct.vocabSize);
    const ids = [direct.bosTokenId ?? 0, 10, 20, 30];
    expect([...(await firstLogits(spec, ids))]).toEqual([...(await firstLogits(direct, ids))]);
  });

  it('generates through RunnerService exactly the tokens the default model generates', async () => {
    const { dir } = await defaultModelPackage();
    const viaPackage = new RunnerService({ intraOpNumThreads: 2 });
    const viaModel = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(viaPackage, viaModel);
    const loaded = await viaPackage.loadModel(dir);
    expect(loaded.spec.selectedVariant).toBe('cpu');
    await viaModel.loadModel(defaultModelDir);
    const request = { prompt: 'hello world', maxNewTokens: 12, sampling: { greedy: true } };
    const a = await viaPackage.generate(request).result;
    const b = await viaModel.generate(request).result;
    expect(a.tokenIds.length).toBeGreaterThan(0);
    expect(a.tokenIds).toEqual(b.tokenIds);
    expect(a.promptTokens).toBe(b.promptTokens);
  });

  it("hands the variant's session options to onnxruntime", async () => {
    // An option onnxruntime acts on at load: this file is not in ORT format, so the load fails with its reason.
    const { dir } = await defaultModelPackage({ 'session.load_model_format': 'ORT' });
    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    const err = await rejection(h.loadModel(dir, { backend: CPU }));
    expect(err.code).toBe('MODEL_LOAD_FAILED');
    expect(err.message).toMatch(/onnxruntime could not load .*model\.onnx/);
    // With an ordinary option the same package loads and still gets the last-position head.
    const ok = await defaultModelPackage({ 'session.intra_op.allow_spinning': '0' });
    const loaded = await h.loadModel(ok.dir, { backend: CPU, id: 'spinning-off' });
    expect(loaded.spec.sessionConfigEntries).toEqual({ 'session.intra_op.allow_spinning': '0' });
    expect(loaded.logits.last).toBe(true);
    // A package that puts its external weights in another folder keeps it: the last-position copy steps aside.
    const other = await defaultModelPackage({ 'session.model_external_initializers_file_folder_path': 'weights' });
    await fs.mkdir(path.join(other.dir, 'cpu', 'weights'));
    const asIs = await h.loadModel(other.dir, { backend: CPU, id: 'other-folder' });
    expect(asIs.logits).toEqual({
      last: false,
      detail:
        "the package sets session.model_external_initializers_file_folder_path to another folder than its graph's",
      batching: expect.stringMatching(/^requests share one batch, each row left-padded/),
    });
    // The graph's own folder is what the copy uses anyway.
    const same = await defaultModelPackage({ 'session.model_external_initializers_file_folder_path': '.' });
    expect((await h.loadModel(same.dir, { backend: CPU, id: 'same-folder' })).logits.last).toBe(true);
  });

  it('leaves out session options that kvdesk sets for the whole engine, with a warning', async () => {
    const { dir } = await defaultModelPackage({
      'session.intra_op_num_threads': '6',
      'session.set_denormal_as_zero': '1',
      'session.intra_op.allow_spinning': '0',
    });
    const spec = await loadModelSpec(dir, { availableBackends: [CPU] });
    expect(spec.sessionConfigEntries).toEqual({ 'session.intra_op.allow_spinning': '0' });
    const warned = spec.warnings.filter((w) => w.includes('kvdesk sets this for the whole engine'));
    expect(warned).toHaveLength(2);
    expect(warned.join('\n')).toContain('session.intra_op_num_threads');
  });

  it('RunnerService honours an explicit backend: CUDA is refused here with what the package offers', async () => {
    const { dir } = await defaultModelPackage();
    const host = new RunnerService({ intraOpNumThreads: 1 });
    hosts.push(host);
    if (usableProviders(report).includes(CUDA)) {
      expect((await host.loadModel(dir, { backend: 'cuda' })).spec.executionProvider).toBe(CUDA);
      return;
    }
    await expect(host.loadModel(dir, { backend: 'cuda' })).rejects.toMatchObject({ code: 'PACKAGE_INVALID' });
    expect(host.listModels()).toEqual([]);
    const cpu = await host.loadModel(dir, { backend: 'cpu' });
    expect(cpu.spec.executionProvider).toBe(CPU);
  });

  it('refuses the package when only its CUDA variant remains and CUDA is not usable', async () => {
    const { dir } = await defaultModelPackage();
    await fs.rm(path.join(dir, 'cpu'), { recursive: true });
    const manifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
    delete manifest.components.model.variants.cpu;
    await write(dir, 'manifest.json', manifest);
    const available = usableProviders(report);
    if (available.includes(CUDA)) {
      expect((await loadModelSpec(dir, { availableBackends: available })).selectedVariant).toBe('cuda');
      return;
    }
    await expect(loadModelSpec(dir, { availableBackends: available })).rejects.toMatchObject({
      code: 'PACKAGE_INVALID',
      detail: { field: 'components.model.variants', offered: [CUDA], available },
    });
  });
});

describe.skipIf(!haveFixtures)(
  `an ORT package of the tiny-llm fixture${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it('CPU and CUDA variants of onnx-genai folders: the CPU one is chosen and matches the fixture', async () => {
      const parent = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-ort-fixture-'));
      made.push(parent);
      const dir = path.join(parent, 'tiny-llm-ort');
      const src = fixture('onnx-genai/tiny-llm');
      for (const variant of ['cpu', 'cuda']) {
        for (const name of await fs.readdir(src))
          await write(dir, `${variant}/${name}`, await fs.readFile(path.join(src, name)));
      }
      await write(dir, 'manifest.json', {
        schema_version: '1.0',
        components: {
          model: {
            component_name: 'model',
            variants: { cuda: { ep: CUDA, device: 'gpu' }, cpu: { ep: CPU, device: 'cpu' } },
          },
        },
      });
      const spec = await loadModelSpec(dir, { availableBackends: [CPU] });
      expect(spec.selectedVariant).toBe('cpu');
      const direct = await loadModelSpec(src);
      expect(spec).toMatchObject({ bpt: direct.bpt, contextLength: direct.contextLength, vocabSize: direct.vocabSize });
      expect(spec.variants?.map((v) => [v.name, v.layout, v.bpt])).toEqual([
        ['cuda', 'onnx-genai', direct.bpt],
        ['cpu', 'onnx-genai', direct.bpt],
      ]);
      const ids = [direct.bosTokenId ?? 0, 5, 6];
      expect([...(await firstLogits(spec, ids))]).toEqual([...(await firstLogits(direct, ids))]);
    });
  },
);
