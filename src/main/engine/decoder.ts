/**
 * A loaded decoder graph and its generation loop (prefill, then one decode step
 * per token, feeding present KV back as past). Runs inside the engine process.
 */
import { realpathSync } from 'node:fs';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import type { PredictionUnused } from '../../shared/contract';
import { KvdeskError } from '../../shared/errors';
import type { ConfiguredKvSize, KvTensorSpec, ModelSpec } from '../../shared/model-spec';
import { ContinuousBatcher, type LookupDecoding, PREFILL_CHUNK_TOKENS, rowSeed, SCREENED } from './batcher';
import { idTensor, maskTensor, rightMaskTensor } from './feeds';
import { exactPick, screenBytes, worstBoundShare } from './head-screen';
import type { ReplyForm } from './json-constraint';
import { appendSeq, concatBatch, emptyPast, padSeqRight, withRoom } from './kv-cache';
import { type LastPositionScreen, lastPositionGraph } from './last-position';
import { logitsRows } from './logits';
import { LOOKUP_DRAFT_TOKENS, lookupDraft } from './lookup';
import { quietOrtLog } from './ort-log';
import type {
  EngineLookupCount,
  EngineSessionOptions,
  FinishReason,
  LogitsPositions,
  SamplingParams,
  StepLogprob,
} from './protocol';
import { StaticCacheRunner, staticProbeFeeds } from './static-cache';

// Before this process's first session, which fixes onnxruntime's own log level (see quietOrtLog).
quietOrtLog(ort.env);

/** KV a chat session keeps between turns, and the exact tokens it encodes. */
export interface SessionKv {
  tokens: number[];
  past: Map<string, ort.Tensor>;
}

/** One generation as the decode loop sees it. */
export interface GenerationJob {
  rows: number[][];
  maxNewTokens: number;
  sampling: SamplingParams;
  eosTokenIds: number[];
  /** Report each sampled token's log-probability and this many alternatives (absent: none). */
  logprobs?: number;
  /**
   * JSON mode: each row's reply is one JSON object (the vocabulary's bytes say which tokens may come),
   * conforming to a compiled schema when the form has one (structured output).
   */
  json?: ReplyForm;
  /** Present for a session turn: its KV is reused where the prompt shares its prefix, and updated at the end. */
  session?: SessionKv;
  /** The reply the client predicts (one-row jobs), as token ids: lookup decoding drafts from it first. */
  prediction?: number[];
}

/** Callbacks of the decode loop. */
export interface GenerationHooks {
  /** Called once before the first run, with how many prompt tokens are computed vs reused. */
  onStart(prefillTokens: number, reusedTokens: number): void;
  /**
   * Called after each prefill chunk but the last (long prompts only), with the prompt positions computed so far
   * and in all, both counting a reused session prefix, and the KV bytes the request's tensors hold now.
   */
  onPrefill?(doneTokens: number, totalTokens: number, kvBytes: number): void;
  /**
   * Called after every step with the new id of each row (-1 for a row that already ended) and, when the job
   * asked for them, each new id's log-probabilities (null for a row that already ended).
   */
  onStep(ids: number[], kvBytes: number, logprobs?: Array<StepLogprob | null>): void;
  /** Checked before every run: a non-null value ends the generation with that reason. */
  stopRequested(): 'stop' | 'cancelled' | null;
  /** Counts every session.run, so tests can prove no work ran without admission. */
  countRun(): void;
}

/** What a finished generation reports. */
export interface GenerationOutcome {
  finishReason: FinishReason;
  rowFinishReasons: FinishReason[];
  kvBytes: number;
  generatedTokens: number;
  sessionTokens: number;
  /** Lookup decoding's drafted tokens and those the model took (present when any draft was checked). */
  lookup?: EngineLookupCount;
  /** The job's prediction was not drafted from: the graph cannot check drafts, or the reply never ran alone. */
  predictionUnused?: PredictionUnused;
}

/** The onnxruntime session config entry that says where external weights are, for a graph loaded from memory. */
const EXTERNAL_FOLDER_KEY = 'session.model_external_initializers_file_folder_path';

/** Whether `folder` is the folder that holds `file` (symlinks resolved). */
function sameFolder(folder: string, file: string): boolean {
  try {
    return realpathSync(folder) === realpathSync(path.dirname(file));
  } catch {
    return false;
  }
}

/**
 * Feeds of a load-time probe: rows of equal length at positions
 * [from, from + length), after `past` (the previous run's outputs; empty past
 * when absent).
 */
function probeFeeds(
  spec: ModelSpec,
  rows: number[][],
  from = 0,
  past?: ort.InferenceSession.OnnxValueMapType,
): Record<string, ort.Tensor> {
  const ports = spec.ports;
  const B = rows.length;
  const S = (rows[0] as number[]).length;
  const total = from + S;
  const feeds: Record<string, ort.Tensor> = {};
  feeds[ports.inputIds.name] = idTensor(ports.inputIds, rows.flat(), [B, S]);
  if (ports.attentionMask) {
    feeds[ports.attentionMask.name] = idTensor(ports.attentionMask, Array(B * total).fill(1), [B, total]);
  }
  if (ports.positionIds) {
    const positions = rows.flatMap((r) => r.map((_, i) => from + i));
    feeds[ports.positionIds.name] = idTensor(ports.positionIds, positions, [B, S]);
  }
  if (spec.kv.kind === 'dynamic') {
    for (const t of spec.kv.tensors) feeds[t.past] = (past?.[t.present] as ort.Tensor | undefined) ?? emptyPast(t, B);
  }
  if (spec.kv.kind === 'static') Object.assign(feeds, staticProbeFeeds(spec.kv.cache, B, from, total, past));
  return feeds;
}

/**
 * The session of the last-position copy of the graph, checked before use: a
 * three-token prompt must give logits of shape [1, 1, vocab] equal (to float
 * rounding) to what the copy gives for its last token decoded after the first
 * two — a copy that scored another position would differ. Null with the reason
 * when the graph's head is not recognised, onnxruntime refuses the copy, or the
 * check fails; the original file then loads instead.
 */
export async function lastPositionSession(
  spec: ModelSpec,
  options: ort.InferenceSession.SessionOptions,
  screen: boolean | 'always' = false,
  kvAppend = false,
  kvGap = false,
  split = false,
): Promise<{
  session: ort.InferenceSession | null;
  logits: LogitsPositions;
  startsInput?: string;
  window?: boolean;
  screen?: LastPositionScreen;
  /** The copy's input that asks for full scores (fed true unless a run screens), with or without a checked screen. */
  fullInput?: string;
  /** Each past input → the copy's output of the positions a run adds to it, checked (see addedChecked). */
  kvAdded?: Map<string, string>;
  /** Whether runs may be fed KV with room after its positions, masked out (see gapChecked). */
  kvGap?: boolean;
}> {
  const kv = kvAppend && spec.kv.kind === 'dynamic' ? spec.kv.tensors : undefined;
  const rewrite = lastPositionGraph(spec.graphPath, spec.ports.logits.name, {
    screen,
    ...(kv ? { kv, split } : {}),
  });
  if (!rewrite.ok) return { session: null, logits: { last: false, detail: rewrite.reason } };
  let session: ort.InferenceSession | null = null;
  try {
    session = await ort.InferenceSession.create(rewrite.bytes, {
      ...options,
      // The copy references the weights in the original file (and its external data) by paths relative to its folder.
      extra: { ...(options.extra ?? {}), [EXTERNAL_FOLDER_KEY]: rewrite.folder },
    });
    const name = spec.ports.logits.name;
    const ids = [1, 2, 3].map((i) => i % Math.max(1, spec.vocabSize));
    const created = session;
    const fullInput = rewrite.screen?.fullInput;
    const run = (feeds: Record<string, ort.Tensor>) => created.run(scoringLast(feeds, rewrite.startsInput, fullInput));
    const whole = (await run(probeFeeds(spec, [ids])))[name] as ort.Tensor | undefined;
    const dims = whole?.dims ?? [];
    if (!whole || dims.length !== 3 || dims[0] !== 1 || dims[1] !== 1 || dims[2] !== rewrite.vocab) {
      throw new Error(
        `its logits came out as [${dims.join(', ')}] for one row of three tokens, not [1, 1, ${rewrite.vocab}]`,
      );
    }
    const prefix = await run(probeFeeds(spec, [ids.slice(0, 2)]));
    // A split copy returns no presents: the prefix's KV is built from the positions it added, as runs' KV is.
    const prefixKv = rewrite.split && kv && rewrite.kvAdded ? builtPresents(kv, rewrite.kvAdded, prefix) : prefix;
    const steppedOut = await run(probeFeeds(spec, [ids.slice(2)], 2, prefixKv));
    const stepped = steppedOut[name] as ort.Tensor | undefined;
    if (!stepped) throw new Error(`its step run produced no ${name}`);
    const gap = logitsGap(logitsRows(whole).data, logitsRows(stepped).data);
    if (!(gap <= roundingOf(whole))) {
      throw new Error(
        `its logits for a prompt differ from those of its last token decoded step by step (by ${gap} of their scale)`,
      );
    }
    const window = await windowChecked(session, spec, rewrite.startsInput, ids, whole, prefix, fullInput);
    const logits: LogitsPositions = { last: true, detail: rewrite.detail };
    let checkedScreen: LastPositionScreen | undefined;
    if (rewrite.screen) {
      const why = await screenChecked(created, spec, rewrite.screen, rewrite.startsInput, ids, whole);
      const { vocab, hidden } = rewrite.screen.data;
      if (why === null) {
        checkedScreen = rewrite.screen;
        logits.screen = `greedy picks and draws (top-k, top-p, min-p or whole-vocabulary) from an 8-bit copy of the LM head, checked exactly (${vocab} × ${hidden})`;
        logits.screenBytes = screenBytes(rewrite.screen.data);
      } else {
        // The copy still has the screen's input: every run feeds it true (full scores).
        rewrite.screen.data.rows.close();
        logits.screen = `the LM head is scored in full: its 8-bit screen ${why}`;
      }
    } else if (screen) logits.screen = `the LM head is scored in full: ${rewrite.screenReason ?? 'no screen'}`;
    let kvAdded: Map<string, string> | undefined;
    let roomy = false;
    if (kv && rewrite.kvAdded) {
      // A split copy has no presents to compare with: the step above, fed the KV built from the prefix's added
      // positions, scored as the whole prompt did.
      const why = rewrite.split ? null : addedChecked(kv, rewrite.kvAdded, prefix, steppedOut);
      if (why === null) {
        kvAdded = rewrite.kvAdded;
        const noRoom = kvGap ? await gapChecked(run, spec, kv, ids, prefixKv, stepped) : 'turned off';
        roomy = noRoom === null;
        logits.kv = roomy
          ? 'runs return the positions they add, which the engine writes into room the KV keeps after its positions (masked out)'
          : `runs return the positions they add; the engine grows the present KV in place, moving each row's positions (no room after them: ${noRoom})`;
      } else logits.kv = `runs return the present KV whole: the positions they add ${why}`;
    } else if (kv) logits.kv = `runs return the present KV whole: ${rewrite.kvAddedReason ?? 'not built'}`;
    if (kv) {
      logits.attention = rewrite.split
        ? "each layer's attention reads its past KV and the positions a run adds apart: no Concat copies the whole KV per step"
        : `attention reads the graph's Concat of the KV: ${split ? (rewrite.splitReason ?? 'not built') : 'turned off'}`;
    }
    return {
      session,
      logits,
      startsInput: rewrite.startsInput,
      window,
      ...(checkedScreen ? { screen: checkedScreen } : {}),
      ...(fullInput ? { fullInput } : {}),
      ...(kvAdded ? { kvAdded, kvGap: roomy } : {}),
    };
  } catch (err) {
    await session?.release().catch(() => undefined);
    if (rewrite.screen) rewrite.screen.data.rows.close();
    const reason = err instanceof Error ? err.message : String(err);
    if (rewrite.split) {
      // The same copy with the graph's own Concats.
      const plain = await lastPositionSession(spec, options, screen, kvAppend, kvGap, false);
      plain.logits.attention = `attention reads the graph's Concat of the KV: the copy that splits it failed (${reason})`;
      return plain;
    }
    return { session: null, logits: { last: false, detail: `the last-position copy was not used: ${reason}` } };
  }
}

/** The probe's outputs with each present KV built from the positions the run added (a split copy has none). */
function builtPresents(
  kv: readonly KvTensorSpec[],
  added: ReadonlyMap<string, string>,
  out: ort.InferenceSession.OnnxValueMapType,
): ort.InferenceSession.OnnxValueMapType {
  const built: Record<string, ort.OnnxValue> = { ...out };
  for (const t of kv) {
    const positions = out[added.get(t.past) as string];
    if (!positions || !('dims' in positions)) throw new Error(`its run returned no "${added.get(t.past)}"`);
    built[t.present] = appendSeq(t, undefined, positions as ort.Tensor);
  }
  return built;
}

/**
 * Null when the copy's screened run of the probe prompt scores every token within the screen's bound of the
 * full run, and both give the same exact pick; else what went wrong (the head is then scored in full).
 */
async function screenChecked(
  session: ort.InferenceSession,
  spec: ModelSpec,
  screen: LastPositionScreen,
  startsInput: string,
  ids: number[],
  whole: ort.Tensor,
): Promise<string | null> {
  try {
    const feeds = probeFeeds(spec, [ids]);
    feeds[screen.fullInput] = SCREENED;
    const out = await session.run(scoringLast(feeds, startsInput));
    const screened = out[spec.ports.logits.name] as ort.Tensor | undefined;
    const hidden = out[screen.hiddenOutput] as ort.Tensor | undefined;
    if (!screened || !hidden || screened.type !== 'float32' || hidden.type !== 'float32') return 'gave no scores';
    const full = whole.data as Float32Array;
    const h = hidden.data as Float32Array;
    const share = worstBoundShare(screen.data, screened.data as Float32Array, full, h);
    if (!(share <= 1)) return `scored a token outside its bound (${share.toFixed(2)} of it)`;
    const vocab = Math.min(spec.vocabSize, screen.data.vocab);
    const a = exactPick(screen.data, screened.data as Float32Array, 0, h, 0, true, vocab);
    const b = exactPick(screen.data, full, 0, h, 0, false, vocab);
    return a === b && a >= 0 ? null : `picked token ${a} where the full head picks ${b}`;
  } catch (err) {
    return `could not run (${err instanceof Error ? err.message : String(err)})`;
  }
}

/**
 * Null when the presents built from the probe's added positions (a first run, then a step grown in place) equal,
 * byte for byte, the presents the graph returned itself; else what differed.
 */
function addedChecked(
  kv: readonly KvTensorSpec[],
  added: ReadonlyMap<string, string>,
  first: ort.InferenceSession.OnnxValueMapType,
  step: ort.InferenceSession.OnnxValueMapType,
): string | null {
  try {
    for (const t of kv) {
      const name = added.get(t.past) as string;
      const a = first[name];
      const b = step[name];
      if (!a || !b) return `were not returned ("${name}")`;
      // Compared before it grows in place (it is stale after).
      const made = appendSeq(t, undefined, a);
      if (!sameBytes(made, first[t.present]) || !sameBytes(appendSeq(t, made, b), step[t.present])) {
        return `do not make "${t.present}" as the graph does`;
      }
    }
    return null;
  } catch (err) {
    return `could not be appended (${err instanceof Error ? err.message : String(err)})`;
  }
}

/**
 * Null when a step fed the probe prompt's KV with room after its positions (zeros the attention mask marks 0)
 * scores as the same step fed the KV without room (`stepped`); else why not. A graph that numbers positions from
 * the KV's length (no position_ids input) or attends to the whole KV whatever the mask would count the room.
 */
export async function gapChecked(
  run: (feeds: Record<string, ort.Tensor>) => Promise<ort.InferenceSession.OnnxValueMapType>,
  spec: ModelSpec,
  kv: readonly KvTensorSpec[],
  ids: number[],
  prefix: ort.InferenceSession.OnnxValueMapType,
  stepped: ort.Tensor,
): Promise<string | null> {
  const { attentionMask, positionIds } = spec.ports;
  if (!positionIds) return 'the graph has no position_ids input, so it would number positions after the room';
  if (!attentionMask) return 'the graph has no attention mask to mask it out with';
  try {
    const room = 3;
    const feeds = probeFeeds(spec, [ids.slice(2)], 2, prefix);
    feeds[attentionMask.name] = maskTensor(attentionMask, [0], 2 + room + 1, [2, 2 + room]);
    for (const t of kv) feeds[t.past] = withRoom(t, prefix[t.present] as ort.Tensor, 2, 2 + room);
    const got = (await run(feeds))[spec.ports.logits.name] as ort.Tensor | undefined;
    if (!got) return `a step with room gave no ${spec.ports.logits.name}`;
    const gap = logitsGap(logitsRows(stepped).data, logitsRows(got).data);
    return gap <= roundingOf(stepped) ? null : `a step with room scored differently (by ${gap} of the scores' scale)`;
  } catch (err) {
    return `a step with room could not run (${err instanceof Error ? err.message : String(err)})`;
  }
}

/**
 * Null when a row left-padded in a batch, as the batcher pads it (a pad token its mask marks 0, at position 0),
 * scores as the same row alone, in its prefill and in the step after it (each fed its own run's KV); else how it
 * differed. Attention that takes a row's first positions as its own — onnxruntime's GroupQueryAttention, whose
 * `seqlens_k` graphs compute as the mask's sum − 1 — attends to the padding and misses the row's last position.
 */
export async function paddingChecked(
  run: (feeds: Record<string, ort.Tensor>) => Promise<ort.InferenceSession.OnnxValueMapType>,
  spec: ModelSpec,
  kv: readonly KvTensorSpec[],
  added: ReadonlyMap<string, string> | null,
): Promise<string | null> {
  const { inputIds, attentionMask, positionIds, logits } = spec.ports;
  const vocab = Math.max(1, spec.vocabSize);
  const ids = [1, 2, 3].map((i) => i % vocab);
  const next = 4 % vocab;
  const pad = spec.padTokenId ?? spec.eosTokenIds[0] ?? 0;
  // A row's last position's scores, whatever positions the run scored.
  const lastRow = (out: ort.InferenceSession.OnnxValueMapType, r: number) => {
    const t = out[logits.name] as ort.Tensor | undefined;
    if (!t) throw new Error(`it gave no ${logits.name}`);
    const { data, seq, vocab: v } = logitsRows(t);
    return data.subarray(((r + 1) * seq - 1) * v, (r + 1) * seq * v);
  };
  const presents = (out: ort.InferenceSession.OnnxValueMapType) => (added ? builtPresents(kv, added, out) : out);
  const feeds = (rows: number[][], pads: number[], from: number, past?: ort.InferenceSession.OnnxValueMapType) => {
    const B = rows.length;
    const S = (rows[0] as number[]).length;
    const f: Record<string, ort.Tensor> = {};
    f[inputIds.name] = idTensor(inputIds, rows.flat(), [B, S]);
    if (attentionMask) f[attentionMask.name] = maskTensor(attentionMask, pads, from + S);
    if (positionIds) {
      const positions = rows.flatMap((r, b) => r.map((_, i) => Math.max(0, from + i - (pads[b] as number))));
      f[positionIds.name] = idTensor(positionIds, positions, [B, S]);
    }
    for (const t of kv) f[t.past] = (past?.[t.present] as ort.Tensor | undefined) ?? emptyPast(t, B);
    return f;
  };
  try {
    const alone = await run(feeds([ids], [0], 0));
    const aloneStep = await run(feeds([[next]], [0], 3, presents(alone)));
    const padded = await run(
      feeds(
        [
          [pad, ...ids],
          [3 % vocab, ...ids],
        ],
        [1, 0],
        0,
      ),
    );
    const paddedStep = await run(feeds([[next], [next]], [1, 0], 4, presents(padded)));
    const t = alone[logits.name] as ort.Tensor;
    const prefill = logitsGap(lastRow(alone, 0), lastRow(padded, 0));
    if (!(prefill <= roundingOf(t))) {
      return `a left-padded row scored differently from the same row alone (by ${prefill} of the scores' scale)`;
    }
    const step = logitsGap(lastRow(aloneStep, 0), lastRow(paddedStep, 0));
    if (!(step <= roundingOf(t))) {
      return `a step of a left-padded row scored differently from the same step alone (by ${step} of the scores' scale)`;
    }
    return null;
  } catch (err) {
    return `a batch with a left-padded row could not run (${(err instanceof Error ? err.message : String(err)).trim()})`;
  }
}

/**
 * Null when rows batched as the batcher batches them on the right (ContinuousBatcher's right layout) score as each
 * row alone; else how they differed. Two rows of different lengths are prefilled apart (each unpadded), merged with
 * the shorter one's KV padded on the right with zeros, and take two steps together, each row's mask its own
 * positions then zeros: both steps of both rows must score as alone. This holds where attention takes a row's first
 * `mask sum` positions as its own and writes a run's new positions right after them (GroupQueryAttention, whose
 * `seqlens_k` graphs compute as the mask's sum − 1); attention that appends after the whole KV reads the padding.
 */
export async function rightPaddingChecked(
  run: (feeds: Record<string, ort.Tensor>) => Promise<ort.InferenceSession.OnnxValueMapType>,
  spec: ModelSpec,
  kv: readonly KvTensorSpec[],
  added: ReadonlyMap<string, string> | null,
): Promise<string | null> {
  const { inputIds, attentionMask, positionIds, logits } = spec.ports;
  if (!attentionMask) return 'the graph has no attention mask to mark the padding with';
  if (added) return "runs return the positions they add, which the engine writes after every row's KV";
  if (kv.length === 0) return 'the graph has no KV inputs';
  const vocab = Math.max(1, spec.vocabSize);
  const rows = [[1, 2, 3].map((i) => i % vocab), [3, 1, 2, 3].map((i) => i % vocab)];
  const nexts = [4 % vocab, 5 % vocab];
  // Each row's scores at its last position, whatever positions the run scored.
  const lastRows = (out: ort.InferenceSession.OnnxValueMapType) => {
    const t = out[logits.name] as ort.Tensor | undefined;
    if (!t) throw new Error(`it gave no ${logits.name}`);
    const { data, seq, vocab: v } = logitsRows(t);
    const B = t.dims[0] as number;
    return Array.from({ length: B }, (_, r) => data.subarray(((r + 1) * seq - 1) * v, (r + 1) * seq * v));
  };
  // A run of `ids` (one column per row) after KV of `width` positions, row b's own positions `lengths[b]`.
  const feeds = (ids: number[][], lengths: number[], width: number, past?: Map<string, ort.Tensor>) => {
    const B = ids.length;
    const S = (ids[0] as number[]).length;
    const f: Record<string, ort.Tensor> = {};
    f[inputIds.name] = idTensor(inputIds, ids.flat(), [B, S]);
    f[attentionMask.name] = rightMaskTensor(
      attentionMask,
      lengths.map((n) => n + S),
      width + S,
    );
    if (positionIds) {
      const positions = ids.flatMap((r, b) => r.map((_, i) => (lengths[b] as number) + i));
      f[positionIds.name] = idTensor(positionIds, positions, [B, S]);
    }
    for (const t of kv) f[t.past] = past?.get(t.past) ?? emptyPast(t, B);
    return f;
  };
  const presents = (out: ort.InferenceSession.OnnxValueMapType) => {
    const m = new Map<string, ort.Tensor>();
    for (const t of kv) {
      const p = out[t.present] as ort.Tensor | undefined;
      if (!p) throw new Error(`it gave no ${t.present}`);
      m.set(t.past, p);
    }
    return m;
  };
  try {
    // Each row alone: its prompt, then two steps.
    const alone: Float32Array[][] = [];
    const prompts: Map<string, ort.Tensor>[] = [];
    let scale = 0;
    for (const row of rows) {
      const first = await run(feeds([row], [0], 0));
      scale = roundingOf(lastRowsTensor(first, logits.name));
      prompts.push(presents(first));
      let past = presents(first);
      const scores: Float32Array[] = [];
      for (const [i, next] of nexts.entries()) {
        const out = await run(feeds([[next]], [row.length + i], row.length + i, past));
        scores.push(lastRows(out)[0] as Float32Array);
        past = presents(out);
      }
      alone.push(scores);
    }
    // Together: the shorter row's KV padded on the right to the longer one's, then the same two steps.
    const width = Math.max(...rows.map((r) => r.length));
    let past = new Map<string, ort.Tensor>();
    for (const t of kv) {
      const parts = prompts.map((p) => padSeqRight(t, p.get(t.past) as ort.Tensor, width));
      past.set(t.past, concatBatch(t, parts));
    }
    for (const [i, next] of nexts.entries()) {
      const out = await run(
        feeds(
          rows.map(() => [next]),
          rows.map((r) => r.length + i),
          width + i,
          past,
        ),
      );
      const got = lastRows(out);
      for (const [r, scores] of alone.entries()) {
        const gap = logitsGap(scores[i] as Float32Array, got[r] as Float32Array);
        if (!(gap <= scale)) {
          return `step ${i + 1} of a ${r === 0 ? 'right-padded' : 'longer'} row batched with a row of another length scored differently from the same step alone (by ${gap} of the scores' scale)`;
        }
      }
      past = presents(out);
    }
    return null;
  } catch (err) {
    return `a batch with a right-padded row could not run (${(err instanceof Error ? err.message : String(err)).trim()})`;
  }
}

/** The logits tensor of a run's outputs (throws when absent). */
function lastRowsTensor(out: ort.InferenceSession.OnnxValueMapType, name: string): ort.Tensor {
  const t = out[name] as ort.Tensor | undefined;
  if (!t) throw new Error(`it gave no ${name}`);
  return t;
}

/** Whether two tensors have the same dims and bytes. */
function sameBytes(a: ort.Tensor, b: ort.OnnxValue | undefined): boolean {
  if (!b || !('dims' in b) || a.dims.join() !== b.dims.join()) return false;
  const bytes = (t: ort.Tensor) => {
    const data = t.data as Float32Array | Uint16Array;
    return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  };
  return bytes(a).equals(bytes(b));
}

/** KVDESK_HEAD_SCREEN: 0 turns the head's screen off, `always` screens any vocabulary. */
function screenFromEnv(value: string | undefined): boolean | 'always' {
  if (value === '0') return false;
  return value === 'always' ? 'always' : true;
}

/** Two runs' rounding apart, relative to the logits' scale: a few units in the last place of their precision. */
function roundingOf(logits: ort.Tensor): number {
  return logits.type === 'float16' ? 1e-2 : 1e-3;
}

/** How far apart two logits arrays are, relative to the first one's scale (NaN for a length mismatch). */
export function logitsGap(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) return Number.NaN;
  let scale = 1;
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    scale = Math.max(scale, Math.abs(a[i] as number));
    worst = Math.max(worst, Math.abs((a[i] as number) - (b[i] as number)));
  }
  return worst / scale;
}

/** The start input fed −1 (the last position), shared by every run that scores one position per row. */
let lastStart: ort.Tensor | null = null;
/** The screen's input fed true (score the vocabulary in full), shared by every run that does not screen. */
let fullScores: ort.Tensor | null = null;

/**
 * The feeds of a run of the last-position copy, its start input set to −1
 * unless the run sets it (a lookup check); the feeds as they are for a graph
 * without one.
 */
export function scoringLast(
  feeds: Record<string, ort.Tensor>,
  startsInput: string | undefined,
  fullInput?: string | undefined,
) {
  if (startsInput !== undefined && !(startsInput in feeds)) {
    lastStart ??= new ort.Tensor('int64', BigInt64Array.of(-1n), [1]);
    feeds[startsInput] = lastStart;
  }
  if (fullInput !== undefined && !(fullInput in feeds)) {
    fullScores ??= new ort.Tensor('bool', Uint8Array.of(1), []);
    feeds[fullInput] = fullScores;
  }
  return feeds;
}

/**
 * Whether feeding the copy's start input −3 for a three-token prompt gives
 * [1, 3, vocab] logits whose last row is the −1 run's and whose middle row is
 * the two-token prefix's last: lookup decoding then checks its drafts with it.
 * False (drafts stay off) when onnxruntime refuses the feed or the rows differ.
 */
async function windowChecked(
  session: ort.InferenceSession,
  spec: ModelSpec,
  startsInput: string,
  ids: number[],
  whole: ort.Tensor,
  prefix: ort.InferenceSession.OnnxValueMapType,
  fullInput: string | undefined,
): Promise<boolean> {
  const name = spec.ports.logits.name;
  try {
    const feeds = probeFeeds(spec, [ids]);
    feeds[startsInput] = new ort.Tensor('int64', BigInt64Array.from([-3n]), [1]);
    const three = (await session.run(scoringLast(feeds, undefined, fullInput)))[name] as ort.Tensor | undefined;
    if (!three || three.dims.join() !== [1, 3, whole.dims[2]].join()) return false;
    const rows = logitsRows(three, true).data;
    const vocab = whole.dims[2] as number;
    const last = logitsGap(logitsRows(whole).data, rows.subarray(2 * vocab));
    const before = logitsGap(logitsRows(prefix[name] as ort.Tensor).data, rows.subarray(vocab, 2 * vocab));
    return last <= roundingOf(whole) && before <= roundingOf(whole);
  } catch {
    return false;
  }
}

/** Whether a graph loaded as it is scores every position it runs: three tokens in, [1, 3, vocab] logits out. */
async function scoresEveryPosition(session: ort.InferenceSession, spec: ModelSpec): Promise<boolean> {
  try {
    const ids = [1, 2, 3].map((i) => i % Math.max(1, spec.vocabSize));
    const t = (await session.run(probeFeeds(spec, [ids])))[spec.ports.logits.name] as ort.Tensor | undefined;
    return t?.dims.length === 3 && t.dims[0] === 1 && t.dims[1] === 3;
  } catch {
    return false;
  }
}

/** What a configured size says, e.g. `4 KV heads`, `head size 8`. */
function sizeSaid(c: ConfiguredKvSize, size = c.size): string {
  return c.what === 'KV heads' ? `${size} KV heads` : `${c.what} ${size}`;
}

/** Where a configured size was read, e.g. "config.json: `num_key_value_heads` says 4 KV heads". */
function configSaid(c: ConfiguredKvSize): string {
  return c.readFrom === undefined
    ? `${c.file}: \`${c.field}\` says ${sizeSaid(c)}`
    : `${c.file} has no \`${c.field}\`, and ${c.readFrom} there says ${sizeSaid(c)}`;
}

/**
 * The load's refusal when a graph computes another KV size than the package config gave where the graph leaves it
 * symbolic: the engine would build the cache with the config's size (every request fails when a run's positions
 * are added to it) and the KV budget would count the config's bytes per token.
 */
function configuredKvWrong(
  spec: ModelSpec,
  t: KvTensorSpec,
  c: ConfiguredKvSize,
  dims: readonly number[],
  graphBpt: number,
): KvdeskError {
  const graph = path.relative(spec.root, spec.graphPath) || spec.graphPath;
  const actual = dims[c.axis] as number;
  const shape = t.shape.map((d, i) => (i === t.batchAxis || i === t.seqAxis ? 1 : d));
  return new KvdeskError(
    'PACKAGE_INVALID',
    `${configSaid(c)}, but ${graph} computes ${sizeSaid(c, actual)}: a one-token trial run's "${t.present}" came out ` +
      `[${dims.join(', ')}], not [${shape.join(', ')}] (the graph leaves that axis of "${t.past}" symbolic). ` +
      `Every request would fail, and the KV budget would count ${spec.bpt} bytes per token where the graph's KV takes ${graphBpt}. ` +
      `Set \`${c.field}\` to ${actual} in ${c.file}, or re-export the graph with fixed KV dims.`,
    { file: c.file, field: c.field, port: t.past, configured: c.size, graph: actual, graphFile: graph },
  );
}

/** The load's refusal when the trial run of a graph fed KV of the sizes the package config gave fails. */
function configuredKvFailed(spec: ModelSpec, c: ConfiguredKvSize, err: unknown): KvdeskError {
  const graph = path.relative(spec.root, spec.graphPath) || spec.graphPath;
  const reason = err instanceof Error ? err.message : String(err);
  return new KvdeskError(
    'MODEL_LOAD_FAILED',
    `A one-token trial run of ${graph}, fed KV of the sizes the package config gives where the graph leaves them ` +
      `symbolic (${configSaid(c)}), failed: ${reason}. If that size is wrong, set \`${c.field}\` in ${c.file} to ` +
      'what the graph computes, or re-export the graph with fixed KV dims.',
    { file: c.file, field: c.field },
  );
}

/**
 * The load's refusal when the graph holds fewer positions than the package's declared context: a one-token run at
 * position `limit` failed where one at `limit - 1` ran.
 */
function contextPastPositions(spec: ModelSpec, limit: number, err: unknown): KvdeskError {
  const graph = path.relative(spec.root, spec.graphPath) || spec.graphPath;
  const reason = err instanceof Error ? err.message : String(err);
  const { file, field } = spec.contextSource ?? { file: graph, field: 'context length' };
  return new KvdeskError(
    'PACKAGE_INVALID',
    `${file}: \`${field}\` says the context is ${spec.contextLength} tokens, but ${graph} holds ${limit} positions: ` +
      `a one-token trial run at position ${limit - 1} ran and one at position ${limit} failed (${reason}). ` +
      `Every request that reached position ${limit} would fail mid-reply. Set \`${field}\` to ${limit} in ${file}.`,
    { file, field, configured: spec.contextLength, graph: limit, graphFile: graph },
  );
}

/** A decoder session plus the spec that says how to bind it. */
export class LoadedDecoder {
  /**
   * Whether the graph really runs with batch > 1. Some exports declare a
   * symbolic batch but fix it internally; their rows take turns instead.
   */
  batchable = true;
  /**
   * Whether a row left-padded in a batch scores as it does alone (checked at load: paddingChecked). False for
   * attention that takes a row's first positions as its own (GroupQueryAttention's `seqlens_k`, counted from the
   * mask): then rows are padded on the right where that scores as alone (rightPadded), else only rows that need no
   * padding share a batch.
   */
  padded = true;
  /**
   * Where left padding is wrong: whether rows batched with their KV padded on the right score as each row alone
   * (checked at load: rightPaddingChecked). Then requests of different prompt lengths are prefilled apart and take
   * their decode steps in one batch (the batcher's right layout); a request's own rows of different lengths take turns.
   */
  rightPadded = false;
  private readonly batcher: ContinuousBatcher;
  /** The generation loop of a static-cache graph, whose rows always take turns (static-cache.ts). */
  private readonly staticRunner: StaticCacheRunner | null;
  /**
   * Why lookup decoding cannot run on this graph though it is on (a static KV cache, a graph that scores only a
   * run's last position): a job's prediction is then not drafted from, and its outcome says so. Null otherwise.
   */
  lookupUnavailable: string | null = null;

  private constructor(
    readonly spec: ModelSpec,
    private readonly session: ort.InferenceSession,
    kvTensors: KvTensorSpec[],
    prefillChunkTokens: number,
    /** Whether the LM head scores only the last position (see last-position.ts), and why or why not. */
    readonly logits: LogitsPositions,
    /**
     * Lookup decoding for a stream running alone (lookup.ts); null when off or when runs of this graph cannot
     * score the last n positions. Tests and benchmarks may swap its drafter or bound (the batcher reads it live).
     */
    readonly lookup: LookupDecoding | null,
    /** The last-position copy's start input, fed −1 in every run that does not set it. */
    private readonly startsInput?: string,
    /** The copy's screened head (head-screen.ts), checked; null when its check failed or there is none. */
    private readonly screen: LastPositionScreen | null = null,
    /** The copy's input that asks for full scores: fed true in every run that does not set it. */
    private readonly fullInput?: string,
    /** Each past input → the copy's output of the positions a run adds (checked): runs fetch these, not presents. */
    kvAdded: ReadonlyMap<string, string> | null = null,
    /** Whether runs keep room in the KV after its positions (checked: gapChecked). */
    kvGap = false,
  ) {
    this.kvAdded = kvAdded;
    const presents = new Set(kvTensors.map((t) => t.present));
    this.fetches = kvAdded ? session.outputNames.filter((n) => !presents.has(n)) : undefined;
    this.batcher = new ContinuousBatcher(
      spec,
      kvTensors,
      (feeds) => this.run(feeds),
      () => this.batchable,
      prefillChunkTokens,
      lookup,
      screen,
      kvAdded,
      kvGap,
      () => this.padded,
      () => this.rightPadded,
    );
    this.staticRunner =
      spec.kv.kind === 'static'
        ? new StaticCacheRunner(
            spec,
            spec.kv.cache,
            (feeds, fetches) => session.run(scoringLast(feeds, startsInput, fullInput), fetches),
            prefillChunkTokens,
          )
        : null;
    if (this.staticRunner) this.batchable = false;
  }

  /** The outputs every run fetches: all but the presents where runs return the positions they add; else all. */
  private readonly fetches: string[] | undefined;
  private readonly kvAdded: ReadonlyMap<string, string> | null;

  private run(feeds: Record<string, ort.Tensor>): Promise<ort.InferenceSession.OnnxValueMapType> {
    const scoring = scoringLast(feeds, this.startsInput, this.fullInput);
    return this.fetches ? this.session.run(scoring, this.fetches) : this.session.run(scoring);
  }

  /**
   * Tiny runs at load time tell whether batching works for this graph: one of two rows (else its requests take
   * turns), then whether a left-padded row scores as it does alone (paddingChecked; else only rows that need no
   * padding share a batch). `logits.batching` says which, and why.
   */
  private async probeBatch(): Promise<void> {
    if (this.staticRunner) {
      this.logits.batching = "requests take turns: a static cache's rows run one at a time";
      return;
    }
    const first = this.spec.bosTokenId ?? this.spec.eosTokenIds[0] ?? 0;
    try {
      await this.run(probeFeeds(this.spec, [[first], [first]]));
    } catch (err) {
      this.batchable = false;
      // Without onnxruntime's C++ source line and function signature, which say nothing to the reader.
      const why = (err instanceof Error ? err.message : String(err))
        .trim()
        .replace(/\/\S+\.(?:h|cc|cpp):\d+ [^\n]*?\) /g, '');
      this.logits.batching = `requests take turns: a run of two rows failed (${why.slice(0, 400)})`;
      return;
    }
    const kv = this.spec.kv.kind === 'dynamic' ? this.spec.kv.tensors : [];
    const why = await paddingChecked((feeds) => this.run(feeds), this.spec, kv, this.kvAdded);
    this.padded = why === null;
    if (why === null) {
      this.logits.batching =
        'requests share one batch, each row left-padded to the longest (checked: a padded row scores as it does alone)';
      return;
    }
    const right = await rightPaddingChecked((feeds) => this.run(feeds), this.spec, kv, this.kvAdded);
    this.rightPadded = right === null;
    this.logits.batching =
      right === null
        ? 'requests share one batch, each row padded on the right (its own positions first: the graph reads a ' +
          "row's first positions as its own); prompts of different lengths are prefilled apart, then decode " +
          "together, and one request's rows of different lengths take turns (checked: a right-padded row's steps " +
          `score as alone; ${why})`
        : "only rows that need no padding share a batch (one request's rows of one length, or requests of one prompt " +
          `length that arrive together); others take turns: ${why}; and ${right}`;
  }

  /**
   * Sizes the package config gave where the graph's KV inputs are symbolic (kv-geometry.ts) are what the cache is
   * built with and what the spec's bpt counts: one one-token run, from an empty cache, tells whether the graph
   * computes them. Graphs that fix their KV dims skip it.
   */
  private async checkConfiguredKv(): Promise<void> {
    if (this.spec.kv.kind !== 'dynamic') return;
    const tensors = this.spec.kv.tensors;
    const configured = tensors.filter((t) => t.configured !== undefined && t.configured.length > 0);
    const [firstConfigured] = configured.flatMap((t) => t.configured ?? []);
    if (firstConfigured === undefined) return;
    const token = this.spec.bosTokenId ?? this.spec.eosTokenIds[0] ?? 0;
    let out: ort.InferenceSession.OnnxValueMapType;
    try {
      out = await this.run(probeFeeds(this.spec, [[token]]));
    } catch (err) {
      throw configuredKvFailed(this.spec, firstConfigured, err);
    }
    // The positions a run adds have the present's dims but for the sequence axis.
    const dimsOf = (t: KvTensorSpec) => {
      const name = this.kvAdded?.get(t.past) ?? t.present;
      const v = out[name];
      return v && 'dims' in v ? { dims: v.dims } : undefined;
    };
    const inner = (t: KvTensorSpec, dims: readonly (number | string)[]) =>
      dims.reduce<number>((p, d, i) => (i === t.batchAxis || i === t.seqAxis ? p : p * Number(d)), 1);
    const graphBpt = tensors.reduce((sum, t) => {
      const got = dimsOf(t);
      return sum + (got ? (t.bytesPerToken * inner(t, got.dims)) / inner(t, t.shape) : t.bytesPerToken);
    }, 0);
    for (const t of configured) {
      const got = dimsOf(t);
      const wrong = got && t.configured?.find((c) => got.dims[c.axis] !== c.size);
      if (got && wrong) throw configuredKvWrong(this.spec, t, wrong, got.dims, graphBpt);
    }
  }

  /**
   * A graph fed its positions (a position_ids input) may read them from a table of its own size, which the declared
   * context can pass: the requests that reach it then fail mid-reply. One one-token run at the context's last
   * position, from an empty cache, tells; where it fails and one at position 0 runs, a search for the last position
   * that runs (a run per halving) gives the graph's real limit for the refusal. Graphs that compute their positions
   * from the mask or the cache cannot be probed this cheaply; their failure is named at run time instead.
   */
  private async checkContextPositions(): Promise<void> {
    const port = this.spec.ports.positionIds;
    if (this.spec.kv.kind !== 'dynamic' || port === undefined || this.spec.contextLength < 2) return;
    const token = this.spec.bosTokenId ?? this.spec.eosTokenIds[0] ?? 0;
    const runsAt = async (position: number): Promise<unknown> => {
      const feeds = probeFeeds(this.spec, [[token]]);
      feeds[port.name] = idTensor(port, [position], [1, 1]);
      try {
        await this.run(feeds);
        return undefined;
      } catch (err) {
        return err ?? new Error('the run failed');
      }
    };
    // An int32 port cannot be fed a position past 2^31 - 1 (it would wrap to a negative one, which Gather takes).
    const last = Math.min(this.spec.contextLength - 1, port.dtype === 'int32' ? 2 ** 31 - 1 : Number.MAX_SAFE_INTEGER);
    const atEnd = await runsAt(last);
    // A graph that fails at position 0 too fails for another reason, which its first request will tell.
    if (atEnd === undefined || (await runsAt(0)) !== undefined) return;
    let ran = 0;
    let failed = last;
    let failure = atEnd;
    while (failed - ran > 1) {
      const mid = Math.floor((ran + failed) / 2);
      const err = await runsAt(mid);
      if (err === undefined) ran = mid;
      else [failed, failure] = [mid, err];
    }
    throw contextPastPositions(this.spec, failed, failure);
  }

  /** Creates the onnxruntime session; a graph onnxruntime cannot run is a MODEL_LOAD_FAILED error. */
  static async load(spec: ModelSpec, options: EngineSessionOptions): Promise<LoadedDecoder> {
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      intraOpNumThreads: options.intraOpNumThreads,
      interOpNumThreads: 1,
      executionProviders: options.executionProviders,
      graphOptimizationLevel: 'all',
      // Failures reach the person as KvdeskErrors with onnxruntime's message; its own log would repeat them.
      logSeverityLevel: 4,
    };
    // An ORT model package's own session config entries (executor_info.ort.session_options), keys as written.
    const entries = spec.sessionConfigEntries ?? {};
    if (Object.keys(entries).length > 0) sessionOptions.extra = { ...entries };
    let logits: LogitsPositions = { last: false, detail: 'turned off (lastPositionLogits: false)' };
    let session: ort.InferenceSession | null = null;
    let startsInput: string | undefined;
    let window = false;
    let screen: LastPositionScreen | undefined;
    let fullInput: string | undefined;
    let kvAdded: Map<string, string> | undefined;
    let kvGap = false;
    // A static cache's rows take turns through their own loop (static-cache.ts), which does not screen. On a GPU
    // the 8-bit product would run in another kernel, whose rounding the bounds were not checked against: the CPU
    // only.
    const asked = options.headScreen ?? screenFromEnv(process.env.KVDESK_HEAD_SCREEN);
    const onCpu = options.executionProviders.every((ep) => ep === 'cpu');
    const screening = spec.kv.kind === 'dynamic' && onCpu ? asked : false;
    if (options.lastPositionLogits !== false) {
      const packageFolder = entries[EXTERNAL_FOLDER_KEY];
      if (packageFolder !== undefined && !sameFolder(packageFolder, spec.graphPath)) {
        // The copy points onnxruntime at the graph's own folder for its weights; the package chose another one.
        logits = { last: false, detail: `the package sets ${EXTERNAL_FOLDER_KEY} to another folder than its graph's` };
      } else {
        ({
          session,
          logits,
          startsInput,
          window = false,
          screen,
          fullInput,
          kvAdded,
          kvGap = false,
        } = await lastPositionSession(
          spec,
          sessionOptions,
          screening,
          options.kvAppend ?? process.env.KVDESK_KV_APPEND !== '0',
          options.kvGap ?? process.env.KVDESK_KV_GAP !== '0',
          options.splitAttention ?? process.env.KVDESK_SPLIT_ATTENTION !== '0',
        ));
        if (asked !== false && !onCpu && logits.last) {
          logits.screen = 'the LM head is scored in full: its 8-bit screen runs on the CPU backend only';
        }
      }
    }
    try {
      session ??= await ort.InferenceSession.create(spec.graphPath, sessionOptions);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      throw new KvdeskError(
        'MODEL_LOAD_FAILED',
        `onnxruntime could not load ${spec.graphPath}: ${reason}. ${
          Object.keys(entries).length > 0
            ? `The package's session options (${Object.keys(entries).join(', ')}) may be the cause; otherwise the`
            : 'The'
        } graph may use operators this onnxruntime build lacks, or the file is damaged; re-export it or pick another variant.`,
        { file: spec.graphPath },
      );
    }
    const maxDraft = options.lookupDraftTokens ?? LOOKUP_DRAFT_TOKENS;
    let lookup: LookupDecoding | null = null;
    let lookupUnavailable: string | null = null;
    if (maxDraft > 0 && spec.kv.kind !== 'dynamic') {
      lookupUnavailable = 'its KV cache is static (fixed-size buffers), whose runs cannot check a draft';
    } else if (maxDraft > 0) {
      // The last-position copy checks drafts through its start input; a graph as it is, if it scores every position.
      if (logits.last) lookup = window ? { drafter: lookupDraft, maxDraft, startsInput } : null;
      else if (await scoresEveryPosition(session, spec)) lookup = { drafter: lookupDraft, maxDraft };
      if (!lookup) {
        lookupUnavailable = logits.last
          ? "kvdesk's copy of its graph that scores only the last position could not be checked scoring a draft's positions"
          : 'its graph scores only the last position of a run, not each position of a draft';
      }
    }
    const decoder = new LoadedDecoder(
      spec,
      session,
      spec.kv.kind === 'dynamic' ? spec.kv.tensors : [],
      options.prefillChunkTokens ?? PREFILL_CHUNK_TOKENS,
      logits,
      lookup,
      startsInput,
      screen ?? null,
      fullInput,
      kvAdded ?? null,
      kvGap,
    );
    decoder.lookupUnavailable = lookupUnavailable;
    try {
      await decoder.checkConfiguredKv();
      await decoder.checkContextPositions();
    } catch (err) {
      await decoder.dispose();
      throw err;
    }
    await decoder.probeBatch();
    return decoder;
  }

  /**
   * Greedy picks and draws (top-k, top-p, min-p or whole-vocabulary) made from the head's screen or from full scores (both exact),
   * and the tokens scored exactly.
   */
  get screenStats(): ContinuousBatcher['screenStats'] {
    return this.batcher.screenStats;
  }

  /** Largest batch a decode step has run. */
  get peakBatchRows(): number {
    return this.batcher.peakRows;
  }

  /** Most bytes of KV one run of the batch has produced. */
  get peakBatchKvBytes(): number {
    return this.batcher.peakKvBytes;
  }

  async dispose(): Promise<void> {
    this.screen?.data.rows.close();
    await this.session.release();
  }

  /** Bytes one token of KV adds per row, as the live tensors will show it. */
  get bpt(): number {
    return this.spec.bpt;
  }

  /** Runs one generation to its end. Throws KvdeskError on engine failure. */
  async generate(job: GenerationJob, hooks: GenerationHooks): Promise<GenerationOutcome> {
    const outcome = await this.generateRows(job, hooks);
    // A prediction this graph cannot draft from is said to be unused, not quietly dropped.
    if (job.prediction !== undefined && this.lookupUnavailable !== null) {
      return { ...outcome, predictionUnused: { reason: 'lookup_unavailable', detail: this.lookupUnavailable } };
    }
    return outcome;
  }

  private async generateRows(job: GenerationJob, hooks: GenerationHooks): Promise<GenerationOutcome> {
    const runner = this.staticRunner;
    const one = (j: GenerationJob, h: GenerationHooks) => (runner ? runner.submit(j, h) : this.batcher.submit(j, h));
    const length = (job.rows[0] as number[]).length;
    const unpadded = this.padded || job.rows.every((r) => r.length === length);
    if (job.rows.length === 1 || (this.batchable && unpadded && !runner)) return one(job, hooks);
    // Rows take turns on a graph that cannot batch, or cannot pad the shorter ones; each row still reports in its
    // own column.
    const R = job.rows.length;
    const outcomes: GenerationOutcome[] = [];
    let doneKv = 0;
    for (let r = 0; r < R; r++) {
      const outcome = await one(
        // Each row its own random stream, as in a batch (row 0 keeps the seed).
        { ...job, rows: [job.rows[r] as number[]], sampling: { ...job.sampling, seed: rowSeed(job.sampling, r) } },
        {
          onStart: (prefill, reused) => r === 0 && hooks.onStart(prefill * R, reused),
          onPrefill: (done, total, kvBytes) => r === 0 && hooks.onPrefill?.(done, total, doneKv + kvBytes),
          onStep: (ids, kvBytes, logprobs) => {
            const row: number[] = new Array(R).fill(-1);
            row[r] = ids[0] as number;
            let lps: Array<StepLogprob | null> | undefined;
            if (logprobs) {
              lps = new Array(R).fill(null);
              lps[r] = logprobs[0] ?? null;
            }
            hooks.onStep(row, doneKv + kvBytes, lps);
          },
          stopRequested: hooks.stopRequested,
          countRun: hooks.countRun,
        },
      );
      outcomes.push(outcome);
      doneKv += outcome.kvBytes;
      if (outcome.finishReason === 'stop' || outcome.finishReason === 'cancelled') break;
    }
    const last = outcomes[outcomes.length - 1] as GenerationOutcome;
    return {
      finishReason: last.finishReason,
      rowFinishReasons: job.rows.map((_, r) => outcomes[r]?.finishReason ?? last.finishReason),
      kvBytes: doneKv,
      generatedTokens: Math.max(...outcomes.map((o) => o.generatedTokens)),
      sessionTokens: 0,
    };
  }
}
