/** Builds the generate request for a chat turn from a thread (pure, unit-tested). */
import type { StoredMessage, Thread } from '../../shared/api';
import type { ChatMessage, GenerateRequest } from '../../shared/contract';

/**
 * The conversation the model sees: every user message and every assistant reply
 * that has text. Refused or failed turns (no text) are left out, so a retry
 * after raising the budget sends the same prompt the refusal was about.
 */
export function conversationOf(messages: StoredMessage[]): ChatMessage[] {
  return messages
    .filter((m) => m.role !== 'assistant' || (m.content.length > 0 && !m.stats?.error))
    .map((m) => ({ role: m.role, content: m.content }));
}

/**
 * One chat turn. `sessionId` is the thread id, so the host keeps the thread's
 * KV resident between turns and only prefills what is new; `threadId` labels the
 * request in the inspector.
 */
export function buildChatRequest(thread: Thread, history: StoredMessage[], modelId: string | null): GenerateRequest {
  const messages = conversationOf(history);
  const system = thread.systemPrompt?.trim();
  const sampling = thread.sampling && Object.keys(thread.sampling).length > 0 ? thread.sampling : undefined;
  return {
    ...(modelId ? { model: modelId } : {}),
    messages,
    ...(system ? { system } : {}),
    ...(thread.maxNewTokens ? { maxNewTokens: thread.maxNewTokens } : {}),
    ...(sampling ? { sampling } : {}),
    ...jsonForm(thread),
    sessionId: thread.id,
    threadId: thread.id,
  };
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
