/**
 * POST /v1/chat/completions and /v1/completions over HostApi.generate.
 *
 * Why the stream opens late: the response status is sent only with the
 * `admitted` frame, so every refusal (bad input, unknown model, context
 * overflow, budget, full queue) is a plain HTTP error with its status, and a
 * 200 means the KV is already reserved. A client that goes away before the end
 * cancels its request (reason 'disconnect'), which returns the reservation.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GenerateRequest, GenerationResult, StreamFrame } from '../../shared/contract';
import { toErrorInfo } from '../../shared/errors';
import type { HostApi } from '../host/host-api';
import { withoutFolders } from './hide-paths';
import {
  errorFromInfo,
  HttpError,
  type ParamHint,
  SSE_HEADERS,
  sendHttpError,
  sendJson,
  sendsSystem,
  setRequestId,
} from './http-util';
import { apiModelName } from './model-names';
import {
  CharOffsets,
  chunk,
  completionBody,
  deltaChoice,
  finalChoice,
  kvdeskExtras,
  type MappedRequest,
  mapOpenAiRequest,
  type OpenAiKind,
  type ReplyHeader,
  reasoningChoice,
  replyId,
  toolCallDeltasChoice,
  toolCallsChoice,
  usageOf,
} from './openai-adapter';

/** Whether a request's reply is a call (tool_choice required or a named tool): it has no text. */
const forcedCall = (r: GenerateRequest): boolean =>
  (r.tools?.length ?? 0) > 0 && r.toolChoice !== undefined && r.toolChoice !== 'auto' && r.toolChoice !== 'none';

/**
 * Whether a reply may be text or calls (tools, tool_choice auto): its role chunk waits for the reply's first words,
 * to say which, as OpenAI's: `content: ""` before text, `content: null` with the first of its calls.
 */
const textOrCalls = (r: GenerateRequest): boolean =>
  (r.tools?.length ?? 0) > 0 && (r.toolChoice === undefined || r.toolChoice === 'auto');

/** Prompt tokens for usage: one count per prompt, however many copies (n) ran. */
function promptTokensOf(hostApi: HostApi, mapped: MappedRequest, result: GenerationResult): number {
  if (mapped.promptIdLengths) return mapped.promptIdLengths.reduce((a, b) => a + b, 0);
  if (mapped.promptTexts) {
    // Rows of a batch are padded to the longest, so the result only knows the longest; count each prompt.
    const tok = hostApi.runner.tokenizerOf(result.modelId);
    return mapped.promptTexts.reduce((sum, t) => sum + tok.encode(t, { addSpecialTokens: true }).length, 0);
  }
  return result.promptTokens;
}

/**
 * Runs one OpenAI request to its end. Resolves when the response is complete
 * or the client is gone; never rejects.
 */
export function serveCompletion(
  kind: OpenAiKind,
  hostApi: HostApi,
  body: unknown,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let mapped: MappedRequest;
  try {
    mapped = mapOpenAiRequest(kind, body);
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    sendHttpError(res, err);
    return Promise.resolve();
  }
  const paramHint: ParamHint = {
    prompt: kind === 'chat' ? 'messages' : 'prompt',
    ...(mapped.request.contextOverflow === 'drop-oldest'
      ? { truncation: { tools: (mapped.request.tools?.length ?? 0) > 0, system: sendsSystem(mapped.request) } }
      : {}),
  };
  const created = Math.floor(Date.now() / 1000);
  const choices = mapped.promptCount * mapped.n;
  const usageNull = mapped.includeUsage ? { usage: null } : {};

  let head: ReplyHeader | null = null;
  // Calls streamed so far per choice: the next call's index; and the calls whose arguments went out as written.
  const callsSent = new Array<number>(choices).fill(0);
  const argumentsStreamed = Array.from({ length: choices }, () => new Set<number>());
  // Each chat choice whose role chunk waits for its first words (textOrCalls).
  const roleWaits = new Array<boolean>(choices).fill(kind === 'chat' && textOrCalls(mapped.request));
  // And the white space such a reply writes before any text (often before a call): held until text follows, dropped
  // where the reply makes calls and writes nothing else (its content is null whole); null once text has begun.
  const spaceHeld = new Array<string | null>(choices).fill(
    kind === 'chat' && textOrCalls(mapped.request) && mapped.request.logprobs === undefined ? '' : null,
  );
  // Each completion's text so far, where its tokens' offsets count characters.
  const texts =
    kind === 'completion' && mapped.request.logprobs !== undefined
      ? Array.from({ length: choices }, () => new CharOffsets())
      : undefined;
  return runGeneration(
    hostApi,
    mapped.request,
    req,
    res,
    (frame, finish) => {
      const sse = (data: unknown) => {
        res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
      };

      switch (frame.type) {
        case 'accepted':
          return;
        case 'admitted': {
          if (!mapped.stream) return;
          head = { id: replyId(kind, frame.requestId), created, model: mapped.model };
          res.writeHead(200, SSE_HEADERS);
          if (kind === 'chat' && !roleWaits[0]) {
            const role = forcedCall(mapped.request) ? 'call' : true;
            for (let i = 0; i < choices; i++) sse(chunk(kind, head, [deltaChoice(kind, i, '', role)], usageNull));
          } else {
            // Completions have no role chunk, and a reply of text or calls sends its own with its first words: flushing
            // the headers tells the client it was admitted.
            res.flushHeaders();
          }
          return;
        }
        case 'tokens': {
          if (!mapped.stream || head === null) return;
          const h = head;
          frame.rows.forEach((row, i) => {
            /** A waiting role goes on this choice's first chunk: with `content` when its words say which. */
            const opened = (choice: Record<string, unknown>, content?: '' | null) => {
              if (!roleWaits[i]) return choice;
              roleWaits[i] = false;
              const role = content === undefined ? { role: 'assistant' } : { role: 'assistant', content };
              return { ...choice, delta: { ...role, ...(choice.delta as Record<string, unknown>) } };
            };
            if (kind === 'chat' && row.reasoning)
              sse(chunk(kind, h, [opened(reasoningChoice(i, row.reasoning))], usageNull));
            let text = row.text;
            const held = spaceHeld[i];
            if (held !== null && held !== undefined) {
              if ((held + text).trim() === '') [spaceHeld[i], text] = [held + text, ''];
              else [spaceHeld[i], text] = [null, held + text];
            }
            const withLogprobs = row.logprobs !== undefined && row.logprobs.length > 0;
            // Text first: the role chunk as for any reply, its content "".
            if (roleWaits[i] && (text.length > 0 || withLogprobs))
              sse(chunk(kind, h, [opened(deltaChoice(kind, i, '', true))], usageNull));
            const chars = texts?.[i];
            chars?.add(row.text);
            if (text.length > 0 || withLogprobs) {
              const lp = withLogprobs ? row.logprobs : undefined;
              sse(chunk(kind, h, [deltaChoice(kind, i, text, false, lp, chars)], usageNull));
            }
            const streamed = argumentsStreamed[i] as Set<number>;
            if (kind === 'chat' && row.toolCallDeltas && row.toolCallDeltas.length > 0) {
              sse(chunk(kind, h, [opened(toolCallDeltasChoice(i, row.toolCallDeltas), null)], usageNull));
              for (const d of row.toolCallDeltas) streamed.add(d.index);
            }
            if (row.toolCalls && row.toolCalls.length > 0) {
              const choice = toolCallsChoice(i, row.toolCalls, callsSent[i] ?? 0, streamed);
              if (choice) sse(chunk(kind, h, [opened(choice, null)], usageNull));
              callsSent[i] = (callsSent[i] ?? 0) + row.toolCalls.length;
            }
          });
          return;
        }
        case 'done': {
          const result = frame.result;
          const usage = usageOf(
            result,
            promptTokensOf(hostApi, mapped, result),
            mapped.request.prediction !== undefined,
          );
          finish();
          if (!mapped.stream || head === null) {
            const h = head ?? { id: replyId(kind, result.requestId), created, model: mapped.model };
            sendJson(res, 200, completionBody(kind, h, result, usage));
            return;
          }
          const extras = kvdeskExtras(result);
          result.rows.forEach((row, i) => {
            // A reply of no words at all, or of white space only: its role chunk, as any text reply's, and its text;
            // white space beside calls is no content (as the whole reply's).
            if (roleWaits[i]) {
              roleWaits[i] = false;
              sse(chunk(kind, head as ReplyHeader, [deltaChoice(kind, i, '', true)], usageNull));
            }
            const space = spaceHeld[i];
            if (space && (callsSent[i] ?? 0) === 0 && argumentsStreamed[i]?.size === 0)
              sse(chunk(kind, head as ReplyHeader, [deltaChoice(kind, i, space, false)], usageNull));
            sse(
              chunk(kind, head as ReplyHeader, [finalChoice(kind, i, row.finishReason)], {
                ...usageNull,
                kvdesk: extras,
              }),
            );
          });
          if (mapped.includeUsage) sse(chunk(kind, head, [], { usage }));
          sse('[DONE]');
          res.end();
          return;
        }
        case 'error': {
          finish();
          const err = errorFromInfo(frame.error, paramHint);
          if (!res.headersSent) {
            sendHttpError(res, err);
            return;
          }
          // After admission the status is already 200: the error travels in the stream, as OpenAI's does.
          sse(withoutFolders(res, err.body));
          res.end();
          return;
        }
      }
    },
    sendHttpError,
    paramHint,
  );
}

/** A generation an HTTP response is streaming or waiting for, and how to stop it. */
export interface LiveGeneration {
  res: ServerResponse;
  cancel(reason: 'shutdown'): void;
  /** Settles when the response has been written out, or its connection is gone. */
  over: Promise<void>;
}

/**
 * The HTTP requests' generations in flight, of every server of this process: a server that stops cancels its own
 * (reason 'shutdown', which the client reads as a retryable 503 or a stream's last error event) before it cuts
 * their connections.
 */
export const liveGenerations = new Set<LiveGeneration>();

/** Whether the request's client has gone: its connection is closed (or the response destroyed). */
export function clientGone(req: IncomingMessage, res: ServerResponse): boolean {
  return res.destroyed || req.socket.destroyed;
}

/**
 * Runs one host generation for an HTTP request (loading a library package it names first, see
 * HostApi.ensureModel); resolves when the response is complete (the handler called
 * `finish`) or the client is gone, never rejects. A client already gone when its model is ready is never
 * submitted (nothing accepted, reserved or evicted for it). Frames go to `handleFrame` until then. A failure inside it
 * answers the client (an error in the API's shape if nothing was sent yet, else the socket closes) and cancels the generation; a
 * client that goes away cancels it too (reason 'disconnect', which returns its reservation).
 */
export async function runGeneration(
  hostApi: HostApi,
  request: GenerateRequest,
  req: IncomingMessage,
  res: ServerResponse,
  handleFrame: (frame: StreamFrame, finish: () => void) => void,
  /** How the API answers an error (its own shape). */
  sendError: (res: ServerResponse, err: HttpError) => void = sendHttpError,
  /** The API's names of the fields an error of its own (a model that cannot load) names, as its other errors. */
  paramHint?: ParamHint,
  /** Ollama's `keep_alive` (HostApi.ensureModel): absent, the default time to live. */
  keepAliveMs?: number | null,
): Promise<void> {
  // A library package the request names is loaded first (just in time); its failure is the answer.
  try {
    // Named as Ollama lists it (`default:latest`): the model itself.
    const model = await apiModelName(hostApi, request.model);
    if (model !== request.model) request = { ...request, model };
    // Gone already (while the route read the library): no load for it, which could unload another model.
    if (clientGone(req, res)) return;
    await hostApi.ensureModel(request.model, keepAliveMs);
  } catch (err) {
    if (!res.headersSent && !res.destroyed) sendError(res, errorFromInfo(toErrorInfo(err), paramHint));
    return;
  }
  // A client that left while its model loaded (or while the route read the library first) is not submitted:
  // admitted, it would reserve KV and evict idle sessions' for a reply nobody reads. Its connection closed during
  // those waits, so no 'close' is still to come: the socket says it.
  if (clientGone(req, res)) return;
  let resolve!: () => void;
  const done = new Promise<void>((r) => {
    resolve = r;
  });
  let over = false;
  const finish = () => {
    over = true;
    resolve();
  };
  let handle: { cancel(reason?: 'user' | 'disconnect' | 'shutdown'): void } | null = null;
  let cancelOnStart = false;
  const onFrame = (frame: StreamFrame) => {
    if (over) return;
    // The response names the host's request (its first frame may come before generate returns).
    setRequestId(res, frame.requestId);
    try {
      handleFrame(frame, finish);
    } catch (err) {
      // The host swallows errors thrown by a frame sink, so a failure here must answer the client itself.
      const running = !over && frame.type !== 'done' && frame.type !== 'error';
      finish();
      if (!res.headersSent) sendError(res, errorFromInfo(toErrorInfo(err), paramHint));
      else res.destroy();
      if (running) {
        if (handle) handle.cancel('disconnect');
        else cancelOnStart = true;
      }
    }
  };
  const h = hostApi.generate(request, onFrame);
  handle = h;
  setRequestId(res, h.requestId);
  if (cancelOnStart) h.cancel('disconnect');
  if (!over) {
    // Over once the response is out (its last event written after the generation's end), not at that end.
    const out = new Promise<void>((settle) => {
      if (res.writableFinished || res.destroyed) settle();
      else res.once('close', () => settle());
    });
    const entry: LiveGeneration = { res, cancel: (reason) => h.cancel(reason), over: out };
    liveGenerations.add(entry);
    // Kept until the response is out: a stop waits for one whose generation ended but whose bytes are still going.
    void out.then(() => liveGenerations.delete(entry));
  }
  res.on('close', () => {
    if (over) return;
    finish();
    h.cancel('disconnect');
  });
  // The socket may already be gone (a client that sent its body and left at once).
  if (req.socket.destroyed && !over) {
    finish();
    h.cancel('disconnect');
  }
  return done;
}
