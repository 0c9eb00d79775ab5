/**
 * KvdeskApi over the headless server's WebSocket (`/ws`), for a renderer that
 * runs in a plain browser. Speaks exactly the wire messages of
 * src/shared/api.ts: invokes carry numeric ids, generations are multiplexed by
 * string ids, host events are broadcast. Reconnects with backoff; what was in
 * flight when the socket closed ends with an error rather than hanging.
 */
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
  WsClientMessage,
  WsServerMessage,
} from '../../shared/api';
import type { GenerateRequest, StreamFrame } from '../../shared/contract';
import type { ErrorInfo, Result } from '../../shared/errors';

export type ConnectionState = 'connecting' | 'open' | 'reconnecting';

/** The subset of the DOM WebSocket the client uses (a fake can stand in for tests). */
export interface SocketLike {
  readyState: number;
  send(data: string): void;
  close(): void;
  onopen: ((ev: unknown) => void) | null;
  onclose: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
}

export interface WsClientOptions {
  /** ws:// or wss:// URL of `/ws`, token included. */
  url: string;
  /** URL of `POST /api/models/upload`, token included. */
  uploadUrl: string;
  token?: string;
  createSocket?: (url: string) => SocketLike;
  /** Sends the upload (tests give their own); by default an XMLHttpRequest, the one way a page sees its progress. */
  post?: Post;
  /** Delay before reconnect attempt n (0-based). */
  backoffMs?: (attempt: number) => number;
  /**
   * How long an open socket waits for the server's hello before taking it as one that says nothing (a kvdesk of
   * before the hello): nothing written is sent before.
   */
  helloWaitMs?: number;
  setTimer?: (fn: () => void, ms: number) => unknown;
  /**
   * Why kvdesk refused a socket that never opened (a browser's WebSocket hears no reason): its message, null when it
   * refused nothing (it was away, or the socket failed for another reason), undefined when it could not be asked.
   * By default asked with a POST to the socket's address, which the server checks as it checks the socket.
   */
  whyRefused?: () => Promise<string | null | undefined>;
}

/** The WebSocket client: KvdeskApi plus connection state for the status line. */
export interface WsClient extends KvdeskApi {
  onConnection(listener: (state: ConnectionState) => void): () => void;
  /**
   * The server now serves another build of the UI than when this page first connected (kvdesk was updated, or
   * another one started on its port): said at each connection while so.
   */
  onOutdated(listener: () => void): () => void;
  /**
   * What the server of the connection open now said in its hello (its data folder's id: changes kept while it was
   * away are made only in a kvdesk of that folder); null when the connection closed first, or none is open.
   */
  hello(): Promise<HostHello | null>;
  /** The data folder's id the server last said (undefined: none said yet, or the server has none). */
  readonly dataId: string | undefined;
  /**
   * The server of a new connection keeps another data folder than the one of the page's first (or of the last such
   * change): nothing written for the other one was sent to it. Said at its hello, before the connection is open.
   */
  onOtherFolder(listener: (change: FolderChange) => void): () => void;
  /**
   * kvdesk refuses this page's connection (its origin, its token): its reason, readable, said once per run of
   * refused tries (the page would otherwise only say it is reconnecting).
   */
  onRefused(listener: (message: string) => void): () => void;
  readonly state: ConnectionState;
  close(): void;
}

/** What a server says of itself at each connection. */
export interface HostHello {
  dataId?: string;
}

/** A connection's server keeps another data folder: its id (`to`) and the one before (`from`); undefined: none said. */
export interface FolderChange {
  from: string | undefined;
  to: string | undefined;
}

/**
 * Why a call or stream written while no connection was open ended unsent: the connection that opened is to a kvdesk
 * of another data folder than the one it was written for (ErrorInfo.detail.reason).
 */
export const OTHER_FOLDER = 'other-data-folder';

const OPEN = 1;

/**
 * The bytes of `text` as UTF-8; a text of at most a third of `limit` characters (three bytes at most each, a pair
 * of surrogates four) is under it, and not counted.
 */
function utf8Length(text: string, limit: number): number {
  if (text.length * 3 <= limit) return text.length;
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length) {
      bytes += 4; // a surrogate pair: one character of four bytes
      i++;
    } else bytes += 3;
  }
  return bytes;
}

/** A size to read, rounded up (what is sent must not read as the limit it is over). */
function size(bytes: number): string {
  if (bytes < 10 * 1024) return `${bytes} bytes`;
  const [unit, name] = bytes < 1024 ** 2 ? [1024, 'KiB'] : [1024 ** 2, 'MiB'];
  return `${(Math.ceil((bytes / unit) * 10) / 10).toFixed(1)} ${name}`;
}

function lost(message: string): ErrorInfo {
  return { code: 'INTERNAL', message };
}

/**
 * The page's address without its `?token=` (null when it has none): once the page has read the token (and the
 * server has answered it with a cookie), it leaves the address bar, the history and a link copied from there.
 */
export function addressWithoutToken(href: string): string | null {
  const url = new URL(href);
  if (!url.searchParams.has('token')) return null;
  url.searchParams.delete('token');
  return url.pathname + url.search + url.hash;
}

/** Builds the client's URLs from the page's location: same origin, `?token=` passed through when present. */
export function urlsFromLocation(loc: { protocol: string; host: string; search: string }): {
  url: string;
  uploadUrl: string;
  token?: string;
} {
  const token = new URLSearchParams(loc.search).get('token') ?? undefined;
  const q = token ? `?token=${encodeURIComponent(token)}` : '';
  const ws = loc.protocol === 'https:' ? 'wss:' : 'ws:';
  return {
    url: `${ws}//${loc.host}/ws${q}`,
    uploadUrl: `${loc.protocol}//${loc.host}/api/models/upload${q}`,
    ...(token ? { token } : {}),
  };
}

/** An upload's request, as the client sends it. */
export interface PostRequest {
  headers: Record<string, string>;
  body: FormData;
  onProgress?: (sent: number, total: number) => void;
  signal?: AbortSignal;
}
export interface PostResponse {
  status: number;
  text: string;
}
export type Post = (url: string, request: PostRequest) => Promise<PostResponse>;

/**
 * POST with XMLHttpRequest: fetch tells a page nothing of an upload's progress (and a streamed request body needs
 * HTTP/2). Rejects on a network error or when the signal aborts it.
 */
/** The part of XMLHttpRequest the upload uses (this file is also type-checked without the DOM library). */
interface XhrLike {
  open(method: string, url: string): void;
  setRequestHeader(name: string, value: string): void;
  upload: { onprogress: ((e: { loaded: number; total: number }) => void) | null };
  onload: (() => void) | null;
  onerror: (() => void) | null;
  onabort: (() => void) | null;
  status: number;
  responseText: string;
  send(body: FormData): void;
  abort(): void;
}

const xhrPost: Post = (url, { headers, body, onProgress, signal }) =>
  new Promise((resolve, reject) => {
    const xhr = new (globalThis as unknown as { XMLHttpRequest: new () => XhrLike }).XMLHttpRequest();
    xhr.open('POST', url);
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    if (onProgress) xhr.upload.onprogress = (e) => onProgress(e.loaded, e.total);
    xhr.onload = () => resolve({ status: xhr.status, text: xhr.responseText });
    xhr.onerror = () => reject(new Error('the connection to kvdesk failed'));
    xhr.onabort = () => reject(new Error('cancelled'));
    if (signal?.aborted) {
      reject(new Error('cancelled'));
      return;
    }
    signal?.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(body);
  });

/**
 * Asks kvdesk why it refuses the WebSocket at `wsUrl`: a POST there passes the same Host, Origin and token checks
 * (a browser sends its Origin with a POST), and a refusal answers its reason in JSON (OpenAI's or Ollama's shape).
 */
export async function askWhyRefused(wsUrl: string): Promise<string | null | undefined> {
  let res: Response;
  try {
    const u = new URL(wsUrl);
    u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
    res = await fetch(u.href, { method: 'POST', credentials: 'same-origin', headers: { accept: 'application/json' } });
  } catch {
    return undefined;
  }
  if (res.status !== 401 && res.status !== 403) return null;
  const body = (await res.json().catch(() => null)) as { error?: unknown } | null;
  const error = body?.error;
  if (typeof error === 'string') return error;
  const message = (error as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' ? message : `kvdesk answered HTTP ${res.status}`;
}

/** The longest wait between two tries to reach kvdesk again (the first ones come sooner). */
export const RECONNECT_MAX_MS = 1000;

export function createWsClient(options: WsClientOptions): WsClient {
  const createSocket = options.createSocket ?? ((url: string) => new WebSocket(url) as unknown as SocketLike);
  const doPost = options.post ?? xhrPost;
  // Tried again soon, then every second: kvdesk started again is taken up within a second of it answering (a try at
  // a kvdesk that is not there yet costs nothing worth saving).
  const backoff = options.backoffMs ?? ((n: number) => Math.min(RECONNECT_MAX_MS, 250 * 2 ** n));
  const helloWaitMs = options.helloWaitMs ?? 10_000;
  const whyRefused = options.whyRefused ?? (() => askWhyRefused(options.url));
  const setTimer = options.setTimer ?? ((fn: () => void, ms: number) => setTimeout(fn, ms));

  let socket: SocketLike | null = null;
  let state: ConnectionState = 'connecting';
  let attempt = 0;
  let closed = false;
  let nextInvokeId = 1;
  let nextGenId = 1;
  const session = Math.random().toString(36).slice(2, 8);
  /**
   * Messages written while no connection was open (a socket open whose hello has not come is not open yet): sent in
   * order once one is, to a kvdesk of the data folder they were written for.
   */
  let outbox: Array<{ text: string; msg: WsClientMessage }> = [];
  /**
   * The data folder (its id) the page's writes are for: the first connection's server's, then the one of each
   * connection to a kvdesk of another one (null: no hello yet; undefined: the server said none, and any is taken).
   */
  let folder: string | undefined | null = null;
  const otherFolderListeners = new Set<(change: FolderChange) => void>();
  const invokes = new Map<number, (r: Result<unknown>) => void>();
  const generations = new Map<string, (frame: StreamFrame) => void>();
  const listeners = new Map<HostEventName, Set<(payload: unknown) => void>>();
  const connectionListeners = new Set<(s: ConnectionState) => void>();
  const outdatedListeners = new Set<() => void>();
  const refusedListeners = new Set<(message: string) => void>();
  /** Whether kvdesk was asked why since a socket last opened (asked again only where it could not answer). */
  let refusalAsked = false;
  /** The UI build the server named at this page's first connection (null: none yet). */
  let firstBuild: string | undefined | null = null;
  /** The largest message the server takes, as its last hello said (undefined: not said). */
  let maxMessageBytes: number | undefined;
  /** The last hello (null: none yet); whether the socket open now has said it; who waits for it to. */
  let lastHello: HostHello | null = null;
  let helloHeard = false;
  let helloWaiters: Array<(said: HostHello | null) => void> = [];
  const answerHello = (said: HostHello | null) => {
    const waiting = helloWaiters;
    helloWaiters = [];
    for (const w of waiting) w(said);
  };

  function setState(next: ConnectionState): void {
    if (state === next) return;
    state = next;
    for (const l of connectionListeners) l(next);
  }

  /**
   * Sends a message (kept in the outbox while no socket is open). One larger than the server takes (its hello said
   * how large) is not sent, as the server would close the socket on it, ending every call and reply on it: the
   * error that says so is returned for its caller to end it with.
   */
  function write(msg: WsClientMessage): ErrorInfo | null {
    const text = JSON.stringify(msg);
    const bytes = maxMessageBytes === undefined ? text.length : utf8Length(text, maxMessageBytes);
    if (maxMessageBytes !== undefined && bytes > maxMessageBytes) {
      return {
        code: 'BAD_REQUEST',
        message: `${size(bytes)} to send is more than the ${size(maxMessageBytes)} kvdesk takes in one message (kvdesk serve's --max-message raises it).`,
        detail: { reason: 'too-large', bytes, limit: maxMessageBytes },
      };
    }
    if (socket && socket.readyState === OPEN && state === 'open') socket.send(text);
    else outbox.push({ text, msg });
    return null;
  }

  /** What waited in the outbox was written for another data folder's kvdesk: ended, unsent (the caller keeps it). */
  function endOutbox(to: string | undefined): void {
    const held = outbox;
    outbox = [];
    const error: ErrorInfo = {
      code: 'INTERNAL',
      message: `Not sent: the kvdesk now on this address keeps another data folder${to === undefined ? ' (or says none)' : ''} than the one this was made for.`,
      detail: { reason: OTHER_FOLDER },
    };
    for (const { msg } of held) {
      if (msg.t === 'invoke') {
        const done = invokes.get(msg.id);
        invokes.delete(msg.id);
        done?.({ ok: false, error });
      } else if (msg.t === 'generate') {
        const sink = generations.get(msg.id);
        generations.delete(msg.id);
        sink?.({ type: 'error', requestId: '', error: { ...error, code: 'CANCELLED' } });
      }
    }
  }

  /**
   * The hello of the socket open now (or, none come in time, one that says nothing): what waited is sent, and the
   * connection is open, when its server keeps the data folder it was written for; otherwise it ends unsent, the
   * listeners hear of the other folder (which the page's writes are for from now on), and then it is open.
   */
  function helloCame(s: SocketLike, said: HostHello): void {
    if (socket !== s || helloHeard) return;
    lastHello = said;
    helloHeard = true;
    answerHello(said);
    const to = said.dataId;
    // A first server, or one before that said no folder: nothing to tell them apart by (this one's is the page's).
    const same = folder === null || folder === undefined || to === folder;
    if (same && (folder === null || folder === undefined)) folder = to;
    if (!same) {
      const from = folder ?? undefined;
      folder = to;
      endOutbox(to);
      for (const l of otherFolderListeners) l({ from, to });
      if (socket !== s) return; // a listener closed it
    }
    const pending = outbox;
    outbox = [];
    for (const { text } of pending) s.send(text);
    setState('open');
  }

  function onMessage(data: unknown, from?: SocketLike): void {
    if (typeof data !== 'string') return;
    let msg: WsServerMessage;
    try {
      msg = JSON.parse(data) as WsServerMessage;
    } catch {
      return;
    }
    if (msg.t === 'hello') {
      if (typeof msg.maxMessageBytes === 'number' && msg.maxMessageBytes > 0) maxMessageBytes = msg.maxMessageBytes;
      if (firstBuild === null) firstBuild = msg.build;
      else if (msg.build !== firstBuild) for (const l of outdatedListeners) l();
      if (from) helloCame(from, typeof msg.dataId === 'string' ? { dataId: msg.dataId } : {});
    } else if (msg.t === 'result') {
      const done = invokes.get(msg.id);
      invokes.delete(msg.id);
      done?.(msg.result);
    } else if (msg.t === 'frame') {
      const sink = generations.get(msg.id);
      if (msg.frame.type === 'done' || msg.frame.type === 'error') generations.delete(msg.id);
      sink?.(msg.frame);
    } else if (msg.t === 'event') {
      for (const l of listeners.get(msg.event) ?? []) l(msg.payload);
    }
  }

  function connect(): void {
    const s = createSocket(options.url);
    socket = s;
    helloHeard = false;
    let opened = false;
    s.onopen = () => {
      opened = true;
      refusalAsked = false;
      attempt = 0;
      // Open once its hello says which data folder its kvdesk keeps (the first message it sends); a kvdesk that
      // says none in time is taken as one that keeps none it can tell.
      setTimer(() => helloCame(s, {}), helloWaitMs);
    };
    s.onmessage = (ev) => onMessage(ev.data, s);
    s.onerror = () => {
      // onclose follows; reconnecting is handled there.
    };
    s.onclose = (ev) => {
      if (socket !== s) return;
      socket = null;
      answerHello(null);
      // 1009: kvdesk closed it over a message larger than it takes; sent again, it would close it again.
      const tooLarge = (ev as { code?: number } | null)?.code === 1009;
      // Calls and streams on the old socket cannot be answered any more: end them now.
      for (const [id, done] of invokes) {
        invokes.delete(id);
        done({
          ok: false,
          error: tooLarge
            ? {
                ...lost(
                  'kvdesk closed the connection over a message larger than it takes (kvdesk serve --max-message raises that)',
                ),
                detail: { reason: 'too-large' },
              }
            : {
                ...lost('The connection to kvdesk closed before it answered. Try again.'),
                detail: { reason: 'disconnect' },
              },
        });
      }
      for (const [id, sink] of generations) {
        generations.delete(id);
        // Cancelled as the host cancels a stream whose socket closed (it stopped it): not the person's stop.
        sink({
          type: 'error',
          requestId: '',
          error: {
            code: 'CANCELLED',
            message: 'The connection to kvdesk closed while this reply was streaming; the host stopped it.',
            detail: { reason: 'disconnect' },
          },
        });
      }
      // What waited in the outbox was theirs (or a cancel of theirs): ended now, it is not sent once a socket
      // opens (a generation nobody hears would run to its max tokens; a save would go after the page's own).
      outbox = [];
      if (closed) return;
      if (!opened && !refusalAsked) {
        refusalAsked = true;
        void whyRefused().then(
          (message) => {
            if (message === undefined) refusalAsked = false;
            else if (message !== null && !closed && state !== 'open') for (const l of refusedListeners) l(message);
          },
          () => {
            refusalAsked = false;
          },
        );
      }
      setState('reconnecting');
      setTimer(connect, backoff(attempt++));
    };
  }

  async function importPackage(upload: PackageUpload, how: UploadOptions = {}): Promise<Result<ImportedPackage>> {
    if (upload.kind === 'path') {
      return {
        ok: false,
        error: { code: 'BAD_REQUEST', message: 'A browser cannot hand the host a path; drop the folder instead.' },
      };
    }
    // multipart/form-data keeps bytes as bytes (the JSON form base64-encodes into one string and is capped lower).
    // Each part's filename is `<folder>/<path>`: the host strips the shared top folder.
    const form = new FormData();
    form.append('name', upload.name);
    // A File goes as it is (the browser streams it from disk); bytes made in the page, wrapped.
    for (const f of upload.files) {
      form.append('file', f.data instanceof Blob ? f.data : new Blob([f.data]), `${upload.name}/${f.path}`);
    }
    let res: PostResponse;
    try {
      // Not loaded: the server's answer is then the package's copy, not the model.
      const url =
        how.load === false
          ? `${options.uploadUrl}${options.uploadUrl.includes('?') ? '&' : '?'}load=false`
          : options.uploadUrl;
      res = await doPost(url, {
        headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
        body: form,
        ...(how.onProgress ? { onProgress: how.onProgress } : {}),
        ...(how.signal ? { signal: how.signal } : {}),
      });
    } catch (err) {
      if (how.signal?.aborted) {
        return {
          ok: false,
          error: { code: 'CANCELLED', message: 'The upload was cancelled; kvdesk kept nothing of it.' },
        };
      }
      return {
        ok: false,
        error: lost(`Could not upload the package: ${err instanceof Error ? err.message : String(err)}`),
      };
    }
    let json: unknown;
    try {
      json = JSON.parse(res.text);
    } catch {
      return { ok: false, error: lost(`The upload answered HTTP ${res.status} without a JSON body.`) };
    }
    // The server answers with the Result envelope; tolerate a bare value or `{ error }` too.
    let value: unknown;
    if (json && typeof json === 'object' && 'ok' in json) {
      const r = json as Result<unknown>;
      if (!r.ok) return r;
      value = r.value;
    } else if (json && typeof json === 'object' && 'error' in json) {
      const e = (json as { error: ErrorInfo }).error;
      return { ok: false, error: e };
    } else if (res.status >= 200 && res.status < 300) value = json;
    else return { ok: false, error: lost(`The upload failed with HTTP ${res.status}.`) };
    if (how.load === false) return { ok: true, value: value as ImportedPackage };
    // Loaded: the answer is the model.
    const model = value as ModelInfo;
    return { ok: true, value: { root: model.spec.root, spec: model.spec, model } };
  }

  connect();

  return {
    transport: 'websocket',
    get state() {
      return state;
    },
    invoke<N extends CallName>(name: N, request: CallRequest<N>): Promise<Result<CallResponses[N]>> {
      const id = nextInvokeId++;
      return new Promise((resolve) => {
        invokes.set(id, resolve as (r: Result<unknown>) => void);
        const refused = write({ t: 'invoke', id, name, request });
        if (refused) {
          invokes.delete(id);
          resolve({ ok: false, error: refused });
        }
      });
    },
    generate(request: GenerateRequest, onFrame: (frame: StreamFrame) => void): () => void {
      const id = `${session}-${nextGenId++}`;
      generations.set(id, onFrame);
      const refused = write({ t: 'generate', id, request });
      if (refused) {
        generations.delete(id);
        onFrame({ type: 'error', requestId: '', error: refused });
      }
      return () => {
        if (generations.has(id)) write({ t: 'cancel', id });
      };
    },
    on<E extends HostEventName>(event: E, listener: (payload: HostEvents[E]) => void): () => void {
      let set = listeners.get(event);
      if (!set) {
        set = new Set();
        listeners.set(event, set);
      }
      const l = listener as (payload: unknown) => void;
      set.add(l);
      return () => set.delete(l);
    },
    importPackage,
    onConnection(listener) {
      connectionListeners.add(listener);
      return () => connectionListeners.delete(listener);
    },
    onOutdated(listener) {
      outdatedListeners.add(listener);
      return () => outdatedListeners.delete(listener);
    },
    onOtherFolder(listener) {
      otherFolderListeners.add(listener);
      return () => otherFolderListeners.delete(listener);
    },
    onRefused(listener) {
      refusedListeners.add(listener);
      return () => refusedListeners.delete(listener);
    },
    hello() {
      if (!socket) return Promise.resolve(null);
      if (helloHeard) return Promise.resolve(lastHello);
      return new Promise((resolve) => helloWaiters.push(resolve));
    },
    get dataId() {
      return lastHello?.dataId;
    },
    close() {
      closed = true;
      socket?.close();
    },
  };
}
