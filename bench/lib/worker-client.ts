/** Forks a contender process (run through tsx like kvdesk's engine) and talks to it one call at a time. */
import { type ChildProcess, fork } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { GenerationSample, WorkerCommand, WorkerEvent } from './worker-protocol';

const requireHere = createRequire(__filename);

/** The tsx loader, so a child can run TypeScript entries. */
export function tsxExecArgv(): string[] {
  return ['--import', pathToFileURL(requireHere.resolve('tsx')).href];
}

/** A forked contender. */
export class WorkerClient {
  private readonly child: ChildProcess;
  private readonly ready: Promise<number>;
  private waiting: { resolve: (e: WorkerEvent) => void; reject: (e: Error) => void } | null = null;
  private exited: string | null = null;
  private paused = false;

  constructor(
    readonly name: string,
    entry: string,
    env: Record<string, string> = {},
    /** Called for every forwarded engine event (bench/profile.ts imitates a host's work there). */
    private readonly onEngineEvent?: () => void,
    extraExecArgv: string[] = [],
  ) {
    this.child = fork(path.resolve(__dirname, '..', entry), [], {
      execArgv: [...extraExecArgv, ...tsxExecArgv()],
      serialization: 'advanced',
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.ready = new Promise((resolve, reject) => {
      this.child.once('exit', (code, signal) => {
        this.exited = `${name} exited (code ${code}, signal ${signal})`;
        reject(new Error(this.exited));
        this.waiting?.reject(new Error(this.exited));
        this.waiting = null;
      });
      this.child.on('message', (msg: WorkerEvent) => {
        if (msg.type === 'ready') {
          resolve(msg.pid);
          return;
        }
        if (msg.type === 'engine') {
          this.onEngineEvent?.();
          return;
        }
        const w = this.waiting;
        this.waiting = null;
        if (!w) return;
        if (msg.type === 'error') w.reject(new Error(`${name}: ${msg.message}`));
        else w.resolve(msg);
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  private async call(cmd: WorkerCommand): Promise<WorkerEvent> {
    await this.ready;
    if (this.exited) throw new Error(this.exited);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.child.send(cmd);
    });
  }

  /** Loads the package folder; returns load time and a description of the runtime. */
  async load(modelDir: string, threads: number | null): Promise<{ loadMs: number; detail: string }> {
    const e = await this.call({ type: 'load', modelDir, threads });
    if (e.type !== 'loaded') throw new Error(`${this.name}: unexpected ${e.type}`);
    return { loadMs: e.loadMs, detail: e.detail };
  }

  async generate(
    promptIds: number[],
    maxNewTokens: number,
    eosTokenIds: number[],
    memoryEvery?: number,
  ): Promise<GenerationSample> {
    const e = await this.call({
      type: 'generate',
      promptIds,
      maxNewTokens,
      eosTokenIds,
      ...(memoryEvery ? { memoryEvery } : {}),
    });
    if (e.type !== 'result') throw new Error(`${this.name}: unexpected ${e.type}`);
    return e.sample;
  }

  /** workers/raw-ort.ts: greedy decode of prompts of one length as one batch; each row's ids and the total time. */
  async generateBatch(prompts: number[][], maxNewTokens: number): Promise<{ rows: number[][]; totalMs: number }> {
    const e = await this.call({ type: 'generateBatch', prompts, maxNewTokens });
    if (e.type !== 'batchResult') throw new Error(`${this.name}: unexpected ${e.type}`);
    return { rows: e.rows, totalMs: e.totalMs };
  }

  /** workers/weight-floor.ts: ms of `runs` runs of the loaded matrix chain. */
  async floor(runs: number): Promise<number[]> {
    const e = await this.call({ type: 'floor', runs });
    if (e.type !== 'floor') throw new Error(`${this.name}: unexpected ${e.type}`);
    return e.ms;
  }

  /**
   * Suspends the worker (SIGSTOP) while other contenders are measured. An idle
   * contender is not always idle: a transformers.js worker keeps using about a
   * fifth of a core after its first generation (measured), and the noise guard
   * counts the bench's own children as "ours", so it would go unnoticed.
   */
  pause(): void {
    if (!this.exited && !this.paused) {
      this.child.kill('SIGSTOP');
      this.paused = true;
    }
  }

  resume(): void {
    if (!this.exited && this.paused) {
      this.child.kill('SIGCONT');
      this.paused = false;
    }
  }

  async close(): Promise<void> {
    if (this.exited) return;
    this.resume();
    const gone = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.send({ type: 'exit' } satisfies WorkerCommand);
    setTimeout(() => this.child.kill('SIGKILL'), 3000).unref();
    await gone;
  }
}
