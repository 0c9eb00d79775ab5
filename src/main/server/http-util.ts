/**
 * Small HTTP helpers shared by the routes: bounded body reading, JSON replies
 * and the OpenAI-shaped error envelope every route answers with.
 */
import { isUtf8 } from 'node:buffer';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ToolCallDelta } from '../../shared/contract';
import type { ErrorCode, ErrorInfo } from '../../shared/errors';
import { firstBadUtf8, type Utf8Fault } from '../../shared/utf8';
import { withoutFolders } from './hide-paths';
import { BYTES_PER_VALUE, countJsonValues, grouped } from './json-guard';

/** Headers on every API answer: nothing is cacheable, nothing is sniffed. */
export const API_HEADERS: Readonly<Record<string, string>> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
};

/**
 * The headers that carry a response's request id: OpenAI's SDKs read `x-request-id`, Anthropic's `request-id`
 * (their `_request_id`, and an error's `requestID`).
 */
export const REQUEST_ID_HEADERS = ['x-request-id', 'request-id'] as const;

/** The longest client request id echoed back (a longer one is not an id a log line should carry). */
export const MAX_CLIENT_REQUEST_ID = 128;

/**
 * The request id a client sent in its own `x-request-id` header, when it is one to echo: 1 to 128 printable ASCII
 * characters (not only spaces); else undefined (none, or one kvdesk will not write back into a header).
 */
export function clientRequestId(req: IncomingMessage | undefined): string | undefined {
  const sent = req?.headers['x-request-id'];
  if (typeof sent !== 'string' || sent.length > MAX_CLIENT_REQUEST_ID) return undefined;
  return /^[\x20-\x7e]+$/.test(sent) && sent.trim().length > 0 ? sent : undefined;
}

/**
 * Names the request a response answers in its request id headers (until its headers are sent): the server gives
 * each request a fresh id, and a generation's is the host's own (the inspector's, and the reply's `chatcmpl-…`,
 * `msg_…`, `resp_…` id). A client that sent its own `x-request-id` (clientRequestId) gets it back there, so its
 * logs and the answer agree; `request-id` is kvdesk's id either way.
 */
export function setRequestId(res: ServerResponse, id: string): void {
  if (res.headersSent) return;
  const own = clientRequestId(res.req);
  for (const name of REQUEST_ID_HEADERS) res.setHeader(name, name === 'x-request-id' && own ? own : id);
}

/** A request id for a response that no generation answers (a model list, a refusal before one began). */
export const newRequestId = (): string => randomUUID();

/** An OpenAI-compatible error body: `{ error: { message, type, code, param, …numbers } }`. */
export interface OpenAiErrorBody {
  error: {
    message: string;
    type: string;
    code: string | null;
    param: string | null;
    [key: string]: unknown;
  };
}

/** An HTTP-level failure with its status and OpenAI-shaped body; routes throw it, the server answers it. */
export class HttpError extends Error {
  readonly status: number;
  readonly body: OpenAiErrorBody;
  readonly headers: Record<string, string>;
  /** The host contract's name of the field at fault, when a host refusal named one. */
  field?: string;
  constructor(status: number, body: OpenAiErrorBody, headers: Record<string, string> = {}) {
    super(body.error.message);
    this.name = 'HttpError';
    this.status = status;
    this.body = body;
    this.headers = headers;
  }
}

/** Builds an HttpError from a status, a message and an OpenAI error code. */
export function httpError(
  status: number,
  message: string,
  code: string | null,
  param: string | null = null,
): HttpError {
  return new HttpError(status, { error: { message, type: errorType(status), code, param } });
}

function errorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'invalid_request_error';
  if (status === 413) return 'invalid_request_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** HTTP status and OpenAI code of each kvdesk error code. */
const STATUS: Record<ErrorCode, { status: number; code: string }> = {
  BAD_REQUEST: { status: 400, code: 'invalid_request' },
  PACKAGE_INVALID: { status: 422, code: 'package_invalid' },
  MODEL_LOAD_FAILED: { status: 422, code: 'model_load_failed' },
  MODEL_NOT_LOADED: { status: 404, code: 'model_not_found' },
  TOKEN_OUT_OF_VOCAB: { status: 400, code: 'token_out_of_vocab' },
  CONTEXT_OVERFLOW: { status: 400, code: 'context_length_exceeded' },
  KV_BUDGET_EXCEEDED: { status: 400, code: 'kv_budget_exceeded' },
  QUEUE_FULL: { status: 429, code: 'queue_full' },
  // Only a server-side cancel (shutdown) is ever answered: a disconnected client reads nothing.
  CANCELLED: { status: 503, code: 'cancelled' },
  TIMEOUT: { status: 504, code: 'timeout' },
  ENGINE_FAILED: { status: 500, code: 'engine_failed' },
  NOT_ADMITTED: { status: 500, code: 'internal_error' },
  SESSION_INVALID: { status: 409, code: 'session_invalid' },
  DOWNLOAD_FAILED: { status: 502, code: 'download_failed' },
  SAVE_CONFLICT: { status: 409, code: 'save_conflict' },
  INTERNAL: { status: 500, code: 'internal_error' },
};

/** The OpenAI parameter a kvdesk error is about, when there is one. */
const PARAM: Partial<Record<ErrorCode, string>> = {
  MODEL_NOT_LOADED: 'model',
  CONTEXT_OVERFLOW: 'messages',
  TOKEN_OUT_OF_VOCAB: 'prompt',
};

/**
 * The OpenAI parameter of a field the host named in a refusal (its contract's names are camelCase). The
 * Responses API puts the schema in `text.format` and a tool's fields on the tool itself.
 */
function openAiParam(field: string, api: ParamApi): string {
  if (field.startsWith('jsonSchema')) {
    return api === 'responses' ? 'text.format' : api === 'anthropic' ? 'output_config.format' : 'response_format';
  }
  if (field.startsWith('toolChoice')) return 'tool_choice';
  // What asked a thinking model to reason, or not: each API's own switch.
  if (field === 'thinking')
    return api === 'responses'
      ? 'reasoning.effort'
      : api === 'anthropic'
        ? 'thinking'
        : 'chat_template_kwargs.enable_thinking';
  if (field === 'maxNewTokens') return api === 'responses' ? 'max_output_tokens' : 'max_tokens';
  // A completion's prompt, whichever form it came in (text, texts, ids, rows of ids).
  if (/^(prompts|promptIds|promptIdRows)(\[|$)/.test(field)) return field.replace(/^\w+/, 'prompt');
  if (api === 'anthropic') field = field.replace(/^tools\[(\d+)\]\.parameters/, 'tools[$1].input_schema');
  // The contract's own names become snake_case; a tool's parameters schema keeps the client's names.
  const cut = field.search(/\.parameters(\.|$)/);
  const head = (cut >= 0 ? field.slice(0, cut) : field)
    .replace(/^sampling\./, '')
    .replace(/^messages\[(\d+)\]\.toolCalls\[(\d+)\]\.(name|arguments)/, 'messages[$1].tool_calls[$2].function.$3')
    .replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  const snake = head + (cut >= 0 ? field.slice(cut) : '');
  return api !== 'chat'
    ? snake
    : snake.replace(/^tools\[(\d+)\]\.(parameters|name|description)/, 'tools[$1].function.$2');
}

/** The client's name of the host's prompt (`prompts[j]`, `promptIdRows[j]`). */
function promptParam(field: string, hint: ParamHint): string | undefined {
  const m = /^(?:prompts|promptIdRows)\[(\d+)\]/.exec(field);
  if (!m) return undefined;
  return `${hint.prompt}[${m[1]}]${field.slice(m[0].length)}`;
}

/** Which API's parameter names a refusal uses. */
export type ParamApi = 'chat' | 'responses' | 'anthropic';

/**
 * Where one of the host request's messages came from in the client's body (Responses items and Anthropic
 * blocks do not map one to one onto chat messages): its place, its tool result's call id, and each of its calls.
 */
export interface MessageOrigin {
  path: string;
  toolCallId?: string;
  calls?: string[];
}

/** How a refusal names things for one API: its parameter names, and where the request's messages came from. */
export interface ParamHint {
  /** The parameter that holds the prompt (context overflow, tokens out of vocabulary). */
  prompt: string;
  api?: ParamApi;
  /** One per message of the host request, where they are not the body's own `messages`. */
  origins?: readonly MessageOrigin[];
  /** false: the message keeps the host's words (Ollama's errors add Ollama's name of the field themselves). */
  rename?: boolean;
  /**
   * The request asked for `"truncation": "auto"` (kvdesk left out the oldest turns as needed), `tools` whether it
   * sent tools: a prompt still too long is its system messages (and tools) with the last turn alone.
   */
  truncation?: { tools: boolean; system: boolean };
}

/** The name of a tool result's call id, and of a call's arguments, in each API. */
const CALL_ID: Record<ParamApi, string> = { chat: 'tool_call_id', responses: 'call_id', anthropic: 'tool_use_id' };
const ARGUMENTS: Record<ParamApi, string> = { chat: 'function.arguments', responses: 'arguments', anthropic: 'input' };
/** Where the JSON output asked for is set in each API. */
const JSON_OUTPUT: Record<ParamApi, string> = {
  chat: 'response_format',
  responses: 'text.format',
  anthropic: 'output_config.format',
};

/** Where a tool's parameters schema is in each API. */
const TOOL_SCHEMA: Record<ParamApi, string> = {
  chat: 'function.parameters',
  responses: 'parameters',
  anthropic: 'input_schema',
};

/** A message path the host named (`messages[2]`, `messages[2].toolCallId`, `messages[2].toolCalls[0].arguments`). */
const MESSAGE_PATH = /messages\[(\d+)\](?:\.toolCallId|\.toolCalls\[(\d+)\](?:\.(arguments|name))?)?/g;

/** A host message path as the client wrote it: through `origins` where given, else in Chat Completions' names. */
function clientMessagePath(path: string, api: ParamApi, origins: readonly MessageOrigin[] | undefined): string {
  const m = /^messages\[(\d+)\](?:(\.toolCallId)|\.toolCalls\[(\d+)\](?:\.(arguments|name))?)?(.*)$/.exec(path);
  if (!m) return path;
  const [, index, callId, call, sub, rest] = m;
  const origin = origins?.[Number(index)];
  const base = origin?.path ?? `messages[${index}]`;
  if (callId) return origin?.toolCallId ?? `${base}.${CALL_ID[api]}`;
  if (call === undefined) return `${base}${rest}`;
  const at = origin?.calls?.[Number(call)] ?? `${base}.tool_calls[${call}]`;
  if (sub === undefined) return `${at}${rest}`;
  return `${at}.${sub === 'arguments' ? ARGUMENTS[api] : origin ? 'name' : 'function.name'}`;
}

/**
 * A host refusal's text in the API's own names: the messages it names where the client wrote them, the field
 * at fault as its parameter, and the contract's names of the fields it mentions (`toolChoice (tool_choice)`).
 */
function clientMessage(message: string, field: string | undefined, param: string | null, hint: ParamHint): string {
  const api = hint.api ?? 'chat';
  const text = message
    .replace(MESSAGE_PATH, (path) => clientMessagePath(path, api, hint.origins))
    .replace(/\btoolCallId \(tool_call_id\)/g, CALL_ID[api])
    // A choice named with its value, as each API writes it (Anthropic's is an object).
    .replace(/\btoolChoice \(tool_choice\) "(none|auto)"/g, (_, v: string) =>
      api === 'anthropic' ? `tool_choice {"type": "${v}"}` : `tool_choice "${v}"`,
    )
    .replace(/\btoolChoice \(tool_choice\)/g, 'tool_choice')
    .replace(/\bsampling\.logitBias \(logit_bias\)/g, 'logit_bias')
    .replace(/\(responseFormat \/ jsonSchema\)/g, `(${JSON_OUTPUT[api]})`)
    .replace(
      /\bjsonSchema \(json_schema\.schema\)/g,
      `${JSON_OUTPUT[api]}${api === 'chat' ? '.json_schema' : ''}.schema`,
    )
    // A tool's schema where each API keeps it (the Responses API keeps it on the tool itself).
    .replace(/\btools\[(\d+)\]\.parameters\b/g, (_, i: string) => `tools[${i}].${TOOL_SCHEMA[api]}`)
    // The contract's names of the other fields a tool-choice or JSON refusal mentions.
    .replace(/\btools\[(\d+)\]\.name\b/g, (_, i: string) => `tools[${i}].${api === 'chat' ? 'function.name' : 'name'}`);
  if (field === undefined || param === null || field.startsWith('messages[')) return text;
  const named = text.replace(/^invalid generate request: field [^:]+:/, `invalid ${param}:`);
  // Only a path-like name (`sampling.topP`, `tools[0].name`) is replaced in the rest: a plain word may be prose too.
  return /[.[]/.test(field) ? named.split(field).join(param) : named;
}

/** Whether a generation request sends a system prompt or system messages (ParamHint.truncation). */
export function sendsSystem(req: { system?: string; messages?: ReadonlyArray<{ role: string }> }): boolean {
  return req.system !== undefined || req.messages?.some((m) => m.role === 'system') === true;
}

/**
 * A prompt the context cannot take, in OpenAI's words, which clients match (LiteLLM's ContextWindowExceededError
 * reads "maximum context length"), the numbers said once, and what to do in that API's terms: the whole message
 * (the host's explanation, which says the numbers again and speaks of chats, is left out). Anthropic's route says
 * it in Anthropic's words (anthropicError).
 */
function openAiTooLong(info: ErrorInfo, param: string | null, hint: ParamHint): string | undefined {
  const { promptTokens, contextLength, sessionTokens, countedUpTo } = info.detail ?? {};
  if (info.code !== 'CONTEXT_OVERFLOW' || hint.api === 'anthropic') return undefined;
  if (typeof promptTokens !== 'number' || typeof contextLength !== 'number') return undefined;
  const tokens = promptTokens + (typeof sessionTokens === 'number' ? sessionTokens : 0);
  const what = param ?? hint.prompt;
  const head = `This model's maximum context length is ${contextLength} tokens. However, your ${what} resulted in ${countedUpTo !== undefined ? 'at least ' : ''}${tokens} tokens`;
  const room = 'which leaves no room for a reply';
  // With truncation "auto" every earlier turn was left out already: what is left cannot be (as Ollama's /api/chat).
  if (hint.truncation && hint.prompt !== 'prompt') {
    // What it sent of these, no more.
    const kept = [
      ...(hint.truncation.system
        ? [hint.api === 'responses' ? 'the instructions, system messages' : 'the system messages']
        : []),
      ...(hint.truncation.tools ? ['the tools'] : []),
    ].join(', ');
    if (kept === '') {
      return `${head} with only the last turn kept, ${room} ("truncation": "auto" leaves out the earlier turns, never the last). Shorten it, or use a model with a longer context.`;
    }
    return `${head} with only ${kept} and the last turn kept, ${room} ("truncation": "auto" leaves out the earlier turns, never these). Shorten them, or use a model with a longer context.`;
  }
  // Completions: one prompt (or prompt[i] of several); chat completions and Responses: a conversation, whose
  // oldest turns kvdesk leaves out with truncation "auto".
  const advice =
    hint.prompt === 'prompt'
      ? `Shorten ${what === 'prompt' ? 'the prompt' : `${what} or leave it out`}, or use a model with a longer context.`
      : `Shorten the ${what}, or leave out the oldest turns ("truncation": "auto" has kvdesk do that).`;
  return `${head}, ${room}. ${advice}`;
}

/** Detail keys renamed to the names llama.cpp and vLLM clients already read. */
const DETAIL_NAMES: Record<string, string> = {
  promptTokens: 'n_prompt_tokens',
  contextLength: 'n_ctx',
};

function snakeCase(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * Maps a kvdesk error to its HTTP answer: status, OpenAI code, our numbers in
 * snake_case (required_bytes, budget_bytes, n_prompt_tokens, n_ctx, …) and,
 * for a full queue, Retry-After in whole seconds.
 */
export function errorFromInfo(info: ErrorInfo, paramHint?: ParamHint): HttpError {
  const mapped = STATUS[info.code] ?? STATUS.INTERNAL;
  let param: string | null = PARAM[info.code] ?? null;
  if (param !== null && param !== 'model' && paramHint) param = paramHint.prompt;
  const field = typeof info.detail?.field === 'string' ? info.detail.field : undefined;
  if (paramHint && info.code === 'BAD_REQUEST' && field !== undefined) {
    const api = paramHint.api ?? 'chat';
    // The prompt as a whole is the API's own prompt parameter (`input` in the Responses API).
    param =
      field === 'messages' || field === 'prompt'
        ? paramHint.prompt
        : field.startsWith('messages[')
          ? clientMessagePath(field, api, paramHint.origins)
          : openAiParam(field, api);
  }
  // One of several prompts, whatever the refusal (too long for the context or the budget, ids out of vocabulary).
  const prompt = paramHint && field !== undefined ? promptParam(field, paramHint) : undefined;
  if (prompt !== undefined) param = prompt;
  let message =
    paramHint && paramHint.rename !== false ? clientMessage(info.message, field, param, paramHint) : info.message;
  const overflow = paramHint && paramHint.rename !== false ? openAiTooLong(info, param, paramHint) : undefined;
  if (overflow !== undefined) message = overflow;
  const numbers: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(info.detail ?? {})) {
    if (value !== undefined) numbers[DETAIL_NAMES[key] ?? snakeCase(key)] = value;
  }
  // The field at fault is `param`, in the client's names; the contract's name stays on the error (Ollama's names).
  if (paramHint && param !== null) delete numbers.field;
  const headers: Record<string, string> = {};
  // A person cancelled it (Stop in the window or the inspector): clients that retry 5xx (the OpenAI and
  // Anthropic SDKs) must not send it again. A shutdown's cancel may be retried once the server is back.
  if (info.code === 'CANCELLED') headers['x-should-retry'] = info.detail?.reason === 'shutdown' ? 'true' : 'false';
  if (info.code === 'QUEUE_FULL') {
    const ms = typeof info.detail?.retryAfterMs === 'number' ? info.detail.retryAfterMs : 1000;
    headers['retry-after'] = String(Math.max(1, Math.ceil(ms / 1000)));
  }
  const error = new HttpError(
    mapped.status,
    {
      error: {
        ...numbers,
        message,
        type: errorType(mapped.status),
        code: mapped.code,
        param,
        kvdesk_code: info.code,
      },
    },
    headers,
  );
  if (field !== undefined) error.field = field;
  return error;
}

/** Headers of a server-sent event stream. */
export const SSE_HEADERS = streamHeaders('text/event-stream; charset=utf-8');

/** Headers of a response streamed as it is written (server-sent events, newline-delimited JSON). */
export function streamHeaders(contentType: string): Readonly<Record<string, string>> {
  return {
    ...API_HEADERS,
    'content-type': contentType,
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    // Reverse proxies (nginx) would otherwise buffer the stream.
    'x-accel-buffering': 'no',
  };
}

/** Writes named server-sent events (`event: <type>` then the JSON), as the Responses and Anthropic streams are. */
export function writeEvents(res: ServerResponse, events: ReadonlyArray<{ type: string }>): void {
  for (const e of events) res.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
}

/**
 * JSON text a body carries as it was written (a call's arguments: JSON.parse would round 500444428064428312 and
 * write a long integer as 2.1767856718508063e+53). jsonText writes it in place; JSON.stringify, as parsed.
 */
export class RawJson {
  constructor(readonly text: string) {
    JSON.parse(text); // only JSON goes into a body
  }

  toJSON(): unknown {
    return JSON.parse(this.text);
  }
}

/**
 * A message's text parts (blocks) as one text: one per line, as vLLM joins them ("Summarize the file." and "The
 * file says hi." glued would read as one sentence) — but where a part already ends or the next begins with a line
 * break, nothing is added: a reply kvdesk streamed in several blocks (text, reasoning, text) and sent back whole is
 * the text the model wrote.
 */
export function joinTextParts(texts: readonly string[]): string {
  let out = '';
  for (const [i, t] of texts.entries()) {
    if (i > 0 && !out.endsWith('\n') && !t.startsWith('\n')) out += '\n';
    out += t;
  }
  return out;
}

/** A body's JSON with each RawJson's text as it was written. */
export function jsonText(body: unknown): string {
  const raws: string[] = [];
  // A mark no string of the body holds: each raw value goes out as a string holding it, then takes its place.
  const mark = `kvdesk-raw-${randomUUID()}-`;
  const text = JSON.stringify(body, function (this: Record<string, unknown>, key, value) {
    const held = this[key];
    if (!(held instanceof RawJson)) return value;
    raws.push(held.text);
    return `${mark}${raws.length - 1}`;
  });
  if (raws.length === 0) return text;
  return text.replace(new RegExp(`"${mark}(\\d+)"`, 'g'), (_, i: string) => raws[Number(i)] as string);
}

/** Sends a JSON answer. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  sendJsonText(res, status, JSON.stringify(body), headers);
}

/** Sends JSON already written (jsonText's). */
export function sendJsonText(
  res: ServerResponse,
  status: number,
  text: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...API_HEADERS,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

/** Sends an HttpError as its JSON body (to a page of another origin, naming no folder of this computer: hide-paths.ts). */
export function sendHttpError(res: ServerResponse, err: HttpError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, err.status, withoutFolders(res, err.body), err.headers);
}

/**
 * The bytes of request bodies held in memory at once, across requests, under one cap: each body may be up to its
 * route's limit, but a few clients sending many large bodies together would otherwise have them all buffered (and
 * the server run out of memory). A body that finds no room is refused (503 with Retry-After; 413 if it alone is over
 * the cap). Uploads streamed to disk are not counted.
 */
export class BodyBudget {
  /** The bytes of the bodies being read now. */
  held = 0;
  constructor(
    readonly cap: number,
    /** How the person running the server raises the cap, for the refusal's message (`kvdesk serve`'s flag). */
    readonly raise?: string,
  ) {}

  /** Throws the 413 of a body of `bytes` (as much as it has, or says it has) that no room could ever hold. */
  check(bytes: number): void {
    if (bytes > this.cap) {
      const err = httpError(
        413,
        `The request body has ${bytes} bytes or more, more than the ${this.cap} bytes of request bodies this server holds in memory at once. Send less${this.raise ? `, or ${this.raise}` : ''}.`,
        'payload_too_large',
      );
      err.body.error.limit_bytes = this.cap;
      throw err;
    }
  }

  /**
   * Takes `bytes` more of room for a body that now has `total` bytes (those included), or throws the refusal: its
   * 413 where `total` alone is over the cap, else a 503 where the others leave no room now.
   */
  take(bytes: number, total: number): void {
    this.check(total);
    if (this.held + bytes > this.cap) {
      const others = this.held - (total - bytes);
      const err = httpError(
        503,
        `The server is reading other request bodies (${others} bytes of the ${this.cap} it holds in memory at once) and has no room for this one's ${total} bytes now. Send it again in a moment.`,
        'server_busy',
      );
      err.body.error.limit_bytes = this.cap;
      err.headers['retry-after'] = '1';
      throw err;
    }
    this.held += bytes;
  }

  give(bytes: number): void {
    this.held -= bytes;
  }
}

/**
 * Reads a request body into memory, refusing (413) anything over `limit` bytes
 * before reading it when Content-Length says so, and while reading otherwise. With a `budget`, its bytes are
 * counted there as its chunks come (a Content-Length over the cap alone is refused at once), and given back once read.
 * A body that stops coming for the connection's idle timeout is a 408 (bodyStalled).
 */
export function readBody(req: IncomingMessage, limit: number, raise?: string, budget?: BodyBudget): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  const known = req.headers['content-length'] !== undefined && Number.isFinite(declared);
  if (known && declared > limit) {
    return Promise.reject(tooLarge(declared, limit, raise));
  }
  // Its room is taken as its bytes come, not at what Content-Length says: a client that says 32 MiB and sends one
  // byte would hold that room while it stalls, and a few such would have every other body refused.
  if (budget && known) {
    try {
      budget.check(declared);
    } catch (err) {
      return Promise.reject(err);
    }
  }
  /** The bytes this body holds of the budget. */
  let taken = 0;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const settle = () => {
      done = true;
      chunks.length = 0;
      budget?.give(taken);
      taken = 0;
    };
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        settle();
        reject(tooLarge(size, limit, raise));
        return;
      }
      if (budget && size > taken) {
        try {
          budget.take(size - taken, size);
          taken = size;
        } catch (err) {
          settle();
          reject(err);
          return;
        }
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (done) return;
      const body = Buffer.concat(chunks, size);
      settle();
      resolve(body);
    });
    req.on('error', (err) => {
      if (done) return;
      settle();
      reject(err);
    });
    // A body that stops coming (a stalled client) holds its request, and its bytes, only until the connection's
    // idle timeout (the server sets no limit on a request's total time). The socket's timeout counts since its last byte.
    req.on('timeout', () => {
      if (done) return;
      settle();
      reject(bodyStalled(req.socket.timeout));
    });
    // A client gone mid-body emits no 'end' (nor always an 'error'): its bytes are given back.
    req.on('close', () => {
      if (done) return;
      settle();
      reject(new Error('the client closed the connection before the end of its body'));
    });
  });
}

/** A 408 for a body that stopped coming: nothing for `ms` (the connection's idle timeout); the connection closes. */
export function bodyStalled(ms: number | undefined): HttpError {
  const wait = ms === undefined ? 'a while' : ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
  const err = httpError(
    408,
    `The request body stopped arriving: nothing came for ${wait}, so the request is dropped and its connection closed. Send the whole body without pausing.`,
    'request_timeout',
  );
  err.headers.connection = 'close';
  return err;
}

/** What is read and dropped of a body answered before it was read, at most, before its connection is closed. */
const DRAIN_BYTES = 64 * 1024 ** 2;
const DRAIN_MS = 10_000;

/**
 * A request answered before its body was read (a 413, an upload refused): the rest of its body is read and dropped,
 * and the connection then serves the next request. Closed at once, a connection still receiving is reset by the
 * kernel, and a client that sends its whole body before it reads the answer (Node's fetch, the OpenAI and Anthropic
 * SDKs) got EPIPE or ECONNRESET instead of the 413 about half the time: "Connection error.", and the SDKs' retries
 * sent the body twice more. Past DRAIN_BYTES dropped, or DRAIN_MS, the connection is closed all the same.
 */
export function drainUnreadBody(req: IncomingMessage): void {
  if (req.complete) return;
  let dropped = 0;
  const close = () => {
    clearTimeout(timer);
    req.socket.destroy();
  };
  const timer = setTimeout(close, DRAIN_MS);
  timer.unref();
  req.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > DRAIN_BYTES) close();
  });
  req.once('end', () => clearTimeout(timer));
  req.once('close', () => clearTimeout(timer));
  req.resume();
}

/** `raise`: how the person running the server raises the limit (kvdesk serve's flag), where they can. */
export function tooLarge(size: number, limit: number, raise: string | undefined): HttpError {
  const err = httpError(
    413,
    `The request body has ${size} bytes or more; this endpoint accepts at most ${limit} bytes. Send less${raise ? `, or ${raise}` : ''}.`,
    'payload_too_large',
  );
  err.body.error.limit_bytes = limit;
  return err;
}

/**
 * Parses a JSON body, answering 400 with the parser's message when it is not JSON, and 413 without parsing it when
 * it holds more than `maxValues` values (json-guard.ts: JSON.parse's time and memory grow with them, on the one
 * thread every request is answered on). `raise`: how the person running the server raises the limit, where they can.
 */
export function parseJson(raw: Buffer, maxValues: number, raise?: string): unknown {
  // A UTF-8 byte order mark before the JSON (PowerShell's and Notepad's files send one) is no part of it: RFC 8259
  // lets a parser ignore it, and JSON.parse would refuse it. The guard counts the same bytes the parser reads.
  const body = hasUtf8Bom(raw) ? raw.subarray(3) : raw;
  if (countJsonValues(body, maxValues) > maxValues) {
    const err = httpError(
      413,
      `The request body holds more than ${grouped(maxValues)} JSON values (objects, arrays and the items in them); kvdesk reads at most ${grouped(maxValues)} in one body (one per ${BYTES_PER_VALUE} bytes of the body size limit, and at least a million). Send fewer${raise ? `, or ${raise}, which raises this limit with it` : ''}.`,
      'payload_too_large',
    );
    err.body.error.limit_values = maxValues;
    throw err;
  }
  // JSON is UTF-8 (RFC 8259): other bytes (Latin-1's é, 0xe9) would be read as U+FFFD and the model given text
  // the client never sent. Node's check first; the byte walk only says where.
  const fault = isUtf8(body) ? null : firstBadUtf8(body);
  if (fault) throw notUtf8(body, fault, body === raw ? 0 : 3);
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw httpError(400, `The request body is not valid JSON: ${(err as Error).message}`, 'invalid_json');
  }
}

/** A body whose bytes are not UTF-8 (`skipped`: the BOM's bytes before `body`), refused naming the first bad byte. */
function notUtf8(body: Uint8Array, fault: Utf8Fault, skipped: number): HttpError {
  const offset = skipped + fault.at;
  const byte = `0x${(body[fault.at] as number).toString(16).padStart(2, '0')}`;
  const err = httpError(
    400,
    `The request body is not UTF-8 text (byte ${byte} at offset ${offset}${fault.cut ? ', where the body ends inside a character' : ''}): send the JSON encoded as UTF-8, as RFC 8259 requires.`,
    'invalid_json',
  );
  err.body.error.byte_offset = offset;
  return err;
}

/** Whether `bytes` begin with UTF-8's byte order mark (EF BB BF). */
const hasUtf8Bom = (bytes: Uint8Array): boolean => bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;

/**
 * The order of one frame's parts on a stream of content blocks (Anthropic's blocks, the Responses API's items):
 * a frame's text comes before the calls it completes and the pieces of a call it opens, except while a call's
 * arguments stream (a held call holds no text): then that call's last pieces and its end come first, then the
 * text, then any call opened after it. `streaming`: the index of the call being streamed, or null.
 */
export function inFrameOrder(
  streaming: number | null,
  deltas: readonly ToolCallDelta[],
  steps: { text(): void; pieces(deltas: readonly ToolCallDelta[]): void; completed(): void },
): void {
  if (streaming === null) {
    steps.text();
    steps.pieces(deltas);
    steps.completed();
    return;
  }
  steps.pieces(deltas.filter((d) => d.index === streaming));
  steps.completed();
  steps.text();
  steps.pieces(deltas.filter((d) => d.index !== streaming));
}
