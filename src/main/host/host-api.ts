/**
 * HostApi: the contract of src/shared/api.ts implemented once over
 * RunnerService, the package loader and the thread store. Electron IPC and the
 * WebSocket/HTTP server are thin adapters over it.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  type ApiServerRequest,
  type ApiServerStatus,
  type BudgetPatch,
  type CallName,
  type CallResponses,
  CallSchemas,
  type HostEventName,
  type HostEvents,
  type ImportedPackage,
  type LibraryEntry,
  type LoadModelRequest,
  type MeasurePromptRequest,
  type ModelInfo,
  type PackageCheck,
  type Thread,
  type ThreadFields,
} from '../../shared/api';
import type { StreamFrame } from '../../shared/contract';
import { type ErrorInfo, KvdeskError, type Result, toErrorInfo } from '../../shared/errors';
import { formatBytes } from '../../shared/format';
import { detectLayout, loadModelSpec, variantOption } from '../packages';
import { providerShortName } from '../packages/execution-providers';
import { packageProblem } from '../packages/package-error';
import { slugify } from '../packages/spec-assembly';
import { summaryOf, ThreadStore } from '../store/thread-store';
import { sweepTemps } from '../store/write-atomic';
import { previewChatTemplate, withKeptTemplate } from './chat-template-pick';
import { Downloads } from './downloads';
import { type HeldLock, takeLock } from './folder-lock';
import { freeBytes, type HubOptions } from './hub-download';
import { McpHub } from './mcp';
import { canonicalPath, ModelLibrary, mergePick, pickOf, prepareDataDir } from './model-library';
import type { RunnerService } from './runner-service';
import { incomingLockOf, sweepStaging } from './staging-sweep';

/** Budget snapshots go out at most this often (ARCHITECTURE.md: ≤ 10 Hz, latest wins). */
const BUDGET_INTERVAL_MS = 100;

/** Limits on a browser upload of a package folder. */
export interface UploadLimits {
  maxTotalBytes: number;
  maxFiles: number;
}

const DEFAULT_UPLOAD_LIMITS: UploadLimits = { maxTotalBytes: 8 * 1024 ** 3, maxFiles: 10_000 };

/** The host API every transport adapts. */
export interface HostApi {
  readonly runner: RunnerService;
  /** Validates `request` with CallSchemas[name] and runs it; never throws. */
  call<N extends CallName>(name: N, request: unknown): Promise<Result<CallResponses[N]>>;
  /** Validates and starts a generation; invalid input arrives as an 'error' frame. */
  generate(
    request: unknown,
    onFrame: (f: StreamFrame) => void,
  ): { requestId: string; cancel(reason?: 'user' | 'disconnect' | 'shutdown'): void };
  /**
   * Browser drop: writes the files atomically into the model library, validates, and loads (with `load: false`,
   * not: the package is only checked, for its card).
   */
  importFiles(upload: {
    name: string;
    files: Array<{ path: string; data: Uint8Array }>;
    load?: boolean;
  }): Promise<Result<ImportedPackage>>;
  /**
   * A new empty folder for an upload streamed to disk (a browser's multipart upload), then given to importStaged;
   * held by this process (a lock beside it) until dropStaging, so a kvdesk starting on the same data directory
   * meanwhile leaves it alone, while one starting after a crash clears it.
   */
  uploadStaging(): Promise<string>;
  /** Removes what is left of an upload's folder (from uploadStaging) and its lock: once the upload is over. */
  dropStaging(staging: string): Promise<void>;
  /**
   * An upload that met a full disk (ENOSPC, EDQUOT) while its files or its lock were written: the error that names
   * the models folder, the room the upload needs (`needBytes`, where known) and what is free there, said once in
   * the log (detail.diskFull: answered 507); undefined for any other failure.
   */
  uploadNoRoom(err: unknown, needBytes?: number): Promise<KvdeskError | undefined>;
  /**
   * The package an upload wrote into `staging` (from uploadStaging) joins the library and loads (or not), as
   * importFiles' does; the caller drops `staging` afterwards (dropStaging).
   */
  importStaged(upload: { name: string; staging: string; load?: boolean }): Promise<Result<ImportedPackage>>;
  /** Electron drop / dialog: loads a package folder by path. */
  importPath(path: string, how?: LoadModelRequest): Promise<Result<ModelInfo>>;
  /** The tools a stored chat runs without asking (none for a chat not stored). */
  toolGrants(threadId: string): Promise<string[]>;
  /** The packages loaded before (remembered across restarts). */
  readonly library: ModelLibrary;
  /** Model downloads from the Hugging Face Hub into the library. */
  readonly downloads: Downloads;
  /** Resolves once the library's packages have been validated again after start. */
  readonly libraryChecked: Promise<void>;
  /**
   * Makes sure a request's model is loaded: a library package named by its id
   * is loaded on first use (the APIs' just-in-time loading), unloading the
   * package loaded that way before it when that one is idle and not kept for
   * ever. A name neither loaded nor in the library is left for the request to
   * refuse. A model loaded this way is unloaded once idle for its time to live
   * (the option's default, or `keepAliveMs` as the request gave it, Ollama's
   * keep_alive; null: never; 0: once the request is over); each request naming
   * it starts that time again, with its own time to live (the default where it
   * gives none).
   */
  ensureModel(id: string | undefined, keepAliveMs?: number | null): Promise<void>;
  /** Library packages a request may name that are not loaded now: valid, present, one per id. */
  loadable(): LibraryEntry[];
  /**
   * Why the default model did not load at start (its folder, and the error), until a model loads; null when it
   * loaded, was not there to load, or a model has loaded since. /health reports it.
   */
  startFailure(): { path: string; error: ErrorInfo } | null;
  /**
   * Host events: 'budget' (throttled ≤ 10 Hz), 'scheduler', 'models', 'library', 'apiServer', 'settings',
   * 'downloads'.
   */
  on<E extends HostEventName>(event: E, fn: (payload: HostEvents[E]) => void): () => void;
  close(): Promise<void>;
}

/** Options of createHostApi. */
export interface HostApiOptions {
  runner: RunnerService;
  /** Threads, settings and uploaded models live here. */
  dataDir: string;
  /** Loaded at start when present. */
  defaultModelDir?: string;
  uploadLimits?: Partial<UploadLimits>;
  log?: (line: string) => void;
  /** How long a model loaded on first use stays loaded without requests (default 60 min; null: for ever). */
  firstUseTtlMs?: number | null;
  /** How often idle models loaded on first use are looked for (default 5 s). */
  firstUseSweepMs?: number;
  /** The HTTP API server, for the apiServer calls (default: none, which they say). */
  apiServer?: ApiServerControl;
  /** Where model downloads come from (default: HF_ENDPOINT / HF_TOKEN, else huggingface.co). */
  hub?: HubOptions;
}

/** Who runs the HTTP API and how: the window's server control, or `kvdesk serve`'s own server. */
export interface ApiServerControl {
  status(): ApiServerStatus;
  start(req: ApiServerRequest): Promise<ApiServerStatus>;
  stop(): Promise<ApiServerStatus>;
  newKey(): Promise<ApiServerStatus>;
}

/** A host without an HTTP server (tests, embedders): the calls say so. */
const NO_API_SERVER: ApiServerControl = {
  status: () => ({ running: false, controlledBy: 'none', tokenRequired: false }),
  start: async () => {
    throw new KvdeskError('BAD_REQUEST', 'this kvdesk has no HTTP server to start: run `kvdesk serve`');
  },
  stop: async () => NO_API_SERVER.status(),
  newKey: async () => NO_API_SERVER.status(),
};

/** LM Studio's default time to live of a model loaded just in time. */
export const DEFAULT_FIRST_USE_TTL_MS = 60 * 60_000;

/** A model loaded on first use: how long it may stay idle (null: for ever) and when a request last named it. */
interface FirstUse {
  ttlMs: number | null;
  lastUsedAt: number;
  /**
   * A request asked to keep it for ever (Ollama's keep_alive -1): it does not make way for the next library model.
   * (`--first-use-ttl never` only stops the idle unload: with it, a client switching models keeps one loaded.)
   */
  pinned?: boolean;
}

/** What the model list says of a model loaded on first use. */
const shownFirstUse = (f: FirstUse) => ({ ttlMs: f.ttlMs, lastUsedAt: f.lastUsedAt });

/** The longest name of one file or folder that ext4, APFS, NTFS and most other file systems take. */
const NAME_MAX_BYTES = 255;
/** The longest path an upload may use inside its folder (the data folder's own path comes before it on disk). */
const UPLOAD_PATH_MAX_BYTES = 1024;

/** A path for a message: a long one keeps its start and its end. */
function shownPath(p: string): string {
  return p.length > 80 ? `${p.slice(0, 48)}…${p.slice(-24)}` : p;
}

/** Makes a relative upload path safe, or says why it is not. */
export function safeRelativePath(p: string): string {
  const norm = p.replace(/\\/g, '/');
  if (norm.startsWith('/') || /^[A-Za-z]:/.test(norm))
    throw new KvdeskError('BAD_REQUEST', `upload path "${shownPath(p)}" is absolute`);
  const parts = norm.split('/').filter((s) => s !== '' && s !== '.');
  if (parts.length === 0) throw new KvdeskError('BAD_REQUEST', `upload path "${p}" is empty`);
  if (parts.some((s) => s === '..'))
    throw new KvdeskError('BAD_REQUEST', `upload path "${shownPath(p)}" leaves the package ("..")`);
  if (parts.some((s) => s.includes('\0')))
    throw new KvdeskError('BAD_REQUEST', `upload path "${shownPath(p)}" has a NUL byte`);
  const long = parts.find((s) => Buffer.byteLength(s) > NAME_MAX_BYTES);
  if (long !== undefined) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `upload path "${shownPath(p)}" has a name of ${Buffer.byteLength(long)} bytes; file systems take at most ${NAME_MAX_BYTES} bytes per file or folder name: rename it`,
      { path: shownPath(p) },
    );
  }
  const rel = parts.join('/');
  if (Buffer.byteLength(rel) > UPLOAD_PATH_MAX_BYTES) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `upload path "${shownPath(p)}" is ${Buffer.byteLength(rel)} bytes long; an upload's paths may be at most ${UPLOAD_PATH_MAX_BYTES}: shorten its folders' names`,
      { path: shownPath(p) },
    );
  }
  return rel;
}

/**
 * Checks each path of an upload (as safeRelativePath gave it) against the ones before it: the same file twice,
 * or a path that is a file for one entry and a folder for another (`model.onnx` and `model.onnx/x`), cannot both
 * be written. Returns the check, to call once per path in the order they come.
 */
/** The same path twice in one upload. */
function uploadedTwice(rel: string): KvdeskError {
  return new KvdeskError('BAD_REQUEST', `The upload has the file ${shownPath(rel)} twice.`, { path: shownPath(rel) });
}

export function uploadPathCheck(): (rel: string) => void {
  const files = new Set<string>();
  /** Each folder an upload path needs, with the first path that needs it. */
  const folders = new Map<string, string>();
  const clash = (both: string, other: string) =>
    new KvdeskError(
      'BAD_REQUEST',
      `The upload has ${shownPath(both)} both as a file and as the folder of ${shownPath(other)}; one path cannot be both: rename one of them.`,
      { path: shownPath(both) },
    );
  return (rel) => {
    if (files.has(rel)) throw uploadedTwice(rel);
    const under = folders.get(rel);
    if (under !== undefined) throw clash(rel, under);
    const parts = rel.split('/');
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (files.has(dir)) throw clash(dir, rel);
      if (!folders.has(dir)) folders.set(dir, rel);
    }
    files.add(rel);
  };
}

/** A write of an upload's file that failed because of its path (a name the disk refuses), said with that path. */
export function uploadWriteError(err: unknown, rel: string): unknown {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (code === 'EEXIST') return uploadedTwice(rel);
  if (code === 'ENAMETOOLONG' || code === 'ENOTDIR' || code === 'EISDIR' || code === 'EINVAL') {
    return new KvdeskError(
      'BAD_REQUEST',
      `The upload's file ${shownPath(rel)} cannot be written here (${code}): rename it, or the folder it is in.`,
      { path: shownPath(rel) },
    );
  }
  return err;
}

/** An upload's folder name in the library: letters and digits of any script kept (`模型`), the rest '-'. */
function slug(name: string): string {
  return (
    name
      .normalize('NFC')
      .replace(/[^\p{L}\p{N}\p{M}._-]+/gu, '-')
      .replace(/^[-.]+|[-.]+$/g, '')
      .slice(0, 80) || 'package'
  );
}

/** Whether a folder holds exactly these files (same relative paths, same bytes) and nothing else. */
/** Every file under `dir`, as paths relative to it with `/`. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => null);
  if (!entries) return [];
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)).split(path.sep).join('/'));
}

/** Whether two folders hold the same files with the same bytes (read a MiB at a time: weights are large). */
async function sameTree(a: string, b: string): Promise<boolean> {
  const [left, right] = await Promise.all([filesUnder(a), filesUnder(b)]);
  if (left.length !== right.length) return false;
  const wanted = new Set(right);
  if (!left.every((p) => wanted.has(p))) return false;
  for (const rel of left) {
    const [x, y] = [path.join(a, rel), path.join(b, rel)];
    if ((await stat(x)).size !== (await stat(y)).size) return false;
    if (!(await sameBytes(x, y))) return false;
  }
  return true;
}

async function sameBytes(a: string, b: string): Promise<boolean> {
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    const [ba, bb] = [Buffer.alloc(1 << 20), Buffer.alloc(1 << 20)];
    for (;;) {
      const [ra, rb] = await Promise.all([fa.read(ba, 0, ba.length, null), fb.read(bb, 0, bb.length, null)]);
      if (ra.bytesRead !== rb.bytesRead) return false;
      if (ra.bytesRead === 0) return true;
      if (ba.compare(bb, 0, rb.bytesRead, 0, ra.bytesRead) !== 0) return false;
    }
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

/** A package error about an uploaded folder's staging copy, told of the folder the person uploaded (`name`). */
function inFolder(err: unknown, staging: string, name: string): unknown {
  if (!(err instanceof KvdeskError)) return err;
  const named = (text: string) => text.split(staging).join(`the uploaded folder "${name}"`);
  const detail = err.detail
    ? Object.fromEntries(Object.entries(err.detail).map(([k, v]) => [k, typeof v === 'string' ? named(v) : v]))
    : undefined;
  return new KvdeskError(err.code, named(err.message), detail);
}

/** How many deleted chats' ids the host remembers (in its data folder), to refuse a late save of one. */
export { DELETED_THREADS_KEPT } from '../store/thread-store';

/** Creates the host API and loads the default model (a failure there is logged, never fatal). */
export async function createHostApi(opts: HostApiOptions): Promise<HostApi> {
  const { runner } = opts;
  const log = opts.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  await prepareDataDir(opts.dataDir, log);
  // What saves cut off (kvdesk killed while writing a chat, the settings, the library) left beside their files.
  await sweepTemps([opts.dataDir, path.join(opts.dataDir, 'threads')], log);
  const apiServer = opts.apiServer ?? NO_API_SERVER;
  const limits: UploadLimits = { ...DEFAULT_UPLOAD_LIMITS, ...opts.uploadLimits };
  const libraryDir = path.join(opts.dataDir, 'models');
  // Settings another kvdesk on the data folder saved, found by a page's read: the pages here holding older ones hear.
  const store = new ThreadStore(opts.dataDir, { log, onSettings: (settings) => emit('settings', settings) });
  const listeners: { [E in HostEventName]: Set<(p: HostEvents[E]) => void> } = {
    budget: new Set(),
    scheduler: new Set(),
    models: new Set(),
    library: new Set(),
    apiServer: new Set(),
    settings: new Set(),
    thread: new Set(),
    threadDeleted: new Set(),
    downloads: new Set(),
  };
  let defaultModelId: string | undefined;
  /** The default model's failed load at start, until a model loads (HostApi.startFailure). */
  let startFailure: { path: string; error: ErrorInfo } | null = null;
  /**
   * Models the APIs loaded on first use (the ones a later such load, or their time to live, may unload), with
   * their time to live and last use.
   */
  const firstUse = new Map<string, FirstUse>();

  function emit<E extends HostEventName>(event: E, payload: HostEvents[E]): void {
    for (const fn of listeners[event]) {
      try {
        fn(payload);
      } catch (err) {
        log(`kvdesk: a ${event} listener failed: ${(err as Error).message}`);
      }
    }
  }

  function models(): ModelInfo[] {
    return runner.listModels().map((m) => ({
      id: m.id,
      spec: m.spec,
      loadMs: m.loadMs,
      backend: providerShortName(m.spec.executionProvider ?? 'CPUExecutionProvider') ?? 'cpu',
      isDefault: m.id === defaultModelId,
      logits: m.logits,
      ...(firstUse.has(m.id) ? { firstUse: shownFirstUse(firstUse.get(m.id) as FirstUse) } : {}),
      ...(m.reloading ? { reloading: true } : {}),
    }));
  }

  // Budget snapshots: leading edge plus one trailing emit per window, so the last state always arrives.
  let budgetTimer: NodeJS.Timeout | null = null;
  let budgetDirty = false;
  let lastBudget = 0;
  function budgetChanged(): void {
    if (listeners.budget.size === 0) return;
    budgetDirty = true;
    if (budgetTimer) return;
    const wait = Math.max(0, lastBudget + BUDGET_INTERVAL_MS - Date.now());
    budgetTimer = setTimeout(() => {
      budgetTimer = null;
      if (!budgetDirty) return;
      budgetDirty = false;
      // The window is counted from the emit itself, not from before the snapshot is taken (which takes a while on a
      // busy machine): two emits are never less than the interval apart.
      const snapshot = runner.snapshot();
      lastBudget = Date.now();
      emit('budget', snapshot);
    }, wait);
  }
  const unsubscribe = runner.onSchedulerEvent((e) => {
    // Per-frame progress is carried by the throttled snapshot; the timeline gets the discrete events.
    if (e.type !== 'progress') emit('scheduler', e);
    budgetChanged();
  });
  // A load again starting or ending shows on the model (`reloading`); the requests waiting for it, in the budget.
  const unsubscribeReload = runner.onReloadChange((what) => {
    if (what === 'model') emit('models', models());
    budgetChanged();
  });

  // The engine process dying is said, with what it cost and that kvdesk brings it back (serve's stderr).
  const unsubscribeRecovery = runner.onEngineRecovery((e) => {
    if (e.type === 'crashed') {
      const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
      const back = e.models.length > 0 ? `, loading ${e.models.join(', ')} back` : '';
      const queued =
        e.queuedRequests === 0
          ? ''
          : e.queuedWait
            ? `; ${plural(e.queuedRequests, 'queued request')} ${e.queuedRequests === 1 ? 'waits' : 'wait'} for it`
            : `; ${plural(e.queuedRequests, 'queued request')} refused (it failed again and again)`;
      log(
        `kvdesk: ${e.reason}; restarting it${back}. ${plural(e.failedRequests, 'running request')} failed (ENGINE_FAILED, reservations released)${queued}`,
      );
    } else if (e.type === 'back') {
      log(`kvdesk: the engine is back: ${e.modelId} loaded again after ${Math.round(e.ms)} ms`);
    } else {
      log(`kvdesk: the engine is back, but ${e.modelId} could not be loaded again: ${e.message}`);
    }
  });

  const library = await ModelLibrary.open(opts.dataDir, {
    onChange: (e) => emit('library', e),
    log,
    // A model stays loaded when its folder is forgotten: its id is given to no other folder meanwhile.
    loaded: () => runner.listModels().map((m) => ({ id: m.id, root: m.spec.root })),
    ...(opts.defaultModelDir ? { bundled: opts.defaultModelDir } : {}),
  });
  /** Loads under way, by folder (links resolved), and the id each takes: two folders of one name load at once apart. */
  const loadingIds = new Map<string, string>();
  // What uploads and downloads that never ended left in the models folder (none a live kvdesk is writing).
  const swept = sweepStaging(libraryDir, { log }).then(
    () => {},
    (err: Error) => log(`kvdesk: the models folder could not be cleared: ${err.message}`),
  );
  const downloads = new Downloads(libraryDir, library, (list) => emit('downloads', list), opts.hub, log);
  const mcp = new McpHub(opts.dataDir);
  /** The library's check after start (set once the default model is loaded). */
  let libraryChecked: Promise<void> = Promise.resolve();

  /**
   * Loads a package; `jit`: a request named it (loaded on first use), else the person loaded it; `how`: the
   * person's pick of variant and backend, else the one it was last loaded with (the library keeps it).
   */
  async function load(dir: string, jit?: FirstUse, how: LoadModelRequest = {}): Promise<ModelInfo> {
    try {
      return await loadAs(dir, jit, how);
    } catch (err) {
      // A package that no longer validates (a file deleted since it was checked): its library row says so now,
      // instead of "fits" and Load.
      if (toErrorInfo(err).code === 'PACKAGE_INVALID') await library.recheck(dir).catch(() => {});
      throw err;
    }
  }

  async function loadAs(dir: string, jit: FirstUse | undefined, how: LoadModelRequest): Promise<ModelInfo> {
    // What the person picks now changes the kept pick's fields it names; the others stay as they were.
    const kept = await library.pickFor(dir);
    // (null for the chat template: back to the package's own.)
    const named: LoadModelRequest = { ...pickOf(how), ...(how.chatTemplate === null ? { chatTemplate: null } : {}) };
    const ortPackage = kept !== undefined && (await detectLayout(dir).catch(() => undefined)) === 'ort-package';
    const pick: LoadModelRequest = mergePick(kept, named, ortPackage);
    // A person's load: not under replies that run on the model (a request's load on first use is of one not loaded).
    const whileIdle = jit === undefined;
    // A change of chat template alone: the model takes it without loading again (when nothing else differs).
    const templateOnly = Object.keys(named).length === 1 && 'chatTemplate' in named;
    // Its own id: the one it is loaded under (a reload), or the library gave it; never another folder's (a folder
    // of the same name elsewhere is another model, `name-2`, and loading it replaces nothing).
    const root = await canonicalPath(dir);
    const id = await library.idFor(root, loadingIds);
    const reserved = !loadingIds.has(root);
    if (reserved) loadingIds.set(root, id);
    try {
      return await loadUnder(dir, id, jit, { kept, named, pick, whileIdle, templateOnly });
    } finally {
      if (reserved) loadingIds.delete(root);
    }
  }

  async function loadUnder(
    dir: string,
    id: string,
    jit: FirstUse | undefined,
    how: {
      kept: LoadModelRequest | undefined;
      named: LoadModelRequest;
      pick: LoadModelRequest;
      whileIdle: boolean;
      templateOnly: boolean;
    },
  ): Promise<ModelInfo> {
    const { kept, named, whileIdle, templateOnly } = how;
    let { pick } = how;
    let info: Awaited<ReturnType<RunnerService['loadModel']>>;
    try {
      info = await runner.loadModel(dir, { ...pick, id, whileIdle, templateOnly });
    } catch (err) {
      const problem = toErrorInfo(err);
      let retry: LoadModelRequest;
      if (
        problem.code === 'BAD_REQUEST' &&
        problem.detail?.field === 'chatTemplate' &&
        !('chatTemplate' in named) &&
        pick.chatTemplate !== undefined
      ) {
        // A kept template of the person's own that no longer renders: loaded with the package's, the rest of the
        // pick kept, and the template dropped.
        log(
          `kvdesk: ${dir}: its kept chat template no longer renders (${problem.message}); loading it with the package's`,
        );
        const { chatTemplate: _dropped, ...rest } = pick;
        retry = rest;
      } else if (
        problem.code === 'PACKAGE_INVALID' &&
        kept !== undefined &&
        Object.keys(kept).some((k) => !(k in named))
      ) {
        // A kept pick the package no longer has (a variant deleted): loaded without what was kept of it (kvdesk's
        // choice there), and that part of the pick is dropped. The person's trust and own template are no pick
        // of a variant: they stay.
        log(`kvdesk: ${dir} could not load as last picked (${problem.message}); loading it as kvdesk picks`);
        retry = {
          ...pickOf(named),
          ...(kept.trustInstalled ? { trustInstalled: true } : {}),
          ...(typeof pick.chatTemplate === 'string' ? { chatTemplate: pick.chatTemplate } : {}),
        };
      } else throw err;
      info = await runner.loadModel(dir, { ...retry, id, whileIdle });
      pick = retry;
    }
    // Its idle time counts from now: a load that took longer than the time to live does not make it stale.
    if (jit) firstUse.set(info.id, { ...jit, lastUsedAt: Date.now() });
    else firstUse.delete(info.id);
    startFailure = null;
    const all = models();
    emit('models', all);
    budgetChanged();
    // The whole pick it loaded with: one that says nothing (a template of the person's own dropped) keeps nothing.
    await library.loaded(dir, info.spec, pickOf(pick) ?? null);
    return all.find((m) => m.id === info.id) as ModelInfo;
  }

  const defaultTtl = opts.firstUseTtlMs === undefined ? DEFAULT_FIRST_USE_TTL_MS : opts.firstUseTtlMs;
  /** Loads in progress by id: concurrent requests for one package share its load. */
  const jitLoads = new Map<string, Promise<void>>();
  /**
   * When a request last named each model loaded on first use (a count, not a time: two in one millisecond
   * differ). A reply that ends lets a model kept 0 ms go only if no request named it since its own did: that
   * one may not have started on it yet.
   */
  const lastNamed = new Map<string, number>();
  let namings = 0;

  /** Locks of the upload folders being written (their lock beside each: staging-sweep.ts). */
  const stagingLocks = new Map<string, HeldLock>();

  /** A new empty folder beside the library's packages, for an upload to be written into before it is checked. */
  async function uploadStaging(): Promise<string> {
    await mkdir(libraryDir, { recursive: true });
    for (;;) {
      const staging = path.join(libraryDir, `.incoming-${randomBytes(6).toString('hex')}`);
      // The lock first: a sweep never finds the folder without it.
      const held = await takeLock(incomingLockOf(staging));
      if (!('release' in held)) continue;
      try {
        await mkdir(staging);
      } catch (err) {
        await held.release();
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
        throw err;
      }
      stagingLocks.set(staging, held);
      return staging;
    }
  }

  async function uploadNoRoom(err: unknown, needBytes?: number): Promise<KvdeskError | undefined> {
    const code = (err as NodeJS.ErrnoException | null)?.code;
    if (code !== 'ENOSPC' && code !== 'EDQUOT') return undefined;
    const free = await freeBytes(libraryDir);
    const need = needBytes !== undefined && Number.isFinite(needBytes) && needBytes > 0 ? needBytes : undefined;
    const room = [
      need !== undefined ? `the upload needs ${formatBytes(need)}` : undefined,
      free !== undefined ? `${formatBytes(free)} is free` : undefined,
    ].filter((x) => x !== undefined);
    const message = `not enough space on the disk of ${libraryDir}${code === 'EDQUOT' ? ' (your disk quota is used up)' : ''}${room.length ? `: ${room.join(', ')}` : ''}. Free some space there (or start kvdesk with another data folder), then upload the package again; kvdesk kept nothing of it.`;
    log(`kvdesk: an upload was refused: ${message}`);
    return new KvdeskError('INTERNAL', message, {
      diskFull: true,
      ...(need !== undefined ? { needBytes: need } : {}),
      ...(free !== undefined ? { freeBytes: free } : {}),
    });
  }

  async function dropStaging(staging: string): Promise<void> {
    try {
      await rm(staging, { recursive: true, force: true });
    } finally {
      await stagingLocks.get(staging)?.release();
      stagingLocks.delete(staging);
    }
  }

  function checkUploadSize(count: number, total: number): void {
    if (count > limits.maxFiles) {
      throw new KvdeskError('BAD_REQUEST', `the folder has ${count} files; at most ${limits.maxFiles} are accepted`);
    }
    if (total > limits.maxTotalBytes) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `the folder holds ${total} bytes; uploads are limited to ${limits.maxTotalBytes} bytes`,
        { totalBytes: total, limitBytes: limits.maxTotalBytes },
      );
    }
  }

  /** A package's spec as it would load: with the pick it was last loaded with, and the chat template kept. */
  async function readAsItLoads(dir: string, trustInstalled = false) {
    const kept = await library.pickFor(dir);
    const trust = trustInstalled || kept?.trustInstalled === true ? { trustInstalled: true } : {};
    const read = await loadModelSpec(dir, { ...(await variantOption(dir, kept?.variant)), ...trust }).catch(() =>
      loadModelSpec(dir, trust),
    );
    // (A kept template of the person's own that no longer renders: the package's.)
    return withKeptTemplate(read, kept?.chatTemplate);
  }

  /** An upload's package in the library: loaded, or (load false) checked for its card, which loads it. */
  async function imported(root: string, loadIt: boolean, existing = false): Promise<ImportedPackage> {
    const again = existing ? { existing } : {};
    if (!loadIt) {
      // In the library from now on (its card's Load loads it; Forget deletes the copy).
      const spec = await readAsItLoads(root);
      await library.added(root, spec);
      // Under the id the library gave it (`name-2` when another folder of that name has its name's).
      const abs = await canonicalPath(root);
      const listed = library.list().find((e) => e.root === abs)?.spec ?? spec;
      return { root, spec: listed, ...again };
    }
    const model = await load(root);
    return { root, spec: model.spec, model, ...again };
  }

  /**
   * An upload written into `staging` joins the library: a browser's paths share the folder's name at the top
   * (`pkg/tokenizer.json`), which goes; the same package uploaded again is the library's copy (not a second copy
   * beside it); otherwise it is validated as a path is and moved into the library. Either is then loaded, or with
   * `loadIt` false only checked (the window's card loads it). The caller removes what is left of `staging`.
   */
  async function commitStaged(name: string, staging: string, loadIt = true): Promise<ImportedPackage> {
    const top = await readdir(staging, { withFileTypes: true });
    const root = top.length === 1 && top[0]?.isDirectory() ? path.join(staging, top[0].name) : staging;
    for (let i = 1; ; i++) {
      const candidate = path.join(libraryDir, i === 1 ? slug(name) : `${slug(name)}-${i}`);
      if (!existsSync(candidate)) break;
      if (await sameTree(candidate, root)) return await imported(candidate, loadIt, true);
    }
    // Validate exactly as for a path before the package enters the library; a refusal names the folder the
    // person chose, not the staging folder it was copied to.
    await loadModelSpec(root).catch((err: unknown) => {
      throw inFolder(err, root, name);
    });
    let final = path.join(libraryDir, slug(name));
    for (let i = 2; existsSync(final); i++) final = path.join(libraryDir, `${slug(name)}-${i}`);
    let moved = false;
    try {
      await rename(root, final);
      moved = true;
      // In the library file before anything else: a disk too full to write it (or to move the folder) refuses the
      // upload as its files' write would (507), rather than answering it in while the file, and so the next
      // start, knows nothing of the folder.
      await library.added(final, await readAsItLoads(final), { saved: true });
    } catch (err) {
      if (moved) await rm(final, { recursive: true, force: true });
      throw (await uploadNoRoom(err)) ?? err;
    }
    try {
      const got = await imported(final, loadIt);
      // Named apart from another package: its folder (another upload of that name), or its id (a folder of that
      // name elsewhere, loaded or in the library).
      const apart = final !== path.join(libraryDir, slug(name)) || got.spec.id !== slugify(path.basename(final));
      return apart ? { ...got, nameTaken: true } : got;
    } catch (err) {
      // Out of the library again (forget deletes kvdesk's copy), and its folder gone whatever forget managed.
      await library.forget(final).catch(() => {});
      await rm(final, { recursive: true, force: true });
      throw err;
    }
  }

  /** Unloads a model (refused while requests run on it), whoever loaded it. */
  async function unload(id: string): Promise<void> {
    await runner.unloadModel(id);
    firstUse.delete(id);
    emit('models', models());
    budgetChanged();
  }

  /** Unloads a model loaded on first use; false (and it stays) while requests run on it. */
  async function unloadFirstUse(id: string, why: string): Promise<boolean> {
    if (!runner.listModels().some((m) => m.id === id)) {
      firstUse.delete(id);
      return true;
    }
    try {
      await unload(id);
    } catch {
      return false;
    }
    log(`kvdesk: unloaded ${id} (loaded on first use) ${why}`);
    return true;
  }

  /** Library packages a request may name that are not loaded: one per id, the most recently loaded. */
  function hostApiLoadable(): LibraryEntry[] {
    const loaded = new Set(runner.listModels().map((m) => m.id));
    const out: LibraryEntry[] = [];
    for (const e of library.list()) {
      if (!e.spec || e.missing || loaded.has(e.id) || out.some((o) => o.id === e.id)) continue;
      out.push(e);
    }
    return out;
  }

  async function ensureModel(id: string | undefined, keepAliveMs?: number | null): Promise<void> {
    if (id === undefined) return;
    // Each request sets the time to live of a model loaded on first use, as Ollama's do: one that gives none, the
    // default (an earlier request's `keep_alive: -1` or `10m` is not every later client's).
    const named = () => {
      const f = firstUse.get(id);
      if (!f) return;
      f.lastUsedAt = Date.now();
      f.ttlMs = keepAliveMs === undefined ? defaultTtl : keepAliveMs;
      f.pinned = keepAliveMs === null;
      lastNamed.set(id, ++namings);
    };
    if (runner.listModels().some((m) => m.id === id)) {
      named();
      return;
    }
    let entry: LibraryEntry | undefined = library.find(id);
    if (entry === undefined && !library.list().some((e) => e.id === id)) {
      // Another process may have added it since this one read the library (`kvdesk pull` beside `kvdesk serve`).
      await library.sync();
      entry = library.find(id);
    }
    const broken = entry === undefined ? library.list().find((e) => e.id === id && e.error !== undefined) : undefined;
    if (broken !== undefined) {
      // Its last check (or load) failed: the files may have been put right since.
      await library.recheck(broken.root);
      entry = library.find(id);
    }
    if (!entry) {
      // Named as the model list knows it: what is loaded and what the library can load, or why its package can't.
      const still = library.list().find((e) => e.id === id && e.error !== undefined);
      if (still?.error) {
        throw new KvdeskError(
          'MODEL_NOT_LOADED',
          `model "${id}" is in the library, but its package cannot load: ${still.error.message}`,
          { field: 'model' },
        );
      }
      const known = [...runner.listModels().map((m) => m.id), ...hostApiLoadable().map((e) => e.id)];
      throw new KvdeskError(
        'MODEL_NOT_LOADED',
        `model "${id}" is neither loaded nor in the library (known: ${known.join(', ') || 'none'})`,
        { field: 'model' },
      );
    }
    let pending = jitLoads.get(id);
    if (!pending) {
      pending = (async () => {
        for (const other of [...firstUse.keys()]) {
          // Requests still running on it keep it: then both are loaded. So does a load not yet over (its library
          // record still being written): the request that loaded it has not started on it yet. And one a request
          // asked to keep for ever (keep_alive -1): /api/ps and its card say it stays until unloaded.
          if (jitLoads.has(other) || firstUse.get(other)?.pinned === true) continue;
          await unloadFirstUse(other, `to load ${id}`);
        }
        await load(entry.root, {
          ttlMs: keepAliveMs === undefined ? defaultTtl : keepAliveMs,
          lastUsedAt: Date.now(),
          ...(keepAliveMs === null ? { pinned: true } : {}),
        });
        log(`kvdesk: loaded ${id} from ${entry.root} on first use`);
      })().finally(() => jitLoads.delete(id));
      jitLoads.set(id, pending);
    }
    await pending;
    // Every request that waited for the load uses the model now, with its own time to live.
    named();
  }

  /**
   * After a request on a model loaded on first use: one kept 0 ms (keep_alive 0) goes now, as Ollama's does,
   * not at the next sweep; unless a request named it since this one did (it goes after that one), or requests
   * still run on it (the sweep takes it once they are over).
   */
  function requestOver(id: string, named: number | undefined): void {
    if (firstUse.get(id)?.ttlMs !== 0 || lastNamed.get(id) !== named || jitLoads.has(id)) return;
    void unloadFirstUse(id, 'after its request (keep_alive 0)');
  }

  // Models loaded on first use go once idle for their time to live; one still busy counts as used now.
  let sweeping = false;
  const sweeper = setInterval(() => {
    if (sweeping || firstUse.size === 0) return;
    sweeping = true;
    void (async () => {
      for (const [id, f] of [...firstUse]) {
        if (f.ttlMs === null || Date.now() - f.lastUsedAt < f.ttlMs) continue;
        // Its load is not over (its library record still being written): the request that loads it has not
        // started on it yet.
        if (jitLoads.has(id)) continue;
        const idle = Math.round((Date.now() - f.lastUsedAt) / 1000);
        if (!(await unloadFirstUse(id, `after ${idle} s without requests`))) f.lastUsedAt = Date.now();
      }
    })().finally(() => {
      sweeping = false;
    });
  }, opts.firstUseSweepMs ?? 5000);
  sweeper.unref();

  /** Every window and page hears of an API server change (and of a failed one, whose status may have moved too). */
  async function announced(change: Promise<ApiServerStatus>): Promise<ApiServerStatus> {
    try {
      return await change;
    } finally {
      emit('apiServer', apiServer.status());
    }
  }

  async function wrap<T>(fn: () => Promise<T>): Promise<Result<T>> {
    try {
      return { ok: true, value: await fn() };
    } catch (err) {
      return { ok: false, error: toErrorInfo(err) };
    }
  }

  const handlers: { [N in CallName]: (req: never) => Promise<CallResponses[N]> } = {
    listModels: async () => models(),
    checkPackage: async (req: { path: string; trustInstalled?: boolean }): Promise<PackageCheck> => {
      try {
        // Read as it would load (the card then shows the variant and template it was last loaded with).
        return { ok: true, spec: await readAsItLoads(path.resolve(req.path), req.trustInstalled === true) };
      } catch (err) {
        return { ok: false, error: packageProblem(err) };
      }
    },
    loadModel: async ({ path: dir, ...how }: { path: string } & LoadModelRequest) =>
      load(path.resolve(dir), undefined, how),
    previewChatTemplate: async (req: { template: string; model?: string }) => {
      const tok = req.model === undefined ? undefined : runner.tokenizerOf(req.model);
      const bos = tok?.specialTokens.bos?.token;
      const eos = tok?.specialTokens.eos?.token;
      const tokens = { ...(bos !== undefined ? { bos } : {}), ...(eos !== undefined ? { eos } : {}) };
      return { text: previewChatTemplate(req.template, { ...tokens, field: 'template' }) };
    },
    listBackends: async () => runner.listBackends(),
    listLibrary: async () => {
      // As another process (`kvdesk pull`, another window) may have left it.
      await library.sync();
      return library.list();
    },
    forgetModel: async (req: { root: string }) => {
      // Compared with links resolved, as package roots are: a loaded upload is never deleted under it.
      const root = await canonicalPath(req.root);
      const loaded = runner.listModels().find((m) => path.resolve(m.spec.root) === root);
      const entry = library.list().find((e) => e.root === root);
      if (loaded && entry?.uploaded) {
        throw new KvdeskError('BAD_REQUEST', `${loaded.id} is loaded: unload it before deleting its files`, {
          field: 'root',
        });
      }
      await library.forget(root);
      return null;
    },
    unloadModel: async (req: { id: string }) => {
      await unload(req.id);
      return null;
    },
    getSnapshot: async () => runner.snapshot(),
    configureBudget: async (req: BudgetPatch) => {
      runner.configure(req);
      budgetChanged();
      return runner.snapshot();
    },
    cancel: async (req: { requestId: string }) => ({ cancelled: runner.cancel(req.requestId, 'user') }),
    closeSession: async (req: { sessionId: string }) => {
      runner.closeSession(req.sessionId);
      return null;
    },
    listThreads: async () => store.list(),
    openThread: async (req: { id: string }) => store.get(req.id),
    searchThreads: async (req: { query: string }) => store.search(req.query),
    saveThread: async (req: Thread & { savedBy?: string }) => {
      const { savedBy, ...thread } = req;
      // A page that had not heard of the chat's delete (its reply's last save, a save made while kvdesk was away,
      // also across a restart) must not bring it back: the store refuses it.
      const revision = await store.save(thread, savedBy);
      // The other tabs and windows are told of it (its summary and revision: a chat can be tens of MB): one that has
      // it open fetches it, and shows what was saved rather than overwrite it later.
      const summary = summaryOf({ ...thread, revision }, store.bytesOf(thread.id));
      emit('thread', savedBy === undefined ? { summary } : { summary, savedBy });
      return { revision };
    },
    updateThread: async (req: ThreadFields & { id: string; revision?: number; savedBy?: string }) => {
      const { id, revision: base, savedBy, ...fields } = req;
      const { revision, thread } = await store.update(id, fields, base ?? 0, savedBy);
      const summary = summaryOf(thread, store.bytesOf(id));
      emit('thread', savedBy === undefined ? { summary } : { summary, savedBy });
      return { revision };
    },
    deleteThread: async (req: { id: string }) => {
      // Noted as deleted (on disk) before the file goes: a late save of it is refused, also after a restart.
      await store.delete(req.id);
      emit('threadDeleted', { id: req.id });
      // A deleted thread's retained KV is dead weight in the budget.
      runner.closeSession(req.id);
      return null;
    },
    getSettings: async () => store.getSettings(),
    dataProblems: async () => [...store.problems, ...library.problems],
    saveSettings: async (req: Parameters<ThreadStore['saveSettings']>[0]) => {
      // As written: with what another kvdesk on the data folder saved meanwhile (its preset, say).
      emit('settings', await store.saveSettings(req));
      return null;
    },
    measurePrompt: async ({ countUpTo, ...req }: MeasurePromptRequest) =>
      runner.measurePromptOffThread(req, countUpTo !== undefined ? { countUpTo } : {}),
    apiServerStatus: async () => apiServer.status(),
    startApiServer: async (req: ApiServerRequest) => announced(apiServer.start(req)),
    stopApiServer: async () => announced(apiServer.stop()),
    newApiKey: async () => announced(apiServer.newKey()),
    searchHub: async (req: { query: string; limit?: number }) => downloads.search(req.query, req.limit),
    mcpStatus: async () => mcp.status(),
    mcpStart: async (req: { servers: string[] }) => mcp.start(req.servers),
    mcpCall: async (req: { server: string; tool: string; arguments: string }) =>
      mcp.call(req.server, req.tool, req.arguments),
    hubVariants: async (req: { repo: string }) => downloads.variants(req.repo),
    downloadModel: async (req: { repo: string; variant?: string }) => {
      const { status, done } = await downloads.start(req.repo, req.variant);
      void done;
      return status;
    },
    cancelDownload: async (req: { id: string }) => ({ cancelled: downloads.cancel(req.id) }),
    listDownloads: async () => downloads.list(),
  };

  const api: HostApi = {
    runner,
    library,
    downloads,
    toolGrants: (threadId) => store.toolGrants(threadId),
    get libraryChecked() {
      return libraryChecked;
    },
    ensureModel,
    loadable: hostApiLoadable,
    startFailure: () => startFailure,
    async call(name, request) {
      const schema = Object.hasOwn(CallSchemas, name) ? CallSchemas[name] : undefined;
      if (!schema) {
        return { ok: false, error: { code: 'BAD_REQUEST', message: `unknown call "${String(name)}"` } };
      }
      const parsed = schema.safeParse(request ?? {});
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const where = issue && issue.path.length > 0 ? ` field ${issue.path.join('.')}:` : '';
        return {
          ok: false,
          error: { code: 'BAD_REQUEST', message: `invalid ${name} request:${where} ${issue?.message ?? ''}`.trim() },
        };
      }
      const handler = handlers[name] as (req: unknown) => Promise<CallResponses[typeof name]>;
      return wrap(() => handler(parsed.data));
    },
    generate(request, onFrame) {
      let errored = false;
      // Not validated yet (the runner does it): its model, if it names one.
      const model = (request as { model?: unknown } | null)?.model;
      const named = typeof model === 'string' ? lastNamed.get(model) : undefined;
      const handle = runner.generate(request, (frame) => {
        if (frame.type === 'error') errored = true;
        onFrame(frame);
      });
      handle.result
        .catch((err) => {
          // Validation failures reject before any frame: the stream still ends with an error frame.
          if (!errored) onFrame({ type: 'error', requestId: handle.requestId, error: toErrorInfo(err) });
        })
        .finally(() => {
          if (typeof model === 'string') requestOver(model, named);
        });
      return { requestId: handle.requestId, cancel: (reason = 'user') => handle.cancel(reason) };
    },
    importPath(dir, how = {}) {
      return wrap(() => load(path.resolve(dir), undefined, how));
    },
    importFiles(upload) {
      return wrap(async () => {
        if (upload.files.length === 0) throw new KvdeskError('BAD_REQUEST', 'the dropped folder is empty');
        const total = upload.files.reduce((n, f) => n + f.data.byteLength, 0);
        checkUploadSize(upload.files.length, total);
        const files = upload.files.map((f) => ({ rel: safeRelativePath(f.path), data: f.data }));
        // Checked before anything is written: a clash is the person's to fix, not the disk's to report.
        const check = uploadPathCheck();
        for (const f of files) check(f.rel);
        const staging = await uploadStaging().catch(async (err: unknown) => {
          throw (await uploadNoRoom(err, total)) ?? err;
        });
        try {
          for (const f of files) {
            const target = path.join(staging, f.rel);
            if (!target.startsWith(staging + path.sep))
              throw new KvdeskError('BAD_REQUEST', `upload path "${f.rel}" leaves the package`);
            try {
              await mkdir(path.dirname(target), { recursive: true });
              await writeFile(target, f.data, { flag: 'wx' });
            } catch (err) {
              throw (await uploadNoRoom(err, total)) ?? uploadWriteError(err, f.rel);
            }
          }
          return await commitStaged(upload.name, staging, upload.load !== false);
        } finally {
          await dropStaging(staging);
        }
      });
    },
    uploadStaging,
    dropStaging,
    uploadNoRoom,
    importStaged(upload) {
      return wrap(async () => {
        const listed = await filesUnder(upload.staging);
        if (listed.length === 0) throw new KvdeskError('BAD_REQUEST', 'the dropped folder is empty');
        let total = 0;
        for (const f of listed) total += (await stat(path.join(upload.staging, f))).size;
        checkUploadSize(listed.length, total);
        return await commitStaged(upload.name, upload.staging, upload.load !== false);
      });
    },
    on(event, fn) {
      const set = listeners[event] as Set<typeof fn>;
      set.add(fn);
      return () => set.delete(fn);
    },
    async close() {
      // MCP servers stop beside the rest (one that ignores its closed stdin takes seconds).
      const tools = mcp.close();
      await downloads.close();
      unsubscribe();
      unsubscribeReload();
      unsubscribeRecovery();
      clearInterval(sweeper);
      if (budgetTimer) clearTimeout(budgetTimer);
      await api.libraryChecked;
      await library.flush();
      await Promise.all([runner.close(), tools]);
    },
  };

  if (opts.defaultModelDir && existsSync(opts.defaultModelDir)) {
    try {
      defaultModelId = (await load(opts.defaultModelDir)).id;
      emit('models', models());
    } catch (err) {
      const info = toErrorInfo(err);
      // Cut short by kvdesk closing (a quit while it loads): nothing failed.
      if (info.code !== 'CANCELLED') {
        log(`kvdesk: the default model at ${opts.defaultModelDir} did not load: ${info.message}`);
        startFailure = { path: opts.defaultModelDir, error: info };
      }
    }
  }
  // In the background: a library of large packages must not hold up the start.
  libraryChecked = Promise.all([
    library.refresh().catch((err: Error) => log(`kvdesk: the model library could not be checked: ${err.message}`)),
    swept,
  ]).then(() => {});
  return api;
}
