/**
 * A page of another origin that `--allow-origin` lets call the model APIs is answered without this computer's
 * folders: a model's folder (its library entry's `root`, an error that names where a package is), the data folder
 * and the home folder give away user names and how the disk is laid out, which a site has no need of. The UI's own
 * page and clients that are no web page (no Origin) keep them: they are the person's own.
 *
 * The folders kvdesk knows are replaced in what such a request is answered, each where it is a whole path (not a
 * longer name that starts the same): a model's by `<folder of model ID>`, the data folder's by `<data folder>`, the
 * home folder by `~` — in what kvdesk itself writes: `root` is left out of its model listings, and its error messages
 * (in a JSON answer or a stream's error event) are rewritten where they are sent (withoutFolders). What a model
 * generates is never rewritten.
 */
import type { ServerResponse } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { HostApi } from '../host/host-api';

/** A folder to hide, and what stands in its place. */
interface Folder {
  at: string;
  as: string;
}

/** The folders kvdesk knows now, the longest first (a model's folder in the data folder is named as the model's). */
export function knownFolders(hostApi: HostApi): Folder[] {
  const folders: Folder[] = [];
  for (const m of hostApi.runner.listModels()) folders.push({ at: m.spec.root, as: `<folder of model ${m.id}>` });
  for (const e of hostApi.library.list()) folders.push({ at: e.root, as: `<folder of model ${e.id}>` });
  folders.push({ at: hostApi.library.dataDir, as: '<data folder>' });
  folders.push({ at: os.homedir(), as: '~' });
  const seen = new Set<string>();
  return folders
    .flatMap((f) => [f, { at: path.resolve(f.at), as: f.as }])
    .filter((f) => {
      // The file system's root (a home folder of "/") is no folder to hide: every path starts with it.
      if (f.at.length < 2 || seen.has(f.at)) return false;
      seen.add(f.at);
      return true;
    })
    .sort((a, b) => b.at.length - a.at.length);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * `text` with each folder replaced where it is a whole path: as it is, and as a JSON string writes it (Windows'
 * backslashes doubled), the stand-in written the same way.
 */
export function hideFolders(text: string, folders: readonly Folder[]): string {
  let out = text;
  for (const f of folders) {
    const forms = new Map([[f.at, f.as]]);
    forms.set(JSON.stringify(f.at).slice(1, -1), JSON.stringify(f.as).slice(1, -1));
    for (const [at, as] of forms) {
      if (!out.includes(at)) continue;
      // A letter or digit of any script (or `_ . ~ -`) beside it makes it part of a longer name: /home/jo is not in
      // /home/jö/x.
      out = out.replace(new RegExp(`(?<![\\p{L}\\p{N}_.~-])${escapeRegExp(at)}(?![\\p{L}\\p{N}_.~-])`, 'gu'), () => as);
    }
  }
  return out;
}

/** The responses answered to a page of another origin, and how each reads the folders to hide (hideFoldersIn). */
const hiding = new WeakMap<ServerResponse, { folders: () => readonly Folder[]; known?: readonly Folder[] }>();

/**
 * Marks `res` as answering a page of another origin: the errors kvdesk writes to it (withoutFolders) name none of
 * `folders()`. What a model generates (a completion, a chat's reply, a tool call's arguments, a stream) is never
 * changed: a path it writes is its answer, which a schema (a tool's `const`, a response format) may require as it is.
 */
export function hideFoldersIn(res: ServerResponse, folders: () => readonly Folder[]): void {
  hiding.set(res, { folders });
}

/**
 * `value` (an error kvdesk built: its body, an event of it) as `res` may be answered: where `res` answers a page of
 * another origin (hideFoldersIn), each string in it with the known folders replaced (hideFolders); else as it is.
 */
export function withoutFolders<T>(res: ServerResponse, value: T): T {
  const hide = hiding.get(res);
  if (hide === undefined) return value;
  // Read once per answer: a stream's error and the answer before it see the same folders.
  hide.known ??= hide.folders();
  const known = hide.known;
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return hideFolders(v, known);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(value) as T;
}
