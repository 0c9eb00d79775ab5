/**
 * Token selection from one row of logits. Runs once per generated token, on the
 * thread that runs the model, so it avoids comparison sorts of the whole
 * vocabulary: top-k is a bounded heap selection, top-p sorts the likeliest
 * tokens its nucleus needs, or the whole vocabulary with a radix sort, and a
 * draw by temperature alone is a Gumbel-max draw (gumbel.ts) that computes the
 * noise of a few tokens.
 */
import { KvdeskError } from '../../shared/errors';
import { gumbelArgmax } from './gumbel';
import type { ScoreAdjust } from './head-screen';
import type { ReplyConstraint } from './json-constraint';
import type { IdLogprob, SamplingParams, StepLogprob } from './protocol';

/** The largest top-k a draw takes from the LM head's screen (head-screen.ts; larger ones score in full). */
export const SCREEN_TOP_K = 256;
/**
 * The most tokens a top-k or min-p draw from the head's screen scores exactly before its sampler rests from the
 * screen (Sampler.screenedDraw): past about that many rows, scoring them in JavaScript costs more than onnxruntime's
 * float32 head (a flat distribution, a small min-p or a high temperature keep most of a vocabulary).
 */
export const SCREEN_DRAW_MOST = 2048;
/** Draws from full scores after a draw that scored too many: 8, doubled for each such draw in a row, up to 256. */
const SCREEN_REST_FIRST = 8;
const SCREEN_REST_MOST = 256;

/**
 * A seed (a whole number up to 2^53) as the generator's 32 bits: its low 32 bits, with its high bits mixed in (murmur3's
 * finalizer, which keeps 0 at 0: a seed below 2^32 is itself). Taking the low bits alone gave 0 and 2^32 the same tokens.
 */
export function seed32(seed: number): number {
  const whole = Math.floor(seed);
  let hi = Math.floor(whole / 4294967296) >>> 0;
  hi = Math.imul(hi ^ (hi >>> 16), 0x85ebca6b);
  hi = Math.imul(hi ^ (hi >>> 13), 0xc2b2ae35);
  return ((whole >>> 0) ^ hi ^ (hi >>> 16)) >>> 0;
}

/** A deterministic 32-bit PRNG (mulberry32): the same seed gives the same tokens. */
export function createRng(seed: number): () => number {
  let a = seed32(seed) ^ 0x9e3779b9;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Index of the largest value in logits[offset, offset+length). Ties go to the lowest index. */
export function argmax(logits: ArrayLike<number>, offset: number, length: number): number {
  let best = 0;
  let bestValue = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < length; i++) {
    const v = logits[offset + i] as number;
    if (v > bestValue) {
      bestValue = v;
      best = i;
    }
  }
  return best;
}

/**
 * Indices of the k largest values (unordered), via a min-heap of size k:
 * O(V log k) instead of sorting V values.
 */
export function topKIndices(values: Float32Array, k: number): Int32Array {
  const n = values.length;
  if (k >= n) {
    const all = new Int32Array(n);
    for (let i = 0; i < n; i++) all[i] = i;
    return all;
  }
  const heap = new Int32Array(k);
  let size = 0;
  // A score that is not a number counts as the lowest (otherwise it is neither less nor more than any, and a NaN
  // at the heap's root would keep every later score out).
  const less = (a: number, b: number): boolean => {
    let va = values[a] as number;
    let vb = values[b] as number;
    if (Number.isNaN(va)) va = Number.NEGATIVE_INFINITY;
    if (Number.isNaN(vb)) vb = Number.NEGATIVE_INFINITY;
    return va < vb || (va === vb && a > b);
  };
  const siftDown = (start: number): void => {
    let i = start;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < size && less(heap[l] as number, heap[m] as number)) m = l;
      if (r < size && less(heap[r] as number, heap[m] as number)) m = r;
      if (m === i) return;
      const tmp = heap[i] as number;
      heap[i] = heap[m] as number;
      heap[m] = tmp;
      i = m;
    }
  };
  for (let idx = 0; idx < n; idx++) {
    if (size < k) {
      heap[size] = idx;
      size++;
      let i = size - 1;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (!less(heap[i] as number, heap[p] as number)) break;
        const tmp = heap[i] as number;
        heap[i] = heap[p] as number;
        heap[p] = tmp;
        i = p;
      }
    } else if (less(heap[0] as number, idx)) {
      heap[0] = idx;
      siftDown(0);
    }
  }
  return heap;
}

/**
 * The log-probability of `id` and the `top` most likely ids (most likely first) under the distribution of
 * logits[offset, offset+vocab) as the model gave them: before penalties, bias, temperature or truncation.
 */
export function logprobsOf(logits: Float32Array, offset: number, vocab: number, id: number, top: number): StepLogprob {
  const row = logits.subarray(offset, offset + vocab);
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < vocab; i++) if ((row[i] as number) > max) max = row[i] as number;
  let sum = 0;
  for (let i = 0; i < vocab; i++) sum += Math.exp((row[i] as number) - max);
  const logZ = max + Math.log(sum);
  const alternatives: IdLogprob[] = [];
  if (top > 0) {
    const best = [...topKIndices(row, Math.min(top, vocab))];
    best.sort((a, b) => (row[b] as number) - (row[a] as number) || a - b);
    for (const i of best) alternatives.push({ id: i, logprob: (row[i] as number) - logZ });
  }
  return { id, logprob: (row[id] as number) - logZ, top: alternatives };
}

/** Index of a float64's high 32-bit word in a Uint32Array over the same bytes (1 on little-endian machines). */
const HIGH_WORD = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0;
/** Scratch of `byWeight`, grown as needed: a sampler draws one token at a time on its thread. */
let sortKeys = new Uint32Array(0);
let sortOrder = new Int32Array(0);
let sortSpare = new Int32Array(0);
const RADIX_BITS = 11;
const radixCounts = new Int32Array(1 << RADIX_BITS);

/** Comparator of positions into `probs`: the larger weight first, equal weights the lower position first. */
const heavierIn =
  (probs: Float64Array) =>
  (a: number, b: number): number =>
    (probs[b] as number) - (probs[a] as number) || a - b;

/**
 * Positions 0 … m−1 ordered by `probs` (weights ≥ 0, no NaN), largest first, equal weights the lower position
 * first: what a comparison sort with that rule gives, in time linear in m. A stable radix sort on the high 32 bits
 * of each float64 (their order is the weights' order, with ties only among weights within 2^−20 of each other)
 * leaves equal keys in position order; each run of equal keys is then ordered by the exact weights.
 * A draw with top-p over a flat distribution of 50 257 tokens so takes 3 ms, where it took 37–46 ms with
 * `sort`. The result is scratch, valid until the next call.
 */
export function byWeight(probs: Float64Array, m: number): Int32Array {
  if (sortKeys.length < m) {
    sortKeys = new Uint32Array(m);
    sortOrder = new Int32Array(m);
    sortSpare = new Int32Array(m);
  }
  const keys = sortKeys;
  const words = new Uint32Array(probs.buffer, probs.byteOffset, 2 * m);
  // Complemented: the radix sort puts small keys first, and the largest weight should come first.
  for (let i = 0; i < m; i++) keys[i] = ~(words[2 * i + HIGH_WORD] as number) >>> 0;
  let from = sortOrder;
  let to = sortSpare;
  for (let i = 0; i < m; i++) from[i] = i;
  const counts = radixCounts;
  const mask = (1 << RADIX_BITS) - 1;
  for (let shift = 0; shift < 32; shift += RADIX_BITS) {
    counts.fill(0);
    for (let i = 0; i < m; i++) {
      const d = ((keys[i] as number) >>> shift) & mask;
      counts[d] = (counts[d] as number) + 1;
    }
    // A digit every key shares moves nothing.
    if (counts[((keys[0] as number) >>> shift) & mask] === m) continue;
    let at = 0;
    for (let d = 0; d <= mask; d++) {
      const c = counts[d] as number;
      counts[d] = at;
      at += c;
    }
    for (let j = 0; j < m; j++) {
      const i = from[j] as number;
      const d = ((keys[i] as number) >>> shift) & mask;
      const at = counts[d] as number;
      to[at] = i;
      counts[d] = at + 1;
    }
    const swap = from;
    from = to;
    to = swap;
  }
  // Runs of equal keys, in position order: weights within 2^−20 of each other, or equal. Ordered by the weights
  // themselves, by insertion when the run is short (the usual case) and with a comparison sort otherwise (scores
  // that hardly differ, which insertion would take quadratic time over).
  const heavier = heavierIn(probs);
  for (let start = 0; start < m; ) {
    const key = keys[from[start] as number] as number;
    let end = start + 1;
    while (end < m && keys[from[end] as number] === key) end++;
    if (end - start > 32) {
      const run = from.subarray(start, end);
      let ordered = true;
      for (let j = 1; j < run.length && ordered; j++) ordered = heavier(run[j - 1] as number, run[j] as number) < 0;
      if (!ordered) run.sort(heavier);
    } else {
      for (let j = start + 1; j < end; j++) {
        const i = from[j] as number;
        const w = probs[i] as number;
        let at = j - 1;
        for (; at >= start; at--) {
          const before = from[at] as number;
          const v = probs[before] as number;
          if (v > w || (v === w && before < i)) break;
          from[at + 1] = before;
        }
        from[at + 1] = i;
      }
    }
    start = end;
  }
  return from.subarray(0, m);
}

/**
 * Weight bins of `heaviestBins`: 16 per octave (a float64's exponent and its mantissa's first 4 bits, the top of its
 * high word) from 1 down to 2^−32, then one for every lighter weight.
 */
const BIN_OCTAVES = 32;
const BIN_TAIL = 16 * BIN_OCTAVES + 1;
/** The high word, shifted down 16 bits, of a float64 weight of 1: bin 0. */
const BIN_ONE = (1023 << 4) >>> 0;
const binWeights = new Float64Array(BIN_TAIL + 1);
const binCounts = new Int32Array(BIN_TAIL + 1);
let binScratch = new Int32Array(0);

/**
 * The positions among `m` weights (`probs`, the largest 1, none NaN) that can be in top-p's nucleus, unordered: every
 * weight in the bins (see BIN_OCTAVES) down to the one where the bins' cumulative share of `sum` reaches `topP`, and
 * the next bin (a margin for the order of the additions). A weight in a lower bin is lighter than every one of these,
 * so sorted, they are the heaviest positions in order: a prefix of every position sorted. Two passes over the
 * weights, where a bounded heap's selection made one pass per try (a 512-token nucleus: 0.2 + 0.5 ms of heaps, then a
 * radix sort of the whole vocabulary, 0.9 ms, past it). Null when the cut falls in the lightest bin or more than
 * 8 192 positions are in them (byWeight's linear sort is then quicker).
 */
function heaviestBins(probs: Float64Array, m: number, sum: number, topP: number): Int32Array | null {
  const words = new Uint32Array(probs.buffer, probs.byteOffset, 2 * m);
  binWeights.fill(0);
  binCounts.fill(0);
  for (let i = 0; i < m; i++) {
    const w = probs[i] as number;
    if (w === 0) continue;
    let bin = BIN_ONE - ((words[2 * i + HIGH_WORD] as number) >>> 16);
    if (bin > BIN_TAIL) bin = BIN_TAIL;
    binWeights[bin] = (binWeights[bin] as number) + w;
    binCounts[bin] = (binCounts[bin] as number) + 1;
  }
  let last = -1;
  let count = 0;
  let cumulative = 0;
  for (let bin = 0; bin < BIN_TAIL; bin++) {
    cumulative += binWeights[bin] as number;
    count += binCounts[bin] as number;
    if (cumulative / sum >= topP) {
      last = Math.min(bin + 1, BIN_TAIL - 1);
      if (last > bin) count += binCounts[last] as number;
      break;
    }
  }
  if (last < 0 || count > 8192) return null;
  if (binScratch.length < count) binScratch = new Int32Array(Math.max(count, 1024));
  let n = 0;
  for (let i = 0; i < m && n < count; i++) {
    if ((probs[i] as number) === 0) continue;
    if (BIN_ONE - ((words[2 * i + HIGH_WORD] as number) >>> 16) <= last) binScratch[n++] = i;
  }
  return binScratch.subarray(0, n);
}

/**
 * Top-p's nucleus: positions among the `m` candidates whose weights are `probs`, most likely first (equal weights:
 * the earlier position first), up to and including the first at which the cumulative share of `sum` reaches `topP`;
 * all of them if none does. When the candidates are every index of `x` in order (`everyIndex`), only the heaviest
 * bins of weights the nucleus can reach are sorted (heaviestBins), as long as the nucleus ends among them.
 * Otherwise every candidate is ordered by `byWeight`, in linear time. The result is what sorting every candidate
 * gives: the bins hold the heaviest positions, and the cumulative share only grows at tokens of nonzero weight.
 */
function nucleus(probs: Float64Array, m: number, sum: number, topP: number, everyIndex: boolean): Int32Array {
  const cut = (sorted: Int32Array): Int32Array | null => {
    let cumulative = 0;
    for (let j = 0; j < sorted.length; j++) {
      cumulative += (probs[sorted[j] as number] as number) / sum;
      if (cumulative >= topP) return sorted.subarray(0, j + 1);
    }
    return null;
  };
  if (everyIndex) {
    const heaviest = heaviestBins(probs, m, sum, topP);
    const found = heaviest && cut(heaviest.sort(heavierIn(probs)));
    if (found) return found;
  }
  const all = byWeight(probs, m);
  return cut(all) ?? all;
}

/**
 * Orders the ids of a top-k (topKIndices: in heap order) the likeliest first, equal scores the lower id first: the
 * order an exact top-k from the head's screen has (head-screen.ts's exactTopK), so that one random number draws the
 * same token from either — a seeded top-k reply is the same with the screen and without it (a GPU, a small
 * vocabulary), up to a near tie. A score that is not a number ranks as −∞. Sorts `ids` in place and returns it.
 */
function likeliestFirst(x: Float32Array, ids: Int32Array): Int32Array {
  const rank = (i: number): number => {
    const v = x[i] as number;
    return Number.isNaN(v) ? Number.NEGATIVE_INFINITY : v;
  };
  // Equal infinities subtract to NaN, which `||` passes over as it does 0.
  return ids.sort((a, b) => rank(b) - rank(a) || a - b);
}

/**
 * Per-row sampler: owns its PRNG, scratch buffer and the history its penalties need (the prompt and the
 * tokens it picked), so nothing is allocated per token. As a ScoreAdjust it tells the head's screen how its
 * penalties and bias change scores.
 */
export class Sampler implements ScoreAdjust {
  private readonly rng: () => number;
  private scratch: Float32Array;
  /**
   * Ids the repetition penalty applies to, with their occurrences: every id of the prompt and the reply, or
   * with a window those of the last `window` tokens. Undefined when the penalty is off.
   */
  private readonly seen: Map<number, number> | undefined;
  /** The window's tokens, oldest first from `ringAt` (a ring); undefined without a window. */
  private readonly ring: Int32Array | undefined;
  private ringAt = 0;
  private ringLength = 0;
  /** Occurrences of each generated id, for the frequency and presence penalties; undefined when they are off. */
  private readonly counts: Map<number, number> | undefined;
  private readonly frequencyPenalty: number;
  private readonly presencePenalty: number;
  private readonly logitBias: ReadonlyArray<[number, number]>;
  /** The logit bias per id (an id given twice: the sum), for one exact score at a time (adjustExact). */
  private readonly biasOf = new Map<number, number>();
  /** 1e-6 of the largest shift the last adjustScores made (a bias, frequency or presence penalty). */
  private slack = 0;
  /** Whether the scratch holds scores the constraint masked (maskScores), until the next adjustScores. */
  private masking = false;
  /** Scratch of draw: the candidates' weights, and every index of the vocabulary. */
  private probs = new Float64Array(0);
  private indices = new Int32Array(0);
  /** Positions 0, 1, 2 …: the candidates of a draw among an exact top-k's scores (drawAmong). */
  private ranks = new Int32Array(0);
  /** Draws left to make from full scores before the next from the screen, and the rest after the next miss. */
  private screenRest = 0;
  private nextRest = SCREEN_REST_FIRST;

  constructor(
    private readonly params: SamplingParams,
    private readonly vocabSize: number,
    prompt: readonly number[] = [],
    /**
     * JSON mode: only tokens that keep the reply a prefix of one JSON object (conforming to a schema, if any);
     * or tool calls held to their schemas.
     */
    private readonly constraint?: ReplyConstraint,
  ) {
    this.rng = createRng(params.seed);
    this.scratch = new Float32Array(vocabSize);
    const window = params.repetitionWindow ?? 0;
    if (params.repetitionPenalty !== 1) {
      this.seen = new Map();
      if (window > 0) this.ring = new Int32Array(window);
      // Only the prompt's last `window` tokens can still be inside the window.
      for (let i = window > 0 ? Math.max(0, prompt.length - window) : 0; i < prompt.length; i++) {
        this.remember(prompt[i] as number);
      }
    }
    this.frequencyPenalty = params.frequencyPenalty ?? 0;
    this.presencePenalty = params.presencePenalty ?? 0;
    this.logitBias = params.logitBias ?? [];
    for (const [id, bias] of this.logitBias) this.biasOf.set(id, (this.biasOf.get(id) ?? 0) + bias);
    this.counts = this.frequencyPenalty !== 0 || this.presencePenalty !== 0 ? new Map() : undefined;
  }

  /** The temperature of its draws. */
  get temperature(): number {
    return this.params.temperature;
  }

  /** Its top-p (1: none). */
  get topP(): number {
    return this.params.topP;
  }

  /**
   * True when this sampler always takes the most likely token, as the penalties and bias change the scores
   * ({@link adjusts}): such a pick may come from the head's screen instead (head-screen.ts), then be recorded with
   * `took`. With a constraint, a pick it refuses is made again from the scores it masks ({@link maskScores}), as
   * `sample` does.
   */
  get isGreedy(): boolean {
    return this.params.greedy || this.params.temperature <= 0;
  }

  /** Whether the constraint (JSON mode, tool calls) lets token `id` come next; true without one. */
  allows(id: number): boolean {
    return this.constraint?.allows(id) ?? true;
  }

  /**
   * logits[offset, offset+vocab) as {@link adjustScores} changes them, with every token the constraint refuses at −∞,
   * in the sampler's scratch: what a pick or draw reads again when the constraint refused the first. Null when it
   * allows no token (the row ends there, unfinished) or there is none.
   */
  maskScores(logits: Float32Array, offset: number, vocab: number): Float32Array | null {
    const x = this.adjustScores(logits, offset, vocab);
    if (!this.constraint || this.constraint.mask(x, vocab) === 0) return null;
    this.masking = true;
    return x;
  }

  /** Whether the last maskScores refused token n: its exact score is −∞ as well. */
  banned(n: number): boolean {
    return this.masking && this.scratch[n] === Number.NEGATIVE_INFINITY;
  }

  /** True when a penalty or a logit bias changes this pick's scores: the screen's are changed too (adjustScores). */
  get adjusts(): boolean {
    return (
      (this.seen !== undefined && this.seen.size > 0) ||
      (this.counts !== undefined && this.counts.size > 0) ||
      this.logitBias.length > 0
    );
  }

  /**
   * logits[offset, offset+vocab) as the penalties and bias change them, in the sampler's scratch (valid until its
   * next pick): what a screened pick or draw reads when the sampler {@link adjusts}.
   */
  adjustScores(logits: Float32Array, offset: number, vocab: number): Float32Array {
    if (this.scratch.length !== vocab) this.scratch = new Float32Array(vocab);
    const x = this.scratch;
    x.set(logits.subarray(offset, offset + vocab));
    this.masking = false;
    this.applyAdjustments(x, vocab);
    return x;
  }

  /** One exact score as {@link adjustScores} changes scores: the penalty, then the counts' penalties, then the bias. */
  adjustExact(n: number, score: number): number {
    let v = score;
    const p = this.params;
    if (this.seen?.has(n)) v = v > 0 ? v / p.repetitionPenalty : v * p.repetitionPenalty;
    const c = this.counts?.get(n);
    if (c !== undefined) v = v - c * this.frequencyPenalty - this.presencePenalty;
    const bias = this.biasOf.get(n);
    return bias !== undefined ? v + bias : v;
  }

  /** How much a repetition penalty can stretch the distance between two scores: p or 1 / p (1 without one). */
  get boundScale(): number {
    const p = this.params.repetitionPenalty;
    return this.seen !== undefined && this.seen.size > 0 ? Math.max(p, 1 / p) : 1;
  }

  /** The float rounding of a score before the last adjustScores shifted it: 1e-6 of the largest shift. */
  get adjustSlack(): number {
    return this.slack;
  }

  /**
   * The top-k of a draw that can take its candidates from the head's screen (head-screen.ts's exactTopK), then
   * {@link drawAmong} them: a sampled draw whose top-k is at most SCREEN_TOP_K; 0 otherwise. Whether it rests from
   * the screen or not: a run already screened draws each row from the screen ({@link screenTopK} says whether to
   * screen the next).
   */
  get screenableTopK(): number {
    const k = this.params.topK;
    return !this.isGreedy && k > 0 && k <= SCREEN_TOP_K ? k : 0;
  }

  /** {@link screenableTopK}, 0 while it rests from the screen ({@link screenedDraw}). */
  get screenTopK(): number {
    return this.screenRest === 0 ? this.screenableTopK : 0;
  }

  /**
   * The min-p of a draw that can take its candidates from the head's screen (head-screen.ts's exactMinP), then
   * {@link drawAmong} them in id order: a sampled draw by min-p and temperature alone (no top-k under the vocabulary,
   * no top-p); 0 otherwise. Whether it rests from the screen or not, as {@link screenableTopK}.
   */
  get screenableMinP(): number {
    const p = this.params;
    const alone = p.minP > 0 && p.topP >= 1 && !(p.topK > 0 && p.topK < this.vocabSize);
    return !this.isGreedy && alone ? p.minP : 0;
  }

  /** {@link screenableMinP}, 0 while it rests from the screen ({@link screenedDraw}). */
  get screenMinP(): number {
    return this.screenRest === 0 ? this.screenableMinP : 0;
  }

  /**
   * Counts a top-k or min-p draw from the head's screen that scored `scored` tokens exactly: more than
   * SCREEN_DRAW_MOST, and its next draws are from full scores (SCREEN_REST_FIRST of them, twice as many after each
   * such draw in a row, up to SCREEN_REST_MOST; counted by {@link fullDraw}) before it tries the screen again.
   */
  screenedDraw(scored: number): void {
    if (scored > SCREEN_DRAW_MOST) {
      this.screenRest = this.nextRest;
      this.nextRest = Math.min(2 * this.nextRest, SCREEN_REST_MOST);
    } else this.nextRest = SCREEN_REST_FIRST;
  }

  /** Counts a draw from full scores: one fewer to make before the screen again (screenedDraw). */
  fullDraw(): void {
    if (this.screenRest > 0) this.screenRest--;
  }

  /** Whether it rests from the screen (screenedDraw): its top-k or min-p draws are from full scores until then. */
  get resting(): boolean {
    return this.screenRest > 0;
  }

  /**
   * The top-p of a draw that may take its nucleus from the head's screen (head-screen.ts's exactTopP), then draw in
   * it ({@link drawNucleus}): a sampled draw with top-p (and min-p, if any) and no top-k under the vocabulary. 0
   * otherwise, and while its last draw's nucleus did not fit the screen ({@link nucleusFits}).
   */
  get screenTopP(): number {
    return this.nucleusScreenable && this.nucleusFits ? this.params.topP : 0;
  }

  /**
   * Whether this sampler's draws are by top-p over the whole vocabulary (no top-k under it), the kind the head's
   * screen can make while their nucleus fits it.
   */
  get nucleusScreenable(): boolean {
    const p = this.params;
    return !this.isGreedy && p.topP < 1 && !(p.topK > 0 && p.topK < this.vocabSize);
  }

  /**
   * Whether the last draw's nucleus fit the head's screen: set by the engine after every draw of a sampler whose
   * draws are {@link nucleusScreenable} (head-screen.ts's nucleusFits after a draw from full scores, the count of
   * tokens exactTopP scored after one from the screen). False until the first draw: a prefill's is from full scores.
   */
  nucleusFits = false;

  /**
   * True when a draw is over the whole vocabulary by temperature alone (no top-k under the vocabulary, no top-p or
   * min-p): the head's screen can make it (head-screen.ts's exactDraw) with the key of
   * {@link noiseKey}, then record it with `took`.
   */
  get screenWhole(): boolean {
    return !this.isGreedy && this.byTemperatureAlone(this.vocabSize);
  }

  /** True when a draw among `vocab` tokens is over all of them by temperature alone: no top-k under it, top-p or min-p. */
  private byTemperatureAlone(vocab: number): boolean {
    const p = this.params;
    return !(p.topK > 0 && p.topK < vocab) && p.topP >= 1 && !(p.minP > 0);
  }

  /** The key of a draw's noise (gumbel.ts): one number of the seeded generator, as every draw takes. */
  noiseKey(): number {
    return Math.floor(this.rng() * 4294967296);
  }

  /**
   * A draw (temperature, top-p, min-p) among `m` tokens scored exactly (head-screen.ts's TopKScratch: their ids and
   * scores): an exact top-k's, the likeliest first, or the tokens an exact min-p can keep, in id order (the order a
   * draw over the whole vocabulary walks). Returns the token's id, for `took`.
   */
  drawAmong(ids: Int32Array, scores: Float32Array, m: number): number {
    if (this.ranks.length < m) this.ranks = Int32Array.from({ length: m }, (_, i) => i);
    return ids[this.drawFrom(scores.subarray(0, m), this.ranks.subarray(0, m), false)] as number;
  }

  /**
   * A draw (temperature, min-p) within top-p's nucleus found from the head's screen (head-screen.ts's exactTopP): its
   * `m` tokens likeliest first and their exact scores, walked in that order as a draw over the whole vocabulary walks
   * its nucleus. Returns the token's id, for `took`.
   */
  drawNucleus(ids: Int32Array, scores: Float32Array, m: number): number {
    if (this.ranks.length < m) this.ranks = Int32Array.from({ length: m }, (_, i) => i);
    return ids[this.drawFrom(scores.subarray(0, m), this.ranks.subarray(0, m), false, true)] as number;
  }

  /** True once a constrained reply is complete: its JSON object closed. */
  get finished(): boolean {
    return this.constraint?.done ?? false;
  }

  /**
   * Picks the next token from logits[offset, offset+vocab) and records it for the penalties and the
   * constraint. Returns -1 when the constraint allows no token of the vocabulary (the row ends there, unfinished).
   */
  sample(logits: Float32Array, offset: number, vocab: number): number {
    const id = this.pick(logits, offset, vocab);
    if (id < 0) return id;
    // Scores that are not numbers everywhere (the pick fell on one): the model computes nothing usable, and
    // writing on would be a reply of token 0 over and over, said to be fine.
    if (Number.isNaN(logits[offset + id])) throw notANumber();
    this.took(id);
    return id;
  }

  /** Records a token picked outside `sample` (a pick or draw from the head's screen) for the penalties and the constraint. */
  took(id: number): void {
    if (this.seen) this.remember(id);
    if (this.counts) this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
    this.constraint?.accept(id);
  }

  /** Adds a token to the repetition penalty's history; with a window, the oldest token leaves a full one. */
  private remember(id: number): void {
    const seen = this.seen as Map<number, number>;
    const ring = this.ring;
    if (ring) {
      if (this.ringLength === ring.length) {
        const old = ring[this.ringAt] as number;
        const n = (seen.get(old) as number) - 1;
        if (n === 0) seen.delete(old);
        else seen.set(old, n);
      } else {
        this.ringLength++;
      }
      ring[this.ringAt] = id;
      this.ringAt = (this.ringAt + 1) % ring.length;
    }
    seen.set(id, (seen.get(id) ?? 0) + 1);
  }

  /** Applies the penalties and the bias to x[0, vocab), and keeps the slack of the largest shift (adjustSlack). */
  private applyAdjustments(x: Float32Array, vocab: number): void {
    const p = this.params;
    const seen = this.seen;
    const counts = this.counts;
    let shift = 0;
    if (seen !== undefined && seen.size > 0) {
      for (const id of seen.keys()) {
        if (id < 0 || id >= vocab) continue;
        const v = x[id] as number;
        x[id] = v > 0 ? v / p.repetitionPenalty : v * p.repetitionPenalty;
      }
    }
    if (counts) {
      for (const [id, n] of counts) {
        if (id < 0 || id >= vocab) continue;
        const by = n * this.frequencyPenalty + this.presencePenalty;
        x[id] = (x[id] as number) - by;
        shift = Math.max(shift, Math.abs(by));
      }
    }
    for (const [id, bias] of this.biasOf) {
      if (id < 0 || id >= vocab) continue;
      x[id] = (x[id] as number) + bias;
      shift = Math.max(
        shift,
        Math.abs(bias) +
          (counts ? Math.abs(this.frequencyPenalty) * (counts.get(id) ?? 0) + Math.abs(this.presencePenalty) : 0),
      );
    }
    this.slack = 1e-6 * shift;
  }

  private pick(logits: Float32Array, offset: number, vocab: number): number {
    if (this.isGreedy && !this.adjusts && this.constraint === undefined) return argmax(logits, offset, vocab);
    const x = this.adjustScores(logits, offset, vocab);
    if (this.constraint) {
      // The unconstrained pick usually continues the JSON (one check); otherwise mask the vocabulary and pick
      // again (as llama.cpp's grammar sampling does). Greedy, this is the best allowed token either way.
      const first = this.isGreedy ? argmax(x, 0, vocab) : this.draw(x, vocab);
      if (this.constraint.allows(first)) return first;
      if (this.constraint.mask(x, vocab) === 0) return -1;
      // Masked tokens have probability 0; a draw lands on one only when the random number is exactly 0.
      const id = this.isGreedy ? argmax(x, 0, vocab) : this.draw(x, vocab);
      return x[id] === Number.NEGATIVE_INFINITY ? argmax(x, 0, vocab) : id;
    }
    if (this.isGreedy) return argmax(x, 0, vocab);
    return this.draw(x, vocab);
  }

  /** Every index of a vocabulary, in order: the candidates when there is no top-k (made once per sampler). */
  private everyIndex(n: number): Int32Array {
    if (this.indices.length !== n) this.indices = Int32Array.from({ length: n }, (_, i) => i);
    return this.indices;
  }

  /**
   * Temperature, top-k, top-p and min-p over x[0, vocab), then one draw. Typed arrays made once per sampler, no
   * array of every index, and top-p sorts only as many of the likeliest tokens as its nucleus needs, in linear
   * time (see nucleus): the default chat sampling over 50 257 tokens took 11 ms a token, with top-p 25 ms. A draw
   * over the whole vocabulary by temperature alone is the Gumbel-max draw (gumbel.ts), as the head's screen makes it.
   */
  private draw(x: Float32Array, vocab: number): number {
    const p = this.params;
    if (this.byTemperatureAlone(vocab)) {
      const id = gumbelArgmax(x, 0, vocab, p.temperature, this.noiseKey());
      return id >= 0 ? id : argmax(x, 0, vocab);
    }
    const k = p.topK > 0 ? Math.min(p.topK, vocab) : vocab;
    const candidates = k >= x.length ? this.everyIndex(x.length) : likeliestFirst(x, topKIndices(x, k));
    return this.drawFrom(x, candidates, candidates === this.indices);
  }

  /**
   * Temperature, top-p and min-p over the tokens of x at `candidates` (every index of x in order, with
   * `everyIndex`), then one draw: the index of x drawn. With `isNucleus`, the candidates are top-p's nucleus already,
   * likeliest first.
   */
  private drawFrom(x: Float32Array, candidates: Int32Array, everyIndex: boolean, isNucleus = false): number {
    const p = this.params;
    const invT = 1 / p.temperature;
    const m = candidates.length;
    // A score that is not a number (NaN) has probability 0: it never becomes the maximum, nor a candidate's weight.
    let max = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < m; i++) {
      const v = x[candidates[i] as number] as number;
      if (v > max) max = v;
    }
    if (this.probs.length < m) this.probs = new Float64Array(m);
    const probs = this.probs;
    let sum = 0;
    for (let i = 0; i < m; i++) {
      const e = Math.exp(((x[candidates[i] as number] as number) - max) * invT);
      const q = Number.isNaN(e) ? 0 : e;
      probs[i] = q;
      sum += q;
    }
    // The largest probability is exp(0)/sum, so min-p's threshold needs no pass over the values.
    const minKeep = p.minP > 0 ? p.minP / sum : 0;
    // Positions into candidates, likeliest first, cut at top-p; null: every candidate in its own order.
    const order = p.topP < 1 && !isNucleus ? nucleus(probs, m, sum, p.topP, everyIndex) : null;
    const len = order ? order.length : m;
    let total = 0;
    let kept = 0;
    for (let j = 0; j < len; j++) {
      const i = order ? (order[j] as number) : j;
      if ((probs[i] as number) / sum < minKeep) continue;
      kept++;
      total += probs[i] as number;
    }
    if (kept === 0) return argmax(x, 0, x.length);
    let r = this.rng() * total;
    let last = -1;
    for (let j = 0; j < len; j++) {
      const i = order ? (order[j] as number) : j;
      if ((probs[i] as number) / sum < minKeep) continue;
      r -= probs[i] as number;
      if (r <= 0) return candidates[i] as number;
      last = i;
    }
    return candidates[last] as number;
  }
}

/** The model's scores are not numbers: its weights (or the graph's arithmetic) are damaged, not the request. */
export function notANumber(): KvdeskError {
  return new KvdeskError(
    'PACKAGE_INVALID',
    "The model's scores for the next token are not numbers (NaN): its weights are most likely damaged (a download or copy cut short, or a bad export), or its arithmetic overflowed on this input (a float16 model). If every reply fails so, replace the package: download or export it again.",
    { field: 'logits' },
  );
}
