import { describe, expect, it } from 'vitest';
import { derivedLimitDrops, sessionsDroppedBy } from '../../../src/renderer/lib/limit-change';
import type { SchedulerSessionView } from '../../../src/shared/scheduler-types';

function session(id: string, heldBytes: number): SchedulerSessionView {
  return {
    sessionId: id,
    modelId: 'm',
    state: heldBytes > 0 ? 'idle' : 'running',
    tokens: heldBytes / 128,
    heldBytes,
    bpt: 128,
    createdAt: 0,
    lastUsedAt: 0,
    closing: false,
  };
}

describe('sessionsDroppedBy', () => {
  // Least recently used first, as the snapshot lists them; the running one holds nothing of its own.
  const sessions = [session('a', 1000), session('run', 0), session('b', 2000), session('c', 4000)];
  const snap = { reservedBytes: 500, heldBytes: 7000, sessions };

  it('drops none while reserved + held fit the new limit', () => {
    expect(sessionsDroppedBy(snap, 7500)).toBe(0);
    expect(sessionsDroppedBy(snap, 1e12)).toBe(0);
  });

  it('drops the least recently used first, until what is left fits', () => {
    expect(sessionsDroppedBy(snap, 7499)).toBe(1); // a goes: 6500 left
    expect(sessionsDroppedBy(snap, 6500)).toBe(1);
    expect(sessionsDroppedBy(snap, 6499)).toBe(2); // b too: 4500
    expect(sessionsDroppedBy(snap, 4499)).toBe(3); // c too: 500, all that is reserved
  });

  it('never counts running work: a limit under the reservations drops every idle session and no more', () => {
    expect(sessionsDroppedBy(snap, 0)).toBe(3);
  });
});

describe('derivedLimitDrops', () => {
  const sessions = [session('a', 1000), session('b', 2000)];
  const derivation = (derivedBytes?: number) => ({
    source: 'override' as const,
    limitBytes: 1e9,
    formula: '',
    notes: [],
    ...(derivedBytes === undefined ? {} : { derivedBytes }),
  });

  it('says what the derived limit comes to and the sessions it drops, when it drops any', () => {
    const snap = { reservedBytes: 0, heldBytes: 3000, sessions };
    expect(derivedLimitDrops({ ...snap, derivation: derivation(2500) })).toEqual({ bytes: 2500, drops: 1 });
    // A derivation below 0 (weights over the memory's share) is a limit of 0: every kept KV goes.
    expect(derivedLimitDrops({ ...snap, derivation: derivation(-5) })).toEqual({ bytes: 0, drops: 2 });
    expect(derivedLimitDrops({ ...snap, derivation: derivation(3000) })).toBeUndefined();
  });

  it('tells nothing for a limit with no derivation to go back to', () => {
    expect(
      derivedLimitDrops({ reservedBytes: 0, heldBytes: 3000, sessions, derivation: derivation() }),
    ).toBeUndefined();
  });
});
