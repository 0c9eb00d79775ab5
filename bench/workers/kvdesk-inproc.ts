/**
 * Diagnostic contender (bench/profile.ts): kvdesk's own decode loop
 * (LoadedDecoder → ContinuousBatcher → Sampler) called directly in one process,
 * without the host, the scheduler or IPC. Comparing it with the raw loop and
 * with RunnerService splits kvdesk's overhead into engine loop vs host + IPC.
 */
import { LoadedDecoder } from '../../src/main/engine/decoder';
import { loadModelSpec } from '../../src/main/packages';
import { decoderSample } from '../lib/decoder-sample';
import { takeRunTotals } from '../lib/run-timer';
import { rss, runWorker, send } from '../lib/worker-main';
import type { GenerationSample, WorkerCommand } from '../lib/worker-protocol';

let decoder: LoadedDecoder | null = null;

async function sampleOf(
  promptIds: number[],
  maxNew: number,
  eosTokenIds: number[],
  memoryEvery = 0,
): Promise<GenerationSample> {
  if (!decoder) throw new Error('no model loaded');
  return decoderSample(decoder, promptIds, maxNew, { eosTokenIds, memoryEvery, rss });
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
          ...(await sampleOf(cmd.promptIds, cmd.maxNewTokens, cmd.eosTokenIds, cmd.memoryEvery)),
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
