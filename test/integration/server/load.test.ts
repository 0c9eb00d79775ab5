/**
 * Bounded loopback load: 64 concurrent streaming clients against a budget
 * that holds about three requests. Every request completes or gets a
 * structured refusal; sampled snapshots never show reserved + held above the
 * limit; clients that disconnect early leak nothing; afterwards nothing is
 * reserved, what is held is the prompt cache (as the engine holds it), and
 * /metrics agrees with /v1/kvdesk/budget.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_PROMPT_CACHE_SESSIONS } from '../../../src/main/host/runner-service';
import { PROMPT_CACHE_PREFIX } from '../../../src/shared/prompt-cache';
import type { SchedulerSnapshot } from '../../../src/shared/scheduler-types';
import { budget, LONG_CHAT, openaiClient, settled, startTestServer, type TestServer } from './server-helpers';

const PROMPT = 'Once upon a time'; // 9 tokens
const MAX_TOKENS = 32;
const BPT = 1024;
/** Room for three full requests (and not four). */
const LIMIT = 3 * (9 + MAX_TOKENS) * BPT + 1000;
const MAX_QUEUE = 24;

let t: TestServer;
let client: OpenAI;
beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: LIMIT, maxRunning: 8, maxQueue: MAX_QUEUE, intraOpNumThreads: 1 });
  client = openaiClient(t.url);
});
afterAll(async () => {
  await t?.close();
});

/** Parses Prometheus text into `name{labels}` → value. */
function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    expect(m, `metric line "${line}"`).not.toBeNull();
    const v = (m as RegExpExecArray)[2] as string;
    out.set((m as RegExpExecArray)[1] as string, v === '+Inf' ? Number.POSITIVE_INFINITY : Number(v));
  }
  return out;
}

type Outcome = 'completed' | 'refused' | 'aborted';

describe('64 concurrent streams against a budget for three', () => {
  it('completes or refuses every request, never over-commits, and leaks nothing', async () => {
    const before = await budget(t.url);
    const samples: SchedulerSnapshot[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        samples.push(await budget(t.url));
        await new Promise((r) => setTimeout(r, 5));
      }
    })();

    const refusals: Array<{ status: number; code: unknown; retryAfter: string | null }> = [];
    const one = async (i: number): Promise<Outcome> => {
      // Every 8th client disconnects as soon as its reply starts; every 8th (offset 4) gives up while it may still wait.
      const abortAfterFirst = i % 8 === 0;
      const abortEarly = i % 8 === 4;
      const controller = new AbortController();
      if (abortEarly) setTimeout(() => controller.abort(), 20 + (i % 5) * 10);
      try {
        const stream = abortAfterFirst
          ? await client.chat.completions.create(
              { model: 'default', messages: LONG_CHAT, max_tokens: 200, temperature: 0, stream: true },
              { signal: controller.signal },
            )
          : await client.completions.create(
              { model: 'default', prompt: PROMPT, max_tokens: MAX_TOKENS, seed: i, stream: true },
              { signal: controller.signal },
            );
        let finish: string | null = null;
        for await (const ch of stream as AsyncIterable<{
          choices: Array<{ finish_reason: string | null; delta?: { content?: string | null }; text?: string }>;
        }>) {
          const c = ch.choices[0];
          if (abortAfterFirst && (c?.delta?.content ?? '') !== '') {
            controller.abort();
            // Leave the stream at once. Reading on after an abort can wait forever in Node 20's bundled undici
            // when the whole body had already arrived (nodejs/undici#4089): the reader is neither closed nor
            // errored. Returning cancels it.
            return 'aborted';
          }
          finish = c?.finish_reason ?? finish;
        }
        expect(finish).toMatch(/^(stop|length)$/);
        return 'completed';
      } catch (err) {
        if (controller.signal.aborted) return 'aborted';
        expect(err).toBeInstanceOf(OpenAI.APIError);
        const e = err as InstanceType<typeof OpenAI.APIError>;
        refusals.push({ status: e.status ?? 0, code: e.code, retryAfter: e.headers?.get('retry-after') ?? null });
        return 'refused';
      }
    };
    const ended: Array<Outcome | undefined> = Array(64).fill(undefined);
    const all = Promise.all(
      Array.from({ length: 64 }, (_, i) =>
        one(i).then((o) => {
          ended[i] = o;
          return o;
        }),
      ),
    );
    // Normally done in about a second; if a stream ever hangs, fail with what the scheduler was doing then,
    // rather than at the test timeout with nothing to go on.
    let watchdog: NodeJS.Timeout | undefined;
    const stuck = new Promise<never>((_, reject) => {
      watchdog = setTimeout(() => {
        const waiting = ended.flatMap((o, i) => (o === undefined ? [i] : []));
        const last = samples.at(-1);
        const brief = (v: SchedulerSnapshot['running'][number]) =>
          `${v.id}:${v.state} gen ${v.generatedTokens} reserved ${v.reservedBytes}`;
        reject(
          new Error(
            `clients ${waiting.join(', ')} never ended; last snapshot: running [${last?.running.map(brief).join('; ')}], ` +
              `queue [${last?.queue.map(brief).join('; ')}], reserved ${last?.reservedBytes}, held ${last?.heldBytes}`,
          ),
        );
      }, 40_000);
    });
    const outcomes = await Promise.race([all, stuck]).finally(() => {
      clearTimeout(watchdog);
      sampling = false;
    });
    await sampler;

    // Every refusal is the structured 429 of a full queue.
    for (const r of refusals) {
      expect(r).toMatchObject({ status: 429, code: 'queue_full' });
      expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    const count = (o: Outcome) => outcomes.filter((x) => x === o).length;
    expect(count('completed')).toBeGreaterThan(0);
    expect(count('refused')).toBeGreaterThan(0);
    expect(count('completed') + count('refused') + count('aborted')).toBe(64);

    // Capacity at every sampled instant, and the budget was actually contended.
    expect(samples.length).toBeGreaterThan(5);
    for (const s of samples) {
      expect(s.reservedBytes + s.heldBytes).toBeLessThanOrEqual(s.limitBytes);
      expect(s.running.reduce((sum, r) => sum + r.reservedBytes, 0)).toBe(s.reservedBytes);
      expect(s.usedBytes).toBeLessThanOrEqual(s.reservedBytes);
    }
    expect(Math.max(...samples.map((s) => s.running.length))).toBeGreaterThanOrEqual(2);
    expect(Math.max(...samples.map((s) => s.queue.length))).toBeGreaterThan(0);

    // Afterwards: nothing reserved, and every accepted request ended exactly once.
    const after = await settled(t.url);
    expect(after.reservedBytes).toBe(0);
    expect(after.usedBytes).toBe(0);
    // What stays held is the prompt cache: at most its limit of idle anonymous sessions (evicted when a request
    // needs the room), each holding exactly the KV the engine keeps for it (a cancelled turn's: none).
    expect(after.sessions.every((s) => s.state === 'idle' && s.sessionId.startsWith(PROMPT_CACHE_PREFIX))).toBe(true);
    expect(after.sessions.length).toBeLessThanOrEqual(DEFAULT_PROMPT_CACHE_SESSIONS);
    const engineSessions = (await t.hostApi.runner.engine.stats()).sessions;
    for (const s of after.sessions) {
      expect(engineSessions.find((e) => e.sessionId === s.sessionId)?.kvBytes ?? 0, s.sessionId).toBe(s.heldBytes);
    }
    expect(after.violations).toEqual([]);
    const d = (k: 'accepted' | 'finished' | 'cancelled' | 'failed' | 'admitted') =>
      after.counters[k] - before.counters[k];
    expect(d('accepted')).toBe(d('finished') + d('cancelled') + d('failed'));
    expect(d('failed')).toBe(0);
    expect(d('cancelled')).toBeGreaterThanOrEqual(1);
    const queueFull = (after.counters.rejections.QUEUE_FULL ?? 0) - (before.counters.rejections.QUEUE_FULL ?? 0);
    expect(queueFull).toBeGreaterThanOrEqual(count('refused'));
    expect(queueFull).toBeLessThanOrEqual(count('refused') + count('aborted'));

    // /metrics says the same as the snapshot.
    const res = await fetch(`${t.url}/metrics`);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const m = parseMetrics(await res.text());
    const snap = await budget(t.url);
    expect(m.get('kvdesk_kv_reserved_bytes')).toBe(0);
    expect(m.get('kvdesk_num_requests_running')).toBe(0);
    expect(m.get('kvdesk_num_requests_waiting')).toBe(0);
    expect(m.get('kvdesk_kv_budget_bytes')).toBe(snap.limitBytes);
    expect(m.get('kvdesk_kv_used_bytes')).toBe(snap.usedBytes);
    expect(m.get('kvdesk_kv_usage_ratio')).toBe(snap.heldBytes / snap.limitBytes);
    expect(m.get('kvdesk_rejections_total{code="QUEUE_FULL"}')).toBe(snap.counters.rejections.QUEUE_FULL);
    expect(m.get('kvdesk_budget_capped_total')).toBe(snap.counters.budgetCapped);
    expect(m.get('kvdesk_generation_tokens_total')).toBe(snap.counters.generationTokens);
    expect(m.get('kvdesk_requests_total{event="cancelled"}')).toBe(snap.counters.cancelled);
    expect(m.get('kvdesk_time_to_first_token_seconds_count')).toBe(snap.counters.ttftSeconds.count);
    expect(m.get('kvdesk_time_to_first_token_seconds_bucket{le="+Inf"}')).toBe(snap.counters.ttftSeconds.count);
    expect(m.get('kvdesk_request_queue_time_seconds_count')).toBe(snap.counters.queueTimeSeconds.count);
    expect(m.get('kvdesk_request_queue_time_seconds_sum')).toBe(snap.counters.queueTimeSeconds.sum);
    expect(snap.counters.queueTimeSeconds.count).toBe(snap.counters.admitted);
  });
});
