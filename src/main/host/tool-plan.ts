/**
 * What a request's `tools` mean for its prompt and its replies: which tools the template shows, the form the
 * model writes calls in, and — for `toolChoice: 'required'` or a named tool — the opening appended to the
 * prompt and the schema the reply is written to (structured output over `{"name", "arguments"}`).
 */
import type { ChatMessage, GenerateRequest, ToolDefinition } from '../../shared/contract';
import { KvdeskError } from '../../shared/errors';
import { type CallGrammar, compileCallGrammar, feedCallBytes, initialCallState } from '../engine/call-constraint';
import {
  compileSchema,
  followRefs,
  freeFormObject,
  listsBesideOthers,
  refResources,
  SchemaError,
} from '../engine/json-schema';
import { templateShowsTools } from '../tokenizer/chat-template';
import type { TextTokenizer } from '../tokenizer/text-tokenizer';
import {
  HERMES,
  isJsonObjectText,
  type ParamSchemas,
  type ToolCallFormat,
  toolCallFormat,
} from '../tokenizer/tool-calls';

/** A request's tool calling, as the host runs it. */
export interface ToolPlan {
  /** Whether the package's template shows tools itself (else kvdesk describes them in the system message). */
  native: boolean;
  format: ToolCallFormat;
  /** Tools shown to the model: none with toolChoice `none`. */
  shown?: ToolDefinition[];
  /** Whether calls are read out of the replies. */
  reads: boolean;
  /** The reply is one call: the prompt ends with `suffix`, and the reply is written to `schema`. */
  forced: boolean;
  suffix: string;
  /**
   * A forced call a thinking model reasons before: the call's opening (the suffix the prompt would have ended
   * with), written for the model once its reasoning closes; the prompt's `suffix` is then empty.
   */
  afterReasoning?: string;
  schema?: Record<string, unknown>;
  /** A forced call in a form that writes the name apart (`[TOOL_CALLS]name[ARGS]`): the tool it calls. */
  forcedName?: string;
  names: ReadonlySet<string>;
  /** False: a reply ends after its first call. */
  parallel: boolean;
  /** Each tool's parameter schemas, for the XML forms (which write values as plain text, typed by them); else empty. */
  paramSchemas: ParamSchemas;
  /** The format's markers that are special tokens: kept in the text the filter reads. */
  keepIds: ReadonlySet<number>;
  /**
   * `auto`: the grammar a call the model opens is held to (its tool's schema; in Qwen3-Coder's XML form, its
   * tool's name and parameter names), in the engine. Absent where kvdesk cannot hold it: GLM's XML form, a tool
   * whose arguments hold an object that lists properties beside others allowed (or, in an XML form, free-form
   * arguments), a schema it cannot enforce.
   */
  grammar?: CallGrammar;
}

/** GLM's argument tags, which its tokenizer may mark special: kept in the text the filter reads. */
const GLM_MARKERS = ['<arg_key>', '</arg_key>', '<arg_value>', '</arg_value>'];

const showsTools = new Map<string, boolean>();

/** Whether a package's template shows tools itself (probed once per template). */
export function nativeTemplate(template: string | undefined): boolean {
  if (template === undefined || template.trim() === '') return false;
  let known = showsTools.get(template);
  if (known === undefined) {
    known = templateShowsTools(template);
    if (showsTools.size > 64) showsTools.clear();
    showsTools.set(template, known);
  }
  return known;
}

/**
 * Earlier turns' calls must carry JSON objects as arguments (templates read them as objects), and each must be
 * answered by a tool result before the conversation goes on; a result must answer a call that was made (as
 * OpenAI and Anthropic require: a model shown half an exchange misreads it).
 */
function checkHistory(messages: readonly ChatMessage[] | undefined): void {
  // Calls not yet answered: id → where the call is.
  const pending = new Map<string, string>();
  const unanswered = (at: string) => {
    const [id, where] = pending.entries().next().value as [string, string];
    return bad(
      `${where} (id ${JSON.stringify(id)}) has no tool result before ${at}: send its result (for call id ${JSON.stringify(id)}) right after the assistant turn that made the call.`,
      where,
    );
  };
  for (const [i, m] of (messages ?? []).entries()) {
    if (m.role === 'tool') {
      if (m.toolCallId !== undefined) {
        if (!pending.has(m.toolCallId)) {
          throw bad(
            `messages[${i}] is the result of call id ${JSON.stringify(m.toolCallId)}, but the assistant turn before it made no call with that id.`,
            `messages[${i}].toolCallId`,
          );
        }
        pending.delete(m.toolCallId);
      }
      continue;
    }
    if (pending.size > 0) throw unanswered(`messages[${i}]`);
    for (const [j, call] of (m.toolCalls ?? []).entries()) {
      if (!isJsonObjectText(call.arguments)) {
        throw bad(
          `messages[${i}].toolCalls[${j}].arguments must be the JSON text of an object, got ${JSON.stringify(call.arguments.slice(0, 80))}.`,
          `messages[${i}].toolCalls[${j}].arguments`,
        );
      }
      pending.set(call.id, `messages[${i}].toolCalls[${j}]`);
    }
  }
  if (pending.size > 0) throw unanswered('the reply');
}

function bad(message: string, field: string): KvdeskError {
  return new KvdeskError('BAD_REQUEST', message, { field });
}

/** A tool's arguments schema as kvdesk writes it: no parameters is an empty object. */
function argumentsSchema(tool: ToolDefinition): Record<string, unknown> {
  let p = tool.parameters;
  if (p === undefined || Object.keys(p).length === 0) return { type: 'object', properties: {} };
  // A root that is a reference (zod-to-json-schema with a name writes one): its definition, the definitions kept.
  const target = p.$ref !== undefined ? followRefs(p, p) : p;
  if (target !== p && typeof target === 'object' && target !== null && !Array.isArray(target)) {
    const { $defs, definitions } = p;
    // The root's definitions, unless the definition has its own.
    p = {
      ...($defs ? { $defs } : {}),
      ...(definitions ? { definitions } : {}),
      ...(target as Record<string, unknown>),
    };
  }
  // OpenAI's examples often leave out the root's type; properties say it is an object.
  if (p.type === undefined && p.properties !== undefined) return { type: 'object', ...p };
  return p;
}

/**
 * Each parameter's schema with its references followed in the tool's parameters (and those of its alternatives),
 * for the XML forms, which read a plain-text value by its schema's type.
 */
function parameterSchemas(tool: ToolDefinition): Record<string, Record<string, unknown>> {
  const args = argumentsSchema(tool);
  const follow = (s: unknown) => followRefs(s, args) as Record<string, unknown>;
  return Object.fromEntries(
    Object.entries((args.properties ?? {}) as Record<string, unknown>).map(([key, value]) => {
      const s = follow(value);
      const alternatives = s?.anyOf ?? s?.oneOf;
      return [key, Array.isArray(alternatives) ? { ...s, [s.anyOf ? 'anyOf' : 'oneOf']: alternatives.map(follow) } : s];
    }),
  );
}

/**
 * A forced call's schema, compiled to refuse what kvdesk cannot enforce; the refusal names the place in
 * tool i's parameters (`prefix`: where they sit in `schema`).
 */
function checkedSchema(
  schema: Record<string, unknown>,
  i: number,
  name: string,
  prefix: string,
): Record<string, unknown> {
  try {
    compileSchema(schema);
  } catch (err) {
    if (!(err instanceof SchemaError)) throw err;
    const inner = err.path.slice((prefix || 'schema').length);
    throw new KvdeskError(
      'BAD_REQUEST',
      `tools[${i}].parameters${inner} ("${name}"): kvdesk cannot make a call follow this schema: ${err.message.slice(err.path.length + 2)}. Simplify the schema, or let the model choose (toolChoice (tool_choice) "auto"), where the schema is only shown to it.`,
      { field: `tools[${i}].parameters${inner}` },
    );
  }
  return schema;
}

/**
 * The reply of a forced call to `tool` (tools[i]): `{"name": <its name>, <argsKey>: <its arguments>}`. The
 * arguments' schema is a resource of its own (an `$id`, each tool's its own), so that its `$ref`s (`#/$defs/…`, as
 * Pydantic writes nested models) are read in it, not in the call's schema nor in another tool's parameters.
 */
function callSchema(tool: ToolDefinition, argsKey: string, i: number): Record<string, unknown> {
  const args = argumentsSchema(tool);
  const refers = JSON.stringify(args).includes('"$ref"');
  const id = `https://kvdesk.invalid/tools/${i}/arguments.json`;
  return {
    type: 'object',
    properties: { name: { const: tool.name }, [argsKey]: refers ? { $id: id, ...args } : args },
    required: ['name', argsKey],
  };
}

/**
 * Arguments kvdesk would hold to fewer keys than the tool takes: an object in them, at any depth, that lists
 * properties beside others allowed (`additionalProperties` true or a schema: kvdesk writes the listed ones
 * only). One that lists none (`{"type": "object"}`, a map) is held as a free-form object in a JSON call form,
 * but an XML form holds a call to the listed names. (No parameters at all, or `"properties": {}` alone, is a
 * tool without arguments.)
 */
function freeFormArguments(tool: ToolDefinition, format: ToolCallFormat): boolean {
  const p = argumentsSchema(tool);
  if (format.xml !== undefined && freeFormObject(p)) return true;
  return holdsListedBesideOthers(p);
}

/**
 * Whether a schema holds, at a schema's place (properties, items, additionalProperties, alternatives, definitions;
 * not in data such as a default or an enum), an object that lists properties and allows others beside them.
 * Walked without recursion (a request's schema may nest deep).
 */
function holdsListedBesideOthers(schema: unknown): boolean {
  const todo: unknown[] = [schema];
  while (todo.length > 0) {
    const v = todo.pop();
    if (typeof v !== 'object' || v === null || Array.isArray(v)) continue;
    const o = v as Record<string, unknown>;
    if (listsBesideOthers(o)) return true;
    for (const key of MAPS) {
      const map = o[key];
      if (typeof map === 'object' && map !== null && !Array.isArray(map)) todo.push(...Object.values(map));
    }
    for (const key of ['items', 'additionalProperties', 'anyOf', 'oneOf', 'allOf']) {
      const sub = o[key];
      if (Array.isArray(sub)) todo.push(...sub);
      else todo.push(sub);
    }
  }
  return false;
}

/** Keywords that bound a value without changing its shape: an auto call's grammar goes without them. */
const VALUE_BOUNDS = [
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'format',
  'uniqueItems',
];

/**
 * Most levels of JSON a tool's parameters may nest (objects and arrays; a schema of 64 levels takes about 128), and
 * a call's arguments in the history.
 */
export const MAX_TOOL_NESTING = 256;

/**
 * How many levels of objects and arrays a JSON value nests, counted without recursion (past MAX_TOOL_NESTING, the
 * level it got to first: enough to refuse).
 */
export function nesting(value: unknown): number {
  let most = 0;
  const todo: Array<[unknown, number]> = [[value, 1]];
  for (let next = todo.pop(); next !== undefined; next = todo.pop()) {
    const [v, level] = next;
    if (typeof v !== 'object' || v === null) continue;
    if (level > most) most = level;
    // Deep enough to refuse: no need to walk the rest.
    if (most > MAX_TOOL_NESTING) return most;
    for (const child of Object.values(v)) todo.push([child, level + 1]);
  }
  return most;
}

/**
 * A schema that accepts everything `schema` does, in the shapes kvdesk's recogniser holds: value bounds
 * (minimum, pattern, format, …) dropped, and oneOf read as anyOf. What it still cannot hold (a recursive $ref, a value of
 * any type, …) stays, to be refused when compiled.
 */
function loosened(schema: unknown): unknown {
  const resourceOf = refResources(schema);
  const loosen = (s: unknown): unknown => {
    if (typeof s !== 'object' || s === null || Array.isArray(s)) return s;
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(s)) {
      if (VALUE_BOUNDS.includes(key)) continue;
      if (MAPS.has(key) && typeof value === 'object' && value) {
        out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, loosen(v)]));
      } else if (key === 'items' || (key === 'additionalProperties' && typeof value === 'object' && value !== null)) {
        out[key] = loosen(value);
      } else if ((key === 'anyOf' || key === 'oneOf') && Array.isArray(value)) out.anyOf = value.map(loosen);
      // A pointer through a oneOf this made an anyOf goes through the anyOf (read from the resource the $ref
      // names: the one it is written in, or the one its address names).
      else if (key === '$ref' && typeof value === 'string') {
        const resource = resourceOf(value, s);
        out.$ref = resource ? loosenedPointer(value, resource) : value;
      } else out[key] = value;
    }
    return out;
  };
  return loosen(schema);
}

/** Keywords whose value maps names to schemas, which loosened() reads into. */
const MAPS = new Set(['properties', '$defs', 'definitions']);

/**
 * A reference whose fragment is a JSON pointer into `root` (its resource), as it points into loosened(root): each
 * `oneOf` that loosened() turned into an `anyOf` (one of a schema it reads into: through properties, definitions,
 * items and alternatives from the root) is named so; a property called "oneOf", or a oneOf loosened() leaves as it
 * is, keeps its name. Its address (`q.json#…`) stays; its keys are read percent-decoded, as the compile reads them.
 */
function loosenedPointer(ref: string, root: unknown): string {
  const hash = ref.indexOf('#');
  const raw = hash < 0 ? '' : ref.slice(hash + 1);
  if (!raw.startsWith('/')) return ref;
  let fragment: string;
  try {
    fragment = decodeURIComponent(raw);
  } catch {
    fragment = raw;
  }
  let node: unknown = root;
  // Whether `node` is a schema loosened() reads into, and whether the next segment names a child in a map or list.
  let read = true;
  let next: 'schema' | 'map' | 'list' = 'schema';
  let renamed = false;
  const out = fragment
    .slice(1)
    .split('/')
    .map((segment) => {
      const key = segment.replace(/~1/g, '/').replace(/~0/g, '~');
      let name = segment;
      if (next === 'schema') {
        if (read && key === 'oneOf' && Array.isArray((node as Record<string, unknown> | null)?.oneOf)) {
          name = 'anyOf';
          renamed = true;
        }
        next = MAPS.has(key) ? 'map' : key === 'anyOf' || key === 'oneOf' ? 'list' : 'schema';
        read = read && (next !== 'schema' || key === 'items' || key === 'additionalProperties');
      } else next = 'schema';
      node = typeof node === 'object' && node !== null ? (node as Record<string, unknown>)[key] : undefined;
      // Decoded once when compiled: a `%` in a key is written `%25`.
      return name.replace(/%/g, '%25');
    });
  return renamed ? `${ref.slice(0, hash)}#/${out.join('/')}` : ref;
}

/**
 * The grammar of the calls a model makes when it chooses to (`auto`): its form's opening, then each call held
 * to its tool's schema, then the form's close (Hermes' `</tool_call>`; the others end with the call or the
 * array). A call the model chose to make is held to its shape, not to value bounds (a forced call's schema is
 * refused for those it cannot hold, and held to an integer's). Undefined where kvdesk cannot hold every tool's calls: then calls are read, not held.
 */
function autoGrammar(
  tools: readonly ToolDefinition[],
  format: ToolCallFormat,
  parallel: boolean,
): CallGrammar | undefined {
  if (format.xml === 'glm' || tools.some((t) => freeFormArguments(t, format))) return undefined;
  if (format.xml === 'qwen') {
    // Plain-text values: the call's structure is held (a listed tool, its own parameter names), not its values.
    const xmlTools = tools.map((t) => ({ name: t.name, params: Object.keys(argumentsSchema(t).properties ?? {}) }));
    return { trigger: format.open, array: false, close: format.close, calls: [], xml: { tools: xmlTools } };
  }
  const array = format.lead.trim() === '[';
  const base = {
    trigger: format.open,
    array,
    // Without parallel calls an array form's array holds one (the reply ends with the first call).
    ...(array && !parallel ? { single: true } : {}),
    close: format === HERMES ? format.close : '',
  };
  const shapes = tools.map((t) => ({ ...t, parameters: loosened(argumentsSchema(t)) as Record<string, unknown> }));
  try {
    if (format.argsMarker) {
      const calls = shapes.map((t) => ({ head: t.name + format.argsMarker, schema: t.parameters }));
      for (const c of calls) compileSchema(c.schema);
      return { ...base, calls };
    }
    const alternatives = shapes.map((t, i) => callSchema(t, format.argsKey, i));
    const schema = alternatives.length === 1 ? (alternatives[0] as Record<string, unknown>) : { anyOf: alternatives };
    compileSchema(schema);
    return { ...base, calls: [{ head: '', schema }] };
  } catch (err) {
    if (err instanceof SchemaError) return undefined;
    throw err;
  }
}

/**
 * Whether a reply's text (from its `{`) may be a call, where a call and the reply's JSON both begin with `{` (JSON
 * output beside `auto` tools, in the bare-JSON form of Llama 3's templates): the engine follows both readings, and
 * where the call's grammar refuses a byte the JSON's goes on, to an object that may still name a tool. Only text
 * the grammar takes is a call: checked at every piece the filter reads, so a call read was taken whole.
 */
export function bareCallTest(grammar: CallGrammar): (text: string) => boolean {
  const g = compileCallGrammar(grammar);
  const utf8 = new TextEncoder();
  return (text) => {
    const bytes = utf8.encode(text);
    // An object from its first byte (the filter's call text begins at it; an array is no bare call).
    return bytes[0] === 0x7b && feedCallBytes(g, initialCallState(g), bytes, 0, bytes.length) !== null;
  };
}

/**
 * Why the calls of an `auto` request with JSON output cannot be held to a grammar (autoGrammar gave none), which
 * such a reply needs to tell a call from the JSON.
 */
function unheldBesideJson(tools: readonly ToolDefinition[], format: ToolCallFormat): KvdeskError {
  let why = "kvdesk cannot hold a call to these tools' schemas";
  let field = 'tools';
  const free = tools.findIndex((t) => freeFormArguments(t, format));
  if (format.xml === 'glm') {
    why = "this model writes calls as GLM's XML tags, which kvdesk reads but cannot hold to a grammar";
  } else if (free >= 0) {
    why = `tools[${free}].parameters ("${(tools[free] as ToolDefinition).name}") takes keys it does not list (additionalProperties beside properties${format.xml ? ', or no properties in this XML call form' : ''}), which kvdesk cannot hold a call to`;
    field = `tools[${free}].parameters`;
  } else {
    // The tool whose schema the grammar could not take, and where (a recursive $ref, say).
    for (const [i, t] of tools.entries()) {
      try {
        compileSchema(loosened(argumentsSchema(t)));
      } catch (err) {
        if (!(err instanceof SchemaError)) throw err;
        const inner = err.path.slice('schema'.length);
        why = `kvdesk cannot hold a call to tools[${i}].parameters${inner} ("${t.name}"): ${err.message.slice(err.path.length + 2)}`;
        field = `tools[${i}].parameters${inner}`;
        break;
      }
    }
  }
  return bad(
    `tools beside JSON output (responseFormat / jsonSchema): a reply that may be either needs its calls held to a grammar, and ${why}. Send toolChoice (tool_choice) "none" for the JSON alone, or the tools without JSON output.`,
    field,
  );
}

/**
 * The plan for a request's tools, or undefined when it has none. Throws BAD_REQUEST naming the field for
 * tools that cannot be honoured: no chat messages, JSON output beside calls kvdesk cannot tell from the JSON,
 * repeated names, a choice of a
 * tool not listed, or (when the reply must be a call) a parameters schema kvdesk cannot enforce.
 */
export function planTools(
  req: GenerateRequest,
  template: string | undefined,
  tok: Pick<TextTokenizer, 'tokenToId' | 'isSpecial'>,
  /** `harmony`: the model writes gpt-oss's channels (its calls are messages of their own). */
  opts: { harmony?: boolean } = {},
): ToolPlan | undefined {
  checkHistory(req.messages);
  const tools = req.tools;
  if (!tools) {
    if (req.toolChoice !== undefined && req.toolChoice !== 'none' && req.toolChoice !== 'auto') {
      const what = req.toolChoice === 'required' ? 'asks for a tool call' : `names "${req.toolChoice.name}"`;
      throw bad(`toolChoice (tool_choice) ${what}, but the request lists no tools: send them in tools.`, 'toolChoice');
    }
    return undefined;
  }
  if (!req.messages && !req.chat) {
    throw bad(
      'tools need a chat request: send the conversation as messages (or the prompt with chat / --chat).',
      'tools',
    );
  }
  // JSON output beside tools: with toolChoice "none" the tools are neither shown nor called and the reply is JSON, as
  // asked; with "auto" the reply is calls or the JSON (an agent with an output type calls tools, then answers in
  // it: below). A required or named call is the whole reply: written to the call's schema, the JSON output is for
  // the replies after it (an Agents SDK agent with toolChoice "required" sends both on its first turn, as OpenAI
  // serves it).
  const jsonOutput = req.responseFormat === 'json' || req.jsonSchema !== undefined;
  const choice = req.toolChoice ?? 'auto';
  if (jsonOutput && choice === 'auto' && opts.harmony) {
    throw bad(
      'This model (gpt-oss) writes JSON output in its final message, where it cannot call a tool: send tools or JSON output (responseFormat / jsonSchema), or toolChoice (tool_choice) "none" for the JSON alone.',
      'tools',
    );
  }
  const names = new Set<string>();
  for (const [i, t] of tools.entries()) {
    // Shown to the model as JSON text: one nested thousands deep overflows the stack of JSON.stringify itself.
    const depth = nesting(t.parameters);
    if (depth > MAX_TOOL_NESTING) {
      throw bad(
        `tools[${i}].parameters ("${t.name}") nests ${depth} levels deep; kvdesk takes at most ${MAX_TOOL_NESTING}: flatten the schema.`,
        `tools[${i}].parameters`,
      );
    }
    if (names.has(t.name))
      throw bad(`tools[${i}]: the name "${t.name}" is listed twice; tool names must differ.`, `tools[${i}].name`);
    names.add(t.name);
    // A call's arguments are an object: a tool whose parameters describe anything else could never be called.
    if (argumentsSchema(t).type !== 'object') {
      throw bad(
        `tools[${i}].parameters ("${t.name}") must describe an object ({"type": "object", "properties": {…}}): a call's arguments are one.`,
        `tools[${i}].parameters.type`,
      );
    }
  }
  if (typeof choice === 'object' && !names.has(choice.name)) {
    throw bad(
      `toolChoice (tool_choice) names "${choice.name}", which is not among the tools (${[...names].join(', ')}).`,
      'toolChoice',
    );
  }
  const native = nativeTemplate(template);
  const format = toolCallFormat(template, native);
  const keepIds = new Set<number>();
  // (Mistral's [ARGS], between a call's name and its arguments, is a special token in its tokenizers.)
  const markers = [format.open, format.close, format.argsMarker ?? '', ...(format.xml === 'glm' ? GLM_MARKERS : [])];
  for (const marker of markers) {
    const id = marker === '' ? undefined : tok.tokenToId(marker);
    if (id !== undefined && tok.isSpecial(id)) keepIds.add(id);
  }
  const plan: ToolPlan = {
    native,
    format,
    reads: choice !== 'none',
    forced: choice === 'required' || typeof choice === 'object',
    suffix: '',
    names,
    parallel: req.parallelToolCalls ?? true,
    keepIds,
    // Read by the XML forms only (their values are plain text, typed by these).
    paramSchemas: new Map(format.xml ? tools.map((t) => [t.name, parameterSchemas(t)]) : []),
  };
  if (choice !== 'none') plan.shown = tools;
  if (!plan.forced) {
    const grammar = choice === 'auto' ? autoGrammar(tools, format, plan.parallel) : undefined;
    if (grammar) plan.grammar = grammar;
    // Calls or the JSON: a call is told from the JSON by its grammar, which the engine then holds it to.
    else if (jsonOutput && choice === 'auto') throw unheldBesideJson(tools, format);
    return plan;
  }

  if (format.xml) {
    throw bad(
      'This model writes calls as XML tags with plain-text values: kvdesk reads them, but cannot make the model write one (tool_choice required or a named tool); let the model choose (toolChoice (tool_choice) "auto").',
      'toolChoice',
    );
  }
  const callable = typeof choice === 'object' ? tools.filter((t) => t.name === choice.name) : tools;
  if (format.argsMarker) {
    // The name is plain text before the marker: kvdesk writes it itself, so the call must be to one tool.
    const only = callable.length === 1 ? (callable[0] as ToolDefinition) : undefined;
    if (!only) {
      throw bad(
        `This model writes a call's name as plain text (${format.open}name${format.argsMarker}), which kvdesk cannot choose among ${callable.length} tools: name the tool in toolChoice (tool_choice).`,
        'toolChoice',
      );
    }
    plan.schema = checkedSchema(argumentsSchema(only), tools.indexOf(only), only.name, '');
    plan.forcedName = only.name;
    plan.suffix = format.open + only.name + format.argsMarker;
    return plan;
  }
  const alternatives = callable.map((t) =>
    checkedSchema(
      callSchema(t, format.argsKey, tools.indexOf(t)),
      tools.indexOf(t),
      t.name,
      `schema.properties.${format.argsKey}`,
    ),
  );
  plan.schema = alternatives.length === 1 ? (alternatives[0] as Record<string, unknown>) : { anyOf: alternatives };
  try {
    compileSchema(plan.schema);
  } catch (err) {
    if (!(err instanceof SchemaError)) throw err;
    throw bad(`tools: kvdesk cannot make a call choose among these tools: ${err.message}`, 'tools');
  }
  plan.suffix = format.open + format.lead;
  return plan;
}
