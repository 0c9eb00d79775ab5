import { describe, expect, it } from 'vitest';
import { prefillGroups } from '../../../src/main/engine/batcher';

const one = (longest: number, rows = 1) => ({ rows, longest });

describe('prefillGroups', () => {
  it('puts prompts of similar length into one group', () => {
    expect(prefillGroups([one(32), one(30), one(31), one(32)])).toEqual([[1, 2, 0, 3]]);
  });

  it('keeps a long prompt out of a group of short ones (padding would multiply the work)', () => {
    const groups = prefillGroups([one(10), one(500), one(12), one(11)]);
    expect(groups).toEqual([[0, 3, 2], [1]]);
  });

  it('bounds a group by padded tokens, counting every row of a multi-row request', () => {
    // 8 × 200 = 1600 padded tokens is over the cap: split.
    const groups = prefillGroups(Array.from({ length: 8 }, () => one(200)));
    expect(groups.length).toBeGreaterThan(1);
    for (const g of groups) expect(g.length * 200).toBeLessThanOrEqual(1024);
    expect(groups.flat().sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(prefillGroups([one(100, 6), one(100, 6)])).toEqual([[0], [1]]);
  });

  it('always returns every member exactly once, a lone member in its own group', () => {
    expect(prefillGroups([])).toEqual([]);
    expect(prefillGroups([one(5000)])).toEqual([[0]]);
    const lengths = [3, 90, 4, 400, 88, 5, 1000, 91].map((n) => one(n));
    expect(
      prefillGroups(lengths)
        .flat()
        .sort((a, b) => a - b),
    ).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
});
