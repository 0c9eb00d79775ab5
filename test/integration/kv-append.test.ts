/**
 * Runs that return only the positions they add to the KV (last-position.ts exposes them; the batcher grows its
 * presents in place with kv-cache.ts appendSeq) instead of onnxruntime-node copying every present out whole:
 * on the real engine, every kind of run — a batch whose rows join and leave, chunked prefill, a session turn
 * reusing its KV, lookup decoding's draft checks cut back after a miss — gives the same tokens and the same KV as
 * with the presents returned whole.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LookupDecoding } from '../../src/main/engine/batcher';
import { type GenerationHooks, type GenerationJob, LoadedDecoder, type SessionKv } from '../../src/main/engine/decoder';
import { KV_GROWTH_POSITIONS } from '../../src/main/engine/kv-cache';
import type { LookupCount } from '../../src/main/engine/protocol';
import { loadModelSpec } from '../../src/main/packages';
import type { ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';
import { GREEDY } from '../helpers/generation';

const prompt = (length: number, salt: number) => Array.from({ length }, (_, i) => 3 + ((i * 37 + salt * 11) % 400));

/** One generation's ids per row, starting `then` once the first row has `after` tokens. */
async function generate(
  decoder: LoadedDecoder,
  job: Partial<GenerationJob> & { rows: number[][] },
  then?: { after: number; start: () => void },
): Promise<number[][]> {
  const ids: number[][] = job.rows.map(() => []);
  const hooks: GenerationHooks = {
    onStart: () => {},
    onStep: (step) => {
      for (const [r, id] of step.entries()) if (id >= 0) ids[r]?.push(id);
      if (then && ids[0]?.length === then.after) then.start();
    },
    stopRequested: () => null,
    countRun: () => {},
  };
  const outcome = await decoder.generate({ maxNewTokens: 24, sampling: GREEDY, eosTokenIds: [], ...job }, hooks);
  lastLookup = outcome.lookup;
  return ids;
}
/** Lookup decoding's count of the last generation. */
let lastLookup: LookupCount | undefined;

/** Every kind of run the batcher makes, on one decoder: what each produced. */
async function scenario(decoder: LoadedDecoder) {
  // Three requests of different lengths; a fourth joins once the first has written 8 tokens, and they leave at
  // different steps (the batch's KV is merged, trimmed and grown all along).
  let late: Promise<number[][]> | undefined;
  const batch = await Promise.all([
    generate(
      decoder,
      { rows: [prompt(24, 1)], maxNewTokens: 40 },
      {
        after: 8,
        start: () => {
          late = generate(decoder, { rows: [prompt(7, 4)], maxNewTokens: 12 });
        },
      },
    ),
    generate(decoder, { rows: [prompt(9, 2), prompt(13, 3)], maxNewTokens: 20 }),
    generate(decoder, { rows: [prompt(70, 5)], maxNewTokens: 30 }),
  ]);
  const joined = await (late as Promise<number[][]>);
  // A long prompt prefilled in chunks (prefillChunkTokens below), then a session's second turn reusing its KV.
  const session: SessionKv = { tokens: [], past: new Map() };
  const first = await generate(decoder, { rows: [prompt(150, 6)], session });
  const second = await generate(decoder, {
    rows: [[...session.tokens, ...(first[0] as number[]), ...prompt(5, 7)]],
    session,
  });
  const saved = [...session.past.values()].map((t) => Array.from(t.data as Float32Array));
  // Lookup decoding's draft checks, each drafting the next token right and the one after it wrong: every check
  // takes one token and is cut back by the rest.
  const alone = await generate(decoder, { rows: [prompt(20, 8)], maxNewTokens: 40 });
  const reply = alone[0] as number[];
  const lookup = decoder.lookup as LookupDecoding;
  const drafter = lookup.drafter;
  lookup.drafter = (history, max, hints) => {
    const next = history.length - (hints?.replyFrom ?? history.length);
    const draft = [reply[next], ((reply[next + 1] ?? 0) + 1) % 400, reply[next + 2]];
    return draft.filter((id): id is number => id !== undefined).slice(0, max);
  };
  let predicted: number[][];
  try {
    predicted = await generate(decoder, { rows: [prompt(20, 8)], maxNewTokens: 40 });
  } finally {
    lookup.drafter = drafter;
  }
  const count = lastLookup;
  return { batch, joined, first, second, saved, alone, predicted, lookup: count, peak: decoder.peakBatchKvBytes };
}

describe('runs that return the positions they add', () => {
  let spec: ModelSpec;
  let built: LoadedDecoder;
  let whole: LoadedDecoder;
  beforeAll(async () => {
    spec = await loadModelSpec(defaultModelDir);
    const options = { intraOpNumThreads: 2, executionProviders: ['cpu'], prefillChunkTokens: 64 };
    built = await LoadedDecoder.load(spec, { ...options, kvAppend: true });
    whole = await LoadedDecoder.load(spec, { ...options, kvAppend: false });
  });
  afterAll(async () => {
    await built?.dispose();
    await whole?.dispose();
  });

  it('are what the engine runs on the generated graph (its presents are Concats of past and new), and say so', () => {
    expect(built.logits.kv).toBe('runs return the positions they add; the engine grows the present KV in place');
    expect(whole.logits.kv).toBeUndefined();
  });

  it('give the tokens and the KV of runs that return the presents whole, through every kind of run', async () => {
    const a = await scenario(built);
    const b = await scenario(whole);
    expect(a.batch).toEqual(b.batch);
    expect(a.joined).toEqual(b.joined);
    expect(a.first).toEqual(b.first);
    expect(a.second).toEqual(b.second);
    expect(a.saved).toEqual(b.saved);
    expect(a.saved.length).toBe(spec.kv.kind === 'dynamic' ? spec.kv.tensors.length : -1);
    expect(a.alone).toEqual(b.alone);
    expect(a.predicted).toEqual(b.predicted);
    expect(a.predicted).toEqual(a.alone);
    // The most KV held: the same, plus the room the buffers keep for the next positions (at most
    // KV_GROWTH_POSITIONS per row).
    expect(a.peak).toBeGreaterThan(b.peak);
    expect(a.peak).toBeLessThanOrEqual(b.peak + built.peakBatchRows * KV_GROWTH_POSITIONS * spec.bpt);
    // What ran: five rows at once (the late one joined), and draft checks cut back after their miss.
    expect(built.peakBatchRows).toBe(5);
    expect(a.lookup?.accepted).toBeGreaterThanOrEqual(5);
    expect(a.lookup?.drafted).toBeGreaterThanOrEqual(2 * (a.lookup?.accepted ?? 0));
  });
});

describe.skipIf(!haveFixtures)(
  `graphs whose attention op writes its present itself${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it('return their presents whole, and the engine says why', async () => {
      const spec = await loadModelSpec(fixture('onnx-genai/tiny-llm'));
      const decoder = await LoadedDecoder.load(spec, { intraOpNumThreads: 2, executionProviders: ['cpu'] });
      try {
        expect(decoder.logits.kv).toBe(
          'runs return the present KV whole: "present.0.key" is not a Concat of "past_key_values.0.key" and the new positions along its sequence axis',
        );
        const ids = await generate(decoder, { rows: [[1, 2, 3, 4]], maxNewTokens: 4 });
        expect(ids[0]).toHaveLength(4);
      } finally {
        await decoder.dispose();
      }
    });
  },
);
