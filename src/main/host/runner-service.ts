/**
 * RunnerService: the one API every front end uses (CLI now; IPC, WebSocket and
 * HTTP adapters later). Its generate path is the single admission funnel:
 * validate → tokenize → scheduler.submit (accepted) → admitted → engine → release.
 * Nothing else in kvdesk starts engine work.
 */

import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PromptMeasure } from '../../shared/api';
import {
  type BudgetCap,
  type ChatMessage,
  type ContextClip,
  type ContextDrop,
  type FinishReason,
  type GeneratedTokenLogprob,
  GenerateRequest,
  type GenerationResult,
  type LookupCount,
  type RowResult,
  type StreamFrame,
  type TokenLogprob,
  type ToolCall,
  type ToolCallDelta,
} from '../../shared/contract';
import { totalCounters } from '../../shared/counters';
import { type ErrorInfo, KvdeskError, toErrorInfo } from '../../shared/errors';
import { type ModelSpec, staticPositions } from '../../shared/model-spec';
import { PROMPT_CACHE_PREFIX } from '../../shared/prompt-cache';
import type { ReasoningSpec } from '../../shared/reasoning';
import type {
  AdmissionGrant,
  BudgetSnapshot,
  DeviceBudgetSnapshot,
  ReloadWait,
  SchedulerCounters,
  SchedulerEvent,
} from '../../shared/scheduler-types';
import { type BackendReport, detectBackendsInChildProcess, usableProviders } from '../backends';
import { deviceKey, type NvidiaMemoryResult, readNvidiaGpuMemory } from '../backends/device-memory';
import { DEFAULT_GPU_FRACTION, DEFAULT_GPU_OVERHEAD_BYTES } from '../backends/variant-fit';
import { packTokens } from '../engine/json-constraint';
import { compileSchema, SchemaError } from '../engine/json-schema';
import { commonPrefix } from '../engine/prefix';
import type {
  EngineEvent,
  EngineLoadResult,
  EngineLookupCount,
  LogitsPositions,
  SamplingParams,
  StepLogprob,
} from '../engine/protocol';
import { detectLayout, loadModelSpec, variantOption as variantOf } from '../packages';
import { backendProvider, providerShortName } from '../packages/execution-providers';
import type { LoadOptions } from '../packages/load-options';
import { withModelId } from '../packages/spec-assembly';
import { createScheduler, formatBytesApart, type Scheduler } from '../scheduler';
import {
  type AnswerPart,
  createHarmonySplitter,
  createReasoningSplitter,
  createStopMatcher,
  createStreamDecoder,
  encodeChat,
  loadTokenizer,
  type ReasoningSplitter,
  type ReasoningState,
  renderChat,
  type TextTokenizer,
} from '../tokenizer';
import { afterLongTexts, deferringLongTexts, LongTextPending, MAX_DEFERRALS } from '../tokenizer/off-thread';
import {
  createToolCallFilter,
  type ToolCallFilter,
  type ToolCallOutput,
  toolCallFormat,
  toolChatTurns,
} from '../tokenizer/tool-calls';
import { checkedTemplate, differsOnlyInTemplate, withChatTemplate } from './chat-template-pick';
import { dropOldest, promptUpTo, turnStarts } from './context-fit';
import { deriveHostDeviceBudget } from './device-budgets';
import { EngineClient } from './engine-client';
import {
  answerRoomBudget,
  closeLines,
  closingSuffix,
  jsonOutput,
  type ReasoningPlan,
  reasoningPlan,
  reasonsBeforeCall,
  thinkingBudgetOf,
  thinkingVars,
} from './reasoning-plan';
import { bareCallTest, nativeTemplate, planTools, type ToolPlan } from './tool-plan';

const CPU = 'CPUExecutionProvider';
/** Max new tokens of a request that names none, in a package whose generation config names none either. */
const DEFAULT_MAX_NEW_TOKENS = 256;
/**
 * The same for a thinking model's chat reply that reasons: its reasoning alone runs to hundreds of tokens, so 256
 * would cut nearly every reply before its answer. A quarter of the context where that is less (not below 256), so
 * that a small context is not mostly kept for the reply (history dropped, the limit clipped).
 */
const DEFAULT_MAX_NEW_TOKENS_REASONING = 2048;

/**
 * A request's reply limit: its own, else the package's (generation_config.json), else the default — the larger one
 * where the reply reasons (a thinking model's chat reply, thinking not off, no forced call).
 */
function maxNewTokensOf(req: GenerateRequest, spec: ModelSpec, reasons: boolean): number {
  if (req.maxNewTokens !== undefined) return req.maxNewTokens;
  if (spec.search.maxNewTokens !== undefined) return spec.search.maxNewTokens;
  if (!reasons || req.thinking === false) return DEFAULT_MAX_NEW_TOKENS;
  return Math.max(DEFAULT_MAX_NEW_TOKENS, Math.min(DEFAULT_MAX_NEW_TOKENS_REASONING, spec.contextLength >> 2));
}

/** Budget and engine settings of a host. */
export interface HostSettings {
  /** Explicit KV budget of the CPU in bytes; overrides the derivation. */
  kvBudgetBytes?: number;
  /** Explicit KV budgets of other devices (`cuda:0` → bytes). */
  deviceKvBudgetBytes?: Record<string, number>;
  /** Memory of GPUs kvdesk cannot query (`webgpu:0`, `dml:0` → bytes). */
  deviceMemoryBytes?: Record<string, number>;
  /** Share of a GPU's memory kvdesk may use. */
  gpuMemoryFraction: number;
  /** Allowance on a GPU for the runtime's workspace and activations. */
  gpuOverheadBytes: number;
  /** Reads NVIDIA GPU memory (default: nvidia-smi); injected by tests. */
  readNvidiaMemory?: () => Promise<NvidiaMemoryResult>;
  /**
   * Tests only: the device a model's KV is budgeted on, instead of the one its
   * execution provider places it on. The engine still runs the model where its
   * provider says; this lets a CPU-only machine exercise several device budgets.
   */
  budgetDeviceOf?: (spec: ModelSpec) => string;
  /** Share of system memory the derivation starts from. */
  memoryFraction: number;
  /** Bytes kept back for the runtime, activations and the UI. */
  overheadBytes: number;
  maxRunning: number;
  maxQueue: number;
  intraOpNumThreads: number;
  /** Prompt tokens (rows × positions) one prefill run computes at most; unset: the engine's default (256). */
  prefillChunkTokens?: number;
  /** false: load graphs as they are, scoring every position (A/B runs, tests); default true. */
  lastPositionLogits?: boolean;
  /** Lookup decoding: tokens one check drafts at most (0: off); unset: the engine's default (4). */
  lookupDraftTokens?: number;
  /** Prompt caches (anonymous sessions) kept for requests with `promptCache`; 0 turns the cache off. */
  promptCacheSessions: number;
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
    gpuMemoryFraction: DEFAULT_GPU_FRACTION,
    gpuOverheadBytes: DEFAULT_GPU_OVERHEAD_BYTES,
    promptCacheSessions: DEFAULT_PROMPT_CACHE_SESSIONS,
  };
}

let nextLoadKey = 1;

/**
 * An engine crash and its recovery, as the host's log says them: `crashed` (what died, the requests that ran on it
 * and failed, those queued and whether they wait for their models), then each model `back` or `lost`.
 */
export type EngineRecovery =
  | {
      type: 'crashed';
      reason: string;
      models: string[];
      failedRequests: number;
      queuedRequests: number;
      queuedWait: boolean;
    }
  | { type: 'back'; modelId: string; ms: number }
  | { type: 'lost'; modelId: string; message: string };

/**
 * Engine crashes in a row (each before the models it was loading back were all in) that a queued request waits
 * through; at the next it is refused, so a request never waits for ever on an engine that keeps failing.
 */
const CRASHES_WAITED = 3;

/** How long closing waits for running requests to end as a shutdown before it stops the engine. */
const CLOSE_GRACE_MS = 2000;

/** Prompt caches kept by default: each holds one conversation's KV, evictable like any idle session. */
export const DEFAULT_PROMPT_CACHE_SESSIONS = 16;

/** A model the host has loaded. */
export interface LoadedModel {
  id: string;
  spec: ModelSpec;
  tokenizer: TextTokenizer;
  loadMs: number;
  /** The device whose budget its KV draws from (`cpu`, `cuda:0`, …). */
  device: string;
  logits: LogitsPositions;
  /** Its requests run as one batch padded to the longest row (the scheduler charges the padding). */
  batches: boolean;
  /** Its vocabulary's bytes for JSON mode, built on first use. */
  tokenBytes?: { bytes: Uint8Array; offsets: Uint32Array; special: number[] };
  /** Tells this load from another of the same id (the engine's token table is per load). */
  loadKey: number;
}

/**
 * Every id's bytes and the ids that are never JSON text (special tokens, and end tokens even where the tokenizer
 * does not mark them special), for JSON mode. Only ids the tokenizer has are in the table: the engine never lets a
 * reply take an id past it (it has no text), so a vocabulary larger than the tokenizer's costs nothing here.
 */
function tokenBytesOf(model: LoadedModel): { bytes: Uint8Array; offsets: Uint32Array; special: number[] } {
  const tok = model.tokenizer;
  const ids = Array.from({ length: Math.min(model.spec.vocabSize, tok.vocabSize) }, (_, id) => id);
  const pieces = ids.map((id) => (tok.idToToken(id) === undefined ? [] : tok.tokenPiece(id).bytes));
  const ends = new Set(model.spec.eosTokenIds);
  return { ...packTokens(pieces), special: ids.filter((id) => tok.isSpecial(id) || ends.has(id)) };
}

/** One device's budget: its own scheduler, so models on different devices never compete for bytes. */
interface DeviceState {
  key: string;
  scheduler: Scheduler;
  /** nvidia-smi's reading, taken before any of kvdesk's weights were placed on the GPU. */
  nvidia?: NvidiaMemoryResult;
  unsubscribe: () => void;
}

/** Public view of a loaded model. */
export interface ModelInfo {
  id: string;
  spec: ModelSpec;
  loadMs: number;
  /** Whether the engine feeds the LM head the last position only, and what it changed or why not. */
  logits: LogitsPositions;
  /** The person is loading it again (another variant or backend): requests on it wait until that is in. */
  reloading?: boolean;
}

/** A generation in flight, as returned to the caller. */
export interface GenerationHandle {
  requestId: string;
  /** Resolves with the result, or rejects with a KvdeskError. Never both. */
  result: Promise<GenerationResult>;
  cancel(reason?: 'user' | 'disconnect' | 'timeout' | 'shutdown'): void;
}

const CPU_DEVICE = 'cpu';

interface SessionMirror {
  modelId: string;
  /** Tokens the engine holds for this session (exactly what its KV encodes). */
  tokens: number[];
  /** How many of them were the prompt of the turn that left them (the rest is its reply). */
  promptTokens: number;
  /** The load of the model that computed them (a package loaded again under the same id has another). */
  loadKey: number;
}

/** Resolves sampling settings: request, then package defaults, then kvdesk defaults. */
function resolveSampling(req: GenerateRequest, spec: ModelSpec): SamplingParams {
  const s = req.sampling ?? {};
  const d = spec.search;
  const temperature = s.temperature ?? d.temperature ?? 0.7;
  const greedy = s.greedy ?? (s.temperature === 0 || (s.temperature === undefined && d.doSample === false));
  const topP = s.topP ?? d.topP ?? 1;
  return {
    greedy,
    temperature,
    // A nucleus of probability 0 holds the likeliest token alone: top-k 1, without sorting the vocabulary.
    topK: topP === 0 ? 1 : (s.topK ?? d.topK ?? 0),
    topP: topP === 0 ? 1 : topP,
    minP: s.minP ?? d.minP ?? 0,
    repetitionPenalty: s.repetitionPenalty ?? d.repetitionPenalty ?? 1,
    repetitionWindow: s.repetitionWindow ?? 0,
    frequencyPenalty: s.frequencyPenalty ?? 0,
    presencePenalty: s.presencePenalty ?? 0,
    logitBias: Object.entries(s.logitBias ?? {}).map(([id, bias]) => [Number(id), bias]),
    seed: s.seed ?? Math.floor(Math.random() * 2 ** 31),
    // Several prompts: each prompt's copies are seeded as a request of that prompt alone would be.
    ...(req.prompts || req.promptIdRows ? { copies: req.rows ?? 1 } : {}),
  };
}

/**
 * The tokens that close a reasoning the budget ends, as the model's template writes them (`closeLines`); Harmony's
 * close (the analysis message's end and the final one's header) as it is. Where the vocabulary holds the marker as
 * one token but encoding the text does not give it (a pre-tokenizer splits `</think>` into pieces), that token, as
 * the model writes it.
 */
export function closeIds(tok: TextTokenizer, spec: Pick<ReasoningSpec, 'close' | 'harmony'>): number[] {
  const close = spec.close;
  const plain = (s: string) => tok.encode(s, { addSpecialTokens: false });
  if (spec.harmony) return plain(close);
  const [before, after] = closeLines(close);
  const text = plain(`${before}${close}${after}`);
  const id = tok.tokenToId(close);
  if (id === undefined || text.includes(id)) return text;
  return [...(before ? plain(before) : []), id, ...(after ? plain(after) : [])];
}

/**
 * gpt-oss's reply held to JSON after its analysis: the analysis ends at its `<|end|>`, then the final message's
 * header is written for the model and the JSON is its body, right after it (no white space, no other message).
 */
function heldHarmony(tok: TextTokenizer, spec: ReasoningSpec): { gap?: number; afterClose?: number[] } {
  if (!spec.harmony) return {};
  // Harmony's close is the analysis's end and the final message's header.
  const header = spec.close.slice(spec.close.indexOf('<|start|>'));
  return { gap: 0, afterClose: tok.encode(header, { addSpecialTokens: false }) };
}

/** A schema kvdesk cannot enforce is refused, naming the place in it. */
function checkJsonSchema(req: GenerateRequest): void {
  if (req.jsonSchema === undefined) return;
  if (req.responseFormat === 'text') {
    throw new KvdeskError('BAD_REQUEST', 'jsonSchema asks for JSON replies, but responseFormat says text: drop one.');
  }
  try {
    compileSchema(req.jsonSchema);
  } catch (err) {
    if (!(err instanceof SchemaError)) throw err;
    throw new KvdeskError(
      'BAD_REQUEST',
      `jsonSchema (json_schema.schema) is not one kvdesk can enforce: ${err.message}`,
      {
        field: `jsonSchema${err.path.slice('schema'.length)}`,
      },
    );
  }
}

/** A request the contract refuses, naming the first field at fault. */
function invalidRequest(error: { issues: Array<{ path: PropertyKey[]; message: string }> }): KvdeskError {
  const issue = error.issues[0];
  if (!issue || issue.path.length === 0) {
    return new KvdeskError('BAD_REQUEST', `invalid generate request: ${issue?.message ?? 'invalid'}`);
  }
  // `tools[0].name`, as the other refusals name fields.
  const field = issue.path
    .map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i > 0 ? '.' : ''}${String(p)}`))
    .join('');
  return new KvdeskError('BAD_REQUEST', `invalid generate request: field ${field}: ${issue.message}`, { field });
}

/** A logit bias for an id the model has no logit for is refused, not ignored. */
function checkLogitBias(req: GenerateRequest, vocabSize: number): void {
  for (const key of Object.keys(req.sampling?.logitBias ?? {})) {
    const id = Number(key);
    if (!Number.isSafeInteger(id) || id >= vocabSize) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `sampling.logitBias (logit_bias): token id ${key} is outside the model's vocabulary of ${vocabSize} ids (0–${vocabSize - 1}).`,
        { id: key, modelVocabSize: vocabSize, field: 'sampling.logitBias' },
      );
    }
  }
}

/**
 * A reply that continues the final assistant message: it must be there, and it cannot also be a forced tool call
 * or JSON mode (both write a reply from its start).
 */
function checkContinuation(req: GenerateRequest, messages: ChatMessage[], tools: ToolPlan | undefined): void {
  const final = messages[messages.length - 1];
  if (final?.role !== 'assistant') {
    throw new KvdeskError(
      'BAD_REQUEST',
      'continueFinal continues a final assistant message: end the messages with the reply to continue',
      { field: 'messages' },
    );
  }
  if (final.toolCalls?.length) {
    throw new KvdeskError(
      'BAD_REQUEST',
      "the final assistant message has tool calls: only a reply of text can be continued (send the calls' results, or the reply without its calls)",
      { field: 'messages' },
    );
  }
  if (tools?.forced || req.responseFormat === 'json' || req.jsonSchema !== undefined) {
    throw new KvdeskError(
      'BAD_REQUEST',
      'a reply that continues a final assistant message cannot also be a forced tool call or JSON mode (they write the reply from its start)',
      { field: 'messages' },
    );
  }
}

/** The host's API. */
export class RunnerService {
  readonly engine: EngineClient;
  /** One budget per device, the CPU's first; a GPU's exists while a model is placed there. */
  private readonly devices = new Map<string, DeviceState>();
  private readonly eventListeners = new Set<(e: SchedulerEvent) => void>();
  /**
   * Called when a model starts or ends loading again (`model`), and when a request starts or ends waiting for one
   * (`waits`).
   */
  private readonly reloadListeners = new Set<(what: 'model' | 'waits') => void>();
  /** Told of each engine crash and of how the recovery went (the host logs them). */
  private readonly recoveryListeners = new Set<(e: EngineRecovery) => void>();
  /** Requests waiting for their model to load again, by id: not in any scheduler yet (they reserve nothing). */
  private readonly reloadWaits = new Map<string, ReloadWait>();
  private readonly models = new Map<string, LoadedModel>();
  private readonly sessions = new Map<string, SessionMirror>();
  /** Each prompt cache's model, least recently picked first (closed beyond the limit). */
  private readonly promptCaches = new Map<string, string>();
  private readonly cancels = new Map<string, (reason: 'user' | 'disconnect' | 'timeout' | 'shutdown') => void>();
  private readonly generations = new Map<string, Generation>();
  private readonly settings: HostSettings;
  private readonly now: () => number;

  constructor(settings: Partial<HostSettings> = {}) {
    this.settings = { ...defaultHostSettings(), ...settings };
    this.now = this.settings.now ?? (() => performance.now());
    this.addDevice(CPU_DEVICE);
    this.engine = new EngineClient(
      {
        intraOpNumThreads: this.settings.intraOpNumThreads,
        executionProviders: ['cpu'],
        ...(this.settings.prefillChunkTokens !== undefined
          ? { prefillChunkTokens: this.settings.prefillChunkTokens }
          : {}),
        ...(this.settings.lastPositionLogits === false ? { lastPositionLogits: false } : {}),
        ...(this.settings.lookupDraftTokens !== undefined
          ? { lookupDraftTokens: this.settings.lookupDraftTokens }
          : {}),
      },
      {
        verifyGrant: (token) => [...this.devices.values()].some((d) => d.scheduler.isGrantLive(token)),
        onCrash: (reason) => this.onEngineCrash(reason),
        ...(this.settings.engineEntry ? { entry: this.settings.engineEntry } : {}),
        ...(this.settings.engineEnv ? { env: this.settings.engineEnv } : {}),
      },
    );
  }

  /** The CPU's scheduler (the budget every CPU model draws from). */
  get scheduler(): Scheduler {
    return (this.devices.get(CPU_DEVICE) as DeviceState).scheduler;
  }

  private addDevice(key: string, nvidia?: NvidiaMemoryResult): DeviceState {
    const state = { key, ...(nvidia === undefined ? {} : { nvidia }) } as DeviceState;
    const budget = this.computeBudget(state);
    state.scheduler = createScheduler({
      limitBytes: budget.limitBytes,
      derivation: budget.derivation,
      maxRunning: this.settings.maxRunning,
      maxQueue: this.settings.maxQueue,
      now: () => Date.now(),
      onEvict: (sessionId) => {
        this.sessions.delete(sessionId);
        this.engine.dropSession(sessionId);
        // A prompt cache that lost its KV holds nothing to continue: it goes (after the scheduler's step).
        if (sessionId.startsWith(PROMPT_CACHE_PREFIX)) queueMicrotask(() => this.prunePromptCaches());
      },
    });
    state.unsubscribe = state.scheduler.subscribe((e) => {
      for (const fn of this.eventListeners) fn(e);
    });
    this.devices.set(key, state);
    return state;
  }

  /** The device a model's KV lives on: where its execution provider places it. */
  private deviceOf(spec: ModelSpec): string {
    return this.settings.budgetDeviceOf?.(spec) ?? deviceKey(spec.executionProvider ?? CPU);
  }

  /** Creates a device's budget before a model goes there; NVIDIA memory is read now, before the weights land. */
  private async ensureDevice(key: string): Promise<void> {
    if (this.devices.has(key)) return;
    const nvidia = key.startsWith('cuda:')
      ? await (this.settings.readNvidiaMemory ?? readNvidiaGpuMemory)()
      : undefined;
    if (!this.devices.has(key)) this.addDevice(key, nvidia);
  }

  /** A GPU's budget goes away with its last model (and its last session), so a later load reads its memory afresh. */
  private dropDeviceIfUnused(key: string): void {
    const d = this.devices.get(key);
    if (!d || key === CPU_DEVICE) return;
    if ([...this.models.values()].some((m) => m.device === key)) return;
    const snap = d.scheduler.snapshot();
    if (snap.queue.length + snap.running.length + snap.sessions.length > 0) return;
    d.unsubscribe();
    this.devices.delete(key);
    this.retiredCounters = totalCounters([...(this.retiredCounters ? [this.retiredCounters] : []), snap.counters]);
  }

  /** What the schedulers of dropped devices had counted. */
  private retiredCounters: SchedulerCounters | undefined;

  /** Lookup decoding's drafted and accepted tokens, every request since the host started (/metrics). */
  private readonly lookupTotals = { drafted: 0, accepted: 0 };

  /** Whether lookup decoding is off (lookupDraftTokens 0): a request's prediction is not drafted from. */
  get lookupOff(): boolean {
    return this.settings.lookupDraftTokens === 0;
  }

  /** Adds a finished generation's lookup figures to the totals. */
  countLookup(lookup: LookupCount | undefined): void {
    if (!lookup) return;
    this.lookupTotals.drafted += lookup.drafted;
    this.lookupTotals.accepted += lookup.accepted;
  }

  private computeBudget(device: { key: string; nvidia?: NvidiaMemoryResult }) {
    let weights = 0;
    // A model's weights, and the 8-bit copy of its LM head the engine holds beside them (head-screen.ts).
    for (const m of this.models.values()) {
      if (m.device === device.key) weights += m.spec.weightsBytes + (m.logits.screenBytes ?? 0);
    }
    const s = this.settings;
    const override = device.key === CPU_DEVICE ? s.kvBudgetBytes : s.deviceKvBudgetBytes?.[device.key];
    return deriveHostDeviceBudget({
      device: device.key,
      weightsBytes: weights,
      cpu: {
        totalMemoryBytes: s.totalMemoryBytes ?? os.totalmem(),
        fraction: s.memoryFraction,
        overheadBytes: s.overheadBytes,
      },
      ...(device.nvidia === undefined ? {} : { nvidia: device.nvidia }),
      ...(s.deviceMemoryBytes === undefined ? {} : { deviceMemoryBytes: s.deviceMemoryBytes }),
      ...(override === undefined ? {} : { overrideBytes: override }),
      gpuFraction: s.gpuMemoryFraction,
      gpuOverheadBytes: s.gpuOverheadBytes,
    });
  }

  private refreshBudget(limits: { maxRunning?: number; maxQueue?: number } = {}): void {
    for (const d of this.devices.values()) {
      const budget = this.computeBudget(d);
      const outcome = d.scheduler.reconfigure({
        limitBytes: budget.limitBytes,
        derivation: budget.derivation,
        ...limits,
      });
      if (!outcome.ok) throw new KvdeskError(outcome.error.code, outcome.error.message, outcome.error.detail);
      this.failRejected(d.scheduler, outcome.value.rejectedRequestIds);
    }
  }

  /**
   * Changes the budget settings live (UI controls, API). `kvBudgetBytes` is the
   * budget of `device` (default the CPU); the running and queue limits apply to every device.
   */
  configure(patch: {
    device?: string;
    kvBudgetBytes?: number | null;
    maxRunning?: number;
    maxQueue?: number;
    memoryFraction?: number;
  }): void {
    const device = patch.device ?? CPU_DEVICE;
    if (!this.devices.has(device)) {
      const known = [...this.devices.keys()].join(', ');
      throw new KvdeskError(
        'BAD_REQUEST',
        `no model is placed on device "${device}" (devices with a budget: ${known})`,
        {
          field: 'device',
          value: device,
        },
      );
    }
    if (patch.kvBudgetBytes !== undefined) {
      if (device === CPU_DEVICE) {
        if (patch.kvBudgetBytes === null) delete this.settings.kvBudgetBytes;
        else this.settings.kvBudgetBytes = patch.kvBudgetBytes;
      } else {
        const budgets = { ...this.settings.deviceKvBudgetBytes };
        if (patch.kvBudgetBytes === null) delete budgets[device];
        else budgets[device] = patch.kvBudgetBytes;
        this.settings.deviceKvBudgetBytes = budgets;
      }
    }
    if (patch.memoryFraction !== undefined) this.settings.memoryFraction = patch.memoryFraction;
    if (patch.maxRunning !== undefined) this.settings.maxRunning = patch.maxRunning;
    if (patch.maxQueue !== undefined) this.settings.maxQueue = patch.maxQueue;
    this.refreshBudget({ maxRunning: this.settings.maxRunning, maxQueue: this.settings.maxQueue });
  }

  /** Queued requests a lowered limit can never fit were refused by the scheduler: their callers must hear it. */
  private failRejected(scheduler: Scheduler, ids: string[]): void {
    if (ids.length === 0) return;
    const recent = scheduler.snapshot().recent;
    for (const id of ids) {
      const error = recent.find((r) => r.id === id)?.error ?? {
        code: 'KV_BUDGET_EXCEEDED' as const,
        message: 'the KV budget was lowered below what this request needs',
      };
      this.generations.get(id)?.refused(error);
    }
  }

  /**
   * What each backend can do here, probed once (in a child process) and only when it matters: a package offers a
   * GPU variant, the person picks a backend, or asks what there is.
   */
  private backendReport: Promise<BackendReport[]> | null = null;

  /** Every backend onnxruntime-node knows here: usable or not, and why not. */
  listBackends(): Promise<BackendReport[]> {
    this.backendReport ??= detectBackendsInChildProcess().catch((err: unknown): BackendReport[] => [
      { name: 'cpu', provider: CPU, inBinding: true, bundled: true, usable: true },
      {
        name: 'gpu',
        provider: 'detection',
        inBinding: false,
        bundled: false,
        usable: false,
        reason: `backend detection failed: ${toErrorInfo(err).message}`,
      },
    ]);
    return this.backendReport;
  }

  private async usableBackends(): Promise<string[]> {
    const usable = usableProviders(await this.listBackends());
    return usable.length > 0 ? usable : [CPU];
  }

  /**
   * Validates a package and loads it into the engine. Atomic: on any error
   * nothing stays loaded. `backend` picks an execution provider (default: the
   * best usable one the package offers; a package without variants per provider
   * runs on the one picked when this machine can use it, else on the CPU with a
   * warning saying why); `variant` picks an ORT package's variant or a graph
   * file's variant (`fp16`, `q4`, …). A GPU session that fails to start falls
   * back to CPU with a warning on the spec, when the package can run there.
   */
  async loadModel(
    dir: string,
    options: {
      id?: string;
      backend?: string;
      variant?: string;
      trustInstalled?: boolean;
      /**
       * Refuse to load it again while requests queue or run on it (the person's reload: the engine releases the
       * old session as soon as the new one is there, which a running reply still reads).
       */
      whileIdle?: boolean;
      /** A chat template of the person's own instead of the package's (checked before anything loads). */
      chatTemplate?: string | null;
      /**
       * Only the chat template changes: a model loaded from the same graph, variant and backend keeps its engine
       * session and its sessions' KV (the host renders prompts), and takes the template at once, even while
       * replies run (each keeps the prompt it was given).
       */
      templateOnly?: boolean;
    } = {},
  ): Promise<ModelInfo> {
    const started = this.now();
    const ortPackage = (await detectLayout(dir)) === 'ort-package';
    const trust = options.trustInstalled === true ? { trustInstalled: true } : {};
    const variantOption = { ...(await variantOf(dir, options.variant)), ...trust };
    const wanted = options.backend === undefined ? undefined : backendProvider(options.backend);
    // An ORT package's variant may be built for a GPU: the backends are probed before it is read.
    const probeFirst = (wanted !== undefined && wanted !== CPU) || (ortPackage && options.variant !== undefined);
    const cpuOnly = probeFirst ? undefined : await loadModelSpec(dir, { availableBackends: [CPU], ...variantOption });
    const offersGpu = cpuOnly === undefined || (cpuOnly.variants ?? []).some((v) => v.ep !== CPU);
    const available = offersGpu ? await this.usableBackends() : [CPU];
    let spec =
      cpuOnly !== undefined && !offersGpu
        ? cpuOnly
        : await loadModelSpec(dir, {
            availableBackends: available,
            ...(options.backend !== undefined && ortPackage ? { backend: options.backend } : {}),
            ...variantOption,
          });
    if (!ortPackage && wanted !== undefined && wanted !== CPU) spec = await this.onPickedBackend(spec, wanted);
    spec =
      typeof options.chatTemplate === 'string' ? withChatTemplate(spec, options.chatTemplate) : checkedTemplate(spec);
    const id = options.id ?? spec.id;
    // Loaded again (another variant, another backend): the person's load waits for no reply, and none starts on
    // the model until the new load is in (both checked here, with no wait between: generate registers at once).
    const previous = this.models.get(id);
    if (options.templateOnly === true && previous !== undefined && !this.reloading.has(id)) {
      const swapped = withModelId(spec, id);
      if (differsOnlyInTemplate(previous.spec, swapped)) {
        this.models.set(id, { ...previous, spec: swapped });
        return { id, spec: swapped, loadMs: previous.loadMs, logits: previous.logits };
      }
    }
    const guarded = previous !== undefined && options.whileIdle === true;
    if (guarded && this.reloading.has(id)) {
      throw new KvdeskError('BAD_REQUEST', `model ${id} is loading again already: load it once that load is in`, {
        field: 'path',
      });
    }
    if (guarded) this.assertIdle(id, 'loading it again');
    const load = this.finishLoad(dir, id, spec, previous, { ortPackage, trust, variantOption, started });
    if (!guarded) return load;
    // Ended either way, the model is open to requests again before the ones that waited go on.
    const settled: Promise<void> = load
      .then(
        () => undefined,
        () => undefined,
      )
      .then(() => {
        if (this.reloading.get(id) === settled) this.reloading.delete(id);
        this.reloadChanged('model');
      });
    this.reloading.set(id, settled);
    this.reloadChanged('model');
    try {
      return await load;
    } finally {
      await settled;
    }
  }

  /** Models a person is loading again, and when that ends: requests on them wait until then. */
  private readonly reloading = new Map<string, Promise<void>>();

  /** loadModel, from the tokenizer on: the engine loads it, and it replaces what was under its id. */
  private async finishLoad(
    dir: string,
    id: string,
    read: ModelSpec,
    previous: LoadedModel | undefined,
    how: { ortPackage: boolean; trust: LoadOptions; variantOption: LoadOptions; started: number },
  ): Promise<ModelInfo> {
    const { ortPackage, trust, variantOption, started } = how;
    let spec = read;
    const tokenizer = await loadTokenizer(spec.tokenizer, { vocabSize: spec.vocabSize });
    const ep = spec.executionProvider ?? CPU;
    const intended = this.deviceOf(spec);
    // Before the weights land there: a GPU's free memory is read without counting them.
    await this.ensureDevice(intended);
    let loaded: EngineLoadResult;
    try {
      // Closing: a load would start the engine again under the quit (and one under way ends with the engine).
      if (this.closed) throw loadCancelled(id);
      try {
        loaded = await this.engine.load(id, withModelId(spec, id), [providerShortName(ep) ?? 'cpu']);
      } catch (err) {
        const info = toErrorInfo(err);
        const canFallBack =
          ep !== CPU &&
          info.code === 'MODEL_LOAD_FAILED' &&
          (!ortPackage || (spec.variants ?? []).some((v) => v.ep === CPU));
        if (!canFallBack) throw err;
        const onCpu = ortPackage
          ? await loadModelSpec(dir, { availableBackends: [CPU], backend: CPU, ...trust })
          : await loadModelSpec(dir, { availableBackends: [CPU], ...variantOption });
        // The person's own chat template goes with it.
        spec =
          read.chatTemplateEdited && read.chatTemplate !== undefined
            ? withChatTemplate(onCpu, read.chatTemplate)
            : onCpu;
        spec = {
          ...spec,
          warnings: [
            ...spec.warnings,
            `${ep} could not start this model (${info.message}); kvdesk runs it on the CPU instead`,
          ],
        };
        loaded = await this.engine.load(id, withModelId(spec, id), ['cpu']);
      }
    } catch (err) {
      this.dropDeviceIfUnused(intended);
      throw this.closed ? loadCancelled(id) : err;
    }
    const device = this.deviceOf(spec);
    const model: LoadedModel = {
      id,
      spec: withModelId(spec, id),
      tokenizer,
      loadMs: this.now() - started,
      device,
      logits: loaded.logits,
      batches: loaded.batches,
      loadKey: nextLoadKey++,
    };
    // Another package under the same id: the KV its sessions hold was computed by the old one.
    this.closeSessionsOf(id);
    this.models.set(id, model);
    previous?.tokenizer.close();
    this.dropDeviceIfUnused(intended);
    // The budget stops counting the old load's bytes per token (another package's may differ), and counts the new
    // load's from now (the snapshot's bpt, before any request).
    if (previous) this.devices.get(previous.device)?.scheduler.forgetModel(id);
    if (previous && previous.device !== device) this.dropDeviceIfUnused(previous.device);
    this.devices.get(device)?.scheduler.noteModel(id, spec.bpt);
    this.refreshBudget();
    return { id, spec: model.spec, loadMs: model.loadMs, logits: model.logits };
  }

  /**
   * A package whose graph runs anywhere (layouts 1–3), with a backend the person picked: it runs there when this
   * machine can use it, else on the CPU, with a warning that says why and what to do.
   */
  private async onPickedBackend(spec: ModelSpec, wanted: string): Promise<ModelSpec> {
    const report = (await this.listBackends()).find((r) => r.provider === wanted);
    if (report?.usable === true) return { ...spec, executionProvider: wanted };
    const why = report?.reason ?? 'this onnxruntime-node build does not have it';
    return {
      ...spec,
      warnings: [
        ...spec.warnings,
        `${providerShortName(wanted) ?? wanted} was picked, but this machine cannot use it (${why})${report?.hint ? `: ${report.hint.replace(/\.$/, '')}` : ''}; kvdesk runs the model on the CPU`,
      ],
    };
  }

  /** The scheduler of the device a loaded model's KV lives on. */
  schedulerOf(modelId: string): Scheduler {
    const m = this.models.get(modelId);
    if (!m) throw new KvdeskError('MODEL_NOT_LOADED', `model ${modelId} is not loaded`);
    return (this.devices.get(m.device) as DeviceState).scheduler;
  }

  /** The device a loaded model's KV lives on. */
  deviceOfModel(modelId: string): string {
    const m = this.models.get(modelId);
    if (!m) throw new KvdeskError('MODEL_NOT_LOADED', `model ${modelId} is not loaded`);
    return m.device;
  }

  /** Unloads a model; its idle sessions are closed. Refused while it has requests in flight. */
  async unloadModel(id: string): Promise<void> {
    const model = this.models.get(id);
    if (!model) throw new KvdeskError('MODEL_NOT_LOADED', `model ${id} is not loaded`);
    if (this.reloading.has(id)) {
      throw new KvdeskError('BAD_REQUEST', `model ${id} is loading again: unload it once that load is in`, {
        field: 'id',
      });
    }
    this.assertIdle(id, 'unloading');
    this.closeSessionsOf(id);
    this.schedulerOf(id).forgetModel(id);
    this.models.delete(id);
    model.tokenizer.close();
    await this.engine.unload(id);
    this.dropDeviceIfUnused(model.device);
    this.refreshBudget();
  }

  /**
   * Closes every session of a model id: those the host mirrors, and those only the scheduler still knows (whose
   * KV an admission or a failure dropped). Left there, they would keep the old load's bytes per token, and a
   * thread's next turn on a package of other KV geometry would be refused.
   */
  private closeSessionsOf(id: string): void {
    const ids = new Set<string>();
    for (const [sid, s] of this.sessions) if (s.modelId === id) ids.add(sid);
    for (const d of this.devices.values()) {
      for (const s of d.scheduler.snapshot().sessions) if (s.modelId === id) ids.add(s.sessionId);
    }
    for (const sid of ids) this.closeSession(sid);
  }

  /** Refuses `what` (unloading, loading again) while requests queue or run on the model. */
  private assertIdle(id: string, what: string): void {
    const snap = this.schedulerOf(id).snapshot();
    const busy = [...snap.queue, ...snap.running].filter((r) => r.modelId === id).length;
    if (busy > 0) {
      const them = busy === 1 ? '1 request in flight; stop it' : `${busy} requests in flight; stop them`;
      throw new KvdeskError('BAD_REQUEST', `model ${id} has ${them} before ${what}`);
    }
  }

  /** Loaded models, in load order. */
  listModels(): ModelInfo[] {
    return [...this.models.values()].map((m) => ({
      id: m.id,
      spec: m.spec,
      loadMs: m.loadMs,
      logits: m.logits,
      ...(this.reloading.has(m.id) ? { reloading: true } : {}),
    }));
  }

  /** The tokenizer of a loaded model (CLI counts tokens with it). */
  tokenizerOf(id: string): TextTokenizer {
    const m = this.models.get(id);
    if (!m) throw new KvdeskError('MODEL_NOT_LOADED', `model ${id} is not loaded`);
    return m.tokenizer;
  }

  /**
   * The budget snapshot: the CPU's at the top level (SCHEDULER.md's fields),
   * and every device's — the CPU's first — in `devices`.
   */
  snapshot(): BudgetSnapshot {
    const devices: DeviceBudgetSnapshot[] = [...this.devices.values()].map((d) => ({
      ...d.scheduler.snapshot(),
      device: d.key,
      models: [...this.models.values()].filter((m) => m.device === d.key).map((m) => m.id),
    }));
    return {
      ...(devices[0] as DeviceBudgetSnapshot),
      devices,
      ...(this.retiredCounters ? { retiredCounters: this.retiredCounters } : {}),
      lookup: { ...this.lookupTotals },
      ...(this.reloadWaits.size > 0 ? { reloadWaits: [...this.reloadWaits.values()].map((w) => ({ ...w })) } : {}),
    };
  }

  /**
   * Subscribes to loads again: called when a model starts or ends loading again (listModels' `reloading`), and
   * when a request starts or ends waiting for one (the snapshot's `reloadWaits`).
   */
  onReloadChange(fn: (what: 'model' | 'waits') => void): () => void {
    this.reloadListeners.add(fn);
    return () => {
      this.reloadListeners.delete(fn);
    };
  }

  /** Subscribes to engine crashes and their recovery: what died, what the requests lost, each model back or not. */
  onEngineRecovery(fn: (e: EngineRecovery) => void): () => void {
    this.recoveryListeners.add(fn);
    return () => {
      this.recoveryListeners.delete(fn);
    };
  }

  private recovered(e: EngineRecovery): void {
    for (const fn of this.recoveryListeners) {
      try {
        fn(e);
      } catch {
        // A listener's failure is its own.
      }
    }
  }

  private reloadChanged(what: 'model' | 'waits'): void {
    for (const fn of this.reloadListeners) {
      try {
        fn(what);
      } catch {
        // A listener's failure is its own (the host logs its own listeners' errors).
      }
    }
  }

  /** Subscribes to every device scheduler's events (timeline, metrics). */
  onSchedulerEvent(fn: (e: SchedulerEvent) => void): () => void {
    this.eventListeners.add(fn);
    return () => {
      this.eventListeners.delete(fn);
    };
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

  /** A request's prompt rows, the plan of its tools (which shapes the chat prompt), and what was left out. */
  private buildRows(
    req: GenerateRequest,
    model: LoadedModel,
    /** A conversation's prompt counted no further than this (see measurePrompt, and generateAs's refusal). */
    countUpTo?: number,
    /**
     * The prompt is for a generation that refuses a prompt too long for the context: one whose length alone says so
     * is refused before it is tokenized (TextTokenizer.fewestTokens). Measuring counts it instead.
     */
    refusing = false,
    /** What earlier passes preparing this same request rendered (see PromptMemo). */
    memo?: PromptMemo,
  ): {
    rows: number[][];
    tools: ToolPlan | undefined;
    contextDrop?: ContextDrop;
    reasoning?: ReasoningPlan;
    /** With countUpTo: the prompt passed it, and rows hold only its newest turns. */
    partial?: true;
  } {
    const planned = planTools(req, model.spec.chatTemplate, model.tokenizer, {
      harmony: model.spec.reasoning?.harmony === true,
    });
    // A forced call a thinking model reasons before: its opening is not in the prompt (it is written for the model
    // after the reasoning, then the call's JSON, held).
    const tools =
      planned && reasonsBeforeCall(req, model.spec, planned)
        ? { ...planned, suffix: '', afterReasoning: planned.suffix }
        : planned;
    const thinking = thinkingVars(req, model.spec);
    const tok = model.tokenizer;
    const spec = model.spec;
    let rows: number[][];
    let contextDrop: ContextDrop | undefined;
    let partial = false;
    // The chat prompt as rendered (its end is the same whichever turns drop-oldest keeps).
    let rendered: string | undefined;
    // A prompt refused when too long is refused before it is tokenized where its length alone says it is (encoding
    // runs on the host's one thread: 3 MB of one word held it 46 s, to be refused after).
    const surely = refusing
      ? (text: string) => refuseSurelyTooLong(this.schedulerOf(model.id), model, text)
      : undefined;
    if (req.promptIds) {
      tok.validateIds(req.promptIds);
      rows = [req.promptIds];
    } else if (req.promptIdRows) {
      for (const [i, r] of req.promptIdRows.entries()) atPrompt(req, i, () => tok.validateIds(r));
      rows = req.promptIdRows;
    } else if (req.prompts) {
      rows = req.prompts.map((p, i) =>
        atPrompt(req, i, () => {
          surely?.(p);
          return tok.encode(p, { addSpecialTokens: true });
        }),
      );
    } else {
      const messages: ChatMessage[] | undefined =
        req.messages ?? (req.chat ? [{ role: 'user', content: req.prompt ?? '' }] : undefined);
      if (messages) {
        if (req.continueFinal) checkContinuation(req, messages, tools);
        // Leaving out the oldest turns, only a prompt of the last turn alone is surely refused when too long (a longer
        // one leaves out more instead): the messages (not system ones) it keeps.
        const starts = turnStarts(messages);
        const lastTurnOnly = messages.filter((m) => m.role !== 'system').length - (starts[starts.length - 1] as number);
        // The prompts of the kept conversations an earlier pass over this request made, or rendered and began to
        // tokenize (a kept conversation is all system messages and the newest others: its length says which it is).
        const made = memo && keptPrompts(memo, model, req);
        // (`keep`: false for a conversation other than the request's, as markupOutOfVocab renders.)
        const render = (kept: ChatMessage[], keep = true): number[] => {
          const found = keep ? made?.get(kept.length) : undefined;
          if (found?.ids) {
            rendered = found.text;
            return found.ids;
          }
          const beforeEncode =
            req.contextOverflow !== 'drop-oldest' || kept.filter((m) => m.role !== 'system').length <= lastTurnOnly
              ? surely
              : undefined;
          let text = found?.text;
          if (text === undefined) {
            const all: ChatMessage[] = req.system ? [{ role: 'system', content: req.system }, ...kept] : kept;
            // Tool calls and results of earlier turns, and the tools, in the form the template (or kvdesk) shows them.
            // Without tools this request, earlier calls and results still go to a template that shows tools its way.
            const native =
              tools?.native ?? (all.some((m) => m.toolCalls || m.role === 'tool') && nativeTemplate(spec.chatTemplate));
            const form = tools?.format ?? toolCallFormat(spec.chatTemplate, native);
            const turns = toolChatTurns(all, tools?.shown, native, form);
            text = renderChat(tok, spec.chatTemplate, turns.messages, {
              ...(spec.chatTemplateEdited
                ? { source: 'chat template of your own', fix: "Fix it, or load the model with the package's own." }
                : { source: `chat template in ${spec.chatTemplateSource ?? 'the package'}` }),
              ...(turns.tools ? { tools: turns.tools } : {}),
              // A thinking model told not to think (without a switch), or written to a grammar: its reasoning closed
              // (chosen from the rendered text, which is rendered and tokenized once with it).
              closing: (t) => closingSuffix(req, spec, tools, t),
              ...(tools?.suffix ? { suffix: tools.suffix } : {}),
              ...(req.continueFinal ? { continueFinal: true } : {}),
              ...(thinking ? { vars: thinking } : {}),
            }).text;
          }
          const entry: { text: string; ids?: number[] } = { text };
          // Kept before it is tokenized: a long one waits to be tokenized off the thread, and is not rendered again.
          if (keep) made?.set(kept.length, entry);
          beforeEncode?.(text);
          entry.ids = encodeChat(tok, text);
          rendered = text;
          return entry.ids;
        };
        try {
          if (req.contextOverflow === 'drop-oldest') {
            // (Whether the reply reasons, as reasoningPlan decides once the prompt is rendered.)
            const reasons = spec.reasoning !== undefined && (!tools?.forced || reasonsBeforeCall(req, spec, tools));
            const fit = this.fitContext(req, model, messages, render, reasons);
            rows = [fit.ids];
            if (fit.dropped > 0) contextDrop = { messages: fit.dropped, contextLength: spec.contextLength };
          } else if (countUpTo !== undefined) {
            const counted = promptUpTo(messages, render, countUpTo);
            rows = [counted.prompt];
            partial = !counted.whole;
          } else {
            rows = [render(messages)];
          }
        } catch (err) {
          throw markupOutOfVocab(err, () =>
            render(
              messages.map((m) => ({ ...m, content: '' })),
              false,
            ),
          );
        }
      } else {
        surely?.(req.prompt ?? '');
        rows = [tok.encode(req.prompt ?? '', { addSpecialTokens: true })];
      }
    }
    const empty = rows.findIndex((r) => r.length === 0);
    if (empty >= 0 && rendered !== undefined) {
      // The messages were there: the template wrote nothing of them, or the tokenizer made no tokens of what it wrote.
      const source = spec.chatTemplateEdited
        ? 'the chat template of your own'
        : spec.chatTemplate
          ? `the chat template in ${spec.chatTemplateSource ?? 'the package'}`
          : "kvdesk's ChatML template";
      throw new KvdeskError(
        'BAD_REQUEST',
        rendered.trim() === ''
          ? `${source} wrote no text for these messages, so there is nothing to send the model. Check that the template writes each message's content (fix it, or give the model another chat template).`
          : `the tokenizer made no tokens of the ${rendered.length} characters ${source} wrote for these messages. Check that the package's tokenizer.json belongs to this model.`,
        { field: 'messages' },
      );
    }
    if (empty >= 0) {
      const one = promptField(req, empty);
      throw new KvdeskError(
        'BAD_REQUEST',
        `${one ?? 'the prompt'} is empty after tokenization: give ${one ? 'it ' : ''}at least one token`,
        {
          field:
            one ?? (req.messages ? 'messages' : req.prompts ? 'prompts' : req.promptIdRows ? 'promptIdRows' : 'prompt'),
        },
      );
    }
    // Copies of each prompt, one after another (choice i of prompt p is row p × copies + i).
    const copies = req.rows ?? 1;
    if (copies > 1) rows = rows.flatMap((row) => Array.from({ length: copies }, () => row.slice()));
    const reasoning = rendered === undefined ? undefined : reasoningPlan(req, spec, tok, tools, rendered);
    return {
      rows,
      tools,
      ...(contextDrop ? { contextDrop } : {}),
      ...(reasoning ? { reasoning } : {}),
      ...(partial ? { partial } : {}),
    };
  }

  /**
   * `drop-oldest`: the conversation's prompt with as few of its oldest turns left out as leave the reply room
   * for its max new tokens (at most half the context). A conversation that remembers its drops
   * (`droppedMessages`) goes down to half of that when anything must go, so its next turns keep the prefix.
   */
  private fitContext(
    req: GenerateRequest,
    model: LoadedModel,
    messages: ChatMessage[],
    render: (kept: ChatMessage[]) => number[],
    reasons: boolean,
  ): { ids: number[]; dropped: number } {
    const spec = model.spec;
    const context = spec.contextLength;
    const reply = Math.min(maxNewTokensOf(req, spec, reasons), context >> 1);
    const limit = context - Math.max(1, reply);
    // A client that remembers nothing but resends the conversation (the HTTP APIs, through the prompt cache):
    // where an earlier turn's start still fits, its prompt continues that turn's cached KV — keep it.
    const cached =
      req.promptCache === true &&
      req.sessionId === undefined &&
      req.droppedMessages === undefined &&
      this.settings.promptCacheSessions > 0;
    const fit = dropOldest(messages, render, {
      limit,
      target: req.droppedMessages !== undefined || cached ? limit >> 1 : limit,
      atLeast: req.droppedMessages ?? 0,
      ...(cached ? { prefer: (ids: number[]) => this.continuedCache(model, ids) !== undefined } : {}),
    });
    return { ids: fit.prompt, dropped: fit.dropped };
  }

  /**
   * The prompt tokens a generation request would have, rendered as `generate` renders it (chat template,
   * tools, a forced call's opening); throws the errors `generate` would reject it with before it runs.
   */
  countPromptTokens(input: unknown): number {
    return this.measurePrompt(input).promptTokens;
  }

  /**
   * {@link measurePrompt}, its long texts tokenized off the host's thread (off-thread.ts): the same answer, without
   * holding every stream and client while a long conversation is tokenized (the window measures its chat as it is
   * written; Anthropic's count_tokens).
   */
  measurePromptOffThread(input: unknown, opts: { countUpTo?: number } = {}): Promise<PromptMeasure> {
    const memo = newPromptMemo();
    return afterLongTexts(() => this.measurePrompt(input, opts, memo));
  }

  /**
   * What a generation request's prompt would be, without running it: its tokens (the longest row), the model's
   * context, and the messages `drop-oldest` would leave out. `countUpTo`: a conversation sent whole (not
   * `drop-oldest`) is counted only until its newest turns pass that many tokens (`countedUpTo` then says so, and
   * `promptTokens` is what those turns alone have): a chat of tens of MB is not counted whole to say it is longer
   * than the context (that took minutes, and held every other request). `memo`: the prompts an earlier pass over this
   * request made (measurePromptOffThread runs it again after each wait).
   */
  measurePrompt(input: unknown, { countUpTo }: { countUpTo?: number } = {}, memo?: PromptMemo): PromptMeasure {
    const parsed = GenerateRequest.safeParse(input);
    if (!parsed.success) throw invalidRequest(parsed.error);
    const req = parsed.data;
    const model = this.resolveModel(req.model);
    const { rows, contextDrop, partial } = this.buildRows(req, model, countUpTo, false, memo);
    return {
      promptTokens: Math.max(...rows.map((r) => r.length)),
      contextLength: model.spec.contextLength,
      ...(contextDrop ? { droppedMessages: contextDrop.messages } : {}),
      ...(partial && countUpTo !== undefined ? { countedUpTo: countUpTo } : {}),
    };
  }

  /**
   * Starts a generation. Frames go to `sink` in order (accepted → admitted → started → prefill* → tokens* →
   * done | error, cut short by an error: see StreamFrame); the handle's promise settles with the same outcome.
   * Validation errors reject before any frame is sent.
   */
  generate(input: unknown, sink: (frame: StreamFrame) => void = () => {}): GenerationHandle {
    return this.generateAs(randomUUID(), input, sink);
  }

  /**
   * A request on a model the person is loading again waits until that load is in (or has failed: then on the
   * model as it was), and then starts as if sent then. Stopped while it waits (by its handle, by id, by the host's
   * close), it ends cancelled at once, having sent nothing; its time limit counts from when it was sent.
   */
  private waitForReload(
    requestId: string,
    input: unknown,
    sink: (frame: StreamFrame) => void,
    reload: Promise<unknown>,
    { timeoutMs, ...shown }: { modelId: string; threadId: string | undefined; timeoutMs: number | undefined },
  ): GenerationHandle {
    const wait: ReloadWait = {
      requestId,
      modelId: shown.modelId,
      ...(shown.threadId ? { threadId: shown.threadId } : {}),
      since: Date.now(),
    };
    this.reloadWaits.set(requestId, wait);
    this.reloadChanged('waits');
    return this.startAfter(
      requestId,
      input,
      sink,
      reload,
      reload,
      timeoutMs,
      'while its model loaded again',
      0,
      undefined,
      () => {
        // Only this wait's entry (a request that waits again, for a later load, holds a new one).
        if (this.reloadWaits.get(requestId) === wait) this.reloadWaits.delete(requestId);
        this.reloadChanged('waits');
      },
    );
  }

  /**
   * A request that starts once `until` settles (its model loaded again, its long texts tokenized off the thread):
   * generateAs then, with what is left of its time limit (`waited`, `deferrals`, `memo`: as generateAs takes them).
   * Stopped before (cancelled, its time limit passed `while` it waited), it is refused as not started. `onSettled`:
   * it started or stopped.
   */
  private startAfter(
    requestId: string,
    input: unknown,
    sink: (frame: StreamFrame) => void,
    until: Promise<unknown>,
    waited: Promise<unknown> | undefined,
    timeoutMs: number | undefined,
    while_: string,
    deferrals: number,
    memo: PromptMemo | undefined,
    onSettled?: () => void,
  ): GenerationHandle {
    let started: GenerationHandle | undefined;
    let stop!: (reason: 'user' | 'disconnect' | 'timeout' | 'shutdown') => void;
    const stopped = new Promise<never>((_, reject) => {
      stop = (reason) =>
        reject(
          reason === 'timeout'
            ? new KvdeskError('TIMEOUT', `the request timed out ${while_} (limit ${timeoutMs} ms)`, {
                timeoutMs: timeoutMs ?? null,
              })
            : new KvdeskError('CANCELLED', `request ${requestId} was cancelled (${reason}) before it started`, {
                reason,
              }),
        );
    });
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => cancel('timeout'), timeoutMs);
    const began = performance.now();
    // The wait over (the load in or failed, the texts tokenized), or the request stopped first.
    const over = Promise.race([until, stopped]);
    const result = over.then(() => {
      // What is left of its time limit goes with it.
      const left = timeoutMs === undefined ? undefined : Math.max(1, timeoutMs - (performance.now() - began));
      const parsed = input as Record<string, unknown>;
      started = this.generateAs(
        requestId,
        left === undefined ? input : { ...parsed, timeoutMs: Math.round(left) },
        sink,
        waited,
        deferrals,
        memo,
      );
      return started.result;
    });
    const cancel = (reason: 'user' | 'disconnect' | 'timeout' | 'shutdown' = 'user') => {
      if (started) started.cancel(reason);
      else stop(reason);
    };
    this.cancels.set(requestId, cancel);
    const forget = () => {
      if (timer !== undefined) clearTimeout(timer);
      if (this.cancels.get(requestId) === cancel) this.cancels.delete(requestId);
      onSettled?.();
    };
    // Once it starts, its own generation holds the id (and the cancel) until it ends.
    void over.then(forget, forget);
    return { requestId, result, cancel };
  }

  /**
   * A request on a model that loads again, when those queued on its device and those waiting for loads there
   * already take every place its scheduler will have once the load is in (its free running slots and its queue):
   * the QUEUE_FULL it would get then, at once (counted as the scheduler's are).
   */
  private reloadQueueFull(model: LoadedModel, requestId: string): KvdeskError | undefined {
    const sched = (this.devices.get(model.device) as DeviceState).scheduler;
    const snap = sched.snapshot();
    let waiting = snap.queue.length;
    for (const w of this.reloadWaits.values()) {
      // (Not its own wait for an earlier load, which it leaves as it starts.)
      if (w.requestId !== requestId && this.models.get(w.modelId)?.device === model.device) waiting += 1;
    }
    // As many as there are free running slots are admitted when the load is in: the rest queue.
    const queued = waiting - Math.max(0, snap.maxRunning - snap.running.length);
    if (queued < snap.maxQueue) return undefined;
    // The load takes about as long as the model's last one did.
    const retryAfterMs = Math.max(1000, Math.ceil(model.loadMs));
    sched.countRejection('QUEUE_FULL');
    return new KvdeskError(
      'QUEUE_FULL',
      `The admission queue is full (${queued} waiting, limit ${snap.maxQueue}, with those that wait for model ` +
        `${model.id} to load again). Retry in about ${Math.ceil(retryAfterMs / 1000)} s.`,
      { queueLength: queued, maxQueue: snap.maxQueue, retryAfterMs, modelId: model.id },
    );
  }

  /**
   * `waited`: the reload the request has waited for (it does not wait for that one again); `deferrals`: how many
   * times it has waited for its long texts to be tokenized off the thread (off-thread.ts); `memo`: the prompts its
   * earlier passes rendered (each wait prepares it again).
   */
  private generateAs(
    requestId: string,
    input: unknown,
    sink: (frame: StreamFrame) => void,
    waited?: Promise<unknown>,
    deferrals = 0,
    memo: PromptMemo = newPromptMemo(),
  ): GenerationHandle {
    // Closing: nothing new starts (it would only hold the quit until it is cut).
    if (this.closed) {
      const error = new KvdeskError('CANCELLED', `request ${requestId} was cancelled (shutdown): kvdesk is closing`, {
        reason: 'shutdown',
      });
      return { requestId, result: Promise.reject(error), cancel: () => {} };
    }
    const parsed = GenerateRequest.safeParse(input);
    if (!parsed.success) {
      return { requestId, result: Promise.reject(invalidRequest(parsed.error)), cancel: () => {} };
    }
    let req = parsed.data;
    let model: LoadedModel;
    let rows: number[][];
    let tools: ToolPlan | undefined;
    let contextDrop: ContextDrop | undefined;
    let reasoning: ReasoningPlan | undefined;
    try {
      model = this.resolveModel(req.model);
      const reload = this.reloading.get(model.id);
      if (reload && reload !== waited) {
        const full = this.reloadQueueFull(model, requestId);
        if (full) throw full;
        const wait = { modelId: model.id, threadId: req.threadId, timeoutMs: req.timeoutMs };
        return this.waitForReload(requestId, input, sink, reload, wait);
      }
      // A conversation sent whole (`refuse`) is rendered only until its newest turns fill the context: one longer
      // than that is refused as such, not rendered and tokenized whole first (a chat of MBs took tens of seconds,
      // or ran the template past its time limit, which then blamed the package).
      const refuseOver = model.spec.contextLength - 1;
      let partial: true | undefined;
      let counted: number[][];
      // Its long texts are tokenized off the host's thread first (off-thread.ts): then it is prepared again.
      const build = () => {
        const built = this.buildRows(req, model, refuseOver, true, memo);
        // A predicted output is tokenized at admission: a long one is so here first, off the thread, and found kept.
        if (req.prediction !== undefined) model.tokenizer.encode(req.prediction, { addSpecialTokens: false });
        return built;
      };
      ({
        rows: counted,
        tools,
        contextDrop,
        reasoning,
        partial,
      } = deferrals < MAX_DEFERRALS ? deferringLongTexts(build) : build());
      if (partial) throw contextOverflowAtLeast(this.schedulerOf(model.id), model, counted);
      rows = counted;
      checkLogitBias(req, model.spec.vocabSize);
      checkJsonSchema(req);
      // A forced call is structured output over the call's schema.
      if (tools?.schema) req = { ...req, jsonSchema: tools.schema };
      if (req.promptCache && req.sessionId === undefined && rows.length === 1) {
        const sessionId = this.pickPromptCache(model, rows[0] as number[]);
        if (sessionId) req = { ...req, sessionId };
      }
    } catch (err) {
      if (err instanceof LongTextPending) {
        const timeoutMs = parsed.data.timeoutMs;
        const tokenizing = 'while its prompt was tokenized';
        return this.startAfter(requestId, input, sink, err.ready, waited, timeoutMs, tokenizing, deferrals + 1, memo);
      }
      return { requestId, result: Promise.reject(err), cancel: () => {} };
    }
    let resolveResult!: (r: GenerationResult) => void;
    let rejectResult!: (e: Error) => void;
    const result = new Promise<GenerationResult>((res, rej) => {
      resolveResult = res;
      rejectResult = rej;
    });
    const run = new Generation(
      this,
      requestId,
      req,
      model,
      rows,
      tools,
      contextDrop,
      reasoning,
      sink,
      resolveResult,
      rejectResult,
    );
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

  /**
   * The prompt cache a prompt continues, else a new id (undefined when the cache is off). A prompt continues
   * an idle cache of its model when it holds that cache's whole last prompt (its next turn, however the reply
   * re-encodes, or the same prompt again; not another conversation that opens with the same system prompt,
   * which would take over its KV). Nothing is kept until the scheduler accepts the request (notePromptCache).
   */
  private pickPromptCache(model: LoadedModel, row: number[]): string | undefined {
    if (this.settings.promptCacheSessions <= 0) return undefined;
    return this.continuedCache(model, row) ?? `${PROMPT_CACHE_PREFIX}${randomUUID()}`;
  }

  /** The idle prompt cache of `model` whose whole last prompt `row` holds (the longest such), if any. */
  private continuedCache(model: LoadedModel, row: number[]): string | undefined {
    const sched = this.schedulerOf(model.id);
    let best: { id: string; shared: number } | undefined;
    for (const id of this.promptCaches.keys()) {
      // A mirror exists once a turn has finished and kept its KV (not while one runs, nor after an eviction).
      const mirror = this.sessions.get(id);
      if (!mirror || mirror.modelId !== model.id || sched.sessionInfo(id)?.state !== 'idle') continue;
      const shared = Math.min(commonPrefix(mirror.tokens, row), row.length - 1);
      if (shared > 0 && shared >= Math.min(mirror.promptTokens, row.length - 1) && shared > (best?.shared ?? 0)) {
        best = { id, shared };
      }
    }
    return best?.id;
  }

  /** @internal used by Generation: the scheduler accepted a turn on this prompt cache (now the most recent). */
  notePromptCache(sessionId: string, modelId: string): void {
    this.promptCaches.delete(sessionId);
    this.promptCaches.set(sessionId, modelId);
    this.prunePromptCaches();
  }

  /**
   * @internal Closes the idle prompt caches that hold nothing (their KV was evicted, or their turn was stopped
   * while queued or kept none), then the least recently used idle ones beyond the limit (busy ones wait for
   * their turn's end).
   */
  prunePromptCaches(): void {
    for (const [id, modelId] of this.promptCaches) {
      const state = this.models.has(modelId) ? this.schedulerOf(modelId).sessionInfo(id)?.state : undefined;
      if (state === 'queued' || state === 'running') continue;
      if ((this.sessions.get(id)?.tokens.length ?? 0) > 0) continue;
      this.promptCaches.delete(id);
      this.closeSession(id);
    }
    for (const [id, modelId] of this.promptCaches) {
      if (this.promptCaches.size <= this.settings.promptCacheSessions) return;
      const state = this.models.has(modelId) ? this.schedulerOf(modelId).sessionInfo(id)?.state : undefined;
      if (state === 'queued' || state === 'running') continue;
      this.promptCaches.delete(id);
      this.closeSession(id);
    }
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
    for (const d of this.devices.values()) d.scheduler.closeSession(sessionId);
    this.sessions.delete(sessionId);
    this.engine.dropSession(sessionId);
  }

  /**
   * @internal used by Generation before a session turn on `modelId`: the session's idle KV built by another model
   * (on any device, this one included: a chat that switched models) is dropped, so the turn starts over. A turn of it
   * still queued or running for another model is refused (returned, nothing dropped): the engine keys a session by
   * its id alone, so both turns would share one KV while two budgets (or two models' bpt) count it.
   */
  releaseSessionOfOtherModels(sessionId: string, modelId: string): ErrorInfo | undefined {
    const here = this.deviceOfModel(modelId);
    const others = [...this.devices.values()].flatMap((d) => {
      const info = d.scheduler.sessionInfo(sessionId);
      return info !== undefined && (d.key !== here || info.modelId !== modelId) ? [{ d, info }] : [];
    });
    for (const { d, info } of others) {
      if (info.state === 'idle') continue;
      return {
        code: 'SESSION_INVALID',
        message:
          `Session ${sessionId} has a ${info.state} turn (${info.turnRequestId}) on model ${info.modelId} ` +
          `(${d.key}); this turn is for model ${modelId} (${here}). Wait for that turn to end or cancel it, then ` +
          'send this one.',
        detail: {
          sessionId,
          state: info.state,
          turnRequestId: info.turnRequestId ?? null,
          sessionModelId: info.modelId,
          device: d.key,
        },
      };
    }
    for (const { d } of others) {
      d.scheduler.closeSession(sessionId);
      this.engine.dropSession(sessionId);
      this.sessions.delete(sessionId);
    }
    return undefined;
  }

  /**
   * @internal used by Generation: a budget refusal on a GPU names the device, and,
   * when its memory is unknown, the setting that fixes it.
   */
  onDevice(modelId: string, error: ErrorInfo): ErrorInfo {
    const device = this.deviceOfModel(modelId);
    if (device === CPU_DEVICE || error.code !== 'KV_BUDGET_EXCEEDED') return error;
    const d = this.schedulerOf(modelId).snapshot().derivation;
    const hint = d.limitBytes === 0 && d.notes.length > 0 ? ` ${d.notes.join(' ')}` : '';
    return { ...error, message: `${device}: ${error.message}${hint}`, detail: { ...error.detail, device } };
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

  /** Counts crash recoveries: a recovery overtaken by another crash (or by close) stops where it is. */
  private recovery = 0;
  /** Crashes since a recovery last ran to its end: queued requests wait through at most CRASHES_WAITED of them. */
  private crashesInARow = 0;
  private closed = false;

  private onEngineCrash(reason: string): void {
    if (this.closed) return;
    const epoch = ++this.recovery;
    const current = () => epoch === this.recovery && !this.closed;
    const error: ErrorInfo = { code: 'ENGINE_FAILED', message: reason };
    const models = [...this.models.values()];
    this.crashesInARow += 1;
    // An engine that dies again and again while its models load back may never stay up: past a few crashes in a
    // row, the queued requests stop waiting for it.
    const hold = this.crashesInARow <= CRASHES_WAITED;
    let running = 0;
    let queued = 0;
    for (const d of this.devices.values()) {
      const snap = d.scheduler.snapshot();
      running += snap.running.length;
      queued += snap.queue.length;
    }
    this.recovered({
      type: 'crashed',
      reason,
      models: models.map((m) => m.id),
      failedRequests: running,
      queuedRequests: queued,
      queuedWait: hold,
    });
    const began = performance.now();
    // Every running request of the dead engine ends (each hears it from the engine client next), each device's
    // at once. The queued ones lost nothing: they stay queued, held, until their model is loaded again (then they
    // are admitted in their order) or cannot be (then they are refused); a slot a failed one frees is not handed
    // to any of them before that. The engine's session KV is gone too.
    for (const d of this.devices.values()) {
      const ids = models.filter((m) => this.deviceOfModel(m.id) === d.key).map((m) => m.id);
      if (ids.length === 0) continue;
      const queued = hold ? [] : d.scheduler.snapshot().queue.filter((r) => ids.includes(r.modelId));
      d.scheduler.failModel(ids, error, { holdQueued: hold });
      for (const r of queued) {
        this.generations.get(r.id)?.refused({
          code: 'ENGINE_FAILED',
          message:
            `${reason} before this request started: the engine failed again each time kvdesk loaded its models ` +
            `back (${this.crashesInARow} failures in a row), so it stopped waiting: send it again once the model is back`,
        });
      }
    }
    this.sessions.clear();
    // Bring the engine back with the same models so the app keeps working; requests that arrive meanwhile wait
    // for their model, as they do while a person loads it again.
    let previous: Promise<void> = Promise.resolve();
    for (const m of models) {
      // One load after another, as the person's loads went.
      const back: Promise<void> = previous
        .then(() => {
          if (!current()) return undefined;
          return this.engine.load(m.id, m.spec, [providerShortName(m.spec.executionProvider ?? CPU) ?? 'cpu']);
        })
        .then(
          () => {
            // Back: its queued requests are admitted as usual, before those that waited for this load are sent
            // (they queue behind them). A recovery the next crash overtook leaves that to the next one.
            if (current()) {
              this.devices.get(m.device)?.scheduler.resumeModel(m.id);
              this.recovered({ type: 'back', modelId: m.id, ms: performance.now() - began });
            }
          },
          (err: unknown) => {
            // A load the next crash cut short is that recovery's to do again, not a model that cannot load.
            if (!current()) return;
            this.recovered({ type: 'lost', modelId: m.id, message: toErrorInfo(err).message });
            this.refuseHeld(m, {
              code: 'ENGINE_FAILED',
              message:
                `${reason} before this request started, and kvdesk could not load model ${m.id} again ` +
                `(${toErrorInfo(err).message}): load the model, then send the request again`,
              detail: { modelId: m.id },
            });
            this.models.delete(m.id);
            this.dropDeviceIfUnused(m.device);
          },
        )
        .finally(() => {
          if (this.reloading.get(m.id) === back) this.reloading.delete(m.id);
        });
      this.reloading.set(m.id, back);
      previous = back;
    }
    this.reloadChanged('model');
    void previous.then(() => {
      if (current()) this.crashesInARow = 0;
      this.refreshBudget();
      this.reloadChanged('model');
    });
  }

  /** A model that could not come back after a crash: the requests queued for it are refused (while it is known). */
  private refuseHeld(m: LoadedModel, error: ErrorInfo): void {
    const sched = this.devices.get(m.device)?.scheduler;
    if (!sched) return;
    const queued = sched.snapshot().queue.filter((r) => r.modelId === m.id);
    sched.failModel(m.id, error);
    for (const r of queued) this.generations.get(r.id)?.refused(error);
  }

  /** Stops every request and the engine process. */
  async close(): Promise<void> {
    this.closed = true;
    for (const c of [...this.cancels.values()]) c('shutdown');
    // The engine reports each cancel at its next step: a running request ends as a shutdown, not as the failure
    // of an engine that went away under it (bounded: a long step does not hold the quit).
    const deadline = Date.now() + CLOSE_GRACE_MS;
    while (this.generations.size > 0 && Date.now() < deadline) await sleep(10);
    for (const m of this.models.values()) m.tokenizer.close();
    await this.engine.close();
  }
}

/** A load that kvdesk closing stopped, or did not start. */
function loadCancelled(id: string): KvdeskError {
  return new KvdeskError('CANCELLED', `loading model ${id} was cancelled (shutdown): kvdesk is closing`, {
    reason: 'shutdown',
  });
}

/**
 * A request's chat prompts as rendered and tokenized, kept between the passes that prepare it: a pass that meets a
 * long text not tokenized yet stops, and runs again once it is (off-thread.ts), rendering every prompt it had
 * made again — drop-oldest's search meets one more long prompt each pass, so a long chat was rendered ~80 times
 * and its shorter prompts tokenized each time on the host's thread, which every stream and client waits on. Kept
 * for the model (its template and tokenizer) and the request they were made for, by how many messages were kept.
 */
export interface PromptMemo {
  model?: LoadedModel;
  /** The request they were made for (its time limit aside: what is left of it goes to each pass). */
  request?: GenerateRequest;
  /** A prompt's text, and its ids once it was tokenized. */
  prompts: Map<number, { text: string; ids?: number[] }>;
}

export function newPromptMemo(): PromptMemo {
  return { prompts: new Map() };
}

/** The memo's prompts, emptied first when they were made for another model or request. */
function keptPrompts(memo: PromptMemo, model: LoadedModel, req: GenerateRequest): PromptMemo['prompts'] {
  const fields = (r: GenerateRequest) => JSON.stringify({ ...r, timeoutMs: undefined });
  // (Compared only once there is something to keep: most requests are prepared in one pass.)
  const same =
    memo.model === model && (memo.prompts.size === 0 || (memo.request && fields(memo.request) === fields(req)));
  if (!same) memo.prompts.clear();
  memo.model = model;
  memo.request = req;
  return memo.prompts;
}

/**
 * A chat refused for tokens outside the vocabulary whose messages, emptied, are refused the same way: the chat
 * template's own markup is what the model's vocabulary lacks (a tokenizer that splits `<|im_start|>` into words
 * the model does not have), so no message could ever be sent. Said so, not as the person's text.
 */
function markupOutOfVocab(err: unknown, renderEmpty: () => unknown): unknown {
  if (!(err instanceof KvdeskError) || err.code !== 'TOKEN_OUT_OF_VOCAB') return err;
  try {
    renderEmpty();
    return err;
  } catch (again) {
    if (!(again instanceof KvdeskError) || again.code !== 'TOKEN_OUT_OF_VOCAB') return err;
    const detail = (err.detail ?? {}) as Record<string, unknown>;
    const what = err.message.replace(/\. (Use text|Send prompt ids).*$/, '');
    return new KvdeskError(
      'TOKEN_OUT_OF_VOCAB',
      `The chat template's own markup, whatever the messages say, is outside the model's vocabulary: ${what.charAt(0).toLowerCase()}${what.slice(1)}. This model cannot chat with that template: give it one its vocabulary covers, or send a plain prompt (completions) instead.`,
      { ...detail, field: 'chatTemplate' },
    );
  }
}

/**
 * The refusal of a conversation whose newest turns alone (`rows`, counted no further) already fill the context:
 * CONTEXT_OVERFLOW as the scheduler words it, the prompt's tokens given as at least what those turns have
 * (`countedUpTo` says the whole was not counted), and counted among the scheduler's refusals.
 */
function contextOverflowAtLeast(sched: Scheduler, model: LoadedModel, rows: number[][]): KvdeskError {
  const contextLength = model.spec.contextLength;
  const promptTokens = Math.max(...rows.map((r) => r.length));
  sched.countRejection('CONTEXT_OVERFLOW');
  return new KvdeskError(
    'CONTEXT_OVERFLOW',
    `The prompt has at least ${promptTokens} tokens (its newest turns alone; it was not counted further), ` +
      `which leaves no room for a reply in the model's context of ${contextLength} tokens. ` +
      'Shorten the prompt or start a new chat.',
    { promptTokens, contextLength, sessionTokens: 0, countedUpTo: contextLength - 1 },
  );
}

/**
 * Refuses a prompt `text` whose fewest possible tokens (TextTokenizer.fewestTokens: its length over the longest any
 * token covers) already leave no room for a reply, without tokenizing it: CONTEXT_OVERFLOW as the scheduler words it,
 * the prompt's tokens given as at least that many (`countedUpTo` 0: none were counted).
 */
function refuseSurelyTooLong(sched: Scheduler, model: LoadedModel, text: string): void {
  const contextLength = model.spec.contextLength;
  const promptTokens = model.tokenizer.fewestTokens(text);
  if (promptTokens + 1 <= contextLength) return;
  sched.countRejection('CONTEXT_OVERFLOW');
  throw new KvdeskError(
    'CONTEXT_OVERFLOW',
    `The prompt has at least ${promptTokens} tokens (its ${text.length} characters, over the most any token of the model's vocabulary covers; it was not tokenized), ` +
      `which leaves no room for a reply in the model's context of ${contextLength} tokens. ` +
      'Shorten the prompt or start a new chat.',
    { promptTokens, contextLength, sessionTokens: 0, countedUpTo: 0 },
  );
}

/** The contract's name of prompt `i` of a request that sent several (`prompts[1]`, `promptIdRows[1]`). */
function promptField(req: GenerateRequest, i: number): string | undefined {
  const several = req.prompts ?? req.promptIdRows;
  if (!several || several.length < 2 || i < 0) return undefined;
  return `${req.prompts ? 'prompts' : 'promptIdRows'}[${i}]`;
}

/** Reads prompt `i` of a request with `read`: a refusal of one of several prompts names it (field and message). */
function atPrompt<T>(req: GenerateRequest, i: number, read: () => T): T {
  try {
    return read();
  } catch (err) {
    const field = promptField(req, i);
    if (field === undefined || !(err instanceof KvdeskError)) throw err;
    throw new KvdeskError(err.code, `${field}: ${err.message}`, { ...err.detail, field });
  }
}

/** One request's journey through the funnel. */
/**
 * Lookup decoding's count of a reply as it went out: every token drafted, and of the draft tokens the model took,
 * those among the `kept` tokens the reply kept (a stop string cuts the engine's steps after it, accepted drafts among
 * them; a draft token cut off did not appear in the reply, which OpenAI counts as rejected).
 */
function keptLookup(lookup: EngineLookupCount, kept: number): LookupCount {
  let accepted = 0;
  for (const at of lookup.acceptedAt) if (at < kept) accepted++;
  return { drafted: lookup.drafted, accepted };
}

/**
 * What a reply let out, at a step, ahead of reasoning that followed its answer text (gpt-oss: another analysis
 * message): the text the stop strings and the tool-call reader held back, and any call that text completed.
 */
interface Lead {
  text: string;
  reasoning: string;
  calls: ToolCall[];
  deltas: ToolCallDelta[];
}

class Generation {
  private grant: AdmissionGrant | null = null;
  private acceptedSent = false;
  private pendingGrant: AdmissionGrant | null = null;
  private ended = false;
  /** The request's own time limit (`timeoutMs`), cleared when it ends: a pending timer keeps the whole reply. */
  private timeout: ReturnType<typeof setTimeout> | undefined;
  private cancelReason: 'user' | 'disconnect' | 'timeout' | 'shutdown' | null = null;
  private readonly rowIds: number[][];
  private readonly rowText: string[];
  private readonly rowStopped: Array<FinishReason | null>;
  /** The stop string that ended each row, if one did. */
  private readonly rowStopSequence: Array<string | undefined>;
  /** With `logprobs`: each row's tokens' log-probabilities, as the result reports them. */
  private readonly rowLogprobs: GeneratedTokenLogprob[][] | undefined;
  /** Length of each row's text as decoded so far, before stop strings cut it. */
  private readonly rowDecoded: number[];
  /**
   * With `logprobs`: tokens whose text the stop matcher (or the decoder) still holds back. They go out with
   * the text they wrote; those at or after a stop string never do, as that text does not.
   */
  private readonly rowHeldLogprobs: GeneratedTokenLogprob[][];
  /** Characters of each row's answer fed to its stop matcher, and those it let through. */
  private readonly rowAnswerFed: number[];
  private readonly rowAnswerEmitted: number[];
  /**
   * Parts of each row's answer passed on (stop strings, tool-call reader), and their count when what those held
   * was last let out ahead of reasoning: nothing new, nothing held, and nothing to do on a reasoning token.
   */
  private readonly rowAnswerParts: number[];
  private readonly rowAnswerPartsReleased: number[];
  private readonly decoders;
  private readonly matchers;
  /** A thinking model's replies: each row's splitter of reasoning from answer, its reasoning and its tokens. */
  private readonly splitters: ReasoningSplitter[] | undefined;
  private readonly rowReasoning: string[];
  private readonly rowReasoningTokens: number[];
  /** Tokens of a reply's start that may be an opening marker's (counted as reasoning if it is one). */
  private readonly rowOpening: number[];
  /** With tools: each row's reader of calls, and the calls read so far. */
  private readonly toolFilters: ToolCallFilter[] | undefined;
  private readonly rowCalls: ToolCall[][];
  /**
   * A Harmony call being read on each row (between kvdesk's markup around it): its arguments as the model wrote
   * them, given back as text should it not be read as a call, and whether it was.
   */
  private readonly rowHarmonyCall: Array<{ body: string; read: boolean } | undefined>;
  /** Whether each row's stop matcher matched (kvdesk's markup, which skips it, is dropped after that too). */
  private readonly rowMatched: boolean[];
  private readonly started: number;
  private admittedAt = 0;
  private firstTokenAt = 0;
  private lastTokenAt = 0;
  private generated = 0;
  private reused = 0;
  private promptTokens: number;
  private clipped: ContextClip | undefined;
  private budgetCap: BudgetCap | undefined;
  /** The scheduler of the device the model's KV lives on. */
  private readonly sched: Scheduler;

  constructor(
    private readonly host: RunnerService,
    private readonly id: string,
    private readonly req: GenerateRequest,
    private readonly model: LoadedModel,
    private readonly rows: number[][],
    private readonly tools: ToolPlan | undefined,
    private readonly contextDrop: ContextDrop | undefined,
    private readonly reasoning: ReasoningPlan | undefined,
    private readonly sink: (frame: StreamFrame) => void,
    private readonly resolve: (r: GenerationResult) => void,
    private readonly reject: (e: Error) => void,
  ) {
    this.started = performance.now();
    this.rowIds = rows.map(() => []);
    this.rowText = rows.map(() => '');
    this.rowStopped = rows.map(() => null);
    this.rowStopSequence = rows.map(() => undefined);
    this.rowLogprobs = req.logprobs !== undefined ? rows.map(() => []) : undefined;
    this.rowDecoded = rows.map(() => 0);
    this.rowHeldLogprobs = rows.map(() => []);
    this.rowAnswerFed = rows.map(() => 0);
    this.rowAnswerEmitted = rows.map(() => 0);
    this.rowAnswerParts = rows.map(() => 0);
    this.rowAnswerPartsReleased = rows.map(() => 0);
    const reads = tools?.reads ? tools : undefined;
    // A tool-call marker that is a special token (Mistral's [TOOL_CALLS]) stays in the text the filter reads, and
    // reasoning markers in the text the splitter reads.
    const keep = new Set([...(reads?.keepIds ?? []), ...(reasoning?.keepIds ?? [])]);
    this.decoders = rows.map(() =>
      createStreamDecoder(model.tokenizer, {
        skipSpecialTokens: true,
        ...(keep.size > 0 ? { keepSpecialIds: keep } : {}),
      }),
    );
    // (A reply whose reasoning is its text, asText, is not split.)
    this.splitters =
      reasoning && !reasoning.asText
        ? rows.map(() =>
            reasoning.spec.harmony
              ? createHarmonySplitter({
                  inside: reasoning.inside,
                  answering: reasoning.answering === true,
                  continuing: reasoning.continuing === true,
                })
              : createReasoningSplitter(reasoning.spec, { inside: reasoning.inside }),
          )
        : undefined;
    this.rowReasoning = rows.map(() => '');
    this.rowReasoningTokens = rows.map(() => 0);
    this.rowOpening = rows.map(() => 0);
    // A forced call or a JSON reply ends when its object closes: a stop string inside it would only break it.
    this.matchers = rows.map(() => createStopMatcher(tools?.forced || jsonOutput(req) ? [] : (req.stop ?? [])));
    // A bare-JSON call beside JSON output: an object may be either until the call's grammar refuses it.
    const mayBeCall =
      reads?.grammar && reads.format.open === '' && jsonOutput(req) ? bareCallTest(reads.grammar) : undefined;
    this.toolFilters = reads
      ? rows.map(() =>
          createToolCallFilter(reads.format, reads.names, {
            forced: reads.forced,
            // (Its opening, written for the model after its reasoning, comes before the call.)
            ...(reads.afterReasoning ? { skip: reads.afterReasoning } : {}),
            paramSchemas: reads.paramSchemas,
            // A call held to its schema (forced, or by auto's grammar) cannot turn out to be text, so its arguments
            // may go out as they are written; not where a stop string could still cut it into text, nor where the
            // object may still turn out to be the reply's JSON.
            streamArguments:
              reads.forced || (reads.grammar !== undefined && (req.stop ?? []).length === 0 && !mayBeCall),
            ...(reads.forcedName ? { forcedName: reads.forcedName } : {}),
            ...(mayBeCall ? { mayBeCall } : {}),
          }),
        )
      : undefined;
    this.rowCalls = rows.map(() => []);
    this.rowHarmonyCall = rows.map(() => undefined);
    this.rowMatched = rows.map(() => false);
    this.promptTokens = Math.max(...rows.map((r) => r.length));
    this.sched = host.schedulerOf(model.id);
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
    clearTimeout(this.timeout);
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
      // A thread that switches models leaves the other model's KV: free it (once its turn there ended).
      const busy = this.host.releaseSessionOfOtherModels(sessionId, this.model.id);
      if (busy) {
        this.fail(new KvdeskError(busy.code, busy.message, busy.detail));
        return;
      }
      // Reused only when it is this load's KV and the scheduler holds exactly it (else the turn starts over).
      const held = this.sched.sessionInfo(sessionId);
      if (
        mirror &&
        mirror.modelId === this.model.id &&
        mirror.loadKey === this.model.loadKey &&
        held?.tokens === mirror.tokens.length
      ) {
        const row = this.rows[0] as number[];
        this.reused = Math.min(commonPrefix(mirror.tokens, row), row.length - 1);
        promptTokens = row.length - this.reused;
      }
    }
    const maxNewTokens = maxNewTokensOf(this.req, spec, this.reasoning !== undefined);
    // A static cache: the request holds all its positions whatever its length (undefined otherwise).
    const fixedTokens = staticPositions(spec);
    const submitted = this.sched.submit(
      {
        id: this.id,
        modelId: this.model.id,
        bpt: spec.bpt,
        contextLength: spec.contextLength,
        rows: this.rows.length,
        promptTokens,
        maxNewTokens,
        ...(fixedTokens !== undefined ? { fixedTokens } : {}),
        // Rows padded to the batch's longest: the scheduler charges the padding.
        ...(this.model.batches && fixedTokens === undefined ? { paddedBatch: true } : {}),
        ...(this.req.priority !== undefined ? { priority: this.req.priority } : {}),
        // The turn keeps only the session KV its prompt continues; the scheduler drops the rest.
        ...(sessionId ? { sessionId, sessionReuseTokens: this.reused } : {}),
        // A prompt cache's client opened no session: a refusal names the whole prompt it sent.
        ...(sessionId?.startsWith(PROMPT_CACHE_PREFIX) ? { anonymousSession: true } : {}),
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
      this.fail(this.host.onDevice(this.model.id, this.namePrompt(submitted.error)));
      return;
    }
    if (sessionId?.startsWith(PROMPT_CACHE_PREFIX)) this.host.notePromptCache(sessionId, this.model.id);
    this.clipped = submitted.value.clipped;
    this.emit({
      type: 'accepted',
      requestId: this.id,
      modelId: this.model.id,
      promptTokens: this.promptTokens,
      rows: this.rows.length,
      maxNewTokens: this.clipped?.clippedMaxTokens ?? maxNewTokens,
      ...(fixedTokens !== undefined ? { fixedTokens } : {}),
      ...(this.clipped ? { clipped: this.clipped } : {}),
      ...(this.contextDrop ? { contextDrop: this.contextDrop } : {}),
    });
    this.acceptedSent = true;
    // Cancelled from inside the sink as the accepted frame went out (a transport whose client left): cancel() could
    // not end it then, before the caller heard of it. A grant that came meanwhile is ended by start() instead.
    if (this.cancelReason && !this.pendingGrant) {
      this.endQueued();
      return;
    }
    if (this.req.timeoutMs !== undefined) {
      // Counts from acceptance: time spent queued is part of what the caller waits for.
      this.timeout = setTimeout(() => this.cancel('timeout'), this.req.timeoutMs);
      this.timeout.unref();
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
      this.endAdmitted(grant);
      return;
    }
    const spec = this.model.spec;
    try {
      // A thinking model's calls come after its reasoning: the grammar waits for its close. Harmony's reasoning
      // ends with its analysis message (the next message may be a call or a preamble, not only the final one).
      const plan = this.reasoning;
      // JSON output (tool calls beside it too) is the answer after the reasoning: the engine holds it there (for
      // gpt-oss, in the final message, whose header ends the reasoning). Told not to think (the prompt closed the
      // reasoning), the reply is held from its first token as for any model.
      const held = plan !== undefined && jsonOutput(this.req) && this.req.thinking !== false;
      const reasoningEnd = plan?.spec.harmony ? '<|end|>' : plan?.spec.close;
      const calls = this.tools?.grammar;
      // (Beside JSON output the calls are the answer: after a held reasoning, or — thinking off — from the start.)
      const grammar =
        calls && plan && reasoningEnd !== undefined && !jsonOutput(this.req)
          ? { ...calls, reasoning: { open: plan.spec.open, close: reasoningEnd, inside: plan.inside } }
          : calls;
      const tok = this.model.tokenizer;
      // A forced call after the reasoning: its opening is written after the close (the budget's, or the model's
      // own, with the blank line a tag's template writes); gpt-oss's final header after its analysis.
      const opening = held ? this.tools?.afterReasoning : undefined;
      const force = plan
        ? [...closeIds(tok, plan.spec), ...(opening ? tok.encode(opening, { addSpecialTokens: false }) : [])]
        : [];
      const afterOwnClose =
        held && plan
          ? opening
            ? { afterClose: tok.encode(`${closeLines(plan.spec.close)[1]}${opening}`, { addSpecialTokens: false }) }
            : heldHarmony(tok, plan.spec)
          : {};
      // A thinking budget (the request's, or its effort's): the engine closes the reasoning after that many tokens.
      // Held, the reasoning is closed in time to leave the answer room, whatever budget the request gave (one
      // sized for the limit it asked, which the scheduler may have cut).
      const asked = thinkingBudgetOf(this.req);
      const thinkingBudget = held
        ? Math.min(
            asked ?? Number.POSITIVE_INFINITY,
            // (The close is written for the model, or — its own close — what follows it: the longer counts.)
            answerRoomBudget(
              grant.admittedMaxTokens,
              Math.max(force.length, 1 + (afterOwnClose.afterClose?.length ?? 0)),
            ),
          )
        : asked;
      const budget =
        plan && (thinkingBudget !== undefined || held) && reasoningEnd !== undefined
          ? {
              key: this.model.loadKey,
              spec: {
                open: plan.spec.open,
                close: reasoningEnd,
                inside: plan.inside,
                ...(thinkingBudget !== undefined ? { tokens: thinkingBudget } : {}),
                force,
                ...(held ? { held, ...afterOwnClose } : {}),
              },
            }
          : undefined;
      if (jsonOutput(this.req) || grammar || budget) {
        const model = this.model;
        this.host.engine.ensureTokenTable(model.id, model.loadKey, () => {
          model.tokenBytes ??= tokenBytesOf(model);
          return model.tokenBytes;
        });
      }
      this.host.engine.generate(
        grant.token,
        {
          requestId: this.id,
          modelId: this.model.id,
          rows: this.rows,
          maxNewTokens: grant.admittedMaxTokens,
          sampling: resolveSampling(this.req, spec),
          eosTokenIds: this.req.ignoreEos ? [] : spec.eosTokenIds,
          ...(this.req.logprobs !== undefined ? { logprobs: this.req.logprobs } : {}),
          ...(jsonOutput(this.req) ? { json: this.model.loadKey } : {}),
          ...(this.req.jsonSchema ? { jsonSchema: this.req.jsonSchema } : {}),
          ...(grammar ? { calls: { key: this.model.loadKey, grammar } } : {}),
          ...(budget ? { budget } : {}),
          ...(this.req.sessionId ? { sessionId: this.req.sessionId } : {}),
          ...(this.req.prediction !== undefined
            ? { prediction: this.model.tokenizer.encode(this.req.prediction, { addSpecialTokens: false }) }
            : {}),
        },
        {
          onStarted: (_prefill, reused) => {
            this.reused = reused;
            if (!this.ended) this.emit({ type: 'started', requestId: this.id, reusedTokens: reused });
          },
          onPrefill: (doneTokens, totalTokens, kvBytes) => {
            if (this.ended) return;
            // The KV read so far is held now (a reused session prefix included), as a token frame reports it.
            this.sched.progress(this.id, { generatedTokens: 0, usedBytes: kvBytes });
            this.emit({ type: 'prefill', requestId: this.id, doneTokens, totalTokens });
          },
          // The reservation covers the session prefix too, so the whole KV counts as used.
          onTokens: (ids, kvBytes, logprobs) => this.onTokens(ids, kvBytes, logprobs),
          onDone: (done) => this.onDone(done),
          onFailed: (error) => {
            this.sched.fail(this.id, error);
            if (this.req.sessionId) this.host.setSessionMirror(this.req.sessionId, undefined);
            this.fail(new KvdeskError(error.code, error.message, error.detail));
          },
        },
      );
    } catch (err) {
      this.sched.fail(this.id, toErrorInfo(err));
      // The scheduler keeps nothing of the session of a turn that failed after its admission: nor may the engine.
      this.forgetSession();
      this.fail(err);
    }
  }

  /** A step's log-probabilities with each token's text and bytes. */
  private named(lp: StepLogprob, textOffset: number): GeneratedTokenLogprob {
    const tok = this.model.tokenizer;
    const entry = (id: number, logprob: number): TokenLogprob => ({ id, ...tok.tokenPiece(id), logprob });
    return { ...entry(lp.id, lp.logprob), top: lp.top.map((t) => entry(t.id, t.logprob)), textOffset };
  }

  private onTokens(ids: number[][], usedBytes: number, logprobs: StepLogprob[][] | undefined): void {
    if (this.ended) return;
    const now = performance.now();
    if (this.firstTokenAt === 0) {
      this.firstTokenAt = now;
      this.sched.firstToken(this.id);
    }
    // Tokens the engine wrote after every row stopped (before it heard so) are not the reply's: its speed ends
    // at the last token it kept.
    if (this.rowStopped.some((s) => s === null)) this.lastTokenAt = now;
    // Each row's tokens in pieces: a frame carries a row's reasoning and its answer apart (clients put the
    // reasoning first), so reasoning that follows answer text (gpt-oss: a preamble, then another analysis message)
    // starts a piece of its own, sent in the next frame: clients read the two in the model's order.
    type Piece = {
      ids: number[];
      out: { text: string; reasoning: string };
      logprobs: GeneratedTokenLogprob[] | undefined;
      calls: ToolCall[];
      deltas: ToolCallDelta[];
    };
    const newPiece = (): Piece => ({
      ids: [],
      out: { text: '', reasoning: '' },
      logprobs: this.rowLogprobs ? [] : undefined,
      calls: [],
      deltas: [],
    });
    const rowPieces: Piece[][] = [];
    let maxRowTokens = 0;
    // One token's output, before it goes into a piece: the text the stop strings and the tool-call reader held back
    // that it let out ahead of reasoning (`lead`), then its reasoning and text, calls and call deltas (emptied for
    // each token).
    const step = { text: '', reasoning: '' };
    const lead: Lead = { text: '', reasoning: '', calls: [], deltas: [] };
    const calls: ToolCall[] = [];
    const deltas: ToolCallDelta[] = [];
    for (let r = 0; r < ids.length; r++) {
      let piece = newPiece();
      const pieces = [piece];
      for (const [i, id] of (ids[r] ?? []).entries()) {
        if (this.rowStopped[r]) break;
        (this.rowIds[r] as number[]).push(id);
        const textOffset = this.rowDecoded[r] as number;
        const written = this.decoders[r]?.push(id) ?? '';
        this.rowDecoded[r] = textOffset + written.length;
        const lp = logprobs?.[r]?.[i];
        // The end token a reply ends at is no token of its text (OpenAI lists none), even where its text is read
        // (gpt-oss's <|return|>, which the splitter reads).
        if (piece.logprobs && lp && !(this.req.ignoreEos !== true && this.model.spec.eosTokenIds.includes(id))) {
          this.rowHeldLogprobs[r]?.push(this.named(lp, textOffset));
        }
        step.text = step.reasoning = lead.text = '';
        calls.length = deltas.length = lead.calls.length = lead.deltas.length = 0;
        this.pass(r, written, step, calls, deltas, false, lead);
        piece.out.text += lead.text;
        piece.calls.push(...lead.calls);
        piece.deltas.push(...lead.deltas);
        if (step.reasoning.length > 0 && (piece.out.text.length > 0 || piece.calls.length + piece.deltas.length > 0)) {
          piece = newPiece();
          pieces.push(piece);
        }
        piece.ids.push(id);
        piece.out.text += step.text;
        piece.out.reasoning += step.reasoning;
        piece.calls.push(...calls);
        piece.deltas.push(...deltas);
        if (piece.logprobs) this.releaseLogprobs(r, piece.logprobs);
      }
      for (const p of pieces) {
        this.rowText[r] += p.out.text;
        this.rowReasoning[r] += p.out.reasoning;
      }
      rowPieces.push(pieces);
      maxRowTokens = Math.max(maxRowTokens, (this.rowIds[r] as number[]).length);
    }
    this.generated = maxRowTokens;
    this.sched.progress(this.id, { generatedTokens: maxRowTokens, usedBytes, allRowsTokens: this.allRowsTokens() });
    const frames = Math.max(1, ...rowPieces.map((p) => p.length));
    for (let k = 0; k < frames; k++) {
      const rows = rowPieces.map((pieces) => {
        const p = pieces[k];
        if (p === undefined) return { ids: [], text: '', ...(this.rowLogprobs ? { logprobs: [] } : {}) };
        return {
          ids: p.ids,
          text: p.out.text,
          ...(p.out.reasoning.length > 0 ? { reasoning: p.out.reasoning } : {}),
          ...(p.logprobs ? { logprobs: p.logprobs } : {}),
          ...(p.calls.length > 0 ? { toolCalls: p.calls } : {}),
          ...(p.deltas.length > 0 ? { toolCallDeltas: p.deltas } : {}),
        };
      });
      this.emit({ type: 'tokens', requestId: this.id, rows });
    }
    if (this.rowStopped.every((s) => s !== null)) this.host.engine.cancel(this.id, 'stop');
  }

  /**
   * Moves row r's held log-probabilities whose text has gone out (they begin before the end of the text let
   * through) to `into` and the row's list. Once the row stopped, the rest began at or after the stop string:
   * they are dropped, so the tokens reported are those of the text returned.
   */
  private releaseLogprobs(r: number, into: GeneratedTokenLogprob[], all = false): void {
    const held = this.rowHeldLogprobs[r] as GeneratedTokenLogprob[];
    const through =
      (this.rowDecoded[r] as number) - ((this.rowAnswerFed[r] as number) - (this.rowAnswerEmitted[r] as number));
    let n = 0;
    while (n < held.length && (all || (held[n] as GeneratedTokenLogprob).textOffset < through)) n++;
    const out = held.splice(0, n);
    into.push(...out);
    this.rowLogprobs?.[r]?.push(...out);
    if (this.rowStopped[r]) held.length = 0;
  }

  /** Row r matched a stop string (the first to end it counts). */
  private stopRow(r: number, stop: string | undefined): void {
    if (this.rowStopped[r]) return;
    this.rowStopped[r] = 'stop';
    this.rowStopSequence[r] = stop;
  }

  /**
   * One token's text (or what was held back, at the end: `end`): a thinking model's reasoning is split off, and
   * the answer goes through the stop strings, then the tool-call reader. Reasoning and the rest of the answer
   * are added to `out`. A stop string ends the answer; the reasoning is not searched for one.
   */
  private pass(
    r: number,
    piece: string,
    out: { text: string; reasoning: string },
    calls: ToolCall[],
    deltas: ToolCallDelta[],
    end = false,
    lead?: Lead,
  ): void {
    const splitter = this.splitters?.[r];
    let parts: AnswerPart[] = [{ kind: 'text', text: piece }];
    if (splitter) {
      const before = splitter.state;
      const split = splitter.push(piece);
      const tail = end ? splitter.flush() : { reasoning: '', content: '' };
      const reasoning = split.reasoning + tail.reasoning;
      // The answer gives way to reasoning (gpt-oss: another analysis message): the text the stop strings held back,
      // then what the tool-call reader held, go out first, into `lead` (they came before the reasoning; no stop
      // string and no call spans a message).
      if (
        reasoning !== '' &&
        lead &&
        !this.rowMatched[r] &&
        this.rowAnswerParts[r] !== this.rowAnswerPartsReleased[r]
      ) {
        this.rowAnswerPartsReleased[r] = this.rowAnswerParts[r] as number;
        this.release(r, lead, lead.calls, lead.deltas);
        const filter = this.toolFilters?.[r];
        if (filter && !this.rowHarmonyCall[r]) {
          lead.text += this.takeCalls(r, filter.release(), lead.calls, lead.deltas);
        }
      }
      out.reasoning += reasoning;
      const answer = split.content + tail.content;
      parts = split.parts ? [...split.parts, ...(tail.parts ?? [])] : [{ kind: 'text', text: answer }];
      if (!end) this.countReasoning(r, before, splitter.state);
    }
    for (const part of parts) this.passPart(r, part, out, calls, deltas);
    if (end && !this.rowMatched[r]) this.release(r, out, calls, deltas);
  }

  /**
   * One part of the answer: what the model wrote goes through the stop strings, then the tool-call reader;
   * kvdesk's markup around a Harmony call, and its line between two messages, only to the reader (the text
   * either side of them is not contiguous).
   */
  private passPart(
    r: number,
    part: AnswerPart,
    out: { text: string; reasoning: string },
    calls: ToolCall[],
    deltas: ToolCallDelta[],
  ): void {
    if (this.rowMatched[r]) return;
    if (part.text !== '') (this.rowAnswerParts[r] as number)++;
    if (part.kind === 'text' || part.kind === 'args') {
      const m = this.matchers[r]?.push(part.text);
      (this.rowAnswerFed[r] as number) += part.text.length;
      if (!m) return;
      (this.rowAnswerEmitted[r] as number) += m.emit.length;
      this.answer(r, m.emit, out, calls, deltas);
      if (m.stopped) {
        this.rowMatched[r] = true;
        this.stopRow(r, m.stop);
      }
      return;
    }
    // The model's text held back before kvdesk's markup (or its line between two messages) cannot run on into
    // what follows it.
    this.release(r, out, calls, deltas);
    if (part.kind === 'join') {
      this.answer(r, part.text, out, calls, deltas);
      return;
    }
    const filter = this.toolFilters?.[r];
    if (part.kind === 'open') this.rowHarmonyCall[r] = { body: '', read: false };
    const call = this.rowHarmonyCall[r];
    if (filter && call) {
      // (The line break before a call is kvdesk's too: the reader drops white space between calls.)
      const o = filter.push(part.kind === 'open' ? part.text.trimStart() : part.text);
      if (o.calls.length > 0) call.read = true;
      // At the opening, the reader gives the model's text it held back; later, what it gives as text is the
      // call's markup, or the call given back: its body goes instead.
      out.text += this.takeCalls(r, part.kind === 'open' ? o : { ...o, content: '' }, calls, deltas);
    }
    if (part.kind === 'close') {
      if (call && filter && !call.read) {
        // A call not read (broken, or to an unknown tool) may still hold the reader: its text is dropped.
        filter.flush();
        out.text += call.body;
      }
      this.rowHarmonyCall[r] = undefined;
    }
  }

  /** Releases the text row r's stop matcher holds back. */
  private release(
    r: number,
    out: { text: string; reasoning: string },
    calls: ToolCall[],
    deltas: ToolCallDelta[],
  ): void {
    const rest = this.matchers[r]?.flush() ?? '';
    (this.rowAnswerEmitted[r] as number) += rest.length;
    this.answer(r, rest, out, calls, deltas);
  }

  /** Answer text the model wrote, past the stop strings: a Harmony call's arguments, or text for the reader. */
  private answer(
    r: number,
    text: string,
    out: { text: string; reasoning: string },
    calls: ToolCall[],
    deltas: ToolCallDelta[],
  ): void {
    const call = this.rowHarmonyCall[r];
    const filter = this.toolFilters?.[r];
    if (call && filter) {
      call.body += text;
      const o = filter.push(text);
      if (o.calls.length > 0) call.read = true;
      this.takeCalls(r, { ...o, content: '' }, calls, deltas);
    } else if (call) {
      out.text += text;
    } else {
      out.text += this.readCalls(r, text, calls, deltas);
    }
  }

  /**
   * Counts a token as reasoning when it reasons, or opens or closes the reasoning: the tokens of an opening
   * marker (and whitespace before it) count once the marker is complete; whitespace after the close does not.
   */
  private countReasoning(r: number, before: ReasoningState, after: ReasoningState): void {
    if (before === 'inside' || after === 'inside' || (before === 'start' && after === 'after')) {
      (this.rowReasoningTokens[r] as number) += 1 + (before === 'start' ? (this.rowOpening[r] as number) : 0);
      this.rowOpening[r] = 0;
    } else if (after === 'start') {
      this.rowOpening[r] = (this.rowOpening[r] as number) + 1;
    }
  }

  /**
   * The reply's text after tool calls are read out of it (all of it without tools). Calls completed go to
   * `calls` and the row's list; without parallel calls, the row ends after its first.
   */
  private readCalls(r: number, text: string, calls: ToolCall[], deltas?: ToolCallDelta[]): string {
    const filter = this.toolFilters?.[r];
    if (!filter) return text;
    return this.takeCalls(r, filter.push(text), calls, deltas);
  }

  private takeCalls(r: number, out: ToolCallOutput, calls: ToolCall[], deltas?: ToolCallDelta[]): string {
    const made = this.rowCalls[r] as ToolCall[];
    // Without parallel calls only the first is made: a second one's arguments never go out.
    for (const d of out.deltas) if (this.tools?.parallel || (made.length === 0 && d.index === 0)) deltas?.push(d);
    for (const call of out.calls) {
      if (!this.tools?.parallel && made.length > 0) break;
      made.push(call);
      calls.push(call);
    }
    if (!this.tools?.parallel && made.length > 0) this.rowStopped[r] ??= 'tool_calls';
    return out.content;
  }

  /** The engine's end of the generation: why it ended, and why each row did (an end token, a closed JSON object…). */
  private onDone(done: Extract<EngineEvent, { type: 'done' }>): void {
    const { finishReason: engineReason, rowFinishReasons, sessionTokens, kvBytes } = done;
    // The engine did the work whether or not the request still wants its end.
    this.host.countLookup(done.lookup);
    if (this.ended) return;
    const sessionId = this.req.sessionId;
    // Flush text held back by the decoders and stop matchers.
    type TailRow = {
      ids: number[];
      text: string;
      reasoning?: string;
      logprobs?: GeneratedTokenLogprob[];
      toolCalls?: ToolCall[];
      toolCallDeltas?: ToolCallDelta[];
    };
    const tail: TailRow[] = [];
    // Text held back that came before reasoning let out at the end (a reply cut by max tokens just after another
    // analysis message began): it goes in a frame of its own, first, as onTokens parts a frame.
    const leads: TailRow[] = [];
    for (let r = 0; r < this.rows.length; r++) {
      const out = { text: '', reasoning: '' };
      const lead: Lead = { text: '', reasoning: '', calls: [], deltas: [] };
      const calls: ToolCall[] = [];
      // The last pieces of a streamed call may come with the text held back until now.
      const deltas: ToolCallDelta[] = [];
      // Reasoning cut off (by max tokens) stays reasoning.
      if (!this.rowStopped[r]) this.pass(r, this.decoders[r]?.flush() ?? '', out, calls, deltas, true, lead);
      // Tokens whose text was held back go out with it now (those of a reply that stopped were dropped).
      const lastLogprobs: GeneratedTokenLogprob[] = [];
      if (this.rowLogprobs) this.releaseLogprobs(r, lastLogprobs, true);
      let text = out.text;
      // A call left incomplete is the reply's text (a Harmony call's, what the model wrote of it).
      const filter = this.toolFilters?.[r];
      const call = this.rowHarmonyCall[r];
      this.rowHarmonyCall[r] = undefined;
      if (filter && call) {
        const o = filter.flush();
        text += this.takeCalls(r, { ...o, content: '' }, calls, deltas);
        if (o.calls.length === 0 && !call.read) text += call.body;
      } else if (filter) text += this.takeCalls(r, filter.flush(), calls, deltas);
      this.rowText[r] += lead.text + text;
      this.rowReasoning[r] += out.reasoning;
      // The tokens' log-probabilities go with the first text that goes out.
      const logprobs = lastLogprobs.length > 0 ? { logprobs: lastLogprobs } : {};
      const leading = lead.text.length > 0 || lead.calls.length + lead.deltas.length > 0;
      leads.push({
        ids: [],
        text: lead.text,
        ...(leading ? logprobs : {}),
        ...(lead.calls.length > 0 ? { toolCalls: lead.calls } : {}),
        ...(lead.deltas.length > 0 ? { toolCallDeltas: lead.deltas } : {}),
      });
      tail.push({
        ids: [],
        text,
        ...(out.reasoning.length > 0 ? { reasoning: out.reasoning } : {}),
        ...(leading ? {} : logprobs),
        ...(calls.length > 0 ? { toolCalls: calls } : {}),
        ...(deltas.length > 0 ? { toolCallDeltas: deltas } : {}),
      });
    }
    if (leads.some((t) => t.text.length > 0 || t.toolCalls || t.toolCallDeltas))
      this.emit({ type: 'tokens', requestId: this.id, rows: leads });
    if (tail.some((t) => t.text.length > 0 || t.reasoning || t.logprobs || t.toolCalls || t.toolCallDeltas))
      this.emit({ type: 'tokens', requestId: this.id, rows: tail });

    const cancelled = engineReason === 'cancelled' || (this.cancelReason !== null && engineReason !== 'eos');
    const rowsOut: RowResult[] = this.rows.map((_, r) => {
      const reason = this.rowStopped[r] ?? (cancelled ? 'cancelled' : (rowFinishReasons[r] ?? engineReason));
      const calls = this.rowCalls[r] as ToolCall[];
      // A reply that ended by itself having made calls ends for them.
      const ended = reason === 'eos' || reason === 'stop' || reason === 'tool_calls';
      return {
        tokenIds: this.rowIds[r] as number[],
        text: this.rowText[r] as string,
        ...(this.splitters
          ? { reasoning: this.rowReasoning[r] as string, reasoningTokens: this.rowReasoningTokens[r] as number }
          : {}),
        finishReason: calls.length > 0 && ended ? 'tool_calls' : reason,
        ...(this.rowLogprobs ? { logprobs: this.rowLogprobs[r] as GeneratedTokenLogprob[] } : {}),
        ...(calls.length > 0 ? { toolCalls: calls } : {}),
        ...(reason === 'stop' && this.rowStopSequence[r] !== undefined
          ? { stopSequence: this.rowStopSequence[r] }
          : {}),
      };
    });
    const finishReason = (rowsOut[0] as RowResult).finishReason;
    if (cancelled) {
      const reason = this.cancelReason ?? 'user';
      // A reply the person stopped (or whose client went away) keeps its session's KV as far as the host saw
      // it: the next turn, which holds the conversation and what the reply wrote, reuses it. A timeout or a
      // shutdown keeps nothing.
      const kept =
        sessionId && sessionTokens > 0 && this.stopKeepsSession() ? this.keptTokens(sessionTokens) : undefined;
      this.sched.cancel(this.id, reason, kept ? { sessionTokens: kept.length } : {});
      if (sessionId && kept) this.mirrorSession(sessionId, kept, sessionTokens);
      else this.forgetSession();
      this.fail(this.cancelError(`after ${this.generated} tokens`));
      return;
    }
    const schedReason =
      finishReason === 'stop' ? 'stop' : finishReason === 'eos' || finishReason === 'tool_calls' ? 'eos' : 'length';
    // What the budget held for it at the end: its own bytes and its share of a padded batch's.
    const own = this.grant?.reservedBytes ?? 0;
    // Its padding at the most: a wider reply that ended first left it none at its end.
    const peakPad = this.sched.paddingPeak(this.id);
    let released: number;
    if (sessionId) {
      const tokens = this.keptTokens(sessionTokens);
      released = this.sched.finish(this.id, schedReason, {
        sessionTokens: tokens.length,
        generatedTokens: this.generated,
        allRowsTokens: this.allRowsTokens(),
      });
      this.mirrorSession(sessionId, tokens, sessionTokens);
    } else {
      released = this.sched.finish(this.id, schedReason, {
        generatedTokens: this.generated,
        allRowsTokens: this.allRowsTokens(),
      });
    }
    this.ended = true;
    clearTimeout(this.timeout);
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
      ...(this.splitters
        ? { reasoning: rowsOut[0]?.reasoning ?? '', reasoningTokens: rowsOut[0]?.reasoningTokens ?? 0 }
        : {}),
      finishReason,
      rows: rowsOut,
      promptTokens: this.promptTokens,
      reusedTokens: this.reused,
      bpt: this.model.spec.bpt,
      // A reply a stop string ended holds the KV of what it kept (the engine's steps after the stop are dropped):
      // its prompt and every kept token but the last, which no step has fed yet. A static cache holds its whole
      // cache whatever the reply's length.
      kvBytes:
        finishReason === 'stop' &&
        rowsOut.every((r) => r.finishReason === 'stop') &&
        staticPositions(this.model.spec) === undefined
          ? Math.min(kvBytes, this.rows.length * (this.promptTokens + this.generated - 1) * this.model.spec.bpt)
          : kvBytes,
      reservedBytes: Math.max(released, own + Math.max(0, released - own, peakPad)),
      ...(Math.max(released - own, peakPad) > 0 ? { paddingBytes: Math.max(released - own, peakPad) } : {}),
      ...(this.budgetCap ? { budgetCap: this.budgetCap } : {}),
      ...(this.clipped ? { clipped: this.clipped } : {}),
      ...(this.contextDrop ? { contextDrop: this.contextDrop } : {}),
      ...(done.lookup ? { lookup: keptLookup(done.lookup, this.generated) } : {}),
      // A prediction not drafted from: lookup decoding off on this host, or (the engine's word) impossible for the
      // model, or the reply ran beside other streams all along.
      ...(this.req.prediction === undefined
        ? {}
        : this.host.lookupOff
          ? { predictionUnused: { reason: 'lookup_off' as const } }
          : done.predictionUnused
            ? { predictionUnused: done.predictionUnused }
            : {}),
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

  /** The tokens every row kept together (the generation-tokens counter counts them all). */
  private allRowsTokens(): number {
    return this.rowIds.reduce((n, ids) => n + ids.length, 0);
  }

  /**
   * The session tokens a turn's end keeps: the prompt and the reply as far as the host saw them, at most the
   * `sessionTokens` the engine holds (it may hold more: steps it took before it heard of a stop or a cancel).
   */
  private keptTokens(sessionTokens: number): number[] {
    return [...(this.rows[0] as number[]), ...(this.rowIds[0] as number[])].slice(0, sessionTokens);
  }

  /**
   * The host's mirror of a session after its turn (the scheduler has just recorded what it keeps); the engine,
   * holding `engineTokens`, keeps as many as the scheduler counts.
   */
  private mirrorSession(sessionId: string, tokens: number[], engineTokens: number): void {
    // A session closed while its turn ran is gone from the scheduler (and one whose tokens it refused keeps
    // nothing there): nothing of it may be reused, and the engine must not keep KV the budget does not count.
    if (this.sched.sessionInfo(sessionId)?.tokens !== tokens.length) {
      this.forgetSession();
      return;
    }
    if (engineTokens > tokens.length) this.host.engine.trimSession(sessionId, tokens.length);
    this.host.setSessionMirror(sessionId, {
      modelId: this.model.id,
      tokens,
      promptTokens: Math.min((this.rows[0] as number[]).length, tokens.length),
      loadKey: this.model.loadKey,
    });
    if (sessionId.startsWith(PROMPT_CACHE_PREFIX)) this.host.prunePromptCaches();
  }

  /** This turn's session keeps nothing: the host's mirror and the engine's KV of it go. */
  private forgetSession(): void {
    const sessionId = this.req.sessionId;
    if (!sessionId) return;
    this.host.setSessionMirror(sessionId, undefined);
    this.host.engine.dropSession(sessionId);
    if (sessionId.startsWith(PROMPT_CACHE_PREFIX)) this.host.prunePromptCaches();
  }

  /** The scheduler refused this queued request (the limit was lowered under its minimum). */
  refused(error: ErrorInfo): void {
    if (this.grant) return;
    this.fail(this.host.onDevice(this.model.id, this.namePrompt(error)));
  }

  /**
   * A refusal of several prompts that one of them causes names it: rows are padded to the longest, which leaves
   * no room in the context, or whose one row alone is over the KV budget. A batch that is too big as a whole
   * (each prompt fits alone) stays the request's.
   */
  private namePrompt(error: ErrorInfo): ErrorInfo {
    const longest = this.promptTokens;
    // (Each prompt ran as `rows` copies, one after another.)
    const at = this.rows.findIndex((r) => r.length === longest);
    const field = promptField(this.req, at < 0 ? at : Math.floor(at / (this.req.rows ?? 1)));
    const d = error.detail ?? {};
    if (field === undefined) return error;
    if (error.code === 'CONTEXT_OVERFLOW' && typeof d.contextLength === 'number') {
      return {
        ...error,
        message:
          `${field} has ${longest} tokens, which leaves no room for a reply in the model's context of ` +
          `${d.contextLength} tokens. Shorten it or leave it out.`,
        detail: { ...d, field },
      };
    }
    const spec = this.model.spec;
    const alone = (longest + 1) * spec.bpt;
    if (
      error.code === 'KV_BUDGET_EXCEEDED' &&
      staticPositions(spec) === undefined &&
      typeof d.budgetBytes === 'number' &&
      alone > d.budgetBytes
    ) {
      const [needs, budget] = formatBytesApart(alone, d.budgetBytes);
      return {
        ...error,
        message:
          `${field} alone needs ${needs} of KV cache ((${longest} prompt + 1) tokens × ${spec.bpt} ` +
          `B/token), but the KV budget is ${budget}. Shorten it or leave it out, or raise the KV budget.`,
        detail: { ...d, field },
      };
    }
    return error;
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
      reason: this.cancelReason ?? 'user',
    });
  }

  cancel(reason: 'user' | 'disconnect' | 'timeout' | 'shutdown'): void {
    if (this.ended || this.cancelReason) return;
    this.cancelReason = reason;
    if (!this.grant) {
      // Still queued: no engine work exists, the scheduler drops it. Not yet accepted: submit() ends it once the
      // caller has heard of it.
      if (this.acceptedSent) this.endQueued();
      return;
    }
    this.host.engine.cancel(this.id, 'cancelled');
  }

  /** Whether this stop keeps the session's KV: the person's (Stop, Ctrl+C) or a gone client's; not a time limit's. */
  private stopKeepsSession(): boolean {
    const reason = this.cancelReason ?? 'user';
    return reason === 'user' || reason === 'disconnect';
  }

  /**
   * Ends the request, cancelled as it was admitted (no engine work was sent). The engine's KV of its session is as
   * the last turn left it: a stop that keeps the session's KV keeps the part this turn continues (what the scheduler
   * counts since the admission), as a stop during the reply would; the engine cuts the rest. A session evicted
   * since the turn was accepted has none to keep.
   */
  private endAdmitted(grant: AdmissionGrant): void {
    const reason = this.cancelReason ?? 'user';
    const sessionId = this.req.sessionId;
    const prefix = grant.session && !grant.session.recompute ? grant.session.prefixTokens : 0;
    const kept = sessionId && prefix > 0 && this.stopKeepsSession() ? this.keptTokens(prefix) : undefined;
    this.sched.cancel(this.id, reason, kept ? { sessionTokens: kept.length } : {});
    if (sessionId && kept) {
      const engineTokens = this.host.sessionMirror(sessionId)?.tokens.length ?? Number.POSITIVE_INFINITY;
      this.mirrorSession(sessionId, kept, engineTokens);
    } else this.forgetSession();
    this.fail(this.cancelError('before it started'));
  }

  /** Ends the request, cancelled while it waits for admission (no engine work exists). */
  private endQueued(): void {
    const reason = this.cancelReason ?? 'user';
    this.sched.cancel(this.id, reason);
    // A prompt cache this turn opened holds nothing.
    if (this.req.sessionId?.startsWith(PROMPT_CACHE_PREFIX)) this.host.prunePromptCaches();
    this.fail(this.cancelError('while queued'));
  }
}
