/**
 * The contract of src/shared/api.ts over WebSocket (JSON text frames):
 * `invoke` → HostApi.call, `generate` → HostApi.generate with frames
 * multiplexed by the client's id, `cancel`; host events are broadcast to every
 * socket. A socket that closes cancels its generations (reason 'disconnect'),
 * which returns their reservations. A server that stops ends them as a shutdown
 * (each stream's last frame says so), then closes the socket as going away (1001).
 * A socket's first message is `hello`, naming the UI build the server serves and the largest message it takes
 * (a page refuses a larger one itself, with a clear error: sent, the server would close the socket). A message
 * holding more JSON values than json-guard.ts allows for that size is refused before it is parsed: a call or a
 * generation gets its error, and the socket stays open.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { type RawData, type WebSocket, WebSocketServer } from 'ws';
import { type CallName, CallSchemas, type HostEventName, type WsServerMessage } from '../../shared/api';
import type { Result } from '../../shared/errors';
import type { HostApi } from '../host/host-api';
import { countJsonValues, grouped, maxJsonValuesFor, UI_BYTES_PER_VALUE } from './json-guard';

/** Budget snapshots are dropped (latest wins anyway) for a socket with this much unsent. */
const SLOW_SOCKET_BYTES = 4 * 1024 * 1024;
/** A socket that does not answer a ping within this interval is considered gone. */
const PING_INTERVAL_MS = 30_000;
const MAX_GENERATION_ID = 200;
/**
 * How long a stopping server keeps a socket open after its last stream's end, for the save its page makes of the
 * reply as it hears of that end (at its next animation frame; a hidden page's, within 250 ms).
 */
const LAST_SAVE_MS = 750;
/**
 * The largest message a page may send by default. A chat's save is one message with the whole chat, its attachments
 * (8 files of up to 2 MB a message) included: 64 MiB was reached by 36 such messages. As the JSON body of a package
 * upload (server.ts), 256 MiB: its save then holds the server at about four times that while it is read and written.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 ** 2;

/** The WebSocket endpoint, attached to an HTTP server's upgrade path. */
export interface WsTransport {
  /** Completes an upgrade the server has already authorized. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Open sockets. */
  readonly size: number;
  /**
   * Ends every socket's generations as a shutdown (each stream gets its last frame), closes the sockets as going
   * away (1001), and cuts those still open after `graceMs`.
   */
  close(graceMs?: number): Promise<void>;
}

/** A close frame's reason holds at most 123 bytes (UTF-8): longer is cut at a character's edge. */
function closeReason(why: string): string {
  const chars = [...why];
  while (Buffer.byteLength(chars.join('')) > 123) chars.pop();
  return chars.join('');
}

/** Calls that make the host run programs as the person (MCP servers and their tools). */
const TOOL_CALLS = new Set(['mcpStart', 'mcpCall']);

/**
 * Whether a chat saved by `request` runs other tools without asking than the chat as stored does (none stored:
 * none). A request that is no chat is no change here (the call refuses it itself).
 */
async function grantsChange(hostApi: HostApi, request: unknown): Promise<boolean> {
  if (typeof request !== 'object' || request === null) return false;
  const { id, toolsAllowed } = request as { id?: unknown; toolsAllowed?: unknown };
  if (typeof id !== 'string') return false;
  const asked = Array.isArray(toolsAllowed) ? toolsAllowed.map(String).sort() : [];
  const had = [...(await hostApi.toolGrants(id))].sort();
  return asked.length !== had.length || asked.some((t, n) => t !== had[n]);
}

/** Why a page served without a token runs no tools (said in its tools settings, and to a call refused). */
const TOOLS_NEED_A_TOKEN =
  'MCP tools run programs as you, and this page is served without a token (any program or user on this computer could run them): start `kvdesk serve --token SECRET` and open the address it prints, turn on the desktop window’s API key (Models view → API server), or use the desktop window.';

/**
 * Creates the transport; host events are subscribed while at least one socket is open. `toolsAllowed` (a server
 * with a token): the MCP calls are answered; without a token any program or user on this computer could make
 * kvdesk run the person's tools, so they are refused.
 */
export function createWsTransport(
  hostApi: HostApi,
  opts: { maxPayloadBytes?: number; toolsAllowed?: boolean; build?: string; dataId?: string } = {},
): WsTransport {
  const maxPayload = opts.maxPayloadBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const maxValues = maxJsonValuesFor(maxPayload, UI_BYTES_PER_VALUE);
  const wss = new WebSocketServer({ noServer: true, maxPayload });
  const sockets = new Set<WebSocket>();
  /** Per socket: ends its generations as a shutdown, then closes it once they have all sent their last frame. */
  const shutdowns = new Map<WebSocket, () => void>();
  let unsubscribe: Array<() => void> = [];

  function send(ws: WebSocket, msg: WsServerMessage): void {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  }

  function broadcast(event: HostEventName, payload: unknown): void {
    const text = JSON.stringify({ t: 'event', event, payload } satisfies WsServerMessage);
    for (const ws of sockets) {
      if (ws.readyState !== ws.OPEN) continue;
      if (event === 'budget' && ws.bufferedAmount > SLOW_SOCKET_BYTES) continue;
      ws.send(text);
    }
  }

  function subscribe(): void {
    unsubscribe = [
      hostApi.on('budget', (p) => broadcast('budget', p)),
      hostApi.on('scheduler', (p) => broadcast('scheduler', p)),
      hostApi.on('models', (p) => broadcast('models', p)),
      hostApi.on('library', (p) => broadcast('library', p)),
      hostApi.on('apiServer', (p) => broadcast('apiServer', p)),
      hostApi.on('settings', (p) => broadcast('settings', p)),
      hostApi.on('thread', (p) => broadcast('thread', p)),
      hostApi.on('threadDeleted', (p) => broadcast('threadDeleted', p)),
      hostApi.on('downloads', (p) => broadcast('downloads', p)),
    ];
  }

  const pinger = setInterval(() => {
    for (const ws of sockets) {
      const alive = ws as WebSocket & { kvdeskAlive?: boolean };
      if (alive.kvdeskAlive === false) {
        ws.terminate();
        continue;
      }
      alive.kvdeskAlive = false;
      ws.ping();
    }
  }, PING_INTERVAL_MS);
  pinger.unref();

  function onConnection(ws: WebSocket): void {
    sockets.add(ws);
    if (sockets.size === 1) subscribe();
    const generations = new Map<string, (reason: 'user' | 'disconnect' | 'shutdown') => void>();
    let stopping = false;
    /** Calls of this socket being answered; when its last stream ended (ms). */
    let answering = 0;
    let lastEnd = 0;
    let goAwayTimer: NodeJS.Timeout | undefined;
    /**
     * Closes the socket of a server that stops once nothing of it is left to answer: its streams have sent their
     * last frame, and the save its page makes of each reply as it hears of the end (the text it shows, where the
     * last save while it streamed had less) has come, within LAST_SAVE_MS, and been answered.
     */
    const goAwayWhenIdle = () => {
      if (!stopping || generations.size > 0 || answering > 0 || ws.readyState !== ws.OPEN) return;
      const wait = lastEnd + LAST_SAVE_MS - Date.now();
      clearTimeout(goAwayTimer);
      if (wait > 0) goAwayTimer = setTimeout(goAwayWhenIdle, wait);
      else ws.close(1001, 'kvdesk is shutting down');
    };
    /** Answers a call, counted as being answered until it is (a stopping server waits for it). */
    const answer = async (id: number, result: () => Promise<Result<unknown> | null>) => {
      answering++;
      try {
        const r = await result();
        if (r) send(ws, { t: 'result', id, result: r });
      } finally {
        answering--;
        goAwayWhenIdle();
      }
    };
    shutdowns.set(ws, () => {
      stopping = true;
      for (const cancel of [...generations.values()]) cancel('shutdown');
      goAwayWhenIdle();
    });
    /** This connection's chat saves when it may run no tools (each checked first), in the order it sent them. */
    let saves: Promise<void> = Promise.resolve();
    (ws as WebSocket & { kvdeskAlive?: boolean }).kvdeskAlive = true;
    ws.on('pong', () => {
      (ws as WebSocket & { kvdeskAlive?: boolean }).kvdeskAlive = true;
    });

    const protocolError = (why: string) => ws.close(1008, closeReason(why));
    // First, which UI build the server serves: a page of another build (open across an update) says to reload.
    // And which data folder it keeps (its id): a page's changes kept while kvdesk was away are made only in that one.
    send(ws, {
      t: 'hello',
      ...(opts.build !== undefined ? { build: opts.build } : {}),
      ...(opts.dataId !== undefined ? { dataId: opts.dataId } : {}),
      maxMessageBytes: maxPayload,
    });

    /**
     * Refuses a message with too many values without parsing it: a call or a generation (as the page writes them,
     * `{"t":"invoke","id":7,…`) gets its answer, an error naming the limit; anything else closes the socket.
     */
    const refuseUnread = (text: Buffer) => {
      const message = `This message holds more than ${grouped(maxValues)} JSON values (objects, arrays and the items in them); kvdesk reads at most ${grouped(maxValues)} in one message (one per ${UI_BYTES_PER_VALUE} bytes of the message size limit, and at least a million). Send less, or start kvdesk serve with a larger --max-message, which raises this limit with it.`;
      const error = { code: 'BAD_REQUEST' as const, message, detail: { reason: 'too-many-values', limit: maxValues } };
      const head = text.subarray(0, 512).toString('utf8');
      const invoke = /^\{"t":"invoke","id":(\d{1,15})[,}]/.exec(head);
      if (invoke) return send(ws, { t: 'result', id: Number(invoke[1]), result: { ok: false, error } });
      const generate = /^\{"t":"generate","id":("(?:[^"\\]|\\.){1,200}")[,}]/.exec(head);
      if (generate) {
        let id: unknown;
        try {
          id = JSON.parse(generate[1] as string);
        } catch {
          id = undefined;
        }
        if (typeof id === 'string' && id.length > 0 && id.length <= MAX_GENERATION_ID && !generations.has(id)) {
          return send(ws, { t: 'frame', id, frame: { type: 'error', requestId: '', error } });
        }
      }
      protocolError(`messages may hold at most ${grouped(maxValues)} JSON values`);
    };

    ws.on('message', (data: RawData, isBinary: boolean) => {
      if (isBinary) return protocolError('binary messages are not part of the kvdesk protocol');
      const text = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
      // JSON.parse's time and memory grow with the values a message holds (millions of `{}` held the server for
      // good): one with too many is refused unread, and the socket stays open.
      if (countJsonValues(text, maxValues) > maxValues) return refuseUnread(text);
      let msg: { t?: unknown; id?: unknown; name?: unknown; request?: unknown };
      try {
        msg = JSON.parse(text.toString());
      } catch {
        return protocolError('messages must be JSON');
      }
      if (!msg || typeof msg !== 'object') return protocolError('messages must be JSON objects');
      switch (msg.t) {
        case 'invoke': {
          const id = msg.id;
          // A number past a double's range (1e400) parses as Infinity, which an answer would carry as null.
          if (typeof id !== 'number' || !Number.isFinite(id)) return protocolError('invoke needs a finite numeric id');
          if (typeof msg.name !== 'string' || !Object.hasOwn(CallSchemas, msg.name)) {
            send(ws, {
              t: 'result',
              id,
              result: { ok: false, error: { code: 'BAD_REQUEST', message: `unknown call "${String(msg.name)}"` } },
            });
            return;
          }
          const refuse = () => {
            const error = { code: 'BAD_REQUEST' as const, message: TOOLS_NEED_A_TOKEN };
            send(ws, { t: 'result', id, result: { ok: false, error } });
          };
          if (TOOL_CALLS.has(msg.name) && opts.toolsAllowed !== true) return refuse();
          const name = msg.name as CallName;
          const request = msg.request;
          if (name === 'saveThread' && opts.toolsAllowed !== true) {
            // Nor may such a page grant a chat tools that run without asking (the window, which runs them, would).
            // Its saves go one after another, in the order sent, as the check before each takes a moment.
            const turn = saves.then(() =>
              answer(id, async () => {
                const grants = await grantsChange(hostApi, request).catch(() => true);
                if (grants) {
                  refuse();
                  return null;
                }
                return hostApi.call(name, request);
              }),
            );
            // Counted from now (not from its turn): a stopping server waits for the saves queued too.
            answering++;
            saves = turn.finally(() => {
              answering--;
              goAwayWhenIdle();
            });
            return;
          }
          void answer(id, async () => {
            const result = await hostApi.call(name, request);
            // The tools settings say at once that this page runs none (before a chat counts on them).
            if (msg.name === 'mcpStatus' && result.ok && opts.toolsAllowed !== true) {
              return { ok: true, value: { ...result.value, blocked: TOOLS_NEED_A_TOKEN } };
            }
            return result;
          });
          return;
        }
        case 'generate': {
          const id = msg.id;
          if (typeof id !== 'string' || id.length === 0 || id.length > MAX_GENERATION_ID) {
            return protocolError('generate needs a string id of 1-200 characters');
          }
          // A refusal as a frame under this id would read as the live stream's end (and more frames follow it).
          if (generations.has(id)) {
            return protocolError(`generate id ${JSON.stringify(id)} is already streaming on this socket; use a new id`);
          }
          let ended = false;
          const handle = hostApi.generate(msg.request, (frame) => {
            const last = frame.type === 'done' || frame.type === 'error';
            if (last) {
              ended = true;
              generations.delete(id);
              lastEnd = Date.now();
            }
            send(ws, { t: 'frame', id, frame });
            if (last) goAwayWhenIdle();
          });
          // Frames may all arrive inside generate (an immediate refusal): only live streams are tracked.
          if (!ended) generations.set(id, (reason) => handle.cancel(reason));
          // One sent while the server stops ends as the others did.
          if (!ended && stopping) handle.cancel('shutdown');
          return;
        }
        case 'cancel': {
          if (typeof msg.id !== 'string') return protocolError('cancel needs the string id of a generation');
          generations.get(msg.id)?.('user');
          return;
        }
        default:
          return protocolError(`unknown message type ${JSON.stringify(msg.t)}`);
      }
    });

    ws.on('close', () => {
      clearTimeout(goAwayTimer);
      sockets.delete(ws);
      shutdowns.delete(ws);
      if (sockets.size === 0) {
        for (const u of unsubscribe) u();
        unsubscribe = [];
      }
      const live = [...generations.values()];
      generations.clear();
      for (const cancel of live) cancel('disconnect');
    });
    ws.on('error', () => {
      // 'close' follows; the error itself (a bad frame, a reset) needs no answer.
    });
  }

  return {
    handleUpgrade(req, socket, head) {
      wss.handleUpgrade(req, socket, head, onConnection);
    },
    get size() {
      return sockets.size;
    },
    async close(graceMs = 0) {
      clearInterval(pinger);
      const open = [...sockets];
      const closing = open.map((ws) => new Promise<void>((resolve) => ws.once('close', () => resolve())));
      for (const ws of open) shutdowns.get(ws)?.();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(closing),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(timer);
      for (const ws of open) ws.terminate();
      await Promise.all(closing);
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
