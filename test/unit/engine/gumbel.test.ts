/**
 * Whole-vocabulary draws by the Gumbel-max trick (src/main/engine/gumbel.ts):
 * the bins' bounds hold every token's noise, the draw that computes the noise
 * of a few tokens is the argmax over all of them, and the draws follow the
 * softmax at their temperature.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { gumbel, gumbelArgmax, NOISE_BITS, NOISE_HIGH, NOISE_LOW, noiseBin } from '../../../src/main/engine/gumbel';
import { createRng } from '../../../src/main/engine/sampling';
import { plainGumbelMax } from '../../helpers/gumbel-max';

describe('the noise of a draw', () => {
  it("lies within its bin's bounds, is finite, and differs by key and token", () => {
    const rand = createRng(5);
    const seen = new Set<number>();
    const outside: string[] = [];
    for (let i = 0; i < 200_000; i++) {
      const key = Math.floor(rand() * 2 ** 32);
      const n = Math.floor(rand() * 200_000);
      const g = gumbel(key, n);
      const bin = noiseBin(key, n);
      if (!(Number.isFinite(g) && g >= (NOISE_LOW[bin] as number) && g <= (NOISE_HIGH[bin] as number))) {
        outside.push(`noise ${g} of key ${key}, token ${n}, bin ${bin}`);
      }
      if (i < 1000) seen.add(g);
    }
    expect(outside).toEqual([]);
    expect(seen.size).toBe(1000);
    // The bins cover the noise's range in order: each ends where the next begins.
    for (let b = 1; b < 2 ** NOISE_BITS; b++) {
      expect(NOISE_LOW[b] as number).toBeLessThan(NOISE_HIGH[b - 1] as number);
      expect(NOISE_LOW[b] as number).toBeGreaterThan(NOISE_LOW[b - 1] as number);
    }
  });

  it('is Gumbel-distributed: its mean is the Euler–Mascheroni constant and its tail is exp(−x) deep', () => {
    const n = 400_000;
    let sum = 0;
    let above4 = 0;
    for (let i = 0; i < n; i++) {
      const g = gumbel(0x1234567, i);
      sum += g;
      if (g > 4) above4++;
    }
    // Var = π²/6: the mean of 400 000 is within 4 standard errors (0.008) of 0.5772.
    expect(Math.abs(sum / n - 0.5772156649)).toBeLessThan(0.008);
    // P(g > 4) = 1 − exp(−exp(−4)) = 0.01815.
    expect(Math.abs(above4 / n - 0.018149)).toBeLessThan(4 * Math.sqrt((0.018149 * 0.98) / n));
  });
});

describe('gumbelArgmax', () => {
  const cases = fc.record({
    vocab: fc.oneof(fc.integer({ min: 1, max: 6000 }), fc.integer({ min: 4600, max: 6000 })),
    seed: fc.integer({ min: 1, max: 2 ** 30 }),
    spread: fc.constantFrom(0.01, 1, 8),
    rising: fc.boolean(),
    coarse: fc.boolean(),
    /**
     * A few scores that are not numbers, −∞ or +∞; every score −∞; or the first 4 500 (the first pass keeps each of
     * them, past its array's end, so the second reads every token).
     */
    odd: fc.constantFrom('none', 'nan', '-inf', '+inf', 'all -inf', '-inf first'),
    temperature: fc.constantFrom(0.05, 0.7, 1, 2),
  });

  it('is the argmax over every token of score + T · noise, whatever the scores', () => {
    fc.assert(
      fc.property(cases, (c) => {
        const rand = createRng(c.seed);
        const x = Float32Array.from({ length: c.vocab }, (_, n) => {
          const v = (rand() + rand() - 1) * c.spread + (c.rising ? n * 1e-3 : 0);
          return c.coarse ? Math.round(v * 4) / 4 : v;
        });
        if (c.odd === 'all -inf') x.fill(Number.NEGATIVE_INFINITY);
        else if (c.odd === '-inf first') x.fill(Number.NEGATIVE_INFINITY, 0, Math.min(4500, c.vocab - 1));
        else if (c.odd !== 'none') {
          const value = { nan: Number.NaN, '-inf': Number.NEGATIVE_INFINITY, '+inf': Number.POSITIVE_INFINITY }[c.odd];
          for (let i = 0; i < 3; i++) x[Math.floor(rand() * c.vocab)] = value;
        }
        for (let draw = 0; draw < 3; draw++) {
          const key = Math.floor(rand() * 2 ** 32);
          // At an offset in a longer row, as the batch's logits hold it.
          const row = new Float32Array(c.vocab + 7).fill(1e9);
          row.set(x, 5);
          expect(gumbelArgmax(row, 5, c.vocab, c.temperature, key)).toBe(plainGumbelMax(x, c.temperature, key));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('draws with the softmax at its temperature (a peaked vocabulary of 1000, 100 000 draws)', () => {
    const rand = createRng(17);
    const x = Float32Array.from({ length: 1000 }, () => rand() - 0.5);
    x[10] = 4;
    x[500] = 3.5;
    x[999] = 3;
    for (const temperature of [0.7, 2]) {
      const weights = Array.from(x, (v) => Math.exp(v / temperature));
      const sum = weights.reduce((a, b) => a + b, 0);
      const counts = new Float64Array(1000);
      const draws = 100_000;
      const keys = createRng(temperature * 1000);
      for (let i = 0; i < draws; i++) {
        const id = gumbelArgmax(x, 0, 1000, temperature, Math.floor(keys() * 2 ** 32));
        counts[id] = (counts[id] as number) + 1;
      }
      // The three likeliest tokens and the rest together: each within 4.5 standard errors of its probability.
      const groups = [
        [10],
        [500],
        [999],
        Array.from({ length: 1000 }, (_, i) => i).filter((i) => ![10, 500, 999].includes(i)),
      ];
      for (const group of groups) {
        const p = group.reduce((a, i) => a + (weights[i] as number), 0) / sum;
        const f = group.reduce((a, i) => a + (counts[i] as number), 0) / draws;
        expect(Math.abs(f - p), `T ${temperature}, tokens ${group.length === 1 ? group[0] : 'the rest'}`).toBeLessThan(
          4.5 * Math.sqrt((p * (1 - p)) / draws),
        );
      }
    }
  });
});
