/**
 * Tool calling (OpenAI's `tools`): how a package's chat template shows tools to its model, how that model
 * writes a call, and reading the calls back out of a reply while it streams.
 *
 * Models write calls in one of a few forms, and their chat templates say which: the Hermes / Qwen form
 * (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one call per tag), Mistral's
 * (`[TOOL_CALLS][{…}, …]`), Phi-4's and Granite's (`<|tool_call|>[{…}]`), and Llama 3's bare JSON object
 * (`{"name": …, "parameters": {…}}`). A template that does not read `tools` gets kvdesk's own description of
 * them in the system message, in the Hermes form, and past calls and results written as text in that form.
 */
import { randomBytes } from 'node:crypto';
import type { ChatMessage as TemplateMessage } from './chat-template';

/** A function the model may call. */
export interface ToolSpec {
  name: string;
  description?: string;
  /** JSON Schema of the arguments object. */
  parameters?: Record<string, unknown>;
}

/** A call the model made: `arguments` is JSON text, as OpenAI sends it. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** A conversation turn as the contract carries it (tool calls and results included). */
export interface ToolChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  toolCalls?: ToolCall[];
  toolCallId?: string;
  name?: string;
}

/** How a model writes its calls. */
export interface ToolCallFormat {
  name: 'hermes' | 'mistral' | 'tool-call-tag' | 'json';
  /** Text that opens a call ('' for a reply that is a bare JSON object). */
  open: string;
  /** Text that closes it ('' where nothing does). */
  close: string;
  /** What follows `open` when kvdesk makes the model call a tool: a line break, or the array's bracket. */
  lead: string;
  /** The key of the arguments object. */
  argsKey: 'arguments' | 'parameters';
}

export const HERMES: ToolCallFormat = {
  name: 'hermes',
  open: '<tool_call>',
  close: '</tool_call>',
  lead: '\n',
  argsKey: 'arguments',
};
export const MISTRAL: ToolCallFormat = {
  name: 'mistral',
  open: '[TOOL_CALLS]',
  close: '',
  lead: '[',
  argsKey: 'arguments',
};
export const TOOL_CALL_TAG: ToolCallFormat = {
  name: 'tool-call-tag',
  open: '<|tool_call|>',
  close: '<|/tool_call|>',
  lead: '[',
  argsKey: 'arguments',
};
export const BARE_JSON: ToolCallFormat = { name: 'json', open: '', close: '', lead: '', argsKey: 'parameters' };

/**
 * The form a template's model writes calls in. `native` is false for a template that does not read `tools`
 * (or none at all): kvdesk then describes the tools itself, in the Hermes form.
 */
export function toolCallFormat(template: string | undefined, native: boolean): ToolCallFormat {
  if (!native || template === undefined) return HERMES;
  if (template.includes('<tool_call>')) return HERMES;
  if (template.includes('[TOOL_CALLS]')) return MISTRAL;
  if (template.includes('<|tool_call|>')) return TOOL_CALL_TAG;
  return BARE_JSON;
}

/** Tools as transformers hands them to chat templates. */
export function templateTools(tools: readonly ToolSpec[]): unknown[] {
  return tools.map((t) => ({
    type: 'function',
    function: {
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      parameters: t.parameters ?? { type: 'object', properties: {} },
    },
  }));
}

/** kvdesk's own description of the tools, for templates that have none (the Hermes form). */
export function toolsSystemText(tools: readonly ToolSpec[]): string {
  const lines = templateTools(tools).map((t) => JSON.stringify(t));
  return [
    '# Tools',
    '',
    'You can call functions to help with the request. Their JSON Schema signatures are inside <tools></tools>:',
    '<tools>',
    ...lines,
    '</tools>',
    '',
    'To call a function, write a JSON object with its name and arguments inside <tool_call></tool_call> tags, one per call:',
    '<tool_call>',
    '{"name": "<function name>", "arguments": {<arguments as JSON>}}',
    '</tool_call>',
  ].join('\n');
}

/** A call's arguments as the template sees them: the object when the text is JSON (transformers' form). */
function parsedArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A call as the model would have written it in the Hermes form. */
function hermesText(call: ToolCall): string {
  return `<tool_call>\n${JSON.stringify({ name: call.name, arguments: parsedArguments(call.arguments) })}\n</tool_call>`;
}

/**
 * The conversation as the template receives it. A template that reads tools gets them and the turns in
 * transformers' form; one that does not gets kvdesk's description of the tools in the system message, each
 * assistant's calls as Hermes text and each run of tool results as one user turn of `<tool_response>` blocks
 * (templates often allow only system, user and assistant turns).
 */
export function toolChatTurns(
  messages: readonly ToolChatMessage[],
  tools: readonly ToolSpec[] | undefined,
  native: boolean,
): { messages: TemplateMessage[]; tools?: unknown[] } {
  if (native) {
    const names = new Map<string, string>();
    const out = messages.map((m): TemplateMessage => {
      const t: TemplateMessage = { role: m.role, content: m.content };
      if (m.toolCalls && m.toolCalls.length > 0) {
        t.tool_calls = m.toolCalls.map((c) => {
          names.set(c.id, c.name);
          return { id: c.id, type: 'function', function: { name: c.name, arguments: parsedArguments(c.arguments) } };
        });
      }
      if (m.role === 'tool') {
        if (m.toolCallId !== undefined) t.tool_call_id = m.toolCallId;
        const name = m.name ?? (m.toolCallId !== undefined ? names.get(m.toolCallId) : undefined);
        if (name !== undefined) t.name = name;
      }
      return t;
    });
    return tools ? { messages: out, tools: templateTools(tools) } : { messages: out };
  }
  const out: TemplateMessage[] = [];
  for (const m of messages) {
    if (m.role === 'tool') {
      const block = `<tool_response>\n${m.content}\n</tool_response>`;
      const last = out[out.length - 1];
      if (last?.role === 'user' && last.content.endsWith('</tool_response>')) last.content += `\n${block}`;
      else out.push({ role: 'user', content: block });
      continue;
    }
    const calls = m.toolCalls?.map(hermesText) ?? [];
    out.push({ role: m.role, content: [m.content, ...calls].filter((s) => s.length > 0).join('\n') });
  }
  if (tools) {
    const section = toolsSystemText(tools);
    const first = out[0];
    if (first?.role === 'system') first.content = `${first.content}\n\n${section}`;
    else out.unshift({ role: 'system', content: section });
  }
  return { messages: out };
}

/** A call id in OpenAI's style. */
export function newToolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/**
 * The calls in a parsed JSON value (one call object, or an array of them), or null when it is not calls to
 * the given tools: each names one of them and has an arguments object (`arguments` or `parameters`, as an
 * object or as JSON text of one; none means no arguments).
 */
export function callsOf(value: unknown, names: ReadonlySet<string>): ToolCall[] | null {
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 0) return null;
  const calls: ToolCall[] = [];
  for (const item of list) {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return null;
    const { name, arguments: a, parameters: p } = item as Record<string, unknown>;
    if (typeof name !== 'string' || !names.has(name)) return null;
    const args = a ?? p ?? {};
    let text: string;
    if (typeof args === 'string') {
      const parsed = parsedArguments(args);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return null;
      text = args;
    } else if (typeof args === 'object' && args !== null && !Array.isArray(args)) {
      text = JSON.stringify(args);
    } else {
      return null;
    }
    calls.push({ id: newToolCallId(), name, arguments: text });
  }
  return calls;
}

const isSpace = (c: string | undefined) => c === ' ' || c === '\n' || c === '\r' || c === '\t';

/**
 * Where the JSON object or array starting at text[from] (after white space) ends: the index after its
 * closing bracket; -1 while it is incomplete; -2 when the text there is not one.
 */
export function jsonValueEnd(text: string, from: number): number {
  let i = from;
  while (isSpace(text[i])) i++;
  if (i >= text.length) return -1;
  if (text[i] !== '{' && text[i] !== '[') return -2;
  let depth = 0;
  let inString = false;
  for (; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** What one push of text gives: the text to show as the reply's content, and the calls completed. */
export interface ToolCallOutput {
  content: string;
  calls: ToolCall[];
}

/** Reads calls out of a reply as it streams; everything that is not a call is content. */
export interface ToolCallFilter {
  push(text: string): ToolCallOutput;
  /** End of the reply: a call left incomplete is given back as content (nothing is lost). */
  flush(): ToolCallOutput;
}

/**
 * A filter for one reply. `forced`: the prompt already ends with the format's opening (kvdesk made the model
 * call a tool), so the reply is one call object.
 */
export function createToolCallFilter(
  format: ToolCallFormat,
  names: ReadonlySet<string>,
  opts: { forced?: boolean } = {},
): ToolCallFilter {
  const bare = format.open === '';
  // content: looking for an opening; start: a bare-JSON format before the reply's first character;
  // call: inside a call (`opening` is the text that opened it, given back if it turns out not to be one);
  // closing: after a call, reading the closing tag.
  let state: 'content' | 'start' | 'call' | 'closing' = opts.forced ? 'call' : bare ? 'start' : 'content';
  let buffer = '';
  let opening = opts.forced ? '' : format.open;

  const step = (out: ToolCallOutput): void => {
    for (;;) {
      if (state === 'start') {
        let i = 0;
        while (isSpace(buffer[i])) i++;
        if (i === buffer.length) return;
        if (buffer[i] === '{' || buffer[i] === '[') {
          state = 'call';
          opening = buffer.slice(0, i);
          buffer = buffer.slice(i);
        } else {
          state = 'content';
        }
        continue;
      }
      if (state === 'content') {
        if (bare) {
          out.content += buffer;
          buffer = '';
          return;
        }
        const at = buffer.indexOf(format.open);
        if (at >= 0) {
          out.content += buffer.slice(0, at);
          buffer = buffer.slice(at + format.open.length);
          opening = format.open;
          state = 'call';
          continue;
        }
        // Hold back a tail that could grow into the opening.
        let keep = Math.min(buffer.length, format.open.length - 1);
        while (keep > 0 && !format.open.startsWith(buffer.slice(buffer.length - keep))) keep--;
        out.content += buffer.slice(0, buffer.length - keep);
        buffer = buffer.slice(buffer.length - keep);
        return;
      }
      if (state === 'call') {
        const end = jsonValueEnd(buffer, 0);
        if (end === -1) return;
        let calls: ToolCall[] | null = null;
        if (end >= 0) {
          try {
            calls = callsOf(JSON.parse(buffer.slice(0, end)), names);
          } catch {
            calls = null;
          }
        }
        if (calls === null) {
          // Not a call after all: the opening and what followed it are the reply's text.
          out.content += opening;
          state = 'content';
          if (bare) {
            out.content += buffer;
            buffer = '';
            return;
          }
          continue;
        }
        out.calls.push(...calls);
        buffer = buffer.slice(end);
        state = format.close === '' ? 'content' : 'closing';
        continue;
      }
      // closing: white space, then the closing tag (or anything else: the tag was left out).
      let i = 0;
      while (isSpace(buffer[i])) i++;
      const rest = buffer.slice(i);
      if (rest.startsWith(format.close)) {
        buffer = rest.slice(format.close.length);
        state = 'content';
        continue;
      }
      if (format.close.startsWith(rest)) return;
      state = 'content';
    }
  };

  return {
    push(text) {
      const out: ToolCallOutput = { content: '', calls: [] };
      buffer += text;
      step(out);
      return out;
    },
    flush() {
      const out: ToolCallOutput = { content: '', calls: [] };
      if (state === 'call') out.content += opening + buffer;
      else if (state !== 'closing') out.content += buffer;
      buffer = '';
      state = 'content';
      return out;
    },
  };
}
