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
 *
 * Nor is what the page sent itself. An error that quotes the request (`model "/home/ann/x" not found`, a role, a
 * schema's key) quotes it as it was sent: rewritten, it would tell the page which of its guesses is a folder of this
 * computer (`"~/x"` back for `/home/ann/x`, `/home/bob/x` as it is), an oracle of the folders this hides. Which part
 * of a message is the request's and which is kvdesk's is told by how kvdesk writes them: what it quotes of a request
 * it writes as a JSON string (JSON.stringify: in double quotes, those in it escaped), and a folder it names itself
 * is never in double quotes (`cannot load: /home/ann/models/x/config.json`). So a quote (the double quotes read in
 * pairs from the start of the text: quotesIn) whose inside is a string of the request is left as it is, and a folder
 * anywhere else is replaced, even where the page sent that same text too: a guess that matches a folder kvdesk names
 * itself gets the stand-in back, as a wrong one would. An echo written any other way (bare, or in double quotes
 * that it holds itself) would be an oracle again: quote the request with JSON.stringify. An answer to a body that is
 * not JSON is about that text alone (nothing of kvdesk ran on it): it goes as it is.
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
 * backslashes doubled), the stand-in written the same way. `sent`: the strings of the request. Where `text` quotes
 * one, that quote is the client's own and stays as it is: a quote opened in `text` (its double quotes read in
 * pairs from the start) whose inside is one of `sent` as JSON writes it, or as it is where it holds no double
 * quote. Anything else, kvdesk's own words and what they quote, is rewritten.
 */
export function hideFolders(text: string, folders: readonly Folder[], sent: readonly string[] = []): string {
  if (sent.length === 0 || !text.includes('"')) return hideIn(text, folders);
  // Ids are NFC (apiModelName): a name sent decomposed may be quoted composed.
  const given = new Set(sent.flatMap((v) => [v, v.normalize('NFC')]));
  let out = '';
  let from = 0;
  for (const q of quotesIn(text, given)) {
    if (!q.sent) continue;
    out += hideIn(text.slice(from, q.start), folders) + text.slice(q.start, q.end);
    from = q.end;
  }
  return out + hideIn(text.slice(from), folders);
}

/**
 * The quotes in `text`, its double quotes read in pairs from the start: each from its opening quote to past its
 * closing one, which is the next double quote, or the first one JSON does not escape where JSON reads the quote as a
 * string (`"a\"b"`). `sent`: a quote whose inside is one of them (as JSON reads it, or as it is) is the request's.
 */
export function quotesIn(
  text: string,
  sent?: ReadonlySet<string>,
): Array<{ start: number; end: number; sent: boolean }> {
  const out: Array<{ start: number; end: number; sent: boolean }> = [];
  for (let open = text.indexOf('"'); open !== -1; ) {
    const plain = text.indexOf('"', open + 1);
    if (plain === -1) break;
    let json = open + 1;
    while (json < text.length && text[json] !== '"') json += text[json] === '\\' ? 2 : 1;
    let asJson: unknown;
    try {
      asJson = json < text.length ? JSON.parse(text.slice(open, json + 1)) : undefined;
    } catch {
      asJson = undefined;
    }
    const isJson = typeof asJson === 'string';
    let q: { start: number; end: number; sent: boolean };
    if (isJson && sent?.has(asJson as string) === true) q = { start: open, end: json + 1, sent: true };
    else if (sent?.has(text.slice(open + 1, plain)) === true) q = { start: open, end: plain + 1, sent: true };
    else q = { start: open, end: (isJson ? json : plain) + 1, sent: false };
    out.push(q);
    open = text.indexOf('"', q.end);
  }
  return out;
}

/** `text` (none of it the request's) with each folder replaced where it is a whole path (hideFolders). */
function hideIn(text: string, folders: readonly Folder[]): string {
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

/** The responses answered to a page of another origin: how each reads the folders to hide, and what it was sent. */
const hiding = new WeakMap<
  ServerResponse,
  {
    folders: () => readonly Folder[];
    known?: readonly Folder[];
    /** What the request sent (its URL, headers and body), walked for its strings when an error quotes it. */
    sent: unknown[];
    strings?: readonly string[];
    /** Its body was no JSON: what it is answered is about that text alone. */
    rawOnly?: true;
  }
>();

/**
 * Marks `res` as answering a page of another origin: the errors kvdesk writes to it (withoutFolders) name none of
 * `folders()`. What a model generates (a completion, a chat's reply, a tool call's arguments, a stream) is never
 * changed: a path it writes is its answer, which a schema (a tool's `const`, a response format) may require as it is.
 * What `req` sent (its URL's path and query, its headers; its body: clientSent) is the page's own, quoted as it is.
 */
export function hideFoldersIn(
  res: ServerResponse,
  folders: () => readonly Folder[],
  req?: { url?: string; headers: Record<string, string | string[] | undefined> },
): void {
  const sent: unknown[] = [];
  if (req !== undefined) {
    sent.push(Object.values(req.headers));
    try {
      const url = new URL(req.url ?? '/', 'http://kvdesk.invalid');
      sent.push(url.pathname, [...url.searchParams.entries()]);
      // Each part of the path as a route reads it (`/v1/models/{id}`, ids may hold slashes).
      const parts = url.pathname.split('/');
      for (let i = 1; i < parts.length; i++) {
        for (const piece of [parts.slice(i).join('/'), parts[i] as string]) {
          try {
            sent.push(decodeURIComponent(piece));
          } catch {
            sent.push(piece);
          }
        }
      }
    } catch {
      // A URL that is none is refused before any route: nothing of it is quoted.
    }
  }
  hiding.set(res, { folders, sent });
}

/** Adds what a request's body sent (its JSON, parsed) to what `res` quotes as the page sent it (hideFoldersIn). */
export function clientSent(res: ServerResponse, body: unknown): void {
  const hide = hiding.get(res);
  if (hide === undefined) return;
  hide.sent.push(body);
  hide.strings = undefined;
}

/**
 * Marks the request `res` answers as one whose body is no JSON: its error quotes that text (JSON.parse's message
 * cites a stretch of it, cut where it likes) and nothing of kvdesk's, so it goes as it is.
 */
export function sentNoJson(res: ServerResponse): void {
  const hide = hiding.get(res);
  if (hide !== undefined) hide.rawOnly = true;
}

/** Each string in `value` (objects' keys too), once. */
function stringsIn(value: unknown): string[] {
  const out = new Set<string>();
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') out.add(v);
    else if (Array.isArray(v)) for (const x of v) stack.push(x);
    else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
        out.add(k);
        stack.push(x);
      }
    }
  }
  return [...out];
}

/**
 * `value` (an error kvdesk built: its body, an event of it) as `res` may be answered: where `res` answers a page of
 * another origin (hideFoldersIn), each string in it with the known folders replaced (hideFolders), save where it
 * quotes what the request sent; else as it is.
 */
export function withoutFolders<T>(res: ServerResponse, value: T): T {
  const hide = hiding.get(res);
  if (hide === undefined || hide.rawOnly) return value;
  // Read once per answer: a stream's error and the answer before it see the same folders.
  hide.known ??= hide.folders();
  const known = hide.known;
  hide.strings ??= stringsIn(hide.sent);
  const sent = hide.strings;
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return hideFolders(v, known, sent);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(value) as T;
}
