import { describe, expect, it } from 'vitest';
import { explicitDerivation } from '../../../src/main/scheduler/budget';
import { createScheduler } from '../../../src/main/scheduler/scheduler';
import { createTestScheduler, req } from './helpers';

describe('snapshot', () => {
  it('starts empty', () => {
    const derivation = explicitDerivation(4096);
    const s = createScheduler({ limitBytes: 4096, derivation, maxRunning: 2, maxQueue: 8, now: () => 77 });
    const snap = s.snapshot();
    expect(snap).toMatchObject({
      at: 77,
      limitBytes: 4096,
      reservedBytes: 0,
      usedBytes: 0,
      heldBytes: 0,
      freeBytes: 4096,
      bpt: null,
      derivation,
      maxRunning: 2,
      maxQueue: 8,
      queue: [],
      running: [],
      sessions: [],
      recent: [],
      violations: [],
    });
    expect(snap.counters).toMatchObject({
      accepted: 0,
      admitted: 0,
      finished: 0,
      cancelled: 0,
      failed: 0,
      rejections: {},
      budgetCapped: 0,
      contextClipped: 0,
      evictions: 0,
      generationTokens: 0,
    });
    expect(snap.counters.ttftSeconds).toMatchObject({ count: 0, sum: 0 });
    expect(snap.counters.ttftSeconds.counts.every((c) => c === 0)).toBe(true);
  });

  it('sums reservations and use over running requests', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b', max: 1 }));
    t.scheduler.progress('a', { generatedTokens: 1, usedBytes: 512 });
    t.scheduler.progress('b', { generatedTokens: 1, usedBytes: 300 });
    expect(t.scheduler.snapshot()).toMatchObject({
      reservedBytes: 1408 + 512,
      usedBytes: 812,
      freeBytes: 4096 - 1920,
    });
  });

  it('shows each request with its numbers while queued and running', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a', thread: 'th', priority: 3 }));
    t.submit(req({ id: 'b', rows: 2, prompt: 5, max: 70, context: 64 }));
    const snap = t.scheduler.snapshot();
    expect(snap.running).toStrictEqual([
      {
        id: 'a',
        modelId: 'm',
        threadId: 'th',
        state: 'running',
        priority: 3,
        rows: 1,
        promptTokens: 3,
        sessionPrefixTokens: 0,
        requestedMaxTokens: 8,
        maxNewTokens: 8,
        admittedMaxTokens: 8,
        bpt: 128,
        reservedBytes: 1408,
        usedBytes: 0,
        generatedTokens: 0,
        acceptedAt: 1000,
        admittedAt: 1000,
      },
    ]);
    expect(snap.queue).toStrictEqual([
      {
        id: 'b',
        modelId: 'm',
        state: 'queued',
        priority: 0,
        rows: 2,
        promptTokens: 5,
        sessionPrefixTokens: 0,
        requestedMaxTokens: 70,
        maxNewTokens: 59,
        clipped: { requestedMaxTokens: 70, clippedMaxTokens: 59, contextLength: 64 },
        bpt: 128,
        reservedBytes: 0,
        usedBytes: 0,
        generatedTokens: 0,
        acceptedAt: 1000,
      },
    ]);
  });

  it('gives the bpt of the single known model', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a', model: 'x', bpt: 96 }));
    t.scheduler.finish('a', 'eos');
    expect(t.scheduler.snapshot().bpt).toBe(96);
    t.submit(req({ model: 'x', bpt: 64 }));
    expect(t.scheduler.snapshot().bpt).toBe(64);
  });

  it('forgets an unloaded model: the one loaded after it gives its bpt', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a', model: 'x', bpt: 96 }));
    t.scheduler.finish('a', 'eos');
    t.scheduler.forgetModel('x');
    t.submit(req({ id: 'b', model: 'y', bpt: 48 }));
    expect(t.scheduler.snapshot().bpt).toBe(48);
  });

  it('keeps the newest historyLimit ended requests', () => {
    const t = createTestScheduler({ historyLimit: 2 });
    for (const id of ['a', 'b', 'c']) {
      t.submit(req({ id }));
      t.scheduler.finish(id, 'eos');
    }
    expect(t.scheduler.snapshot().recent.map((r) => r.id)).toEqual(['b', 'c']);
  });

  it('keeps 100 ended requests by default', () => {
    const t = createTestScheduler();
    for (let i = 0; i < 101; i++) {
      t.submit(req({ id: `r${i}` }));
      t.scheduler.finish(`r${i}`, 'eos');
    }
    const recent = t.scheduler.snapshot().recent;
    expect(recent).toHaveLength(100);
    expect(recent[0]?.id).toBe('r1');
  });

  it('keeps the newest historyLimit violations', () => {
    const t = createTestScheduler({ historyLimit: 2 });
    t.submit(req({ id: 'a' }));
    for (const used of [2000, 3000, 4000]) t.scheduler.progress('a', { generatedTokens: 1, usedBytes: used });
    expect(t.scheduler.snapshot().violations.map((v) => v.message)).toEqual([
      'a reports 3000 B of KV in use, over its reservation of 1408 B.',
      'a reports 4000 B of KV in use, over its reservation of 1408 B.',
    ]);
  });

  it('is a copy: changing it changes nothing inside', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.finish('a', 'eos');
    const snap = t.scheduler.snapshot();
    (snap.recent[0] as { state: string }).state = 'running';
    snap.counters.finished = 99;
    const again = t.scheduler.snapshot();
    expect(again.recent[0]?.state).toBe('finished');
    expect(again.counters.finished).toBe(1);
  });

  it('counts admissions, caps and outcomes', () => {
    const t = createTestScheduler({ limit: 1024 });
    t.submit(req({ id: 'a' }));
    t.scheduler.finish('a', 'eos');
    t.submit(req({ id: 'b', max: 1 }));
    t.scheduler.cancel('b', 'user');
    t.submit(req({ id: 'c', max: 1 }));
    t.scheduler.fail('c', { code: 'ENGINE_FAILED', message: 'x' });
    expect(t.scheduler.snapshot().counters).toMatchObject({
      accepted: 3,
      admitted: 3,
      budgetCapped: 1,
      finished: 1,
      cancelled: 1,
      failed: 1,
    });
  });
});

describe('snapshot: histograms', () => {
  it('puts a time to first token in every bucket at or above it', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.advance(40);
    t.scheduler.firstToken('a');
    const h = t.scheduler.snapshot().counters.ttftSeconds;
    expect(h.bounds).toEqual([
      0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
    ]);
    expect(h.counts).toEqual([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    expect(h.count).toBe(1);
    expect(h.sum).toBeCloseTo(0.04, 10);
  });

  it('counts an observation above every bound only in the total', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.advance(3_000_000);
    t.scheduler.firstToken('a');
    const h = t.scheduler.snapshot().counters.ttftSeconds;
    expect(h.counts.every((c) => c === 0)).toBe(true);
    expect(h).toMatchObject({ count: 1, sum: 3000 });
  });

  it('observes the queue time of every admission', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.advance(1500);
    t.scheduler.finish('a', 'eos');
    const h = t.scheduler.snapshot().counters.queueTimeSeconds;
    expect(h.bounds).toEqual([
      0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
    ]);
    expect(h.counts).toEqual([1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
    expect(h).toMatchObject({ count: 2, sum: 1.5 });
  });
});
