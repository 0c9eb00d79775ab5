/**
 * Collects everything that streams in from the host (token frames, scheduler
 * events, budget snapshots) and hands it to the store at most once per
 * animation frame. A model can produce thousands of tokens per second; the
 * screen refreshes 60 times. Consecutive token frames of one generation are
 * merged, so a flush applies one text append per generation.
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

export function createFrameCoalescer(opts: {
  schedule: (flush: () => void) => void;
  apply: (flush: Flush) => void;
}): FrameCoalescer {
  let frames = new Map<string, StreamFrame[]>();
  let events: SchedulerEvent[] = [];
  let snapshot: BudgetSnapshot | null = null;
  let scheduled = false;
  let count = 0;

  function flushNow(): void {
    scheduled = false;
    if (count === 0 && snapshot === null) return;
    const out: Flush = {
      batches: [...frames].map(([messageId, list]) => ({ messageId, frames: list })),
      events,
      snapshot,
    };
    frames = new Map();
    events = [];
    snapshot = null;
    count = 0;
    opts.apply(out);
  }

  function request(): void {
    if (scheduled) return;
    scheduled = true;
    opts.schedule(() => {
      if (scheduled) flushNow();
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
