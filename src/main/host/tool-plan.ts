/**
 * What a request's `tools` mean for its prompt and its replies: which tools the template shows, the form the
 * model writes calls in, and — for `toolChoice: 'required'` or a named tool — the opening appended to the
 * prompt and the schema the reply is written to (structured output over `{"name", "arguments"}`).
 */
import type { GenerateRequest, ToolDefinition } from '../../shared/contract';
import { KvdeskError } from '../../shared/errors';
import { compileSchema, SchemaError } from '../engine/json-schema';
import { templateReadsTools } from '../tokenizer/chat-template';
import type { TextTokenizer } from '../tokenizer/text-tokenizer';
import { type ToolCallFormat, toolCallFormat } from '../tokenizer/tool-calls';

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
  schema?: Record<string, unknown>;
  names: ReadonlySet<string>;
  /** False: a reply ends after its first call. */
  parallel: boolean;
  /** The format's markers that are special tokens: kept in the text the filter reads. */
  keepIds: ReadonlySet<number>;
}

const readsTools = new Map<string, boolean>();

/** Whether a template reads `tools` (parsed once per template). */
function nativeTemplate(template: string | undefined): boolean {
  if (template === undefined || template.trim() === '') return false;
  let known = readsTools.get(template);
  if (known === undefined) {
    known = templateReadsTools(template);
    if (readsTools.size > 64) readsTools.clear();
    readsTools.set(template, known);
  }
  return known;
}

function bad(message: string, field: string): KvdeskError {
  return new KvdeskError('BAD_REQUEST', message, { field });
}

/** A tool's arguments schema as kvdesk writes it: no parameters is an empty object. */
function argumentsSchema(tool: ToolDefinition): Record<string, unknown> {
  const p = tool.parameters;
  if (p === undefined || Object.keys(p).length === 0) return { type: 'object', properties: {} };
  // OpenAI's examples often leave out the root's type; properties say it is an object.
  if (p.type === undefined && p.properties !== undefined) return { type: 'object', ...p };
  return p;
}

/** The reply of a forced call to `tool`: `{"name": <its name>, <argsKey>: <its arguments>}`. */
function callSchema(tool: ToolDefinition, argsKey: string): Record<string, unknown> {
  return {
    type: 'object',
    properties: { name: { const: tool.name }, [argsKey]: argumentsSchema(tool) },
    required: ['name', argsKey],
  };
}

/**
 * The plan for a request's tools, or undefined when it has none. Throws BAD_REQUEST naming the field for
 * tools that cannot be honoured: no chat messages, JSON output beside them, repeated names, a choice of a
 * tool not listed, or (when the reply must be a call) a parameters schema kvdesk cannot enforce.
 */
export function planTools(
  req: GenerateRequest,
  template: string | undefined,
  tok: Pick<TextTokenizer, 'tokenToId' | 'isSpecial'>,
): ToolPlan | undefined {
  const tools = req.tools;
  if (!tools) {
    if (req.toolChoice !== undefined && req.toolChoice !== 'none' && req.toolChoice !== 'auto') {
      throw bad(
        'toolChoice (tool_choice) names a tool, but the request lists no tools: send them in tools.',
        'toolChoice',
      );
    }
    return undefined;
  }
  if (!req.messages && !req.chat) {
    throw bad('tools need a chat request: send the conversation as messages.', 'tools');
  }
  if (req.responseFormat === 'json' || req.jsonSchema !== undefined) {
    throw bad(
      'tools cannot be combined with JSON output (responseFormat / jsonSchema) in kvdesk: send one of them.',
      'tools',
    );
  }
  const names = new Set<string>();
  for (const [i, t] of tools.entries()) {
    if (names.has(t.name))
      throw bad(`tools[${i}]: the name "${t.name}" is listed twice; tool names must differ.`, `tools[${i}].name`);
    names.add(t.name);
  }
  const choice = req.toolChoice ?? 'auto';
  if (typeof choice === 'object' && !names.has(choice.name)) {
    throw bad(
      `toolChoice (tool_choice) names "${choice.name}", which is not among the tools (${[...names].join(', ')}).`,
      'toolChoice',
    );
  }
  const native = nativeTemplate(template);
  const format = toolCallFormat(template, native);
  const keepIds = new Set<number>();
  for (const marker of [format.open, format.close]) {
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
  };
  if (choice !== 'none') plan.shown = tools;
  if (!plan.forced) return plan;

  const callable = typeof choice === 'object' ? tools.filter((t) => t.name === choice.name) : tools;
  const alternatives = callable.map((t) => {
    const schema = callSchema(t, format.argsKey);
    try {
      compileSchema(schema);
    } catch (err) {
      if (!(err instanceof SchemaError)) throw err;
      const i = tools.indexOf(t);
      const inner = err.path.replace(/^schema\.properties\.[a-z]+/, '');
      throw new KvdeskError(
        'BAD_REQUEST',
        `tools[${i}].parameters${inner} ("${t.name}"): kvdesk cannot make a call follow this schema: ${err.message.slice(err.path.length + 2)}. Simplify the schema, or let the model choose (toolChoice / tool_choice "auto"), where the schema is only shown to it.`,
        { field: `tools[${i}].parameters${inner}` },
      );
    }
    return schema;
  });
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
