/**
 * Draws over the whole vocabulary by the Gumbel-max trick: the token with the
 * largest score + T · gₙ, where the gₙ are independent Gumbel noise, is drawn
 * with exactly the softmax's probability at temperature T. The noise of token
 * n is a function of the draw's key (one number of the request's seeded
 * generator) and n, so the same draw can be made from any scores that rank
 * score + T · g the same way: float32 scores here, or the head's 8-bit screen
 * with its bounds (head-screen.ts's exactDraw), without the float32 head. A
 * seeded reply is then the same alone and batched, screened or not.
 *
 * The noise of every token costs two logarithms; a draw needs it only for the
 * few tokens that can win. A hash's top NOISE_BITS bits place a token's noise
 * between two bounds (a table), so a pass over the vocabulary compares bounds,
 * and the noise is computed for the tokens whose upper bound reaches the best
 * lower bound.
 */

/** Bits of a token's hash that place its noise in a bin of the tables. */
export const NOISE_BITS = 12;
const BINS = 1 << NOISE_BITS;
/** A hash shifted right by this many bits is its bin. */
export const NOISE_SHIFT = 32 - NOISE_BITS;

/** A 32-bit mix (lowbias32: an avalanche of every input bit). */
function mix(value: number): number {
  let x = value | 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

/** Token n's hash in the draw of `key`: its top bits are the noise's bin, and the noise's first 32 bits. */
export function noiseHash(key: number, n: number): number {
  return mix(key + Math.imul(n + 1, 0x9e3779b9));
}

/** The Gumbel noise of a uniform number u in (0, 1): −log(−log u). */
function gumbelOf(u: number): number {
  return -Math.log(-Math.log(u));
}

/**
 * Token n's noise in the draw of `key`: −log(−log u) of a uniform u made of 52 bits (the hash's 32, then 20 of a
 * second hash of the key and n), centred in its step, so 0 < u < 1 and the noise is finite (about −3.6 to 36.7).
 */
export function gumbel(key: number, n: number): number {
  const high = noiseHash(key, n);
  const low = mix((key ^ 0x6a09e667) + Math.imul(n + 1, 0x85ebca6b)) >>> 12;
  return gumbelOf((high * 2 ** 20 + low + 0.5) / 2 ** 52);
}

/** A little more than the float rounding of gumbelOf near a bin's edge. */
const SLACK = 1e-9;

/**
 * Per bin (a hash's top NOISE_BITS bits), the least and the most noise of a token whose hash falls in it: the noise
 * of the bin's edges, widened by SLACK. The bin of hash h holds u in [bin / BINS, (bin + 1) / BINS).
 */
export const NOISE_LOW = new Float64Array(BINS);
export const NOISE_HIGH = new Float64Array(BINS);
for (let b = 0; b < BINS; b++) {
  NOISE_LOW[b] = gumbelOf(b === 0 ? 2 ** -53 : b / BINS) - SLACK;
  NOISE_HIGH[b] = gumbelOf(b === BINS - 1 ? 1 - 2 ** -53 : (b + 1) / BINS) + SLACK;
}

/** The bin of token n's noise in the draw of `key`. */
export function noiseBin(key: number, n: number): number {
  return noiseHash(key, n) >>> NOISE_SHIFT;
}

/** The tokens a draw's first pass keeps at most (more: its second pass reads the whole vocabulary). */
const KEPT = 4096;
const kept = new Int32Array(KEPT);

/**
 * The draw of `key` among x[offset, offset + vocab) at `temperature` (> 0): the index of the largest x + T · g (the
 * lowest among equals), or −1 when none is a number above −∞. Scores that are not numbers are never drawn.
 *
 * The first pass keeps the largest lower bound (x + T · the bin's least noise) and every token whose upper bound
 * reaches the largest lower bound so far; the second computes the noise of those whose upper bound reaches the
 * final one: every other token scores under a token's lower bound.
 */
export function gumbelArgmax(x: Float32Array, offset: number, vocab: number, temperature: number, key: number): number {
  let floor = Number.NEGATIVE_INFINITY;
  let count = 0;
  for (let n = 0; n < vocab; n++) {
    const bin = noiseHash(key, n) >>> NOISE_SHIFT;
    const v = x[offset + n] as number;
    const lower = v + temperature * (NOISE_LOW[bin] as number);
    if (lower > floor) floor = lower;
    if (v + temperature * (NOISE_HIGH[bin] as number) >= floor) {
      if (count < KEPT) kept[count] = n;
      count++;
    }
  }
  const fromKept = count <= KEPT;
  const end = fromKept ? count : vocab;
  let best = -1;
  let bestValue = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < end; i++) {
    const n = fromKept ? (kept[i] as number) : i;
    const v = x[offset + n] as number;
    if (!(v + temperature * (NOISE_HIGH[noiseHash(key, n) >>> NOISE_SHIFT] as number) >= floor)) continue;
    const value = v + temperature * gumbel(key, n);
    if (value > bestValue) {
      bestValue = value;
      best = n;
    }
  }
  return best;
}
