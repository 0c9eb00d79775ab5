import { promises as fs } from 'node:fs';
import path from 'node:path';
import { KvdeskError } from '../../shared/errors';
import type { PackageFile } from '../../shared/model-spec';
import { describeWhere, type PackageWhere, packageError } from './package-error';

/**
 * What a layout loader works in. `root` is the containment boundary (the folder
 * the person picked); `dir` holds this layout's files. They are the same for
 * layouts 1–3; an ORT model package (layout 4) points `dir` at a variant folder
 * inside `root`, so every path check still guards the whole package.
 */
export interface PackageContext {
  /** Real path of the package root. */
  root: string;
  /** Real path of the folder holding this layout's files (root or a folder inside it). */
  dir: string;
  /** Non-fatal findings, collected while loading and returned in the spec. */
  warnings: string[];
  /**
   * True only for an ORT package with `"layout": "installed"` that the person
   * chose to trust: its paths may then be absolute, contain `..` and lead
   * outside `root`. Everything else is confined to `root`.
   */
  trusted?: boolean;
  /**
   * Set when the package is (inside) a snapshot of the Hugging Face download cache
   * (`models--<owner>--<name>/snapshots/<revision>/`): the real path of that repo's
   * `blobs/` folder, where every file of a snapshot is a symlink to. Links found in
   * the package may lead there; paths an ORT manifest names may not.
   */
  hfBlobs?: string;
  /** For such a package, its name in the hub (`owner/name`, and the folder inside the snapshot if any): the revision folder's name is a hash. */
  hfRepoName?: string;
  /**
   * Resolves a `sha256:<hex>[/tail]` shared-asset reference to an absolute path
   * (after checking the asset's digest). Set by the ORT package loader; without
   * it such a reference is refused, since only a package has shared assets.
   */
  resolveSharedRef?: (ref: string, where: PackageWhere, kind: 'file' | 'dir') => Promise<string>;
}

/** Creates a context for a layout folder; `root` defaults to `dir`. Both must already be real paths. */
export function makeContext(dir: string, root: string = dir): PackageContext {
  return { root, dir, warnings: [] };
}

/**
 * The Hugging Face cache repo folder (`…/models--<owner>--<name>`) and the real path of its `blobs/`, when `root`
 * (a real path) is a snapshot folder of it or a folder inside one; undefined otherwise. `hf download`
 * (formerly `huggingface-cli download`) without --local-dir writes a snapshot as symlinks into blobs/.
 */
export async function hfCacheRepo(root: string): Promise<{ repo: string; blobs: string; name: string } | undefined> {
  const at = hfCachePlace(root);
  if (!at) return undefined;
  // blobs/ itself, not a link: a blobs that links elsewhere (to /) would let a snapshot read any file.
  const blobs = path.join(at.repo, 'blobs');
  const stat = await fs.lstat(blobs).catch(() => undefined);
  if (stat?.isDirectory() !== true) return undefined;
  return { repo: at.repo, blobs, name: at.name };
}

/**
 * Where `root` sits in a Hugging Face cache by its path alone: the repo folder and the name the package goes by
 * (models--me--tiny/snapshots/<rev>/sub is me/tiny/sub: the cache writes "/" as "--"), or undefined. The library
 * names such a folder so rather than by its revision hash.
 */
export function hfCachePlace(root: string): { repo: string; name: string } | undefined {
  const parts = root.split(path.sep);
  for (let i = parts.length - 2; i >= 1; i--) {
    const repoName = parts[i - 1] ?? '';
    if (parts[i] !== 'snapshots' || !/^models--.+/.test(repoName)) continue;
    const repo = parts.slice(0, i).join(path.sep) || path.sep;
    const name = [repoName.slice('models--'.length).split('--').join('/'), ...parts.slice(i + 2)].join('/');
    return { repo, name };
  }
  return undefined;
}

/** Whether `real` (a resolved path) may be read for this package: inside it, or a blob of its Hugging Face cache repo. */
function allowedTarget(ctx: PackageContext, real: string, named: 'found' | 'manifest'): boolean {
  if (isInside(ctx.root, real)) return true;
  return named === 'found' && ctx.hfBlobs !== undefined && isInside(ctx.hfBlobs, real);
}

/** True for a `sha256:` shared-asset reference (ORT model packages), whatever follows the prefix. */
export function isSharedRef(ref: string): boolean {
  return ref.startsWith('sha256:');
}

/** Path of `abs` relative to the package root with forward slashes, as messages and PackageFile use it. */
export function relName(ctx: PackageContext, abs: string): string {
  const rel = path.relative(ctx.root, abs);
  return rel === '' ? '.' : rel.split(path.sep).join('/');
}

function isInside(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * Checks that a path found inside the package (by listing a folder) does not
 * escape it through a symlink, and returns its real path; undefined when the
 * entry does not exist. Symlinks inside the package are fine, and so are those of
 * a Hugging Face cache snapshot into its repo's blobs/ (`ctx.hfBlobs`), except for
 * a path an ORT manifest names (`named: 'manifest'`), which must stay inside the package.
 */
export async function realPathInside(
  ctx: PackageContext,
  abs: string,
  where: PackageWhere,
  named: 'found' | 'manifest' = 'found',
): Promise<string | undefined> {
  let real: string;
  try {
    real = await fs.realpath(abs);
  } catch (err) {
    if (isNotFound(err)) {
      // A dangling symlink is there but unusable: say so instead of "missing".
      const link = await fs.lstat(abs).catch(() => undefined);
      if (link?.isSymbolicLink()) {
        throw packageError(
          `${describeWhere(where)}: ${relName(ctx, abs)} is a symlink to a file that does not exist. Replace it with the real file.`,
          where,
          { symlink: 'dangling' },
        );
      }
      return undefined;
    }
    // model.onnx → a.onnx → model.onnx: no permission would help (it was "Could not read … Check … permissions").
    if ((err as { code?: unknown } | null)?.code === 'ELOOP') {
      const file = relName(ctx, abs);
      const at = where.field === undefined && where.file === file ? '' : `${describeWhere(where)}: `;
      throw packageError(
        `${at}${file} is a symbolic link that loops (following it leads back to itself); replace it with the real file.`,
        where,
        { symlink: 'loop' },
      );
    }
    throw err;
  }
  if (ctx.trusted !== true && !allowedTarget(ctx, real, named)) {
    const blobs =
      ctx.hfBlobs === undefined
        ? ''
        : named === 'manifest'
          ? ` (links into the Hugging Face cache's ${ctx.hfBlobs} are allowed for the model's files, not for a path manifest.json names: download the package with \`hf download <repo> --local-dir <folder>\` to get real files)`
          : ` or the Hugging Face cache's ${ctx.hfBlobs}`;
    throw packageError(
      `${describeWhere(where)}: ${relName(ctx, abs)} resolves through a symlink to ${real}, outside the package folder ${ctx.root}${blobs}. ` +
        'kvdesk only reads files inside the package: copy the file into the package instead of linking to it.',
      where,
      { resolvedPath: real },
    );
  }
  return real;
}

/**
 * The refusal of a symbolic link that cannot be followed (one that loops, or leads to nothing), as realPathInside
 * throws it; undefined for any other error.
 */
export function brokenLink(err: unknown): KvdeskError | undefined {
  const kind = err instanceof KvdeskError ? err.detail?.symlink : undefined;
  return kind === 'loop' || kind === 'dangling' ? (err as KvdeskError) : undefined;
}

/**
 * Checks a path written in a package file against the path rules without
 * touching the disk: not empty, and (unless the package is trusted) neither
 * absolute nor containing `..`. Shared to keep one wording for every refusal.
 */
export function checkPathRef(ctx: PackageContext, ref: string, where: PackageWhere, what = 'a file'): void {
  const shown = JSON.stringify(ref);
  if (ref.trim() === '') {
    throw packageError(`${describeWhere(where)} is empty. Name ${what} inside the package.`, where);
  }
  // No file system takes one (Node refuses the path outright): the file that wrote it is damaged.
  if (ref.includes('\0')) {
    throw packageError(
      `${describeWhere(where)} is ${shown}, which holds a NUL character, so it names no file. The file that holds it is damaged or was written wrongly: re-export or re-download it.`,
      where,
      { path: ref },
    );
  }
  if (ctx.trusted === true) return;
  // Both separators and drive letters count: a package written on Windows must not escape on any OS.
  if (path.isAbsolute(ref) || path.win32.isAbsolute(ref) || /^[a-zA-Z]:/.test(ref)) {
    throw packageError(
      `${describeWhere(where)} is the absolute path ${shown}. Paths in a package must be relative to the package folder; write the ${what === 'a folder' ? 'folder' : 'file'} name relative to it.`,
      where,
      { path: ref },
    );
  }
  if (ref.split(/[\\/]/).includes('..')) {
    throw packageError(
      `${describeWhere(where)} is ${shown}, which contains "..". Paths in a package may not leave the package folder; put the ${what === 'a folder' ? 'folder' : 'file'} inside it and name it without "..".`,
      where,
      { path: ref },
    );
  }
}

/**
 * Resolves a path written in a config file (e.g. genai_config `decoder.filename`,
 * an external-data `location`) against `base`, refusing anything that could
 * read outside the package: absolute paths, `..` segments, and symlinks that
 * lead out (`named: 'manifest'` for a path an ORT manifest names: see realPathInside).
 * A `sha256:` reference goes to the package's shared assets. Returns
 * the absolute path; a missing file (or folder, for kind 'dir') is an error naming the field.
 */
export async function resolveConfigPath(
  ctx: PackageContext,
  ref: string,
  where: PackageWhere,
  base: string = ctx.dir,
  kind: 'file' | 'dir' = 'file',
  named: 'found' | 'manifest' = 'found',
): Promise<string> {
  const shown = JSON.stringify(ref);
  if (isSharedRef(ref)) {
    if (ctx.resolveSharedRef === undefined) {
      throw packageError(
        `${describeWhere(where)} is the shared-asset reference ${shown}, but only an ORT model package (a folder with manifest.json and shared_assets/) has shared assets. Load the whole package, or copy the file into this folder and name it.`,
        where,
        { path: ref },
      );
    }
    return ctx.resolveSharedRef(ref, where, kind);
  }
  const what = kind === 'dir' ? 'a folder' : 'a file';
  checkPathRef(ctx, ref, where, what);
  // Absolute paths get here only in a trusted installed package.
  const abs = path.isAbsolute(ref) ? path.normalize(ref) : path.resolve(base, ...ref.split(/[\\/]/));
  const real = await realPathInside(ctx, abs, where, named);
  const stat = real === undefined ? undefined : await fs.stat(real);
  const ok = kind === 'dir' ? stat?.isDirectory() === true : stat?.isFile() === true;
  if (!ok) {
    const problem = real === undefined ? 'does not exist in the package' : `is not ${what}`;
    throw packageError(
      `${describeWhere(where)} names ${shown}, but ${relName(ctx, abs)} ${problem}. Add the ${kind === 'dir' ? 'folder' : 'file'} or fix the name.`,
      where,
      { path: ref },
    );
  }
  // The link path, not its target: external data is found relative to the graph's own folder.
  return abs;
}

/**
 * Finds the file `name` directly inside `dir`, or undefined. Returns the path as
 * found (a symlink stays a symlink) after checking its target is inside the package.
 */
export async function findFile(ctx: PackageContext, name: string, dir: string = ctx.dir): Promise<string | undefined> {
  const abs = path.join(dir, name);
  const real = await realPathInside(ctx, abs, { file: relName(ctx, abs) });
  if (real === undefined) return undefined;
  const stat = await fs.stat(real);
  if (stat.isFile()) return abs;
  // There, but no file: said so, not "missing" (a folder of that name, a pipe that would never end a read).
  const kind = stat.isDirectory()
    ? 'a folder'
    : stat.isFIFO()
      ? 'a named pipe (FIFO)'
      : stat.isSocket()
        ? 'a socket'
        : 'a device';
  const file = relName(ctx, abs);
  throw packageError(`${file} is ${kind}, not a file. Put the package's ${name} there instead.`, { file });
}

/** Names of the regular files (or symlinks to them) directly inside `dir`; empty when `dir` is missing. */
export async function listFileNames(dir: string): Promise<string[]> {
  let entries: import('node:fs').Dirent[];
  try {
    entries = await fs.readdir(dir, { withFileTypes: true });
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
  return entries
    .filter((e) => e.isFile() || e.isSymbolicLink())
    .map((e) => e.name)
    .sort();
}

const LIST_MAX_DEPTH = 6;
const LIST_MAX_FILES = 10_000;

/**
 * Every file of the package under `dir` with its size, relative to the root.
 * Symlinks that lead outside are left out (they are refused only if a loader
 * actually needs them); dot-folders (.git, .cache) are skipped.
 */
export async function listPackageFiles(ctx: PackageContext, dir: string = ctx.dir): Promise<PackageFile[]> {
  const out: PackageFile[] = [];
  let truncated = false;
  async function walk(folder: string, depth: number): Promise<void> {
    let entries: import('node:fs').Dirent[];
    try {
      entries = await fs.readdir(folder, { withFileTypes: true });
    } catch (err) {
      // The loader has read every file it needs by now: a folder of the person's own it cannot list (a private/
      // folder of mode 000) only leaves its files out of the list. The layout folder itself is still an error.
      if (depth === 0) throw err;
      const code = (err as { code?: unknown } | null)?.code;
      ctx.warnings.push(
        `Could not list ${relName(ctx, folder)}/ (${typeof code === 'string' ? code : String(err)}): its files are left out of the package's file list. kvdesk needs none of them; make the folder readable, or move it out of the package, to lose this warning.`,
      );
      return;
    }
    for (const entry of entries) {
      if (out.length >= LIST_MAX_FILES) {
        truncated = true;
        return;
      }
      if (entry.name.startsWith('.')) continue;
      const abs = path.join(folder, entry.name);
      let real = abs;
      if (entry.isSymbolicLink()) {
        const resolved = await fs.realpath(abs).catch(() => undefined);
        if (resolved === undefined || !allowedTarget(ctx, resolved, 'found')) continue;
        real = resolved;
      }
      const stat = await fs.stat(real).catch(() => undefined);
      if (stat === undefined) continue;
      if (stat.isDirectory()) {
        if (depth < LIST_MAX_DEPTH && !entry.isSymbolicLink()) await walk(abs, depth + 1);
      } else if (stat.isFile()) {
        out.push({ path: relName(ctx, abs), bytes: stat.size });
      }
    }
  }
  await walk(dir, 0);
  if (truncated)
    ctx.warnings.push(
      `The package has more than ${LIST_MAX_FILES} files; only the first ${LIST_MAX_FILES} are listed.`,
    );
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** True for ENOENT/ENOTDIR errors from node:fs. */
export function isNotFound(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}
