/**
 * Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`) on one side, kvdesk's
 * GenerateRequest and GenerationResult on the other: pure functions and the stream's event builder, as
 * openai-adapter.ts and responses-adapter.ts are for OpenAI's endpoints. Content blocks map onto the chat
 * contract: text, `tool_use` (an assistant's calls), `thinking` (a thinking model's reasoning) and `tool_result`
 * (the user's answers to calls); what kvdesk cannot honour (images, documents, server tools) is refused with a
 * 400 naming it.
 */
import { createHash } from 'node:crypto';
import type {
  ChatMessage,
  GenerateRequest,
  GenerationResult,
  ToolCall,
  ToolCallDelta,
  ToolChoice,
  ToolDefinition,
} from '../../shared/contract';
import { type HttpError, inFrameOrder, joinTextParts, type MessageOrigin, RawJson } from './http-util';
import {
  addReasoning,
  argumentsText,
  type Body,
  bad,
  boolean,
  conversationRequest,
  kvdeskExtras,
  number,
  present,
  stopList,
} from './openai-adapter';

/** A Messages request translated for the host. */
export interface MappedMessagesRequest {
  model: string;
  stream: boolean;
  request: GenerateRequest;
  /** Where each of the request's messages came from (`system`, `messages[i]`, a block), for refusals that name one. */
  origins: MessageOrigin[];
  /** The request enabled thinking: a thinking model's reasoning comes back as thinking blocks (else not at all). */
  showThinking: boolean;
}

/** Parameters kvdesk cannot honour: refused, naming them. */
const REFUSED: ReadonlyArray<[string, string]> = [
  ['container', 'kvdesk runs no containers'],
  ['mcp_servers', 'kvdesk connects to no MCP servers'],
];

/**
 * The text of a block list (or a string), its blocks one per line (as vLLM joins them: glued, "Summarize the
 * file." and "The file says hi." would read as one sentence); other blocks are refused, naming their place.
 */
function textOf(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw bad(`${where} must be a string or a list of text blocks.`, where);
  const texts: string[] = [];
  for (const [j, raw] of content.entries()) {
    const block = raw as { type?: unknown; text?: unknown } | null;
    if (block?.type === 'text' && typeof block.text === 'string') texts.push(block.text);
    else
      throw bad(
        `${where}[${j}]: only text blocks are supported here, got ${JSON.stringify(block?.type)}.`,
        `${where}[${j}]`,
      );
  }
  return joinTextParts(texts);
}

/**
 * One message's blocks as chat turns: an assistant's text and `tool_use` blocks are one turn with calls; a
 * user's `tool_result` blocks are tool turns (before any text of the same message, which is a user turn).
 */
function turnsOf(role: 'user' | 'assistant', content: unknown, i: number): Turn[] {
  const where = `messages[${i}].content`;
  const path = `messages[${i}]`;
  if (typeof content === 'string') return [{ msg: { role, content }, origin: { path } }];
  if (!Array.isArray(content)) throw bad(`${where} must be a string or a list of content blocks.`, where);
  // Its text blocks one per line, as textOf joins them.
  const texts: string[] = [];
  let reasoning: string | undefined;
  const calls: ToolCall[] = [];
  const callPaths: string[] = [];
  const results: Turn[] = [];
  for (const [j, raw] of content.entries()) {
    const block = raw as Record<string, unknown> | null;
    const at = `${where}[${j}]`;
    const type = block?.type;
    if (type === 'text' && typeof block?.text === 'string') texts.push(block.text);
    else if (type === 'thinking' && role === 'assistant' && typeof block?.thinking === 'string') {
      reasoning = (reasoning ?? '') + block.thinking;
    } else if (type === 'redacted_thinking' && role === 'assistant') {
      // Another model's encrypted reasoning: nothing a local model can read.
    } else if (type === 'tool_use' && role === 'assistant') {
      if (typeof block?.id !== 'string' || typeof block.name !== 'string') {
        throw bad(`${at}: a tool_use block needs "id" and "name".`, at);
      }
      const input = block.input ?? {};
      if (typeof input !== 'object' || input === null || Array.isArray(input)) {
        throw bad(`${at}.input must be an object.`, `${at}.input`);
      }
      calls.push({ id: block.id, name: block.name, arguments: argumentsText(input, `${at}.input`) });
      callPaths.push(at);
    } else if (type === 'tool_result' && role === 'user') {
      if (typeof block?.tool_use_id !== 'string') throw bad(`${at}: a tool_result block needs "tool_use_id".`, at);
      const body = block.content === undefined ? '' : textOf(block.content, `${at}.content`);
      results.push({
        msg: {
          role: 'tool',
          content: block.is_error === true ? `Error: ${body}` : body,
          toolCallId: block.tool_use_id,
        },
        origin: { path: at, toolCallId: `${at}.tool_use_id` },
      });
    } else {
      throw bad(
        `${at}: ${JSON.stringify(type)} blocks are not supported in a ${role} message (kvdesk takes text, tool_use and thinking from the assistant and tool_result from the user).`,
        `${at}.type`,
      );
    }
  }
  const text = joinTextParts(texts);
  if (role === 'assistant') {
    const turn: ChatMessage = { role, content: text };
    if (reasoning !== undefined) turn.reasoning = reasoning;
    if (calls.length > 0) turn.toolCalls = calls;
    return [{ msg: turn, origin: { path, ...(callPaths.length > 0 ? { calls: callPaths } : {}) } }];
  }
  return text.length > 0 || results.length === 0
    ? [...results, { msg: { role, content: text }, origin: { path } }]
    : results;
}

/** A chat turn and where in the body it came from. */
interface Turn {
  msg: ChatMessage;
  origin: MessageOrigin;
}

/** The body's messages as chat turns, and where each came from. */
function messagesOf(body: Body): { messages: ChatMessage[]; origins: MessageOrigin[] } {
  const raw = body.messages;
  if (!Array.isArray(raw) || raw.length === 0) throw bad('"messages" must be a non-empty list.', 'messages');
  const turns = raw.flatMap((m, i): Turn[] => {
    const msg = m as { role?: unknown; content?: unknown } | null;
    if (msg?.role === 'system')
      return [
        {
          msg: { role: 'system', content: textOf(msg.content, `messages[${i}].content`) },
          origin: { path: `messages[${i}]` },
        },
      ];
    if (msg?.role !== 'user' && msg?.role !== 'assistant') {
      throw bad(
        `messages[${i}].role must be user, assistant or system, got ${JSON.stringify(msg?.role)}.`,
        `messages[${i}].role`,
      );
    }
    // As Anthropic answers: every message has content but a final assistant one (a prefill may be empty).
    const empty = msg.content === '' || (Array.isArray(msg.content) && msg.content.length === 0);
    if (empty && !(msg.role === 'assistant' && i === raw.length - 1)) {
      throw bad(
        `messages[${i}]: all messages must have non-empty content except for the optional final assistant message.`,
        `messages[${i}].content`,
      );
    }
    return turnsOf(msg.role, msg.content, i);
  });
  // Consecutive user (or assistant) turns are one turn, as Anthropic combines them: templates often require
  // the roles to alternate.
  const merged: ChatMessage[] = [];
  const origins: MessageOrigin[] = [];
  for (const { msg: t, origin } of turns) {
    const prev = merged[merged.length - 1];
    if (prev && prev.role === t.role && (t.role === 'user' || t.role === 'assistant')) {
      prev.content = [prev.content, t.content].filter((s) => s.length > 0).join('\n\n');
      if (t.toolCalls) prev.toolCalls = [...(prev.toolCalls ?? []), ...t.toolCalls];
      if (t.reasoning) addReasoning(prev, t.reasoning);
      const at = origins[origins.length - 1] as MessageOrigin;
      if (origin.calls) at.calls = [...(at.calls ?? []), ...origin.calls];
    } else {
      merged.push({ ...t });
      origins.push({ ...origin });
    }
  }
  return { messages: merged, origins };
}

/** `tools`: custom tools (`{name, description, input_schema}`); server tools (web search, bash…) are refused. */
function toolList(body: Body): ToolDefinition[] | undefined {
  const v = body.tools;
  if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return undefined;
  if (!Array.isArray(v)) throw bad('"tools" must be a list of {"name", "input_schema"}.', 'tools');
  return v.map((t, i) => {
    const tool = t as Record<string, unknown> | null;
    if (tool?.type !== undefined && tool.type !== null && tool.type !== 'custom') {
      throw bad(
        `tools[${i}]: ${JSON.stringify(tool.type)} is a server tool; kvdesk runs custom tools only.`,
        `tools[${i}].type`,
      );
    }
    if (typeof tool?.name !== 'string') throw bad(`tools[${i}] needs a "name".`, `tools[${i}].name`);
    const schema = tool.input_schema;
    if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
      throw bad(`tools[${i}].input_schema must be a JSON Schema object.`, `tools[${i}].input_schema`);
    }
    return {
      name: tool.name,
      ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
      parameters: schema as Record<string, unknown>,
    };
  });
}

/** `tool_choice`: auto, any (a call), tool (that one), none; `disable_parallel_tool_use`. */
function toolChoice(body: Body): { choice?: ToolChoice; parallel?: boolean } {
  const v = body.tool_choice as { type?: unknown; name?: unknown; disable_parallel_tool_use?: unknown } | undefined;
  if (v === undefined || v === null) return {};
  const parallel = v.disable_parallel_tool_use === true ? { parallel: false } : {};
  switch (v.type) {
    case 'auto':
      return { choice: 'auto', ...parallel };
    case 'any':
      return { choice: 'required', ...parallel };
    case 'none':
      return { choice: 'none' };
    case 'tool':
      if (typeof v.name === 'string') return { choice: { name: v.name }, ...parallel };
  }
  throw bad('"tool_choice" must be {"type": "auto" | "any" | "none"} or {"type": "tool", "name": …}.', 'tool_choice');
}

/** Translates a Messages body; throws HttpError 400 naming the parameter for malformed input. */
export function mapMessagesRequest(input: unknown, opts: { countOnly?: boolean } = {}): MappedMessagesRequest {
  if (!input || typeof input !== 'object' || Array.isArray(input)) {
    throw bad('The request body must be a JSON object.', 'body');
  }
  const body = input as Body;
  if (typeof body.model !== 'string' || body.model.length === 0) {
    throw bad('"model" is required: name a loaded model (GET /v1/models lists them).', 'model');
  }
  for (const [key, why] of REFUSED) if (present(body, key)) throw bad(`"${key}" is not supported: ${why}.`, key);
  const thinking = thinkingOf(body);
  const output = body.output_config as { format?: { type?: unknown; schema?: unknown }; effort?: unknown } | undefined;
  if (output !== undefined && output !== null && (typeof output !== 'object' || Array.isArray(output))) {
    throw bad('"output_config" must be an object.', 'output_config');
  }
  let effort: 'low' | 'medium' | 'high' | 'max' | undefined;
  if (output?.effort !== undefined && output.effort !== null) {
    if (output.effort !== 'low' && output.effort !== 'medium' && output.effort !== 'high' && output.effort !== 'max') {
      throw bad('output_config.effort must be "low", "medium", "high" or "max".', 'output_config.effort');
    }
    effort = output.effort;
  }
  const maxTokens = opts.countOnly ? undefined : number(body, 'max_tokens', { min: 1, int: true });
  if (!opts.countOnly && maxTokens === undefined) throw bad('"max_tokens" is required.', 'max_tokens');
  const system = present(body, 'system') ? textOf(body.system, 'system') : undefined;
  const { messages, origins } = messagesOf(body);
  const tools = toolList(body);
  const { choice, parallel } = toolChoice(body);
  // As Anthropic refuses it (its forced call leaves the model no room to think first), in its words.
  if (thinking === true && (choice === 'required' || typeof choice === 'object')) {
    throw bad('Thinking may not be enabled when tool_choice forces tool use.', 'tool_choice');
  }
  const request = conversationRequest(body.model, system, messages, {
    maxNewTokens: maxTokens,
    temperature: number(body, 'temperature', { min: 0, max: 1 }),
    topP: number(body, 'top_p', { min: 0, max: 1 }),
    topK: number(body, 'top_k', { min: 0, int: true }),
    stop: stopList(body, 'stop_sequences'),
    tools,
    toolChoice: choice,
    parallelToolCalls: parallel,
  });
  // As Anthropic: a request without `thinking` is one with thinking off (the model answers at once), not one
  // whose reasoning is written and hidden.
  request.thinking = thinking ?? false;
  if (effort !== undefined) request.reasoningEffort = effort;
  const budget = thinking === true ? (body.thinking as { budget_tokens?: unknown }).budget_tokens : undefined;
  if (budget !== undefined && budget !== null) {
    if (typeof budget !== 'number' || !Number.isInteger(budget) || budget < 0)
      throw bad('thinking.budget_tokens must be a whole number of tokens (0 or more).', 'thinking.budget_tokens');
    // As Anthropic: the answer needs room after the reasoning.
    if (maxTokens !== undefined && budget >= maxTokens)
      throw bad('thinking.budget_tokens must be less than max_tokens.', 'thinking.budget_tokens');
    request.thinkingBudget = budget;
  }
  // A final assistant message is a prefill: the reply continues it (and is the continuation only).
  const final = messages[messages.length - 1];
  if (final?.role === 'assistant') {
    const at = `messages[${(body.messages as unknown[]).length - 1}]`;
    if (final.toolCalls?.length) {
      throw bad(`${at}: a final assistant message to continue must be text, not tool_use.`, `${at}.content`);
    }
    // As Anthropic: "final assistant content cannot end with trailing whitespace".
    if (/\s$/.test(final.content)) {
      throw bad(`${at}: final assistant content cannot end with trailing whitespace.`, `${at}.content`);
    }
    request.continueFinal = true;
  }
  const format = output?.format;
  if (format !== undefined && format !== null) {
    if (format.type !== 'json_schema' || typeof format.schema !== 'object' || format.schema === null) {
      throw bad('output_config.format must be {"type": "json_schema", "schema": {…}}.', 'output_config.format');
    }
    request.jsonSchema = format.schema as Record<string, unknown>;
  }
  return {
    model: body.model,
    stream: boolean(body, 'stream') ?? false,
    request,
    // The system prompt is the request's first message when there is one.
    origins: request.messages?.length === messages.length ? origins : [{ path: 'system' }, ...origins],
    showThinking: thinking === true,
  };
}

/**
 * `thinking`: `enabled` (or `adaptive`) asks a thinking model to reason, `disabled` — or leaving it out (null), as
 * Anthropic's default — to answer at once. An enabled thinking's `budget_tokens` is the thinking budget (the
 * reasoning is closed for the model after that many).
 */
function thinkingOf(body: Body): boolean | undefined {
  if (!present(body, 'thinking')) return undefined;
  const type = (body.thinking as { type?: unknown } | null)?.type;
  if (type === 'enabled' || type === 'adaptive') return true;
  if (type === 'disabled') return false;
  throw bad(
    '"thinking" must be {"type": "enabled", "budget_tokens": …}, {"type": "disabled"} or leave it out.',
    'thinking',
  );
}

/**
 * Why a reply stopped, in Anthropic's words. max_tokens beyond the room the context leaves is clipped to it
 * (kvdesk.context_clip): a reply that ran to the clipped limit was cut by the context window, not by max_tokens.
 */
export function stopReason(result: Pick<GenerationResult, 'finishReason' | 'clipped' | 'rows'>): string {
  const clip = result.clipped;
  if (
    result.finishReason === 'length' &&
    clip !== undefined &&
    (result.rows[0]?.tokenIds.length ?? 0) >= clip.clippedMaxTokens
  )
    return 'model_context_window_exceeded';
  switch (result.finishReason) {
    case 'eos':
      return 'end_turn';
    case 'stop':
      return 'stop_sequence';
    case 'tool_calls':
      return 'tool_use';
    case 'context':
      return 'model_context_window_exceeded';
    default:
      return 'max_tokens';
  }
}

/** Anthropic's usage block: kvdesk's prompt cache reads count as cache reads. */
export function messageUsage(cached: number, inputTokens: number, outputTokens: number) {
  return {
    input_tokens: inputTokens - cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    output_tokens: outputTokens,
    cache_creation: null,
    server_tool_use: null,
    service_tier: 'standard',
    inference_geo: null,
  };
}

/** Fields of a message that kvdesk never fills (containers, refusals, diagnostics). */
const MESSAGE_NULLS = { container: null, stop_details: null, diagnostics: null };

/** A message id made from the host's request id. */
export const messageId = (requestId: string) => `msg_${requestId.replaceAll('-', '')}`;

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * A call's id as Anthropic writes its own (`toolu_01` and 22 letters and digits): the host's ids are OpenAI's
 * (`call_…`) or Mistral's 9 characters. Made from the host's id, so a call's streamed block and the whole reply say
 * the same; an id already in Anthropic's form is kept. What comes back in `tool_use` / `tool_result` blocks is
 * taken as it is (any id a client has, this one or another API's).
 */
export function anthropicToolId(id: string): string {
  if (/^toolu_[A-Za-z0-9_-]+$/.test(id)) return id;
  const digest = createHash('sha256').update(id).digest();
  let out = 'toolu_01';
  for (let i = 0; i < 22; i++) out += BASE62[(digest[i] as number) % BASE62.length];
  return out;
}

const toolUse = (call: ToolCall, input: unknown) => ({
  type: 'tool_use',
  id: anthropicToolId(call.id),
  name: call.name,
  input,
});

/** A thinking block: kvdesk signs nothing, so its signature is empty. */
const thinkingBlock = (thinking: string) => ({ type: 'thinking', thinking, signature: '' });

/**
 * The reply's content blocks: a thinking model's reasoning (when the request enabled thinking, as Anthropic sends
 * thinking blocks only then), its text (unless only white space beside calls), then its calls.
 */
function contentBlocks(result: GenerationResult, showThinking: boolean): unknown[] {
  const row = result.rows[0];
  const text = row?.text ?? '';
  const calls = row?.toolCalls ?? [];
  const blocks: unknown[] = [];
  if (showThinking && row?.reasoning) blocks.push(thinkingBlock(row.reasoning));
  if (calls.length === 0 ? text.length > 0 : text.trim().length > 0)
    blocks.push({ type: 'text', text, citations: null });
  // The input as the model wrote it (as the stream's input_json_delta has it): jsonText writes it unchanged.
  for (const call of calls) blocks.push(toolUse(call, new RawJson(call.arguments)));
  return blocks;
}

/** The non-streaming reply. */
export function messageBody(model: string, result: GenerationResult, showThinking = true): Record<string, unknown> {
  const output = result.rows[0]?.tokenIds.length ?? 0;
  return {
    id: messageId(result.requestId),
    type: 'message',
    role: 'assistant',
    model,
    content: contentBlocks(result, showThinking),
    stop_reason: stopReason(result),
    stop_sequence: result.rows[0]?.stopSequence ?? null,
    ...MESSAGE_NULLS,
    usage: messageUsage(result.reusedTokens, result.promptTokens, output),
    kvdesk: kvdeskExtras(result),
  };
}

/** One event of a Messages stream. */
export type MessageEvent = { type: string } & Record<string, unknown>;

/**
 * A reply's event stream: message_start; for each content block (a thinking model's reasoning, text, then a
 * tool_use per call; text after calls or reasoning opens another text block) content_block_start, its deltas and
 * content_block_stop; then message_delta with the stop reason and the whole usage, and message_stop.
 */
export class MessageEvents {
  private index = 0;
  private textOpen = false;
  private thinkingOpen = false;
  /** The call (its index in the reply) whose tool_use block is open while its input streams; null when none. */
  private toolOpen: number | null = null;
  /** Calls completed so far (the next one's index), and the calls whose input went out as it was written. */
  private callsSeen = 0;
  private readonly streamed = new Set<number>();

  constructor(
    private readonly id: string,
    private readonly model: string,
  ) {}

  /** Whether message_start went out: it is sent once, before anything else of the message. */
  private startSent = false;

  start(promptTokens: number, reusedTokens: number): MessageEvent[] {
    if (this.startSent) return [];
    this.startSent = true;
    return [
      {
        type: 'message_start',
        message: {
          id: this.id,
          type: 'message',
          role: 'assistant',
          model: this.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          ...MESSAGE_NULLS,
          usage: messageUsage(reusedTokens, promptTokens, 0),
        },
      },
    ];
  }

  /**
   * One frame's text, completed calls and (calls held to their schemas) input written so far. A call whose
   * input streams has its tool_use block open from its first piece to its completion. A frame's text comes
   * before the calls it completes, except after a streaming call (a held call holds no text inside it).
   */
  /** `reasoning`: a thinking model's, when the request enabled thinking (else left out). */
  tokens(
    text: string,
    calls: readonly ToolCall[],
    deltas: readonly ToolCallDelta[] = [],
    reasoning: string | undefined = '',
  ): MessageEvent[] {
    const out: MessageEvent[] = [];
    this.thinking(out, reasoning);
    inFrameOrder(this.toolOpen, deltas, {
      text: () => this.text(out, text),
      pieces: (ds) => this.inputDeltas(out, ds),
      completed: () => this.completed(out, calls),
    });
    return out;
  }

  /**
   * Reasoning mostly comes before anything else of the reply: its block opens with the first piece. A model may
   * reason again after text or a call (gpt-oss: a preamble, then another analysis message): the open text or
   * tool_use block closes first, and text after the reasoning opens a new block.
   */
  private thinking(out: MessageEvent[], reasoning: string | undefined): void {
    if (!reasoning) return;
    if (!this.thinkingOpen) {
      this.closeText(out);
      this.closeTool(out);
      out.push({ type: 'content_block_start', index: this.index, content_block: thinkingBlock('') });
      this.thinkingOpen = true;
    }
    out.push({
      type: 'content_block_delta',
      index: this.index,
      delta: { type: 'thinking_delta', thinking: reasoning },
    });
  }

  /** The thinking block ends with its signature (empty: kvdesk signs nothing), as Anthropic's does. */
  private closeThinking(out: MessageEvent[]): void {
    if (!this.thinkingOpen) return;
    out.push({ type: 'content_block_delta', index: this.index, delta: { type: 'signature_delta', signature: '' } });
    out.push({ type: 'content_block_stop', index: this.index });
    this.index++;
    this.thinkingOpen = false;
  }

  private text(out: MessageEvent[], text: string): void {
    if (text.length === 0) return;
    this.closeThinking(out);
    this.closeTool(out);
    if (!this.textOpen) {
      out.push({
        type: 'content_block_start',
        index: this.index,
        content_block: { type: 'text', text: '', citations: null },
      });
      this.textOpen = true;
    }
    out.push({ type: 'content_block_delta', index: this.index, delta: { type: 'text_delta', text } });
  }

  /** A streaming call's first piece opens its tool_use block; each piece is an input_json_delta. */
  private inputDeltas(out: MessageEvent[], deltas: readonly ToolCallDelta[]): void {
    for (const d of deltas) {
      if (d.id !== undefined) {
        this.closeThinking(out);
        this.closeText(out);
        this.closeTool(out);
        const call = { id: d.id, name: d.name ?? '', arguments: '' };
        out.push({ type: 'content_block_start', index: this.index, content_block: toolUse(call, {}) });
        this.toolOpen = d.index;
        this.streamed.add(d.index);
      } else if (d.index !== this.toolOpen) {
        continue;
      }
      if (d.arguments.length > 0) {
        out.push({
          type: 'content_block_delta',
          index: this.index,
          delta: { type: 'input_json_delta', partial_json: d.arguments },
        });
      }
    }
  }

  /** Completed calls: a streamed one's block closes; another is a whole block (its input in one piece). */
  private completed(out: MessageEvent[], calls: readonly ToolCall[]): void {
    for (const call of calls) {
      const at = this.callsSeen++;
      if (this.streamed.has(at)) {
        if (this.toolOpen === at) this.closeTool(out);
        continue;
      }
      this.closeThinking(out);
      this.closeText(out);
      this.closeTool(out);
      out.push({ type: 'content_block_start', index: this.index, content_block: toolUse(call, {}) });
      out.push({
        type: 'content_block_delta',
        index: this.index,
        delta: { type: 'input_json_delta', partial_json: call.arguments },
      });
      out.push({ type: 'content_block_stop', index: this.index });
      this.index++;
    }
  }

  private closeTool(out: MessageEvent[]): void {
    if (this.toolOpen === null) return;
    out.push({ type: 'content_block_stop', index: this.index });
    this.index++;
    this.toolOpen = null;
  }

  done(result: GenerationResult): MessageEvent[] {
    const out: MessageEvent[] = [];
    // A call cut off by max_tokens: its block ends with the input written so far (the stop reason says why).
    this.closeThinking(out);
    this.closeTool(out);
    this.closeText(out);
    // The whole usage again (as Anthropic sends it), now with the output.
    out.push({
      type: 'message_delta',
      delta: {
        stop_reason: stopReason(result),
        stop_sequence: result.rows[0]?.stopSequence ?? null,
        container: null,
        stop_details: null,
      },
      usage: messageUsage(result.reusedTokens, result.promptTokens, result.rows[0]?.tokenIds.length ?? 0),
      // As the whole reply has it: whether the budget or the context cut the reply short, and why.
      kvdesk: kvdeskExtras(result),
    });
    out.push({ type: 'message_stop' });
    return out;
  }

  private closeText(out: MessageEvent[]): void {
    if (!this.textOpen) return;
    out.push({ type: 'content_block_stop', index: this.index });
    this.index++;
    this.textOpen = false;
  }
}

/** Anthropic's error types by HTTP status. */
function errorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 503) return 'overloaded_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

/**
 * An error in Anthropic's shape (`{type: "error", error: {type, message}}`), keeping kvdesk's numbers and the
 * parameter beside them.
 */
export function anthropicError(err: HttpError): {
  status: number;
  body: Record<string, unknown>;
  headers: Record<string, string>;
} {
  const { message, type: _openAiType, ...rest } = err.body.error as Record<string, unknown>;
  const head = tooLong(rest);
  return {
    status: err.status,
    body: {
      type: 'error',
      error: {
        type: errorType(err.status),
        // The host's explanation says the numbers again and speaks of chats: Anthropic's words say it once.
        message: head === undefined ? message : `${head}. Shorten the messages, or leave out the oldest turns.`,
        ...rest,
      },
    },
    headers: err.headers,
  };
}

/**
 * A prompt the context cannot take, in Anthropic's words, which clients match: Claude Code compacts the
 * conversation on /prompt is too long[^0-9]*(\d+)\s*tokens?/, LiteLLM raises ContextWindowExceededError. The
 * maximum is the longest prompt that leaves room for a reply (one token short of the context); kvdesk's numbers
 * are the error's (n_prompt_tokens, n_ctx, session_tokens).
 */
function tooLong(error: Record<string, unknown>): string | undefined {
  const { kvdesk_code: code, n_prompt_tokens: prompt, n_ctx: context, session_tokens: session } = error;
  if (code !== 'CONTEXT_OVERFLOW' || typeof prompt !== 'number' || typeof context !== 'number') return undefined;
  const tokens = prompt + (typeof session === 'number' ? session : 0);
  // (Counted only until its newest turns filled the context: at least that many; the pattern still matches.)
  const atLeast = error.counted_up_to !== undefined ? 'at least ' : '';
  return `prompt is too long: ${atLeast}${tokens} tokens > ${context - 1} maximum`;
}
