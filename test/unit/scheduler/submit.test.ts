import { describe, expect, it } from 'vitest';
import { explicitDerivation } from '../../../src/main/scheduler/budget';
import { createScheduler } from '../../../src/main/scheduler/scheduler';
import type { RequestShape } from '../../../src/shared/scheduler-types';
import { createTestScheduler, errorOf, req, unwrap } from './helpers';

describe('createScheduler', () => {
  const base = { derivation: explicitDerivation(1024), limitBytes: 1024, maxRunning: 1, maxQueue: 1, now: () => 0 };

  it.each([
    [{ limitBytes: -1, derivation: explicitDerivation(0) }, 'limitBytes'],
    [{ maxRunning: 0 }, 'maxRunning'],
    [{ maxQueue: 0 }, 'maxQueue'],
    [{ maxRunning: 1.5 }, 'maxRunning'],
  ])('refuses limits %j', (patch, field) => {
    expect(() => createScheduler({ ...base, ...patch })).toThrow(
      expect.objectContaining({ code: 'BAD_REQUEST', message: expect.stringContaining(`invalid: ${field}:`) }),
    );
  });

  it('refuses a derivation that disagrees with the limit', () => {
    expect(() => createScheduler({ ...base, limitBytes: 2048 })).toThrow(
      expect.objectContaining({ code: 'BAD_REQUEST', message: "limitBytes 2048 differs from the derivation's 1024." }),
    );
  });
});

describe('submit: validation', () => {
  it.each<[string, Partial<RequestShape>]>([
    ['id', { id: '' }],
    ['modelId', { modelId: '' }],
    ['bpt', { bpt: -1 }],
    ['bpt', { bpt: 1.5 }],
    ['contextLength', { contextLength: 0 }],
    ['rows', { rows: 0 }],
    ['promptTokens', { promptTokens: 0 }],
    ['maxNewTokens', { maxNewTokens: 0 }],
    ['priority', { priority: Number.NaN }],
    ['sessionId', { sessionId: '' }],
  ])('refuses a malformed %s with BAD_REQUEST and no event', (field, patch) => {
    const t = createTestScheduler();
    const error = errorOf(t.submit({ ...req(), ...patch }));
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.message).toMatch(new RegExp(`^Invalid request: ${field}: `));
    expect(Object.keys(error)).toEqual(['code', 'message']);
    expect(t.events).toEqual([]);
    expect(t.scheduler.snapshot().counters.rejections).toEqual({ BAD_REQUEST: 1 });
  });

  it('names the input when the request is not an object', () => {
    const t = createTestScheduler();
    const error = errorOf(t.submit(null as unknown as RequestShape));
    expect(error.message).toMatch(/^Invalid request: input: /);
  });

  it('refuses an id that is already live, without touching the live request', () => {
    const t = createTestScheduler({ limit: 1408, maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    const error = errorOf(t.submit(req({ id: 'a' })));
    expect(error).toEqual({
      code: 'BAD_REQUEST',
      message: 'Request id a is already queued or running.',
      detail: { requestId: 'a' },
    });
    expect(t.types('a')).toEqual(['accepted', 'queued', 'admitted']);
    expect(t.scheduler.snapshot().counters.rejections).toEqual({ BAD_REQUEST: 1 });
  });

  it('accepts an id again once the earlier request ended', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a' }));
    t.scheduler.finish('a', 'eos');
    expect(t.submit(req({ id: 'a' })).ok).toBe(true);
  });

  it('refuses a session turn with several rows', () => {
    const t = createTestScheduler();
    const error = errorOf(t.submit(req({ id: 'a', rows: 2, session: 's' })));
    expect(error).toEqual({
      code: 'BAD_REQUEST',
      message: 'A session turn has one row; request a has 2.',
      detail: { requestId: 'a' },
    });
    expect(t.scheduler.sessionInfo('s')).toBeUndefined();
    expect(t.events).toEqual([]);
  });

  it('accepts several rows without a session', () => {
    const t = createTestScheduler();
    expect(t.submit(req({ rows: 2 })).ok).toBe(true);
  });
});

describe('submit: context window', () => {
  it('refuses a prompt that leaves no room for one token, with the numbers', () => {
    const t = createTestScheduler();
    const error = errorOf(t.submit(req({ id: 'a', prompt: 64, context: 64 })));
    expect(error.code).toBe('CONTEXT_OVERFLOW');
    expect(error.detail).toEqual({ promptTokens: 64, contextLength: 64, sessionTokens: 0 });
    expect(error.message).toBe(
      "The prompt has 64 tokens, which leaves no room for a reply in the model's context of 64 tokens. " +
        'Shorten the prompt or start a new chat.',
    );
    expect(t.types()).toEqual(['rejected']);
    expect(t.ofType('rejected')[0]).toMatchObject({ requestId: 'a', stage: 'submit', error });
  });

  it('accepts a prompt that leaves exactly one token', () => {
    const t = createTestScheduler();
    const value = unwrap(t.submit(req({ id: 'a', prompt: 63, context: 64, max: 1 })));
    expect(value).toStrictEqual({});
  });

  it('clips N to the context and reports it', () => {
    const t = createTestScheduler();
    const value = unwrap(t.submit(req({ id: 'a', prompt: 60, context: 64, max: 10 })));
    expect(value.clipped).toEqual({ requestedMaxTokens: 10, clippedMaxTokens: 4, contextLength: 64 });
    expect(t.grants.get('a')?.admittedMaxTokens).toBe(4);
    expect(t.ofType('accepted')[0]).toMatchObject({ maxNewTokens: 4, clipped: value.clipped });
    expect(t.scheduler.snapshot().counters.contextClipped).toBe(1);
  });

  it('does not report a clip when P + N equals the context', () => {
    const t = createTestScheduler();
    const value = unwrap(t.submit(req({ id: 'a', prompt: 56, context: 64, max: 8 })));
    expect(value).toEqual({});
    expect(t.ofType('accepted')[0]).not.toHaveProperty('clipped');
    expect(t.scheduler.snapshot().counters.contextClipped).toBe(0);
  });
});

describe('submit: never fits', () => {
  it('refuses at once when even R × (P + 1) × bpt exceeds the budget (limit 400)', () => {
    const t = createTestScheduler({ limit: 400 });
    const error = errorOf(t.submit(req({ id: 'a', prompt: 3, max: 8 })));
    expect(error.code).toBe('KV_BUDGET_EXCEEDED');
    expect(error.detail).toEqual({
      requiredBytes: 512,
      budgetBytes: 400,
      bpt: 128,
      promptTokens: 3,
      rows: 1,
      sessionTokens: 0,
    });
    expect(error.message).toBe(
      'This request needs at least 512 B of KV cache (1 row × (3 prompt + 1) tokens × 128 B/token), ' +
        'but the KV budget is 400 B. Shorten the prompt, or raise the KV budget.',
    );
    expect(t.types()).toEqual(['rejected']);
  });

  it('writes the two sizes with the decimals that tell them apart (1597 KiB against 1607 KiB: not "1.6 MiB" twice)', () => {
    const t = createTestScheduler({ limit: 1597 * 1024 });
    const error = errorOf(t.submit(req({ id: 'a', prompt: 12_855, max: 8, context: 16_384 })));
    expect(error.detail).toMatchObject({ requiredBytes: 12_856 * 128, budgetBytes: 1597 * 1024 });
    expect(error.message).toContain('needs at least 1.57 MiB of KV cache');
    expect(error.message).toContain('but the KV budget is 1.56 MiB.');
  });

  it('counts every row', () => {
    const t = createTestScheduler({ limit: 1023 });
    const error = errorOf(t.submit(req({ rows: 2, prompt: 3 })));
    expect(error.detail).toMatchObject({ requiredBytes: 1024, rows: 2 });
  });

  it('accepts a minimum that equals the budget', () => {
    const t = createTestScheduler({ limit: 512 });
    expect(t.submit(req({ prompt: 3 })).ok).toBe(true);
  });

  it('accepts work that holds no KV even with a zero budget', () => {
    const t = createTestScheduler({ limit: 0 });
    unwrap(t.submit(req({ id: 'a', bpt: 0 })));
    expect(t.grants.get('a')).toMatchObject({ reservedBytes: 0, admittedMaxTokens: 8 });
  });

  it('records the refusal in recent and the counters', () => {
    const t = createTestScheduler({ limit: 400 });
    t.submit(req({ id: 'a', thread: 't1', priority: 2 }));
    const snap = t.scheduler.snapshot();
    expect(snap.recent).toStrictEqual([
      {
        id: 'a',
        modelId: 'm',
        threadId: 't1',
        state: 'refused',
        priority: 2,
        rows: 1,
        promptTokens: 3,
        sessionPrefixTokens: 0,
        requestedMaxTokens: 8,
        maxNewTokens: 8,
        bpt: 128,
        reservedBytes: 0,
        usedBytes: 0,
        generatedTokens: 0,
        endedAt: 1000,
        error: expect.objectContaining({ code: 'KV_BUDGET_EXCEEDED' }),
      },
    ]);
    expect(snap.counters.rejections).toEqual({ KV_BUDGET_EXCEEDED: 1 });
    expect(snap.counters.accepted).toBe(0);
  });

  it('records a refused session turn with its session and without a thread', () => {
    const t = createTestScheduler({ limit: 400 });
    t.submit(req({ id: 'a', session: 's' }));
    const view = t.scheduler.snapshot().recent[0];
    expect(view).toMatchObject({ id: 'a', sessionId: 's', state: 'refused' });
    expect(view).not.toHaveProperty('threadId');
  });
});

describe('submit: queue bound', () => {
  it('answers QUEUE_FULL with a retry hint when maxQueue requests wait', () => {
    const t = createTestScheduler({ limit: 1408, maxRunning: 1, maxQueue: 2 });
    t.submit(req({ id: 'run' }));
    t.submit(req({ id: 'q1' }));
    t.submit(req({ id: 'q2' }));
    const error = errorOf(t.submit(req({ id: 'x' })));
    expect(error).toEqual({
      code: 'QUEUE_FULL',
      message: 'The admission queue is full (2 waiting, limit 2). Retry in about 1 s.',
      detail: { queueLength: 2, maxQueue: 2, retryAfterMs: 1000 },
    });
    expect(t.types('x')).toEqual(['rejected']);
    expect(t.scheduler.snapshot().counters.rejections).toEqual({ QUEUE_FULL: 1 });
  });

  it('accepts while one place is left', () => {
    const t = createTestScheduler({ limit: 1408, maxRunning: 1, maxQueue: 2 });
    t.submit(req({ id: 'run' }));
    t.submit(req({ id: 'q1' }));
    expect(t.submit(req({ id: 'q2' })).ok).toBe(true);
  });

  it('bases the retry hint on the mean service time of ended requests over the running slots', () => {
    const t = createTestScheduler({ limit: 2816, maxRunning: 2, maxQueue: 1 });
    t.submit(req({ id: 'a' }));
    t.advance(3000);
    t.scheduler.finish('a', 'eos'); // served 3000 ms
    t.submit(req({ id: 'b' }));
    t.advance(7000);
    t.scheduler.cancel('b', 'user'); // served 7000 ms
    t.submit(req({ id: 'r1' }));
    t.submit(req({ id: 'r2' }));
    t.submit(req({ id: 'q', max: 9 }));
    t.scheduler.submit(req({ id: 'refused', prompt: 80 }), { onAdmitted() {} }); // no service time
    const error = errorOf(t.submit(req({ id: 'x' })));
    // mean 5000 ms over 2 slots
    expect(error.detail).toMatchObject({ retryAfterMs: 2500 });
    expect(error.message).toContain('Retry in about 3 s.');
  });

  it('never hints less than one second', () => {
    const t = createTestScheduler({ limit: 1408, maxRunning: 4, maxQueue: 1 });
    t.submit(req({ id: 'a' }));
    t.advance(10);
    t.scheduler.finish('a', 'eos');
    t.scheduler.reconfigure({ maxRunning: 1 });
    t.submit(req({ id: 'r' }));
    t.submit(req({ id: 'q' }));
    expect(errorOf(t.submit(req({ id: 'x' }))).detail).toMatchObject({ retryAfterMs: 1000 });
  });
});

describe('submit: accepted and queued', () => {
  it('emits accepted then queued with the request numbers', () => {
    const t = createTestScheduler({ limit: 0 });
    t.submit(req({ id: 'z', bpt: 0 })); // occupies nothing, keeps the queue empty
    t.scheduler.reconfigure({ maxRunning: 1 });
    t.submit(req({ id: 'a', rows: 2, prompt: 5, max: 7, thread: 'th', bpt: 0 }));
    const [accepted, queued] = t.events.filter((e) => 'requestId' in e && e.requestId === 'a');
    expect(accepted).toStrictEqual({
      type: 'accepted',
      at: 1000,
      requestId: 'a',
      modelId: 'm',
      threadId: 'th',
      rows: 2,
      promptTokens: 5,
      maxNewTokens: 7,
    });
    expect(queued).toEqual({ type: 'queued', at: 1000, requestId: 'a', position: 0, queueLength: 1 });
  });

  it('names the session, and no thread, in the accepted event of a session turn', () => {
    const t = createTestScheduler();
    t.submit(req({ id: 'a', session: 's' }));
    const accepted = t.ofType('accepted')[0];
    expect(accepted).toMatchObject({ requestId: 'a', sessionId: 's' });
    expect(accepted).not.toHaveProperty('threadId');
  });

  it('calls onAdmitted synchronously, after accepted, queued and admitted', () => {
    const t = createTestScheduler();
    const seen: string[] = [];
    t.scheduler.submit(req({ id: 'a' }), {
      onAdmitted: () => seen.push(`onAdmitted after ${t.types('a').join(',')}`),
    });
    seen.push('submit returned');
    expect(seen).toEqual(['onAdmitted after accepted,queued,admitted', 'submit returned']);
  });

  it('stamps acceptedAt with the injected clock', () => {
    const t = createTestScheduler({ maxRunning: 1 });
    t.submit(req({ id: 'a' }));
    t.advance(5);
    t.submit(req({ id: 'b' }));
    expect(t.scheduler.snapshot().queue[0]).toMatchObject({ id: 'b', acceptedAt: 1005, state: 'queued' });
    expect(t.scheduler.snapshot().counters.accepted).toBe(2);
  });
});
