/**
 * The head's 8-bit screen (src/main/engine/head-screen.ts): whatever the
 * weights and the hidden state, the pick from screened scores is the argmax of
 * the exact scores. The screened scores here are computed as onnxruntime's
 * DynamicQuantizeMatMul computes them (the hidden state rounded to uint8,
 * integer products with the 7-bit weights, scaled); the integration test
 * (test/integration/head-screen.test.ts) runs the real kernel.
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  buildHeadScreen,
  exactDraw,
  exactMinP,
  exactPick,
  exactTopK,
  exactTopP,
  FileRows,
  MemoryRows,
  NucleusScratch,
  nucleusFits,
  PickScratch,
  SCREEN_Q_MAX,
  type ScoreAdjust,
  screenedBound,
  TopKScratch,
  worstBoundShare,
} from '../../../src/main/engine/head-screen';
import type { SamplingParams } from '../../../src/main/engine/protocol';
import { Sampler, SCREEN_TOP_K } from '../../../src/main/engine/sampling';
import { plainGumbelMax } from '../../helpers/gumbel-max';

/**
 * DynamicQuantizeMatMul on the hidden states of a run, one row after another in `h`: every state rounded to uint8
 * with one zero point and one step (the range of all of them / 255), integer products with the int8 weights, scaled
 * by the step times the token's scale. The scores of each row, one after another.
 */
function screenedScores(
  built: ReturnType<typeof buildHeadScreen>,
  h: Float32Array,
  bias: Float32Array | null,
): Float32Array {
  const { vocab, hidden } = built.screen;
  const { packed, scales } = built.head;
  let lo = 0;
  let hi = 0;
  for (const x of h) {
    lo = Math.min(lo, x);
    hi = Math.max(hi, x);
  }
  const step = hi === lo ? 1 : Math.fround((hi - lo) / 255);
  const zero = Math.min(255, Math.max(0, Math.round(-lo / step)));
  const qa = Int32Array.from(h, (x) => Math.min(255, Math.max(0, Math.round(x / step) + zero)) - zero);
  const rows = h.length / hidden;
  const out = new Float32Array(rows * vocab);
  for (let r = 0; r < rows; r++) {
    for (let n = 0; n < vocab; n++) {
      let dot = 0;
      for (let k = 0; k < hidden; k++) dot += (qa[r * hidden + k] as number) * (packed[k * vocab + n] as number);
      const scaled = Math.fround(Math.fround(step * (scales[n] as number)) * dot);
      out[r * vocab + n] = Math.fround(scaled + (bias ? (bias[n] as number) : 0));
    }
  }
  return out;
}

/** The scores in float64, and their argmax (lowest id among equals). */
function exactArgmax(w: Float32Array, h: Float32Array, bias: Float32Array | null, vocab: number, hidden: number) {
  const scores = new Float64Array(vocab);
  let best = 0;
  for (let n = 0; n < vocab; n++) {
    let s = bias ? (bias[n] as number) : 0;
    for (let k = 0; k < hidden; k++) s += (h[k] as number) * (w[n * hidden + k] as number);
    scores[n] = s;
    if (s > (scores[best] as number)) best = n;
  }
  return { scores, best };
}

const case_ = fc.record({
  vocab: fc.integer({ min: 2, max: 300 }),
  hidden: fc.integer({ min: 1, max: 96 }),
  seed: fc.integer({ min: 1, max: 2 ** 30 }),
  spread: fc.constantFrom(0.02, 1, 30),
  withBias: fc.boolean(),
  /** Copies one row onto another, nudged by this much: ties and near ties. */
  twin: fc.option(fc.constantFrom(0, 1e-7, 1e-5, 1e-3), { nil: undefined }),
  transposed: fc.boolean(),
});

interface Case {
  vocab: number;
  hidden: number;
  seed: number;
  spread: number;
  withBias: boolean;
  twin?: number | undefined;
  transposed: boolean;
}

function makeCase(c: Case) {
  let state = c.seed;
  const rand = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 2 ** 32 - 0.5;
  };
  const hidden = c.hidden;
  const w = Float32Array.from({ length: c.vocab * hidden }, () => rand() * c.spread);
  if (c.twin !== undefined && c.vocab > 2) {
    for (let k = 0; k < hidden; k++) w[2 * hidden + k] = (w[1 * hidden + k] as number) + (k === 0 ? c.twin : 0);
  }
  const h = Float32Array.from({ length: hidden }, () => rand() * 4);
  const bias = c.withBias ? Float32Array.from({ length: c.vocab }, () => rand()) : null;
  // The same weights as a [hidden, vocab] matrix, for the other layout.
  const byHidden = new Float32Array(w.length);
  for (let n = 0; n < c.vocab; n++)
    for (let k = 0; k < hidden; k++) byHidden[k * c.vocab + n] = w[n * hidden + k] as number;
  const built = c.transposed
    ? buildHeadScreen(byHidden, 'hidden-major', c.vocab, hidden, bias)
    : buildHeadScreen(Float32Array.from(w), 'vocab-major', c.vocab, hidden, bias);
  return { w, h, bias, hidden, screen: built.screen, built };
}

/**
 * Two tokens whose float32 scores rounding put in the wrong order: t the best exactly, u (t's weights, one nudged)
 * a hair below it; the float32 scores as a product's rounding may leave them: t a little low, u a little high (each
 * well within the rounding a float32 product of 32 terms can have).
 */
function roundedNearTie() {
  const c = { vocab: 64, hidden: 32, seed: 11, spread: 1, withBias: false, twin: undefined, transposed: false };
  const { w, h, hidden } = makeCase(c);
  const t = exactArgmax(w, h, null, c.vocab, hidden).best;
  const u = t === 5 ? 6 : 5;
  for (let k = 0; k < hidden; k++) w[u * hidden + k] = w[t * hidden + k] as number;
  const k0 = (h[0] as number) > 0 ? 0 : 1;
  w[u * hidden + k0] = (w[u * hidden + k0] as number) - 1e-6 * Math.sign(h[k0] as number);
  const { screen } = buildHeadScreen(Float32Array.from(w), 'vocab-major', c.vocab, hidden, null);
  const exact = exactArgmax(w, h, null, c.vocab, hidden);
  expect(exact.best).toBe(t);
  let l1 = 0;
  for (const x of h) l1 += Math.abs(x);
  const full = Float32Array.from(exact.scores);
  full[t] = (exact.scores[t] as number) - 0.9 * 1e-4 * l1 * (screen.absMax[t] as number);
  full[u] = (exact.scores[u] as number) + 0.9 * 1e-4 * l1 * (screen.absMax[u] as number);
  expect(full[u]).toBeGreaterThan(full[t] as number);
  return { h, screen, t, u, full };
}

/**
 * The exact scores pushed nine tenths of each token's bound for the 8-bit rounding (its part of the bound the picks
 * compute): down for the tokens `down` names, up for every other, so the screen ranks them as wrongly as the bounds
 * allow.
 */
function pushedScores(
  screen: ReturnType<typeof makeCase>['screen'],
  h: Float32Array,
  exact: Float64Array,
  down: (n: number) => boolean,
): Float32Array {
  return Float32Array.from(exact, (v, n) => v + (down(n) ? -0.9 : 0.9) * screenedBound(screen, n, h, 0));
}

/**
 * A vocabulary of 4 000 spread-out scores, screened, as the middle of three rows of a batch's scores (the others not
 * numbers), with its hidden state the last of three: the picks must read where they are told to.
 */
function spreadAtOffset() {
  const c = { vocab: 4000, hidden: 64, seed: 7, spread: 1, withBias: false, twin: undefined, transposed: false };
  const { w, h, hidden, screen, built } = makeCase(c);
  const exact = exactArgmax(w, h, null, c.vocab, hidden);
  const rows = new Float32Array(3 * c.vocab).fill(Number.NaN);
  rows.set(screenedScores(built, h, null), c.vocab);
  const states = new Float32Array(3 * hidden);
  states.set(h, 2 * hidden);
  return { vocab: c.vocab, screen, exact, rows, at: c.vocab, states, hiddenAt: 2 * hidden };
}

describe('exact greedy picks from the 8-bit screen of the head', () => {
  it('pick the exact argmax from screened scores, and from float32 scores, whatever the weights', () => {
    fc.assert(
      fc.property(case_, (c) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const want = exactArgmax(w, h, bias, c.vocab, hidden);
        const screened = screenedScores(built, h, bias);
        const full = Float32Array.from(want.scores);
        const stats = { candidates: 0 };
        expect(exactPick(screen, screened, 0, h, 0, true, c.vocab, stats)).toBe(want.best);
        expect(stats.candidates).toBeGreaterThanOrEqual(1);
        expect(exactPick(screen, full, 0, h, 0, false)).toBe(want.best);
        // Each screened score lies within its bound of the full one.
        expect(worstBoundShare(screen, screened, full, h)).toBeLessThanOrEqual(1);
      }),
      { numRuns: 300 },
    );
  });

  it("store 7-bit weights, [hidden, vocab], each within half its token's step of the float32 weight", () => {
    fc.assert(
      fc.property(case_, (c) => {
        const { w, hidden, screen, built } = makeCase(c);
        const { packed, scales } = built.head;
        expect(packed.length).toBe(c.vocab * hidden);
        expect(scales.length).toBe(c.vocab);
        let widest = 0;
        let worstShare = 0;
        let worstSum = 0;
        let worstNorm = 0;
        let underNorm = 0;
        for (let n = 0; n < c.vocab; n++) {
          let sum = 0;
          let errors = 0;
          for (let k = 0; k < hidden; k++) {
            const q = packed[k * c.vocab + n] as number;
            widest = Math.max(widest, Math.abs(q));
            const err = Math.abs((w[n * hidden + k] as number) - q * (scales[n] as number));
            worstShare = Math.max(worstShare, err / ((screen.halfStep[n] as number) || 1));
            sum += Math.abs(q) * (scales[n] as number);
            errors += err * err;
          }
          worstSum = Math.max(worstSum, Math.abs((screen.absSum[n] as number) - sum) / (sum || 1));
          // The 2-norm of the weights' rounding: never less, a hair more at most.
          const norm = Math.sqrt(errors);
          worstNorm = Math.max(worstNorm, Math.abs((screen.errNorm[n] as number) - norm) / (norm || 1));
          if ((screen.errNorm[n] as number) < norm) underNorm++;
        }
        // Wider, and a u8 × s8 pair could clip in the kernel's 16-bit lanes.
        expect(widest).toBeLessThanOrEqual(SCREEN_Q_MAX);
        expect(worstShare).toBeLessThanOrEqual(1 + 1e-6);
        expect(worstSum).toBeLessThan(1e-6);
        expect(underNorm).toBe(0);
        expect(worstNorm).toBeLessThan(1e-5);
      }),
      { numRuns: 100 },
    );
  });

  it('pick the same token and candidates with a scratch carried from pick to pick, reading only what the first pass kept', () => {
    const scratch = new PickScratch();
    const missed = { kept: 0, all: 0 };
    fc.assert(
      fc.property(case_, fc.integer({ min: 1, max: 4 }), (c, picks) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const want = exactArgmax(w, h, bias, c.vocab, hidden);
        const screened = screenedScores(built, h, bias);
        const full = Float32Array.from(want.scores);
        // The same position several times (the window the scratch carries fits it), then float32 scores (a
        // narrower window: the scratch's is wide enough) and screened ones again.
        for (let i = 0; i < picks; i++) {
          for (const [scores, isScreened] of [
            [screened, true],
            [full, false],
          ] as const) {
            const plain = { candidates: 0 };
            const a = exactPick(screen, scores, 0, h, 0, isScreened, c.vocab, plain);
            expect(a).toBe(want.best);
            // Twice: the second pick's window is the first's, so it reads the kept tokens only.
            for (const again of [false, true]) {
              const withScratch = { candidates: 0 };
              const before = scratch.fromKept;
              expect(exactPick(screen, scores, 0, h, 0, isScreened, c.vocab, withScratch, scratch)).toBe(a);
              expect(withScratch.candidates).toBe(plain.candidates);
              if (scratch.fromKept > before) missed.kept++;
              else {
                expect(again).toBe(false);
                missed.all++;
              }
            }
          }
        }
      }),
      { numRuns: 300 },
    );
    // Both ways were taken: from the kept tokens (most picks) and from the whole vocabulary (a first pick, a wider
    // window than the last).
    expect(missed.kept).toBeGreaterThan(600);
    expect(missed.all).toBeGreaterThan(10);
    expect(scratch.fromKept + scratch.fromAll).toBe(missed.kept + missed.all);
  });

  it('rules out most of a vocabulary of spread-out scores, and reads the scores where it is told to', () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const stats = { candidates: 0 };
    expect(exactPick(screen, rows, at, states, hiddenAt, true, vocab, stats)).toBe(exact.best);
    expect(stats.candidates).toBeLessThan(vocab / 20);
  });

  it('bound each row of a run by the one step the product rounds all its rows with: a small hidden state beside large ones', () => {
    fc.assert(
      fc.property(case_, fc.array(fc.constantFrom(1e-3, 0.1, 1, 50), { minLength: 2, maxLength: 4 }), (c, sizes) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        // Row r: the case's hidden state times sizes[r], reversed in every other row.
        const states = new Float32Array(sizes.length * hidden);
        sizes.forEach((size, r) => {
          for (let k = 0; k < hidden; k++) states[r * hidden + k] = (h[r % 2 ? hidden - 1 - k : k] as number) * size;
        });
        const screened = screenedScores(built, states, bias);
        for (let r = 0; r < sizes.length; r++) {
          const row = states.subarray(r * hidden, (r + 1) * hidden);
          const want = exactArgmax(w, row, bias, c.vocab, hidden);
          const full = Float32Array.from(want.scores);
          const mine = screened.subarray(r * c.vocab, (r + 1) * c.vocab);
          expect(worstBoundShare(screen, mine, full, states, r * hidden)).toBeLessThanOrEqual(1);
          expect(exactPick(screen, screened, r * c.vocab, states, r * hidden, true, c.vocab)).toBe(want.best);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('choose from exact scores of every token when a hidden state the product rounded with this one is not a finite number', () => {
    const c = { vocab: 300, hidden: 24, seed: 5, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden, screen } = makeCase(c);
    const want = exactArgmax(w, h, null, c.vocab, hidden);
    const full = Float32Array.from(want.scores);
    // The other row of the run: a NaN first, or ±∞ somewhere. The kernel's step is then not a number, and every
    // row's scores with it (test/integration/head-screen.test.ts runs the real kernel): here NaN, or the exact ones
    // turned upside down, which the choices must not read.
    for (const [at, bad] of [
      [0, Number.NaN],
      [5, Number.POSITIVE_INFINITY],
      [hidden - 1, Number.NEGATIVE_INFINITY],
    ] as const) {
      const states = new Float32Array(2 * hidden);
      states.set(h);
      states.fill(1, hidden);
      states[hidden + at] = bad;
      for (const kernel of [new Float32Array(c.vocab).fill(Number.NaN), Float32Array.from(full, (v) => -v)]) {
        const stats = { candidates: 0 };
        expect(exactPick(screen, kernel, 0, states, 0, true, c.vocab, stats)).toBe(want.best);
        for (const key of [1, 2, 3]) {
          expect(exactDraw(screen, kernel, 0, states, 0, true, 0.7, key)).toBe(plainGumbelMax(want.scores, 0.7, key));
        }
        const top = new TopKScratch();
        expect(got(top, exactTopK(screen, kernel, 0, states, 0, true, 5, top))).toEqual(exactTop(want.scores, 5));
        exactMinP(screen, kernel, 0, states, 0, true, 2, 0.05, top);
        expect([...top.scoredTokens().ids]).toEqual(minPKept(want.scores, 2, 0.05));
        const nucleus = new NucleusScratch();
        const m = exactTopP(screen, kernel, 0, states, 0, true, 2, 0.9, nucleus);
        expect(nucleusIn(nucleus, m).ids).toEqual(nucleusOver(full, 2, 0.9));
      }
    }
    // The row's own hidden state not a number: nothing to choose from (the engine fails that request).
    const states = new Float32Array(2 * hidden);
    states.set(h, hidden);
    states[3] = Number.POSITIVE_INFINITY;
    expect(exactPick(screen, full, 0, states, 0, true, c.vocab)).toBe(-1);
  });

  it("never takes a token whose weights are damaged, screened or not, and the engine's check of a screen says so", () => {
    const c = { vocab: 60, hidden: 16, seed: 9, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden } = makeCase(c);
    // Token 7: a NaN first, then large weights along h: without its NaN it would score far above every other token.
    for (let k = 0; k < hidden; k++) w[7 * hidden + k] = 10 * Math.sign(h[k] as number);
    w[7 * hidden] = Number.NaN;
    // Token 3: a row of zeros, as a padded vocabulary has.
    w.fill(0, 3 * hidden, 4 * hidden);
    const built = buildHeadScreen(Float32Array.from(w), 'vocab-major', c.vocab, hidden, null);
    const want = exactArgmax(w, h, null, c.vocab, hidden);
    expect(want.best).not.toBe(7);
    const screened = screenedScores(built, h, null);
    const full = Float32Array.from(want.scores);
    expect(exactPick(built.screen, screened, 0, h, 0, true, c.vocab)).toBe(want.best);
    expect(exactPick(built.screen, full, 0, h, 0, false, c.vocab)).toBe(want.best);
    // The check at load: not a number, so the engine scores such a head in full, wherever the damaged token is.
    expect(worstBoundShare(built.screen, screened, full, h)).toBeNaN();
    // The row of zeros alone is no reason: 0 off within a bound of 0.
    for (let k = 0; k < hidden; k++) w[7 * hidden + k] = 0.5;
    const sound = buildHeadScreen(Float32Array.from(w), 'vocab-major', c.vocab, hidden, null);
    const exact = Float32Array.from(exactArgmax(w, h, null, c.vocab, hidden).scores);
    expect(worstBoundShare(sound.screen, screenedScores(sound, h, null), exact, h)).toBeLessThanOrEqual(1);
  });

  it('scores few tokens exactly where many scores lie near the best (bell-shaped weights and hidden state)', () => {
    for (const seed of [3, 11]) {
      const vocab = 4000;
      const hidden = 256;
      let state = seed;
      const rand = () => {
        state = (Math.imul(state, 1103515245) + 12345) >>> 0;
        return state / 2 ** 32 - 0.5;
      };
      const bell = () => rand() + rand() + rand() + rand();
      const w = Float32Array.from({ length: vocab * hidden }, () => bell() * 0.05);
      const h = Float32Array.from({ length: hidden }, bell);
      const built = buildHeadScreen(Float32Array.from(w), 'vocab-major', vocab, hidden, null);
      const stats = { candidates: 0 };
      const pick = exactPick(built.screen, screenedScores(built, h, null), 0, h, 0, true, vocab, stats);
      expect(pick).toBe(exactArgmax(w, h, null, vocab, hidden).best);
      // 6 and 5 tokens; the 1-norm form of the weights' rounding alone left 8 and 7, and the bound before (the hidden
      // state's rounding taken twice over) 16.
      expect(stats.candidates).toBeLessThanOrEqual(6);
    }
  });

  it('pick the exact argmax from float32 scores whose rounding put another token first', () => {
    const { h, screen, t, full } = roundedNearTie();
    expect(exactPick(screen, full, 0, h, 0, false)).toBe(t);
  });

  it('never picks past the limit (tokens the vocabulary pads with), and says when nothing is a number', () => {
    const c = { vocab: 64, hidden: 32, seed: 3, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden, screen } = makeCase(c);
    const full = Float32Array.from(exactArgmax(w, h, null, c.vocab, hidden).scores);
    const best = exactArgmax(w.subarray(0, 10 * hidden), h, null, 10, hidden).best;
    expect(exactPick(screen, full, 0, h, 0, false, 10)).toBe(best);
    expect(exactPick(screen, full, 0, new Float32Array(hidden).fill(Number.NaN), 0, false)).toBe(-1);
    expect(exactPick(screen, new Float32Array(c.vocab).fill(Number.NaN), 0, h, 0, false)).toBe(-1);
  });
});

/** The exact top k (likeliest first, equal scores the lower id first), as exactTopK should give them. */
function exactTop(scores: Float64Array, k: number): { ids: number[]; scores: number[] } {
  const order = Array.from(scores.keys()).sort((a, b) => (scores[b] as number) - (scores[a] as number) || a - b);
  const ids = order.slice(0, Math.min(k, SCREEN_TOP_K));
  return { ids, scores: ids.map((n) => Math.fround(scores[n] as number)) };
}

const got = (out: TopKScratch, m: number) => ({
  ids: [...out.ids.subarray(0, m)],
  scores: [...out.scores.subarray(0, m)],
});

describe('exact top-k from the 8-bit screen of the head', () => {
  it('is the exact top k from screened scores, and from float32 scores, whatever the weights', () => {
    const out = new TopKScratch();
    fc.assert(
      fc.property(case_, fc.constantFrom(1, 2, 5, 40, 300), (c, k) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const want = exactTop(exact, k);
        const screened = screenedScores(built, h, bias);
        const full = Float32Array.from(exact);
        const stats = { candidates: 0 };
        const m = exactTopK(screen, screened, 0, h, 0, true, k, out, c.vocab, stats);
        expect(m).toBe(want.ids.length);
        expect(got(out, m)).toEqual(want);
        expect(stats.candidates).toBeGreaterThanOrEqual(m);
        expect(got(out, exactTopK(screen, full, 0, h, 0, false, k, out))).toEqual(want);
        // Again, with the window the last draw left: the same tokens.
        expect(got(out, exactTopK(screen, screened, 0, h, 0, true, k, out))).toEqual(want);
      }),
      { numRuns: 300 },
    );
    // Both ways were taken: from the tokens the first pass kept (most draws: about 690 of 900) and from the whole
    // vocabulary (a first draw, or a window narrower than this one needs: about 210).
    expect(out.fromKept).toBeGreaterThan(400);
    expect(out.fromAll).toBeGreaterThan(50);
    expect(out.fromKept + out.fromAll).toBe(900);
  });

  it('finds the exact top k by the bounds: screened scores pushed most of their bound the wrong way', () => {
    const out = new TopKScratch();
    fc.assert(
      fc.property(case_, fc.constantFrom(1, 3, 20), (c, k) => {
        const { w, h, bias, hidden, screen } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const want = exactTop(exact, k);
        // The top k pushed down, every other token up.
        const top = new Set(want.ids);
        const pushed = pushedScores(screen, h, exact, (n) => top.has(n));
        expect(got(out, exactTopK(screen, pushed, 0, h, 0, true, k, out))).toEqual(want);
      }),
      { numRuns: 300 },
    );
  });

  it('scores exactly few more tokens than it keeps where scores spread out, and reads them where it is told to', () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const out = new TopKScratch();
    const stats = { candidates: 0 };
    const m = exactTopK(screen, rows, at, states, hiddenAt, true, 50, out, vocab, stats);
    expect(got(out, m)).toEqual(exactTop(exact.scores, 50));
    expect(stats.candidates).toBeLessThan(vocab / 10);
  });

  it('takes a floor that is not a number when any exact score of the first k is not one (every token a candidate)', () => {
    const out = new TopKScratch();
    out.begin(10);
    out.push(1, 0.5);
    out.push(2, Number.NaN);
    out.push(3, 0.1);
    expect(out.least()).toBeNaN();
    out.begin(10);
    out.push(4, 0.5);
    out.push(5, -2);
    expect(out.least()).toBe(-2);
  });

  it('keeps the exact order of two tokens whose float32 scores rounding swapped', () => {
    const { h, screen, t, u, full } = roundedNearTie();
    const out = new TopKScratch();
    expect(exactTopK(screen, full, 0, h, 0, false, 2, out)).toBe(2);
    expect([...out.ids.subarray(0, 2)]).toEqual([t, u]);
  });

  it('never keeps a token past the limit, keeps only scores that are numbers, and says when the state is none', () => {
    const c = { vocab: 64, hidden: 32, seed: 3, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden, screen } = makeCase(c);
    const exact = exactArgmax(w, h, null, c.vocab, hidden).scores;
    const out = new TopKScratch();
    const full = Float32Array.from(exact);
    expect(got(out, exactTopK(screen, full, 0, h, 0, false, 20, out, 10))).toEqual(exactTop(exact.subarray(0, 10), 20));
    expect(exactTopK(screen, full, 0, new Float32Array(hidden).fill(Number.NaN), 0, false, 5, out)).toBe(-1);
    // Scores that are not numbers are no candidates: the rest are ranked by their exact scores.
    const holes = Float32Array.from(full);
    const best = exactTop(exact, 1).ids[0] as number;
    holes[best] = Number.NaN;
    const m = exactTopK(screen, holes, 0, h, 0, false, 3, out);
    expect(m).toBe(3);
    expect([...out.ids.subarray(0, 3)]).not.toContain(best);
  });
});

describe('exact whole-vocabulary draws from the 8-bit screen of the head', () => {
  const temperature = fc.constantFrom(0.05, 0.7, 1.5);
  const key = fc.integer({ min: 0, max: 2 ** 32 - 1 });

  it('draw what the exact scores draw, from screened scores and from float32 scores, whatever the weights', () => {
    const scratch = new PickScratch();
    fc.assert(
      fc.property(case_, temperature, key, (c, T, k) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const screened = screenedScores(built, h, bias);
        const full = Float32Array.from(exact);
        // Each draw without a scratch, then with the window the last draw left (another position's, the same
        // position's, another key's): the same token, and the same tokens scored exactly.
        const next = (k + 1) >>> 0;
        for (const [scores, isScreened, drawKey] of [
          [full, false, k],
          [screened, true, k],
          [screened, true, next],
        ] as const) {
          const plain = { candidates: 0 };
          const drawn = exactDraw(screen, scores, 0, h, 0, isScreened, T, drawKey, c.vocab, plain);
          expect(drawn).toBe(plainGumbelMax(exact, T, drawKey));
          expect(plain.candidates).toBeGreaterThanOrEqual(1);
          const carried = { candidates: 0 };
          expect(exactDraw(screen, scores, 0, h, 0, isScreened, T, drawKey, c.vocab, carried, scratch)).toBe(drawn);
          expect(carried.candidates).toBe(plain.candidates);
        }
      }),
      { numRuns: 300 },
    );
    // Both ways were taken: from the tokens the first pass kept, and from the whole vocabulary.
    expect(scratch.fromKept).toBeGreaterThan(300);
    expect(scratch.fromAll).toBeGreaterThan(30);
    expect(scratch.fromKept + scratch.fromAll).toBe(900);
  });

  it('draw what the exact scores draw by the bounds: screened scores pushed most of their bound the wrong way', () => {
    fc.assert(
      fc.property(case_, temperature, key, (c, T, k) => {
        const { w, h, bias, hidden, screen } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const want = plainGumbelMax(exact, T, k);
        // The token drawn pushed down, every other token up.
        const pushed = pushedScores(screen, h, exact, (n) => n === want);
        expect(exactDraw(screen, pushed, 0, h, 0, true, T, k)).toBe(want);
      }),
      { numRuns: 300 },
    );
  });

  it('score exactly few tokens where scores spread out, and read them where they are told to', () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const drawn = new Set<number>();
    let candidates = 0;
    for (let k = 0; k < 50; k++) {
      const stats = { candidates: 0 };
      const id = exactDraw(screen, rows, at, states, hiddenAt, true, 1, k, vocab, stats);
      expect(id).toBe(plainGumbelMax(exact.scores, 1, k));
      drawn.add(id);
      candidates += stats.candidates;
    }
    // Draws, not one pick: several tokens; each scored a few tokens exactly.
    expect(drawn.size).toBeGreaterThan(5);
    expect(candidates / 50).toBeLessThan(vocab / 100);
  });

  it('never draws past the limit or a score that is not a number, and says when the state is none', () => {
    const c = { vocab: 64, hidden: 32, seed: 3, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden, screen } = makeCase(c);
    const exact = exactArgmax(w, h, null, c.vocab, hidden).scores;
    const full = Float32Array.from(exact);
    for (let k = 0; k < 20; k++) {
      expect(exactDraw(screen, full, 0, h, 0, false, 2, k, 10)).toBe(plainGumbelMax(exact.subarray(0, 10), 2, k));
    }
    expect(exactDraw(screen, full, 0, new Float32Array(hidden).fill(Number.NaN), 0, false, 1, 5)).toBe(-1);
    expect(exactDraw(screen, new Float32Array(c.vocab).fill(Number.NaN), 0, h, 0, false, 1, 5)).toBe(-1);
    // A score that is not a number is no candidate: the others are drawn from their exact scores.
    const best = plainGumbelMax(exact, 0.05, 9);
    const holes = Float32Array.from(full);
    holes[best] = Number.NaN;
    const without = Float64Array.from(exact, (v, n) => (n === best ? Number.NEGATIVE_INFINITY : v));
    expect(exactDraw(screen, holes, 0, h, 0, false, 0.05, 9)).toBe(plainGumbelMax(without, 0.05, 9));
  });
});

/** The tokens a min-p draw keeps: weight exp((s − max) / T) at least minP, in id order. */
function minPKept(scores: Float64Array, T: number, minP: number): number[] {
  let max = Number.NEGATIVE_INFINITY;
  for (const s of scores) if (s > max) max = s;
  return Array.from(scores.keys()).filter((n) => Math.exp(((scores[n] as number) - max) / T) >= minP);
}

const minPDraw = (T: number, minP: number, seed: number): SamplingParams => ({
  greedy: false,
  temperature: T,
  topK: 0,
  topP: 1,
  minP,
  repetitionPenalty: 1,
  seed,
});

describe('exact min-p draws from the 8-bit screen of the head', () => {
  const temperature = fc.constantFrom(0.05, 0.7, 1.5);
  const minP = fc.constantFrom(0.01, 0.05, 0.5, 1);

  it('hold every token the draw can keep, in id order with its exact score, and draw what the float32 scores draw, whatever the weights', () => {
    const out = new TopKScratch();
    fc.assert(
      fc.property(case_, temperature, minP, (c, T, p) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const want = minPKept(exact, T, p);
        const full = Float32Array.from(exact);
        for (const [scores, isScreened] of [
          [screenedScores(built, h, bias), true],
          [full, false],
        ] as const) {
          const stats = { candidates: 0 };
          const m = exactMinP(screen, scores, 0, h, 0, isScreened, T, p, out, c.vocab, stats);
          const held = out.scoredTokens();
          expect(m).toBe(held.ids.length);
          expect(stats.candidates).toBe(m);
          const ids = [...held.ids];
          expect(ids).toEqual([...ids].sort((a, b) => a - b));
          for (const n of want) expect(ids).toContain(n);
          expect([...held.scores]).toEqual(ids.map((n) => Math.fround(exact[n] as number)));
          // The draw among them is the draw over the whole vocabulary's float32 scores, draw after draw.
          const overAll = new Sampler(minPDraw(T, p, c.seed), c.vocab);
          const among = new Sampler(minPDraw(T, p, c.seed), c.vocab);
          expect(among.screenMinP).toBe(p);
          for (let draw = 0; draw < 3; draw++) {
            expect(among.drawAmong(Int32Array.from(ids), Float32Array.from(held.scores), m)).toBe(
              overAll.sample(full, 0, c.vocab),
            );
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('hold every token the draw can keep by the bounds: screened scores pushed most of their bound the wrong way', () => {
    const out = new TopKScratch();
    fc.assert(
      fc.property(case_, temperature, minP, (c, T, p) => {
        const { w, h, bias, hidden, screen } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const want = minPKept(exact, T, p);
        // The kept tokens pushed down, every other token up.
        const kept = new Set(want);
        const pushed = pushedScores(screen, h, exact, (n) => kept.has(n));
        exactMinP(screen, pushed, 0, h, 0, true, T, p, out);
        const ids = [...out.scoredTokens().ids];
        for (const n of want) expect(ids).toContain(n);
      }),
      { numRuns: 300 },
    );
  });

  it('score exactly few tokens where scores spread out, and read them where they are told to', () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const out = new TopKScratch();
    const stats = { candidates: 0 };
    const m = exactMinP(screen, rows, at, states, hiddenAt, true, 0.7, 0.05, out, vocab, stats);
    const want = minPKept(exact.scores, 0.7, 0.05);
    expect(want.length).toBeGreaterThan(1);
    for (const n of want) expect([...out.scoredTokens().ids]).toContain(n);
    expect(m).toBeLessThan(vocab / 10);
  });

  it('never hold a token past the limit or a score that is not a number, and say when the state is none', () => {
    const c = { vocab: 64, hidden: 32, seed: 3, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden, screen } = makeCase(c);
    const exact = exactArgmax(w, h, null, c.vocab, hidden).scores;
    const full = Float32Array.from(exact);
    const out = new TopKScratch();
    exactMinP(screen, full, 0, h, 0, false, 2, 0.01, out, 10);
    expect([...out.scoredTokens().ids]).toEqual(minPKept(exact.subarray(0, 10), 2, 0.01));
    expect(exactMinP(screen, full, 0, new Float32Array(hidden).fill(Number.NaN), 0, false, 1, 0.1, out)).toBe(-1);
    expect(exactMinP(screen, new Float32Array(c.vocab).fill(Number.NaN), 0, h, 0, false, 1, 0.1, out)).toBe(0);
    // A score that is not a number is never held: the others are, as their exact scores keep them.
    const best = exactArgmax(w, h, null, c.vocab, hidden).best;
    const holes = Float32Array.from(full);
    holes[best] = Number.NaN;
    exactMinP(screen, holes, 0, h, 0, false, 2, 0.01, out);
    const without = Float64Array.from(exact, (v, n) => (n === best ? Number.NEGATIVE_INFINITY : v));
    expect([...out.scoredTokens().ids]).toEqual(minPKept(without, 2, 0.01));
  });
});

/**
 * Top-p's nucleus over the whole vocabulary, as a draw over float32 scores takes it, written plainly: every score
 * that is a number by weight exp((s − max) / T), the likeliest first (equal scores: the lower id first), up to and
 * including the first whose cumulative share of the total reaches p.
 */
function nucleusOver(scores: Float32Array, T: number, p: number): number[] {
  const ids = [...scores.keys()].filter((n) => !Number.isNaN(scores[n]));
  let max = Number.NEGATIVE_INFINITY;
  for (const n of ids) max = Math.max(max, scores[n] as number);
  const weight = (n: number) => Math.exp(((scores[n] as number) - max) * (1 / T));
  ids.sort((a, b) => (scores[b] as number) - (scores[a] as number) || a - b);
  let sum = 0;
  for (const n of ids) sum += weight(n);
  let cumulative = 0;
  for (let j = 0; j < ids.length; j++) {
    cumulative += weight(ids[j] as number) / sum;
    if (cumulative >= p) return ids.slice(0, j + 1);
  }
  return ids;
}

const topPDraw = (T: number, topP: number, seed: number): SamplingParams => ({
  greedy: false,
  temperature: T,
  topK: 0,
  topP,
  minP: 0,
  repetitionPenalty: 1,
  seed,
});

/** The nucleus exactTopP wrote: its ids and scores. */
const nucleusIn = (out: NucleusScratch, m: number) => ({
  ids: [...out.ids.subarray(0, Math.max(0, m))],
  scores: [...out.scores.subarray(0, Math.max(0, m))],
});

describe('exact top-p draws from the 8-bit screen of the head', () => {
  const temperature = fc.constantFrom(0.05, 0.7, 1.5);
  const topP = fc.constantFrom(0.05, 0.5, 0.9, 0.999);

  it("find top-p's nucleus over the whole vocabulary, likeliest first with exact scores, and draw what the float32 scores draw, whatever the weights", () => {
    const out = new NucleusScratch();
    fc.assert(
      fc.property(case_, temperature, topP, (c, T, p) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const full = Float32Array.from(exact);
        const want = nucleusOver(full, T, p);
        for (const [scores, isScreened] of [
          [screenedScores(built, h, bias), true],
          [full, false],
        ] as const) {
          const stats = { candidates: 0 };
          const m = exactTopP(screen, scores, 0, h, 0, isScreened, T, p, out, c.vocab, stats);
          const got = nucleusIn(out, m);
          expect(got.ids).toEqual(want);
          expect(got.scores).toEqual(want.map((n) => full[n]));
          expect(stats.candidates).toBeGreaterThanOrEqual(m);
          // The draw in it is the draw over the whole vocabulary's float32 scores, draw after draw.
          const overAll = new Sampler(topPDraw(T, p, c.seed), c.vocab);
          const within = new Sampler(topPDraw(T, p, c.seed), c.vocab);
          expect(within.nucleusScreenable).toBe(true);
          for (let draw = 0; draw < 3; draw++) {
            expect(within.drawNucleus(Int32Array.from(got.ids), Float32Array.from(got.scores), m)).toBe(
              overAll.sample(full, 0, c.vocab),
            );
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('find the nucleus by the bounds: screened scores pushed most of their bound the wrong way', () => {
    const out = new NucleusScratch();
    fc.assert(
      fc.property(case_, temperature, topP, fc.boolean(), (c, T, p, inside) => {
        const { w, h, bias, hidden, screen } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        const want = nucleusOver(Float32Array.from(exact), T, p);
        // The nucleus pushed down and every other token up, or the other way round: the total weight as far off as
        // the bounds allow, in either direction.
        const held = new Set(want);
        const pushed = pushedScores(screen, h, exact, (n) => held.has(n) === inside);
        expect(nucleusIn(out, exactTopP(screen, pushed, 0, h, 0, true, T, p, out)).ids).toEqual(want);
      }),
      { numRuns: 300 },
    );
  });

  it('score exactly a few tokens where the weight sits in a few, read them where they are told to, and say which nuclei fit the screen', () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const full = Float32Array.from(exact.scores);
    const out = new NucleusScratch();
    // Scores spread out (the best 9.0, 7.5, 7.2, …, the median 0): cool draws weigh a few tokens; at temperature
    // 0.7 or more the long tail weighs enough that the bounds on it leave the nucleus's edge open until every token
    // is scored — still the exact nucleus, and no draw of the kind to screen again.
    for (const [T, p, fits] of [
      [0.5, 0.9, true],
      [0.4, 0.9, true],
      [0.3, 0.99, true],
      [0.7, 0.9, false],
      [1, 0.5, false],
    ] as const) {
      const stats = { candidates: 0 };
      const m = exactTopP(screen, rows, at, states, hiddenAt, true, T, p, out, vocab, stats);
      const want = nucleusOver(full, T, p);
      expect(nucleusIn(out, m).ids).toEqual(want);
      expect(want.length).toBeGreaterThan(fits ? 2 : 40);
      if (fits) expect(stats.candidates).toBeLessThan(vocab / 10);
      else expect(stats.candidates).toBe(vocab);
      expect(nucleusFits(screen, full, 0, states, hiddenAt, T, p, out)).toBe(fits);
    }
    expect(nucleusFits(screen, new Float32Array(vocab).fill(Number.NaN), 0, states, hiddenAt, 0.5, 0.9, out)).toBe(
      false,
    );
    expect(nucleusFits(screen, full, 0, new Float32Array(64).fill(Number.NaN), 0, 0.5, 0.9, out)).toBe(false);
  });

  it('never hold a token past the limit or a score that is not a number, and say when the state is none', () => {
    const c = { vocab: 64, hidden: 32, seed: 3, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden, screen } = makeCase(c);
    const exact = exactArgmax(w, h, null, c.vocab, hidden).scores;
    const full = Float32Array.from(exact);
    const out = new NucleusScratch();
    expect(nucleusIn(out, exactTopP(screen, full, 0, h, 0, false, 2, 0.9, out, 10)).ids).toEqual(
      nucleusOver(full.subarray(0, 10), 2, 0.9),
    );
    expect(exactTopP(screen, full, 0, new Float32Array(hidden).fill(Number.NaN), 0, false, 1, 0.9, out)).toBe(-1);
    expect(exactTopP(screen, new Float32Array(c.vocab).fill(Number.NaN), 0, h, 0, false, 1, 0.9, out)).toBe(0);
    // A score that is not a number is never held: the nucleus is the others'.
    const best = exactArgmax(w, h, null, c.vocab, hidden).best;
    const holes = Float32Array.from(full);
    holes[best] = Number.NaN;
    expect(nucleusIn(out, exactTopP(screen, holes, 0, h, 0, false, 2, 0.9, out)).ids).toEqual(
      nucleusOver(holes, 2, 0.9),
    );
  });

  it("find the nucleus when a token's weights are damaged: its bound is not a number, and every token is scored", () => {
    const c = { vocab: 64, hidden: 32, seed: 3, spread: 1, withBias: false, twin: undefined, transposed: false };
    const { w, h, hidden } = makeCase(c);
    w[9 * hidden] = Number.NaN;
    const { screen } = buildHeadScreen(Float32Array.from(w), 'vocab-major', c.vocab, hidden, null);
    const full = Float32Array.from(exactArgmax(w, h, null, c.vocab, hidden).scores);
    expect(full[9]).toBeNaN();
    const out = new NucleusScratch();
    const stats = { candidates: 0 };
    expect(nucleusIn(out, exactTopP(screen, full, 0, h, 0, false, 2, 0.9, out, c.vocab, stats)).ids).toEqual(
      nucleusOver(full, 2, 0.9),
    );
    // Every token but the damaged one, whose score is no number either (it weighs nothing).
    expect(stats.candidates).toBe(c.vocab - 1);
  });
});

describe('screened picks and draws with penalties and a logit bias', () => {
  const adjustments = fc.record({
    repetitionPenalty: fc.constantFrom(1, 1.3, 0.8, 3),
    frequencyPenalty: fc.constantFrom(0, 0.5),
    presencePenalty: fc.constantFrom(0, 0.7, -0.4),
    /** Biases on a few tokens: small nudges, or a ban / a forced token (±100). */
    bias: fc.constantFrom(0, 2, 100),
    history: fc.integer({ min: 1, max: 40 }),
  });

  it("pick, draw, keep the top k and min-p tokens and find top-p's nucleus of the scores as the sampler changes them, whatever the weights", () => {
    const out = new TopKScratch();
    const nucleus = new NucleusScratch();
    const scratch = new PickScratch();
    fc.assert(
      fc.property(case_, adjustments, fc.boolean(), (c, a, push) => {
        const { w, h, bias, hidden, screen, built } = makeCase(c);
        const exact = exactArgmax(w, h, bias, c.vocab, hidden).scores;
        let state = c.seed;
        const next = () => {
          state = (Math.imul(state, 48271) + 11) >>> 0;
          return state % c.vocab;
        };
        const logitBias: Array<[number, number]> =
          a.bias > 0
            ? [
                [next(), a.bias],
                [next(), -a.bias],
                [next(), 0.5 * a.bias],
              ]
            : [];
        const sampler = new Sampler(
          {
            greedy: false,
            temperature: 0.7,
            topK: 0,
            topP: 1,
            minP: 0,
            repetitionPenalty: a.repetitionPenalty,
            frequencyPenalty: a.frequencyPenalty,
            presencePenalty: a.presencePenalty,
            logitBias,
            seed: c.seed,
          },
          c.vocab,
          Array.from({ length: a.history }, next),
        );
        for (let i = 0; i < a.history / 4; i++) sampler.took(next());
        // The exact scores as the sampler changes them: what every pick and draw must follow.
        const adjusted = Float64Array.from(exact, (v, n) => sampler.adjustExact(n, v));
        let want = 0;
        for (let n = 1; n < c.vocab; n++) if ((adjusted[n] as number) > (adjusted[want] as number)) want = n;
        const key = c.seed * 7;
        const drawn = plainGumbelMax(adjusted, 0.7, key);
        const top = exactTop(adjusted, 5);
        // Screened scores, or the exact scores pushed most of their bound the wrong way (the tokens the picks and
        // draws must find down, every other up), then changed as the sampler changes them.
        const down = new Set([want, drawn, ...top.ids]);
        const raw = push ? pushedScores(screen, h, exact, (n) => down.has(n)) : screenedScores(built, h, bias);
        const scores = Float32Array.from(sampler.adjustScores(raw, 0, c.vocab));
        const adjust = sampler.adjusts ? sampler : undefined;
        expect(exactPick(screen, scores, 0, h, 0, true, c.vocab, undefined, scratch, adjust)).toBe(want);
        expect(exactDraw(screen, scores, 0, h, 0, true, 0.7, key, c.vocab, undefined, scratch, adjust)).toBe(drawn);
        expect(got(out, exactTopK(screen, scores, 0, h, 0, true, 5, out, c.vocab, undefined, adjust))).toEqual(top);
        exactMinP(screen, scores, 0, h, 0, true, 0.7, 0.05, out, c.vocab, undefined, adjust);
        const held = [...out.scoredTokens().ids];
        for (const n of minPKept(adjusted, 0.7, 0.05)) expect(held).toContain(n);
        const m = exactTopP(screen, scores, 0, h, 0, true, 0.7, 0.9, nucleus, c.vocab, undefined, adjust);
        expect(nucleusIn(nucleus, m).ids).toEqual(nucleusOver(Float32Array.from(adjusted), 0.7, 0.9));
      }),
      { numRuns: 400 },
    );
  });

  it("keep a constraint's refused tokens out, and score none of them exactly, when it allows fewer than k", () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const allowed = [17, 2500, 3999];
    const scores = new Float32Array(vocab).fill(Number.NEGATIVE_INFINITY);
    for (const n of allowed) scores[n] = rows[at + n] as number;
    const refused: ScoreAdjust = {
      boundScale: 1,
      adjustSlack: 0,
      adjustExact: (_n, v) => v,
      banned: (n) => !allowed.includes(n),
    };
    const out = new TopKScratch();
    const stats = { candidates: 0 };
    const m = exactTopK(screen, scores, 0, states, hiddenAt, true, 20, out, vocab, stats, refused);
    const want = [...allowed].sort((a, b) => (exact.scores[b] as number) - (exact.scores[a] as number));
    expect([...out.ids.subarray(0, 3)]).toEqual(want);
    // The rest of the top 20 are refused tokens, at −∞ (weight 0 in a draw); only they and the allowed were scored.
    expect(m).toBe(20);
    expect([...out.scores.subarray(3, m)].every((v) => v === Number.NEGATIVE_INFINITY)).toBe(true);
    expect(stats.candidates).toBe(20);
    expect(exactPick(screen, scores, 0, states, hiddenAt, true, vocab, undefined, undefined, refused)).toBe(want[0]);
  });

  it("pick and draw again over a constraint's masked scores with the bounds of the scores it allows", () => {
    const { vocab, screen, exact, rows, at, states, hiddenAt } = spreadAtOffset();
    const scores = rows.subarray(at, at + vocab);
    const stats = { candidates: 0 };
    expect(exactPick(screen, scores, 0, states, hiddenAt, true, vocab, stats)).toBe(exact.best);
    const alone = stats.candidates;
    // Every other token refused (JSON mode inside a string refuses few; here half): −∞ in the scores read, −∞ exactly.
    const refused: ScoreAdjust = {
      boundScale: 1,
      adjustSlack: 0,
      adjustExact: (_n, v) => v,
      banned: (n) => n % 2 !== exact.best % 2,
    };
    const masked = Float32Array.from(scores, (v, n) => (refused.banned(n) ? Number.NEGATIVE_INFINITY : v));
    const allowed = Float64Array.from(exact.scores, (v, n) => (refused.banned(n) ? Number.NEGATIVE_INFINITY : v));
    expect(exactPick(screen, masked, 0, states, hiddenAt, true, vocab, stats, undefined, refused)).toBe(exact.best);
    expect(stats.candidates).toBe(alone);
    const other: ScoreAdjust = { ...refused, banned: (n) => !refused.banned(n) };
    const rest = Float32Array.from(scores, (v, n) => (other.banned(n) ? Number.NEGATIVE_INFINITY : v));
    const second = Float64Array.from(exact.scores, (v, n) => (other.banned(n) ? Number.NEGATIVE_INFINITY : v));
    expect(exactPick(screen, rest, 0, states, hiddenAt, true, vocab, stats, undefined, other)).toBe(
      exactTop(second, 1).ids[0],
    );
    expect(stats.candidates).toBeLessThan(20);
    for (const key of [4, 5, 6]) {
      expect(exactDraw(screen, masked, 0, states, hiddenAt, true, 0.7, key, vocab, stats, undefined, refused)).toBe(
        plainGumbelMax(allowed, 0.7, key),
      );
      expect(stats.candidates).toBeLessThan(20);
    }
    const out = new TopKScratch();
    exactMinP(screen, rest, 0, states, hiddenAt, true, 0.7, 0.1, out, vocab, stats, other);
    // It holds the tokens it scored (the draw weighs them and keeps those min-p keeps): every one min-p keeps.
    const held = [...out.scoredTokens().ids];
    const keeps = minPKept(second, 0.7, 0.1);
    expect(held.filter((n) => keeps.includes(n))).toEqual(keeps);
    expect(stats.candidates).toBeLessThan(20);
  });

  it('change one exact score as they change the whole row', () => {
    const vocab = 50;
    const sampler = new Sampler(
      {
        greedy: true,
        temperature: 0,
        topK: 0,
        topP: 1,
        minP: 0,
        repetitionPenalty: 1.3,
        frequencyPenalty: 0.5,
        presencePenalty: 0.2,
        logitBias: [
          [4, 3],
          [4, -1],
          [9, -100],
        ],
        seed: 1,
      },
      vocab,
      [1, 2, 3, 4],
    );
    sampler.took(3);
    sampler.took(3);
    sampler.took(9);
    expect(sampler.adjusts).toBe(true);
    expect(sampler.boundScale).toBeCloseTo(1.3);
    const row = Float32Array.from({ length: vocab }, (_, n) => (n % 7) - 3.5);
    const changed = sampler.adjustScores(row, 0, vocab);
    for (let n = 0; n < vocab; n++) {
      expect(changed[n]).toBeCloseTo(sampler.adjustExact(n, row[n] as number), 5);
    }
    // Penalised (1 and 2: the prompt), counted twice (3), biased twice (4: +3 − 1), banned (9), untouched (10).
    expect(changed[1]).toBeCloseTo(-2.5 * 1.3, 5);
    expect(changed[2]).toBeCloseTo(-1.5 * 1.3, 5);
    expect(changed[3]).toBeCloseTo(-0.5 * 1.3 - 2 * 0.5 - 0.2, 5);
    expect(changed[4]).toBeCloseTo(0.5 / 1.3 + 2, 5);
    expect(changed[9]).toBeLessThan(-99);
    expect(changed[10]).toBe(row[10]);
    expect(sampler.adjustSlack).toBeGreaterThan(0);
  });
});

describe("the head's rows read from the model file", () => {
  it('score as the rows in memory do, wherever the matrix starts in the file', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-head-rows-'));
    try {
      const vocab = 50;
      const hidden = 64;
      const w = Float32Array.from({ length: vocab * hidden }, (_, i) => Math.sin(i * 1.7));
      const h = Float32Array.from({ length: 2 * hidden }, (_, i) => Math.cos(i));
      const file = path.join(dir, 'weights.bin');
      // Seven bytes before the matrix: an offset that is not a multiple of 4, as raw_data inside a .onnx is.
      writeFileSync(file, Buffer.concat([Buffer.alloc(7, 1), Buffer.from(w.buffer)]));
      const rows = new FileRows(file, 7, hidden);
      const memory = new MemoryRows(w, hidden);
      for (const n of [0, 1, 17, vocab - 1]) expect(rows.dot(n, h, hidden)).toBe(memory.dot(n, h, hidden));
      rows.close();
      // Closed, a row read again opens the file again.
      expect(rows.dot(3, h, 0)).toBe(memory.dot(3, h, 0));
      rows.close();
      expect(() => new FileRows(file, 7, hidden).dot(vocab, h, 0)).toThrow(/ended before the head's row 50/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('read the file they were made from: one renamed over it is not read, one changed in place is refused', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-head-rows-'));
    try {
      const hidden = 4;
      const file = path.join(dir, 'model.onnx');
      const w = (v: number) => Buffer.from(new Float32Array(8 * hidden).fill(v).buffer);
      writeFileSync(file, w(1));
      const h = new Float32Array(hidden).fill(1);
      const rows = new FileRows(file, 0, hidden);
      // An export written again into the package: a new file renamed over the old one.
      writeFileSync(`${file}.new`, w(9));
      renameSync(`${file}.new`, file);
      expect(rows.dot(0, h, 0)).toBe(4);
      rows.close();
      // Closed, it opens the path again: another file now, refused.
      expect(() => rows.dot(1, h, 0)).toThrow(/changed on disk after the model was loaded.*Load the model again/);
      const inPlace = new FileRows(file, 0, hidden);
      writeFileSync(file, w(5));
      expect(() => inPlace.dot(2, h, 0)).toThrow(/changed on disk after the model was loaded/);
      inPlace.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keep the rows read last: a row that comes back is not read again, and every score stays exact', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-head-rows-'));
    try {
      const vocab = 40;
      const hidden = 16;
      const w = Float32Array.from({ length: vocab * hidden }, (_, i) => Math.sin(i * 0.37) * (1 + (i % 5)));
      const h = Float32Array.from({ length: hidden }, (_, i) => Math.cos(i * 1.3));
      const file = path.join(dir, 'weights.bin');
      writeFileSync(file, Buffer.concat([Buffer.alloc(3), Buffer.from(w.buffer)]));
      const memory = new MemoryRows(w, hidden);
      const rows = new FileRows(file, 3, hidden, 4);
      // It counts the rows it keeps as memory it holds.
      expect(rows.bytes).toBe(4 * hidden * 4);
      // Picks whose candidates come back: four rows, again and again.
      for (let pick = 0; pick < 10; pick++) {
        for (const n of [5, 9, 31, 2]) expect(rows.dot(n, h, 0)).toBe(memory.dot(n, h, 0));
      }
      expect(rows.reads).toBe(4);
      // A fifth row takes the place of the oldest read (5); the other three are still kept.
      expect(rows.dot(17, h, 0)).toBe(memory.dot(17, h, 0));
      for (const n of [9, 31, 2, 17]) expect(rows.dot(n, h, 0)).toBe(memory.dot(n, h, 0));
      expect(rows.reads).toBe(5);
      expect(rows.dot(5, h, 0)).toBe(memory.dot(5, h, 0));
      expect(rows.reads).toBe(6);
      // Any order of rows, more than it keeps: every score is the row's own.
      fc.assert(
        fc.property(fc.array(fc.nat({ max: vocab - 1 }), { maxLength: 60 }), (ns) => {
          for (const n of ns) expect(rows.dot(n, h, 0)).toBe(memory.dot(n, h, 0));
        }),
        { numRuns: 200 },
      );
      rows.close();
      // A row past the file's end is not kept (it is an error again next time), and takes no row's place.
      const small = new FileRows(file, 3, hidden, 2);
      expect(small.dot(1, h, 0)).toBe(memory.dot(1, h, 0));
      expect(() => small.dot(vocab, h, 0)).toThrow(/ended before the head's row 40/);
      expect(() => small.dot(vocab, h, 0)).toThrow(/ended before the head's row 40/);
      expect(small.dot(1, h, 0)).toBe(memory.dot(1, h, 0));
      expect(small.reads).toBe(1);
      small.close();
      expect(() => new FileRows(file, 3, hidden, 0)).toThrow(/at least one row/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
