/**
 * The KV scheduler: one ledger of reservations and retained session KV against
 * a byte budget, one admission function, and the events that explain both.
 * Pure TypeScript with an injected clock; the host (RunnerService) calls it and
 * the engine only runs work whose grant is live. Rules: shared/design/SCHEDULER.md.
 *
 * Choices where the spec leaves room (each for the reason given):
 * - A session turn's reservation is R × (prefix + P + N) × bpt, where prefix is
 *   the session's retained tokens at submit (only the sessionReuseTokens the
 *   turn continues from, when the host says so): the retained KV moves from
 *   "held" into the turn's reservation while it runs, so the engine may report
 *   the whole sequence's KV as usedBytes and capacity is never counted twice.
 *   P is the tokens beyond that prefix. The rest of the session's KV is dropped
 *   when the turn is admitted, not before: until then the engine still holds
 *   all of it, so it stays held (and evictable), and a turn that ends without
 *   running leaves the session exactly as the engine has it.
 * - Evicting a session whose turn is queued does not invalidate the turn: the
 *   prefix was reserved at submit, and the grant says `recompute: true`.
 * - After a running turn fails, or is cancelled by a time limit or a shutdown,
 *   its session keeps nothing (the partial KV is cheaper to recompute than to
 *   trust); one stopped by the person or a client that went away keeps the
 *   tokens the host says (`sessionTokens`: the conversation so far, also before
 *   the first token); a queued turn that ends leaves the session's KV as it was.
 * - A request on a static KV cache (`fixedTokens`: buffers of that many
 *   positions, allocated whole) reserves R × fixedTokens × bpt whatever P and N,
 *   is never capped (its cost does not depend on N), and its session holds
 *   fixedTokens × bpt while it keeps any token; such a cache bounds the context.
 * - A session turn has one row; malformed requests and duplicate ids are
 *   refused with BAD_REQUEST and no event, so no event ever names a live
 *   request's id for something that did not happen to it.
 * - Lowering the limit also evicts idle sessions (LRU first) until usage fits:
 *   idle KV is not running work, and a person lowering the limit wants memory.
 *   The same holds while running work keeps usage over it: the KV a turn keeps
 *   as it ends is idle, and goes too (reason `reconfigure`) when it does not fit.
 * - Notifications run after the state change that caused them, in order; a
 *   listener that calls back is handled after the current notifications.
 * - A crashed engine the host brings back (failModel with `holdQueued`) ends
 *   only its running requests: its queued ones lost nothing, so they stay
 *   where they are and are held — none is admitted until resumeModel says the
 *   model is back, or a failModel without `holdQueued` ends them. The queue is
 *   served in order, so what waits behind a held head waits too: FIFO order
 *   holds, and the wait is bounded by the host's recovery, which always ends
 *   in one call or the other. Invariant 6 (progress) is about a head that may
 *   run: a held one may not.
 */
import { type ErrorCode, type ErrorDetail, type ErrorInfo, KvdeskError, type Result } from '../../shared/errors';
import {
  type AdmissionGrant,
  type AdmissionListener,
  type BudgetCap,
  type BudgetDerivation,
  type CancelReason,
  type ContextClip,
  type EvictionReason,
  type FinishReason,
  type HistogramView,
  type RequestShape,
  RequestShapeSchema,
  type SchedulerCounters,
  type SchedulerEvent,
  type SchedulerLimits,
  SchedulerLimitsSchema,
  type SchedulerRequestView,
  type SchedulerSessionView,
  type SchedulerSnapshot,
  type SchedulerViolation,
} from '../../shared/scheduler-types';
import { explicitDerivation, formatBytesApart } from './budget';

/** Options of {@link createScheduler}. */
export interface SchedulerOptions extends SchedulerLimits {
  /** How limitBytes was chosen; its limitBytes must equal limitBytes. */
  derivation: BudgetDerivation;
  /** Milliseconds clock (Date.now in the host, a counter in tests). */
  now: () => number;
  /**
   * Called when the scheduler drops a session's KV on its own (to admit a
   * request, after a lowered limit) or through evictSession: the engine must
   * free that session's tensors. Not called for closeSession or failModel,
   * whose callers already know.
   */
  onEvict?: (sessionId: string) => void;
  /** How many ended requests and violations the snapshot keeps (default 100). */
  historyLimit?: number;
}

/** What submit says about an accepted request. */
export interface SubmitAccepted {
  /** Present when N was clipped to the context window. */
  clipped?: ContextClip;
}

/** What the host reports as the engine's tokens arrive. */
export interface ProgressReport {
  /** Tokens of the longest row: what the reservation is checked against. */
  generatedTokens: number;
  usedBytes: number;
  /** Tokens of every row together (the generation-tokens counter); the longest row's when absent. */
  allRowsTokens?: number;
}

/** Extra facts the host reports when a generation ends normally. */
export interface FinishOptions {
  /** Tokens of this session's KV the engine keeps for the next turn (session turns only). */
  sessionTokens?: number;
  /** Final generated-token count, when the last progress report did not carry it. */
  generatedTokens?: number;
  /** Final tokens of every row together (see ProgressReport). */
  allRowsTokens?: number;
}

/** Run-time changes; absent fields keep their value. */
export interface ReconfigureOptions {
  limitBytes?: number;
  maxRunning?: number;
  maxQueue?: number;
  /** New derivation; when given without limitBytes its limitBytes becomes the limit. */
  derivation?: BudgetDerivation;
}

/** What a reconfigure did. */
export interface ReconfigureOutcome {
  rejectedRequestIds: string[];
  /** reserved + held still exceed the new limit: no admission until running work ends. */
  overLimit: boolean;
}

/** The scheduler the host owns; one per host process. */
export interface Scheduler {
  /**
   * Called by the host for every request that will run a model, before any
   * engine work. Validates, refuses or queues it, then runs admission; the
   * listener's onAdmitted may run before submit returns (after the accepted and
   * queued events) or later, when room frees.
   */
  submit(req: RequestShape, listener: AdmissionListener): Result<SubmitAccepted>;
  /**
   * Called by the engine client before starting work: true only between
   * admission and release, and only for the exact grant object issued (or its
   * token, which is what crosses the process boundary to the engine).
   */
  isGrantLive(grant: AdmissionGrant | string): boolean;
  /** Called by the host when a running request produced its first token; false if not running or already reported. */
  firstToken(id: string): boolean;
  /**
   * Called by the host as the engine reports progress. Returns false (and
   * records a violation) when usedBytes exceeds the reservation or more tokens
   * were generated than admitted; false without a violation when not running.
   */
  progress(id: string, report: ProgressReport): boolean;
  /** Called by the host when a running generation ends normally; returns the bytes released (0 when not running). */
  finish(id: string, reason: FinishReason, opts?: FinishOptions): number;
  /**
   * Called by the host on user stop, client disconnect, timeout or shutdown; works queued or running; returns
   * bytes released. A running session turn may keep `sessionTokens` of its KV (what the reply kept, for the
   * next turn), checked as finish checks it; without it the session keeps nothing.
   */
  cancel(id: string, reason: CancelReason, opts?: { sessionTokens?: number }): number;
  /** Called by the host when work for this request failed (queued or running); returns bytes released. */
  fail(id: string, error: ErrorInfo): number;
  /**
   * Called by the host when a model's engine process crashed: fails every
   * queued and running request of that model (or of each model named: an
   * engine process runs several) and drops its sessions, before it admits
   * anything again. With `holdQueued` (the host is loading the model again)
   * only the running ones fail; the queued ones stay queued, unadmitted, until
   * resumeModel or a later failModel without it, and the sessions their turns
   * continue stay with no KV (the turn recomputes its prefix). Returns how
   * many requests it failed.
   */
  failModel(modelId: string | readonly string[], error: ErrorInfo, opts?: { holdQueued?: boolean }): number;
  /**
   * Called by the host when a model failModel held is loaded again: its queued requests may be admitted again,
   * in their order.
   */
  resumeModel(modelId: string | readonly string[]): void;
  /**
   * Called by the host when it unloads a model (nothing of it queued or running): the snapshot's `bpt` stops
   * counting it.
   */
  forgetModel(modelId: string): void;
  /** Called by the host when it loads a model: the snapshot's `bpt` counts it before its first request. */
  noteModel(modelId: string, bpt: number): void;
  /**
   * Called by the host when it refuses a request before submitting it, on the scheduler's grounds (QUEUE_FULL for
   * one that would wait for its model's load beyond the queue's places): the rejection counters count it.
   */
  countRejection(code: ErrorCode): void;
  /** Called by the host when a chat thread is closed or deleted; false if unknown. */
  closeSession(sessionId: string): boolean;
  /** Called by the host when a person frees a session's KV; the session must not be running. */
  evictSession(sessionId: string): Result<{ bytes: number; tokens: number }>;
  /** Called by the host to learn what a session holds before building its next turn. */
  sessionInfo(sessionId: string): SchedulerSessionView | undefined;
  /** Called by the host when a person changes the budget or the limits. */
  reconfigure(opts: ReconfigureOptions): Result<ReconfigureOutcome>;
  /** Called by the host to broadcast the budget state (throttled) and by /metrics. */
  snapshot(): SchedulerSnapshot;
  /**
   * The most padding a running request's rows carried in its padded batch so far (0: none, or not running): the
   * host reads it before `finish`, as a wider reply that ended first leaves the request's padding at 0.
   */
  paddingPeak(id: string): number;
  /** Called by the host and tests to receive every event in order; returns the unsubscribe function. */
  subscribe(fn: (e: SchedulerEvent) => void): () => void;
}

interface Entry {
  readonly shape: RequestShape;
  readonly priority: number;
  /** Session tokens this turn builds on, fixed at submit; reserved even if the session is later evicted. */
  readonly prefixTokens: number;
  readonly maxNewTokens: number;
  readonly clipped: ContextClip | undefined;
  readonly listener: AdmissionListener;
  readonly acceptedAt: number;
  /** Set once, at admission: a request is running exactly while it has a grant and is live. */
  grant?: AdmissionGrant;
  firstTokenAt?: number;
  usedBytes: number;
  generatedTokens: number;
  /** Tokens of every row the generation-tokens counter has counted. */
  countedTokens: number;
  /** While running in a padded batch: the padding its rows carry (part of its reservation; see `repad`). */
  padBytes: number;
  /** The most `padBytes` was while it ran. */
  peakPadBytes: number;
}

interface Session {
  readonly id: string;
  readonly modelId: string;
  readonly bpt: number;
  /** A static cache's positions: while it holds any tokens, the session holds all of them. */
  readonly fixedTokens: number | undefined;
  readonly createdAt: number;
  tokens: number;
  state: 'idle' | 'queued' | 'running';
  lastUsedAt: number;
  turn: string | undefined;
  closing: boolean;
}

/** TTFT buckets of vLLM's vllm:time_to_first_token_seconds. */
const TTFT_BOUNDS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];
/** Buckets of vLLM's request latency histograms (vllm:request_queue_time_seconds). */
const QUEUE_BOUNDS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
/** Retry hint floor: Retry-After is whole seconds, and a sooner retry would only meet the same full queue. */
const MIN_RETRY_MS = 1000;
/** Idle sessions holding nothing that stay listed (forgetEmptySessions). */
export const EMPTY_SESSIONS_KEPT = 64;

function histogram(bounds: number[]): HistogramView {
  return { bounds, counts: bounds.map(() => 0), count: 0, sum: 0 };
}

function observe(h: HistogramView, seconds: number): void {
  h.count += 1;
  h.sum += seconds;
  h.bounds.forEach((bound, i) => {
    if (seconds <= bound) h.counts[i] = (h.counts[i] ?? 0) + 1;
  });
}

function err(code: ErrorCode, message: string, detail?: ErrorDetail): { ok: false; error: ErrorInfo } {
  return { ok: false, error: detail === undefined ? { code, message } : { code, message, detail } };
}

function ok<T>(value: T): { ok: true; value: T } {
  return { ok: true, value };
}

/** Names the first problem zod found; the schemas are flat, so a path has at most one key. */
function describeIssue(error: { issues: Array<{ path: PropertyKey[]; message: string }> }): string {
  // zod reports at least one issue for every failed parse.
  const issue = error.issues[0] as { path: PropertyKey[]; message: string };
  return `${String(issue.path[0] ?? 'input')}: ${issue.message}`;
}

/**
 * Creates the scheduler. Called once by the host at start (and by tests).
 * @throws KvdeskError BAD_REQUEST when the limits are malformed.
 */
export function createScheduler(opts: SchedulerOptions): Scheduler {
  const parsedLimits = SchedulerLimitsSchema.safeParse({
    limitBytes: opts.limitBytes,
    maxRunning: opts.maxRunning,
    maxQueue: opts.maxQueue,
  });
  if (!parsedLimits.success) {
    throw new KvdeskError('BAD_REQUEST', `Scheduler limits are invalid: ${describeIssue(parsedLimits.error)}.`);
  }
  if (opts.derivation.limitBytes !== opts.limitBytes) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `limitBytes ${opts.limitBytes} differs from the derivation's ${opts.derivation.limitBytes}.`,
    );
  }
  const now = opts.now;
  const historyLimit = opts.historyLimit ?? 100;
  let limits: SchedulerLimits = parsedLimits.data;
  let derivation = opts.derivation;

  /** Waiting requests in admission order: priority (higher first), then arrival. */
  const queue: Entry[] = [];
  const running = new Map<string, Entry>();
  const live = new Map<string, Entry>();
  /** Map order is recency: a used session is moved to the end, so iteration is least recently used first. */
  const sessions = new Map<string, Session>();
  const models = new Map<string, number>();
  /** Models whose engine crashed and is coming back: their queued requests are not admitted meanwhile. */
  const held = new Set<string>();
  const liveGrants = new Map<string, AdmissionGrant>();
  const recent: SchedulerRequestView[] = [];
  const violations: SchedulerViolation[] = [];
  const subscribers = new Set<(e: SchedulerEvent) => void>();
  const counters: SchedulerCounters = {
    accepted: 0,
    admitted: 0,
    finished: 0,
    cancelled: 0,
    failed: 0,
    rejections: {},
    budgetCapped: 0,
    contextClipped: 0,
    evictions: 0,
    generationTokens: 0,
    ttftSeconds: histogram(TTFT_BOUNDS),
    queueTimeSeconds: histogram(QUEUE_BOUNDS),
  };
  let grantSeq = 0;

  // Notifications (events, onAdmitted, onEvict) run outside the state change
  // that caused them, in order: a listener that calls back into the scheduler
  // changes state at once, but its own notifications queue behind the current
  // ones, so every subscriber sees accepted → queued → admitted → … → released.
  const outbox: Array<() => void> = [];
  let settling = false;
  // Stryker disable next-line BooleanLiteral: settle() clears it before every read, so its first value is irrelevant.
  let dirty = false;

  function pushBounded<T>(list: T[], item: T): void {
    list.push(item);
    if (list.length > historyLimit) list.shift();
  }

  function recordViolation(kind: SchedulerViolation['kind'], message: string, requestId?: string): void {
    const violation: SchedulerViolation =
      requestId === undefined ? { at: now(), kind, message } : { at: now(), kind, message, requestId };
    pushBounded(violations, violation);
    // A throwing listener must not be told about its own throw: that would loop.
    if (kind !== 'listener-error') emit({ type: 'violation', at: violation.at, requestId, violation });
  }

  function emit(event: SchedulerEvent): void {
    outbox.push(() => {
      for (const fn of subscribers) {
        try {
          fn(event);
        } catch (err) {
          recordViolation('listener-error', `A scheduler subscriber threw on ${event.type}: ${String(err)}`);
        }
      }
    });
  }

  function flush(): void {
    for (let job = outbox.shift(); job !== undefined; job = outbox.shift()) job();
  }

  /**
   * Runs admission until nothing more fits, then delivers notifications; loops
   * while notifications changed state. Every public method ends here, so every
   * state change re-runs admission. Re-entrant calls only mark the state dirty.
   */
  function settle(): void {
    if (settling) {
      dirty = true;
      return;
    }
    settling = true;
    try {
      do {
        dirty = false;
        evictOverLimit();
        while (admitHead()) {
          // admitHead admits at most one request per call; repeat until the head waits.
        }
        forgetEmptySessions();
        flush();
      } while (dirty);
    } finally {
      settling = false;
    }
  }

  /**
   * Idle sessions that hold nothing (evicted, or a turn that kept nothing) stay listed ("idle · nothing kept"),
   * the most recently used EMPTY_SESSIONS_KEPT of them: the rest are forgotten (a next turn starts a new record),
   * so clients that name a new session per request do not grow every snapshot without end.
   */
  function forgetEmptySessions(): void {
    let empty = 0;
    for (const s of sessions.values()) if (s.state === 'idle' && s.tokens === 0) empty += 1;
    // The map runs from the least recently used (touch moves a session to its end).
    for (const s of sessions.values()) {
      if (empty <= EMPTY_SESSIONS_KEPT) return;
      if (s.state !== 'idle' || s.tokens !== 0) continue;
      sessions.delete(s.id);
      empty -= 1;
    }
  }

  function heldOf(s: Session): number {
    // A running session's KV is part of its turn's reservation; counting it here too would charge it twice.
    if (s.state === 'running' || s.tokens === 0) return 0;
    return (s.fixedTokens ?? s.tokens) * s.bpt;
  }

  function reservedTotal(): number {
    let sum = 0;
    for (const e of running.values()) sum += (e.grant as AdmissionGrant).reservedBytes + e.padBytes;
    return sum;
  }

  function heldTotal(): number {
    let sum = 0;
    for (const s of sessions.values()) sum += heldOf(s);
    return sum;
  }

  /** Positions per row a request's KV may reach with `newTokens` new tokens: the width it reserves. */
  function widthOf(e: Entry, newTokens: number): number {
    return e.shape.fixedTokens ?? e.prefixTokens + e.shape.promptTokens + newTokens;
  }

  function bytesFor(e: Entry, newTokens: number): number {
    return e.shape.rows * widthOf(e, newTokens) * e.shape.bpt;
  }

  /**
   * A padded batch: the running requests of the model whose rows the engine runs as one batch, padded on the
   * left to the longest. However the batch changes, a row is never wider than the widest reservation among the
   * requests running with it (each request's rows stop at its own width), so charging every running request
   * its rows × (that widest width − its own) keeps the real padded KV within the reservations.
   */
  function batchOf(modelId: string): Entry[] {
    const batch: Entry[] = [];
    for (const e of running.values()) if (padsIn(e.shape) && e.shape.modelId === modelId) batch.push(e);
    return batch;
  }

  /** Padding only matters where rows hold bytes and grow with the request (not a static cache's). */
  function padsIn(shape: RequestShape): boolean {
    return shape.paddedBatch === true && shape.bpt > 0 && shape.fixedTokens === undefined;
  }

  /** Bytes one more position of every row of the batch adds (each request at its own bpt). */
  function rowBytes(batch: readonly Entry[]): number {
    let sum = 0;
    for (const e of batch) sum += e.shape.rows * e.shape.bpt;
    return sum;
  }

  function widestOf(batch: readonly Entry[]): number {
    let widest = 0;
    for (const e of batch) widest = Math.max(widest, widthOf(e, (e.grant as AdmissionGrant).admittedMaxTokens));
    return widest;
  }

  /** Sets the padding of a model's running requests after its batch changed. */
  function repad(modelId: string): void {
    const batch = batchOf(modelId);
    const widest = widestOf(batch);
    for (const e of batch) {
      e.padBytes = e.shape.rows * (widest - widthOf(e, (e.grant as AdmissionGrant).admittedMaxTokens)) * e.shape.bpt;
      e.peakPadBytes = Math.max(e.peakPadBytes, e.padBytes);
    }
  }

  /**
   * What admitting the head with rows `width` positions wide takes from the budget: its own reservation, and in
   * a padded batch the padding it carries (up to the batch's widest) or adds to the others' rows (when it is the
   * widest).
   */
  function admissionCost(head: Entry, batch: readonly Entry[], widest: number, width: number): number {
    const own = head.shape.rows * head.shape.bpt;
    return own * Math.max(widest, width) + rowBytes(batch) * Math.max(0, width - widest);
  }

  /** The widest rows the head may have within `available` bytes, which its minimum fits. */
  function widestWithin(head: Entry, batch: readonly Entry[], widest: number, available: number): number {
    const own = head.shape.rows * head.shape.bpt;
    const others = rowBytes(batch);
    if (others === 0) return Math.floor(available / own);
    // Up to the batch's width it costs its rows × widest, which fits since its minimum does. Past the batch's
    // width, every row of the batch grows with the head's.
    return Math.max(widest, Math.floor((available + others * widest) / (own + others)));
  }

  /** The session a request belongs to, if any. */
  function sessionOf(shape: RequestShape): Session | undefined {
    // No session is keyed by undefined, so a request without one finds none.
    return sessions.get(shape.sessionId as string);
  }

  function touch(s: Session, at: number): void {
    s.lastUsedAt = at;
    sessions.delete(s.id);
    sessions.set(s.id, s);
  }

  function dropSessionKv(s: Session, reason: EvictionReason, at: number, forRequestId?: string): void {
    const bytes = heldOf(s);
    const tokens = s.tokens;
    s.tokens = 0;
    emit(
      forRequestId === undefined
        ? { type: 'evicted', at, sessionId: s.id, modelId: s.modelId, tokens, bytes, reason }
        : { type: 'evicted', at, sessionId: s.id, modelId: s.modelId, tokens, bytes, reason, forRequestId },
    );
    // Closing and a crashed engine are the host's own doing: only evictions it did not ask for are counted and told.
    if (reason === 'closed' || reason === 'model-failed') return;
    counters.evictions += 1;
    const onEvict = opts.onEvict;
    if (onEvict !== undefined) {
      outbox.push(() => {
        try {
          onEvict(s.id);
        } catch (err) {
          recordViolation('listener-error', `onEvict threw for session ${s.id}: ${String(err)}`);
        }
      });
    }
  }

  /**
   * Idle KV that must go for usage to fit the limit, least recently used first, and the usage left after: none
   * unless the limit was lowered under use (running work, never evictable, may keep usage over it).
   */
  function overLimitVictims(): { victims: Session[]; usage: number } {
    const victims: Session[] = [];
    let usage = reservedTotal() + heldTotal();
    for (const s of sessions.values()) {
      if (usage <= limits.limitBytes) break;
      const bytes = heldOf(s);
      if (bytes === 0) continue;
      usage -= bytes;
      victims.push(s);
    }
    return { victims, usage };
  }

  /**
   * Invariant 1 after a lowered limit: only running work may keep usage over it. A turn that ends then leaves its
   * session's KV idle; it goes (with any other idle KV, least recently used first) until usage fits.
   */
  function evictOverLimit(): void {
    const { victims } = overLimitVictims();
    if (victims.length === 0) return;
    const at = now();
    for (const s of victims) dropSessionKv(s, 'reconfigure', at);
  }

  /** Sessions whose KV may be dropped to admit a request, least recently used first: never running, never its own. */
  function evictionVictims(own: Session | undefined): Session[] {
    return [...sessions.values()].filter((s) => s !== own && heldOf(s) > 0);
  }

  /**
   * The single admission step, and the only place that reserves. Admits the
   * head of the queue when a running slot is free and its reservation fits,
   * evicting idle sessions (LRU first) when that makes it fit.
   *
   * Capping: when even after eviction the full reservation does not fit but
   * the minimum does, the head is admitted with the largest N' that fits if
   * nothing is running, or if nothing waits behind it and its full reservation
   * exceeds the whole budget. The first case is a deliberate extension of
   * SCHEDULER.md step 4: with nothing running, the free budget cannot grow, so a
   * head whose full reservation exceeds the whole budget would otherwise block
   * the queue for ever (invariant 6). The second narrows step 4's "may": a head
   * that fits whole once the running work ends waits for it rather than being
   * cut short (an API client reads a capped reply as one that ran to its
   * max_tokens).
   */
  function admitHead(): boolean {
    const head = queue[0];
    // A held model's engine is not back yet: its head (and, in order, what waits behind it) waits for it.
    if (head === undefined || running.size >= limits.maxRunning || held.has(head.shape.modelId)) return false;
    const own = sessionOf(head.shape);
    const ownHeld = own === undefined ? 0 : heldOf(own);
    // Negative after the limit was lowered below use: then nothing fits, which is the point.
    let available = limits.limitBytes - reservedTotal() - heldTotal() + ownHeld;
    const padded = padsIn(head.shape);
    const batch = padded ? batchOf(head.shape.modelId) : [];
    const widest = widestOf(batch);
    const cost = (newTokens: number) => admissionCost(head, batch, widest, widthOf(head, newTokens));
    const fullBytes = cost(head.maxNewTokens);
    const minimumBytes = cost(1);
    const victims = evictionVictims(own);
    const reachable = victims.reduce((sum, s) => sum + heldOf(s), available);
    const mayCap = running.size === 0 || (queue.length === 1 && bytesFor(head, head.maxNewTokens) > limits.limitBytes);
    if (reachable < fullBytes && !(mayCap && reachable >= minimumBytes)) return false;

    const at = now();
    for (const victim of victims) {
      if (available >= fullBytes) break;
      available += heldOf(victim);
      dropSessionKv(victim, 'admission', at, head.shape.id);
    }
    const capped = available < fullBytes;
    const admittedMaxTokens = capped
      ? widestWithin(head, batch, widest, available) - head.prefixTokens - head.shape.promptTokens
      : head.maxNewTokens;
    const ownBytes = bytesFor(head, admittedMaxTokens);
    const budgetCap: BudgetCap | undefined = capped
      ? {
          requestedMaxTokens: head.maxNewTokens,
          admittedMaxTokens,
          requestedBytes: fullBytes,
          admittedBytes: cost(admittedMaxTokens),
          availableBytes: available,
        }
      : undefined;
    grantSeq += 1;
    const grant: AdmissionGrant = Object.freeze({
      requestId: head.shape.id,
      token: `grant-${grantSeq}`,
      reservedBytes: ownBytes,
      admittedMaxTokens,
      admittedAt: at,
      ...(budgetCap === undefined ? {} : { budgetCap }),
      ...(own === undefined
        ? {}
        : {
            session: { sessionId: own.id, prefixTokens: head.prefixTokens, recompute: own.tokens < head.prefixTokens },
          }),
    });

    // The reservation: one step, before anyone hears of the admission.
    queue.shift();
    head.grant = grant;
    running.set(head.shape.id, head);
    if (padded) repad(head.shape.modelId);
    const reservedBytes = ownBytes + head.padBytes;
    liveGrants.set(grant.token, grant);
    if (own !== undefined) {
      own.state = 'running';
      // The turn continues only its prefix: the rest of the session's KV goes now (its bytes were `ownHeld`).
      own.tokens = Math.min(own.tokens, head.prefixTokens);
    }

    counters.admitted += 1;
    if (capped) counters.budgetCapped += 1;
    const queueMs = at - head.acceptedAt;
    observe(counters.queueTimeSeconds, queueMs / 1000);
    emit({
      type: 'admitted',
      at,
      requestId: head.shape.id,
      ...(own === undefined ? {} : { sessionId: own.id }),
      reservedBytes,
      admittedMaxTokens,
      ...(budgetCap === undefined ? {} : { budgetCap }),
      queueMs,
    });
    outbox.push(() => {
      // A subscriber may have ended the request on its admitted event: then there is nothing to start.
      if (liveGrants.get(grant.token) !== grant) return;
      try {
        head.listener.onAdmitted(grant);
      } catch (err) {
        recordViolation('listener-error', `onAdmitted threw for ${head.shape.id}: ${String(err)}`, head.shape.id);
        // The host never started the work, so nothing else would ever release it, unless the listener ended the
        // request itself before it threw: released once is enough.
        if (live.get(head.shape.id) !== head) return;
        retire(head, 'failed', now(), {
          error: { code: 'INTERNAL', message: `The admission listener failed: ${String(err)}` },
        });
        settle();
      }
    });
    return true;
  }

  function viewOf(e: Entry, state: SchedulerRequestView['state']): SchedulerRequestView {
    const { shape, grant } = e;
    const view: SchedulerRequestView = {
      id: shape.id,
      modelId: shape.modelId,
      state,
      priority: e.priority,
      rows: shape.rows,
      promptTokens: shape.promptTokens,
      sessionPrefixTokens: e.prefixTokens,
      requestedMaxTokens: shape.maxNewTokens,
      maxNewTokens: e.maxNewTokens,
      bpt: shape.bpt,
      reservedBytes: (grant?.reservedBytes ?? 0) + e.padBytes,
      usedBytes: e.usedBytes,
      generatedTokens: e.generatedTokens,
      acceptedAt: e.acceptedAt,
    };
    if (shape.threadId !== undefined) view.threadId = shape.threadId;
    if (shape.sessionId !== undefined) view.sessionId = shape.sessionId;
    if (shape.fixedTokens !== undefined) view.fixedTokens = shape.fixedTokens;
    if (e.clipped !== undefined) view.clipped = e.clipped;
    if (e.padBytes > 0) view.paddingBytes = e.padBytes;
    if (grant !== undefined) {
      view.admittedMaxTokens = grant.admittedMaxTokens;
      view.admittedAt = grant.admittedAt;
      if (grant.budgetCap !== undefined) view.budgetCap = grant.budgetCap;
    }
    if (e.firstTokenAt !== undefined) view.firstTokenAt = e.firstTokenAt;
    return view;
  }

  interface Ending {
    reason?: FinishReason | CancelReason;
    error?: ErrorInfo;
    sessionTokens?: number;
  }

  /**
   * Ends a live request: the one place a reservation is returned. Returns the
   * bytes released; the caller emits nothing more and then settles.
   */
  function retire(e: Entry, state: 'finished' | 'cancelled' | 'failed', at: number, ending: Ending): number {
    const grant = e.grant;
    const wasRunning = grant !== undefined;
    const id = e.shape.id;
    live.delete(id);
    if (wasRunning) running.delete(id);
    else queue.splice(queue.indexOf(e), 1);
    if (wasRunning) liveGrants.delete(grant.token);
    const bytes = wasRunning ? grant.reservedBytes + e.padBytes : 0;
    const view = viewOf(e, state);
    // The rest of its batch may now be narrower.
    e.padBytes = 0;
    if (wasRunning && padsIn(e.shape)) repad(e.shape.modelId);

    let retainedBytes = 0;
    // A live turn's session is always its own: it stays busy (turn = this id) until this very call.
    const session = sessionOf(e.shape);
    if (session !== undefined) {
      session.turn = undefined;
      session.state = 'idle';
      // A turn that never ran left the session's KV as it was; after a running turn the engine keeps only
      // what its end reported (finish, or a cancel that kept the reply so far; nothing after a failure).
      if (wasRunning) session.tokens = ending.sessionTokens ?? 0;
      touch(session, at);
      if (session.closing) sessions.delete(session.id);
      else retainedBytes = heldOf(session);
    }

    view.endedAt = at;
    if (ending.reason !== undefined) view.endReason = ending.reason;
    if (ending.error !== undefined) view.error = ending.error;
    pushBounded(recent, view);

    if (state === 'finished') {
      counters.finished += 1;
      emit({
        type: 'finished',
        at,
        requestId: id,
        reason: ending.reason as FinishReason,
        generatedTokens: e.generatedTokens,
        ...(session === undefined ? {} : { sessionId: session.id, sessionTokens: session.tokens }),
      });
    } else if (state === 'cancelled') {
      counters.cancelled += 1;
      emit({ type: 'cancelled', at, requestId: id, reason: ending.reason as CancelReason, wasRunning });
    } else {
      counters.failed += 1;
      emit({ type: 'failed', at, requestId: id, error: ending.error as ErrorInfo, wasRunning });
    }
    if (wasRunning) emit({ type: 'released', at, requestId: id, bytes, retainedBytes });
    return bytes;
  }

  function refuse(shape: RequestShape, at: number, code: ErrorCode, message: string, detail: ErrorDetail) {
    const result = err(code, message, detail);
    counters.rejections[code] = (counters.rejections[code] ?? 0) + 1;
    pushBounded(recent, {
      id: shape.id,
      modelId: shape.modelId,
      ...(shape.threadId === undefined ? {} : { threadId: shape.threadId }),
      ...(shape.sessionId === undefined ? {} : { sessionId: shape.sessionId }),
      ...(shape.fixedTokens === undefined ? {} : { fixedTokens: shape.fixedTokens }),
      state: 'refused',
      priority: shape.priority ?? 0,
      rows: shape.rows,
      promptTokens: shape.promptTokens,
      sessionPrefixTokens: 0,
      requestedMaxTokens: shape.maxNewTokens,
      maxNewTokens: shape.maxNewTokens,
      bpt: shape.bpt,
      reservedBytes: 0,
      usedBytes: 0,
      generatedTokens: 0,
      endedAt: at,
      error: result.error,
    });
    emit({ type: 'rejected', at, requestId: shape.id, stage: 'submit', error: result.error });
    settle();
    return result;
  }

  /**
   * The prompt and session tokens a refusal names: a prompt cache's tokens are the prompt's (its client sent them
   * and trims them from the prompt, knowing of no session).
   */
  function refusedTokens(shape: RequestShape, prefixTokens: number): { prompt: number; session: number } {
    return shape.anonymousSession === true
      ? { prompt: prefixTokens + shape.promptTokens, session: 0 }
      : { prompt: shape.promptTokens, session: prefixTokens };
  }

  function budgetExceeded(
    shape: RequestShape,
    prefixTokens: number,
    requiredBytes: number,
    why: string,
  ): { message: string; detail: ErrorDetail } {
    const tokens = refusedTokens(shape, prefixTokens);
    const [required, limit] = formatBytesApart(requiredBytes, limits.limitBytes);
    return {
      message:
        `This request needs at least ${required} of KV cache (${shape.rows} ` +
        `${shape.rows === 1 ? 'row' : 'rows'} × ` +
        (shape.fixedTokens !== undefined
          ? `a static cache of ${shape.fixedTokens} positions × ${shape.bpt} B/token), but ${why} ` +
            `${limit}. This model allocates its whole cache per row: ` +
            `${shape.rows > 1 ? 'send fewer rows, or raise' : 'raise'} the KV budget.`
          : `(${tokens.session > 0 ? `${tokens.session} session + ` : ''}${tokens.prompt} prompt + 1) tokens × ` +
            `${shape.bpt} B/token), but ${why} ${limit}. ` +
            `Shorten the prompt, ${shape.rows > 1 ? 'send fewer rows, ' : ''}or raise the KV budget.`),
      detail: {
        requiredBytes,
        budgetBytes: limits.limitBytes,
        bpt: shape.bpt,
        promptTokens: tokens.prompt,
        rows: shape.rows,
        sessionTokens: tokens.session,
      },
    };
  }

  function retryAfterMs(): number {
    let total = 0;
    let samples = 0;
    for (const v of recent) {
      if (v.admittedAt !== undefined) {
        total += (v.endedAt as number) - v.admittedAt;
        samples += 1;
      }
    }
    // A queue slot opens when the head is admitted, i.e. when one of maxRunning running requests ends.
    const serviceMs = samples === 0 ? MIN_RETRY_MS : total / samples;
    return Math.max(MIN_RETRY_MS, Math.ceil(serviceMs / limits.maxRunning));
  }

  function submit(req: RequestShape, listener: AdmissionListener): Result<SubmitAccepted> {
    const at = now();
    const parsed = RequestShapeSchema.safeParse(req);
    // Malformed or duplicate ids get no event: an event under a live request's id would corrupt its history.
    if (!parsed.success) {
      counters.rejections.BAD_REQUEST = (counters.rejections.BAD_REQUEST ?? 0) + 1;
      return err('BAD_REQUEST', `Invalid request: ${describeIssue(parsed.error)}.`);
    }
    const shape = parsed.data;
    const { id, sessionId, rows, promptTokens, bpt, fixedTokens } = shape;
    // A static cache of fewer positions than the declared context bounds the context too.
    const contextLength = Math.min(shape.contextLength, fixedTokens ?? shape.contextLength);
    if (live.has(id) || (sessionId !== undefined && rows > 1)) {
      counters.rejections.BAD_REQUEST = (counters.rejections.BAD_REQUEST ?? 0) + 1;
      return err(
        'BAD_REQUEST',
        live.has(id)
          ? `Request id ${id} is already queued or running.`
          : `A session turn has one row; request ${id} has ${rows}.`,
        { requestId: id },
      );
    }

    const session = sessionOf(shape);
    if (session !== undefined && (session.modelId !== shape.modelId || session.bpt !== bpt)) {
      return refuse(
        shape,
        at,
        'SESSION_INVALID',
        `Session ${session.id} belongs to model ${session.modelId} (${session.bpt} B/token), not ` +
          `${shape.modelId} (${bpt} B/token). Start a new session.`,
        { sessionId: session.id, sessionModelId: session.modelId, modelId: shape.modelId },
      );
    }
    if (session !== undefined && session.state !== 'idle') {
      return refuse(
        shape,
        at,
        'SESSION_INVALID',
        `Session ${session.id} already has a ${session.state} turn (${session.turn}). Wait for it or cancel it.`,
        { sessionId: session.id, state: session.state, turnRequestId: session.turn ?? null },
      );
    }
    // The part of the session's KV the turn continues from; the rest is dropped when the turn is admitted.
    const prefixTokens = Math.min(session?.tokens ?? 0, shape.sessionReuseTokens ?? Number.POSITIVE_INFINITY);
    if (prefixTokens + promptTokens + 1 > contextLength) {
      const tokens = refusedTokens(shape, prefixTokens);
      return refuse(
        shape,
        at,
        'CONTEXT_OVERFLOW',
        `The prompt has ${tokens.prompt} tokens${tokens.session > 0 ? ` on top of ${tokens.session} in the session` : ''}, ` +
          `which leaves no room for a reply in the model's context of ${contextLength} tokens. ` +
          'Shorten the prompt or start a new chat.',
        { promptTokens: tokens.prompt, contextLength, sessionTokens: tokens.session },
      );
    }
    const minimumBytes = rows * (fixedTokens ?? prefixTokens + promptTokens + 1) * bpt;
    if (minimumBytes > limits.limitBytes) {
      const { message, detail } = budgetExceeded(shape, prefixTokens, minimumBytes, 'the KV budget is');
      return refuse(shape, at, 'KV_BUDGET_EXCEEDED', message, detail);
    }
    if (queue.length >= limits.maxQueue) {
      const retry = retryAfterMs();
      return refuse(
        shape,
        at,
        'QUEUE_FULL',
        `The admission queue is full (${queue.length} waiting, limit ${limits.maxQueue}). ` +
          `Retry in about ${Math.ceil(retry / 1000)} s.`,
        { queueLength: queue.length, maxQueue: limits.maxQueue, retryAfterMs: retry },
      );
    }

    const room = contextLength - prefixTokens - promptTokens;
    const maxNewTokens = Math.min(shape.maxNewTokens, room);
    const clipped: ContextClip | undefined =
      maxNewTokens < shape.maxNewTokens
        ? { requestedMaxTokens: shape.maxNewTokens, clippedMaxTokens: maxNewTokens, contextLength }
        : undefined;
    const entry: Entry = {
      shape,
      priority: shape.priority ?? 0,
      prefixTokens,
      maxNewTokens,
      clipped,
      listener,
      acceptedAt: at,
      usedBytes: 0,
      generatedTokens: 0,
      countedTokens: 0,
      padBytes: 0,
      peakPadBytes: 0,
    };
    if (session !== undefined) {
      session.state = 'queued';
      session.turn = id;
      touch(session, at);
    } else if (sessionId !== undefined) {
      const fresh: Session = {
        id: sessionId,
        modelId: shape.modelId,
        bpt,
        fixedTokens,
        createdAt: at,
        tokens: 0,
        state: 'queued',
        lastUsedAt: at,
        turn: id,
        closing: false,
      };
      sessions.set(sessionId, fresh);
    }
    let position = queue.length;
    // Insert behind every request of equal or higher priority: FCFS within a priority class.
    while (position > 0 && (queue[position - 1] as Entry).priority < entry.priority) position -= 1;
    queue.splice(position, 0, entry);
    live.set(id, entry);
    models.set(shape.modelId, bpt);
    counters.accepted += 1;
    if (clipped !== undefined) counters.contextClipped += 1;
    emit({
      type: 'accepted',
      at,
      requestId: id,
      modelId: shape.modelId,
      ...(sessionId === undefined ? {} : { sessionId }),
      ...(shape.threadId === undefined ? {} : { threadId: shape.threadId }),
      rows,
      promptTokens,
      maxNewTokens,
      ...(clipped === undefined ? {} : { clipped }),
    });
    emit({ type: 'queued', at, requestId: id, position, queueLength: queue.length });
    settle();
    return ok(clipped === undefined ? {} : { clipped });
  }

  function isGrantLive(grant: AdmissionGrant | string): boolean {
    if (typeof grant === 'string') return liveGrants.has(grant);
    return liveGrants.get(grant.token) === grant;
  }

  function firstToken(id: string): boolean {
    const e = running.get(id);
    if (e === undefined || e.firstTokenAt !== undefined) return false;
    const at = now();
    e.firstTokenAt = at;
    const ttftMs = at - e.acceptedAt;
    observe(counters.ttftSeconds, ttftMs / 1000);
    emit({ type: 'firstToken', at, requestId: id, ttftMs });
    settle();
    return true;
  }

  function countGenerated(e: Entry, generatedTokens: number, allRowsTokens = generatedTokens): void {
    // A counter never goes down, even if a report does.
    const all = Number.isSafeInteger(allRowsTokens) ? allRowsTokens : generatedTokens;
    counters.generationTokens += Math.max(0, all - e.countedTokens);
    e.countedTokens = Math.max(e.countedTokens, all);
    e.generatedTokens = generatedTokens;
  }

  function progress(id: string, report: ProgressReport): boolean {
    const e = running.get(id);
    if (e === undefined) return false;
    const grant = e.grant as AdmissionGrant;
    // Written as !(x <= limit) so that NaN is refused too.
    if (!(report.usedBytes <= grant.reservedBytes)) {
      recordViolation(
        'over-charge',
        `${id} reports ${report.usedBytes} B of KV in use, over its reservation of ${grant.reservedBytes} B.`,
        id,
      );
      settle();
      return false;
    }
    if (!(report.generatedTokens <= grant.admittedMaxTokens)) {
      recordViolation(
        'over-generation',
        `${id} reports ${report.generatedTokens} generated tokens, over its admitted ${grant.admittedMaxTokens}.`,
        id,
      );
      settle();
      return false;
    }
    countGenerated(e, report.generatedTokens, report.allRowsTokens);
    e.usedBytes = report.usedBytes;
    emit({
      type: 'progress',
      at: now(),
      requestId: id,
      generatedTokens: report.generatedTokens,
      usedBytes: report.usedBytes,
      reservedBytes: grant.reservedBytes,
    });
    settle();
    return true;
  }

  function finish(id: string, reason: FinishReason, finishOpts?: FinishOptions): number {
    const e = running.get(id);
    if (e === undefined) return 0;
    const grant = e.grant as AdmissionGrant;
    const at = now();
    const reported = finishOpts?.generatedTokens;
    if (reported !== undefined) {
      if (reported <= grant.admittedMaxTokens) countGenerated(e, reported, finishOpts?.allRowsTokens);
      else {
        recordViolation(
          'over-generation',
          `${id} finished with ${reported} generated tokens, over its admitted ${grant.admittedMaxTokens}.`,
          id,
        );
      }
    }
    const sessionTokens = keptSessionTokens(e, finishOpts?.sessionTokens);
    const bytes = retire(e, 'finished', at, { reason, sessionTokens });
    settle();
    return bytes;
  }

  /** The session tokens a running turn's end may keep: at most what exists, else none (a violation). */
  function keptSessionTokens(e: Entry, asked: number | undefined): number | undefined {
    if (asked === undefined || e.shape.sessionId === undefined || e.grant === undefined) return undefined;
    // The engine cannot hold more than the prefix, the prompt and what it generated; retaining more
    // would let held bytes exceed the reservation they replace, breaking the capacity invariant.
    // (A static cache's positions bound this too: its context is at most fixedTokens.)
    const most = e.prefixTokens + e.shape.promptTokens + e.generatedTokens;
    if (Number.isSafeInteger(asked) && asked >= 0 && asked <= most) return asked;
    recordViolation(
      'session-tokens',
      `${e.shape.id} asked its session to keep ${asked} tokens; at most ${most} exist. The session's KV is dropped.`,
      e.shape.id,
    );
    return undefined;
  }

  function cancel(id: string, reason: CancelReason, opts?: { sessionTokens?: number }): number {
    const e = live.get(id);
    if (e === undefined) return 0;
    const code = reason === 'timeout' ? 'TIMEOUT' : 'CANCELLED';
    const sessionTokens = keptSessionTokens(e, opts?.sessionTokens);
    const bytes = retire(e, 'cancelled', now(), {
      reason,
      error: { code, message: `Request ${id} was cancelled (${reason}).` },
      ...(sessionTokens !== undefined ? { sessionTokens } : {}),
    });
    settle();
    return bytes;
  }

  function failRequest(id: string, error: ErrorInfo): number {
    const e = live.get(id);
    if (e === undefined) return 0;
    const bytes = retire(e, 'failed', now(), { error });
    settle();
    return bytes;
  }

  function failModel(
    modelId: string | readonly string[],
    error: ErrorInfo,
    failOpts?: { holdQueued?: boolean },
  ): number {
    const at = now();
    const dead = new Set(typeof modelId === 'string' ? [modelId] : modelId);
    const hold = failOpts?.holdQueued === true;
    // Retire everything first, admit after: a freed slot must not go to another request of the dead engine. Held,
    // the queued ones stay, and admission passes them by until the model is back.
    const doomed = [...live.values()].filter((e) => dead.has(e.shape.modelId) && !(hold && e.grant === undefined));
    for (const e of doomed) retire(e, 'failed', at, { error });
    for (const s of [...sessions.values()]) {
      if (dead.has(s.modelId)) {
        dropSessionKv(s, 'model-failed', at);
        // A held turn's session stays its own (a new turn on it would find it busy); the turn ends it as usual.
        if (s.state !== 'queued') sessions.delete(s.id);
      }
    }
    for (const id of dead) {
      if (hold) held.add(id);
      else {
        held.delete(id);
        models.delete(id);
      }
    }
    settle();
    return doomed.length;
  }

  function resumeModel(modelId: string | readonly string[]): void {
    for (const id of typeof modelId === 'string' ? [modelId] : modelId) held.delete(id);
    settle();
  }

  function closeSession(sessionId: string): boolean {
    const s = sessions.get(sessionId);
    if (s === undefined) return false;
    dropSessionKv(s, 'closed', now());
    // A turn in flight still needs its record (it reserved the prefix); the turn's end removes it.
    if (s.state === 'idle') sessions.delete(sessionId);
    else s.closing = true;
    settle();
    return true;
  }

  function evictSession(sessionId: string): Result<{ bytes: number; tokens: number }> {
    const s = sessions.get(sessionId);
    if (s === undefined || s.state === 'running') {
      return err(
        'SESSION_INVALID',
        s === undefined
          ? `Session ${sessionId} is unknown.`
          : `Session ${sessionId} is running a turn; its KV can be freed when the turn ends.`,
        { sessionId },
      );
    }
    const freed = { bytes: heldOf(s), tokens: s.tokens };
    dropSessionKv(s, 'manual', now());
    settle();
    return ok(freed);
  }

  function sessionView(s: Session): SchedulerSessionView {
    const view: SchedulerSessionView = {
      sessionId: s.id,
      modelId: s.modelId,
      state: s.state,
      tokens: s.tokens,
      heldBytes: heldOf(s),
      bpt: s.bpt,
      createdAt: s.createdAt,
      lastUsedAt: s.lastUsedAt,
      closing: s.closing,
    };
    if (s.turn !== undefined) view.turnRequestId = s.turn;
    if (s.fixedTokens !== undefined) view.fixedTokens = s.fixedTokens;
    return view;
  }

  function sessionInfo(sessionId: string): SchedulerSessionView | undefined {
    const s = sessions.get(sessionId);
    return s === undefined ? undefined : sessionView(s);
  }

  function reconfigure(change: ReconfigureOptions): Result<ReconfigureOutcome> {
    const limitBytes = change.limitBytes ?? change.derivation?.limitBytes ?? limits.limitBytes;
    const parsed = SchedulerLimitsSchema.safeParse({
      limitBytes,
      maxRunning: change.maxRunning ?? limits.maxRunning,
      maxQueue: change.maxQueue ?? limits.maxQueue,
    });
    if (!parsed.success) return err('BAD_REQUEST', `Invalid scheduler limits: ${describeIssue(parsed.error)}.`);
    if (change.derivation !== undefined && change.derivation.limitBytes !== limitBytes) {
      return err(
        'BAD_REQUEST',
        `limitBytes ${limitBytes} differs from the derivation's ${change.derivation.limitBytes}.`,
        { limitBytes, derivationLimitBytes: change.derivation.limitBytes },
      );
    }
    const at = now();
    const before = limits;
    limits = parsed.data;
    derivation =
      change.derivation ??
      (change.limitBytes === undefined ? derivation : explicitDerivation(limitBytes, 'Changed at run time.'));

    // Requests whose minimum no longer fits would wait for ever (invariant 6): refuse them now.
    const refused: Array<{ e: Entry; error: ErrorInfo }> = [];
    for (const e of [...queue]) {
      const minimumBytes = bytesFor(e, 1);
      if (minimumBytes > limits.limitBytes) {
        const { message, detail } = budgetExceeded(
          e.shape,
          e.prefixTokens,
          minimumBytes,
          'the KV budget was lowered to',
        );
        refused.push({ e, error: { code: 'KV_BUDGET_EXCEEDED', message, detail } });
        queue.splice(queue.indexOf(e), 1);
        live.delete(e.shape.id);
        const s = sessionOf(e.shape);
        if (s !== undefined) {
          s.state = 'idle';
          s.turn = undefined;
          if (s.closing) sessions.delete(s.id);
        }
      }
    }
    // Idle KV is not running work: a person who lowers the limit wants that memory back now.
    const { victims: evictions, usage } = overLimitVictims();
    const overLimit = usage > limits.limitBytes;
    const rejectedRequestIds = refused.map(({ e }) => e.shape.id);
    emit({
      type: 'reconfigured',
      at,
      limits: { before, after: limits },
      derivation,
      rejectedRequestIds,
      overLimit,
    });
    for (const { e, error } of refused) {
      counters.rejections.KV_BUDGET_EXCEEDED = (counters.rejections.KV_BUDGET_EXCEEDED ?? 0) + 1;
      const view = viewOf(e, 'refused');
      view.endedAt = at;
      view.error = error;
      pushBounded(recent, view);
      emit({ type: 'rejected', at, requestId: e.shape.id, stage: 'queued', error });
    }
    for (const s of evictions) dropSessionKv(s, 'reconfigure', at);
    settle();
    return ok({ rejectedRequestIds, overLimit });
  }

  function snapshot(): SchedulerSnapshot {
    const reservedBytes = reservedTotal();
    const heldBytes = heldTotal();
    let usedBytes = 0;
    for (const e of running.values()) usedBytes += e.usedBytes;
    const bpts = [...models.values()];
    return {
      at: now(),
      limitBytes: limits.limitBytes,
      reservedBytes,
      usedBytes,
      heldBytes,
      freeBytes: Math.max(0, limits.limitBytes - reservedBytes - heldBytes),
      bpt: bpts.length === 1 ? (bpts[0] as number) : null,
      derivation,
      maxRunning: limits.maxRunning,
      maxQueue: limits.maxQueue,
      queue: queue.map((e) => viewOf(e, 'queued')),
      running: [...running.values()].map((e) => viewOf(e, 'running')),
      sessions: [...sessions.values()].map(sessionView),
      recent: recent.map((v) => ({ ...v })),
      counters: structuredClone(counters),
      violations: violations.map((v) => ({ ...v })),
    };
  }

  function subscribe(fn: (e: SchedulerEvent) => void): () => void {
    subscribers.add(fn);
    return () => {
      subscribers.delete(fn);
    };
  }

  return {
    submit,
    isGrantLive,
    firstToken,
    progress,
    finish,
    cancel,
    fail: failRequest,
    failModel,
    resumeModel,
    forgetModel: (modelId: string) => {
      models.delete(modelId);
    },
    noteModel: (modelId: string, bpt: number) => {
      models.set(modelId, bpt);
    },
    countRejection: (code: ErrorCode) => {
      counters.rejections[code] = (counters.rejections[code] ?? 0) + 1;
    },
    closeSession,
    evictSession,
    sessionInfo,
    reconfigure,
    snapshot,
    subscribe,
    paddingPeak: (id: string) => running.get(id)?.peakPadBytes ?? 0,
  };
}
