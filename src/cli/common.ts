/**
 * What the CLI's commands share: output, errors and exit codes, number flags, sampling flags, flag parsing. It loads
 * no part of the model stack (zod, the package loader, the tokenizer, the template renderer), so that `kvdesk
 * --version`, `--help` and a flag's error start at once: what needs it is in package-args.ts.
 */
import os from 'node:os';
import path from 'node:path';
import { type ParseArgsConfig, parseArgs } from 'node:util';
// budget.ts itself: the scheduler's index brings its zod schemas (scheduler-types.ts) with it.
import { parseByteSize } from '../main/scheduler/budget';
import { resolveUserPath } from '../main/store/user-path';
import type { BudgetCap, ContextClip, GenerateRequest, GenerationResult, SamplingSettings } from '../shared/contract';
import { editDistance } from '../shared/edit-distance';
import { type ErrorInfo, KvdeskError } from '../shared/errors';
import type { DeviceBudgetSnapshot } from '../shared/scheduler-types';

/**
 * The exit code of a command whose stdout's reader went away (`kvdesk generate … | head`): 128 + SIGPIPE, what a
 * shell reports of `seq 1e9 | head`'s seq, so a script with `set -o pipefail` sees kvdesk as it sees coreutils.
 */
export const STDOUT_CLOSED_EXIT = 141;

/**
 * The exit codes of a command that a signal ended, having handled it first (a chat Ctrl+C interrupted, a server
 * shut down): 128 + the signal's number. The process then ends by that signal itself (main.ts), as the convention
 * asks, so that a shell running it in a loop (or xargs) stops too: a command that exits 130 says it handled the
 * Ctrl+C, and the loop goes on.
 */
export const SIGNAL_EXITS: Readonly<Partial<Record<NodeJS.Signals, number>>> = { SIGINT: 130, SIGTERM: 143 };

/** Maps an error code to the CLI's exit code. */
export function exitCodeFor(code: ErrorInfo['code']): number {
  switch (code) {
    case 'KV_BUDGET_EXCEEDED':
    case 'QUEUE_FULL':
      return 3;
    // The hub unreachable, or its answer or a download gone wrong: worth another try later, unlike a bug (1).
    case 'DOWNLOAD_FAILED':
      return 4;
    case 'BAD_REQUEST':
    case 'PACKAGE_INVALID':
    case 'MODEL_LOAD_FAILED':
    case 'MODEL_NOT_LOADED':
    case 'TOKEN_OUT_OF_VOCAB':
    case 'CONTEXT_OVERFLOW':
    case 'SESSION_INVALID':
      return 2;
    default:
      return 1;
  }
}

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  /**
   * Aborted when stdout's reader went away (`| head`): a command that streams stops its request, and `out`
   * writes nothing more. Absent: stdout never closes (tests, embedders).
   */
  closed?: AbortSignal;
}

export function fail(io: Io, json: boolean, info: ErrorInfo): number {
  // The request was cancelled because nobody reads the reply any more: nothing to say, to nobody.
  if (info.code === 'CANCELLED' && io.closed?.aborted) return STDOUT_CLOSED_EXIT;
  if (json)
    io.out(`${JSON.stringify({ error: { code: info.code, message: info.message, ...(info.detail ?? {}) } })}\n`);
  else io.err(`kvdesk: ${info.message}\n`);
  return exitCodeFor(info.code);
}

export function badArgs(message: string): KvdeskError {
  return new KvdeskError('BAD_REQUEST', `${message} (see kvdesk --help)`);
}

/**
 * A path a person gave (`what`: the argument or flag), absolute (resolveUserPath); an empty or blank one
 * (`"$MODEL"` with MODEL unset) is refused rather than read as the current folder.
 */
export function givenPath(what: string, value: string): string {
  if (value.trim() === '') throw badArgs(`${what} is empty: give a path (an empty one is not the current folder)`);
  return resolveUserPath(value);
}

/** A byte-size flag's value (undefined when absent); a bad one is refused naming the flag. */
export function byteSizeFlag(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  let bytes: number;
  try {
    bytes = parseByteSize(value);
  } catch (err) {
    throw new KvdeskError('BAD_REQUEST', `--${name}: ${(err as Error).message}`, { flag: name });
  }
  // `--kv-budget 0.5` is no byte (a size rounds down to whole bytes): a budget that admits nothing, a memory of
  // nothing, a limit every upload and body is over. Said, not taken as "0 B".
  if (bytes === 0) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `--${name}: "${value.trim()}" is 0 bytes${/^\s*0*(\.0*)?\s*[a-z]*\s*$/i.test(value) ? '' : ' (a size rounds down to whole bytes)'}; give 1 byte or more, e.g. 512MiB or 2GiB`,
      { flag: name },
    );
  }
  return bytes;
}

/** `--prefill-chunk N`: prompt tokens one prefill run computes at most (a whole number ≥ 1), checked. */
export function prefillChunkFlag(value: string | undefined): number | undefined {
  const n = parseNumber('prefill-chunk', value, true);
  if (n !== undefined && n < 1) throw badArgs(`--prefill-chunk expects a whole number ≥ 1, got "${value}"`);
  return n;
}

/**
 * The most `--threads` kvdesk takes: four per core this process may run on. More intra-op threads than cores only
 * make onnxruntime's threads wait for each other (3000 made a one-token reply take over a minute); four per core
 * leaves room for cores a container reports low, and nothing a machine could use is refused.
 */
export function maxThreads(): number {
  return 4 * Math.max(1, os.availableParallelism());
}

/** `--threads N`: onnxruntime's intra-op threads, a whole number from 1 to maxThreads(), checked before loading. */
export function threadsFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = parseNumber('threads', value, true) as number;
  const max = maxThreads();
  if (n < 1 || n > max) {
    throw badArgs(
      `--threads must be between 1 and ${max}, got ${value} (this machine runs ${os.availableParallelism()} threads at once; more only slow onnxruntime down)`,
    );
  }
  return n;
}

/**
 * A flag's value that is empty or blank (`--temperature "$T"` with T unset), refused naming the flag: Number reads
 * it as 0, a value nobody gave (--temperature 0 is greedy, --seed 0 a seed, --lookup 0 off).
 */
function refuseEmpty(name: string, value: string, what: string): void {
  if (value.trim() === '')
    throw badArgs(`--${name} expects ${what}, got an empty value: give one, or leave the flag out`);
}

export function parseNumber(name: string, value: string | undefined, integer = false): number | undefined {
  if (value === undefined) return undefined;
  refuseEmpty(name, value, integer ? 'an integer' : 'a number');
  const n = Number(value);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n))) {
    throw badArgs(`--${name} expects ${integer ? 'an integer' : 'a number'}, got "${value}"`);
  }
  return n;
}

export function parseIds(value: string): number[] {
  const parts = value.split(',').map((s) => s.trim());
  // Decimal digits only: Number() also reads 0x10, 1e2 and 1.0, which no tokenizer writes as an id.
  const bad = parts.find((p) => !/^\d+$/.test(p) || !Number.isSafeInteger(Number(p)));
  if (bad !== undefined) {
    const item = bad === '' ? 'an empty item' : `"${bad}"`;
    throw badArgs(
      `--prompt-ids expects comma-separated token ids (decimal whole numbers, 0 or more): ${item} in "${value}" is not one`,
    );
  }
  return parts.map(Number);
}

/** The sampling flags `generate` and `chat` take (parseArgs options). */
export const SAMPLING_OPTIONS = {
  greedy: { type: 'boolean' },
  temperature: { type: 'string' },
  'top-k': { type: 'string' },
  'top-p': { type: 'string' },
  'min-p': { type: 'string' },
  'repetition-penalty': { type: 'string' },
  'repetition-window': { type: 'string' },
  'frequency-penalty': { type: 'string' },
  'presence-penalty': { type: 'string' },
  seed: { type: 'string' },
} as const;

/** The sampling settings the flags of SAMPLING_OPTIONS give (absent flags: the package's defaults). */
export function samplingFlags(
  values: Partial<Record<keyof typeof SAMPLING_OPTIONS, string | boolean>>,
): SamplingSettings {
  const str = (k: keyof typeof SAMPLING_OPTIONS) => (typeof values[k] === 'string' ? (values[k] as string) : undefined);
  const sampling: SamplingSettings = {};
  const t = parseNumber('temperature', str('temperature'));
  if (t !== undefined) sampling.temperature = t;
  const k = parseNumber('top-k', str('top-k'), true);
  if (k !== undefined) sampling.topK = k;
  const p = parseNumber('top-p', str('top-p'));
  if (p !== undefined) sampling.topP = p;
  const mp = parseNumber('min-p', str('min-p'));
  if (mp !== undefined) sampling.minP = mp;
  const rp = parseNumber('repetition-penalty', str('repetition-penalty'));
  if (rp !== undefined) sampling.repetitionPenalty = rp;
  const rw = parseNumber('repetition-window', str('repetition-window'), true);
  if (rw !== undefined) sampling.repetitionWindow = rw;
  const fp = parseNumber('frequency-penalty', str('frequency-penalty'));
  if (fp !== undefined) sampling.frequencyPenalty = fp;
  const pp = parseNumber('presence-penalty', str('presence-penalty'));
  if (pp !== undefined) sampling.presencePenalty = pp;
  // -1 is a random seed, as no --seed (and as the APIs read seed -1, llama.cpp's and Ollama's).
  const seed = parseNumber('seed', str('seed'), true);
  if (seed !== undefined && seed !== -1) sampling.seed = seed;
  if (values.greedy === true && t !== undefined)
    throw badArgs('give --greedy or --temperature, not both (--greedy always takes the likeliest token)');
  if (values.greedy === true) sampling.greedy = true;
  return sampling;
}

/** The model that comes with kvdesk (made by npm install): serve and the window load it at start, as `default`. */
export const BUNDLED_MODEL_DIR = path.resolve(__dirname, '../..', 'resources/models/default');

/** What the library says about its file (one it cannot read, or moved aside) goes to stderr, as serve's log. */
export const libraryLog = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

/**
 * A reply streamed to the terminal: a thinking model's reasoning to stderr between "Thinking..." and
 * "...done thinking." (as Ollama shows it), the answer to stdout. Keeps what it printed of each.
 */
export class ReplyPrinter {
  reasoning = '';
  text = '';
  private thinking: 'no' | 'open' | 'done' = 'no';

  constructor(private readonly io: Io) {}

  push(row: { text: string; reasoning?: string } | undefined): void {
    if (row?.reasoning) {
      if (this.thinking === 'no') this.io.err('Thinking...\n');
      this.thinking = 'open';
      this.reasoning += row.reasoning;
      this.io.err(row.reasoning);
    }
    if (row?.text) {
      this.end();
      this.text += row.text;
      this.io.out(row.text);
    }
  }

  /** The reasoning is over (the answer began, or the reply ended). */
  end(): void {
    if (this.thinking !== 'open') return;
    this.io.err('\n...done thinking.\n\n');
    this.thinking = 'done';
  }
}

/** generate's and chat's flags for the host they run: its KV budgets, threads, prefill chunk, lookup, library. */
export const HOST_OPTIONS = {
  'kv-budget': { type: 'string', multiple: true },
  'device-memory': { type: 'string', multiple: true },
  threads: { type: 'string' },
  'prefill-chunk': { type: 'string' },
  lookup: { type: 'string' },
  'data-dir': { type: 'string' },
} as const;

/** generate's and chat's flags for how the package loads: the person's variant, backend and chat template. */
export const LOAD_OPTIONS = {
  variant: { type: 'string' },
  backend: { type: 'string' },
  'trust-installed': { type: 'boolean' },
  'chat-template': { type: 'string' },
  'package-template': { type: 'boolean' },
} as const;

/** What the loaded package's spec warns of (a backend it could not use, a variant picked for it), on stderr. */
export function printWarnings(io: Io, warnings: readonly string[]): void {
  for (const w of warnings) io.err(`kvdesk: warning: ${w}\n`);
}

/**
 * What each device's KV budget derivation warns of, a line each on stderr: a --kv-budget over what the memory holds
 * beside the weights, weights that leave the budget nothing, a GPU whose memory kvdesk cannot read. Under a
 * --kv-budget, only what is said of it: not the note that the flag was taken, nor what the derivation it replaced
 * would have left.
 */
export function printBudgetNotes(io: Io, budget: { devices: readonly DeviceBudgetSnapshot[] }): void {
  for (const { derivation: d } of budget.devices) {
    const taken = d.notes.findIndex((n) => n.startsWith('Set by override'));
    for (const note of d.source === 'override' ? d.notes.slice(taken + 1) : d.notes) {
      io.err(`kvdesk: KV budget note: ${note}\n`);
    }
  }
}

/** `--effort`: a thinking model's reasoning effort (GenerateRequest.reasoningEffort), checked. */
export function effortFlag(value: string | undefined): GenerateRequest['reasoningEffort'] {
  if (value === undefined) return undefined;
  const levels = ['minimal', 'low', 'medium', 'high'] as const;
  const level = levels.find((l) => l === value);
  if (!level) throw badArgs(`--effort expects ${levels.join(', ')}; got "${value}"`);
  return level;
}

/**
 * Most tokens `--lookup` may draft per check: a check runs N + 1 positions, whose cost grows with N (on the GPT-2
 * shape 5 positions cost 1.2× a one-token step, 9 cost 1.4×), while long drafts are seldom right to the end.
 */
export const MAX_LOOKUP_DRAFT = 16;

/** `--lookup N`: lookup decoding's draft tokens per check (0 turns it off), checked. */
export function lookupFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const what = `a whole number from 0 (off) to ${MAX_LOOKUP_DRAFT}`;
  refuseEmpty('lookup', value, what);
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > MAX_LOOKUP_DRAFT) {
    throw badArgs(`--lookup expects ${what}, got "${value}"`);
  }
  return n;
}

/** `, lookup took A of D drafted tokens` for a reply whose drafts were checked; empty otherwise. */
export function lookupLine(r: GenerationResult): string {
  return r.lookup ? `, lookup took ${r.lookup.accepted} of ${r.lookup.drafted} drafted tokens` : '';
}

/** The line that says a --prediction-file was not drafted from, and why (never silent); empty when it was. */
export function predictionUnusedLine(r: GenerationResult): string {
  const u = r.predictionUnused;
  if (!u) return '';
  const why =
    u.reason === 'lookup_off'
      ? 'lookup decoding is off (--lookup 0)'
      : u.reason === 'lookup_unavailable'
        ? `lookup decoding cannot run on this model: ${u.detail ?? 'its graph cannot check drafts'}`
        : 'the reply ran beside other requests all along (lookup decoding drafts for a request running alone)';
  return `kvdesk: --prediction-file was not drafted from: ${why}; the reply is the model's, at plain decoding's speed\n`;
}

/** The line that says the KV budget cut a reply's max new tokens (never silent), and what to do. */
export function budgetCapLine(c: BudgetCap, remedy: string): string {
  return `kvdesk: reply capped at ${c.admittedMaxTokens} tokens by the KV budget (asked ${c.requestedMaxTokens}; needs ${c.requestedBytes} bytes, ${c.availableBytes} available): ${remedy}\n`;
}

/** The line that says the context window clipped a request's max new tokens (never silent). */
export function contextClipLine(c: ContextClip): string {
  return `kvdesk: max new tokens clipped from ${c.requestedMaxTokens} to ${c.clippedMaxTokens} by the context window (${c.contextLength} tokens)\n`;
}

/** A command's flags and positionals; a flag it does not know (or a bad value) is BAD_REQUEST naming it. */
export function parseFlags<O extends NonNullable<ParseArgsConfig['options']>>(
  args: string[],
  options: O,
  command: string,
) {
  try {
    return parseArgs<{ args: string[]; options: O; allowPositionals: true }>({
      args: joinValues(args, options),
      options,
      allowPositionals: true,
    });
  } catch (err) {
    throw flagError(err, command, options);
  }
}

/**
 * What node's parser threw, said for a person: a flag the command does not know is named with the command, with
 * the flag meant when one is a typo away (node's own words suggest `-- "--promt"`, a positional, and lose a quote).
 */
export function flagError(err: unknown, command: string, options: NonNullable<ParseArgsConfig['options']>) {
  const e = err as Error & { code?: string };
  const see = `(see kvdesk ${command} --help)`;
  // A flag given without its value, at the end of the line: node says "Option '--x <value>' argument missing".
  // Or before another flag, which node does not take as the value ("argument is ambiguous").
  const valueless =
    e.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE'
      ? (/'(--?[\w-]+) <value>'/.exec(e.message)?.[1] ??
        /^Option '(--?[\w-]+)' argument is ambiguous/.exec(e.message)?.[1])
      : undefined;
  if (valueless !== undefined) {
    return new KvdeskError('BAD_REQUEST', `${valueless} needs a value ${see}`, { flag: valueless });
  }
  const flag = e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /'(-[^']*)'/.exec(e.message)?.[1] : undefined;
  if (flag === undefined) return new KvdeskError('BAD_REQUEST', `${e.message} ${see}`);
  const bare = flag.replace(/^-+/, '');
  // Other tools' names for kvdesk's flags (OpenAI's, llama.cpp's, Ollama's parameters: `repeat_penalty`), too far
  // apart for a typo: the first the command takes, else what to do instead where the command has no such flag.
  const alias = bare.replace(/_/g, '-');
  const aliases = Object.hasOwn(FLAG_ALIASES, alias) ? [FLAG_ALIASES[alias] ?? []].flat() : [];
  const known = aliases.find((a) => a in options);
  const near = known !== undefined ? [known] : nearestFlags(bare, Object.keys(options));
  // kvdesk's own name given to a command without that flag (`kvdesk chat M --prompt …`) too.
  const instead = [...aliases, alias]
    .map((a) => (Object.hasOwn(FLAG_HINTS, a) ? FLAG_HINTS[a]?.(command) : undefined))
    .find((h) => h !== undefined);
  const hint =
    near.length > 0
      ? `: did you mean ${near.map((n) => `--${n}`).join(' or ')}?`
      : instead !== undefined
        ? `: ${instead}`
        : '';
  return new KvdeskError('BAD_REQUEST', `unknown option ${flag} for kvdesk ${command}${hint} ${see}`, { flag });
}

/**
 * What other tools call kvdesk's flags: `--max-tokens` (OpenAI), `-n`/`--n-predict`, `-p`, `-s`, `-t`,
 * `--repeat-penalty`, `--repeat-last-n` (llama.cpp), `--temp`; `-p` is serve's --port. Several: the first a command
 * takes.
 */
const FLAG_ALIASES: Record<string, string | readonly string[]> = {
  n: 'max-new-tokens',
  'max-tokens': 'max-new-tokens',
  'max-completion-tokens': 'max-new-tokens',
  'n-predict': 'max-new-tokens',
  'num-predict': 'max-new-tokens',
  temp: 'temperature',
  'system-prompt': 'system',
  p: ['prompt', 'port'],
  m: 'model',
  s: 'seed',
  t: 'threads',
  'repeat-penalty': 'repetition-penalty',
  'repeat-last-n': 'repetition-window',
};

/** What to do instead, where a command has no flag of that name (`kvdesk generate -m M`, `kvdesk chat -p "…"`). */
const FLAG_HINTS: Readonly<Record<string, (command: string) => string | undefined>> = {
  model: (command) =>
    command === 'generate' || command === 'chat' || command === 'inspect'
      ? `the package is the command's argument, not a flag: kvdesk ${command} PACKAGE (a folder, or a library id)`
      : command === 'pull'
        ? 'the repository is the argument, not a flag: kvdesk pull owner/name'
        : undefined,
  prompt: (command) =>
    command === 'chat'
      ? 'chat takes its turns as you type them, or from a pipe (`echo "…" | kvdesk chat M`); for one reply to a prompt use `kvdesk generate M --chat --prompt "…"`'
      : undefined,
};

/** The flags at the least edit distance from `name`, when that is at most 2 (`promt` → `prompt`). */
export function nearestFlags(name: string, flags: readonly string[]): string[] {
  const scored = flags.map((f) => ({ f, d: editDistance(name, f) }));
  const best = Math.min(...scored.map((s) => s.d));
  return best <= 2 ? scored.filter((s) => s.d === best).map((s) => s.f) : [];
}

/** Whether a command's arguments ask for its help: `--help` or `-h`, not as a flag's value nor after `--`. */
export function wantsHelp(args: readonly string[], options: NonNullable<ParseArgsConfig['options']>): boolean {
  for (const arg of joinValues(args, options)) {
    if (arg === '--') return false;
    if (arg === '--help' || arg === '-h') return true;
  }
  return false;
}

/**
 * A flag that takes a value takes the next argument even when it starts with "-" (`--frequency-penalty -0.5`,
 * `--prompt "- a list"`), as llama.cpp's and Ollama's do: node's parser would call it ambiguous. Each such pair
 * becomes `--flag=value`, unless the next argument is another of the command's flags or `--`; nothing after
 * `--` is touched.
 */
export function joinValues(args: readonly string[], options: NonNullable<ParseArgsConfig['options']>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--') {
      out.push(...args.slice(i));
      break;
    }
    const next = args[i + 1];
    const name = arg.startsWith('--') && !arg.includes('=') ? arg.slice(2) : undefined;
    // Another of the command's flags (or `--`) is not a value: `--system --chat` forgot the system prompt.
    const isFlag =
      next === '--' || (next?.startsWith('--') === true && (next.slice(2).split('=')[0] as string) in options);
    if (name !== undefined && options[name]?.type === 'string' && next?.startsWith('-') && !isFlag) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}
