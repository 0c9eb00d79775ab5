/**
 * Loads an ORT model package (PACKAGES.md layout 4): validates the manifest,
 * picks the text model's variant for the requested or best usable backend,
 * verifies the shared assets it references, and loads the variant folder as
 * one of layouts 1–3 with every path check relative to the package root.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { KvdeskError } from '../../shared/errors';
import type { ModelSpec, PackageFile, PackageVariantInfo } from '../../shared/model-spec';
import { readConfigFile } from './config-file';
import { bestUsableProvider, CPU_PROVIDER, providerName } from './execution-providers';
import type { LoadOptions } from './load-options';
import {
  type ManifestComponent,
  type ManifestVariant,
  type OrtExecutorInfo,
  type OrtManifest,
  Place,
  parseOrtInfo,
  readOrtManifest,
  textComponent,
} from './ort-manifest';
import { describeWhere, type PackageWhere, packageError } from './package-error';
import {
  checkPathRef,
  makeContext,
  type PackageContext,
  realPathInside,
  relName,
  resolveConfigPath,
} from './package-fs';
import { AssetContentError, defaultAssetDir, hashAssetDirectory, parseSharedRef } from './shared-assets';

/** Loads a variant folder as layout 1–3 (index.ts passes its layout detection in, so this module does not import it). */
export type VariantLoader = (ctx: PackageContext, options: LoadOptions) => Promise<ModelSpec>;

/** A verified shared asset: its real folder and files (relative to the package root, for the spec's file list). */
interface VerifiedAsset {
  real: string;
  files: PackageFile[];
}

/**
 * Resolves `sha256:` references of one package load. Each asset folder is
 * hashed once per load (and cached across loads while its files are unchanged),
 * and a digest that differs from the name is refused: the name is the promise
 * of what the folder holds.
 */
class SharedAssetResolver {
  private readonly verified = new Map<string, Promise<VerifiedAsset>>();

  constructor(
    private readonly ctx: PackageContext,
    private readonly overrides: OrtManifest['assetOverrides'],
    /**
     * False only for the variants that are described, not loaded: their figures
     * come from graph headers, and hashing, say, a CUDA variant's gigabytes of
     * weights to load the CPU variant would cost seconds for nothing.
     */
    private readonly checkDigests = true,
  ) {}

  /** Every asset verified so far. */
  async used(): Promise<VerifiedAsset[]> {
    return Promise.all(this.verified.values());
  }

  async resolve(ref: string, where: PackageWhere, kind: 'file' | 'dir'): Promise<string> {
    const parsed = parseSharedRef(ref);
    if (parsed === undefined) {
      throw packageError(
        `${describeWhere(where)} is ${JSON.stringify(ref)}, not a valid shared-asset reference. Write sha256:<64 lowercase hex digits>, optionally followed by /path inside the asset.`,
        where,
        { path: ref },
      );
    }
    let pending = this.verified.get(parsed.hex);
    if (pending === undefined) {
      pending = this.verify(parsed.hex, where);
      this.verified.set(parsed.hex, pending);
    }
    const asset = await pending;
    if (parsed.tail === undefined) {
      if (kind === 'file') {
        throw packageError(
          `${describeWhere(where)} is ${JSON.stringify(ref)}, which names a whole shared-asset folder, but a file is needed here. Append the file's path inside the asset: ${ref}/<file>.`,
          where,
          { path: ref },
        );
      }
      return asset.real;
    }
    // Paths inside an asset follow the portable rules even in a trusted package: they name the asset's own files.
    const assetCtx: PackageContext = { ...makeContext(asset.real, asset.real), warnings: this.ctx.warnings };
    checkPathRef(assetCtx, parsed.tail, where, kind === 'dir' ? 'a folder' : 'a file');
    return resolveConfigPath(assetCtx, parsed.tail, where, asset.real, kind).catch((err: unknown) => {
      if (!(err instanceof KvdeskError)) throw err;
      throw packageError(
        `${describeWhere(where)} is ${JSON.stringify(ref)}, but shared asset sha256:${parsed.hex.slice(0, 12)}… has no ${kind === 'dir' ? 'folder' : 'file'} ${JSON.stringify(parsed.tail)}. Fix the path after the digest.`,
        where,
        { path: ref },
      );
    });
  }

  private async verify(hex: string, where: PackageWhere): Promise<VerifiedAsset> {
    const override = this.overrides.get(hex);
    const rel = override?.ref ?? defaultAssetDir(hex);
    const abs = path.isAbsolute(rel) ? path.normalize(rel) : path.resolve(this.ctx.root, ...rel.split(/[\\/]/));
    const shown = `sha256:${hex}`;
    const real = await realPathInside(this.ctx, abs, override?.where ?? where, 'manifest');
    const isDir = real !== undefined && (await fs.stat(real)).isDirectory();
    if (real === undefined || (!this.checkDigests && !isDir)) {
      throw packageError(
        `${describeWhere(where)} refers to the shared asset ${shown}, but ${relName(this.ctx, abs)}/ is not in the package. Add the asset folder (or fix the digest).`,
        where,
        { asset: shown },
      );
    }
    if (!this.checkDigests) return { real, files: [] };
    let hash: Awaited<ReturnType<typeof hashAssetDirectory>>;
    try {
      hash = await hashAssetDirectory(real);
    } catch (err) {
      if (err instanceof AssetContentError || (err as { code?: unknown }).code === 'ENOTDIR') {
        const reason = err instanceof AssetContentError ? err.message : 'it is not a folder';
        throw packageError(
          `${describeWhere(where)} refers to the shared asset ${shown}, but ${relName(this.ctx, abs)}: ${reason}. Replace it with the asset's regular files.`,
          where,
          { asset: shown },
        );
      }
      throw err;
    }
    if (hash.digest !== hex) {
      throw packageError(
        `${describeWhere(where)} refers to the shared asset ${shown}, but the files in ${relName(this.ctx, abs)}/ hash to sha256:${hash.digest}: ` +
          'the asset was changed or damaged after the package was made. Re-download or re-export the package; kvdesk does not load an asset whose content differs from its name.',
        where,
        { asset: shown, expectedDigest: hex, actualDigest: hash.digest, assetDir: relName(this.ctx, abs) },
      );
    }
    return {
      real,
      files: hash.files.map((f) => ({ path: relName(this.ctx, path.join(abs, ...f.path.split('/'))), bytes: f.bytes })),
    };
  }
}

/** The variant's `executor_info.ort`, reading its external JSON file when the manifest names one. */
async function ortInfoOf(ctx: PackageContext, variant: ManifestVariant): Promise<OrtExecutorInfo | undefined> {
  const ort = variant.ort;
  if (ort === undefined || 'place' in ort) return ort;
  const file = await resolveConfigPath(ctx, ort.ref, ort.where, variant.realDir, 'file', 'manifest');
  const doc = await readConfigFile(ctx, file);
  return parseOrtInfo(ctx, doc.data, new Place(doc.file, ''), file);
}

function describeOffer(variants: ManifestVariant[]): string {
  const byEp = new Map<string, string[]>();
  for (const v of variants) byEp.set(v.ep, [...(byEp.get(v.ep) ?? []), JSON.stringify(v.name)]);
  return [...byEp].map(([ep, names]) => `${ep} (variant ${names.join(', ')})`).join(', ');
}

/** Picks the variant to load; refuses with what the package offers and what this machine has when none fits. */
function chooseVariant(
  component: ManifestComponent,
  options: LoadOptions,
  available: string[],
  assumed: boolean,
): ManifestVariant {
  const variants = component.variants;
  const where = component.place.where('variants');
  const offered = [...new Set(variants.map((v) => v.ep))];
  const has = `this machine can use ${available.join(', ')}${assumed ? ' (assumed: no backend detection result was given to the loader, and every onnxruntime build has CPU)' : ''}`;
  const detail = { offered, available, variants: variants.map((v) => v.name) };
  if (variants.length === 0) {
    throw packageError(
      `${describeWhere(where)} is empty: the text model component "${component.name}" has no variant to load. Add at least one variant folder.`,
      where,
    );
  }
  if (options.variant !== undefined) {
    const picked = variants.find((v) => v.name === options.variant);
    if (picked === undefined) {
      throw packageError(
        `Variant ${JSON.stringify(options.variant)} is not in the package; ${describeWhere(where)} lists ${variants.map((v) => JSON.stringify(v.name)).join(', ')}. Pick one of those.`,
        where,
        detail,
      );
    }
    if (!available.includes(picked.ep)) {
      throw packageError(
        `Variant ${JSON.stringify(picked.name)} needs ${picked.ep}, which this machine cannot use: ${has}. The package offers ${describeOffer(variants)}; pick a variant for a backend this machine has.`,
        picked.place.where('ep'),
        detail,
      );
    }
    return picked;
  }
  if (options.backend !== undefined) {
    const wanted = providerName(options.backend);
    const picked = variants.find((v) => v.ep === wanted);
    if (picked === undefined) {
      throw packageError(
        `The package has no variant for ${wanted}: ${describeWhere(where)} offers ${describeOffer(variants)}. Pick one of those backends.`,
        where,
        detail,
      );
    }
    if (!available.includes(wanted)) {
      throw packageError(
        `${wanted} was picked for this model, but ${has}. Pick another backend the package offers (${offered.join(', ')}), or install ${wanted}'s libraries.`,
        where,
        detail,
      );
    }
    return picked;
  }
  const best = bestUsableProvider(offered, available);
  const picked = best === undefined ? undefined : variants.find((v) => v.ep === best);
  if (picked === undefined) {
    throw packageError(
      `${describeWhere(where)}: no variant of this package can run on this machine. The package offers ${describeOffer(variants)}; ${has}. ` +
        'Install the missing backend\'s libraries (for CUDA, onnxruntime-node\'s own installer: see README, "CUDA setup"), or get a variant of the package built for a backend this machine has.',
      where,
      detail,
    );
  }
  return picked;
}

/** Resolves the chosen variant's ORT options and loads its folder as layout 1–3. */
async function loadVariant(
  root: PackageContext,
  variant: ManifestVariant,
  resolver: SharedAssetResolver,
  options: LoadOptions,
  loadFolder: VariantLoader,
): Promise<{ spec: ModelSpec; ort: OrtExecutorInfo | undefined; ctx: PackageContext }> {
  const ctx = makeContext(variant.realDir, root.root);
  if (root.trusted === true) ctx.trusted = true;
  if (root.hfBlobs !== undefined) ctx.hfBlobs = root.hfBlobs;
  if (root.hfRepoName !== undefined) ctx.hfRepoName = root.hfRepoName;
  ctx.resolveSharedRef = (ref, where, kind) => resolver.resolve(ref, where, kind);
  const ort = await ortInfoOf(ctx, variant);
  const inner: LoadOptions = { ...options };
  delete inner.graphFile;
  if (ort?.modelFile !== undefined) {
    inner.graphFile = await resolveConfigPath(
      ctx,
      ort.modelFile.ref,
      ort.modelFile.where,
      variant.realDir,
      'file',
      'manifest',
    );
  }
  const spec = await loadFolder(ctx, inner);
  return { spec, ort, ctx };
}

/** Session options with path values resolved (shared assets, package-relative paths) for the engine. */
async function sessionEntries(
  ctx: PackageContext,
  ort: OrtExecutorInfo,
  base: string,
): Promise<Record<string, string>> {
  const out: Record<string, string> = { ...ort.sessionOptions };
  for (const [key, ref] of Object.entries(ort.sessionPathOptions)) {
    // A folder (external initializers) or a file (EP context): accept whichever exists.
    out[key] = await resolveConfigPath(ctx, ref.ref, ref.where, base, 'dir', 'manifest').catch(() =>
      resolveConfigPath(ctx, ref.ref, ref.where, base, 'file', 'manifest'),
    );
  }
  return out;
}

/** The figures of a variant that is not the chosen one; its problems become `unreadable`, never a refusal. */
async function describeOther(
  root: PackageContext,
  variant: ManifestVariant,
  resolver: SharedAssetResolver,
  options: LoadOptions,
  loadFolder: VariantLoader,
): Promise<Partial<PackageVariantInfo>> {
  try {
    const { spec } = await loadVariant(root, variant, resolver, options, loadFolder);
    return { layout: spec.layout, weightsBytes: spec.weightsBytes, bpt: spec.bpt, contextLength: spec.contextLength };
  } catch (err) {
    if (err instanceof KvdeskError) return { unreadable: err.message };
    throw err;
  }
}

/**
 * Loads the ORT model package at `ctx.root`. `loadFolder` loads a variant
 * folder as layout 1–3. The returned spec describes the chosen variant and
 * lists every variant of the text model with its figures.
 */
export async function loadOrtPackage(
  ctx: PackageContext,
  options: LoadOptions,
  loadFolder: VariantLoader,
): Promise<ModelSpec> {
  const manifest = await readOrtManifest(
    ctx,
    options.trustInstalled === undefined ? {} : { trustInstalled: options.trustInstalled },
  );
  const component = textComponent(manifest);
  const assumed = options.availableBackends === undefined;
  const available = [...new Set((options.availableBackends ?? [CPU_PROVIDER]).map(providerName))];
  const chosen = chooseVariant(component, options, available, assumed);
  const resolver = new SharedAssetResolver(ctx, manifest.assetOverrides);
  const describer = new SharedAssetResolver(ctx, manifest.assetOverrides, false);
  const { spec, ort, ctx: variantCtx } = await loadVariant(ctx, chosen, resolver, options, loadFolder);

  const variants: PackageVariantInfo[] = [];
  for (const v of component.variants) {
    const info: PackageVariantInfo = {
      component: component.name,
      name: v.name,
      ep: v.ep,
      directory: relName(ctx, v.dir),
      usable: available.includes(v.ep),
    };
    if (v.device !== undefined) info.device = v.device;
    if (v.precision !== undefined) info.precision = v.precision;
    if (v.compatibilityString !== undefined) info.compatibilityString = v.compatibilityString;
    const figures =
      v === chosen
        ? { layout: spec.layout, weightsBytes: spec.weightsBytes, bpt: spec.bpt, contextLength: spec.contextLength }
        : await describeOther(ctx, v, describer, options, loadFolder);
    variants.push({ ...info, ...figures });
  }

  const files = new Map<string, number>();
  const add = (list: PackageFile[]): void => {
    for (const f of list) files.set(f.path, f.bytes);
  };
  add(spec.files);
  for (const c of manifest.components) if (c.file !== undefined) add(await fileEntry(ctx, c.file));
  if (ort?.file !== undefined) add(await fileEntry(ctx, ort.file));
  for (const asset of await resolver.used()) add(asset.files);
  add(await fileEntry(ctx, path.join(ctx.root, 'manifest.json')));

  const result: ModelSpec = {
    ...spec,
    layout: 'ort-package',
    displayName: manifest.info.packageName ?? spec.displayName,
    files: [...files]
      .map(([p, bytes]) => ({ path: p, bytes }))
      .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)),
    backends: [...new Set(component.variants.map((v) => v.ep))],
    variants,
    selectedVariant: chosen.name,
    executionProvider: chosen.ep,
    packageInfo: { ...manifest.info, component: component.name },
    warnings: [...ctx.warnings, ...variantCtx.warnings],
  };
  if (ort !== undefined && Object.keys(ort.providerOptions).length > 0) result.providerOptions = ort.providerOptions;
  if (ort !== undefined) {
    const entries = await sessionEntries(variantCtx, ort, chosen.realDir);
    if (Object.keys(entries).length > 0) result.sessionConfigEntries = entries;
  }
  return result;
}

/** A package file (manifest, component.json, ort_info.json) for the spec's file list; none when it is not a file. */
async function fileEntry(ctx: PackageContext, abs: string): Promise<PackageFile[]> {
  const stat = await fs.stat(abs).catch(() => undefined);
  return stat?.isFile() === true ? [{ path: relName(ctx, abs), bytes: stat.size }] : [];
}
