/**
 * `kvdesk chat`: a conversation with a model in the terminal, as `ollama run` has one. Each line is a turn
 * (a block between lines of `"""` is one turn of several lines); replies stream as they are written. The
 * conversation keeps its KV between turns (a session), and a conversation longer than the model's context goes on
 * without its oldest turns, as the window's chats do. Commands start with a slash (/? lists them). Ctrl+C stops
 * a reply (what it wrote so far stays in the conversation), or drops the line being typed; Ctrl+D or /bye ends the
 * chat.
 *
 * With a terminal, it prompts (`>>> `; on stderr when stdout goes to a file, which gets the replies alone); with
 * stdin from a pipe or a file, it reads every line as a turn, prints only the replies, and ends at the end of its
 * input. A thinking model's reasoning goes to stderr, between
 * "Thinking..." and "...done thinking." (as Ollama shows it), so stdout holds the replies alone.
 */
import { randomUUID } from 'node:crypto';
import { createInterface, emitKeypressEvents, type Interface } from 'node:readline';
import { PassThrough } from 'node:stream';
import type { HostSettings, ModelInfo, RunnerService } from '../main/host/runner-service';
import { mapOptions } from '../main/server/ollama-adapter';
import {
  type ChatMessage,
  type GenerateRequest,
  type GenerationResult,
  MAX_NEW_TOKENS,
  type SamplingSettings,
} from '../shared/contract';
import { type ErrorInfo, toErrorInfo } from '../shared/errors';
import { formatBytes } from '../shared/format';
import { reasoningWhere } from '../shared/reasoning';
import { CHAT_OPTIONS } from './chat-options';
import {
  badArgs,
  budgetCapLine,
  contextClipLine,
  effortFlag,
  exitCodeFor,
  fail,
  type Io,
  lookupFlag,
  lookupLine,
  nearestFlags,
  parseFlags,
  parseNumber,
  prefillChunkFlag,
  printBudgetNotes,
  printWarnings,
  ReplyPrinter,
  SIGNAL_EXITS,
  samplingFlags,
  threadsFlag,
} from './common';
import { applyDeviceFlags } from './device-flags';
import { checkFlags, loadFlags, packageDir } from './package-args';
import { textStream } from './text-input';

const HELP = `Commands:
  /set system TEXT        the system prompt (the conversation goes on with it)
  /set parameter NAME V   temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, frequency_penalty,
                          presence_penalty, seed, num_predict
  /set verbose | quiet    show (or not) each reply's figures: tokens, speed, prompt and reused tokens, KV
  /set think | nothink    a thinking model reasons before it replies, or replies at once
  /show info | system | parameters
  /clear                  forget the conversation (and its KV)
  /bye                    end the chat (also Ctrl+D)
  """                     starts and ends a message of several lines
Ctrl+C stops a reply (what it wrote stays in the conversation), or drops the line being typed.
`;

/** A chat's exit code after SIGINT ended it: 128 + the signal's number; the process ends by SIGINT (main.ts). */
const SIGINT_EXIT = SIGNAL_EXITS.SIGINT as number;

/**
 * Ollama's parameter names for /set parameter, and where each goes. Values are read as Ollama's API reads them
 * (its ranges; -1 for seed and num_predict: none, i.e. random and up to the context), by the Ollama adapter.
 */
const PARAMETERS: Record<string, keyof SamplingSettings | 'maxNewTokens'> = {
  temperature: 'temperature',
  top_k: 'topK',
  top_p: 'topP',
  min_p: 'minP',
  repeat_penalty: 'repetitionPenalty',
  repeat_last_n: 'repetitionWindow',
  frequency_penalty: 'frequencyPenalty',
  presence_penalty: 'presencePenalty',
  seed: 'seed',
  num_predict: 'maxNewTokens',
};

/** Other tools' names for those parameters (kvdesk's flags, OpenAI's and llama.cpp's), too far apart for a typo. */
const PARAMETER_ALIASES: Readonly<Record<string, string>> = {
  temp: 'temperature',
  max_tokens: 'num_predict',
  max_new_tokens: 'num_predict',
  n_predict: 'num_predict',
  repetition_penalty: 'repeat_penalty',
  repetition_window: 'repeat_last_n',
};

export interface ChatOptions {
  system?: string;
  maxNewTokens?: number;
  sampling: SamplingSettings;
  verbose: boolean;
  contextOverflow: 'drop-oldest' | 'refuse';
  /** A thinking model reasons (true) or replies at once (false); absent: as the model does. */
  thinking?: boolean;
  /** A thinking model's reasoning is closed for it after this many tokens. */
  thinkingBudget?: number;
  reasoningEffort?: GenerateRequest['reasoningEffort'];
}

/**
 * The conversation and its commands, without the terminal: `line` takes what the person typed (a whole turn),
 * `stop` stops the reply being written. Replies go to `io.out`, notes and figures to `io.err`.
 */
export class ChatSession {
  private messages: ChatMessage[] = [];
  /** Messages the last reply did not see (the conversation outgrew the context). */
  private dropped = 0;
  private sessionId = `cli-chat-${randomUUID()}`;
  private current: { cancel: () => void } | null = null;
  ended = false;
  /** A chat ended by SIGINT (a piped chat's Ctrl+C, a `kill -INT` between turns): it ends by SIGINT (130). */
  interrupted = false;
  /**
   * The first turn that failed (not one stopped), or the first command not understood: a piped chat exits with its
   * code, so a script learns that a line did not do what it meant.
   */
  failed: ErrorInfo | null = null;

  constructor(
    private readonly host: RunnerService,
    private readonly model: ModelInfo,
    private readonly options: ChatOptions,
    private readonly io: Io,
  ) {}

  /** Stops the reply being written; false when there is none. */
  stop(): boolean {
    if (!this.current) return false;
    this.current.cancel();
    return true;
  }

  /** A typed turn: a command (a line starting with /), or a message (`literal`: a block, never a command). */
  async line(text: string, literal = false): Promise<void> {
    const trimmed = text.trim();
    if (trimmed === '') return;
    if (!literal && trimmed.startsWith('/')) return this.command(trimmed);
    await this.turn(text);
  }

  private async turn(text: string): Promise<void> {
    const messages: ChatMessage[] = [...this.messages, { role: 'user', content: text }];
    const request: GenerateRequest = {
      model: this.model.id,
      messages,
      sessionId: this.sessionId,
      ...(this.options.system ? { system: this.options.system } : {}),
      ...(this.options.maxNewTokens !== undefined ? { maxNewTokens: this.options.maxNewTokens } : {}),
      ...(Object.keys(this.options.sampling).length > 0 ? { sampling: this.options.sampling } : {}),
      ...(this.options.thinking !== undefined ? { thinking: this.options.thinking } : {}),
      ...(this.options.thinkingBudget !== undefined && this.model.spec.reasoning && this.options.thinking !== false
        ? { thinkingBudget: this.options.thinkingBudget }
        : {}),
      // Also for a model without reasoning markers kvdesk knows (gpt-oss's template reads it).
      ...(this.options.reasoningEffort !== undefined && this.options.thinking !== false
        ? { reasoningEffort: this.options.reasoningEffort }
        : {}),
      ...(this.options.contextOverflow === 'drop-oldest'
        ? { contextOverflow: 'drop-oldest' as const, droppedMessages: this.dropped }
        : {}),
    };
    let accepted: GenerationResult['contextDrop'] | null = null;
    const printer = new ReplyPrinter(this.io);
    const handle = this.host.generate(request, (frame) => {
      if (frame.type === 'accepted') accepted = frame.contextDrop ?? undefined;
      if (frame.type === 'tokens') printer.push(frame.rows[0]);
    });
    this.current = handle;
    try {
      const result = await handle.result;
      printer.end();
      this.io.out('\n');
      this.messages = [
        ...messages,
        { role: 'assistant', content: result.text, ...(result.reasoning ? { reasoning: result.reasoning } : {}) },
      ];
      this.noteDrop(result.contextDrop);
      // A reply the budget or the context cut short says so (the scheduler never cuts one silently).
      // num_predict -1 asked for as many as the context leaves: that it did is no news.
      if (result.clipped && result.clipped.requestedMaxTokens !== MAX_NEW_TOKENS)
        this.io.err(contextClipLine(result.clipped));
      if (result.budgetCap) {
        this.io.err(budgetCapLine(result.budgetCap, 'raise --kv-budget, or /clear to start a shorter conversation'));
      }
      // A reply the default limit (the package's, or the host's: 256 tokens, 2 048 when it reasons) stopped says so
      // too: else it just ends mid-sentence, and only --verbose's "finish length" tells why. A limit the person set
      // is no news.
      if (
        result.finishReason === 'length' &&
        this.options.maxNewTokens === undefined &&
        !result.clipped &&
        !result.budgetCap
      ) {
        this.io.err(
          `kvdesk: the reply stopped at its limit of ${result.tokenIds.length} tokens: /set parameter num_predict N ` +
            'for longer ones (-1: as many as the context leaves), or start the chat with --max-new-tokens N\n',
        );
      }
      if (this.options.verbose) this.io.err(figures(result));
    } catch (err) {
      const info = toErrorInfo(err);
      printer.end();
      const written = printer.text;
      if (info.code === 'CANCELLED') {
        // Stopped by the person: what was written stays, its reasoning too, as in the window. A reply stopped
        // before it began takes its question with it, as a failed turn does and as the window leaves such an
        // exchange out once the chat goes on: kept, the next turn would put two user messages in a row, which the
        // templates of Gemma, Mistral or Llama 2 refuse (and with them every later turn). The drop it was read
        // with, if the host read it, still holds.
        this.io.out('\n');
        const reasoning = printer.reasoning ? { reasoning: printer.reasoning } : {};
        if (written || printer.reasoning) {
          this.messages = [...messages, { role: 'assistant', content: written, ...reasoning }];
        } else if (!this.ended) {
          this.io.err('kvdesk: stopped before the reply began: that message was not added to the conversation.\n');
        }
        if (accepted !== null) this.noteDrop(accepted);
      } else {
        if (written) this.io.out('\n');
        this.io.err(`kvdesk: ${info.message}\n`);
        this.failed ??= info;
        if (info.code === 'CONTEXT_OVERFLOW' || info.code === 'KV_BUDGET_EXCEEDED') {
          this.io.err('kvdesk: that message was not added to the conversation; send a shorter one, or /clear.\n');
        }
      }
    } finally {
      this.current = null;
    }
  }

  private noteDrop(drop: GenerationResult['contextDrop']): void {
    const now = drop?.messages ?? 0;
    if (now > this.dropped && drop) {
      this.io.err(
        `kvdesk: the conversation outgrew the model's ${drop.contextLength}-token context: ` +
          `the model no longer sees its first ${now} messages\n`,
      );
    }
    this.dropped = now;
  }

  private async command(text: string): Promise<void> {
    const [name, ...rest] = text.split(/\s+/);
    const arg = text.slice((name ?? '').length).trim();
    switch (name) {
      case '/bye':
      case '/exit':
        this.ended = true;
        return;
      case '/?':
      case '/help':
        this.io.err(HELP);
        return;
      case '/clear':
        this.messages = [];
        this.dropped = 0;
        this.host.closeSession(this.sessionId);
        this.sessionId = `cli-chat-${randomUUID()}`;
        this.io.err('kvdesk: the conversation was cleared\n');
        return;
      case '/set':
        return this.set(rest[0], text.slice(text.indexOf(rest[0] ?? '') + (rest[0] ?? '').length).trim());
      case '/show':
        return this.show(arg);
      default:
        this.refuse(
          `unknown command "${name}"; type /? for the commands, or put a message that starts with / between """ lines`,
        );
    }
  }

  /** A command not understood (or not possible): said, and a piped chat exits 2 at its end. */
  private refuse(message: string): void {
    this.io.err(`kvdesk: ${message}\n`);
    this.failed ??= { code: 'BAD_REQUEST', message };
  }

  private set(what: string | undefined, value: string): void {
    switch (what) {
      case 'system':
        this.options.system = value || undefined;
        this.io.err(value ? 'kvdesk: system prompt set\n' : 'kvdesk: system prompt cleared\n');
        return;
      case 'verbose':
      case 'quiet':
        this.options.verbose = what === 'verbose';
        return;
      case 'think':
      case 'nothink': {
        const reasoning = this.model.spec.reasoning;
        if (!reasoning) {
          this.refuse(`${this.model.id} does not think: there is nothing to turn ${what === 'think' ? 'on' : 'off'}`);
          return;
        }
        this.options.thinking = what === 'think';
        this.io.err(`kvdesk: thinking ${what === 'think' ? 'on' : 'off'}\n`);
        return;
      }
      case 'parameter': {
        const [name, raw] = value.split(/\s+/);
        const key = name && Object.hasOwn(PARAMETERS, name) ? PARAMETERS[name] : undefined;
        if (name && !key) {
          // Ollama's name for kvdesk's flag, or the name a typo away.
          const known = Object.hasOwn(PARAMETER_ALIASES, name) ? PARAMETER_ALIASES[name] : undefined;
          const near = known !== undefined ? [known] : nearestFlags(name, Object.keys(PARAMETERS));
          const hint = near.length > 0 ? `: did you mean ${near.join(' or ')}?` : '';
          this.io.err(`kvdesk: unknown parameter ${name}${hint}\n`);
        }
        if (!name || !key || raw === undefined) {
          this.refuse(`/set parameter NAME VALUE, NAME one of ${Object.keys(PARAMETERS).join(', ')}`);
          return;
        }
        const n = Number(raw);
        let mapped: ReturnType<typeof mapOptions>;
        try {
          if (raw.trim() === '' || !Number.isFinite(n)) throw new Error(`${name} expects a number, got "${raw}"`);
          mapped = mapOptions({ options: { [name]: n } });
        } catch (err) {
          // Nothing is set: the next turns keep what they had.
          this.refuse((err as Error).message.replace(/"options\.(\w+)"/g, '$1'));
          return;
        }
        const v = key === 'maxNewTokens' ? mapped.maxNewTokens : mapped.sampling[key];
        if (key === 'maxNewTokens') {
          if (v === undefined) delete this.options.maxNewTokens;
          else this.options.maxNewTokens = v as number;
        } else {
          const sampling: SamplingSettings = { ...this.options.sampling };
          if (v === undefined) delete sampling[key];
          else (sampling as Record<string, unknown>)[key] = v;
          // A temperature means sampling again, as Ollama: --greedy no longer applies.
          if (key === 'temperature' && n > 0) delete sampling.greedy;
          // repeat_last_n 0 turns the penalty off (Ollama's reading): no window, a penalty of 1.
          if (key === 'repetitionWindow' && n === 0) {
            delete sampling.repetitionWindow;
            sampling.repetitionPenalty = 1;
          }
          this.options.sampling = sampling;
        }
        // The value as kept, as /show parameters shows it (top_k -1 is 0, off).
        const kept = this.shownParameter(key);
        const said =
          key === 'repetitionWindow' && n === 0
            ? '0: the repetition penalty is off'
            : kept === undefined
              ? 'its default'
              : `${kept}${kept === '0' && key === 'topK' ? ' (off)' : kept === '0' && key === 'topP' ? ' (the likeliest token alone)' : ''}`;
        this.io.err(`kvdesk: set ${name} to ${said}\n`);
        return;
      }
      default:
        this.refuse(
          '/set system TEXT, /set parameter NAME VALUE, /set verbose, /set quiet, /set think or /set nothink',
        );
    }
  }

  private show(what: string): void {
    const spec = this.model.spec;
    switch (what) {
      case 'info':
        this.io.err(
          `  model     ${this.model.id} (${spec.layout}, ${spec.numLayers} layers) from ${spec.root}\n` +
            `  context   ${spec.contextLength} tokens\n` +
            `  KV        ${spec.bpt} bytes a token: ${formatBytes(spec.bpt * spec.contextLength)} for a full context\n` +
            `  weights   ${formatBytes(spec.weightsBytes)}\n` +
            `  thinking  ${thinkingInfo(spec.reasoning, this.options.thinking)}\n` +
            `  chat      ${this.messages.length} messages${this.dropped ? `, the first ${this.dropped} out of view` : ''}\n`,
        );
        return;
      case 'system':
        this.io.err(this.options.system ? `${this.options.system}\n` : 'kvdesk: no system prompt\n');
        return;
      case 'parameters': {
        const s = this.options.sampling;
        const lines = Object.entries(PARAMETERS).flatMap(([name, key]) => {
          const shown = this.shownParameter(key);
          return shown === undefined ? [] : [`  ${name.padEnd(15)} ${shown}`];
        });
        if (s.greedy) lines.push('  greedy          true');
        this.io.err(lines.length ? `${lines.join('\n')}\n` : "kvdesk: the package's defaults\n");
        return;
      }
      default:
        this.refuse('/show info, /show system or /show parameters');
    }
  }

  /** A parameter's value as /show parameters writes it (Ollama's way: a window of every token is -1), if set. */
  private shownParameter(key: (typeof PARAMETERS)[string]): string | undefined {
    const v = key === 'maxNewTokens' ? this.options.maxNewTokens : this.options.sampling[key];
    if (v === undefined) return undefined;
    // As many as the context leaves (num_predict -1) is Ollama's -1 too.
    if (key === 'maxNewTokens' && v === MAX_NEW_TOKENS) return '-1';
    return String(key === 'repetitionWindow' && v === 0 ? -1 : v);
  }
}

/** What /show info says of thinking: whether the model thinks, in which markers, and whether it is switched. */
function thinkingInfo(reasoning: ModelInfo['spec']['reasoning'], thinking: boolean | undefined): string {
  if (!reasoning) return 'no (the model does not reason)';
  const markers = reasoningWhere(reasoning);
  // Without the template's switch, off is a reasoning closed in the prompt before it begins.
  const how = reasoning.toggle
    ? `its template's ${reasoning.toggle}`
    : 'closed in the prompt: the template has no switch';
  return `${thinking === false ? `off (${how})` : 'on'}, in ${markers} (/set think, /set nothink)`;
}

/** A reply's figures (/set verbose). */
function figures(r: GenerationResult): string {
  return (
    `kvdesk: ${r.tokenIds.length} tokens, finish ${r.finishReason}, ttft ${Math.round(r.timings.ttftMs)} ms, ` +
    `${Math.round(r.timings.tokensPerSecond * 10) / 10} tok/s${lookupLine(r)}, prompt ${r.promptTokens} tokens ` +
    `(${r.reusedTokens} reused), KV ${formatBytes(r.kvBytes)}\n`
  );
}

/** A turn as typed: its text, and whether it came as a `"""` block (always a message, never a command). */
export interface Turn {
  text: string;
  block: boolean;
}

/**
 * Turns typed lines into turns: a line is a turn, except between lines that start and end with `"""`
 * (Ollama's multi-line input).
 */
export class TurnReader {
  private block: string[] | null = null;

  /** The turn a line completes, or null while a block is open. */
  read(line: string): Turn | null {
    if (this.block === null) {
      if (!line.trimStart().startsWith('"""')) return { text: line, block: false };
      const first = line.trimStart().slice(3);
      if (first.trimEnd().endsWith('"""') && first.trim().length > 0) {
        return { text: first.trimEnd().slice(0, -3), block: true };
      }
      this.block = first ? [first] : [];
      return null;
    }
    if (line.trimEnd().endsWith('"""')) {
      const last = line.trimEnd().slice(0, -3);
      if (last.length > 0) this.block.push(last);
      const text = this.block.join('\n');
      this.block = null;
      return { text, block: true };
    }
    this.block.push(line);
    return null;
  }

  /** Whether a block is open. */
  get open(): boolean {
    return this.block !== null;
  }

  /** The open block as a turn (the input ended inside it), and the reader empty again. */
  flush(): Turn | null {
    const text = this.block?.join('\n') ?? null;
    this.block = null;
    return text === null || text.trim() === '' ? null : { text, block: true };
  }

  /** Forgets an open block (Ctrl+C at its `... ` prompt). */
  reset(): void {
    this.block = null;
  }
}

export { CHAT_OPTIONS };

/** What chat reads its turns from: stdin, a terminal or not. */
type ChatInput = NodeJS.ReadableStream & { isTTY?: boolean; setRawMode?: (mode: boolean) => unknown };

/** `kvdesk chat`: loads the package and runs the conversation on stdin until /bye or the end of the input. */
export async function chat(
  args: string[],
  io: Io,
  newHost: (settings: {
    devices: Partial<HostSettings>;
    threads?: number;
    lookup?: number;
    prefillChunk?: number;
  }) => RunnerService,
  input: ChatInput = process.stdin,
): Promise<number> {
  let host: RunnerService | undefined;
  try {
    const { values, positionals } = parseFlags(args, CHAT_OPTIONS, 'chat');
    if (positionals.length > 1) {
      // A prompt after the model (as `ollama run M "…"`): chat takes its turns from the terminal or stdin.
      throw badArgs(
        `chat takes exactly one package path or library id, got ${positionals.length} arguments; for one reply to a prompt use \`kvdesk generate M --chat --prompt "…"\`, or pipe the turns in: \`echo "…" | kvdesk chat M\``,
      );
    }
    if (positionals.length !== 1) throw badArgs('chat takes exactly one package path or library id');
    const overflow = values['context-overflow'] ?? 'drop-oldest';
    if (overflow !== 'drop-oldest' && overflow !== 'refuse') {
      throw badArgs(`--context-overflow expects drop-oldest or refuse, got "${overflow}"`);
    }
    const chatOptions: ChatOptions = {
      ...(values.system !== undefined ? { system: values.system } : {}),
      sampling: samplingFlags(values),
      verbose: values.verbose === true,
      contextOverflow: overflow,
    };
    if (values.think && values.nothink) throw badArgs('give --think or --nothink, not both');
    if (values.think) chatOptions.thinking = true;
    if (values.nothink) chatOptions.thinking = false;
    const budget = parseNumber('thinking-budget', values['thinking-budget'], true);
    if (budget !== undefined && budget < 0) throw badArgs('--thinking-budget expects 0 or more tokens');
    if (budget !== undefined) chatOptions.thinkingBudget = budget;
    const effort = effortFlag(values.effort);
    if (effort !== undefined) chatOptions.reasoningEffort = effort;
    const maxNew = parseNumber('max-new-tokens', values['max-new-tokens'], true);
    if (maxNew !== undefined) chatOptions.maxNewTokens = maxNew;
    // Refused now (exit 2), not by every turn once the model loaded.
    checkFlags({
      messages: [{ role: 'user', content: '' }],
      sampling: chatOptions.sampling,
      ...(chatOptions.maxNewTokens !== undefined ? { maxNewTokens: chatOptions.maxNewTokens } : {}),
      ...(budget !== undefined ? { thinkingBudget: budget } : {}),
    });
    const threads = threadsFlag(values.threads);
    const prefillChunk = prefillChunkFlag(values['prefill-chunk']);
    const lookup = lookupFlag(values.lookup);
    const devices: Partial<HostSettings> = {};
    applyDeviceFlags(devices, values['kv-budget'], values['device-memory']);
    const dir = await packageDir(positionals[0] as string, values['data-dir']);
    host = newHost({
      devices,
      ...(prefillChunk !== undefined ? { prefillChunk } : {}),
      ...(threads !== undefined ? { threads } : {}),
      ...(lookup !== undefined ? { lookup } : {}),
    });
    const model = await host.loadModel(dir, await loadFlags(dir, values));
    printWarnings(io, model.spec.warnings);
    printBudgetNotes(io, host.snapshot());
    if (chatOptions.thinking === true && !model.spec.reasoning)
      throw badArgs(`--think: ${model.id} does not think (its chat template has no reasoning markers)`);
    const interactive = input.isTTY === true;
    io.err(
      `kvdesk: ${model.id} (${model.spec.layout}, context ${model.spec.contextLength} tokens) loaded in ` +
        `${Math.round(model.loadMs)} ms${interactive ? '. /? for help, Ctrl+D or /bye to end.' : ''}\n`,
    );
    const session = new ChatSession(host, model, chatOptions, io);
    // Nobody reads the replies any more (`| head`): the reply being written stops, and the chat ends.
    const onClosed = () => {
      session.ended = true;
      session.stop();
    };
    io.closed?.addEventListener('abort', onClosed, { once: true });
    await repl(session, input, interactive, io).finally(() => io.closed?.removeEventListener('abort', onClosed));
    // A script learns that it was interrupted (its later turns never ran), or that a turn failed or a command was
    // not understood (the person at a terminal saw it and went on).
    if (session.interrupted) return SIGINT_EXIT;
    return !interactive && session.failed ? exitCodeFor(session.failed.code) : 0;
  } catch (err) {
    return fail(io, false, toErrorInfo(err));
  } finally {
    await host?.close();
  }
}

/** Reads turns from `input` and hands them to the session one at a time (lines typed meanwhile wait). */
async function repl(session: ChatSession, input: ChatInput, interactive: boolean, io: Io): Promise<void> {
  if (interactive) return terminalRepl(session, input, io);
  // UTF-8 (its BOM dropped) or UTF-16 by its BOM; bytes that are neither end the chat saying where (text-input.ts).
  const text = textStream('stdin');
  const rl = createInterface({ input: input.pipe(text), terminal: false });
  const reader = new TurnReader();
  // Without a terminal, readline sees no Ctrl+C: the signal comes to the process, and the chat ends there, the
  // reply being written too (no person is there to go on with the next turn: the input's later turns are a script's,
  // as in `ollama run < file`), says so, and ends by the signal (as a shell reports a command it ended, and as
  // generate ends), so that a loop running it stops too.
  const onInterrupt = () => {
    if (session.ended) return;
    session.ended = true;
    session.interrupted = true;
    io.err(`${session.stop() ? '\n' : ''}kvdesk: interrupted: the chat ends; the rest of its input is not read\n`);
    rl.close();
  };
  process.on('SIGINT', onInterrupt);
  try {
    for await (const line of rl) {
      // (A line read before the interrupt closed the input is not a turn any more.)
      if (session.ended) break;
      const turn = reader.read(line);
      if (turn !== null) await session.line(turn.text, turn.block);
      if (session.ended) break;
    }
    // The input ended inside a block (a file without its closing """): it is still a message.
    const rest = session.ended ? null : reader.flush();
    if (rest) {
      io.err('kvdesk: the input ended inside a """ block; sending it as it is\n');
      await session.line(rest.text, true);
    }
  } finally {
    process.off('SIGINT', onInterrupt);
    rl.close();
    // As readline leaves an input it closes: not read on (stdin read on would keep kvdesk from ending).
    input.unpipe(text);
    input.pause();
  }
}

/** A key as readline's keypress events give it. */
interface Key {
  sequence?: string;
  name?: string;
  ctrl?: boolean;
  meta?: boolean;
  shift?: boolean;
}

/**
 * The chat at a terminal. kvdesk reads the keys itself (raw mode) and hands them to a readline for the line being
 * typed, a fresh one at each prompt, so that what is sent is what the screen shows: a line Ctrl+C dropped is gone,
 * not kept unseen in front of the next one. While a reply is written, keys are not echoed into it: they wait, and
 * show at the next prompt as if typed there (a shell's type-ahead), except Ctrl+C (stops the reply, and drops them
 * as a terminal drops its type-ahead), Ctrl+D (the chat ends after the reply) and Ctrl+Z.
 */
async function terminalRepl(session: ChatSession, input: ChatInput, io: Io): Promise<void> {
  // Prompts and the typed text go to the terminal: with stdout in a file (`> out.txt`, `| tee`) to stderr, so the
  // file gets the replies alone.
  const terminal = process.stdout.isTTY ? process.stdout : process.stderr;
  const raw = (on: boolean) => input.setRawMode?.(on);
  const reader = new TurnReader();
  // One history for the chat: each prompt's readline goes on with it (up, down).
  const history: string[] = [];
  /** The line being typed: null while a turn runs. */
  let line: Interface | null = null;
  /** What the wait for a line resolves with: the line, or null (Ctrl+D, or the chat ended). */
  let answer: ((text: string | null) => void) | null = null;
  /** Keys typed while a turn runs, for the next prompt. */
  let typedAhead: Array<[string | undefined, Key]> = [];
  let endAfterReply = false;

  const finish = (text: string | null) => {
    const done = line;
    line = null;
    done?.close();
    const resolve = answer;
    answer = null;
    resolve?.(text);
  };
  const toLine = (rl: Interface, s: string | undefined, key: Key) => {
    rl.write(s ?? null, key);
    // Half of a surrogate pair is drawn again once the character is whole, as readline does with its own keys.
    const c = key.sequence?.charCodeAt(0) ?? 0;
    if (c >= 0xd800 && c <= 0xdfff && line === rl) rl.prompt(true);
  };
  const open = () => {
    const rl = createInterface({
      // Fed by toLine alone: readline never reads the terminal itself.
      input: new PassThrough(),
      output: terminal,
      terminal: true,
      history,
      prompt: reader.open ? '... ' : '>>> ',
    });
    line = rl;
    rl.on('line', (text) => finish(text));
    // Ctrl+D on an empty line: readline closes itself. (finish and Ctrl+C close it too, once it is not the line.)
    rl.on('close', () => {
      if (line !== rl) return;
      terminal.write('\n');
      finish(null);
    });
    rl.on('SIGINT', () => {
      // Ctrl+C drops the line being typed, a block too, as a shell drops its line.
      const typed = rl.line.length > 0 || reader.open;
      rl.write(null, { ctrl: true, name: 'e' });
      line = null;
      rl.close();
      if (typed) terminal.write('\n');
      else io.err('\nUse Ctrl + d or /bye to exit.\n');
      reader.reset();
      open();
    });
    rl.on('SIGTSTP', suspend);
    rl.prompt();
    // What was typed while the last turn ran, as if typed now (an Enter in it sends its line).
    while (line === rl && typedAhead.length > 0) {
      const [s, key] = typedAhead.shift() as [string | undefined, Key];
      toLine(rl, s, key);
    }
  };
  const onKey = (s: string | undefined, key: Key | undefined) => {
    const k = key ?? { sequence: s };
    if (line) return toLine(line, s, k);
    // A turn runs.
    if (k.ctrl && k.name === 'c') {
      typedAhead = [];
      session.stop();
    } else if (k.ctrl && k.name === 'd') endAfterReply = true;
    else if (k.ctrl && k.name === 'z') suspend();
    else typedAhead.push([s, k]);
  };
  /**
   * Ctrl+Z: the terminal as it was, and the whole job stopped, as the terminal's own Ctrl+Z stops it: the `kvdesk`
   * wrapper too, which the shell waits for (stopped alone, the chat left the shell waiting and the terminal dead).
   * Where no shell could start the job again (an orphaned process group, as under `script` alone), the kernel drops
   * the signal and the chat goes on.
   */
  function suspend(): void {
    if (process.platform === 'win32') return;
    raw(false);
    process.kill(0, 'SIGTSTP');
    raw(true);
  }
  // Started again (fg): raw mode again (the shell had the terminal), and the line being typed drawn again.
  const onContinue = () => {
    raw(true);
    line?.prompt(true);
  };
  // A SIGINT from elsewhere (kill -INT): it stops the reply being written, or ends the chat between turns (130).
  const onSignal = () => {
    if (session.stop()) return;
    session.ended = true;
    session.interrupted = true;
    finish(null);
  };
  // The terminal is gone: the chat ends after the reply being written, as by Ctrl+D.
  const onEnd = () => {
    endAfterReply = true;
    finish(null);
  };
  emitKeypressEvents(input);
  input.on('keypress', onKey);
  input.on('end', onEnd);
  process.on('SIGCONT', onContinue);
  process.on('SIGINT', onSignal);
  raw(true);
  input.resume();
  try {
    while (!session.ended && !endAfterReply) {
      const text = await new Promise<string | null>((resolve) => {
        answer = resolve;
        open();
      });
      if (session.ended) break;
      if (text === null) {
        // Ctrl+D in a block ends the chat without it: half a message is not sent (a file's is, by repl).
        if (reader.open) io.err('kvdesk: the """ block was not sent: the chat ended before its closing """\n');
        break;
      }
      const turn = reader.read(text);
      if (turn !== null) await session.line(turn.text, turn.block);
    }
  } finally {
    finish(null);
    input.off('keypress', onKey);
    input.off('end', onEnd);
    process.off('SIGCONT', onContinue);
    process.off('SIGINT', onSignal);
    raw(false);
    input.pause();
  }
}
