/**
 * Reads a dropped or chosen package folder in the browser, so its files can be
 * uploaded to the host (which validates them exactly as a folder on its disk).
 */

import { MAX_FILES, type ReadPackage, selectPackageFiles, splitRelative } from './package-files';

export type { PackageFile, ReadPackage } from './package-files';

function readAllEntries(reader: FileSystemDirectoryReader): Promise<FileSystemEntry[]> {
  // readEntries answers in batches (100 in Chromium) until it returns an empty one.
  return new Promise((resolve, reject) => {
    const all: FileSystemEntry[] = [];
    const next = () =>
      reader.readEntries((batch) => {
        if (batch.length === 0) resolve(all);
        else {
          all.push(...batch);
          next();
        }
      }, reject);
    next();
  });
}

function fileOf(entry: FileSystemFileEntry): Promise<File> {
  return new Promise((resolve, reject) => entry.file(resolve, reject));
}

async function walk(entry: FileSystemEntry, prefix: string, out: Array<{ path: string; file: File }>): Promise<void> {
  if (out.length > MAX_FILES) return;
  if (entry.isFile) {
    out.push({ path: prefix + entry.name, file: await fileOf(entry as FileSystemFileEntry) });
  } else if (entry.isDirectory) {
    const children = await readAllEntries((entry as FileSystemDirectoryEntry).createReader());
    for (const child of children) await walk(child, `${prefix}${entry.name}/`, out);
  }
}

async function toPackage(name: string, list: Array<{ path: string; file: File }>): Promise<ReadPackage> {
  // The Files themselves, not their bytes: the upload reads them from disk as it sends them.
  return { name, files: selectPackageFiles(list.map((f) => ({ path: f.path, data: f.file }))) };
}

/**
 * Captures what a drop carries. Must be called inside the drop handler: the
 * DataTransfer is emptied when the handler returns, so entries are taken now
 * and read later.
 */
export function captureDrop(dt: DataTransfer): () => Promise<ReadPackage> {
  const entries: FileSystemEntry[] = [];
  for (const item of Array.from(dt.items)) {
    if (item.kind !== 'file') continue;
    const entry = item.webkitGetAsEntry?.();
    if (entry) entries.push(entry);
  }
  const files = Array.from(dt.files);
  return async () => {
    const dirs = entries.filter((e) => e.isDirectory);
    if (dirs.length === 1 && entries.length === 1) {
      const dir = dirs[0] as FileSystemDirectoryEntry;
      const list: Array<{ path: string; file: File }> = [];
      const children = await readAllEntries(dir.createReader());
      for (const child of children) await walk(child, '', list);
      return toPackage(dir.name, list);
    }
    if (dirs.length > 1) throw new Error('Drop one package folder at a time.');
    // Loose files (or a synthetic drop without entries): the files are the package root.
    return fromFileList(files);
  };
}

/**
 * Files from `<input webkitdirectory>` (webkitRelativePath = `folder/…`) or a
 * plain list of files, which then form the package root themselves.
 */
export async function fromFileList(files: File[]): Promise<ReadPackage> {
  if (files.length === 0) throw new Error('Nothing was dropped.');
  let name: string | null = null;
  const list = files.map((file) => {
    const rel = file.webkitRelativePath || file.name;
    const { root, rest } = splitRelative(rel);
    if (root !== null && name === null) name = root;
    return { path: rest, file };
  });
  return toPackage(name ?? 'dropped-package', list);
}
