/** Atomic file writes: a temp file, then a rename, so a crash never leaves half a file. */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

let tmpSeq = 0;

/** Writes `data` to `file` atomically, creating its folder. */
export async function writeAtomic(file: string, data: string): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  // Unique per write: two saves in the same millisecond must not share a temp file.
  const tmp = `${file}.${process.pid}.${Date.now()}.${++tmpSeq}.tmp`;
  await writeFile(tmp, data);
  await rename(tmp, file);
}
