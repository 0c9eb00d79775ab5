/**
 * OpenAI's Responses API (`POST /v1/responses`) on one side, kvdesk's GenerateRequest and GenerationResult on
 * the other. Pure functions, as openai-adapter.ts is for chat completions; responses-routes.ts does the I/O.
 * kvdesk keeps no responses: each request carries its whole conversation in `input` (with `instructions` as
 * the system prompt); what would need stored state or hosted tools is refused, never ignored.
 */
import type {
  ChatMessage,
  GenerateRequest,
  GenerationResult,
  ToolCall,
  ToolCallDelta,
  ToolChoice,
  ToolDefinition,
} from '../../shared/contract';
import { inFrameOrder, joinTextParts, type MessageOrigin } from './http-util';
import {
  addReasoning,
  type Body,
  bad,
  boolean,
  conversationRequest,
  kvdeskExtras,
  number,
  present,
  type ReasoningEffort,
  reasoningEffort,
} from './openai-adapter';

/** A Responses request translated for the host, with the parameters a response repeats back. */
export interface MappedResponseRequest {
  model: string;
  stream: boolean;
  request: GenerateRequest;
  /** Where each of the request's messages came from (`instructions`, `input[i]`), for refusals that name one. */
  origins: MessageOrigin[];
  /** The request's settings as the response object shows them. */
  echo: ResponseEcho;
}

/** Parameters every response object repeats (OpenAI's defaults where the request left them out). */
export interface ResponseEcho {
  instructions: string | null;
  max_output_tokens: number | null;
  temperature: number | null;
  top_p: number | null;
  tools: Array<Record<string, unknown>>;
  tool_choice: unknown;
  parallel_tool_calls: boolean;
  text: { format: Record<string, unknown> };
  metadata: Record<string, unknown> | null;
  /** `auto`: the oldest turns are left out when the conversation outgrows the context. */
  truncation: 'auto' | 'disabled';
}

/** Parameters that need state or services kvdesk does not have: refused, naming them. */
const REFUSED: ReadonlyArray<[string, string]> = [
  ['previous_response_id', 'kvdesk keeps no responses: send the whole conversation in "input"'],
  ['conversation', 'kvdesk keeps no conversations: send the whole conversation in "input"'],
  ['prompt', 'kvdesk has no stored prompts: send the instructions and input'],
  ['top_logprobs', 'log-probabilities are on /v1/chat/completions (logprobs, top_logprobs)'],
  ['max_tool_calls', 'kvdesk does not limit tool calls across a response; use parallel_tool_calls: false for one'],
];

function refuseUnsupported(body: Body): void {
  for (const [key, why] of REFUSED) {
    // No alternatives asked for: what clients that always send the field send (OpenAI takes 0–20).
    if (key === 'top_logprobs' && body.top_logprobs === 0) continue;
    if (present(body, key)) throw bad(`"${key}" is not supported: ${why}.`, key);
  }
  if (body.background === true)
    throw bad('"background" responses are not supported: kvdesk keeps no responses.', 'background');
  // Codex and the Agents SDK ask for reasoning.encrypted_content (with store: false) to send the reasoning back
  // next turn: kvdesk's reasoning items carry it whole, as plain text, in their content. Nothing else is had.
  if (Array.isArray(body.include)) {
    for (const [i, value] of body.include.entries()) {
      if (value === 'reasoning.encrypted_content') continue;
      throw bad(
        `"include" value ${JSON.stringify(value)} is not supported: kvdesk can include only "reasoning.encrypted_content" (its reasoning items carry their text whole; nothing is encrypted). Leave the other values out.`,
        `include[${i}]`,
      );
    }
  }
  if (present(body, 'truncation') && body.truncation !== 'disabled' && body.truncation !== 'auto') {
    throw bad(
      '"truncation" must be "auto" (leave out the oldest turns when the conversation outgrows the context) or "disabled" (refuse it).',
      'truncation',
    );
  }
}

/** A message's text: a string, or input_text / output_text parts, one per line (as vLLM joins them). */
function contentText(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw bad(`${where} must be a string or a list of text parts.`, where);
  const texts: string[] = [];
  for (const [j, part] of content.entries()) {
    const p = part as { type?: unknown; text?: unknown } | null;
    if ((p?.type === 'input_text' || p?.type === 'output_text') && typeof p.text === 'string') texts.push(p.text);
    else {
      throw bad(
        `${where}[${j}]: only input_text and output_text parts are supported, got ${JSON.stringify(p?.type)}.`,
        `${where}[${j}]`,
      );
    }
  }
  return joinTextParts(texts);
}

/**
 * `input` as chat messages: a string is one user message; a list holds messages, the model's earlier function
 * calls (joined onto the assistant turn they follow) and their outputs (tool results).
 */
function inputMessages(input: unknown): { messages: ChatMessage[]; origins: MessageOrigin[] } {
  if (typeof input === 'string') return { messages: [{ role: 'user', content: input }], origins: [{ path: 'input' }] };
  if (!Array.isArray(input) || input.length === 0) {
    throw bad('"input" must be a string or a non-empty list of input items.', 'input');
  }
  const out: ChatMessage[] = [];
  const origins: MessageOrigin[] = [];
  let pendingReasoning: string | undefined;
  for (const [i, raw] of input.entries()) {
    const item = raw as Record<string, unknown> | null;
    const where = `input[${i}]`;
    // Reasoning waiting for its turn goes to the assistant message or call it comes before.
    const before = out.length;
    if (typeof item !== 'object' || item === null) throw bad(`${where} must be an object.`, where);
    const type = item.type ?? 'message';
    if (type === 'message') {
      const role = item.role === 'developer' ? 'system' : item.role;
      if (role !== 'user' && role !== 'assistant' && role !== 'system') {
        throw bad(
          `${where}.role must be user, assistant, system or developer, got ${JSON.stringify(item.role)}.`,
          `${where}.role`,
        );
      }
      out.push({ role, content: contentText(item.content, `${where}.content`) });
      origins.push({ path: where });
    } else if (type === 'function_call') {
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string' || typeof item.arguments !== 'string') {
        throw bad(`${where}: a function_call needs "call_id", "name" and "arguments" (JSON text).`, where);
      }
      if (!isJsonObjectText(item.arguments)) {
        throw bad(`${where}.arguments must be the JSON text of an object.`, `${where}.arguments`);
      }
      const call: ToolCall = { id: item.call_id, name: item.name, arguments: item.arguments };
      const last = out[out.length - 1];
      // Calls right after an assistant message (or after other calls) belong to that turn.
      if (last?.role === 'assistant') {
        last.toolCalls = [...(last.toolCalls ?? []), call];
        const origin = origins[origins.length - 1] as MessageOrigin;
        origin.calls = [...(origin.calls ?? []), where];
      } else {
        out.push({ role: 'assistant', content: '', toolCalls: [call] });
        origins.push({ path: where, calls: [where] });
      }
    } else if (type === 'reasoning') {
      // A thinking model's reasoning (its reasoning_text; a summary stands in where there is none) belongs to
      // the assistant turn that follows it.
      const parts = Array.isArray(item.content) && item.content.length > 0 ? item.content : item.summary;
      const text = Array.isArray(parts) ? parts.map((p) => (typeof p?.text === 'string' ? p.text : '')).join('') : '';
      pendingReasoning = (pendingReasoning ?? '') + text;
      continue;
    } else if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string')
        throw bad(`${where}: a function_call_output needs "call_id".`, `${where}.call_id`);
      out.push({ role: 'tool', content: contentText(item.output, `${where}.output`), toolCallId: item.call_id });
      origins.push({ path: where, toolCallId: `${where}.call_id` });
    } else {
      throw bad(
        `${where}.type ${JSON.stringify(type)} is not supported: kvdesk takes message, reasoning, function_call and function_call_output items.`,
        `${where}.type`,
      );
    }
    if (pendingReasoning !== undefined) {
      const turn = out[out.length - 1];
      // A turn's calls may come with reasoning of their own: it adds to the turn's.
      if (turn?.role === 'assistant' && (out.length > before || turn.toolCalls)) addReasoning(turn, pendingReasoning);
      pendingReasoning = undefined;
    }
  }
  return { messages: out, origins };
}

/** Whether text is the JSON of an object (the server reads the client's input; the host checks it too). */
function isJsonObjectText(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}

/** `tools`: function tools in the Responses form (`{type: "function", name, description, parameters, strict}`). */
function toolList(body: Body): Array<ToolDefinition & { strict?: boolean }> | undefined {
  const v = body.tools;
  if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return undefined;
  if (!Array.isArray(v)) throw bad('"tools" must be a list of {"type": "function", "name": …}.', 'tools');
  return v.map((t, i) => {
    const tool = t as Record<string, unknown> | null;
    if (tool?.type !== 'function') {
      throw bad(
        `tools[${i}].type must be "function" (kvdesk has no hosted tools), got ${JSON.stringify(tool?.type)}.`,
        `tools[${i}].type`,
      );
    }
    if (typeof tool.name !== 'string') throw bad(`tools[${i}] needs a "name".`, `tools[${i}].name`);
    const params = tool.parameters;
    if (params !== undefined && params !== null && (typeof params !== 'object' || Array.isArray(params))) {
      throw bad(`tools[${i}].parameters must be a JSON Schema object.`, `tools[${i}].parameters`);
    }
    return {
      name: tool.name,
      ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
      ...(params ? { parameters: params as Record<string, unknown> } : {}),
      ...(tool.strict === true ? { strict: true } : {}),
    };
  });
}

function toolChoice(body: Body): ToolChoice | undefined {
  const v = body.tool_choice;
  if (v === undefined || v === null) return undefined;
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  const c = v as { type?: unknown; name?: unknown };
  if (typeof c === 'object' && c.type === 'function' && typeof c.name === 'string') return { name: c.name };
  throw bad('"tool_choice" must be "none", "auto", "required" or {"type": "function", "name": …}.', 'tool_choice');
}

/** `text.format`: text, a JSON object, or JSON that conforms to a schema (`{type: "json_schema", schema}`). */
function textFormat(body: Body): Record<string, unknown> {
  const text = body.text as { format?: unknown } | undefined | null;
  if (text === undefined || text === null) return { type: 'text' };
  if (typeof text !== 'object') throw bad('"text" must be an object such as {"format": {"type": "text"}}.', 'text');
  const f = text.format as { type?: unknown; schema?: unknown } | undefined | null;
  if (f === undefined || f === null) return { type: 'text' };
  if (f.type === 'text' || f.type === 'json_object') return f as Record<string, unknown>;
  if (f.type === 'json_schema') {
    if (typeof f.schema !== 'object' || f.schema === null || Array.isArray(f.schema)) {
      throw bad('text.format.schema must be a JSON Schema object.', 'text.format');
    }
    return f as Record<string, unknown>;
  }
  throw bad(
    `text.format type ${JSON.stringify(f.type)} is not supported: use text, json_object or json_schema.`,
    'text.format',
  );
}

/**
 * The `strict` a function tool is echoed with: whether kvdesk holds its calls' arguments to its whole schema,
 * whatever the request said (as chat completions, kvdesk takes `strict` and does no more for it). A forced call
 * (tool_choice `required`, or this tool named) is written as structured output to the schema, value bounds and all
 * (what kvdesk cannot enforce is refused); in `auto` a call is held to its shape only, its value bounds not
 * (`minimum`, `pattern`, …), in some forms not at all; with `none` it is not called.
 */
function heldToSchema(choice: ToolChoice | undefined, name: string): boolean {
  return choice === 'required' || (typeof choice === 'object' && choice.name === name);
}

/** Translates a Responses body; throws HttpError 400 naming the parameter for malformed input. */
export function mapResponsesRequest(input: unknown): MappedResponseRequest {
  if (!input || typeof input !== 'object' || Array.isArray(input)) {
    throw bad('The request body must be a JSON object.', 'body');
  }
  const body = input as Body;
  if (typeof body.model !== 'string' || body.model.length === 0) {
    throw bad('"model" is required: name a loaded model (GET /v1/models lists them).', 'model');
  }
  refuseUnsupported(body);
  const instructions = present(body, 'instructions') ? body.instructions : null;
  if (instructions !== null && typeof instructions !== 'string') {
    throw bad('"instructions" must be a string (the system prompt).', 'instructions');
  }
  const { messages, origins } = inputMessages(body.input);
  const maxTokens = number(body, 'max_output_tokens', { min: 1, int: true });
  const temperature = number(body, 'temperature', { min: 0, max: 2 });
  const topP = number(body, 'top_p', { min: 0, max: 1 });
  const stream = boolean(body, 'stream') ?? false;
  const parallel = boolean(body, 'parallel_tool_calls');
  const tools = toolList(body);
  const choice = toolChoice(body);
  const format = textFormat(body);

  const request = conversationRequest(body.model, instructions as string | null, messages, {
    maxNewTokens: maxTokens,
    temperature,
    topP,
    tools: tools?.map(({ strict: _, ...t }) => t),
    toolChoice: choice,
    parallelToolCalls: parallel,
  });
  const effort = effortOf(body);
  if (effort === 'none') request.thinking = false;
  else if (effort !== undefined) request.reasoningEffort = effort;
  const budget = budgetOf(body);
  if (budget !== undefined) request.thinkingBudget = budget;
  const truncation = body.truncation === 'auto' ? 'auto' : 'disabled';
  if (truncation === 'auto') request.contextOverflow = 'drop-oldest';
  if (format.type === 'json_object') request.responseFormat = 'json';
  if (format.type === 'json_schema') request.jsonSchema = format.schema as Record<string, unknown>;

  const metadata = body.metadata;
  if (metadata !== undefined && metadata !== null && (typeof metadata !== 'object' || Array.isArray(metadata))) {
    throw bad('"metadata" must be an object of strings.', 'metadata');
  }
  return {
    model: body.model,
    stream,
    request,
    // The instructions are the request's first message when there are any.
    origins: request.messages?.length === messages.length ? origins : [{ path: 'instructions' }, ...origins],
    echo: {
      instructions: instructions as string | null,
      max_output_tokens: maxTokens ?? null,
      temperature: temperature ?? null,
      top_p: topP ?? null,
      tools: (tools ?? []).map(({ strict: _, ...t }) => ({
        type: 'function',
        name: t.name,
        description: t.description ?? null,
        parameters: t.parameters ?? null,
        strict: heldToSchema(choice, t.name),
      })),
      tool_choice:
        choice === undefined ? 'auto' : typeof choice === 'string' ? choice : { type: 'function', name: choice.name },
      parallel_tool_calls: parallel ?? true,
      text: { format },
      metadata:
        typeof metadata === 'object' && metadata !== null && !Array.isArray(metadata)
          ? (metadata as Record<string, unknown>)
          : null,
      truncation,
    },
  };
}

/**
 * `reasoning.effort`: `none` asks a thinking model to answer at once (where its template has the switch); the
 * other efforts leave it as it is (kvdesk has no levels). `summary` is accepted, but none is written: the
 * reasoning item's summary is empty and its content is the reasoning itself.
 */
function effortOf(body: Body): ReasoningEffort | undefined {
  if (!present(body, 'reasoning') || body.reasoning === null) return undefined;
  const r = body.reasoning as Record<string, unknown>;
  if (typeof r !== 'object' || Array.isArray(r)) throw bad('"reasoning" must be an object.', 'reasoning');
  if (r.effort === undefined || r.effort === null) return undefined;
  return reasoningEffort(r.effort, 'reasoning.effort');
}

/** `reasoning.max_tokens` (OpenRouter's): the thinking budget. */
function budgetOf(body: Body): number | undefined {
  const r = body.reasoning as Record<string, unknown> | null | undefined;
  if (typeof r !== 'object' || r === null) return undefined;
  return number(r, 'max_tokens', { min: 0, int: true, field: 'reasoning.max_tokens' });
}

/** The identity of one response, shared by its body and every event of its stream. */
export interface ResponseHead {
  id: string;
  created_at: number;
  model: string;
}

/** A response id made from the host's request id; output items take theirs from it and their place. */
export const responseId = (requestId: string) => `resp_${requestId.replaceAll('-', '')}`;
export const messageItemId = (head: ResponseHead, index: number) => `msg_${head.id.slice(5)}_${index}`;
export const callItemId = (head: ResponseHead, index: number) => `fc_${head.id.slice(5)}_${index}`;
export const reasoningItemId = (head: ResponseHead, index: number) => `rs_${head.id.slice(5)}_${index}`;

/** A thinking model's reasoning as an output item (its text as reasoning_text; no summary, nothing encrypted). */
export function reasoningItem(id: string, text: string, status: 'in_progress' | 'completed' | 'incomplete') {
  return {
    type: 'reasoning',
    id,
    summary: [],
    content: status === 'in_progress' && text === '' ? [] : [reasoningPart(text)],
    encrypted_content: null,
    status,
  };
}

const reasoningPart = (text: string) => ({ type: 'reasoning_text', text });

/** An assistant message output item. */
export function messageItem(id: string, text: string, status: 'in_progress' | 'completed' | 'incomplete') {
  return {
    type: 'message',
    id,
    status,
    role: 'assistant',
    content: status === 'in_progress' && text === '' ? [] : [textPart(text)],
  };
}

export function textPart(text: string) {
  return { type: 'output_text', text, annotations: [], logprobs: [] };
}

/** A function call output item (`arguments` '' while it is being written). */
export function callItem(
  id: string,
  call: Pick<ToolCall, 'id' | 'name'>,
  args: string,
  status: 'in_progress' | 'completed' | 'incomplete',
) {
  return { type: 'function_call', id, call_id: call.id, name: call.name, arguments: args, status };
}

/** The Responses usage block. */
export function responseUsage(result: GenerationResult) {
  const output = result.rows.reduce((s, r) => s + r.tokenIds.length, 0);
  return {
    input_tokens: result.promptTokens,
    input_tokens_details: { cached_tokens: result.reusedTokens, cache_write_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: result.rows.reduce((s, r) => s + (r.reasoningTokens ?? 0), 0) },
    total_tokens: result.promptTokens + output,
  };
}

/** Whether a reply ran out of room (tokens, context or budget): the response is then `incomplete`. */
export function incomplete(result: GenerationResult): boolean {
  return result.finishReason === 'length' || result.finishReason === 'context';
}

/** The response object: its settings, status, output items (the text, then the calls) and usage. */
export function responseBody(
  head: ResponseHead,
  echo: ResponseEcho,
  status: 'in_progress' | 'completed' | 'incomplete' | 'failed',
  output: unknown[],
  result?: GenerationResult,
  error: { code: string; message: string } | null = null,
): Record<string, unknown> {
  return {
    id: head.id,
    object: 'response',
    created_at: head.created_at,
    status,
    error,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    model: head.model,
    output,
    ...echo,
    store: false,
    ...(result ? { usage: responseUsage(result), kvdesk: kvdeskExtras(result) } : {}),
  };
}

/**
 * The output items of a finished reply: a thinking model's reasoning, its message (if it has text, or made no
 * call), then its calls.
 */
export function outputItems(head: ResponseHead, result: GenerationResult): unknown[] {
  const row = result.rows[0];
  const text = row?.text ?? '';
  const calls = row?.toolCalls ?? [];
  const status = incomplete(result) ? 'incomplete' : 'completed';
  const items: unknown[] = [];
  // Reasoning cut off by the token limit is incomplete; one the answer followed is complete.
  if (row?.reasoning) {
    const done = text.length > 0 || calls.length > 0 || status === 'completed';
    items.push(reasoningItem(reasoningItemId(head, 0), row.reasoning, done ? 'completed' : 'incomplete'));
  }
  if (text.trim().length > 0 || calls.length === 0)
    items.push(messageItem(messageItemId(head, items.length), text, status));
  for (const call of calls) items.push(callItem(callItemId(head, items.length), call, call.arguments, 'completed'));
  return items;
}

/** One event of a response stream (`type` and `sequence_number` first, as OpenAI writes them). */
export type StreamEvent = { type: string; sequence_number: number } & Record<string, unknown>;

/**
 * A response's event stream, from the host's frames: response.created and .in_progress; for each output item
 * (reasoning, a message, a function call) its added, delta and done events in order — text after calls or
 * reasoning opens a new message —; then response.completed (or .incomplete) with the output exactly as streamed.
 */
export class ResponseEvents {
  private sequence = 0;
  /** The output items so far (each as its latest event showed it), and the message being written. */
  private readonly output: unknown[] = [];
  private open: { index: number; id: string; text: string } | null = null;
  /** The reasoning item being written (a thinking model's), until the answer or a call begins. */
  private thought: { index: number; id: string; text: string } | null = null;
  /** A call whose arguments stream as they are written (held to its schema): its output item, until it ends. */
  private callOpen: { at: number; index: number; id: string; call: { id: string; name: string }; args: string } | null =
    null;
  /** Calls completed so far (the next one's index in the reply), and those whose arguments streamed. */
  private callsSeen = 0;
  private readonly streamed = new Set<number>();

  constructor(
    private readonly head: ResponseHead,
    private readonly echo: ResponseEcho,
  ) {}

  private event(out: StreamEvent[], type: string, data: Record<string, unknown>): void {
    out.push({ type, sequence_number: this.sequence++, ...data });
  }

  start(): StreamEvent[] {
    const out: StreamEvent[] = [];
    const response = responseBody(this.head, this.echo, 'in_progress', []);
    this.event(out, 'response.created', { response });
    this.event(out, 'response.in_progress', { response });
    return out;
  }

  /**
   * Text, completed calls and (calls held to their schemas) arguments written so far, of the latest tokens. A
   * frame's text comes before the calls it completes, except after a streaming call (which holds no text).
   */
  tokens(
    text: string,
    calls: readonly ToolCall[],
    deltas: readonly ToolCallDelta[] = [],
    reasoning = '',
  ): StreamEvent[] {
    const out: StreamEvent[] = [];
    this.reasoning(out, reasoning);
    if (text.length > 0 || calls.length > 0 || deltas.length > 0) this.closeReasoning(out, 'completed');
    inFrameOrder(this.callOpen?.at ?? null, deltas, {
      text: () => this.text(out, text),
      pieces: (ds) => this.argumentDeltas(out, ds),
      completed: () => this.completed(out, calls),
    });
    return out;
  }

  /**
   * Reasoning mostly comes first: its item is added with its first piece, and done when anything else begins. A
   * model may reason again after text or a call (gpt-oss: a preamble, then another analysis message): the open
   * message (or call) is done first, and text after the reasoning opens a new message.
   */
  private reasoning(out: StreamEvent[], text: string): void {
    if (text.length === 0) return;
    if (!this.thought) {
      this.closeMessage(out, 'completed');
      this.endCall(out, 'incomplete');
      const index = this.output.length;
      const id = reasoningItemId(this.head, index);
      this.output.push(reasoningItem(id, '', 'in_progress'));
      this.event(out, 'response.output_item.added', {
        output_index: index,
        item: reasoningItem(id, '', 'in_progress'),
      });
      this.event(out, 'response.content_part.added', {
        item_id: id,
        output_index: index,
        content_index: 0,
        part: reasoningPart(''),
      });
      this.thought = { index, id, text: '' };
    }
    const t = this.thought;
    t.text += text;
    this.event(out, 'response.reasoning_text.delta', {
      item_id: t.id,
      output_index: t.index,
      content_index: 0,
      delta: text,
    });
  }

  private closeReasoning(out: StreamEvent[], status: 'completed' | 'incomplete'): void {
    const t = this.thought;
    if (!t) return;
    const at = { item_id: t.id, output_index: t.index, content_index: 0 };
    this.event(out, 'response.reasoning_text.done', { ...at, text: t.text });
    this.event(out, 'response.content_part.done', { ...at, part: reasoningPart(t.text) });
    this.output[t.index] = reasoningItem(t.id, t.text, status);
    this.event(out, 'response.output_item.done', { output_index: t.index, item: this.output[t.index] });
    this.thought = null;
  }

  private text(out: StreamEvent[], text: string): void {
    if (text.length === 0) return;
    const m = this.open ?? this.openMessage(out);
    m.text += text;
    this.event(out, 'response.output_text.delta', {
      item_id: m.id,
      output_index: m.index,
      content_index: 0,
      delta: text,
      logprobs: [],
    });
  }

  /** A streaming call's first piece adds its output item; each piece is a function_call_arguments.delta. */
  private argumentDeltas(out: StreamEvent[], deltas: readonly ToolCallDelta[]): void {
    for (const d of deltas) {
      if (d.id !== undefined) {
        this.closeMessage(out, 'completed');
        this.endCall(out, 'incomplete');
        const index = this.output.length;
        const id = callItemId(this.head, index);
        const call = { id: d.id, name: d.name ?? '' };
        this.output.push(callItem(id, call, '', 'in_progress'));
        this.event(out, 'response.output_item.added', {
          output_index: index,
          item: callItem(id, call, '', 'in_progress'),
        });
        this.callOpen = { at: d.index, index, id, call, args: '' };
        this.streamed.add(d.index);
      }
      const c = this.callOpen;
      if (!c || d.index !== c.at || d.arguments.length === 0) continue;
      c.args += d.arguments;
      this.event(out, 'response.function_call_arguments.delta', {
        item_id: c.id,
        output_index: c.index,
        delta: d.arguments,
      });
    }
  }

  /** Completed calls: a streamed one's item ends (its arguments as streamed); another is a whole item. */
  private completed(out: StreamEvent[], calls: readonly ToolCall[]): void {
    for (const call of calls) {
      const at = this.callsSeen++;
      if (this.streamed.has(at)) {
        if (this.callOpen?.at === at) this.endCall(out, 'completed');
        continue;
      }
      this.closeMessage(out, 'completed');
      this.call(out, call);
    }
  }

  /** The streaming call's end: its arguments done and its item done (incomplete when the reply cut it). */
  private endCall(out: StreamEvent[], status: 'completed' | 'incomplete'): void {
    const c = this.callOpen;
    if (!c) return;
    this.event(out, 'response.function_call_arguments.done', {
      item_id: c.id,
      output_index: c.index,
      name: c.call.name,
      arguments: c.args,
    });
    this.output[c.index] = callItem(c.id, c.call, c.args, status);
    this.event(out, 'response.output_item.done', { output_index: c.index, item: this.output[c.index] });
    this.callOpen = null;
  }

  /** The end: the open message closes (a reply with neither text nor calls is one empty message). */
  done(result: GenerationResult): StreamEvent[] {
    const out: StreamEvent[] = [];
    const status = incomplete(result) ? 'incomplete' : 'completed';
    // Reasoning cut off by the token limit (nothing came after it), and a call cut off while its arguments
    // streamed.
    this.closeReasoning(out, status);
    this.endCall(out, 'incomplete');
    // A reply with neither text nor calls is one empty message (after its reasoning, if it has some).
    if (!this.output.some((item) => (item as { type: string }).type !== 'reasoning')) this.openMessage(out);
    this.closeMessage(out, status);
    this.event(out, `response.${status}`, {
      response: responseBody(this.head, this.echo, status, this.output, result),
    });
    return out;
  }

  /** A failure after the stream began: OpenAI's error event, then response.failed. */
  failed(code: string, message: string, param: string | null): StreamEvent[] {
    const out: StreamEvent[] = [];
    // The text written so far stays in the failed response's output.
    if (this.thought) this.output[this.thought.index] = reasoningItem(this.thought.id, this.thought.text, 'incomplete');
    if (this.open) this.output[this.open.index] = messageItem(this.open.id, this.open.text, 'incomplete');
    this.event(out, 'error', { code, message, param });
    this.event(out, 'response.failed', {
      response: responseBody(this.head, this.echo, 'failed', this.output, undefined, { code, message }),
    });
    return out;
  }

  private openMessage(out: StreamEvent[]) {
    const index = this.output.length;
    const id = messageItemId(this.head, index);
    this.output.push(messageItem(id, '', 'in_progress'));
    this.event(out, 'response.output_item.added', { output_index: index, item: messageItem(id, '', 'in_progress') });
    this.event(out, 'response.content_part.added', {
      item_id: id,
      output_index: index,
      content_index: 0,
      part: textPart(''),
    });
    this.open = { index, id, text: '' };
    return this.open;
  }

  private closeMessage(out: StreamEvent[], status: 'completed' | 'incomplete'): void {
    if (!this.open) return;
    const { index, id, text } = this.open;
    const at = { item_id: id, output_index: index, content_index: 0 };
    this.event(out, 'response.output_text.done', { ...at, text, logprobs: [] });
    this.event(out, 'response.content_part.done', { ...at, part: textPart(text) });
    this.output[index] = messageItem(id, text, status);
    this.event(out, 'response.output_item.done', { output_index: index, item: this.output[index] });
    this.open = null;
  }

  private call(out: StreamEvent[], call: ToolCall): void {
    const index = this.output.length;
    const id = callItemId(this.head, index);
    this.output.push(callItem(id, call, '', 'in_progress'));
    this.event(out, 'response.output_item.added', { output_index: index, item: callItem(id, call, '', 'in_progress') });
    this.event(out, 'response.function_call_arguments.delta', {
      item_id: id,
      output_index: index,
      delta: call.arguments,
    });
    this.event(out, 'response.function_call_arguments.done', {
      item_id: id,
      output_index: index,
      name: call.name,
      arguments: call.arguments,
    });
    this.output[index] = callItem(id, call, call.arguments, 'completed');
    this.event(out, 'response.output_item.done', { output_index: index, item: this.output[index] });
  }
}
