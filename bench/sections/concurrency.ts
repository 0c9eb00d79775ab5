/**
 * Aggregate tok/s at 1, 2, 4, 8 concurrent streams through RunnerService
 * (maxRunning 8, continuous batching in the engine), and the host's event-loop
 * delay while 8 streams generate: the bench process is the host here, so the
 * histogram covers the scheduler, frame handling and detokenization.
 *
 * Beside it, in the same rounds, the raw onnxruntime loop decodes the same prompts as the rows of one batch (no
 * scheduler, no padding, no frames, no head screen): its 8 rows ÷ 1 row is what batching gives onnxruntime itself
 * on this machine, beside the engine's 8 streams ÷ 1, measured each run rather than assumed. Not a strict ceiling:
 * the engine's screened head skips most of the vocabulary's products at every width.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { RunnerService } from '../../src/main/host/runner-service';
import { type BenchOptions, log, rotate } from '../lib/context';
import { kvdeskGenerate } from '../lib/kvdesk';
import type { PromptSource } from '../lib/prompts';
import { median } from '../lib/stats';
import { WorkerClient } from '../lib/worker-client';

export interface ConcurrencyResult {
  /** streams → aggregate tok/s of every repetition. */
  aggregate: Map<number, number[]>;
  eventLoop: { p50Ms: number; p99Ms: number; maxMs: number; samples: number } | null;
  /** Whether stream 0's greedy ids under batching equal its ids alone (batching must not change a request's tokens). */
  batchedMatchesSolo: boolean | null;
  batchedMismatch: string | null;
  /** rows → aggregate tok/s of every repetition of the raw loop's batches (empty map: not measured). */
  rawAggregate: Map<number, number[]>;
  /** Why the raw batches were not measured. */
  rawSkipped: string | null;
}

export async function runConcurrency(
  opts: BenchOptions,
  runner: RunnerService,
  modelId: string,
  prompts: PromptSource,
  modelDir: string,
): Promise<ConcurrencyResult> {
  let rawSkipped: string | null = null;
  const raw = new WorkerClient('raw onnxruntime-node loop (batched)', 'workers/raw-ort.ts');
  try {
    await raw.load(modelDir, opts.threads);
    // Warm-up at full width, as for the engine.
    await raw.generateBatch(
      Array.from({ length: Math.max(...opts.streamCounts) }, (_, k) => prompts.prompt(32, k + 2)),
      4,
    );
    raw.pause();
  } catch (err) {
    rawSkipped = `the raw loop could not run batches: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
    log(`  ${rawSkipped}`);
  }
  try {
    return { ...(await measure(opts, runner, modelId, prompts, rawSkipped === null ? raw : null)), rawSkipped };
  } finally {
    await raw.close().catch(() => {});
  }
}

async function measure(
  opts: BenchOptions,
  runner: RunnerService,
  modelId: string,
  prompts: PromptSource,
  raw: WorkerClient | null,
): Promise<Omit<ConcurrencyResult, 'rawSkipped'>> {
  const aggregate = new Map<number, number[]>(opts.streamCounts.map((s) => [s, []]));
  const rawAggregate = new Map<number, number[]>(raw ? opts.streamCounts.map((s) => [s, []]) : []);
  const maxStreams = Math.max(...opts.streamCounts);
  const loops: Array<{ p50Ms: number; p99Ms: number; maxMs: number; samples: number }> = [];
  let solo: number[] | null = null;
  let batched: number[] | null = null;
  // Warm-up at full width: the first batched steps allocate.
  await Promise.all(
    Array.from({ length: maxStreams }, (_, k) =>
      kvdeskGenerate(runner, modelId, prompts.prompt(32, k + 2), 4, { ignoreEos: true }),
    ),
  );
  for (let r = 0; r < opts.reps; r++) {
    for (const streams of rotate(opts.streamCounts, r)) {
      const run = await opts.guard.sample(`${streams} streams, round ${r + 1}`, async () => {
        // A fresh histogram per run: re-enabling one would count the disabled gap as a delay.
        const h = streams === maxStreams ? monitorEventLoopDelay({ resolution: 1 }) : null;
        h?.enable();
        const started = performance.now();
        const traces = await Promise.all(
          Array.from({ length: streams }, (_, k) =>
            // Every stream to its last token, past its end-of-text, as the raw loop's batch runs every row.
            kvdeskGenerate(runner, modelId, prompts.prompt(32, k + 2), opts.streamTokens, { ignoreEos: true }),
          ),
        );
        const wall = performance.now() - started;
        h?.disable();
        const loop =
          h && h.count > 0
            ? { p50Ms: h.percentile(50) / 1e6, p99Ms: h.percentile(99) / 1e6, maxMs: h.max / 1e6, samples: h.count }
            : null;
        return { traces, wall, loop };
      });
      const tokens = run.traces.reduce((n, t) => n + t.sample.ids.length, 0);
      aggregate.get(streams)?.push((tokens * 1000) / run.wall);
      if (run.loop) loops.push(run.loop);
      if (streams === 1 && solo === null) solo = run.traces[0]?.sample.ids ?? null;
      if (streams === maxStreams && batched === null) batched = run.traces[0]?.sample.ids ?? null;
    }
    if (raw) {
      raw.resume();
      for (const rows of rotate(opts.streamCounts, r)) {
        const b = await opts.guard.sample(`raw loop, ${rows} rows in one batch, round ${r + 1}`, () =>
          raw.generateBatch(
            Array.from({ length: rows }, (_, k) => prompts.prompt(32, k + 2)),
            opts.streamTokens,
          ),
        );
        const tokens = b.rows.reduce((n, ids) => n + ids.length, 0);
        rawAggregate.get(rows)?.push((tokens * 1000) / b.totalMs);
      }
      raw.pause();
    }
    log(
      `  concurrency round ${r + 1}/${opts.reps}: ${opts.streamCounts.map((s) => `${s}×: ${aggregate.get(s)?.[r]?.toFixed(1)}`).join(', ')} tok/s aggregate${raw ? `; raw loop by rows ${opts.streamCounts.map((s) => `${s}×: ${rawAggregate.get(s)?.[r]?.toFixed(1)}`).join(', ')}` : ''}`,
    );
  }
  let batchedMatchesSolo: boolean | null = null;
  let batchedMismatch: string | null = null;
  if (solo && batched) {
    const a: number[] = solo;
    const b: number[] = batched;
    const at = a.findIndex((v, i) => b[i] !== v);
    batchedMatchesSolo = at < 0 && a.length === b.length;
    if (!batchedMatchesSolo)
      batchedMismatch = `stream 0 alone vs in a batch of ${maxStreams}: first difference at token ${at < 0 ? Math.min(a.length, b.length) : at}`;
  }
  // Median over the 8-stream runs of each run's percentiles; the max is the worst single delay seen.
  const eventLoop =
    loops.length > 0
      ? {
          p50Ms: median(loops.map((l) => l.p50Ms)),
          p99Ms: median(loops.map((l) => l.p99Ms)),
          maxMs: Math.max(...loops.map((l) => l.maxMs)),
          samples: loops.reduce((n, l) => n + l.samples, 0),
        }
      : null;
  for (const [s, v] of aggregate) log(`  ${s} streams: median ${median(v).toFixed(1)} tok/s`);
  return { aggregate, eventLoop, batchedMatchesSolo, batchedMismatch, rawAggregate };
}
