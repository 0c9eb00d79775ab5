import { describe, expect, it } from 'vitest';
import { deriveCpuBudget, explicitDerivation } from '../../../src/main/scheduler/budget';
import { createTestScheduler, errorOf, req, unwrap } from './helpers';

describe('reconfigure: the limit', () => {
  it('never evicts running work when lowered below use, and says it is over the limit', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.advance(5);
    expect(unwrap(t.scheduler.reconfigure({ limitBytes: 1000 }))).toEqual({ rejectedRequestIds: [], overLimit: true });
    const snap = t.scheduler.snapshot();
    expect(snap.running.map((r) => r.id)).toEqual(['a', 'b']);
    expect(snap).toMatchObject({ limitBytes: 1000, reservedBytes: 2816, freeBytes: 0 });
    expect(t.ofType('reconfigured')).toEqual([
      {
        type: 'reconfigured',
        at: 1005,
        limits: {
          before: { limitBytes: 4096, maxRunning: 4, maxQueue: 16 },
          after: { limitBytes: 1000, maxRunning: 4, maxQueue: 16 },
        },
        derivation: {
          source: 'explicit',
          limitBytes: 1000,
          formula: 'set to 1000 B',
          notes: ['Changed at run time.'],
        },
        rejectedRequestIds: [],
        overLimit: true,
      },
    ]);
    expect(t.ofType('released')).toEqual([]);
  });

  it('admits nothing until usage falls under the lowered limit', () => {
    const t = createTestScheduler({ limit: 4096, maxRunning: 2 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.submit(req({ id: 'c' }));
    t.scheduler.reconfigure({ limitBytes: 1408 });
    t.scheduler.finish('a', 'eos'); // usage 1408 = limit: 0 free
    expect(t.grants.has('c')).toBe(false);
    t.scheduler.finish('b', 'eos');
    expect(t.grants.get('c')).toMatchObject({ reservedBytes: 1408 });
  });

  it('does not even admit zero-byte work while over the limit', () => {
    const t = createTestScheduler({ limit: 4096, maxRunning: 2 });
    t.submit(req({ id: 'a' }));
    t.scheduler.reconfigure({ limitBytes: 1000 });
    t.submit(req({ id: 'z', bpt: 0 }));
    expect(t.grants.has('z')).toBe(false);
    t.scheduler.finish('a', 'eos');
    expect(t.grants.has('z')).toBe(true);
  });

  it('refuses queued requests whose minimum no longer fits, and keeps the others', () => {
    const t = createTestScheduler({ limit: 4096, maxRunning: 1 });
    t.submit(req({ id: 'run' }));
    t.submit(req({ id: 'long', prompt: 10 })); // minimum 1408
    t.submit(req({ id: 'edge', prompt: 7 })); // minimum 1024 = the new limit
    t.advance(3);
    const outcome = unwrap(t.scheduler.reconfigure({ limitBytes: 1024 }));
    expect(outcome.rejectedRequestIds).toEqual(['long']);
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['edge']);
    expect(t.types('long')).toEqual(['accepted', 'queued', 'rejected']);
    const rejected = t.ofType('rejected')[0];
    expect(rejected).toMatchObject({ requestId: 'long', stage: 'queued', at: 1003 });
    expect(rejected?.error).toEqual({
      code: 'KV_BUDGET_EXCEEDED',
      message:
        'This request needs at least 1.4 KiB of KV cache (1 row × (10 prompt + 1) tokens × 128 B/token), ' +
        'but the KV budget was lowered to 1.0 KiB. Shorten the prompt, or raise the KV budget.',
      detail: { requiredBytes: 1408, budgetBytes: 1024, bpt: 128, promptTokens: 10, rows: 1, sessionTokens: 0 },
    });
    expect(t.ofType('reconfigured')[0]?.rejectedRequestIds).toEqual(['long']);
    const snap = t.scheduler.snapshot();
    expect(snap.recent).toEqual([
      expect.objectContaining({
        id: 'long',
        state: 'refused',
        endedAt: 1003,
        error: rejected?.error,
        acceptedAt: 1000,
      }),
    ]);
    expect(snap.counters.rejections).toEqual({ KV_BUDGET_EXCEEDED: 1 });
    expect(t.types().slice(-2)).toEqual(['reconfigured', 'rejected']);
    t.scheduler.cancel('run', 'user');
    expect(t.grants.get('edge')).toMatchObject({ admittedMaxTokens: 1 });
  });

  it("frees a refused turn's session and keeps its KV", () => {
    const t = createTestScheduler({ limit: 4096, maxRunning: 1 });
    t.submit(req({ id: 's0', session: 's', prompt: 2, max: 1 }));
    t.scheduler.finish('s0', 'eos', { sessionTokens: 2 });
    t.submit(req({ id: 'run', max: 1 }));
    t.submit(req({ id: 'turn', session: 's', prompt: 10 })); // minimum 13 × 128
    t.scheduler.reconfigure({ limitBytes: 1024 });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 2 });
    expect(t.scheduler.sessionInfo('s')).not.toHaveProperty('turnRequestId');
  });

  it('removes a closing session whose queued turn is refused', () => {
    const t = createTestScheduler({ limit: 4096, maxRunning: 1 });
    t.submit(req({ id: 'run', max: 1 }));
    t.submit(req({ id: 'turn', session: 's', prompt: 10 }));
    t.scheduler.closeSession('s');
    t.scheduler.reconfigure({ limitBytes: 1024 });
    expect(t.scheduler.sessionInfo('s')).toBeUndefined();
  });

  it('evicts idle sessions, least recently used first, until usage is under the new limit', () => {
    const t = createTestScheduler({ limit: 4096 });
    for (const s of ['s1', 's2', 's3']) {
      t.submit(req({ id: `${s}-turn`, session: s, prompt: 4, max: 1 }));
      t.scheduler.finish(`${s}-turn`, 'eos', { sessionTokens: 4 }); // 512 each
    }
    t.submit(req({ id: 'a' })); // 1408
    t.advance(1);
    const outcome = unwrap(t.scheduler.reconfigure({ limitBytes: 2432 })); // 2944 used: drop 512
    expect(outcome.overLimit).toBe(false);
    expect(t.ofType('evicted')).toEqual([
      { type: 'evicted', at: 1001, sessionId: 's1', modelId: 'm', tokens: 4, bytes: 512, reason: 'reconfigure' },
    ]);
    expect(t.evicted).toEqual(['s1']);
    expect(t.scheduler.snapshot()).toMatchObject({ heldBytes: 1024, reservedBytes: 1408, freeBytes: 0 });
    expect(t.types().slice(-2)).toEqual(['reconfigured', 'evicted']);
  });

  it('evicts every idle session and still reports over the limit when running work alone exceeds it', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 's1-turn', session: 's1', prompt: 4, max: 1 }));
    t.scheduler.finish('s1-turn', 'eos', { sessionTokens: 4 });
    t.submit(req({ id: 'a' }));
    expect(unwrap(t.scheduler.reconfigure({ limitBytes: 1024 })).overLimit).toBe(true);
    expect(t.evicted).toEqual(['s1']);
    expect(t.ofType('reconfigured')[0]?.overLimit).toBe(true);
  });

  it('evicts the KV a turn keeps when it ends over a lowered limit: only running work may stay over', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 'turn', session: 's', prompt: 3, max: 8 })); // 1408
    t.submit(req({ id: 'other', prompt: 3, max: 8 })); // 1408
    expect(unwrap(t.scheduler.reconfigure({ limitBytes: 1024 })).overLimit).toBe(true);
    t.advance(2);
    t.scheduler.progress('turn', { generatedTokens: 8, usedBytes: 1408 });
    t.scheduler.finish('turn', 'length', { sessionTokens: 11 });
    expect(t.ofType('released').at(-1)).toMatchObject({ requestId: 'turn', bytes: 1408, retainedBytes: 1408 });
    expect(t.ofType('evicted')).toEqual([
      { type: 'evicted', at: 1002, sessionId: 's', modelId: 'm', tokens: 11, bytes: 1408, reason: 'reconfigure' },
    ]);
    expect(t.evicted).toEqual(['s']);
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 0, heldBytes: 0 });
    expect(t.scheduler.snapshot()).toMatchObject({ limitBytes: 1024, reservedBytes: 1408, heldBytes: 0 });
    // Once running work is under the limit, what a turn keeps and fits stays.
    t.submit(req({ id: 'next', session: 's', prompt: 3, max: 1 })); // waits: 1408 + 512 > 1024
    t.scheduler.finish('other', 'eos');
    t.scheduler.finish('next', 'eos', { sessionTokens: 3 });
    expect(t.evicted).toEqual(['s']);
    expect(t.scheduler.snapshot()).toMatchObject({ reservedBytes: 0, heldBytes: 384 });
  });

  it('passes over sessions that hold nothing', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 'e-turn', session: 'empty', prompt: 4, max: 1 }));
    t.scheduler.cancel('e-turn', 'user'); // idle, holding 0: least recently used
    t.submit(req({ id: 'r-turn', session: 'running', prompt: 4, max: 1 })); // running, holds 0 as a session
    t.submit(req({ id: 'h-turn', session: 'holder', prompt: 4, max: 1 }));
    t.scheduler.finish('h-turn', 'eos', { sessionTokens: 4 });
    t.scheduler.reconfigure({ limitBytes: 640 }); // 640 reserved + 512 held
    expect(t.ofType('evicted').map((e) => e.sessionId)).toEqual(['holder']);
  });

  it('evicts nothing when usage already fits', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 's1-turn', session: 's1', prompt: 4, max: 1 }));
    t.scheduler.finish('s1-turn', 'eos', { sessionTokens: 4 });
    t.scheduler.reconfigure({ limitBytes: 512 });
    expect(t.evicted).toEqual([]);
  });

  it('admits a waiting head when the limit is raised', () => {
    const t = createTestScheduler({ limit: 2048, maxRunning: 4 });
    t.submit(req({ id: 'a' }));
    t.scheduler.reconfigure({ maxRunning: 1 });
    t.submit(req({ id: 'b' }));
    t.submit(req({ id: 'c' }));
    t.scheduler.reconfigure({ maxRunning: 4 });
    expect(t.grants.has('b')).toBe(false);
    t.scheduler.reconfigure({ limitBytes: 2816 });
    expect(t.grants.get('b')).toMatchObject({ reservedBytes: 1408 });
    expect(t.grants.get('b')?.budgetCap).toBeUndefined();
  });
});

describe('reconfigure: slots and queue', () => {
  it('keeps running work when maxRunning is lowered, and admits only below the new bound', () => {
    const t = createTestScheduler({ maxRunning: 3 });
    for (const id of ['a', 'b', 'c', 'd']) t.submit(req({ id }));
    t.scheduler.reconfigure({ maxRunning: 1 });
    expect(t.scheduler.snapshot().running.map((r) => r.id)).toEqual(['a', 'b', 'c']);
    t.scheduler.finish('a', 'eos');
    t.scheduler.finish('b', 'eos');
    expect(t.grants.has('d')).toBe(false);
    t.scheduler.finish('c', 'eos');
    expect(t.grants.has('d')).toBe(true);
  });

  it('admits more at once when maxRunning is raised', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    for (const id of ['a', 'b', 'c']) t.submit(req({ id }));
    t.scheduler.reconfigure({ maxRunning: 3 });
    expect(t.scheduler.snapshot().running.map((r) => r.id)).toEqual(['a', 'b', 'c']);
  });

  it('keeps queued requests when maxQueue is lowered and refuses new ones', () => {
    const t = createTestScheduler({ maxRunning: 1, maxQueue: 4 });
    for (const id of ['a', 'b', 'c']) t.submit(req({ id }));
    t.scheduler.reconfigure({ maxQueue: 1 });
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['b', 'c']);
    expect(errorOf(t.submit(req())).code).toBe('QUEUE_FULL');
  });
});

describe('reconfigure: derivation and validation', () => {
  it('takes the limit from a new derivation', () => {
    const t = createTestScheduler({ limit: 1000 });
    const budget = deriveCpuBudget({ totalMemoryBytes: 8192, fraction: 0.5, weightsBytes: 1024, overheadBytes: 0 });
    unwrap(t.scheduler.reconfigure({ derivation: budget.derivation }));
    expect(t.scheduler.snapshot()).toMatchObject({ limitBytes: 3072, derivation: budget.derivation });
  });

  it('accepts a limit with its matching derivation', () => {
    const t = createTestScheduler({ limit: 1000 });
    const budget = deriveCpuBudget({ totalMemoryBytes: 8192, fraction: 0.5, weightsBytes: 1024, overheadBytes: 0 });
    unwrap(t.scheduler.reconfigure(budget));
    expect(t.scheduler.snapshot().derivation).toBe(budget.derivation);
  });

  it('keeps the derivation when the limit is not touched', () => {
    const t = createTestScheduler({ limit: 1000 });
    const before = t.scheduler.snapshot().derivation;
    unwrap(t.scheduler.reconfigure({ maxQueue: 3 }));
    expect(t.scheduler.snapshot()).toMatchObject({ derivation: before, maxQueue: 3, limitBytes: 1000 });
  });

  it('refuses a derivation that disagrees with the limit, changing nothing', () => {
    const t = createTestScheduler({ limit: 1000 });
    const error = errorOf(t.scheduler.reconfigure({ limitBytes: 2000, derivation: explicitDerivation(3000) }));
    expect(error).toEqual({
      code: 'BAD_REQUEST',
      message: "limitBytes 2000 differs from the derivation's 3000.",
      detail: { limitBytes: 2000, derivationLimitBytes: 3000 },
    });
    expect(t.scheduler.snapshot().limitBytes).toBe(1000);
    expect(t.events).toEqual([]);
  });

  it.each([
    [{ limitBytes: -1 }, 'limitBytes'],
    [{ limitBytes: 1.5 }, 'limitBytes'],
    [{ maxRunning: 0 }, 'maxRunning'],
    [{ maxQueue: 0 }, 'maxQueue'],
  ])('refuses %j, changing nothing', (change, field) => {
    const t = createTestScheduler({ limit: 1000 });
    const error = errorOf(t.scheduler.reconfigure(change));
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toMatch(new RegExp(`^Invalid scheduler limits: ${field}: `));
    expect(t.scheduler.snapshot()).toMatchObject({ limitBytes: 1000, maxRunning: 4, maxQueue: 16 });
    expect(t.events).toEqual([]);
  });
});
