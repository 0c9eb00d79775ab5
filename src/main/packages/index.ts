import { promises as fs } from 'node:fs';
import path from 'node:path';
import { KvdeskError } from '../../shared/errors';
import { ggufMessage, isGguf } from '../../shared/foreign-formats';
import type { ModelSpec, PackageLayout } from '../../shared/model-spec';
import { CONFIG_MAX_BYTES } from './config-file';
import { loadHfOptimumLayout } from './layout-hf-optimum';
import { loadOnnxGenaiLayout, ONNX_GENAI_METADATA } from './layout-onnx-genai';
import { loadOrtGenaiLayout } from './layout-ort-genai';
import type { LoadOptions } from './load-options';
import { looksLikeOrtManifest } from './ort-manifest';
import { loadOrtPackage } from './ort-package';
import { packageError } from './package-error';
import { findFile, hfCacheRepo, isNotFound, makeContext, type PackageContext, relName } from './package-fs';

export { CONFIG_MAX_BYTES } from './config-file';
export {
  backendProvider,
  bestUsableProvider,
  knownProviderName,
  PROVIDER_ALIASES,
  PROVIDER_PREFERENCE,
  providerName,
  providerRank,
} from './execution-providers';
export { kvBytesForTokens, tokensForKvBytes } from './kv-bytes';
export type { LoadOptions } from './load-options';
export type { PackageContext } from './package-fs';
export { makeContext } from './package-fs';

/** Marker files, most specific first: the first present decides the layout. */
const MARKERS: Array<{ layout: PackageLayout; files: readonly string[] }> = [
  { layout: 'ort-package', files: ['manifest.json'] },
  { layout: 'ort-genai', files: ['genai_config.json'] },
  { layout: 'onnx-genai', files: ONNX_GENAI_METADATA },
  { layout: 'hf-optimum', files: ['config.json'] },
];

const WHAT_EACH_LAYOUT_NEEDS =
  'kvdesk recognises: (1) onnx-genai: tokenizer.json, decoder.onnx (or one *.onnx) and inference_metadata.yaml|yml|json; ' +
  '(2) onnxruntime-genai: genai_config.json, tokenizer.json and the graph genai_config names; ' +
  '(3) Hugging Face / Optimum: config.json, tokenizer.json and onnx/model.onnx (or model.onnx); ' +
  '(4) ORT model package: manifest.json with variant folders.';

/** Checks that `dir` is an existing, non-empty directory and returns its real path. */
async function packageRoot(dir: string): Promise<string> {
  const where = { file: '.' };
  let stat: import('node:fs').Stats;
  try {
    stat = await fs.stat(dir);
  } catch (err) {
    if (isNotFound(err))
      throw packageError(`${dir} does not exist. Pick the folder that holds the model package.`, where, { path: dir });
    throw err;
  }
  if (!stat.isDirectory()) {
    if (isGguf(dir)) throw packageError(ggufMessage(dir), where, { path: dir });
    throw packageError(
      `${dir} is not a directory. kvdesk loads a model package folder: pick the folder that contains the model's .onnx, tokenizer and config files, not a single file.`,
      where,
      { path: dir },
    );
  }
  const real = await fs.realpath(dir);
  const entries = await fs.readdir(real);
  if (entries.filter((e) => !e.startsWith('.')).length === 0) {
    throw packageError(
      `${dir} is empty. Copy the model package's files into it (or pick the folder they are in). ${WHAT_EACH_LAYOUT_NEEDS}`,
      where,
      { path: dir },
    );
  }
  return real;
}

async function markersIn(dir: string): Promise<Array<{ layout: PackageLayout; file: string }>> {
  const names = new Set(await fs.readdir(dir));
  const found: Array<{ layout: PackageLayout; file: string }> = [];
  for (const marker of MARKERS) {
    const file = marker.files.find((f) => names.has(f));
    if (file !== undefined) found.push({ layout: marker.layout, file });
  }
  return found;
}

/**
 * The markers of the package root. Hugging Face repositories sometimes ship an
 * unrelated manifest.json: one that does not read as an ORT package manifest
 * is dropped (with a warning) when the folder has another marker to go by.
 */
async function packageMarkers(
  root: string,
  warnings: string[],
): Promise<Array<{ layout: PackageLayout; file: string }>> {
  const markers = await markersIn(root);
  if (
    markers[0]?.layout === 'ort-package' &&
    markers.length > 1 &&
    !(await looksLikeOrtManifest(path.join(root, 'manifest.json'), CONFIG_MAX_BYTES))
  ) {
    warnings.push(
      'manifest.json is not an ORT model package manifest (it has neither `schema_version` nor `components`), so it was ignored.',
    );
    return markers.slice(1);
  }
  return markers;
}

async function unrecognised(dir: string, realDir: string): Promise<KvdeskError> {
  const names = (await fs.readdir(realDir)).filter((n) => !n.startsWith('.')).sort();
  const shown = names.slice(0, 20).join(', ') + (names.length > 20 ? `, … (${names.length} in all)` : '');
  // The Hugging Face cache's repo folder (models--owner--name): the files are in one of its snapshots.
  const snapshots = /^models--./.test(path.basename(realDir)) && names.includes('snapshots') && names.includes('blobs');
  const revisions = snapshots ? (await fs.readdir(path.join(realDir, 'snapshots')).catch(() => [])).sort() : [];
  const pick =
    revisions.length > 0
      ? ` This is a repo folder of the Hugging Face cache: pick its snapshot folder instead, ${path.join(dir, 'snapshots', revisions[0] ?? '')}${revisions.length > 1 ? ` (or another of ${revisions.join(', ')})` : ''}.`
      : '';
  const gguf = names.filter(isGguf);
  if (gguf.length > 0 && !names.some((n) => /\.onnx$/i.test(n))) {
    return packageError(ggufMessage(dir, gguf), { file: '.' }, { path: dir, found: names.slice(0, 50) });
  }
  return packageError(
    `${dir} is not a model package kvdesk recognises: it has ${shown}, but none of genai_config.json, inference_metadata.yaml|yml|json, config.json or manifest.json.${pick} ${WHAT_EACH_LAYOUT_NEEDS}`,
    { file: '.' },
    { path: dir, found: names.slice(0, 50) },
  );
}

/**
 * Recognises which layout (PACKAGES.md 1–4) a folder holds, by its marker file.
 * Refuses a missing path, a file, an empty folder and a folder with no marker
 * (saying what each layout needs).
 */
export async function detectLayout(dir: string): Promise<PackageLayout> {
  try {
    const root = await packageRoot(dir);
    const [first] = await packageMarkers(root, []);
    if (first === undefined) throw await unrecognised(dir, root);
    return first.layout;
  } catch (err) {
    throw asPackageError(err, dir);
  }
}

/**
 * The load option a variant name is, for the package in `dir`: an ORT package's variant (a folder built for one
 * backend), or a graph file's (`fp16` for model_fp16.onnx) for the other layouts.
 */
export async function variantOption(
  dir: string,
  variant: string | undefined,
): Promise<{ variant?: string; graphVariant?: string }> {
  if (variant === undefined) return {};
  return (await detectLayout(dir)) === 'ort-package' ? { variant } : { graphVariant: variant };
}

/**
 * Loads one layout from `ctx.dir`. Layout 4 (ORT model packages) resolves a
 * variant folder and calls this with a context whose `dir` is that folder and
 * whose `root` is the package, so containment checks cover the whole package.
 */
export async function loadLayout(
  layout: PackageLayout,
  ctx: PackageContext,
  options: LoadOptions = {},
): Promise<ModelSpec> {
  switch (layout) {
    case 'onnx-genai':
      return loadOnnxGenaiLayout(ctx, options);
    case 'ort-genai':
      return loadOrtGenaiLayout(ctx, options);
    case 'hf-optimum':
      return loadHfOptimumLayout(ctx, options);
    case 'ort-package':
      return loadOrtPackage(ctx, options, loadVariantFolder);
  }
}

/**
 * Loads an ORT package's variant folder: it must hold one of layouts 1–3. A
 * manifest.json there is not followed (packages do not nest), so it counts
 * only when nothing else marks the folder, and then it is refused.
 */
async function loadVariantFolder(ctx: PackageContext, options: LoadOptions): Promise<ModelSpec> {
  const markers = (await markersIn(ctx.dir)).filter((m) => m.layout !== 'ort-package');
  const [first, ...others] = markers;
  const folder = relName(ctx, ctx.dir);
  if (first === undefined) {
    const nested = await findFile(ctx, 'manifest.json');
    throw packageError(
      nested !== undefined
        ? `The variant folder ${folder} is itself an ORT model package (it has manifest.json); packages do not nest. Put the model files (one of layouts 1–3) in the variant folder.`
        : `The variant folder ${folder} holds no model kvdesk recognises: it needs genai_config.json, inference_metadata.yaml|yml|json or config.json next to the graph and tokenizer. ${WHAT_EACH_LAYOUT_NEEDS}`,
      { file: folder },
    );
  }
  if (others.length > 0) {
    ctx.warnings.push(
      `The variant folder ${folder} has the marker files of several layouts (${markers.map((m) => m.file).join(', ')}); it was read as ${first.layout} because ${first.file} is the most specific.`,
    );
  }
  return loadLayout(first.layout, ctx, options);
}

/**
 * Discovers, validates and normalizes the model package in `dir` into a
 * complete ModelSpec, or throws KvdeskError('PACKAGE_INVALID') whose message
 * names the file (and field) and what to do. Nothing is partly returned.
 */
export async function loadModelSpec(dir: string, options: LoadOptions = {}): Promise<ModelSpec> {
  // Until the root's real path is known, a file-system failure is named against the folder as given.
  let root = dir;
  try {
    root = await packageRoot(dir);
    const ctx = makeContext(root);
    const hf = await hfCacheRepo(root);
    if (hf !== undefined) {
      ctx.hfBlobs = hf.blobs;
      ctx.hfRepoName = hf.name;
    }
    const markers = await packageMarkers(root, ctx.warnings);
    const [first, ...others] = markers;
    if (first === undefined) throw await unrecognised(dir, root);
    if (others.length > 0) {
      ctx.warnings.push(
        `The folder has the marker files of several layouts (${markers.map((m) => m.file).join(', ')}); it was read as ${first.layout} because ${first.file} is the most specific.`,
      );
    }
    return await loadLayout(first.layout, ctx, options);
  } catch (err) {
    throw asPackageError(err, root);
  }
}

/** File-system failures (permissions, I/O) become PACKAGE_INVALID naming the path; bugs stay bugs. */
function asPackageError(err: unknown, root: string): unknown {
  if (err instanceof KvdeskError) return err;
  const e = err as { code?: unknown; path?: unknown; message?: unknown } | null;
  if (e !== null && typeof e === 'object' && typeof e.code === 'string' && /^E[A-Z]+$/.test(e.code)) {
    const file = typeof e.path === 'string' ? path.relative(root, e.path) || '.' : '.';
    const what = file === '.' ? `the package folder ${root}` : `${file} in the package`;
    const said = String(e.message);
    return packageError(
      `Could not read ${what} (${said.startsWith(e.code) ? said : `${e.code}: ${said}`}). Check that the folder and its files are readable (their permissions) and complete.`,
      { file },
      { errno: e.code },
    );
  }
  return err;
}
