import { createHash, randomBytes } from 'node:crypto';
import { Environment, Interpreter, Template } from '@huggingface/jinja';
import { KvdeskError } from '../../shared/errors';
import { FIX_PACKAGE_TEMPLATE } from '../../shared/model-spec';
import { isHarmonyTemplate } from '../../shared/reasoning';
import type { TextTokenizer } from './text-tokenizer';

/** A tool call of an assistant turn as chat templates see it (transformers' form: arguments as an object). */
export interface TemplateToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: unknown };
}

/** One chat turn as chat templates see it. */
export interface ChatMessage {
  role: string;
  content: string;
  /** An assistant turn's tool calls. */
  tool_calls?: TemplateToolCall[];
  /** A tool result: the call it answers, and the tool's name. */
  tool_call_id?: string;
  name?: string;
  /** An assistant turn's reasoning (Qwen3's and DeepSeek's templates read `reasoning_content`, gpt-oss's `thinking`). */
  reasoning_content?: string;
}

/** Options of {@link renderChatTemplate}. */
export interface RenderChatOptions {
  /** Append the opening of an assistant turn so the model answers next. */
  addGenerationPrompt: boolean;
  bosToken?: string;
  eosToken?: string;
  /** Where the template came from, for error messages (e.g. "tokenizer_config.json field chat_template"). */
  source?: string;
  /** What to do about a template that does not render (default: fix the package's, or remove it for ChatML). */
  fix?: string;
  /** Tools the model may call, in transformers' form (`{type: 'function', function: {name, description, parameters}}`). */
  tools?: unknown[];
  /** More variables for the template (transformers' chat template kwargs, e.g. `enable_thinking`). */
  vars?: Record<string, unknown>;
  /** How long and how big one render may get (default {@link TEMPLATE_LIMITS}). */
  limits?: TemplateLimits;
}

/** What one render of a chat template may cost before kvdesk stops it. */
export interface TemplateLimits {
  /** Wall-clock milliseconds. */
  ms: number;
  /** Characters of any one string the template builds, its output included. */
  chars: number;
  /** Items of any one list the template makes (`range()` refuses before it makes them). */
  listItems: number;
}

/**
 * A package's template is code from the internet that runs in the host on every request, and the Jinja
 * interpreter has no limits of its own: `range(10**9)` or two nested loops over `range(100000)` would hold the
 * app or the server for minutes. Real templates render in milliseconds (7 ms for a conversation of 200 turns with
 * Qwen3's here), so these leave room for a hundred times that; a render runs in the host's thread, which the
 * time limit holds for at most a second.
 */
export const TEMPLATE_LIMITS: TemplateLimits = { ms: 1000, chars: 16 * 1024 * 1024, listItems: 100_000 };

/**
 * ChatML, the template transformers used when a tokenizer had none. Used for packages without a
 * chat template; the caller warns, since the model may never have seen these markers.
 */
export const DEFAULT_CHAT_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// The library declares raise_exception itself and refuses to let render() redeclare it, so calls
// are renamed in the parsed template to tell "the template rejects this conversation" (a request
// problem) from "the template is broken" (a package problem).
const RAISE = '__kvdesk_raise_exception';
// The same for range(), which kvdesk replaces with one that refuses to make more numbers than the limit.
const RANGE = '__kvdesk_range';

class TemplateRaised extends Error {}

/** A render stopped by {@link TEMPLATE_LIMITS}: the template's fault, whatever the conversation. */
class TemplateOverLimit extends Error {}

interface RenderGuard {
  limits: TemplateLimits;
  deadline: number;
}

/** The guard of the render running now (renders are synchronous, so there is at most one, or a nested one). */
let activeGuard: RenderGuard | undefined;

// Template.render builds its own Interpreter, so the guard wraps the prototype's evaluate (every statement and
// expression goes through it). It counts only while one of kvdesk's renders runs.
const evaluate = Interpreter.prototype.evaluate;
Interpreter.prototype.evaluate = function guardedEvaluate(
  this: Interpreter,
  ...args: Parameters<Interpreter['evaluate']>
): ReturnType<Interpreter['evaluate']> {
  const guard = activeGuard;
  if (guard === undefined) return exactNumberValue(evaluate.apply(this, args));
  // Before and after every call: a loop with an empty body runs all its turns between two calls (as many as its
  // list has items, which the limit on lists bounds).
  overTime(guard);
  const value = exactNumberValue(evaluate.apply(this, args));
  overTime(guard);
  const made = value.value;
  if (typeof made === 'string' && made.length > guard.limits.chars) {
    throw new TemplateOverLimit(
      `it built a text of ${made.length.toLocaleString('en-US')} characters, over the ${guard.limits.chars.toLocaleString('en-US')} kvdesk allows`,
    );
  }
  // Lists grow without range() too (`l + l`, `split`).
  if (Array.isArray(made) && made.length > guard.limits.listItems) {
    throw new TemplateOverLimit(
      `it made a list of ${made.length.toLocaleString('en-US')} items, over the ${guard.limits.listItems.toLocaleString('en-US')} kvdesk allows`,
    );
  }
  return value;
};

// The library's `string` filter refuses None ("Cannot apply filter "string" to type: NullValue") and writes
// booleans as JSON does, where templates are written for Python's str(): Qwen3-Coder's writes each argument of an
// earlier tool call with `args_value | string`, so a null argument failed the whole chat and true came out as
// `true` (kvdesk's own reader of those calls expects True). The library takes no custom filters, so its filter
// step is wrapped for these values (and for exact numbers in tojson, below); every other filter and value goes
// through unchanged.
type FilterNode = { type: string; value?: unknown; callee?: { type: string; value?: unknown } };
type ApplyFilter = (this: Interpreter, operand: RuntimeValue, filter: FilterNode, environment: unknown) => RuntimeValue;
const interpreterProto = Interpreter.prototype as unknown as { applyFilter: ApplyFilter };
const applyFilter = interpreterProto.applyFilter;
if (typeof applyFilter !== 'function') throw new Error('@huggingface/jinja: Interpreter.applyFilter not found');
interpreterProto.applyFilter = function pythonStringFilter(operand, filter, environment) {
  const name =
    filter.type === 'Identifier' ? filter.value : filter.callee?.type === 'Identifier' && filter.callee.value;
  if (filter.type === 'Identifier' && name === 'string' && PYTHON_STR_TYPES.has(operand.type)) {
    return new StringValue(pythonStr(operand));
  }
  if (name === 'tojson' || (name === 'string' && (operand.type === 'ArrayValue' || operand.type === 'ObjectValue'))) {
    return withExactNumbersAsWritten(operand, (op) => applyFilter.call(this, op, filter, environment));
  }
  return applyFilter.call(this, operand, filter, environment);
};

/**
 * A number for a chat template as written, where JSON.parse would change it (12345678901234567890 rounded,
 * 1e400 Infinity, 1.0 the integer 1): an earlier tool call's arguments reach the template as the model wrote them.
 * The template sees a number (`is number`, arithmetic on its double value); printing it, `string` and `tojson`
 * write its text.
 */
export function exactNumber(text: string): Record<string, string> {
  return { [EXACT_NUMBER_KEY]: text };
}

// exactNumber's marker: the library turns every object into a mapping before the template runs, so the marker is
// one (with a key no data has), turned into a number where the template reads it (every read goes through evaluate).
const EXACT_NUMBER_KEY = `__kvdesk_exact_number_${randomBytes(8).toString('hex')}`;
const EXACT = Symbol('kvdesk exact number text');

type RuntimeValue = { type: string; value: unknown; [EXACT]?: string };
type RuntimeValueClass = new (value: unknown) => RuntimeValue;
// The library exports no value classes: they are taken from values it makes.
const sample = new Environment();
sample.set('s', '');
sample.set('i', 1);
sample.set('f', 1.5);
sample.set('a', []);
sample.set('o', {});
const valueClass = (name: string, type: string): RuntimeValueClass => {
  const value = sample.lookupVariable(name) as unknown as RuntimeValue;
  if (value.type !== type) throw new Error(`@huggingface/jinja: ${type} not found`);
  return value.constructor as RuntimeValueClass;
};
const StringValue = valueClass('s', 'StringValue');
const IntegerValue = valueClass('i', 'IntegerValue');
const FloatValue = valueClass('f', 'FloatValue');
const ArrayValue = valueClass('a', 'ArrayValue');
const ObjectValue = valueClass('o', 'ObjectValue');

// Printing a list or mapping (`{{ args }}`) writes its JSON too.
for (const cls of [ArrayValue, ObjectValue]) {
  const jsonText = cls.prototype.toString as (this: RuntimeValue) => string;
  cls.prototype.toString = function exactToString(this: RuntimeValue): string {
    return withExactNumbersAsWritten(this, (v) => new StringValue(jsonText.call(v))).value as string;
  };
}

// Printing (`{{ x }}`) and `~` write None, True and False as Jinja2 does, with Python's str(), where the library
// prints nothing for None and true / false (and fails on `~` with None or an undefined value): templates print a
// tool call's argument values or flags so. An undefined value is '' in both. Only an expression's value is
// printed: a statement's own (a set, a macro, a comment) is none, and prints nothing.
const PYTHON_STR_TYPES = new Set(['NullValue', 'BooleanValue', 'UndefinedValue']);

/** A value as Jinja2 prints it (Python's str(); an undefined value is ''). */
function pythonStr(value: RuntimeValue): string {
  if (value.type === 'NullValue') return 'None';
  if (value.type === 'UndefinedValue') return '';
  if (value.type === 'BooleanValue') return value.value ? 'True' : 'False';
  return value.toString();
}

// The library exports no syntax classes: Expression is taken as the parent class of a parsed name, checked to hold
// a literal and not a set statement.
const Expression = (() => {
  const [name, literal, set] = new Template('{{ x }}{{ 1 }}{% set y = 1 %}').parsed.body as object[];
  const cls = Object.getPrototypeOf(Object.getPrototypeOf(name)).constructor as abstract new () => object;
  if (!(literal instanceof cls) || set instanceof cls) throw new Error('@huggingface/jinja: Expression not found');
  return cls;
})();

type SyntaxNode = NonNullable<Parameters<Interpreter['evaluate']>[0]>;
type Scope = Parameters<Interpreter['evaluate']>[1];
type BinaryNode = SyntaxNode & { operator: { value: string }; left: SyntaxNode; right: SyntaxNode };
const printing = Interpreter.prototype as unknown as {
  evaluateBlock: (this: Interpreter, statements: SyntaxNode[], environment: Scope) => RuntimeValue;
  evaluateBinaryExpression: (this: Interpreter, node: BinaryNode, environment: Scope) => RuntimeValue;
};
const evaluateBinary = printing.evaluateBinaryExpression;
if (typeof printing.evaluateBlock !== 'function' || typeof evaluateBinary !== 'function') {
  throw new Error('@huggingface/jinja: Interpreter.evaluateBlock or evaluateBinaryExpression not found');
}
const evaluated = (it: Interpreter, node: SyntaxNode, environment: Scope) =>
  it.evaluate(node, environment) as unknown as RuntimeValue;
printing.evaluateBlock = function pythonPrint(statements, environment) {
  let out = '';
  for (const statement of statements) {
    const value = evaluated(this, statement, environment);
    if (statement instanceof Expression) out += pythonStr(value);
    else if (value.type !== 'NullValue' && value.type !== 'UndefinedValue') out += value.toString();
  }
  return new StringValue(out);
};
printing.evaluateBinaryExpression = function pythonConcat(node, environment) {
  if (node.operator.value !== '~') return evaluateBinary.call(this, node, environment);
  return new StringValue(
    pythonStr(evaluated(this, node.left, environment)) + pythonStr(evaluated(this, node.right, environment)),
  );
};

/** The text of an exactNumber marker, or of the number made from one. */
function exactText(value: RuntimeValue): string | undefined {
  if (value[EXACT] !== undefined) return value[EXACT];
  if (value.type !== 'ObjectValue' || !(value.value instanceof Map) || value.value.size !== 1) return undefined;
  const text = (value.value.get(EXACT_NUMBER_KEY) as RuntimeValue | undefined)?.value;
  return typeof text === 'string' ? text : undefined;
}

/** An exactNumber marker as the number the template reads; any other value as it is. */
function exactNumberValue<T>(value: T): T {
  const v = value as unknown as RuntimeValue;
  if (v.type !== 'ObjectValue' || v[EXACT] !== undefined) return value;
  const text = exactText(v);
  if (text === undefined) return value;
  const n = Number(text);
  const num = Number.isInteger(n) && !/[.eE]/.test(text) ? new IntegerValue(n) : new FloatValue(n);
  num[EXACT] = text;
  // Printing and `string` use toString.
  Object.defineProperty(num, 'toString', { value: () => text });
  return num as unknown as T;
}

/**
 * Runs a filter that writes JSON (tojson, string of a list or mapping) with each exact number inside the operand
 * in its place as written: the library's JSON writer takes a number's double value.
 */
function withExactNumbersAsWritten(operand: RuntimeValue, filter: (op: RuntimeValue) => RuntimeValue): RuntimeValue {
  const texts: string[] = [];
  const placeholder = (i: number) => `${EXACT_NUMBER_KEY}#${i}`;
  const swap = (v: RuntimeValue): RuntimeValue => {
    const text = exactText(v);
    if (text !== undefined) {
      texts.push(text);
      return new StringValue(placeholder(texts.length - 1));
    }
    if (v.type === 'ArrayValue' && Array.isArray(v.value)) {
      const items = v.value as RuntimeValue[];
      const swapped = items.map(swap);
      return swapped.some((x, i) => x !== items[i]) ? new ArrayValue(swapped) : v;
    }
    if (v.type === 'ObjectValue' && v.value instanceof Map) {
      const entries = [...(v.value as Map<string, RuntimeValue>)];
      const swapped = entries.map(([k, x]): [string, RuntimeValue] => [k, swap(x)]);
      return swapped.some(([, x], i) => x !== entries[i]?.[1]) ? new ObjectValue(new Map(swapped)) : v;
    }
    return v;
  };
  const swapped = swap(operand);
  const out = filter(swapped);
  if (texts.length === 0 || typeof out.value !== 'string') return out;
  let json = out.value;
  texts.forEach((text, i) => {
    json = json.replaceAll(JSON.stringify(placeholder(i)), text);
  });
  return new StringValue(json);
}

function overTime(guard: RenderGuard): void {
  if (performance.now() > guard.deadline) {
    throw new TemplateOverLimit(`it ran for over ${guard.limits.ms / 1000} s and was stopped`);
  }
}

/** Jinja's `range()`, refusing to make more numbers than the limit before it makes any. */
function boundedRange(limit: number) {
  return (start: number, stop?: number, step = 1): number[] => {
    const [from, to] = stop === undefined ? [0, start] : [start, stop];
    if (step === 0) throw new Error('range() step must not be zero');
    const count = Math.max(0, Math.ceil((to - from) / step));
    if (count > limit) {
      throw new TemplateOverLimit(
        `range() of ${count.toLocaleString('en-US')} numbers is over the ${limit.toLocaleString('en-US')} kvdesk allows`,
      );
    }
    const out: number[] = [];
    for (let i = 0; i < count; i++) out.push(from + i * step);
    return out;
  };
}

/** Why a template does not parse as Jinja (undefined when it does): checked when a package is read. */
export function templateSyntaxError(template: string): string | undefined {
  try {
    new Template(template);
    return undefined;
  } catch (err) {
    return errorMessage(err);
  }
}

/** How one render went: its text, or why it failed. */
type RenderOutcome =
  | { ok: true; text: string }
  | {
      ok: false;
      /** syntax: not Jinja; over: stopped by TEMPLATE_LIMITS; raised: the template's raise_exception; failed: anything else. */
      why: 'syntax' | 'over' | 'raised' | 'failed';
      reason: string;
    };

/** Renders a template, telling how it failed instead of throwing (messages already checked). */
function tryRender(template: string, messages: ChatMessage[], opts: RenderChatOptions): RenderOutcome {
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (err) {
    return { ok: false, why: 'syntax', reason: errorMessage(err) };
  }
  renameIdentifier(compiled.parsed, 'raise_exception', RAISE);
  renameIdentifier(compiled.parsed, 'range', RANGE);
  const harmony = isHarmonyTemplate(template);
  const limits = opts.limits ?? TEMPLATE_LIMITS;
  const outer = activeGuard;
  activeGuard = { limits, deadline: performance.now() + limits.ms };
  try {
    const text = compiled.render({
      ...opts.vars,
      [RANGE]: boundedRange(limits.listItems),
      messages: messages.map((m) => templateMessage(m, harmony)),
      ...(opts.tools ? { tools: opts.tools } : {}),
      add_generation_prompt: opts.addGenerationPrompt,
      // Templates concatenate these unconditionally; undefined would make `+` fail.
      bos_token: opts.bosToken ?? '',
      eos_token: opts.eosToken ?? '',
      [RAISE]: (message: unknown) => {
        throw new TemplateRaised(String(message));
      },
    });
    return { ok: true, text };
  } catch (err) {
    const why = err instanceof TemplateOverLimit ? 'over' : err instanceof TemplateRaised ? 'raised' : 'failed';
    return { ok: false, why, reason: errorMessage(err) };
  } finally {
    activeGuard = outer;
  }
}

/** Renders a Jinja chat template over `messages`, as transformers' apply_chat_template does. */
export function renderChatTemplate(template: string, messages: ChatMessage[], opts: RenderChatOptions): string {
  const source = opts.source ?? 'chat template';
  validateMessages(messages);
  // A template that ran past the limits, on the one-message chat it was tried on when its package was read or on a
  // request's chat, is not run again for each request (a second each on the host's thread, which the server and
  // every other request wait on): a chat as long as that one or longer fails at once, as it did then (a template
  // that loops only on longer chats still renders shorter ones). Tried again after a minute (a one-off stall of the
  // machine is not held against it for good).
  const now = Date.now();
  const key = overranKey(template, opts);
  const over = overran.get(key);
  const expired = over !== undefined && now - over.at >= OVERRAN_KEPT_MS;
  const fresh = over !== undefined && !expired && messages.length >= over.messages;
  const outcome: RenderOutcome = fresh
    ? { ok: false, why: 'over', reason: over.reason }
    : tryRender(template, messages, opts);
  if (!fresh) {
    if (!outcome.ok && outcome.why === 'over') {
      const shortest = over !== undefined && !expired ? Math.min(over.messages, messages.length) : messages.length;
      rememberOverran(key, outcome.reason, shortest);
    } else if (expired) overran.delete(key);
  }
  if (outcome.ok) return outcome.text;
  const fix = opts.fix ?? FIX_PACKAGE_TEMPLATE;
  switch (outcome.why) {
    case 'syntax':
      throw new KvdeskError(
        'PACKAGE_INVALID',
        `The ${source} is not a valid Jinja template: ${outcome.reason}. ${fix}`,
        {
          source,
        },
      );
    case 'over':
      throw new KvdeskError('PACKAGE_INVALID', `The ${source} did not finish rendering: ${outcome.reason}. ${fix}`, {
        source,
      });
    case 'raised':
      throw new KvdeskError(
        'BAD_REQUEST',
        `The ${source} rejected this conversation: ${outcome.reason}. Change the messages to the form this model expects.`,
        { source },
      );
    default:
      throw new KvdeskError('PACKAGE_INVALID', `The ${source} failed while rendering: ${outcome.reason}. ${fix}`, {
        source,
      });
  }
}

/** The conversation a package's template is tried on when it is read: one user message, the least any accepts. */
const PROBE_CHAT: ChatMessage[] = [{ role: 'user', content: 'Hello' }];

/** Templates tried already (a library lists the same packages again and again): template → what was found. */
const probed = new Map<string, string | undefined>();
const PROBED_KEPT = 64;
/**
 * Templates whose render ran past the limits (a loop), by template and what a request gives it besides messages
 * (overranKey): why it was stopped, when, and the fewest messages of a chat it was stopped on.
 */
const overran = new Map<string, { reason: string; at: number; messages: number }>();

/**
 * A template with what a render gives it besides messages — its variables' plain values, the tools (a hash of
 * their whole definitions), the generation prompt: a template that loops only with thinking on, or only with
 * tools, must not fail another client's chat without them, nor one whose tools have the same names and other
 * schemas (a template may loop on a schema's parameters).
 */
function overranKey(template: string, opts: Pick<RenderChatOptions, 'vars' | 'tools' | 'addGenerationPrompt'>): string {
  const plain = (v: unknown) => v === null || ['string', 'number', 'boolean'].includes(typeof v);
  const vars = Object.entries(opts.vars ?? {})
    .filter(([, v]) => plain(v))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const tools =
    opts.tools === undefined ? null : createHash('sha256').update(JSON.stringify(opts.tools)).digest('base64');
  return `${template}\u0000${JSON.stringify([vars, tools, opts.addGenerationPrompt])}`;
}
/** How long a template that ran past the limits fails at once before it is run again. */
const OVERRAN_KEPT_MS = 60_000;

function rememberOverran(key: string, reason: string, messages: number): void {
  overran.delete(key);
  if (overran.size >= PROBED_KEPT) overran.delete(overran.keys().next().value as string);
  overran.set(key, { reason, at: Date.now(), messages });
}

/**
 * Why a package's chat template cannot be used for chats (undefined when it can): it is not valid Jinja, or
 * rendering a one-message chat with the reply opened fails, raises, or runs past {@link TEMPLATE_LIMITS} (a template
 * that loops is stopped there). Said as a clause: "is not valid Jinja (…)", "fails on a one-message chat (…)".
 */
export function templateProblem(template: string, tokens: { bos?: string; eos?: string } = {}): string | undefined {
  const key = JSON.stringify([template, tokens.bos ?? null, tokens.eos ?? null]);
  if (probed.has(key)) return probed.get(key);
  const outcome = tryRender(template, PROBE_CHAT, {
    addGenerationPrompt: true,
    ...(tokens.bos !== undefined ? { bosToken: tokens.bos } : {}),
    ...(tokens.eos !== undefined ? { eosToken: tokens.eos } : {}),
  });
  const found = outcome.ok
    ? undefined
    : outcome.why === 'syntax'
      ? `is not valid Jinja (${outcome.reason})`
      : outcome.why === 'over'
        ? `did not finish rendering a one-message chat (${outcome.reason})`
        : outcome.why === 'raised'
          ? `rejects even a one-message chat (it raises: ${outcome.reason})`
          : `fails on a one-message chat (${outcome.reason})`;
  if (probed.size >= PROBED_KEPT) probed.delete(probed.keys().next().value as string);
  probed.set(key, found);
  if (!outcome.ok && outcome.why === 'over') {
    rememberOverran(overranKey(template, { addGenerationPrompt: true }), outcome.reason, PROBE_CHAT.length);
  }
  return found;
}

/**
 * A message with only the fields it has: templates test `message.tool_calls is defined`. An assistant turn's
 * reasoning goes as `reasoning_content` and, as gpt-oss's template reads it, `thinking`. That template
 * (`harmony`) writes a calling turn's text as its analysis and refuses both: a preamble before the calls joins
 * the reasoning there.
 */
function templateMessage(m: ChatMessage, harmony: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls) out.tool_calls = m.tool_calls;
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  if (m.reasoning_content !== undefined) {
    out.reasoning_content = m.reasoning_content;
    out.thinking = m.reasoning_content;
    if (harmony && m.tool_calls && m.tool_calls.length > 0 && m.content.trim() !== '') {
      out.thinking = [m.reasoning_content, m.content].filter((t) => t.trim() !== '').join('\n\n');
      out.content = '';
    }
  }
  return out;
}

/** A tool no template knows: its name in a template's output means the template shows tools. */
const PROBE_TOOL = 'kvdesk_probe_tool_4f1c';

/**
 * Whether a template shows tools to its model: rendered with a probe tool and one user message, its output
 * names the tool. (Reading `tools` is not enough: a template may only test it, raise on it, or read a
 * message's own `tools`.) One that does not is given kvdesk's own description of the tools instead.
 */
export function templateShowsTools(template: string): boolean {
  try {
    const text = renderChatTemplate(template, [{ role: 'user', content: 'hi' }], {
      addGenerationPrompt: true,
      tools: [
        {
          type: 'function',
          function: { name: PROBE_TOOL, description: PROBE_TOOL, parameters: { type: 'object', properties: {} } },
        },
      ],
    });
    return text.includes(PROBE_TOOL);
  } catch {
    return false;
  }
}

/** Result of {@link applyChat}. */
export interface AppliedChat {
  text: string;
  ids: number[];
  /** True when the package had no template and ChatML was used (the caller should warn). */
  usedDefaultTemplate: boolean;
}

/** Options of {@link applyChat} and {@link renderChat}. */
export interface ApplyChatOptions {
  addGenerationPrompt?: boolean;
  source?: string;
  /** What to do about a template that does not render (RenderChatOptions.fix). */
  fix?: string;
  tools?: unknown[];
  /** More variables for the template (e.g. `enable_thinking`). */
  vars?: Record<string, unknown>;
  /** Text after the rendered prompt: the start of the reply the model is made to write (a tool call's opening). */
  suffix?: string;
  /**
   * Text put between the rendered prompt and `suffix`, chosen from what the template wrote (a thinking model's
   * reasoning closed for it): the template is rendered once, whatever this adds.
   */
  closing?: (rendered: string) => string;
  /**
   * The final message is an assistant's reply to continue (transformers' continue_final_message): the prompt
   * ends where its text ends, with no end-of-turn after it and no new reply opened.
   */
  continueFinal?: boolean;
  /** Sees the rendered text before it is encoded (and may refuse it: a prompt surely too long to tokenize). */
  beforeEncode?: (text: string) => void;
}

/**
 * Renders the package's chat template (ChatML when it has none) and encodes the prompt. The
 * template owns the special tokens, so the post-processor is not applied (it would add a second
 * BOS, and an EOS that ends the prompt before the answer); BOS is prepended only when the model
 * wants one and the template did not write it.
 */
export function applyChat(
  tok: TextTokenizer,
  template: string | undefined,
  messages: ChatMessage[],
  opts?: ApplyChatOptions,
): AppliedChat {
  const { text, usedDefaultTemplate } = renderChat(tok, template, messages, opts);
  opts?.beforeEncode?.(text);
  return { text, ids: encodeChat(tok, text), usedDefaultTemplate };
}

/** The prompt text {@link applyChat} encodes: the template rendered, its closing and suffix after it. */
export function renderChat(
  tok: TextTokenizer,
  template: string | undefined,
  messages: ChatMessage[],
  opts?: ApplyChatOptions,
): { text: string; usedDefaultTemplate: boolean } {
  const chosen = template !== undefined && template.trim() !== '' ? template : undefined;
  const usedDefaultTemplate = chosen === undefined;
  const renderOpts: RenderChatOptions = {
    addGenerationPrompt: opts?.addGenerationPrompt ?? true,
    source: usedDefaultTemplate ? 'default ChatML template' : (opts?.source ?? 'chat template'),
    ...(opts?.fix !== undefined ? { fix: opts.fix } : {}),
  };
  const bos = tok.specialTokens.bos;
  const eos = tok.specialTokens.eos;
  if (bos) renderOpts.bosToken = bos.token;
  if (eos) renderOpts.eosToken = eos.token;
  if (opts?.tools) renderOpts.tools = opts.tools;
  if (opts?.vars) renderOpts.vars = opts.vars;
  const template_ = chosen ?? DEFAULT_CHAT_TEMPLATE;
  const rendered = opts?.continueFinal
    ? continuedRender(template_, messages, renderOpts)
    : renderChatTemplate(template_, messages, renderOpts);
  return { text: rendered + (opts?.closing?.(rendered) ?? '') + (opts?.suffix ?? ''), usedDefaultTemplate };
}

/** A rendered chat prompt's ids, as {@link applyChat} encodes it (BOS put first where the template did not write it). */
export function encodeChat(tok: TextTokenizer, text: string): number[] {
  const bos = tok.specialTokens.bos;
  const ids = tok.encode(text, { addSpecialTokens: false });
  if (tok.addBosToken && bos && ids[0] !== bos.id) {
    tok.validateIds([bos.id]);
    ids.unshift(bos.id);
  }
  return ids;
}

/** Stands in for the text of a final message to continue while the template renders (no template makes it up). */
const CONTINUE_MARK = '\u0000kvdesk-continue\u0000';

/**
 * The conversation rendered up to the end of its final (assistant) message's text, as transformers'
 * continue_final_message: rendered whole with a mark in place of that text, cut where the mark is, the text put
 * back (as written: the model continues right after it). An empty final message is a new reply.
 */
function continuedRender(template: string, messages: ChatMessage[], opts: RenderChatOptions): string {
  const final = messages[messages.length - 1];
  if (final?.role !== 'assistant') {
    throw new KvdeskError(
      'BAD_REQUEST',
      'only a final assistant message can be continued: end with the reply to continue',
      {
        field: 'messages',
      },
    );
  }
  if (final.content.trim() === '') return renderChatTemplate(template, messages.slice(0, -1), opts);
  const marked = [...messages.slice(0, -1), { ...final, content: CONTINUE_MARK }];
  const whole = renderChatTemplate(template, marked, { ...opts, addGenerationPrompt: false });
  // The last mark is the final message's (an earlier message cannot hold a NUL-delimited look-alike after it).
  const at = whole.lastIndexOf(CONTINUE_MARK);
  if (at < 0) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `the ${opts.source ?? 'chat template'} does not show the final assistant message's text as written, so kvdesk cannot continue it: send it as a finished turn instead`,
      { field: 'messages' },
    );
  }
  return whole.slice(0, at) + final.content;
}

function validateMessages(messages: unknown): asserts messages is ChatMessage[] {
  if (!Array.isArray(messages)) {
    throw new KvdeskError('BAD_REQUEST', 'Chat messages must be a list of { role, content } objects.');
  }
  for (const [i, m] of messages.entries()) {
    const ok =
      typeof m === 'object' &&
      m !== null &&
      typeof (m as { role?: unknown }).role === 'string' &&
      typeof (m as { content?: unknown }).content === 'string';
    if (!ok) {
      throw new KvdeskError('BAD_REQUEST', `Chat message ${i} must have a string role and a string content.`, {
        index: i,
      });
    }
  }
}

function renameIdentifier(node: unknown, from: string, to: string, seen = new Set<object>()): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  if (Array.isArray(node)) {
    for (const child of node) renameIdentifier(child, from, to, seen);
    return;
  }
  const record = node as Record<string, unknown>;
  if (record.type === 'Identifier' && record.value === from) record.value = to;
  // `namespace(range=3)` names an attribute (read as `ns.range`, which is not renamed either), not the variable;
  // a macro's keywords are renamed with its parameters, so they still bind.
  const callee = record.type === 'CallExpression' ? (record.callee as { type?: string; value?: unknown }) : undefined;
  if (callee?.type === 'Identifier' && (callee.value === 'namespace' || callee.value === 'dict')) {
    for (const arg of record.args as Array<{ type?: string; value?: unknown }>) {
      renameIdentifier(arg.type === 'KeywordArgumentExpression' ? arg.value : arg, from, to, seen);
    }
    return;
  }
  // `x.range` names a key of x, not the variable.
  if (record.type === 'MemberExpression' && record.computed === false) {
    renameIdentifier(record.object, from, to, seen);
    return;
  }
  for (const child of Object.values(record)) renameIdentifier(child, from, to, seen);
}

/** The error's message as a clause: its own closing full stop goes (the sentence around it has one). */
function errorMessage(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/[.\s]+$/, '');
}
