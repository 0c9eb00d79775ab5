/**
 * The pure half of the Electron adapter: who may talk to the host over IPC,
 * and which inputs reach it. Everything a renderer sends is untrusted: call
 * names are checked against the contract before HostApi validates the request
 * itself; import inputs are checked for shape (HostApi applies the limits).
 * No electron import here, so all of it is unit-tested without the binary.
 */
import { type CallName, CallSchemas, type HostEventName } from '../../shared/api';
import type { ErrorCode, ErrorInfo, Result } from '../../shared/errors';

/** Longest path the host accepts from a renderer (same bound as CallSchemas.loadModel). */
export const MAX_PATH_LENGTH = 4096;
/** Longest package name of an upload. */
export const MAX_UPLOAD_NAME_LENGTH = 255;

/** Every host event a renderer may subscribe to. */
export const HOST_EVENT_NAMES = [
  'budget',
  'scheduler',
  'models',
  'library',
  'apiServer',
  'settings',
  'thread',
  'threadDeleted',
  'downloads',
] as const satisfies readonly HostEventName[];
// Compile-time: a new HostEvents entry must be added above.
const _allEvents: [Exclude<HostEventName, (typeof HOST_EVENT_NAMES)[number]>] extends [never] ? true : never = true;
void _allEvents;

/** A refusal in the Result envelope. */
export function refusal(message: string, code: ErrorCode = 'BAD_REQUEST'): { ok: false; error: ErrorInfo } {
  return { ok: false, error: { code, message } };
}

function describeValue(value: unknown): string {
  if (typeof value === 'string') return `"${value.slice(0, 80)}"`;
  if (value === null) return 'null';
  return `a value of type ${typeof value}`;
}

/** True for an own key of CallSchemas (never a prototype key such as "constructor" or "__proto__"). */
export function isCallName(name: unknown): name is CallName {
  return typeof name === 'string' && Object.hasOwn(CallSchemas, name);
}

/** The call name, or a BAD_REQUEST refusal naming the calls that exist. */
export function parseCallName(name: unknown): Result<CallName> {
  if (isCallName(name)) return { ok: true, value: name };
  return refusal(`unknown call ${describeValue(name)}: the contract has ${Object.keys(CallSchemas).join(', ')}`);
}

/**
 * Origin of a URL as kvdesk compares them: `scheme://host[:port]`, lower case.
 * Node's URL gives "null" as the origin of non-special schemes such as
 * kvdesk:, so it is built by hand. Null for anything unparsable or host-less
 * (file:, about:blank, data:).
 */
export function originOf(url: string): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  if (u.host === '') return null;
  return `${u.protocol}//${u.host}`.toLowerCase();
}

/** The sender of an IPC message, as the Electron glue reads it from the event. */
export interface SenderInfo {
  /** id of the webContents that sent the message. */
  webContentsId: number;
  /** The sending frame; null when it navigated away or was destroyed before the handler ran. */
  frame: { url: string; isTopFrame: boolean } | null;
}

/** Who may talk to the host: the main window's top frame, showing the app's origin. */
export interface TrustedSender {
  /** The main window's webContents id; null while there is no window. */
  webContentsId: number | null;
  /** e.g. kvdesk://app (or the electron-vite dev server's origin in development). */
  origin: string;
}

/**
 * The IPC sender check (ARCHITECTURE.md: "IPC handlers check the sender
 * frame"). Refuses anything but the main window's top frame at the app's
 * origin: other windows, iframes, a page the window was navigated to, a frame
 * that is gone.
 */
export function checkSender(sender: SenderInfo, trusted: TrustedSender): Result<null> {
  if (trusted.webContentsId === null) return refusal('IPC refused: kvdesk has no main window open');
  if (sender.webContentsId !== trusted.webContentsId) {
    return refusal(`IPC refused: webContents ${sender.webContentsId} is not kvdesk's main window`);
  }
  if (sender.frame === null) return refusal('IPC refused: the sending frame navigated away or was destroyed');
  if (!sender.frame.isTopFrame) return refusal('IPC refused: only the top frame of the window may call the host');
  const origin = originOf(sender.frame.url);
  if (origin === null || origin !== trusted.origin.toLowerCase()) {
    return refusal(`IPC refused: the sender's origin ${origin ?? '(none)'} is not ${trusted.origin}`);
  }
  return { ok: true, value: null };
}

/** A folder path sent by the renderer (drop via webUtils.getPathForFile, or the folder chooser). */
export function parseImportPath(raw: unknown): Result<string> {
  if (typeof raw !== 'string' || raw.length === 0) {
    return refusal(`importPath expects a folder path string, got ${describeValue(raw)}`);
  }
  if (raw.length > MAX_PATH_LENGTH) {
    return refusal(`importPath: the path has ${raw.length} characters; at most ${MAX_PATH_LENGTH} are accepted`);
  }
  if (raw.includes('\0')) return refusal('importPath: the path contains a NUL byte');
  return { ok: true, value: raw };
}

/** Files of a dropped folder, as HostApi.importFiles takes them. */
export interface ImportFilesInput {
  name: string;
  files: Array<{ path: string; data: Uint8Array }>;
  /** false: checked and in the library, not loaded (the window's card loads it). */
  load?: boolean;
}

function toBytes(data: unknown): Uint8Array | null {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data) && data.buffer instanceof ArrayBuffer) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  return null;
}

/**
 * The shape of an upload (name + relative paths + bytes). Sizes, counts and
 * path confinement are HostApi's job (it enforces them for every transport).
 */
export function parseImportFiles(raw: unknown): Result<ImportFilesInput> {
  if (typeof raw !== 'object' || raw === null)
    return refusal(`importFiles expects { name, files }, got ${describeValue(raw)}`);
  const { name, files, load } = raw as { name?: unknown; files?: unknown; load?: unknown };
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_UPLOAD_NAME_LENGTH) {
    return refusal(`importFiles: name must be a string of 1 to ${MAX_UPLOAD_NAME_LENGTH} characters`);
  }
  if (!Array.isArray(files)) return refusal('importFiles: files must be an array of { path, data }');
  if (load !== undefined && typeof load !== 'boolean') return refusal('importFiles: load must be true or false');
  const out: ImportFilesInput['files'] = [];
  for (let i = 0; i < files.length; i++) {
    const f = files[i] as { path?: unknown; data?: unknown } | null;
    if (typeof f !== 'object' || f === null) return refusal(`importFiles: files[${i}] is not an object`);
    if (typeof f.path !== 'string' || f.path.length === 0 || f.path.length > MAX_PATH_LENGTH) {
      return refusal(`importFiles: files[${i}].path must be a string of 1 to ${MAX_PATH_LENGTH} characters`);
    }
    const data = toBytes(f.data);
    if (data === null) return refusal(`importFiles: files[${i}].data must be an ArrayBuffer or a typed array`);
    out.push({ path: f.path, data });
  }
  return { ok: true, value: { name, files: out, ...(load === false ? { load } : {}) } };
}

/** True for the renderer's "stop this generation" message on a stream port. */
export function isStreamCancel(message: unknown): boolean {
  return typeof message === 'object' && message !== null && (message as { type?: unknown }).type === 'cancel';
}
