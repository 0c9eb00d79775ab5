/**
 * The policy for data files kvdesk cannot use (settings.json, library.json, a chat's file): what the person had
 * is never lost. A file that exists but cannot be read (permissions) is never written over; one that cannot be
 * parsed is moved aside, to `<file>.unreadable-<time>` beside it, before anything new takes its place.
 */
import { constants, copyFile, readFile, rename } from 'node:fs/promises';
import { KvdeskError } from '../../shared/errors';

/** The text of `file`, or null when there is none; any other failure to read it is thrown as it came. */
export async function readIfThere(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * The error for a data file that exists but cannot be read: it names the file, says it is left alone, and what
 * to do (`then`: when kvdesk reads it again).
 */
export function unreadableFile(what: string, file: string, err: unknown, then: string): KvdeskError {
  const code = (err as NodeJS.ErrnoException).code;
  // A folder where a file belongs (or the other way round) is no matter of access.
  const fix =
    code === 'EISDIR' || code === 'ENOTDIR'
      ? 'Move what is in its place away (a folder where a file belongs, or a file where a folder does)'
      : 'Give your user read and write access to it (or move it away)';
  return new KvdeskError(
    'BAD_REQUEST',
    `${what} ${file} could not be read (${(err as Error).message}); kvdesk will not write over it. ${fix}, then ${then}`,
    { file },
  );
}

/**
 * Keeps `file` as it is now under `<file>.unreadable-<now>` and returns that path: moved (nothing of it is usable
 * in place) or copied (its valid part is about to be written in its place). Throws, naming both paths, when it
 * cannot: the caller must then not write over the file either.
 */
export async function setAside(file: string, now: number, how: 'move' | 'copy'): Promise<string> {
  const aside = `${file}.unreadable-${now}`;
  try {
    if (how === 'move') await rename(file, aside);
    else await copyFile(file, aside, constants.COPYFILE_EXCL);
  } catch (err) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `${file} cannot be used, and could not be kept as ${aside} (${(err as Error).message}); kvdesk will not write over it. Move it away yourself, or let kvdesk write in its folder`,
      { file },
    );
  }
  return aside;
}

/** The fields of a JSON object that a schema's `shape` does not know (a newer kvdesk's), to write back as they were. */
export function fieldsUnknown(raw: unknown, shape: object): Record<string, unknown> {
  if (!isPlainObject(raw)) return {};
  return Object.fromEntries(Object.entries(raw).filter(([k]) => !Object.hasOwn(shape, k)));
}

/** Whether a parsed JSON value is an object (not an array, not null). */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
