/**
 * `kvdesk serve`'s flags, in a module of their own: `npm start` (start.ts) reads them to pass a person's serve flags
 * to the browser UI it starts in place of the window, without loading the server to do so.
 */

import net from 'node:net';

/** Whether `host:port` can be listened on now: a listen closed at once; its error (EADDRINUSE…) is thrown. */
export async function probePort(host: string, port: number): Promise<void> {
  const probe = net.createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen(port, host, resolve);
  });
  await new Promise((resolve) => probe.close(resolve));
}

/** The port `kvdesk serve` listens on without --port. */
export const DEFAULT_PORT = 8080;

/** `kvdesk serve`'s flags, as node:util's parseArgs takes them. */
export const SERVE_OPTIONS = {
  port: { type: 'string' },
  host: { type: 'string' },
  token: { type: 'string' },
  'allow-origin': { type: 'string', multiple: true },
  'allow-host': { type: 'string', multiple: true },
  model: { type: 'string', multiple: true },
  'kv-budget': { type: 'string', multiple: true },
  'device-memory': { type: 'string', multiple: true },
  'max-running': { type: 'string' },
  'max-queue': { type: 'string' },
  'data-dir': { type: 'string' },
  'static-dir': { type: 'string' },
  'max-upload': { type: 'string' },
  'max-body': { type: 'string' },
  'max-bodies': { type: 'string' },
  'max-message': { type: 'string' },
  'trust-installed': { type: 'boolean' },
  threads: { type: 'string' },
  'prefill-chunk': { type: 'string' },
  lookup: { type: 'string' },
  'prompt-cache': { type: 'string' },
  'first-use-ttl': { type: 'string' },
  'log-requests': { type: 'boolean' },
} as const;
