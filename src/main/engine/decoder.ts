/**
 * A loaded decoder graph and its generation loop (prefill, then one decode step
 * per token, feeding present KV back as past). Runs inside the engine process.
 */
import * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';
import type { GraphPort, KvTensorSpec, ModelSpec } from '../../shared/model-spec';
import { emptyPast, tensorsBytes, truncateSeq } from './kv-cache';
import type { EngineSessionOptions, FinishReason, SamplingParams } from './protocol';
import { Sampler } from './sampling';

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
  /** Present for a session turn: its KV is reused where the prompt shares its prefix, and updated at the end. */
  session?: SessionKv;
}

/** Callbacks of the decode loop. */
export interface GenerationHooks {
  /** Called once before the first run, with how many prompt tokens are computed vs reused. */
  onStart(prefillTokens: number, reusedTokens: number): void;
  /** Called after every step with the new id of each row (-1 for a row that already ended). */
  onStep(ids: number[], kvBytes: number): void;
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
}

function idTensor(port: GraphPort, values: number[], dims: number[]): ort.Tensor {
  if (port.dtype === 'int64') return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
  if (port.dtype === 'int32') return new ort.Tensor('int32', Int32Array.from(values), dims);
  throw new KvdeskError(
    'MODEL_LOAD_FAILED',
    `graph input ${port.name} has type ${port.dtype}; kvdesk feeds token ids, masks and positions as int32 or int64`,
  );
}

function commonPrefix(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** A decoder session plus the spec that says how to bind it. */
export class LoadedDecoder {
  /**
   * Whether the graph really runs with batch > 1. Some exports declare a
   * symbolic batch but fix it internally; their rows take turns instead.
   */
  batchable = true;

  private constructor(
    readonly spec: ModelSpec,
    private readonly session: ort.InferenceSession,
    private readonly kvTensors: KvTensorSpec[],
  ) {}

  /** One tiny two-row run at load time tells whether batching works for this graph. */
  private async probeBatch(): Promise<void> {
    const ports = this.spec.ports;
    const feeds: Record<string, ort.Tensor> = {};
    const first = this.spec.bosTokenId ?? this.spec.eosTokenIds[0] ?? 0;
    feeds[ports.inputIds.name] = idTensor(ports.inputIds, [first, first], [2, 1]);
    if (ports.attentionMask) feeds[ports.attentionMask.name] = idTensor(ports.attentionMask, [1, 1], [2, 1]);
    if (ports.positionIds) feeds[ports.positionIds.name] = idTensor(ports.positionIds, [0, 0], [2, 1]);
    for (const t of this.kvTensors) feeds[t.past] = emptyPast(t, 2);
    try {
      await this.session.run(feeds);
    } catch {
      this.batchable = false;
    }
  }

  /** Creates the onnxruntime session; a graph onnxruntime cannot run is a MODEL_LOAD_FAILED error. */
  static async load(spec: ModelSpec, options: EngineSessionOptions): Promise<LoadedDecoder> {
    if (spec.kv.kind === 'static') {
      throw new KvdeskError(
        'MODEL_LOAD_FAILED',
        `${spec.displayName} uses a static (in-place) KV cache; this kvdesk engine runs past/present KV graphs only`,
        { file: spec.graphPath },
      );
    }
    let session: ort.InferenceSession;
    try {
      session = await ort.InferenceSession.create(spec.graphPath, {
        intraOpNumThreads: options.intraOpNumThreads,
        interOpNumThreads: 1,
        executionProviders: options.executionProviders,
        graphOptimizationLevel: 'all',
        // Failures reach the person as KvdeskErrors with onnxruntime's message; its own log would repeat them.
        logSeverityLevel: 4,
      });
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      throw new KvdeskError(
        'MODEL_LOAD_FAILED',
        `onnxruntime could not load ${spec.graphPath}: ${reason}. The graph may use operators this onnxruntime build lacks, or the file is damaged; re-export it or pick another variant.`,
        { file: spec.graphPath },
      );
    }
    const decoder = new LoadedDecoder(spec, session, spec.kv.kind === 'dynamic' ? spec.kv.tensors : []);
    await decoder.probeBatch();
    return decoder;
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }

  /** Bytes one token of KV adds per row, as the live tensors will show it. */
  get bpt(): number {
    return this.spec.bpt;
  }

  /** Runs one generation to its end. Throws KvdeskError on engine failure. */
  async generate(job: GenerationJob, hooks: GenerationHooks): Promise<GenerationOutcome> {
    if (this.batchable || job.rows.length === 1) return this.generateBatch(job, hooks);
    // Rows take turns on a graph that cannot batch; each row still reports in its own column.
    const R = job.rows.length;
    const outcomes: GenerationOutcome[] = [];
    let doneKv = 0;
    for (let r = 0; r < R; r++) {
      const outcome = await this.generateBatch(
        { ...job, rows: [job.rows[r] as number[]] },
        {
          onStart: (prefill, reused) => r === 0 && hooks.onStart(prefill * R, reused),
          onStep: (ids, kvBytes) => {
            const row: number[] = new Array(R).fill(-1);
            row[r] = ids[0] as number;
            hooks.onStep(row, doneKv + kvBytes);
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

  private async generateBatch(job: GenerationJob, hooks: GenerationHooks): Promise<GenerationOutcome> {
    const spec = this.spec;
    const ports = spec.ports;
    const R = job.rows.length;
    if (R < 1) throw new KvdeskError('BAD_REQUEST', 'a generation needs at least one row');
    if (job.session && R !== 1) throw new KvdeskError('BAD_REQUEST', 'a session turn has exactly one row');

    // Reuse the session's KV for the longest shared prefix, leaving at least one token to compute logits from.
    let past = new Map<string, ort.Tensor>();
    let pastLen = 0;
    let reused = 0;
    const session = job.session;
    if (session && session.tokens.length > 0) {
      const row = job.rows[0] as number[];
      reused = Math.min(commonPrefix(session.tokens, row), row.length - 1);
      if (reused > 0) {
        for (const t of this.kvTensors) {
          const held = session.past.get(t.past);
          if (!held) throw new KvdeskError('INTERNAL', `session KV lacks ${t.past}`);
          past.set(t.past, truncateSeq(t, held, reused));
        }
        pastLen = reused;
      }
    }
    if (pastLen === 0) {
      reused = 0;
      for (const t of this.kvTensors) past.set(t.past, emptyPast(t, R));
    }

    const newRows = job.rows.map((r) => r.slice(reused));
    const P = Math.max(...newRows.map((r) => r.length));
    const pad = spec.padTokenId ?? spec.eosTokenIds[0] ?? 0;
    // Left padding: real tokens end at the same column, so every row's next token is at the last position.
    const ids: number[] = [];
    const mask: number[] = [];
    const positions: number[] = [];
    const nextPos: number[] = [];
    const rowMask: number[][] = [];
    for (const row of newRows) {
      const padN = P - row.length;
      const m: number[] = new Array(pastLen).fill(1);
      for (let i = 0; i < P; i++) {
        const real = i >= padN;
        ids.push(real ? (row[i - padN] as number) : pad);
        m.push(real ? 1 : 0);
        positions.push(real ? pastLen + i - padN : 0);
      }
      rowMask.push(m);
      nextPos.push(pastLen + row.length);
    }
    for (const m of rowMask) mask.push(...m);
    hooks.onStart(R * P, reused);

    const vocab = spec.vocabSize;
    const samplers = job.rows.map(() => new Sampler(job.sampling, vocab));
    const seen = job.sampling.repetitionPenalty !== 1 ? job.rows.map((r) => new Set(r)) : undefined;
    const rowDone: Array<FinishReason | null> = job.rows.map(() => null);
    const eos = new Set(job.eosTokenIds);
    const lastIds: number[] = new Array(R).fill(pad);
    let generated = 0;
    let seqLen = pastLen + P;
    let stepIds = ids;
    let stepLen = P;
    let finishReason: FinishReason | null = null;
    let kvBytes = 0;
    // Positions the KV tensors hold (grows only when a run completes).
    let kvLen = pastLen;
    // Tokens the KV encodes for a session: the prompt plus every generated token fed back in.
    const fed = job.rows[0]?.slice() ?? [];

    for (;;) {
      const stop = hooks.stopRequested();
      if (stop) {
        finishReason = stop;
        break;
      }
      const feeds: Record<string, ort.Tensor> = {};
      feeds[ports.inputIds.name] = idTensor(ports.inputIds, stepIds, [R, stepLen]);
      if (ports.attentionMask) feeds[ports.attentionMask.name] = idTensor(ports.attentionMask, mask, [R, seqLen]);
      if (ports.positionIds) feeds[ports.positionIds.name] = idTensor(ports.positionIds, positions, [R, stepLen]);
      for (const t of this.kvTensors) feeds[t.past] = past.get(t.past) as ort.Tensor;

      let out: ort.InferenceSession.OnnxValueMapType;
      hooks.countRun();
      try {
        out = await this.session.run(feeds);
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        throw new KvdeskError('ENGINE_FAILED', `onnxruntime failed during generation: ${reason}`);
      }
      const logitsTensor = out[ports.logits.name];
      if (!logitsTensor) throw new KvdeskError('ENGINE_FAILED', `the graph produced no ${ports.logits.name} output`);
      const logits = logitsTensor.data as Float32Array;
      const outSeq = logitsTensor.dims[1] ?? 1;
      const outVocab = logitsTensor.dims[2] ?? vocab;
      const next = new Map<string, ort.Tensor>();
      for (const t of this.kvTensors) {
        const present = out[t.present];
        if (!present) throw new KvdeskError('ENGINE_FAILED', `the graph produced no ${t.present} output`);
        next.set(t.past, present);
      }
      past = next;
      kvLen = seqLen;
      kvBytes = tensorsBytes(past.values());

      const stepOut: number[] = new Array(R).fill(-1);
      for (let r = 0; r < R; r++) {
        if (rowDone[r]) continue;
        const offset = (r * outSeq + (outSeq - 1)) * outVocab;
        const id = (samplers[r] as Sampler).sample(logits, offset, Math.min(vocab, outVocab), seen?.[r]);
        stepOut[r] = id;
        lastIds[r] = id;
        seen?.[r]?.add(id);
        if (eos.has(id)) rowDone[r] = 'eos';
      }
      generated++;
      hooks.onStep(stepOut, kvBytes);

      if (rowDone.every((d) => d !== null)) {
        finishReason = 'eos';
        break;
      }
      if (generated >= job.maxNewTokens) {
        finishReason = 'length';
        break;
      }
      if (seqLen + 1 > spec.contextLength) {
        finishReason = 'context';
        break;
      }
      // Next step: one token per row; rows that ended keep running (their ids are ignored) so the batch shape holds.
      stepIds = lastIds.slice();
      stepLen = 1;
      positions.length = 0;
      const newMask: number[] = [];
      for (let r = 0; r < R; r++) {
        const m = rowMask[r] as number[];
        m.push(1);
        newMask.push(...m);
        positions.push(nextPos[r] as number);
        nextPos[r] = (nextPos[r] as number) + 1;
      }
      mask.length = 0;
      mask.push(...newMask);
      if (R === 1) fed.push(lastIds[0] as number);
      seqLen++;
    }

    const reasons = rowDone.map((d) => d ?? (finishReason as FinishReason));
    if (session) {
      session.past = past;
      // The KV holds every token that went through a run: the prompt and all generated ids but the last.
      session.tokens = fed.slice(0, kvLen);
    }
    return {
      finishReason: finishReason as FinishReason,
      rowFinishReasons: reasons,
      kvBytes,
      generatedTokens: generated,
      sessionTokens: session ? session.tokens.length : 0,
    };
  }
}
