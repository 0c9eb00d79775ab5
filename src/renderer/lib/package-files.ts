/**
 * Pure helpers for package folders read in the browser (no DOM types, so they
 * are unit-tested in node): path splitting and which files an upload keeps.
 */

import { checkpointMessage, ggufMessage, isCheckpointWeights, isGguf } from '../../shared/foreign-formats';

/** A file of the package, path relative to the package root with `/` separators. */
export interface PackageFile {
  path: string;
  /**
   * The browser's File (a Blob on disk): the upload streams it, so gigabytes of weights are never read into the
   * page's memory.
   */
  data: Blob;
}

export interface ReadPackage {
  name: string;
  files: PackageFile[];
}

/** Files a browser must never send (OS litter), and a cap that keeps an accidental drop of a home folder from uploading it. */
const IGNORED = /(^|\/)(\.DS_Store|Thumbs\.db|desktop\.ini|\.git\/.*)$/;
export const MAX_FILES = 2000;

/**
 * Splits `tiny-llm/onnx/model.onnx` (webkitRelativePath or an entry's fullPath)
 * into the folder name and the path inside it. A bare name has no folder.
 */
export function splitRelative(path: string): { root: string | null; rest: string } {
  const clean = path.replace(/\\/g, '/').replace(/^\/+/, '');
  const slash = clean.indexOf('/');
  return slash < 0 ? { root: null, rest: clean } : { root: clean.slice(0, slash), rest: clean.slice(slash + 1) };
}

/** Keeps what belongs in an upload; throws a person-readable error for a folder that is clearly not a package. */
export function selectPackageFiles(files: PackageFile[]): PackageFile[] {
  const kept = files.filter((f) => f.path.length > 0 && !IGNORED.test(f.path));
  if (kept.length === 0) throw new Error('The folder is empty.');
  if (kept.length > MAX_FILES) {
    throw new Error(
      `The folder has ${kept.length} files; a model package has far fewer (limit ${MAX_FILES}). Drop the package folder itself.`,
    );
  }
  // A model in a format kvdesk does not run is refused before gigabytes of it are uploaded, as the host would.
  const paths = kept.map((f) => f.path);
  if (!paths.some((p) => /\.onnx$/i.test(p))) {
    const gguf = paths.filter(isGguf);
    if (gguf.length === 1 && paths.length === 1) throw new Error(ggufMessage(gguf[0] as string));
    if (gguf.length > 0) throw new Error(ggufMessage('The folder', gguf));
    const weights = paths.filter(isCheckpointWeights);
    if (weights.length > 0 && paths.includes('config.json')) throw new Error(checkpointMessage('The folder', weights));
  }
  return kept;
}
