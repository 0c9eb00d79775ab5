import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { SamplingParams } from '../../../src/main/engine/protocol';
import { argmax, createRng, Sampler, topKIndices } from '../../../src/main/engine/sampling';

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
    fc.assert(
      fc.property(
        fc.array(fc.float({ noNaN: true, min: -100, max: 100 }), { minLength: 1, maxLength: 200 }),
        fc.nat(50),
        (vals, k0) => {
          const x = Float32Array.from(vals);
          const k = Math.max(1, Math.min(k0, x.length));
          const got = [...topKIndices(x, k)].map((i) => x[i] as number).sort((a, b) => b - a);
          const want = [...x].sort((a, b) => b - a).slice(0, k);
          expect(got).toEqual(want);
        },
      ),
    );
  });
});

describe('Sampler', () => {
  const logits = new Float32Array([0.1, 2.0, 1.9, -1, 0.5, 1.8]);

  it('greedy picks the argmax', () => {
    expect(new Sampler(params({ greedy: true }), 6).sample(logits, 0, 6)).toBe(1);
    expect(new Sampler(params({ temperature: 0 }), 6).sample(logits, 0, 6)).toBe(1);
  });

  it('the same seed gives the same tokens; another seed gives others', () => {
    const draw = (seed: number) => {
      const s = new Sampler(params({ seed }), 6);
      return Array.from({ length: 64 }, () => s.sample(logits, 0, 6));
    };
    expect(draw(7)).toEqual(draw(7));
    expect(draw(7)).not.toEqual(draw(8));
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

  it('repetition penalty moves greedy off a seen token', () => {
    const s = new Sampler(params({ greedy: true, repetitionPenalty: 1.3 }), 6);
    expect(s.sample(logits, 0, 6, new Set([1]))).toBe(2);
    expect(s.sample(logits, 0, 6, new Set<number>())).toBe(1);
  });

  it('reads the row at the given offset', () => {
    const two = new Float32Array([5, 0, 0, 0, 0, 7]);
    expect(new Sampler(params({ greedy: true }), 3).sample(two, 3, 3)).toBe(2);
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
