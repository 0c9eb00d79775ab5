import { gumbel } from '../../src/main/engine/gumbel';

/**
 * The Gumbel-max draw of `key` written plainly: the index of the largest score + temperature × noise with every
 * token's noise computed (the lowest index among equals), −1 when none is a number above −∞.
 */
export function plainGumbelMax(scores: ArrayLike<number>, temperature: number, key: number): number {
  let best = -1;
  let bestValue = Number.NEGATIVE_INFINITY;
  for (let n = 0; n < scores.length; n++) {
    const value = (scores[n] as number) + temperature * gumbel(key, n);
    if (value > bestValue) {
      bestValue = value;
      best = n;
    }
  }
  return best;
}
