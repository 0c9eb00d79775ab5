/**
 * The OpenAI wire format on one side, kvdesk's GenerateRequest and
 * GenerationResult on the other. Pure functions: the routes in openai-routes.ts
 * do the I/O. Nothing here decides anything the host decides (admission,
 * defaults, ranges of the contract): a value OpenAI allows but kvdesk does not
 * is passed on and refused by the host's own validation.
 */
import type {
  ChatMessage,
  FinishReason,
  GeneratedTokenLogprob,
  GenerateRequest,
  GenerationResult,
  RowResult,
  TokenLogprob,
  ToolCall,
  ToolCallDelta,
  ToolChoice,
  ToolDefinition,
} from '../../shared/contract';
import type { BudgetCap, ContextClip } from '../../shared/scheduler-types';
import { MAX_TOOL_NESTING, nesting } from '../host/tool-plan';
import { type HttpError, httpError, joinTextParts } from './http-util';

/** Which endpoint a body came to. */
export type OpenAiKind = 'chat' | 'completion';

/** An OpenAI request translated for the host. */
export interface MappedRequest {
  kind: OpenAiKind;
  model: string;
  stream: boolean;
  includeUsage: boolean;
  /** Completions per prompt (OpenAI `n`). */
  n: number;
  /** Prompts in the request (completions may send several); choices = prompts × n. */
  promptCount: number;
  /** Token counts of the prompts when the client sent ids (usage needs no tokenizer then). */
  promptIdLengths: number[] | null;
  /** The prompts when the client sent several texts (usage counts their tokens). */
  promptTexts: string[] | null;
  request: GenerateRequest;
}

/** A parsed JSON request body. */
export type Body = Record<string, unknown>;

export function bad(message: string, param: string): HttpError {
  return httpError(400, message, 'invalid_request', param);
}

/**
 * A call's arguments in the history, sent as an object, as the JSON text the host takes; refused past the nesting a
 * tool's parameters may have (thousands of levels overflow the stack of JSON.stringify itself).
 */
export function argumentsText(args: unknown, param: string): string {
  if (nesting(args) > MAX_TOOL_NESTING) {
    throw bad(
      `${param} nests more than ${MAX_TOOL_NESTING} levels of objects and arrays, the most kvdesk takes: send the call's arguments less deeply nested.`,
      param,
    );
  }
  return JSON.stringify(args);
}

export function present(body: Body, key: string): boolean {
  return body[key] !== undefined && body[key] !== null;
}

/**
 * A number field, checked: an integer with `int`, within [min, max] (above min with `minExclusive`). A refusal
 * names `field` (default: the key; Ollama's options are `options.<key>`).
 */
export function number(
  body: Body,
  key: string,
  opts: { min?: number; max?: number; minExclusive?: boolean; int?: boolean; field?: string } = {},
): number | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  const field = opts.field ?? key;
  if (typeof v !== 'number' || !Number.isFinite(v) || (opts.int && !Number.isInteger(v))) {
    // A number past a double's range (1e400) parsed as ±Infinity, which JSON would write as null.
    const huge = typeof v === 'number' && !Number.isFinite(v) && !Number.isNaN(v);
    const got = huge ? `a number too large to hold (${v})` : JSON.stringify(v);
    throw bad(`"${field}" must be ${opts.int ? 'an integer' : 'a number'}, got ${got}.`, field);
  }
  const low = opts.min !== undefined && (opts.minExclusive ? v <= opts.min : v < opts.min);
  if (low || (opts.max !== undefined && v > opts.max)) {
    const from = opts.min === undefined ? '(-∞' : `${opts.minExclusive ? '(' : '['}${opts.min}`;
    throw bad(`"${field}" must be in ${from}, ${opts.max ?? '∞'}], got ${v}.`, field);
  }
  return v;
}

/**
 * A seed as OpenAI (an int64) and Ollama take it, in the contract's range: -1 asks for a random seed (llama.cpp's
 * and Ollama's), as no seed does; 0 … 2^53-1 is the seed itself; any other integer (a negative, or one past 2^53,
 * which JSON.parse rounds, the same text always the same way) is mixed into that range, so the same seed gives the
 * same tokens.
 */
export function seedOf(body: Body, key: string, opts: { field?: string } = {}): number | undefined {
  const v = number(body, key, { int: true, ...opts });
  if (v === undefined || v === -1) return undefined;
  if (v >= 0 && v <= Number.MAX_SAFE_INTEGER) return v;
  // Its 64 bits (a negative's two's complement, as Ollama's uint64(seed)), mixed by splitmix64's finalizer: a large
  // number's rounding leaves its low bits zero.
  let x = BigInt.asUintN(64, BigInt(v));
  x = BigInt.asUintN(64, (x ^ (x >> 30n)) * 0xbf58476d1ce4e5b9n);
  x = BigInt.asUintN(64, (x ^ (x >> 27n)) * 0x94d049bb133111ebn);
  return Number((x ^ (x >> 31n)) & BigInt(Number.MAX_SAFE_INTEGER));
}

/**
 * llama.cpp's `repeat_last_n` (Ollama's option, llama.cpp's server field) on the contract's sampling: the last
 * n tokens the repetition penalty looks at; -1 all of them (the context), 0 turns the penalty off.
 */
export function repeatLastN(
  body: Body,
  sampling: NonNullable<GenerateRequest['sampling']>,
  opts: { field?: string } = {},
): void {
  const n = number(body, 'repeat_last_n', {
    int: true,
    min: -1,
    max: 1_000_000,
    ...(opts.field ? { field: opts.field } : {}),
  });
  if (n === 0) sampling.repetitionPenalty = 1;
  else if (n === -1) sampling.repetitionWindow = 0;
  else if (n !== undefined) sampling.repetitionWindow = n;
}

export function boolean(body: Body, key: string): boolean | undefined {
  if (!present(body, key)) return undefined;
  if (typeof body[key] !== 'boolean') throw bad(`"${key}" must be true or false.`, key);
  return body[key] as boolean;
}

/** Parameters that change what OpenAI would return and that kvdesk cannot honour: refused, never ignored. */
function refuseUnsupported(body: Body): void {
  // (Empty: null, "", [] or {}, which ask for nothing.)
  const nonEmpty = (k: string) => {
    const v = body[k];
    return (
      present(body, k) &&
      v !== '' &&
      !(Array.isArray(v) && v.length === 0) &&
      !(typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0)
    );
  };
  if (nonEmpty('suffix')) {
    throw bad(
      '"suffix" (text after the completion: fill-in-the-middle) is not supported by kvdesk; send the request without it.',
      'suffix',
    );
  }
  // Output other than text: kvdesk's models write text.
  if (present(body, 'modalities')) {
    const m = body.modalities;
    if (!Array.isArray(m)) throw bad('"modalities" must be an array such as ["text"].', 'modalities');
    for (const [i, v] of m.entries()) {
      if (v === 'text') continue;
      throw bad(
        `"modalities" value ${JSON.stringify(v)} is not supported: kvdesk's models write text only. Send "modalities": ["text"], or leave it out.`,
        `modalities[${i}]`,
      );
    }
  }
  if (present(body, 'audio')) {
    throw bad(
      '"audio" (spoken output) is not supported: kvdesk\'s models write text only. Send the request without it (and without "audio" in "modalities").',
      'audio',
    );
  }
  // Even {}: OpenAI searches the web with its defaults.
  if (present(body, 'web_search_options')) {
    throw bad(
      '"web_search_options" is not supported: kvdesk does not search the web. Send the request without it, or give the model a search function in "tools".',
      'web_search_options',
    );
  }
  // The deprecated forms of tools.
  if (nonEmpty('functions')) throw bad('"functions" is deprecated and not supported: send "tools".', 'functions');
  if (present(body, 'function_call') && body.function_call !== 'none' && body.function_call !== 'auto') {
    throw bad('"function_call" is deprecated and not supported: send "tool_choice".', 'function_call');
  }
  if (body.echo === true) throw bad('"echo" is not supported by kvdesk; send the request without it.', 'echo');
}

/** OpenAI's `tools`: function tools, `{type: "function", function: {name, description, parameters, strict}}`. */
function toolList(kind: OpenAiKind, body: Body): ToolDefinition[] | undefined {
  const v = body.tools;
  if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return undefined;
  if (kind !== 'chat') throw bad('"tools" are for /v1/chat/completions; send the conversation there.', 'tools');
  return functionTools(v);
}

/**
 * Function tools in OpenAI's form, `[{type: "function", function: {name, description, parameters}}]`, as
 * tool definitions; undefined for none. Ollama's are the same, `type` optional (`typeOptional`).
 */
export function functionTools(v: unknown, opts: { typeOptional?: boolean } = {}): ToolDefinition[] | undefined {
  if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return undefined;
  if (!Array.isArray(v)) throw bad('"tools" must be an array of {"type": "function", "function": {…}}.', 'tools');
  return v.map((t, i) => {
    const tool = t as { type?: unknown; function?: unknown } | null;
    const typed = tool?.type === 'function' || (opts.typeOptional && tool?.type === undefined);
    if (typeof tool !== 'object' || tool === null || Array.isArray(tool) || !typed) {
      throw bad(
        `tools[${i}].type must be "function" (kvdesk runs function tools only: {"type": "function", "function": {"name", "parameters"}}), got ${JSON.stringify(tool?.type)}.`,
        `tools[${i}].type`,
      );
    }
    const fn = tool.function as Record<string, unknown> | undefined;
    if (typeof fn !== 'object' || fn === null || typeof fn.name !== 'string') {
      throw bad(`tools[${i}].function must be an object with a "name".`, `tools[${i}].function`);
    }
    const params = fn.parameters;
    if (params !== undefined && params !== null && (typeof params !== 'object' || Array.isArray(params))) {
      throw bad(`tools[${i}].function.parameters must be a JSON Schema object.`, `tools[${i}].function.parameters`);
    }
    if (fn.description !== undefined && fn.description !== null && typeof fn.description !== 'string') {
      throw bad(`tools[${i}].function.description must be a string.`, `tools[${i}].function.description`);
    }
    return {
      name: fn.name,
      ...(typeof fn.description === 'string' && fn.description.length > 0 ? { description: fn.description } : {}),
      ...(params ? { parameters: params as Record<string, unknown> } : {}),
    };
  });
}

/** OpenAI's `tool_choice`: "none", "auto", "required", or `{type: "function", function: {name}}`. */
function toolChoice(body: Body): ToolChoice | undefined {
  const v = body.tool_choice;
  if (v === undefined || v === null) return undefined;
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  const name = (v as { function?: { name?: unknown } }).function?.name;
  if (typeof v === 'object' && (v as { type?: unknown }).type === 'function' && typeof name === 'string') {
    return { name };
  }
  throw bad(
    '"tool_choice" must be "none", "auto", "required" or {"type": "function", "function": {"name": …}}.',
    'tool_choice',
  );
}

/**
 * OpenAI's response_format: plain text, one JSON object (`json_object`), or one that conforms to a schema
 * (`json_schema`: `{name, schema, strict}`; the host refuses a schema it cannot enforce).
 */
function responseFormat(body: Body): 'json' | { schema: Record<string, unknown> } | undefined {
  if (!present(body, 'response_format')) return undefined;
  const rf = body.response_format as { type?: unknown };
  if (typeof rf !== 'object' || Array.isArray(rf)) {
    throw bad('"response_format" must be an object such as {"type": "json_object"}.', 'response_format');
  }
  if (rf.type === undefined || rf.type === 'text') return undefined;
  if (rf.type === 'json_object') return 'json';
  if (rf.type === 'json_schema') {
    const js = (rf as { json_schema?: { schema?: unknown } }).json_schema;
    const schema = js?.schema;
    if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
      throw bad('response_format.json_schema.schema must be a JSON Schema object.', 'response_format');
    }
    return { schema: schema as Record<string, unknown> };
  }
  throw bad(
    `response_format "${String(rf.type)}" is not supported: use "text", "json_object" or "json_schema".`,
    'response_format',
  );
}

/**
 * How many alternatives to report with each token's log-probability, or undefined for none. Chat asks with
 * `logprobs: true` and `top_logprobs` (0–20); completions with `logprobs` as the count (0–20; OpenAI allows 5).
 */
function logprobsCount(kind: OpenAiKind, body: Body): number | undefined {
  if (kind === 'chat') {
    const on = boolean(body, 'logprobs') ?? false;
    const top = number(body, 'top_logprobs', { min: 0, max: 20, int: true });
    if (top !== undefined && !on) throw bad('"top_logprobs" needs "logprobs": true.', 'top_logprobs');
    return on ? (top ?? 0) : undefined;
  }
  if (body.logprobs === false) return undefined;
  return number(body, 'logprobs', { min: 0, max: 20, int: true });
}

/**
 * OpenAI's Predicted Outputs: `prediction: {type: "content", content}`, content a string or text parts. The
 * text the reply is expected to repeat (lookup decoding drafts from it).
 */
function prediction(body: Record<string, unknown>): string | undefined {
  if (!present(body, 'prediction')) return undefined;
  const p = body.prediction as { type?: unknown; content?: unknown } | null;
  const wrong = () =>
    bad(
      '"prediction" must be {"type": "content", "content": "…"} (a string, or an array of {"type": "text", "text": "…"} parts).',
      'prediction',
    );
  if (typeof p !== 'object' || p === null || Array.isArray(p) || p.type !== 'content') throw wrong();
  if (p.content === undefined || p.content === null) throw wrong();
  // (A prediction's parts are pieces of one text, the reply expected: glued as written.)
  return textContent(p.content, 'prediction.content', 'prediction', (texts) => texts.join(''));
}

/** OpenAI's logit_bias: token ids (as keys) to a bias in -100…100. */
function logitBias(body: Body): Record<string, number> | undefined {
  if (!present(body, 'logit_bias')) return undefined;
  const v = body.logit_bias;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw bad('"logit_bias" must be an object of token ids to biases (-100…100).', 'logit_bias');
  }
  const out: Record<string, number> = {};
  for (const [key, bias] of Object.entries(v)) {
    if (!/^\d+$/.test(key)) throw bad(`logit_bias: ${JSON.stringify(key)} is not a token id.`, 'logit_bias');
    if (typeof bias !== 'number' || !Number.isFinite(bias) || bias < -100 || bias > 100) {
      throw bad(`logit_bias[${key}] must be a number in -100…100, got ${JSON.stringify(bias)}.`, 'logit_bias');
    }
    out[String(Number(key))] = bias;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** Stop strings under `key` (`stop`, Anthropic's `stop_sequences`): a string or a list of them. */
export function stopList(body: Body, key = 'stop'): string[] | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string')) {
    throw bad(`"${key}" must be a string or an array of strings.`, key);
  }
  // OpenAI treats an empty stop string as no stop; the contract does not accept empty ones.
  const stops = (list as string[]).filter((s) => s.length > 0);
  return stops.length > 0 ? stops : undefined;
}

function messageContent(m: Record<string, unknown>, i: number): string {
  const c = m.content;
  // Only an assistant message (its tool calls) may come without content, as OpenAI requires.
  if ((c === undefined || c === null) && m.role !== 'assistant') {
    throw bad(`messages[${i}].content is required for a ${String(m.role)} message.`, `messages[${i}].content`);
  }
  if (c === undefined || c === null) return '';
  return textContent(c, `messages[${i}].content`);
}

/**
 * Text as OpenAI writes it: a string, or an array of `{type: "text", text}` parts, one per line (joinTextParts; as vLLM joins
 * them: glued, "Summarize the file." and "The file says hi." would read as one sentence); `param` for a 400.
 */
function textContent(c: unknown, where: string, param = where, join = joinTextParts): string {
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) {
    const texts: string[] = [];
    for (const part of c as Array<Record<string, unknown>>) {
      if (part && part.type === 'text' && typeof part.text === 'string') texts.push(part.text);
      else throw bad(`${where}: only text parts are supported, got ${JSON.stringify(part?.type)}.`, param);
    }
    return join(texts);
  }
  throw bad(`${where} must be a string or an array of text parts.`, param);
}

/** An assistant message's `tool_calls`: `[{id, type: "function", function: {name, arguments}}]`. */
function messageToolCalls(m: Record<string, unknown>, i: number): ToolCall[] | undefined {
  const v = m.tool_calls;
  if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return undefined;
  const where = `messages[${i}].tool_calls`;
  if (!Array.isArray(v)) throw bad(`${where} must be an array.`, where);
  return v.map((c, j) => {
    const call = c as { id?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
    const fn = call?.function;
    if (typeof call?.id !== 'string' || typeof fn?.name !== 'string') {
      throw bad(`${where}[${j}] must have an "id" and a "function" with a "name".`, `${where}[${j}]`);
    }
    const args = fn.arguments ?? '{}';
    return {
      id: call.id,
      name: fn.name,
      arguments: typeof args === 'string' ? args : argumentsText(args, `${where}[${j}].function.arguments`),
    };
  });
}

function chatMessages(body: Body): ChatMessage[] {
  const raw = body.messages;
  if (!Array.isArray(raw) || raw.length === 0) throw bad('"messages" must be a non-empty array.', 'messages');
  return raw.map((m, i) => {
    if (!m || typeof m !== 'object') throw bad(`messages[${i}] must be an object.`, `messages[${i}]`);
    const msg = m as Record<string, unknown>;
    // OpenAI's newer "developer" role is the system prompt under another name.
    const role = msg.role === 'developer' ? 'system' : msg.role;
    if (role !== 'system' && role !== 'user' && role !== 'assistant' && role !== 'tool') {
      throw bad(
        `messages[${i}].role must be system, developer, user, assistant or tool, got ${JSON.stringify(msg.role)}.`,
        `messages[${i}].role`,
      );
    }
    const out: ChatMessage = { role, content: messageContent(msg, i) };
    if (role === 'assistant') {
      const calls = messageToolCalls(msg, i);
      if (calls) out.toolCalls = calls;
      // A thinking model's reasoning, as DeepSeek's API and vLLM return it (vLLM's newer name: `reasoning`).
      const reasoning = msg.reasoning_content ?? msg.reasoning;
      if (typeof reasoning === 'string') out.reasoning = reasoning;
    }
    if (role === 'tool') {
      // As OpenAI: a result must say which call it answers.
      if (typeof msg.tool_call_id !== 'string' || msg.tool_call_id.length === 0) {
        throw bad(
          `messages[${i}].tool_call_id is required: a tool message answers the call with that id (one of the "tool_calls" of the assistant message before it).`,
          `messages[${i}].tool_call_id`,
        );
      }
      out.toolCallId = msg.tool_call_id;
      if (typeof msg.name === 'string') out.name = msg.name;
    }
    return out;
  });
}

/**
 * Whether a thinking model reasons: vLLM's `chat_template_kwargs.enable_thinking` (the only template variable
 * kvdesk takes), or `reasoning_effort: "none"` (OpenAI's; the other efforts leave the model as it is).
 */
function thinkingSwitch(body: Body): boolean | undefined {
  let thinking: boolean | undefined;
  const kwargs = body.chat_template_kwargs;
  if (present(body, 'chat_template_kwargs')) {
    if (typeof kwargs !== 'object' || kwargs === null || Array.isArray(kwargs))
      throw bad('"chat_template_kwargs" must be an object.', 'chat_template_kwargs');
    for (const [key, value] of Object.entries(kwargs)) {
      if (key !== 'enable_thinking')
        throw bad(
          `chat_template_kwargs.${key} is not supported: kvdesk passes only enable_thinking to chat templates.`,
          `chat_template_kwargs.${key}`,
        );
      if (typeof value !== 'boolean')
        throw bad(
          'chat_template_kwargs.enable_thinking must be true or false.',
          'chat_template_kwargs.enable_thinking',
        );
      thinking = value;
    }
  }
  if (present(body, 'reasoning_effort') && reasoningEffort(body.reasoning_effort, 'reasoning_effort') === 'none')
    thinking ??= false;
  return thinking;
}

/**
 * OpenAI's reasoning efforts: `none` turns thinking off; the others go to the request (the template's
 * `reasoning_effort`, and a bound on the reasoning for `minimal` and `low`: see GenerateRequest).
 */
const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

/** An effort (chat's `reasoning_effort`, Responses' `reasoning.effort`), checked; `param` names it in a 400. */
export function reasoningEffort(effort: unknown, param: string): ReasoningEffort {
  if (typeof effort !== 'string' || !(REASONING_EFFORTS as readonly string[]).includes(effort))
    throw bad(`"${param}" must be one of ${REASONING_EFFORTS.join(', ')}.`, param);
  return effort as ReasoningEffort;
}

/** Adds reasoning to a turn's (turns joined into one keep each one's). */
export function addReasoning(turn: ChatMessage, reasoning: string): void {
  turn.reasoning = turn.reasoning ? `${turn.reasoning}\n\n${reasoning}` : reasoning;
}

function isIdArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number');
}

/**
 * Translates an OpenAI chat or completion body. Throws HttpError 400 with the
 * offending OpenAI parameter for malformed input.
 */
export function mapOpenAiRequest(kind: OpenAiKind, input: unknown): MappedRequest {
  if (!input || typeof input !== 'object' || Array.isArray(input))
    throw bad('The request body must be a JSON object.', 'body');
  const body = input as Body;
  if (typeof body.model !== 'string' || body.model.length === 0) {
    throw bad('"model" is required: name a loaded model (GET /v1/models lists them).', 'model');
  }
  refuseUnsupported(body);
  const n = number(body, 'n', { min: 1, max: 64, int: true }) ?? 1;
  const bestOf = number(body, 'best_of', { min: 1, int: true });
  if (bestOf !== undefined && bestOf !== n)
    throw bad('"best_of" is not supported by kvdesk (only best_of = n).', 'best_of');
  const stream = boolean(body, 'stream') ?? false;
  const so = body.stream_options as { include_usage?: unknown } | undefined | null;
  if (so !== undefined && so !== null) {
    // As OpenAI answers.
    if (!stream) throw bad('"stream_options" is only allowed when "stream" is true.', 'stream_options');
    if (typeof so !== 'object' || Array.isArray(so)) throw bad('"stream_options" must be an object.', 'stream_options');
    if (so.include_usage !== undefined && typeof so.include_usage !== 'boolean')
      throw bad('"stream_options.include_usage" must be a boolean.', 'stream_options.include_usage');
  }
  const includeUsage = stream && so !== undefined && so !== null && so.include_usage === true;
  // Both are read (a bad one is refused); the newer name wins.
  const completionTokens = kind === 'chat' ? number(body, 'max_completion_tokens', { min: 1, int: true }) : undefined;
  const legacyMaxTokens = number(body, 'max_tokens', { min: 1, int: true });
  const maxTokens = completionTokens ?? legacyMaxTokens;
  const sampling: NonNullable<GenerateRequest['sampling']> = {};
  const temperature = number(body, 'temperature', { min: 0, max: 2 });
  if (temperature !== undefined) sampling.temperature = temperature;
  const topP = number(body, 'top_p', { min: 0, max: 1 });
  if (topP !== undefined) sampling.topP = topP;
  const seed = seedOf(body, 'seed');
  if (seed !== undefined) sampling.seed = seed;
  // vLLM's extra sampling parameters, which OpenAI clients pass through `extra_body`.
  const topK = number(body, 'top_k', { int: true, min: -1 });
  if (topK !== undefined) sampling.topK = topK === -1 ? 0 : topK;
  const minP = number(body, 'min_p', { min: 0, max: 1 });
  if (minP !== undefined) sampling.minP = minP;
  const rp = number(body, 'repetition_penalty', { min: 0, minExclusive: true, max: 10 });
  if (rp !== undefined) sampling.repetitionPenalty = rp;
  repeatLastN(body, sampling);
  const fp = number(body, 'frequency_penalty', { min: -2, max: 2 });
  if (fp !== undefined && fp !== 0) sampling.frequencyPenalty = fp;
  const pp = number(body, 'presence_penalty', { min: -2, max: 2 });
  if (pp !== undefined && pp !== 0) sampling.presencePenalty = pp;
  const bias = logitBias(body);
  if (bias) sampling.logitBias = bias;
  const logprobs = logprobsCount(kind, body);
  const format = responseFormat(body);
  const stop = stopList(body);
  const tools = toolList(kind, body);
  const choice = toolChoice(body);
  const parallel = boolean(body, 'parallel_tool_calls');
  // vLLM's: write on past the end-of-text tokens, to max_tokens (for benchmarks).
  const ignoreEos = boolean(body, 'ignore_eos');
  // llama.cpp's: false computes the prompt afresh, neither continuing an earlier request's KV nor kept for the next.
  const cachePrompt = boolean(body, 'cache_prompt');

  const request: GenerateRequest = { model: body.model };
  let promptCount = 1;
  let promptIdLengths: number[] | null = null;
  let promptTexts: string[] | null = null;
  if (kind === 'chat') {
    request.messages = chatMessages(body);
    if (n > 1) request.rows = n;
    // kvdesk's extension, as the Responses API's field: leave out the oldest turns instead of a 400.
    if (present(body, 'truncation') && body.truncation !== 'auto' && body.truncation !== 'disabled') {
      throw bad(
        '"truncation" must be "auto" (leave out the oldest turns that do not fit) or "disabled".',
        'truncation',
      );
    }
    if (body.truncation === 'auto') request.contextOverflow = 'drop-oldest';
    // vLLM's extension: the reply continues the final assistant message.
    if (boolean(body, 'continue_final_message') === true) request.continueFinal = true;
    const thinking = thinkingSwitch(body);
    if (thinking !== undefined) request.thinking = thinking;
    const effort = present(body, 'reasoning_effort')
      ? reasoningEffort(body.reasoning_effort, 'reasoning_effort')
      : undefined;
    if (effort !== undefined && effort !== 'none') request.reasoningEffort = effort;
    // Qwen's API's name for a thinking budget (the reasoning is closed for the model after that many tokens).
    const budget = number(body, 'thinking_budget', { min: 0, int: true });
    if (budget !== undefined) request.thinkingBudget = budget;
    const predicted = prediction(body);
    if (predicted !== undefined) {
      if (n > 1) throw bad('"prediction" goes with one choice: leave out "n" or the prediction.', 'prediction');
      request.prediction = predicted;
    }
  } else {
    const p = body.prompt;
    let texts: string[] | null = null;
    let ids: number[][] | null = null;
    if (typeof p === 'string') texts = [p];
    else if (isIdArray(p)) ids = [p];
    else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === 'string')) texts = p as string[];
    else if (Array.isArray(p) && p.length > 0 && p.every(isIdArray)) ids = p as number[][];
    else
      throw bad(
        '"prompt" must be a string, an array of strings, an array of token ids, or an array of such arrays.',
        'prompt',
      );
    promptCount = (texts ?? ids ?? []).length;
    if (ids) promptIdLengths = ids.map((r) => r.length);
    if (texts && texts.length > 1) promptTexts = texts;
    // Several prompts run as one batched request; each is repeated n times so choice i is row i (each prompt's
    // replies seeded as that prompt's request alone).
    if (promptCount === 1) {
      if (texts) request.prompt = texts[0] as string;
      else request.promptIds = (ids as number[][])[0] as number[];
    } else if (texts) request.prompts = texts;
    else request.promptIdRows = ids as number[][];
    if (n > 1) request.rows = n;
  }
  if (maxTokens !== undefined) request.maxNewTokens = maxTokens;
  // One prompt, one reply: its KV can continue an earlier request's and serve the next (the host's prompt cache).
  if (promptCount === 1 && n === 1 && cachePrompt !== false) request.promptCache = true;
  if (logprobs !== undefined) request.logprobs = logprobs;
  if (format === 'json') request.responseFormat = 'json';
  else if (typeof format === 'object') request.jsonSchema = format.schema;
  if (Object.keys(sampling).length > 0) request.sampling = sampling;
  if (stop) request.stop = stop;
  if (ignoreEos) request.ignoreEos = true;
  if (tools) request.tools = tools;
  if (choice !== undefined) request.toolChoice = choice;
  if (parallel !== undefined && tools) request.parallelToolCalls = parallel;
  return { kind, model: body.model, stream, includeUsage, n, promptCount, promptIdLengths, promptTexts, request };
}

/** What a conversation request (Responses, Messages) may set; fields left undefined are left out. */
export interface ConversationFields {
  maxNewTokens?: number | undefined;
  temperature?: number | undefined;
  topP?: number | undefined;
  topK?: number | undefined;
  stop?: string[] | undefined;
  tools?: ToolDefinition[] | undefined;
  toolChoice?: ToolChoice | undefined;
  parallelToolCalls?: boolean | undefined;
}

/**
 * The host request of one conversation, its system prompt first. One conversation, one reply: its KV can
 * continue an earlier request's and serve the next turn's (the host's prompt cache).
 */
export function conversationRequest(
  model: string,
  system: string | null | undefined,
  messages: ChatMessage[],
  f: ConversationFields,
): GenerateRequest {
  const request: GenerateRequest = {
    model,
    messages: system ? [{ role: 'system', content: system }, ...messages] : messages,
    promptCache: true,
  };
  if (f.maxNewTokens !== undefined) request.maxNewTokens = f.maxNewTokens;
  const sampling: NonNullable<GenerateRequest['sampling']> = {};
  if (f.temperature !== undefined) sampling.temperature = f.temperature;
  if (f.topP !== undefined) sampling.topP = f.topP;
  if (f.topK !== undefined) sampling.topK = f.topK;
  if (Object.keys(sampling).length > 0) request.sampling = sampling;
  if (f.stop) request.stop = f.stop;
  if (f.tools) request.tools = f.tools;
  if (f.toolChoice !== undefined) request.toolChoice = f.toolChoice;
  if (f.parallelToolCalls !== undefined && f.tools) request.parallelToolCalls = f.parallelToolCalls;
  return request;
}

/** OpenAI's finish reasons: the reply ended by itself (with calls), or it ran out of room (tokens, context or budget). */
export function openAiFinishReason(reason: FinishReason): 'stop' | 'length' | 'tool_calls' {
  if (reason === 'tool_calls') return 'tool_calls';
  return reason === 'eos' || reason === 'stop' ? 'stop' : 'length';
}

/** Calls in OpenAI's form; `first` is the index of the first in its reply (streamed chunks number them). */
export function toolCallsJson(calls: readonly ToolCall[], first?: number): Array<Record<string, unknown>> {
  return calls.map((c, i) => ({
    ...(first !== undefined ? { index: first + i } : {}),
    id: c.id,
    type: 'function',
    function: { name: c.name, arguments: c.arguments },
  }));
}

/**
 * A chat reply's message: its text (null when it only made calls, as OpenAI's), a thinking model's reasoning
 * (`reasoning_content`, as DeepSeek's API and vLLM give it) and its calls.
 */
function chatMessage(row: RowResult): Record<string, unknown> {
  const reasoning = row.reasoning ? { reasoning_content: row.reasoning } : {};
  const calls = row.toolCalls;
  if (!calls || calls.length === 0) return { role: 'assistant', content: row.text, ...reasoning };
  // Only white space beside calls is no content, as OpenAI (and vLLM) answer.
  return {
    role: 'assistant',
    content: row.text.trim().length > 0 ? row.text : null,
    ...reasoning,
    tool_calls: toolCallsJson(calls),
  };
}

function budgetCapJson(c: BudgetCap) {
  return {
    requested_max_tokens: c.requestedMaxTokens,
    admitted_max_tokens: c.admittedMaxTokens,
    requested_bytes: c.requestedBytes,
    admitted_bytes: c.admittedBytes,
    available_bytes: c.availableBytes,
  };
}

function clipJson(c: ContextClip) {
  return { requested_max_tokens: c.requestedMaxTokens, clipped_max_tokens: c.clippedMaxTokens, n_ctx: c.contextLength };
}

/** Why a request's prediction went unused, for the client: a reason to read and what to do. */
function predictionUnusedJson(unused: NonNullable<GenerationResult['predictionUnused']>) {
  const outcome =
    "so the prediction was not drafted from: the reply is the model's, at plain decoding's speed, and no prediction " +
    'tokens are counted.';
  const message =
    unused.reason === 'lookup_off'
      ? `lookup decoding is off on this server (--lookup 0), ${outcome} Start the server with --lookup N (N ≥ 1; the ` +
        'default is 4) to use predictions.'
      : unused.reason === 'lookup_unavailable'
        ? `lookup decoding cannot run on this model: ${unused.detail ?? 'its graph cannot check drafts'}; ${outcome} ` +
          'A model whose graph has a dynamic KV cache and scores every position a run feeds can use predictions.'
        : 'the reply ran beside other requests all along, and lookup decoding drafts only for a request running ' +
          `alone, ${outcome} Send it when the server has no other reply under way to use the prediction.`;
  return { reason: unused.reason, message };
}

/**
 * kvdesk's own facts about a reply: the reservation, whether the budget or the context cut it short, and whether
 * a prediction went unused.
 */
export function kvdeskExtras(result: GenerationResult): Record<string, unknown> {
  return {
    request_id: result.requestId,
    bpt: result.bpt,
    reserved_bytes: result.reservedBytes,
    ...(result.paddingBytes ? { padding_bytes: result.paddingBytes } : {}),
    kv_bytes: result.kvBytes,
    ...(result.budgetCap ? { budget_cap: budgetCapJson(result.budgetCap) } : {}),
    ...(result.clipped ? { context_clip: clipJson(result.clipped) } : {}),
    ...(result.contextDrop
      ? { context_drop: { dropped_messages: result.contextDrop.messages, n_ctx: result.contextDrop.contextLength } }
      : {}),
    ...(result.lookup
      ? { lookup: { drafted_tokens: result.lookup.drafted, accepted_tokens: result.lookup.accepted } }
      : {}),
    ...(result.predictionUnused ? { prediction_unused: predictionUnusedJson(result.predictionUnused) } : {}),
    timings: {
      queue_ms: result.timings.queueMs,
      ttft_ms: result.timings.ttftMs,
      total_ms: result.timings.totalMs,
      tokens_per_second: result.timings.tokensPerSecond,
    },
  };
}

/** OpenAI usage block. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** `cached_tokens`: prompt tokens whose KV came from the prompt cache instead of being computed. */
  prompt_tokens_details: { cached_tokens: number };
  /**
   * A thinking model's reasoning tokens (counted in completion_tokens); for a request with a `prediction`, the
   * drafted tokens the model took and those it did not, as OpenAI counts a prediction's. Lookup decoding's own
   * drafts (text the reply repeats) are not a prediction's: kvdesk.lookup alone counts them.
   */
  completion_tokens_details?: {
    reasoning_tokens?: number;
    accepted_prediction_tokens?: number;
    rejected_prediction_tokens?: number;
  };
}

/**
 * Usage of a finished request: prompt tokens once per prompt (not per copy), every row's new tokens; the
 * prediction's tokens taken and not when the request sent one (`predicted`).
 */
export function usageOf(result: GenerationResult, promptTokens: number, predicted = false): Usage {
  const completion = result.rows.reduce((s, r) => s + r.tokenIds.length, 0);
  const lookup = result.lookup ?? { drafted: 0, accepted: 0 };
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completion,
    total_tokens: promptTokens + completion,
    prompt_tokens_details: { cached_tokens: result.reusedTokens },
    ...(result.reasoningTokens !== undefined || predicted
      ? {
          completion_tokens_details: {
            ...(result.reasoningTokens !== undefined
              ? { reasoning_tokens: result.rows.reduce((s, r) => s + (r.reasoningTokens ?? 0), 0) }
              : {}),
            // Clients take rejected ones as paid for: only a prediction the client sent has them.
            ...(predicted
              ? {
                  accepted_prediction_tokens: lookup.accepted,
                  rejected_prediction_tokens: lookup.drafted - lookup.accepted,
                }
              : {}),
          },
        }
      : {}),
  };
}

/** The identity of one reply, shared by its body or every chunk of its stream. */
export interface ReplyHeader {
  id: string;
  created: number;
  model: string;
}

/** Reply id in OpenAI's style, made from the host's request id. */
export function replyId(kind: OpenAiKind, requestId: string): string {
  return `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${requestId}`;
}

/** A token's entry in OpenAI's chat logprobs. */
function chatToken(t: TokenLogprob): Record<string, unknown> {
  return { token: t.token, logprob: t.logprob, bytes: t.bytes };
}

/**
 * A reply's text as it grows, and where a host offset (UTF-16 code units) is in it in characters (code points):
 * OpenAI's and vLLM's `text_offset` index the text as Python does, and an emoji is two code units but one character.
 */
export class CharOffsets {
  private unit = 0;
  private chars = 0;

  constructor(private text = '') {}

  add(text: string): void {
    this.text += text;
  }

  /** Characters before code unit `unit` of the text added so far. */
  at(unit: number): number {
    // Offsets only grow within a reply; count from the start again for one that does not.
    if (unit < this.unit) {
      this.unit = 0;
      this.chars = 0;
    }
    while (this.unit < unit && this.unit < this.text.length) {
      this.unit += (this.text.codePointAt(this.unit) as number) > 0xffff ? 2 : 1;
      this.chars++;
    }
    return this.chars;
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A token as the legacy completions API names it: its text, or, for one that holds a piece of a character (bytes
 * that are not UTF-8 on their own, each such piece written U+FFFD in its text), `bytes:` and each of its bytes as
 * `\xNN`, as OpenAI's names it (`bytes:\xe2\x80`): such tokens are then keys of their own in `top_logprobs`.
 * `bytes`: named by its bytes whatever its text (a byte token whose text another token has).
 */
function legacyToken(t: TokenLogprob, bytes = false): string {
  const named = `bytes:${t.bytes.map((b) => `\\x${b.toString(16).padStart(2, '0')}`).join('')}`;
  if (bytes) return named;
  if (!t.token.includes('\ufffd')) return t.token;
  try {
    utf8.decode(Uint8Array.from(t.bytes));
    return t.token;
  } catch {
    return named;
  }
}

/**
 * How one position's tokens are named: a SentencePiece byte token (`<0x41>`) whose text another of them has (`A`)
 * by its bytes (`bytes:\x41`), so that each is a key of its own in `top_logprobs`.
 */
function legacyNames(t: GeneratedTokenLogprob): (e: TokenLogprob) => string {
  const texts = new Set([t, ...t.top].filter((e) => !e.byte).map((e) => legacyToken(e)));
  return (e) => legacyToken(e, e.byte === true && texts.has(legacyToken(e)));
}

/**
 * The `logprobs` of a choice (or of one streamed chunk's tokens): chat's `content` list, or the legacy
 * completions arrays, whose `top_logprobs` maps each token (named by legacyNames) to its log-probability and always
 * holds the chosen token's own.
 * A completion's `text_offset` is in characters of its text: `chars` reads the host's offsets in it (without it,
 * they stay in UTF-16 code units).
 */
export function logprobsJson(
  kind: OpenAiKind,
  tokens: GeneratedTokenLogprob[] | undefined,
  chars?: CharOffsets,
): unknown {
  if (!tokens) return null;
  if (kind === 'chat') {
    return { content: tokens.map((t) => ({ ...chatToken(t), top_logprobs: t.top.map(chatToken) })), refusal: null };
  }
  const names = tokens.map(legacyNames);
  return {
    tokens: tokens.map((t, i) => (names[i] as (e: TokenLogprob) => string)(t)),
    token_logprobs: tokens.map((t) => t.logprob),
    top_logprobs: tokens.map((t, i) => {
      const name = names[i] as (e: TokenLogprob) => string;
      // (No prototype: a token "constructor" or "__proto__" is a key like any other.)
      const top: Record<string, number> = Object.create(null);
      // Most likely first: of two tokens with the same name (the same text, neither a byte token), the likelier one.
      for (const alt of t.top) {
        const key = name(alt);
        if (!(key in top)) top[key] = alt.logprob;
      }
      // The chosen token's own, under its own key, whatever another token of the same name had.
      top[name(t)] = t.logprob;
      return top;
    }),
    text_offset: tokens.map((t) => (chars ? chars.at(t.textOffset) : t.textOffset)),
  };
}

/** The non-streaming response body. */
export function completionBody(
  kind: OpenAiKind,
  head: ReplyHeader,
  result: GenerationResult,
  usage: Usage,
): Record<string, unknown> {
  const choices = result.rows.map((row, index) =>
    kind === 'chat'
      ? {
          index,
          message: chatMessage(row),
          logprobs: logprobsJson(kind, row.logprobs),
          finish_reason: openAiFinishReason(row.finishReason),
        }
      : {
          index,
          text: row.text,
          logprobs: logprobsJson(kind, row.logprobs, new CharOffsets(row.text)),
          finish_reason: openAiFinishReason(row.finishReason),
        },
  );
  return {
    id: head.id,
    object: kind === 'chat' ? 'chat.completion' : 'text_completion',
    created: head.created,
    model: head.model,
    choices,
    usage,
    kvdesk: kvdeskExtras(result),
  };
}

/** One streamed chunk with the given choices (and `usage: null` when the client asked for usage, as OpenAI does). */
export function chunk(
  kind: OpenAiKind,
  head: ReplyHeader,
  choices: Array<Record<string, unknown>>,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    id: head.id,
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: head.created,
    model: head.model,
    choices,
    ...extra,
  };
}

/**
 * A streamed choice carrying text and its tokens' logprobs when asked for (or, for chat, the opening role: `'call'`
 * for a reply that is a call, whose content is null as OpenAI sends it). `chars`: the choice's text so far, this
 * chunk's included (a completion's offsets count its characters).
 */
export function deltaChoice(
  kind: OpenAiKind,
  index: number,
  text: string,
  role: boolean | 'call' = false,
  logprobs?: GeneratedTokenLogprob[],
  chars?: CharOffsets,
): Record<string, unknown> {
  const lp = logprobsJson(kind, logprobs, chars);
  if (kind === 'completion') return { index, text, logprobs: lp, finish_reason: null };
  return {
    index,
    delta: role ? { role: 'assistant', content: role === 'call' ? null : '' } : { content: text },
    logprobs: lp,
    finish_reason: null,
  };
}

/** A streamed chat choice carrying reasoning (`delta.reasoning_content`, as DeepSeek's API and vLLM stream it). */
export function reasoningChoice(index: number, reasoning: string): Record<string, unknown> {
  return { index, delta: { reasoning_content: reasoning }, logprobs: null, finish_reason: null };
}

/**
 * A streamed chat choice carrying calls completed by its latest tokens (numbered from `first` in the reply),
 * less those whose arguments were streamed already (`streamed`: their indices); null when none is left.
 */
export function toolCallsChoice(
  index: number,
  calls: readonly ToolCall[],
  first: number,
  streamed: ReadonlySet<number> = new Set(),
): Record<string, unknown> | null {
  const fresh = toolCallsJson(calls, first).filter((c) => !streamed.has(c.index as number));
  if (fresh.length === 0) return null;
  return { index, delta: { tool_calls: fresh }, logprobs: null, finish_reason: null };
}

/**
 * A streamed chat choice carrying argument text of calls being written, as OpenAI streams a call: its first
 * piece with the call's id, type and name, the rest as `function.arguments` pieces of the same index.
 */
export function toolCallDeltasChoice(index: number, deltas: readonly ToolCallDelta[]): Record<string, unknown> {
  // One entry per call in a chunk, as OpenAI sends them: a frame's pieces of one call are joined.
  const tool_calls: Array<{
    index: number;
    id?: string;
    type?: string;
    function: { name?: string; arguments: string };
  }> = [];
  for (const d of deltas) {
    const last = tool_calls[tool_calls.length - 1];
    if (last?.index === d.index && d.id === undefined) last.function.arguments += d.arguments;
    else
      tool_calls.push(
        d.id !== undefined
          ? { index: d.index, id: d.id, type: 'function', function: { name: d.name, arguments: d.arguments } }
          : { index: d.index, function: { arguments: d.arguments } },
      );
  }
  return { index, delta: { tool_calls }, logprobs: null, finish_reason: null };
}

/** The last streamed choice of a row: empty text and its finish reason. */
export function finalChoice(kind: OpenAiKind, index: number, reason: FinishReason): Record<string, unknown> {
  const finish_reason = openAiFinishReason(reason);
  return kind === 'chat'
    ? { index, delta: {}, logprobs: null, finish_reason }
    : { index, text: '', logprobs: null, finish_reason };
}
