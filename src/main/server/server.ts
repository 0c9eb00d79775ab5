/**
 * The headless server: the built renderer, the contract over WebSocket, the
 * OpenAI-, Anthropic- and Ollama-compatible APIs, /health, /metrics and the budget snapshot, on plain
 * node:http. It adapts HTTP to HostApi and decides nothing itself; every
 * request first passes the Host/Origin/token checks of security.ts.
 */
import {
  createServer,
  type ServerOptions as HttpServerOptions,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { LibraryEntry, ModelInfo } from '../../shared/api';
import { KvdeskError, toErrorInfo } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import type { HostApi } from '../host/host-api';
import { ownPackage } from '../host/own-package';
import { sendAnthropicError, serveCountTokens, serveMessages } from './anthropic-routes';
import { hideFoldersIn, knownFolders } from './hide-paths';
import {
  API_HEADERS,
  BodyBudget,
  drainUnreadBody,
  errorFromInfo,
  HttpError,
  httpError,
  newRequestId,
  parseJson,
  readBody,
  sendHttpError,
  sendJson,
  setRequestId,
  tooLarge,
} from './http-util';
import { maxJsonValuesFor } from './json-guard';
import { PROMETHEUS_CONTENT_TYPE, prometheusText } from './metrics';
import { apiModelName } from './model-names';
import {
  sendOllamaError,
  serveOllamaDelete,
  serveOllamaGeneration,
  serveOllamaPs,
  serveOllamaShow,
  serveOllamaTags,
  serveOllamaVersion,
  servePull,
} from './ollama-routes';
import { liveGenerations, serveCompletion } from './openai-routes';
import { requestLogLine } from './request-log';
import { serveResponse } from './responses-routes';
import {
  type AccessPolicy,
  checkAccess,
  crossOrigin,
  fromAnotherSite,
  isLoopback,
  isWildcard,
  liveAllowedHosts,
  liveOwnOrigins,
  normalOrigin,
} from './security';
import { PAGE_HEADERS, serveStatic, uiBuildOf } from './static-files';
import {
  type DecodedUpload,
  multipartBoundary,
  receiveMultipart,
  sendImported,
  uploadFromJson,
  uploadLoads,
} from './upload';
import { createWsTransport, type WsTransport } from './ws-transport';

/** Where the renderer build lands (electron-vite's renderer outDir), in kvdesk's own folder. */
export const DEFAULT_STATIC_DIR = path.join(ownPackage()?.root ?? path.resolve(__dirname, '../../..'), 'out/renderer');

/** Options of {@link startServer}. */
export interface ServerOptions {
  hostApi: HostApi;
  /** The data folder's id (data-id.ts), said to pages in the WebSocket's hello. */
  dataId?: string;
  /** Address to bind; default 127.0.0.1. Anything but loopback requires `token`. */
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** Required on every request when set (Bearer, `?token=`, or the cookie the page gets). */
  token?: string;
  /** The built renderer; default out/renderer. */
  staticDir?: string;
  /** Extra Host names to answer to (e.g. a reverse proxy's `name:port`). */
  allowedHosts?: string[];
  /**
   * Pages of other sites that may call the model APIs (browser chat clients): origins (`http://localhost:3000`),
   * or `*` for any; CORS headers answer them. The token, when set, is still required.
   */
  allowedOrigins?: string[];
  /** Largest package upload body; default 2 GiB. Bigger bodies get 413. */
  maxUploadBytes?: number;
  /** Largest JSON body of the API routes; default 32 MiB. */
  maxJsonBytes?: number;
  /**
   * Most bytes of request bodies read into memory at once, across requests (JSON bodies, JSON uploads; not
   * multipart uploads, which stream to disk); default 512 MiB, or the largest one body may be when that is more.
   * A body with no room now is a 503 with Retry-After; one over it alone, 413.
   */
  maxBodiesBytes?: number;
  /** Largest message of the UI's WebSocket (a chat's save, attachments and all); default 256 MiB. */
  maxMessageBytes?: number;
  /**
   * How long a connection may stay open without a request in flight (none sent yet, or idle between them) before it
   * is closed; default 60 s. Node closes on its own only those that began one. A request whose headers have not all
   * come as long after its first byte is answered 408 (Node's headersTimeout), and so is one whose body stops coming
   * for as long (readBody, receiveMultipart); its connection is closed. A body that keeps coming is never cut.
   */
  idleTimeoutMs?: number;
  /** How the person running the server raises each limit, for the 413's message (`kvdesk serve` names its flags). */
  raiseLimits?: { json: string; upload: string; bodies?: string };
  /** Given: each HTTP request's line (request-log.ts) once it is answered or its client went away. */
  requestLog?: (line: string) => void;
}

/** A running server. */
export interface RunningServer {
  /**
   * Base URL a local client can use, e.g. http://127.0.0.1:8080 (loopback when bound to a wildcard; the address
   * itself when bound to one off loopback).
   */
  url: string;
  port: number;
  /** The address bound. */
  host: string;
  /** Closes every socket (cancelling what they were generating) and stops listening. */
  close(): Promise<void>;
}

const GIB = 1024 ** 3;
/** How long a stopping server waits for its generations to write their last words before it cuts them. */
const SHUTDOWN_GRACE_MS = 2000;
/** How long a connection may stay open with no request in flight (ServerOptions.idleTimeoutMs). */
const IDLE_CONNECTION_MS = 60_000;
/** Node's own timeouts of a request being received, for a server whose idle timeout is `idleMs`. */
function nodeTimeouts(idleMs: number): HttpServerOptions {
  return {
    // Node's requestTimeout (300 s by default) cut a request whose body was still arriving when it passed, however
    // steadily it came: a model package of a few GB uploaded from another machine (5–20 MB/s) got a 408 at 5 min.
    // A body is cut when it stops coming instead (the idle timeout: readBody, receiveMultipart), never for its length.
    requestTimeout: 0,
    // Headers come in one go from any client: one that trickles them is cut after the idle timeout in all (Node's
    // default, min(60 s, requestTimeout), would be none with no request timeout: a byte every 50 s held it for ever).
    headersTimeout: idleMs,
    // Node looks for headers past their time this often (30 s by default: 90 s before a trickle is cut).
    connectionsCheckingInterval: Math.max(50, Math.min(IDLE_CONNECTION_MS, idleMs) / 4),
  };
}
/** A base64 string of a JSON upload lives in one JS string; V8 caps those near 512 MiB. */
const MAX_JSON_UPLOAD_BYTES = 256 * 1024 ** 2;
/** Largest JSON body of the API routes, by default (ServerOptions.maxJsonBytes). */
export const DEFAULT_MAX_JSON_BYTES = 32 * 1024 ** 2;
/** Bytes of request bodies held in memory at once, by default (ServerOptions.maxBodiesBytes). */
const DEFAULT_MAX_BODIES_BYTES = 512 * 1024 ** 2;

/**
 * Ollama's API lives under /api/, beside kvdesk's own upload (which answers the renderer in its Result
 * envelope); Ollama's clients read errors as `{"error": "…"}`.
 */
function isOllamaPath(p: string): boolean {
  return p.startsWith('/api/') && p !== '/api/models/upload';
}

function formatUrlHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * Refuses an address other than loopback without a token. Exported so the CLI
 * can say so before it spends time loading models.
 * @throws KvdeskError BAD_REQUEST
 */
export function assertBindable(host: string, token: string | undefined): void {
  if (isLoopback(host) || (token !== undefined && token !== '')) return;
  throw new KvdeskError(
    'BAD_REQUEST',
    `Refusing to listen on ${host} without a token: anyone who can reach that address could run models and read your threads. ` +
      'Pass --token <secret> (clients then send "Authorization: Bearer <secret>"), or bind 127.0.0.1.',
    { host },
  );
}

/**
 * The origins a server lets call its model APIs, each as browsers send it; a text that is none is refused, naming
 * where it came from (`from`: the flag or variable).
 */
export function allowedOriginsOf(given: string[], from = 'allowedOrigins'): Set<string> {
  const origins = new Set<string>();
  for (const text of given) {
    const origin = normalOrigin(text.trim());
    if (origin === null) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `${from}: "${text}" is not an origin to allow: give one as a browser sends it, scheme://host[:port] (e.g. http://localhost:3000), or * for any page`,
        { field: 'allowedOrigins' },
      );
    }
    origins.add(origin);
  }
  return origins;
}

/**
 * Host names to answer to beside the server's own addresses (a reverse proxy's, Docker's `host.docker.internal`, a
 * LAN name), checked: each as a Host header says it, `name` or `name:port`, lower-cased; `from` names where they came
 * from in the refusal.
 */
export function allowedHostsOf(given: string[], from = 'allowedHosts'): string[] {
  return given.map((text) => {
    const name = text.trim().toLowerCase();
    if (name === '*') {
      throw new KvdeskError(
        'BAD_REQUEST',
        `${from}: "*" would let any name in, which undoes the DNS-rebinding guard; give each name clients reach the server by`,
        { field: 'allowedHosts' },
      );
    }
    let host: string | undefined;
    try {
      const u = new URL(`http://${name}`);
      host = u.username === '' && u.password === '' && !/[/?#@]/.test(name) ? u.host : undefined;
    } catch {
      host = undefined;
    }
    // The URL parser drops an explicit :80; any other change (a scheme, a path, a character no Host has): no name.
    if (name === '' || host === undefined || (host !== name && `${host}:80` !== name)) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `${from}: "${text}" is not a host name to allow: give the name clients reach the server by, as their Host header says it (no scheme, no path), e.g. host.docker.internal, box.local or proxy.example:443 (a port where it is not the server's)`,
        { field: 'allowedHosts' },
      );
    }
    return name;
  });
}

/**
 * Starts the server and resolves once it listens.
 * @throws KvdeskError BAD_REQUEST when asked to bind off loopback without a token.
 */
export async function startServer(opts: ServerOptions): Promise<RunningServer> {
  const { hostApi } = opts;
  const bindHost = opts.host ?? '127.0.0.1';
  const token = opts.token === '' ? undefined : opts.token;
  assertBindable(bindHost, token);
  const staticDir = path.resolve(opts.staticDir ?? DEFAULT_STATIC_DIR);
  const maxUploadBytes = opts.maxUploadBytes ?? 2 * GIB;
  const maxJsonBytes = opts.maxJsonBytes ?? DEFAULT_MAX_JSON_BYTES;
  const maxJsonValues = maxJsonValuesFor(maxJsonBytes);
  const bodies = new BodyBudget(
    opts.maxBodiesBytes ??
      Math.max(DEFAULT_MAX_BODIES_BYTES, maxJsonBytes, Math.min(maxUploadBytes, MAX_JSON_UPLOAD_BYTES)),
    opts.raiseLimits?.bodies,
  );
  const startedAt = Math.floor(Date.now() / 1000);
  // The policy needs the port, which an ephemeral bind only knows after listen().
  const policy: AccessPolicy = {
    allowedHosts: new Set(),
    ownOrigins: new Set(),
    token,
    cookieName: 'kvdesk_token',
    allowedOrigins: allowedOriginsOf(opts.allowedOrigins ?? []),
  };
  const extraHosts = allowedHostsOf(opts.allowedHosts ?? []);
  // MCP tools (programs run as the person) only where every request needs the token.
  const ws: WsTransport = createWsTransport(hostApi, {
    ...(opts.maxMessageBytes !== undefined ? { maxPayloadBytes: opts.maxMessageBytes } : {}),
    toolsAllowed: token !== undefined,
    build: uiBuildOf(staticDir),
    ...(opts.dataId !== undefined ? { dataId: opts.dataId } : {}),
  });

  /**
   * A model as OpenAI lists it, with kvdesk's own facts beside: a loaded one, or a library package a request
   * loads on first use (`kvdesk.loaded: false`, no backend until then; its folder, `root`, except to a page of
   * another origin: hide-paths.ts).
   */
  function modelJson(m: ModelInfo | LibraryEntry, foreign: boolean) {
    const spec = m.spec as ModelSpec;
    const loaded = 'backend' in m;
    const created = loaded ? startedAt : Math.floor(m.addedAt / 1000);
    return {
      id: m.id,
      object: 'model',
      created,
      owned_by: 'kvdesk',
      // Anthropic's names for the same (its SDK's models.list() and retrieve() read these).
      type: 'model',
      display_name: m.id,
      created_at: new Date(created * 1000).toISOString(),
      max_model_len: spec.contextLength,
      kvdesk: {
        loaded,
        bpt: spec.bpt,
        ...(loaded ? { backend: m.backend, is_default: m.isDefault } : foreign ? {} : { root: m.root }),
        weights_bytes: spec.weightsBytes,
        ...(loaded && m.logits ? { logits: m.logits } : {}),
      },
    };
  }

  /** What a request may name: the loaded models, then the library's packages that load on first use. */
  async function listedModels(): Promise<Array<ModelInfo | LibraryEntry>> {
    const models = await hostApi.call('listModels', {});
    if (!models.ok) throw errorFromInfo(models.error);
    // The library as another process (`kvdesk pull`) may have left it: read again when the file changed.
    await hostApi.library.sync();
    return [...models.value, ...hostApi.loadable()];
  }

  async function jsonBody(req: IncomingMessage): Promise<unknown> {
    return parseJson(
      await readBody(req, maxJsonBytes, opts.raiseLimits?.json, bodies),
      maxJsonValues,
      opts.raiseLimits?.json,
    );
  }

  async function route(req: IncomingMessage, res: ServerResponse, url: URL, setCookie: string | null): Promise<void> {
    const method = req.method ?? 'GET';
    /** A page of another origin (--allow-origin): answered without this computer's folders (hide-paths.ts). */
    const foreign = fromAnotherSite(req, url, policy);
    const p = url.pathname;
    const only = (...methods: string[]) => {
      if (!methods.includes(method)) {
        const err = httpError(
          405,
          `${method} is not allowed on ${p}; use ${methods.join(' or ')}.`,
          'method_not_allowed',
        );
        err.headers.allow = methods.join(', ');
        throw err;
      }
    };
    switch (p) {
      case '/health': {
        only('GET', 'HEAD');
        const models = await hostApi.call('listModels', {});
        const ids = models.ok ? models.value.map((m) => m.id) : [];
        if (ids.length > 0) {
          sendJson(res, 200, { status: 'ok', models: ids });
          return;
        }
        // None loaded now (unloaded: keep_alive 0, Unload, a first-use model's idle time): still ready while the
        // library holds packages a request loads on first use. Not ready when nothing could serve one, nor while
        // the model kvdesk was started to serve failed to load (until a model loads): the operator sees why.
        await hostApi.library.sync();
        const loadable = [...new Set(hostApi.loadable().map((e) => e.id))];
        const failed = hostApi.startFailure();
        if (failed) {
          sendJson(res, 503, {
            status: 'load_failed',
            models: [],
            loadable,
            error: { code: failed.error.code, message: failed.error.message, path: failed.path },
            message:
              `The default model at ${failed.path} did not load: ${failed.error.message.replace(/[.\s]+$/, '')}. ` +
              `Fix it and restart kvdesk${loadable.length > 0 ? ', or load another: a request naming one of `loadable` loads it' : ', or add a package (kvdesk pull, or the Models view)'}.`,
          });
        } else if (loadable.length > 0) {
          sendJson(res, 200, {
            status: 'idle',
            models: [],
            loadable,
            message: 'No model is loaded now; the first request naming one of `loadable` loads it.',
          });
        } else {
          sendJson(res, 503, {
            status: 'no_model',
            models: [],
            message:
              'No model is loaded and the library has none to load: add a package (the Models view, kvdesk pull, or kvdesk serve --model DIR).',
          });
        }
        return;
      }
      case '/v1/models': {
        only('GET');
        const data = (await listedModels()).map((m) => modelJson(m, foreign));
        // OpenAI's list, and Anthropic's page of it (one page: every model).
        sendJson(res, 200, {
          object: 'list',
          data,
          has_more: false,
          first_id: data[0]?.id ?? null,
          last_id: data.at(-1)?.id ?? null,
        });
        return;
      }
      case '/v1/chat/completions':
      case '/v1/completions': {
        only('POST');
        const body = await jsonBody(req);
        await serveCompletion(p === '/v1/chat/completions' ? 'chat' : 'completion', hostApi, body, req, res);
        return;
      }
      case '/v1/messages': {
        only('POST');
        await serveMessages(hostApi, await jsonBody(req), req, res);
        return;
      }
      case '/v1/messages/count_tokens': {
        only('POST');
        await serveCountTokens(hostApi, await jsonBody(req), res);
        return;
      }
      case '/v1/responses': {
        only('POST');
        await serveResponse(hostApi, await jsonBody(req), req, res);
        return;
      }
      case '/v1/kvdesk/budget': {
        only('GET');
        const snap = await hostApi.call('getSnapshot', {});
        if (!snap.ok) throw errorFromInfo(snap.error);
        sendJson(res, 200, snap.value);
        return;
      }
      case '/metrics': {
        only('GET');
        const snap = await hostApi.call('getSnapshot', {});
        if (!snap.ok) throw errorFromInfo(snap.error);
        const text = prometheusText(snap.value);
        res.writeHead(200, {
          ...API_HEADERS,
          'content-type': PROMETHEUS_CONTENT_TYPE,
          'content-length': String(Buffer.byteLength(text)),
        });
        res.end(text);
        return;
      }
      case '/api/models/upload': {
        only('POST');
        await upload(req, res, url);
        return;
      }
      // Ollama's API.
      case '/api/chat':
      case '/api/generate': {
        only('POST');
        const body = await jsonBody(req);
        await serveOllamaGeneration(p === '/api/chat' ? 'chat' : 'generate', hostApi, body, req, res);
        return;
      }
      case '/api/show': {
        only('POST');
        await serveOllamaShow(hostApi, await jsonBody(req), res);
        return;
      }
      case '/api/tags': {
        only('GET', 'HEAD');
        await serveOllamaTags(hostApi, res);
        return;
      }
      case '/api/ps': {
        only('GET');
        await serveOllamaPs(hostApi, res);
        return;
      }
      case '/api/version': {
        only('GET', 'HEAD');
        serveOllamaVersion(res);
        return;
      }
      case '/api/delete': {
        only('DELETE');
        await serveOllamaDelete(hostApi, await jsonBody(req), res);
        return;
      }
      case '/api/pull': {
        only('POST');
        await servePull(hostApi, await jsonBody(req), res);
        return;
      }
    }
    if (p.startsWith('/v1/models/')) {
      // OpenAI's "retrieve model": one model by id (ids may hold slashes, as Hugging Face names do).
      only('GET');
      let id: string;
      try {
        id = decodeURIComponent(p.slice('/v1/models/'.length));
      } catch {
        throw httpError(
          400,
          `the model id in ${p} is not valid percent-encoding: encode it with encodeURIComponent (a "/" may stay as it is).`,
          'invalid_request',
          'model',
        );
      }
      const models = await listedModels();
      const named = await apiModelName(
        hostApi,
        id,
        models.map((m) => m.id),
      );
      const model = models.find((m) => m.id === named);
      if (!model) {
        const known = models.map((m) => m.id).join(', ') || 'none';
        throw httpError(
          404,
          `model "${id}" is neither loaded nor in the library (known: ${known})`,
          'model_not_found',
          'model',
        );
      }
      sendJson(res, 200, modelJson(model, foreign));
      return;
    }
    if (p.startsWith('/v1/') || p.startsWith('/api/')) {
      throw httpError(
        404,
        `There is no ${p} here. The API has /v1/models, /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens, /v1/kvdesk/budget, /api/models/upload, and Ollama's /api/chat, /api/generate, /api/show, /api/tags, /api/ps, /api/version, /api/delete and /api/pull.`,
        'not_found',
      );
    }
    only('GET', 'HEAD');
    const outcome = await serveStatic(staticDir, p, res, {
      head: method === 'HEAD',
      extraHeaders: setCookie ? { 'set-cookie': setCookie } : {},
      ownBuild: staticDir === path.resolve(DEFAULT_STATIC_DIR),
    });
    if (outcome === 'bad-path') throw httpError(400, `The path ${p} is not a file of the UI.`, 'bad_path');
    if (outcome === 'not-found') throw httpError(404, `There is no file ${p} in the UI build.`, 'not_found');
  }

  /**
   * Answers the package upload in the Result envelope the renderer's importPackage returns. A multipart upload
   * (a browser's) is streamed to a folder on disk as it arrives, never held in memory: weights are gigabytes.
   * Loaded, the answer's value is the model (ModelInfo); with `?load=false`, the package's copy (ImportedPackage).
   */
  async function upload(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const boundary = multipartBoundary(req.headers['content-type']);
    const limit = boundary ? maxUploadBytes : Math.min(maxUploadBytes, MAX_JSON_UPLOAD_BYTES);
    /** Refused (before its body was read: too large, or a query it cannot take; or while reading it). */
    const refuse = (err: HttpError) => {
      const hint = err.status === 413 && !boundary ? ' Large packages upload as multipart/form-data.' : '';
      sendJson(
        res,
        err.status,
        {
          ok: false,
          error: {
            // No room now for its body among the others being read (BodyBudget): busy, to send again.
            code: err.status === 503 ? 'QUEUE_FULL' : 'BAD_REQUEST',
            message: `${err.body.error.message}${hint}`,
            detail: { limitBytes: typeof err.body.error.limit_bytes === 'number' ? err.body.error.limit_bytes : limit },
          },
        },
        err.headers,
      );
      drainUnreadBody(req);
    };
    let loadIt: boolean;
    try {
      loadIt = uploadLoads(url);
    } catch (err) {
      if (!(err instanceof HttpError)) throw err;
      refuse(err);
      return;
    }
    if (boundary) {
      const declared = Number(req.headers['content-length']);
      if (Number.isFinite(declared) && declared > limit) {
        refuse(tooLarge(declared, limit, opts.raiseLimits?.upload));
        return;
      }
      /** A full disk (its files', or its lock's, write refused): 507, with the room needed and free. */
      const noRoom = async (err: unknown) => {
        const said = await hostApi.uploadNoRoom(err, Number.isFinite(declared) ? declared : undefined);
        return said && (() => sendImported(res, { ok: false, error: toErrorInfo(said) }, loadIt, req));
      };
      let staging: string;
      try {
        staging = await hostApi.uploadStaging();
      } catch (err) {
        const answer = await noRoom(err);
        if (!answer) throw err;
        answer();
        return;
      }
      let answer: () => void;
      try {
        const name = await receiveMultipart(req, staging, limit, opts.raiseLimits?.upload);
        const result = await hostApi.importStaged({ name, staging, load: loadIt });
        answer = () => sendImported(res, result, loadIt);
      } catch (err) {
        if (!(err instanceof HttpError)) {
          // Gone first: the free space said is the disk's without the upload's part.
          await hostApi.dropStaging(staging);
          const full = await noRoom(err);
          if (!full) throw err;
          answer = full;
        } else answer = () => refuse(err);
      }
      // What is left of the upload goes before the answer: nothing of it is on disk once the client hears.
      await hostApi.dropStaging(staging);
      answer();
      return;
    }
    let decoded: DecodedUpload;
    try {
      decoded = uploadFromJson(parseJson(await readBody(req, limit, undefined, bodies), maxJsonValuesFor(limit)));
    } catch (err) {
      if (!(err instanceof HttpError)) throw err;
      refuse(err);
      return;
    }
    sendImported(res, await hostApi.importFiles({ ...decoded, load: loadIt }), loadIt);
  }

  function unauthorizedPage(
    req: IncomingMessage,
    res: ServerResponse,
    status: number,
    message: string,
    code: string,
  ): void {
    if (req.method === 'GET' && (req.headers.accept ?? '').includes('text/html')) {
      const page = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>kvdesk</title></head><body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto"><h1>kvdesk: access refused</h1><p>${message.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)}</p></body></html>`;
      res.writeHead(status, {
        ...PAGE_HEADERS,
        'content-type': 'text/html; charset=utf-8',
        'content-length': String(Buffer.byteLength(page)),
      });
      res.end(page);
      return;
    }
    sendHttpError(res, httpError(status, message, code));
  }

  /** Per connection, its requests being answered (one at a time, but a pipelining client may send more). */
  const inFlight = new Map<Duplex, number>();
  const { requestLog } = opts;
  const idleMs = opts.idleTimeoutMs ?? IDLE_CONNECTION_MS;
  const server = createServer(nodeTimeouts(idleMs), (req, res) => {
    if (requestLog) {
      const came = performance.now();
      const from = req.socket.remoteAddress;
      res.once('close', () => requestLog(requestLogLine(req, res, performance.now() - came, from)));
    }
    const socket = req.socket;
    inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1);
    res.once('close', () => {
      const left = (inFlight.get(socket) ?? 1) - 1;
      if (left > 0) inFlight.set(socket, left);
      else inFlight.delete(socket);
    });
    // Every response names its request (a generation's, the host's id: runGeneration sets it).
    setRequestId(res, newRequestId());
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://kvdesk.invalid');
    } catch {
      sendHttpError(res, httpError(400, 'The request URL is malformed.', 'bad_url'));
      return;
    }
    // A page of an allowed origin: its answers say so, and its browser's preflight (which carries no token) is
    // answered here, for a Host this server answers to.
    const corsFrom = crossOrigin(req, url, policy);
    if (corsFrom !== null) {
      res.setHeader('access-control-allow-origin', corsFrom);
      res.setHeader('vary', 'Origin');
      res.setHeader('access-control-expose-headers', 'retry-after, x-should-retry, x-request-id, request-id');
      // kvdesk's own errors to it name no folder of this computer (its listings leave `root` out: modelJson); what a
      // model generates goes as it is. The UI's own page (which `*` lets in here too) and clients without an Origin
      // keep them.
      if (fromAnotherSite(req, url, policy)) hideFoldersIn(res, () => knownFolders(hostApi));
      if (req.method === 'OPTIONS' && policy.allowedHosts.has(req.headers.host?.toLowerCase() ?? '')) {
        res.writeHead(204, {
          'access-control-allow-methods': 'GET, POST, OPTIONS',
          'access-control-allow-headers':
            req.headers['access-control-request-headers'] ?? 'content-type, authorization',
          'access-control-max-age': '600',
        });
        res.end();
        return;
      }
    }
    const access = checkAccess(req, url, policy);
    if (!access.ok) {
      const refused = httpError(access.status, access.message, access.code);
      // Each API's clients read their own error shape, a refused key's too.
      if (isOllamaPath(url.pathname)) sendOllamaError(res, refused);
      else if (url.pathname.startsWith('/v1/messages')) sendAnthropicError(res, refused);
      else unauthorizedPage(req, res, access.status, access.message, access.code);
      drainUnreadBody(req);
      return;
    }
    route(req, res, url, access.setCookie).catch((err: unknown) => {
      const httpErr = err instanceof HttpError ? err : errorFromInfo(toErrorInfo(err));
      // A body left unread (a 413, a 503 with no room for it): its rest is read and dropped, so that the client
      // reads the answer rather than a reset.
      drainUnreadBody(req);
      // Anthropic's clients read their own error shape.
      if (url.pathname.startsWith('/v1/messages')) sendAnthropicError(res, httpErr);
      else if (isOllamaPath(url.pathname)) sendOllamaError(res, httpErr);
      else sendHttpError(res, httpErr);
    });
  });

  /** This server's connections (a stop ends the generations of its own, not another server's). */
  const connections = new Set<Duplex>();
  server.on('connection', (socket) => {
    connections.add(socket);
    socket.once('close', () => {
      connections.delete(socket);
      inFlight.delete(socket);
    });
  });
  // A connection that sends nothing is closed after a while: Node's headersTimeout only counts
  // from a request's first byte, and its socket timeout is off by default (11,700 silent sockets were held open).
  // The socket timeout counts inactivity; one that passes with a request in flight (a long prompt being read, a reply
  // between tokens) is no reason to close, and Node's keep-alive timeout after a response lands here too.
  server.timeout = idleMs;
  // Node's own keep-alive timeout (5 s) closed a connection idle between requests long before that, and told
  // clients so (Keep-Alive: timeout=5). Closed by the same timeout, a connection outlives the pools of most
  // clients (which drop theirs sooner): a server closing first races a client reusing it.
  server.keepAliveTimeout = server.timeout;
  server.on('timeout', (socket: Duplex) => {
    if (!inFlight.has(socket)) socket.destroy();
  });

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const refuse = (status: number, reason: string, body: unknown) => {
      const text = JSON.stringify(body);
      socket.end(
        `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
      );
    };
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://kvdesk.invalid');
    } catch {
      refuse(400, 'Bad Request', httpError(400, 'The request URL is malformed.', 'bad_url').body);
      return;
    }
    const access = checkAccess(req, url, policy);
    if (!access.ok) {
      refuse(
        access.status,
        access.status === 401 ? 'Unauthorized' : 'Forbidden',
        httpError(access.status, access.message, access.code).body,
      );
      return;
    }
    if (url.pathname !== '/ws') {
      refuse(404, 'Not Found', httpError(404, 'WebSocket connections go to /ws.', 'not_found').body);
      return;
    }
    ws.handleUpgrade(req, socket, head);
  });

  try {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      server.once('error', onError);
      server.listen(opts.port ?? 0, bindHost, () => {
        server.off('error', onError);
        resolve();
      });
    });
  } catch (err) {
    await ws.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  policy.allowedHosts = liveAllowedHosts(bindHost, port, extraHosts);
  policy.ownOrigins = liveOwnOrigins(bindHost, port, extraHosts);
  policy.cookieName = `kvdesk_token_${port}`;
  // Bound to one address off loopback (a LAN address), only that one answers.
  const urlHost = isWildcard(bindHost) ? '127.0.0.1' : bindHost;

  let closed: Promise<void> | null = null;
  return {
    url: `http://${formatUrlHost(urlHost)}:${port}`,
    port,
    host: bindHost,
    close() {
      closed ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        // Generations in flight end first, as a shutdown: an HTTP stream writes its last event (an error the client
        // may retry), an answer not begun is a retryable 503, a WebSocket stream gets its last frame and the socket
        // closes as going away. Then what is left is cut.
        const ours = [...liveGenerations].filter((g) => g.res.socket !== null && connections.has(g.res.socket));
        for (const g of ours) g.cancel('shutdown');
        await Promise.all([
          ws.close(SHUTDOWN_GRACE_MS),
          Promise.race([
            Promise.all(ours.map((g) => g.over)),
            new Promise((resolve) => setTimeout(resolve, SHUTDOWN_GRACE_MS).unref()),
          ]),
        ]);
        server.closeAllConnections();
        await stopped;
      })();
      return closed;
    },
  };
}
