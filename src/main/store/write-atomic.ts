/**
 * Atomic, durable file writes: a temp file flushed to disk, then a rename, so neither a crash nor a power cut
 * leaves half a file (or, on file systems that delay allocation, an empty one) where the old one was.
 */
import { chmod, mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';

let tmpSeq = 0;

/**
 * Writes `data` to `file` atomically, creating its folder. A write that fails leaves no temp file behind.
 * `mode` sets the file's permissions (before it appears under its name).
 */
export async function writeAtomic(file: string, data: string, opts: { mode?: number } = {}): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  // Unique per write: two saves in the same millisecond must not share a temp file.
  const tmp = `${file}.${process.pid}.${Date.now()}.${++tmpSeq}.tmp`;
  try {
    const fd = await open(tmp, 'w', opts.mode ?? 0o666);
    try {
      await fd.writeFile(data);
      // On disk before the rename makes it the file: else a power cut can leave the new name on empty blocks.
      await fd.datasync();
    } finally {
      await fd.close();
    }
    // The umask narrows open()'s mode; a key file must be exactly owner-only whatever the umask.
    if (opts.mode !== undefined) await chmod(tmp, opts.mode);
    await rename(tmp, file);
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
