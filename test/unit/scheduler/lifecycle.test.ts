import { describe, expect, it } from 'vitest';
import type { ErrorInfo } from '../../../src/shared/errors';
import { createTestScheduler, req } from './helpers';

const crash: ErrorInfo = { code: 'ENGINE_FAILED', message: 'engine process exited (SIGSEGV)' };

describe('firstToken', () => {
  it('records the time to first token once', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.advance(40);
    expect(t.scheduler.firstToken('a')).toBe(true);
    t.advance(10);
    expect(t.scheduler.firstToken('a')).toBe(false);
    expect(t.ofType('firstToken')).toEqual([{ type: 'firstToken', at: 1040, requestId: 'a', ttftMs: 40 }]);
    expect(t.scheduler.snapshot().running[0]).toMatchObject({ firstTokenAt: 1040 });
  });

  it('measures from acceptance, including the time queued', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.advance(100);
    t.scheduler.finish('a', 'eos');
    t.advance(20);
    t.scheduler.firstToken('b');
    expect(t.ofType('firstToken')[0]).toMatchObject({ requestId: 'b', ttftMs: 120 });
  });

  it('is refused for a queued or unknown request', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    expect(t.scheduler.firstToken('b')).toBe(false);
    expect(t.scheduler.firstToken('nope')).toBe(false);
    expect(t.ofType('firstToken')).toEqual([]);
  });
});

describe('progress', () => {
  it('records generated tokens and used bytes', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.advance(5);
    expect(t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 640 })).toBe(true);
    expect(t.ofType('progress')).toEqual([
      { type: 'progress', at: 1005, requestId: 'a', generatedTokens: 2, usedBytes: 640, reservedBytes: 1408 },
    ]);
    const snap = t.scheduler.snapshot();
    expect(snap.running[0]).toMatchObject({ generatedTokens: 2, usedBytes: 640 });
    expect(snap.usedBytes).toBe(640);
  });

  it('accepts use equal to the reservation', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    expect(t.scheduler.progress('a', { generatedTokens: 8, usedBytes: 1408 })).toBe(true);
  });

  it('refuses use over the reservation and records the violation (invariant 4)', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.progress('a', { generatedTokens: 1, usedBytes: 512 });
    expect(t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 1409 })).toBe(false);
    const snap = t.scheduler.snapshot();
    expect(snap.running[0]).toMatchObject({ usedBytes: 512, generatedTokens: 1 });
    const violation = {
      at: 1000,
      kind: 'over-charge',
      requestId: 'a',
      message: 'a reports 1409 B of KV in use, over its reservation of 1408 B.',
    };
    expect(snap.violations).toEqual([violation]);
    expect(t.ofType('violation')).toEqual([{ type: 'violation', at: 1000, requestId: 'a', violation }]);
  });

  it('refuses a NaN use', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    expect(t.scheduler.progress('a', { generatedTokens: 1, usedBytes: Number.NaN })).toBe(false);
  });

  it("refuses more tokens than admitted (N')", () => {
    const t = createTestScheduler({ limit: 1024 });
    t.submit(req({ id: 'a' }));
    expect(t.scheduler.progress('a', { generatedTokens: 5, usedBytes: 0 })).toBe(true);
    expect(t.scheduler.progress('a', { generatedTokens: 6, usedBytes: 0 })).toBe(false);
    expect(t.scheduler.snapshot().violations).toEqual([
      {
        at: 1000,
        kind: 'over-generation',
        requestId: 'a',
        message: 'a reports 6 generated tokens, over its admitted 5.',
      },
    ]);
    expect(t.scheduler.snapshot().running[0]?.generatedTokens).toBe(5);
  });

  it('is refused without a violation for a request that is not running (a late report)', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.scheduler.cancel('a', 'user');
    expect(t.scheduler.progress('a', { generatedTokens: 1, usedBytes: 0 })).toBe(false);
    expect(t.scheduler.progress('b', { generatedTokens: 1, usedBytes: 0 })).toBe(true);
    expect(t.scheduler.snapshot().violations).toEqual([]);
  });

  it('counts generated tokens once, by their increase', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    t.scheduler.progress('a', { generatedTokens: 3, usedBytes: 0 });
    t.scheduler.progress('a', { generatedTokens: 3, usedBytes: 0 });
    t.scheduler.progress('a', { generatedTokens: 5, usedBytes: 0 });
    t.scheduler.progress('b', { generatedTokens: 2, usedBytes: 0 });
    expect(t.scheduler.snapshot().counters.generationTokens).toBe(7);
  });

  it('counts every row of a multi-row request; its longest row stays what the reservation is checked against', () => {
    const t = createTestScheduler({ limit: 1 << 20 });
    t.submit(req({ id: 'a', rows: 3, max: 8 }));
    t.scheduler.progress('a', { generatedTokens: 4, usedBytes: 0, allRowsTokens: 10 });
    expect(t.scheduler.snapshot().counters.generationTokens).toBe(10);
    // A row ended early: the longest goes on, the total with it.
    t.scheduler.progress('a', { generatedTokens: 8, usedBytes: 0, allRowsTokens: 18 });
    t.scheduler.finish('a', 'length', { generatedTokens: 8, allRowsTokens: 20 });
    expect(t.scheduler.snapshot().counters.generationTokens).toBe(20);
    expect(t.scheduler.snapshot().violations).toEqual([]);
  });

  it('never counts generated tokens down', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.progress('a', { generatedTokens: 5, usedBytes: 0 });
    t.scheduler.progress('a', { generatedTokens: 3, usedBytes: 0 });
    expect(t.scheduler.snapshot().counters.generationTokens).toBe(5);
  });
});

describe('finish', () => {
  it('releases the reservation once, with finished then released', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.progress('a', { generatedTokens: 4, usedBytes: 896 });
    t.advance(30);
    expect(t.scheduler.finish('a', 'stop')).toBe(1408);
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted', 'progress', 'finished', 'released']);
    expect(t.ofType('finished')).toEqual([
      { type: 'finished', at: 1030, requestId: 'a', reason: 'stop', generatedTokens: 4 },
    ]);
    expect(t.ofType('released')).toEqual([
      { type: 'released', at: 1030, requestId: 'a', bytes: 1408, retainedBytes: 0 },
    ]);
    const snap = t.scheduler.snapshot();
    expect(snap.reservedBytes).toBe(0);
    expect(snap.usedBytes).toBe(0);
    expect(snap.running).toEqual([]);
    expect(snap.counters.finished).toBe(1);
  });

  it('is a no-op returning 0 the second time', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.finish('a', 'eos');
    expect(t.scheduler.finish('a', 'eos')).toBe(0);
    expect(t.scheduler.cancel('a', 'user')).toBe(0);
    expect(t.scheduler.fail('a', crash)).toBe(0);
    expect(t.ofType('released')).toHaveLength(1);
    expect(t.scheduler.snapshot().counters).toMatchObject({ finished: 1, cancelled: 0, failed: 0 });
  });

  it('does nothing for a queued request', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    expect(t.scheduler.finish('b', 'eos')).toBe(0);
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['b']);
  });

  it('takes the final generated count when given', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 0 });
    t.scheduler.finish('a', 'length', { generatedTokens: 8 });
    expect(t.ofType('finished')[0]).toMatchObject({ generatedTokens: 8, reason: 'length' });
    expect(t.scheduler.snapshot().counters.generationTokens).toBe(8);
    expect(t.scheduler.snapshot().recent[0]).toMatchObject({ generatedTokens: 8 });
  });

  it('records a violation for a final count over the admitted tokens and ignores it', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 0 });
    expect(t.scheduler.finish('a', 'eos', { generatedTokens: 9 })).toBe(1408);
    expect(t.ofType('finished')[0]).toMatchObject({ generatedTokens: 2 });
    expect(t.scheduler.snapshot().violations).toEqual([
      expect.objectContaining({
        kind: 'over-generation',
        message: 'a finished with 9 generated tokens, over its admitted 8.',
      }),
    ]);
  });

  it('keeps the request in recent with its history', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a', thread: 'th' }));
    t.advance(10);
    t.scheduler.firstToken('a');
    t.scheduler.progress('a', { generatedTokens: 1, usedBytes: 512 });
    t.advance(10);
    t.scheduler.finish('a', 'eos');
    expect(t.scheduler.snapshot().recent).toStrictEqual([
      {
        id: 'a',
        modelId: 'm',
        threadId: 'th',
        state: 'finished',
        priority: 0,
        rows: 1,
        promptTokens: 3,
        sessionPrefixTokens: 0,
        requestedMaxTokens: 8,
        maxNewTokens: 8,
        admittedMaxTokens: 8,
        bpt: 128,
        reservedBytes: 1408,
        usedBytes: 512,
        generatedTokens: 1,
        acceptedAt: 1000,
        admittedAt: 1000,
        firstTokenAt: 1010,
        endedAt: 1020,
        endReason: 'eos',
      },
    ]);
  });
});

describe('cancel', () => {
  it('removes a queued request without a released event', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    expect(t.scheduler.cancel('b', 'disconnect')).toBe(0);
    expect(t.types('b')).toEqual(['accepted', 'queued', 'cancelled']);
    expect(t.ofType('cancelled')).toEqual([
      { type: 'cancelled', at: 1000, requestId: 'b', reason: 'disconnect', wasRunning: false },
    ]);
    expect(t.scheduler.snapshot().queue).toEqual([]);
    expect(t.scheduler.snapshot().recent[0]).toMatchObject({
      id: 'b',
      state: 'cancelled',
      endReason: 'disconnect',
      error: { code: 'CANCELLED', message: 'Request b was cancelled (disconnect).' },
    });
    t.scheduler.finish('a', 'eos');
    expect(t.grants.has('b')).toBe(false);
  });

  it('removes the right request from the middle of the queue', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    for (const id of ['a', 'b', 'c', 'd']) t.submit(req({ id }));
    t.scheduler.cancel('c', 'user');
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['b', 'd']);
  });

  it('releases a running request once and admits the next', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    expect(t.scheduler.cancel('a', 'user')).toBe(1408);
    expect(t.scheduler.cancel('a', 'user')).toBe(0);
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted', 'cancelled', 'released']);
    expect(t.ofType('cancelled')[0]).toMatchObject({ wasRunning: true, reason: 'user' });
    expect(t.grants.has('b')).toBe(true);
    expect(t.scheduler.snapshot().counters.cancelled).toBe(1);
  });

  it('reports a timeout as TIMEOUT', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.cancel('a', 'timeout');
    expect(t.scheduler.snapshot().recent[0]?.error).toEqual({
      code: 'TIMEOUT',
      message: 'Request a was cancelled (timeout).',
    });
  });

  it('is a no-op for an unknown id', () => {
    const t = createTestScheduler();
    expect(t.scheduler.cancel('nope', 'shutdown')).toBe(0);
    expect(t.events).toEqual([]);
  });
});

describe('fail', () => {
  it('releases a running request once with failed then released', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    expect(t.scheduler.fail('a', crash)).toBe(1408);
    expect(t.scheduler.fail('a', crash)).toBe(0);
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted', 'failed', 'released']);
    expect(t.ofType('failed')).toEqual([{ type: 'failed', at: 1000, requestId: 'a', error: crash, wasRunning: true }]);
    expect(t.scheduler.snapshot().recent[0]).toMatchObject({ state: 'failed', error: crash });
    expect(t.scheduler.snapshot().recent[0]).not.toHaveProperty('endReason');
    expect(t.scheduler.snapshot().counters.failed).toBe(1);
  });

  it('fails a queued request without a release', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.submit(req({ id: 'b' }));
    expect(t.scheduler.fail('b', crash)).toBe(0);
    expect(t.types('b')).toEqual(['accepted', 'queued', 'failed']);
    expect(t.scheduler.snapshot().queue).toEqual([]);
  });

  it('is a no-op for an unknown id', () => {
    const t = createTestScheduler();
    expect(t.scheduler.fail('nope', crash)).toBe(0);
    expect(t.events).toEqual([]);
  });
});

describe('failModel (engine crash)', () => {
  it('fails every running and queued request of the model and releases each running one once', () => {
    const t = createTestScheduler({ maxRunning: 2 });
    t.submit(req({ id: 'a1', model: 'a' }));
    t.submit(req({ id: 'b1', model: 'b' }));
    t.submit(req({ id: 'a2', model: 'a' }));
    t.submit(req({ id: 'b2', model: 'b' }));
    expect(t.scheduler.failModel('a', crash)).toBe(2);
    expect(t.types('a1')).toEqual(['accepted', 'queued', 'admitted', 'failed', 'released']);
    expect(t.ofType('failed').map((e) => [e.requestId, e.error])).toEqual([
      ['a1', crash],
      ['a2', crash],
    ]);
    expect(t.scheduler.snapshot().recent.map((v) => [v.id, v.state])).toEqual([
      ['a1', 'failed'],
      ['a2', 'failed'],
    ]);
    expect(t.types('a2')).toEqual(['accepted', 'queued', 'failed']);
    // The freed slot goes to the other model, never to a request of the crashed one.
    const snap = t.scheduler.snapshot();
    expect(snap.running.map((r) => r.id)).toEqual(['b1', 'b2']);
    expect(snap.reservedBytes).toBe(2 * 1408);
    expect(t.scheduler.failModel('a', crash)).toBe(0);
  });

  it('does not admit a queued request of the crashed model into a slot it frees', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a1', model: 'a' }));
    t.submit(req({ id: 'a2', model: 'a' }));
    t.scheduler.failModel('a', crash);
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1']);
  });

  it('fails the requests of every model named before admitting anything: one engine process runs them all', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a1', model: 'a' }));
    t.submit(req({ id: 'b1', model: 'b' }));
    t.submit(req({ id: 'c1', model: 'c' }));
    expect(t.scheduler.failModel(['a', 'b'], crash)).toBe(2);
    // b1 never got a's slot on the dead engine; c1, of a model not named, did.
    expect(t.types('b1')).toEqual(['accepted', 'queued', 'failed']);
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1', 'c1']);
  });

  it("drops the model's sessions, idle or busy, without calling onEvict", () => {
    const t = createTestScheduler();
    t.submit(req({ id: 't1', session: 's1', model: 'a' }));
    t.scheduler.finish('t1', 'eos', { generatedTokens: 2, sessionTokens: 5 });
    t.submit(req({ id: 't2', session: 's2', model: 'a' }));
    t.submit(req({ id: 'o1', session: 'other', model: 'b' }));
    t.scheduler.finish('o1', 'eos', { generatedTokens: 1, sessionTokens: 4 });
    t.scheduler.failModel('a', crash);
    expect(t.scheduler.sessionInfo('s1')).toBeUndefined();
    expect(t.scheduler.sessionInfo('s2')).toBeUndefined();
    expect(t.scheduler.sessionInfo('other')).toMatchObject({ tokens: 4 });
    expect(t.ofType('evicted')).toEqual([
      { type: 'evicted', at: 1000, sessionId: 's1', modelId: 'a', tokens: 5, bytes: 640, reason: 'model-failed' },
      { type: 'evicted', at: 1000, sessionId: 's2', modelId: 'a', tokens: 0, bytes: 0, reason: 'model-failed' },
    ]);
    expect(t.evicted).toEqual([]);
    const snap = t.scheduler.snapshot();
    expect(snap.heldBytes).toBe(512);
    expect(snap.counters.evictions).toBe(0);
  });

  it('forgets the model for the snapshot bpt', () => {
    const t = createTestScheduler();
    t.submit(req({ model: 'a', bpt: 128 }));
    t.submit(req({ model: 'b', bpt: 64 }));
    expect(t.scheduler.snapshot().bpt).toBeNull();
    t.scheduler.failModel('a', crash);
    expect(t.scheduler.snapshot().bpt).toBe(64);
  });
});

describe('failModel holding the queued (the host loads the model again)', () => {
  const hold = { holdQueued: true };

  it('fails only the running requests; the queued ones stay in their order, unadmitted, until resumeModel', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a1', model: 'a' }));
    t.submit(req({ id: 'a2', model: 'a' }));
    t.submit(req({ id: 'a3', model: 'a', priority: 1 }));
    expect(t.scheduler.failModel('a', crash, hold)).toBe(1);
    expect(t.types('a1')).toEqual(['accepted', 'queued', 'admitted', 'failed', 'released']);
    // The slot a1 freed goes to nobody while the model is away, nor to one that arrives meanwhile.
    t.submit(req({ id: 'a4', model: 'a' }));
    expect(t.scheduler.snapshot()).toMatchObject({ running: [], reservedBytes: 0 });
    expect(t.scheduler.snapshot().queue.map((v) => v.id)).toEqual(['a3', 'a2', 'a4']);
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1']);
    // Resuming another model changes nothing.
    t.scheduler.resumeModel('b');
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1']);
    t.scheduler.resumeModel(['a']);
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1', 'a3']);
    t.scheduler.finish('a3', 'eos');
    t.scheduler.finish('a2', 'eos');
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1', 'a3', 'a2', 'a4']);
    expect(t.types('a2')).toEqual(['accepted', 'queued', 'admitted', 'finished', 'released']);
  });

  it('holds what waits behind a held head too (first come, first served); failing the model lets it through', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a1', model: 'a' }));
    t.submit(req({ id: 'a2', model: 'a' }));
    t.submit(req({ id: 'b1', model: 'b' }));
    expect(t.scheduler.failModel(['a'], crash, hold)).toBe(1);
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1']);
    // The model could not come back: its held requests fail (never admitted), and the queue moves on.
    const gone: ErrorInfo = { code: 'ENGINE_FAILED', message: 'could not load model a again' };
    expect(t.scheduler.failModel('a', gone)).toBe(1);
    expect(t.types('a2')).toEqual(['accepted', 'queued', 'failed']);
    expect(t.ofType('failed').at(-1)).toMatchObject({ requestId: 'a2', error: gone, wasRunning: false });
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1', 'b1']);
    // Not held any more: a request of that id (loaded again later) is admitted as usual.
    t.scheduler.finish('b1', 'eos');
    t.submit(req({ id: 'a3', model: 'a' }));
    expect(t.ofType('admitted').map((e) => e.requestId)).toEqual(['a1', 'b1', 'a3']);
  });

  it("keeps a held turn's session, busy and without KV, and drops the others; the turn recomputes its prefix", () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 't1', session: 's1', model: 'a' }));
    t.scheduler.finish('t1', 'eos', { generatedTokens: 2, sessionTokens: 5 });
    t.submit(req({ id: 'o1', session: 's3', model: 'a' }));
    t.scheduler.finish('o1', 'eos', { generatedTokens: 1, sessionTokens: 4 });
    t.submit(req({ id: 'x', model: 'a' }));
    t.submit(req({ id: 't2', session: 's1', model: 'a' }));
    t.scheduler.failModel('a', crash, hold);
    expect(t.scheduler.sessionInfo('s1')).toMatchObject({
      state: 'queued',
      tokens: 0,
      heldBytes: 0,
      turnRequestId: 't2',
    });
    expect(t.scheduler.sessionInfo('s3')).toBeUndefined();
    expect(t.ofType('evicted').map((e) => [e.sessionId, e.tokens, e.reason])).toEqual([
      ['s3', 4, 'model-failed'],
      ['s1', 5, 'model-failed'],
    ]);
    expect(t.evicted).toEqual([]);
    // Its session is still the turn's: another turn on it is refused, as while any turn waits.
    expect(t.submit(req({ id: 't3', session: 's1', model: 'a' })).ok).toBe(false);
    t.scheduler.resumeModel('a');
    expect(t.grants.get('t2')).toMatchObject({
      reservedBytes: (5 + 3 + 8) * 128,
      session: { sessionId: 's1', prefixTokens: 5, recompute: true },
    });
    t.scheduler.finish('t2', 'eos', { generatedTokens: 8, sessionTokens: 16 });
    expect(t.scheduler.sessionInfo('s1')).toMatchObject({ state: 'idle', tokens: 16 });
  });

  it("keeps the model's bpt while it is held; failing it forgets it", () => {
    const t = createTestScheduler();
    t.submit(req({ model: 'a', bpt: 128 }));
    t.scheduler.failModel('a', crash, hold);
    expect(t.scheduler.snapshot().bpt).toBe(128);
    t.scheduler.failModel('a', crash);
    expect(t.scheduler.snapshot().bpt).toBeNull();
  });
});
