/**
 * Collects everything that streams in from the host (token frames, scheduler
 * events, budget snapshots) and hands it to the store at most once per
 * animation frame. A model can produce thousands of tokens per second; the
 * screen refreshes 60 times. Consecutive token frames of one generation are
 * merged, so a flush applies one text append per generation. Budget snapshots
 * come as often as the scheduler changes (every token of every running reply),
 * and each one redraws the header's bar and the inspector's tables: they are
 * applied at most every `snapshotEveryMs` (the latest one, never lost), which a
 * person reading the numbers cannot tell from every frame.
 *
 * Pure: the scheduling function is injected (requestAnimationFrame in the app,
 * a manual trigger in tests).
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

/** Appends b's rows to a's, row by row (rows of one request stream in lockstep). */
export function mergeTokenFrames(a: TokensFrame, b: TokensFrame): TokensFrame {
  const n = Math.max(a.rows.length, b.rows.length);
  const rows: TokensFrame['rows'] = [];
  for (let i = 0; i < n; i++) {
    const x = a.rows[i];
    const y = b.rows[i];
    const reasoning = (x?.reasoning ?? '') + (y?.reasoning ?? '');
    rows.push({
      ids: [...(x?.ids ?? []), ...(y?.ids ?? [])],
      text: (x?.text ?? '') + (y?.text ?? ''),
      ...(reasoning ? { reasoning } : {}),
    });
  }
  return { type: 'tokens', requestId: b.requestId, rows };
}

/** How often budget snapshots reach the store at most: ten times a second. */
export const SNAPSHOT_EVERY_MS = 100;

export function createFrameCoalescer(opts: {
  schedule: (flush: () => void) => void;
  apply: (flush: Flush) => void;
  /** Budget snapshots are applied at most this often (ms); 0: with every flush. Default SNAPSHOT_EVERY_MS. */
  snapshotEveryMs?: number;
  /** The clock and the timer (tests give their own). */
  now?: () => number;
  later?: (fn: () => void, ms: number) => void;
}): FrameCoalescer {
  const every = opts.snapshotEveryMs ?? SNAPSHOT_EVERY_MS;
  const now = opts.now ?? (() => performance.now());
  const later = opts.later ?? ((fn, ms) => void setTimeout(fn, ms));
  let frames = new Map<string, StreamFrame[]>();
  let events: SchedulerEvent[] = [];
  let snapshot: BudgetSnapshot | null = null;
  let snapshotAppliedAt = Number.NEGATIVE_INFINITY;
  /** A held snapshot's timer is set: it asks for a flush once the snapshot may be applied. */
  let snapshotTimer = false;
  let scheduled = false;
  let count = 0;

  /** Applies what is pending; a snapshot too soon after the last one stays for a later flush unless `all`. */
  function flush(all: boolean): void {
    scheduled = false;
    const t = now();
    const snapshotDue = snapshot !== null && (all || t - snapshotAppliedAt >= every);
    if (count === 0 && !snapshotDue) {
      if (snapshot !== null) holdSnapshot(t);
      return;
    }
    const out: Flush = {
      batches: [...frames].map(([messageId, list]) => ({ messageId, frames: list })),
      events,
      snapshot: snapshotDue ? snapshot : null,
    };
    frames = new Map();
    events = [];
    count = 0;
    if (snapshotDue) {
      snapshot = null;
      snapshotAppliedAt = t;
    } else if (snapshot !== null) holdSnapshot(t);
    opts.apply(out);
  }

  /** The held snapshot gets a flush of its own when its time comes, whatever else streams in or not. */
  function holdSnapshot(t: number): void {
    if (snapshotTimer) return;
    snapshotTimer = true;
    later(
      () => {
        snapshotTimer = false;
        if (snapshot !== null) request();
      },
      Math.max(0, snapshotAppliedAt + every - t),
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
      count += 1;
      request();
    },
    snapshot(next) {
      snapshot = next; // latest wins
      request();
    },
    flushNow,
    pending() {
      return count + (snapshot ? 1 : 0);
    },
  };
}
