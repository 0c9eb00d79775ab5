/**
 * Lookup decoding on the real onnxruntime-node: a draft is checked in one run
 * with the stream's last token, and the reply is the one plain decoding gives —
 * greedy or sampled with a seed, with log-probabilities, in a chat session —
 * whether every draft is right (fewer runs), every draft is wrong (a rest
 * after each miss), or lookup is off. Drafts come from a drafter the test
 * controls (the reply it already knows, or wrong tokens), since what a random
 * model repeats cannot be chosen; the real drafter is checked on its own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type GenerationHooks,
  type GenerationJob,
  type GenerationOutcome,
  LoadedDecoder,
  type SessionKv,
} from '../../src/main/engine/decoder';
import { type Drafter, LOOKUP_DRAFT_TOKENS, lookupDraft, predictionDraft } from '../../src/main/engine/lookup';
import type { SamplingParams, StepLogprob } from '../../src/main/engine/protocol';
import { loadModelSpec } from '../../src/main/packages';
import type { ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir } from '../helpers/fixtures';
import { GREEDY } from '../helpers/generation';

const SAMPLED: SamplingParams = {
  greedy: false,
  temperature: 0.9,
  topK: 40,
  topP: 0.95,
  minP: 0,
  repetitionPenalty: 1.1,
  frequencyPenalty: 0.2,
  seed: 1234,
};

interface Run {
  ids: number[];
  logprobs: StepLogprob[];
  runs: number;
  /** KV bytes each onStep reported. */
  kv: number[];
  outcome: GenerationOutcome;
}

async function generate(
  decoder: LoadedDecoder,
  prompt: number[],
  maxNewTokens: number,
  sampling: SamplingParams = GREEDY,
  extra: Partial<GenerationJob> = {},
  stopAfter?: number,
): Promise<Run> {
  const run: Omit<Run, 'outcome'> = { ids: [], logprobs: [], runs: 0, kv: [] };
  const hooks: GenerationHooks = {
    onStart: () => {},
    onStep: (ids, kvBytes, logprobs) => {
      if ((ids[0] as number) >= 0) run.ids.push(ids[0] as number);
      const lp = logprobs?.[0];
      if (lp) run.logprobs.push(lp);
      run.kv.push(kvBytes);
    },
    stopRequested: () => (stopAfter !== undefined && run.ids.length >= stopAfter ? 'stop' : null),
    countRun: () => {
      run.runs++;
    },
  };
  const outcome = await decoder.generate({ rows: [prompt], maxNewTokens, sampling, eosTokenIds: [], ...extra }, hooks);
  return { ...run, outcome };
}

let spec: ModelSpec;
let decoder: LoadedDecoder;
const prompt = [5, 17, 9, 33, 2, 41, 7, 19, 23, 11, 3, 29];

/** A drafter that knows the reply (prompt + ids): every draft is right. */
function knowing(reply: number[]): Drafter {
  const text = [...prompt, ...reply];
  return (history, max) => text.slice(history.length, history.length + max);
}

/** A drafter whose every token is wrong. */
function wrong(reply: number[], vocab: number): Drafter {
  const text = [...prompt, ...reply];
  return (history, max) => Array.from({ length: max }, (_, i) => ((text[history.length + i] ?? 0) + 1) % vocab);
}

/** Runs `body` with lookup's drafter and bound set, then puts them back. */
async function withDrafter<T>(drafter: Drafter, maxDraft: number, body: () => Promise<T>): Promise<T> {
  const lookup = decoder.lookup;
  if (!lookup) throw new Error('lookup decoding is off for the default model');
  const saved = { drafter: lookup.drafter, maxDraft: lookup.maxDraft };
  lookup.drafter = drafter;
  lookup.maxDraft = maxDraft;
  try {
    return await body();
  } finally {
    Object.assign(lookup, saved);
  }
}

const off = <T>(body: () => Promise<T>) => withDrafter(() => [], 0, body);

beforeAll(async () => {
  spec = await loadModelSpec(defaultModelDir);
  decoder = await LoadedDecoder.load(spec, { intraOpNumThreads: 2, executionProviders: ['cpu'] });
});
afterAll(async () => {
  await decoder?.dispose();
});

describe('lookup decoding in the engine', () => {
  it('is on by default through the last-position copy, with the default draft bound', () => {
    expect(decoder.logits.last).toBe(true);
    expect(decoder.lookup).toMatchObject({ maxDraft: LOOKUP_DRAFT_TOKENS, startsInput: expect.any(String) });
  });

  it('gives the greedy reply of plain decoding in far fewer runs when every draft is right', async () => {
    const plain = await off(() => generate(decoder, prompt, 48));
    expect(plain.runs).toBe(48);
    expect(plain.outcome.lookup).toBeUndefined();
    const fast = await withDrafter(knowing(plain.ids), 4, () => generate(decoder, prompt, 48));
    expect(fast.ids).toEqual(plain.ids);
    // The prefill gives the first token; every check after it gives five (four drafts and the model's next).
    expect(fast.runs).toBe(1 + Math.ceil(47 / 5));
    // Which of the reply's tokens were drafts the model took: each check's first four, the last check's one.
    const acceptedAt = Array.from({ length: 47 }, (_, i) => i + 1).filter((i) => i % 5 !== 0 && i !== 47);
    expect(fast.outcome.lookup).toEqual({ drafted: 37, accepted: 37, acceptedAt });
    expect(fast.outcome.generatedTokens).toBe(48);
    // The KV holds what plain decoding's holds, step by step as the tokens come.
    expect(fast.outcome.kvBytes).toBe(plain.outcome.kvBytes);
    expect(fast.kv).toEqual(plain.kv);
  });

  it('gives the same reply when every draft is wrong, and rests longer after each miss', async () => {
    const plain = await off(() => generate(decoder, prompt, 64));
    const missed = await withDrafter(wrong(plain.ids, spec.vocabSize), 4, () => generate(decoder, prompt, 64));
    expect(missed.ids).toEqual(plain.ids);
    expect(missed.outcome.lookup?.accepted).toBe(0);
    expect(missed.outcome.kvBytes).toBe(plain.outcome.kvBytes);
    expect(missed.kv).toEqual(plain.kv);
    // A miss at 1 token rests 2, then 4, 8, 16 and 32: checks at 1, 4, 9, 18 and 35 tokens, four drafted each.
    expect(missed.outcome.lookup?.drafted).toBe(5 * 4);
    expect(missed.runs).toBe(64);
  });

  it('keeps a sampled reply token for token: each position is sampled in order with the same random stream', async () => {
    const plain = await off(() => generate(decoder, prompt, 40, SAMPLED, { logprobs: 3 }));
    const fast = await withDrafter(knowing(plain.ids), 6, () =>
      generate(decoder, prompt, 40, SAMPLED, { logprobs: 3 }),
    );
    expect(fast.ids).toEqual(plain.ids);
    expect(fast.runs).toBeLessThan(plain.runs / 3);
    expect(fast.logprobs.map((l) => l.top.map((t) => t.id))).toEqual(plain.logprobs.map((l) => l.top.map((t) => t.id)));
    for (const [i, l] of fast.logprobs.entries()) {
      expect(l.logprob).toBeCloseTo((plain.logprobs[i] as StepLogprob).logprob, 3);
    }
  });

  it('takes half a draft right: the rest of that check is cut from the KV and the reply goes on as plain', async () => {
    const plain = await off(() => generate(decoder, prompt, 30));
    const text = [...prompt, ...plain.ids];
    // Two right tokens, then wrong ones.
    const half: Drafter = (history, max) =>
      Array.from({ length: max }, (_, i) => (i < 2 ? (text[history.length + i] as number) : 0));
    const mixed = await withDrafter(half, 4, () => generate(decoder, prompt, 30));
    expect(mixed.ids).toEqual(plain.ids);
    expect(mixed.kv).toEqual(plain.kv);
    expect(mixed.outcome.lookup?.accepted).toBeGreaterThan(0);
    expect(mixed.outcome.lookup?.accepted).toBeLessThan(mixed.outcome.lookup?.drafted as number);
  });

  it.each([
    ['room after its positions', true],
    ['no room after them', false],
  ])("keeps no room in the KV past the request's prompt and reply (%s)", async (_, kvGap) => {
    const plain = await off(() => generate(decoder, prompt, 18));
    // Its own decoder: the most KV its runs have held counts this generation only.
    const own = await LoadedDecoder.load(spec, { intraOpNumThreads: 2, executionProviders: ['cpu'], kvGap });
    try {
      (own.lookup as { drafter: Drafter }).drafter = knowing(plain.ids);
      const fast = await generate(own, prompt, 18);
      expect(fast.ids).toEqual(plain.ids);
      expect(fast.outcome.lookup?.accepted).toBeGreaterThan(10);
      // The first check (5 positions after the prompt's 12) outgrows the prefill's buffer with 17 tokens to go;
      // its buffer, sized as if those 17 came after the check's 5, took 32 positions, past the 12 + 18 reserved.
      // The KV reaches 12 + 18 − 1: the last token is sampled, never fed.
      expect(own.peakBatchKvBytes).toBe((prompt.length + 18 - 1) * spec.bpt);
    } finally {
      await own.dispose();
    }
  });

  it('ends at max new tokens and at a stop in the middle of a draft, with the KV of the tokens given', async () => {
    const plain = await off(() => generate(decoder, prompt, 13));
    const fast = await withDrafter(knowing([...plain.ids, 1, 2, 3, 4, 5, 6, 7, 8]), 8, () =>
      generate(decoder, prompt, 13),
    );
    expect(fast.ids).toEqual(plain.ids);
    expect(fast.outcome).toMatchObject({ finishReason: 'length', generatedTokens: 13 });
    expect(fast.outcome.kvBytes).toBe(plain.outcome.kvBytes);
    const long = await off(() => generate(decoder, prompt, 40));
    const stopped = await withDrafter(knowing(long.ids), 8, () => generate(decoder, prompt, 40, GREEDY, {}, 6));
    expect(stopped.outcome.finishReason).toBe('stop');
    // The stop is seen after the sixth token: the check that gave it ends there.
    expect(stopped.ids).toEqual(long.ids.slice(0, 6));
    expect(stopped.outcome.kvBytes).toBe(6 * spec.bpt + prompt.length * spec.bpt - spec.bpt);
  });

  it('leaves a chat session the KV and tokens plain decoding leaves, for the next turn to reuse', async () => {
    const plainSession: SessionKv = { tokens: [], past: new Map() };
    const fastSession: SessionKv = { tokens: [], past: new Map() };
    const plain = await off(() => generate(decoder, prompt, 20, GREEDY, { session: plainSession }));
    await withDrafter(knowing(plain.ids), 4, () => generate(decoder, prompt, 20, GREEDY, { session: fastSession }));
    expect(fastSession.tokens).toEqual(plainSession.tokens);
    for (const [name, t] of plainSession.past) {
      const mine = fastSession.past.get(name);
      expect(mine?.dims).toEqual(t.dims);
      const a = t.data as Float32Array;
      const b = mine?.data as Float32Array;
      let worst = 0;
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs((a[i] as number) - (b[i] as number)));
      expect(worst).toBeLessThan(1e-3);
    }
    // The next turn reuses the session and goes on the same way.
    const next = [...plainSession.tokens, 8, 9];
    const a = await off(() => generate(decoder, next, 12, GREEDY, { session: plainSession }));
    // Drafts of that turn's own reply: lookup runs on the reused session too.
    const nextText = [...next, ...a.ids];
    const b = await withDrafter(
      (history, max) => nextText.slice(history.length, history.length + max),
      4,
      () => generate(decoder, next, 12, GREEDY, { session: fastSession }),
    );
    expect(b.ids).toEqual(a.ids);
    expect(b.outcome.lookup?.accepted).toBeGreaterThan(0);
  });

  it("drafts from the client's predicted reply with kvdesk's own drafter: same reply, a fraction of the runs", async () => {
    const plain = await off(() => generate(decoder, prompt, 40));
    expect(decoder.lookup?.drafter).toBe(lookupDraft);
    // The reply predicted with an edit: its tokens 10–14 replaced by others; the reply leaves the prediction
    // there and comes back to it.
    const edited = [...plain.ids.slice(0, 10), 1, 2, 3, 4, 5, ...plain.ids.slice(15)];
    for (const predicted of [plain.ids, edited]) {
      const fast = await generate(decoder, prompt, 40, GREEDY, { prediction: predicted });
      expect(fast.ids).toEqual(plain.ids);
      expect(fast.runs).toBeLessThan(plain.runs / 2);
      expect(fast.outcome.lookup?.accepted).toBeGreaterThan(25);
    }
  });

  it('drafts only for a stream running alone: two streams together take plain steps', async () => {
    const other = [7, 7, 3, 19, 4];
    const [a, b] = await off(() => Promise.all([generate(decoder, prompt, 16), generate(decoder, other, 16)]));
    const drafter: Drafter = (history, max) => Array.from({ length: max }, (_, i) => history[i] as number);
    const [c, d] = await withDrafter(drafter, 4, () =>
      Promise.all([generate(decoder, prompt, 16), generate(decoder, other, 16)]),
    );
    expect(c.ids).toEqual(a.ids);
    expect(d.ids).toEqual(b.ids);
    expect(c.outcome.lookup).toBeUndefined();
    expect(d.outcome.lookup).toBeUndefined();
  });

  it('checks drafts on a graph loaded as it is (every position scored), and is off at lookupDraftTokens 0', async () => {
    const whole = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lastPositionLogits: false,
    });
    const none = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: 0,
    });
    try {
      expect(none.lookup).toBeNull();
      expect(whole.lookup).toMatchObject({ maxDraft: LOOKUP_DRAFT_TOKENS });
      expect(whole.lookup?.startsInput).toBeUndefined();
      const plain = await generate(none, prompt, 24);
      (whole.lookup as { drafter: Drafter }).drafter = knowing(plain.ids);
      const fast = await generate(whole, prompt, 24);
      expect(fast.ids).toEqual(plain.ids);
      expect(fast.runs).toBe(1 + Math.ceil(23 / 5));
    } finally {
      await whole.dispose();
      await none.dispose();
    }
  });
});

describe('predictionDraft', () => {
  // Prompt [9, 9], then the reply so far.
  const predicted = [1, 2, 3, 4, 5, 6, 7, 8];
  it('continues the prediction while the reply is its beginning, from the reply on', () => {
    expect(predictionDraft([9, 9, 1], 3, 2, predicted)).toEqual([2, 3, 4]);
    expect(predictionDraft([9, 9], 2, 2, predicted)).toEqual([1, 2]);
    expect(predictionDraft([9, 9, 1, 2, 3, 4, 5, 6, 7, 8], 3, 2, predicted)).toEqual([]);
  });

  it('after the reply left it, looks the last tokens up in it, nearest the reply position', () => {
    // The reply wrote 1 2 0 then 4 5: the tail [4, 5] is found in the prediction, and 6 7 follows.
    expect(predictionDraft([9, 9, 1, 2, 0, 4, 5], 2, 2, predicted)).toEqual([6, 7]);
    // Two occurrences of [1, 2]: the one nearest the reply's length (8) wins.
    const twice = [1, 2, 3, 0, 0, 0, 0, 0, 1, 2, 5];
    expect(predictionDraft([9, 9, 7, 7, 7, 7, 7, 7, 1, 2], 1, 2, twice)).toEqual([5]);
    expect(predictionDraft([9, 9, 7, 1, 2], 1, 2, twice)).toEqual([3]);
    expect(predictionDraft([9, 9, 0, 7, 7], 2, 2, predicted)).toEqual([]);
  });

  it('comes first in lookupDraft, which falls back to the stream itself', () => {
    const history = [4, 5, 6, 4, 5];
    expect(lookupDraft(history, 2, { replyFrom: 3, prediction: [4, 5, 8, 9] })).toEqual([8, 9]);
    expect(lookupDraft(history, 2, { replyFrom: 3, prediction: [7, 7] })).toEqual([6, 4]);
    expect(lookupDraft(history, 2, { replyFrom: 3 })).toEqual([6, 4]);
  });
});

describe('lookupDraft', () => {
  it('continues the most recent earlier occurrence of the last three tokens', () => {
    //         0  1  2  3  4  5  6  7  8  9 10 11
    const h = [1, 2, 3, 4, 9, 9, 1, 2, 3, 5, 6, 1, 2, 3];
    expect(lookupDraft(h, 4)).toEqual([5, 6, 1, 2]);
    expect(lookupDraft(h, 1)).toEqual([5]);
  });

  it('falls back to the last two tokens, never to one', () => {
    expect(lookupDraft([4, 7, 8, 1, 5, 9, 7, 8], 3)).toEqual([1, 5, 9]);
    expect(lookupDraft([4, 7, 1, 5, 9, 3, 8], 3)).toEqual([]);
    // Only one token (8) occurred before: no draft.
    expect(lookupDraft([8, 1, 2, 8], 3)).toEqual([]);
  });

  it('extends a repeating pattern up to the end of what was seen', () => {
    expect(lookupDraft([1, 2, 1, 2, 1, 2], 4)).toEqual([1, 2]);
    expect(lookupDraft([3, 3, 3, 3], 8)).toEqual([3]);
  });

  it('drafts nothing for a short or empty history, or a bound under one', () => {
    expect(lookupDraft([], 4)).toEqual([]);
    expect(lookupDraft([1, 2], 4)).toEqual([]);
    expect(lookupDraft([1, 2, 1, 2], 0)).toEqual([]);
  });
});
