/**
 * RunnerService: the one API every front end uses (CLI now; IPC, WebSocket and
 * HTTP adapters later). Its generate path is the single admission funnel:
 * validate → tokenize → scheduler.submit (accepted) → admitted → engine → release.
 * Nothing else in kvdesk starts engine work.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import {
  type BudgetCap,
  type ChatMessage,
  type ContextClip,
  type FinishReason,
  GenerateRequest,
  type GenerationResult,
  type RowResult,
  type StreamFrame,
} from '../../shared/contract';
import { type ErrorInfo, KvdeskError, toErrorInfo } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import type { AdmissionGrant, BudgetSnapshot, SchedulerEvent } from '../../shared/scheduler-types';
import { detectBackendsInChildProcess, usableProviders } from '../backends';
import { commonPrefix } from '../engine/feeds';
import type { SamplingParams } from '../engine/protocol';
import { loadModelSpec } from '../packages';
import { providerShortName } from '../packages/execution-providers';
import { createScheduler, deriveCpuBudget, type Scheduler } from '../scheduler';
import { applyChat, createStopMatcher, createStreamDecoder, loadTokenizer, type TextTokenizer } from '../tokenizer';
import { EngineClient } from './engine-client';

const CPU = 'CPUExecutionProvider';

/** Budget and engine settings of a host. */
export interface HostSettings {
  /** Explicit KV budget in bytes; overrides the derivation. */
  kvBudgetBytes?: number;
  /** Share of system memory the derivation starts from. */
  memoryFraction: number;
  /** Bytes kept back for the runtime, activations and the UI. */
  overheadBytes: number;
  maxRunning: number;
  maxQueue: number;
  intraOpNumThreads: number;
  /** Injected for tests; defaults to os.totalmem(). */
  totalMemoryBytes?: number;
  /** Injected clock (ms). */
  now?: () => number;
  /** Explicit engine entry (tests). */
  engineEntry?: string;
  /** Extra environment for the engine process (tests set failpoints here). */
  engineEnv?: Record<string, string>;
}

/** Defaults: half of RAM, 512 MiB overhead, 4 running requests, every core. */
export function defaultHostSettings(): HostSettings {
  return {
    memoryFraction: 0.5,
    overheadBytes: 512 * 1024 * 1024,
    maxRunning: 4,
    maxQueue: 256,
    intraOpNumThreads: Math.max(1, os.availableParallelism()),
  };
}

/** A model the host has loaded. */
export interface LoadedModel {
  id: string;
  spec: ModelSpec;
  tokenizer: TextTokenizer;
  loadMs: number;
}

/** Public view of a loaded model. */
export interface ModelInfo {
  id: string;
  spec: ModelSpec;
  loadMs: number;
}

/** A generation in flight, as returned to the caller. */
export interface GenerationHandle {
  requestId: string;
  /** Resolves with the result, or rejects with a KvdeskError. Never both. */
  result: Promise<GenerationResult>;
  cancel(reason?: 'user' | 'disconnect' | 'timeout' | 'shutdown'): void;
}

interface SessionMirror {
  modelId: string;
  /** Tokens the engine holds for this session (exactly what its KV encodes). */
  tokens: number[];
}

/** Resolves sampling settings: request, then package defaults, then kvdesk defaults. */
function resolveSampling(req: GenerateRequest, spec: ModelSpec): SamplingParams {
  const s = req.sampling ?? {};
  const d = spec.search;
  const temperature = s.temperature ?? d.temperature ?? 0.7;
  const greedy = s.greedy ?? (s.temperature === 0 || (s.temperature === undefined && d.doSample === false));
  return {
    greedy,
    temperature,
    topK: s.topK ?? d.topK ?? 0,
    topP: s.topP ?? d.topP ?? 1,
    minP: s.minP ?? d.minP ?? 0,
    repetitionPenalty: s.repetitionPenalty ?? d.repetitionPenalty ?? 1,
    seed: s.seed ?? Math.floor(Math.random() * 2 ** 31),
  };
}

/** The host's API. */
export class RunnerService {
  readonly scheduler: Scheduler;
  readonly engine: EngineClient;
  private readonly models = new Map<string, LoadedModel>();
  private readonly sessions = new Map<string, SessionMirror>();
  private readonly cancels = new Map<string, (reason: 'user' | 'disconnect' | 'timeout' | 'shutdown') => void>();
  private readonly generations = new Map<string, Generation>();
  private readonly settings: HostSettings;
  private readonly now: () => number;

  constructor(settings: Partial<HostSettings> = {}) {
    this.settings = { ...defaultHostSettings(), ...settings };
    this.now = this.settings.now ?? (() => performance.now());
    const budget = this.computeBudget();
    this.scheduler = createScheduler({
      limitBytes: budget.limitBytes,
      derivation: budget.derivation,
      maxRunning: this.settings.maxRunning,
      maxQueue: this.settings.maxQueue,
      now: () => Date.now(),
      onEvict: (sessionId) => {
        this.sessions.delete(sessionId);
        this.engine.dropSession(sessionId);
      },
    });
    this.engine = new EngineClient(
      { intraOpNumThreads: this.settings.intraOpNumThreads, executionProviders: ['cpu'] },
      {
        verifyGrant: (token) => this.scheduler.isGrantLive(token),
        onCrash: (reason) => this.onEngineCrash(reason),
        ...(this.settings.engineEntry ? { entry: this.settings.engineEntry } : {}),
        ...(this.settings.engineEnv ? { env: this.settings.engineEnv } : {}),
      },
    );
  }

  private computeBudget() {
    let weights = 0;
    for (const m of this.models.values()) weights += m.spec.weightsBytes;
    return deriveCpuBudget({
      totalMemoryBytes: this.settings.totalMemoryBytes ?? os.totalmem(),
      fraction: this.settings.memoryFraction,
      weightsBytes: weights,
      overheadBytes: this.settings.overheadBytes,
      ...(this.settings.kvBudgetBytes !== undefined ? { overrideBytes: this.settings.kvBudgetBytes } : {}),
    });
  }

  private refreshBudget(): void {
    const budget = this.computeBudget();
    const outcome = this.scheduler.reconfigure({ limitBytes: budget.limitBytes, derivation: budget.derivation });
    if (!outcome.ok) throw new KvdeskError(outcome.error.code, outcome.error.message, outcome.error.detail);
    this.failRejected(outcome.value.rejectedRequestIds);
  }

  /** Changes the budget settings live (UI controls, API). */
  configure(patch: {
    kvBudgetBytes?: number | null;
    maxRunning?: number;
    maxQueue?: number;
    memoryFraction?: number;
  }): void {
    if (patch.kvBudgetBytes === null) delete this.settings.kvBudgetBytes;
    else if (patch.kvBudgetBytes !== undefined) this.settings.kvBudgetBytes = patch.kvBudgetBytes;
    if (patch.memoryFraction !== undefined) this.settings.memoryFraction = patch.memoryFraction;
    if (patch.maxRunning !== undefined) this.settings.maxRunning = patch.maxRunning;
    if (patch.maxQueue !== undefined) this.settings.maxQueue = patch.maxQueue;
    const budget = this.computeBudget();
    const outcome = this.scheduler.reconfigure({
      limitBytes: budget.limitBytes,
      derivation: budget.derivation,
      maxRunning: this.settings.maxRunning,
      maxQueue: this.settings.maxQueue,
    });
    if (!outcome.ok) throw new KvdeskError(outcome.error.code, outcome.error.message, outcome.error.detail);
    this.failRejected(outcome.value.rejectedRequestIds);
  }

  /** Queued requests a lowered limit can never fit were refused by the scheduler: their callers must hear it. */
  private failRejected(ids: string[]): void {
    if (ids.length === 0) return;
    const recent = this.scheduler.snapshot().recent;
    for (const id of ids) {
      const error = recent.find((r) => r.id === id)?.error ?? {
        code: 'KV_BUDGET_EXCEEDED' as const,
        message: 'the KV budget was lowered below what this request needs',
      };
      this.generations.get(id)?.refused(error);
    }
  }

  /** Usable execution providers, probed once (in a child process) and only when a package offers a GPU variant. */
  private backends: Promise<string[]> | null = null;

  private usableBackends(): Promise<string[]> {
    this.backends ??= detectBackendsInChildProcess().then(
      (report) => usableProviders(report),
      () => [CPU],
    );
    return this.backends;
  }

  /**
   * Validates a package and loads it into the engine. Atomic: on any error
   * nothing stays loaded. `backend` picks an execution provider (default: the
   * best usable one the package offers); a GPU session that fails to start
   * falls back to CPU with a warning on the spec, when the package has a CPU variant.
   */
  async loadModel(dir: string, options: { id?: string; backend?: string } = {}): Promise<ModelInfo> {
    const started = this.now();
    const cpuOnly = await loadModelSpec(dir, { availableBackends: [CPU] });
    const offersGpu =
      (cpuOnly.variants ?? []).some((v) => v.ep !== CPU) || (options.backend !== undefined && options.backend !== CPU);
    const available = offersGpu ? await this.usableBackends() : [CPU];
    let spec = offersGpu
      ? await loadModelSpec(dir, {
          availableBackends: available,
          ...(options.backend ? { backend: options.backend } : {}),
        })
      : cpuOnly;
    const id = options.id ?? spec.id;
    const tokenizer = await loadTokenizer(spec.tokenizer, { vocabSize: spec.vocabSize });
    const ep = spec.executionProvider ?? CPU;
    try {
      await this.engine.load(id, { ...spec, id }, [providerShortName(ep) ?? 'cpu']);
    } catch (err) {
      const info = toErrorInfo(err);
      const canFallBack =
        ep !== CPU && info.code === 'MODEL_LOAD_FAILED' && (spec.variants ?? []).some((v) => v.ep === CPU);
      if (!canFallBack) throw err;
      spec = await loadModelSpec(dir, { availableBackends: [CPU], backend: CPU });
      spec = {
        ...spec,
        warnings: [
          ...spec.warnings,
          `${ep} could not start this model (${info.message}); kvdesk runs it on the CPU instead`,
        ],
      };
      await this.engine.load(id, { ...spec, id }, ['cpu']);
    }
    const model: LoadedModel = { id, spec: { ...spec, id }, tokenizer, loadMs: this.now() - started };
    this.models.set(id, model);
    this.refreshBudget();
    return { id, spec: model.spec, loadMs: model.loadMs };
  }

  /** Unloads a model; its idle sessions are closed. Refused while it has requests in flight. */
  async unloadModel(id: string): Promise<void> {
    if (!this.models.has(id)) throw new KvdeskError('MODEL_NOT_LOADED', `model ${id} is not loaded`);
    const snap = this.scheduler.snapshot();
    const busy = [...snap.queue, ...snap.running].filter((r) => r.modelId === id).length;
    if (busy > 0) {
      throw new KvdeskError('BAD_REQUEST', `model ${id} has ${busy} requests in flight; stop them before unloading`);
    }
    for (const [sid, s] of this.sessions) {
      if (s.modelId === id) {
        this.scheduler.closeSession(sid);
        this.sessions.delete(sid);
      }
    }
    this.models.delete(id);
    await this.engine.unload(id);
    this.refreshBudget();
  }

  /** Loaded models, in load order. */
  listModels(): ModelInfo[] {
    return [...this.models.values()].map((m) => ({ id: m.id, spec: m.spec, loadMs: m.loadMs }));
  }

  /** The tokenizer of a loaded model (CLI counts tokens with it). */
  tokenizerOf(id: string): TextTokenizer {
    const m = this.models.get(id);
    if (!m) throw new KvdeskError('MODEL_NOT_LOADED', `model ${id} is not loaded`);
    return m.tokenizer;
  }

  /** The scheduler's current budget snapshot. */
  snapshot(): BudgetSnapshot {
    return this.scheduler.snapshot();
  }

  /** Subscribes to scheduler events (timeline, metrics). */
  onSchedulerEvent(fn: (e: SchedulerEvent) => void): () => void {
    return this.scheduler.subscribe(fn);
  }

  private resolveModel(id: string | undefined): LoadedModel {
    if (id === undefined) {
      const first = this.models.values().next();
      if (first.done) throw new KvdeskError('MODEL_NOT_LOADED', 'no model is loaded: load a model package first');
      return first.value;
    }
    const m = this.models.get(id);
    if (!m) {
      const loaded = [...this.models.keys()].join(', ') || 'none';
      throw new KvdeskError('MODEL_NOT_LOADED', `model "${id}" is not loaded (loaded: ${loaded})`);
    }
    return m;
  }

  private buildRows(req: GenerateRequest, model: LoadedModel): number[][] {
    const tok = model.tokenizer;
    const spec = model.spec;
    let rows: number[][];
    if (req.promptIds) {
      tok.validateIds(req.promptIds);
      rows = [req.promptIds];
    } else if (req.promptIdRows) {
      for (const r of req.promptIdRows) tok.validateIds(r);
      rows = req.promptIdRows;
    } else if (req.prompts) {
      rows = req.prompts.map((p) => tok.encode(p, { addSpecialTokens: true }));
    } else {
      const messages: ChatMessage[] | undefined =
        req.messages ?? (req.chat ? [{ role: 'user', content: req.prompt ?? '' }] : undefined);
      if (messages) {
        const all: ChatMessage[] = req.system ? [{ role: 'system', content: req.system }, ...messages] : messages;
        rows = [applyChat(tok, spec.chatTemplate, all, { source: 'tokenizer_config.json field chat_template' }).ids];
      } else {
        rows = [tok.encode(req.prompt ?? '', { addSpecialTokens: true })];
      }
    }
    if (rows.some((r) => r.length === 0)) {
      throw new KvdeskError('BAD_REQUEST', 'the prompt is empty after tokenization: give at least one token');
    }
    const copies = req.rows ?? 1;
    if (copies > 1) {
      if (rows.length !== 1) throw new KvdeskError('BAD_REQUEST', 'rows > 1 needs a single prompt to copy');
      rows = Array.from({ length: copies }, () => (rows[0] as number[]).slice());
    }
    return rows;
  }

  /**
   * Starts a generation. Frames go to `sink` in order (accepted → admitted →
   * tokens* → done | error); the handle's promise settles with the same outcome.
   * Validation errors reject before any frame is sent.
   */
  generate(input: unknown, sink: (frame: StreamFrame) => void = () => {}): GenerationHandle {
    const requestId = randomUUID();
    const parsed = GenerateRequest.safeParse(input);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue && issue.path.length > 0 ? `field ${issue.path.join('.')}: ` : '';
      const err = new KvdeskError('BAD_REQUEST', `invalid generate request: ${where}${issue?.message ?? 'invalid'}`);
      return { requestId, result: Promise.reject(err), cancel: () => {} };
    }
    const req = parsed.data;
    let model: LoadedModel;
    let rows: number[][];
    try {
      model = this.resolveModel(req.model);
      rows = this.buildRows(req, model);
    } catch (err) {
      return { requestId, result: Promise.reject(err), cancel: () => {} };
    }
    let resolveResult!: (r: GenerationResult) => void;
    let rejectResult!: (e: Error) => void;
    const result = new Promise<GenerationResult>((res, rej) => {
      resolveResult = res;
      rejectResult = rej;
    });
    const run = new Generation(this, requestId, req, model, rows, sink, resolveResult, rejectResult);
    this.cancels.set(requestId, (reason) => run.cancel(reason));
    this.generations.set(requestId, run);
    const forget = () => {
      this.cancels.delete(requestId);
      this.generations.delete(requestId);
    };
    result.then(forget, forget);
    run.submit();
    return { requestId, result, cancel: (reason = 'user') => run.cancel(reason) };
  }

  /** Cancels a request by id (queued or running). Returns false if it is unknown or already over. */
  cancel(requestId: string, reason: 'user' | 'disconnect' | 'timeout' | 'shutdown' = 'user'): boolean {
    const c = this.cancels.get(requestId);
    if (!c) return false;
    c(reason);
    return true;
  }

  /** Drops a chat session's retained KV (thread deleted). */
  closeSession(sessionId: string): void {
    this.scheduler.closeSession(sessionId);
    this.sessions.delete(sessionId);
    this.engine.dropSession(sessionId);
  }

  /** @internal used by Generation. */
  sessionMirror(sessionId: string): SessionMirror | undefined {
    return this.sessions.get(sessionId);
  }

  /** @internal used by Generation. */
  setSessionMirror(sessionId: string, mirror: SessionMirror | undefined): void {
    if (mirror) this.sessions.set(sessionId, mirror);
    else this.sessions.delete(sessionId);
  }

  private onEngineCrash(reason: string): void {
    const error: ErrorInfo = { code: 'ENGINE_FAILED', message: reason };
    // In-flight generations were failed by the engine client; the engine's session KV is gone too.
    for (const id of this.models.keys()) this.scheduler.failModel(id, error);
    this.sessions.clear();
    // Bring the engine back with the same models so the app keeps working.
    const models = [...this.models.values()];
    void (async () => {
      for (const m of models) {
        try {
          await this.engine.load(m.id, m.spec, [providerShortName(m.spec.executionProvider ?? CPU) ?? 'cpu']);
        } catch {
          this.models.delete(m.id);
        }
      }
      this.refreshBudget();
    })();
  }

  /** Stops every request and the engine process. */
  async close(): Promise<void> {
    for (const c of [...this.cancels.values()]) c('shutdown');
    await this.engine.close();
  }
}

/** One request's journey through the funnel. */
class Generation {
  private grant: AdmissionGrant | null = null;
  private acceptedSent = false;
  private pendingGrant: AdmissionGrant | null = null;
  private ended = false;
  private cancelReason: 'user' | 'disconnect' | 'timeout' | 'shutdown' | null = null;
  private readonly rowIds: number[][];
  private readonly rowText: string[];
  private readonly rowStopped: Array<FinishReason | null>;
  private readonly decoders;
  private readonly matchers;
  private readonly started: number;
  private admittedAt = 0;
  private firstTokenAt = 0;
  private lastTokenAt = 0;
  private generated = 0;
  private reused = 0;
  private promptTokens: number;
  private clipped: ContextClip | undefined;
  private budgetCap: BudgetCap | undefined;

  constructor(
    private readonly host: RunnerService,
    private readonly id: string,
    private readonly req: GenerateRequest,
    private readonly model: LoadedModel,
    private readonly rows: number[][],
    private readonly sink: (frame: StreamFrame) => void,
    private readonly resolve: (r: GenerationResult) => void,
    private readonly reject: (e: Error) => void,
  ) {
    this.started = performance.now();
    this.rowIds = rows.map(() => []);
    this.rowText = rows.map(() => '');
    this.rowStopped = rows.map(() => null);
    this.decoders = rows.map(() => createStreamDecoder(model.tokenizer, { skipSpecialTokens: true }));
    this.matchers = rows.map(() => createStopMatcher(req.stop ?? []));
    this.promptTokens = Math.max(...rows.map((r) => r.length));
  }

  private emit(frame: StreamFrame): void {
    try {
      this.sink(frame);
    } catch {
      // A broken sink (closed socket) must not break the funnel; the transport cancels separately.
    }
  }

  private fail(err: unknown): void {
    if (this.ended) return;
    this.ended = true;
    const info = toErrorInfo(err);
    this.emit({ type: 'error', requestId: this.id, error: info });
    this.reject(new KvdeskError(info.code, info.message, info.detail));
  }

  submit(): void {
    const spec = this.model.spec;
    const sessionId = this.req.sessionId;
    let promptTokens = this.promptTokens;
    if (sessionId) {
      if (this.rows.length !== 1) {
        this.fail(new KvdeskError('BAD_REQUEST', 'a session turn has exactly one row'));
        return;
      }
      const mirror = this.host.sessionMirror(sessionId);
      if (mirror && mirror.modelId === this.model.id) {
        const row = this.rows[0] as number[];
        this.reused = Math.min(commonPrefix(mirror.tokens, row), row.length - 1);
        promptTokens = row.length - this.reused;
      }
    }
    const maxNewTokens = this.req.maxNewTokens ?? spec.search.maxNewTokens ?? 256;
    const submitted = this.host.scheduler.submit(
      {
        id: this.id,
        modelId: this.model.id,
        bpt: spec.bpt,
        contextLength: spec.contextLength,
        rows: this.rows.length,
        promptTokens,
        maxNewTokens,
        ...(this.req.priority !== undefined ? { priority: this.req.priority } : {}),
        ...(sessionId ? { sessionId } : {}),
        ...(this.req.threadId ? { threadId: this.req.threadId } : {}),
      },
      {
        onAdmitted: (grant) => {
          if (this.acceptedSent) this.start(grant);
          else this.pendingGrant = grant;
        },
      },
    );
    if (!submitted.ok) {
      this.fail(submitted.error);
      return;
    }
    this.clipped = submitted.value.clipped;
    this.emit({
      type: 'accepted',
      requestId: this.id,
      modelId: this.model.id,
      promptTokens: this.promptTokens,
      rows: this.rows.length,
      maxNewTokens: this.clipped?.clippedMaxTokens ?? maxNewTokens,
      ...(this.clipped ? { clipped: this.clipped } : {}),
    });
    this.acceptedSent = true;
    if (this.req.timeoutMs !== undefined) {
      // Counts from acceptance: time spent queued is part of what the caller waits for.
      const timer = setTimeout(() => this.cancel('timeout'), this.req.timeoutMs);
      timer.unref();
    }
    if (this.pendingGrant) {
      const g = this.pendingGrant;
      this.pendingGrant = null;
      this.start(g);
    }
  }

  private start(grant: AdmissionGrant): void {
    this.grant = grant;
    this.admittedAt = performance.now();
    this.budgetCap = grant.budgetCap;
    this.emit({
      type: 'admitted',
      requestId: this.id,
      reservedBytes: grant.reservedBytes,
      admittedMaxTokens: grant.admittedMaxTokens,
      ...(grant.budgetCap ? { budgetCap: grant.budgetCap } : {}),
    });
    if (this.cancelReason) {
      this.host.scheduler.cancel(this.id, this.cancelReason);
      this.fail(this.cancelError('before it started'));
      return;
    }
    const spec = this.model.spec;
    try {
      this.host.engine.generate(
        grant.token,
        {
          requestId: this.id,
          modelId: this.model.id,
          rows: this.rows,
          maxNewTokens: grant.admittedMaxTokens,
          sampling: resolveSampling(this.req, spec),
          eosTokenIds: spec.eosTokenIds,
          ...(this.req.sessionId ? { sessionId: this.req.sessionId } : {}),
        },
        {
          onStarted: (_prefill, reused) => {
            this.reused = reused;
          },
          // The reservation covers the session prefix too, so the whole KV counts as used.
          onTokens: (ids, kvBytes) => this.onTokens(ids, kvBytes),
          onDone: (done) => this.onDone(done.finishReason, done.sessionTokens, done.kvBytes),
          onFailed: (error) => {
            this.host.scheduler.fail(this.id, error);
            if (this.req.sessionId) this.host.setSessionMirror(this.req.sessionId, undefined);
            this.fail(new KvdeskError(error.code, error.message, error.detail));
          },
        },
      );
    } catch (err) {
      this.host.scheduler.fail(this.id, toErrorInfo(err));
      this.fail(err);
    }
  }

  private onTokens(ids: number[][], usedBytes: number): void {
    if (this.ended) return;
    const now = performance.now();
    if (this.firstTokenAt === 0) {
      this.firstTokenAt = now;
      this.host.scheduler.firstToken(this.id);
    }
    this.lastTokenAt = now;
    const frameRows: Array<{ ids: number[]; text: string }> = [];
    let maxRowTokens = 0;
    for (let r = 0; r < ids.length; r++) {
      const fresh: number[] = [];
      let text = '';
      for (const id of ids[r] ?? []) {
        if (this.rowStopped[r]) break;
        fresh.push(id);
        (this.rowIds[r] as number[]).push(id);
        const piece = this.decoders[r]?.push(id) ?? '';
        const m = this.matchers[r]?.push(piece);
        if (m) {
          text += m.emit;
          if (m.stopped) this.rowStopped[r] = 'stop';
        }
      }
      this.rowText[r] += text;
      frameRows.push({ ids: fresh, text });
      maxRowTokens = Math.max(maxRowTokens, (this.rowIds[r] as number[]).length);
    }
    this.generated = maxRowTokens;
    this.host.scheduler.progress(this.id, { generatedTokens: maxRowTokens, usedBytes });
    this.emit({ type: 'tokens', requestId: this.id, rows: frameRows });
    if (this.rowStopped.every((s) => s !== null)) this.host.engine.cancel(this.id, 'stop');
  }

  private onDone(engineReason: FinishReason, sessionTokens: number, kvBytes: number): void {
    if (this.ended) return;
    const sessionId = this.req.sessionId;
    // Flush text held back by the decoders and stop matchers.
    const tail: Array<{ ids: number[]; text: string }> = [];
    for (let r = 0; r < this.rows.length; r++) {
      let text = '';
      if (!this.rowStopped[r]) {
        const m = this.matchers[r]?.push(this.decoders[r]?.flush() ?? '');
        text += m?.emit ?? '';
        if (m?.stopped) this.rowStopped[r] = 'stop';
        if (!this.rowStopped[r]) text += this.matchers[r]?.flush() ?? '';
      }
      this.rowText[r] += text;
      tail.push({ ids: [], text });
    }
    if (tail.some((t) => t.text.length > 0)) this.emit({ type: 'tokens', requestId: this.id, rows: tail });

    const cancelled = engineReason === 'cancelled' || (this.cancelReason !== null && engineReason !== 'eos');
    const rowsOut: RowResult[] = this.rows.map((_, r) => ({
      tokenIds: this.rowIds[r] as number[],
      text: this.rowText[r] as string,
      finishReason: this.rowStopped[r] ?? (cancelled ? 'cancelled' : this.rowFinish(r, engineReason)),
    }));
    const finishReason = (rowsOut[0] as RowResult).finishReason;
    if (cancelled) {
      this.host.scheduler.cancel(this.id, this.cancelReason ?? 'user');
      if (sessionId) this.host.setSessionMirror(sessionId, undefined);
      this.fail(this.cancelError(`after ${this.generated} tokens`));
      return;
    }
    const schedReason = finishReason === 'stop' ? 'stop' : finishReason === 'eos' ? 'eos' : 'length';
    if (sessionId) {
      const row = this.rows[0] as number[];
      const tokens = [...row, ...(this.rowIds[0] as number[])].slice(0, sessionTokens);
      this.host.setSessionMirror(sessionId, { modelId: this.model.id, tokens });
      this.host.scheduler.finish(this.id, schedReason, {
        sessionTokens: tokens.length,
        generatedTokens: this.generated,
      });
    } else {
      this.host.scheduler.finish(this.id, schedReason, { generatedTokens: this.generated });
    }
    this.ended = true;
    const end = performance.now();
    const decodeMs = this.lastTokenAt - this.firstTokenAt;
    const tps =
      this.generated > 1 && decodeMs > 0
        ? ((this.generated - 1) * 1000) / decodeMs
        : this.generated > 0
          ? (this.generated * 1000) / Math.max(1e-3, end - this.admittedAt)
          : 0;
    const result: GenerationResult = {
      requestId: this.id,
      modelId: this.model.id,
      tokenIds: rowsOut[0]?.tokenIds ?? [],
      text: rowsOut[0]?.text ?? '',
      finishReason,
      rows: rowsOut,
      promptTokens: this.promptTokens,
      reusedTokens: this.reused,
      bpt: this.model.spec.bpt,
      kvBytes,
      reservedBytes: this.grant?.reservedBytes ?? 0,
      ...(this.budgetCap ? { budgetCap: this.budgetCap } : {}),
      ...(this.clipped ? { clipped: this.clipped } : {}),
      timings: {
        queueMs: this.admittedAt - this.started,
        ttftMs: this.firstTokenAt > 0 ? this.firstTokenAt - this.started : 0,
        totalMs: end - this.started,
        tokensPerSecond: tps,
      },
    };
    this.emit({ type: 'done', requestId: this.id, result });
    this.resolve(result);
  }

  private rowFinish(r: number, engineReason: FinishReason): FinishReason {
    const ids = this.rowIds[r] as number[];
    const last = ids[ids.length - 1];
    if (last !== undefined && this.model.spec.eosTokenIds.includes(last)) return 'eos';
    return engineReason === 'eos' ? 'length' : engineReason;
  }

  /** The scheduler refused this queued request (the limit was lowered under its minimum). */
  refused(error: ErrorInfo): void {
    if (this.grant) return;
    this.fail(new KvdeskError(error.code, error.message, error.detail));
  }

  private cancelError(when: string): KvdeskError {
    if (this.cancelReason === 'timeout') {
      return new KvdeskError('TIMEOUT', `the request timed out ${when} (limit ${this.req.timeoutMs} ms)`, {
        timeoutMs: this.req.timeoutMs ?? null,
        generatedTokens: this.generated,
      });
    }
    return new KvdeskError('CANCELLED', `the request was cancelled ${when} (${this.cancelReason ?? 'user'})`, {
      generatedTokens: this.generated,
    });
  }

  cancel(reason: 'user' | 'disconnect' | 'timeout' | 'shutdown'): void {
    if (this.ended || this.cancelReason) return;
    this.cancelReason = reason;
    if (!this.grant) {
      // Still queued (or not yet accepted): no engine work exists, the scheduler drops it.
      if (this.acceptedSent) {
        this.host.scheduler.cancel(this.id, reason);
        this.fail(this.cancelError('while queued'));
      }
      return;
    }
    this.host.engine.cancel(this.id, 'cancelled');
  }
}
