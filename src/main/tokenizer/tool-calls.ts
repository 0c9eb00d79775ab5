/**
 * Tool calling (OpenAI's `tools`): how a package's chat template shows tools to its model, how that model
 * writes a call, and reading the calls back out of a reply while it streams.
 *
 * Models write calls in one of a few forms, and their chat templates say which: the Hermes / Qwen form
 * (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one call per tag), Mistral's
 * (`[TOOL_CALLS] [{…}, …]`, or in later models `[TOOL_CALLS]name[ARGS]{…}`), Granite's (`<|tool_call|>[{…}]`),
 * Llama 3's bare JSON object (`{"name": …, "parameters": {…}}`), and two XML-tag forms whose values are plain
 * text: Qwen3-Coder's (`<tool_call><function=name><parameter=key>value</parameter></function></tool_call>`)
 * and GLM's (`<tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value></tool_call>`). A template that
 * does not show tools gets kvdesk's own description of them, in the Hermes form, and past calls and results
 * written as text in that form.
 */
import { createHash, randomBytes } from 'node:crypto';
import { isLosslessNumber, parse as losslessParse, stringify as losslessStringify } from 'lossless-json';
import type { ChatMessage, ToolCall, ToolCallDelta, ToolDefinition } from '../../shared/contract';
import { isHarmonyTemplate } from '../../shared/reasoning';
import { exactNumber, type ChatMessage as TemplateMessage } from './chat-template';

export type { ToolCall };

/** How a model writes its calls. */
export interface ToolCallFormat {
  name: 'hermes' | 'mistral' | 'mistral-args' | 'tool-call-tag' | 'json' | 'qwen-xml' | 'glm-xml';
  /** Text that opens a call ('' for a reply that is a bare JSON object). */
  open: string;
  /** Text that closes it ('' where nothing does). */
  close: string;
  /** What follows `open` when kvdesk makes the model call a tool: a line break, or the array's bracket. */
  lead: string;
  /** The key of the arguments object. */
  argsKey: 'arguments' | 'parameters';
  /** A call is `name` + this + the arguments object, instead of a JSON object with both. */
  argsMarker?: string;
  /** Call ids are 9 letters and digits (Mistral's templates refuse others). */
  shortIds?: boolean;
  /** The call between the tags is XML with plain-text values, not JSON (kvdesk reads it, cannot force it). */
  xml?: 'qwen' | 'glm';
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
  lead: ' [',
  argsKey: 'arguments',
  shortIds: true,
};
export const MISTRAL_ARGS: ToolCallFormat = {
  name: 'mistral-args',
  open: '[TOOL_CALLS]',
  close: '',
  lead: '',
  argsKey: 'arguments',
  argsMarker: '[ARGS]',
  shortIds: true,
};
export const TOOL_CALL_TAG: ToolCallFormat = {
  name: 'tool-call-tag',
  open: '<|tool_call|>',
  close: '<|/tool_call|>',
  lead: '[',
  argsKey: 'arguments',
};
export const QWEN_XML: ToolCallFormat = {
  name: 'qwen-xml',
  open: '<tool_call>',
  close: '</tool_call>',
  lead: '\n',
  argsKey: 'arguments',
  xml: 'qwen',
};
export const GLM_XML: ToolCallFormat = {
  name: 'glm-xml',
  open: '<tool_call>',
  close: '</tool_call>',
  lead: '',
  argsKey: 'arguments',
  xml: 'glm',
};
export const BARE_JSON: ToolCallFormat = { name: 'json', open: '', close: '', lead: '', argsKey: 'parameters' };

/**
 * The form a template's model writes calls in. `native` is false for a template that does not show tools
 * (or none at all): kvdesk then describes the tools itself, in the Hermes form.
 */
export function toolCallFormat(template: string | undefined, native: boolean): ToolCallFormat {
  if (!native || template === undefined) return HERMES;
  // gpt-oss (Harmony) sends a call as a message to `functions.NAME`: its splitter gives it on in the Hermes form.
  if (isHarmonyTemplate(template)) return HERMES;
  if (template.includes('<function=')) return QWEN_XML;
  if (template.includes('<arg_key>')) return GLM_XML;
  if (template.includes('<tool_call>')) return HERMES;
  if (template.includes('[ARGS]')) return MISTRAL_ARGS;
  if (template.includes('[TOOL_CALLS]')) return MISTRAL;
  if (template.includes('<|tool_call|>')) return TOOL_CALL_TAG;
  return BARE_JSON;
}

/** Tools as transformers hands them to chat templates. */
export function templateTools(tools: readonly ToolDefinition[]): unknown[] {
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
export function toolsSystemText(tools: readonly ToolDefinition[]): string {
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

/**
 * JSON text read with its numbers as written (lossless-json's numbers). A repeated key, which lossless-json would
 * refuse, is read as JSON.parse reads it, the last one winning: a free-form object's keys are not held distinct, so
 * a call the engine wrote (and may have streamed) must read as one.
 */
function readJson(text: string): unknown {
  return losslessParse(text, null, { onDuplicateKey: ({ newValue }) => newValue });
}

/** A call's arguments as the template sees them: the object when the text is JSON (transformers' form). */
function parsedArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * A call's arguments for a template that reads them: parsedArguments, but with each number JSON.parse would change
 * (12345678901234567890 rounded, 1e400 null, 1.0 the integer 1) kept as the model wrote it, so `tojson` writes it
 * back unchanged.
 */
function templateArguments(text: string): unknown {
  let value: unknown;
  try {
    value = readJson(text);
  } catch {
    // Not JSON: as JSON.parse reads it (the text itself).
    return parsedArguments(text);
  }
  const exact = (v: unknown): unknown => {
    if (isLosslessNumber(v)) {
      const n = Number(v.value);
      return JSON.stringify(n) === v.value ? n : exactNumber(v.value);
    }
    if (Array.isArray(v)) return v.map(exact);
    if (typeof v === 'object' && v !== null) {
      const out: Record<string, unknown> = {};
      // defineProperty: a key "__proto__" stays a key, as JSON.parse makes it.
      for (const [k, x] of Object.entries(v))
        Object.defineProperty(out, k, { value: exact(x), enumerable: true, writable: true, configurable: true });
      return out;
    }
    return v;
  };
  return exact(value);
}

/** Whether text is the JSON of an object (a call's arguments must be). */
export function isJsonObjectText(text: string): boolean {
  const v = parsedArguments(text);
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * A call as the model would have written it in the Hermes form: compact, its numbers as written (JSON.parse
 * would round 12345678901234567890, make 1e400 null and 1.0 1).
 */
function hermesText(call: ToolCall): string {
  let args: unknown;
  try {
    args = readJson(call.arguments);
  } catch {
    args = call.arguments;
  }
  return `<tool_call>\n${losslessStringify({ name: call.name, arguments: args })}\n</tool_call>`;
}

/**
 * The conversation as the template receives it. A template that reads tools gets them and the turns in
 * transformers' form (call ids shortened for Mistral's forms); one that does not gets kvdesk's description of
 * the tools in the system message (or the first user turn), each assistant's calls as Hermes text and each run
 * of tool results as one user turn of `<tool_response>` blocks (templates often allow only system, user and
 * assistant turns).
 */
export function toolChatTurns(
  messages: readonly ChatMessage[],
  tools: readonly ToolDefinition[] | undefined,
  native: boolean,
  format: ToolCallFormat = HERMES,
): { messages: TemplateMessage[]; tools?: unknown[] } {
  if (native) {
    const names = new Map<string, string>();
    // Mistral's templates take only 9-character ids: others (a client's own) are mapped, the same way each time.
    const id = (raw: string) => (format.shortIds ? shortId(raw) : raw);
    const out = messages.map((m): TemplateMessage => {
      const t: TemplateMessage = { role: m.role, content: m.content };
      if (m.reasoning !== undefined && m.role === 'assistant') t.reasoning_content = m.reasoning;
      if (m.toolCalls && m.toolCalls.length > 0) {
        t.tool_calls = m.toolCalls.map((c) => {
          names.set(c.id, c.name);
          return {
            id: id(c.id),
            type: 'function',
            function: { name: c.name, arguments: templateArguments(c.arguments) },
          };
        });
      }
      if (m.role === 'tool') {
        if (m.toolCallId !== undefined) t.tool_call_id = id(m.toolCallId);
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
    const t: TemplateMessage = { role: m.role, content: [m.content, ...calls].filter((s) => s.length > 0).join('\n') };
    if (m.reasoning !== undefined && m.role === 'assistant') t.reasoning_content = m.reasoning;
    out.push(t);
  }
  if (tools) {
    // In the system message; without one, at the head of the first user turn (some templates refuse a system
    // role, and a system message would be one the client never sent).
    const section = toolsSystemText(tools);
    const first = out[0];
    const user = out.find((m) => m.role === 'user');
    if (first?.role === 'system') first.content = `${first.content}\n\n${section}`;
    else if (user) user.content = `${section}\n\n${user.content}`;
    else out.unshift({ role: 'system', content: section });
  }
  return { messages: out };
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** 9 letters and digits from bytes. */
function alnum9(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < 9; i++) out += ALNUM[(bytes[i] as number) % ALNUM.length];
  return out;
}

/** An id as Mistral's templates take it: itself when it is 9 letters and digits, else one made from it. */
export function shortId(id: string): string {
  return /^[A-Za-z0-9]{9}$/.test(id) ? id : alnum9(createHash('sha256').update(id).digest());
}

/** A new call id: OpenAI's style, or 9 letters and digits for Mistral's forms. */
export function newToolCallId(short = false): string {
  return short ? alnum9(randomBytes(9)) : `call_${randomBytes(12).toString('hex')}`;
}

/**
 * The calls in a parsed JSON value (one call object, or an array of them), or null when it is not calls to
 * the given tools: each names one of them and has an arguments object (`arguments` or `parameters`, as an
 * object or as JSON text of one; none means no arguments).
 */
export function callsOf(value: unknown, names: ReadonlySet<string>, shortIds = false): ToolCall[] | null {
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
      if (!isJsonObjectText(args)) return null;
      text = args;
    } else if (typeof args === 'object' && args !== null && !Array.isArray(args) && !isLosslessNumber(args)) {
      // Compact, numbers as the model wrote them (a number JSON.stringify would turn into null, or round).
      text = losslessStringify(args) as string;
    } else {
      return null;
    }
    calls.push({ id: newToolCallId(shortIds), name, arguments: text });
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

/**
 * What one push of text gives: the text to show as the reply's content, the calls completed, and (with
 * `streamArguments`) the argument text of calls still being written.
 */
export interface ToolCallOutput {
  content: string;
  calls: ToolCall[];
  deltas: ToolCallDelta[];
}

/** What a call envelope written so far says: its name, and where its arguments object starts (and ends). */
interface EnvelopeSoFar {
  name?: string;
  argsStart?: number;
  argsEnd?: number;
}

/** Index after the JSON string starting at text[i] (a quote); -1 while it is incomplete. */
function stringEnd(text: string, i: number): number {
  for (let j = i + 1; j < text.length; j++) {
    if (text[j] === '\\') j++;
    else if (text[j] === '"') return j + 1;
  }
  return -1;
}

/**
 * One call object `{"name": …, "arguments": {…}}` at text[i] ('{'), read as far as it is written: its name
 * once complete, where its arguments object starts and, once closed, ends. `end`: after its '}', or -1 while
 * it is incomplete; null when it is not such an object.
 */
function envelopeAt(text: string, i: number): { env: EnvelopeSoFar; end: number } | null {
  const env: EnvelopeSoFar = {};
  let at = i + 1;
  for (;;) {
    while (isSpace(text[at])) at++;
    if (at >= text.length) return { env, end: -1 };
    if (text[at] === '}') return { env, end: at + 1 };
    if (text[at] === ',') {
      at++;
      continue;
    }
    if (text[at] !== '"') return null;
    const keyEnd = stringEnd(text, at);
    if (keyEnd < 0) return { env, end: -1 };
    const key = JSON.parse(text.slice(at, keyEnd)) as string;
    at = keyEnd;
    while (isSpace(text[at])) at++;
    if (at >= text.length) return { env, end: -1 };
    if (text[at] !== ':') return null;
    at++;
    while (isSpace(text[at])) at++;
    if (at >= text.length) return { env, end: -1 };
    const c = text[at];
    if (c === '"') {
      const e = stringEnd(text, at);
      if (e < 0) return { env, end: -1 };
      if (key === 'name') env.name = JSON.parse(text.slice(at, e)) as string;
      at = e;
    } else if (c === '{' || c === '[') {
      const args = (key === 'arguments' || key === 'parameters') && c === '{';
      if (args) env.argsStart = at;
      const e = jsonValueEnd(text, at);
      if (e === -2) return null;
      if (e === -1) return { env, end: -1 };
      if (args) env.argsEnd = e;
      at = e;
    } else {
      // A number, true, false or null: it ends at the next separator.
      let e = at;
      while (e < text.length && text[e] !== ',' && text[e] !== '}' && !isSpace(text[e])) e++;
      if (e >= text.length) return { env, end: -1 };
      at = e;
    }
  }
}

/** The call envelopes of a call's text written so far: one object, or the objects of an array. */
function envelopesSoFar(text: string): EnvelopeSoFar[] {
  let i = 0;
  while (isSpace(text[i])) i++;
  if (text[i] === '{') {
    const one = envelopeAt(text, i);
    return one ? [one.env] : [];
  }
  if (text[i] !== '[') return [];
  const out: EnvelopeSoFar[] = [];
  i++;
  for (;;) {
    while (isSpace(text[i]) || text[i] === ',') i++;
    if (text[i] !== '{') return out;
    const one = envelopeAt(text, i);
    if (!one) return out;
    out.push(one.env);
    if (one.end < 0) return out;
    i = one.end;
  }
}

/** Reads calls out of a reply as it streams; everything that is not a call is content. */
export interface ToolCallFilter {
  push(text: string): ToolCallOutput;
  /** End of the reply: a call left incomplete is given back as content (nothing is lost). */
  flush(): ToolCallOutput;
  /**
   * The reply's text gives way to reasoning (gpt-oss: another analysis message), which no call spans: text held
   * that could begin a call's opening, and a call begun and left incomplete, are let out as {@link flush} lets
   * them out; the reader reads on after. What it holds before the reply's text began (a bare-JSON reply's
   * leading white space, a forced call's opening) or after a call (its closing tag) it keeps.
   */
  release(): ToolCallOutput;
}

/** A JSON Schema and the alternatives of its anyOf / oneOf, for a shallow check of one value. */
function alternativesOf(schema: Record<string, unknown>): Array<Record<string, unknown>> {
  const nested = [schema.anyOf, schema.oneOf].flatMap((a) => (Array.isArray(a) ? a : []));
  return [schema, ...(nested as Array<Record<string, unknown>>)];
}

/** Whether a value (not a string) fits a parameter's schema by its type, enum or const (one level deep). */
function fitsSchema(value: unknown, schema: Record<string, unknown>): boolean {
  const kind =
    value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value === 'number' ? 'number' : typeof value;
  const text = JSON.stringify(value);
  return alternativesOf(schema).some((alt) => {
    if (alt.const !== undefined) return JSON.stringify(alt.const) === text;
    if (Array.isArray(alt.enum)) return alt.enum.some((e) => JSON.stringify(e) === text);
    const types = Array.isArray(alt.type) ? alt.type : alt.type === undefined ? [] : [alt.type];
    return types.some((t) => t === kind || (t === 'integer' && Number.isInteger(value)));
  });
}

/** Whether a parameter's schema lets its value be this text: by its type, enum or const, or having none of them. */
function allowsText(schema: Record<string, unknown>, text: string): boolean {
  const nested = [schema.anyOf, schema.oneOf]
    .flatMap((a) => (Array.isArray(a) ? a : []))
    .filter((alt): alt is Record<string, unknown> => typeof alt === 'object' && alt !== null);
  if (nested.some((alt) => allowsText(alt, text))) return true;
  if (schema.const !== undefined) return schema.const === text;
  if (Array.isArray(schema.enum)) return schema.enum.includes(text);
  if (schema.type === undefined) return nested.length === 0;
  return (Array.isArray(schema.type) ? schema.type : [schema.type]).includes('string');
}

/**
 * A parameter's value as an XML form writes it (plain text): JSON when it parses to a value (not a string) that
 * the parameter's schema allows — Python's `True` / `False` read as booleans, as the templates render them —,
 * else the text itself (a parameter without a schema is text, as vLLM reads it). `None` or `null` is null where the
 * parameter cannot be that text: Qwen3-Coder's template writes a null argument as None (Python's str()); where it
 * can (a string), the string "None" is written the same.
 */
function xmlValue(text: string, schema: Record<string, unknown> | undefined): unknown {
  if (schema === undefined) return text;
  const trimmed = text.trim();
  if ((trimmed === 'None' || trimmed.toLowerCase() === 'null') && !allowsText(schema, text)) return null;
  const json = text === 'True' || text === 'False' ? text.toLowerCase() : trimmed;
  try {
    const value: unknown = JSON.parse(json);
    if (typeof value !== 'string' && fitsSchema(value, schema)) return value;
  } catch {
    // Not JSON: text.
  }
  return text;
}

/** Each tool's parameters by name (their schemas), which type the XML forms' plain-text values. */
export type ParamSchemas = ReadonlyMap<string, Readonly<Record<string, Record<string, unknown>>>>;

/**
 * The arguments object of an XML-form call's body, and the tool's name; null when the body is not one. Lenient
 * as the models are: a missing `</parameter>` or `</function>` is tolerated, and a value ends at the last
 * `</parameter>` before the next `<parameter=` (so a value may hold that text itself).
 */
function xmlCall(
  body: string,
  form: 'qwen' | 'glm',
  schemas: ParamSchemas | undefined,
): { name: string; arguments: Record<string, unknown> } | null {
  const entries: Array<[string, unknown]> = [];
  let name: string;
  if (form === 'qwen') {
    const m = /^\s*<function=([^>\n]+)>/.exec(body);
    if (!m) return null;
    name = (m[1] as string).trim();
    const inner = body.slice(m[0].length).replace(/<\/function>\s*$/, '');
    const [head, ...params] = inner.split('<parameter=');
    if ((head as string).trim() !== '') return null;
    for (const p of params) {
      const close = p.indexOf('>');
      if (close < 0) return null;
      const value = p
        .slice(close + 1)
        .replace(/<\/parameter>\s*$/, '')
        .replace(/^\n/, '')
        .replace(/\n$/, '');
      const key = p.slice(0, close).trim();
      entries.push([key, xmlValue(value, schemas?.get(name)?.[key])]);
    }
  } else {
    const at = body.indexOf('<arg_key>');
    name = (at < 0 ? body : body.slice(0, at)).trim();
    const pairs = /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/g;
    let rest = at < 0 ? '' : body.slice(at);
    for (const p of rest.matchAll(pairs)) {
      const key = (p[1] as string).trim();
      entries.push([key, xmlValue((p[2] as string).trim(), schemas?.get(name)?.[key])]);
    }
    rest = rest.replace(pairs, '');
    if (rest.trim() !== '') return null;
  }
  // (fromEntries defines each key, `__proto__` included, as a property of its own.)
  return { name, arguments: Object.fromEntries(entries) };
}

/** Whether the text after an XML form's opening can still become a call (else it is given back at once). */
function xmlSoFar(text: string, form: 'qwen' | 'glm'): boolean {
  const t = text.trimStart();
  if (form === 'qwen') return t.startsWith('<function=') || '<function='.startsWith(t);
  const lt = t.indexOf('<');
  return /^[^\s<>]{0,128}\s*$/.test(lt < 0 ? t : t.slice(0, lt));
}

/** Whether text can still become `name` + marker (`[TOOL_CALLS]name[ARGS]`): a name, maybe the marker's start. */
function nameSoFar(text: string, marker: string): boolean {
  let k = Math.min(text.length, marker.length - 1);
  while (k > 0 && !marker.startsWith(text.slice(text.length - k))) k--;
  return /^\s*[A-Za-z0-9_.-]{0,64}$/.test(text.slice(0, text.length - k));
}

/**
 * A filter for one reply. `forced`: the prompt already ends with the format's opening (kvdesk made the model
 * call a tool), so the reply is one call object — or, for a form that writes the name apart
 * (`[TOOL_CALLS]name[ARGS]{…}`), the arguments of `forcedName`'s call. White space between and after calls is
 * dropped (it only separates them).
 */
export function createToolCallFilter(
  format: ToolCallFormat,
  names: ReadonlySet<string>,
  opts: {
    forced?: boolean;
    forcedName?: string;
    /**
     * Forced: the call's opening, which the reply writes first (after white space) instead of the prompt ending
     * with it (kvdesk writes it for a thinking model after its reasoning); read past, and dropped where the reply
     * ends inside it. A reply without it is the call.
     */
    skip?: string;
    /** For the XML forms: each tool's parameter schemas, which say how to read a plain-text value. */
    paramSchemas?: ParamSchemas;
    /**
     * Give the argument text of calls as it is written (deltas). Only where a call cannot turn out to be
     * text (calls held to their schemas by a grammar): a client cannot take back what it was sent.
     */
    streamArguments?: boolean;
    /**
     * Where a call and the reply's JSON (JSON output) both begin with `{` (the bare-JSON form): whether the call
     * text read so far is one the call grammar takes. Once it is not, the object is the reply's JSON (which the
     * engine let go on where the call's grammar refused it), given as written; a call read is one it took whole.
     */
    mayBeCall?: (text: string) => boolean;
  } = {},
): ToolCallFilter {
  const bare = format.open === '';
  // content: looking for an opening; start: a bare-JSON format before the reply's first character;
  // call: inside a call (`opening` is the text that opened it, given back if it turns out not to be one);
  // closing: after a call, reading the closing tag.
  let state: 'content' | 'start' | 'call' | 'closing' = opts.forced ? 'call' : bare ? 'start' : 'content';
  let buffer = '';
  let opening = opts.forced ? '' : format.open;
  // Right after a call: white space is held, and dropped unless text follows.
  let afterCall = false;
  // streamArguments: the calls read so far (the next call's index), and the calls of the call text being read
  // whose arguments were streamed: their id, name and how much of their arguments went out.
  const streams = opts.streamArguments === true && !format.xml;
  let callsMade = 0;
  let streaming: Array<{ id: string; name: string; sent: number }> = [];

  /** The argument text written since the last push, of each call of the call text being read. */
  const streamPartial = (out: ToolCallOutput): void => {
    if (!streams || state !== 'call') return;
    let envs: EnvelopeSoFar[];
    if (format.argsMarker) {
      // `name[ARGS]{…}`: the name before the marker (or the forced one), the arguments after it.
      let name = opts.forced ? opts.forcedName : undefined;
      let from = 0;
      if (name === undefined) {
        const at = buffer.indexOf(format.argsMarker);
        if (at < 0) return;
        name = buffer.slice(0, at).trim();
        from = at + format.argsMarker.length;
      }
      while (isSpace(buffer[from])) from++;
      if (buffer[from] !== '{') return;
      const end = jsonValueEnd(buffer, from);
      envs = [{ name, argsStart: from, ...(end > 0 ? { argsEnd: end } : {}) }];
    } else {
      envs = envelopesSoFar(buffer);
    }
    for (const [k, env] of envs.entries()) {
      if (env.name === undefined || env.argsStart === undefined || !names.has(env.name)) continue;
      const upTo = env.argsEnd ?? buffer.length;
      let s = streaming[k];
      const first = s === undefined;
      if (!s) {
        s = { id: newToolCallId(format.shortIds), name: env.name, sent: 0 };
        streaming[k] = s;
      }
      const piece = buffer.slice(env.argsStart + s.sent, upTo);
      s.sent = upTo - env.argsStart;
      if (first) out.deltas.push({ index: callsMade + k, id: s.id, name: s.name, arguments: piece });
      else if (piece.length > 0) out.deltas.push({ index: callsMade + k, arguments: piece });
    }
  };

  const xmlCalls = (body: string): ToolCall[] | null => {
    const call = format.xml ? xmlCall(body, format.xml, opts.paramSchemas) : null;
    return call ? callsOf(call, names) : null;
  };

  /** The call(s) at the head of the buffer: their end and calls; -1 to wait; null when it is not one. */
  const readCall = (): { end: number; calls: ToolCall[] } | -1 | null => {
    if (format.xml) {
      // Plain-text values: only the closing tag says where the call ends (it is consumed here; a reply that
      // ends without it is read at the flush).
      const end = buffer.indexOf(format.close);
      if (end < 0) return xmlSoFar(buffer, format.xml) ? -1 : null;
      const calls = xmlCalls(buffer.slice(0, end));
      return calls ? { end: end + format.close.length, calls } : null;
    }
    let from = 0;
    let name: string | undefined;
    if (format.argsMarker) {
      name = opts.forced ? opts.forcedName : undefined;
      if (name === undefined) {
        const at = buffer.indexOf(format.argsMarker);
        if (at < 0) return nameSoFar(buffer, format.argsMarker) ? -1 : null;
        name = buffer.slice(0, at).trim();
        from = at + format.argsMarker.length;
      }
    }
    const end = jsonValueEnd(buffer, from);
    if (end === -1) return -1;
    if (end === -2) return null;
    let value: unknown;
    try {
      // Numbers kept as written: 9e999 or 12345678901234567890 go to the tool as the model wrote them.
      value = readJson(buffer.slice(from, end));
    } catch {
      return null;
    }
    const calls = callsOf(name === undefined ? value : { name, arguments: value }, names, format.shortIds);
    return calls ? { end, calls } : null;
  };

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
        if (afterCall) {
          let i = 0;
          while (isSpace(buffer[i])) i++;
          if (i === buffer.length) return;
          buffer = buffer.slice(i);
          afterCall = false;
        }
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
        // Whatever of the arguments is written goes out first (all of it when the call is complete).
        streamPartial(out);
        const read = opts.mayBeCall && !opts.mayBeCall(buffer) ? null : readCall();
        if (read === -1) return;
        if (read === null) {
          streaming = [];
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
        // A call whose arguments went out keeps the id its first delta gave it.
        for (const [k, call] of read.calls.entries()) {
          const s = streaming[k];
          if (s) call.id = s.id;
        }
        callsMade += read.calls.length;
        streaming = [];
        out.calls.push(...read.calls);
        buffer = buffer.slice(read.end);
        afterCall = true;
        state = format.close === '' || format.xml ? 'content' : 'closing';
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

  // Forced with `skip`: the text read while it may still be the opening (white space, then the opening's start).
  let skip = opts.forced ? (opts.skip ?? '') : '';
  let skipped = '';
  /** Text past the opening `skip` names (held while it may still be part of it). */
  const pastOpening = (text: string): string => {
    if (skip === '') return text;
    skipped += text;
    const lead = skipped.trimStart();
    if (lead.length < skip.length && skip.startsWith(lead)) return '';
    const past = lead.startsWith(skip) ? lead.slice(skip.length) : skipped;
    skip = '';
    skipped = '';
    return past;
  };

  return {
    push(text) {
      const out: ToolCallOutput = { content: '', calls: [], deltas: [] };
      buffer += pastOpening(text);
      step(out);
      return out;
    },
    flush() {
      const out: ToolCallOutput = { content: '', calls: [], deltas: [] };
      // A reply that ended inside the opening: kvdesk wrote that part, not the model (dropped).
      skip = '';
      skipped = '';
      // A call cut before its end (the reply ran out of tokens) is text, as without streaming; a client that was
      // streamed its arguments has them as far as they were written, as OpenAI's clients get a cut call.
      streaming = [];
      // An XML-form call whose closing tag never came (the reply ended, or a stop string cut it) is still one.
      const lastCall = state === 'call' && format.xml ? xmlCalls(buffer) : null;
      if (lastCall) out.calls.push(...lastCall);
      else if (state === 'call') out.content += opening + buffer;
      else if (state === 'content' && !(afterCall && buffer.trim() === '')) out.content += buffer;
      else if (state === 'start') out.content += buffer;
      buffer = '';
      state = 'content';
      return out;
    },
    release() {
      const out: ToolCallOutput = { content: '', calls: [], deltas: [] };
      if (state === 'content' && !afterCall) {
        out.content += buffer;
        buffer = '';
      } else if (state === 'call' && !opts.forced) {
        streaming = [];
        const lastCall = format.xml ? xmlCalls(buffer) : null;
        if (lastCall) {
          callsMade += lastCall.length;
          out.calls.push(...lastCall);
          afterCall = true;
        } else out.content += opening + buffer;
        buffer = '';
        state = 'content';
      }
      return out;
    },
  };
}
