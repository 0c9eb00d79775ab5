import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ReplyConstraint } from '../../../src/main/engine/json-constraint';
import type { SamplingParams } from '../../../src/main/engine/protocol';
import {
  argmax,
  byWeight,
  createRng,
  logprobsOf,
  Sampler,
  SCREEN_DRAW_MOST,
  SCREEN_TOP_K,
  topKIndices,
} from '../../../src/main/engine/sampling';
import { plainGumbelMax } from '../../helpers/gumbel-max';

/** A constraint that allows every token (JSON mode's place in a sampler). */
const anyToken: ReplyConstraint = { done: false, allows: () => true, mask: (_x, vocab) => vocab, accept: () => {} };

/** A constraint that allows the even ids only. */
const evenTokens: ReplyConstraint = {
  done: false,
  allows: (id) => id % 2 === 0,
  mask: (x, vocab) => {
    for (let n = 1; n < vocab; n += 2) x[n] = Number.NEGATIVE_INFINITY;
    return Math.ceil(vocab / 2);
  },
  accept: () => {},
};

function params(p: Partial<SamplingParams> = {}): SamplingParams {
  return { greedy: false, temperature: 1, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 42, ...p };
}

describe('argmax', () => {
  it('finds the largest value within the window', () => {
    const x = new Float32Array([9, 1, 5, 3, 9]);
    expect(argmax(x, 1, 3)).toBe(1);
    expect(argmax(x, 0, 5)).toBe(0);
  });
});

describe('topKIndices', () => {
  it('returns exactly the k largest indices', () => {
    // 0 and -0 are equal values: both are among the 2 largest here, in whichever order.
    expect([...topKIndices(Float32Array.from([0, -0, -1]), 2)].sort()).toEqual([0, 1]);
    fc.assert(
      fc.property(
        fc.array(fc.float({ noNaN: true, min: -100, max: 100 }), { minLength: 1, maxLength: 200 }),
        fc.nat(50),
        (vals, k0) => {
          const x = Float32Array.from(vals);
          const k = Math.max(1, Math.min(k0, x.length));
          // Compared as numbers: 0 and -0 are equal values, and toEqual would tell them apart (with 0 and -0 both
          // among the k, which comes first is the order of the indices, not of the values).
          const plus = (v: number) => v + 0;
          const got = [...topKIndices(x, k)].map((i) => plus(x[i] as number)).sort((a, b) => b - a);
          const want = [...x]
            .map(plus)
            .sort((a, b) => b - a)
            .slice(0, k);
          expect(got).toEqual(want);
        },
      ),
    );
  });
});

describe('byWeight', () => {
  /** The order a comparison sort gives: heaviest first, equal weights by position. */
  const sorted = (ws: readonly number[]) =>
    ws.map((_, i) => i).sort((a, b) => (ws[b] as number) - (ws[a] as number) || a - b);
  const ordered = (ws: readonly number[]) => {
    // A longer buffer than m, as the sampler's scratch is.
    const probs = new Float64Array(ws.length + 5).fill(0.75);
    probs.set(ws);
    return [...byWeight(probs, ws.length)];
  };

  it('orders positions as a comparison sort does, heaviest first and equal weights by position', () => {
    const weight = fc.oneof(
      fc.constantFrom(0, 1, 0.5, Number.MIN_VALUE, 1e-300),
      fc.double({ min: 0, max: 1, noNaN: true }).map((v) => v + 0),
      // Weights whose high 32 bits are equal: the radix keys tie, the weights do not.
      fc.integer({ min: 0, max: 15 }).map((k) => 0.3 * (1 + k * 2 ** -40)),
    );
    fc.assert(
      fc.property(fc.array(weight, { maxLength: 3000, size: 'max' }), (ws) => {
        expect(ordered(ws)).toEqual(sorted(ws));
      }),
      { numRuns: 200 },
    );
  });

  it('orders a whole vocabulary of softmax weights: spread, far below float32 range, nearly equal, or ties', () => {
    const rand = createRng(11);
    const spread = (scale: number) => (rand() + rand() + rand() - 3) * scale;
    const vocabularies = {
      spread: () => Math.exp(spread(8)),
      tiny: () => Math.exp(spread(80)),
      // Scores that hardly differ: their weights share a few keys, in runs of thousands.
      flat: () => Math.exp(spread(1e-6)),
      ties: () => (rand() < 0.5 ? 0 : Math.exp(Math.round(spread(4)))),
    };
    for (const [name, weight] of Object.entries(vocabularies)) {
      const ws = Array.from({ length: 50_257 }, weight);
      expect(ordered(ws), name).toEqual(sorted(ws));
    }
  });
});

describe('Sampler', () => {
  const logits = new Float32Array([0.1, 2.0, 1.9, -1, 0.5, 1.8]);

  it('greedy picks the argmax', () => {
    expect(new Sampler(params({ greedy: true }), 6).sample(logits, 0, 6)).toBe(1);
    expect(new Sampler(params({ temperature: 0 }), 6).sample(logits, 0, 6)).toBe(1);
  });

  it('scores that are not numbers (damaged weights) fail as the package, greedy or sampled, never a reply of token 0', () => {
    const nan = new Float32Array(6).fill(Number.NaN);
    for (const p of [params({ greedy: true }), params({ seed: 1 }), params({ seed: 1, topK: 2, topP: 0.5 })]) {
      let error: unknown;
      try {
        new Sampler(p, 6).sample(nan, 0, 6);
      } catch (err) {
        error = err;
      }
      expect(error).toMatchObject({ code: 'PACKAGE_INVALID', detail: { field: 'logits' } });
      expect((error as Error).message).toMatch(/not numbers \(NaN\).*replace the package/);
    }
    // One score not a number among good ones: it is never drawn, and the others are drawn as ever.
    const some = new Float32Array([0.1, Number.NaN, 1.9, -1, 0.5, 1.8]);
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const s = new Sampler(params({ seed }), 6);
      for (let i = 0; i < 16; i++) expect(s.sample(some, 0, 6)).not.toBe(1);
    }
    expect(new Sampler(params({ greedy: true }), 6).sample(some, 0, 6)).toBe(2);
    // Through top-k too: a NaN that reaches the heap's root must not keep the best scores out.
    const wide = new Float32Array(1000);
    wide[0] = Number.NaN;
    wide[999] = 50;
    const topK = new Sampler(params({ seed: 3, topK: 40 }), 1000);
    for (let i = 0; i < 8; i++) expect(topK.sample(wide, 0, 1000)).toBe(999);
  });

  it('the same seed gives the same tokens; another seed gives others', () => {
    const draw = (seed: number) => {
      const s = new Sampler(params({ seed }), 6);
      return Array.from({ length: 64 }, () => s.sample(logits, 0, 6));
    };
    expect(draw(7)).toEqual(draw(7));
    expect(draw(7)).not.toEqual(draw(8));
    // Seeds that differ only above their low 32 bits (any whole number up to 2^53 is a seed) differ too.
    expect(draw(0)).not.toEqual(draw(2 ** 32));
    expect(draw(7)).not.toEqual(draw(7 + 2 ** 40));
    expect(draw(2 ** 53 - 1)).not.toEqual(draw(2 ** 32 - 1));
  });

  it('top-k 1 is greedy', () => {
    const s = new Sampler(params({ topK: 1, seed: 3 }), 6);
    for (let i = 0; i < 20; i++) expect(s.sample(logits, 0, 6)).toBe(1);
  });

  it('top-k limits draws to the k best tokens', () => {
    const s = new Sampler(params({ topK: 3, temperature: 5, seed: 11 }), 6);
    const seen = new Set(Array.from({ length: 300 }, () => s.sample(logits, 0, 6)));
    expect([...seen].sort()).toEqual([1, 2, 5]);
  });

  it('a tiny top-p keeps only the most likely token', () => {
    const s = new Sampler(params({ topP: 0.01, seed: 5 }), 6);
    for (let i = 0; i < 20; i++) expect(s.sample(logits, 0, 6)).toBe(1);
  });

  it('min-p drops tokens far below the best', () => {
    const s = new Sampler(params({ minP: 0.5, seed: 9 }), 6);
    const seen = new Set(Array.from({ length: 300 }, () => s.sample(logits, 0, 6)));
    // exp(1.8-2)=0.82, exp(1.9-2)=0.90 stay; exp(0.5-2)=0.22 and below go.
    expect([...seen].sort()).toEqual([1, 2, 5]);
  });

  it('sampling frequencies follow the softmax', () => {
    const s = new Sampler(params({ seed: 123 }), 6);
    const counts = new Array(6).fill(0);
    const n = 20000;
    for (let i = 0; i < n; i++) counts[s.sample(logits, 0, 6)]++;
    const z = [...logits].map(Math.exp);
    const sum = z.reduce((a, b) => a + b, 0);
    for (const [i, v] of z.entries()) expect(Math.abs(counts[i] / n - v / sum)).toBeLessThan(0.015);
  });

  const greedyRun = (p: Partial<SamplingParams>, n: number, prompt: number[] = []) => {
    const s = new Sampler(params({ greedy: true, ...p }), 6, prompt);
    return Array.from({ length: n }, () => s.sample(logits, 0, 6));
  };

  it('repetition penalty moves greedy off a token of the prompt, and off the tokens it picked', () => {
    // 2.0 / 1.3 = 1.54 falls below 1.9; then 1.9 / 1.3 = 1.46 below 1.8.
    expect(greedyRun({ repetitionPenalty: 1.3 }, 2, [1])).toEqual([2, 5]);
    expect(greedyRun({ repetitionPenalty: 1.3 }, 3)).toEqual([1, 2, 5]);
    expect(greedyRun({}, 3, [1])).toEqual([1, 1, 1]);
  });

  it('a repetition window penalises only the last n tokens of the prompt and reply', () => {
    // Window 1: the token just written is penalised, so greedy alternates between the two best.
    expect(greedyRun({ repetitionPenalty: 1.3, repetitionWindow: 1 }, 4, [1])).toEqual([2, 1, 2, 1]);
    // The prompt's 1 has left a window of 2 (its last two tokens are 0s); without one, it is penalised.
    expect(greedyRun({ repetitionPenalty: 1.3, repetitionWindow: 2 }, 1, [1, 0, 0])).toEqual([1]);
    expect(greedyRun({ repetitionPenalty: 1.3 }, 1, [1, 0, 0])).toEqual([2]);
    // Window 0 is the whole history.
    expect(greedyRun({ repetitionPenalty: 1.3, repetitionWindow: 0 }, 3)).toEqual([1, 2, 5]);
  });

  it('with a window, the penalised ids are those of the last n tokens, whatever the history (a model of it)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -40, max: 40 }), { minLength: 8, maxLength: 8 }),
        fc.array(fc.nat(7), { maxLength: 30 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 25 }),
        (raw, prompt, window, steps) => {
          const x = Float32Array.from(raw, (v) => v / 10);
          const penalty = 1.7;
          const s = new Sampler(
            params({ greedy: true, repetitionPenalty: penalty, repetitionWindow: window }),
            8,
            prompt,
          );
          const history = [...prompt];
          for (let i = 0; i < steps; i++) {
            const recent = new Set(history.slice(-window));
            const y = Array.from(x, (v, id) => (recent.has(id) ? Math.fround(v > 0 ? v / penalty : v * penalty) : v));
            // The first of the largest, as argmax picks (over float32 values, as the sampler's scratch holds them).
            const want = y.indexOf(Math.max(...y));
            const got = s.sample(x, 0, 8);
            expect(got).toBe(want);
            history.push(got);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('frequency penalty grows with each occurrence; presence penalty counts a token once', () => {
    // 0.15 per occurrence: 1 (2.0) → 2 (1.9 > 1.85) → 1 (1.85 > 1.8 > 1.75) → 5 (1.8 > 1.75 > 1.7).
    expect(greedyRun({ frequencyPenalty: 0.15 }, 4)).toEqual([1, 2, 1, 5]);
    // Once 1 and 2 have occurred they stay at 1.85 and 1.75, so 1 wins from then on.
    expect(greedyRun({ presencePenalty: 0.15 }, 5)).toEqual([1, 2, 1, 1, 1]);
    // The prompt does not count (OpenAI's penalties are over the generated text).
    expect(greedyRun({ frequencyPenalty: 0.15 }, 1, [1, 1, 1])).toEqual([1]);
    // Negative penalties favour what was already said: a sampled run sticks to one token once it has said it a few
    // times (each occurrence adds 2 to its score), whatever the seed; without them, every token comes up.
    const counts = (p: Partial<SamplingParams>, seed: number) => {
      const s = new Sampler(params({ seed, ...p }), 6);
      const n = new Array(6).fill(0);
      for (let i = 0; i < 200; i++) n[s.sample(logits, 0, 6)]++;
      return n;
    };
    for (const seed of [21, 22, 23, 24]) {
      expect(counts({}, seed).every((n) => n > 0)).toBe(true);
      expect(Math.max(...counts({ frequencyPenalty: -2, presencePenalty: -2 }, seed))).toBeGreaterThanOrEqual(195);
    }
  });

  it('logit bias bans and forces tokens, greedy or sampled', () => {
    expect(greedyRun({ logitBias: [[1, -100]] }, 2)).toEqual([2, 2]);
    expect(greedyRun({ logitBias: [[3, 100]] }, 2)).toEqual([3, 3]);
    // Ids past the window are ignored (the host refuses them before they get here).
    expect(greedyRun({ logitBias: [[9, 100]] }, 1)).toEqual([1]);
    const s = new Sampler(
      params({
        temperature: 5,
        seed: 4,
        logitBias: [
          [1, -100],
          [2, -100],
          [5, -100],
        ],
      }),
      6,
    );
    const seen = new Set(Array.from({ length: 300 }, () => s.sample(logits, 0, 6)));
    expect([...seen].sort()).toEqual([0, 3, 4]);
    const forced = new Sampler(params({ temperature: 2, seed: 4, logitBias: [[3, 100]] }), 6);
    for (let i = 0; i < 50; i++) expect(forced.sample(logits, 0, 6)).toBe(3);
  });

  it('reads the row at the given offset', () => {
    const two = new Float32Array([5, 0, 0, 0, 0, 7]);
    expect(new Sampler(params({ greedy: true }), 3).sample(two, 3, 3)).toBe(2);
  });
});

/**
 * The draw written plainly (as kvdesk first had it): every candidate's weight, every candidate sorted for top-p,
 * arrays of numbers; over the whole vocabulary by temperature alone, the Gumbel-max draw with every token's noise. The sampler must draw the same token from the same random number, whatever the scores.
 */
function referenceSample(x: Float32Array, p: SamplingParams, rng: () => number): number {
  const vocab = x.length;
  if (!(p.topK > 0 && p.topK < vocab) && p.topP >= 1 && !(p.minP > 0)) {
    // Over the whole vocabulary by temperature alone: the Gumbel-max draw, every token's noise computed.
    const best = plainGumbelMax(x, p.temperature, Math.floor(rng() * 2 ** 32));
    return best >= 0 ? best : argmax(x, 0, vocab);
  }
  return referenceDraw(x, p, rng);
}

/** The draw by weights: one random number walks the candidates' cumulative weights. */
function referenceDraw(x: Float32Array, p: SamplingParams, rng: () => number): number {
  const vocab = x.length;
  const k = p.topK > 0 ? Math.min(p.topK, vocab) : vocab;
  // The top k likeliest first, equal scores the lower id first (as the head screen's exact top-k orders them); a
  // score that is not a number ranks as −∞.
  const rank = (i: number) => (Number.isNaN(x[i]) ? Number.NEGATIVE_INFINITY : (x[i] as number));
  const candidates = [...topKIndices(x, k)];
  if (k < vocab) candidates.sort((a, b) => rank(b) - rank(a) || a - b);
  let max = Number.NEGATIVE_INFINITY;
  for (const idx of candidates) if ((x[idx] as number) > max) max = x[idx] as number;
  const invT = 1 / p.temperature;
  const probs = candidates.map((idx) => {
    const e = Math.exp(((x[idx] as number) - max) * invT);
    return Number.isNaN(e) ? 0 : e;
  });
  const sum = probs.reduce((a, b) => a + b, 0);
  const minKeep = p.minP > 0 ? p.minP / sum : 0;
  let order = candidates.map((_, i) => i);
  if (p.topP < 1) {
    order.sort((a, b) => (probs[b] as number) - (probs[a] as number));
    let cumulative = 0;
    const cut = order.findIndex((i) => {
      cumulative += (probs[i] as number) / sum;
      return cumulative >= p.topP;
    });
    if (cut >= 0) order = order.slice(0, cut + 1);
  }
  const kept = order.filter((i) => !((probs[i] as number) / sum < minKeep));
  if (kept.length === 0) return argmax(x, 0, vocab);
  let r = rng() * kept.reduce((a, i) => a + (probs[i] as number), 0);
  for (const i of kept) {
    r -= probs[i] as number;
    if (r <= 0) return candidates[i] as number;
  }
  return candidates[kept[kept.length - 1] as number] as number;
}

describe('Sampler draws what the plain reference draws', () => {
  const scores = fc.record({
    vocab: fc.integer({ min: 1, max: 3000 }),
    seed: fc.integer({ min: 1, max: 2 ** 30 }),
    /** Spread of the bulk; a few tokens stand this far above it (a trained model's peak), or none. */
    spread: fc.constantFrom(0.01, 1, 8),
    peak: fc.constantFrom(0, 6, 20),
    /** Rounded scores: many equal ones. */
    coarse: fc.boolean(),
    /** A few scores that are not numbers, or −∞ (a banned token). */
    odd: fc.constantFrom('none', 'nan', '-inf'),
    temperature: fc.constantFrom(0.1, 0.7, 1, 2),
    topK: fc.constantFrom(0, 1, 5, 50, 5000),
    topP: fc.constantFrom(1, 0.999, 0.95, 0.9, 0.5, 0.01),
    minP: fc.constantFrom(0, 0.05, 0.5),
  });

  it('top-p ends its nucleus at the token whose share reaches it exactly (in a vocabulary past the first heap)', () => {
    // Two equal tokens, every other banned: the first one's share is exactly 0.5.
    const x = new Float32Array(300).fill(Number.NEGATIVE_INFINITY);
    x[170] = 1;
    x[40] = 1;
    const s = new Sampler(params({ topP: 0.5, seed: 3 }), 300);
    expect(new Set(Array.from({ length: 40 }, () => s.sample(x, 0, 300)))).toEqual(new Set([40]));
    const wider = new Sampler(params({ topP: 0.51, seed: 3 }), 300);
    expect(new Set(Array.from({ length: 40 }, () => wider.sample(x, 0, 300)))).toEqual(new Set([40, 170]));
  });

  it('top-p over a whole vocabulary of 50 257 sorts only the heaviest bins of weights, and draws what sorting all does', () => {
    // Flat (a nucleus of thousands: past the bins' limit, sorted whole), spread, or peaked (a nucleus of a few).
    for (const [spread, peak] of [
      [1, 0],
      [5, 0],
      [12, 0],
      [3, 14],
    ] as const) {
      const rand = createRng(spread * 100 + peak);
      const x = Float32Array.from({ length: 50_257 }, () => (rand() + rand() + rand() + rand() - 2) * spread);
      for (let i = 0; i < 5 && peak > 0; i++) x[Math.floor(rand() * x.length)] = peak - i;
      for (const topP of [0.5, 0.9, 0.99]) {
        const p = params({ temperature: 0.7, topP, seed: 11 });
        const sampler = new Sampler(p, x.length);
        const rng = createRng(p.seed);
        for (let draw = 0; draw < 3; draw++) expect(sampler.sample(x, 0, x.length)).toBe(referenceSample(x, p, rng));
      }
    }
  });

  it('for any scores, top-k, top-p, min-p and temperature, draw after draw', () => {
    fc.assert(
      fc.property(scores, (c) => {
        const rand = createRng(c.seed);
        const x = Float32Array.from({ length: c.vocab }, () => {
          const v = (rand() + rand() + rand() - 1.5) * c.spread;
          return c.coarse ? Math.round(v * 4) / 4 : v;
        });
        for (let i = 0; i < 5 && c.peak > 0; i++) x[Math.floor(rand() * c.vocab)] = c.peak - i;
        if (c.odd !== 'none') {
          for (let i = 0; i < 3; i++)
            x[Math.floor(rand() * c.vocab)] = c.odd === 'nan' ? Number.NaN : Number.NEGATIVE_INFINITY;
        }
        const p = params({ temperature: c.temperature, topK: c.topK, topP: c.topP, minP: c.minP, seed: c.seed });
        const sampler = new Sampler(p, c.vocab);
        const rng = createRng(p.seed);
        for (let draw = 0; draw < 4; draw++) {
          const want = referenceSample(x, p, rng);
          if (Number.isNaN(x[want])) expect(() => sampler.sample(x, 0, c.vocab)).toThrow();
          else expect(sampler.sample(x, 0, c.vocab)).toBe(want);
        }
      }),
      { numRuns: 400 },
    );
  });
});

describe('Sampler draws among an exact top-k (the head screen’s)', () => {
  it('takes its candidates from the screen only for a plain sampled draw with a top-k of at most SCREEN_TOP_K', () => {
    expect(new Sampler(params({ topK: 50 }), 100).screenTopK).toBe(50);
    expect(new Sampler(params({ topK: SCREEN_TOP_K }), 1000).screenTopK).toBe(SCREEN_TOP_K);
    expect(new Sampler(params({ topK: SCREEN_TOP_K + 1 }), 1000).screenTopK).toBe(0);
    expect(new Sampler(params({ topK: 0 }), 100).screenTopK).toBe(0);
    expect(new Sampler(params({ topK: 50, greedy: true }), 100).screenTopK).toBe(0);
    expect(new Sampler(params({ topK: 50, temperature: 0 }), 100).screenTopK).toBe(0);
    // Penalties and a bias change the screen's scores as they change the full ones (adjustScores); a constraint's
    // refusal is drawn again from the scores it masks (maskScores).
    expect(new Sampler(params({ topK: 50, repetitionPenalty: 1.1 }), 100).screenTopK).toBe(50);
    expect(new Sampler(params({ topK: 50, frequencyPenalty: 0.5 }), 100).screenTopK).toBe(50);
    expect(new Sampler(params({ topK: 50, logitBias: [[3, -100]] }), 100).screenTopK).toBe(50);
    expect(new Sampler(params({ topK: 50 }), 100, [], anyToken).screenTopK).toBe(50);
    // Top-p, min-p and the temperature apply among the top k: the screen gives those scores exactly.
    expect(new Sampler(params({ topK: 40, topP: 0.9, minP: 0.05, temperature: 0.7 }), 100).screenTopK).toBe(40);
  });

  it('takes the tokens min-p can keep from the screen only for a plain sampled draw by min-p and temperature alone', () => {
    expect(new Sampler(params({ minP: 0.05 }), 100).screenMinP).toBe(0.05);
    expect(new Sampler(params({ minP: 0.05, topK: 100 }), 100).screenMinP).toBe(0.05);
    expect(new Sampler(params({ minP: 0 }), 100).screenMinP).toBe(0);
    expect(new Sampler(params({ minP: 0.05, topK: 40 }), 100).screenMinP).toBe(0);
    expect(new Sampler(params({ minP: 0.05, topP: 0.9 }), 100).screenMinP).toBe(0);
    expect(new Sampler(params({ minP: 0.05, greedy: true }), 100).screenMinP).toBe(0);
    expect(new Sampler(params({ minP: 0.05, temperature: 0 }), 100).screenMinP).toBe(0);
    expect(new Sampler(params({ minP: 0.05, repetitionPenalty: 1.1 }), 100).screenMinP).toBe(0.05);
    expect(new Sampler(params({ minP: 0.05 }), 100, [], anyToken).screenMinP).toBe(0.05);
  });

  it('rests from the screen after a top-k or min-p draw that scored too many tokens: 8 draws, twice as many after each such draw in a row', () => {
    for (const p of [{ topK: 50 }, { minP: 0.05 }]) {
      const s = new Sampler(params(p), 100);
      const screens = () => s.screenTopK > 0 || s.screenMinP > 0;
      /** Full draws made before the screen again. */
      const rest = () => {
        let n = 0;
        while (!screens()) {
          expect(s.resting).toBe(true);
          // What it can draw from the screen stays (a run already screened draws each row from it).
          expect(s.screenableTopK + s.screenableMinP).toBe(p.topK ?? p.minP);
          s.fullDraw();
          n++;
        }
        expect(s.resting).toBe(false);
        return n;
      };
      s.screenedDraw(SCREEN_DRAW_MOST);
      expect(screens()).toBe(true);
      s.screenedDraw(SCREEN_DRAW_MOST + 1);
      expect(rest()).toBe(8);
      s.screenedDraw(SCREEN_DRAW_MOST + 1);
      expect(rest()).toBe(16);
      s.screenedDraw(50_000);
      expect(rest()).toBe(32);
      // A draw that fits starts the count over.
      s.screenedDraw(10);
      s.screenedDraw(SCREEN_DRAW_MOST + 1);
      expect(rest()).toBe(8);
      for (let i = 0; i < 10; i++) s.screenedDraw(SCREEN_DRAW_MOST + 1);
      expect(rest()).toBe(256);
    }
    // A draw by temperature alone never rests (its candidates are few whatever the row).
    const whole = new Sampler(params({}), 100);
    whole.screenedDraw(50_000);
    expect(whole.screenWhole).toBe(true);
  });

  it("takes top-p's nucleus from the screen only for a sampled draw by top-p without a top-k, while its last nucleus fit", () => {
    const screenable = (p: Partial<SamplingParams>) => new Sampler(params(p), 100).nucleusScreenable;
    expect(screenable({ topP: 0.9 })).toBe(true);
    expect(screenable({ topP: 0.9, minP: 0.05 })).toBe(true);
    expect(screenable({ topP: 0.9, topK: 100 })).toBe(true);
    expect(screenable({ topP: 0.9, repetitionPenalty: 1.1 })).toBe(true);
    expect(screenable({ topP: 0.9, topK: 40 })).toBe(false);
    expect(screenable({ topP: 1 })).toBe(false);
    expect(screenable({ topP: 0.9, greedy: true })).toBe(false);
    expect(screenable({ topP: 0.9, temperature: 0 })).toBe(false);
    // A prefill draws from full scores, which say whether the next nucleus fits the screen.
    const s = new Sampler(params({ topP: 0.9 }), 100);
    expect(s.screenTopP).toBe(0);
    s.nucleusFits = true;
    expect(s.screenTopP).toBe(0.9);
    expect(s.topP).toBe(0.9);
  });

  it('draws within a nucleus given likeliest first as it draws within the one it finds', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 60 }), fc.integer({ min: 1, max: 2 ** 30 }), (vocab, seed) => {
        const x = Float32Array.from({ length: vocab }, (_, i) => Math.sin(i * 12.9898 + seed) * 4);
        const p = params({ topP: 0.8, minP: 0.02, temperature: 0.9, seed });
        const order = [...x.keys()].sort((a, b) => (x[b] as number) - (x[a] as number) || a - b);
        let max = Number.NEGATIVE_INFINITY;
        for (const v of x) max = Math.max(max, v);
        const weights = order.map((n) => Math.exp(((x[n] as number) - max) / 0.9));
        const sum = weights.reduce((a, b) => a + b, 0);
        let m = 0;
        for (let cumulative = 0; m < vocab && cumulative < 0.8; m++) cumulative += (weights[m] as number) / sum;
        const ids = Int32Array.from(order.slice(0, m));
        const scores = Float32Array.from(ids, (n) => x[n] as number);
        const whole = new Sampler(p, vocab);
        const within = new Sampler(p, vocab);
        for (let draw = 0; draw < 4; draw++) expect(within.drawNucleus(ids, scores, m)).toBe(whole.sample(x, 0, vocab));
      }),
      { numRuns: 200 },
    );
  });

  it('masks what its constraint refuses, as its own pick does, and says which tokens it refused until the next change', () => {
    const s = new Sampler(params({ repetitionPenalty: 2 }), 6, [4], evenTokens);
    const row = Float32Array.of(1, 5, 2, 7, 3, 0);
    expect(s.allows(3)).toBe(false);
    expect(s.allows(4)).toBe(true);
    const masked = s.maskScores(row, 0, 6) as Float32Array;
    expect([...masked]).toEqual([
      1,
      Number.NEGATIVE_INFINITY,
      2,
      Number.NEGATIVE_INFINITY,
      1.5,
      Number.NEGATIVE_INFINITY,
    ]);
    expect([0, 1, 2, 3, 4, 5].map((n) => s.banned(n))).toEqual([false, true, false, true, false, true]);
    s.adjustScores(row, 0, 6);
    expect(s.banned(1)).toBe(false);
    expect(new Sampler(params(), 6, [], anyToken).maskScores(row, 0, 6)).not.toBeNull();
    expect(new Sampler(params(), 6).maskScores(row, 0, 6)).toBeNull();
  });

  it('draws what the plain reference draws among the same scores, draw after draw', () => {
    const cases = fc.record({
      m: fc.integer({ min: 1, max: SCREEN_TOP_K }),
      seed: fc.integer({ min: 1, max: 2 ** 30 }),
      spread: fc.constantFrom(0.01, 1, 8),
      coarse: fc.boolean(),
      temperature: fc.constantFrom(0.1, 0.7, 1, 2),
      topP: fc.constantFrom(1, 0.95, 0.9, 0.5, 0.01),
      minP: fc.constantFrom(0, 0.05, 0.5),
    });
    fc.assert(
      fc.property(cases, (c) => {
        const rand = createRng(c.seed);
        // An exact top-k as exactTopK writes it: the likeliest first, ids anywhere in a vocabulary of 50 000, and
        // stale entries past m.
        const values = Array.from({ length: c.m }, () => {
          const v = (rand() - 0.5) * c.spread;
          return c.coarse ? Math.round(v * 4) / 4 : v;
        }).sort((a, b) => b - a);
        const scores = new Float32Array(SCREEN_TOP_K).fill(99);
        scores.set(values);
        const ids = Int32Array.from({ length: SCREEN_TOP_K }, (_, j) => (j * 7919 + c.seed) % 50_000);
        const p = params({ temperature: c.temperature, topK: c.m, topP: c.topP, minP: c.minP, seed: c.seed });
        const sampler = new Sampler(p, 50_000);
        const rng = createRng(p.seed);
        for (let draw = 0; draw < 4; draw++) {
          const want = referenceDraw(Float32Array.from(values), { ...p, topK: 0 }, rng);
          expect(sampler.drawAmong(ids, scores, c.m)).toBe(ids[want]);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('createRng', () => {
  it('is uniform enough on [0, 1)', () => {
    const r = createRng(1);
    let sum = 0;
    for (let i = 0; i < 10000; i++) {
      const v = r();
      expect(v).toBeGreaterThanOrEqual(0);
      expect(v).toBeLessThan(1);
      sum += v;
    }
    expect(Math.abs(sum / 10000 - 0.5)).toBeLessThan(0.02);
  });
});

describe('logprobsOf', () => {
  /** log-softmax in float64 over a float32 row. */
  const reference = (row: Float32Array): number[] => {
    const max = Math.max(...row);
    const logZ = max + Math.log(row.reduce((sum, v) => sum + Math.exp(v - max), 0));
    return [...row].map((v) => v - logZ);
  };

  it('gives the log-softmax of the row at the offset, and its most likely ids in order', () => {
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -30, max: 30, noNaN: true }), { minLength: 1, maxLength: 80 }),
        fc.nat(),
        fc.integer({ min: 0, max: 25 }),
        (values, pick, top) => {
          const vocab = values.length;
          const padded = new Float32Array([7, 7, ...values, 7]);
          const row = padded.subarray(2, 2 + vocab);
          const ref = reference(row);
          const id = pick % vocab;
          const lp = logprobsOf(padded, 2, vocab, id, top);
          expect(lp.id).toBe(id);
          expect(lp.logprob).toBeCloseTo(ref[id] as number, 9);
          expect(lp.top).toHaveLength(Math.min(top, vocab));
          const best = [...ref.keys()].sort((a, b) => (row[b] as number) - (row[a] as number) || a - b);
          expect(lp.top.map((t) => t.id)).toEqual(best.slice(0, lp.top.length));
          for (const t of lp.top) expect(t.logprob).toBeCloseTo(ref[t.id] as number, 9);
        },
      ),
    );
  });

  it('a distribution sums to one', () => {
    const row = new Float32Array([0.1, 2.0, 1.9, -1, 0.5, 1.8]);
    const all = logprobsOf(row, 0, 6, 0, 6).top;
    expect(all.reduce((s, t) => s + Math.exp(t.logprob), 0)).toBeCloseTo(1, 12);
    expect(all[0]?.id).toBe(1);
  });
});
