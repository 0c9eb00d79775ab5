import { describe, expect, it } from 'vitest';
import { busyElsewhere } from '../../../src/renderer/lib/busy-elsewhere';
import type { BudgetSnapshot, SchedulerEvent } from '../../../src/shared/scheduler-types';

/** Just the parts busyElsewhere reads. */
function snapshot(parts: {
  running?: string[];
  queue?: string[];
  waits?: string[];
  perDevice?: boolean;
}): BudgetSnapshot {
  const device = {
    running: (parts.running ?? []).map((threadId) => ({ id: `r-${threadId}`, threadId })),
    queue: (parts.queue ?? []).map((threadId) => ({ id: `r-${threadId}`, threadId })),
  };
  return {
    ...(parts.perDevice ? { running: [], queue: [] } : device),
    devices: parts.perDevice ? [{ running: [], queue: [] }, device] : [],
    reloadWaits: (parts.waits ?? []).map((threadId) => ({ threadId, requestId: 'r', modelId: 'm', since: 0 })),
  } as unknown as BudgetSnapshot;
}

describe('busyElsewhere', () => {
  it("a request of the chat that this page is not writing: running, queued, on any device, or waiting for its model's load", () => {
    expect(busyElsewhere(snapshot({ running: ['t1'] }), 't1', [])).toBe(true);
    expect(busyElsewhere(snapshot({ queue: ['t1'] }), 't1', [])).toBe(true);
    expect(busyElsewhere(snapshot({ running: ['t1'], perDevice: true }), 't1', [])).toBe(true);
    expect(busyElsewhere(snapshot({ waits: ['t1'] }), 't1', [])).toBe(true);
    expect(busyElsewhere(snapshot({ running: ['t2'], queue: ['t3'], waits: ['t4'] }), 't1', [])).toBe(false);
    expect(busyElsewhere(null, 't1', [])).toBe(false);
  });

  it('not when this page writes the reply itself, nor just after (its request still listed a moment)', () => {
    expect(busyElsewhere(snapshot({ running: ['t1'] }), 't1', [{ threadId: 't1' }])).toBe(false);
    expect(busyElsewhere(snapshot({ running: ['t1'] }), 't1', [{ threadId: 't9' }])).toBe(true);
    // The snapshot's request ids are `r-<thread>`: this page's own is not another's.
    expect(busyElsewhere(snapshot({ running: ['t1'] }), 't1', [], [], new Set(['r-t1']))).toBe(false);
    expect(busyElsewhere(snapshot({ running: ['t1'] }), 't1', [], [], new Set(['r-t2']))).toBe(true);
  });

  it('not once the host has said the request is over (its snapshot may list it a moment longer)', () => {
    const at = 0;
    const ended = [
      { type: 'finished', at, requestId: 'r-t1', reason: 'eos', generatedTokens: 3 },
      { type: 'cancelled', at, requestId: 'r-t2', reason: 'user', wasRunning: true },
      { type: 'rejected', at, requestId: 'r', stage: 'queued', error: { code: 'X', message: 'x' } },
    ] as unknown as SchedulerEvent[];
    expect(busyElsewhere(snapshot({ running: ['t1'] }), 't1', [], ended)).toBe(false);
    expect(busyElsewhere(snapshot({ queue: ['t2'] }), 't2', [], ended)).toBe(false);
    expect(busyElsewhere(snapshot({ waits: ['t3'] }), 't3', [], ended)).toBe(false);
    // Another request's end, or a request that only progressed, leaves it busy.
    expect(busyElsewhere(snapshot({ running: ['t4'] }), 't4', [], ended)).toBe(true);
    const progressed = [
      { type: 'firstToken', at, requestId: 'r-t4', ttftMs: 5 },
      { type: 'admitted', at, requestId: 'r-t4', reservedBytes: 1, admittedMaxTokens: 1, queueMs: 0 },
    ] as unknown as SchedulerEvent[];
    expect(busyElsewhere(snapshot({ running: ['t4'] }), 't4', [], progressed)).toBe(true);
  });
});
