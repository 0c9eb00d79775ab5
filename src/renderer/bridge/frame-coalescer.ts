/**
 * Collects everything that streams in from the host (token frames, scheduler
 * events, budget snapshots) and hands it to the store at most once per
 * animation frame. A model can produce thousands of tokens per second; the
 * screen refreshes 60 times. Consecutive token frames of one generation are
 * merged, so a flush applies one text append per generation. The scheduler's
 * side is applied at most every `schedulerEveryMs` (every event in order, the
 * latest snapshot, never lost), which a person reading the numbers cannot tell
 * from every frame: its events come as often as it acts (five or six for each
 * request of an API client) and each batch redrew the inspector's timeline and
 * tables; its snapshots, which the host already sends at most ten times a
 * second, come with them, so the two never disagree on screen longer than that.
 * The replies' own frames still come every frame.
 *
 * Pure but for its clock: the scheduling function is injected
 * (requestAnimationFrame in the app, a manual trigger in tests), and so are
 * the clock and the timer it holds the scheduler's news by (tests give their own).
 */
import type { StreamFrame } from '../../shared/contract';
import type { BudgetSnapshot, SchedulerEvent } from '../../shared/scheduler-types';
import type { FrameBatch } from '../store/types';

export interface Flush {
  batches: FrameBatch[];
  events: SchedulerEvent[];
  snapshot: BudgetSnapshot | null;
}

export interface FrameCoalescer {
  frame(messageId: string, frame: StreamFrame): void;
  event(event: SchedulerEvent): void;
  snapshot(snapshot: BudgetSnapshot): void;
  /** Applies what is pending now (e.g. before a thread is saved). */
  flushNow(): void;
  /** Items waiting for the next flush (for tests and diagnostics). */
  pending(): number;
}

type TokensFrame = Extract<StreamFrame, { type: 'tokens' }>;

/**
 * Appends b's rows to a's, row by row (rows of one request stream in lockstep): their tokens, text, reasoning, and
 * what goes with the tokens (log-probabilities, calls completed, call arguments being written).
 */
export function mergeTokenFrames(a: TokensFrame, b: TokensFrame): TokensFrame {
  const n = Math.max(a.rows.length, b.rows.length);
  const rows: TokensFrame['rows'] = [];
  const both = <T>(x: T[] | undefined, y: T[] | undefined) => (x || y ? { list: [...(x ?? []), ...(y ?? [])] } : null);
  for (let i = 0; i < n; i++) {
    const x = a.rows[i];
    const y = b.rows[i];
    const reasoning = (x?.reasoning ?? '') + (y?.reasoning ?? '');
    const logprobs = both(x?.logprobs, y?.logprobs);
    const toolCalls = both(x?.toolCalls, y?.toolCalls);
    const toolCallDeltas = both(x?.toolCallDeltas, y?.toolCallDeltas);
    rows.push({
      ids: [...(x?.ids ?? []), ...(y?.ids ?? [])],
      text: (x?.text ?? '') + (y?.text ?? ''),
      ...(reasoning ? { reasoning } : {}),
      ...(logprobs ? { logprobs: logprobs.list } : {}),
      ...(toolCalls ? { toolCalls: toolCalls.list } : {}),
      ...(toolCallDeltas ? { toolCallDeltas: toolCallDeltas.list } : {}),
    });
  }
  return { type: 'tokens', requestId: b.requestId, rows };
}

/** How often the scheduler's events and budget snapshots reach the store at most: ten times a second. */
export const SCHEDULER_EVERY_MS = 100;

export function createFrameCoalescer(opts: {
  schedule: (flush: () => void) => void;
  apply: (flush: Flush) => void;
  /** Scheduler events and snapshots are applied at most this often (ms); 0: with every flush. Default SCHEDULER_EVERY_MS. */
  schedulerEveryMs?: number;
  /** The clock and the timer (tests give their own). */
  now?: () => number;
  later?: (fn: () => void, ms: number) => void;
}): FrameCoalescer {
  const every = opts.schedulerEveryMs ?? SCHEDULER_EVERY_MS;
  const now = opts.now ?? (() => performance.now());
  const later = opts.later ?? ((fn, ms) => void setTimeout(fn, ms));
  let frames = new Map<string, StreamFrame[]>();
  /** Reply frames waiting (consecutive token frames merged count once). */
  let count = 0;
  let events: SchedulerEvent[] = [];
  let snapshot: BudgetSnapshot | null = null;
  let schedulerAppliedAt = Number.NEGATIVE_INFINITY;
  /** Held scheduler news has its timer: it asks for a flush once that news may be applied. */
  let schedulerTimer = false;
  let scheduled = false;

  const schedulerWaits = () => events.length > 0 || snapshot !== null;

  /** Applies what is pending; the scheduler's news too soon after the last stays for a later flush unless `all`. */
  function flush(all: boolean): void {
    scheduled = false;
    const t = now();
    const schedulerDue = schedulerWaits() && (all || t - schedulerAppliedAt >= every);
    if (count === 0 && !schedulerDue) {
      if (schedulerWaits()) holdScheduler(t);
      return;
    }
    const out: Flush = {
      batches: [...frames].map(([messageId, list]) => ({ messageId, frames: list })),
      events: schedulerDue ? events : [],
      snapshot: schedulerDue ? snapshot : null,
    };
    frames = new Map();
    count = 0;
    if (schedulerDue) {
      events = [];
      snapshot = null;
      schedulerAppliedAt = t;
    } else holdScheduler(t);
    opts.apply(out);
  }

  /** Held scheduler news gets a flush of its own when its time comes, whatever else streams in or not. */
  function holdScheduler(t: number): void {
    if (schedulerTimer) return;
    schedulerTimer = true;
    later(
      () => {
        schedulerTimer = false;
        if (schedulerWaits()) request();
      },
      Math.max(0, schedulerAppliedAt + every - t),
    );
  }

  function flushNow(): void {
    flush(true);
  }

  function request(): void {
    if (scheduled) return;
    scheduled = true;
    opts.schedule(() => {
      if (scheduled) flush(false);
    });
  }

  return {
    frame(messageId, frame) {
      const list = frames.get(messageId);
      const last = list?.[list.length - 1];
      if (list && last?.type === 'tokens' && frame.type === 'tokens') {
        list[list.length - 1] = mergeTokenFrames(last, frame);
      } else if (list) {
        list.push(frame);
        count += 1;
      } else {
        frames.set(messageId, [frame]);
        count += 1;
      }
      request();
    },
    event(event) {
      events.push(event);
      request();
    },
    snapshot(next) {
      snapshot = next; // latest wins
      request();
    },
    flushNow,
    pending() {
      return count + events.length + (snapshot ? 1 : 0);
    },
  };
}
