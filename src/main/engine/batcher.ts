/**
 * Continuous batching for one loaded decoder: every running request's rows go
 * through one session.run per decode step. Newcomers are prefilled before the
 * next step — fresh prompts of similar length together in one run (left-padded),
 * a session turn that reuses its KV on its own —, then merged into the batch by
 * left-padding the shorter side's KV with masked zeros. A long prompt is
 * prefilled in chunks, and the running batch takes a decode step between
 * chunks, so streams already running keep going. Requests leave
 * between steps; padding every remaining row shares is trimmed. Sampling stays
 * per request, so a request's greedy tokens do not depend on its neighbours. A
 * graph whose left-padded rows score differently (GroupQueryAttention: decoder.ts
 * paddingChecked) but whose right-padded ones score as alone (rightPaddingChecked)
 * keeps the batch in the right layout: each row's own positions first, padding
 * after them; newcomers are prefilled in groups of one prompt length (nothing
 * padded, so each run's last position is every row's last token), merged by
 * padding the shorter side on the right, and each step's mask marks a row's own
 * positions, after which the graph writes its new one. A graph where neither
 * holds batches only rows that need no padding: newcomers of one prompt length,
 * into an empty batch.
 */
import * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';
import type { KvTensorSpec, ModelSpec } from '../../shared/model-spec';
import type { GenerationHooks, GenerationJob, GenerationOutcome, SessionKv } from './decoder';
import { generationFailed, idTensor, maskTensor, rightMaskTensor } from './feeds';
import {
  exactDraw,
  exactMinP,
  exactPick,
  exactTopK,
  exactTopP,
  NUCLEUS_SCREEN_MAX,
  NucleusScratch,
  nucleusFits,
  PickScratch,
  TopKScratch,
} from './head-screen';
import { constraintFor } from './json-constraint';
import {
  appendGap,
  appendSeq,
  concatBatch,
  emptyPast,
  kvHeldBytes,
  padSeqLeft,
  padSeqRight,
  releaseKv,
  selectBatch,
  sliceSeq,
  tensorsBytes,
  trimSeqLeft,
  truncateSeq,
} from './kv-cache';
import type { LastPositionScreen } from './last-position';
import { type LogitsRows, logitsRows } from './logits';
import { type Drafter, LOOKUP_MAX_REST, LOOKUP_MAX_REST_PREDICTED } from './lookup';
import { commonPrefix } from './prefix';
import type { FinishReason, SamplingParams, StepLogprob } from './protocol';
import { logprobsOf, notANumber, Sampler, seed32 } from './sampling';

type RunFn = (feeds: Record<string, ort.Tensor>) => Promise<ort.InferenceSession.OnnxValueMapType>;

interface Row {
  req: Member;
  index: number;
  /** Zero positions on the left of this row in the batch KV (in the right layout: on its right, after its own). */
  pad: number;
  nextPos: number;
  lastId: number;
  done: FinishReason | null;
}

interface Member {
  job: GenerationJob;
  hooks: GenerationHooks;
  samplers: Sampler[];
  rows: Row[];
  generated: number;
  /** Tokens this request's KV encodes per row (longest row). */
  length: number;
  /** Prompt + generated ids fed through the graph (one-row requests). */
  fed: number[];
  /** Lookup decoding: drafted tokens checked, those the model took, whole drafts missed in a row, rest until. */
  drafted: number;
  accepted: number;
  /** The indices of its generated tokens that were draft tokens the model took. */
  acceptedAt: number[];
  misses: number;
  restUntil: number;
  /**
   * Its decode steps beside other streams, and whether it ever ran alone (where lookup decoding may draft): a
   * prediction of a reply that never did was not drafted from, and its outcome says so.
   */
  besideOthers: number;
  ranAlone: boolean;
  resolve: (o: GenerationOutcome) => void;
  reject: (e: Error) => void;
  /** Its scores were not numbers (NaN): it fails at its settle, alone (the batch's other requests go on). */
  failure?: Error;
}

/**
 * Joint prefill of newcomers: a group's padded size (rows × longest prompt) may
 * exceed its real tokens by this factor, and holds at most this many padded
 * tokens (bounds the run's activations, and its logits — rows × P × vocab
 * floats — where the graph's head could not be fed the last position only).
 */
const JOINT_PREFILL_PAD_FACTOR = 1.25;
const JOINT_PREFILL_MAX_TOKENS = 1024;

/**
 * Chunked prefill: prompt tokens (rows × positions) one prefill run computes at
 * most. One long run would stall every running stream for its whole length, and
 * a graph whose head the engine could not feed the last position only
 * (last-position.ts) returns logits for every position it runs — 256 positions
 * of a 128k vocabulary are 128 MiB, a whole 8k-token prompt would be 4 GiB
 * outside any KV budget. A chunk re-reads the weights once (on the GPT-2-small
 * shape ~20 ms against ~200 ms of compute per 256 positions).
 */
export const PREFILL_CHUNK_TOKENS = 256;

/** Columns [from, to) of each row of a row-major `rows × width` array. */
function columns(flat: readonly number[], rows: number, width: number, from: number, to: number): number[] {
  const out: number[] = new Array(rows * (to - from));
  let k = 0;
  for (let r = 0; r < rows; r++) {
    for (let i = r * width + from; i < r * width + to; i++) out[k++] = flat[i] as number;
  }
  return out;
}

/** Rows `keep` (in order) of a row-major `rows × width` array. */
function pickRows(flat: readonly number[], width: number, keep: readonly number[]): number[] {
  const out: number[] = new Array(keep.length * width);
  let k = 0;
  for (const r of keep) {
    for (let i = r * width; i < (r + 1) * width; i++) out[k++] = flat[i] as number;
  }
  return out;
}

/**
 * Splits newcomers without reusable KV into prefill groups: sorted by prompt
 * length, a member joins the current group while the padding stays within
 * JOINT_PREFILL_PAD_FACTOR and the group within JOINT_PREFILL_MAX_TOKENS.
 * `lengths[i]` is member i's rows and longest row; returns groups of indices.
 */
export function prefillGroups(lengths: ReadonlyArray<{ rows: number; longest: number }>): number[][] {
  const order = lengths.map((_, i) => i).sort((a, b) => (lengths[a]?.longest ?? 0) - (lengths[b]?.longest ?? 0));
  const groups: number[][] = [];
  let group: number[] = [];
  let rows = 0;
  let real = 0;
  for (const i of order) {
    const m = lengths[i] as { rows: number; longest: number };
    const padded = (rows + m.rows) * m.longest;
    const fits =
      group.length > 0 &&
      padded <= JOINT_PREFILL_MAX_TOKENS &&
      padded <= JOINT_PREFILL_PAD_FACTOR * (real + m.rows * m.longest);
    if (!fits && group.length > 0) {
      groups.push(group);
      group = [];
      rows = 0;
      real = 0;
    }
    group.push(i);
    rows += m.rows;
    real += m.rows * m.longest;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/** The length every row of a request's prompt has; null where they differ. */
function oneLength(m: Member): number | null {
  const length = (m.job.rows[0] as number[]).length;
  return m.job.rows.every((r) => r.length === length) ? length : null;
}

/** Members by the length of their prompt rows, in order of arrival (each request's rows have one length here). */
function byLength(members: Member[]): Member[][] {
  const buckets = new Map<number, Member[]>();
  for (const m of members) {
    const length = oneLength(m) ?? -1;
    const bucket = buckets.get(length);
    if (bucket) bucket.push(m);
    else buckets.set(length, [m]);
  }
  return [...buckets.values()];
}

/** Whether a row's tokens can come from the head's screen: a greedy pick, or a draw the screen makes exactly. */
function screens(sampler: Sampler): boolean {
  return (
    sampler.isGreedy ||
    sampler.screenWhole ||
    sampler.screenTopK > 0 ||
    sampler.screenMinP > 0 ||
    sampler.screenTopP > 0
  );
}

/**
 * Lookup decoding for a stream running alone: where its drafts come from, how
 * many tokens a check feeds at most, and the graph input that makes a run score
 * its last n positions (absent when the graph scores every position anyway).
 */
export interface LookupDecoding {
  drafter: Drafter;
  maxDraft: number;
  startsInput?: string;
}

/** Logits rows, with the head's input of each scored position when the graph copy screens its head. */
type ScoredRows = LogitsRows & { hidden?: Float32Array; screened?: boolean };

/**
 * The most rows a screened run has: the 8-bit head's saving shrinks as rows share its weights' reads, and the exact
 * pick runs per row in JavaScript. Measured (the engine's decoder, screened and in full alternating, 4 rounds, 2
 * cores), tok/s at 2 / 4 / 8 rows: GPT-2 shape +15 % / +12 % / +3 %, Llama shape +9 % / +13 % / −4 % (a wash at 8,
 * within this VM's noise: the run before it, with a slower pick, gave +7 % and +4 % there). More rows: unmeasured.
 */
const SCREEN_MAX_ROWS = 8;

/** A screened choice's answer when the row's constraint allows no token (−1: no score is a number). */
const NONE_ALLOWED = -2;

/** The screen's input fed false: score the vocabulary with the 8-bit head. */
export const SCREENED = new ort.Tensor('bool', Uint8Array.of(0), []);

/**
 * Positions along the sequence axis of the KV tensors (the first one's: all agree), `none` without any: with
 * room in the KV (kv-cache.ts withRoom) more than the positions in use.
 */
function seqOf(kvTensors: readonly KvTensorSpec[], past: ReadonlyMap<string, ort.Tensor>, none: number): number {
  const first = kvTensors[0];
  const t = first ? past.get(first.past) : undefined;
  return first && t ? (t.dims[first.seqAxis] as number) : none;
}

/** Seed of row `i` of a request: distinct per copy of a prompt, the first copy's unchanged. */
export function rowSeed(sampling: Pick<SamplingParams, 'seed' | 'copies'>, i: number): number {
  const copy = sampling.copies === undefined ? i : i % sampling.copies;
  return copy === 0 ? sampling.seed : (seed32(sampling.seed) + Math.imul(copy, 0x9e3779b1)) >>> 0;
}

/** Per-model batcher; `submit` resolves when the request ends. */
export class ContinuousBatcher {
  private pending: Member[] = [];
  private rows: Row[] = [];
  private past = new Map<string, ort.Tensor>();
  private seq = 0;
  private looping = false;

  constructor(
    private readonly spec: ModelSpec,
    private readonly kvTensors: KvTensorSpec[],
    private readonly run: RunFn,
    /** False for graphs that cannot batch: then requests take turns, one row at a time. */
    private readonly canBatch: () => boolean,
    /** Prompt tokens (rows × positions) one prefill run computes at most. */
    private readonly chunkTokens: number = PREFILL_CHUNK_TOKENS,
    /** Drafts checked while one stream runs alone; null: one token per run, always. */
    private readonly lookup: LookupDecoding | null = null,
    /**
     * The graph copy's 8-bit screen of the head (head-screen.ts): a run whose rows all pick greedily, plainly,
     * scores with it; every greedy pick is exact either way. Null: every run scores in full.
     */
    private readonly screen: LastPositionScreen | null = null,
    /**
     * Each past input → the run's output of the positions it adds (the graph's present is Concat(past, added)):
     * runs fetch these instead of the presents, which are then grown in place (appendSeq). Null: presents whole.
     */
    private readonly kvAdded: ReadonlyMap<string, string> | null = null,
    /**
     * With kvAdded: whether the batch's KV keeps room after its positions (kv-cache.ts withRoom), masked out in
     * each run, so a run's new positions are written in place rather than every row's block moving up.
     */
    private readonly kvGap = false,
    /**
     * False where a left-padded row scores differently from the same row alone (decoder.ts paddingChecked): only
     * requests whose rows need no padding share a batch then — a group of one prompt length, into an empty batch.
     */
    private readonly canPad: () => boolean = () => true,
    /**
     * Where canPad is false: whether rows batched with their KV padded on the right score as alone (decoder.ts
     * rightPaddingChecked). The batch then keeps the right layout (see `right`).
     */
    private readonly canPadRight: () => boolean = () => false,
  ) {
    if (!Number.isInteger(chunkTokens) || chunkTokens < 1) {
      throw new KvdeskError('INTERNAL', `prefill chunk must be a positive whole number of tokens, got ${chunkTokens}`);
    }
  }

  /** Whether decode runs keep room in the KV (kvGap, with the added positions the runs return). */
  private get gapped(): boolean {
    return this.kvGap && this.kvAdded !== null && !this.right;
  }

  /**
   * The right layout: each row's own positions first in the batch KV, its padding after them (Row.pad counts it).
   * Newcomers are prefilled in groups of one prompt length (nothing padded) and merged padding on the right; a
   * step's mask marks each row's own positions and the new one, which the graph writes right after them (the
   * presents as it returns them, never the added positions appended after the whole KV: rightPaddingChecked refuses
   * a graph with kvAdded).
   */
  private get right(): boolean {
    return this.canBatch() && !this.canPad() && this.canPadRight() && this.kvAdded === null;
  }

  /** Largest number of rows one decode step has run (stats: proves batching happened). */
  peakRows = 0;
  /** Most bytes of KV (its padding included) one run has produced: what the scheduler's charge must cover. */
  peakKvBytes = 0;

  submit(job: GenerationJob, hooks: GenerationHooks): Promise<GenerationOutcome> {
    if (job.rows.length < 1)
      return Promise.reject(new KvdeskError('BAD_REQUEST', 'a generation needs at least one row'));
    if (job.session && job.rows.length !== 1) {
      return Promise.reject(new KvdeskError('BAD_REQUEST', 'a session turn has exactly one row'));
    }
    return new Promise((resolve, reject) => {
      const vocab = this.spec.vocabSize;
      this.pending.push({
        job,
        hooks,
        // One random stream per row, so n > 1 samples differ; row 0 keeps the seed as given.
        samplers: job.rows.map(
          (r, i) =>
            new Sampler(
              { ...job.sampling, seed: rowSeed(job.sampling, i) },
              vocab,
              r,
              job.json ? constraintFor(job.json) : undefined,
            ),
        ),
        rows: [],
        generated: 0,
        length: 0,
        fed: job.rows[0]?.slice() ?? [],
        drafted: 0,
        accepted: 0,
        acceptedAt: [],
        misses: 0,
        restUntil: 0,
        besideOthers: 0,
        ranAlone: false,
        resolve,
        reject,
      });
      if (!this.looping) {
        // Start on the next macrotask: requests whose commands arrived in the same read are prefilled together.
        this.looping = true;
        setImmediate(() => void this.loop());
      }
    });
  }

  private members(): Member[] {
    return [...new Set(this.rows.map((r) => r.req))];
  }

  private async loop(): Promise<void> {
    this.looping = true;
    try {
      for (;;) {
        this.finishStopped();
        // A graph that cannot pad a row takes newcomers only into an empty batch: joining a running one pads.
        const right = this.right;
        const joins = this.canBatch() && (this.canPad() || right);
        while (this.pending.length > 0 && (this.rows.length === 0 || joins)) {
          // A graph that cannot batch takes one newcomer at a time; one that cannot pad, those of one length;
          // otherwise every newcomer now.
          const arrived = !this.canBatch()
            ? [this.pending.shift() as Member]
            : this.canPad() || right
              ? this.pending.splice(0)
              : this.unpaddedArrivals();
          const live: Member[] = [];
          for (const m of arrived) {
            const stop = m.hooks.stopRequested();
            if (stop) this.endUnstarted(m, stop);
            else live.push(m);
          }
          // Session turns that reuse their KV are prefilled alone; fresh prompts in groups of similar length.
          const reuse = new Map(live.map((m) => [m, this.reusable(m)]));
          const reusing = live.filter((m) => (reuse.get(m) as number) > 0);
          const fresh = live.filter((m) => reuse.get(m) === 0);
          const grouped = (members: Member[]) =>
            prefillGroups(
              members.map((m) => ({
                rows: m.job.rows.length,
                longest: Math.max(...m.job.rows.map((r) => r.length)),
              })),
            ).map((g) => g.map((i) => members[i] as Member));
          const groups = !this.canBatch()
            ? fresh.map((m) => [m])
            : right
              ? // Prefilled apart per prompt length, so no row of a run is padded (merge pads them on the right).
                byLength(fresh).flatMap(grouped)
              : !this.canPad()
                ? [fresh].filter((g) => g.length > 0)
                : grouped(fresh);
          for (const group of [...reusing.map((m) => [m]), ...groups]) {
            try {
              await this.prefill(group, group.length === 1 ? (reuse.get(group[0] as Member) as number) : 0);
            } catch (err) {
              for (const m of group) m.reject(err as Error);
            }
          }
        }
        if (this.rows.length === 0) break;
        await this.decodeStep();
      }
    } finally {
      this.looping = false;
    }
    if (this.pending.length > 0) void this.loop();
  }

  /**
   * The newcomers a graph that cannot pad a row takes into its empty batch: the first waiting request, and the
   * fresh ones right behind it whose rows all have its length (one prefill group that pads nothing; a session
   * turn that reuses its KV runs alone). The rest wait for the batch to empty, in order.
   */
  private unpaddedArrivals(): Member[] {
    const head = this.pending.shift() as Member;
    const length = oneLength(head);
    if (length === null || this.reusable(head) > 0) return [head];
    let n = 0;
    for (const m of this.pending) {
      if (oneLength(m) !== length || this.reusable(m) > 0) break;
      n++;
    }
    return [head, ...this.pending.splice(0, n)];
  }

  /**
   * Finishes the running requests that were asked to stop, and ends those still waiting to start (on a graph
   * that cannot batch they wait for the running one: a cancel or a time limit must not wait with them).
   */
  private finishStopped(): void {
    this.together(() => {
      for (const m of this.members()) {
        const stop = m.hooks.stopRequested();
        if (stop) this.finish(m, stop);
      }
    });
    this.pending = this.pending.filter((m) => {
      const stop = m.hooks.stopRequested();
      if (stop) this.endUnstarted(m, stop);
      return !stop;
    });
  }

  /** One decode step of the running batch (after its stops); a failure fails every running request. */
  private async decodeStep(): Promise<void> {
    this.finishStopped();
    if (this.rows.length === 0) return;
    try {
      await this.step();
    } catch (err) {
      // A failed batched run leaves every member's KV unknown: all of them fail.
      for (const m of this.members()) m.reject(err as Error);
      this.rows = [];
      this.past.clear();
      this.seq = 0;
    }
  }

  /** One run of the graph, counted; `from`..`to` are the KV columns its inputs take (for a failure's message). */
  private async runCounted(hooks: GenerationHooks, feeds: Record<string, ort.Tensor>, from: number, to: number) {
    hooks.countRun();
    try {
      return await this.run(feeds);
    } catch (err) {
      throw generationFailed(this.spec, err, from, to);
    }
  }

  /** The run's logits rows: each row's last position, or every position (a draft check). */
  private logitsOf(out: ort.InferenceSession.OnnxValueMapType, every = false, screened = false): ScoredRows {
    const name = this.spec.ports.logits.name;
    const t = out[name];
    if (!t) throw new KvdeskError('ENGINE_FAILED', `the graph produced no ${name} output`);
    const rows: ScoredRows = logitsRows(t as ort.Tensor, every);
    const hidden = this.screen ? out[this.screen.hiddenOutput] : undefined;
    if (hidden?.type === 'float32') {
      rows.hidden = hidden.data as Float32Array;
      rows.screened = screened;
    } else if (screened) throw new KvdeskError('ENGINE_FAILED', 'a screened run gave no hidden state to pick from');
    return rows;
  }

  /**
   * Greedy picks and draws (among a top-k, or the whole vocabulary by temperature alone) made exactly from the head's
   * screen (screened) or from full scores, and the tokens they scored exactly.
   */
  readonly screenStats = { screenedPicks: 0, fullPicks: 0, screenedDraws: 0, fullDraws: 0, candidates: 0 };
  /** What the exact picks carry from one to the next (the window of their candidates: see PickScratch). */
  readonly pickScratch = new PickScratch();
  /** What an exact top-k writes for its draw. */
  private readonly topK = new TopKScratch();
  /** What a top-p draw from the screen writes: the tokens it scored and its nucleus. */
  private readonly nucleus = new NucleusScratch();
  /** What the whole-vocabulary draws carry from one to the next (their window, as the picks' scratch). */
  private readonly drawScratch = new PickScratch();

  /**
   * Whether every row of the batch picks from the head's screen (greedily, or a draw among a top-k of at most
   * SCREEN_TOP_K or over the whole vocabulary by temperature alone, from the scores as they are) and asks for no
   * logprobs.
   */
  private allPlain(): boolean {
    return this.rows.every((r) => screens(r.req.samplers[r.index] as Sampler) && r.req.job.logprobs === undefined);
  }

  /**
   * The run's present KV: as the graph returned it, or built from `past` (the KV the run was fed, stale after
   * this) and the positions the run added, in buffers with room for at most `limit` positions (what the batch can
   * still reach): after all of `past`'s positions (appendSeq), or with `used`, after its first `used` ones, written
   * into its room (appendGap: the sequence axis is then the room's end). Counts the most bytes of KV a run has left
   * in memory.
   */
  private presents(
    out: ort.InferenceSession.OnnxValueMapType,
    past: Map<string, ort.Tensor>,
    limit: number,
    used?: number,
  ): Map<string, ort.Tensor> {
    const next = new Map<string, ort.Tensor>();
    const added = this.kvAdded;
    for (const t of this.kvTensors) {
      const name = added ? (added.get(t.past) as string) : t.present;
      const got = out[name] as ort.Tensor | undefined;
      if (!got) throw new KvdeskError('ENGINE_FAILED', `the graph produced no ${name} output`);
      const fed = past.get(t.past);
      next.set(
        t.past,
        !added ? got : used !== undefined && fed ? appendGap(t, fed, used, got, limit) : appendSeq(t, fed, got, limit),
      );
    }
    if (added) {
      // The added positions are in the presents now (a prefill chunk's are as large as its part of the KV).
      releaseKv(
        [...added.values()].map((name) => out[name] as ort.Tensor),
        next,
      );
    }
    const bytes = kvHeldBytes(next.values());
    if (bytes > this.peakKvBytes) this.peakKvBytes = bytes;
    return next;
  }

  /** Runtime check of bpt: the real tensors must hold exactly rows × positions × bpt bytes. */
  private checkBytes(past: Map<string, ort.Tensor>, rows: number, seq: number): number {
    const bytes = tensorsBytes(past.values());
    if (bytes !== rows * seq * this.spec.bpt) {
      throw new KvdeskError(
        'ENGINE_FAILED',
        `KV tensors hold ${bytes} bytes for ${rows} rows × ${seq} positions, but bpt ${this.spec.bpt} says ${rows * seq * this.spec.bpt}: the package's KV geometry does not match its graph`,
      );
    }
    return bytes;
  }

  /**
   * One row's pick or draw from the head's screen or from float32 scores (`logits`, its row at `offset`), exactly
   * either way: the greedy pick (or with `pick`, whatever the sampler), a draw over the whole vocabulary, a draw among
   * the exact top k, or among the tokens min-p can keep — reading `scores` from `at` (the logits, or the sampler's
   * changed copy with `adjust`). −1 when no score is a number. Counts the tokens it scored exactly in screenStats.
   */
  private screenedChoice(
    sampler: Sampler,
    scores: Float32Array,
    at: number,
    logits: ScoredRows,
    offset: number,
    vocab: number,
    adjust: Sampler | undefined,
    pick = false,
  ): number {
    const screen = (this.screen as LastPositionScreen).data;
    const hidden = logits.hidden as Float32Array;
    const hiddenAt = (offset / logits.vocab) * screen.hidden;
    const screened = logits.screened === true;
    const stats = { candidates: 0 };
    const T = sampler.temperature;
    let id: number;
    if (pick || sampler.isGreedy) {
      id = exactPick(screen, scores, at, hidden, hiddenAt, screened, vocab, stats, this.pickScratch, adjust);
    } else if (sampler.screenWhole) {
      const key = sampler.noiseKey();
      id = exactDraw(screen, scores, at, hidden, hiddenAt, screened, T, key, vocab, stats, this.drawScratch, adjust);
    } else if (sampler.screenableTopK > 0) {
      const k = sampler.screenableTopK;
      const m = exactTopK(screen, scores, at, hidden, hiddenAt, screened, k, this.topK, vocab, stats, adjust);
      id = m > 0 ? sampler.drawAmong(this.topK.ids, this.topK.scores, m) : -1;
    } else if (sampler.nucleusScreenable) {
      const p = sampler.topP;
      const m = exactTopP(screen, scores, at, hidden, hiddenAt, screened, T, p, this.nucleus, vocab, stats, adjust);
      // A nucleus that took more tokens than that to find: the next draw is from full scores (a flat distribution).
      sampler.nucleusFits = stats.candidates <= NUCLEUS_SCREEN_MAX;
      id = m > 0 ? sampler.drawNucleus(this.nucleus.ids, this.nucleus.scores, m) : -1;
    } else {
      const minP = sampler.screenableMinP;
      if (!(minP > 0)) throw new KvdeskError('ENGINE_FAILED', 'a row the head screen cannot draw for was screened');
      const m = exactMinP(screen, scores, at, hidden, hiddenAt, screened, T, minP, this.topK, vocab, stats, adjust);
      const kept = this.topK.scoredTokens();
      id = m > 0 ? sampler.drawAmong(kept.ids, kept.scores, m) : -1;
    }
    this.screenStats.candidates += stats.candidates;
    return id;
  }

  /**
   * Samples one token for each live row of a member from the logits rows given (at position `at` of each
   * row; its last by default).
   */
  private sampleMember(m: Member, logits: ScoredRows, batchIndexOf: (r: Row) => number, at = logits.seq - 1): void {
    const ids: number[] = new Array(m.rows.length).fill(-1);
    const top = m.job.logprobs;
    const logprobs: Array<StepLogprob | null> | undefined = top !== undefined ? ids.map(() => null) : undefined;
    const eos = m.job.eosTokenIds;
    const vocab = Math.min(this.spec.vocabSize, logits.vocab);
    for (const row of m.rows) {
      if (row.done) continue;
      const offset = (batchIndexOf(row) * logits.seq + at) * logits.vocab;
      const sampler = m.samplers[row.index] as Sampler;
      let id: number;
      try {
        const screen = this.screen;
        // A top-p draw whose run scored in full draws from the float32 scores (its nucleus needs every token's
        // weight; from the screen it needs those above a cut), and says whether the next one may take the screen.
        // A screened run's rows all choose from the screen, whatever a draw before them in the run (a lookup check's
        // earlier position) said of the next: its scores are the screen's.
        const nucleus = sampler.nucleusScreenable;
        const screened = logits.screened === true;
        if (screen && logits.hidden && (screened || (top === undefined && screens(sampler) && !nucleus))) {
          // From the screen's scores or from float32 ones, exactly either way (screenedChoice). Penalties and a bias
          // change the scores first (a copy) and each exact score the same way, with bounds widened to match; a
          // token the constraint refuses is picked or drawn again from the scores it masks, as `sample` does.
          const adjust = sampler.adjusts ? sampler : undefined;
          const data = adjust ? sampler.adjustScores(logits.data, offset, vocab) : logits.data;
          const counted = this.screenStats.candidates;
          id = this.screenedChoice(sampler, data, adjust ? 0 : offset, logits, offset, vocab, adjust);
          // What the draw scored before a constraint's refusal (a draw again over masked scores scores the refused
          // tokens as −∞ at no cost, however many).
          const scored = this.screenStats.candidates - counted;
          if (id >= 0 && !sampler.allows(id)) {
            const masked = sampler.maskScores(logits.data, offset, vocab);
            // The constraint allows no token of the vocabulary: the row ends below, unfinished (`sample`: −1).
            if (masked === null) id = NONE_ALLOWED;
            else {
              id = this.screenedChoice(sampler, masked, 0, logits, offset, vocab, sampler);
              // A draw that walked past every weight onto a refused token (float rounding): the best allowed one.
              if (id >= 0 && sampler.banned(id))
                id = this.screenedChoice(sampler, masked, 0, logits, offset, vocab, sampler, true);
            }
          }
          if (id === -1) throw notANumber();
          if (id >= 0) {
            sampler.took(id);
            const greedy = sampler.isGreedy;
            const kind = greedy ? (screened ? 'screenedPicks' : 'fullPicks') : screened ? 'screenedDraws' : 'fullDraws';
            this.screenStats[kind]++;
            // A top-k or min-p draw that scored too many tokens rests from the screen for a while (a flat row).
            if (!greedy && !nucleus) sampler.screenedDraw(scored);
          }
        } else {
          id = sampler.sample(logits.data, offset, vocab);
          if (screen && sampler.resting && top === undefined) this.screenStats.fullDraws++;
          sampler.fullDraw();
          if (screen && nucleus && top === undefined) {
            const hidden = logits.hidden;
            const hiddenAt = (offset / logits.vocab) * screen.data.hidden;
            const T = sampler.temperature;
            const p = sampler.topP;
            sampler.nucleusFits =
              hidden !== undefined &&
              nucleusFits(screen.data, logits.data, offset, hidden, hiddenAt, T, p, this.nucleus, vocab);
            this.screenStats.fullDraws++;
          }
        }
      } catch (err) {
        // Scores that are not numbers: this request fails (damaged weights fail every request the same way; an
        // overflow for one input, only that one).
        m.failure = err as Error;
        for (const r of m.rows) r.done ??= 'length';
        return;
      }
      if (id < 0) {
        // JSON mode with no token of the vocabulary able to continue: the row ends unfinished.
        row.done = 'length';
        continue;
      }
      ids[row.index] = id;
      if (logprobs) logprobs[row.index] = logprobsOf(logits.data, offset, vocab, id, top as number);
      row.lastId = id;
      if (eos.includes(id) || sampler.finished) row.done = 'eos';
    }
    m.generated++;
    m.hooks.onStep(ids, m.rows.length * m.length * this.spec.bpt, logprobs);
  }

  /** Whether a member is over after its latest token; finishes it if so. */
  private settle(m: Member): boolean {
    if (m.failure) {
      // Its session keeps nothing (its prefill took the KV it had; the engine drops a session whose turn failed).
      this.removeRows(m);
      m.reject(m.failure);
      return true;
    }
    let reason: FinishReason | null = null;
    if (m.rows.every((r) => r.done !== null)) reason = 'eos';
    else if (m.generated >= m.job.maxNewTokens) reason = 'length';
    else if (m.length + 1 > this.spec.contextLength) reason = 'context';
    if (!reason) return false;
    this.finish(m, reason);
    return true;
  }

  /**
   * Ends a request that was asked to stop before its first token: nothing generated. A session turn's session keeps
   * the part of its KV that its prompt continues (before its prefill, what the turn would have reused; during it,
   * what keepPrefilled put back), as the turn's end reports it: the host keeps that for the next turn, or drops it.
   */
  private endUnstarted(m: Member, reason: 'stop' | 'cancelled'): void {
    const session = m.job.session;
    if (session) this.cutSession(session, this.reusable(m));
    m.resolve({
      finishReason: reason,
      rowFinishReasons: m.job.rows.map(() => reason),
      kvBytes: 0,
      generatedTokens: 0,
      sessionTokens: session ? session.tokens.length : 0,
    });
  }

  /** A session's KV cut to its first `keep` positions (what lies past them is freed). */
  private cutSession(session: SessionKv, keep: number): void {
    if (keep >= session.tokens.length) return;
    const past = new Map<string, ort.Tensor>();
    if (keep > 0) {
      for (const t of this.kvTensors) {
        const held = session.past.get(t.past);
        if (held) past.set(t.past, truncateSeq(t, held, keep));
      }
    }
    releaseKv(session.past.values(), past);
    session.past = past;
    session.tokens = session.tokens.slice(0, keep);
  }

  /**
   * A session turn asked to stop during its prefill (which took its session's KV) puts back the KV of its prompt
   * computed so far: its row (`at` of `rows` in `past`, whose `seq` positions are those computed) without the
   * padding on its left, copied exactly as large. The conversation it continues is not lost with the new message.
   */
  private keepPrefilled(m: Member, past: Map<string, ort.Tensor>, at: number, rows: number, seq: number): void {
    const session = m.job.session;
    const row = m.rows[0];
    if (!session || !row || seq - row.pad <= 0) return;
    const kept = new Map<string, ort.Tensor>();
    for (const t of this.kvTensors) {
      const all = past.get(t.past) as ort.Tensor;
      const mine = rows > 1 ? selectBatch(t, all, [at]) : all;
      kept.set(t.past, sliceSeq(t, mine, row.pad, seq));
      if (mine !== all) releaseKv([mine], kept);
    }
    releaseKv(session.past.values(), kept);
    session.past = kept;
    session.tokens = (m.job.rows[0] as number[]).slice(0, seq - row.pad);
  }

  /** Session KV positions a newcomer can reuse (0 for a fresh prompt). */
  private reusable(m: Member): number {
    const session = m.job.session;
    if (!session || session.tokens.length === 0) return 0;
    const row = m.job.rows[0] as number[];
    return Math.min(commonPrefix(session.tokens, row), row.length - 1);
  }

  /**
   * Prefills newcomers: either one session turn reusing `reused` positions of
   * its KV, or a group of fresh prompts (`reused` 0), every row left-padded to
   * the group's longest. Runs in chunks of at most `chunkTokens` tokens; between
   * chunks the running batch takes a step, and members asked to stop leave the
   * group there (their rows, and the padding only they needed, dropped from the
   * KV computed so far and from the chunks still to run), so a cancel waits for
   * one chunk, not the whole group.
   */
  private async prefill(members: Member[], reused: number): Promise<void> {
    const spec = this.spec;
    const ports = spec.ports;
    let group = members;
    const session = group.length === 1 ? (group[0] as Member).job.session : undefined;
    let past = new Map<string, ort.Tensor>();
    let pastLen = 0;
    if (session && reused > 0) {
      for (const t of this.kvTensors) {
        const held = session.past.get(t.past);
        if (!held) throw new KvdeskError('INTERNAL', `session KV lacks ${t.past}`);
        past.set(t.past, truncateSeq(t, held, reused));
      }
      pastLen = reused;
    }
    let R = group.reduce((n, m) => n + m.job.rows.length, 0);
    if (R > 1 && pastLen > 0) throw new KvdeskError('INTERNAL', 'multi-row requests never reuse session KV');
    if (pastLen === 0) past = new Map(this.kvTensors.map((t) => [t.past, emptyPast(t, R)]));
    // A session's KV is this turn's from here (what it reuses is in `past`): the scheduler counts the turn's
    // reservation instead of the session's held KV until the turn ends and the session gets the turn's KV. Kept
    // alive beside the turn's own copy, it was counted nowhere; nor would it be of use after a failure (the engine
    // and the host drop the session then), and a turn stopped before its first token puts back the KV it has so far
    // (keepPrefilled). Freed now; a prefix fed as it is, once its chunk has run.
    for (const m of group) {
      const own = m.job.session;
      if (!own) continue;
      const old = own.past;
      own.past = new Map();
      own.tokens = [];
      releaseKv(old.values(), past);
    }
    // Every past a chunk replaces is freed at once.
    const release = (dead: Iterable<ort.Tensor>) => releaseKv(dead, past);
    const newRows = group.map((m) => m.job.rows.map((r) => r.slice(reused)));
    let P = Math.max(...newRows.flat().map((r) => r.length));
    const padId = spec.padTokenId ?? spec.eosTokenIds[0] ?? 0;
    let ids: number[] = [];
    let mask: number[] = [];
    let positions: number[] = [];
    const firstRow = new Map<Member, number>();
    let at = 0;
    group.forEach((m, g) => {
      firstRow.set(m, at);
      const rows = newRows[g] as number[][];
      at += rows.length;
      m.rows = rows.map((row, index) => {
        const padN = P - row.length;
        for (let i = 0; i < pastLen; i++) mask.push(1);
        for (let i = 0; i < P; i++) {
          const real = i >= padN;
          ids.push(real ? (row[i - padN] as number) : padId);
          mask.push(real ? 1 : 0);
          positions.push(real ? pastLen + i - padN : 0);
        }
        // Padding sits after the reused prefix; a session turn (one row, alone) never has inner padding.
        return { req: m, index, pad: padN, nextPos: pastLen + row.length, lastId: padId, done: null };
      });
      // This request's KV: its own longest row (the rest of the group's width is padding on its left).
      m.length = pastLen + Math.max(...rows.map((r) => r.length));
      m.hooks.onStart(rows.length * (m.length - pastLen), reused);
    });
    let W = pastLen + P;
    if (this.right && group.some((m) => m.rows.some((r) => r.pad > 0))) {
      // The right layout prefills rows of one length together (generateRows splits a request whose rows differ):
      // a padded row's last position would not be the run's last one.
      throw new KvdeskError('INTERNAL', 'rows of different lengths reached one prefill run of a right-padded batch');
    }
    // Chunks of equal width, so a prompt just over the limit is not followed by a tiny chunk.
    const chunks = Math.ceil(P / Math.max(1, Math.floor(this.chunkTokens / R)));
    const cols = Math.ceil(P / chunks);
    let out: ort.InferenceSession.OnnxValueMapType = {};
    for (let from = 0; from < P; from += cols) {
      if (from > 0) {
        if (this.rows.length > 0) await this.decodeStep();
        const stops = group.map((m) => m.hooks.stopRequested());
        if (stops.some((stop) => stop !== null)) {
          const keep: number[] = [];
          const staying: Member[] = [];
          group.forEach((m, g) => {
            const stop = stops[g];
            if (stop) {
              this.keepPrefilled(m, past, firstRow.get(m) as number, R, pastLen + from);
              this.endUnstarted(m, stop);
            } else {
              staying.push(m);
              const base = firstRow.get(m) as number;
              for (let i = 0; i < m.rows.length; i++) keep.push(base + i);
            }
          });
          if (staying.length === 0) {
            releaseKv(past.values(), new Map());
            return;
          }
          // The others go on without the stopped rows: in the KV so far and in the columns still to run.
          const before = [...past.values()];
          for (const t of this.kvTensors) past.set(t.past, selectBatch(t, past.get(t.past) as ort.Tensor, keep));
          release(before);
          ids = pickRows(ids, P, keep);
          mask = pickRows(mask, W, keep);
          positions = pickRows(positions, P, keep);
          group = staying;
          R = keep.length;
          let next = 0;
          for (const m of group) {
            firstRow.set(m, next);
            next += m.rows.length;
          }
          // The columns every staying row pads (only the stopped rows were that long) go too, from the KV so far
          // and from the columns still to run: else the group stays as wide as the stopped rows, and a row that
          // then runs alone carries that padding to its end, past its reservation. (Padding sits at the left edge
          // here: a reused prefix, before which it would not, belongs to a session turn, alone in its group.)
          const drop = Math.min(...group.flatMap((m) => m.rows.map((r) => r.pad)));
          if (drop > 0 && pastLen === 0) {
            // Of those columns, the ones already in the KV; the next chunk starts at the first column left to run.
            const computed = Math.min(drop, from);
            if (computed > 0) {
              const wide = [...past.values()];
              for (const t of this.kvTensors) {
                past.set(t.past, trimSeqLeft(t, past.get(t.past) as ort.Tensor, computed));
              }
              release(wide);
            }
            ids = columns(ids, R, P, drop, P);
            mask = columns(mask, R, W, drop, W);
            positions = columns(positions, R, P, drop, P);
            for (const m of group) for (const r of m.rows) r.pad -= drop;
            P -= drop;
            W -= drop;
            from -= computed;
          }
        }
      }
      const to = Math.min(P, from + cols);
      const n = to - from;
      const feeds: Record<string, ort.Tensor> = {};
      feeds[ports.inputIds.name] = idTensor(ports.inputIds, columns(ids, R, P, from, to), [R, n]);
      if (ports.attentionMask) {
        feeds[ports.attentionMask.name] = idTensor(ports.attentionMask, columns(mask, R, W, 0, pastLen + to), [
          R,
          pastLen + to,
        ]);
      }
      if (ports.positionIds) {
        feeds[ports.positionIds.name] = idTensor(ports.positionIds, columns(positions, R, P, from, to), [R, n]);
      }
      const fed = this.kvTensors.map((t) => past.get(t.past) as ort.Tensor);
      for (const [i, t] of this.kvTensors.entries()) feeds[t.past] = fed[i] as ort.Tensor;
      out = await this.runCounted((group[0] as Member).hooks, feeds, pastLen + from, pastLen + to - 1);
      // The past tensors are dead now: freed before the next chunk or sampling.
      for (const t of this.kvTensors) delete feeds[t.past];
      // The group's KV as it is reaches at most its width and its shortest reply (its first member to end then
      // leaves, and a batch it joins is copied anew): room for more is never written, and no reservation covers it.
      past = this.presents(out, past, W + Math.min(...group.map((m) => m.job.maxNewTokens)));
      release(fed);
      this.checkBytes(past, R, pastLen + to);
      // Only the last chunk's logits are sampled; an earlier chunk's are dropped before the next run.
      if (to < P) {
        out = {};
        for (const m of group) {
          // A member's own positions end at the group's last column; those before its first are padding.
          const done = pastLen + Math.max(0, to - (W - m.length));
          m.hooks.onPrefill?.(done, m.length, m.rows.length * done * this.spec.bpt);
        }
      }
    }
    const logits = this.logitsOf(out);
    for (const m of group) {
      const base = firstRow.get(m) as number;
      this.sampleMember(m, logits, (r) => base + r.index);
    }
    // The newcomers' KV becomes part of the batch whether or not they are already done, so finish() can save it.
    this.merge(
      group.flatMap((m) => m.rows),
      past,
      W,
    );
    this.together(() => {
      for (const m of group) this.settle(m);
    });
  }

  private merge(rows: Row[], present: Map<string, ort.Tensor>, seq: number): void {
    if (this.rows.length === 0) {
      this.past = present;
      this.seq = seq;
      this.rows = [...rows];
      return;
    }
    if (seqOf(this.kvTensors, this.past, this.seq) > this.seq) {
      // The batch's KV without its room, as the newcomers' is (padded on the left, it gets room again next run).
      const used = new Map<string, ort.Tensor>();
      for (const t of this.kvTensors) used.set(t.past, sliceSeq(t, this.past.get(t.past) as ort.Tensor, 0, this.seq));
      releaseKv(this.past.values(), used);
      this.past = used;
    }
    const target = Math.max(this.seq, seq);
    const merged = new Map<string, ort.Tensor>();
    // The shorter side's KV padded with zeros: on the left, or in the right layout after every row's own positions.
    const pad = this.right ? padSeqRight : padSeqLeft;
    for (const t of this.kvTensors) {
      const a = pad(t, this.past.get(t.past) as ort.Tensor, target);
      const b = pad(t, present.get(t.past) as ort.Tensor, target);
      merged.set(t.past, concatBatch(t, [a, b]));
    }
    for (const r of this.rows) r.pad += target - this.seq;
    for (const r of rows) r.pad += target - seq;
    releaseKv([...this.past.values(), ...present.values()], merged);
    this.past = merged;
    this.seq = target;
    this.rows = [...this.rows, ...rows];
  }

  /**
   * A draft for the stream running alone, when lookup decoding is on and finds one: no more tokens than the
   * request may still generate (less the one the check samples anyway) and its context can hold.
   */
  private draftFor(): number[] {
    const lookup = this.lookup;
    if (!lookup) return [];
    if (this.rows.length !== 1) {
      for (const m of this.members()) if (m.job.prediction) m.besideOthers++;
      return [];
    }
    const row = this.rows[0] as Row;
    const m = row.req;
    m.ranAlone = true;
    if (m.job.rows.length !== 1 || row.done || m.generated < m.restUntil) return [];
    const max = Math.min(lookup.maxDraft, m.job.maxNewTokens - m.generated - 1, this.spec.contextLength - m.length - 1);
    if (max < 1) return [];
    m.fed.push(row.lastId);
    const prediction = m.job.prediction;
    const draft = lookup.drafter(m.fed, max, {
      replyFrom: (m.job.rows[0] as number[]).length,
      ...(prediction ? { prediction } : {}),
    });
    m.fed.pop();
    return draft.slice(0, max);
  }

  /**
   * One run of the lone stream's last token and a draft of what follows it: position i's logits are the
   * model's next token after input i, sampled in order as plain steps would sample them. Input i + 1 (draft
   * token i) counts only if the token sampled at i is that draft token; the first that differs is sampled
   * anyway (as the next step's input), so every check yields at least one token. The KV of the inputs that
   * did not count is cut off.
   */
  private async checkDraft(draft: number[]): Promise<void> {
    const row = this.rows[0] as Row;
    const m = row.req;
    const L = this.seq;
    const inputs = [row.lastId, ...draft];
    const n = inputs.length;
    const forward = await this.forward([inputs], m.hooks);
    let past = forward.past;
    // As a step does: sampling may send frames, and the KV this run replaced must not stay alive meanwhile.
    releaseKv(forward.fed.splice(0), past);
    const logits = forward.logits;
    if (logits.seq !== n) {
      throw new KvdeskError('ENGINE_FAILED', `a draft check of ${n} positions got logits for ${logits.seq}`);
    }
    m.drafted += draft.length;
    let used = 0;
    for (let i = 0; i < n; i++) {
      // Input i is in the KV for good: the stream's last token, or a draft token the model sampled itself.
      used++;
      m.fed.push(inputs[i] as number);
      m.length++;
      row.nextPos++;
      this.sampleMember(m, logits, () => 0, i);
      // draftFor kept the draft within max tokens and the context, so only the last input can reach either; past
      // the last input, draft[i] is undefined and ends the loop.
      if (row.done || row.lastId !== draft[i] || m.hooks.stopRequested()) break;
      m.acceptedAt.push(m.generated - 1);
    }
    m.accepted += used - 1;
    if (used > 1) m.misses = 0;
    else {
      m.misses++;
      const longest = m.job.prediction ? LOOKUP_MAX_REST_PREDICTED : LOOKUP_MAX_REST;
      m.restUntil = m.generated + Math.min(longest, 2 ** m.misses);
    }
    // With room in the KV, the positions that did not count are room again; else they are cut off.
    if (used < n && !this.gapped) {
      const kept = new Map<string, ort.Tensor>();
      for (const t of this.kvTensors) kept.set(t.past, truncateSeq(t, past.get(t.past) as ort.Tensor, L + used));
      releaseKv(past.values(), kept);
      past = kept;
    }
    this.past = past;
    this.seq = L + used;
    this.settle(m);
  }

  /**
   * One run of every row of the batch on its next inputs (each row the same number, n: 1 for a step, the last
   * token and a draft for a check): the new KV, checked, and the logits — of the last position, or of all n
   * (the last-position copy told to score them).
   */
  private async forward(
    inputs: number[][],
    hooks: GenerationHooks,
  ): Promise<{ past: Map<string, ort.Tensor>; logits: ScoredRows; fed: ort.Tensor[] }> {
    const ports = this.spec.ports;
    const B = this.rows.length;
    const n = (inputs[0] as number[]).length;
    const L = this.seq;
    // With room in the KV, each row's block holds `held` positions; those after its first L are masked out.
    const held = this.gapped ? seqOf(this.kvTensors, this.past, L) : L;
    this.peakRows = Math.max(this.peakRows, B);
    const feeds: Record<string, ort.Tensor> = {};
    feeds[ports.inputIds.name] = idTensor(ports.inputIds, inputs.flat(), [B, n]);
    if (ports.attentionMask) {
      feeds[ports.attentionMask.name] = this.right
        ? // Each row's own positions and its n new ones, which the graph writes right after them; then its padding.
          rightMaskTensor(
            ports.attentionMask,
            this.rows.map((r) => L - r.pad + n),
            L + n,
          )
        : maskTensor(
            ports.attentionMask,
            this.rows.map((r) => r.pad),
            held + n,
            held > L ? [L, held] : undefined,
          );
    }
    if (ports.positionIds) {
      const positions = this.rows.flatMap((r) => Array.from({ length: n }, (_, i) => r.nextPos + i));
      feeds[ports.positionIds.name] = idTensor(ports.positionIds, positions, [B, n]);
    }
    const startsInput = this.lookup?.startsInput;
    if (n > 1 && startsInput) feeds[startsInput] = new ort.Tensor('int64', BigInt64Array.of(BigInt(-n)), [1]);
    const screened = this.screen !== null && B <= SCREEN_MAX_ROWS && this.allPlain();
    if (screened) feeds[(this.screen as LastPositionScreen).fullInput] = SCREENED;
    const fed = this.kvTensors.map((t) => this.past.get(t.past) as ort.Tensor);
    for (const [i, t] of this.kvTensors.entries()) feeds[t.past] = fed[i] as ort.Tensor;
    const out = await this.runCounted(hooks, feeds, L, L + n - 1);
    // Drop the last references to the previous KV at once (the async frame keeps `feeds` alive until the
    // step ends): the engine then holds one copy per token while it samples and sends frames, not two.
    for (const t of this.kvTensors) delete feeds[t.past];
    // Room for what the batch as it is can still write: it changes (dropRows or merge copy its KV anew) once a
    // member has written all its tokens, so at most the fewest tokens any member has left (a draft check's n among
    // them) follow its L positions. More room is never written, and no reservation covers it: the scheduler charges
    // each row as wide as the widest reservation, not as the widest row grown by the longest reply.
    const remaining = Math.min(...this.members().map((m) => m.job.maxNewTokens - m.generated));
    const past = this.presents(out, this.past, L + Math.max(n, remaining), this.gapped ? L : undefined);
    this.checkBytes(past, B, this.gapped ? seqOf(this.kvTensors, past, L + n) : L + n);
    return { past, logits: this.logitsOf(out, n > 1, screened), fed };
  }

  private async step(): Promise<void> {
    const draft = this.draftFor();
    if (draft.length > 0) return this.checkDraft(draft);
    const L = this.seq;
    const first = this.rows[0] as Row;
    const { past, logits, fed } = await this.forward(
      this.rows.map((r) => [r.lastId]),
      first.req.hooks,
    );
    this.past = past;
    // Emptied as well: the step goes on to sample and send frames, and must not keep the old KV alive meanwhile.
    releaseKv(fed.splice(0), past);
    this.seq = L + 1;
    const indexOf = new Map(this.rows.map((r, i) => [r, i]));
    for (const m of this.members()) {
      for (const r of m.rows) {
        r.nextPos++;
        if (m.job.rows.length === 1) m.fed.push(r.lastId);
      }
      m.length++;
      this.sampleMember(m, logits, (r) => indexOf.get(r) as number);
    }
    this.together(() => {
      for (const m of this.members()) this.settle(m);
    });
  }

  private finish(m: Member, reason: FinishReason): void {
    const indexOf = new Map(this.rows.map((r, i) => [r, i]));
    const mine = m.rows.map((r) => indexOf.get(r)).filter((i): i is number => i !== undefined);
    const session = m.job.session;
    if (session && mine.length === 1) {
      const at = mine[0] as number;
      const sessionPast = new Map<string, ort.Tensor>();
      for (const t of this.kvTensors) {
        const row = selectBatch(t, this.past.get(t.past) as ort.Tensor, [at]);
        // Its own positions: the last ones (padding on the left), or the first ones in the right layout.
        const from = this.right ? 0 : this.seq - m.length;
        sessionPast.set(t.past, sliceSeq(t, row, from, from + m.length));
      }
      // What the session held is dead (its prefill took it; this frees any KV put there since).
      releaseKv(session.past.values(), sessionPast);
      session.past = sessionPast;
      session.tokens = m.fed.slice(0, m.length);
    }
    const kvBytes = m.rows.length * m.length * this.spec.bpt;
    this.removeRows(m);
    m.resolve({
      finishReason: reason,
      rowFinishReasons: m.rows.map((r) => r.done ?? reason),
      kvBytes,
      generatedTokens: m.generated,
      sessionTokens: session ? session.tokens.length : 0,
      ...(m.drafted > 0 ? { lookup: { drafted: m.drafted, accepted: m.accepted, acceptedAt: m.acceptedAt } } : {}),
      ...(m.job.prediction && !m.ranAlone && m.besideOthers > 0 ? { predictionUnused: { reason: 'batched' } } : {}),
    });
  }

  /** Members whose rows leave the batch when the settling under way ends (see together); null: at once. */
  private leaving: Member[] | null = null;

  /**
   * Runs `work` (settling or finishing several members), then takes every leaving member's rows out of the KV
   * in one copy: members that end on the same step (as requests of one length started together do) otherwise
   * copied the rest of the batch's KV once each.
   */
  private together(work: () => void): void {
    if (this.leaving) {
      work();
      return;
    }
    this.leaving = [];
    try {
      work();
    } finally {
      const leaving = this.leaving;
      this.leaving = null;
      if (leaving.length > 0) this.dropRows(leaving);
    }
  }

  /** Takes a member's rows out of the batch, now or when the settling under way ends. */
  private removeRows(m: Member): void {
    if (this.leaving) this.leaving.push(m);
    else this.dropRows([m]);
  }

  /** Takes members' rows out of the batch (their KV with them; the rest trimmed of padding none of them needs). */
  private dropRows(members: Member[]): void {
    const indexOf = new Map(this.rows.map((r, i) => [r, i]));
    const leaving = new Set(
      members.flatMap((m) => m.rows.map((r) => indexOf.get(r)).filter((i): i is number => i !== undefined)),
    );
    const keep = this.rows.map((_, i) => i).filter((i) => !leaving.has(i));
    if (keep.length === 0) {
      this.rows = [];
      // Nothing reads the batch's KV now (a session that ended took a copy): freed, not left to the collector.
      releaseKv(this.past.values(), new Map());
      this.past = new Map();
      this.seq = 0;
    } else {
      const remaining = keep.map((i) => this.rows[i] as Row);
      const drop = Math.min(...remaining.map((r) => r.pad));
      const next = new Map<string, ort.Tensor>();
      for (const t of this.kvTensors) {
        const rows = selectBatch(t, this.past.get(t.past) as ort.Tensor, keep);
        // The padding every remaining row has: on the left, or in the right layout at the end.
        next.set(t.past, this.right ? truncateSeq(t, rows, this.seq - drop) : trimSeqLeft(t, rows, drop));
      }
      for (const r of remaining) r.pad -= drop;
      releaseKv(this.past.values(), next);
      this.past = next;
      this.seq -= drop;
      this.rows = remaining;
    }
  }
}
