/**
 * Long texts tokenized off the host's thread. Encoding runs at 0.2–0.7 MB/s here (@huggingface/tokenizers is
 * JavaScript), so a conversation of 200 kB held every stream, the UI and every API client for a third of a second, on
 * each turn. Requests are prepared synchronously (chat template, tools, dropped turns, all in one pass: RunnerService's
 * buildRows), so the pass is not made asynchronous: run under {@link deferringLongTexts}, an encode of a long text not
 * tokenized yet throws {@link LongTextPending}; the caller awaits its `ready` (the text tokenized on a worker thread of
 * the tokenizer, and kept) and runs the pass again, which finds it ({@link afterLongTexts}).
 *
 * The worker loads the tokenizer from the same files as the host did (reading and parsing them there: copying a
 * large vocabulary to it would hold the host as long), with the same library, so its ids are the host's. A worker
 * that cannot start or fails, or files changed since the host read them, turn this off for that tokenizer: its
 * texts are tokenized on the host's thread again, as before.
 */
import { type Stats, statSync } from 'node:fs';
import { Worker } from 'node:worker_threads';

/** Texts shorter than this (UTF-16 code units: ~20–50 ms of encoding) are tokenized where they are asked for. */
export const OFF_THREAD_CHARS = 16 * 1024;
/** Longer ones too: they would not be kept (their prompt is refused for its size long before this). */
const MAX_OFF_THREAD_CHARS = 16 * 1024 ** 2;
/** What the cache keeps of the texts tokenized off the thread: entries, and their bytes in all (text and ids). */
const CACHE_ENTRIES = 32;
const CACHE_BYTES = 64 * 1024 ** 2;
/**
 * A pass that has waited this many times is finished on the host's thread: each wait runs the pass again (its
 * templates rendered again), and a pass must end. A prompt is one long text, a conversation one or two (its
 * closing suffix); finding the turns to leave out of a long one may take more.
 */
export const MAX_DEFERRALS = 8;
/** A worker with nothing to do is ended after this long (it holds a copy of the vocabulary). */
const IDLE_MS = 60_000;

/** What the library's encode gave: its ids (undefined where a word has no id) and the token at a position. */
export interface RawEncoding {
  ids: ArrayLike<number | undefined>;
  tokenAt(position: number): string;
}

/** Thrown by an encode under {@link deferringLongTexts} for a long text not tokenized yet; await `ready`. */
export class LongTextPending extends Error {
  constructor(readonly ready: Promise<void>) {
    super('a long text is being tokenized off the host thread');
    this.name = 'LongTextPending';
  }
}

let deferring = false;

/** Runs `fn` with encodes of long texts not tokenized yet throwing {@link LongTextPending}. */
export function deferringLongTexts<T>(fn: () => T): T {
  const was = deferring;
  deferring = true;
  try {
    return fn();
  } finally {
    deferring = was;
  }
}

/** `pass` run until no long text it encodes is left to tokenize (each tokenized off the thread between runs). */
export async function afterLongTexts<T>(pass: () => T): Promise<T> {
  for (let round = 0; round < MAX_DEFERRALS; round++) {
    try {
      return deferringLongTexts(pass);
    } catch (err) {
      if (!(err instanceof LongTextPending)) throw err;
      await err.ready;
    }
  }
  return pass();
}

/** The files a tokenizer was loaded from, as they were then. */
export interface TokenizerFiles {
  tokenizerJson: string;
  tokenizerConfig?: string;
}

interface Reply {
  id: number;
  ids?: Int32Array;
  unknown?: Array<[number, string]>;
  error?: string;
}

/**
 * The keys of tokenizer.json the library insists on, and what a missing one stands for (tokenizers, in Rust, treats
 * them as absent): the host's tokenizer (createTextTokenizer) and its worker's both fill them in so.
 */
export function libraryDefaults(): {
  added_tokens: [];
  normalizer: null;
  pre_tokenizer: null;
  post_processor: null;
  decoder: null;
} {
  return { added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null };
}

/**
 * The worker: the tokenizer from the files (checked unchanged), then one encode per message. Parsed as the host
 * parses them (a BOM skipped; libraryDefaults filled in).
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { readFileSync, statSync } = require('node:fs');
const { Tokenizer } = require(workerData.lib);
function read(file, was) {
  const now = statSync(file);
  if (now.size !== was.size || now.mtimeMs !== was.mtimeMs) throw new Error(file + ' changed since it was loaded');
  const text = readFileSync(file, 'utf8');
  return JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
}
const json = read(workerData.files.tokenizerJson, workerData.stats[0]);
for (const [key, value] of Object.entries(${JSON.stringify(libraryDefaults())})) json[key] = json[key] ?? value;
const config = workerData.files.tokenizerConfig ? read(workerData.files.tokenizerConfig, workerData.stats[1]) : {};
const tokenizer = new Tokenizer(json, config);
parentPort.on('message', ({ id, text, special }) => {
  try {
    const encoded = tokenizer.encode(text, { add_special_tokens: special });
    const ids = new Int32Array(encoded.ids.length);
    const unknown = [];
    for (let i = 0; i < ids.length; i++) {
      const x = encoded.ids[i];
      if (x === undefined) {
        ids[i] = -1;
        unknown.push([i, encoded.tokens[i] ?? '']);
      } else ids[i] = x;
    }
    parentPort.postMessage({ id, ids, unknown }, [ids.buffer]);
  } catch (err) {
    parentPort.postMessage({ id, error: String((err && err.message) || err) });
  }
});
`;

/** What an entry of the cache holds: its text (UTF-16) and its ids (a JavaScript array's 8 bytes each). */
const bytesOf = (key: string, encoding: RawEncoding) => 2 * key.length + 8 * encoding.ids.length;

/** The key of a text in the cache: whether special tokens are added, then the text. */
const keyOf = (text: string, special: boolean) => `${special ? '1' : '0'}${text}`;

/**
 * One tokenizer's long texts: tokenized on its worker (started when first needed, ended when idle or closed) and
 * kept a while, for the pass that asked to find.
 */
export class OffThreadEncoder {
  private worker: Worker | undefined;
  private readonly waiting = new Map<number, (reply: Reply) => void>();
  private nextId = 0;
  private idle: NodeJS.Timeout | undefined;
  /** Off for good: the worker failed, or the files changed. */
  private off = false;
  /** Texts tokenized, the most recently used last; and texts the library refused there (tokenized here, to say why). */
  private readonly done = new Map<string, RawEncoding>();
  private doneBytes = 0;
  private readonly here = new Set<string>();
  /** Texts being tokenized there (two requests with the same prompt wait for one). */
  private readonly tokenizing = new Map<string, Promise<void>>();
  private readonly stats: Stats[];

  constructor(
    private readonly files: TokenizerFiles,
    /** How this thread's library encodes (what a failed worker falls back on). */
    private readonly encodeHere: (text: string, special: boolean) => RawEncoding,
  ) {
    try {
      this.stats = [statSync(files.tokenizerJson), ...(files.tokenizerConfig ? [statSync(files.tokenizerConfig)] : [])];
    } catch {
      // Gone since they were read: tokenized here, as they were read then.
      this.stats = [];
      this.off = true;
    }
  }

  /**
   * The encoding of `text`: kept from the worker, or made here — unless a pass deferring long texts asks for a long
   * one not tokenized yet, which throws {@link LongTextPending} as its tokenizing begins.
   */
  encode(text: string, special: boolean): RawEncoding {
    if (text.length < OFF_THREAD_CHARS || text.length > MAX_OFF_THREAD_CHARS || this.off) {
      return this.encodeHere(text, special);
    }
    const key = keyOf(text, special);
    const kept = this.done.get(key);
    if (kept) {
      // The most recently used last: a pass that waits again finds what it waited for before.
      this.done.delete(key);
      this.done.set(key, kept);
      return kept;
    }
    if (!deferring || this.here.delete(key)) return this.encodeHere(text, special);
    let ready = this.tokenizing.get(key);
    if (!ready) {
      ready = this.tokenize(text, special, key).finally(() => this.tokenizing.delete(key));
      this.tokenizing.set(key, ready);
    }
    throw new LongTextPending(ready);
  }

  /** Ends the worker (the model is unloaded); texts asked for later are tokenized here. */
  close(): void {
    this.off = true;
    this.stop();
    this.done.clear();
    this.doneBytes = 0;
  }

  private async tokenize(text: string, special: boolean, key: string): Promise<void> {
    const reply = await this.ask(text, special);
    if (reply.ids) {
      const ids: Array<number | undefined> = Array.from(reply.ids, (id) => (id < 0 ? undefined : id));
      const unknown = new Map(reply.unknown);
      this.keep(key, { ids, tokenAt: (i) => unknown.get(i) ?? '' });
    } else {
      // Refused there (or the worker gone): the pass tokenizes it here, where the library says why.
      this.here.add(key);
      for (const old of this.here) {
        if (this.here.size <= CACHE_ENTRIES) break;
        this.here.delete(old);
      }
    }
  }

  private keep(key: string, encoding: RawEncoding): void {
    this.forget(key);
    this.done.set(key, encoding);
    this.doneBytes += bytesOf(key, encoding);
    for (const [old] of this.done) {
      if (this.done.size <= CACHE_ENTRIES && this.doneBytes <= CACHE_BYTES) break;
      this.forget(old);
    }
  }

  private forget(key: string): void {
    const kept = this.done.get(key);
    if (kept === undefined) return;
    this.done.delete(key);
    this.doneBytes -= bytesOf(key, kept);
  }

  private ask(text: string, special: boolean): Promise<Reply> {
    const worker = this.started();
    if (!worker) return Promise.resolve({ id: -1, error: 'no worker' });
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    const id = this.nextId++;
    worker.ref();
    return new Promise((resolve) => {
      this.waiting.set(id, (reply) => {
        this.waiting.delete(id);
        if (this.waiting.size === 0 && this.worker) {
          this.worker.unref();
          // Idle a while: the worker and what was kept of its texts go (the requests that asked have long started).
          this.idle = setTimeout(() => {
            this.stop();
            this.done.clear();
            this.doneBytes = 0;
          }, IDLE_MS);
          this.idle.unref();
        }
        resolve(reply);
      });
      worker.postMessage({ id, text, special });
    });
  }

  private started(): Worker | undefined {
    if (this.off) return undefined;
    if (this.worker) return this.worker;
    try {
      const worker = new Worker(WORKER, {
        eval: true,
        workerData: { lib: require.resolve('@huggingface/tokenizers'), files: this.files, stats: this.stats },
      });
      // An idle worker keeps no process from ending (one tokenizing does: ask).
      worker.unref();
      worker.on('message', (reply: Reply) => this.waiting.get(reply.id)?.(reply));
      const fail = () => {
        if (this.worker !== worker) return;
        this.off = true;
        this.stop();
      };
      worker.on('error', fail);
      worker.on('exit', fail);
      this.worker = worker;
      return worker;
    } catch {
      this.off = true;
      return undefined;
    }
  }

  /** Ends the worker; what it was asked is tokenized here. */
  private stop(): void {
    const worker = this.worker;
    this.worker = undefined;
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    for (const [id, answer] of [...this.waiting]) answer({ id, error: 'worker ended' });
    void worker?.terminate();
  }
}
