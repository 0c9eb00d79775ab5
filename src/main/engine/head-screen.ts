import { closeSync, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { KvdeskError } from '../../shared/errors';
import { gumbel, NOISE_HIGH, NOISE_LOW, NOISE_SHIFT, noiseHash } from './gumbel';
import { SCREEN_TOP_K, topKIndices } from './sampling';

/**
 * Exact greedy picks without the full-precision LM head. A batch-1 decode
 * step reads every weight once, and the head is among the largest: on the
 * GPT-2 shape its 50257 × 768 float32 matrix is a quarter of a step. For a
 * greedy pick only the argmax is needed, so the engine's graph copy can score
 * the vocabulary with an 8-bit copy of the head instead (onnxruntime's
 * DynamicQuantizeMatMul, a quarter of the bytes) and this module turns those
 * approximate scores into the exact pick:
 *
 * - every approximate score s̃ₙ is within a bound Bₙ of the float32 score sₙ:
 *   s̃ₙ − sₙ = ŵₙ·δh − eₙ·h exactly, where eₙ = wₙ − ŵₙ is the weights'
 *   rounding (known at load: at most half a step each, and its 2-norm) and δh
 *   the hidden state's rounding to 8 bits (at most half a step of the kernel's
 *   input, every row of the run), so |eₙ·h| ≤ min(½stepₙ·‖h‖₁, ‖eₙ‖₂‖h‖₂)
 *   (Hölder, Cauchy–Schwarz) and |ŵₙ·δh| ≤ ‖ŵₙ‖₁‖δh‖∞; plus float rounding of
 *   either product;
 * - any token whose upper bound s̃ₙ + Bₙ is below the best lower bound
 *   max(s̃ₘ − Bₘ) cannot be the argmax; the few left (candidates) are scored
 *   exactly here, in float64, from the head's weights, and the best is taken.
 *
 * The same pick runs on full float32 scores (a run that needed them for
 * another row) with the float32 rounding as its bound, so a greedy row picks
 * the same token in either kind of run, alone or in a batch. The bounds hold
 * whatever the weights; a loose screen only costs more candidates.
 */

/**
 * The largest |q| of a screened weight: 7 bits, stored as int8 with one scale per token. DynamicQuantizeMatMul
 * rounds the hidden state to uint8 (0–255) and multiplies it by the int8 weights in integers; on x86 CPUs without
 * VNNI (AVX2 alone) onnxruntime's kernel adds each pair of u8 × s8 products in a signed 16-bit lane, which clips
 * past ±32 767 (255 · 127 · 2 would need 64 770: measured, a row of 127s scored 49 343 for 97 536). With |q| ≤ 63
 * a pair is at most 255 · 63 · 2 = 32 130, so every integer sum is exact and the bounds below hold. Against
 * MatMulNBits' 8 bits in blocks of 32 (what the screen was before), on such a CPU: the head's product alone in
 * 3.2–3.5 ms against 3.8–3.9 for the GPT-2 shape's 50257 × 768, 2.9 against 3.8–4.0 for 49152 × 576 (bench/README.md,
 * "The head's 8-bit product"), for twice the weights' rounding.
 */
export const SCREEN_Q_MAX = 63;
/** Tokens quantized together before their int8 weights are written out as [hidden, vocab] (a transpose in tiles). */
const TILE = 64;
/**
 * Float rounding of a float32 dot product of K terms is at most K·2⁻²⁴ of the sum of the terms' magnitudes
 * (whatever the order of the additions); this covers K up to 1600 twice over, and the bound scales it by
 * K / 768 above that.
 */
const ROUNDING_PER_768 = 1e-4;
/**
 * The most the screened product moves an entry of its input by rounding it to 8 bits, per unit of the input's largest
 * |entry| a: half a step, and a step is at most 2a / 255 (uint8 over the input's range with 0 in it, the ONNX
 * definition of DynamicQuantizeLinear, which onnxruntime's x86 kernel applies to its whole input) or a / 127 (int8
 * symmetric); a kernel that rounds each row by its own range (onnxruntime's KleidiAI path on Arm CPUs with SME)
 * takes smaller steps. 1 / 254, plus a thousandth for the step's float32 rounding. An entry a rounded zero point
 * pushes past either end is clipped back to within half a step of it.
 */
const HIDDEN_HALF_STEP = (1 / 254) * 1.001;
/** Norms kept per token are rounded up by this much (storing one as a float32 moves it by 2⁻²⁴ of itself at most). */
const NORM_ROUND_UP = 1 + 2 ** -20;

/** How the head's weight matrix is laid out in the file: [vocab, hidden] (a tied embedding) or [hidden, vocab]. */
export type HeadLayout = 'vocab-major' | 'hidden-major';

/**
 * The head's float32 weights of one token at a time, for the exact scores: read from the model file where a
 * token's weights lie together in it (a [vocab, hidden] matrix: the few candidates of a pick cost a read each,
 * from the page cache, and the engine holds no second copy of the head, only the rows it read last), else from a
 * transposed copy in memory.
 */
export interface HeadRows {
  /** Σₖ h[hAt + k] · w[n][k], in float64. */
  dot(n: number, h: Float32Array, hAt: number): number;
  /** Bytes this source holds in memory. */
  readonly bytes: number;
  close(): void;
}

/** Rows held in memory, [vocab, hidden]. */
export class MemoryRows implements HeadRows {
  constructor(
    private readonly data: Float32Array,
    private readonly hidden: number,
  ) {}
  get bytes(): number {
    return this.data.byteLength;
  }
  dot(n: number, h: Float32Array, hAt: number): number {
    const data = this.data;
    const from = n * this.hidden;
    let sum = 0;
    for (let k = 0; k < this.hidden; k++) sum += (h[hAt + k] as number) * (data[from + k] as number);
    return sum;
  }
  close(): void {}
}

/**
 * Rows a file keeps for the exact pick: the same few tokens come back as candidates pick after pick (on the
 * bench's GPT-2 shape, 8 streams scored 518 distinct rows in 74 000 reads). 2 048 rows: 6 MiB at hidden 768,
 * counted in the screen's memory.
 */
export const FILE_ROWS_KEPT = 2048;

/**
 * Rows read from a file where the [vocab, hidden] float32 matrix starts at `offset`. The last `kept` rows read stay
 * in memory (the oldest read goes first when it is full), so a row that comes back costs no read. The file is opened
 * when the rows are made (as the screen's weights are read from it), so one renamed over it later (an export written
 * again into the package) is not read; one changed in place is refused (an error that says to load the model again),
 * never read as the same model's.
 */
export class FileRows implements HeadRows {
  private fd: number | null;
  /** The file as it was opened (its device, inode, size and time of change are compared at each read). */
  private readonly opened: Stats;
  private readonly row: Float32Array;
  private readonly rowBytes: Uint8Array;
  /** The rows kept, `kept` × hidden (made at the first read). */
  private slab: Float32Array | null = null;
  /** Token → its row's place in the slab, oldest read first. */
  private readonly slotOf = new Map<number, number>();
  /** Reads from the file so far (rows not kept). */
  reads = 0;
  readonly bytes: number;
  constructor(
    private readonly path: string,
    private readonly offset: number,
    private readonly hidden: number,
    private readonly kept = FILE_ROWS_KEPT,
  ) {
    this.row = new Float32Array(hidden);
    this.rowBytes = new Uint8Array(this.row.buffer);
    if (!(kept >= 1)) throw new Error(`a file's head rows keep at least one row, not ${kept}`);
    this.bytes = kept * hidden * 4;
    this.fd = openSync(path, 'r');
    this.opened = fstatSync(this.fd);
  }
  dot(n: number, h: Float32Array, hAt: number): number {
    const slot = this.slotOf.get(n) ?? this.load(n);
    const data = this.slab as Float32Array;
    const from = slot * this.hidden;
    let sum = 0;
    for (let k = 0; k < this.hidden; k++) sum += (h[hAt + k] as number) * (data[from + k] as number);
    return sum;
  }
  /** Reads token n's row into the slab (in place of the oldest kept, when full); returns its place. */
  private load(n: number): number {
    // Closed, then read again: opened by its path, which the check below holds to the file first opened.
    this.fd ??= openSync(this.path, 'r');
    const now = fstatSync(this.fd);
    const was = this.opened;
    if (now.dev !== was.dev || now.ino !== was.ino || now.size !== was.size || now.mtimeMs !== was.mtimeMs) {
      throw new KvdeskError(
        'ENGINE_FAILED',
        `${this.path} changed on disk after the model was loaded: the LM head's exact scores would come from another file. Load the model again.`,
      );
    }
    const want = this.rowBytes.length;
    let done = 0;
    while (done < want) {
      const got = readSync(this.fd, this.rowBytes, done, want - done, this.offset + n * want + done);
      if (got === 0) throw new Error(`${this.path} ended before the head's row ${n}`);
      done += got;
    }
    this.reads++;
    this.slab ??= new Float32Array(this.kept * this.hidden);
    let slot = this.slotOf.size;
    if (slot >= this.kept) {
      const oldest = this.slotOf.entries().next().value as [number, number];
      this.slotOf.delete(oldest[0]);
      slot = oldest[1];
    }
    this.slab.set(this.row, slot * this.hidden);
    this.slotOf.set(n, slot);
    return slot;
  }
  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    this.slab = null;
    this.slotOf.clear();
  }
}

/** What the exact pick needs of the head. */
export interface HeadScreen {
  vocab: number;
  hidden: number;
  /** The float32 weights, one row per token, for the exact scores. */
  rows: HeadRows;
  /** The head's bias per token (added in the graph after the product), or null. */
  bias: Float32Array | null;
  /** Per token: half its largest quantization step (no weight of the row is rounded by more). */
  halfStep: Float32Array;
  /** Per token: Σ|ŵ| of its 8-bit weights as they multiply (the hidden state's largest rounding scales it). */
  absSum: Float32Array;
  /** Per token: ‖w − ŵ‖₂, the 2-norm of its weights' rounding (‖h‖₂ scales it). */
  errNorm: Float32Array;
  /** Per token: the largest |w| or |ŵ| of its row (float rounding of either product scales it). */
  absMax: Float32Array;
  /** The largest absMax, halfStep, absSum, errNorm and |bias| (0 without one): the widest bound any token can have. */
  widest: number;
  maxHalfStep: number;
  maxAbsSum: number;
  maxErrNorm: number;
  biasMax: number;
}

/** What a pick cost: how many tokens it scored exactly. */
export interface PickStats {
  candidates: number;
}

/** Tokens a pick's first pass keeps at most for its second (more: the second pass reads the whole vocabulary). */
export const PICK_KEPT = 4096;

/**
 * What one caller's picks carry from one to the next (the batcher's, one per loaded model): the first pass over a
 * position's scores keeps the tokens within `width` of the best so far, and when the pick's window (best score −
 * cut) turns out no wider than `width`, every candidate is among them, so the second pass reads those only. The
 * window is about as wide from one pick to the next (it is the bounds' width); `width` is twice the last one.
 */
export class PickScratch {
  readonly kept = new Int32Array(PICK_KEPT);
  width = Number.POSITIVE_INFINITY;
  /** Picks whose second pass read the kept tokens only / the whole vocabulary. */
  fromKept = 0;
  fromAll = 0;

  /** Where the first pass keeps the tokens near the best: null while no window is known. */
  keeping(): Int32Array | null {
    return this.width < Number.POSITIVE_INFINITY ? this.kept : null;
  }

  /**
   * Counts how a pick's second pass read, and keeps twice its `window` (best − cut) for the next pick; none where the
   * window is not a number ≥ 0 (a cut that is not a number: every token is read then).
   */
  carry(fromKept: boolean, window: number): void {
    if (fromKept) this.fromKept++;
    else this.fromAll++;
    this.width = window >= 0 ? 2 * window : Number.POSITIVE_INFINITY;
  }
}

/** The 8-bit head onnxruntime multiplies by (DynamicQuantizeMatMul's B and its scales). */
export interface PackedHead {
  /** [hidden, vocab] int8, |q| ≤ SCREEN_Q_MAX, no zero point. */
  packed: Int8Array;
  /** [vocab] float32: token n's weights are q · scales[n]. */
  scales: Float32Array;
}

/**
 * Builds the screen from the head's float32 weights (`weight`, in `layout`) and bias; its exact scores read
 * `rows` when given (a [vocab, hidden] head read from its file), else a copy of the weights kept in memory.
 */
export function buildHeadScreen(
  weight: Float32Array,
  layout: HeadLayout,
  vocab: number,
  hidden: number,
  bias: Float32Array | null,
  fileRows?: HeadRows,
): { screen: HeadScreen; head: PackedHead } {
  if (!(hidden >= 1)) throw new Error(`hidden size ${hidden} is not a positive number`);
  if (weight.length !== vocab * hidden) {
    throw new Error(`the head holds ${weight.length} weights, not ${vocab} × ${hidden}`);
  }
  const packed = new Int8Array(vocab * hidden);
  const scales = new Float32Array(vocab);
  const rows = layout === 'vocab-major' ? weight : transposed(weight, hidden, vocab);
  const halfStep = new Float32Array(vocab);
  const absSum = new Float32Array(vocab);
  const absMax = new Float32Array(vocab);
  const errNorm = new Float32Array(vocab);
  // A tile of tokens' int8 weights, [TILE, hidden], then written to `packed` a hidden index at a time.
  const tile = new Int8Array(TILE * hidden);
  for (let n0 = 0; n0 < vocab; n0 += TILE) {
    const n1 = Math.min(vocab, n0 + TILE);
    for (let n = n0; n < n1; n++) {
      const from = n * hidden;
      const to = from + hidden;
      let max = 0;
      for (let i = from; i < to; i++) {
        const w = rows[i] as number;
        const a = w >= 0 ? w : -w;
        // NaN (damaged weights) stays NaN here, and makes the row's scale, screened score and bounds NaN: no pick
        // takes such a token, screened or not (its float32 score is NaN too).
        if (a > max || Number.isNaN(a)) max = a;
      }
      const scale = Math.fround(max / SCREEN_Q_MAX);
      scales[n] = scale;
      // Nearest (halves away from zero): no weight moves by more than half a step. |w| / scale ≤ SCREEN_Q_MAX up
      // to the scale's float32 rounding, so the clamp only trims that.
      const inverse = scale > 0 ? 1 / scale : 0;
      const at = (n - n0) * hidden;
      let q1 = 0;
      let e2 = 0;
      for (let i = from; i < to; i++) {
        const w = rows[i] as number;
        const x = w * inverse;
        let q = x >= 0 ? (x + 0.5) | 0 : -((0.5 - x) | 0);
        if (q > SCREEN_Q_MAX) q = SCREEN_Q_MAX;
        else if (q < -SCREEN_Q_MAX) q = -SCREEN_Q_MAX;
        tile[at + i - from] = q;
        q1 += q >= 0 ? q : -q;
        const e = w - q * scale;
        e2 += e * e;
      }
      halfStep[n] = scale / 2;
      absSum[n] = q1 * scale;
      errNorm[n] = Math.sqrt(e2) * NORM_ROUND_UP;
      // A dequantized weight is at most half a step from its weight, so no larger than this.
      absMax[n] = max + scale / 2;
    }
    for (let k = 0; k < hidden; k++) {
      const out = k * vocab;
      for (let n = n0; n < n1; n++) packed[out + n] = tile[(n - n0) * hidden + k] as number;
    }
  }
  const source = layout === 'vocab-major' && fileRows ? fileRows : new MemoryRows(rows, hidden);
  const largest = (values: Float32Array) => {
    let most = 0;
    for (const v of values) if (v > most || Number.isNaN(v)) most = v;
    return most;
  };
  let biasMax = 0;
  if (bias) for (const b of bias) if (Math.abs(b) > biasMax || Number.isNaN(b)) biasMax = Math.abs(b);
  return {
    screen: {
      vocab,
      hidden,
      rows: source,
      bias,
      halfStep,
      absSum,
      errNorm,
      absMax,
      widest: largest(absMax),
      maxHalfStep: largest(halfStep),
      maxAbsSum: largest(absSum),
      maxErrNorm: largest(errNorm),
      biasMax,
    },
    head: { packed, scales },
  };
}

/** [rows, cols] row-major → [cols, rows], in tiles (a column walk over 150 MB would miss the cache at every read). */
function transposed(m: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(m.length);
  const T = 64;
  for (let r0 = 0; r0 < rows; r0 += T) {
    for (let c0 = 0; c0 < cols; c0 += T) {
      const r1 = Math.min(rows, r0 + T);
      const c1 = Math.min(cols, c0 + T);
      for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) out[c * rows + r] = m[r * cols + c] as number;
    }
  }
  return out;
}

/**
 * How a sampler changes the scores before it picks (a repetition penalty, frequency and presence penalties, a logit
 * bias: Sampler's `adjusts`; a constraint's mask). The scores a pick reads are the changed ones; `adjustExact`
 * changes one exact score the same way (in float64); every bound is widened by `adjustSlack` (the float rounding of
 * the score before the change: 1e-6 of the largest shift) and then multiplied by `boundScale` (the change's steepest
 * slope: a repetition penalty p stretches scores by p or 1 / p).
 */
export interface ScoreAdjust {
  readonly boundScale: number;
  readonly adjustSlack: number;
  adjustExact(n: number, score: number): number;
  /** Whether a constraint refused token n (its score −∞ in the scores read): its exact score is −∞, not computed. */
  banned(n: number): boolean;
}

/**
 * What the bounds need of a hidden state: ‖h‖₁ and ‖h‖₂; the most the screened product moved any entry of it by
 * rounding it to 8 bits (0 for full scores); ‖h‖₁ times the float rounding per unit weight; and the widening a change
 * of the scores asks (ScoreAdjust).
 */
interface Norms {
  l1: number;
  l2: number;
  roundMax: number;
  rounding: number;
  slack: number;
  scale: number;
}

/**
 * Which hidden states the screened product rounded together ('tensor': all of `hiddenState`, the run's whole head
 * input; 'row': the row alone, a guess at a later run's), or 'none' for full scores.
 */
type Rounded = 'tensor' | 'row' | 'none';

function normsOf(
  screen: HeadScreen,
  hiddenState: Float32Array,
  at: number,
  rounded: Rounded,
  adjust?: ScoreAdjust,
): Norms {
  const hidden = screen.hidden;
  let l1 = 0;
  let squares = 0;
  for (let k = 0; k < hidden; k++) {
    const x = hiddenState[at + k] as number;
    l1 += Math.abs(x);
    squares += x * x;
  }
  const largest =
    rounded === 'none'
      ? 0
      : largestMagnitude(
          hiddenState,
          rounded === 'tensor' ? 0 : at,
          rounded === 'tensor' ? hiddenState.length : at + hidden,
        );
  return {
    l1,
    l2: Math.sqrt(squares),
    roundMax: largest * HIDDEN_HALF_STEP,
    rounding: ROUNDING_PER_768 * Math.max(1, hidden / 768) * l1,
    slack: adjust?.adjustSlack ?? 0,
    scale: adjust?.boundScale ?? 1,
  };
}

/**
 * The largest |x| of entries [from, to) of `h` (NaN when one is not a number: nothing is ruled out then). The
 * screened product rounds its whole input, every row of the run (every position of a lookup check), in steps of its
 * range: a row beside a larger one is rounded in the larger one's steps, so a bound from the row's own entries would
 * not hold (measured with onnxruntime's kernel: a row of entries up to 0.01 scored 0.0045 alone and 0 beside a row up
 * to 50).
 */
function largestMagnitude(h: Float32Array, from: number, to: number): number {
  let most = 0;
  for (let i = from; i < to; i++) {
    const a = Math.abs(h[i] as number);
    if (a > most) most = a;
    else if (!(a <= most)) return Number.NaN;
  }
  return most;
}

/** What a choice reads: its scores, from where, whether they are screened, and the norms of its hidden state. */
interface ScoreSource {
  scores: Float32Array;
  at: number;
  screened: boolean;
  norms: Norms;
}

/** Every token's exact score rounded to float32, for a row whose screened scores say nothing (scoresFor). */
let rescored = new Float32Array(0);

/**
 * The scores a choice of one position reads and its hidden state's norms: `scores` from `at` as given, or null when
 * its hidden state is not a number. Except where a screened run's input holds an entry that is NaN or ±∞ (another
 * row's overflow, or another position's): onnxruntime's 8-bit product rounds its whole input with one step, which is
 * then not a number, and every row's screened scores come back NaN (measured with its x86 kernel: ±∞ anywhere in the
 * other row, or NaN in its last entry) — while this row's own hidden state is sound. Such a row is scored in full
 * here, exactly (a dot product per token: a step's worth of work, for a run that is broken anyway), and chooses from
 * those scores as from full ones, so the request that overflowed fails alone.
 */
function scoresFor(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  screened: boolean,
  vocab: number,
  adjust: ScoreAdjust | undefined,
): ScoreSource | null {
  const norms = normsOf(screen, hiddenState, hiddenAt, screened ? 'tensor' : 'none', adjust);
  if (!Number.isFinite(norms.l1)) return null;
  if (!screened || Number.isFinite(norms.roundMax)) return { scores, at, screened, norms };
  if (rescored.length < vocab) rescored = new Float32Array(vocab);
  for (let n = 0; n < vocab; n++) rescored[n] = exactScore(screen, n, hiddenState, hiddenAt, adjust);
  return { scores: rescored, at: 0, screened: false, norms: normsOf(screen, hiddenState, hiddenAt, 'none', adjust) };
}

/** Token n's exact score: the head's bias plus Σₖ h[k]·w[n][k] in float64, changed as `adjust` changes scores. */
function exactScore(
  screen: HeadScreen,
  n: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  adjust: ScoreAdjust | undefined,
): number {
  if (adjust?.banned(n)) return Number.NEGATIVE_INFINITY;
  const e = (screen.bias ? (screen.bias[n] as number) : 0) + screen.rows.dot(n, hiddenState, hiddenAt);
  return adjust ? adjust.adjustExact(n, e) : e;
}

/**
 * How far token n's `score` (screened, or float32) can be from its exact value: when screened, the weights'
 * rounding to 7 bits, |eₙ·h| ≤ min(½stepₙ·‖h‖₁, ‖eₙ‖₂‖h‖₂), and the hidden state's to 8 bits, |ŵₙ·δh| ≤
 * ‖ŵₙ‖₁·max|δh| (HIDDEN_HALF_STEP); float rounding of the product and of the bias's addition either way. The 2-norm
 * form is the tighter on a spread-out hidden state, the other where a few entries stand out (the bench's models: a
 * greedy pick scores about 18 tokens exactly where it scored 79 with the 1-norm form and max|δh| taken twice over).
 */
function boundOf(screen: HeadScreen, n: number, norms: Norms, screened: boolean, score: number): number {
  const rounding = norms.rounding * (screen.absMax[n] as number);
  const quantized = screened ? screenedPart(screen, n, norms) : 0;
  const bias = screen.bias ? 1e-6 * Math.abs(screen.bias[n] as number) : 0;
  return (quantized + rounding + bias + 1e-6 * Math.abs(score) + norms.slack) * norms.scale;
}

/** The part of token n's bound that the screen's two roundings add (NaN where its weights are not numbers). */
function screenedPart(screen: HeadScreen, n: number, norms: Norms): number {
  const weights = Math.min((screen.halfStep[n] as number) * norms.l1, (screen.errNorm[n] as number) * norms.l2);
  return weights + norms.roundMax * (screen.absSum[n] as number);
}

/**
 * The part of token n's bound that the screen's roundings add, for the hidden state at `hiddenAt` of `hiddenState`
 * (every row the screened product rounded together): how far its screened score can be from the exact one, less
 * float rounding. For tests that push scores to their bounds.
 */
export function screenedBound(screen: HeadScreen, n: number, hiddenState: Float32Array, hiddenAt: number): number {
  return screenedPart(screen, n, normsOf(screen, hiddenState, hiddenAt, 'tensor'));
}

/** Bytes of the 8-bit head onnxruntime multiplies by: an int8 per weight and a float32 scale per token. */
export function screenProductBytes(vocab: number, hidden: number): number {
  return vocab * hidden + vocab * 4;
}

/**
 * Memory a screen holds beside the model's weights: the 8-bit head and its scales (in onnxruntime), the
 * per-token figures and bias, the rows kept in memory (read from the file: those it keeps, FILE_ROWS_KEPT).
 */
export function screenBytes(screen: HeadScreen): number {
  const { vocab, hidden } = screen;
  const packed = screenProductBytes(vocab, hidden);
  const perToken = 4 * vocab * (screen.bias ? 5 : 4);
  return packed + perToken + screen.rows.bytes;
}

/** The largest bound any token of a pick can have (a cheap first filter). */
function widestBound(screen: HeadScreen, norms: Norms, screened: boolean, maxAbsScore: number): number {
  const rounding = norms.rounding * screen.widest;
  const quantized = screened
    ? Math.min(screen.maxHalfStep * norms.l1, screen.maxErrNorm * norms.l2) + norms.roundMax * screen.maxAbsSum
    : 0;
  return (quantized + rounding + 1e-6 * (screen.biasMax + maxAbsScore) + norms.slack) * norms.scale;
}

/** What a pick's first pass found (one object, reused: the engine picks on one thread). */
const passResult = { top: -1, max: 0, min: 0, kept: 0 };

/**
 * The best score (scores that are not numbers never are) and the smallest above −∞, for the largest magnitude a
 * bound's float rounding covers (a token a constraint refused scores −∞, and exactly so: no bound need reach it, and
 * one that did would cover every other token too): two comparisons that are rarely true, where |s| per score
 * branched on its sign (half of them mispredicted: 4× the time). With `keep`, a third that is rarely true either: a
 * score within `width` of the best so far is kept (`kept` counts them all, past the array's end too).
 */
function firstPass(
  scores: Float32Array,
  at: number,
  vocab: number,
  keep: Int32Array | null,
  width: number,
): typeof passResult {
  let top = -1;
  let max = Number.NEGATIVE_INFINITY;
  let min = Number.POSITIVE_INFINITY;
  let kept = 0;
  for (let n = 0; n < vocab; n++) {
    const s = scores[at + n] as number;
    if (s > max) {
      max = s;
      top = n;
    }
    if (s < min && s !== Number.NEGATIVE_INFINITY) min = s;
    if (keep !== null && s >= max - width) {
      if (kept < keep.length) keep[kept] = n;
      kept++;
    }
  }
  passResult.top = top;
  passResult.max = max;
  passResult.min = min;
  passResult.kept = kept;
  return passResult;
}

/**
 * The exact greedy pick of one position among tokens [0, limit): `scores` holds its vocabulary's approximate
 * (`screened`) or float32 scores from `at`, `hiddenState` its head input from `hiddenAt`. The argmax of the
 * scores computed exactly (float64) — the lowest id among equals. −1 when the hidden state or every
 * candidate's score is not a number.
 *
 * The exact argmax t scores at least the best token's lower bound (its score less its bound): |sₙ − exactₙ| ≤
 * Bₙ gives sₜ + Bₜ ≥ exactₜ ≥ exact_best ≥ s_best − B_best. So t is among the tokens whose score is within the
 * widest bound of that floor (one compare each), and of those, among the ones whose own bound reaches it.
 */
export function exactPick(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  screened: boolean,
  limit = screen.vocab,
  stats?: PickStats,
  scratch?: PickScratch,
  adjust?: ScoreAdjust,
): number {
  const vocab = Math.min(limit, screen.vocab);
  const source = scoresFor(screen, scores, at, hiddenState, hiddenAt, screened, vocab, adjust);
  if (source === null) return -1;
  ({ scores, at, screened } = source);
  const norms = source.norms;
  // With a scratch that knows the last window, the first pass also keeps the tokens near the best.
  const width = scratch?.width ?? Number.POSITIVE_INFINITY;
  const keeping = scratch?.keeping() ?? null;
  const { top, max, min, kept } = firstPass(scores, at, vocab, keeping, width);
  const maxAbs = Math.max(0, max, -min);
  let best = -1;
  let bestScore = Number.NEGATIVE_INFINITY;
  let count = 0;
  if (top >= 0) {
    const floor = max - boundOf(screen, top, norms, screened, max);
    // Weights that are not numbers make the bounds so: then no token is ruled out.
    const cut = floor - widestBound(screen, norms, screened, maxAbs);
    const checked = Number.isFinite(cut);
    // A token not kept scored under the best so far less `width` when it was read, so under max − width; when
    // that is no more than the cut, it is no candidate: the kept tokens (in id order) hold every one.
    const fromKept = keeping !== null && checked && kept <= keeping.length && max - width <= cut;
    const end = fromKept ? kept : vocab;
    for (let i = 0; i < end; i++) {
      const n = fromKept ? (keeping?.[i] as number) : i;
      const s = scores[at + n] as number;
      if (checked && !(s >= cut)) continue;
      if (Number.isNaN(s)) continue;
      if (checked && !(s + boundOf(screen, n, norms, screened, s) >= floor)) continue;
      count++;
      const exact = exactScore(screen, n, hiddenState, hiddenAt, adjust);
      if (exact > bestScore) {
        bestScore = exact;
        best = n;
      }
    }
    scratch?.carry(fromKept, checked ? max - cut : Number.NaN);
  }
  if (stats) stats.candidates = count;
  return best;
}

/**
 * The draw of `key` at `temperature` (> 0) among tokens [0, limit) of one position, from its screened or float32
 * scores as {@link exactPick} picks from them: the token whose exact score (float64) plus temperature × its noise
 * (gumbel.ts) is the largest, the lowest id among equals — the token gumbelArgmax draws from the exact scores, a draw
 * from their softmax at that temperature. −1 when the hidden state or every candidate's score is not a number.
 *
 * As for the argmax: the exact value of the token whose lower bound (score plus its bin's least noise) is the largest
 * is a floor under the best exact value, and a token that can reach it has a score within the widest bound of it
 * with its bin's most noise (one compare each), then with its own noise and bound. `scratch` carries the window, as
 * a greedy pick's does.
 */
export function exactDraw(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  screened: boolean,
  temperature: number,
  key: number,
  limit = screen.vocab,
  stats?: PickStats,
  scratch?: PickScratch,
  adjust?: ScoreAdjust,
): number {
  const vocab = Math.min(limit, screen.vocab);
  const source = scoresFor(screen, scores, at, hiddenState, hiddenAt, screened, vocab, adjust);
  if (source === null) return -1;
  ({ scores, at, screened } = source);
  const norms = source.norms;
  const width = scratch?.width ?? Number.POSITIVE_INFINITY;
  const keeping = scratch?.keeping() ?? null;
  // The first pass: the largest lower bound and its token, the scores' range, and the tokens near the best. The
  // noise's tables and hash as locals: an imported binding read in a loop can cost a call each time (tsx's
  // CommonJS output reads it through a getter: the pass took 8× as long).
  const T = temperature;
  const low = NOISE_LOW;
  const high = NOISE_HIGH;
  const shift = NOISE_SHIFT;
  const hash = noiseHash;
  let top = -1;
  let lowest = Number.NEGATIVE_INFINITY;
  let max = 0;
  let min = 0;
  let kept = 0;
  for (let n = 0; n < vocab; n++) {
    const s = scores[at + n] as number;
    const bin = hash(key, n) >>> shift;
    const lower = s + T * (low[bin] as number);
    if (lower > lowest) {
      lowest = lower;
      top = n;
    }
    if (s > max) max = s;
    if (s < min && s !== Number.NEGATIVE_INFINITY) min = s;
    if (keeping !== null && s + T * (high[bin] as number) >= lowest - width) {
      if (kept < keeping.length) keeping[kept] = n;
      kept++;
    }
  }
  let best = -1;
  let count = 0;
  if (top >= 0) {
    const exactOf = (n: number) => exactScore(screen, n, hiddenState, hiddenAt, adjust);
    // The top token's exact value: a floor under the best (NaN where its weights are not numbers: no best yet).
    const floor = exactOf(top) + T * gumbel(key, top);
    let bestValue = Number.isNaN(floor) ? Number.NEGATIVE_INFINITY : floor;
    if (!Number.isNaN(floor)) best = top;
    count = 1;
    const cut = floor - widestBound(screen, norms, screened, Math.max(max, -min));
    // Weights that are not numbers make the floor so: then no token is ruled out.
    const checked = Number.isFinite(cut);
    // A token not kept was under the largest lower bound so far less `width` by its most noise: no candidate when
    // that is no more than the cut.
    const fromKept = keeping !== null && checked && kept <= keeping.length && lowest - width <= cut;
    const end = fromKept ? kept : vocab;
    for (let i = 0; i < end; i++) {
      const n = fromKept ? (keeping?.[i] as number) : i;
      if (n === top) continue;
      const s = scores[at + n] as number;
      const most = s + T * (high[hash(key, n) >>> shift] as number);
      if (checked && !(most >= cut)) continue;
      if (Number.isNaN(s)) continue;
      const bound = checked ? boundOf(screen, n, norms, screened, s) : 0;
      if (checked && !(most + bound >= floor)) continue;
      const noise = T * gumbel(key, n);
      if (checked && !(s + noise + bound >= floor)) continue;
      count++;
      const value = exactOf(n) + noise;
      if (value > bestValue || (value === bestValue && n < best)) {
        bestValue = value;
        best = n;
      }
    }
    scratch?.carry(fromKept, checked ? lowest - cut : Number.NaN);
  }
  if (stats) stats.candidates = count;
  return best;
}

/**
 * The tokens a draw scored exactly and their exact scores (grown as needed; reused: the engine draws on one thread),
 * with the window of the last draw's candidates a greedy pick's scratch carries (PickScratch).
 */
class ScoredTokens extends PickScratch {
  protected candidateIds = new Int32Array(512);
  protected exact = new Float64Array(512);
  protected count = 0;
  /** Per token, the draw that scored it exactly (`draw`): so that none is scored twice. */
  private scoredIn = new Int32Array(0);
  private draw = 0;

  /** Starts a draw over a vocabulary of `vocab` tokens. */
  begin(vocab: number): void {
    if (this.scoredIn.length < vocab) this.scoredIn = new Int32Array(vocab);
    this.draw = (this.draw + 1) | 0;
    this.count = 0;
  }
  /** Whether token n was scored in this draw. */
  scored(n: number): boolean {
    return this.scoredIn[n] === this.draw;
  }
  /** Adds a token scored exactly. */
  push(n: number, score: number): void {
    const count = this.count;
    if (count === this.candidateIds.length) {
      const ids = new Int32Array(2 * count);
      ids.set(this.candidateIds);
      this.candidateIds = ids;
      const exact = new Float64Array(2 * count);
      exact.set(this.exact);
      this.exact = exact;
    }
    this.candidateIds[count] = n;
    this.exact[count] = score;
    this.scoredIn[n] = this.draw;
    this.count = count + 1;
  }
  /** Tokens scored exactly so far in this draw. */
  get scoredCount(): number {
    return this.count;
  }
}

/**
 * What an exact top-k writes, and carries from one draw to the next (reused: the engine draws on one thread): the k
 * likeliest tokens and their exact scores rounded to float32, the likeliest first (equal exact scores: the lower id
 * first); and, as a greedy pick's scratch does, the window of the last draw's candidates, so that the first pass
 * keeps the tokens near the best and the rest of the work reads those only.
 */
export class TopKScratch extends ScoredTokens {
  readonly ids = new Int32Array(SCREEN_TOP_K);
  readonly scores = new Float32Array(SCREEN_TOP_K);
  private rounded = new Float32Array(512);
  private order: number[] = [];

  /**
   * The tokens scored in this draw, in the order they were scored, and their exact scores rounded to float32 (views,
   * valid until the next draw; the scores' array is grown as needed).
   */
  scoredTokens(): { ids: Int32Array; scores: Float32Array } {
    const count = this.count;
    if (this.rounded.length < count) this.rounded = new Float32Array(this.candidateIds.length);
    for (let i = 0; i < count; i++) this.rounded[i] = this.exact[i] as number;
    return { ids: this.candidateIds.subarray(0, count), scores: this.rounded.subarray(0, count) };
  }
  /** The least exact score among those scored so far (NaN when one is not a number). */
  least(): number {
    let least = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.count; i++) {
      const e = this.exact[i] as number;
      if (e < least) least = e;
      else if (!(e >= least)) return Number.NaN;
    }
    return least;
  }
  /** Keeps the k best of the tokens scored in `ids` and `scores`; returns how many (fewer when fewer are numbers). */
  settle(k: number): number {
    const order = this.order;
    order.length = 0;
    for (let i = 0; i < this.count; i++) if (!Number.isNaN(this.exact[i])) order.push(i);
    const exact = this.exact;
    const ids = this.candidateIds;
    order.sort((a, b) => (exact[b] as number) - (exact[a] as number) || (ids[a] as number) - (ids[b] as number));
    const m = Math.min(k, order.length);
    for (let j = 0; j < m; j++) {
      const i = order[j] as number;
      this.ids[j] = ids[i] as number;
      this.scores[j] = exact[i] as number;
    }
    return m;
  }
}

/**
 * The exact top-k of one position among tokens [0, limit), as {@link exactPick} takes the exact argmax: the k tokens
 * whose scores computed exactly (float64) are the largest, into `out` (likeliest first, equal scores the lower id
 * first), whether `scores` are the screen's or float32 ones — so a draw among them is the same in either kind of
 * run. Returns how many (k, or fewer where fewer scores are numbers), or −1 when the hidden state is not a number.
 *
 * The k tokens with the best screened scores are scored exactly first; the least of their exact scores, L, is a
 * floor under the k-th best exact score (k tokens reach it), so a token of the exact top k scores at least L, and
 * its upper bound (score plus bound) reaches L. The other tokens whose upper bounds do (one compare each against L
 * less the widest bound, then their own) are scored exactly, and the best k kept. With the window `out` carries
 * from the last draw (see PickScratch), the first pass keeps the tokens near the best, and the selection and the
 * search for candidates read only those whenever they hold every token that can matter.
 */
export function exactTopK(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  screened: boolean,
  k: number,
  out: TopKScratch,
  limit = screen.vocab,
  stats?: PickStats,
  adjust?: ScoreAdjust,
): number {
  const vocab = Math.min(limit, screen.vocab);
  const want = Math.min(k, vocab, SCREEN_TOP_K);
  const source = scoresFor(screen, scores, at, hiddenState, hiddenAt, screened, vocab, adjust);
  if (source === null) return -1;
  ({ scores, at, screened } = source);
  const norms = source.norms;
  out.begin(vocab);
  const exactOf = (n: number) => exactScore(screen, n, hiddenState, hiddenAt, adjust);
  const width = out.width;
  const keeping = out.keeping();
  const { max, min, kept } = firstPass(scores, at, vocab, keeping, width);
  const maxAbs = Math.max(0, max, -min);
  // The best `want` screened scores, among the kept tokens when there are enough of them (they hold every token
  // within the window of the best), else among all. Any `want` tokens give a floor (the least of their exact
  // scores); the best give the highest, which leaves the fewest candidates.
  const keptAll = keeping !== null && kept <= keeping.length;
  let best: Int32Array | null = null;
  if (keptAll && kept >= want) {
    const values = keptScores.subarray(0, kept);
    for (let i = 0; i < kept; i++) values[i] = scores[at + (keeping[i] as number)] as number;
    best = topKIndices(values, want).map((i) => keeping[i] as number);
  }
  best ??= topKIndices(scores.subarray(at, at + vocab), want);
  for (const n of best) out.push(n, exactOf(n));
  const floor = out.least();
  // A floor that is not a number (damaged weights) leaves every token a candidate.
  const cut = floor - widestBound(screen, norms, screened, maxAbs);
  const checked = Number.isFinite(cut);
  const fromKept = keptAll && checked && max - width <= cut;
  const end = fromKept ? kept : vocab;
  for (let i = 0; i < end; i++) {
    const n = fromKept ? (keeping?.[i] as number) : i;
    const s = scores[at + n] as number;
    if (checked && !(s >= cut)) continue;
    // −∞ (a token a constraint refused) only reaches a floor of −∞ (fewer than k tokens allowed): its weight is 0.
    if (Number.isNaN(s) || s === Number.NEGATIVE_INFINITY || out.scored(n)) continue;
    if (checked && !(s + boundOf(screen, n, norms, screened, s) >= floor)) continue;
    out.push(n, exactOf(n));
  }
  out.carry(fromKept, checked ? max - cut : Number.NaN);
  if (stats) stats.candidates = out.scoredCount;
  return out.settle(want);
}

/**
 * The tokens a min-p draw at `temperature` among tokens [0, limit) of one position can keep, scored exactly (float64)
 * into `out` in id order: every token whose weight exp((sₙ − max) / T) can reach `minP` (0 < minP ≤ 1), the token of
 * the largest exact score among them — the draw (Sampler.drawAmong) then keeps, weighs and walks them in id order as
 * a draw over the float32 scores of the whole vocabulary does. Returns how many it holds (0 when no score is a
 * number), or −1 when the hidden state is not a number.
 *
 * A kept token scores at least max + T·ln(minP), and the largest exact score is at least that of the token whose
 * approximate score is the best: so a kept token's upper bound (score plus bound) reaches that token's exact score
 * plus T·ln(minP) (one compare each against it less the widest bound, then its own).
 */
export function exactMinP(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  screened: boolean,
  temperature: number,
  minP: number,
  out: TopKScratch,
  limit = screen.vocab,
  stats?: PickStats,
  adjust?: ScoreAdjust,
): number {
  const vocab = Math.min(limit, screen.vocab);
  const source = scoresFor(screen, scores, at, hiddenState, hiddenAt, screened, vocab, adjust);
  if (source === null) return -1;
  ({ scores, at, screened } = source);
  const norms = source.norms;
  out.begin(vocab);
  const exactOf = (n: number) => exactScore(screen, n, hiddenState, hiddenAt, adjust);
  const { top, max, min } = firstPass(scores, at, vocab, null, Number.POSITIVE_INFINITY);
  if (top < 0) {
    if (stats) stats.candidates = 0;
    return 0;
  }
  const topExact = exactOf(top);
  // A floor that is not a number (damaged weights) leaves every token a candidate.
  const floor = topExact + temperature * Math.log(minP);
  const cut = floor - widestBound(screen, norms, screened, Math.max(0, max, -min));
  const checked = Number.isFinite(cut);
  let count = 0;
  for (let n = 0; n < vocab; n++) {
    const s = scores[at + n] as number;
    if (checked && !(s >= cut)) continue;
    if (Number.isNaN(s)) continue;
    if (n !== top && checked && !(s + boundOf(screen, n, norms, screened, s) >= floor)) continue;
    count++;
    // A score that is not a number has weight 0 in a draw: it is left out (none left: the draw fails as the package).
    const exact = n === top ? topExact : exactOf(n);
    if (!Number.isNaN(exact)) out.push(n, exact);
  }
  if (stats) stats.candidates = count;
  return out.scoredCount;
}

/** The most tokens a top-p draw from the head's screen scores exactly and still counts as fitting it (nucleusFits). */
export const NUCLEUS_SCREEN_MAX = 2048;
/**
 * Tokens a nucleus's first round scores exactly at least, and at most: as many as the last nucleus took (within
 * these), since one step's distribution is much like the last's; each further round scores four times as many.
 */
const NUCLEUS_FIRST = 64;
const NUCLEUS_FIRST_MOST = 1024;
/** Bins of a nucleus's histogram: 1/64 of the temperature wide, 32 temperatures deep (the last holds the rest). */
const NUCLEUS_BINS = 2048;
const NUCLEUS_PER_T = 64;

/**
 * What a top-p draw from the head's screen writes (reused: the engine draws on one thread): the tokens it scored
 * exactly, then the nucleus — likeliest first, equal scores the lower id first — in `ids` and `scores`. It orders and
 * weighs the exact scores rounded to float32, the values the draw weighs, as a draw over float32 scores orders and
 * weighs its own.
 */
export class NucleusScratch extends ScoredTokens {
  private members: number[] = [];
  /** How many tokens the last nucleus scored (its next one starts there: see NUCLEUS_FIRST). */
  lastScored = 0;
  readonly counts = new Int32Array(NUCLEUS_BINS);
  /** Tokens in the bins before each bin. */
  readonly before = new Int32Array(NUCLEUS_BINS + 1);
  ids = new Int32Array(1024);
  scores = new Float32Array(1024);

  /** The i-th scored token's exact score rounded to float32. */
  private rounded(i: number): number {
    return Math.fround(this.exact[i] as number);
  }
  /** The largest exact score so far, rounded (−∞ when none is a number above −∞). */
  best(): number {
    let best = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < this.count; i++) {
      const e = this.rounded(i);
      if (e > best) best = e;
    }
    return best;
  }
  /**
   * Orders the scored tokens of score at least `cut` likeliest first (equal scores: the lower id first) and returns
   * the weight exp((e − best) / T) of the others (the scored part of the tail).
   */
  order(cut: number, best: number, temperature: number): number {
    const members = this.members;
    members.length = 0;
    const invT = 1 / temperature;
    let rest = 0;
    for (let i = 0; i < this.count; i++) {
      const e = this.rounded(i);
      if (e >= cut) members.push(i);
      else if (!Number.isNaN(e)) rest += Math.exp((e - best) * invT);
    }
    const ids = this.candidateIds;
    members.sort((a, b) => this.rounded(b) - this.rounded(a) || (ids[a] as number) - (ids[b] as number));
    return rest;
  }
  /**
   * The position in the ordered members where top-p's cumulative share first reaches `topP` for every total weight
   * in [sumLow, sumHigh] (with their own weights added): −1 when that position is not the same for all of them or
   * the members do not reach it.
   */
  edge(best: number, temperature: number, topP: number, sumLow: number, sumHigh: number): number {
    const members = this.members;
    const invT = 1 / temperature;
    let own = 0;
    for (const i of members) own += Math.exp((this.rounded(i) - best) * invT);
    const low = topP * (own + sumLow);
    const high = topP * (own + sumHigh);
    let cumulative = 0;
    for (let j = 0; j < members.length; j++) {
      cumulative += Math.exp((this.rounded(members[j] as number) - best) * invT);
      if (cumulative >= low) return cumulative >= high ? j : -1;
    }
    return -1;
  }
  /** Writes the first `m` ordered members into `ids` and `scores` (float32). */
  settle(m: number): void {
    if (this.ids.length < m) {
      this.ids = new Int32Array(2 * m);
      this.scores = new Float32Array(2 * m);
    }
    for (let j = 0; j < m; j++) {
      const i = this.members[j] as number;
      this.ids[j] = this.candidateIds[i] as number;
      this.scores[j] = this.rounded(i);
    }
  }
  /** How many scored tokens the last `order` kept (all of them that are numbers, with a cut of −∞). */
  get memberCount(): number {
    return this.members.length;
  }
}

/**
 * The nucleus of a top-p draw at `temperature` among tokens [0, vocab) of one position, into `out` (NucleusScratch's
 * ids and scores, likeliest first): the likeliest tokens by their exact scores (`exactOf`) up to and including the
 * first at which their cumulative share of the whole vocabulary's weight reaches `topP` — what a draw over float32
 * scores of every token finds (Sampler's nucleus), up to a near tie. Each exact score is within `widest` of its
 * score in `scores`; `top` has the largest of those, `max`. Returns the nucleus's length (0 when no score is a
 * number), or −2 when a round would score more than `most` tokens; `stats` counts the tokens scored exactly.
 *
 * Rounds. The scores' histogram below `max` (bins of T/64) gives a cut L per bin b: a token of a later bin scores
 * under L, so every token of exact score ≥ L is in the bins before b, all scored; those are the likeliest tokens in
 * order. The rest's weight is between what the bins' edges allow (each token's score less or plus `widest`) plus
 * the exact weight of the scored ones under L. Where the nucleus's edge lies at the same token for every total weight
 * in that range, it is the nucleus; otherwise the next round scores four times as many tokens (or the next bin's),
 * the last every token.
 */
function nucleusOf(
  scores: Float32Array,
  at: number,
  vocab: number,
  top: number,
  max: number,
  temperature: number,
  topP: number,
  widest: number,
  exactOf: (n: number) => number,
  out: NucleusScratch,
  stats?: PickStats,
  most = Number.POSITIVE_INFINITY,
): number {
  out.begin(vocab);
  const counts = out.counts;
  counts.fill(0);
  const perBin = NUCLEUS_PER_T / temperature;
  const w = temperature / NUCLEUS_PER_T;
  const last = NUCLEUS_BINS - 1;
  for (let n = 0; n < vocab; n++) {
    // A score that is not a number weighs nothing; −∞ lands in the last bin, whose least weight is 0.
    const b = (max - (scores[at + n] as number)) * perBin;
    if (b < last) counts[b | 0] = (counts[b | 0] as number) + 1;
    else if (b >= last) counts[last] = (counts[last] as number) + 1;
  }
  const before = out.before;
  before[0] = 0;
  for (let b = 0; b < NUCLEUS_BINS; b++) before[b + 1] = (before[b] as number) + (counts[b] as number);
  const topExact = exactOf(top);
  out.push(top, topExact);
  // The first bin whose cut is under the top token's exact score (strictly: the token of the largest exact score,
  // whose score is within `widest` of it, is then in an earlier bin). An exact score or a bound that is not a number
  // (damaged weights) leaves every token to score (a NaN bin would never reach the last one).
  const first = Math.floor((max + widest - topExact) / w) + 1;
  const lowest = first < 0 ? 0 : first >= 0 ? first : NUCLEUS_BINS;
  let target = Math.min(Math.max(NUCLEUS_FIRST, out.lastScored), NUCLEUS_FIRST_MOST);
  let b = lowest;
  for (;;) {
    // The last bin is a cut too (its tokens' least weight counted as 0); past it, every token is scored.
    while (b < last && (before[b] as number) < target) b++;
    const all = !(b < NUCLEUS_BINS);
    const scoring = all ? vocab : (before[b] as number);
    if (scoring > most) {
      out.lastScored = scoring;
      if (stats) stats.candidates = scoring;
      return -2;
    }
    for (let n = 0; n < vocab; n++) {
      if (out.scored(n)) continue;
      const s = scores[at + n] as number;
      if (Number.isNaN(s)) continue;
      if (!all && !((max - s) * perBin < b)) continue;
      out.push(n, exactOf(n));
    }
    const best = out.best();
    if (best === Number.NEGATIVE_INFINITY) {
      out.lastScored = out.scoredCount;
      if (stats) stats.candidates = out.scoredCount;
      return 0;
    }
    const cut = all ? Number.NEGATIVE_INFINITY : max + widest - b * w;
    let low = out.order(cut, best, temperature);
    let high = low;
    if (!all) {
      for (let k = b; k < NUCLEUS_BINS; k++) {
        const c = counts[k] as number;
        if (c === 0) continue;
        high += c * Math.exp((max - k * w + widest - best) / temperature);
        if (k < last) low += c * Math.exp((max - (k + 1) * w - widest - best) / temperature);
      }
    }
    const edge = out.edge(best, temperature, topP, low, high);
    if (edge >= 0 || all) {
      const m = edge >= 0 ? edge + 1 : out.memberCount;
      out.settle(m);
      out.lastScored = out.scoredCount;
      if (stats) stats.candidates = out.scoredCount;
      return m;
    }
    target *= 4;
    b++;
  }
}

/**
 * The nucleus of a top-p draw at `temperature` (0 < topP < 1) among tokens [0, limit) of one position, from its
 * screened or float32 scores as {@link exactPick} picks from them, into `out` (see nucleusOf): the likeliest tokens by
 * their exact scores (float64) whose cumulative share of the whole vocabulary's weight first reaches top-p — the
 * nucleus a draw over every token's float32 scores finds, up to a near tie — for Sampler.drawNucleus. Returns its
 * length (0 when no score is a number), or −1 when the hidden state is not a number.
 */
export function exactTopP(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  screened: boolean,
  temperature: number,
  topP: number,
  out: NucleusScratch,
  limit = screen.vocab,
  stats?: PickStats,
  adjust?: ScoreAdjust,
): number {
  const vocab = Math.min(limit, screen.vocab);
  const source = scoresFor(screen, scores, at, hiddenState, hiddenAt, screened, vocab, adjust);
  if (source === null) return -1;
  ({ scores, at, screened } = source);
  const norms = source.norms;
  const { top, max, min } = firstPass(scores, at, vocab, null, Number.POSITIVE_INFINITY);
  if (top < 0) {
    if (stats) stats.candidates = 0;
    return 0;
  }
  const widest = widestBound(screen, norms, screened, Math.max(0, max, -min));
  const exactOf = (n: number) => exactScore(screen, n, hiddenState, hiddenAt, adjust);
  return nucleusOf(scores, at, vocab, top, max, temperature, topP, widest, exactOf, out, stats);
}

/**
 * Whether the nucleus of a top-p draw at `temperature` from these float32 scores (one position's, from `at`, with its
 * head input `hiddenState` from `hiddenAt`) would fit the head's screen: found with at most NUCLEUS_SCREEN_MAX tokens
 * scored, the scores taken as exact but each as far from it as the screen's bounds would allow. The engine asks it
 * after a draw from full scores, to screen the next step's or not: a nucleus whose edge is plain from the likeliest
 * tokens' scores and a bounded rest takes a few rounds of a few tokens; where much of the weight lies in a long tail
 * (a flat distribution), the screen's bounds on it would leave the edge open until most of the vocabulary is scored.
 */
export function nucleusFits(
  screen: HeadScreen,
  scores: Float32Array,
  at: number,
  hiddenState: Float32Array,
  hiddenAt: number,
  temperature: number,
  topP: number,
  out: NucleusScratch,
  limit = screen.vocab,
): boolean {
  const vocab = Math.min(limit, screen.vocab);
  // A guess at the next run's rounding: this row's alone (a full run may hold more rows than a screened one).
  const norms = normsOf(screen, hiddenState, hiddenAt, 'row');
  if (!Number.isFinite(norms.l1)) return false;
  const { top, max, min } = firstPass(scores, at, vocab, null, Number.POSITIVE_INFINITY);
  if (top < 0) return false;
  const widest = widestBound(screen, norms, true, Math.max(0, max, -min));
  const stats = { candidates: 0 };
  const exactOf = (n: number) => scores[at + n] as number;
  const m = nucleusOf(scores, at, vocab, top, max, temperature, topP, widest, exactOf, out, stats, NUCLEUS_SCREEN_MAX);
  return m >= 0 && stats.candidates <= NUCLEUS_SCREEN_MAX;
}

/** The kept tokens' scores, for the selection among them. */
const keptScores = new Float32Array(PICK_KEPT);

/**
 * The largest |screened − full| of one position's scores as a share of its bound (≤ 1 while the bound holds;
 * NaN for scores that are not numbers): the engine's check of a screen before it trusts it. Its hidden state is at
 * `hiddenAt` of `hiddenState`, which holds every row the screened product rounded together.
 */
export function worstBoundShare(
  screen: HeadScreen,
  screenedScores: Float32Array,
  fullScores: Float32Array,
  hiddenState: Float32Array,
  hiddenAt = 0,
): number {
  const norms = normsOf(screen, hiddenState, hiddenAt, 'tensor');
  let worst = 0;
  for (let n = 0; n < screen.vocab; n++) {
    // Each side's own bound: the screened score's and the full one's.
    const bound =
      boundOf(screen, n, norms, true, screenedScores[n] as number) +
      boundOf(screen, n, norms, false, fullScores[n] as number);
    // A row of zeros (a padded vocabulary's) scores 0 either way within a bound of 0.
    const off = Math.abs((screenedScores[n] as number) - (fullScores[n] as number));
    const share = off === 0 ? 0 : off / bound;
    if (share > worst || Number.isNaN(share)) worst = share;
  }
  return worst;
}
