/** Builds the generate request for a chat turn from a thread (pure, unit-tested). */
import type { StoredMessage, Thread } from '../../shared/api';
import type { ChatMessage, ContextDrop, GenerateRequest, ToolDefinition } from '../../shared/contract';
import type { ModelSpec } from '../../shared/model-spec';
import { withAttachments } from '../lib/attachments';
import { parseProblem } from '../lib/json-problem';
import type { LiveReply } from '../store/types';

/**
 * The conversation the model sees: every user message and every assistant reply that has text. Refused or failed
 * turns (no text) are left out, so a retry after raising the budget sends the same prompt the refusal was about;
 * once the person writes on instead, the message such a reply answered goes too (see {@link leftOutMessages}).
 */
export function conversationOf(messages: StoredMessage[]): ChatMessage[] {
  // Files go with user messages only (an imported chat's other messages cannot hide text the window never shows).
  // A reply's reasoning goes with it: templates that show earlier reasoning (few do) read it.
  // A reply's tool calls go with it, and each tool's answer as a tool message after it.
  return conversationMessages(messages).map((m) => ({
    role: m.role,
    content: m.role === 'user' ? withAttachments(m.content, m.attachments) : m.content,
    ...(m.role === 'assistant' && m.reasoning ? { reasoning: m.reasoning } : {}),
    ...(m.role === 'assistant' && m.toolCalls?.length
      ? { toolCalls: m.toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })) }
      : {}),
    ...(m.role === 'tool' && m.toolCallId ? { toolCallId: m.toolCallId } : {}),
    ...(m.role === 'tool' && m.toolName ? { name: m.toolName } : {}),
  }));
}

/** The thread's messages conversationOf sends, in order. */
function conversationMessages(messages: StoredMessage[]): StoredMessage[] {
  const out = leftOutMessages(messages);
  return messages.filter((m) => inConversation(m) && !out.has(m.id));
}

/**
 * The ids of the exchanges left out of the conversation although their messages stay in the chat: a user message
 * whose replies were all left out (refused, failed, stopped or cut off by a reload before they wrote anything),
 * with those replies, once a later user message follows. Sent, it would make two user turns in a row, which the
 * templates of Gemma, Mistral or Llama 2 refuse ("Conversation roles must alternate"), breaking every later turn;
 * and a message refused for its length would be sent again with the shorter one written in its place. As in
 * LM Studio and Jan, a failed exchange is no part of the context. A last message still waiting for its reply (a
 * regenerate) stays.
 */
export function leftOutMessages(messages: StoredMessage[]): Set<string> {
  const out = new Set<string>();
  for (let i = 0; i < messages.length; i++) {
    if (messages[i]?.role !== 'user') continue;
    let j = i + 1;
    while (messages[j]?.role === 'assistant' && !inConversation(messages[j] as StoredMessage)) j++;
    if (j === i + 1 || messages[j]?.role !== 'user') continue;
    for (const m of messages.slice(i, j)) out.add(m.id);
    i = j - 1;
  }
  return out;
}

function inConversation(m: StoredMessage): boolean {
  // A reply that is all reasoning (it ran out of tokens while thinking) is a turn: leaving it out would put two
  // user messages in a row, which some templates refuse. A reply of tool calls only is one too.
  return (
    m.role !== 'assistant' ||
    ((m.content.length > 0 || (m.reasoning ?? '').length > 0 || (m.toolCalls?.length ?? 0) > 0) && !m.stats?.error)
  );
}

/** Alternatives kept at each token's place in the probabilities view. */
export const PROBABILITY_ALTERNATIVES = 5;

/**
 * One chat turn. `sessionId` is the thread id, so the host keeps the thread's
 * KV resident between turns and only prefills what is new; `threadId` labels the
 * request in the inspector.
 */
export function buildChatRequest(
  thread: Thread,
  history: StoredMessage[],
  modelId: string | null,
  /**
   * The model the turn goes to, when known: its context (a drop made for another context is not kept), and
   * whether it thinks (the thread's thinking setting goes to a thinking model only).
   */
  model?: Pick<ModelSpec, 'contextLength' | 'reasoning'>,
  /** The chat's MCP tools (lib/mcp-tools.ts), and whether the model must call one. */
  tools?: { definitions: ToolDefinition[]; required: boolean },
): GenerateRequest {
  const messages = conversationOf(history);
  const system = thread.systemPrompt?.trim();
  const sampling = thread.sampling && Object.keys(thread.sampling).length > 0 ? thread.sampling : undefined;
  return {
    ...(modelId ? { model: modelId } : {}),
    messages,
    ...(system ? { system } : {}),
    ...(thread.maxNewTokens ? { maxNewTokens: thread.maxNewTokens } : {}),
    ...(sampling ? { sampling } : {}),
    ...(thread.stop && thread.stop.length > 0 ? { stop: thread.stop } : {}),
    // A turn that must call a tool replies with the call alone: JSON output is for the reply after the tools answer.
    ...(tools?.required && tools.definitions.length > 0 ? {} : jsonForm(thread)),
    ...(thread.thinking !== undefined && model?.reasoning ? { thinking: thread.thinking } : {}),
    ...(thread.thinkingBudget !== undefined && thread.thinking !== false && model?.reasoning
      ? { thinkingBudget: thread.thinkingBudget }
      : {}),
    // Also for a model kvdesk sees no reasoning markers in: gpt-oss's template reads the effort from its channels.
    ...(thread.reasoningEffort !== undefined && thread.thinking !== false
      ? { reasoningEffort: thread.reasoningEffort }
      : {}),
    ...overflowPolicy(thread, history, model?.contextLength),
    // The probabilities view: each token's, and the likeliest alternatives at its place.
    ...(thread.showProbabilities ? { logprobs: PROBABILITY_ALTERNATIVES } : {}),
    ...(tools && tools.definitions.length > 0
      ? { tools: tools.definitions, toolChoice: tools.required ? ('required' as const) : ('auto' as const) }
      : {}),
    sessionId: thread.id,
    threadId: thread.id,
  };
}

/**
 * A thread leaves out its oldest messages when it outgrows the context (unless set to refuse), starting from
 * where its last reply's conversation started, so the turn continues the same prefix and its KV — when that
 * reply's drop was made for the same context: after a switch to a model with more room, all of it fits again.
 */
function overflowPolicy(
  thread: Thread,
  history: StoredMessage[],
  contextLength: number | undefined,
): Pick<GenerateRequest, 'contextOverflow' | 'droppedMessages'> {
  if (thread.contextOverflow === 'refuse') return {};
  const drop = lastReplyDrop(history);
  const keep = drop && contextLength !== undefined && drop.contextLength === contextLength ? drop.messages : 0;
  return { contextOverflow: 'drop-oldest', droppedMessages: keep };
}

/**
 * What the last reply in `messages` that the model answered (it has text, and no error) left out; undefined
 * when it saw everything, or there is none. A reply stopped before the host read its prompt says nothing.
 */
export function lastReplyDrop(messages: StoredMessage[]): ContextDrop | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as StoredMessage;
    if (m.role === 'assistant' && m.stats && inConversation(m)) return m.stats.contextDrop;
  }
  return undefined;
}

/**
 * Where the conversation a reply saw starts in the thread: the index of the first message it saw, when it
 * left out `dropped` conversation messages (those conversationOf sends) before it; undefined when none.
 */
export function contextStartIndex(messages: StoredMessage[], dropped: number): number | undefined {
  if (dropped <= 0) return undefined;
  let seen = 0;
  const out = leftOutMessages(messages);
  for (const [i, m] of messages.entries()) {
    if (!inConversation(m) || out.has(m.id) || m.role === 'system') continue;
    if (seen === dropped) return i;
    seen++;
  }
  return undefined;
}

/**
 * What the latest reply (streaming, or the last finished one) left out of the conversation: the messages before
 * the returned index are outside the model's context now. A reply not yet accepted does not count.
 */
export function currentDrop(
  messages: StoredMessage[],
  live: Record<string, LiveReply>,
): { start: number; drop: ContextDrop } | undefined {
  const reply = latestReply(messages, live);
  if (!reply) return undefined;
  const drop = reply.live ? reply.live.contextDrop : reply.message.stats?.contextDrop;
  const start = drop ? contextStartIndex(messages, drop.messages) : undefined;
  return drop && start !== undefined ? { start, drop } : undefined;
}

/**
 * The context the conversation fills after its latest reply (streaming: so far): its prompt and its reply's
 * tokens; undefined before any reply the host accepted.
 */
export function contextUsed(messages: StoredMessage[], live: Record<string, LiveReply>): number | undefined {
  const reply = latestReply(messages, live);
  if (!reply) return undefined;
  if (reply.live)
    return reply.live.promptTokens !== undefined ? reply.live.promptTokens + reply.live.tokens : undefined;
  const s = reply.message.stats;
  return s?.promptTokens !== undefined ? s.promptTokens + (s.tokens ?? 0) : undefined;
}

/** The latest reply the host accepted: streaming (once accepted), or finished without an error. */
function latestReply(
  messages: StoredMessage[],
  live: Record<string, LiveReply>,
): { message: StoredMessage; live?: LiveReply } | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as StoredMessage;
    if (m.role !== 'assistant') continue;
    const l = live[m.id];
    // Streaming once accepted; else finished with text (not refused, not stopped before it began).
    if (l?.phase === 'sending' || (!l && (!m.stats || !inConversation(m)))) continue;
    return l ? { message: m, live: l } : { message: m };
  }
  return undefined;
}

/**
 * A JSON-mode thread's reply form: its schema when it has one (the settings panel only keeps text that parses
 * as a JSON object; the host refuses a schema it cannot enforce), else any JSON object.
 */
function jsonForm(thread: Thread): Pick<GenerateRequest, 'responseFormat' | 'jsonSchema'> {
  if (thread.responseFormat !== 'json') return {};
  const schema = parseSchema(thread.jsonSchema ?? '');
  return schema ? { jsonSchema: schema } : { responseFormat: 'json' };
}

/** Why the text cannot be a JSON Schema (not JSON, with the parser's words; or JSON but no object); null when it can. */
export function schemaProblem(text: string): string | null {
  if (text.trim() === '') return null;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return `not JSON (${parseProblem(err)})`;
  }
  const what = Array.isArray(v) ? 'an array' : v === null ? 'null' : typeof v === 'object' ? '' : `a ${typeof v}`;
  return what ? `${what}, not an object: a JSON Schema is {…}` : null;
}

/** A JSON Schema as typed in the settings: the object it parses to, or undefined (empty, not JSON, not an object). */
export function parseSchema(text: string): Record<string, unknown> | undefined {
  if (text.trim() === '') return undefined;
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Ids that sort by creation time and do not collide across windows. */
export function newId(prefix: string, now = Date.now()): string {
  return `${prefix}-${now.toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
