/**
 * A chat as a file and back (pure, unit-tested): Markdown to read or share, kvdesk's JSON to keep or move a chat
 * to another machine; and the import of such a JSON file, or of any `{messages: [{role, content}]}` conversation
 * (OpenAI's form), checked field by field. An import is always a new chat: ids are new, nothing is overwritten.
 */
import { type StoredMessage, Thread } from '../../shared/api';
import type { ToolCall } from '../../shared/contract';
import { cutText } from '../../shared/text';
import { newId } from '../bridge/prompt';
import { titleFrom } from '../store/chat-slice';
import { attachmentBlock } from './attachments';
import { fenced } from './fence';
import { parseProblem } from './json-problem';

/** The JSON export's envelope. */
export const EXPORT_KIND = 'kvdesk.thread';
export const EXPORT_VERSION = 1;

/**
 * A file name from the chat's title (letters, digits, dashes), e.g. `lighthouse-story.md`, `नमस्ते-दुनिया.md`.
 * A Latin letter loses its accents (é → e); the marks of other scripts are part of their letters (Devanagari's vowel
 * signs, the kana's voicing marks) and stay, composed again (NFC: Hangul as syllables, not jamo).
 */
export function exportFileName(thread: Thread, extension: 'md' | 'json'): string {
  const slug = thread.title
    .normalize('NFKD')
    .replace(/(\p{Script=Latin})\p{M}+/gu, '$1') // accents: é → e, not e-
    .normalize('NFC')
    // A mark stays only after a letter (or its marks): one after an emoji, a digit or a space (an emoji's variation
    // selector U+FE0F, a keycap) goes.
    .replace(/([^\p{L}\p{M}])\p{M}+/gu, '$1')
    .replace(/^\p{M}+/u, '')
    .replace(/[^\p{L}\p{N}\p{M}]+/gu, '-')
    .toLowerCase();
  // Cut between characters (never inside a surrogate pair, nor between a letter and its marks), then trim the
  // dashes the cut may leave.
  const base = cutText(slug, 60).replace(/^-+|-+$/g, '');
  return `${base || 'chat'}.${extension}`;
}

/**
 * The title of the `n`th import of a chat titled `title` beside another of that name: "(imported)", "(imported 2)"…
 * after the title cut to 180 code units (a title is 200 at most).
 */
export function importedTitle(title: string, n: number): string {
  return `${cutText(title, 180)} (imported${n > 1 ? ` ${n}` : ''})`;
}

/** The chat as Markdown: title, system prompt, then each message under its speaker (failed replies say so). */
export function threadToMarkdown(thread: Thread, modelName?: string): string {
  const lines = [`# ${thread.title}`, ''];
  const created = new Date(thread.createdAt);
  // A date JavaScript cannot show (an imported file may hold any number) is left out.
  const facts = [
    Number.isNaN(created.getTime())
      ? 'kvdesk chat'
      : `kvdesk chat, ${created.toISOString().slice(0, 16).replace('T', ' ')} UTC`,
  ];
  if (modelName ?? thread.modelId) facts.push(`model ${modelName ?? thread.modelId}`);
  lines.push(`*${facts.join(' · ')}*`, '');
  if (thread.systemPrompt?.trim()) lines.push('**System prompt**', '', quote(thread.systemPrompt.trim()), '');
  // Each reply names its model where the chat went from one model to another (else the line above says it).
  const writers = new Set(thread.messages.flatMap((m) => m.writtenBy?.map((w) => w.id) ?? []));
  const mixed = writers.size > 1 || (writers.size === 1 && !writers.has(thread.modelId ?? ''));
  for (const m of thread.messages) {
    const who =
      m.role === 'user'
        ? 'You'
        : m.role === 'assistant'
          ? 'Assistant'
          : m.role === 'tool'
            ? `Tool ${m.toolName ?? ''}${m.isError ? ' (failed)' : ''}`.trimEnd()
            : 'System';
    const by = mixed ? m.writtenBy?.map((w) => w.name ?? w.id).join(' + ') : undefined;
    lines.push(by ? `### ${who} · ${by}` : `### ${who}`, '');
    // A thinking model's reasoning, quoted above its reply.
    if (m.reasoning) lines.push('*Thinking*', '', quote(m.reasoning), '');
    // A reply that failed part way keeps what it wrote, as the window shows it.
    // A tool's answer is its text as the tool gave it: fenced, so none of it reads as the chat's Markdown.
    if (m.content) {
      lines.push(
        m.format === 'json' ? fenced(m.content, 'json') : m.role === 'tool' ? fenced(m.content, '') : m.content,
        '',
      );
    }
    for (const a of m.attachments ?? []) lines.push(attachmentBlock(a), '');
    // A reply's tool calls, each with its arguments.
    for (const c of m.toolCalls ?? []) lines.push(`*Calls ${c.name}:*`, '', fenced(c.arguments, 'json'), '');
    if (m.stats?.error) lines.push(`*Refused: ${m.stats.error.message}*`, '');
  }
  return `${lines.join('\n').trimEnd()}\n`;
}

function quote(text: string): string {
  return text
    .split('\n')
    .map((l) => `> ${l}`)
    .join('\n');
}

/** The chat as kvdesk's JSON (what import reads back). */
export function threadToJson(thread: Thread): string {
  // U+FFFD (what a reply's broken UTF-8 decodes to) is written escaped: raw, it is what marks a file as binary.
  const json = JSON.stringify({ kind: EXPORT_KIND, version: EXPORT_VERSION, thread }, null, 2);
  return `${json.replace(/\uFFFD/g, '\\ufffd')}\n`;
}

export type ImportResult = { ok: true; thread: Thread } | { ok: false; error: string };

/**
 * Largest file import reads: what one WebSocket message may carry by default (256 MiB), less room for the ids and
 * dates import adds, as the chat is saved through one (a server whose --max-message is lower refuses the save,
 * saying so). A chat with big attached files exports to tens of MB.
 */
export const MAX_IMPORT_BYTES = 255 * 1024 * 1024;

/** Why a file of `bytes` is not imported (too large: its size and the limit), or null. */
export function importTooLarge(fileName: string, bytes: number): string | null {
  if (bytes <= MAX_IMPORT_BYTES) return null;
  const mib = (n: number) => `${(n / 1048576).toFixed(n % 1048576 === 0 ? 0 : 1)} MiB`;
  return `${fileName} is ${mib(bytes)}: a chat to import is at most ${mib(MAX_IMPORT_BYTES)}. Split the chat, or remove big attached files from it.`;
}

/**
 * A chat from an imported file's text: kvdesk's export, `{messages: [...]}` (a `title` and a `system` message
 * are used) or a bare list of messages. Errors name the field and say what was expected; nothing is half-read.
 */
export function parseThreadImport(text: string, fileName: string, now = Date.now()): ImportResult {
  const notJson = (why: string): ImportResult => ({
    ok: false,
    error: `${fileName} is not JSON (${why}): not a kvdesk or OpenAI conversation JSON file — export a chat as JSON to import it.`,
  });
  // A binary file (an image, an archive…): its bytes are no one's to read in an error. (A replacement character
  // alone may be text a chat holds, as files exported before it was written escaped have it: only in a file that
  // is not JSON does it say binary.)
  const head = text.slice(0, 8192);
  if (CONTROL.test(head)) return notJson('it is not text');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // A chat exported as Markdown (or any text file): it is for reading, and says so, not what the parser saw.
    if (/\.(md|markdown|txt)$/i.test(fileName) && !head.includes('\ufffd')) {
      return {
        ok: false,
        error: `${fileName} is a text file: kvdesk imports a chat from its JSON export (⤓ .json), or from OpenAI's {"messages": […]}; a Markdown export is for reading.`,
      };
    }
    return notJson(head.includes('\ufffd') ? 'it is not text' : parseProblem(err));
  }
  const fail = (where: string, what: string): ImportResult => ({ ok: false, error: `${fileName}: ${where} ${what}` });
  if (isObject(value) && value.kind === EXPORT_KIND) {
    if (value.version !== EXPORT_VERSION) {
      return fail('"version"', `is ${JSON.stringify(value.version)}; this kvdesk reads version ${EXPORT_VERSION}.`);
    }
    const parsed = Thread.safeParse(value.thread);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return fail(formatPath(['thread', ...(issue?.path ?? [])]), `${issue?.message ?? 'is not valid'}.`);
    }
    return { ok: true, thread: renew(parsed.data, now) };
  }
  const list = Array.isArray(value) ? value : isObject(value) ? value.messages : undefined;
  const at = Array.isArray(value) ? '' : 'messages';
  if (!Array.isArray(list)) {
    return fail(
      'the file',
      `is neither a kvdesk chat export ("kind": "${EXPORT_KIND}") nor a conversation ({"messages": [{"role", "content"}]}).`,
    );
  }
  if (list.length === 0) return fail(at || 'the list', 'is empty: there is nothing to import.');
  let system: string | undefined;
  let systemAt = -1;
  const messages: StoredMessage[] = [];
  /** Where each kept message is in the file's list (the system message is not kept as a message). */
  const from: number[] = [];
  for (const [i, m] of list.entries()) {
    const where = `${at}[${i}]`;
    if (!isObject(m)) return fail(where, 'must be an object {"role", "content"}.');
    // A reply that only calls tools has no text (OpenAI's null content).
    const calls = m.role === 'assistant' && m.tool_calls != null ? toolCallsOf(m.tool_calls) : undefined;
    if (calls !== undefined && !Array.isArray(calls)) return fail(`${where}.tool_calls${calls.at}`, calls.what);
    const content = m.content === null && calls !== undefined ? '' : textOf(m.content);
    if (content === undefined) return fail(`${where}.content`, 'must be text (a string, or a list of text parts).');
    if (m.role === 'system' && messages.length === 0 && system === undefined) {
      system = content;
      systemAt = i;
    } else if (m.role === 'user' || m.role === 'assistant') {
      // A reply's reasoning as DeepSeek's API and vLLM give it.
      const reasoning = m.role === 'assistant' && typeof m.reasoning_content === 'string' ? m.reasoning_content : '';
      messages.push({
        id: 'm',
        role: m.role,
        content,
        createdAt: now,
        ...(reasoning ? { reasoning } : {}),
        ...(calls && calls.length > 0 ? { toolCalls: calls } : {}),
      });
      from.push(i);
    } else if (m.role === 'tool') {
      // A tool's answer: to a call of the reply it follows (only other answers between them).
      let before = messages.length - 1;
      while (before >= 0 && messages[before]?.role === 'tool') before--;
      const call = messages[before]?.toolCalls?.find((c) => c.id === m.tool_call_id);
      if (typeof m.tool_call_id !== 'string' || call === undefined) {
        return fail(
          `${where}.tool_call_id`,
          `must be the id of a call in the tool_calls of the assistant message before it (${JSON.stringify(m.tool_call_id ?? null)} is none of them).`,
        );
      }
      messages.push({ id: 'm', role: 'tool', content, createdAt: now, toolCallId: call.id, toolName: call.name });
      from.push(i);
    } else {
      return fail(
        `${where}.role`,
        `is ${JSON.stringify(m.role)}: a conversation imports user, assistant and tool messages (and a system prompt first).`,
      );
    }
  }
  // Its own title, else one from the first message as a new chat gets.
  const firstUser = messages.find((m) => m.role === 'user')?.content ?? '';
  const first = firstUser.trim() ? titleFrom(firstUser) : '';
  const title = isObject(value) && typeof value.title === 'string' && value.title.trim() ? value.title.trim() : first;
  const thread = Thread.safeParse({
    id: 't',
    title: cutText(title || 'Imported chat', 200),
    createdAt: now,
    updatedAt: now,
    ...(system !== undefined ? { systemPrompt: system } : {}),
    messages,
  });
  if (!thread.success) {
    // Named as the file has it: messages[k] is the list's item from[k]; the system prompt is its system message.
    const issue = thread.error.issues[0];
    const [field, index, ...rest] = issue?.path ?? [];
    const path =
      field === 'messages' && typeof index === 'number'
        ? [`${at}[${from[index]}]`, ...rest]
        : field === 'systemPrompt'
          ? [`${at}[${systemAt}]`, 'content']
          : (issue?.path ?? []);
    return fail(formatPath(path), `${issue?.message ?? 'is not valid'}.`);
  }
  return { ok: true, thread: renew(thread.data, now) };
}

/**
 * New ids for the chat and its messages (an import never overwrites, and the same file may come in twice), without
 * the tools it ran without asking: that grant is the person's, not a file's (a chat someone sends could otherwise
 * have its model run a tool of theirs, a file writer say, unasked). Its servers stay: each call is asked again.
 */
function renew(imported: Thread, now: number): Thread {
  const { toolsAllowed: _granted, ...thread } = imported;
  return {
    ...thread,
    id: newId('t', now),
    updatedAt: now,
    messages: thread.messages.map((m, i) => ({ ...m, id: `${newId('m', now)}-${i}` })),
  };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * An assistant message's `tool_calls` in OpenAI's form (`[{id, type: "function", function: {name, arguments}}]`,
 * arguments as JSON text, or an object as some exports write them); else where (under `tool_calls`) it is wrong,
 * and what it must be.
 */
function toolCallsOf(value: unknown): ToolCall[] | { at: string; what: string } {
  if (!Array.isArray(value))
    return { at: '', what: 'must be a list of calls [{"id", "function": {"name", "arguments"}}].' };
  const calls: ToolCall[] = [];
  for (const [j, c] of value.entries()) {
    const fn = isObject(c) ? c.function : undefined;
    if (!isObject(c) || typeof c.id !== 'string' || c.id === '')
      return { at: `[${j}].id`, what: "must be the call's id (text)." };
    if (!isObject(fn) || typeof fn.name !== 'string' || fn.name === '') {
      return { at: `[${j}].function.name`, what: "must be the function's name." };
    }
    const args =
      typeof fn.arguments === 'string'
        ? fn.arguments
        : isObject(fn.arguments)
          ? JSON.stringify(fn.arguments)
          : undefined;
    if (args === undefined) return { at: `[${j}].function.arguments`, what: 'must be the arguments as JSON text.' };
    calls.push({ id: c.id, name: fn.name, arguments: args });
  }
  return calls;
}

/** A message's text: a string, or OpenAI's list of `{type: "text", text}` parts. */
function textOf(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  let text = '';
  for (const part of content) {
    if (!isObject(part) || typeof part.text !== 'string') return undefined;
    text += part.text;
  }
  return text;
}

/** A zod path as a person reads it: `messages[3].content` (`the chat` for the whole of it). */
function formatPath(path: ReadonlyArray<PropertyKey>): string {
  return (
    path.map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i > 0 ? '.' : ''}${String(p)}`)).join('') || 'the chat'
  );
}

/** Characters no text file has: control characters but tab and line ends. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROL = /[\u0000-\u0008\u000b\u000e-\u001f]/;
