import { describe, expect, it } from 'vitest';
import type { AdmissionGrant } from '../../../src/shared/scheduler-types';
import { createTestScheduler, req, unwrap } from './helpers';

// Default request: 1 row, P = 3, N = 8, 128 B/token: full 1408 B, minimum 512 B.

describe('admission: the examples', () => {
  it('limit 1408: admits the full reservation without a cap', () => {
    const t = createTestScheduler({ limit: 1408 });
    t.submit(req({ id: 'a' }));
    const grant = t.grants.get('a');
    expect(grant).toStrictEqual({
      requestId: 'a',
      token: 'grant-1',
      reservedBytes: 1408,
      admittedMaxTokens: 8,
      admittedAt: 1000,
    });
    expect(t.ofType('admitted')).toStrictEqual([
      { type: 'admitted', at: 1000, requestId: 'a', reservedBytes: 1408, admittedMaxTokens: 8, queueMs: 0 },
    ]);
  });

  it("limit 1024: admits N' = 5 with a budget cap", () => {
    const t = createTestScheduler({ limit: 1024 });
    t.submit(req({ id: 'a' }));
    const cap = {
      requestedMaxTokens: 8,
      admittedMaxTokens: 5,
      requestedBytes: 1408,
      admittedBytes: 1024,
      availableBytes: 1024,
    };
    expect(t.grants.get('a')).toEqual({
      requestId: 'a',
      token: 'grant-1',
      reservedBytes: 1024,
      admittedMaxTokens: 5,
      budgetCap: cap,
      admittedAt: 1000,
    });
    expect(t.ofType('admitted')[0]).toMatchObject({ budgetCap: cap, admittedMaxTokens: 5 });
    const snap = t.scheduler.snapshot();
    expect(snap.running[0]).toMatchObject({ budgetCap: cap, admittedMaxTokens: 5, reservedBytes: 1024 });
    expect(snap.counters.budgetCapped).toBe(1);
  });

  it("rounds N' down to whole tokens", () => {
    const t = createTestScheduler({ limit: 1100 });
    t.submit(req({ id: 'a' }));
    expect(t.grants.get('a')).toMatchObject({ admittedMaxTokens: 5, reservedBytes: 1024 });
    expect(t.grants.get('a')?.budgetCap).toMatchObject({ availableBytes: 1100, admittedBytes: 1024 });
  });

  it("caps per row: N' counts every row", () => {
    const t = createTestScheduler({ limit: 2048 });
    t.submit(req({ id: 'a', rows: 2 }));
    // 2 × (3 + N') × 128 ≤ 2048 → N' = 5
    expect(t.grants.get('a')).toMatchObject({ admittedMaxTokens: 5, reservedBytes: 2048 });
  });

  it('limit 400: refuses with KV_BUDGET_EXCEEDED and never admits', () => {
    const t = createTestScheduler({ limit: 400 });
    const r = t.submit(req({ id: 'a' }));
    expect(r.ok ? null : r.error.detail).toMatchObject({ requiredBytes: 512, budgetBytes: 400 });
    expect(t.grants.size).toBe(0);
  });
});

describe('admission: slots and order', () => {
  it('admits up to maxRunning and queues the rest', () => {
    const t = createTestScheduler({ maxRunning: 2 });
    for (const id of ['a', 'b', 'c']) t.submit(req({ id }));
    const snap = t.scheduler.snapshot();
    expect(snap.running.map((r) => r.id)).toEqual(['a', 'b']);
    expect(snap.queue.map((r) => r.id)).toEqual(['c']);
  });

  it('admits the next one when a slot frees, with its queue time', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.advance(250);
    t.scheduler.finish('a', 'eos');
    expect(t.types('b')).toEqual(['accepted', 'queued', 'admitted']);
    expect(t.ofType('admitted')[1]).toMatchObject({ requestId: 'b', queueMs: 250, at: 1250 });
    expect(t.grants.get('b')?.admittedAt).toBe(1250);
  });

  it('orders the queue by priority, then first come first served', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'run' }));
    t.submit(req({ id: 'low1', priority: -1 }));
    t.submit(req({ id: 'mid1' }));
    t.submit(req({ id: 'high', priority: 5 }));
    t.submit(req({ id: 'mid2', priority: 0 }));
    t.submit(req({ id: 'low2', priority: -1 }));
    expect(t.scheduler.snapshot().queue.map((r) => [r.id, r.priority])).toEqual([
      ['high', 5],
      ['mid1', 0],
      ['mid2', 0],
      ['low1', -1],
      ['low2', -1],
    ]);
    expect(t.ofType('queued').map((e) => [e.requestId, e.position, e.queueLength])).toEqual([
      ['run', 0, 1],
      ['low1', 0, 1],
      ['mid1', 0, 2],
      ['high', 0, 3],
      ['mid2', 2, 4],
      ['low2', 4, 5],
    ]);
  });

  it('admits in queue order as slots free', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'run' }));
    t.submit(req({ id: 'b' }));
    t.submit(req({ id: 'c', priority: 1 }));
    t.scheduler.finish('run', 'eos');
    expect(t.scheduler.snapshot().running.map((r) => r.id)).toEqual(['c']);
  });

  it('keeps a head that does not fit at the head: no smaller request overtakes it', () => {
    const t = createTestScheduler({ limit: 2048, maxRunning: 1 });
    t.submit(req({ id: 'a', max: 8 })); // 1408
    t.submit(req({ id: 'big', max: 13 })); // 2048: waits, 'small' is behind it
    t.submit(req({ id: 'small', max: 1 })); // 512 would fit in the 640 left
    t.scheduler.reconfigure({ maxRunning: 4 });
    const snap = t.scheduler.snapshot();
    expect(snap.running.map((r) => r.id)).toEqual(['a']);
    expect(snap.queue.map((r) => r.id)).toEqual(['big', 'small']);
    t.scheduler.finish('a', 'eos');
    expect(t.scheduler.snapshot().running.map((r) => r.id)).toEqual(['big']);
  });

  it('admits a head whose full reservation exactly fills the free budget', () => {
    const t = createTestScheduler({ limit: 2816 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.submit(req({ id: 'c' }));
    expect(t.grants.get('b')?.budgetCap).toBeUndefined();
    expect(t.scheduler.snapshot().freeBytes).toBe(0);
  });
});

describe('admission: capping', () => {
  it('caps a head that never fits whole when nothing waits behind it, even while others run', () => {
    const t = createTestScheduler({ limit: 2048 });
    t.submit(req({ id: 'a' })); // 1408, 640 left
    t.submit(req({ id: 'b', max: 20 })); // full 2944 > the whole budget; minimum 512 fits: N' = 2
    expect(t.grants.get('b')).toMatchObject({ admittedMaxTokens: 2, reservedBytes: 640 });
    expect(t.grants.get('b')?.budgetCap).toEqual({
      requestedMaxTokens: 20,
      admittedMaxTokens: 2,
      requestedBytes: 2944,
      admittedBytes: 640,
      availableBytes: 640,
    });
  });

  it('does not cap a head that fits whole once the running work ends: it waits for it', () => {
    const t = createTestScheduler({ limit: 2048 });
    t.submit(req({ id: 'a' })); // 1408, 640 left
    t.submit(req({ id: 'b' })); // full 1408: not now, but alone
    expect(t.grants.has('b')).toBe(false);
    t.scheduler.finish('a', 'eos');
    expect(t.grants.get('b')).toMatchObject({ admittedMaxTokens: 8, reservedBytes: 1408 });
    expect(t.grants.get('b')?.budgetCap).toBeUndefined();
  });

  it('does not cap while others run and more requests wait behind the head', () => {
    const t = createTestScheduler({ limit: 2048 });
    t.submit(req({ id: 'a' }));
    t.scheduler.reconfigure({ maxRunning: 1 }); // hold b and c in the queue
    t.submit(req({ id: 'b' }));
    t.submit(req({ id: 'c' }));
    t.scheduler.reconfigure({ maxRunning: 4 });
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['b', 'c']);
    expect(t.grants.has('b')).toBe(false);
  });

  it('caps a head that exceeds the whole budget when nothing runs, even with a queue behind it', () => {
    const t = createTestScheduler({ limit: 1024, maxRunning: 1 });
    t.submit(req({ id: 'hold', bpt: 0 }));
    t.submit(req({ id: 'big' })); // full 1408 > 1024
    t.submit(req({ id: 'next' }));
    t.scheduler.finish('hold', 'eos');
    expect(t.grants.get('big')).toMatchObject({ admittedMaxTokens: 5 });
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['next']);
  });

  it('does not cap a head beside running work while one waits behind it, though it never fits whole', () => {
    // 1 B/token: A holds 600 of 1000; H's full reservation (10 + 2000) exceeds the whole budget.
    const t = createTestScheduler({ limit: 1000 });
    t.submit(req({ id: 'A', bpt: 1, prompt: 100, max: 500, context: 4096 }));
    t.scheduler.reconfigure({ maxRunning: 1 }); // hold H and J in the queue
    t.submit(req({ id: 'H', bpt: 1, prompt: 10, max: 2000, context: 4096 }));
    t.submit(req({ id: 'J', bpt: 1, prompt: 10, max: 10, context: 4096 }));
    t.scheduler.reconfigure({ maxRunning: 4 });
    // 400 free would take H's minimum (11), but J is behind it: H waits for A.
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['H', 'J']);
    expect(t.ofType('admitted').filter((e) => e.budgetCap !== undefined)).toEqual([]);
    expect(t.grants.has('H')).toBe(false);
    t.scheduler.finish('A', 'eos');
    // Nothing runs now: H takes the whole budget, capped to 990 tokens; J waits for it.
    expect(t.grants.get('H')).toMatchObject({ admittedMaxTokens: 990, reservedBytes: 1000 });
    expect(t.grants.get('H')?.budgetCap).toMatchObject({ requestedMaxTokens: 2000, admittedMaxTokens: 990 });
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['J']);
  });

  it('does not cap a head whose full reservation equals the whole budget: it waits and runs whole', () => {
    const t = createTestScheduler({ limit: 1000 });
    t.submit(req({ id: 'A', bpt: 1, prompt: 100, max: 500, context: 4096 })); // 600, 400 left
    t.submit(req({ id: 'H', bpt: 1, prompt: 10, max: 990, context: 4096 })); // full 1000 = the budget
    expect(t.grants.has('H')).toBe(false);
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['H']);
    t.scheduler.finish('A', 'eos');
    expect(t.grants.get('H')).toMatchObject({ admittedMaxTokens: 990, reservedBytes: 1000 });
    expect(t.grants.get('H')?.budgetCap).toBeUndefined();
  });

  it('does not cap below the minimum: the head waits', () => {
    const t = createTestScheduler({ limit: 1920 });
    t.submit(req({ id: 'a' })); // 1408, 512 left
    t.submit(req({ id: 'b', prompt: 4 })); // minimum 640
    expect(t.grants.has('b')).toBe(false);
    t.scheduler.finish('a', 'eos');
    expect(t.grants.get('b')?.budgetCap).toBeUndefined();
  });

  it("admits at the minimum exactly (N' = 1)", () => {
    const t = createTestScheduler({ limit: 1920 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b', prompt: 3, max: 20 })); // full 2944 > the whole budget; minimum 512 = 512 left
    expect(t.grants.get('b')).toMatchObject({ admittedMaxTokens: 1, reservedBytes: 512 });
  });
});

describe('admission: the grant', () => {
  it('is live from admission until release, for the exact object or its token', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    const grant = t.grants.get('a') as AdmissionGrant;
    expect(t.scheduler.isGrantLive(grant)).toBe(true);
    expect(t.scheduler.isGrantLive(grant.token)).toBe(true);
    expect(t.scheduler.isGrantLive({ ...grant })).toBe(false);
    t.scheduler.finish('a', 'eos');
    expect(t.scheduler.isGrantLive(grant)).toBe(false);
    expect(t.scheduler.isGrantLive(grant.token)).toBe(false);
  });

  it('is frozen', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    const grant = t.grants.get('a') as AdmissionGrant;
    expect(Object.isFrozen(grant)).toBe(true);
  });

  it('has a new token on every admission, also for a reused id', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    const first = t.grants.get('a') as AdmissionGrant;
    t.scheduler.cancel('a', 'user');
    t.submit(req({ id: 'a' }));
    const second = t.grants.get('a') as AdmissionGrant;
    expect(second.token).not.toBe(first.token);
    expect(t.scheduler.isGrantLive(first.token)).toBe(false);
    expect(t.scheduler.isGrantLive(second)).toBe(true);
  });

  it('is not live in another scheduler that issued the same token', () => {
    const t1 = createTestScheduler();
    const t2 = createTestScheduler();
    t1.submit(req({ id: 'a' }));
    t2.submit(req({ id: 'a' }));
    const g1 = t1.grants.get('a') as AdmissionGrant;
    expect(t2.scheduler.isGrantLive(g1)).toBe(false);
  });

  it('is not live for a token never issued', () => {
    const t = createTestScheduler();
    expect(t.scheduler.isGrantLive('grant-1')).toBe(false);
  });
});

describe('admission: work without KV (invariant 7)', () => {
  it('passes through admission, reserves 0 bytes and takes a running slot', () => {
    const t = createTestScheduler({ limit: 0, maxRunning: 1 });
    t.submit(req({ id: 'a', bpt: 0 }));
    t.submit(req({ id: 'b', bpt: 0 }));
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted']);
    expect(t.grants.get('a')).toMatchObject({ reservedBytes: 0 });
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['b']);
    expect(t.scheduler.finish('a', 'eos')).toBe(0);
    expect(t.ofType('released')).toEqual([{ type: 'released', at: 1000, requestId: 'a', bytes: 0, retainedBytes: 0 }]);
    expect(t.grants.has('b')).toBe(true);
  });
});

describe('admission: listeners', () => {
  it('fails and releases a request whose onAdmitted throws, and records why', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.scheduler.submit(req({ id: 'a' }), {
      onAdmitted() {
        throw new Error('boom');
      },
    });
    t.submit(req({ id: 'b' }));
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted', 'failed', 'released']);
    expect(t.ofType('failed')[0]).toMatchObject({
      error: { code: 'INTERNAL', message: 'The admission listener failed: Error: boom' },
      wasRunning: true,
    });
    const snap = t.scheduler.snapshot();
    expect(snap.violations).toEqual([
      { at: 1000, kind: 'listener-error', requestId: 'a', message: 'onAdmitted threw for a: Error: boom' },
    ]);
    expect(snap.recent[0]).toMatchObject({ id: 'a', state: 'failed' });
    expect(snap.running.map((r) => r.id)).toEqual(['b']);
  });

  it('releases once a request whose onAdmitted ends it and then throws', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.scheduler.submit(req({ id: 'a' }), {
      onAdmitted() {
        t.scheduler.cancel('a', 'user');
        throw new Error('the engine refused it');
      },
    });
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted', 'cancelled', 'released']);
    const snap = t.scheduler.snapshot();
    expect(snap.counters).toMatchObject({ admitted: 1, cancelled: 1, failed: 0 });
    expect(snap.recent.map((r) => r.state)).toEqual(['cancelled']);
    expect(snap.violations.map((v) => v.kind)).toEqual(['listener-error']);
  });

  it('records a throwing subscriber and keeps delivering to the others', () => {
    const t = createTestScheduler();
    t.scheduler.subscribe((e) => {
      if (e.type === 'queued') throw new Error('bad subscriber');
    });
    const later: string[] = [];
    t.scheduler.subscribe((e) => later.push(e.type));
    t.submit(req({ id: 'a' }));
    expect(later).toEqual(['accepted', 'queued', 'admitted']);
    expect(t.grants.has('a')).toBe(true);
    const snap = t.scheduler.snapshot();
    expect(snap.violations).toStrictEqual([
      { at: 1000, kind: 'listener-error', message: 'A scheduler subscriber threw on queued: Error: bad subscriber' },
    ]);
    expect(t.types()).not.toContain('violation');
  });

  it('stops delivering after unsubscribe', () => {
    const t = createTestScheduler();
    const seen: string[] = [];
    const off = t.scheduler.subscribe((e) => seen.push(e.type));
    t.submit(req({ id: 'a' }));
    off();
    t.scheduler.finish('a', 'eos');
    expect(seen).toEqual(['accepted', 'queued', 'admitted']);
  });

  it('does not call onAdmitted when a subscriber ended the request on its admitted event', () => {
    const t = createTestScheduler();
    t.scheduler.subscribe((e) => {
      if (e.type === 'admitted') t.scheduler.cancel(e.requestId, 'user');
    });
    let called = false;
    t.scheduler.submit(req({ id: 'a' }), {
      onAdmitted() {
        called = true;
      },
    });
    expect(called).toBe(false);
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted', 'cancelled', 'released']);
  });

  it('delivers events in causal order when a listener calls back into the scheduler', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.scheduler.submit(req({ id: 'a' }), {
      onAdmitted: () => t.scheduler.finish('a', 'eos'),
    });
    t.submit(req({ id: 'b' }));
    expect(t.types()).toEqual([
      'accepted',
      'queued',
      'admitted',
      'finished',
      'released',
      'accepted',
      'queued',
      'admitted',
    ]);
  });

  it('lets every subscriber see an event before any event a subscriber caused', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'x' }));
    const first = t.scheduler.subscribe((e) => {
      if (e.type === 'accepted' && e.requestId === 'a') t.scheduler.cancel('a', 'user');
    });
    const seen: string[] = [];
    t.scheduler.subscribe((e) => seen.push(e.type));
    t.submit(req({ id: 'a' }));
    first();
    expect(seen).toEqual(['accepted', 'queued', 'cancelled']);
  });

  it('admits work freed by a listener before submit returns', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.scheduler.subscribe((e) => {
      if (e.type === 'queued' && e.requestId === 'b') t.scheduler.finish('a', 'eos');
    });
    unwrap(t.submit(req({ id: 'b' })));
    expect(t.grants.has('b')).toBe(true);
  });

  it('admits a request submitted from inside a listener', () => {
    const t = createTestScheduler();
    t.scheduler.submit(req({ id: 'a' }), { onAdmitted: () => t.submit(req({ id: 'b' })) });
    expect(t.grants.has('b')).toBe(true);
    expect(t.types().slice(3)).toEqual(['accepted', 'queued', 'admitted']);
  });
});
