/**
 * Reads and validates an ORT model package's manifest.json and its components
 * (PACKAGES.md layout 4, ONNX Runtime's model_package schema 1.x). Everything
 * the manifest declares is checked here, for every variant, before any variant
 * is loaded: a package that breaks the path rules anywhere is refused whole.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { PackageManifestInfo } from '../../shared/model-spec';
import { type ConfigDoc, describeValue, readConfigFile } from './config-file';
import { CPU_PROVIDER, providerName } from './execution-providers';
import { describeWhere, type PackageWhere, packageError } from './package-error';
import { checkPathRef, isSharedRef, type PackageContext, realPathInside, relName } from './package-fs';
import { parseSharedRef } from './shared-assets';

/** The schema majors this loader understands (ONNX Runtime's model_package library: 1). */
export const SUPPORTED_SCHEMA_MAJOR = 1;

const TOP_LEVEL_KEYS = new Set([
  'schema_version',
  'package_name',
  'package_version',
  'description',
  'layout',
  'components',
  'shared_assets',
  'additional_metadata',
]);

/**
 * Session options a package may not set: they make onnxruntime write files,
 * and a downloaded package must not choose where the app writes. (ONNX Runtime
 * refuses the same keys in a package.)
 */
const FORBIDDEN_SESSION_OPTIONS = new Set([
  'session.debug_layout_transformation',
  'session.collect_node_memory_stats_to_file',
  'session.enable_profiling',
  'session.optimized_model_filepath',
  // Makes a compiling execution provider write an EP-context model beside the graph.
  'ep.context_enable',
]);

/**
 * Session options that set what kvdesk decides for the whole engine, not for
 * one model: thread counts and their placement (kvdesk runs every model with
 * the threads it is given), the optimization level, memory arena and pattern,
 * execution mode, compile-only sessions (which cannot run), and flush-to-zero
 * (onnxruntime sets it for the whole process). A package's value for one of
 * them is left out, with a warning.
 */
const ENGINE_SESSION_OPTIONS = new Set([
  'session.intra_op_num_threads',
  'session.inter_op_num_threads',
  'session.intra_op_thread_affinities',
  'session.use_per_session_threads',
  'session.graph_optimization_level',
  'session.execution_mode',
  'session.enable_cpu_mem_arena',
  'session.enable_mem_pattern',
  'session.compile_only',
  'session.set_denormal_as_zero',
]);

/** onnxruntime's longest config key. */
const MAX_SESSION_KEY = 1024;

/** Session options whose values are paths; they follow the package path rules and are resolved like model_file. */
export const PATH_SESSION_OPTIONS = new Set([
  'session.model_external_initializers_file_folder_path',
  'ep.context_file_path',
]);

/** A place in a package file: the file and the field prefix of the object being read. */
export class Place {
  constructor(
    readonly file: string,
    readonly prefix: string,
  ) {}

  at(field: string): Place {
    return new Place(this.file, this.field(field));
  }

  field(field: string): string {
    return this.prefix === '' ? field : `${this.prefix}.${field}`;
  }

  where(field?: string): PackageWhere {
    const f = field === undefined ? this.prefix : this.field(field);
    return f === '' ? { file: this.file } : { file: this.file, field: f };
  }

  fail(field: string | undefined, problem: string, fix: string, extra: Record<string, string | number> = {}): never {
    const where = this.where(field);
    throw packageError(`${describeWhere(where)} ${problem}. ${fix}`, where, extra);
  }
}

/** A string reference written in the package, with where it was written. */
export interface PathRef {
  ref: string;
  where: PackageWhere;
}

/** `executor_info.ort`, parsed. */
export interface OrtExecutorInfo {
  /** Where the body lives: the manifest/component file, or its own JSON file. */
  place: Place;
  /** Absolute path of the external ort_info JSON file, when the body is in one. */
  file?: string;
  modelFile?: PathRef;
  sessionOptions: Record<string, string>;
  /** Path-valued session options, resolved when the variant is loaded. */
  sessionPathOptions: Record<string, PathRef>;
  providerOptions: Record<string, string>;
}

/** One variant as the manifest declares it, with its folder checked. */
export interface ManifestVariant {
  component: string;
  name: string;
  place: Place;
  /** Variant folder as resolved (a symlink inside the package stays a link). */
  dir: string;
  /** Its real path. */
  realDir: string;
  ep: string;
  device?: string;
  compatibilityString?: string;
  precision?: string;
  /** `executor_info.ort`: a string (path of a JSON file, read when the variant is loaded) or the parsed body. */
  ort?: OrtExecutorInfo | PathRef;
}

/** One component with its variants. */
export interface ManifestComponent {
  name: string;
  place: Place;
  /** Folder variant paths are resolved against. */
  dir: string;
  /** Absolute path of component.json (or the named file) for an external component. */
  file?: string;
  variants: ManifestVariant[];
}

/** The parsed manifest. */
export interface OrtManifest {
  info: Omit<PackageManifestInfo, 'component'>;
  components: ManifestComponent[];
  /** `shared_assets` overrides: digest → where the asset folder is. */
  assetOverrides: Map<string, PathRef>;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function optionalString(data: Record<string, unknown>, key: string, place: Place): string | undefined {
  const value = data[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') place.fail(key, `is ${describeValue(value)}, not a string`, 'Write a string there.');
  return value;
}

/** `"1.0"`, `"1"` or `1` → { major, minor }; anything else is refused naming `schema_version`. */
function parseSchemaVersion(value: unknown, place: Place): { text: string; major: number } {
  if (value === undefined || value === null) {
    place.fail(
      'schema_version',
      'is missing',
      `Add "schema_version": "${SUPPORTED_SCHEMA_MAJOR}.0" (ORT model packages declare the format version they follow).`,
    );
  }
  const text = typeof value === 'number' ? String(value) : value;
  const m = typeof text === 'string' ? /^(\d+)(?:\.(\d+))?$/.exec(text.trim()) : null;
  if (m === null || m[1] === undefined) {
    return place.fail(
      'schema_version',
      `is ${describeValue(value)}, not a version like "${SUPPORTED_SCHEMA_MAJOR}.0"`,
      'Write "<major>.<minor>", e.g. "1.0".',
    );
  }
  const major = Number(m[1]);
  if (major !== SUPPORTED_SCHEMA_MAJOR) {
    place.fail(
      'schema_version',
      `is ${JSON.stringify(text)}: major version ${major}, but kvdesk reads ORT model packages of major version ${SUPPORTED_SCHEMA_MAJOR} only (a new major changes what the fields mean)`,
      `Use a package exported with schema ${SUPPORTED_SCHEMA_MAJOR}.x, or load one of its variant folders directly.`,
      { schemaVersion: String(text) },
    );
  }
  return { text: String(text), major };
}

/** A map of string → string (ORT session/provider options). Numbers and booleans are written as ORT would parse them. */
function stringMap(value: unknown, place: Place, field: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (!isObject(value))
    place.fail(field, `is ${describeValue(value)}, not an object`, 'Write an object of "key": "value" strings.');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v === 'string') out[k] = v;
    else if (typeof v === 'number') out[k] = String(v);
    // onnxruntime's switches read "1" as on; "true" would be read as off.
    else if (typeof v === 'boolean') out[k] = v ? '1' : '0';
    else
      place.fail(
        `${field}.${k}`,
        `is ${describeValue(v)}, not a string`,
        'onnxruntime takes option values as strings: write it in quotes.',
      );
  }
  return out;
}

/** Parses an `executor_info.ort` body (inline or from its own file). */
export function parseOrtInfo(ctx: PackageContext, body: unknown, place: Place, file?: string): OrtExecutorInfo {
  if (!isObject(body)) {
    place.fail(undefined, `is ${describeValue(body)}, not an object`, 'Write { "model_file": "model.onnx", ... }.');
  }
  const info: OrtExecutorInfo = {
    place,
    sessionOptions: {},
    sessionPathOptions: {},
    providerOptions: stringMap(body.provider_options, place, 'provider_options'),
  };
  if (file !== undefined) info.file = file;
  const modelFile = optionalString(body, 'model_file', place);
  if (modelFile !== undefined) {
    checkRef(ctx, modelFile, place.where('model_file'), 'a file');
    info.modelFile = { ref: modelFile, where: place.where('model_file') };
  }
  for (const [key, value] of Object.entries(stringMap(body.session_options, place, 'session_options'))) {
    const field = `session_options.${key}`;
    if (key.length === 0 || key.length > MAX_SESSION_KEY) {
      place.fail(
        field,
        `is a key of ${key.length} characters; onnxruntime takes keys of 1 to ${MAX_SESSION_KEY}`,
        'Fix or remove the option.',
      );
    }
    if (ENGINE_SESSION_OPTIONS.has(key)) {
      ctx.warnings.push(
        `${describeWhere(place.where(field))} was ignored: kvdesk sets this for the whole engine (threads, optimization, memory), not per model.`,
      );
      continue;
    }
    if (FORBIDDEN_SESSION_OPTIONS.has(key)) {
      place.fail(
        field,
        'makes onnxruntime write a file, which a model package may not choose',
        'Remove it from the package; set it in kvdesk instead if you need it.',
      );
    }
    if (PATH_SESSION_OPTIONS.has(key)) {
      checkRef(ctx, value, place.where(field), 'a file');
      info.sessionPathOptions[key] = { ref: value, where: place.where(field) };
    } else info.sessionOptions[key] = value;
  }
  return info;
}

/**
 * Checks a reference as written: a `sha256:` reference must be well formed, any
 * other path must follow the layout's path rules. Existence is checked when
 * the reference is resolved.
 */
export function checkRef(ctx: PackageContext, ref: string, where: PackageWhere, what: string): void {
  if (isSharedRef(ref)) {
    const parsed = parseSharedRef(ref);
    const tail = parsed?.tail;
    if (parsed === undefined) {
      throw packageError(
        `${describeWhere(where)} is ${JSON.stringify(ref)}, not a valid shared-asset reference. Write sha256:<64 lowercase hex digits>, optionally followed by /path inside the asset.`,
        where,
        { path: ref },
      );
    }
    // Inside an asset folder the rules hold even for trusted packages: a tail names a file of the asset.
    if (tail !== undefined) checkPathRef({ ...ctx, trusted: false }, tail, where, what);
    return;
  }
  checkPathRef(ctx, ref, where, what);
}

/**
 * Resolves a folder the manifest names (a component or variant directory)
 * against `base`: path rules first, then it must exist, be a folder, and not
 * lead outside the package through a symlink.
 */
async function resolveFolder(
  ctx: PackageContext,
  ref: string,
  base: string,
  where: PackageWhere,
  fix: string,
): Promise<{ abs: string; real: string }> {
  checkPathRef(ctx, ref, where, 'a folder');
  const abs = path.isAbsolute(ref) ? path.normalize(ref) : path.resolve(base, ...ref.split(/[\\/]/));
  const real = await realPathInside(ctx, abs, where, 'manifest');
  const stat = real === undefined ? undefined : await fs.stat(real);
  if (real === undefined || stat?.isDirectory() !== true) {
    throw packageError(
      `${describeWhere(where)} names ${JSON.stringify(ref)}, but ${relName(ctx, abs)} ${real === undefined ? 'does not exist in the package' : 'is not a folder'}. ${fix}`,
      where,
      { path: ref },
    );
  }
  return { abs, real };
}

async function readVariant(
  ctx: PackageContext,
  component: string,
  name: string,
  body: unknown,
  place: Place,
  componentDir: string,
): Promise<ManifestVariant> {
  if (!isObject(body)) {
    place.fail(
      undefined,
      `is ${describeValue(body)}, not an object`,
      'Write the variant as { "ep": "CPUExecutionProvider", ... }.',
    );
  }
  const dirRef = optionalString(body, 'variant_directory', place) ?? name;
  // The default (the variant's name) is reported under the field that would set it.
  const { abs, real } = await resolveFolder(
    ctx,
    dirRef,
    componentDir,
    place.where('variant_directory'),
    body.variant_directory === undefined
      ? `Variant "${name}" has no variant_directory, so its folder is its name: create ${JSON.stringify(name)} next to the component, or set variant_directory.`
      : 'Create the folder or fix the name.',
  );
  const epText = optionalString(body, 'ep', place);
  const ep = epText === undefined ? CPU_PROVIDER : providerName(epText);
  if (epText === undefined) {
    ctx.warnings.push(
      `${describeWhere(place.where())} declares no \`ep\`; kvdesk treats variant "${name}" as a CPUExecutionProvider variant.`,
    );
  }
  const variant: ManifestVariant = { component, name, place, dir: abs, realDir: real, ep };
  const device = optionalString(body, 'device', place);
  if (device !== undefined) variant.device = device;
  const compat = optionalString(body, 'compatibility_string', place);
  if (compat !== undefined) variant.compatibilityString = compat;
  const meta = body.additional_metadata;
  if (isObject(meta) && typeof meta.precision === 'string') variant.precision = meta.precision;

  const executorInfo = body.executor_info;
  if (executorInfo !== undefined && executorInfo !== null) {
    if (!isObject(executorInfo)) {
      place.fail(
        'executor_info',
        `is ${describeValue(executorInfo)}, not an object`,
        'Write { "ort": { "model_file": ... } }.',
      );
    }
    for (const [ns, value] of Object.entries(executorInfo)) {
      if (typeof value !== 'string' && !isObject(value)) {
        place.fail(
          `executor_info.${ns}`,
          `is ${describeValue(value)}`,
          'Each consumer entry is a path to a JSON file (a string) or an inline object.',
        );
      }
    }
    const ort = executorInfo.ort;
    const ortPlace = place.at('executor_info.ort');
    if (typeof ort === 'string') {
      checkRef(ctx, ort, ortPlace.where(), 'a file');
      variant.ort = { ref: ort, where: ortPlace.where() };
    } else if (ort !== undefined) {
      variant.ort = parseOrtInfo(ctx, ort, ortPlace);
    }
  }
  return variant;
}

/** Reads an external component: a folder holding component.json, or a JSON file. */
async function readExternalComponent(
  ctx: PackageContext,
  ref: string,
  where: PackageWhere,
): Promise<{ doc: ConfigDoc; dir: string; file: string }> {
  checkPathRef(ctx, ref, where, 'a file');
  const abs = path.isAbsolute(ref) ? path.normalize(ref) : path.resolve(ctx.root, ...ref.split(/[\\/]/));
  const real = await realPathInside(ctx, abs, where, 'manifest');
  if (real === undefined) {
    throw packageError(
      `${describeWhere(where)} names ${JSON.stringify(ref)}, but ${relName(ctx, abs)} does not exist in the package. Add the component folder (with component.json) or fix the path.`,
      where,
      { path: ref },
    );
  }
  const stat = await fs.stat(real);
  let file = abs;
  let dir = path.dirname(abs);
  if (stat.isDirectory()) {
    file = path.join(abs, 'component.json');
    dir = abs;
    const inner = await realPathInside(ctx, file, where, 'manifest');
    if (inner === undefined) {
      throw packageError(
        `${describeWhere(where)} names the folder ${JSON.stringify(ref)}, which has no component.json. An external component folder must hold component.json with its "variants".`,
        where,
        { path: ref },
      );
    }
  }
  return { doc: await readConfigFile(ctx, file), dir, file };
}

async function readComponent(
  ctx: PackageContext,
  name: string,
  value: unknown,
  manifestPlace: Place,
): Promise<ManifestComponent> {
  const keyPlace = manifestPlace.at(`components.${name}`);
  let body: Record<string, unknown>;
  let place: Place;
  let dir = ctx.root;
  let file: string | undefined;
  if (typeof value === 'string') {
    const ext = await readExternalComponent(ctx, value, keyPlace.where());
    body = ext.doc.data;
    place = new Place(ext.doc.file, '');
    dir = ext.dir;
    file = ext.file;
  } else if (isObject(value)) {
    body = value;
    place = keyPlace;
  } else {
    return keyPlace.fail(
      undefined,
      `is ${describeValue(value)}`,
      'A component is an inline object with "variants", or the path of its folder (holding component.json) or JSON file.',
    );
  }
  const declared = body.component_name;
  if (declared !== undefined && declared !== null && declared !== name) {
    place.fail(
      'component_name',
      `is ${describeValue(declared)}, but the component is listed under the key ${JSON.stringify(name)} in manifest.json`,
      'Make them equal (or remove component_name): kvdesk will not guess which name is meant.',
      { componentKey: name },
    );
  }
  const variants = body.variants;
  if (variants === undefined || variants === null) {
    place.fail(
      'variants',
      'is missing',
      'List the component\'s variants, e.g. "variants": { "cpu": { "ep": "CPUExecutionProvider" } }.',
    );
  }
  if (!isObject(variants))
    place.fail('variants', `is ${describeValue(variants)}, not an object`, 'Write a map of variant name → variant.');
  const out: ManifestVariant[] = [];
  for (const [variantName, variantBody] of Object.entries(variants)) {
    out.push(await readVariant(ctx, name, variantName, variantBody, place.at(`variants.${variantName}`), dir));
  }
  const component: ManifestComponent = { name, place, dir, variants: out };
  if (file !== undefined) component.file = file;
  return component;
}

/** Reads manifest.json in `ctx.root` and validates the whole package structure. */
export async function readOrtManifest(
  ctx: PackageContext,
  options: { trustInstalled?: boolean } = {},
): Promise<OrtManifest> {
  const doc = await readConfigFile(ctx, path.join(ctx.root, 'manifest.json'));
  const data = doc.data;
  const place: Place = new Place(doc.file, '');
  const version = parseSchemaVersion(data.schema_version, place);

  const layoutValue = data.layout ?? 'portable';
  if (layoutValue !== 'portable' && layoutValue !== 'installed') {
    place.fail('layout', `is ${describeValue(layoutValue)}`, 'Write "portable" (the default) or "installed".');
  }
  if (layoutValue === 'installed') {
    if (options.trustInstalled !== true) {
      place.fail(
        'layout',
        'is "installed": the package may name files anywhere on this machine (absolute paths, "..")',
        'kvdesk loads such a package only when you trust it explicitly: --trust-installed on the command line (kvdesk generate, chat, inspect, serve --model), "Trust this package" in the window; otherwise use the portable form of the package.',
      );
    }
    ctx.trusted = true;
    ctx.warnings.push(
      'manifest.json: `layout` is "installed" and the package was trusted: its paths may lead outside the package folder.',
    );
  }
  for (const key of Object.keys(data)) {
    if (!TOP_LEVEL_KEYS.has(key)) ctx.warnings.push(`manifest.json: unknown field \`${key}\` was ignored.`);
  }
  const info: OrtManifest['info'] = { schemaVersion: version.text, layout: layoutValue };
  const packageName = optionalString(data, 'package_name', place);
  if (packageName !== undefined) info.packageName = packageName;
  const packageVersion = optionalString(data, 'package_version', place);
  if (packageVersion !== undefined) info.packageVersion = packageVersion;
  const description = optionalString(data, 'description', place);
  if (description !== undefined) info.description = description;

  const assetOverrides = new Map<string, PathRef>();
  const assets = data.shared_assets;
  if (assets !== undefined && assets !== null) {
    if (!isObject(assets))
      place.fail(
        'shared_assets',
        `is ${describeValue(assets)}, not an object`,
        'Write a map of "sha256:<hex>" → folder path.',
      );
    for (const [uri, value] of Object.entries(assets)) {
      const field = `shared_assets.${uri}`;
      const parsed = parseSharedRef(uri);
      if (parsed === undefined || parsed.tail !== undefined) {
        place.fail(
          field,
          'is keyed by something other than sha256:<64 lowercase hex digits>',
          'Key each shared asset by its digest URI.',
        );
      }
      if (typeof value !== 'string')
        place.fail(field, `is ${describeValue(value)}, not a path`, 'Write the folder path of the asset.');
      checkPathRef(ctx, value, place.where(field), 'a folder');
      assetOverrides.set(parsed.hex, { ref: value, where: place.where(field) });
    }
  }

  const components = data.components;
  if (components === undefined || components === null) {
    place.fail(
      'components',
      'is missing',
      'An ORT model package maps component names to their variants, e.g. "components": { "model": { "variants": { "cpu": { "ep": "CPUExecutionProvider" } } } }. ' +
        'Add it. Load one of its variant folders directly instead if only the manifest is broken.',
    );
  }
  if (!isObject(components))
    place.fail(
      'components',
      `is ${describeValue(components)}, not an object`,
      'Write a map of component name → component.',
    );
  const names = Object.keys(components);
  if (names.length === 0)
    place.fail('components', 'is empty', 'List at least the text model\'s component, named "model".');
  const out: ManifestComponent[] = [];
  for (const name of names) out.push(await readComponent(ctx, name, components[name], place));
  return { info, components: out, assetOverrides };
}

/**
 * The component that is the text model: the one named `model`, or the only
 * one. Several others and no `model` is refused rather than guessed.
 */
export function textComponent(manifest: OrtManifest): ManifestComponent {
  const byName = manifest.components.find((c) => c.name === 'model');
  if (byName !== undefined) return byName;
  const [only, ...others] = manifest.components;
  if (only !== undefined && others.length === 0) return only;
  const names = manifest.components.map((c) => JSON.stringify(c.name)).join(', ');
  throw packageError(
    `manifest.json: \`components\` lists ${names} and none is named "model", so kvdesk cannot tell which is the text model. Name the text model's component "model".`,
    { file: 'manifest.json', field: 'components' },
    { components: manifest.components.map((c) => c.name) },
  );
}

/**
 * True when `abs` (a manifest.json) reads as an ORT package manifest: a JSON
 * object with `schema_version` or `components`. Hugging Face repositories
 * sometimes carry an unrelated manifest.json; when one does not look like a
 * package manifest, the folder's other marker decides its layout.
 */
export async function looksLikeOrtManifest(abs: string, maxBytes: number): Promise<boolean> {
  const stat = await fs.stat(abs);
  // Too big to be anything but a hostile package manifest: let the loader refuse it with the size.
  if (stat.size > maxBytes) return true;
  try {
    const data: unknown = JSON.parse(await fs.readFile(abs, 'utf8'));
    return isObject(data) && ('schema_version' in data || 'components' in data);
  } catch {
    return false;
  }
}
