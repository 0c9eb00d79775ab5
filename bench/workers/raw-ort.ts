/**
 * The practical limit: a minimal greedy decode loop on onnxruntime-node with
 * the same file and the same session options as kvdesk's engine. It does only
 * what any correct loop must do: feed ids, mask, positions and past KV, take the
 * argmax of the last position, feed present KV back as past. Buffers that do
 * not depend on the step (the all-ones mask) are allocated once.
 */
import { type InferenceSession, ort, type Tensor } from '../lib/ort';
import { takeRunTotals } from '../lib/run-timer';
import { generationTimes } from '../lib/stats';
import { rss, runWorker, send } from '../lib/worker-main';
import type { GenerationSample, WorkerCommand } from '../lib/worker-protocol';

interface Ports {
  inputIds: string;
  attentionMask: string | undefined;
  positionIds: string | undefined;
  logits: string;
  /** past input name → present output name, with the empty past tensor's dims. */
  kv: Array<{ past: string; present: string; emptyDims: number[] }>;
}

let session: InferenceSession | null = null;
let ports: Ports | null = null;
/** All-ones mask; a step feeds a view of its first L + 1 entries. */
let ones = new BigInt64Array(0);
const rebuildMask = process.env.KVDESK_BENCH_MASK === 'rebuild';
/** bench/profile.ts: send one IPC message every N tokens, as kvdesk's engine sends token frames to its host. */
const notifyEvery = Number(process.env.KVDESK_BENCH_NOTIFY ?? 0);

function discoverPorts(s: InferenceSession): Ports {
  const meta = s.inputMetadata;
  const kv: Ports['kv'] = [];
  for (const m of meta) {
    if (!m.name.startsWith('past_key_values.')) continue;
    if (!m.isTensor) throw new Error(`${m.name} is not a tensor input`);
    const present = m.name.replace('past_key_values.', 'present.');
    // [batch, kvHeads, past, headDim]: past 0, the rest as declared (the batch is set per run).
    const emptyDims = m.shape.map((d, i) => (i === 0 ? 1 : typeof d === 'number' ? d : 0));
    kv.push({ past: m.name, present, emptyDims });
  }
  const names = new Set(s.inputNames);
  return {
    inputIds: 'input_ids',
    attentionMask: names.has('attention_mask') ? 'attention_mask' : undefined,
    positionIds: names.has('position_ids') ? 'position_ids' : undefined,
    logits: 'logits',
    kv,
  };
}

function onesView(n: number): BigInt64Array {
  if (ones.length < n) {
    ones = new BigInt64Array(Math.max(n, ones.length * 2, 2048));
    ones.fill(1n);
  }
  return ones.subarray(0, n);
}

/** The likeliest next token of a one-row batch. */
function argmaxLast(t: Tensor): number {
  return argmaxRows(t)[0] as number;
}

async function generate(
  promptIds: number[],
  maxNew: number,
  eos: number[],
  memoryEvery = 0,
): Promise<GenerationSample> {
  if (!session || !ports) throw new Error('no model loaded');
  const p = ports;
  const started = performance.now();
  const P = promptIds.length;
  const feeds: Record<string, Tensor> = {};
  feeds[p.inputIds] = new ort.Tensor(
    'int64',
    BigInt64Array.from(promptIds, (v) => BigInt(v)),
    [1, P],
  );
  if (p.attentionMask) feeds[p.attentionMask] = new ort.Tensor('int64', onesView(P), [1, P]);
  if (p.positionIds) {
    feeds[p.positionIds] = new ort.Tensor(
      'int64',
      BigInt64Array.from({ length: P }, (_, i) => BigInt(i)),
      [1, P],
    );
  }
  for (const k of p.kv) feeds[k.past] = new ort.Tensor('float32', new Float32Array(0), k.emptyDims);
  let out = await session.run(feeds);
  const ids: number[] = [];
  let next = argmaxLast(out[p.logits] as Tensor);
  const firstAt = performance.now();
  let lastAt = firstAt;
  ids.push(next);
  let length = P;
  const memory: Array<[number, number, number]> = [];
  const idBuf = new BigInt64Array(1);
  const posBuf = new BigInt64Array(1);
  while (ids.length < maxNew && !eos.includes(next)) {
    idBuf[0] = BigInt(next);
    posBuf[0] = BigInt(length);
    const step: Record<string, Tensor> = {};
    step[p.inputIds] = new ort.Tensor('int64', idBuf, [1, 1]);
    if (p.attentionMask) {
      // bench/profile.ts: KVDESK_BENCH_MASK=rebuild builds the mask as kvdesk's engine does (number[] → BigInt64Array).
      const mask = rebuildMask
        ? BigInt64Array.from(new Array<number>(length + 1).fill(1), (v) => BigInt(v))
        : onesView(length + 1);
      step[p.attentionMask] = new ort.Tensor('int64', mask, [1, length + 1]);
    }
    if (p.positionIds) step[p.positionIds] = new ort.Tensor('int64', posBuf, [1, 1]);
    for (const k of p.kv) step[k.past] = out[k.present] as Tensor;
    out = await session.run(step);
    length++;
    next = argmaxLast(out[p.logits] as Tensor);
    lastAt = performance.now();
    ids.push(next);
    if (memoryEvery > 0 && ids.length % memoryEvery === 0) {
      // With --expose-gc (KV truth) the sample is taken after a full collection: live memory only.
      (globalThis as { gc?: () => void }).gc?.();
      (globalThis as { gc?: () => void }).gc?.();
      memory.push([length, rss(), process.memoryUsage().arrayBuffers]);
    }
    if (notifyEvery > 0 && ids.length % notifyEvery === 0)
      send({ type: 'engine', event: { ids: ids.slice(-notifyEvery) } });
  }
  return {
    ids,
    ...generationTimes(ids.length, started, firstAt, lastAt),
    ...(memoryEvery > 0 ? { memory } : {}),
  };
}

/** Each row's likeliest next token (the last position's logits of each row). */
function argmaxRows(t: Tensor): number[] {
  const data = t.data as Float32Array;
  const [rows, seq, vocab] = t.dims as [number, number, number];
  const out: number[] = [];
  for (let r = 0; r < rows; r++) {
    const offset = (r * seq + seq - 1) * vocab;
    let best = 0;
    let bestValue = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < vocab; i++) {
      const v = data[offset + i] as number;
      if (v > bestValue) {
        bestValue = v;
        best = i;
      }
    }
    out.push(best);
  }
  return out;
}

/**
 * Batched decoding with nothing around it: prompts of one length run as the rows of one batch (no padding, a mask
 * of ones), then `maxNew - 1` steps of one token per row, every row to the end. What any batched loop must do and
 * no more: the engine's concurrent streams are measured beside it.
 */
async function generateBatch(prompts: number[][], maxNew: number): Promise<{ rows: number[][]; totalMs: number }> {
  if (!session || !ports) throw new Error('no model loaded');
  const p = ports;
  const B = prompts.length;
  const P = prompts[0]?.length ?? 0;
  if (B === 0 || prompts.some((q) => q.length !== P)) throw new Error('a batch needs prompts of one length');
  const started = performance.now();
  const feeds: Record<string, Tensor> = {};
  feeds[p.inputIds] = new ort.Tensor(
    'int64',
    BigInt64Array.from(prompts.flat(), (v) => BigInt(v)),
    [B, P],
  );
  if (p.attentionMask) feeds[p.attentionMask] = new ort.Tensor('int64', onesView(B * P), [B, P]);
  if (p.positionIds) {
    const positions = BigInt64Array.from({ length: B * P }, (_, i) => BigInt(i % P));
    feeds[p.positionIds] = new ort.Tensor('int64', positions, [B, P]);
  }
  for (const k of p.kv) {
    const dims = k.emptyDims.slice();
    dims[0] = B;
    feeds[k.past] = new ort.Tensor('float32', new Float32Array(0), dims);
  }
  let out = await session.run(feeds);
  let next = argmaxRows(out[p.logits] as Tensor);
  const rows = next.map((id) => [id]);
  let length = P;
  const idBuf = new BigInt64Array(B);
  const posBuf = new BigInt64Array(B);
  for (let n = 1; n < maxNew; n++) {
    for (let r = 0; r < B; r++) idBuf[r] = BigInt(next[r] as number);
    posBuf.fill(BigInt(length));
    const step: Record<string, Tensor> = {};
    step[p.inputIds] = new ort.Tensor('int64', idBuf, [B, 1]);
    if (p.attentionMask) step[p.attentionMask] = new ort.Tensor('int64', onesView(B * (length + 1)), [B, length + 1]);
    if (p.positionIds) step[p.positionIds] = new ort.Tensor('int64', posBuf, [B, 1]);
    for (const k of p.kv) step[k.past] = out[k.present] as Tensor;
    out = await session.run(step);
    length++;
    next = argmaxRows(out[p.logits] as Tensor);
    for (const [r, id] of next.entries()) rows[r]?.push(id);
  }
  return { rows, totalMs: performance.now() - started };
}

async function handle(cmd: WorkerCommand): Promise<void> {
  switch (cmd.type) {
    case 'load': {
      const t0 = performance.now();
      const threads = cmd.threads ?? 1;
      session = await ort.InferenceSession.create(`${cmd.modelDir}/onnx/model.onnx`, {
        intraOpNumThreads: threads,
        interOpNumThreads: 1,
        executionProviders: ['cpu'],
        graphOptimizationLevel: 'all',
        logSeverityLevel: 3,
        // bench/profile.ts tries session config entries (e.g. intra-op spinning) through this variable.
        ...(process.env.KVDESK_BENCH_ORT_EXTRA
          ? { extra: JSON.parse(process.env.KVDESK_BENCH_ORT_EXTRA) as Record<string, unknown> }
          : {}),
      });
      ports = discoverPorts(session);
      send({
        type: 'loaded',
        loadMs: performance.now() - t0,
        detail: `onnxruntime-node ${ort.env.versions.common}, ${threads} intra-op threads`,
      });
      return;
    }
    case 'generate':
      takeRunTotals();
      send({
        type: 'result',
        sample: {
          ...(await generate(cmd.promptIds, cmd.maxNewTokens, cmd.eosTokenIds, cmd.memoryEvery)),
          ...takeRunTotals(),
        },
      });
      return;
    case 'generateBatch':
      send({ type: 'batchResult', ...(await generateBatch(cmd.prompts, cmd.maxNewTokens)) });
      return;
    case 'exit':
      await session?.release();
      process.exit(0);
  }
}

runWorker(handle);
