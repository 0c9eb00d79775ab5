/**
 * The host's prompt cache (anonymous sessions for requests with
 * `promptCache`, as the OpenAI API sends them) on the real engine and
 * scheduler: a conversation's next turn computes only what is new and gives
 * the tokens a cold run gives; conversations keep their own caches; the
 * least recently used beyond the limit is closed; concurrent turns never
 * share one; the cache can be turned off; and a package loaded again under
 * the same id never reuses KV its predecessor computed.
 */
import { afterAll, describe, expect, it, vi } from 'vitest';
import { type HostSettings, RunnerService } from '../../src/main/host/runner-service';
import type { ChatMessage, GenerationResult } from '../../src/shared/contract';
import type { KvdeskError } from '../../src/shared/errors';
import { PROMPT_CACHE_PREFIX } from '../../src/shared/prompt-cache';
import { defaultModelDir } from '../helpers/fixtures';
import { generatedModel } from '../helpers/models';

const hosts: RunnerService[] = [];
afterAll(async () => {
  await Promise.all(hosts.map((h) => h.close()));
});

async function host(settings: Partial<HostSettings> = {}): Promise<RunnerService> {
  const h = new RunnerService({ intraOpNumThreads: 2, ...settings });
  hosts.push(h);
  await h.loadModel(defaultModelDir, { id: 'default' });
  return h;
}

const SYSTEM = 'You are a careful assistant who answers in full sentences and explains each step of the reasoning.';

/** One chat turn, greedy, through the prompt cache (or not). */
function turn(h: RunnerService, messages: ChatMessage[], promptCache = true): Promise<GenerationResult> {
  return h.generate({ messages, maxNewTokens: 12, sampling: { greedy: true }, system: SYSTEM, promptCache }).result;
}

/** The messages of a conversation's next turn: what was said, the reply, and a new question. */
function next(messages: ChatMessage[], reply: GenerationResult, question: string): ChatMessage[] {
  return [...messages, { role: 'assistant', content: reply.text }, { role: 'user', content: question }];
}

const cacheSessions = (h: RunnerService) =>
  h.scheduler.snapshot().sessions.filter((s) => s.sessionId.startsWith(PROMPT_CACHE_PREFIX));

describe('the prompt cache', () => {
  it('a conversation’s next turn reuses its KV and gives the tokens a cold run gives', async () => {
    const h = await host();
    const first: ChatMessage[] = [{ role: 'user', content: 'What is a lighthouse?' }];
    const r1 = await turn(h, first);
    expect(r1.reusedTokens).toBe(0);
    // The turn's KV stays, held by an idle anonymous session (the last token was sampled, never run).
    expect(cacheSessions(h)).toMatchObject([{ state: 'idle', tokens: r1.promptTokens + r1.tokenIds.length - 1 }]);
    const second = next(first, r1, 'And who keeps it?');
    const r2 = await turn(h, second);
    // Everything of the first prompt is reused (and as much of the reply as encodes the same way).
    expect(r2.reusedTokens).toBeGreaterThanOrEqual(r1.promptTokens);
    expect(r2.tokenIds).toEqual((await turn(h, second, false)).tokenIds);
    expect(cacheSessions(h)).toHaveLength(1);
  });

  it('a turn that does not resend the reply reserves only what it continues from, as a cold run does', async () => {
    const h = await host();
    const first: ChatMessage[] = [{ role: 'user', content: 'What is a lighthouse?' }];
    const r1 = await turn(h, first);
    // The client edited the reply: the cache's reply tokens are of no use to this turn.
    const edited = next(first, { ...r1, text: 'A tower with a light, for ships.' }, 'Tell me more.');
    const r2 = await turn(h, edited);
    const cold = await turn(h, edited, false);
    expect(r2.reusedTokens).toBeGreaterThanOrEqual(r1.promptTokens - 1);
    expect(r2.reusedTokens).toBeLessThan(r1.promptTokens + r1.tokenIds.length - 1);
    expect(r2.reservedBytes).toBe(cold.reservedBytes);
    expect(r2.tokenIds).toEqual(cold.tokenIds);
    // The same prompt again (a retry) continues the cache too.
    const retry = await turn(h, edited);
    expect(retry.reusedTokens).toBe(r2.promptTokens - 1);
    expect(cacheSessions(h)).toHaveLength(1);
  });

  it('keeps one cache per conversation: interleaved conversations each continue their own', async () => {
    const h = await host();
    const a: ChatMessage[] = [{ role: 'user', content: 'Tell me about tides.' }];
    const b: ChatMessage[] = [{ role: 'user', content: 'How do ships navigate at night?' }];
    const a1 = await turn(h, a);
    const b1 = await turn(h, b);
    // b shares the system prompt with a, not a's whole prompt: it gets a cache of its own.
    expect(b1.reusedTokens).toBe(0);
    expect(cacheSessions(h)).toHaveLength(2);
    const a2 = await turn(h, next(a, a1, 'Why twice a day?'));
    const b2 = await turn(h, next(b, b1, 'What about fog?'));
    expect(a2.reusedTokens).toBeGreaterThanOrEqual(a1.promptTokens);
    expect(b2.reusedTokens).toBeGreaterThanOrEqual(b1.promptTokens);
    expect(cacheSessions(h)).toHaveLength(2);
  });

  it('closes the least recently used cache beyond the limit; that conversation starts over', async () => {
    const h = await host({ promptCacheSessions: 2 });
    const chats = ['one', 'two', 'three'].map((w): ChatMessage[] => [
      { role: 'user', content: `Conversation ${w}: describe a harbour at dawn.` },
    ]);
    const firsts: GenerationResult[] = [];
    for (const c of chats) firsts.push(await turn(h, c));
    expect(cacheSessions(h)).toHaveLength(2);
    // The first conversation's cache was closed: its next turn computes everything.
    const again = await turn(h, next(chats[0] as ChatMessage[], firsts[0] as GenerationResult, 'More?'));
    expect(again.reusedTokens).toBe(0);
    // The third's is still there.
    const third = await turn(h, next(chats[2] as ChatMessage[], firsts[2] as GenerationResult, 'More?'));
    expect(third.reusedTokens).toBeGreaterThan(0);
    expect(cacheSessions(h)).toHaveLength(2);
  });

  it('a refused request closes no cache, and concurrent requests never leave more caches than the limit', async () => {
    const h = await host({ promptCacheSessions: 2 });
    const chats = ['one', 'two'].map((w): ChatMessage[] => [{ role: 'user', content: `Chat ${w}: name a colour.` }]);
    const firsts = [];
    for (const c of chats) firsts.push(await turn(h, c));
    // Too long for the context: refused before it could take a cache.
    const long: ChatMessage[] = [{ role: 'user', content: 'word '.repeat(3000) }];
    for (let i = 0; i < 3; i++) await expect(turn(h, long)).rejects.toMatchObject({ code: 'CONTEXT_OVERFLOW' });
    for (const [i, c] of chats.entries()) {
      expect((await turn(h, next(c, firsts[i] as GenerationResult, 'Why?'))).reusedTokens).toBeGreaterThan(0);
    }
    // Five new conversations at once: every one gets a cache while it runs; afterwards two are kept.
    await Promise.all(
      [1, 2, 3, 4, 5].map((i) => turn(h, [{ role: 'user', content: `Parallel chat ${i}: count to three.` }])),
    );
    expect(cacheSessions(h)).toHaveLength(2);
  });

  it('a refusal of a prompt that continues a cache names the whole prompt, as without the cache', async () => {
    // 1.6 MiB: the first turn's 1,504 tokens fit, its next turn of 1,704 does not.
    const h = await host({ kvBudgetBytes: 1600 * 1024 });
    const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => 3 + ((i * 7 + from) % 400));
    const greedy = { greedy: true };
    const first = await h.generate({ promptIds: ids(1500), promptCache: true, maxNewTokens: 4, sampling: greedy })
      .result;
    const refusal = async (extra: number, promptCache: boolean) => {
      const promptIds = [...ids(1500), ...first.tokenIds, ...ids(extra, 1)];
      const e = await h.generate({ promptIds, promptCache, maxNewTokens: 10, sampling: greedy }).result.then(
        () => expect.unreachable('refused'),
        (err: KvdeskError) => err,
      );
      return { length: promptIds.length, code: e.code, message: e.message, detail: e.detail };
    };
    // Past the context (2,104 tokens of 2,048), then past the budget: the client, which opened no session, trims
    // its history from the prompt's whole length.
    for (const [extra, code] of [
      [600, 'CONTEXT_OVERFLOW'],
      [200, 'KV_BUDGET_EXCEEDED'],
    ] as const) {
      const cached = await refusal(extra, true);
      expect(cached).toMatchObject({ code, detail: { promptTokens: cached.length, sessionTokens: 0 } });
      expect(cached.message).toContain(code === 'CONTEXT_OVERFLOW' ? `has ${cached.length} tokens,` : '(1704 prompt');
      expect(cached.message).not.toContain('session');
      expect(cached).toEqual(await refusal(extra, false));
    }
    // The cache was there to continue all along.
    expect(cacheSessions(h)).toMatchObject([{ state: 'idle', tokens: 1500 + first.tokenIds.length - 1 }]);
  });

  it('a cache left holding nothing goes: its turn stopped while queued, or its KV evicted for another request', async () => {
    const h = await host({ maxRunning: 1, kvBudgetBytes: 600 * 1024 });
    const kept = await turn(h, [{ role: 'user', content: 'Keep me: name a river.' }]);
    expect(cacheSessions(h)).toMatchObject([{ state: 'idle', tokens: kept.promptTokens + kept.tokenIds.length - 1 }]);
    // A long reply runs; a second conversation waits behind it and is stopped while queued.
    const running = h.generate({
      messages: [{ role: 'user', content: 'Write at length.' }],
      // Its reservation (~575 KiB) and the first conversation's KV do not fit in 600 KiB together.
      maxNewTokens: 560,
      sampling: { greedy: true },
      promptCache: true,
    });
    const queued = h.generate({
      messages: [{ role: 'user', content: 'Waiting.' }],
      maxNewTokens: 4,
      promptCache: true,
    });
    await vi.waitFor(() => expect(h.scheduler.snapshot().queue).toHaveLength(1));
    queued.cancel('user');
    await expect(queued.result).rejects.toMatchObject({ code: 'CANCELLED' });
    await running.result;
    // The first conversation's KV made room for the long reply: evicted, its cache went with it. The stopped
    // turn's cache never held anything. Only the long reply's conversation is left.
    const left = cacheSessions(h);
    expect(left.every((s) => s.tokens > 0)).toBe(true);
    expect(left).toHaveLength(1);
  });

  it('concurrent turns of one conversation never share a cache, and both give the cold run’s tokens', async () => {
    const h = await host();
    const first: ChatMessage[] = [{ role: 'user', content: 'Name three famous lighthouses.' }];
    const r1 = await turn(h, first);
    const second = next(first, r1, 'Which is the oldest?');
    const [x, y] = await Promise.all([turn(h, second), turn(h, second)]);
    const cold = (await turn(h, second, false)).tokenIds;
    expect(x?.tokenIds).toEqual(cold);
    expect(y?.tokenIds).toEqual(cold);
    // One of them continued the cache, the other started a cache of its own.
    expect([x?.reusedTokens === 0, y?.reusedTokens === 0].filter(Boolean)).toHaveLength(1);
    expect(cacheSessions(h)).toHaveLength(2);
  });

  it('is off with promptCacheSessions 0, and for requests without promptCache', async () => {
    const off = await host({ promptCacheSessions: 0 });
    const first: ChatMessage[] = [{ role: 'user', content: 'What is a lighthouse?' }];
    const r1 = await turn(off, first);
    expect((await turn(off, next(first, r1, 'And who keeps it?'))).reusedTokens).toBe(0);
    expect(off.scheduler.snapshot().sessions).toEqual([]);
    const on = await host();
    await turn(on, first, false);
    expect(on.scheduler.snapshot().sessions).toEqual([]);
  });

  it('a package loaded again under the same id starts every session over', async () => {
    const h = await host();
    const ids = [5, 6, 7, 8, 9, 10, 11, 12];
    const asTurn = () => h.generate({ promptIds: ids, maxNewTokens: 4, sampling: { greedy: true }, sessionId: 's' });
    await asTurn().result;
    expect((await asTurn().result).reusedTokens).toBe(ids.length - 1);
    await h.loadModel(generatedModel('prompt-cache-other', { vocabSize: 1024, maxPositions: 256 }), { id: 'default' });
    expect((await asTurn().result).reusedTokens).toBe(0);
  }, 60_000);
});
