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

  it('a conversation of hundreds of KB is measured from its newest turns: counted only near the context, with the same results', () => {
    const messages = bigChat();
    const chars = messages.reduce((n, m) => n + m.content.length, 0);
    const { encoded, restore } = countEncoded();
    let fit: ReturnType<RunnerService['measurePrompt']>;
    let over: ReturnType<RunnerService['measurePrompt']>;
    try {
      fit = h.measurePrompt({
        model: 'small',
        system: SYSTEM,
        messages,
        maxNewTokens: 16,
        contextOverflow: 'drop-oldest',
        droppedMessages: 0,
      });
      const dropEncoded = encoded.reduce((a, b) => a + b, 0);
      over = h.measurePrompt({ model: 'small', system: SYSTEM, messages }, { countUpTo: CONTEXT });
      const overEncoded = encoded.reduce((a, b) => a + b, 0) - dropEncoded;
      // Only prompts of about the context's size were tokenized, a few of them: not the conversation.
      expect(dropEncoded).toBeLessThan(chars / 20);
      expect(overEncoded).toBeLessThan(chars / 20);
      expect(encoded.length).toBeLessThan(40);
    } finally {
      restore();
    }
    // What a person sees is as it was: the fewest turns left out that leave the reply its room (drop-oldest, whose
    // turns remember the drop, goes down to half of that), counted exactly.
    const tokens = (k: number) => h.countPromptTokens({ model: 'small', system: SYSTEM, messages: messages.slice(k) });
    const dropped = fit.droppedMessages ?? 0;
    const target = (CONTEXT - 16) >> 1;
    expect(tokens(dropped)).toBeLessThanOrEqual(target);
    expect(tokens(dropped - 2)).toBeGreaterThan(target);
    expect(fit.promptTokens).toBe(tokens(dropped));
    // Longer than the context, said so from its newest turns: at least what those have, and no more than the whole.
    expect(over.countedUpTo).toBe(CONTEXT);
    expect(over.promptTokens).toBeGreaterThan(CONTEXT);
    expect(over.promptTokens).toBeLessThan(tokens(messages.length - 200));
    // A conversation within the limit asked, or not far past it, is counted whole, exactly as without it.
    const short = [...LONG, ASK];
    const plain = h.measurePrompt({ model: 'small', messages: short });
    expect(plain.promptTokens).toBeGreaterThan(CONTEXT);
    expect(h.measurePrompt({ model: 'small', messages: short }, { countUpTo: plain.promptTokens })).toEqual(plain);
    expect(h.measurePrompt({ model: 'small', messages: short }, { countUpTo: CONTEXT })).toEqual(plain);
  });

  it('a conversation of hundreds of KB sent whole (refuse) is refused from its newest turns, without rendering it all', async () => {
    // A chat far over the context used to be rendered and tokenized whole to be refused: tens of seconds for a chat
    // of MBs on the host's thread, or the template's time limit, which then blamed the package.
    const messages = bigChat();
    const chars = messages.reduce((n, m) => n + m.content.length, 0);
    const refusals = () => h.schedulerOf('small').snapshot().counters.rejections.CONTEXT_OVERFLOW ?? 0;
    const before = refusals();
    const { encoded, restore } = countEncoded();
    let error: unknown;
    try {
      error = await run({ messages }).then(
        () => undefined,
        (e: unknown) => e,
      );
    } finally {
      restore();
    }
    expect(error).toMatchObject({
      code: 'CONTEXT_OVERFLOW',
      message: expect.stringMatching(
        new RegExp(
          `^The prompt has at least \\d+ tokens .*context of ${CONTEXT} tokens\\. Shorten the prompt or start a new chat\\.$`,
        ),
      ),
      detail: { contextLength: CONTEXT, countedUpTo: CONTEXT - 1 },
    });
    // At least what its newest turns have, which already fill the context: true of the whole.
    const detail = (error as { detail: { promptTokens: number } }).detail;
    expect(detail.promptTokens).toBeGreaterThanOrEqual(CONTEXT);
    expect(detail.promptTokens).toBeLessThan(
      h.countPromptTokens({ model: 'small', system: SYSTEM, messages: messages.slice(-201) }),
    );
    // Only prompts of about the context's size were tokenized, a few of them: not the conversation.
    expect(encoded.reduce((a, b) => a + b, 0)).toBeLessThan(chars / 20);
    expect(encoded.length).toBeLessThan(20);
    // Counted among the refusals, as the scheduler's own are.
    expect(refusals()).toBe(before + 1);
  });
});

/**
 * 600 exchanges of ~700 characters (~440 KB): hundreds of times the context. The host used to count it whole (the
 * whole chat rendered and tokenized, for each of the page's measures and to refuse it): minutes for a chat of tens of
 * MB, with every other request waiting behind it.
 */
function bigChat(): ChatMessage[] {
  const para = (i: number) =>
    `Exchange ${i}: ${'the river runs past the old mill and under the stone bridge. '.repeat(11)}`;
  const messages: ChatMessage[] = Array.from({ length: 600 }, (_, i) => [
    { role: 'user' as const, content: para(i) },
    { role: 'assistant' as const, content: `Answer ${i}. ${para(i)}` },
  ]).flat();
  messages.push(ASK);
  return messages;
}

/** The lengths of the texts the small model's tokenizer encodes until `restore`. */
function countEncoded(): { encoded: number[]; restore: () => void } {
  const tok = h.tokenizerOf('small');
  const encoded: number[] = [];
  const encode = tok.encode;
  const bound = encode.bind(tok);
  tok.encode = (text, opts) => {
    encoded.push(text.length);
    return bound(text, opts);
  };
  return {
    encoded,
    restore: () => {
      tok.encode = encode;
    },
  };
}
