/**
 * A page of another origin that `--allow-origin` lets call the model APIs is answered without this computer's
 * folders: a model's folder (its library entry's `root`, an error that names where a package is), the data folder
 * and the home folder give away user names and how the disk is laid out, which a site has no need of. The UI's own
 * page and clients that are no web page (no Origin) keep them: they are the person's own.
 *
 * The folders kvdesk knows are replaced in what such a request is answered, each where it is a whole path (not a
 * longer name that starts the same): a model's by `<folder of model ID>`, the data folder's by `<data folder>`, the
 * home folder by `~`. A model's reply that quotes one is answered so too.
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
      out = out.replace(new RegExp(`(?<![\\w.~-])${escapeRegExp(at)}(?![\\w.~-])`, 'g'), () => as);
    }
  }
  return out;
}

/**
 * Answers `res` without the folders `folders()` names (hideFolders), in whatever it writes: JSON, a stream's events
 * or lines. Its length changes, so a Content-Length set is dropped (the answer goes chunked).
 */
export function answerWithoutFolders(res: ServerResponse, folders: () => readonly Folder[]): void {
  // Read once: a stream's every event would read them again.
  let known: readonly Folder[] | undefined;
  const hide = (chunk: unknown): unknown => {
    known ??= folders();
    if (typeof chunk === 'string') return hideFolders(chunk, known);
    // The model APIs write text; bytes are read as UTF-8 text only where they are whole (no character cut in two).
    if (chunk instanceof Uint8Array) {
      const text = Buffer.from(chunk).toString('utf8');
      return text.includes('\uFFFD') ? chunk : hideFolders(text, known);
    }
    return chunk;
  };
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => ServerResponse;
  res.writeHead = ((...args: unknown[]) => {
    for (const a of args.slice(1)) {
      if (a === null || typeof a !== 'object' || Array.isArray(a)) continue;
      for (const k of Object.keys(a))
        if (k.toLowerCase() === 'content-length') delete (a as Record<string, unknown>)[k];
    }
    res.removeHeader('content-length');
    return writeHead(...args);
  }) as typeof res.writeHead;
  const write = res.write.bind(res) as (...args: unknown[]) => boolean;
  res.write = ((chunk: unknown, ...rest: unknown[]) => write(hide(chunk), ...rest)) as typeof res.write;
  const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
  res.end = ((chunk?: unknown, ...rest: unknown[]) =>
    typeof chunk === 'function' || chunk === undefined
      ? end(chunk, ...rest)
      : end(hide(chunk), ...rest)) as typeof res.end;
}
