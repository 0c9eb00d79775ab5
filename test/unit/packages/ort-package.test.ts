/**
 * ORT model packages (PACKAGES.md layout 4), built by the tests from the
 * header-only graphs of package-builder: variant choice per backend, shared
 * assets by digest, and every refusal the issue lists.
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  bestUsableProvider,
  knownProviderName,
  providerName,
  providerRank,
} from '../../../src/main/packages/execution-providers';
import { detectLayout, loadModelSpec } from '../../../src/main/packages/index';
import { hashAssetDirectory, parseSharedRef } from '../../../src/main/packages/shared-assets';
import {
  asHfCache,
  type DecoderDef,
  decoderGraph,
  deepMerge,
  type FileContent,
  hfPackage,
  removeTempDirs,
  T,
  tempPackageDir,
  tokenizerJson,
  writeFiles,
} from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

const CPU = 'CPUExecutionProvider';
const CUDA = 'CUDAExecutionProvider';

function sha256(content: string | Uint8Array): string {
  return createHash('sha256').update(content).digest('hex');
}

/**
 * ONNX Runtime's directory digest computed from the in-memory contents, not from
 * disk: an independent reference for what the loader must compute.
 */
function dirDigest(files: Record<string, string | Uint8Array>): string {
  const lines = Object.entries(files)
    .map(([p, c]) => ({ p, h: sha256(c) }))
    .sort((a, b) => Buffer.compare(Buffer.from(a.p), Buffer.from(b.p)))
    .map(({ p, h }) => `${h}  ${p}\n`)
    .join('');
  return sha256(lines);
}

const SHARED_TOKENIZER: Record<string, string> = {
  'tokenizer.json': tokenizerJson(64),
  'tokenizer_config.json': JSON.stringify({ eos_token: '</s>', chat_template: '{{ shared }}' }),
};
const TOKENIZER_HEX = dirDigest(SHARED_TOKENIZER);

/** The files of an onnxruntime-genai variant folder at `dir`; the tokenizer is the shared asset unless `ownTokenizer`. */
function genaiVariant(
  dir: string,
  opts: { graph?: DecoderDef; config?: Record<string, unknown>; ownTokenizer?: boolean } = {},
): Record<string, FileContent> {
  const config = deepMerge(
    {
      model: {
        type: 'llama',
        context_length: 128,
        eos_token_id: 3,
        vocab_size: 64,
        decoder: { filename: 'model.onnx', num_key_value_heads: 2, head_size: 8 },
      },
      ...(opts.ownTokenizer ? {} : { tokenizer_dir: `sha256:${TOKENIZER_HEX}` }),
    },
    opts.config ?? {},
  );
  return {
    [`${dir}/genai_config.json`]: config,
    [`${dir}/model.onnx`]: decoderGraph(opts.graph ?? {}),
    ...(opts.ownTokenizer ? { [`${dir}/tokenizer.json`]: tokenizerJson(64) } : {}),
  };
}

/** A manifest override that gives the cpu variant these ORT session options. */
const cpuSessionOptions = (sessionOptions: Record<string, unknown>) => ({
  components: { model: { variants: { cpu: { executor_info: { ort: { session_options: sessionOptions } } } } } },
});

const sharedAssetFiles = (hex = TOKENIZER_HEX, files = SHARED_TOKENIZER): Record<string, FileContent> =>
  Object.fromEntries(Object.entries(files).map(([p, c]) => [`shared_assets/sha256-${hex}/${p}`, c]));

interface PackageDef {
  /** Merged into the default manifest (undefined deletes a key). */
  manifest?: Record<string, unknown>;
  /** Files written after the defaults (null deletes). */
  files?: Record<string, FileContent>;
  name?: string;
}

/**
 * A valid package: text model component `model` with a CPU variant (fp32 KV)
 * and a CUDA variant (fp16 KV, so its bpt differs), both onnxruntime-genai
 * folders that share one tokenizer through `sha256:`.
 */
async function ortPackage(def: PackageDef = {}): Promise<string> {
  const dir = await tempPackageDir(def.name ?? 'ort-pkg');
  const manifest = deepMerge(
    {
      schema_version: '1.0',
      package_name: 'Tiny test model',
      package_version: '0.1.0',
      description: 'two variants, one tokenizer',
      components: {
        model: {
          component_name: 'model',
          variants: {
            cpu: {
              ep: CPU,
              device: 'cpu',
              compatibility_string: 'any',
              additional_metadata: { precision: 'fp32' },
              executor_info: { ort: { model_file: 'model.onnx' } },
            },
            cuda: {
              variant_directory: 'cuda-fp16',
              ep: CUDA,
              device: 'gpu',
              additional_metadata: { precision: 'fp16' },
              executor_info: { ort: { model_file: 'model.onnx', provider_options: { device_id: '0' } } },
            },
          },
        },
      },
    },
    def.manifest ?? {},
  );
  await writeFiles(dir, {
    'manifest.json': manifest,
    ...genaiVariant('cpu'),
    ...genaiVariant('cuda-fp16', { graph: { kvType: T.f16 } }),
    ...sharedAssetFiles(),
    ...def.files,
  });
  return dir;
}

describe('ORT model package: variant choice', () => {
  it('chooses the CPU variant on a machine with CPU only, and lists every variant with its figures', async () => {
    const dir = await ortPackage();
    const spec = await loadModelSpec(dir, { availableBackends: [CPU] });
    expect(spec).toMatchObject({
      id: 'ort-pkg',
      displayName: 'Tiny test model',
      layout: 'ort-package',
      selectedVariant: 'cpu',
      executionProvider: CPU,
      backends: [CPU, CUDA],
      contextLength: 128,
      numLayers: 2,
      bpt: 2 * 2 * 2 * 8 * 4,
      packageInfo: { schemaVersion: '1.0', layout: 'portable', packageName: 'Tiny test model', component: 'model' },
    });
    expect(spec.graphPath).toBe(path.join(await fs.realpath(dir), 'cpu', 'model.onnx'));
    expect(spec.providerOptions).toBeUndefined();
    expect(spec.variants).toEqual([
      {
        component: 'model',
        name: 'cpu',
        ep: CPU,
        device: 'cpu',
        precision: 'fp32',
        compatibilityString: 'any',
        directory: 'cpu',
        usable: true,
        layout: 'ort-genai',
        weightsBytes: spec.weightsBytes,
        bpt: 256,
        contextLength: 128,
      },
      {
        component: 'model',
        name: 'cuda',
        ep: CUDA,
        device: 'gpu',
        precision: 'fp16',
        directory: 'cuda-fp16',
        usable: false,
        layout: 'ort-genai',
        weightsBytes: expect.any(Number),
        bpt: 128,
        contextLength: 128,
      },
    ]);
    expect(spec.warnings).toEqual([]);
  });

  it('reads the tokenizer from the shared asset named by sha256: and lists the asset files', async () => {
    const dir = await ortPackage();
    const spec = await loadModelSpec(dir);
    const assetDir = path.join(await fs.realpath(dir), 'shared_assets', `sha256-${TOKENIZER_HEX}`);
    expect(spec.tokenizer.tokenizerJson).toBe(path.join(assetDir, 'tokenizer.json'));
    expect(spec.chatTemplate).toBe('{{ shared }}');
    const paths = spec.files.map((f) => f.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        'manifest.json',
        'cpu/genai_config.json',
        'cpu/model.onnx',
        `shared_assets/sha256-${TOKENIZER_HEX}/tokenizer.json`,
      ]),
    );
    expect(paths.some((p) => p.startsWith('cuda-fp16/'))).toBe(false);
  });

  it('without a detection result assumes CPU only', async () => {
    const spec = await loadModelSpec(await ortPackage());
    expect(spec.selectedVariant).toBe('cpu');
    expect(spec.variants?.map((v) => v.usable)).toEqual([true, false]);
  });

  it('chooses the CUDA variant when this machine can use CUDA, with its provider options', async () => {
    const dir = await ortPackage();
    const spec = await loadModelSpec(dir, { availableBackends: ['cpu', 'cuda'] });
    expect(spec.selectedVariant).toBe('cuda');
    expect(spec.executionProvider).toBe(CUDA);
    expect(spec.bpt).toBe(128);
    expect(spec.graphPath).toBe(path.join(await fs.realpath(dir), 'cuda-fp16', 'model.onnx'));
    expect(spec.providerOptions).toEqual({ device_id: '0' });
    expect(spec.variants?.map((v) => v.usable)).toEqual([true, true]);
  });

  it('honours the backend the person picked, in either spelling', async () => {
    const dir = await ortPackage();
    const spec = await loadModelSpec(dir, { availableBackends: [CPU, CUDA], backend: 'cpu' });
    expect(spec.selectedVariant).toBe('cpu');
    const viaFull = await loadModelSpec(dir, { availableBackends: [CPU, CUDA], backend: CUDA });
    expect(viaFull.selectedVariant).toBe('cuda');
  });

  it('refuses a picked backend the package does not offer, listing what it offers', async () => {
    const dir = await ortPackage();
    const err = await refusal(loadModelSpec(dir, { availableBackends: [CPU, 'webgpu'], backend: 'webgpu' }), {
      file: 'manifest.json',
      field: 'components.model.variants',
    });
    expect(err.message).toContain('no variant for WebGpuExecutionProvider');
    expect(err.message).toContain(`${CPU} (variant "cpu"), ${CUDA} (variant "cuda")`);
  });

  it('refuses a picked backend this machine cannot use', async () => {
    const err = await refusal(loadModelSpec(await ortPackage(), { availableBackends: [CPU], backend: 'cuda' }), {
      field: 'components.model.variants',
    });
    expect(err.message).toContain(`${CUDA} was picked for this model, but this machine can use ${CPU}`);
  });

  it('picks a variant by name, and refuses an unknown or unusable one', async () => {
    const dir = await ortPackage({
      manifest: {
        components: {
          model: {
            variants: {
              'cpu-alt': { variant_directory: 'cpu', ep: 'cpu', additional_metadata: { precision: 'int4' } },
            },
          },
        },
      },
    });
    expect((await loadModelSpec(dir)).selectedVariant).toBe('cpu');
    const alt = await loadModelSpec(dir, { variant: 'cpu-alt' });
    expect(alt.selectedVariant).toBe('cpu-alt');
    expect(alt.variants?.map((v) => [v.name, v.ep, v.directory])).toEqual([
      ['cpu', CPU, 'cpu'],
      ['cuda', CUDA, 'cuda-fp16'],
      ['cpu-alt', CPU, 'cpu'],
    ]);
    const unknown = await refusal(loadModelSpec(dir, { variant: 'npu' }), { field: 'components.model.variants' });
    expect(unknown.message).toContain('Variant "npu" is not in the package');
    const unusable = await refusal(loadModelSpec(dir, { variant: 'cuda' }), {
      field: 'components.model.variants.cuda.ep',
    });
    expect(unusable.message).toContain(`Variant "cuda" needs ${CUDA}, which this machine cannot use`);
  });

  it('prefers the best usable provider the package offers, whatever the manifest order', async () => {
    const dir = await ortPackage({
      manifest: {
        components: {
          model: {
            variants: {
              cpu: undefined,
              cuda: undefined,
              web: { variant_directory: 'cpu', ep: 'WebGpuExecutionProvider' },
              plain: { variant_directory: 'cpu', ep: CPU },
              gpu: { variant_directory: 'cuda-fp16', ep: CUDA },
            },
          },
        },
      },
    });
    expect((await loadModelSpec(dir, { availableBackends: [CPU, 'webgpu', CUDA] })).selectedVariant).toBe('gpu');
    expect((await loadModelSpec(dir, { availableBackends: [CPU, 'webgpu'] })).selectedVariant).toBe('web');
    expect((await loadModelSpec(dir, { availableBackends: [CPU] })).selectedVariant).toBe('plain');
  });

  it('refuses a package whose only variant needs CUDA, saying what it offers and what this machine has', async () => {
    const dir = await ortPackage({ manifest: { components: { model: { variants: { cpu: undefined } } } } });
    const err = await refusal(loadModelSpec(dir, { availableBackends: [CPU, 'WebGpuExecutionProvider'] }), {
      file: 'manifest.json',
      field: 'components.model.variants',
    });
    expect(err.message).toContain('no variant of this package can run on this machine');
    expect(err.message).toContain(`The package offers ${CUDA} (variant "cuda")`);
    expect(err.message).toContain(`this machine can use ${CPU}, WebGpuExecutionProvider`);
    expect(err.detail).toMatchObject({ offered: [CUDA], available: [CPU, 'WebGpuExecutionProvider'] });
    const assumed = await refusal(loadModelSpec(dir));
    expect(assumed.message).toContain('(assumed: no backend detection result was given');
  });

  it('describes a broken other variant as unreadable instead of refusing the package', async () => {
    const dir = await ortPackage({ files: { 'cuda-fp16/model.onnx': 'not onnx at all' } });
    const spec = await loadModelSpec(dir);
    expect(spec.selectedVariant).toBe('cpu');
    const cuda = spec.variants?.find((v) => v.name === 'cuda');
    expect(cuda?.unreadable).toContain('cuda-fp16/model.onnx');
    expect(cuda?.bpt).toBeUndefined();
    // and the broken one refuses when it is the one chosen
    await refusal(loadModelSpec(dir, { availableBackends: [CPU, CUDA] }), { file: 'cuda-fp16/model.onnx' });
  });

  it('an other variant whose tokenizer.json has "model": null is unreadable, naming its file; chosen, it is refused', async () => {
    const broken = { ...(JSON.parse(tokenizerJson(64)) as Record<string, unknown>), model: null };
    const dir = await ortPackage({
      files: {
        ...genaiVariant('cuda-fp16', { graph: { kvType: T.f16 }, ownTokenizer: true }),
        'cuda-fp16/tokenizer.json': broken,
      },
    });
    const spec = await loadModelSpec(dir);
    expect(spec.selectedVariant).toBe('cpu');
    expect(spec.variants?.find((v) => v.name === 'cuda')?.unreadable).toMatch(
      /^cuda-fp16\/tokenizer\.json is not a Hugging Face tokenizer\.json \(it has no `model` object: `model` is null\)/,
    );
    await refusal(loadModelSpec(dir, { availableBackends: [CPU, CUDA] }), {
      file: 'cuda-fp16/tokenizer.json',
      field: 'model',
    });
  });
});

describe('ORT model package: components and executor_info', () => {
  it('reads an external component from a folder holding component.json, variants relative to it', async () => {
    const dir = await tempPackageDir('external');
    await writeFiles(dir, {
      'manifest.json': { schema_version: 1, components: { model: 'decoder' } },
      'decoder/component.json': {
        component_name: 'model',
        variants: { cpu: { ep: CPU, executor_info: { ort: 'ort_info.json' } } },
      },
      'decoder/cpu/ort_info.json': {
        model_file: 'model.onnx',
        session_options: { 'session.intra_op_thread_count': 2 },
      },
      ...genaiVariant('decoder/cpu'),
      ...sharedAssetFiles(),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.selectedVariant).toBe('cpu');
    expect(spec.variants?.[0]?.directory).toBe('decoder/cpu');
    expect(spec.sessionConfigEntries).toEqual({ 'session.intra_op_thread_count': '2' });
    expect(spec.files.map((f) => f.path)).toEqual(
      expect.arrayContaining(['decoder/component.json', 'decoder/cpu/ort_info.json']),
    );
    expect(spec.packageInfo?.schemaVersion).toBe('1');
  });

  it('reads an external component from a JSON file, variants relative to its folder', async () => {
    const dir = await tempPackageDir('external-file');
    await writeFiles(dir, {
      'manifest.json': { schema_version: '1.3', components: { text: 'components/text.json' } },
      'components/text.json': { variants: { cpu: { variant_directory: 'v/cpu', ep: CPU } } },
      ...genaiVariant('components/v/cpu'),
      ...sharedAssetFiles(),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.packageInfo?.component).toBe('text');
    expect(spec.variants?.[0]?.directory).toBe('components/v/cpu');
  });

  it('loads the graph executor_info.ort.model_file names, also from a shared asset', async () => {
    const graph = decoderGraph({ layers: 3 });
    const graphHex = dirDigest({ 'model.onnx': graph });
    const dir = await ortPackage({
      manifest: {
        components: {
          model: {
            variants: {
              cpu: { executor_info: { ort: { model_file: `sha256:${graphHex}/model.onnx` } } },
            },
          },
        },
      },
      files: { [`shared_assets/sha256-${graphHex}/model.onnx`]: graph },
    });
    const spec = await loadModelSpec(dir);
    expect(spec.numLayers).toBe(3);
    expect(spec.graphPath).toBe(path.join(await fs.realpath(dir), `shared_assets/sha256-${graphHex}/model.onnx`));
    expect(spec.warnings.join('\n')).toContain('executor_info.ort.model_file names shared_assets/sha256-');
  });

  it('refuses a session option that makes onnxruntime write a file', async () => {
    const dir = await ortPackage({
      manifest: cpuSessionOptions({ 'session.optimized_model_filepath': 'x.onnx' }),
    });
    await refusal(loadModelSpec(dir), {
      file: 'manifest.json',
      field: 'components.model.variants.cpu.executor_info.ort.session_options.session.optimized_model_filepath',
    });
  });

  it('writes switches as onnxruntime reads them ("1"/"0"), and refuses an empty option name', async () => {
    const withSwitch = await ortPackage({
      manifest: cpuSessionOptions({ 'session.intra_op.allow_spinning': false }),
    });
    expect((await loadModelSpec(withSwitch)).sessionConfigEntries).toEqual({ 'session.intra_op.allow_spinning': '0' });
    const empty = await ortPackage({
      manifest: cpuSessionOptions({ '': '1' }),
    });
    await refusal(loadModelSpec(empty), {
      file: 'manifest.json',
      field: 'components.model.variants.cpu.executor_info.ort.session_options.',
    });
  });

  it('resolves path-valued session options inside the package', async () => {
    const dir = await ortPackage({
      manifest: cpuSessionOptions({ 'session.model_external_initializers_file_folder_path': 'weights' }),
      files: { 'cpu/weights/w.bin': 'w' },
    });
    const spec = await loadModelSpec(dir);
    expect(spec.sessionConfigEntries).toEqual({
      'session.model_external_initializers_file_folder_path': path.join(await fs.realpath(dir), 'cpu', 'weights'),
    });
  });

  it('takes `model` as the text model among several components, and refuses to guess among others', async () => {
    const dir = await ortPackage({
      manifest: { components: { vision: { variants: { cpu: { variant_directory: 'cpu', ep: CPU } } } } },
    });
    expect((await loadModelSpec(dir)).packageInfo?.component).toBe('model');
    const two = await ortPackage({
      manifest: {
        components: {
          model: undefined,
          a: { variants: { cpu: { ep: CPU } } },
          b: { variants: { cpu: { ep: CPU } } },
        },
      },
    });
    const err = await refusal(loadModelSpec(two), { file: 'manifest.json', field: 'components' });
    expect(err.message).toContain('none is named "model"');
  });

  it('loads a Hugging Face variant whose model_file is elsewhere, with PyTorch or GGUF weights beside it', async () => {
    const hf = await hfPackage({ 'onnx/model.onnx': null, 'graph/model.onnx': decoderGraph() });
    // The cpu variant an Optimum folder (not onnxruntime-genai's), its graph where model_file says.
    const files: Record<string, FileContent> = {
      'cpu/genai_config.json': null,
      'cpu/model.onnx': null,
      'cpu/model.safetensors': 'w',
      'cpu/model-q4.gguf': 'GGUF',
    };
    for (const name of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) {
      files[`cpu/${name}`] = await fs.readFile(path.join(hf, name));
    }
    files['cpu/graph/model.onnx'] = await fs.readFile(path.join(hf, 'graph', 'model.onnx'));
    const dir = await ortPackage({
      manifest: {
        components: {
          model: { variants: { cuda: undefined, cpu: { executor_info: { ort: { model_file: 'graph/model.onnx' } } } } },
        },
      },
      files,
    });
    const spec = await loadModelSpec(dir, { availableBackends: [CPU] });
    expect(spec.layout).toBe('ort-package');
    expect(spec.graphPath).toBe(path.join(dir, 'cpu', 'graph', 'model.onnx'));
  });

  it('refuses a variant folder that is not one of layouts 1–3', async () => {
    const dir = await ortPackage({ files: { 'cpu/genai_config.json': null } });
    const err = await refusal(loadModelSpec(dir), { file: 'cpu' });
    expect(err.message).toContain('The variant folder cpu holds no model kvdesk recognises');
  });

  it('loads a Hugging Face folder whose manifest.json is not a package manifest, with a warning', async () => {
    const dir = await hfPackage({ 'manifest.json': { name: 'some web app', icons: [] } });
    const spec = await loadModelSpec(dir);
    expect(spec.layout).toBe('hf-optimum');
    expect(await detectLayout(dir)).toBe('hf-optimum');
    expect(await detectLayout(await ortPackage())).toBe('ort-package');
    expect(spec.warnings).toContain(
      'manifest.json is not an ORT model package manifest (it has neither `schema_version` nor `components`), so it was ignored.',
    );
  });
});

describe('ORT model package: refusals', () => {
  it('refuses an unknown schema_version major', async () => {
    const dir = await ortPackage({ manifest: { schema_version: '2.0' } });
    const err = await refusal(loadModelSpec(dir), { file: 'manifest.json', field: 'schema_version' });
    expect(err.message).toContain('major version 2');
    expect(err.message).toContain('major version 1 only');
    // An older major is refused as surely as a newer one: major 0 (written as text or as a number).
    for (const old of ['0.9', 0]) {
      const older = await refusal(loadModelSpec(await ortPackage({ manifest: { schema_version: old } })), {
        file: 'manifest.json',
        field: 'schema_version',
      });
      expect(older.message, String(old)).toContain('major version 0');
    }
    // minors are additive and accepted
    expect(
      (await loadModelSpec(await ortPackage({ manifest: { schema_version: '1.7' } }))).packageInfo?.schemaVersion,
    ).toBe('1.7');
  });

  it('refuses a schema_version that is not a version', async () => {
    await refusal(loadModelSpec(await ortPackage({ manifest: { schema_version: 'latest' } })), {
      field: 'schema_version',
    });
    await refusal(loadModelSpec(await ortPackage({ manifest: { schema_version: undefined } })), {
      field: 'schema_version',
    });
  });

  it('refuses a manifest without components', async () => {
    const dir = await ortPackage({ manifest: { components: undefined } });
    const err = await refusal(loadModelSpec(dir), { file: 'manifest.json', field: 'components' });
    expect(err.message).toContain('manifest.json: `components` is missing');
  });

  it('refuses a component whose component_name differs from its key', async () => {
    const dir = await ortPackage({ manifest: { components: { model: { component_name: 'decoder' } } } });
    const err = await refusal(loadModelSpec(dir), {
      file: 'manifest.json',
      field: 'components.model.component_name',
    });
    expect(err.message).toContain('is "decoder", but the component is listed under the key "model"');
  });

  it('refuses a component_name mismatch in an external component.json', async () => {
    const dir = await tempPackageDir('external-mismatch');
    await writeFiles(dir, {
      'manifest.json': { schema_version: '1.0', components: { model: 'decoder' } },
      'decoder/component.json': { component_name: 'encoder', variants: {} },
    });
    await refusal(loadModelSpec(dir), { file: 'decoder/component.json', field: 'component_name' });
  });

  it('refuses a variant directory that does not exist', async () => {
    const dir = await ortPackage({ files: {} });
    await fs.rm(path.join(dir, 'cuda-fp16'), { recursive: true });
    const err = await refusal(loadModelSpec(dir), {
      file: 'manifest.json',
      field: 'components.model.variants.cuda.variant_directory',
    });
    expect(err.message).toContain('cuda-fp16 does not exist in the package');
  });

  it('refuses a defaulted variant directory (the variant name) that does not exist, saying why it was looked for', async () => {
    const dir = await ortPackage({ manifest: { components: { model: { variants: { gpu: { ep: CUDA } } } } } });
    const err = await refusal(loadModelSpec(dir), { field: 'components.model.variants.gpu.variant_directory' });
    expect(err.message).toContain('has no variant_directory, so its folder is its name');
  });

  it('refuses ".." in a variant directory and in a model_file', async () => {
    const up = await ortPackage({
      manifest: { components: { model: { variants: { cuda: { variant_directory: '../cuda-fp16' } } } } },
    });
    const err = await refusal(loadModelSpec(up), { field: 'components.model.variants.cuda.variant_directory' });
    expect(err.message).toContain('contains ".."');
    const file = await ortPackage({
      manifest: {
        components: { model: { variants: { cpu: { executor_info: { ort: { model_file: 'sub/../model.onnx' } } } } } },
      },
    });
    await refusal(loadModelSpec(file), { field: 'components.model.variants.cpu.executor_info.ort.model_file' });
  });

  it('refuses an absolute path in a portable package', async () => {
    const dir = await ortPackage();
    const abs = path.join(dir, 'cuda-fp16');
    const pkg = await ortPackage({
      manifest: { components: { model: { variants: { cuda: { variant_directory: abs } } } } },
    });
    const err = await refusal(loadModelSpec(pkg), {
      file: 'manifest.json',
      field: 'components.model.variants.cuda.variant_directory',
    });
    expect(err.message).toContain('is the absolute path');
    const windows = await ortPackage({
      manifest: {
        components: { model: { variants: { cpu: { executor_info: { ort: { model_file: 'C:\\m.onnx' } } } } } },
      },
    });
    await refusal(loadModelSpec(windows), { field: 'components.model.variants.cpu.executor_info.ort.model_file' });
  });

  it('refuses a variant folder that is a symlink pointing outside the package', async () => {
    const outside = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-outside-'));
    await writeFiles(outside, genaiVariant('gpu'));
    const dir = await ortPackage();
    await fs.rm(path.join(dir, 'cuda-fp16'), { recursive: true });
    await fs.symlink(path.join(outside, 'gpu'), path.join(dir, 'cuda-fp16'));
    const err = await refusal(loadModelSpec(dir), {
      file: 'manifest.json',
      field: 'components.model.variants.cuda.variant_directory',
    });
    expect(err.message).toContain('resolves through a symlink to');
    expect(err.message).toContain('outside the package folder');
    await fs.rm(outside, { recursive: true, force: true });
  });

  it('in the Hugging Face cache, still refuses a link that the manifest names, saying how to get real files', async () => {
    // manifest.json itself is read through its link into the repo's blobs/; the file its executor_info.ort.model_file
    // names may not be such a link: PACKAGES.md keeps the paths a manifest names inside the package.
    const { snapshot } = await asHfCache(await ortPackage());
    const err = await refusal(loadModelSpec(snapshot), {
      file: 'manifest.json',
      field: 'components.model.variants.cpu.executor_info.ort.model_file',
    });
    expect(err.message).toContain('outside the package folder');
    expect(err.message).toContain('not for a path manifest.json names');
    expect(err.message).toContain('--local-dir');
  });

  it('refuses a tokenizer.json symlinked from outside inside the chosen variant', async () => {
    const outside = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-outside-'));
    await fs.writeFile(path.join(outside, 'tokenizer.json'), tokenizerJson(64));
    const dir = await ortPackage({
      files: {
        'cpu/genai_config.json': genaiVariant('cpu', { ownTokenizer: true })['cpu/genai_config.json'] as FileContent,
      },
    });
    await fs.symlink(path.join(outside, 'tokenizer.json'), path.join(dir, 'cpu', 'tokenizer.json'));
    const err = await refusal(loadModelSpec(dir), { file: 'cpu/tokenizer.json' });
    expect(err.message).toContain('outside the package folder');
    await fs.rm(outside, { recursive: true, force: true });
  });

  it('refuses a shared asset whose digest does not match its name', async () => {
    const dir = await ortPackage({
      files: { [`shared_assets/sha256-${TOKENIZER_HEX}/tokenizer.json`]: tokenizerJson(65) },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'cpu/genai_config.json', field: 'tokenizer_dir' });
    expect(err.message).toContain(`refers to the shared asset sha256:${TOKENIZER_HEX}`);
    expect(err.message).toContain('hash to sha256:');
    expect(err.detail).toMatchObject({
      expectedDigest: TOKENIZER_HEX,
      actualDigest: dirDigest({ ...SHARED_TOKENIZER, 'tokenizer.json': tokenizerJson(65) }),
    });
  });

  it("verifies only the chosen variant's shared assets (describing the others does not hash them)", async () => {
    const other = 'b'.repeat(64);
    const dir = await ortPackage({
      files: {
        ...genaiVariant('cuda-fp16', { graph: { kvType: T.f16 }, config: { tokenizer_dir: `sha256:${other}` } }),
        ...sharedAssetFiles(other),
      },
    });
    const spec = await loadModelSpec(dir);
    expect(spec.selectedVariant).toBe('cpu');
    expect(spec.variants?.find((v) => v.name === 'cuda')).toMatchObject({ bpt: 128 });
    expect(spec.variants?.find((v) => v.name === 'cuda')?.unreadable).toBeUndefined();
    expect(spec.files.some((f) => f.path.includes(other))).toBe(false);
    const err = await refusal(loadModelSpec(dir, { availableBackends: [CPU, CUDA] }), {
      file: 'cuda-fp16/genai_config.json',
      field: 'tokenizer_dir',
    });
    expect(err.message).toContain(`hash to sha256:${TOKENIZER_HEX}`);
  });

  it('refuses an extra file added to a shared asset', async () => {
    const dir = await ortPackage({ files: { [`shared_assets/sha256-${TOKENIZER_HEX}/extra.txt`]: 'x' } });
    await refusal(loadModelSpec(dir), { field: 'tokenizer_dir' });
  });

  it('refuses a reference to a shared asset the package lacks, and a malformed reference', async () => {
    const missing = 'a'.repeat(64);
    const dir = await ortPackage({
      files: genaiVariant('cpu', { config: { tokenizer_dir: `sha256:${missing}` } }),
    });
    const err = await refusal(loadModelSpec(dir), { file: 'cpu/genai_config.json', field: 'tokenizer_dir' });
    expect(err.message).toContain(`shared_assets/sha256-${missing}/ is not in the package`);
    const upper = await ortPackage({
      files: genaiVariant('cpu', { config: { tokenizer_dir: `sha256:${TOKENIZER_HEX.toUpperCase()}` } }),
    });
    const bad = await refusal(loadModelSpec(upper), { field: 'tokenizer_dir' });
    expect(bad.message).toContain('not a valid shared-asset reference');
  });

  it('refuses a 5 MiB manifest before parsing it', async () => {
    const dir = await ortPackage();
    const big = JSON.stringify({ schema_version: '1.0', pad: 'x'.repeat(5 * 1024 * 1024) });
    await fs.writeFile(path.join(dir, 'manifest.json'), big);
    const err = await refusal(loadModelSpec(dir), { file: 'manifest.json' });
    expect(err.message).toContain('manifest.json is 5.0 MiB');
    expect(err.message).toContain('larger than 4.0 MiB');
  });

  it('refuses an installed-layout package unless the person trusts it, then allows paths outside', async () => {
    const outside = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-installed-'));
    await writeFiles(outside, genaiVariant('gpu', { ownTokenizer: true }));
    const dir = await ortPackage({
      manifest: {
        layout: 'installed',
        components: {
          model: { variants: { cpu: undefined, cuda: { variant_directory: path.join(outside, 'gpu'), ep: CPU } } },
        },
      },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'manifest.json', field: 'layout' });
    expect(err.message).toContain('only when you trust it explicitly');
    const spec = await loadModelSpec(dir, { trustInstalled: true });
    expect(spec.graphPath).toBe(path.join(outside, 'gpu', 'model.onnx'));
    expect(spec.packageInfo?.layout).toBe('installed');
    expect(spec.warnings.join('\n')).toContain('was trusted');
    await fs.rm(outside, { recursive: true, force: true });
  });

  it('refuses wrong types in the manifest, naming the field', async () => {
    await refusal(loadModelSpec(await ortPackage({ manifest: { components: { model: { variants: [] } } } })), {
      field: 'components.model.variants',
    });
    await refusal(loadModelSpec(await ortPackage({ manifest: { package_name: 7 } })), { field: 'package_name' });
    await refusal(
      loadModelSpec(await ortPackage({ manifest: { components: { model: { variants: { cpu: { ep: 5 } } } } } })),
      { field: 'components.model.variants.cpu.ep' },
    );
    await refusal(
      loadModelSpec(
        await ortPackage({
          manifest: {
            components: { model: { variants: { cpu: { executor_info: { ort: { provider_options: { a: {} } } } } } } },
          },
        }),
      ),
      { field: 'components.model.variants.cpu.executor_info.ort.provider_options.a' },
    );
    await refusal(loadModelSpec(await ortPackage({ manifest: { layout: 'anywhere' } })), { field: 'layout' });
  });

  it('refuses a variant folder that is itself a package', async () => {
    const dir = await ortPackage({
      files: { 'cpu/genai_config.json': null, 'cpu/manifest.json': { schema_version: '1.0' } },
    });
    const err = await refusal(loadModelSpec(dir), { file: 'cpu' });
    expect(err.message).toContain('packages do not nest');
  });

  it('refuses sha256: references outside a package', async () => {
    const dir = await tempPackageDir('plain-genai');
    await writeFiles(dir, genaiVariant('.', { config: { tokenizer_dir: `sha256:${TOKENIZER_HEX}` } }));
    await writeFiles(dir, sharedAssetFiles());
    const err = await refusal(loadModelSpec(dir), { file: 'genai_config.json', field: 'tokenizer_dir' });
    expect(err.message).toContain('only an ORT model package');
  });
});

describe('genai_config tokenizer_dir outside packages', () => {
  it('reads the tokenizer from a folder inside the package', async () => {
    const dir = await tempPackageDir('tok-dir');
    await writeFiles(dir, {
      ...genaiVariant('.', { config: { tokenizer_dir: 'tok' } }),
      'tok/tokenizer.json': tokenizerJson(64),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.tokenizer.tokenizerJson).toBe(path.join(await fs.realpath(dir), 'tok', 'tokenizer.json'));
    await refusal(loadModelSpec(await writeThen(dir, { 'tok/tokenizer.json': null })), { file: 'tok/tokenizer.json' });
  });
});

async function writeThen(dir: string, files: Record<string, FileContent>): Promise<string> {
  await writeFiles(dir, files);
  return dir;
}

describe('shared asset digest', () => {
  it("computes ONNX Runtime's directory hash (byte-ordered paths, nested folders)", async () => {
    const dir = await tempPackageDir('digest');
    await writeFiles(dir, { 'a.txt': 'hello\n', 'sub/b.txt': 'x', 'B.json': '{}' });
    // Golden value from sha256sum over `<sha256>  <path>\n` lines in C-locale order (B.json, a.txt, sub/b.txt).
    const hash = await hashAssetDirectory(dir);
    expect(hash.digest).toBe('d53fa234f985606a043b3b037b4fb7187f8d87a8ded9228b97705f432cf69ff3');
    expect(hash.files).toEqual([
      { path: 'B.json', bytes: 2 },
      { path: 'a.txt', bytes: 6 },
      { path: 'sub/b.txt', bytes: 1 },
    ]);
  });

  it('sees a change made after an earlier hash of the same folder', async () => {
    const dir = await tempPackageDir('digest-change');
    await writeFiles(dir, { 'a.txt': 'one' });
    const first = await hashAssetDirectory(dir);
    await writeFiles(dir, { 'a.txt': 'two!' });
    expect((await hashAssetDirectory(dir)).digest).not.toBe(first.digest);
    expect((await hashAssetDirectory(dir)).digest).toBe(dirDigest({ 'a.txt': 'two!' }));
  });

  it('refuses a symlink inside an asset', async () => {
    const dir = await tempPackageDir('digest-link');
    await writeFiles(dir, { 'a.txt': 'x' });
    await fs.symlink(path.join(dir, 'a.txt'), path.join(dir, 'b.txt'));
    await expect(hashAssetDirectory(dir)).rejects.toThrow('b.txt is a symlink');
  });

  it('parses only sha256:<64 lowercase hex>[/tail]', () => {
    const hex = 'f'.repeat(64);
    expect(parseSharedRef(`sha256:${hex}`)).toEqual({ hex });
    expect(parseSharedRef(`sha256:${hex}/a/b.json`)).toEqual({ hex, tail: 'a/b.json' });
    expect(parseSharedRef(`sha256:${hex}/`)).toEqual({ hex });
    expect(parseSharedRef(`sha256:${hex.slice(1)}`)).toBeUndefined();
    expect(parseSharedRef(`sha256:${'F'.repeat(64)}`)).toBeUndefined();
    expect(parseSharedRef(`sha256:${hex}x`)).toBeUndefined();
    expect(parseSharedRef(`md5:${hex}`)).toBeUndefined();
  });
});

describe('execution provider names', () => {
  it('normalizes short and full names', () => {
    expect(providerName('cuda')).toBe(CUDA);
    expect(providerName('CUDAExecutionProvider')).toBe(CUDA);
    expect(providerName('cudaexecutionprovider')).toBe(CUDA);
    expect(providerName('DML')).toBe('DmlExecutionProvider');
    expect(providerName('FancyNpu')).toBe('FancyNpuExecutionProvider');
    expect(knownProviderName('FancyNpu')).toBeUndefined();
  });

  it('ranks dedicated GPU runtimes over WebGPU over CPU', () => {
    expect(providerRank(CUDA)).toBeLessThan(providerRank('webgpu'));
    expect(providerRank('webgpu')).toBeLessThan(providerRank(CPU));
    expect(providerRank('FancyNpu')).toBeLessThan(providerRank(CPU));
    expect(providerRank('FancyNpu')).toBeGreaterThan(providerRank('xnnpack'));
    expect(bestUsableProvider([CPU, CUDA, 'webgpu'], ['cpu', 'webgpu'])).toBe('WebGpuExecutionProvider');
    expect(bestUsableProvider([CUDA], ['cpu'])).toBeUndefined();
    expect(bestUsableProvider(['cpu'], [CPU])).toBe(CPU);
  });
});
