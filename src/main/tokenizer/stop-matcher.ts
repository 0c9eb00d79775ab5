import { KvdeskError } from '../../shared/errors';

/** Result of feeding text to a {@link StopMatcher}. */
export interface StopPush {
  /** Text that is safe to show: it cannot be part of a stop string. */
  emit: string;
  /** True once a stop string has matched; the generation should end. */
  stopped: boolean;
  /** The stop string that matched, when `stopped` became true on this push. */
  stop?: string;
}

/** Cuts generated text at the first stop string, across arbitrary chunk boundaries. */
export interface StopMatcher {
  push(text: string): StopPush;
  /** End of stream without a stop: releases the held-back tail. */
  flush(): string;
}

/**
 * Holds back any tail that could still grow into a stop string. The match chosen is the one that
 * completes first in the stream (earliest end, then earliest start), so the result does not depend
 * on how the text was chunked.
 */
export function createStopMatcher(stops: string[]): StopMatcher {
  for (const [i, s] of stops.entries()) {
    if (typeof s !== 'string' || s.length === 0) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `Stop string ${i} is empty: every stop string needs at least one character.`,
        {
          index: i,
        },
      );
    }
  }
  const unique = [...new Set(stops)];
  const longest = unique.reduce((n, s) => Math.max(n, s.length), 0);
  let held = '';
  let stopped = false;

  const heldTailLength = (buffer: string): number => {
    for (let k = Math.min(buffer.length, longest - 1); k > 0; k--) {
      const tail = buffer.slice(buffer.length - k);
      if (unique.some((s) => s.startsWith(tail))) return k;
    }
    return 0;
  };

  return {
    push(text) {
      if (stopped) return { emit: '', stopped: true };
      const buffer = held + text;
      let best: { start: number; end: number; stop: string } | undefined;
      for (const stop of unique) {
        const start = buffer.indexOf(stop);
        if (start < 0) continue;
        const end = start + stop.length;
        if (best === undefined || end < best.end || (end === best.end && start < best.start))
          best = { start, end, stop };
      }
      if (best !== undefined) {
        stopped = true;
        held = '';
        return { emit: buffer.slice(0, best.start), stopped: true, stop: best.stop };
      }
      const keep = heldTailLength(buffer);
      held = buffer.slice(buffer.length - keep);
      return { emit: buffer.slice(0, buffer.length - keep), stopped: false };
    },
    flush() {
      const out = stopped ? '' : held;
      held = '';
      return out;
    },
  };
}
