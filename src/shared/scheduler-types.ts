/**
 * The KV scheduler's public shapes: what the host submits, the grant it gets
 * back, the snapshot the UI draws and the events the timeline and metrics read.
 * The scheduler itself lives in src/main/scheduler; these types are shared so
 * the renderer and the HTTP API can use them without importing main code.
 * Rules: ../../../shared/design/SCHEDULER.md.
 */
import { z } from 'zod';
import type { LookupCount } from './contract';
import type { ErrorCode, ErrorInfo } from './errors';

/** Where a request is in its life. `refused` = rejected at submit or while queued; never admitted. */
export type RequestState = 'queued' | 'running' | 'finished' | 'refused' | 'cancelled' | 'failed';

/** Why a generation stopped normally. */
export type FinishReason = 'eos' | 'stop' | 'length';

/** Why a request was cancelled: a person, a closed stream, a deadline, or the app shutting down. */
export type CancelReason = 'user' | 'disconnect' | 'timeout' | 'shutdown';

/**
 * One request as the host submits it. Every route that runs a model (chat,
 * completion, CLI, batch rows, pipelines) is described this way, including work
 * without a decoder (bpt 0: it reserves nothing but still passes admission).
 */
export const RequestShapeSchema = z.object({
  /** Unique among live requests (queued or running). */
  id: z.string().min(1),
  modelId: z.string().min(1),
  /** KV bytes one more position adds at batch 1; 0 for models that hold no KV. */
  bpt: z.int().nonnegative(),
  contextLength: z.int().positive(),
  /** R: rows run as one padded batch (OpenAI n > 1, or several prompts). */
  rows: z.int().positive(),
  /** P: longest row's prompt length; for a session turn only the tokens not already in the session's KV. */
  promptTokens: z.int().positive(),
  /** N requested; clipped to the context window at submit (reported, never silent). */
  maxNewTokens: z.int().positive(),
  /**
   * A static (pre-allocated) KV cache of this many positions per row: a row
   * holds all of them from its first token, whatever P and N, so the
   * reservation is R × fixedTokens × bpt and a session holds fixedTokens × bpt.
   */
  fixedTokens: z.int().positive().optional(),
  /** Higher runs first; equal priorities are first come, first served. Default 0. */
  priority: z.number().optional(),
  /** Multi-turn chat session this turn continues; it must have no other turn queued or running. */
  sessionId: z.string().min(1).optional(),
  /**
   * Tokens of the session's retained KV this turn continues from (the prompt's common prefix with them); the
   * rest is of no use to it and is dropped when the turn is admitted (until then the engine still holds it), so
   * the turn reserves only what it keeps. Default: all of them.
   */
  sessionReuseTokens: z.int().nonnegative().optional(),
  /**
   * The session is the host's prompt cache, which the client never opened (an HTTP API client sends the whole
   * conversation each time): a refusal counts the session tokens the turn continues from as the prompt's and
   * names no session, as it would for the same prompt without the cache.
   */
  anonymousSession: z.boolean().optional(),
  /** Chat thread, for display only. */
  threadId: z.string().optional(),
  /**
   * The model's running requests run as one batch whose rows are padded (on the left) to the longest: each row
   * then holds as many positions as the widest reservation of the batch, not only its own. The scheduler charges
   * that padding (see `paddingBytes`); a graph whose requests take turns, or a static cache, has none.
   */
  paddedBatch: z.boolean().optional(),
});
/** One request as the host submits it; see {@link RequestShapeSchema}. */
export type RequestShape = z.infer<typeof RequestShapeSchema>;

/** Scheduler limits a person or the host can change at run time. */
export const SchedulerLimitsSchema = z.object({
  /** KV byte budget B. */
  limitBytes: z.int().nonnegative(),
  /** Requests that may run at once (engine batch slots); at least 1 so the queue always drains. */
  maxRunning: z.int().positive(),
  /** Requests that may wait; beyond it submit answers QUEUE_FULL. */
  maxQueue: z.int().positive(),
});
/** Scheduler limits; see {@link SchedulerLimitsSchema}. */
export type SchedulerLimits = z.infer<typeof SchedulerLimitsSchema>;

/**
 * How the byte budget was chosen. Kept and shown next to the limit, never only
 * its result, so a person can see which input to change.
 */
export interface BudgetDerivation {
  /** `derived` from memory size, `override` set over a derivation, `explicit` set directly. */
  source: 'derived' | 'override' | 'explicit';
  /** Which memory the derivation read (absent for explicit limits). */
  memory?: 'system-ram' | 'device-memory';
  totalMemoryBytes?: number;
  /** Share of the memory kvdesk may use, in (0, 1]. */
  fraction?: number;
  weightsBytes?: number;
  overheadBytes?: number;
  /** memory × fraction − weights − overhead, before clamping (may be negative). */
  derivedBytes?: number;
  overrideBytes?: number;
  /** The budget B that results. */
  limitBytes: number;
  /** Human formula, e.g. `24.0 GiB system RAM × 0.5 − 3.2 GiB weights − 0.8 GiB overhead = 8.0 GiB`. */
  formula: string;
  /** Anything a person should know (clamping, override). */
  notes: string[];
}

/** Reported when N was cut so that P + N fits the context window. */
export interface ContextClip {
  requestedMaxTokens: number;
  clippedMaxTokens: number;
  contextLength: number;
}

/**
 * Reported when a request was admitted with fewer new tokens than it asked for
 * because the budget could not hold the full reservation. UI and API show it.
 */
export interface BudgetCap {
  /** N after context clipping. */
  requestedMaxTokens: number;
  /** N' actually reserved (≥ 1). */
  admittedMaxTokens: number;
  requestedBytes: number;
  admittedBytes: number;
  /** Bytes that were available to this request when it was admitted. */
  availableBytes: number;
}

/** What a session turn's grant says about the session's retained KV. */
export interface SessionGrant {
  sessionId: string;
  /** Tokens of earlier turns this turn builds on (all reserved by this grant). */
  prefixTokens: number;
  /**
   * True when the session's KV was evicted after the turn was submitted: the
   * engine must prefill the prefix again (the reservation already covers it).
   */
  recompute: boolean;
}

/**
 * Proof of admission, handed to the listener's onAdmitted. The engine client
 * refuses work unless `scheduler.isGrantLive(grant)` (this exact object), which
 * is true only between admission and release.
 */
export interface AdmissionGrant {
  readonly requestId: string;
  /** Unique per admission. */
  readonly token: string;
  /** R × (prefix + P + N') × bpt. */
  readonly reservedBytes: number;
  /** N': generate at most this many tokens. */
  readonly admittedMaxTokens: number;
  readonly budgetCap?: BudgetCap;
  readonly session?: SessionGrant;
  readonly admittedAt: number;
}

/** The host's callback for one request; may run inside submit or later when room frees. */
export interface AdmissionListener {
  onAdmitted(grant: AdmissionGrant): void;
}

/** One request as the snapshot shows it (live or recently ended). */
export interface SchedulerRequestView {
  id: string;
  modelId: string;
  threadId?: string;
  sessionId?: string;
  state: RequestState;
  priority: number;
  rows: number;
  promptTokens: number;
  /** Tokens of the session's earlier turns this request builds on (0 without a session). */
  sessionPrefixTokens: number;
  /** N as asked, before context clipping. */
  requestedMaxTokens: number;
  /** N after context clipping. */
  maxNewTokens: number;
  /** N' once admitted. */
  admittedMaxTokens?: number;
  bpt: number;
  /** A static cache's positions per row: the reservation is rows × fixedTokens × bpt. */
  fixedTokens?: number;
  /**
   * Bytes reserved while running (its padding included); for ended requests, what it had reserved when it
   * ended.
   */
  reservedBytes: number;
  /**
   * Of `reservedBytes`, the padding its rows carry in a batch with a wider reservation: rows × (the batch's
   * widest positions − its own) × bpt. It changes as the batch does.
   */
  paddingBytes?: number;
  usedBytes: number;
  generatedTokens: number;
  clipped?: ContextClip;
  budgetCap?: BudgetCap;
  acceptedAt?: number;
  admittedAt?: number;
  firstTokenAt?: number;
  endedAt?: number;
  endReason?: FinishReason | CancelReason;
  error?: ErrorInfo;
}

/** A chat session's retained KV. */
export interface SchedulerSessionView {
  sessionId: string;
  modelId: string;
  /** `queued`/`running`: a turn is waiting or running (the session is busy). */
  state: 'idle' | 'queued' | 'running';
  /** Tokens resident in its KV (0 after eviction). */
  tokens: number;
  /** Bytes it holds against the budget; 0 while running (its KV is then part of the turn's reservation). */
  heldBytes: number;
  bpt: number;
  /** A static cache's positions: while the session holds any tokens it holds fixedTokens × bpt. */
  fixedTokens?: number;
  createdAt: number;
  lastUsedAt: number;
  /** The turn queued or running, if any. */
  turnRequestId?: string;
  /** closeSession was called while a turn was in flight: dropped when that turn ends. */
  closing: boolean;
}

/** A Prometheus-style histogram: cumulative counts per upper bound (seconds). */
export interface HistogramView {
  bounds: number[];
  /** counts[i] = observations ≤ bounds[i]; `count` is the +Inf bucket. */
  counts: number[];
  count: number;
  sum: number;
}

/** Totals since the scheduler was created, for /metrics. */
export interface SchedulerCounters {
  accepted: number;
  admitted: number;
  finished: number;
  cancelled: number;
  failed: number;
  /** Refusals by error code (submit-time and queued). */
  rejections: Partial<Record<ErrorCode, number>>;
  budgetCapped: number;
  contextClipped: number;
  evictions: number;
  generationTokens: number;
  /** First token time − accepted time. */
  ttftSeconds: HistogramView;
  /** Admitted time − accepted time. */
  queueTimeSeconds: HistogramView;
}

/** A broken promise by the host or engine, recorded instead of trusted. */
export interface SchedulerViolation {
  at: number;
  kind: 'over-charge' | 'over-generation' | 'session-tokens' | 'listener-error';
  requestId?: string;
  message: string;
}

/** Everything the budget panel and the API need, at one instant. */
export interface SchedulerSnapshot {
  at: number;
  limitBytes: number;
  /** Sum of running reservations (including session prefixes of running turns). */
  reservedBytes: number;
  /** Sum of actual KV bytes reported by running requests. */
  usedBytes: number;
  /** Sum of idle or queued sessions' retained KV. */
  heldBytes: number;
  /** max(0, limit − reserved − held). */
  freeBytes: number;
  /** bpt of the single known model, or null when none or several are known. */
  bpt: number | null;
  derivation: BudgetDerivation;
  maxRunning: number;
  maxQueue: number;
  /** In admission order. */
  queue: SchedulerRequestView[];
  running: SchedulerRequestView[];
  /** Least recently used first (the next eviction victim first). */
  sessions: SchedulerSessionView[];
  /** Last ended requests, newest last, bounded by historyLimit. */
  recent: SchedulerRequestView[];
  counters: SchedulerCounters;
  violations: SchedulerViolation[];
}

/** One device's budget: its scheduler's snapshot, the device it is for, and the models placed there. */
export interface DeviceBudgetSnapshot extends SchedulerSnapshot {
  /** `cpu`, `cuda:0`, `webgpu:0`, … */
  device: string;
  /** Loaded models whose KV lives on this device. */
  models: string[];
}

/**
 * What the host publishes (budget panel, /v1/kvdesk/budget): the CPU's budget
 * at the top level, and every device's budget in `devices`, the CPU's first.
 * A GPU appears while a model is placed on it.
 */
export interface BudgetSnapshot extends DeviceBudgetSnapshot {
  devices: DeviceBudgetSnapshot[];
  /** The counters of devices that went with their last model (so /metrics' totals never go down). */
  retiredCounters?: SchedulerCounters;
  /** Lookup decoding since the host started: tokens drafted and checked, and those the model took. */
  lookup?: LookupCount;
  /**
   * Requests sent while their model loads again (the person picked another variant, backend or template): they
   * are in no scheduler yet and reserve nothing; each starts, as if sent then, once the load is in. Oldest first.
   */
  reloadWaits?: ReloadWait[];
}

/** A request waiting for its model's load again to finish. */
export interface ReloadWait {
  requestId: string;
  modelId: string;
  /** The chat it is for, when a window sent it. */
  threadId?: string;
  /** Wall clock (ms since the epoch) when it was sent. */
  since: number;
}

/** Why a session's KV was dropped. */
export type EvictionReason = 'admission' | 'reconfigure' | 'manual' | 'closed' | 'model-failed';

/** Limits before and after a reconfigure. */
export interface LimitsChange {
  before: SchedulerLimits;
  after: SchedulerLimits;
}

/**
 * Discrete scheduler events for the timeline and logs. Every event carries `at`
 * (the injected clock) and the request or session it is about.
 */
export type SchedulerEvent =
  | {
      type: 'accepted';
      at: number;
      requestId: string;
      modelId: string;
      sessionId?: string;
      threadId?: string;
      rows: number;
      promptTokens: number;
      maxNewTokens: number;
      clipped?: ContextClip;
    }
  | { type: 'queued'; at: number; requestId: string; position: number; queueLength: number }
  | {
      type: 'admitted';
      at: number;
      requestId: string;
      sessionId?: string;
      reservedBytes: number;
      admittedMaxTokens: number;
      budgetCap?: BudgetCap;
      queueMs: number;
    }
  | { type: 'rejected'; at: number; requestId: string; stage: 'submit' | 'queued'; error: ErrorInfo }
  | { type: 'firstToken'; at: number; requestId: string; ttftMs: number }
  | {
      type: 'progress';
      at: number;
      requestId: string;
      generatedTokens: number;
      usedBytes: number;
      reservedBytes: number;
    }
  | {
      type: 'finished';
      at: number;
      requestId: string;
      reason: FinishReason;
      generatedTokens: number;
      sessionId?: string;
      sessionTokens?: number;
    }
  | { type: 'cancelled'; at: number; requestId: string; reason: CancelReason; wasRunning: boolean }
  | { type: 'failed'; at: number; requestId: string; error: ErrorInfo; wasRunning: boolean }
  | {
      type: 'released';
      at: number;
      requestId: string;
      /** The whole reservation returned. */
      bytes: number;
      /** Of those, bytes the session now retains (counted as held). */
      retainedBytes: number;
    }
  | {
      type: 'evicted';
      at: number;
      sessionId: string;
      modelId: string;
      tokens: number;
      bytes: number;
      reason: EvictionReason;
      /** The request whose admission needed the room. */
      forRequestId?: string;
    }
  | {
      type: 'reconfigured';
      at: number;
      limits: LimitsChange;
      derivation: BudgetDerivation;
      /** Queued requests refused because their minimum no longer fits. */
      rejectedRequestIds: string[];
      /** reserved + held exceed the new limit: no admission until usage falls under it. */
      overLimit: boolean;
    }
  | { type: 'violation'; at: number; requestId?: string; violation: SchedulerViolation };

/** Event type names, e.g. for filters. */
export type SchedulerEventType = SchedulerEvent['type'];
