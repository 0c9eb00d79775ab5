/**
 * The preload: `window.kvdesk`, the KvdeskApi of src/shared/api.ts over
 * Electron IPC. One named method per contract entry and nothing generic:
 * ipcRenderer itself, channel names and arbitrary sends never reach the page.
 * `invoke(name, request)` exists because KvdeskApi has it, and dispatches only
 * to those named methods.
 *
 * It runs sandboxed (webPreferences.sandbox), so it may require nothing but
 * 'electron': every other import here is type-only, and channel names are a
 * copy of src/main/ipc/channels.ts (a unit test checks they agree).
 */
import { contextBridge, ipcRenderer, webUtils } from 'electron';
import type {
  CallName,
  CallRequest,
  CallResponses,
  HostEventName,
  HostEvents,
  ImportedPackage,
  KvdeskApi,
  ModelInfo,
  PackageUpload,
  UploadOptions,
} from '../shared/api';
import type { GenerateRequest, StreamFrame } from '../shared/contract';
import type { ErrorInfo, Result } from '../shared/errors';

const CHANNELS = {
  invoke: 'kvdesk:invoke',
  generate: 'kvdesk:generate',
  importPath: 'kvdesk:import-path',
  importFiles: 'kvdesk:import-files',
  chooseFolder: 'kvdesk:choose-folder',
  events: 'kvdesk:events',
} as const;

const EVENT_NAMES: readonly HostEventName[] = [
  'budget',
  'scheduler',
  'models',
  'library',
  'apiServer',
  'settings',
  'thread',
  'threadDeleted',
  'downloads',
];

function refusal(message: string): { ok: false; error: ErrorInfo } {
  return { ok: false, error: { code: 'BAD_REQUEST', message } };
}

/** A method bound to exactly one contract call. */
type CallMethod<N extends CallName> = (request?: CallRequest<N>) => Promise<Result<CallResponses[N]>>;
type CallMethods = { readonly [N in CallName]: CallMethod<N> };

function bind<N extends CallName>(name: N): CallMethod<N> {
  // Calls without fields (listModels, getSnapshot, …) may be called with no argument.
  return (request) => ipcRenderer.invoke(CHANNELS.invoke, name, request ?? {}) as Promise<Result<CallResponses[N]>>;
}

/** One named method per CallSchemas entry; the mapped type makes a missing or extra one a compile error. */
const calls: CallMethods = {
  listModels: bind('listModels'),
  checkPackage: bind('checkPackage'),
  loadModel: bind('loadModel'),
  previewChatTemplate: bind('previewChatTemplate'),
  listBackends: bind('listBackends'),
  listLibrary: bind('listLibrary'),
  forgetModel: bind('forgetModel'),
  unloadModel: bind('unloadModel'),
  getSnapshot: bind('getSnapshot'),
  configureBudget: bind('configureBudget'),
  cancel: bind('cancel'),
  closeSession: bind('closeSession'),
  listThreads: bind('listThreads'),
  openThread: bind('openThread'),
  searchThreads: bind('searchThreads'),
  saveThread: bind('saveThread'),
  updateThread: bind('updateThread'),
  deleteThread: bind('deleteThread'),
  getSettings: bind('getSettings'),
  dataProblems: bind('dataProblems'),
  saveSettings: bind('saveSettings'),
  measurePrompt: bind('measurePrompt'),
  apiServerStatus: bind('apiServerStatus'),
  startApiServer: bind('startApiServer'),
  stopApiServer: bind('stopApiServer'),
  newApiKey: bind('newApiKey'),
  searchHub: bind('searchHub'),
  mcpStatus: bind('mcpStatus'),
  mcpStart: bind('mcpStart'),
  mcpCall: bind('mcpCall'),
  hubVariants: bind('hubVariants'),
  downloadModel: bind('downloadModel'),
  cancelDownload: bind('cancelDownload'),
  listDownloads: bind('listDownloads'),
};

function invoke<N extends CallName>(name: N, request: CallRequest<N>): Promise<Result<CallResponses[N]>> {
  if (typeof name !== 'string' || !Object.hasOwn(calls, name)) {
    return Promise.resolve(refusal(`unknown call "${String(name).slice(0, 80)}": see KvdeskApi in src/shared/api.ts`));
  }
  return (calls[name] as CallMethod<N>)(request);
}

/** The DOM MessagePort members the stream uses. */
interface PagePort {
  onmessage: ((event: { data: unknown }) => void) | null;
  postMessage(message: unknown): void;
  close(): void;
}

/**
 * Starts a generation on its own MessagePort: the request and one end of a new
 * channel go to main; frames come back on the other end. The returned function
 * asks main to stop it; the final frame (error CANCELLED, or done if it won the
 * race) still arrives, then the port closes.
 */
function generate(request: GenerateRequest, onFrame: (frame: StreamFrame) => void): () => void {
  // The page's (DOM) MessageChannel; typed structurally because this file is type-checked with Node's lib.
  const channel = new MessageChannel();
  const port1 = channel.port1 as unknown as PagePort;
  const port2 = channel.port2;
  let ended = false;
  port1.onmessage = (event) => {
    if (ended) return;
    const frame = event.data as StreamFrame;
    if (frame.type === 'done' || frame.type === 'error') {
      ended = true;
      port1.close();
    }
    onFrame(frame);
  };
  ipcRenderer.postMessage(CHANNELS.generate, request, [port2]);
  return () => {
    if (!ended) port1.postMessage({ type: 'cancel' });
  };
}

const listeners: { [E in HostEventName]: Set<(payload: HostEvents[E]) => void> } = {
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

ipcRenderer.on(CHANNELS.events, (_event, name: unknown, payloads: unknown) => {
  if (typeof name !== 'string' || !EVENT_NAMES.includes(name as HostEventName) || !Array.isArray(payloads)) return;
  const set = listeners[name as HostEventName] as Set<(payload: unknown) => void>;
  for (const payload of payloads) {
    for (const fn of [...set]) {
      try {
        fn(payload);
      } catch (err) {
        console.error(`kvdesk: a ${name} listener failed`, err);
      }
    }
  }
});

function on<E extends HostEventName>(event: E, listener: (payload: HostEvents[E]) => void): () => void {
  if (!EVENT_NAMES.includes(event) || typeof listener !== 'function') {
    throw new TypeError(`kvdesk.on: unknown event "${String(event)}" (events: ${EVENT_NAMES.join(', ')})`);
  }
  const set = listeners[event] as Set<(payload: HostEvents[E]) => void>;
  set.add(listener);
  return () => {
    set.delete(listener);
  };
}

/** A File from a drop (or a file input): the host reads it by the path Electron knows for it. */
function pathOfDroppedFile(file: unknown): Result<string> {
  let p = '';
  try {
    p = webUtils.getPathForFile(file as File);
  } catch {
    return refusal('importPackage expects { kind: "path" | "files", … } or a dropped File');
  }
  if (!p) return refusal('the dropped item is not a file or folder on this computer');
  return { ok: true, value: p };
}

/**
 * Hands a dropped package to the host: a dropped folder (the File the drop
 * gave, resolved with webUtils.getPathForFile) or a path is read by the host
 * in place; an upload of files is copied into the host's model library.
 */
function importPackage(upload: PackageUpload | File, options?: UploadOptions): Promise<Result<ImportedPackage>> {
  const kind = typeof upload === 'object' && upload !== null ? (upload as { kind?: unknown }).kind : undefined;
  if (kind === 'path') return importPath((upload as { path: unknown }).path);
  if (kind === 'files') {
    const { name, files } = upload as { name: unknown; files: unknown };
    const load = options?.load === false ? { load: false } : {};
    // IPC carries bytes, not Blobs: a dropped File is read here (a folder dropped in the window goes by path).
    return readBlobs(files).then(
      (read) =>
        ipcRenderer.invoke(CHANNELS.importFiles, { name, files: read, ...load }) as Promise<Result<ImportedPackage>>,
    );
  }
  const dropped = pathOfDroppedFile(upload);
  if (!dropped.ok) return Promise.resolve(dropped);
  return importPath(dropped.value);
}

/** A folder read in place by the host, which loads it: the model, with its package as an upload's answer has it. */
async function importPath(dir: unknown): Promise<Result<ImportedPackage>> {
  const r = (await ipcRenderer.invoke(CHANNELS.importPath, dir)) as Result<ModelInfo>;
  if (!r?.ok) return r;
  if (!r.value?.spec) return refusal('the host answered the import without the model it loaded');
  return { ok: true, value: { root: r.value.spec.root, spec: r.value.spec, model: r.value } };
}

/** The files of an upload with each Blob read into an ArrayBuffer; anything else as it is (main validates it). */
async function readBlobs(files: unknown): Promise<unknown> {
  if (!Array.isArray(files)) return files;
  return Promise.all(
    files.map(async (f: unknown) =>
      f !== null && typeof f === 'object' && (f as { data?: unknown }).data instanceof Blob
        ? { ...(f as object), data: await ((f as { data: Blob }).data as Blob).arrayBuffer() }
        : f,
    ),
  );
}

/**
 * The path on disk of a dropped File or folder (webUtils.getPathForFile), so
 * the renderer can validate it with checkPackage before loading it; '' for a
 * File made in JS or anything that is not a File. Only the paths of items the
 * person dropped or picked are ever known to the page.
 */
function getPathForFile(file: File): string {
  try {
    return webUtils.getPathForFile(file);
  } catch {
    return '';
  }
}

/** Opens the OS folder chooser; resolves with the chosen folder's path, or null when cancelled. */
async function chooseFolder(): Promise<string | null> {
  const result = (await ipcRenderer.invoke(CHANNELS.chooseFolder)) as Result<string | null>;
  return result.ok ? result.value : null;
}

/** window.kvdesk: KvdeskApi plus the named calls and the Electron-only folder chooser. */
export type KvdeskElectronApi = KvdeskApi &
  CallMethods & {
    importPackage(upload: PackageUpload | File, options?: UploadOptions): Promise<Result<ImportedPackage>>;
    getPathForFile(file: File): string;
    chooseFolder(): Promise<string | null>;
  };

const api: KvdeskElectronApi = {
  transport: 'electron',
  ...calls,
  invoke,
  generate,
  on,
  importPackage,
  getPathForFile,
  chooseFolder,
};

contextBridge.exposeInMainWorld('kvdesk', api);
