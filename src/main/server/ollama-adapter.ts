/**
 * Ollama's native API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/ps`, `/api/show`, `/api/version`) on
 * one side, kvdesk's GenerateRequest, GenerationResult and ModelInfo on the other: pure functions, as
 * anthropic-adapter.ts is for Anthropic's Messages API; ollama-routes.ts does the I/O.
 *
 * How Ollama's fields land on the contract:
 * - `messages` are chat turns as they are (Ollama's roles are the contract's). Ollama's history has no call
 *   ids, so each assistant `tool_calls` entry gets one (`call_<message>_<call>`, or the client's own `id`) and
 *   the `tool` messages after it answer those calls in order (a `tool_name` picks the first unanswered call
 *   of that name); the host refuses a result that answers no call and a call left unanswered.
 * - `/api/generate` is one user turn under `system` through the chat template, or, with `raw`, the prompt as
 *   written (the host's plain completion).
 * - `options` are the sampling settings under Ollama's names (`num_predict` below 1 leaves the length to the
 *   context); options that only matter when Ollama loads a model (`num_ctx`, `num_gpu`, …), and any option
 *   kvdesk does not know, are ignored, as Ollama ignores one it does not know; sampling kvdesk cannot do
 *   (mirostat, typical_p, tfs_z) is refused unless set to its neutral value.
 * - `format` is JSON mode (`"json"`) or structured output (a schema); images, `suffix`, `context` and
 *   `template` are refused with a 400 naming them.
 * - A thinking model's reasoning comes apart from its answer, in `thinking` (as Ollama's); `think` turns it on
 *   or off where the model's template has the switch (a level, gpt-oss's `"high"`…, is on).
 * Replies carry Ollama's `done_reason` and its nanosecond durations, taken from the host's timings.
 */
import type { ModelInfo } from '../../shared/api';
import {
  type ChatMessage,
  type FinishReason,
  type GenerateRequest,
  type GenerationResult,
  MAX_NEW_TOKENS,
  type ToolCall,
} from '../../shared/contract';
import { parseDuration } from '../../shared/duration';
import { type HttpError, httpError } from './http-util';
import {
  argumentsText,
  type Body,
  bad,
  boolean,
  conversationRequest,
  functionTools,
  kvdeskExtras,
  number,
  openAiFinishReason,
  present,
  repeatLastN,
  seedOf,
} from './openai-adapter';

/** Which generating endpoint a body came to. */
export type OllamaKind = 'chat' | 'generate';

/** An Ollama request translated for the host. */
export interface MappedOllamaRequest {
  kind: OllamaKind;
  /** The model name as the client wrote it: replies carry it back, as Ollama's do. */
  model: string;
  /** Ollama streams unless told `"stream": false`. */
  stream: boolean;
  /**
   * Nothing to generate (no messages, or an empty prompt): Ollama's way to load a model (a library package
   * loads; a loaded one stays), answered with `done_reason: "load"`. Then `request` is null.
   */
  request: GenerateRequest | null;
  /** With nothing to generate, `keep_alive` 0: Ollama's way to unload the model (`done_reason: "unload"`). */
  unload: boolean;
  /**
   * `keep_alive` in milliseconds (null: for ever), absent when not sent: how long a model loaded on first use
   * stays loaded without requests.
   */
  keepAliveMs?: number | null;
}

/** Ollama's `keep_alive`: seconds, or a duration such as "0", "90s", "5m", "1h30m"; negative is for ever. */
export function keepAlive(body: Body): number | null | undefined {
  if (!present(body, 'keep_alive')) return undefined;
  const ms = parseDuration(body.keep_alive);
  if (ms === undefined) {
    throw bad(
      `"keep_alive" must be a duration such as "5m" or "90s", a number of seconds, or -1 (for ever); got ${JSON.stringify(body.keep_alive)}.`,
      'keep_alive',
    );
  }
  return ms;
}

/** Ollama's default `repeat_last_n`: the repetition penalty looks at the last 64 tokens. */
export const OLLAMA_REPEAT_LAST_N = 64;

/** Sampling options kvdesk cannot honour, accepted only at the value that turns them off. */
const NEUTRAL_ONLY: ReadonlyArray<[string, number]> = [
  ['mirostat', 0],
  ['typical_p', 1],
  ['tfs_z', 1],
];

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A number under `options`, checked against the contract's range so the refusal names Ollama's field. */
function optionNumber(
  opts: Body,
  key: string,
  range: { min?: number; max?: number; minExclusive?: boolean; int?: boolean } = {},
): number | undefined {
  return number(opts, key, { ...range, field: `options.${key}` });
}

/** What `options` set on the request: its length, its stop strings and its sampling. */
interface MappedOptions {
  maxNewTokens?: number;
  stop?: string[];
  sampling: NonNullable<GenerateRequest['sampling']>;
}

/** Ollama's `options` (the Modelfile's parameters, per request). */
export function mapOptions(body: Body): MappedOptions {
  // The repetition penalty's window is Ollama's 64 tokens unless `options.repeat_last_n` says otherwise.
  const out: MappedOptions = { sampling: { repetitionWindow: OLLAMA_REPEAT_LAST_N } };
  if (!present(body, 'options')) return out;
  const opts = body.options;
  if (!isObject(opts)) throw bad('"options" must be an object such as {"temperature": 0.7}.', 'options');
  // An option kvdesk does not know is ignored, as Ollama ignores one it does not (clients pass their own
  // parameters through `options`, and the official clients list some kvdesk has no use for).
  for (const [key, neutral] of NEUTRAL_ONLY) {
    const v = optionNumber(opts, key);
    if (v !== undefined && v !== neutral) {
      throw bad(
        `"options.${key}" is not supported by kvdesk's sampler; leave it out (or send ${neutral}, which turns it off).`,
        `options.${key}`,
      );
    }
  }
  const s = out.sampling;
  const temperature = optionNumber(opts, 'temperature', { min: 0, max: 10 });
  if (temperature !== undefined) s.temperature = temperature;
  const topP = optionNumber(opts, 'top_p', { min: 0, max: 1 });
  if (topP !== undefined) s.topP = topP;
  // llama.cpp (and so Ollama) reads top_k ≤ 0 as "no limit", which is the contract's 0.
  const topK = optionNumber(opts, 'top_k', { int: true });
  if (topK !== undefined) s.topK = Math.max(0, topK);
  const minP = optionNumber(opts, 'min_p', { min: 0, max: 1 });
  if (minP !== undefined) s.minP = minP;
  // Ollama's -1 asks for a random one (what no seed gives); another negative is a seed, as in Ollama's sampler.
  const seed = seedOf(opts, 'seed', { field: 'options.seed' });
  if (seed !== undefined) s.seed = seed;
  const fp = optionNumber(opts, 'frequency_penalty', { min: -2, max: 2 });
  if (fp !== undefined && fp !== 0) s.frequencyPenalty = fp;
  const pp = optionNumber(opts, 'presence_penalty', { min: -2, max: 2 });
  if (pp !== undefined && pp !== 0) s.presencePenalty = pp;
  const rp = optionNumber(opts, 'repeat_penalty', { min: 0, minExclusive: true, max: 10 });
  if (rp !== undefined) s.repetitionPenalty = rp;
  // -1: every token; 0 turns the penalty off.
  repeatLastN(opts, s, { field: 'options.repeat_last_n' });
  const predict = optionNumber(opts, 'num_predict', { int: true });
  // -1 (no limit), -2 (fill the context) and any other value below 1: the context window ends the reply
  // (Ollama reads every negative value so, and 0 gives no limit either) — the largest reply, which the host clips
  // to the context; a larger number is as many as the context leaves too (runGeneration; the clip names it).
  if (predict !== undefined) out.maxNewTokens = predict > 0 ? predict : MAX_NEW_TOKENS;
  if (present(opts, 'stop')) {
    const v = opts.stop;
    const list = typeof v === 'string' ? [v] : v;
    if (!Array.isArray(list) || list.some((x) => typeof x !== 'string')) {
      throw bad('"options.stop" must be a list of strings.', 'options.stop');
    }
    const stops = (list as string[]).filter((x) => x.length > 0);
    if (stops.length > 0) out.stop = stops;
  }
  return out;
}

/** `format`: `"json"` (JSON mode) or a JSON schema (structured output); `""` is plain text. */
function formatOf(body: Body): Pick<GenerateRequest, 'responseFormat' | 'jsonSchema'> {
  const v = body.format;
  if (v === undefined || v === null || v === '') return {};
  if (v === 'json') return { responseFormat: 'json' };
  if (isObject(v)) return { jsonSchema: v };
  throw bad(`"format" must be "json" or a JSON schema object, got ${JSON.stringify(v)}.`, 'format');
}

/** Fields Ollama has that kvdesk cannot honour: refused when they ask for something. */
function refuseUnsupported(body: Body, kind: OllamaKind): void {
  if (kind !== 'generate') return;
  const nonEmpty = (k: string) =>
    present(body, k) && body[k] !== '' && !(Array.isArray(body[k]) && (body[k] as unknown[]).length === 0);
  if (nonEmpty('suffix')) {
    throw bad('"suffix" (fill-in-the-middle) is not supported by kvdesk; send the request without it.', 'suffix');
  }
  if (nonEmpty('images')) throw bad('"images" are not supported: kvdesk runs text models only.', 'images');
  if (nonEmpty('context')) {
    throw bad(
      '"context" is not supported: kvdesk returns no context arrays; send the conversation to /api/chat as messages instead (kvdesk caches its prompt, so resending it is cheap).',
      'context',
    );
  }
  if (nonEmpty('template')) {
    throw bad(
      '"template" is not supported: kvdesk renders the package\'s own chat template; send "raw": true with the prompt already templated instead.',
      'template',
    );
  }
}

/** A message's `content`: text (absent or null is empty). */
function contentOf(m: Record<string, unknown>, i: number): string {
  const c = m.content;
  if (c === undefined || c === null) return '';
  if (typeof c !== 'string') throw bad(`messages[${i}].content must be a string.`, `messages[${i}].content`);
  return c;
}

/** An assistant message's `tool_calls`, each with the id its results will answer. */
function callsOf(m: Record<string, unknown>, i: number): ToolCall[] | undefined {
  const v = m.tool_calls;
  if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return undefined;
  const where = `messages[${i}].tool_calls`;
  if (!Array.isArray(v)) throw bad(`${where} must be a list of {"function": {"name", "arguments"}}.`, where);
  return v.map((c, j) => {
    const fn = isObject(c) ? c.function : undefined;
    if (!isObject(c) || !isObject(fn) || typeof fn.name !== 'string') {
      throw bad(`${where}[${j}] must be {"function": {"name": …, "arguments": {…}}}.`, `${where}[${j}]`);
    }
    // Ollama sends arguments as an object; clients that speak OpenAI too may send its JSON text.
    let args: unknown = fn.arguments ?? {};
    if (typeof args === 'string') {
      try {
        args = JSON.parse(args);
      } catch {
        args = null;
      }
    }
    if (!isObject(args)) {
      throw bad(`${where}[${j}].function.arguments must be an object.`, `${where}[${j}].function.arguments`);
    }
    const id = typeof c.id === 'string' && c.id.length > 0 ? c.id : `call_${i}_${j}`;
    return { id, name: fn.name, arguments: argumentsText(args, `${where}[${j}].function.arguments`) };
  });
}

/**
 * Ollama's `messages` as chat turns. Tool results are matched to the calls of the assistant message before
 * them (see the file's comment); a call left unanswered, or a result for no call, is refused here in
 * Ollama's words.
 */
export function chatMessages(raw: unknown[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  // Calls of the latest assistant message still waiting for their result, and where each is.
  let pending: Array<{ call: ToolCall; where: string }> = [];
  const unanswered = (before: string) => {
    const first = pending[0] as { call: ToolCall; where: string };
    return bad(
      `${first.where} (${first.call.name}) has no tool result before ${before}: send a {"role": "tool", "tool_name": "${first.call.name}", "content": …} message for each call, right after the assistant message that made it.`,
      first.where,
    );
  };
  for (const [i, m] of raw.entries()) {
    if (!isObject(m)) throw bad(`messages[${i}] must be an object.`, `messages[${i}]`);
    // Ollama reads roles case-insensitively.
    const role = typeof m.role === 'string' ? m.role.toLowerCase() : m.role;
    if (role !== 'system' && role !== 'user' && role !== 'assistant' && role !== 'tool') {
      throw bad(
        `messages[${i}].role must be system, user, assistant or tool, got ${JSON.stringify(role)}.`,
        `messages[${i}].role`,
      );
    }
    if (Array.isArray(m.images) && m.images.length > 0) {
      throw bad(`messages[${i}].images are not supported: kvdesk runs text models only.`, `messages[${i}].images`);
    }
    const msg: ChatMessage = { role, content: contentOf(m, i) };
    if (role === 'assistant' && typeof m.thinking === 'string') msg.reasoning = m.thinking;
    if (role === 'tool') {
      const name = typeof m.tool_name === 'string' ? m.tool_name : typeof m.name === 'string' ? m.name : undefined;
      const given = typeof m.tool_call_id === 'string' ? m.tool_call_id : undefined;
      // By the id the client kept, else by name, else in order (clients may drop ids their history echoes).
      let at = given !== undefined ? pending.findIndex((p) => p.call.id === given) : -1;
      if (at < 0 && name !== undefined) at = pending.findIndex((p) => p.call.name === name);
      if (at < 0 && name === undefined) at = 0;
      const match = pending[at];
      if (at < 0 || !match) {
        const open = pending.map((p) => p.call.name).join(', ');
        throw bad(
          `messages[${i}] is a tool result${name ? ` of "${name}"` : ''} that answers no call of the assistant message before it (${open ? `still unanswered: ${open}` : 'it has no unanswered calls'}).`,
          `messages[${i}]`,
        );
      }
      pending.splice(at, 1);
      msg.toolCallId = match.call.id;
      msg.name = match.call.name;
    } else {
      if (pending.length > 0) throw unanswered(`messages[${i}]`);
      if (role === 'assistant') {
        const calls = callsOf(m, i);
        if (calls) {
          msg.toolCalls = calls;
          pending = calls.map((call, j) => ({ call, where: `messages[${i}].tool_calls[${j}]` }));
        }
      }
    }
    out.push(msg);
  }
  if (pending.length > 0) throw unanswered('the reply');
  return out;
}

/** `think`: true or false, or a level (gpt-oss's low, medium, high): on, at that effort. */
function thinkOf(body: Body): boolean | undefined {
  const think = body.think;
  if (think === undefined || think === null) return undefined;
  if (typeof think === 'boolean') return think;
  if (think === 'low' || think === 'medium' || think === 'high') return true;
  throw bad(`"think" must be true, false, "low", "medium" or "high", got ${JSON.stringify(think)}.`, 'think');
}

function modelName(body: Body): string {
  // `name` is the older spelling (still sent by some clients to /api/show).
  const v = body.model ?? body.name;
  if (typeof v !== 'string' || v.length === 0) {
    throw bad('"model" is required: name a loaded model (GET /api/tags lists them).', 'model');
  }
  return v;
}

/** Translates an `/api/chat` or `/api/generate` body; throws HttpError 400 naming the field for bad input. */
export function mapOllamaRequest(kind: OllamaKind, input: unknown): MappedOllamaRequest {
  if (!isObject(input)) throw bad('The request body must be a JSON object.', 'body');
  const body = input;
  const model = modelName(body);
  refuseUnsupported(body, kind);
  const stream = boolean(body, 'stream') ?? true;
  const options = mapOptions(body);
  const format = formatOf(body);
  const think = thinkOf(body);
  const fields = { maxNewTokens: options.maxNewTokens, stop: options.stop };

  let request: GenerateRequest | null;
  if (kind === 'chat') {
    if (present(body, 'messages') && !Array.isArray(body.messages)) {
      throw bad('"messages" must be a list of {"role", "content"}.', 'messages');
    }
    const raw = (body.messages as unknown[] | undefined) ?? [];
    const last = raw[raw.length - 1];
    // As Ollama: a conversation that ends with an assistant message is a reply to continue.
    const continues = isObject(last) && typeof last.role === 'string' && last.role.toLowerCase() === 'assistant';
    // With `format` too, the reply is calls or the JSON (Ollama has no tool_choice: its tools are "auto").
    const tools = functionTools(body.tools, { typeOptional: true });
    request = raw.length === 0 ? null : conversationRequest(model, null, chatMessages(raw), { ...fields, tools });
    // As Ollama: a conversation longer than the context loses its oldest turns (system messages stay).
    if (request) request.contextOverflow = 'drop-oldest';
    if (request && continues) request.continueFinal = true;
  } else {
    if (present(body, 'prompt') && typeof body.prompt !== 'string') throw bad('"prompt" must be a string.', 'prompt');
    if (present(body, 'system') && typeof body.system !== 'string') throw bad('"system" must be a string.', 'system');
    const prompt = (body.prompt as string | undefined) ?? '';
    const system = (body.system as string | undefined) ?? '';
    const raw = boolean(body, 'raw') ?? false;
    if (raw && system.length > 0) {
      throw bad('"system" has no place in a raw prompt: write it into the prompt, or send "raw": false.', 'system');
    }
    if (prompt.length === 0) request = null;
    else if (raw) {
      // The prompt as written, no template: one prompt, one reply, so the prompt cache applies.
      request = { model, prompt, promptCache: true };
      if (fields.maxNewTokens !== undefined) request.maxNewTokens = fields.maxNewTokens;
      if (fields.stop) request.stop = fields.stop;
    } else {
      request = conversationRequest(model, system, [{ role: 'user', content: prompt }], fields);
    }
  }
  if (request) {
    // conversationRequest knows temperature, top_p and top_k only; Ollama's options set more.
    if (Object.keys(options.sampling).length > 0) request.sampling = { ...request.sampling, ...options.sampling };
    if (format.responseFormat) request.responseFormat = format.responseFormat;
    if (format.jsonSchema) request.jsonSchema = format.jsonSchema;
    // A raw prompt is the model's text as written, its reasoning included.
    if (think !== undefined && request.prompt === undefined) request.thinking = think;
    // gpt-oss's levels: the template's reasoning_effort (and low bounds the reasoning, as OpenAI's low does).
    const level = body.think;
    if ((level === 'low' || level === 'medium' || level === 'high') && request.prompt === undefined) {
      request.reasoningEffort = level;
    }
  }
  const keep = keepAlive(body);
  return {
    kind,
    model,
    stream,
    request,
    unload: request === null && keep === 0,
    ...(keep !== undefined ? { keepAliveMs: keep } : {}),
  };
}

/** The `model` of an `/api/show` body (`model`, or the older `name`). */
export function showModelName(input: unknown): string {
  if (!isObject(input)) throw bad('The request body must be a JSON object such as {"model": "default"}.', 'body');
  return modelName(input);
}

/**
 * The loaded model an Ollama name means: the id itself, or the id with Ollama's default tag (`name:latest`).
 * Anything else is Ollama's 404.
 */
export function resolveModel(name: string, ids: readonly string[]): string {
  if (ids.includes(name)) return name;
  // Ids are NFC: a name written decomposed (as macOS writes folder names) is the same name.
  if (name.normalize('NFC') !== name) return resolveModel(name.normalize('NFC'), ids);
  const bare = name.endsWith(':latest') ? name.slice(0, -':latest'.length) : null;
  if (bare !== null && ids.includes(bare)) return bare;
  const known = ids.length > 0 ? ids.join(', ') : 'none';
  throw httpError(
    404,
    `model "${name}" not found: kvdesk knows ${known} (GET /api/tags lists them; add packages with --model or the UI).`,
    'model_not_found',
    'model',
  );
}

/** Ollama's `done_reason`: the reply ended by itself, or it ran out of room (tokens, context or budget). */
export function doneReason(reason: FinishReason): 'stop' | 'length' {
  return openAiFinishReason(reason) === 'length' ? 'length' : 'stop';
}

const ns = (ms: number) => Math.max(0, Math.round(ms * 1e6));

/**
 * Ollama's counts and durations (nanoseconds) of a finished reply: loading the model (`loadMs`, when the
 * request loaded it on first use) counts in the total; reading the prompt is admission to the first token,
 * generating the rest.
 */
export function replyMetrics(result: GenerationResult, loadMs = 0): Record<string, number> {
  const t = result.timings;
  const firstToken = t.ttftMs > 0 ? t.ttftMs : t.totalMs;
  return {
    total_duration: ns(t.totalMs + loadMs),
    load_duration: ns(loadMs),
    prompt_eval_count: result.promptTokens,
    prompt_eval_duration: ns(firstToken - t.queueMs),
    eval_count: result.rows[0]?.tokenIds.length ?? 0,
    eval_duration: ns(t.totalMs - firstToken),
  };
}

/**
 * Calls in Ollama's form: arguments as an object (the host gives their JSON text), the call's id beside. Parsed as
 * Ollama's server reads them (its numbers are Go float64s): the same values its clients get, never a number (1e400)
 * that a Go client could not read.
 */
export function ollamaToolCalls(calls: readonly ToolCall[], first = 0): Array<Record<string, unknown>> {
  return calls.map((c, i) => ({
    id: c.id,
    function: { index: first + i, name: c.name, arguments: JSON.parse(c.arguments) as unknown },
  }));
}

const now = () => new Date().toISOString();

/** The assistant message of a chat reply (or of one streamed piece of it), its reasoning in `thinking`. */
function assistantMessage(
  text: string,
  calls: readonly ToolCall[] | undefined,
  first = 0,
  thinking = '',
): Record<string, unknown> {
  const thought = thinking.length > 0 ? { thinking } : {};
  if (!calls || calls.length === 0) return { role: 'assistant', content: text, ...thought };
  // Only white space beside calls is no content.
  return {
    role: 'assistant',
    content: text.trim().length > 0 ? text : '',
    ...thought,
    tool_calls: ollamaToolCalls(calls, first),
  };
}

/** A reply's text for `kind`: chat's message, or generate's response (and its `thinking` beside it). */
function replyText(
  kind: OllamaKind,
  text: string,
  thinking: string,
  calls?: readonly ToolCall[],
  first = 0,
): Record<string, unknown> {
  if (kind === 'chat') return { message: assistantMessage(text, calls, first, thinking) };
  return { response: text, ...(thinking.length > 0 ? { thinking } : {}) };
}

/** The non-streamed reply of `/api/chat` or `/api/generate`. */
export function ollamaReply(
  kind: OllamaKind,
  model: string,
  result: GenerationResult,
  loadMs = 0,
): Record<string, unknown> {
  const row = result.rows[0];
  return {
    model,
    created_at: now(),
    ...replyText(kind, row?.text ?? '', row?.reasoning ?? '', row?.toolCalls),
    done: true,
    done_reason: doneReason(result.finishReason),
    ...replyMetrics(result, loadMs),
    // kvdesk's own facts, as its other APIs give them: a "length" the budget or the context caused says so.
    kvdesk: kvdeskExtras(result),
  };
}

/** One streamed line of a reply: its new text and reasoning, or (chat) the calls its latest tokens completed. */
export function ollamaChunk(
  kind: OllamaKind,
  model: string,
  text: string,
  calls?: readonly ToolCall[],
  first = 0,
  thinking = '',
): Record<string, unknown> {
  return {
    model,
    created_at: now(),
    ...replyText(kind, text, thinking, calls, first),
    done: false,
  };
}

/** The last streamed line: no text, the done reason, the counts and durations. */
export function ollamaFinalChunk(
  kind: OllamaKind,
  model: string,
  result: GenerationResult,
  loadMs = 0,
): Record<string, unknown> {
  return {
    ...doneLine(kind, model, doneReason(result.finishReason), replyMetrics(result, loadMs)),
    kvdesk: kvdeskExtras(result),
  };
}

/** The answer to a request with nothing to generate: Ollama's "load", or "unload" for `keep_alive` 0. */
export function loadReply(kind: OllamaKind, model: string, unload = false): Record<string, unknown> {
  return doneLine(kind, model, unload ? 'unload' : 'load');
}

/** A line that ends a reply without text of its own. */
function doneLine(
  kind: OllamaKind,
  model: string,
  reason: string,
  metrics: Record<string, number> = {},
): Record<string, unknown> {
  return {
    model,
    created_at: now(),
    ...(kind === 'chat' ? { message: { role: 'assistant', content: '' } } : { response: '' }),
    done: true,
    done_reason: reason,
    ...metrics,
  };
}

/** Facts about a loaded package that Ollama's listings want; what kvdesk does not know stays empty. */
export interface ModelFacts {
  /** When the package folder last changed (ISO 8601). */
  modifiedAt: string;
}

/** The package's weights precision, where its file names or manifest say it. */
function quantization(m: ModelInfo): string {
  const chosen = m.spec.variants?.find((v) => v.name === m.spec.selectedVariant);
  return chosen?.precision ?? m.spec.graphVariant ?? '';
}

/** Ollama's `details` of a model. The parameter count is not in a package's metadata: left empty. */
export function modelDetails(m: ModelInfo): Record<string, unknown> {
  const family = m.spec.modelType ?? '';
  return {
    parent_model: '',
    format: 'onnx',
    family,
    families: family ? [family] : null,
    parameter_size: '',
    quantization_level: quantization(m),
  };
}

/**
 * A model's name as Ollama lists it: with its tag (`default:latest`). Clients such as Open WebUI add `:latest`
 * to a name without one and look it up in the list, so a bare id would never be found; either form resolves.
 */
export function taggedName(id: string): string {
  return id.includes(':') ? id : `${id}:latest`;
}

/** A loaded model as `/api/tags` lists it. kvdesk keeps no manifest digests: `digest` is empty. */
export function tagJson(m: ModelInfo, facts: ModelFacts): Record<string, unknown> {
  return {
    name: taggedName(m.id),
    model: taggedName(m.id),
    modified_at: facts.modifiedAt,
    size: m.spec.weightsBytes,
    digest: '',
    details: modelDetails(m),
  };
}

/** The expiry of a model that stays loaded until unloaded (every model but one loaded on first use with a time to live). */
export const NEVER_EXPIRES = '9999-12-31T23:59:59Z';

/**
 * When a model loaded on first use goes if no request comes; NEVER_EXPIRES for the others, and for a time no
 * date can hold (one client's huge keep_alive must not make `/api/ps` fail for every client).
 */
function expiresAt(m: ModelInfo): string {
  if (!m.firstUse || m.firstUse.ttlMs === null) return NEVER_EXPIRES;
  const at = new Date(m.firstUse.lastUsedAt + m.firstUse.ttlMs);
  return Number.isNaN(at.getTime()) ? NEVER_EXPIRES : at.toISOString();
}

/** A loaded model as `/api/ps` lists it: its weights, on the accelerator unless it runs on the CPU. */
export function psJson(m: ModelInfo): Record<string, unknown> {
  return {
    name: taggedName(m.id),
    model: taggedName(m.id),
    size: m.spec.weightsBytes,
    digest: '',
    details: modelDetails(m),
    // A model loaded on first use goes once idle for its time to live; the others stay until unloaded.
    expires_at: expiresAt(m),
    size_vram: m.backend === 'cpu' ? 0 : m.spec.weightsBytes,
    context_length: m.spec.contextLength,
  };
}

/** The package's sampling defaults, as Ollama's `parameters` text writes a Modelfile's (name, value per line). */
function parametersText(m: ModelInfo): string {
  const s = m.spec.search;
  const lines: Array<[string, number | undefined]> = [
    // do_sample false: every face decodes it greedily (its temperature unused), which Ollama's temperature 0 is.
    ['temperature', s.doSample === false ? 0 : s.temperature],
    ['top_k', s.topK],
    ['top_p', s.topP],
    ['min_p', s.minP],
    ['repeat_penalty', s.repetitionPenalty],
    ['num_predict', s.maxNewTokens],
  ];
  return lines
    .filter((l): l is [string, number] => l[1] !== undefined)
    .map(([k, v]) => `${k.padEnd(30)} ${v}`)
    .join('\n');
}

/**
 * `/api/show`: details, `model_info` under Ollama's keys (`<architecture>.context_length`, …) with kvdesk's
 * own facts under `kvdesk.`, the chat template (a Jinja template, not Ollama's Go template), and what the
 * model can do here: completions, and tools (kvdesk describes them itself when the template does not).
 */
export function showJson(m: ModelInfo, facts: ModelFacts): Record<string, unknown> {
  const spec = m.spec;
  const arch = spec.modelType ?? 'onnx';
  const info: Record<string, unknown> = {
    'general.architecture': arch,
    'general.basename': m.id,
    [`${arch}.context_length`]: spec.contextLength,
    [`${arch}.block_count`]: spec.numLayers,
    [`${arch}.vocab_size`]: spec.vocabSize,
  };
  if (spec.kv.kind === 'dynamic' && spec.kv.tensors[0]) {
    info[`${arch}.attention.head_count_kv`] = spec.kv.tensors[0].kvHeads;
    info[`${arch}.attention.key_length`] = spec.kv.tensors[0].headDim;
  }
  if (spec.bosTokenId !== undefined) info['tokenizer.ggml.bos_token_id'] = spec.bosTokenId;
  if (spec.eosTokenIds[0] !== undefined) info['tokenizer.ggml.eos_token_id'] = spec.eosTokenIds[0];
  Object.assign(info, {
    'kvdesk.bpt': spec.bpt,
    // A library package not loaded yet has no backend.
    ...(m.backend ? { 'kvdesk.backend': m.backend } : {}),
    'kvdesk.layout': spec.layout,
    'kvdesk.weights_bytes': spec.weightsBytes,
  });
  const parameters = parametersText(m);
  return {
    ...(parameters ? { parameters } : {}),
    ...(spec.chatTemplate ? { template: spec.chatTemplate } : {}),
    details: modelDetails(m),
    model_info: info,
    capabilities: ['completion', 'tools', ...(spec.reasoning ? ['thinking'] : [])],
    modified_at: facts.modifiedAt,
  };
}

/**
 * The Ollama parameter a field the host named is (its contract's names are camelCase and differ), or null when
 * the name is the same.
 */
function ollamaParam(field: string, kind: OllamaKind): string | null {
  const options: Record<string, string> = {
    maxNewTokens: 'options.num_predict',
    stop: 'options.stop',
    'sampling.temperature': 'options.temperature',
    'sampling.topP': 'options.top_p',
    'sampling.topK': 'options.top_k',
    'sampling.minP': 'options.min_p',
    'sampling.seed': 'options.seed',
    'sampling.repetitionPenalty': 'options.repeat_penalty',
    'sampling.repetitionWindow': 'options.repeat_last_n',
    'sampling.frequencyPenalty': 'options.frequency_penalty',
    'sampling.presencePenalty': 'options.presence_penalty',
    responseFormat: 'format',
    thinking: 'think',
  };
  const direct = options[field.replace(/\[\d+\]$/, '')];
  let mapped = direct ?? field;
  if (!direct) {
    mapped = field
      .replace(/^jsonSchema/, 'format')
      .replace(/^tools\[(\d+)\]\.(parameters|name|description)/, 'tools[$1].function.$2')
      .replace(/^messages\[(\d+)\]\.toolCalls\[(\d+)\]\.(name|arguments)/, 'messages[$1].tool_calls[$2].function.$3')
      .replace(/^messages\[(\d+)\]\.toolCalls/, 'messages[$1].tool_calls')
      .replace(/^messages\[(\d+)\]\.toolCallId/, 'messages[$1]');
    // /api/generate's one message is its prompt (after the system's, when there is one).
    if (kind === 'generate') mapped = mapped.replace(/^messages(\[\d+\])?(\.content)?$/, 'prompt');
  }
  return mapped === field ? null : mapped;
}

/**
 * A host refusal's text in Ollama's names, as clientMessage (http-util) writes it for the other APIs: the contract's
 * names of the JSON output it mentions are Ollama's `format`.
 */
function ollamaMessage(message: string): string {
  return (
    message
      .replace(/\bjsonSchema \(json_schema\.schema\)/g, 'format')
      .replace(/\(responseFormat \/ jsonSchema\)/g, '(format)')
      // Ollama's API has no tool_choice: its tools may always be called.
      .replace(
        /\btool(Choice \(tool_choice\)|_choice) "none" for the JSON alone/g,
        'the request without tools for the JSON alone',
      )
  );
}

/**
 * A prompt the context cannot take, said in the terms of the request (the host's words end "start a new chat", which
 * means nothing to one /api/generate call, and /api/chat has left out the oldest turns already): undefined for any
 * other error.
 */
function ollamaTooLong(e: HttpError['body']['error'], kind: OllamaKind | null): string | undefined {
  const { n_prompt_tokens: n, n_ctx: context } = e as { n_prompt_tokens?: unknown; n_ctx?: unknown };
  // (Counted only until its newest turns filled the context: at least that many.)
  const tokens = typeof n === 'number' && e.counted_up_to !== undefined ? `at least ${n}` : n;
  if (e.kvdesk_code !== 'CONTEXT_OVERFLOW' || kind === null) return undefined;
  if (typeof n !== 'number' || typeof context !== 'number') return undefined;
  const room = `which leaves no room for a reply in the model's context of ${context} tokens`;
  return kind === 'generate'
    ? `The prompt has ${tokens} tokens, ${room}. Shorten the prompt, or use a model with a longer context.`
    : `The prompt has ${tokens} tokens with only the system messages and the last turn kept, ${room}. Shorten them, or use a model with a longer context.`;
}

/**
 * An error in Ollama's shape, `{"error": "<message>"}`. A full queue is Ollama's 503 (server busy) instead of
 * OpenAI's 429; a host refusal that names a contract field gets Ollama's name for it appended.
 */
export function ollamaError(
  err: HttpError,
  kind: OllamaKind | null = null,
): { status: number; body: { error: string }; headers: Record<string, string> } {
  const e = err.body.error;
  let message = ollamaTooLong(e, kind) ?? ollamaMessage(e.message);
  const field = err.field ?? (typeof e.field === 'string' ? e.field : undefined);
  if (kind && field !== undefined) {
    const param = ollamaParam(field, kind);
    if (param) message = `${message} (Ollama's field: ${param})`;
  }
  const status = e.kvdesk_code === 'QUEUE_FULL' ? 503 : err.status;
  return { status, body: { error: message }, headers: err.headers };
}
