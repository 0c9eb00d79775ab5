import { promises as fs } from 'node:fs';
import type { KvdeskError } from '../../shared/errors';
import { type PackageWhere, packageError } from './package-error';

/**
 * A Git LFS pointer: the few lines git writes in place of a large file when a repository is cloned without Git LFS
 * (or before `git lfs pull`). Every one starts with this line (the Git LFS spec) and is under 1024 bytes. A package
 * cloned so has pointers for its graph, its external data and often its tokenizer.json; read as what they stand
 * for they were "not a valid ONNX model", "not valid JSON" or "truncated", and re-downloading (cloning again) gave
 * the same pointers.
 */
const POINTER_START = 'version https://git-lfs.github.com/spec/v1';
/** The Git LFS spec's limit on a pointer file's size. */
export const LFS_POINTER_MAX_BYTES = 1024;

/** True when `head` (a file's first bytes, or its text) is a Git LFS pointer's start. */
export function isLfsPointer(head: Buffer | string): boolean {
  const text = typeof head === 'string' ? head : head.subarray(0, POINTER_START.length).toString('latin1');
  return text.startsWith(POINTER_START);
}

/** True when the file at `abs`, of `size` bytes, is a Git LFS pointer (only a file that small can be one). */
export async function isLfsPointerFile(abs: string, size: number): Promise<boolean> {
  if (size < POINTER_START.length || size > LFS_POINTER_MAX_BYTES) return false;
  const handle = await fs.open(abs, 'r');
  try {
    const head = Buffer.alloc(POINTER_START.length);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    return isLfsPointer(head.subarray(0, bytesRead));
  } finally {
    await handle.close();
  }
}

/** The refusal of a package file that is a Git LFS pointer: what it is, and how to get the file itself. */
export function lfsPointerError(file: string, where: PackageWhere = { file }): KvdeskError {
  return packageError(
    `${file} is a Git LFS pointer, not the file itself: run \`git lfs install && git lfs pull\` in the package's folder, or download it with \`kvdesk pull owner/name\` or \`hf download owner/name --local-dir <folder>\` (Hugging Face's CLI, formerly huggingface-cli).`,
    where,
    { lfsPointer: file },
  );
}
