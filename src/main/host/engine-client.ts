/**
 * The host's handle on the engine process: forks it, correlates calls, routes
 * token frames to their generation, and turns a crash into a failure of every
 * generation in flight. The only door to engine work is `generate`, and it
 * refuses any grant the scheduler does not vouch for.
 */
import { type ChildProcess, fork } from 'node:child_process';
import path from 'node:path';
import { type ErrorInfo, KvdeskError } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import { ORT_ENV } from '../../shared/ort-env';
import { type ProcessEntry, processEntry } from '../backends/process-entry';
import type {
  EngineCommand,
  EngineEvent,
  EngineLoadResult,
  EngineSessionOptions,
  EngineStats,
  StepLogprob,
} from '../engine/protocol';

/** Receives the events of one generation. */
export interface GenerationHandlers {
  onStarted(prefillTokens: number, reusedTokens: number): void;
  onPrefill?(doneTokens: number, totalTokens: number, kvBytes: number): void;
  /** `logprobs` (when the command asked for them): one entry per id. */
  onTokens(ids: number[][], kvBytes: number, logprobs?: StepLogprob[][]): void;
  onDone(event: Extract<EngineEvent, { type: 'done' }>): void;
  onFailed(error: ErrorInfo): void;
}

/** What the engine needs to start a generation, besides the grant. */
export type GenerateCommand = Omit<Extract<EngineCommand, { type: 'generate' }>, 'type' | 'grantToken'>;

/** Options of the engine client. */
export interface EngineClientOptions {
  /** True only for a grant the scheduler issued and has not released. */
  verifyGrant: (grantToken: string) => boolean;
  /** Called when the engine process exits unexpectedly (after in-flight work was failed). */
  onCrash?: (reason: string) => void;
  /** Explicit engine entry (tests); defaults to the built engine.js or the TypeScript source (process-entry.ts). */
  entry?: string;
  /** Extra environment for the engine process (tests set failpoints here). */
  env?: Record<string, string>;
  /** The runtime the engine process runs on; default this process's (tests name one that is not there). */
  execPath?: string;
}

/**
 * V8 options of the engine process: ArrayBuffer.prototype.transfer, with which the engine frees each step's dead
 * KV at once (kv-cache.ts releaseKv), is behind a flag in Node 20's V8 and on by default in later ones (Electron's
 * among them). The engine runs on this process's binary, so what this process lacks, it lacks too.
 */
export const ENGINE_V8_FLAGS: readonly string[] =
  typeof (ArrayBuffer.prototype as { transfer?: unknown }).transfer === 'function'
    ? []
    : ['--harmony-rab-gsab-transfer'];

/** Locates the engine entry: the bundled engine.js in a build, else the TS source run through tsx. */
function resolveEntry(explicit?: string): ProcessEntry {
  // Built, it is beside this file's bundle: out/cli/engine.js, out/main/engine.js.
  return processEntry('engine', [__dirname], path.join(__dirname, '../engine/process.ts'), explicit, ENGINE_V8_FLAGS);
}

/**
 * glibc malloc settings for the engine process (a person's own MALLOC_*
 * variables win). Every decode step returns new KV tensors of megabytes each;
 * with glibc's defaults they are mmap'ed and unmapped, or trimmed back to the
 * system after each collection, so the next step faults the same memory in
 * again: measured 400–2400 page faults per token at 500 tokens of context on
 * the GPT-2-small shape, several ms per token. Served from the heap up to
 * 64 MiB per block and kept up to 512 MiB of free memory, they are reused. Other
 * C libraries ignore these variables.
 */
export const ENGINE_MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: String(64 * 1024 * 1024),
  MALLOC_TRIM_THRESHOLD_: String(512 * 1024 * 1024),
};

/**
 * The glibc tunable that backs malloc's memory with transparent huge pages
 * (glibc ≥ 2.35 with THP in `madvise` mode — the default of most
 * distributions — or `always`; older glibc and other C libraries ignore it). Decoding one token streams
 * every weight once — hundreds of MB of prepacked matrices — and with 4 KiB
 * pages a good part of that time goes to TLB misses: measured +25–35 % decode
 * tok/s on both benchmark shapes (bench/README.md).
 */
export const ENGINE_HUGEPAGE_TUNABLE = 'glibc.malloc.hugetlb';

/**
 * The engine process's environment: kvdesk's malloc settings under the
 * person's environment and the caller's explicit `env` (theirs win), and the
 * huge-page tunable added to GLIBC_TUNABLES unless that already sets it.
 */
export function engineEnvironment(
  base: NodeJS.ProcessEnv,
  explicit: Record<string, string> | undefined,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...ENGINE_MALLOC_ENV, ...ORT_ENV, ...base, ...explicit };
  const tunables = env.GLIBC_TUNABLES ?? '';
  const names = tunables.split(':').map((t) => t.split('=')[0]);
  if (!names.includes(ENGINE_HUGEPAGE_TUNABLE)) {
    env.GLIBC_TUNABLES = [tunables, `${ENGINE_HUGEPAGE_TUNABLE}=1`].filter(Boolean).join(':');
  }
  return env;
}

/** Client of one engine process. */
export class EngineClient {
  private child: ChildProcess | null = null;
  private ready: Promise<void> | null = null;
  private nextCallId = 1;
  private readonly calls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly generations = new Map<string, GenerationHandlers>();
  private closing = false;
  /** The load key of each model's token table the engine process holds (JSON mode). */
  private readonly tokenTables = new Map<string, number>();

  constructor(
    private readonly sessionOptions: EngineSessionOptions,
    private readonly options: EngineClientOptions,
  ) {}

  /** Starts the engine process if it is not running; resolves when it is ready for commands. */
  start(): Promise<void> {
    if (this.ready) return this.ready;
    this.closing = false;
    const { file, execArgv } = resolveEntry(this.options.entry);
    const execPath = this.options.execPath ?? process.execPath;
    const cannotStart = (err: Error) =>
      new KvdeskError(
        'ENGINE_FAILED',
        `could not start the engine process (${execPath}): ${err.message}; check that the runtime is still installed and that this machine can start processes, then try again`,
      );
    let child: ChildProcess;
    try {
      child = fork(file, [], {
        execPath,
        execArgv,
        serialization: 'advanced',
        env: engineEnvironment(process.env, this.options.env),
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
    } catch (err) {
      // (An environment too large to exec: E2BIG, thrown at once.)
      return Promise.reject(cannotStart(err as Error));
    }
    this.child = child;
    this.ready = new Promise<void>((resolve, reject) => {
      const onEarlyExit = (code: number | null, signal: NodeJS.Signals | null) =>
        reject(
          new KvdeskError(
            'ENGINE_FAILED',
            `the engine process exited during start-up (code ${code}, signal ${signal})`,
          ),
        );
      child.once('exit', onEarlyExit);
      child.on('message', (msg: EngineEvent) => {
        if (msg.type === 'ready') {
          child.off('exit', onEarlyExit);
          resolve();
          return;
        }
        this.dispatch(msg);
      });
      child.on('exit', (code, signal) => this.onExit(child, code, signal));
      // A write to an engine that died before this process heard of it (a cancel as its client leaves) fails with
      // EPIPE: unheard, that error ended the host. The channel is gone, so is the engine: its exit (killed here, if
      // it is still running) fails its work and the host recovers.
      let killed = false;
      child.on('error', (err) => {
        if (child.pid === undefined) {
          // It never started (the runtime's binary gone, a process limit): no exit comes, and what waits for its
          // start would wait for good.
          child.off('exit', onEarlyExit);
          if (this.child === child) {
            this.child = null;
            this.ready = null;
          }
          reject(cannotStart(err));
          return;
        }
        // Once: a kill that fails is itself an 'error'.
        if (killed || child.exitCode !== null || child.signalCode !== null) return;
        killed = true;
        child.kill('SIGKILL');
      });
    });
    return this.ready;
  }

  /** Process id of the engine (tests kill it to prove crash handling). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  private dispatch(msg: EngineEvent): void {
    if (msg.type === 'reply') {
      const call = this.calls.get(msg.callId);
      if (!call) return;
      this.calls.delete(msg.callId);
      if (msg.ok) call.resolve(msg.value);
      else call.reject(new KvdeskError(msg.error.code, msg.error.message, msg.error.detail));
      return;
    }
    if (msg.type === 'ready') return;
    const handlers = this.generations.get(msg.requestId);
    if (!handlers) return;
    switch (msg.type) {
      case 'started':
        handlers.onStarted(msg.prefillTokens, msg.reusedTokens);
        return;
      case 'prefill':
        handlers.onPrefill?.(msg.doneTokens, msg.totalTokens, msg.kvBytes);
        return;
      case 'tokens':
        handlers.onTokens(msg.ids, msg.kvBytes, msg.logprobs);
        return;
      case 'done':
        this.generations.delete(msg.requestId);
        handlers.onDone(msg);
        return;
      case 'failed':
        this.generations.delete(msg.requestId);
        handlers.onFailed(msg.error);
        return;
    }
  }

  private onExit(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.child !== child) return;
    this.child = null;
    this.ready = null;
    this.tokenTables.clear();
    const reason = `the engine process exited (code ${code}, signal ${signal})`;
    const error: ErrorInfo = {
      code: 'ENGINE_FAILED',
      message: `${reason}; the request was stopped and its KV reservation released`,
    };
    for (const [, call] of this.calls) call.reject(new KvdeskError('ENGINE_FAILED', reason));
    this.calls.clear();
    const inflight = [...this.generations.values()];
    this.generations.clear();
    // The host hears of the crash before each request does: what a failed request frees must not go to a request
    // that would start on the dead engine.
    if (!this.closing) this.options.onCrash?.(reason);
    for (const h of inflight) h.onFailed(error);
  }

  private send(cmd: EngineCommand): void {
    if (!this.child?.connected) throw new KvdeskError('ENGINE_FAILED', 'the engine process is not running');
    this.child.send(cmd);
  }

  private call<T>(build: (callId: number) => EngineCommand): Promise<T> {
    return this.start().then(
      () =>
        new Promise<T>((resolve, reject) => {
          const callId = this.nextCallId++;
          this.calls.set(callId, { resolve: resolve as (v: unknown) => void, reject });
          try {
            this.send(build(callId));
          } catch (err) {
            this.calls.delete(callId);
            reject(err as Error);
          }
        }),
    );
  }

  /** Creates the model's onnxruntime session in the engine; says how its graph scores positions. */
  load(modelId: string, spec: ModelSpec, executionProviders?: string[]): Promise<EngineLoadResult> {
    const options = executionProviders ? { ...this.sessionOptions, executionProviders } : this.sessionOptions;
    return this.call<EngineLoadResult>((callId) => ({ type: 'load', callId, modelId, spec, options }));
  }

  /** Releases the model's session and its sessions' KV. */
  unload(modelId: string): Promise<void> {
    this.tokenTables.delete(modelId);
    return this.call<unknown>((callId) => ({ type: 'unload', callId, modelId })).then(() => undefined);
  }

  /**
   * Sends the token bytes of one load of a model (`key`) unless the engine process holds them already (JSON
   * mode needs them); `build` runs only when they must be sent. Commands reach the engine in order, so a
   * generate sent after this finds them.
   */
  ensureTokenTable(
    modelId: string,
    key: number,
    build: () => { bytes: Uint8Array; offsets: Uint32Array; special: number[] },
  ): void {
    if (this.tokenTables.get(modelId) === key) return;
    this.send({ type: 'tokenTable', modelId, key, ...build() });
    this.tokenTables.set(modelId, key);
  }

  /** Engine counters (runs, generations) and held session KV. */
  stats(): Promise<EngineStats> {
    return this.call<EngineStats>((callId) => ({ type: 'stats', callId }));
  }

  /**
   * Starts engine work for an admitted request. Called only from RunnerService
   * after the scheduler's `admitted` signal; a grant the scheduler does not hold
   * live is refused with NOT_ADMITTED before anything reaches the engine.
   */
  generate(grantToken: string, cmd: GenerateCommand, handlers: GenerationHandlers): void {
    if (!this.options.verifyGrant(grantToken)) {
      throw new KvdeskError(
        'NOT_ADMITTED',
        `request ${cmd.requestId} has no live admission grant: engine work must go through the scheduler`,
      );
    }
    if (this.generations.has(cmd.requestId)) {
      throw new KvdeskError('INTERNAL', `request ${cmd.requestId} is already running in the engine`);
    }
    this.generations.set(cmd.requestId, handlers);
    try {
      this.send({ type: 'generate', grantToken, ...cmd });
    } catch (err) {
      this.generations.delete(cmd.requestId);
      throw err;
    }
  }

  /** Asks the engine to stop a generation before its next step. */
  cancel(requestId: string, reason: 'stop' | 'cancelled'): void {
    if (this.generations.has(requestId) && this.child?.connected) this.send({ type: 'cancel', requestId, reason });
  }

  /** Drops a chat session's retained KV (eviction, thread closed). */
  dropSession(sessionId: string): void {
    if (this.child?.connected) this.send({ type: 'dropSession', sessionId });
  }

  /** Keeps only the first `tokens` positions of a chat session's KV. */
  trimSession(sessionId: string, tokens: number): void {
    if (this.child?.connected) this.send({ type: 'trimSession', sessionId, tokens });
  }

  /** Kills the engine process without ceremony (tests; a hung engine). */
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.child?.kill(signal);
  }

  /** Stops the engine process. */
  async close(): Promise<void> {
    this.closing = true;
    const child = this.child;
    if (!child) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      if (child.connected) child.disconnect();
      setTimeout(() => child.kill('SIGKILL'), 2000).unref();
    });
  }
}
