/**
 * Atomic, durable file writes: a temp file flushed to disk, then a rename, so neither a crash nor a power cut
 * leaves half a file (or, on file systems that delay allocation, an empty one) where the old one was.
 */
import { chmod, link, lstat, mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { formatBytes } from '../../shared/format';
import { alive } from './file-lock';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from './private-data';

let tmpSeq = 0;

/**
 * Writes `data` to `file` atomically, creating its folder (owner-only, as a data folder's: private-data.ts). A write
 * that fails leaves no temp file behind. The file is owner-only (0600; a file that was open to others before is
 * replaced by one that is not) unless `mode` says otherwise, set exactly before it appears under its name.
 */
export async function writeAtomic(
  file: string,
  data: string,
  /**
   * `setMode`: the file system's chmod (a test's stands for one that refuses it). `exclusive`: only if there is no
   * file under that name yet (EEXIST otherwise): the whole file appears at once, through a hard link, or not at all.
   */
  opts: { mode?: number; setMode?: (file: string, mode: number) => Promise<void>; exclusive?: boolean } = {},
): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true, mode: PRIVATE_DIR_MODE });
  // Unique per write: two saves in the same millisecond must not share a temp file.
  const tmp = `${file}.${process.pid}.${Date.now()}.${++tmpSeq}.tmp`;
  try {
    const mode = opts.mode ?? PRIVATE_FILE_MODE;
    const fd = await open(tmp, 'w', mode);
    try {
      await fd.writeFile(data);
      // On disk before the rename makes it the file: else a power cut can leave the new name on empty blocks.
      await fd.datasync();
    } finally {
      await fd.close();
    }
    // The umask narrows open()'s mode; a data file must be exactly owner-only (readable and writable by its owner)
    // whatever the umask. A file system that refuses modes (some FUSE mounts: ENOTSUP, EPERM) keeps the save: the
    // file was created with `mode` already, the chmod only corrects for the umask.
    await (opts.setMode ?? chmod)(tmp, mode).catch(() => {});
    if (opts.exclusive) {
      await link(tmp, file);
      await rm(tmp, { force: true });
    } else await rename(tmp, file);
  } catch (err) {
    // Nothing else ever removes it: each failed save would leave one more beside the file.
    await rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
  // The rename itself is durable once the folder is flushed; where a folder cannot be opened to flush (Windows),
  // the write is still atomic.
  const dir = await open(path.dirname(file), 'r').catch(() => undefined);
  if (dir)
    await dir
      .sync()
      .catch(() => {})
      .finally(() => dir.close());
}

/** A temp file of writeAtomic: `<file>.<pid>.<ms since 1970>.<count>.tmp`. */
const TEMP = /^.+\.(\d+)\.(\d{10,})\.\d+\.tmp$/;
/** A temp file untouched this long is no save in progress, whoever made it (a pid used again, another host's). */
export const TEMP_MAX_AGE_MS = 10 * 60_000;
/**
 * A temp file of a process not running here, untouched this long, is left: a kvdesk in another container or on
 * another machine sharing the folder (its pid means nothing here) writes one for a few seconds at most.
 */
export const TEMP_DEAD_GRACE_MS = 15_000;

/**
 * Removes what saves that never ended left in `dirs` (kvdesk killed, or the machine stopped, while writing: a temp
 * file as large as the chat each time): writeAtomic's temp files whose process is gone, made by an earlier process
 * with this one's pid, or untouched for TEMP_MAX_AGE_MS. Another running kvdesk's save in progress is left alone.
 * Says what it removed in one line of `log`; returns the files removed.
 */
export async function sweepTemps(
  dirs: string[],
  log: (line: string) => void,
  opts: { now?: number; alive?: (pid: number) => boolean } = {},
): Promise<string[]> {
  const now = opts.now ?? Date.now();
  const isAlive = opts.alive ?? alive;
  // This process's temp files are all made after it started; one of its pid made before is an earlier process's.
  const startedAt = now - process.uptime() * 1000 - 1000;
  const removed: string[] = [];
  /** The folders they were in. */
  const from = new Set<string>();
  let bytes = 0;
  for (const dir of dirs) {
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      const m = TEMP.exec(name);
      if (!m) continue;
      const file = path.join(dir, name);
      const s = await lstat(file).catch(() => null);
      if (!s?.isFile()) continue;
      const pid = Number(m[1]);
      const madeAt = Number(m[2]);
      const idle = now - s.mtimeMs;
      const stale =
        idle >= TEMP_MAX_AGE_MS ||
        (pid === process.pid ? madeAt < startedAt : !isAlive(pid) && idle >= TEMP_DEAD_GRACE_MS);
      if (!stale) continue;
      try {
        await rm(file);
        removed.push(file);
        from.add(dir);
        bytes += s.size;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
          log(`kvdesk: could not remove ${file}, left by a save that never finished: ${(err as Error).message}`);
      }
    }
  }
  if (removed.length > 0)
    log(
      `kvdesk: removed ${removed.length} temp file${removed.length === 1 ? '' : 's'} (${formatBytes(bytes)}) left by saves that never finished (kvdesk stopped during them) in ${[...from].join(', ')}`,
    );
  return removed;
}
