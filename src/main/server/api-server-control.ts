/**
 * The HTTP API (OpenAI, Anthropic, Ollama, the browser UI) served beside the desktop window, as LM Studio's
 * local server: started and stopped from the Models view, on 127.0.0.1 only, over the window's own host — the
 * same loaded models, budget and library, so a request from an editor plugin queues with the window's chats.
 * `kvdesk serve` has its own server; {@link serveControl} reports it.
 */
import type { ApiServerStatus } from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import type { ApiServerControl, HostApi } from '../host/host-api';
import { type RunningServer, startServer } from './server';

const LOOPBACK = '127.0.0.1';

/** The window's server: `start` listens (moving to the new port when it already runs), `stop` closes every socket. */
export function createApiServerControl(opts: {
  /** The window's host, once it is up. */
  host: () => Promise<HostApi>;
  /** The built renderer, served at / as `kvdesk serve` does. */
  staticDir?: string;
  log?: (line: string) => void;
}): ApiServerControl & { close(): Promise<void> } {
  let server: RunningServer | null = null;
  /** Starts and stops in the order asked. */
  let queue: Promise<unknown> = Promise.resolve();
  const status = (): ApiServerStatus =>
    server
      ? { running: true, controlledBy: 'window', url: server.url, port: server.port, tokenRequired: false }
      : { running: false, controlledBy: 'window', tokenRequired: false };
  const serial = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = queue.then(fn, fn);
    queue = next.catch(() => {});
    return next;
  };
  const stop = async () => {
    const s = server;
    server = null;
    if (s) {
      await s.close();
      opts.log?.(`kvdesk: the API server at ${s.url} stopped`);
    }
  };
  return {
    status,
    start: (port) =>
      serial(async () => {
        if (server && (port === 0 || server.port === port)) return status();
        const hostApi = await opts.host();
        // Listen on the new port first: a move to a port in use leaves the server where it was.
        let next: RunningServer;
        try {
          next = await startServer({
            hostApi,
            host: LOOPBACK,
            port,
            ...(opts.staticDir ? { staticDir: opts.staticDir } : {}),
          });
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'EADDRINUSE') {
            throw new KvdeskError(
              'BAD_REQUEST',
              `port ${port} is in use (another server, or another kvdesk): pick another port, or 0 for any free one`,
              { field: 'port', port },
            );
          }
          if (code === 'EACCES') {
            throw new KvdeskError('BAD_REQUEST', `port ${port} needs privileges: pick one above 1023`, {
              field: 'port',
              port,
            });
          }
          throw err;
        }
        await stop();
        server = next;
        opts.log?.(`kvdesk: the API server answers at ${server.url}`);
        return status();
      }),
    stop: () =>
      serial(async () => {
        await stop();
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
  return { status, start: refuse, stop: refuse };
}
