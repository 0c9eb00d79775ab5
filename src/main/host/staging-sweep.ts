/**
 * What downloads and uploads leave in `<dataDir>/models` when they never end: a download's staging folder
 * (`.<name>.<key>.partial`, resumed by the next download of that repository, revision and variant) and an
 * upload's (`.incoming-<hex>`, written as a browser's bytes arrive). Swept when the host starts (and a download's
 * siblings when it completes): an upload's that no live kvdesk holds (a server killed in the middle of it), and a
 * download's that no live kvdesk holds and that can never be resumed — its package folder is there already (a
 * download of it at another revision, or another repository's package of that name, got there) — or that nothing
 * touched for PARTIAL_MAX_AGE_MS. A folder another process is writing (its lock, folder-lock.ts) is never touched;
 * the sweep takes the lock itself before it deletes, so none can start on the folder meanwhile.
 */
import { lstat, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { formatBytes } from '../../shared/format';
import { lockState, takeLock } from './folder-lock';

/** A download stopped this long ago is not coming back for what it left. */
export const PARTIAL_MAX_AGE_MS = 14 * 24 * 3600 * 1000;
/** An upload folder without a lock (an older kvdesk's) counts as abandoned once untouched this long. */
const UNLOCKED_UPLOAD_MAX_AGE_MS = 24 * 3600 * 1000;

/** A download's staging folder: `.<package folder>.<12 hex>.partial`. */
const PARTIAL = /^\.(.+)\.[0-9a-f]{12}\.partial$/;
/** An upload's staging folder, and its lock beside it. */
const INCOMING = /^\.incoming-[0-9a-f]+$/;
const INCOMING_LOCK = /^(\.incoming-[0-9a-f]+)\.lock$/;

/** The lock file of an upload's staging folder (beside it: the folder itself holds only the upload's files). */
export function incomingLockOf(staging: string): string {
  return `${staging}.lock`;
}

/** The bytes in a folder and when anything in it last changed. */
async function sizeAndAge(dir: string): Promise<{ bytes: number; newestMs: number }> {
  let bytes = 0;
  let newestMs = (await stat(dir)).mtimeMs;
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    const s = await lstat(path.join(e.parentPath, e.name)).catch(() => null);
    if (!s) continue;
    newestMs = Math.max(newestMs, s.mtimeMs);
    if (s.isFile()) bytes += s.size;
  }
  return { bytes, newestMs };
}

/** Deletes `dir` holding its lock `lockFile` (none can start on it meanwhile); false when a live kvdesk holds it. */
async function removeLocked(dir: string, lockFile: string): Promise<boolean> {
  const got = await takeLock(lockFile).catch(() => null);
  if (got === null || !('release' in got)) return false;
  try {
    await rm(dir, { recursive: true, force: true });
  } finally {
    await got.release();
  }
  return true;
}

/**
 * Sweeps `modelsDir` (see the module's comment); `only`: just the download staging folders of this package folder
 * name (its download completed). Returns the folders removed; each is logged, with its size and why.
 */
export async function sweepStaging(
  modelsDir: string,
  opts: { log?: (line: string) => void; only?: string; now?: number } = {},
): Promise<string[]> {
  const log = opts.log ?? (() => {});
  const now = opts.now ?? Date.now();
  const names = await readdir(modelsDir).catch(() => [] as string[]);
  const removed: string[] = [];
  const said = (dir: string, bytes: number, why: string) => {
    removed.push(dir);
    log(`kvdesk: removed ${dir} (${formatBytes(bytes)}): ${why}`);
  };
  for (const name of names) {
    const dir = path.join(modelsDir, name);
    try {
      const partial = PARTIAL.exec(name);
      if (partial) {
        const folder = partial[1] as string;
        if (opts.only !== undefined && folder !== opts.only) continue;
        if (!(await lstat(dir)).isDirectory()) continue;
        const lock = path.join(dir, '.lock');
        if ((await lockState(lock)).state === 'held') continue;
        const present = await stat(path.join(modelsDir, folder)).then(
          (s) => s.isDirectory(),
          () => false,
        );
        const { bytes, newestMs } = await sizeAndAge(dir);
        const days = Math.floor((now - newestMs) / (24 * 3600 * 1000));
        if (!present && now - newestMs < PARTIAL_MAX_AGE_MS) continue;
        if (!(await removeLocked(dir, lock))) continue;
        said(
          dir,
          bytes,
          present
            ? `a stopped download's files, which no download resumes: ${path.join(modelsDir, folder)} is there already`
            : `a download stopped ${days} days ago; downloading it again starts over`,
        );
        continue;
      }
      if (opts.only !== undefined) continue;
      if (INCOMING.test(name)) {
        if (!(await lstat(dir)).isDirectory()) continue;
        const lock = incomingLockOf(dir);
        const state = await lockState(lock);
        if (state.state === 'held') continue;
        const { bytes, newestMs } = await sizeAndAge(dir);
        // No lock: an older kvdesk's upload, which may still be running; judged by its age.
        if (state.state === 'none' && now - newestMs < UNLOCKED_UPLOAD_MAX_AGE_MS) continue;
        if (!(await removeLocked(dir, lock))) continue;
        said(dir, bytes, 'an upload that never finished (kvdesk stopped during it)');
        continue;
      }
      const lockOnly = INCOMING_LOCK.exec(name);
      if (lockOnly) {
        // The lock of an upload whose folder is gone (a stop between the two removals).
        const folder = path.join(modelsDir, lockOnly[1] as string);
        const there = await lstat(folder).then(
          () => true,
          () => false,
        );
        if (!there && (await lockState(dir)).state === 'stale') await rm(dir, { force: true });
      }
    } catch (err) {
      log(`kvdesk: could not clear ${dir}: ${(err as Error).message}`);
    }
  }
  return removed;
}
