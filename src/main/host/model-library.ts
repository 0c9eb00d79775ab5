/**
 * The model library: every package kvdesk has loaded, remembered across
 * restarts in `<dataDir>/library.json` (written atomically), so the Models
 * view can offer them again and the APIs can load one on first use by its id.
 *
 * Only the folder and the dates are stored; what a package is comes from
 * validating it again (at start, in the background, and before every load),
 * so the card never shows a stale or hand-edited description. Uploaded
 * packages under `<dataDir>/models` that the file does not list (uploaded
 * before the library existed, or copied there by hand) join it when found.
 * A library file that is no library file (not JSON, no list of packages) is moved aside with a logged reason; one
 * with entries this kvdesk cannot read keeps the rest (those are said, and the file copied aside before it is next
 * written); a newer kvdesk's is used as far as it can be read and never written over or moved; one that exists but
 * cannot be read (permissions) is left as it is and never written over (store/data-file.ts). A relative root is
 * read from the data directory. A data directory that is a file is refused.
 */
import { createHash } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, realpath, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { CHAT_TEMPLATE_MAX, type LibraryEntry, type LoadModelRequest } from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import { loadModelSpec, variantOption } from '../packages';
import { packageProblem } from '../packages/package-error';
import { hfCachePlace } from '../packages/package-fs';
import { slugify, withModelId } from '../packages/spec-assembly';
import { isPlainObject, readIfThere, setAside, unreadableFile } from '../store/data-file';
import { PRIVATE_DIR_MODE, tightenDataDir } from '../store/private-data';
import { writeAtomic } from '../store/write-atomic';
import { withKeptTemplate } from './chat-template-pick';
import { type HeldLock, takeLock } from './folder-lock';
import { type HubSource, hubSourceOf } from './hub-download';

const CPU = 'CPUExecutionProvider';

/** One package as the library file keeps it. */
const StoredEntry = z.object({
  root: z.string().min(1).max(4096),
  /**
   * The id the library gave the folder (its name's base id, or `name-2`… when another folder of that name had it):
   * kept across restarts, so clients naming it reach the same folder.
   */
  id: z.string().min(1).max(4096).optional(),
  /** Written for people reading the file; kvdesk goes by the folder's place, never by this flag. */
  uploaded: z.boolean().optional(),
  addedAt: z.number(),
  lastLoadedAt: z.number(),
  /** Added (an upload, a download) and not loaded since. */
  neverLoaded: z.literal(true).optional(),
  /** How the person last loaded it (their pick of variant and backend, their trust): loaded so again. */
  load: z
    .object({
      variant: z.string().min(1).max(200).optional(),
      backend: z.string().min(1).max(100).optional(),
      trustInstalled: z.boolean().optional(),
      chatTemplate: z.string().min(1).max(CHAT_TEMPLATE_MAX).optional(),
    })
    .optional(),
  /** Which model the folder held when the pick was made (modelIdentity): another model there since drops it. */
  pickedFor: z.string().min(1).max(200).optional(),
});
type StoredEntry = z.infer<typeof StoredEntry>;

/** The version of the library file this kvdesk writes (and the newest it knows). */
const VERSION = 1;
/** Packages read from one file at most. */
const MAX_PACKAGES = 10_000;

/**
 * A new pick over the kept one: what it names replaces the kept field, the rest stays. In an ORT package a variant
 * is built for one backend, so naming either drops the other's kept value (they would contradict each other).
 */
export function mergePick(
  kept: LoadModelRequest | undefined,
  named: LoadModelRequest,
  ortPackage: boolean,
): LoadModelRequest {
  const base: LoadModelRequest = { ...kept };
  if (ortPackage && named.backend !== undefined) delete base.variant;
  if (ortPackage && named.variant !== undefined) delete base.backend;
  const merged = { ...base, ...named };
  // null: back to the package's own template.
  if (merged.chatTemplate === null) delete merged.chatTemplate;
  return merged;
}

/** A pick as the library keeps it: a template of the person's own, or none (the package's). */
export type KeptPick = Omit<LoadModelRequest, 'chatTemplate'> & { chatTemplate?: string };

/** A pick with something in it (its fields that say something), or undefined. */
export function pickOf(how: LoadModelRequest | undefined): KeptPick | undefined {
  if (!how) return undefined;
  const kept: KeptPick = {
    ...(how.variant !== undefined ? { variant: how.variant } : {}),
    ...(how.backend !== undefined ? { backend: how.backend } : {}),
    ...(how.trustInstalled === true ? { trustInstalled: true } : {}),
    ...(typeof how.chatTemplate === 'string' ? { chatTemplate: how.chatTemplate } : {}),
  };
  return Object.keys(kept).length > 0 ? kept : undefined;
}

interface Held {
  root: string;
  addedAt: number;
  lastLoadedAt: number;
  neverLoaded?: true;
  /** '' until the library gives it one (settleIds). */
  id: string;
  spec?: ModelSpec;
  error?: LibraryEntry['error'];
  missing: boolean;
  source?: HubSource;
  load?: KeptPick;
  pickedFor?: string;
}

/** The files that say which model a package is (its graphs aside: a variant picked is no other model). */
const IDENTITY_FILES = [
  'config.json',
  'genai_config.json',
  'manifest.json',
  'inference_metadata.yaml',
  'inference_metadata.yml',
  'inference_metadata.json',
  'tokenizer.json',
];

/** Each folder's identity, with the stat of its files it was hashed from. */
const identities = new Map<string, { files: string; identity: string | undefined }>();

/**
 * Which model a folder holds: a hash of the files that say so. A person's pick (their template, their trust) is
 * for that model; undefined when none can be read (a folder gone: nothing to tell). Hashed again only when a file's
 * stat changed (a tokenizer.json is megabytes, and every refresh asks for each package with a pick).
 */
export async function modelIdentity(
  root: string,
  read: (file: string) => Promise<Buffer> = readFile,
): Promise<string | undefined> {
  const stats = await Promise.all(IDENTITY_FILES.map((name) => stat(path.join(root, name)).catch(() => null)));
  const files = stats.map((s) => (s ? `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}` : '')).join('|');
  const known = identities.get(root);
  if (known?.files === files) return known.identity;
  const hash = createHash('sha256');
  let found = false;
  for (const [i, name] of IDENTITY_FILES.entries()) {
    if (!stats[i]) continue;
    const data = await read(path.join(root, name)).catch(() => null);
    if (data === null) continue;
    hash.update(`${name}\0${data.length}\0`).update(data);
    found = true;
  }
  const identity = found ? hash.digest('hex').slice(0, 32) : undefined;
  identities.set(root, { files, identity });
  return identity;
}

/** What a kept pick says, for a note that it was dropped. */
function describePick(pick: KeptPick): string {
  return [
    ...(pick.variant !== undefined ? [`variant ${pick.variant}`] : []),
    ...(pick.backend !== undefined ? [`backend ${pick.backend}`] : []),
    ...(pick.chatTemplate !== undefined ? ['a chat template of your own'] : []),
    ...(pick.trustInstalled ? ['your trust in its installed layout'] : []),
  ].join(', ');
}

/** A package as the file keeps it, held in memory (not checked yet: no spec). */
function heldOf(root: string, p: StoredEntry): Held {
  const load = p.load ? pickOf(p.load) : undefined;
  return {
    root,
    addedAt: p.addedAt,
    lastLoadedAt: p.lastLoadedAt,
    ...(p.neverLoaded ? { neverLoaded: true as const } : {}),
    id: p.id ?? '',
    missing: false,
    ...(load ? { load } : {}),
    ...(load && p.pickedFor ? { pickedFor: p.pickedFor } : {}),
  };
}

/**
 * The library file's lock, for the moment of a read, merge and write (two processes saving at once would each
 * write over the other's change); null when it stays held (a holder that hangs): the save goes on without it.
 */
async function takeFileLock(file: string): Promise<HeldLock | null> {
  for (let i = 0; i < 100; i++) {
    const got = await takeLock(file).catch(() => null);
    if (got === null) return null;
    if ('release' in got) return got;
    await new Promise((r) => setTimeout(r, 20));
  }
  return null;
}

/** What validating a folder found. */
type Check = { spec: ModelSpec; source?: HubSource } | { error: NonNullable<LibraryEntry['error']>; missing: boolean };

async function check(root: string, load: LoadModelRequest | undefined): Promise<Check> {
  try {
    // Read as it loads: the picked variant, and an installed package the person trusts. A pick this check cannot
    // read (a variant for a GPU, a graph deleted since) leaves the package valid: its load falls back the same way.
    const trust = load?.trustInstalled === true ? { trustInstalled: true } : {};
    const spec = await loadModelSpec(root, {
      availableBackends: [CPU],
      ...(await variantOption(root, load?.variant)),
      ...trust,
    }).catch((err: unknown) =>
      load?.variant === undefined ? Promise.reject(err) : loadModelSpec(root, { availableBackends: [CPU], ...trust }),
    );
    // The person's own template, as it loads (one that no longer renders leaves the package's).
    const shown = withKeptTemplate(spec, load?.chatTemplate);
    const source = await hubSourceOf(root);
    return source ? { spec: shown, source } : { spec: shown };
  } catch (err) {
    const problem = packageProblem(err);
    const missing = !(await stat(root).then(
      (s) => s.isDirectory(),
      () => false,
    ));
    // A missing folder has no file to name.
    const error = missing
      ? { code: problem.code, message: `the folder ${root} is not there any more: put it back, or forget it` }
      : problem;
    return { missing, error };
  }
}

/**
 * A folder's path with symbolic links resolved (as a package's root is), also for a path that does not exist
 * yet: its nearest existing ancestor resolved, the rest as written. Library roots are compared in this form,
 * so a data directory reached through a link (macOS's /tmp, a linked ~/.kvdesk) is still recognised.
 */
export async function canonicalPath(p: string): Promise<string> {
  const abs = path.resolve(p);
  try {
    return await realpath(abs);
  } catch {
    const parent = path.dirname(abs);
    return parent === abs ? abs : path.join(await canonicalPath(parent), path.basename(abs));
  }
}

/**
 * What a library file holds, entry by entry: the entries this kvdesk can read, and each one it cannot (`dropped`:
 * where and why); `newer`: the version of a newer kvdesk that wrote it. `why`: the file as a whole is no library
 * file (not JSON, no list of packages), so nothing of it can be used.
 */
type ParsedFile = { entries: StoredEntry[]; dropped: string[]; newer?: number } | { why: string };

function parseStored(text: string): ParsedFile {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { why: (err as Error).message };
  }
  if (!isPlainObject(raw)) return { why: 'the file: not a JSON object' };
  const { version, packages } = raw;
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) {
    return { why: `version: ${JSON.stringify(version)} is not a version of the library file` };
  }
  if (!Array.isArray(packages)) return { why: 'packages: not a list' };
  const entries: StoredEntry[] = [];
  const dropped: string[] = [];
  packages.forEach((p: unknown, i) => {
    if (i >= MAX_PACKAGES) {
      if (i === MAX_PACKAGES) dropped.push(`packages.${i} and on: more than ${MAX_PACKAGES} packages`);
      return;
    }
    const r = StoredEntry.safeParse(p);
    if (r.success) {
      entries.push(r.data);
      return;
    }
    const issue = r.error.issues[0];
    const root = isPlainObject(p) && typeof p.root === 'string' ? ` (${p.root})` : '';
    dropped.push(`packages.${[i, ...(issue?.path ?? [])].join('.')}${root}: ${issue?.message}`);
  });
  return { entries, dropped, ...(version > VERSION ? { newer: version } : {}) };
}

/**
 * A data directory must be a folder, or not be there yet (it is made at the first save). A regular file there
 * stops the start: nothing could be saved, and every save would fail on its own later.
 */
async function assertFolderOrNothing(dataDir: string): Promise<void> {
  const s = await stat(dataDir).catch(() => null);
  if (s === null || s.isDirectory()) return;
  const dir = path.resolve(dataDir);
  throw new KvdeskError(
    'BAD_REQUEST',
    `the data directory ${dir} is a file, not a folder: kvdesk keeps its library, chats and settings in a folder. Give a folder (--data-dir DIR, or $KVDESK_DATA_DIR), or move that file away`,
    { file: dir },
  );
}

/**
 * A data directory a host can keep its library, chats and settings in: made when it is not there (a folder at a
 * time: Node's recursive mkdir loops for good where the kernel answers ENOENT to every mkdir, as under /proc), and
 * written to once. One that cannot be stops the start, naming the folder and why: else the host would run, saving
 * nothing. One that was there is made owner-only where it is kvdesk's (tightenDataDir; what it did said in `log`).
 */
export async function prepareDataDir(
  dataDir: string,
  log: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<void> {
  const dir = path.resolve(dataDir);
  await assertFolderOrNothing(dir);
  const refuse = (what: string, err: unknown) => {
    const e = err as NodeJS.ErrnoException;
    return new KvdeskError(
      'BAD_REQUEST',
      `the data directory ${dir} cannot be used: ${what} (${e.code ?? e.message}). Give a folder kvdesk can write (--data-dir DIR, or $KVDESK_DATA_DIR)${e.code === 'EACCES' || e.code === 'EPERM' ? ', or let this user write there' : ''}`,
      { file: dir, ...(e.code ? { cause: e.code } : {}) },
    );
  };
  // The folders missing, outermost first.
  const missing: string[] = [];
  for (let at = dir; ; at = path.dirname(at)) {
    const s = await stat(at).catch((err: NodeJS.ErrnoException) => err);
    if (!(s instanceof Error)) {
      if (!s.isDirectory()) throw refuse(`${at} is not a folder`, { code: 'ENOTDIR' });
      break;
    }
    if ((s.code !== 'ENOENT' && s.code !== 'ENOTDIR') || at === path.dirname(at))
      throw refuse(`${at} cannot be read`, s);
    missing.unshift(at);
  }
  // Made owner-only: a data folder holds chats, settings and keys (private-data.ts).
  for (const at of missing) {
    await mkdir(at, { mode: PRIVATE_DIR_MODE }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw refuse(`${at} could not be made`, err);
    });
  }
  const probe = path.join(dir, `.kvdesk-write-test-${process.pid}`);
  try {
    await writeFile(probe, '');
  } catch (err) {
    throw refuse('kvdesk cannot write there', err);
  }
  await rm(probe, { force: true });
  if (missing.length === 0) await tightenDataDir(dir, log);
}

export interface LibraryOptions {
  onChange?: (entries: LibraryEntry[]) => void;
  log?: (line: string) => void;
  now?: () => number;
  /**
   * The models loaded now (the host's), by id and folder: an id a loaded model has is never given to another folder
   * (one forgotten in the library may stay loaded under it).
   */
  loaded?: () => ReadonlyArray<{ id: string; root: string }>;
  /**
   * The bundled model's folder: it takes its plain id (`default`) from a folder of that name that is not there any
   * more, even when an earlier kvdesk gave it `default-2` for that reason (README and the API examples name it so).
   */
  bundled?: string;
}

/**
 * The ids a folder's name gives, in the order they are tried: `model`, `model-2`, `model-3`… A Hugging Face cache
 * snapshot goes by its repo's name (`me-tiny`), as its spec does, not by its revision hash.
 */
function* idsFor(root: string): Generator<string> {
  const base = slugify(hfCachePlace(root)?.name ?? path.basename(root));
  yield base;
  for (let i = 2; ; i++) yield `${base}-${i}`;
}

/** Whether `at` is a folder now (a missing one, or a file, is not). */
function isFolder(at: string): Promise<boolean> {
  return stat(at).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

/** The library of one data directory. */
export class ModelLibrary {
  private readonly file: string;
  /** The data directory, absolute: a root the file gives as a relative path is read from here. */
  readonly dataDir: string;
  /** `<dataDir>/models`, links resolved: a package is an upload when its folder is directly inside. */
  private uploadsDir: string;
  private records: Held[] = [];
  private saving: Promise<void> = Promise.resolve();
  /** The file exists but could not be read, or not be moved aside: never written over this session. */
  private readOnly = false;
  /**
   * This process's changes since it last read or wrote the file, laid over what the file holds when it saves
   * (another process — the window, `kvdesk serve`, `kvdesk pull` — may have written it meanwhile): the roots loaded
   * or added here, and the roots forgotten here (which the file's copy must not bring back).
   */
  private readonly changed = new Set<string>();
  private readonly forgotten = new Set<string>();
  /** The file as this process last read or wrote it (its identity and text): unchanged, it is not read again. */
  private seen: { sig: string; text: string } | null = null;
  /** Entries left out of the file's text last said (each text's said once). */
  private saidDropped = '';
  /** Checks of packages another process added (the next change event says what they found). */
  private checking: Promise<void> = Promise.resolve();
  /** What was wrong with the library file at open, or a kept pick dropped, and what was done (for a front end to show). */
  readonly problems: string[] = [];
  /**
   * An upload or a download the file does not list was added since it was written, and not loaded since: so when
   * the file was read whole (or there was none yet). One moved aside or unreadable lists nothing: no such guess.
   */
  private fileKnewAll = true;
  private readonly onChange: (entries: LibraryEntry[]) => void;
  private readonly log: (line: string) => void;
  private readonly now: () => number;
  private readonly loadedModels: () => ReadonlyArray<{ id: string; root: string }>;
  private readonly bundled: string | undefined;

  private constructor(dataDir: string, opts: LibraryOptions) {
    // Absolute, as the roots it is compared with are.
    this.dataDir = path.resolve(dataDir);
    this.file = path.join(this.dataDir, 'library.json');
    this.uploadsDir = path.resolve(dataDir, 'models');
    this.onChange = opts.onChange ?? (() => {});
    this.log = opts.log ?? (() => {});
    this.now = opts.now ?? Date.now;
    this.loadedModels = opts.loaded ?? (() => []);
    this.bundled = opts.bundled === undefined ? undefined : path.resolve(opts.bundled);
  }

  /**
   * Reads the library file (a missing one is an empty library). `refresh()`
   * then validates every package again; until it has, entries carry no spec.
   */
  static async open(dataDir: string, opts: LibraryOptions = {}): Promise<ModelLibrary> {
    await assertFolderOrNothing(dataDir);
    const lib = new ModelLibrary(dataDir, opts);
    lib.uploadsDir = await canonicalPath(lib.uploadsDir);
    const read = await lib.readFile();
    if (read !== null) {
      if ('why' in read) {
        lib.fileKnewAll = false;
        await lib.moveAside(read.why);
      } else {
        await lib.take(read.entries);
        lib.salvaged(read);
        lib.seen = read.seen;
      }
    }
    lib.sort();
    return lib;
  }

  /**
   * The library file now, parsed (`seen`: what it was, for the next read to tell whether it changed); null when
   * there is none or it cannot be read (said, unless `quiet`: it is then never written over).
   */
  private async readFile(quiet = false): Promise<(ParsedFile & { seen: { sig: string; text: string } }) | null> {
    const sig = await this.signature();
    const text = quiet ? await readIfThere(this.file).catch(() => null) : await this.readText();
    if (text === null || sig === null) return null;
    return { ...parseStored(text), seen: { sig, text } };
  }

  /** What identifies the file's content without reading it: each write is a new file (atomic), so a new inode. */
  private async signature(): Promise<string | null> {
    const st = await stat(this.file).catch(() => null);
    return st ? `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}` : null;
  }

  /**
   * A file read in part: what this kvdesk could not read is said, entry by entry. A newer kvdesk's file is used as
   * far as it can be read and never written over or moved (this session's changes are not remembered); in one of
   * this version, the entries left out are dropped, the file as it was copied aside first.
   */
  private salvaged(read: { dropped: string[]; newer?: number }): void {
    const left =
      read.dropped.length > 0 ? `; left out, as this kvdesk cannot read them: ${read.dropped.join('; ')}` : '';
    if (read.newer !== undefined) {
      this.keep(
        `the model library ${this.file} was written by a newer kvdesk (its version ${read.newer}; this one reads version ${VERSION}): it is used as far as this kvdesk can read it, and left as it is${left}. Update kvdesk to remember packages in it again`,
      );
      return;
    }
    if (read.dropped.length === 0) return;
    // Copied aside when kvdesk first writes the file (a read-only command, `kvdesk list`, leaves it as it is).
    this.saidDropped = read.dropped.join('; ');
    this.say(
      `the model library ${this.file} has ${read.dropped.length === 1 ? 'an entry' : `${read.dropped.length} entries`} this kvdesk cannot read, left out of the library (the rest is kept): ${read.dropped.join('; ')}. Before kvdesk next writes the file, it keeps it as it is now in ${this.file}.unreadable-<time>`,
    );
  }

  /**
   * The library file's text; null when there is none, or when it exists but cannot be read: then it is never
   * written over (this session's loads are not remembered), and the log says what to do.
   */
  private async readText(): Promise<string | null> {
    try {
      return await readIfThere(this.file);
    } catch (err) {
      this.keep(unreadableFile('the model library', this.file, err, 'restart kvdesk').message);
      return null;
    }
  }

  /** The packages of a file (each folder once, links resolved; a relative root read from the data directory). */
  private async take(packages: StoredEntry[]): Promise<void> {
    for (const [root, p] of await this.byRoot(packages)) this.records.push(heldOf(root, p));
  }

  /** A file's packages by their folder (links resolved, a relative root read from the data directory), first wins. */
  private async byRoot(packages: StoredEntry[]): Promise<Map<string, StoredEntry>> {
    const out = new Map<string, StoredEntry>();
    for (const p of packages) {
      const root = await canonicalPath(path.resolve(this.dataDir, p.root));
      if (!out.has(root)) out.set(root, p);
    }
    return out;
  }

  /**
   * What the file holds now, with this process's changes since it last read it laid over: a package another process
   * added joins, one it forgot goes (unless changed here since: loaded again), one it loaded again takes its dates
   * and pick; one forgotten here stays forgotten. Returns the folders to check (new here, or with another pick).
   */
  private async mergeFrom(packages: StoredEntry[]): Promise<string[]> {
    const fromFile = await this.byRoot(packages);
    const mine = new Map(this.records.map((r) => [r.root, r]));
    const next: Held[] = [];
    const toCheck: string[] = [];
    for (const [root, p] of fromFile) {
      if (this.forgotten.has(root)) continue;
      const r = mine.get(root);
      if (r === undefined) {
        next.push(heldOf(root, p));
        toCheck.push(root);
        continue;
      }
      if (!this.changed.has(root)) {
        const load = p.load ? pickOf(p.load) : undefined;
        if (JSON.stringify(load) !== JSON.stringify(r.load)) toCheck.push(root);
        r.addedAt = p.addedAt;
        r.lastLoadedAt = p.lastLoadedAt;
        if (p.neverLoaded) r.neverLoaded = true;
        else delete r.neverLoaded;
        if (load) r.load = load;
        else delete r.load;
        if (load && p.pickedFor) r.pickedFor = p.pickedFor;
        else delete r.pickedFor;
      }
      next.push(r);
    }
    // Added or loaded here and not in the file yet; the rest the file no longer lists, another process forgot.
    for (const r of this.records) if (!fromFile.has(r.root) && this.changed.has(r.root)) next.push(r);
    this.records = next;
    this.sort();
    return toCheck;
  }

  /** Validates the packages at `roots` (another process's, just merged in); one change event when there were any. */
  private async checkRoots(roots: string[]): Promise<void> {
    for (const root of roots) {
      const r = this.records.find((x) => x.root === root);
      if (r) this.apply(r, await check(r.root, await this.keptPick(r)));
    }
  }

  /**
   * The pick kept for a package, while its folder holds the model it was made for: one made for another (the
   * folder's files replaced since: another download, another package copied there) is dropped, and said.
   */
  private async keptPick(r: Held): Promise<KeptPick | undefined> {
    if (!r.load || r.pickedFor === undefined) return r.load;
    const now = await modelIdentity(r.root);
    if (now === undefined || now === r.pickedFor) return r.load;
    this.say(
      `${r.root} holds another model than the one its last pick was made for (its config or tokenizer files differ): that pick (${describePick(r.load)}) was dropped; it loads as kvdesk picks until you pick again`,
    );
    delete r.load;
    delete r.pickedFor;
    this.changed.add(r.root);
    // Not awaited: a check inside a read of the file (sync) would wait on itself.
    void this.save();
    return undefined;
  }

  /** Entries of the file this kvdesk cannot read, said once per text of the file. */
  private sayDropped(dropped: string[]): void {
    const text = dropped.join('; ');
    if (dropped.length === 0 || text === this.saidDropped) return;
    this.saidDropped = text;
    this.log(`kvdesk: the model library ${this.file} has entries this kvdesk cannot read, left out: ${text}`);
  }

  /**
   * Reads the library file again when another process has written it since (a `kvdesk pull`, the window, another
   * `kvdesk serve`): what it added joins (checked before this resolves), what it forgot goes; a change event then.
   * Cheap when the file has not changed (one stat). Requests naming a package the library does not know call it
   * before they are refused.
   */
  sync(): Promise<void> {
    const run = this.saving
      .catch(() => {})
      .then(async () => {
        const sig = await this.signature();
        if (sig === null || sig === this.seen?.sig) return;
        // A file that cannot be read was said at open (and is never written over): not said at every request.
        const read = await this.readFile(true);
        if (read === null || 'why' in read || read.seen.text === this.seen?.text) {
          if (read !== null && !('why' in read)) this.seen = read.seen;
          return;
        }
        if (read.newer !== undefined && !this.readOnly) this.salvaged(read);
        else this.sayDropped(read.dropped);
        const toCheck = await this.mergeFrom(read.entries);
        this.seen = read.seen;
        await this.checkRoots(toCheck);
        this.onChange(this.list());
      });
    this.saving = run.catch((err: Error) =>
      this.log(`kvdesk: the model library could not be read again: ${err.message}`),
    );
    return this.saving;
  }

  /** A file that is not valid: kept for the person to read or mend; the library starts again empty. */
  private async moveAside(why: string): Promise<void> {
    try {
      const aside = await setAside(this.file, this.now(), 'move');
      this.say(`the model library ${this.file} is not valid (${why}); it was moved to ${aside}`);
    } catch (err) {
      this.keep(`the model library ${this.file} is not valid (${why}), and ${(err as Error).message}`);
    }
  }

  /** The file stays as it is: nothing is saved over it this session; the reason is logged and kept. */
  private keep(why: string): void {
    this.readOnly = true;
    this.fileKnewAll = false;
    this.say(`${why.replace(/\.$/, '')}. Until then, the packages loaded are not remembered after kvdesk closes`);
  }

  private say(problem: string): void {
    this.problems.push(problem);
    this.log(`kvdesk: ${problem}`);
  }

  /** Most recently loaded first. */
  list(): LibraryEntry[] {
    return this.records.map((r) => ({
      root: r.root,
      id: r.id,
      ...(r.spec ? { spec: withModelId(r.spec, r.id) } : {}),
      ...(r.error ? { error: r.error } : {}),
      missing: r.missing,
      uploaded: this.isUpload(r.root),
      addedAt: r.addedAt,
      lastLoadedAt: r.lastLoadedAt,
      ...(r.neverLoaded ? { neverLoaded: true } : {}),
      ...(r.source ? { source: r.source } : {}),
      ...(r.load ? { load: r.load } : {}),
    }));
  }

  /** How the person last loaded the package at `root` (their pick), if they picked anything. */
  async pickFor(root: string): Promise<LoadModelRequest | undefined> {
    const abs = await canonicalPath(root);
    const r = this.records.find((x) => x.root === abs);
    if (!r) return undefined;
    const had = r.load;
    const kept = await this.keptPick(r);
    if (kept !== had) this.onChange(this.list());
    return kept;
  }

  /** The package a request naming `id` means (each folder has an id of its own: settleIds), when it is valid. */
  find(id: string): LibraryEntry | undefined {
    return this.list().find((e) => e.id === id && e.spec !== undefined && !e.missing);
  }

  /**
   * Validates every package again and adds uploads the file does not list (then saves); one change event at
   * the end.
   */
  async refresh(): Promise<void> {
    // What another process added is the file's, not an upload found here.
    await this.sync();
    let names: string[] = [];
    try {
      names = await readdir(this.uploadsDir);
    } catch {
      // No uploads yet.
    }
    let found = 0;
    for (const name of names) {
      if (name.startsWith('.')) continue; // staging folders of uploads in progress
      const root = path.join(this.uploadsDir, name);
      // A link in there is not kvdesk's copy (forgetting an upload deletes it): left alone.
      const s = await lstat(root).catch(() => null);
      // Checked after the wait: an upload may have been loaded (and recorded) meanwhile.
      if (!s?.isDirectory() || this.records.some((r) => r.root === root)) continue;
      const when = s.mtimeMs;
      const added = this.fileKnewAll ? { neverLoaded: true as const } : {};
      this.records.push({ root, addedAt: when, lastLoadedAt: when, ...added, id: '', missing: false });
      this.changed.add(root);
      found++;
    }
    for (const r of [...this.records]) this.apply(r, await check(r.root, await this.keptPick(r)));
    this.sort();
    // From this scan on, what is new in the folder was added this session (a download), whatever the file knew.
    this.fileKnewAll = true;
    // Only uploads found change what the file holds (checks are never stored).
    if (found > 0) await this.save();
    this.onChange(this.list());
  }

  /**
   * Checks one package again (a load of it failed, or a request names it): its row says what is wrong with it
   * now. Requests naming it at once share one check.
   */
  recheck(root: string): Promise<void> {
    let pending = this.rechecks.get(root);
    if (pending === undefined) {
      pending = (async () => {
        const abs = await canonicalPath(root).catch(() => root);
        const r = this.records.find((x) => x.root === abs);
        if (r === undefined) return;
        this.apply(r, await check(r.root, await this.keptPick(r)));
        this.onChange(this.list());
      })().finally(() => this.rechecks.delete(root));
      this.rechecks.set(root, pending);
    }
    return pending;
  }
  private readonly rechecks = new Map<string, Promise<void>>();

  /**
   * Records a successful load (a new package joins the library; a known one moves to the top), and how it was
   * loaded: the pick it was loaded with, kept for its next load (a load without one keeps the last; null drops it).
   */
  async loaded(root: string, spec: ModelSpec, how?: LoadModelRequest | null): Promise<void> {
    const abs = await canonicalPath(root);
    const t = this.now();
    const pick = pickOf(how ?? undefined);
    let r = this.records.find((x) => x.root === abs);
    if (r) {
      r.lastLoadedAt = t;
      delete r.neverLoaded;
      // The whole pick it loaded with (the host merges a new one into the kept one before it loads).
      if (pick) r.load = pick;
      else if (how === null) delete r.load;
      const identity = r.load ? await modelIdentity(abs) : undefined;
      if (identity) r.pickedFor = identity;
      else delete r.pickedFor;
      this.apply(r, { spec });
      this.records = this.records.filter((x) => x !== r);
    } else {
      const source = await hubSourceOf(abs);
      const identity = pick ? await modelIdentity(abs) : undefined;
      r = {
        root: abs,
        addedAt: t,
        lastLoadedAt: t,
        // The id it is loaded under (settleIds, from the host's loaded models), else one of its own.
        id: '',
        spec,
        missing: false,
        ...(source ? { source } : {}),
        ...(pick ? { load: pick } : {}),
        ...(identity ? { pickedFor: identity } : {}),
      };
    }
    // First, then a stable sort: a load in the same millisecond as another still comes first.
    this.records.unshift(r);
    this.sort();
    this.changed.add(abs);
    this.forgotten.delete(abs);
    await this.save();
    this.onChange(this.list());
  }

  /**
   * A package that joins the library without loading (an upload checked for its card, which loads it): listed
   * first, as a load would list it; one the library knows already stays as it is. `saved`: its entry must reach
   * the library file (a copy kvdesk just made, which the next start would otherwise not know): a write refused (a
   * full disk) takes it back out and throws the write's error.
   */
  async added(root: string, spec: ModelSpec, how: { saved?: boolean } = {}): Promise<void> {
    const abs = await canonicalPath(root);
    if (this.records.some((x) => x.root === abs)) return;
    const t = this.now();
    this.records.unshift({
      root: abs,
      addedAt: t,
      lastLoadedAt: t,
      neverLoaded: true,
      id: '',
      spec,
      missing: false,
    });
    this.sort();
    this.changed.add(abs);
    this.forgotten.delete(abs);
    if (how.saved) {
      try {
        await this.write();
      } catch (err) {
        // Not in the file, so not in the library: the caller removes the folder it copied in.
        this.records = this.records.filter((x) => x.root !== abs);
        this.changed.delete(abs);
        throw err;
      }
    } else await this.save();
    this.onChange(this.list());
  }

  /**
   * Removes a package from the library. A folder of the person's own is only
   * forgotten (never deleted); kvdesk's copy of an upload is deleted, since
   * nothing else would ever show or remove it.
   */
  async forget(root: string): Promise<void> {
    const abs = await canonicalPath(root);
    // Another process may have added it since this one read the file.
    if (!this.records.some((x) => x.root === abs)) await this.sync();
    const r = this.records.find((x) => x.root === abs);
    if (!r) throw new KvdeskError('BAD_REQUEST', `${abs} is not in the model library`, { field: 'root' });
    this.records = this.records.filter((x) => x !== r);
    this.changed.delete(abs);
    this.forgotten.add(abs);
    await this.save();
    // Only a folder directly in <dataDir>/models (and not a link) is kvdesk's own copy.
    const own =
      this.isUpload(abs) &&
      (await lstat(abs).then(
        (s) => s.isDirectory(),
        () => false,
      ));
    if (own) await rm(abs, { recursive: true, force: true });
    this.onChange(this.list());
  }

  /** Waits for pending writes, and checks of packages another process added (tests, shutdown). */
  async flush(): Promise<void> {
    await this.saving;
    await this.checking;
  }

  /** Whether a folder (links resolved) is kvdesk's copy of an upload: directly inside `<dataDir>/models`. */
  private isUpload(root: string): boolean {
    return path.dirname(root) === this.uploadsDir;
  }

  private apply(r: Held, c: Check): void {
    if ('spec' in c) {
      // Read under its base id: listed under the id the library gave it (list).
      r.spec = c.spec;
      if (c.source) r.source = c.source;
      r.error = undefined;
      r.missing = false;
    } else {
      r.spec = undefined;
      r.error = c.error;
      r.missing = c.missing;
    }
  }

  private sort(): void {
    this.records.sort((a, b) => b.lastLoadedAt - a.lastLoadedAt);
    this.settleIds();
  }

  /**
   * Gives each folder an id no other folder has (two folders named `model`, or `模型` and `model`, are two models):
   * a folder loaded now keeps the id it is loaded under; one that has an id keeps it (across restarts), unless a
   * folder loaded now, or one loaded more recently, has it (a file from before ids were told apart, or two
   * processes that each gave it); the rest get the first of `name`, `name-2`… that no folder has. An id that
   * changes is saved with the next write.
   */
  private settleIds(): void {
    const loaded = this.loadedModels();
    const loadedAs = new Map(loaded.map((m) => [m.root, m.id]));
    const given = new Map<string, string>();
    for (const m of loaded) given.set(m.id, m.root);
    const held = new Map<string, number>();
    for (const r of this.records) if (r.id !== '') held.set(r.id, (held.get(r.id) ?? 0) + 1);
    const order = [
      ...this.records.filter((r) => loadedAs.has(r.root)),
      ...this.records.filter((r) => !loadedAs.has(r.root)),
    ];
    for (const r of order) {
      const was = r.id;
      const as = loadedAs.get(r.root);
      if (as !== undefined) r.id = as;
      else if (r.id === '' || given.has(r.id)) {
        // Not an id another record holds either: that one keeps its own.
        for (const id of idsFor(r.root)) {
          if (!given.has(id) && (id === r.id || !held.has(id))) {
            r.id = id;
            break;
          }
        }
      }
      given.set(r.id, r.root);
      if (r.id !== was && was !== '' && as === undefined) {
        this.log(
          `kvdesk: the id ${was} is now the folder ${given.get(was) ?? 'loaded under it'}'s; the entry for ${r.root} is listed as ${r.id}`,
        );
      }
      if (r.id !== was) {
        if (was !== '') held.set(was, (held.get(was) ?? 1) - 1);
        if (held.get(was) === 0) held.delete(was);
        held.set(r.id, (held.get(r.id) ?? 0) + 1);
        this.changed.add(r.root);
      }
    }
  }

  /**
   * The id a load of the folder at `root` takes: the one it is loaded under or the library gave it, else the first
   * of `name`, `name-2`… no folder has (in the library, loaded, or `loading`: other loads under way, by folder).
   */
  async idFor(root: string, loading: ReadonlyMap<string, string> = new Map()): Promise<string> {
    const abs = await canonicalPath(root);
    const loaded = this.loadedModels();
    const own = loaded.find((m) => m.root === abs)?.id ?? loading.get(abs);
    if (own !== undefined) return own;
    const r = this.records.find((x) => x.root === abs);
    const bundled = this.bundled !== undefined && abs === (await canonicalPath(this.bundled));
    if (r !== undefined && r.id !== '' && !bundled) return r.id;
    const taken = new Set([
      ...loaded.map((m) => m.id),
      ...[...loading].filter(([at]) => at !== abs).map(([, id]) => id),
    ]);
    for (const id of idsFor(abs)) {
      // Its own id: never a lower one than it has taken from a folder that is here (the bundled model only).
      if (r !== undefined && id === r.id) return id;
      if (taken.has(id)) continue;
      const holders = this.records.filter((x) => x.id === id && x.root !== abs);
      if (holders.length === 0) return id;
      // The bundled model takes its plain id from folders that are not there any more (a clone at a new path, a
      // git worktree): the missing entry stays listed under another id (settleIds), to be put back or forgotten.
      // Another folder does not: a folder missing now may be on a drive not mounted, and its id would change under
      // the clients and chats that name it.
      if (bundled && (await Promise.all(holders.map((x) => isFolder(x.root)))).every((here) => !here)) return id;
    }
    throw new Error('unreachable');
  }

  /**
   * Writes the library: under the file's lock (library.json.lock, taken briefly), the file is read again and this
   * process's changes since it last read it laid over what it holds (mergeFrom), then written atomically. Another
   * process's additions are kept, its forgets honoured; entries this kvdesk cannot read are copied aside first.
   */
  private save(): Promise<void> {
    // A failure is logged (this.saving): the library goes on in memory.
    this.write().catch(() => {});
    return this.saving;
  }

  /** As save, but the returned promise rejects with the write's error (a full disk's ENOSPC). */
  private write(): Promise<void> {
    // Said once, at open: this session's library lives in memory only.
    if (this.readOnly) return this.saving;
    // Writes run in order, each atomically: the last state wins, a crash leaves the previous file.
    const next = this.saving
      .catch(() => {})
      .then(async () => {
        if (this.readOnly) return;
        const lock = await takeFileLock(`${this.file}.lock`);
        // What is being written: a change made during the write is written by the save it calls.
        const changed = new Set(this.changed);
        const forgotten = new Set(this.forgotten);
        try {
          const read = await this.readFile();
          let toCheck: string[] = [];
          if (read !== null && 'why' in read) await this.moveAside(read.why);
          else if (read !== null) {
            if (read.newer !== undefined) {
              this.salvaged(read);
              return;
            }
            if (read.dropped.length > 0) {
              this.sayDropped(read.dropped);
              try {
                const aside = await setAside(this.file, this.now(), 'copy');
                this.log(
                  `kvdesk: the model library ${this.file} as it was (with the entries left out) is kept in ${aside}`,
                );
              } catch (err) {
                // Never written over then: the entries left out would be lost.
                this.keep((err as Error).message);
                return;
              }
            }
            if (read.seen.text !== this.seen?.text) toCheck = await this.mergeFrom(read.entries);
          }
          const text = this.fileText();
          await writeAtomic(this.file, text);
          this.seen = { sig: (await this.signature()) ?? '', text };
          for (const root of changed) this.changed.delete(root);
          for (const root of forgotten) this.forgotten.delete(root);
          if (toCheck.length > 0) {
            // In the background: the load that saved does not wait for another process's packages to be checked.
            this.checking = this.checking
              .then(() => this.checkRoots(toCheck))
              .then(() => this.onChange(this.list()))
              .catch(() => {});
          }
        } finally {
          await lock?.release();
        }
      });
    this.saving = next.catch((err: Error) => this.log(`kvdesk: the model library could not be saved: ${err.message}`));
    return next;
  }

  /** The library file's text for the records now. */
  private fileText(): string {
    const data: { version: number; packages: StoredEntry[] } = {
      version: VERSION,
      packages: this.records.map((r) => ({
        root: r.root,
        id: r.id,
        uploaded: this.isUpload(r.root),
        addedAt: r.addedAt,
        lastLoadedAt: r.lastLoadedAt,
        ...(r.neverLoaded ? { neverLoaded: true as const } : {}),
        ...(r.load ? { load: r.load } : {}),
        ...(r.load && r.pickedFor ? { pickedFor: r.pickedFor } : {}),
      })),
    };
    return `${JSON.stringify(data, null, 2)}\n`;
  }
}
