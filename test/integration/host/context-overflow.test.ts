/**
 * The `drop-oldest` context overflow policy on the real engine and scheduler, with a generated model of a
 * 256-token context: a conversation longer than that is refused by default and answered with its oldest turns
 * left out under the policy — exactly the reply the kept turns get on their own —, leaving the fewest out; a
 * conversation that remembers its drop keeps its prefix (and KV) on the next turn.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerService } from '../../../src/main/host/runner-service';
import type { ChatMessage, GenerateRequest, GenerationResult } from '../../../src/shared/contract';
import { LONG_CONVERSATION, SMALL_CONTEXT, smallContextModel } from '../../helpers/models';

const CONTEXT = SMALL_CONTEXT;
let h: RunnerService;

beforeAll(async () => {
  h = new RunnerService({ intraOpNumThreads: 2 });
  await h.loadModel(smallContextModel(), { id: 'small' });
}, 120_000);
afterAll(async () => {
  await h.close();
});

const SYSTEM = 'You answer in one short sentence.';
const LONG = LONG_CONVERSATION;
const ASK: ChatMessage = { role: 'user', content: 'And which of them is the longest?' };

function run(req: Partial<GenerateRequest>): Promise<GenerationResult> {
  return h.generate({ model: 'small', system: SYSTEM, maxNewTokens: 16, sampling: { greedy: true }, ...req }).result;
}

describe('a conversation longer than the context', () => {
  it('is refused by default, naming the context', async () => {
    await expect(run({ messages: [...LONG, ASK] })).rejects.toMatchObject({
      code: 'CONTEXT_OVERFLOW',
      message: expect.stringContaining(`context of ${CONTEXT} tokens`),
    });
  });

  it('drop-oldest leaves out the fewest whole turns that leave the reply its room, and answers as they alone are', async () => {
    const messages = [...LONG, ASK];
    const maxNewTokens = 64;
    const r = await run({ messages, contextOverflow: 'drop-oldest', maxNewTokens });
    const dropped = r.contextDrop?.messages ?? 0;
    expect(r.contextDrop).toEqual({ messages: dropped, contextLength: CONTEXT });
    // The fewest: the first turn start (every other message) whose prompt leaves 64 tokens of room.
    const tokens = (k: number) => h.countPromptTokens({ model: 'small', system: SYSTEM, messages: messages.slice(k) });
    let fewest = 0;
    while (tokens(fewest) > CONTEXT - maxNewTokens) fewest += 2;
    expect(fewest).toBeGreaterThan(0);
    expect(dropped).toBe(fewest);
    expect(r.promptTokens).toBe(tokens(fewest));
    expect(r.clipped).toBeUndefined();
    expect(r.finishReason).not.toBe('context');
    // The prompt is exactly the system prompt and the kept turns: the same reply.
    const alone = await run({ messages: messages.slice(dropped), maxNewTokens });
    expect(alone.contextDrop).toBeUndefined();
    expect(alone.tokenIds).toEqual(r.tokenIds);
  });

  it('keeps system messages where they are and leaves out turns around them', async () => {
    const system: ChatMessage = { role: 'system', content: SYSTEM };
    const messages = [system, ...LONG, ASK];
    const r = await h.generate({
      model: 'small',
      messages,
      contextOverflow: 'drop-oldest',
      maxNewTokens: 16,
      sampling: { greedy: true },
    }).result;
    const dropped = r.contextDrop?.messages ?? 0;
    expect(dropped).toBeGreaterThan(0);
    const alone = await h.generate({
      model: 'small',
      messages: [system, ...messages.slice(1 + dropped)],
      maxNewTokens: 16,
      sampling: { greedy: true },
    }).result;
    expect(alone.promptTokens).toBe(r.promptTokens);
    expect(alone.tokenIds).toEqual(r.tokenIds);
  });

  it('a conversation that fits is not touched', async () => {
    const r = await run({ messages: LONG.slice(-3), contextOverflow: 'drop-oldest' });
    expect(r.contextDrop).toBeUndefined();
    expect(r.tokenIds).toEqual((await run({ messages: LONG.slice(-3) })).tokenIds);
  });

  it('a turn alone longer than the context is still refused', async () => {
    const huge: ChatMessage = { role: 'user', content: 'river '.repeat(400) };
    await expect(run({ messages: [...LONG, huge], contextOverflow: 'drop-oldest' })).rejects.toMatchObject({
      code: 'CONTEXT_OVERFLOW',
    });
  });

  it('a thread that remembers its drop leaves out enough for several turns, and its next turn reuses the KV', async () => {
    const sessionId = 'thread-overflow';
    const first = [...LONG, ASK];
    const t1 = await run({ messages: first, contextOverflow: 'drop-oldest', droppedMessages: 0, sessionId });
    const d1 = t1.contextDrop?.messages ?? 0;
    // Down to half the room (≤ (256 − 16) / 2), not just under the limit.
    expect(t1.promptTokens).toBeLessThanOrEqual((CONTEXT - 16) / 2);
    const minimal = await run({ messages: first, contextOverflow: 'drop-oldest' });
    expect(d1).toBeGreaterThan(minimal.contextDrop?.messages ?? 0);
    // The next turn starts where this one did: same prefix, so the session's KV carries over.
    // A next question long enough that the kept turns no longer fit half the room (but still fit the room).
    const why = 'Why is that so? Tell me about the river, its source, its mouth and the towns along it.';
    const second: ChatMessage[] = [...first, { role: 'assistant', content: t1.text }, { role: 'user', content: why }];
    const fromD1 = h.countPromptTokens({ model: 'small', system: SYSTEM, messages: second.slice(d1) });
    expect(fromD1).toBeGreaterThan((CONTEXT - 16) / 2);
    expect(fromD1).toBeLessThanOrEqual(CONTEXT - 16);
    const t2 = await run({ messages: second, contextOverflow: 'drop-oldest', droppedMessages: d1, sessionId });
    expect(t2.contextDrop?.messages).toBe(d1);
    expect(t2.reusedTokens).toBeGreaterThan(t1.promptTokens / 2);
    // Without the hint the same turn would start elsewhere (the fewest left out) and reuse only the system prompt.
    const cold = await run({ messages: second, contextOverflow: 'drop-oldest' });
    expect(cold.contextDrop?.messages).not.toBe(d1);
  });

  it('a client that remembers nothing (the prompt cache) keeps the start of its last turn while it fits', async () => {
    const first = [...LONG, ASK];
    const t1 = await run({ messages: first, contextOverflow: 'drop-oldest', promptCache: true });
    const d1 = t1.contextDrop?.messages ?? 0;
    expect(d1).toBeGreaterThan(0);
    // Down to half the room when something must go (so later turns can keep this start).
    expect(t1.promptTokens).toBeLessThanOrEqual((CONTEXT - 16) / 2);
    const why = 'Why is that so? Tell me about the river, its source, its mouth and the towns along it.';
    const second: ChatMessage[] = [...first, { role: 'assistant', content: t1.text }, { role: 'user', content: why }];
    // The whole conversation again, as an API client sends it: the same start, the first turn's KV reused.
    const t2 = await run({ messages: second, contextOverflow: 'drop-oldest', promptCache: true });
    expect(t2.contextDrop?.messages).toBe(d1);
    expect(t2.reusedTokens).toBeGreaterThan(t1.promptTokens / 2);
    // Without the cache (nothing to continue) the fewest are left out: another start.
    const cold = await run({ messages: second, contextOverflow: 'drop-oldest' });
    expect(cold.contextDrop?.messages).not.toBe(d1);
  });

  it('measurePrompt says what a request would read and leave out, as generate then does', async () => {
    const req: Partial<GenerateRequest> = {
      model: 'small',
      system: SYSTEM,
      messages: [...LONG, ASK],
      maxNewTokens: 16,
    };
    const m = h.measurePrompt({ ...req, contextOverflow: 'drop-oldest' });
    const r = await run({ ...req, contextOverflow: 'drop-oldest' });
    expect(m).toEqual({
      promptTokens: r.promptTokens,
      contextLength: CONTEXT,
      droppedMessages: r.contextDrop?.messages,
    });
    // Refused as it stands: the whole conversation, nothing left out.
    const whole = h.measurePrompt(req);
    expect(whole.promptTokens).toBeGreaterThan(CONTEXT);
    expect(whole.droppedMessages).toBeUndefined();
  });
});
