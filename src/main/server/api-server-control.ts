/**
 * The HTTP API (OpenAI, Anthropic, Ollama, the browser UI) served beside the desktop window, as LM Studio's
 * local server: started and stopped from the Models view, over the window's own host — the same loaded models,
 * budget and library, so a request from an editor plugin queues with the window's chats. It listens on 127.0.0.1,
 * or (`lan`) on every address for the other devices of the local network; there, and wherever the person asks for
 * it, every request must carry the window's API key (a bearer token kept in `keyFile`, made on first use).
 * `kvdesk serve` has its own server; {@link serveControl} reports it.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import type { ApiServerRequest, ApiServerStatus } from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import type { ApiServerControl, HostApi } from '../host/host-api';
import { writePrivateFile } from '../host/private-file';
import { type RunningServer, startServer } from './server';

/** The API key's file in the window's data folder. */
export const API_KEY_FILE = 'api-key';
const LOOPBACK = '127.0.0.1';
const EVERY_ADDRESS = '0.0.0.0';
/** A key as kvdesk makes them: `kvd-` and 32 random bytes (base64url). */
const KEY_SHAPE = /^kvd-[A-Za-z0-9_-]{43}$/;

/** How the server runs: the port it was asked for, where it listens, whether it wants the key. */
interface Mode {
  port: number;
  lan: boolean;
  keyed: boolean;
  /** Pages of any site may call the model APIs. */
  cors: boolean;
}

/** This computer's IPv4 addresses other devices can reach it at (none when it has no network). */
export function lanAddresses(): string[] {
  const found: string[] = [];
  let interfaces: ReturnType<typeof os.networkInterfaces>;
  try {
    interfaces = os.networkInterfaces();
  } catch {
    return found; // the system could not list them just now
  }
  for (const addrs of Object.values(interfaces)) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) found.push(a.address);
  }
  return found;
}

/** The window's server: `start` listens (moving or changing it when it already runs), `stop` closes every socket. */
export function createApiServerControl(opts: {
  /** The window's host, once it is up. */
  host: () => Promise<HostApi>;
  /** Where the API key is kept (made on first use, readable by this user only). */
  keyFile: string;
  /** The built renderer, served at / as `kvdesk serve` does. */
  staticDir?: string;
  /** The data folder's id (store/data-id.ts), said to the pages served, as `kvdesk serve` says it. */
  dataId?: () => Promise<string | undefined>;
  log?: (line: string) => void;
}): ApiServerControl & { close(): Promise<void> } {
  let server: RunningServer | null = null;
  let mode: Mode | null = null;
  let key: string | null = null;
  /** Starts and stops in the order asked. */
  let queue: Promise<unknown> = Promise.resolve();
  const status = (): ApiServerStatus => {
    if (!server || !mode) return { running: false, controlledBy: 'window', tokenRequired: false };
    return {
      running: true,
      controlledBy: 'window',
      url: server.url,
      port: server.port,
      tokenRequired: mode.keyed,
      lan: mode.lan,
      ...(mode.cors ? { cors: true } : {}),
      ...(mode.lan ? { lanUrls: lanAddresses().map((a) => `http://${a}:${server?.port}`) } : {}),
      ...(mode.keyed && key ? { key } : {}),
    };
  };
  const serial = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = queue.then(fn, fn);
    queue = next.catch(() => {});
    return next;
  };
  const stop = async () => {
    const s = server;
    server = null;
    mode = null;
    if (s) {
      await s.close();
      opts.log?.(`kvdesk: the API server at ${s.url} stopped`);
    }
  };
  const writeKey = async (): Promise<string> => {
    const made = `kvd-${randomBytes(32).toString('base64url')}`;
    await writePrivateFile(opts.keyFile, `${made}\n`);
    return made;
  };
  /** The key kept in keyFile, or a new one where there is none (or what is there is not a key kvdesk made). */
  const loadKey = async (): Promise<string> => {
    if (key) return key;
    const kept = (await readFile(opts.keyFile, 'utf8').catch(() => '')).trim();
    key = KEY_SHAPE.test(kept) ? kept : await writeKey();
    return key;
  };
  /** Listens as `next` says; on the old server's port, that one closes first, else it closes once the new one runs. */
  const listen = async (next: Mode): Promise<ApiServerStatus> => {
    const hostApi = await opts.host();
    const token = next.keyed ? await loadKey() : undefined;
    const dataId = await opts.dataId?.();
    const samePort = server !== null && next.port !== 0 && server.port === next.port;
    const previous = mode;
    if (samePort) await stop();
    let started: RunningServer;
    try {
      started = await startServer({
        hostApi,
        host: next.lan ? EVERY_ADDRESS : LOOPBACK,
        port: next.port,
        ...(token !== undefined ? { token } : {}),
        ...(next.cors ? { allowedOrigins: ['*'] } : {}),
        ...(opts.staticDir ? { staticDir: opts.staticDir } : {}),
        ...(dataId !== undefined ? { dataId } : {}),
      });
    } catch (err) {
      // A change on the same port that cannot listen (the port was taken meanwhile): back as it was, if it can be.
      if (samePort && previous) await listen(previous).catch(() => undefined);
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EADDRINUSE') {
        throw new KvdeskError(
          'BAD_REQUEST',
          `port ${next.port} is in use (another server, or another kvdesk): pick another port, or 0 for any free one`,
          { field: 'port', port: next.port },
        );
      }
      if (code === 'EACCES') {
        throw new KvdeskError('BAD_REQUEST', `port ${next.port} needs privileges: pick one above 1023`, {
          field: 'port',
          port: next.port,
        });
      }
      throw err;
    }
    await stop();
    server = started;
    mode = { ...next, port: started.port };
    const where = next.lan ? ` and on the local network (${lanAddresses().join(', ') || 'no address yet'})` : '';
    opts.log?.(`kvdesk: the API server answers at ${started.url}${where}${next.keyed ? ', with the API key' : ''}`);
    return status();
  };
  return {
    status,
    start: (req: ApiServerRequest) =>
      serial(async () => {
        const lan = req.lan === true;
        // On the network the key is always wanted: anyone there could otherwise run models and read the chats.
        const next: Mode = { port: req.port, lan, keyed: lan || req.requireKey === true, cors: req.cors === true };
        const current = mode;
        const same =
          server !== null &&
          current !== null &&
          (next.port === 0 || server.port === next.port) &&
          current.lan === next.lan &&
          current.keyed === next.keyed &&
          current.cors === next.cors;
        if (same) return status();
        // Only the mode changed: it stays on its port.
        return listen(next.port === 0 && server && current ? { ...next, port: server.port } : next);
      }),
    stop: () =>
      serial(async () => {
        await stop();
        return status();
      }),
    newKey: () =>
      serial(async () => {
        key = await writeKey();
        // A running server that wants the key takes the new one (its clients' old key stops working).
        if (server && mode?.keyed) return listen(mode);
        return status();
      }),
    close: () => serial(stop),
  };
}

/** `kvdesk serve`'s own server: it runs as long as serve does; the window's start and stop do not apply. */
export function serveControl(server: () => RunningServer | null, tokenRequired: boolean): ApiServerControl {
  const status = (): ApiServerStatus => {
    const s = server();
    return s
      ? { running: true, controlledBy: 'serve', url: s.url, port: s.port, tokenRequired }
      : { running: false, controlledBy: 'serve', tokenRequired };
  };
  const refuse = async (): Promise<ApiServerStatus> => {
    throw new KvdeskError(
      'BAD_REQUEST',
      'this page is served by `kvdesk serve`, whose API runs as long as it does: start it with another --port to move it, stop it with Ctrl+C',
    );
  };
  return { status, start: refuse, stop: refuse, newKey: refuse };
}
