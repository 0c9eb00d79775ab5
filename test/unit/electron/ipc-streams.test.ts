import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { forwardHostEvents } from '../../../src/main/ipc/events';
import { bridgeGeneration, GenerationRegistry, type StreamPort } from '../../../src/main/ipc/streams';
import type { HostEventName } from '../../../src/shared/api';
import type { StreamFrame } from '../../../src/shared/contract';

/** A MessagePortMain stand-in: records posts, lets the test play the renderer's end. */
class FakePort extends EventEmitter implements StreamPort {
  posted: unknown[] = [];
  closed = false;
  started = false;
  postMessage(message: unknown): void {
    if (this.closed) throw new Error('posted on a closed port');
    this.posted.push(message);
  }
  start(): void {
    this.started = true;
  }
  close(): void {
    this.closed = true;
  }
  /** The renderer sends a message. */
  fromRenderer(data: unknown): void {
    this.emit('message', { data });
  }
  /** The renderer's end goes away. */
  disconnect(): void {
    this.emit('close');
  }
}

/** A HostApi.generate stand-in: the test pushes frames; cancels are recorded. */
function fakeGeneration() {
  const cancels: Array<string | undefined> = [];
  let push: (f: StreamFrame) => void = () => {};
  const start = (onFrame: (f: StreamFrame) => void) => {
    push = onFrame;
    return { requestId: 'r1', cancel: (reason?: 'user' | 'disconnect') => cancels.push(reason) };
  };
  return { start, cancels, push: (f: StreamFrame) => push(f) };
}

const accepted: StreamFrame = {
  type: 'accepted',
  requestId: 'r1',
  modelId: 'm',
  promptTokens: 3,
  rows: 1,
  maxNewTokens: 8,
};
const tokens: StreamFrame = { type: 'tokens', requestId: 'r1', rows: [{ ids: [5], text: 'hi' }] };
const cancelled: StreamFrame = { type: 'error', requestId: 'r1', error: { code: 'CANCELLED', message: 'cancelled' } };

describe('a generation on a MessagePort', () => {
  it('posts every frame in order and closes the port after the terminal frame', () => {
    const port = new FakePort();
    const g = fakeGeneration();
    const onEnd = vi.fn();
    const bridged = bridgeGeneration(port, g.start, onEnd);
    expect(port.started).toBe(true);
    g.push(accepted);
    g.push(tokens);
    expect(port.closed).toBe(false);
    g.push(cancelled);
    expect(port.posted).toEqual([accepted, tokens, cancelled]);
    expect(port.closed).toBe(true);
    expect(bridged.ended).toBe(true);
    expect(onEnd).toHaveBeenCalledTimes(1);
    g.push(tokens); // late frames are dropped, not posted on a closed port
    expect(port.posted).toHaveLength(3);
  });

  it("cancels with 'user' when the renderer sends { type: 'cancel' }, and still delivers the final frame", () => {
    const port = new FakePort();
    const g = fakeGeneration();
    bridgeGeneration(port, g.start);
    g.push(accepted);
    port.fromRenderer({ type: 'cancel' });
    expect(g.cancels).toEqual(['user']);
    g.push(cancelled);
    expect(port.posted.at(-1)).toEqual(cancelled);
  });

  it('ignores other renderer messages', () => {
    const port = new FakePort();
    const g = fakeGeneration();
    bridgeGeneration(port, g.start);
    port.fromRenderer('cancel');
    port.fromRenderer({ type: 'stop' });
    expect(g.cancels).toEqual([]);
  });

  it("cancels with 'disconnect' when the renderer's end closes (window closed, reload, crash)", () => {
    const port = new FakePort();
    const g = fakeGeneration();
    const onEnd = vi.fn();
    const bridged = bridgeGeneration(port, g.start, onEnd);
    g.push(accepted);
    port.disconnect();
    expect(g.cancels).toEqual(['disconnect']);
    expect(bridged.ended).toBe(true);
    expect(onEnd).toHaveBeenCalledTimes(1);
    g.push(cancelled);
    expect(port.posted).toEqual([accepted]);
  });

  it('does not cancel a generation that already finished', () => {
    const port = new FakePort();
    const g = fakeGeneration();
    bridgeGeneration(port, g.start);
    g.push({ ...cancelled, error: { code: 'KV_BUDGET_EXCEEDED', message: 'too big' } });
    port.disconnect();
    port.fromRenderer({ type: 'cancel' });
    expect(g.cancels).toEqual([]);
  });

  it('handles a terminal frame sent while the generation starts (validation error)', () => {
    const port = new FakePort();
    const onEnd = vi.fn();
    const bridged = bridgeGeneration(
      port,
      (onFrame) => {
        onFrame({ type: 'error', requestId: 'r0', error: { code: 'BAD_REQUEST', message: 'bad' } });
        return { requestId: 'r0', cancel: () => {} };
      },
      onEnd,
    );
    expect(bridged.ended).toBe(true);
    expect(port.closed).toBe(true);
    expect(onEnd).toHaveBeenCalledTimes(1);
  });
});

describe('the generation registry', () => {
  it("cancels exactly one window's generations, once", () => {
    const registry = new GenerationRegistry();
    const ports = [new FakePort(), new FakePort(), new FakePort()];
    const gens = ports.map(() => fakeGeneration());
    const bridged = ports.map((p, i) => bridgeGeneration(p, (gens[i] as ReturnType<typeof fakeGeneration>).start));
    registry.add(1, bridged[0] as never);
    registry.add(1, bridged[1] as never);
    registry.add(2, bridged[2] as never);
    expect(registry.count(1)).toBe(2);
    expect(registry.cancelAll(1)).toBe(2);
    expect(gens.map((g) => g.cancels)).toEqual([['disconnect'], ['disconnect'], []]);
    expect(ports.map((p) => p.closed)).toEqual([true, true, false]);
    expect(registry.cancelAll(1)).toBe(0);
    expect(registry.count(2)).toBe(1);
  });

  it('forgets a generation when its stream ends', () => {
    const registry = new GenerationRegistry();
    const port = new FakePort();
    const g = fakeGeneration();
    let forget = () => {};
    const bridged = bridgeGeneration(port, g.start, () => forget());
    forget = registry.add(3, bridged);
    g.push(cancelled);
    expect(registry.count(3)).toBe(0);
    expect(registry.cancelEverything()).toBe(0);
    expect(g.cancels).toEqual([]);
  });
});

describe('host events to the window', () => {
  afterEach(() => vi.useRealTimers());

  function fakeSource() {
    const listeners = new Map<string, Set<(p: unknown) => void>>();
    return {
      on(event: HostEventName, fn: (p: never) => void) {
        const set = listeners.get(event) ?? new Set();
        set.add(fn as (p: unknown) => void);
        listeners.set(event, set);
        return () => set.delete(fn as (p: unknown) => void);
      },
      emit(event: HostEventName, payload: unknown) {
        for (const fn of listeners.get(event) ?? []) fn(payload);
      },
      count: () => [...listeners.values()].reduce((n, s) => n + s.size, 0),
    };
  }

  it('sends budget and models at once and batches scheduler events per frame', () => {
    vi.useFakeTimers();
    const source = fakeSource();
    const sent: Array<[string, unknown[]]> = [];
    const stop = forwardHostEvents(source as never, (name, payloads) => sent.push([name, payloads]));
    source.emit('budget', { n: 1 });
    source.emit('models', []);
    source.emit('scheduler', { type: 'accepted' });
    source.emit('scheduler', { type: 'admitted' });
    expect(sent).toEqual([
      ['budget', [{ n: 1 }]],
      ['models', [[]]],
    ]);
    vi.advanceTimersByTime(16);
    expect(sent.at(-1)).toEqual(['scheduler', [{ type: 'accepted' }, { type: 'admitted' }]]);
    expect(sent).toHaveLength(3);
    source.emit('scheduler', { type: 'released' });
    vi.advanceTimersByTime(16);
    expect(sent.at(-1)).toEqual(['scheduler', [{ type: 'released' }]]);
    stop();
  });

  it('unsubscribes everything and drops what is pending on stop', () => {
    vi.useFakeTimers();
    const source = fakeSource();
    const sent: unknown[] = [];
    const stop = forwardHostEvents(source as never, (name) => sent.push(name));
    expect(source.count()).toBe(9); // budget, scheduler, models, library, apiServer, settings, thread(Deleted), downloads
    source.emit('scheduler', { type: 'queued' });
    stop();
    vi.advanceTimersByTime(100);
    expect(sent).toEqual([]);
    expect(source.count()).toBe(0);
  });
});
