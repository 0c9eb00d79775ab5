/**
 * Ollama's native API over HostApi: `POST /api/chat` and `/api/generate` (streamed as newline-delimited JSON
 * unless `"stream": false`, as Ollama does by default), `POST /api/show`, `GET /api/tags`, `/api/ps` and
 * `/api/version`. As with the OpenAI and Anthropic endpoints the status is sent only once the request is
 * admitted, so a refusal is a plain HTTP error in Ollama's shape (`{"error": "…"}`) and a 200 means the KV is
 * reserved; a failure after that is the stream's last line, `{"error": "…"}`, as Ollama ends its streams.
 */
import { statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import type { ModelInfo } from '../../shared/api';
import { KvdeskError, toErrorInfo } from '../../shared/errors';
import type { HostApi } from '../host/host-api';
import { type DownloadProgress, repoSpec, splitPullName } from '../host/hub-download';
import { ownPackage } from '../host/own-package';
import { withoutFolders } from './hide-paths';
import { errorFromInfo, HttpError, httpError, sendJson, streamHeaders } from './http-util';
import { installedModels, loadedModels, pulledName } from './model-names';
import {
  loadReply,
  type MappedOllamaRequest,
  type ModelFacts,
  mapOllamaRequest,
  type OllamaKind,
  ollamaChunk,
  ollamaError,
  ollamaFinalChunk,
  ollamaReply,
  psJson,
  resolveModel,
  showJson,
  showModelName,
  tagJson,
} from './ollama-adapter';
import { clientGone, runGeneration } from './openai-routes';

/** Headers of a newline-delimited JSON stream. */
const NDJSON_HEADERS = streamHeaders('application/x-ndjson');

/** Answers an error in Ollama's shape (or closes a stream that has begun: its routes end it with a line). */
export function sendOllamaError(res: ServerResponse, err: HttpError, kind: OllamaKind | null = null): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { status, body, headers } = ollamaError(err, kind);
  sendJson(res, status, withoutFolders(res, body), headers);
}

/** kvdesk's own version (package.json), wherever the code was built to. */
function kvdeskVersion(): string {
  return ownPackage()?.version ?? 'unknown';
}

/**
 * The Ollama version kvdesk answers as: the API level its endpoints follow. Clients compare it to decide what
 * they may use (VS Code's Copilot refuses a server below 0.6.4), so kvdesk's own version would lock them out.
 */
export const OLLAMA_API_VERSION = '0.12.0';

/** GET /api/version: the Ollama API level kvdesk speaks, and kvdesk's own version beside it. */
export function serveOllamaVersion(res: ServerResponse): void {
  sendJson(res, 200, { version: OLLAMA_API_VERSION, kvdesk: kvdeskVersion() });
}

const startedAt = new Date().toISOString();

/** What the listings say about a package beyond its spec: when its folder last changed. */
function factsOf(m: ModelInfo): ModelFacts {
  try {
    return { modifiedAt: statSync(m.spec.root).mtime.toISOString() };
  } catch {
    // The folder is gone (the model stays loaded): Go clients need a time, so the server's start stands in.
    return { modifiedAt: startedAt };
  }
}

/** GET /api/tags: the models a request may name (loaded, or in the library: loaded on first use). */
export async function serveOllamaTags(hostApi: HostApi, res: ServerResponse): Promise<void> {
  const models = await installedModels(hostApi);
  sendJson(res, 200, { models: models.map((m) => tagJson(m, factsOf(m))) });
}

/** GET /api/ps: the loaded models, with their memory. */
export async function serveOllamaPs(hostApi: HostApi, res: ServerResponse): Promise<void> {
  const models = await loadedModels(hostApi);
  sendJson(res, 200, { models: models.map(psJson) });
}

/** POST /api/show: one model's details, its facts and its chat template (a library package's without loading it). */
export async function serveOllamaShow(hostApi: HostApi, body: unknown, res: ServerResponse): Promise<void> {
  const models = await installedModels(hostApi);
  const id = resolveModel(
    pulledName(hostApi, showModelName(body)),
    models.map((m) => m.id),
  );
  const model = models.find((m) => m.id === id) as ModelInfo;
  sendJson(res, 200, showJson(model, factsOf(model)));
}

/**
 * DELETE /api/delete: takes a package out of the library, as the window's Forget does (a folder of one's own
 * stays on disk; kvdesk's copy of an upload is deleted). A loaded model is unloaded first, as Ollama does; one
 * still answering requests is refused, saying so.
 */
export async function serveOllamaDelete(hostApi: HostApi, body: unknown, res: ServerResponse): Promise<void> {
  await hostApi.library.sync();
  const entries = hostApi.library.list();
  const loaded = hostApi.runner.listModels();
  const id = resolveModel(pulledName(hostApi, showModelName(body)), [
    ...new Set([...loaded.map((m) => m.id), ...entries.map((e) => e.id)]),
  ]);
  // The one folder the name is (each has its own id): a model loaded from it, and its library entry. A model loaded
  // under the id from another folder than the entry's would be two packages under one name: nothing is touched.
  const model = loaded.find((m) => m.id === id);
  const entry = entries.find((e) => e.id === id);
  if (model !== undefined && entry !== undefined && path.resolve(model.spec.root) !== path.resolve(entry.root)) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `model "${id}" is loaded from ${model.spec.root} but the library's "${id}" is ${entry.root}: nothing was deleted. Unload it first (POST /api/generate with keep_alive 0), then delete it`,
      { field: 'model' },
    );
  }
  if (model !== undefined) {
    const unloaded = await hostApi.call('unloadModel', { id });
    if (!unloaded.ok) throw errorFromInfo(unloaded.error);
  }
  // A model forgotten in the library but still loaded is only unloaded: no folder is named by it.
  if (entry !== undefined) {
    const r = await hostApi.call('forgetModel', { root: entry.root });
    if (!r.ok) throw errorFromInfo(r.error);
  }
  res.writeHead(200, { 'content-length': '0' });
  res.end();
}

/**
 * Runs one `/api/chat` or `/api/generate` request to its end. Resolves when the response is complete or the
 * client is gone; never rejects.
 */
export async function serveOllamaGeneration(
  kind: OllamaKind,
  hostApi: HostApi,
  body: unknown,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let mapped: MappedOllamaRequest;
  let request: NonNullable<MappedOllamaRequest['request']>;
  let loadMs = 0;
  try {
    mapped = mapOllamaRequest(kind, body);
    // The library read again first: a name it gained since (a `kvdesk pull`) resolves.
    const installed = (await installedModels(hostApi)).map((m) => m.id);
    const id = resolveModel(pulledName(hostApi, mapped.model), installed);
    if (mapped.request === null) {
      // Ollama's load (and, with keep_alive 0, unload) request.
      if (mapped.unload) {
        if (hostApi.runner.listModels().some((m) => m.id === id)) {
          const r = await hostApi.call('unloadModel', { id });
          if (!r.ok) throw errorFromInfo(r.error);
        }
      } else {
        await hostApi.ensureModel(id, mapped.keepAliveMs);
      }
      sendLoad(res, kind, mapped);
      return;
    }
    request = { ...mapped.request, model: id };
    // A library package loads first (Ollama reports that time as load_duration); keep_alive sets how long a
    // model loaded so stays without requests.
    const started = performance.now();
    const wasLoaded = hostApi.runner.listModels().some((m) => m.id === id);
    // Gone while the library was read: no load for it (runGeneration submits nothing for a client gone).
    if (clientGone(req, res)) return;
    await hostApi.ensureModel(id, mapped.keepAliveMs);
    if (!wasLoaded) loadMs = performance.now() - started;
  } catch (err) {
    sendOllamaError(res, err instanceof HttpError ? err : errorFromInfo(toErrorInfo(err)), kind);
    return;
  }
  const { model, stream } = mapped;
  const line = (value: unknown) => res.write(`${JSON.stringify(value)}\n`);
  // Calls streamed so far: Ollama numbers each call of a reply.
  let callsSent = 0;
  const paramHint = { prompt: kind === 'chat' ? 'messages' : 'prompt', rename: false };
  await runGeneration(
    hostApi,
    request,
    req,
    res,
    (frame, finish) => {
      switch (frame.type) {
        case 'accepted':
        case 'prefill':
          return;
        case 'admitted':
          if (!stream) return;
          res.writeHead(200, NDJSON_HEADERS);
          // No line yet: the headers alone tell the client it was admitted.
          res.flushHeaders();
          return;
        case 'tokens': {
          const row = frame.rows[0];
          if (!stream || !row) return;
          if (row.text.length > 0 || row.reasoning)
            line(ollamaChunk(kind, model, row.text, undefined, 0, row.reasoning ?? ''));
          const calls = row.toolCalls ?? [];
          if (calls.length > 0) {
            line(ollamaChunk(kind, model, '', calls, callsSent));
            callsSent += calls.length;
          }
          return;
        }
        case 'done':
          finish();
          if (!stream) {
            sendJson(res, 200, ollamaReply(kind, model, frame.result, loadMs));
            return;
          }
          line(ollamaFinalChunk(kind, model, frame.result, loadMs));
          res.end();
          return;
        case 'error': {
          finish();
          const err = errorFromInfo(frame.error, paramHint);
          if (!res.headersSent) {
            sendOllamaError(res, err, kind);
            return;
          }
          // After admission the status is already 200: Ollama ends such a stream with an error line.
          line(withoutFolders(res, ollamaError(err, kind).body));
          res.end();
          return;
        }
      }
    },
    (r, e) => sendOllamaError(r, e, kind),
    paramHint,
    mapped.keepAliveMs,
  );
}

/** Ollama's "load" / "unload": a request with nothing to generate, answered once done (one line when a stream was asked). */
function sendLoad(res: ServerResponse, kind: OllamaKind, mapped: MappedOllamaRequest): void {
  const reply = loadReply(kind, mapped.model, mapped.unload);
  if (!mapped.stream) {
    sendJson(res, 200, reply);
    return;
  }
  res.writeHead(200, NDJSON_HEADERS);
  res.end(`${JSON.stringify(reply)}\n`);
}

/**
 * The repository and variant an Ollama pull names: `hf.co/owner/name[:variant]` (Ollama's form for Hugging Face
 * models), `huggingface.co/…`, or `owner/name[:variant]`; `:latest` is the variant kvdesk would take. A revision
 * goes before the colon or after the variant (splitPullName).
 */
export function pullTarget(body: unknown): { repo: string; variant?: string; stream: boolean } {
  const b = (body && typeof body === 'object' ? body : {}) as Record<string, unknown>;
  const name = b.model ?? b.name;
  if (typeof name !== 'string' || name.length === 0) {
    throw httpError(
      400,
      '"model" is required: a Hugging Face repository, hf.co/owner/name[:variant]',
      'invalid_request',
      'model',
    );
  }
  let split: ReturnType<typeof splitPullName>;
  try {
    split = splitPullName(name);
  } catch (err) {
    throw httpError(400, toErrorInfo(err).message, 'invalid_request', 'model');
  }
  // No repository before a colon: the download refuses the name as given.
  const repo = split ? repoSpec(split) : name;
  const variant = split?.variant;
  return { repo, ...(variant !== undefined ? { variant } : {}), stream: b.stream !== false };
}

/**
 * POST /api/pull: downloads an ONNX model from the Hugging Face Hub into the library (as the Models view's
 * download), with Ollama's progress lines: "pulling manifest", "pulling <variant>" with `total` and `completed`
 * bytes, "verifying sha256 digest", "success". The model is then named by its library id (or the repository's).
 */
export async function servePull(hostApi: HostApi, body: unknown, res: ServerResponse): Promise<void> {
  const target = pullTarget(body);
  const line = (value: unknown) => res.write(`${JSON.stringify(value)}\n`);
  let last = 0;
  // One "layer" for the whole package: clients draw a bar per digest.
  const progressLine = (p: { repo: string; variant: string; doneBytes: number; totalBytes: number }) =>
    line({
      status: `pulling ${p.variant}`,
      digest: `${p.repo}:${p.variant}`,
      total: p.totalBytes,
      completed: p.doneBytes,
    });
  const onProgress = (p: DownloadProgress) => {
    if (!target.stream || !res.headersSent) return;
    const now = Date.now();
    if (now - last < 200 && p.doneBytes < p.totalBytes) return;
    last = now;
    progressLine(p);
  };
  // Refusals before the download starts (no such repository, no ONNX, downloaded already) are plain errors; a
  // download of it running already (another client's pull) is followed, as Ollama's second pull is.
  let started: Awaited<ReturnType<HostApi['downloads']['start']>>;
  // A client that goes before its pull is counted (while the hub is asked, or a cancelled download of it ends)
  // leaves as soon as it is.
  let gone = false;
  const goneEarly = () => {
    gone = true;
  };
  res.once('close', goneEarly);
  try {
    started = await hostApi.downloads.start(target.repo, target.variant, onProgress, { pull: true });
  } catch (err) {
    const info = toErrorInfo(err);
    // As Ollama's pull of a model it has: success.
    if (info.detail?.present === true) {
      if (target.stream) {
        res.writeHead(200, NDJSON_HEADERS);
        line({ status: 'pulling manifest' });
        line({ status: 'success' });
        res.end();
      } else sendJson(res, 200, { status: 'success' });
      return;
    }
    throw errorFromInfo(info, { prompt: 'model' });
  } finally {
    res.off('close', goneEarly);
  }
  if (target.stream) {
    res.writeHead(200, NDJSON_HEADERS);
    line({ status: 'pulling manifest' });
    // Followed: how far it has come (its next progress may be a while: the package being checked).
    if (started.followed && started.status.doneBytes > 0) progressLine(started.status);
  }
  // A client that goes away stops its pull, as Ollama's does, once no other client's pull follows it (what
  // arrived stays for the next pull to resume).
  const leave = () => {
    if (!res.writableFinished) hostApi.downloads.leave(started.status.id, onProgress);
  };
  if (gone) leave();
  else res.once('close', leave);
  const status = await started.done;
  res.off('close', leave);
  if (status.state !== 'done') {
    const message = status.error?.message ?? `the download was ${status.state}`;
    if (!target.stream) {
      sendJson(res, status.error?.code === 'BAD_REQUEST' ? 400 : 502, { error: message });
      return;
    }
    line({ error: message });
    res.end();
    return;
  }
  if (!target.stream) {
    sendJson(res, 200, { status: 'success' });
    return;
  }
  line({ status: 'verifying sha256 digest' });
  line({ status: 'writing manifest' });
  line({ status: 'success' });
  res.end();
}
