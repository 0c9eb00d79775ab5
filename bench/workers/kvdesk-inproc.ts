/**
 * Diagnostic contender (bench/profile.ts): kvdesk's own decode loop
 * (LoadedDecoder → ContinuousBatcher → Sampler) called directly in one process,
 * without the host, the scheduler or IPC. Comparing it with the raw loop and
 * with RunnerService splits kvdesk's overhead into engine loop vs host + IPC.
 */
import { LoadedDecoder } from '../../src/main/engine/decoder';
import { loadModelSpec } from '../../src/main/packages';
import { takeRunTotals } from '../lib/run-timer';
import { rss, runWorker, send } from '../lib/worker-main';
import type { GenerationSample, WorkerCommand } from '../lib/worker-protocol';

let decoder: LoadedDecoder | null = null;

async function generate(
  promptIds: number[],
  maxNew: number,
  eos: number[],
  memoryEvery = 0,
): Promise<GenerationSample> {
  if (!decoder) throw new Error('no model loaded');
  const ids: number[] = [];
  const stamps: number[] = [];
  const memory: Array<[number, number, number]> = [];
  const started = performance.now();
  await decoder.generate(
    {
      rows: [promptIds],
      maxNewTokens: maxNew,
      sampling: { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 },
      eosTokenIds: eos,
    },
    {
      onStart: () => {},
      onStep: (step) => {
        const id = step[0] as number;
        if (id >= 0) {
          ids.push(id);
          stamps.push(performance.now());
          if (memoryEvery > 0 && ids.length % memoryEvery === 0) {
            (globalThis as { gc?: () => void }).gc?.();
            (globalThis as { gc?: () => void }).gc?.();
            memory.push([promptIds.length + ids.length, rss(), process.memoryUsage().arrayBuffers]);
          }
        }
      },
      stopRequested: () => null,
      countRun: () => {},
    },
  );
  const n = ids.length;
  const first = stamps[0] ?? started;
  const last = stamps[n - 1] ?? started;
  return {
    ids,
    ttftMs: first - started,
    decodeTokensPerSecond: n > 1 ? ((n - 1) * 1000) / (last - first) : 0,
    totalMs: last - started,
    ...(memoryEvery > 0 ? { memory } : {}),
  };
}

async function handle(cmd: WorkerCommand): Promise<void> {
  switch (cmd.type) {
    case 'load': {
      const t0 = performance.now();
      const spec = await loadModelSpec(cmd.modelDir);
      const threads = cmd.threads ?? 1;
      decoder = await LoadedDecoder.load(spec, { intraOpNumThreads: threads, executionProviders: ['cpu'] });
      send({
        type: 'loaded',
        loadMs: performance.now() - t0,
        detail: `kvdesk LoadedDecoder in-process, ${threads} intra-op threads`,
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
    case 'exit':
      await decoder?.dispose();
      process.exit(0);
  }
}

runWorker(handle);
