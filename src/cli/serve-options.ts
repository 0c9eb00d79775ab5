/**
 * `kvdesk serve`'s flags, in a module of their own: `npm start` (start.ts) reads them to pass a person's serve flags
 * to the browser UI it starts in place of the window, without loading the server to do so.
 */

import net from 'node:net';
import type { Io } from './common';

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

/** Usage lines of `serve` (main.ts shows them in its help). */
export const SERVE_USAGE = `  kvdesk serve [--port N] [--host 127.0.0.1] [--token T] [--model PATH]... [options]

serve options:
  --port N                 port to listen on (default 8080; 0 picks a free one)
  --host ADDR              address to bind (default 127.0.0.1; any other address needs --token)
  --token T                require "Authorization: Bearer T" (or /?token=T in a browser); also $KVDESK_TOKEN
  --allow-origin ORIGIN    a web page's origin (http://localhost:3000) that may call the model APIs from a browser
                           (CORS); * for any page; repeatable, or comma-separated in $KVDESK_ORIGINS. --token is
                           still required where given
  --allow-host NAME        a name clients reach the server by beside its addresses, which the DNS-rebinding guard
                           refuses otherwise (403 host_not_allowed): host.docker.internal for Open WebUI in Docker,
                           box.local, a reverse proxy's proxy.example:443; repeatable, or comma-separated in
                           $KVDESK_ALLOWED_HOSTS
  --model PATH             load a model package at start (repeatable; the default model loads too)
  --trust-installed        --model may name ORT packages of the "installed" layout (files outside their folder)
  --kv-budget [DEV=]SIZE   KV budget, e.g. 2GiB for the CPU (default: derived from RAM), cuda:0=6GiB for a GPU
                           (default: derived from its memory); repeatable
  --device-memory DEV=SIZE memory of a GPU kvdesk cannot query, e.g. webgpu:0=8GiB (NVIDIA GPUs are read with nvidia-smi)
  --max-running N          requests that run at once (default 4)
  --max-queue N            requests that may wait (default 256; beyond it the API answers 429, Ollama's routes 503)
  --data-dir DIR           threads, settings and uploaded models (default $KVDESK_DATA_DIR or ~/.kvdesk)
  --static-dir DIR         the built UI (default out/renderer)
  --max-upload SIZE        largest package upload from the browser (default 2GiB; bigger ones get 413)
  --max-body SIZE          largest JSON request body of the API (default 32MiB; bigger ones get 413)
  --max-bodies SIZE        most bytes of request bodies held in memory at once, across requests (default 512MiB,
                           or --max-body when larger; at least --max-body; a body with no room now gets 503 and
                           Retry-After)
  --max-message SIZE       largest message of the browser UI: a chat's save, attachments and all (default
                           256MiB; the page says a bigger one was not saved)
  --threads N              onnxruntime intra-op threads (default: every core)
  --prefill-chunk N        prompt tokens one prefill run computes at most (default 256: a long prompt runs in
                           chunks, running replies take a step between them; lower it to use less memory)
  --lookup N               lookup decoding: a reply that repeats earlier text takes up to N+1 tokens a step
                           (default 4; 0: off)
  --prompt-cache N         conversations whose KV the OpenAI API keeps for their next turn (default 16; 0: off)
  --first-use-ttl TIME     how long a library model that a request loaded stays loaded without requests
                           (default 60m; e.g. 90s, 2h, or never); Ollama's keep_alive sets it per request
  --log-requests           a line on stderr for each HTTP request once answered: time, client address, method
                           and path (no query), status, duration, kvdesk's request id and the client's x-request-id
  Model downloads (Models view, /api/pull) read $HF_TOKEN (gated models) and $HF_ENDPOINT (a mirror of the hub)`;

/**
 * `kvdesk serve --help` (or -h): its usage on stdout, and true. Here, apart from serve.ts (the server, the runner and
 * the package loader), so that main.ts answers it without loading those.
 */
export function serveHelp(args: readonly string[], io: Io): boolean {
  if (!args.includes('--help') && !args.includes('-h')) return false;
  io.out(`Usage:\n${SERVE_USAGE}\n`);
  return true;
}
