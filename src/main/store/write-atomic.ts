/**
 * Atomic, durable file writes: a temp file flushed to disk, then a rename, so neither a crash nor a power cut
 * leaves half a file (or, on file systems that delay allocation, an empty one) where the old one was.
 */
import { chmod, link, mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
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
