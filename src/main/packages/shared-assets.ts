/**
 * Shared assets of ORT model packages: content-addressed folders
 * (`shared_assets/sha256-<hex>/`) that several variants reference as
 * `sha256:<hex>[/tail]`. The digest is ONNX Runtime's directory hash, so a
 * package ORT accepts has the same URIs here: hash every regular file, write
 * `<file sha256>  <relative posix path>\n` lines sorted by path, hash that text.
 */
import { createHash } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import path from 'node:path';

/** `sha256:` + exactly 64 lowercase hex digits, optionally followed by `/tail` inside the asset. */
const SHARED_REF = /^sha256:([0-9a-f]{64})(?:\/(.*))?$/s;

/** A parsed shared-asset reference. */
export interface SharedRef {
  /** The 64-digit lowercase hex digest. */
  hex: string;
  /** Path inside the asset folder (posix), when the reference names one. */
  tail?: string;
}

/** Parses `sha256:<hex>[/tail]`; undefined when the text is not exactly that form. */
export function parseSharedRef(ref: string): SharedRef | undefined {
  const m = SHARED_REF.exec(ref);
  if (m === null || m[1] === undefined) return undefined;
  return m[2] === undefined || m[2] === '' ? { hex: m[1] } : { hex: m[1], tail: m[2] };
}

/** The default folder of an asset, relative to the package root. */
export function defaultAssetDir(hex: string): string {
  return `shared_assets/sha256-${hex}`;
}

/** Why a folder cannot be hashed: it holds something other than regular files and folders. */
export class AssetContentError extends Error {
  constructor(
    message: string,
    /** Posix path of the offending entry, relative to the asset folder. */
    readonly entry: string,
  ) {
    super(message);
    this.name = 'AssetContentError';
  }
}

/** One file of an asset folder. */
export interface AssetFile {
  /** Posix path relative to the asset folder. */
  path: string;
  bytes: number;
}

/** The digest of an asset folder and the files it covers. */
export interface AssetHash {
  /** 64 lowercase hex digits. */
  digest: string;
  files: AssetFile[];
}

interface Listed extends AssetFile {
  abs: string;
  /** Size, mtime and inode: when none changed, the cached digest still holds. */
  stamp: string;
}

/**
 * Every regular file under `dir`, recursively. Symlinks are refused rather than
 * followed, as ONNX Runtime does: a link could make the digest cover bytes that
 * are not part of the package, or change what the asset holds without changing
 * its name.
 */
async function listAssetFiles(dir: string): Promise<Listed[]> {
  const out: Listed[] = [];
  async function walk(folder: string, prefix: string): Promise<void> {
    const entries = await fs.readdir(folder, { withFileTypes: true });
    for (const entry of entries) {
      const rel = prefix === '' ? entry.name : `${prefix}/${entry.name}`;
      const abs = path.join(folder, entry.name);
      if (entry.isSymbolicLink()) {
        throw new AssetContentError(`${rel} is a symlink; shared assets may hold only regular files and folders`, rel);
      }
      if (entry.isDirectory()) {
        await walk(abs, rel);
      } else if (entry.isFile()) {
        const stat = await fs.stat(abs);
        out.push({ path: rel, abs, bytes: stat.size, stamp: `${stat.size}:${stat.mtimeMs}:${stat.ino}` });
      } else {
        throw new AssetContentError(`${rel} is not a regular file or folder`, rel);
      }
    }
  }
  await walk(dir, '');
  // Byte order of the UTF-8 path, as ONNX Runtime's std::string comparison sorts.
  return out.sort((a, b) => Buffer.compare(Buffer.from(a.path), Buffer.from(b.path)));
}

async function hashFile(abs: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(abs)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * Digests of folders already hashed in this process, by real path. Hashing a
 * multi-gigabyte weights asset on every load would cost seconds; the file list
 * with sizes, mtimes and inodes is re-read each time, so any change is seen.
 */
const digestCache = new Map<string, { signature: string; hash: AssetHash }>();

/** Computes ONNX Runtime's directory hash of `dir` (a real path). Throws AssetContentError for symlinks and special files. */
export async function hashAssetDirectory(dir: string): Promise<AssetHash> {
  const listed = await listAssetFiles(dir);
  const signature = listed.map((f) => `${f.path}\u0000${f.stamp}`).join('\n');
  const cached = digestCache.get(dir);
  if (cached !== undefined && cached.signature === signature) return cached.hash;
  let text = '';
  for (const file of listed) text += `${await hashFile(file.abs)}  ${file.path}\n`;
  const hash: AssetHash = {
    digest: createHash('sha256').update(text, 'utf8').digest('hex'),
    files: listed.map((f) => ({ path: f.path, bytes: f.bytes })),
  };
  digestCache.set(dir, { signature, hash });
  return hash;
}
