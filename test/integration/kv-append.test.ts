/**
 * Runs that return only the positions they add to the KV (last-position.ts exposes them; the batcher grows its
 * presents in place with kv-cache.ts appendSeq) instead of onnxruntime-node copying every present out whole:
 * on the real engine, every kind of run — a batch whose rows join and leave, chunked prefill, a session turn
 * reusing its KV, lookup decoding's draft checks cut back after a miss — gives the same tokens and the same KV as
 * with the presents returned whole. With room kept after the KV's positions (masked out; appendGap writes the
 * new positions into it), the same tokens and the same KV up to float rounding: the attention's sums run over
 * the masked positions too.
 */

import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { LookupDecoding } from '../../src/main/engine/batcher';
import {
  type GenerationHooks,
  type GenerationJob,
  gapChecked,
  LoadedDecoder,
  type SessionKv,
} from '../../src/main/engine/decoder';
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

/** Every kind of run of two scenarios wrote the same tokens (and a draft check's, plain decoding's). */
function expectSameTokens(a: Awaited<ReturnType<typeof scenario>>, b: Awaited<ReturnType<typeof scenario>>): void {
  expect(a.batch).toEqual(b.batch);
  expect(a.joined).toEqual(b.joined);
  expect(a.first).toEqual(b.first);
  expect(a.second).toEqual(b.second);
  expect(a.alone).toEqual(b.alone);
  expect(a.predicted).toEqual(b.predicted);
  expect(a.predicted).toEqual(a.alone);
}

/** The largest difference between two saved KVs, relative to the largest magnitude in the first. */
function kvGap(a: number[][], b: number[][]): number {
  let scale = 0;
  let worst = 0;
  for (const [i, xs] of a.entries()) {
    const ys = b[i] as number[];
    expect(ys).toHaveLength(xs.length);
    for (const [j, x] of xs.entries()) {
      scale = Math.max(scale, Math.abs(x));
      worst = Math.max(worst, Math.abs(x - (ys[j] as number)));
    }
  }
  return worst / scale;
}

describe('runs that return the positions they add', () => {
  let spec: ModelSpec;
  let built: LoadedDecoder;
  let roomy: LoadedDecoder;
  let whole: LoadedDecoder;
  beforeAll(async () => {
    spec = await loadModelSpec(defaultModelDir);
    const options = { intraOpNumThreads: 2, executionProviders: ['cpu'], prefillChunkTokens: 64 };
    built = await LoadedDecoder.load(spec, { ...options, kvAppend: true, kvGap: false, splitAttention: false });
    roomy = await LoadedDecoder.load(spec, { ...options, kvAppend: true });
    whole = await LoadedDecoder.load(spec, { ...options, kvAppend: false });
  });
  afterAll(async () => {
    await built?.dispose();
    await roomy?.dispose();
    await whole?.dispose();
  });

  it('are what the engine runs on the generated graph (its presents are Concats of past and new), and say so', () => {
    expect(roomy.logits.kv).toBe(
      'runs return the positions they add, which the engine writes into room the KV keeps after its positions (masked out)',
    );
    expect(built.logits.kv).toBe(
      "runs return the positions they add; the engine grows the present KV in place, moving each row's positions (no room after them: turned off)",
    );
    expect(whole.logits.kv).toBeUndefined();
  });

  it('with room after the KV’s positions, give the same tokens and the same KV up to float rounding', async () => {
    const a = await scenario(roomy);
    const b = await scenario(whole);
    expectSameTokens(a, b);
    // The session's KV: its positions only (no room), the values within rounding of the KV built without room.
    expect(a.saved.length).toBe(b.saved.length);
    expect(kvGap(a.saved, b.saved)).toBeLessThan(1e-5);
    expect(roomy.peakBatchRows).toBe(5);
    expect(a.peak).toBeLessThanOrEqual(b.peak + roomy.peakBatchRows * KV_GROWTH_POSITIONS * spec.bpt);
    expect(a.lookup?.accepted).toBeGreaterThanOrEqual(5);
  });

  it('give the tokens and the KV of runs that return the presents whole, through every kind of run', async () => {
    const a = await scenario(built);
    const b = await scenario(whole);
    expectSameTokens(a, b);
    expect(a.saved).toEqual(b.saved);
    expect(a.saved.length).toBe(spec.kv.kind === 'dynamic' ? spec.kv.tensors.length : -1);
    // The most KV held: the same, plus the room the buffers keep for the next positions (at most
    // KV_GROWTH_POSITIONS per row, and none past what the batch as it is can still reach: at its widest, just
    // before its first member leaves, it may hold none).
    expect(a.peak).toBeGreaterThanOrEqual(b.peak);
    expect(a.peak).toBeLessThanOrEqual(b.peak + built.peakBatchRows * KV_GROWTH_POSITIONS * spec.bpt);
    // What ran: five rows at once (the late one joined), and draft checks cut back after their miss.
    expect(built.peakBatchRows).toBe(5);
    expect(a.lookup?.accepted).toBeGreaterThanOrEqual(5);
    expect(a.lookup?.drafted).toBeGreaterThanOrEqual(2 * (a.lookup?.accepted ?? 0));
  });

  it('write a step’s positions into the buffer the last step wrote, alone and in a batch, until its room is used up', async () => {
    if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a dynamic KV');
    const name = spec.kv.tensors[0]?.past as string;
    // The buffer under the first KV input of each run (onnxruntime's own run, watched, not replaced).
    let fed: ArrayBufferLike[] = [];
    const proto = (ort.InferenceSession as unknown as { prototype: ort.InferenceSession }).prototype;
    const run = proto.run;
    const watch = vi.spyOn(proto, 'run').mockImplementation(function (
      this: ort.InferenceSession,
      ...args: Parameters<ort.InferenceSession['run']>
    ) {
      const past = (args[0] as Record<string, ort.Tensor>)[name];
      if (past) fed.push((past.data as Float32Array).buffer);
      return run.apply(this, args);
    });
    try {
      for (const decoder of [roomy, built]) {
        for (const rows of [[prompt(24, 9)], [prompt(24, 9), prompt(24, 10)]]) {
          fed = [];
          // No draft checks: one step per token after the prefill (one run).
          const lookup = decoder.lookup as LookupDecoding;
          const maxDraft = lookup.maxDraft;
          lookup.maxDraft = 0;
          try {
            await Promise.all(rows.map((row) => generate(decoder, { rows: [row], maxNewTokens: 100 })));
          } finally {
            lookup.maxDraft = maxDraft;
          }
          const steps = fed.slice(1);
          expect(steps).toHaveLength(99);
          // A new buffer when the room is used up (every KV_GROWTH_POSITIONS steps), not a copy every step.
          expect(new Set(steps).size).toBeLessThanOrEqual(Math.ceil(99 / KV_GROWTH_POSITIONS) + 1);
        }
      }
    } finally {
      watch.mockRestore();
    }
  });
});

describe('the check at load of a KV with room', () => {
  /** The generated graph as it is (every position scored), and what gapChecked is given: a prefix, then a step. */
  async function probe() {
    const spec = await loadModelSpec(defaultModelDir);
    if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a dynamic KV');
    const kv = spec.kv.tensors;
    const session = await ort.InferenceSession.create(spec.graphPath, { intraOpNumThreads: 2 });
    const ids = [5, 6, 7];
    const long = (xs: number[]) => new ort.Tensor('int64', BigInt64Array.from(xs, BigInt), [1, xs.length]);
    const feeds = (tokens: number[], from: number, past?: ort.InferenceSession.OnnxValueMapType) => {
      const f: Record<string, ort.Tensor> = {
        input_ids: long(tokens),
        attention_mask: long(Array(from + tokens.length).fill(1)),
        position_ids: long(tokens.map((_, i) => from + i)),
      };
      for (const t of kv) {
        f[t.past] =
          (past?.[t.present] as ort.Tensor | undefined) ??
          new ort.Tensor('float32', new Float32Array(0), [1, t.shape[1] as number, 0, t.shape[3] as number]);
      }
      return f;
    };
    const prefix = await session.run(feeds(ids.slice(0, 2), 0));
    const stepped = (await session.run(feeds(ids.slice(2), 2, prefix))).logits as ort.Tensor;
    return { spec, kv, session, ids, prefix, stepped };
  }

  it('passes a graph that masks the room out, and refuses one that attends to it or numbers positions itself', async () => {
    const { spec, kv, session, ids, prefix, stepped } = await probe();
    try {
      const run = (feeds: Record<string, ort.Tensor>) => session.run(feeds);
      expect(await gapChecked(run, spec, kv, ids, prefix, stepped)).toBeNull();
      // The same graph made to attend to every position it is fed (its mask all ones): the room counts.
      const unmasked = (feeds: Record<string, ort.Tensor>) => {
        const mask = feeds.attention_mask as ort.Tensor;
        return session.run({
          ...feeds,
          attention_mask: new ort.Tensor('int64', new BigInt64Array(mask.data.length).fill(1n), mask.dims),
        });
      };
      expect(await gapChecked(unmasked, spec, kv, ids, prefix, stepped)).toMatch(
        /^a step with room scored differently \(by [0-9.e-]+ of the scores' scale\)$/,
      );
      const { positionIds: _, ...noPositions } = spec.ports;
      expect(await gapChecked(run, { ...spec, ports: noPositions }, kv, ids, prefix, stepped)).toBe(
        'the graph has no position_ids input, so it would number positions after the room',
      );
    } finally {
      await session.release();
    }
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
