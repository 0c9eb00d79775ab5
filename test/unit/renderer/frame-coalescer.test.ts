import { describe, expect, it } from 'vitest';
import {
  createFrameCoalescer,
  type Flush,
  mergeTokenFrames,
  SCHEDULER_EVERY_MS,
} from '../../../src/renderer/bridge/frame-coalescer';
import { result, snapshot, tokens } from './fixtures';

/** A coalescer whose "animation frame" fires, and whose clock moves, when the test says so. */
function harness() {
  const flushes: Flush[] = [];
  let pendingFrame: (() => void) | null = null;
  let scheduled = 0;
  let clock = 0;
  let timers: Array<{ at: number; fn: () => void }> = [];
  const c = createFrameCoalescer({
    schedule(fn) {
      scheduled += 1;
      pendingFrame = fn;
    },
    apply(f) {
      flushes.push(f);
    },
    now: () => clock,
    later(fn, ms) {
      timers.push({ at: clock + ms, fn });
    },
  });
  return {
    c,
    flushes,
    scheduledCount: () => scheduled,
    timers: () => timers.length,
    animationFrame() {
      const fn = pendingFrame;
      pendingFrame = null;
      fn?.();
    },
    /** Moves the clock on, running the timers that come due. */
    advance(ms: number) {
      clock += ms;
      const due = timers.filter((t) => t.at <= clock);
      timers = timers.filter((t) => t.at > clock);
      for (const t of due) t.fn();
    },
  };
}

describe('frame coalescer', () => {
  it('applies a thousand token frames as one merged frame per animation frame', () => {
    const h = harness();
    for (let i = 0; i < 1000; i++) h.c.frame('m1', tokens(String(i % 10), [i]));
    expect(h.flushes).toHaveLength(0);
    expect(h.scheduledCount()).toBe(1); // one request for the next frame, not one per token
    h.animationFrame();
    expect(h.flushes).toHaveLength(1);
    const [batch] = h.flushes[0]?.batches ?? [];
    expect(batch?.messageId).toBe('m1');
    expect(batch?.frames).toHaveLength(1);
    const f = batch?.frames[0];
    expect(f?.type).toBe('tokens');
    if (f?.type !== 'tokens') throw new Error('unreachable');
    expect(f.rows[0]?.ids).toHaveLength(1000);
    expect(f.rows[0]?.text).toBe('0123456789'.repeat(100));
  });

  it('keeps frame order around tokens: accepted, admitted, tokens, done', () => {
    const h = harness();
    h.c.frame('m1', { type: 'accepted', requestId: 'r1', modelId: 'x', promptTokens: 3, rows: 1, maxNewTokens: 10 });
    h.c.frame('m1', { type: 'admitted', requestId: 'r1', reservedBytes: 100, admittedMaxTokens: 10 });
    h.c.frame('m1', tokens('a'));
    h.c.frame('m1', tokens('b'));
    h.c.frame('m1', { type: 'done', requestId: 'r1', result: result() });
    h.animationFrame();
    expect(h.flushes[0]?.batches[0]?.frames.map((f) => f.type)).toEqual(['accepted', 'admitted', 'tokens', 'done']);
  });

  it('keeps generations apart', () => {
    const h = harness();
    h.c.frame('m1', tokens('a'));
    h.c.frame('m2', tokens('x'));
    h.c.frame('m1', tokens('b'));
    h.animationFrame();
    const batches = h.flushes[0]?.batches ?? [];
    expect(batches.map((b) => b.messageId)).toEqual(['m1', 'm2']);
    const first = batches[0]?.frames[0];
    expect(first?.type === 'tokens' && first.rows[0]?.text).toBe('ab');
  });

  it('delivers only the latest snapshot and every event in order', () => {
    const h = harness();
    h.c.snapshot(snapshot({ at: 1 }));
    h.c.snapshot(snapshot({ at: 2 }));
    h.c.event({ type: 'queued', at: 1, requestId: 'a', position: 0, queueLength: 1 });
    h.c.event({ type: 'firstToken', at: 2, requestId: 'a', ttftMs: 5 });
    h.animationFrame();
    expect(h.flushes).toHaveLength(1);
    expect(h.flushes[0]?.snapshot?.at).toBe(2);
    expect(h.flushes[0]?.events.map((e) => e.type)).toEqual(['queued', 'firstToken']);
  });

  it('applies budget snapshots at most every 100 ms: the latest one, held while tokens still flow every frame', () => {
    const h = harness();
    h.c.snapshot(snapshot({ at: 1 }));
    h.animationFrame();
    expect(h.flushes.map((f) => f.snapshot?.at)).toEqual([1]);
    // 16 ms on: the tokens are applied, the snapshot waits.
    h.advance(16);
    h.c.snapshot(snapshot({ at: 2 }));
    h.c.frame('m1', tokens('a'));
    h.animationFrame();
    expect(h.flushes).toHaveLength(2);
    expect(h.flushes[1]?.batches).toHaveLength(1);
    expect(h.flushes[1]?.snapshot).toBeNull();
    expect(h.c.pending()).toBe(1);
    // A newer one replaces it; a frame with nothing else due applies nothing.
    h.advance(16);
    h.c.snapshot(snapshot({ at: 3 }));
    h.animationFrame();
    expect(h.flushes).toHaveLength(2);
    // Its time come, it is applied without anything else streaming in: the latest, once.
    expect(h.timers()).toBe(1);
    h.advance(SCHEDULER_EVERY_MS - 32);
    h.animationFrame();
    expect(h.flushes.map((f) => f.snapshot?.at ?? null)).toEqual([1, null, 3]);
    expect(h.c.pending()).toBe(0);
    h.advance(SCHEDULER_EVERY_MS);
    h.animationFrame();
    expect(h.flushes).toHaveLength(3);
  });

  it("holds the scheduler's events with its snapshot: every one, in order, while the replies' frames go on", () => {
    const h = harness();
    h.c.event({ type: 'queued', at: 1, requestId: 'a', position: 0, queueLength: 1 });
    h.animationFrame();
    expect(h.flushes.map((f) => f.events.length)).toEqual([1]);
    h.advance(16);
    h.c.event({ type: 'admitted', at: 2, requestId: 'a', reservedBytes: 10, admittedMaxTokens: 4, queueMs: 1 });
    h.c.frame('m1', tokens('a'));
    h.animationFrame();
    h.advance(16);
    h.c.event({ type: 'firstToken', at: 3, requestId: 'a', ttftMs: 5 });
    h.c.frame('m1', tokens('b'));
    h.animationFrame();
    expect(h.flushes.map((f) => f.events.length)).toEqual([1, 0, 0]);
    expect(h.c.pending()).toBe(2);
    h.advance(SCHEDULER_EVERY_MS);
    h.animationFrame();
    expect(h.flushes[3]?.events.map((e) => e.type)).toEqual(['admitted', 'firstToken']);
    expect(h.c.pending()).toBe(0);
  });

  it('applies a snapshot that comes after a quiet spell at once, and a held one when flushed now', () => {
    const h = harness();
    h.c.snapshot(snapshot({ at: 1 }));
    h.animationFrame();
    h.advance(SCHEDULER_EVERY_MS);
    h.c.snapshot(snapshot({ at: 2 }));
    h.animationFrame();
    expect(h.flushes.map((f) => f.snapshot?.at)).toEqual([1, 2]);
    h.advance(1);
    h.c.snapshot(snapshot({ at: 3 }));
    h.c.flushNow();
    expect(h.flushes.map((f) => f.snapshot?.at)).toEqual([1, 2, 3]);
  });

  it('starts over after a flush and does nothing when idle', () => {
    const h = harness();
    h.c.frame('m1', tokens('a'));
    h.animationFrame();
    h.animationFrame();
    expect(h.flushes).toHaveLength(1);
    h.c.frame('m1', tokens('b'));
    expect(h.c.pending()).toBe(1);
    h.c.flushNow();
    expect(h.flushes).toHaveLength(2);
    expect(h.c.pending()).toBe(0);
    h.animationFrame(); // the frame scheduled before flushNow finds nothing to do
    expect(h.flushes).toHaveLength(2);
  });

  it('merges multi-row token frames row by row', () => {
    const a = {
      type: 'tokens' as const,
      requestId: 'r',
      rows: [
        { ids: [1], text: 'a' },
        { ids: [2], text: 'b' },
      ],
    };
    const b = {
      type: 'tokens' as const,
      requestId: 'r',
      rows: [
        { ids: [3], text: 'c' },
        { ids: [4], text: 'd' },
      ],
    };
    expect(mergeTokenFrames(a, b).rows).toEqual([
      { ids: [1, 3], text: 'ac' },
      { ids: [2, 4], text: 'bd' },
    ]);
  });

  it("merges a thinking model's reasoning as it merges text, and leaves it out where there is none", () => {
    const frame = (ids: number[], text: string, reasoning?: string) => ({
      type: 'tokens' as const,
      requestId: 'r',
      rows: [{ ids, text, ...(reasoning !== undefined ? { reasoning } : {}) }],
    });
    expect(mergeTokenFrames(frame([1], '', 'thinking '), frame([2], '', 'hard')).rows).toEqual([
      { ids: [1, 2], text: '', reasoning: 'thinking hard' },
    ]);
    expect(mergeTokenFrames(frame([1], '', 'done'), frame([2], 'Hi')).rows).toEqual([
      { ids: [1, 2], text: 'Hi', reasoning: 'done' },
    ]);
    expect(mergeTokenFrames(frame([1], 'a'), frame([2], 'b')).rows[0]).not.toHaveProperty('reasoning');
  });

  it("keeps what goes with the tokens: log-probabilities, calls completed and calls' arguments being written", () => {
    const lp = (id: number) => ({ id, token: `t${id}`, bytes: [id], logprob: -1, top: [], textOffset: 0 });
    const call = { id: 'c1', name: 'f', arguments: '{}' };
    const delta = { index: 0, id: 'c2', name: 'g', arguments: '{"a"' };
    const a = {
      type: 'tokens' as const,
      requestId: 'r',
      rows: [{ ids: [1], text: 'a', logprobs: [lp(1)], toolCalls: [call] }],
    };
    const b = {
      type: 'tokens' as const,
      requestId: 'r',
      rows: [{ ids: [2], text: '', logprobs: [lp(2)], toolCallDeltas: [delta] }],
    };
    expect(mergeTokenFrames(a, b).rows).toEqual([
      { ids: [1, 2], text: 'a', logprobs: [lp(1), lp(2)], toolCalls: [call], toolCallDeltas: [delta] },
    ]);
    expect(mergeTokenFrames(b, b).rows[0]).not.toHaveProperty('toolCalls');
  });
});
