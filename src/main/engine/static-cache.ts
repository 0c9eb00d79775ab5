/**
 * Generation on a static-cache graph (onnx-genai `static_cache`): the graph
 * takes each layer's key and value buffers at their full capacity, writes the
 * positions it computes into them at `write_indices` (TensorScatter), and reads
 * `kv_sequence_length` positions of them back. The engine allocates a
 * sequence's buffers once, feeds them, and binds the same tensors as the
 * graph's cache outputs in `run`'s fetches, so every run's update lands in the
 * buffers it came from: nothing is concatenated, padded or trimmed, and a
 * session turn keeps its buffers and overwrites them from the first position
 * its new prompt differs. Positions past `kv_sequence_length` are never read,
 * so stale ones need no clearing. (Through onnxruntime-node the update is not
 * in place: TensorScatter copies the whole cache into the bound output, which
 * never aliases its input, and every output comes back as one more fresh copy;
 * bench/static-cache.ts measures what that costs.)
 *
 * One sequence per run: a request's rows, and concurrent requests, take turns
 * run by run (each awaits its own runs; onnxruntime runs them one at a time).
 */
import * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';
import { type ModelSpec, type StaticCacheSpec, staticPositions } from '../../shared/model-spec';
import type { GenerationHooks, GenerationJob, GenerationOutcome } from './decoder';
import { generationFailed, idTensor } from './feeds';
import { constraintFor } from './json-constraint';
import { kvArray } from './kv-cache';
import { logitsRows } from './logits';
import { commonPrefix } from './prefix';
import type { FinishReason } from './protocol';
import { logprobsOf, Sampler } from './sampling';

export type RunWithFetches = (
  feeds: Record<string, ort.Tensor>,
  fetches: Record<string, ort.Tensor | null>,
) => Promise<ort.InferenceSession.OnnxValueMapType>;

/** The dims of one cache buffer for one sequence: the declared shape with its batch axis set to 1. */
function staticCacheDims(cache: StaticCacheSpec): number[] {
  return cache.shape.map((d, axis) => {
    if (axis === 0) return 1;
    if (typeof d !== 'number') {
      throw new KvdeskError(
        'MODEL_LOAD_FAILED',
        `static cache input ${cache.keyCacheInputs[0]} has a symbolic axis ${axis} (${d}); only its batch axis may be symbolic`,
      );
    }
    return d;
  });
}

/** One zeroed cache buffer for `rows` sequences. */
function zeroedBuffer(cache: StaticCacheSpec, rows: number): ort.Tensor {
  const dims = staticCacheDims(cache);
  dims[0] = rows;
  const length = dims.reduce((a, b) => a * b, 1);
  return new ort.Tensor(cache.dtype === 'float16' ? 'float16' : 'float32', kvArray(cache.dtype, length), dims);
}

/** Zeroed cache buffers for one sequence, keyed by graph input name. */
export function newStaticCache(cache: StaticCacheSpec): Map<string, ort.Tensor> {
  return new Map([...cache.keyCacheInputs, ...cache.valueCacheInputs].map((name) => [name, zeroedBuffer(cache, 1)]));
}

/** A [rows] control input (write index or sequence length) holding `value` for every row. */
function controlTensor(name: string, dtype: 'int32' | 'int64', rows: number, value: number): ort.Tensor {
  return idTensor({ name, dtype, shape: ['batch'] }, Array(rows).fill(value), [rows]);
}

/**
 * Feeds and fetches of one run over positions [from, from + ids.length) of one
 * sequence whose buffers are `buffers`; the cache outputs are bound to the
 * same tensors as the cache inputs.
 */
export function staticRunIo(
  spec: ModelSpec,
  cache: StaticCacheSpec,
  buffers: Map<string, ort.Tensor>,
  ids: number[],
  from: number,
): { feeds: Record<string, ort.Tensor>; fetches: Record<string, ort.Tensor | null> } {
  const ports = spec.ports;
  const n = ids.length;
  const total = from + n;
  const feeds: Record<string, ort.Tensor> = {};
  feeds[ports.inputIds.name] = idTensor(ports.inputIds, ids, [1, n]);
  if (ports.attentionMask)
    feeds[ports.attentionMask.name] = idTensor(ports.attentionMask, Array(total).fill(1), [1, total]);
  if (ports.positionIds) {
    feeds[ports.positionIds.name] = idTensor(
      ports.positionIds,
      ids.map((_, i) => from + i),
      [1, n],
    );
  }
  feeds[cache.writeIndicesInput] = controlTensor(cache.writeIndicesInput, cache.writeIndicesDtype, 1, from);
  feeds[cache.kvSequenceLengthInput] = controlTensor(
    cache.kvSequenceLengthInput,
    cache.kvSequenceLengthDtype,
    1,
    total,
  );
  const fetches: Record<string, ort.Tensor | null> = { [ports.logits.name]: null };
  const pairs: Array<[string[], string[]]> = [
    [cache.keyCacheInputs, cache.keyCacheOutputs],
    [cache.valueCacheInputs, cache.valueCacheOutputs],
  ];
  for (const [inputs, outputs] of pairs) {
    inputs.forEach((input, i) => {
      const buffer = buffers.get(input);
      if (!buffer) throw new KvdeskError('INTERNAL', `static cache buffer ${input} is missing`);
      feeds[input] = buffer;
      fetches[outputs[i] as string] = buffer;
    });
  }
  return { feeds, fetches };
}

/**
 * Cache and control feeds of a load-time probe: `rows` sequences at positions
 * [from, total), over the cache outputs of the previous run (`past`) or fresh
 * zeroed buffers.
 */
export function staticProbeFeeds(
  cache: StaticCacheSpec,
  rows: number,
  from: number,
  total: number,
  past?: ort.InferenceSession.OnnxValueMapType,
): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  const inputs = [...cache.keyCacheInputs, ...cache.valueCacheInputs];
  const outputs = [...cache.keyCacheOutputs, ...cache.valueCacheOutputs];
  inputs.forEach((input, i) => {
    const previous = past?.[outputs[i] as string] as ort.Tensor | undefined;
    feeds[input] = previous ?? zeroedBuffer(cache, rows);
  });
  feeds[cache.writeIndicesInput] = controlTensor(cache.writeIndicesInput, cache.writeIndicesDtype, rows, from);
  feeds[cache.kvSequenceLengthInput] = controlTensor(
    cache.kvSequenceLengthInput,
    cache.kvSequenceLengthDtype,
    rows,
    total,
  );
  return feeds;
}

/** Bytes the buffers hold. */
function buffersBytes(buffers: Map<string, ort.Tensor>): number {
  let total = 0;
  for (const t of buffers.values()) total += (t.data as Float32Array | Uint16Array).byteLength;
  return total;
}

/** Runs generations, one row at a time, on a graph with a static cache. */
export class StaticCacheRunner {
  readonly capacity: number;
  /** Positions a sequence may reach: the capacity, or the package's shorter context. */
  private readonly limit: number;
  /** Bytes of one sequence's buffers: capacity × bpt. */
  readonly sequenceBytes: number;

  constructor(
    private readonly spec: ModelSpec,
    private readonly cache: StaticCacheSpec,
    private readonly run: RunWithFetches,
    /** Prompt positions one prefill run computes at most. */
    private readonly chunkTokens: number,
  ) {
    if (!Number.isInteger(chunkTokens) || chunkTokens < 1) {
      throw new KvdeskError('INTERNAL', `prefill chunk must be a positive whole number of tokens, got ${chunkTokens}`);
    }
    // The package reader refuses a cache whose sequence axis is not fixed, so this is its declared capacity.
    this.capacity = staticPositions(spec) as number;
    this.limit = Math.min(this.capacity, spec.contextLength);
    this.sequenceBytes = this.capacity * spec.bpt;
  }

  private async runCounted(
    hooks: GenerationHooks,
    buffers: Map<string, ort.Tensor>,
    ids: number[],
    from: number,
  ): Promise<ort.Tensor> {
    const { feeds, fetches } = staticRunIo(this.spec, this.cache, buffers, ids, from);
    hooks.countRun();
    let out: ort.InferenceSession.OnnxValueMapType;
    try {
      out = await this.run(feeds, fetches);
    } catch (err) {
      throw generationFailed(this.spec, err, from, from + ids.length - 1);
    }
    const logits = out[this.spec.ports.logits.name];
    if (!logits) throw new KvdeskError('ENGINE_FAILED', `the graph produced no ${this.spec.ports.logits.name} output`);
    return logits as ort.Tensor;
  }

  /** The buffers of a session turn when they can be reused, with how many positions of them hold its prompt. */
  private reusable(job: GenerationJob, row: number[]): { buffers: Map<string, ort.Tensor>; reused: number } | null {
    const session = job.session;
    if (!session || session.tokens.length === 0) return null;
    const names = [...this.cache.keyCacheInputs, ...this.cache.valueCacheInputs];
    if (!names.every((n) => session.past.has(n))) return null;
    const reused = Math.min(commonPrefix(session.tokens, row), row.length - 1);
    return reused > 0 ? { buffers: session.past, reused } : null;
  }

  /** Runs one generation of one row to its end. */
  async submit(job: GenerationJob, hooks: GenerationHooks): Promise<GenerationOutcome> {
    if (job.rows.length !== 1) {
      throw new KvdeskError('INTERNAL', 'a static-cache generation runs one row; the decoder splits the rows');
    }
    const row = job.rows[0] as number[];
    if (row.length < 1) throw new KvdeskError('BAD_REQUEST', 'a generation needs at least one prompt token');
    if (row.length > this.limit) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `the prompt has ${row.length} tokens but ${this.spec.displayName} holds ${this.limit} positions; shorten the prompt`,
      );
    }
    const session = job.session;
    const reuse = this.reusable(job, row);
    const buffers = reuse?.buffers ?? newStaticCache(this.cache);
    const reused = reuse?.reused ?? 0;
    // Runtime check of bpt, as for growing caches: the buffers must hold exactly capacity × bpt bytes.
    const held = buffersBytes(buffers);
    if (held !== this.sequenceBytes) {
      throw new KvdeskError(
        'ENGINE_FAILED',
        `static cache buffers hold ${held} bytes, but ${this.capacity} positions × bpt ${this.spec.bpt} say ${this.sequenceBytes}: the package's KV geometry does not match its graph`,
      );
    }
    if (session) {
      // From here on the buffers are written from `reused` on: only that prefix of the old turn stays valid.
      session.tokens = session.tokens.slice(0, reused);
      session.past = buffers;
    }
    const fed = row.slice();
    const ended = (reason: FinishReason, generated: number, length: number): GenerationOutcome => {
      if (session) session.tokens = fed.slice(0, length);
      return {
        finishReason: reason,
        rowFinishReasons: [reason],
        kvBytes: this.sequenceBytes,
        generatedTokens: generated,
        sessionTokens: session ? session.tokens.length : 0,
      };
    };
    hooks.onStart(row.length - reused, reused);

    // Prefill in chunks of equal width; between chunks another sequence may take its turn.
    const prompt = row.length - reused;
    const chunks = Math.ceil(prompt / this.chunkTokens);
    const width = Math.ceil(prompt / chunks);
    let logits: ort.Tensor | undefined;
    for (let from = reused; from < row.length; from += width) {
      const stop = hooks.stopRequested();
      if (stop) return ended(stop, 0, from);
      const to = Math.min(row.length, from + width);
      logits = await this.runCounted(hooks, buffers, row.slice(from, to), from);
      if (to < row.length) hooks.onPrefill?.(to, row.length, this.sequenceBytes);
    }
    const sampler = new Sampler(job.sampling, this.spec.vocabSize, row, job.json ? constraintFor(job.json) : undefined);
    let length = row.length;
    let generated = 0;
    for (;;) {
      const rows = logitsRows(logits as ort.Tensor);
      const vocab = Math.min(this.spec.vocabSize, rows.vocab);
      const offset = (rows.seq - 1) * rows.vocab;
      const id = sampler.sample(rows.data, offset, vocab);
      // JSON mode with no token of the vocabulary able to continue: the reply ends unfinished.
      if (id < 0) return ended('length', generated, length);
      generated++;
      const lp = job.logprobs !== undefined ? [logprobsOf(rows.data, offset, vocab, id, job.logprobs)] : undefined;
      hooks.onStep([id], this.sequenceBytes, lp);
      if (job.eosTokenIds.includes(id) || sampler.finished) return ended('eos', generated, length);
      if (generated >= job.maxNewTokens) return ended('length', generated, length);
      if (length + 1 > this.limit) return ended('context', generated, length);
      const stop = hooks.stopRequested();
      if (stop) return ended(stop, generated, length);
      logits = await this.runCounted(hooks, buffers, [id], length);
      fed.push(id);
      length++;
    }
  }
}
