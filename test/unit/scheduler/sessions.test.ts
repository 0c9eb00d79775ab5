import { describe, expect, it } from 'vitest';
import { explicitDerivation } from '../../../src/main/scheduler/budget';
import { createScheduler, EMPTY_SESSIONS_KEPT } from '../../../src/main/scheduler/scheduler';
import { createTestScheduler, errorOf, req, type TestScheduler, unwrap } from './helpers';

let seeds = 0;

/** Gives session `sid` exactly `tokens` retained tokens through one finished turn (needs room to run at once). */
function seed(t: TestScheduler, sid: string, tokens: number, model = 'm'): void {
  seeds += 1;
  const id = `seed${seeds}`;
  unwrap(t.submit(req({ id, session: sid, prompt: tokens, max: 1, model })));
  if (!t.grants.has(id)) throw new Error(`seed turn ${id} was not admitted`);
  t.scheduler.finish(id, 'eos', { sessionTokens: tokens });
}

describe('sessions: records that hold nothing', () => {
  it('lists the most recently used idle sessions that hold nothing, and forgets the rest', () => {
    const t = createTestScheduler({ limit: 1 << 20 });
    seed(t, 'kept', 5);
    const extra = 10;
    // Turns that keep nothing (a reply whose KV was not kept).
    for (let i = 0; i < EMPTY_SESSIONS_KEPT + extra; i++) {
      unwrap(t.submit(req({ id: `e${i}`, session: `empty${i}`, prompt: 2, max: 1 })));
      t.scheduler.finish(`e${i}`, 'eos', { sessionTokens: 0 });
    }
    const listed = t.scheduler.snapshot().sessions.map((s) => s.sessionId);
    // A session that holds KV is never forgotten; of the empty ones, the last used stay.
    expect(listed).toContain('kept');
    expect(listed.filter((id) => id.startsWith('empty'))).toHaveLength(EMPTY_SESSIONS_KEPT);
    expect(listed).not.toContain('empty0');
    expect(listed).toContain(`empty${EMPTY_SESSIONS_KEPT + extra - 1}`);
    // A forgotten one's next turn starts a new record.
    seed(t, 'empty0', 3);
    expect(t.scheduler.sessionInfo('empty0')).toMatchObject({ state: 'idle', tokens: 3 });
  });
});

describe('sessions: turns and retained KV', () => {
  it('creates the session with its first turn and marks it busy', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'x' }));
    t.submit(req({ id: 'a', session: 's' }));
    expect(t.scheduler.sessionInfo('s')).toEqual({
      sessionId: 's',
      modelId: 'm',
      state: 'queued',
      tokens: 0,
      heldBytes: 0,
      bpt: 128,
      createdAt: 1000,
      lastUsedAt: 1000,
      turnRequestId: 'a',
      closing: false,
    });
    t.scheduler.finish('x', 'eos');
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'running', turnRequestId: 'a' });
    expect(t.grants.get('a')?.session).toEqual({ sessionId: 's', prefixTokens: 0, recompute: false });
    expect(t.ofType('admitted')[1]).toMatchObject({ requestId: 'a', sessionId: 's' });
  });

  it('a turn that continues part of the session reserves only that part; the rest is dropped when it is admitted', () => {
    const t = createTestScheduler({ limit: 64 * 128, maxRunning: 1 });
    seed(t, 's', 40);
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 40, heldBytes: 40 * 128 });
    // Keeps 10 of the 40 and adds 20: (10 + 20 + 8) × 128, as a fresh 30-token prompt would.
    t.submit(req({ id: 'b', session: 's', prompt: 20, max: 8 }));
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 40 });
    t.scheduler.finish('b', 'eos', { sessionTokens: 40 });
    const before = t.ofType('admitted').length;
    const shape = { ...req({ id: 'c', session: 's', prompt: 20, max: 8 }), sessionReuseTokens: 10 };
    unwrap(t.submit(shape));
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 10 });
    expect(t.ofType('admitted')).toHaveLength(before + 1);
    expect(t.ofType('admitted')[before]).toMatchObject({ requestId: 'c', reservedBytes: (10 + 20 + 8) * 128 });
    expect(t.grants.get('c')?.session).toEqual({ sessionId: 's', prefixTokens: 10, recompute: false });
    // The context counts the kept part only: 10 + 50 + 1 fits a context of 64 where 40 + 50 + 1 would not.
    t.scheduler.finish('c', 'eos', { sessionTokens: 30 });
    const long = { ...req({ id: 'd', session: 's', prompt: 50, max: 2, context: 64 }), sessionReuseTokens: 10 };
    unwrap(t.submit(long));
    expect(t.ofType('admitted').at(-1)).toMatchObject({ requestId: 'd', reservedBytes: (10 + 50 + 2) * 128 });
  });

  it('a queued turn that continues part of the session leaves it whole until admitted: the engine holds it all', () => {
    const t = createTestScheduler({ limit: 64 * 128, maxRunning: 1 });
    seed(t, 's', 40);
    t.submit(req({ id: 'x', prompt: 3, max: 1 }));
    const shape = { ...req({ id: 'c', session: 's', prompt: 20, max: 8 }), sessionReuseTokens: 10 };
    unwrap(t.submit(shape));
    expect(t.scheduler.snapshot().queue).toEqual([expect.objectContaining({ id: 'c', sessionPrefixTokens: 10 })]);
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'queued', tokens: 40, heldBytes: 40 * 128 });
    expect(t.scheduler.snapshot().heldBytes).toBe(40 * 128);
    // Stopped before it ran: the session keeps all 40 tokens, as the engine does.
    t.scheduler.cancel('c', 'user');
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 40, heldBytes: 40 * 128 });
    unwrap(t.submit({ ...shape, id: 'd' }));
    t.scheduler.finish('x', 'eos');
    expect(t.grants.get('d')).toMatchObject({
      reservedBytes: (10 + 20 + 8) * 128,
      session: { sessionId: 's', prefixTokens: 10, recompute: false },
    });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'running', tokens: 10, heldBytes: 0 });
    expect(t.scheduler.snapshot()).toMatchObject({ reservedBytes: 38 * 128, heldBytes: 0 });
  });

  it('a refused turn leaves the session’s KV as it was', () => {
    const t = createTestScheduler({ limit: 60 * 128 });
    seed(t, 's', 40);
    const tooBig = { ...req({ id: 'x', session: 's', prompt: 100, max: 8, context: 256 }), sessionReuseTokens: 5 };
    expect(errorOf(t.submit(tooBig)).code).toBe('KV_BUDGET_EXCEEDED');
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 40, heldBytes: 40 * 128 });
  });

  it('does not create a session for a refused turn', () => {
    const t = createTestScheduler({ limit: 100 });
    t.submit(req({ session: 's' }));
    expect(t.scheduler.sessionInfo('s')).toBeUndefined();
  });

  it('retains sessionTokens × bpt after finish and counts it as held', () => {
    const t = createTestScheduler({ limit: 4096 });
    t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 }));
    t.scheduler.progress('a', { generatedTokens: 4, usedBytes: 896 });
    t.advance(7);
    expect(t.scheduler.finish('a', 'eos', { sessionTokens: 7 })).toBe(1408);
    expect(t.ofType('finished')[0]).toMatchObject({ sessionId: 's', sessionTokens: 7 });
    expect(t.ofType('released')[0]).toEqual({
      type: 'released',
      at: 1007,
      requestId: 'a',
      bytes: 1408,
      retainedBytes: 896,
    });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 7, heldBytes: 896, lastUsedAt: 1007 });
    expect(t.scheduler.sessionInfo('s')).not.toHaveProperty('turnRequestId');
    const snap = t.scheduler.snapshot();
    expect(snap).toMatchObject({ reservedBytes: 0, heldBytes: 896, freeBytes: 4096 - 896 });
  });

  it('accepts sessionTokens equal to prefix + prompt + generated', () => {
    const t = createTestScheduler({ limit: 4096 });
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 }));
    t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 0 });
    t.scheduler.finish('a', 'eos', { sessionTokens: 10 });
    expect(t.scheduler.sessionInfo('s')?.tokens).toBe(10);
    expect(t.scheduler.snapshot().violations).toEqual([]);
  });

  it.each([11, -1, 2.5, Number.NaN])(
    'drops the session KV and records a violation for sessionTokens %s',
    (sessionTokens) => {
      const t = createTestScheduler({ limit: 4096 });
      seed(t, 's', 5);
      t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 }));
      t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 0 });
      t.scheduler.finish('a', 'eos', { sessionTokens });
      expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 0, heldBytes: 0, state: 'idle' });
      expect(t.scheduler.snapshot().violations).toEqual([
        {
          at: 1000,
          kind: 'session-tokens',
          requestId: 'a',
          message: `a asked its session to keep ${sessionTokens} tokens; at most 10 exist. The session's KV is dropped.`,
        },
      ]);
    },
  );

  it('ignores sessionTokens for a request without a session', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.finish('a', 'eos', { sessionTokens: 99 });
    expect(t.scheduler.snapshot()).toMatchObject({ heldBytes: 0, sessions: [], violations: [] });
    expect(t.ofType('finished')[0]).not.toHaveProperty('sessionTokens');
  });

  it('keeps nothing when a turn finishes without sessionTokens', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's' }));
    t.scheduler.finish('a', 'eos');
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 0, state: 'idle' });
    expect(t.ofType('finished')[1]).toMatchObject({ sessionId: 's', sessionTokens: 0 });
    expect(t.scheduler.snapshot().violations).toEqual([]);
  });

  it('a cancelled running turn keeps the sessionTokens it reports, checked as finish checks them; a queued one keeps the session as it was', () => {
    const t = createTestScheduler({ limit: 4096 });
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 }));
    t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 0 });
    t.scheduler.cancel('a', 'user', { sessionTokens: 9 });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 9, heldBytes: 9 * 128, state: 'idle' });
    expect(t.scheduler.snapshot()).toMatchObject({ reservedBytes: 0, heldBytes: 9 * 128, violations: [] });
    // Without sessionTokens a cancel keeps nothing; more than exist is a violation and keeps nothing.
    t.submit(req({ id: 'b', session: 's', prompt: 1, max: 4 }));
    t.scheduler.cancel('b', 'timeout');
    expect(t.scheduler.sessionInfo('s')?.tokens).toBe(0);
    seed(t, 'u', 4);
    t.submit(req({ id: 'c', session: 'u', prompt: 2, max: 4 }));
    t.scheduler.cancel('c', 'user', { sessionTokens: 7 });
    expect(t.scheduler.sessionInfo('u')?.tokens).toBe(0);
    expect(t.scheduler.snapshot().violations.map((v) => v.kind)).toEqual(['session-tokens']);
    // A turn cancelled while queued never ran: the session keeps its KV, whatever the host says.
    const full = createTestScheduler({ limit: 4096, maxRunning: 1 });
    seed(full, 'q', 6);
    full.submit(req({ id: 'run' }));
    full.submit(req({ id: 'wait', session: 'q', prompt: 2, max: 4 }));
    full.scheduler.cancel('wait', 'user', { sessionTokens: 1 });
    expect(full.scheduler.sessionInfo('q')).toMatchObject({ tokens: 6, state: 'idle' });
  });

  it('accepts keeping 0 tokens', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's' }));
    t.scheduler.finish('a', 'eos', { sessionTokens: 0 });
    expect(t.scheduler.sessionInfo('s')?.tokens).toBe(0);
    expect(t.scheduler.snapshot().violations).toEqual([]);
  });

  it('reserves the session prefix with the turn: it moves from held to reserved', () => {
    const t = createTestScheduler({ limit: 4096 });
    seed(t, 's', 5);
    expect(t.scheduler.snapshot()).toMatchObject({ heldBytes: 640, reservedBytes: 0, freeBytes: 3456 });
    t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 }));
    expect(t.grants.get('a')).toMatchObject({
      reservedBytes: (5 + 3 + 8) * 128,
      admittedMaxTokens: 8,
      session: { sessionId: 's', prefixTokens: 5, recompute: false },
    });
    expect(t.scheduler.snapshot()).toMatchObject({ heldBytes: 0, reservedBytes: 2048, freeBytes: 2048 });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'running', tokens: 5, heldBytes: 0 });
    expect(t.scheduler.snapshot().running[0]).toMatchObject({ sessionId: 's', sessionPrefixTokens: 5 });
  });

  it("admits a turn when only the new tokens fit beside the session's held KV", () => {
    const t = createTestScheduler({ limit: 2048 });
    seed(t, 's', 5); // holds 640, 1408 free
    t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 })); // needs 1408 more
    expect(t.grants.get('a')).toMatchObject({ reservedBytes: 2048, admittedMaxTokens: 8 });
    expect(t.grants.get('a')?.budgetCap).toBeUndefined();
  });

  it('caps a turn counting its own held KV as available', () => {
    const t = createTestScheduler({ limit: 1920 });
    seed(t, 's', 5); // holds 640
    t.submit(req({ id: 'a', session: 's', prompt: 3, max: 8 })); // full 2048 > 1920
    expect(t.grants.get('a')).toMatchObject({ admittedMaxTokens: 7, reservedBytes: 1920 });
    expect(t.grants.get('a')?.budgetCap).toMatchObject({ availableBytes: 1920, requestedBytes: 2048 });
  });

  it('counts the session prefix in the never-fits minimum', () => {
    const t = createTestScheduler({ limit: 1100 });
    seed(t, 's', 5);
    const error = errorOf(t.submit(req({ id: 'a', session: 's', prompt: 3 })));
    expect(error.code).toBe('KV_BUDGET_EXCEEDED');
    expect(error.detail).toMatchObject({ requiredBytes: 9 * 128, sessionTokens: 5, promptTokens: 3 });
    expect(error.message).toContain('(1 row × (5 session + 3 prompt + 1) tokens × 128 B/token)');
  });

  it('counts the session prefix against the context', () => {
    const t = createTestScheduler();
    seed(t, 's', 60);
    const error = errorOf(t.submit(req({ id: 'a', session: 's', prompt: 4, context: 64 })));
    expect(error.code).toBe('CONTEXT_OVERFLOW');
    expect(error.detail).toEqual({ promptTokens: 4, contextLength: 64, sessionTokens: 60 });
    expect(error.message).toBe(
      "The prompt has 4 tokens on top of 60 in the session, which leaves no room for a reply in the model's " +
        'context of 64 tokens. Shorten the prompt or start a new chat.',
    );
  });

  it("an anonymous session (the host's prompt cache): a refusal names the whole prompt and no session", () => {
    const t = createTestScheduler({ limit: 128 * 128, maxRunning: 1 });
    seed(t, 'cache', 60);
    const overflow = errorOf(
      t.submit({ ...req({ id: 'a', session: 'cache', prompt: 4, context: 64 }), anonymousSession: true }),
    );
    expect(overflow).toEqual({
      code: 'CONTEXT_OVERFLOW',
      message:
        "The prompt has 64 tokens, which leaves no room for a reply in the model's context of 64 tokens. " +
        'Shorten the prompt or start a new chat.',
      detail: { promptTokens: 64, contextLength: 64, sessionTokens: 0 },
    });
    const tooBig = errorOf(
      t.submit({ ...req({ id: 'b', session: 'cache', prompt: 80, context: 256 }), anonymousSession: true }),
    );
    expect(tooBig.code).toBe('KV_BUDGET_EXCEEDED');
    expect(tooBig.detail).toMatchObject({ requiredBytes: 141 * 128, promptTokens: 140, sessionTokens: 0 });
    expect(tooBig.message).toContain('(1 row × (140 prompt + 1) tokens × 128 B/token)');
    // Queued, then the budget is lowered under its minimum: the same figures.
    unwrap(t.submit(req({ id: 'run' })));
    unwrap(
      t.submit({ ...req({ id: 'c', session: 'cache', prompt: 4, max: 2, context: 256 }), anonymousSession: true }),
    );
    expect(unwrap(t.scheduler.reconfigure({ limitBytes: 60 * 128 })).rejectedRequestIds).toEqual(['c']);
    expect(t.ofType('rejected').at(-1)?.error).toMatchObject({
      message: expect.stringContaining('(1 row × (64 prompt + 1) tokens × 128 B/token)'),
      detail: { promptTokens: 64, sessionTokens: 0 },
    });
  });

  it('clips N to the context left after the session prefix', () => {
    const t = createTestScheduler();
    seed(t, 's', 50);
    const value = unwrap(t.submit(req({ id: 'a', session: 's', prompt: 4, max: 20, context: 64 })));
    expect(value.clipped).toEqual({ requestedMaxTokens: 20, clippedMaxTokens: 10, contextLength: 64 });
  });
});

describe('sessions: refusals', () => {
  it('refuses a turn while another turn of the session is running', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a', session: 's' }));
    const error = errorOf(t.submit(req({ id: 'b', session: 's' })));
    expect(error).toEqual({
      code: 'SESSION_INVALID',
      message: 'Session s already has a running turn (a). Wait for it or cancel it.',
      detail: { sessionId: 's', state: 'running', turnRequestId: 'a' },
    });
    expect(t.types('b')).toEqual(['rejected']);
    expect(t.scheduler.sessionInfo('s')?.turnRequestId).toBe('a');
  });

  it('refuses a turn while another turn of the session is queued', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'x' }));
    t.submit(req({ id: 'a', session: 's' }));
    expect(errorOf(t.submit(req({ id: 'b', session: 's' }))).detail).toMatchObject({ state: 'queued' });
  });

  it('refuses a turn for another model', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    const error = errorOf(t.submit(req({ id: 'b', session: 's', model: 'other' })));
    expect(error).toEqual({
      code: 'SESSION_INVALID',
      message: 'Session s belongs to model m (128 B/token), not other (128 B/token). Start a new session.',
      detail: { sessionId: 's', sessionModelId: 'm', modelId: 'other' },
    });
  });

  it('refuses a turn whose bpt differs (the model was reloaded differently)', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    expect(errorOf(t.submit(req({ session: 's', bpt: 64 }))).code).toBe('SESSION_INVALID');
  });
});

describe('sessions: cancel and failure', () => {
  it('drops the KV when a running turn is cancelled: the engine recomputes', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's' }));
    t.advance(3);
    expect(t.scheduler.cancel('a', 'user')).toBe((5 + 3 + 8) * 128);
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 0, heldBytes: 0, lastUsedAt: 1003 });
    expect(t.ofType('released')[1]).toMatchObject({ requestId: 'a', retainedBytes: 0 });
    expect(t.scheduler.snapshot()).toMatchObject({ reservedBytes: 0, heldBytes: 0 });
  });

  it('drops the KV when a running turn fails', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's' }));
    t.scheduler.fail('a', { code: 'ENGINE_FAILED', message: 'x' });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 0 });
  });

  it('keeps the KV when a queued turn is cancelled: the engine never touched it', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    seed(t, 's', 5);
    t.submit(req({ id: 'x' }));
    t.submit(req({ id: 'a', session: 's' }));
    t.scheduler.cancel('a', 'user');
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'idle', tokens: 5, heldBytes: 640 });
    expect(t.scheduler.sessionInfo('s')).not.toHaveProperty('turnRequestId');
    expect(t.submit(req({ id: 'b', session: 's' })).ok).toBe(true);
  });
});

describe('sessions: eviction to admit', () => {
  it('evicts the least recently used idle session, only as many as needed', () => {
    const t = createTestScheduler({ limit: 4096 });
    seed(t, 's1', 5);
    seed(t, 's2', 5);
    seed(t, 's3', 5);
    seed(t, 's1', 5); // s1 used again: s2 is now the least recently used
    t.advance(9);
    t.submit(req({ id: 'big', prompt: 3, max: 19 })); // 2816: exactly the 2176 free + s2's 640
    expect(t.ofType('evicted')).toEqual([
      {
        type: 'evicted',
        at: 1009,
        sessionId: 's2',
        modelId: 'm',
        tokens: 5,
        bytes: 640,
        reason: 'admission',
        forRequestId: 'big',
      },
    ]);
    expect(t.evicted).toEqual(['s2']);
    expect(t.grants.get('big')).toMatchObject({ reservedBytes: 2816 });
    expect(t.grants.get('big')?.budgetCap).toBeUndefined();
    expect(t.scheduler.sessionInfo('s2')).toMatchObject({ tokens: 0, heldBytes: 0 });
    expect(t.scheduler.sessionInfo('s1')?.tokens).toBe(5);
    expect(t.scheduler.snapshot().counters.evictions).toBe(1);
    expect(t.types('big')).toEqual(['accepted', 'queued', 'admitted']);
    expect(t.events.map((e) => e.type).slice(-2)).toEqual(['evicted', 'admitted']);
  });

  it('evicts several when one is not enough', () => {
    const t = createTestScheduler({ limit: 4096 });
    seed(t, 's1', 5);
    seed(t, 's2', 5);
    seed(t, 's3', 5);
    t.submit(req({ id: 'big', prompt: 3, max: 23 })); // 3328: 2176 free + 640 + 640
    expect(t.evicted).toEqual(['s1', 's2']);
    expect(t.scheduler.sessionInfo('s3')?.tokens).toBe(5);
  });

  it("never evicts the request's own session", () => {
    const t = createTestScheduler({ limit: 2048 });
    seed(t, 'own', 5); // least recently used
    seed(t, 'o', 5);
    t.submit(req({ id: 'a', session: 'own', prompt: 3, max: 8 })); // 2048: needs o's 640
    expect(t.evicted).toEqual(['o']);
    expect(t.grants.get('a')?.session).toEqual({ sessionId: 'own', prefixTokens: 5, recompute: false });
    expect(t.scheduler.sessionInfo('own')?.tokens).toBe(5);
  });

  it('never evicts a running session', () => {
    const t = createTestScheduler({ limit: 3000 });
    seed(t, 's', 5);
    t.submit(req({ id: 'turn', session: 's', prompt: 3, max: 1 })); // running, 1152
    t.submit(req({ id: 'b', prompt: 3, max: 21 })); // full 3072 > the whole budget, and does not fit in 1848: capped
    expect(t.ofType('evicted')).toEqual([]);
    expect(t.grants.get('b')).toMatchObject({ admittedMaxTokens: 11 });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'running', tokens: 5 });
  });

  it('evicts nothing when the head would still wait', () => {
    const t = createTestScheduler({ limit: 2048 });
    seed(t, 's', 2); // 256 held
    t.submit(req({ id: 'a' })); // 1408 running, 384 free
    t.scheduler.reconfigure({ maxRunning: 1 });
    t.submit(req({ id: 'h' })); // 1408 > 384 + 256, and 'x' waits behind it: no cap
    t.submit(req({ id: 'x' }));
    t.scheduler.reconfigure({ maxRunning: 4 });
    expect(t.ofType('evicted')).toEqual([]);
    expect(t.scheduler.sessionInfo('s')?.tokens).toBe(2);
    expect(t.scheduler.snapshot().queue.map((r) => r.id)).toEqual(['h', 'x']);
  });

  it('evicts every idle session before capping', () => {
    const t = createTestScheduler({ limit: 2048 });
    seed(t, 's1', 5);
    seed(t, 's2', 5);
    t.submit(req({ id: 'a', prompt: 3, max: 20 })); // full 2944 > the whole budget
    expect(t.evicted).toEqual(['s1', 's2']);
    expect(t.grants.get('a')).toMatchObject({ admittedMaxTokens: 13, reservedBytes: 2048 });
    expect(t.grants.get('a')?.budgetCap).toMatchObject({ availableBytes: 2048 });
  });

  it('admits a queued turn whose session was evicted meanwhile, reserving the prefix to recompute', () => {
    const t = createTestScheduler({ limit: 2048, maxRunning: 1 });
    seed(t, 's', 5); // 640 held
    t.submit(req({ id: 'a', prompt: 3, max: 1 })); // 512 running
    t.submit(req({ id: 'b', prompt: 3, max: 9 })); // 1536: will need s's KV
    t.submit(req({ id: 't', session: 's', prompt: 3, max: 2 }));
    t.scheduler.finish('a', 'eos');
    expect(t.evicted).toEqual(['s']);
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ state: 'queued', tokens: 0 });
    t.scheduler.finish('b', 'eos');
    expect(t.grants.get('t')).toMatchObject({
      reservedBytes: (5 + 3 + 2) * 128,
      session: { sessionId: 's', prefixTokens: 5, recompute: true },
    });
  });

  it('survives an onEvict that throws, recording it', () => {
    const t = createTestScheduler({
      limit: 2048,
      onEvict: () => {
        throw new Error('engine gone');
      },
    });
    seed(t, 's', 5);
    t.submit(req({ id: 'a', prompt: 3, max: 10 })); // 1664 > 1408 free
    expect(t.grants.has('a')).toBe(true);
    expect(t.scheduler.snapshot().violations).toEqual([
      { at: 1000, kind: 'listener-error', message: 'onEvict threw for session s: Error: engine gone' },
    ]);
  });
});

describe('sessions: evictSession', () => {
  it('drops an idle session KV and tells the host', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.advance(2);
    expect(unwrap(t.scheduler.evictSession('s'))).toEqual({ bytes: 640, tokens: 5 });
    expect(t.ofType('evicted')).toStrictEqual([
      { type: 'evicted', at: 1002, sessionId: 's', modelId: 'm', tokens: 5, bytes: 640, reason: 'manual' },
    ]);
    expect(t.evicted).toEqual(['s']);
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ tokens: 0, heldBytes: 0, state: 'idle' });
    expect(t.scheduler.snapshot().counters.evictions).toBe(1);
  });

  it('works without an onEvict callback', () => {
    const s = createScheduler({
      limitBytes: 4096,
      derivation: explicitDerivation(4096),
      maxRunning: 1,
      maxQueue: 1,
      now: () => 0,
    });
    s.submit(req({ id: 'a', session: 's', prompt: 2, max: 1 }), { onAdmitted() {} });
    s.finish('a', 'eos', { sessionTokens: 2 });
    expect(unwrap(s.evictSession('s'))).toEqual({ bytes: 256, tokens: 2 });
    expect(s.snapshot().violations).toEqual([]);
  });

  it('drops the KV of a session whose turn is queued', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    seed(t, 's', 5);
    t.submit(req({ id: 'x' }));
    t.submit(req({ id: 'a', session: 's' }));
    expect(unwrap(t.scheduler.evictSession('s'))).toEqual({ bytes: 640, tokens: 5 });
    t.scheduler.finish('x', 'eos');
    expect(t.grants.get('a')?.session).toMatchObject({ recompute: true });
  });

  it('refuses a running session', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's' }));
    expect(errorOf(t.scheduler.evictSession('s'))).toEqual({
      code: 'SESSION_INVALID',
      message: 'Session s is running a turn; its KV can be freed when the turn ends.',
      detail: { sessionId: 's' },
    });
    expect(t.ofType('evicted')).toEqual([]);
  });

  it('refuses an unknown session', () => {
    const t = createTestScheduler();
    expect(errorOf(t.scheduler.evictSession('nope'))).toEqual({
      code: 'SESSION_INVALID',
      message: 'Session nope is unknown.',
      detail: { sessionId: 'nope' },
    });
  });

  it('evicts for a head that fits with the idle KV even while others run and wait', () => {
    const t = createTestScheduler({ limit: 2048 });
    seed(t, 's', 5);
    t.submit(req({ id: 'a' })); // 1408 running, 0 free
    t.scheduler.reconfigure({ maxRunning: 1 });
    t.submit(req({ id: 'b', max: 1 })); // 512
    t.submit(req({ id: 'c' }));
    t.scheduler.reconfigure({ maxRunning: 4 }); // b's full reservation fits only in s's 640
    expect(t.evicted).toEqual(['s']);
    expect(t.grants.has('b')).toBe(true);
  });
});

describe('sessions: closeSession', () => {
  it('removes an idle session and frees its KV without onEvict', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    expect(t.scheduler.closeSession('s')).toBe(true);
    expect(t.scheduler.sessionInfo('s')).toBeUndefined();
    expect(t.ofType('evicted')).toEqual([
      { type: 'evicted', at: 1000, sessionId: 's', modelId: 'm', tokens: 5, bytes: 640, reason: 'closed' },
    ]);
    expect(t.evicted).toEqual([]);
    expect(t.scheduler.snapshot()).toMatchObject({ heldBytes: 0, sessions: [] });
    expect(t.scheduler.snapshot().counters.evictions).toBe(0);
  });

  it('returns false for an unknown session', () => {
    const t = createTestScheduler();
    expect(t.scheduler.closeSession('nope')).toBe(false);
    expect(t.events).toEqual([]);
  });

  it('removes a running session when its turn ends, retaining nothing', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.submit(req({ id: 'a', session: 's' }));
    t.scheduler.closeSession('s');
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ closing: true, state: 'running' });
    t.scheduler.progress('a', { generatedTokens: 2, usedBytes: 0 });
    t.scheduler.finish('a', 'eos', { sessionTokens: 10 });
    expect(t.scheduler.sessionInfo('s')).toBeUndefined();
    expect(t.ofType('released')[1]).toMatchObject({ requestId: 'a', retainedBytes: 0 });
    expect(t.scheduler.snapshot()).toMatchObject({ heldBytes: 0, reservedBytes: 0 });
  });

  it('frees the KV of a session with a queued turn at once; the turn recomputes and then removes it', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    seed(t, 's', 5);
    t.submit(req({ id: 'x' }));
    t.submit(req({ id: 'a', session: 's' }));
    t.scheduler.closeSession('s');
    expect(t.scheduler.snapshot().heldBytes).toBe(0);
    t.scheduler.finish('x', 'eos');
    expect(t.grants.get('a')?.session).toMatchObject({ prefixTokens: 5, recompute: true });
    t.scheduler.cancel('a', 'user');
    expect(t.scheduler.sessionInfo('s')).toBeUndefined();
  });

  it('lets a closed id start a new empty session', () => {
    const t = createTestScheduler();
    seed(t, 's', 5);
    t.scheduler.closeSession('s');
    t.submit(req({ id: 'a', session: 's', model: 'other' }));
    expect(t.grants.get('a')?.session).toEqual({ sessionId: 's', prefixTokens: 0, recompute: false });
  });
});

describe('sessions: snapshot', () => {
  it('lists sessions least recently used first', () => {
    const t = createTestScheduler();
    seed(t, 'a', 1);
    seed(t, 'b', 1);
    seed(t, 'c', 1);
    seed(t, 'a', 1);
    expect(t.scheduler.snapshot().sessions.map((s) => s.sessionId)).toEqual(['b', 'c', 'a']);
  });
});

describe('static caches in the views and refusals', () => {
  const fixed = (o: Parameters<typeof req>[0], fixedTokens: number) => ({ ...req(o), fixedTokens });

  it('a request and its session show the cache’s positions; others show none', () => {
    const t = createTestScheduler({ limit: 64 * 128 });
    unwrap(t.submit(fixed({ id: 'a', session: 's', prompt: 3, max: 4 }, 32)));
    expect(t.scheduler.snapshot().running.find((r) => r.id === 'a')?.fixedTokens).toBe(32);
    t.scheduler.finish('a', 'eos', { sessionTokens: 3 });
    expect(t.scheduler.sessionInfo('s')).toMatchObject({ fixedTokens: 32, heldBytes: 32 * 128 });
    seed(t, 'plain', 4);
    expect(Object.hasOwn(t.scheduler.sessionInfo('plain') as object, 'fixedTokens')).toBe(false);
    unwrap(t.submit(req({ id: 'b', max: 2 })));
    expect(Object.hasOwn(t.scheduler.snapshot().running.find((r) => r.id === 'b') as object, 'fixedTokens')).toBe(
      false,
    );
  });

  it('a cache that can never fit is refused with its size and what to do, and the refusal keeps it', () => {
    const t = createTestScheduler({ limit: 16 * 128 });
    const e = errorOf(t.submit(fixed({ id: 'big', rows: 2, prompt: 3, max: 4 }, 32)));
    expect(e.code).toBe('KV_BUDGET_EXCEEDED');
    expect(e.message).toBe(
      'This request needs at least 8.0 KiB of KV cache (2 rows × a static cache of 32 positions × 128 B/token), ' +
        'but the KV budget is 2.0 KiB. This model allocates its whole cache per row: send fewer rows, or raise the KV budget.',
    );
    expect(t.scheduler.snapshot().recent.find((r) => r.id === 'big')).toMatchObject({
      state: 'refused',
      fixedTokens: 32,
    });
  });
});
