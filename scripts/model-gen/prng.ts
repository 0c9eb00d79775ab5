/**
 * Seeded pseudo-random numbers for weights. Every tensor gets its own stream,
 * derived from the model seed and the tensor's name, so a tensor's values do not
 * depend on the order in which tensors are generated (weights are produced
 * lazily, one tensor at a time, while the file is written).
 */

/** mulberry32: a tiny 32-bit generator, good enough for weights and identical on every platform. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a over the UTF-16 code units of a string: a stable 32-bit hash for seeding. */
export function hashString(text: string, basis = 0x811c9dc5): number {
  let h = basis >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** The seed of one named tensor's stream. */
export function tensorSeed(modelSeed: number, tensorName: string): number {
  return hashString(`${modelSeed >>> 0}:${tensorName}`);
}

/**
 * Uniform values with the given standard deviation and mean. Uniform rather than
 * normal because it is several times cheaper and the 600 MB benchmark shapes
 * have ~160M values to fill.
 */
export function uniformTensor(length: number, seed: number, std: number, mean = 0): Float32Array {
  const out = new Float32Array(length);
  const halfWidth = std * Math.sqrt(3);
  const next = mulberry32(seed);
  for (let i = 0; i < length; i++) out[i] = mean + (2 * next() - 1) * halfWidth;
  return out;
}
