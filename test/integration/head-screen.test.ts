/**
 * The LM head's 8-bit screen on the real onnxruntime-node (DynamicQuantizeMatMul):
 * greedy steps whose rows all pick plainly score the vocabulary with the 8-bit
 * copy and pick exactly from it; every other run scores in full. The tokens are
 * those of the head scored in full, on every head layout the generator writes
 * (a MatMul plus a bias, a tied Gemm with C), alone, in a batch, next to a
 * sampled request, and through lookup decoding's draft checks.
 */

import { onnx } from 'onnx-proto';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import type { GenerationHooks, GenerationJob } from '../../src/main/engine/decoder';
import { LoadedDecoder, scoringLast } from '../../src/main/engine/decoder';
import {
  buildHeadScreen,
  exactDraw,
  exactPick,
  exactTopK,
  exactTopP,
  NucleusScratch,
  TopKScratch,
  worstBoundShare,
} from '../../src/main/engine/head-screen';
import { tokenTable } from '../../src/main/engine/json-constraint';
import { lastPositionGraph } from '../../src/main/engine/last-position';
import type { EngineSessionOptions } from '../../src/main/engine/protocol';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import type { ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir, fixture, haveFixtures } from '../helpers/fixtures';
import { GREEDY, greedyIds } from '../helpers/generation';
import { generatedModel } from '../helpers/models';
import { firstRunFeeds } from '../helpers/oracle';

const ENGINE: EngineSessionOptions = { intraOpNumThreads: 2, executionProviders: ['cpu'], lookupDraftTokens: 0 };

function prompt(length: number, seed: number, vocab: number): number[] {
  return Array.from({ length }, (_, i) => 3 + ((i * 37 + seed * 11) % (vocab - 3)));
}

/** A model whose vocabulary is large enough for the screen by default (4096), small otherwise. */
const bigVocab = () =>
  generatedModel('screen-4096', { vocabSize: 4096, hiddenSize: 64, numLayers: 2, intermediateSize: 128 });
const tiedGpt2 = () =>
  generatedModel('screen-tied-gpt2', {
    architecture: 'gpt2',
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 4,
    vocabSize: 4096,
    tieWordEmbeddings: true,
  });

async function both(spec: ModelSpec, options: Partial<EngineSessionOptions> = {}) {
  const screened = await LoadedDecoder.load(spec, { ...ENGINE, headScreen: 'always', ...options });
  const full = await LoadedDecoder.load(spec, { ...ENGINE, headScreen: false, ...options });
  return { screened, full, dispose: () => Promise.all([screened.dispose(), full.dispose()]) };
}

/** Hooks of a one-row request that collect its ids into `into`. */
const collecting = (into: number[]): GenerationHooks => ({
  onStart: () => {},
  onStep: (ids) => {
    if ((ids[0] as number) >= 0) into.push(ids[0] as number);
  },
  stopRequested: () => null,
  countRun: () => {},
});

/**
 * Runs a sampled `job` of 40 tokens alone on a fresh screened decoder and checks it drew from the screen (every
 * decode step; the prefill's draw from full scores) and drew, not picked (a greedy reply of its prompt differs).
 */
async function drawnAlone(d: LoadedDecoder, job: GenerationJob): Promise<number[]> {
  const alone: number[] = [];
  await d.generate(job, collecting(alone));
  expect(d.screenStats).toMatchObject({ screenedDraws: 39, fullDraws: 1, screenedPicks: 0, fullPicks: 0 });
  expect(alone).toHaveLength(40);
  expect(alone).not.toEqual((await greedy(d, job.rows, 40))[0]);
  return alone;
}

/**
 * Runs `job` on `d` and on `full` (a decoder without a screen), checks that they give the same tokens, and returns
 * how many of `d`'s draws came from the screen and how many from full scores.
 */
async function drawsLikeUnscreened(d: LoadedDecoder, full: LoadedDecoder, job: GenerationJob) {
  const before = { ...d.screenStats };
  const ids: number[] = [];
  await d.generate(job, collecting(ids));
  const unscreenedIds: number[] = [];
  await full.generate(job, collecting(unscreenedIds));
  expect(ids).toEqual(unscreenedIds);
  return {
    screened: d.screenStats.screenedDraws - before.screenedDraws,
    full: d.screenStats.fullDraws - before.fullDraws,
  };
}

/**
 * `job`'s reply is `alone` (its reply from the screen) beside a request scored in full (every step they share scores
 * in full) and from `full`, a decoder without a screen.
 */
async function expectSameInFullAndUnscreened(
  d: LoadedDecoder,
  full: LoadedDecoder,
  job: GenerationJob,
  alone: number[],
) {
  const beside = await besideUnscreened(d, job, d.spec.vocabSize);
  expect(beside.ids).toEqual(alone);
  expect(beside.fullDraws).toBeGreaterThanOrEqual(30);
  const unscreened: number[] = [];
  await full.generate(job, collecting(unscreened));
  expect(unscreened).toEqual(alone);
}

/** A sampled request that asks for logprobs, which the screen never serves: every step it shares scores in full. */
const unscreened = (vocab: number): GenerationJob => ({
  rows: [prompt(12, 6, vocab)],
  maxNewTokens: 60,
  sampling: { ...GREEDY, greedy: false, temperature: 1, topP: 0.95, seed: 9 },
  eosTokenIds: [],
  logprobs: 1,
});

/**
 * Runs `job` beside a request the screen never serves (unscreened), so every step the two share scores in full: the
 * job's ids, and the draws its full-score steps made.
 */
async function besideUnscreened(d: LoadedDecoder, job: GenerationJob, vocab: number) {
  const wide = unscreened(vocab);
  const before = d.screenStats.fullDraws;
  const ids: number[] = [];
  await Promise.all([d.generate(wide, collecting([])), d.generate(job, collecting(ids))]);
  return { ids, fullDraws: d.screenStats.fullDraws - before };
}

/** onnxruntime's DynamicQuantizeMatMul of a screen's 8-bit head alone: input h [rows, hidden], output y [rows, vocab]. */
async function productSession(built: ReturnType<typeof buildHeadScreen>): Promise<ort.InferenceSession> {
  const { vocab, hidden } = built.screen;
  const model = onnx.ModelProto.encode({
    irVersion: 8,
    opsetImport: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
    ],
    graph: {
      name: 'screen',
      node: [{ opType: 'DynamicQuantizeMatMul', domain: 'com.microsoft', input: ['h', 'q', 's'], output: ['y'] }],
      initializer: [
        { name: 'q', dataType: 3, dims: [hidden, vocab], rawData: new Uint8Array(built.head.packed.buffer) },
        { name: 's', dataType: 1, dims: [vocab], rawData: new Uint8Array(built.head.scales.buffer) },
      ],
      input: [
        {
          name: 'h',
          type: { tensorType: { elemType: 1, shape: { dim: [{ dimParam: 'rows' }, { dimValue: hidden }] } } },
        },
      ],
      output: [
        {
          name: 'y',
          type: { tensorType: { elemType: 1, shape: { dim: [{ dimParam: 'rows' }, { dimValue: vocab }] } } },
        },
      ],
    },
  }).finish();
  return ort.InferenceSession.create(model, { intraOpNumThreads: 2 });
}

const greedy = (d: LoadedDecoder, rows: number[][], n: number) =>
  greedyIds((job, hooks) => d.generate(job, hooks), rows, n);

describe("the LM head's 8-bit screen", () => {
  it.each([
    ['a MatMul head plus a bias (the default model)', () => defaultModelDir],
    ['a tied Gemm head with C (GPT-2 layout)', tiedGpt2],
    ['a vocabulary of 4096', bigVocab],
  ])('%s: greedy tokens are those of the full head, alone and in a batch', async (_, dir) => {
    const spec = await loadModelSpec(dir());
    const { screened, full, dispose } = await both(spec);
    try {
      expect(screened.logits.screen).toMatch(
        /^greedy picks and draws \(top-k, top-p, min-p or whole-vocabulary\) from an 8-bit copy of the LM head/,
      );
      expect(full.logits.screen).toBeUndefined();
      const rows = [prompt(40, 1, spec.vocabSize), prompt(23, 2, spec.vocabSize), prompt(9, 3, spec.vocabSize)];
      expect(await greedy(screened, rows, 40)).toEqual(await greedy(full, rows, 40));
      expect(await greedy(screened, [rows[0] as number[]], 60)).toEqual(await greedy(full, [rows[0] as number[]], 60));
      // Every decode step was screened, the batch's and the lone row's; each prefill's picks are made from full
      // scores (the prompt's last position is scored with the head as written).
      expect(screened.screenStats.screenedPicks).toBe(3 * 39 + 59);
      expect(screened.screenStats.fullPicks).toBe(3 + 1);
      expect(full.screenStats).toEqual({
        screenedPicks: 0,
        fullPicks: 0,
        screenedDraws: 0,
        fullDraws: 0,
        candidates: 0,
      });
    } finally {
      await dispose();
    }
  });

  it('screens by default only a vocabulary of 4096 or more, and never when KVDESK_HEAD_SCREEN=0', async () => {
    const small = await LoadedDecoder.load(await loadModelSpec(defaultModelDir), { ...ENGINE });
    const big = await LoadedDecoder.load(await loadModelSpec(bigVocab()), { ...ENGINE });
    process.env.KVDESK_HEAD_SCREEN = '0';
    const off = await LoadedDecoder.load(await loadModelSpec(bigVocab()), { ...ENGINE });
    delete process.env.KVDESK_HEAD_SCREEN;
    try {
      expect(small.logits.screen).toBe('the LM head is scored in full: a vocabulary of 512 is scored in full faster');
      expect(big.logits.screen).toBe(
        'greedy picks and draws (top-k, top-p, min-p or whole-vocabulary) from an 8-bit copy of the LM head, checked exactly (4096 × 64)',
      );
      expect(off.logits.screen).toBeUndefined();
    } finally {
      await Promise.all([small.dispose(), big.dispose(), off.dispose()]);
    }
  });

  it('a greedy request next to one asking for logprobs (not screened) picks from full scores what it picks alone from the screen', async () => {
    const spec = await loadModelSpec(bigVocab());
    const d = await LoadedDecoder.load(spec, { ...ENGINE, headScreen: true });
    try {
      const a = prompt(30, 5, spec.vocabSize);
      const alone = await greedy(d, [a], 30);
      const before = { ...d.screenStats };
      const sampledIds: number[] = [];
      const sampled = unscreened(spec.vocabSize);
      const greedyIdsNext: number[] = [];
      const job: GenerationJob = { rows: [a], maxNewTokens: 30, sampling: GREEDY, eosTokenIds: [] };
      await Promise.all([d.generate(sampled, collecting(sampledIds)), d.generate(job, collecting(greedyIdsNext))]);
      expect(greedyIdsNext).toEqual(alone[0]);
      // Its steps beside the sampled request were picked from full scores.
      expect(d.screenStats.fullPicks - before.fullPicks).toBeGreaterThanOrEqual(25);
      expect(sampledIds).toHaveLength(60);
    } finally {
      await d.dispose();
    }
  });

  it('a top-k draw takes the exact top k from the screen: the same tokens alone, beside a request scored in full, and unscreened', async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened: d, full, dispose } = await both(spec);
    try {
      const job: GenerationJob = {
        rows: [prompt(20, 7, spec.vocabSize)],
        maxNewTokens: 40,
        sampling: { ...GREEDY, greedy: false, temperature: 0.8, topK: 40, seed: 5 },
        eosTokenIds: [],
      };
      const alone = await drawnAlone(d, job);
      // Beside a request asking for logprobs (not screened), every step scores in full: the same tokens.
      // Without a screen (a GPU, KVDESK_HEAD_SCREEN=0), the sampler orders the top k as the screen's exact top k
      // is ordered, the likeliest first: the same random numbers draw the same tokens.
      await expectSameInFullAndUnscreened(d, full, job, alone);
      // With top-p among them too (the nucleus is ordered the same way either way).
      const nucleus = { ...job, sampling: { ...job.sampling, topP: 0.9 } };
      const fromScreen: number[] = [];
      const fromFull: number[] = [];
      await d.generate(nucleus, collecting(fromScreen));
      await full.generate(nucleus, collecting(fromFull));
      expect(fromFull).toEqual(fromScreen);
      expect(fromScreen).not.toEqual(alone);
    } finally {
      await dispose();
    }
  });

  it('a min-p draw takes the tokens it can keep from the screen: the same tokens alone, beside a request scored in full, and unscreened', async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened: d, full, dispose } = await both(spec);
    try {
      const job: GenerationJob = {
        rows: [prompt(20, 9, spec.vocabSize)],
        maxNewTokens: 40,
        sampling: { ...GREEDY, greedy: false, temperature: 1, minP: 0.1, seed: 21 },
        eosTokenIds: [],
      };
      const alone = await drawnAlone(d, job);
      // It scored exactly only the tokens min-p can keep (and a few near them), not the vocabulary.
      expect(d.screenStats.candidates / 40).toBeLessThan(spec.vocabSize / 20);
      // At least its best token each draw (the counter the bench reports as tokens scored again).
      expect(d.screenStats.candidates).toBeGreaterThanOrEqual(40);
      // Without a screen the sampler draws over the float32 scores of the whole vocabulary: the same tokens.
      await expectSameInFullAndUnscreened(d, full, job, alone);
      // A min-p that keeps most of the vocabulary (a flat row: temperature 50) scores every token exactly; its sampler
      // then draws from full scores for 8 draws, tries the screen, then 16 more, and so on: 2 draws of 40 from the
      // screen, the prefill's and the rest from full scores, the same tokens as without a screen.
      const flat = { ...job, sampling: { ...job.sampling, temperature: 50, minP: 0.001 } };
      expect(await drawsLikeUnscreened(d, full, flat)).toEqual({ screened: 2, full: 38 });
    } finally {
      await dispose();
    }
  });

  it('a top-p draw takes its nucleus from the screen while the last one fit it: the same tokens alone, beside a request scored in full, and unscreened', async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened: d, full, dispose } = await both(spec);
    try {
      const job: GenerationJob = {
        rows: [prompt(20, 4, spec.vocabSize)],
        maxNewTokens: 40,
        sampling: { ...GREEDY, greedy: false, temperature: 0.6, topP: 0.9, seed: 17 },
        eosTokenIds: [],
      };
      const alone = await drawnAlone(d, job);
      // It scored exactly the tokens whose weight decides the nucleus (about 680 a draw here), not the vocabulary.
      expect(d.screenStats.candidates / 39).toBeLessThan(spec.vocabSize / 4);
      // Without a screen the sampler sorts the float32 scores of the whole vocabulary into its nucleus: the same tokens.
      await expectSameInFullAndUnscreened(d, full, job, alone);
      // A nucleus of most of the vocabulary (a flat distribution) does not fit: its draws are from full scores.
      const flat = { ...job, sampling: { ...job.sampling, temperature: 50 } };
      expect(await drawsLikeUnscreened(d, full, flat)).toEqual({ screened: 0, full: 40 });
    } finally {
      await dispose();
    }
  });

  it("penalties and a logit bias change the screen's scores as they change full ones: the same tokens screened, beside a request scored in full, and unscreened", async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened: d, full, dispose } = await both(spec);
    try {
      const rows = [prompt(20, 10, spec.vocabSize)];
      const plain = (await greedy(full, rows, 40))[0] as number[];
      // The plain greedy reply's commonest token, banned; another one forced up a little.
      const counts = new Map<number, number>();
      for (const id of plain) counts.set(id, (counts.get(id) ?? 0) + 1);
      const banned = [...counts].sort((a, b) => b[1] - a[1])[0]?.[0] as number;
      const nudged = plain.find((id) => id !== banned) as number;
      const logitBias: Array<[number, number]> = [
        [banned, -100],
        [nudged, 0.5],
      ];
      const jobs: GenerationJob['sampling'][] = [
        { ...GREEDY, repetitionPenalty: 1.3, presencePenalty: 0.5 },
        {
          ...GREEDY,
          greedy: false,
          temperature: 0.8,
          topK: 40,
          repetitionPenalty: 1.2,
          frequencyPenalty: 0.3,
          logitBias,
          seed: 3,
        },
        { ...GREEDY, greedy: false, temperature: 0.7, repetitionPenalty: 1.1, logitBias, seed: 4 },
      ];
      for (const sampling of jobs) {
        const job: GenerationJob = { rows, maxNewTokens: 40, sampling, eosTokenIds: [] };
        const before = { ...d.screenStats };
        const screenedIds: number[] = [];
        await d.generate(job, collecting(screenedIds));
        const screenedSteps =
          d.screenStats.screenedPicks - before.screenedPicks + d.screenStats.screenedDraws - before.screenedDraws;
        expect(screenedSteps).toBe(39);
        expect(screenedIds).not.toEqual(plain);
        if (sampling.logitBias) expect(screenedIds).not.toContain(banned);
        const unscreened: number[] = [];
        await full.generate(job, collecting(unscreened));
        expect(unscreened).toEqual(screenedIds);
        const beside = await besideUnscreened(d, job, spec.vocabSize);
        expect(beside.ids).toEqual(screenedIds);
      }
    } finally {
      await dispose();
    }
  });

  it('JSON mode picks and draws from the screen: a token the constraint refuses is picked or drawn again from the scores it masks, the same tokens as unscreened', async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened: d, full, dispose } = await both(spec);
    try {
      // A token table over the vocabulary: JSON's pieces, words and digits (the random model writes anything: most
      // of its first picks are refused), and one token that closes an object, so that replies run on.
      const words = ['{', '"', ':', ',', ' ', '[', ']', 'a', 'key', '1', '2.5', 'true', 'null', '-', 'x y', '"k"'];
      const piece = (n: number) => (n === 1 ? '}' : (words[n % words.length] as string));
      const pieces = Array.from({ length: spec.vocabSize }, (_, n) => [...Buffer.from(piece(n))]);
      const json = { table: tokenTable(pieces, []), json: true };
      const text = (ids: number[]) => ids.map(piece).join('');
      const rows = [prompt(20, 11, spec.vocabSize)];
      const samplings: GenerationJob['sampling'][] = [
        GREEDY,
        { ...GREEDY, greedy: false, temperature: 0.8, topK: 40, seed: 5 },
        { ...GREEDY, greedy: false, temperature: 0.7, seed: 6 },
        { ...GREEDY, greedy: false, temperature: 1, minP: 0.1, repetitionPenalty: 1.2, seed: 7 },
      ];
      let tokens = 0;
      for (const sampling of samplings) {
        const job: GenerationJob = { rows, maxNewTokens: 40, sampling, eosTokenIds: [], json };
        const before = { ...d.screenStats };
        const screenedIds: number[] = [];
        await d.generate(job, collecting(screenedIds));
        const screenedSteps =
          d.screenStats.screenedPicks - before.screenedPicks + d.screenStats.screenedDraws - before.screenedDraws;
        expect(screenedSteps).toBe(screenedIds.length - 1);
        tokens += screenedIds.length;
        // JSON (greedy closes its object at once: `{}`).
        expect(text(screenedIds)).toMatch(/^\{/);
        const unscreened: number[] = [];
        await full.generate(job, collecting(unscreened));
        expect(unscreened).toEqual(screenedIds);
        // A pick or draw again over masked scores scores about as many tokens as the first (3 a greedy pick, 64 a
        // top-40 draw, 164 this min-p draw): the refused tokens' −∞ widen no bound (they did: 500–1400 a token).
        expect((d.screenStats.candidates - before.candidates) / screenedIds.length).toBeLessThan(300);
      }
      expect(tokens).toBeGreaterThan(40);
    } finally {
      await dispose();
    }
  });

  it('a draw over the whole vocabulary by temperature alone comes from the screen: the same tokens alone, beside a request scored in full, and unscreened', async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened: d, full, dispose } = await both(spec);
    try {
      const job: GenerationJob = {
        rows: [prompt(20, 8, spec.vocabSize)],
        maxNewTokens: 40,
        sampling: { ...GREEDY, greedy: false, temperature: 0.7, seed: 12 },
        eosTokenIds: [],
      };
      const alone = await drawnAlone(d, job);
      // Another seed, another reply.
      const other: number[] = [];
      await d.generate({ ...job, sampling: { ...job.sampling, seed: 13 } }, collecting(other));
      expect(other).not.toEqual(alone);
      // Beside a request asking for logprobs (not screened), every step scores in full: the same tokens.
      // Without a screen, the sampler draws the same way from the float32 scores: the same tokens.
      await expectSameInFullAndUnscreened(d, full, job, alone);
    } finally {
      await dispose();
    }
  });

  it('counts the memory it holds beside the weights in the KV budget', async () => {
    const runner = new RunnerService({ intraOpNumThreads: 2 });
    try {
      const info = await runner.loadModel(bigVocab());
      const bytes = info.logits.screenBytes ?? 0;
      // At least its 8-bit head: one byte per weight.
      expect(bytes).toBeGreaterThanOrEqual(4096 * 64);
      expect(runner.snapshot().devices[0]?.derivation.weightsBytes).toBe(info.spec.weightsBytes + bytes);
    } finally {
      await runner.close();
    }
  });

  it("lookup decoding's draft checks pick and draw as plain steps do", async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened, full, dispose } = await both(spec, { lookupDraftTokens: 4 });
    try {
      const row = prompt(24, 9, spec.vocabSize);
      const plain = await greedy(full, [row], 40);
      // Given the reply as a prediction (a Predicted Outputs request), every check's draft is right: each check
      // scores five positions at once, screened.
      const ids: number[] = [];
      const outcome = await screened.generate(
        { rows: [row], maxNewTokens: 40, sampling: GREEDY, eosTokenIds: [], prediction: plain[0] as number[] },
        collecting(ids),
      );
      expect(ids).toEqual(plain[0]);
      expect(outcome.lookup?.accepted).toBeGreaterThanOrEqual(20);
      expect(screened.screenStats.screenedPicks).toBeGreaterThanOrEqual(39);
      // A seeded draw by temperature alone: each position of a check draws with the next key, as plain steps do,
      // so the reply given itself as the prediction is the same, and most of it comes from drafts.
      const job: GenerationJob = {
        rows: [row],
        maxNewTokens: 40,
        sampling: { ...GREEDY, greedy: false, temperature: 0.7, seed: 4 },
        eosTokenIds: [],
      };
      const drawn: number[] = [];
      await full.generate(job, collecting(drawn));
      expect(drawn).not.toEqual(plain[0]);
      const again: number[] = [];
      const checked = await screened.generate({ ...job, prediction: drawn }, collecting(again));
      expect(again).toEqual(drawn);
      expect(checked.lookup?.accepted).toBeGreaterThanOrEqual(20);
    } finally {
      await dispose();
    }
  });

  it("every screened score lies within its bound of the full head's, step after step", async () => {
    const spec = await loadModelSpec(tiedGpt2());
    const rewrite = lastPositionGraph(spec.graphPath, spec.ports.logits.name, { screen: true });
    if (!rewrite.ok || !rewrite.screen) throw new Error(rewrite.ok ? rewrite.screenReason : rewrite.reason);
    const screen = rewrite.screen;
    const session = await ort.InferenceSession.create(rewrite.bytes, {
      intraOpNumThreads: 2,
      graphOptimizationLevel: 'all',
      extra: { session: { model_external_initializers_file_folder_path: rewrite.folder } },
    });
    try {
      const name = spec.ports.logits.name;
      let ids = prompt(20, 4, spec.vocabSize);
      let candidates = 0;
      const top = new TopKScratch();
      for (let step = 0; step < 12; step++) {
        const feeds = () => scoringLast(firstRunFeeds(spec, [ids]), rewrite.startsInput);
        const full = await session.run({
          ...feeds(),
          [screen.fullInput]: new ort.Tensor('bool', Uint8Array.of(1), []),
        });
        const cut = await session.run({ ...feeds(), [screen.fullInput]: new ort.Tensor('bool', Uint8Array.of(0), []) });
        const h = cut[screen.hiddenOutput]?.data as Float32Array;
        const s = cut[name]?.data as Float32Array;
        const f = full[name]?.data as Float32Array;
        expect(worstBoundShare(screen.data, s, f, h)).toBeLessThanOrEqual(1);
        const stats = { candidates: 0 };
        const pick = exactPick(screen.data, s, 0, h, 0, true, spec.vocabSize, stats);
        expect(pick).toBe(exactPick(screen.data, f, 0, h, 0, false, spec.vocabSize));
        // The exact top 50 too, from either kind of scores.
        const fromScreen = exactTopK(screen.data, s, 0, h, 0, true, 50, top, spec.vocabSize);
        const screenedTop = [...top.ids.subarray(0, fromScreen)];
        const fromFull = exactTopK(screen.data, f, 0, h, 0, false, 50, top, spec.vocabSize);
        expect(fromScreen).toBe(50);
        expect([...top.ids.subarray(0, fromFull)]).toEqual(screenedTop);
        candidates = Math.max(candidates, stats.candidates);
        ids = [...ids, pick];
      }
      // The screen rules out almost all of the vocabulary (else it would cost more than it saves).
      expect(candidates).toBeLessThan(spec.vocabSize / 16);
    } finally {
      await session.release();
    }
  });

  it("onnxruntime's DynamicQuantizeMatMul adds the screen's integer products exactly where they are widest", async () => {
    // Rows of equal weights (|q| = SCREEN_Q_MAX everywhere) and hidden states whose every entry rounds to 0 or 255:
    // each u8 × s8 pair of products is as large as it can be. With 8-bit weights the kernel's 16-bit pair sums clip
    // on a CPU without VNNI (AVX2 alone), and the scores leave their bounds (41 times over, measured).
    const vocab = 8;
    const hidden = 256;
    const w = new Float32Array(vocab * hidden);
    for (let n = 0; n < vocab; n++) {
      for (let k = 0; k < hidden; k++)
        w[n * hidden + k] = (n % 2 === 0 ? 1 : -1) * (n < 4 ? 0.5 : k % 2 === 0 ? 2 : -2);
    }
    const built = buildHeadScreen(w, 'vocab-major', vocab, hidden, null);
    const session = await productSession(built);
    try {
      const states = [
        new Float32Array(hidden).fill(3),
        Float32Array.from({ length: hidden }, (_, k) => (k % 2 === 0 ? 3 : 0)),
        Float32Array.from({ length: hidden }, (_, k) => (k % 2 === 0 ? 3 : -3)),
        Float32Array.from({ length: hidden }, (_, k) => Math.sin(k) * 5),
      ];
      for (const h of states) {
        const out = await session.run({ h: new ort.Tensor('float32', h, [1, hidden]) });
        const full = new Float32Array(vocab);
        for (let n = 0; n < vocab; n++) {
          let sum = 0;
          for (let k = 0; k < hidden; k++) sum += (h[k] as number) * (w[n * hidden + k] as number);
          full[n] = sum;
        }
        expect(worstBoundShare(built.screen, out.y?.data as Float32Array, full, h)).toBeLessThanOrEqual(1);
      }
    } finally {
      await session.release();
    }
  });

  it("onnxruntime's DynamicQuantizeMatMul rounds every row of a run with one step: each row's bound holds beside rows far larger", async () => {
    const vocab = 300;
    const hidden = 96;
    const w = Float32Array.from({ length: vocab * hidden }, (_, i) => Math.sin(i * 0.37) * 0.2);
    const bias = Float32Array.from({ length: vocab }, (_, n) => Math.cos(n) * 0.1);
    const built = buildHeadScreen(w, 'vocab-major', vocab, hidden, bias);
    const session = await productSession(built);
    try {
      // A row of entries up to 0.01 beside rows up to 50 and 1: its entries are rounded in the large row's steps (to
      // 0 here), far more than its own range would round them.
      const sizes = [0.01, 50, 1];
      const states = new Float32Array(sizes.length * hidden);
      sizes.forEach((size, r) => {
        for (let k = 0; k < hidden; k++) states[r * hidden + k] = Math.sin(k * 1.3 + r) * size;
      });
      const out = await session.run({ h: new ort.Tensor('float32', states, [sizes.length, hidden]) });
      const screened = out.y?.data as Float32Array;
      for (let r = 0; r < sizes.length; r++) {
        const full = new Float32Array(vocab);
        for (let n = 0; n < vocab; n++) {
          let sum = 0;
          for (let k = 0; k < hidden; k++) sum += (states[r * hidden + k] as number) * (w[n * hidden + k] as number);
          full[n] = sum;
          screened[r * vocab + n] = (screened[r * vocab + n] as number) + (bias[n] as number);
        }
        const mine = screened.subarray(r * vocab, (r + 1) * vocab);
        expect(worstBoundShare(built.screen, mine, full, states, r * hidden)).toBeLessThanOrEqual(1);
        expect(exactPick(built.screen, screened, r * vocab, states, r * hidden, true)).toBe(
          exactPick(built.screen, full, 0, states, r * hidden, false),
        );
      }
      // The premise: beside the row up to 50 every entry of the small row rounded to 0 (its scores are the bias
      // alone), where alone its own steps keep it.
      expect([...screened.subarray(0, vocab)]).toEqual([...bias]);
      const alone = await session.run({ h: new ort.Tensor('float32', states.slice(0, hidden), [1, hidden]) });
      const own = alone.y?.data as Float32Array;
      expect([...own].filter((v) => v !== 0).length).toBeGreaterThan(vocab / 2);
    } finally {
      await session.release();
    }
  });

  it("a row beside one that overflowed chooses as from full scores, though onnxruntime's product of the run is all NaN", async () => {
    const vocab = 300;
    const hidden = 64;
    const w = Float32Array.from({ length: vocab * hidden }, (_, i) => Math.sin(i * 0.37) * 0.2);
    const built = buildHeadScreen(w, 'vocab-major', vocab, hidden, null);
    const session = await productSession(built);
    try {
      for (const [at, bad] of [
        [3, Number.POSITIVE_INFINITY],
        [40, Number.NEGATIVE_INFINITY],
        [hidden - 1, Number.NaN],
      ] as const) {
        const states = new Float32Array(2 * hidden);
        for (let k = 0; k < hidden; k++) {
          states[k] = Math.sin(k * 1.3);
          states[hidden + k] = Math.cos(k);
        }
        states[hidden + at] = bad;
        const out = await session.run({ h: new ort.Tensor('float32', states, [2, hidden]) });
        const screened = out.y?.data as Float32Array;
        // The premise: one step for the whole input, not a number, and every score of the sound row with it.
        expect(screened.subarray(0, vocab).every((v) => Number.isNaN(v))).toBe(true);
        const full = new Float32Array(vocab);
        for (let n = 0; n < vocab; n++) {
          let sum = 0;
          for (let k = 0; k < hidden; k++) sum += (states[k] as number) * (w[n * hidden + k] as number);
          full[n] = sum;
        }
        const s = built.screen;
        expect(exactPick(s, screened, 0, states, 0, true)).toBe(exactPick(s, full, 0, states, 0, false));
        expect(exactDraw(s, screened, 0, states, 0, true, 0.8, 7)).toBe(
          exactDraw(s, full, 0, states, 0, false, 0.8, 7),
        );
        const a = new TopKScratch();
        const b = new TopKScratch();
        const m = exactTopK(s, screened, 0, states, 0, true, 5, a);
        expect(m).toBe(5);
        expect(exactTopK(s, full, 0, states, 0, false, 5, b)).toBe(5);
        expect([...a.ids]).toEqual([...b.ids]);
        const p = new NucleusScratch();
        const q = new NucleusScratch();
        const np = exactTopP(s, screened, 0, states, 0, true, 1, 0.9, p);
        expect(np).toBeGreaterThan(0);
        expect(np).toBe(exactTopP(s, full, 0, states, 0, false, 1, 0.9, q));
        expect([...p.ids.subarray(0, np)]).toEqual([...q.ids.subarray(0, np)]);
        // The row that overflowed: nothing to choose (the engine fails its request alone).
        expect(exactPick(s, screened, vocab, states, hidden, true)).toBe(-1);
      }
    } finally {
      await session.release();
    }
  });

  it("a lookup check's later positions draw from the screen after an earlier one leaves it for the next step", async () => {
    const spec = await loadModelSpec(bigVocab());
    const { screened, full, dispose } = await both(spec, { lookupDraftTokens: 4 });
    try {
      // Hot draws over a flat distribution: a nucleus that takes more than NUCLEUS_SCREEN_MAX tokens to find, or a
      // min-p draw that scores more than SCREEN_DRAW_MOST, sends the sampler's next draw to full scores, but the
      // positions after it in the same check were scored by the screen. Given the full decoder's reply as the
      // prediction, every check's draft is right: the same reply, most of it from drafts.
      for (const sampling of [
        { ...GREEDY, greedy: false, temperature: 3, topP: 0.9, seed: 2 },
        { ...GREEDY, greedy: false, temperature: 6, minP: 0.001, seed: 3 },
      ]) {
        const job: GenerationJob = {
          rows: [prompt(24, 2, spec.vocabSize)],
          maxNewTokens: 40,
          sampling,
          eosTokenIds: [],
        };
        const drawn: number[] = [];
        await full.generate(job, collecting(drawn));
        const before = { ...screened.screenStats };
        const again: number[] = [];
        const checked = await screened.generate({ ...job, prediction: drawn }, collecting(again));
        expect(again).toEqual(drawn);
        expect(checked.lookup?.accepted).toBeGreaterThanOrEqual(20);
        // Some of its draws from the screen (a check's positions, and steps while the sampler does not rest).
        expect(screened.screenStats.screenedDraws - before.screenedDraws).toBeGreaterThan(3);
      }
    } finally {
      await dispose();
    }
  });

  it.skipIf(!haveFixtures)(
    'a real export (onnxruntime-genai/tiny-random-gpt2-fp32): the same tokens screened',
    async () => {
      const spec = await loadModelSpec(fixture('onnxruntime-genai/tiny-random-gpt2-fp32'));
      const { screened, full, dispose } = await both(spec);
      try {
        expect(screened.logits.screen).toMatch(/^greedy picks/);
        const rows = [prompt(16, 1, spec.vocabSize), prompt(7, 2, spec.vocabSize)];
        expect(await greedy(screened, rows, 30)).toEqual(await greedy(full, rows, 30));
      } finally {
        await dispose();
      }
    },
  );
});
