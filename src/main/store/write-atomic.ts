/** Atomic file writes: a temp file, then a rename, so a crash never leaves half a file. */
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

let tmpSeq = 0;

/** Writes `data` to `file` atomically, creating its folder. A write that fails leaves no temp file behind. */
export async function writeAtomic(file: string, data: string): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  // Unique per write: two saves in the same millisecond must not share a temp file.
  const tmp = `${file}.${process.pid}.${Date.now()}.${++tmpSeq}.tmp`;
  try {
    await writeFile(tmp, data);
    await rename(tmp, file);
  } catch (err) {
    // Nothing else ever removes it: each failed save would leave one more beside the file.
    await rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
}
