/**
 * bench/profile.ts only: kvdesk's engine core (src/main/engine/engine-core.ts:
 * frame batching, hooks, events) in a worker, with its events sent over IPC to
 * the orchestrator exactly as the engine process sends them to the host — but
 * no host does anything with them. Between `engine` (the decode loop alone) and
 * `runner` (the whole path) this isolates the cost of the engine core + IPC.
 */
import { createEngineCore } from '../../src/main/engine/engine-core';
import type { EngineEvent } from '../../src/main/engine/protocol';
import { loadModelSpec } from '../../src/main/packages';
import { takeRunTotals } from '../lib/run-timer';
import { runWorker, send } from '../lib/worker-main';
import type { GenerationSample, WorkerCommand } from '../lib/worker-protocol';

const waiting = new Map<string, (e: EngineEvent) => void>();
const calls = new Map<number, (e: EngineEvent) => void>();
const core = createEngineCore((event) => {
  // Forward every event over IPC like the engine process does; the orchestrator ignores them.
  send({ type: 'engine', event });
  if (event.type === 'reply') calls.get(event.callId)?.(event);
  else if (event.type !== 'ready') waiting.get(event.requestId)?.(event);
});
let seq = 0;
let modelId = '';

async function generate(promptIds: number[], maxNew: number, eos: number[]): Promise<GenerationSample> {
  const requestId = `r${++seq}`;
  const ids: number[] = [];
  const stamps: number[] = [];
  const started = performance.now();
  await new Promise<void>((resolve, reject) => {
    waiting.set(requestId, (e) => {
      if (e.type === 'tokens') {
        const at = performance.now();
        for (const id of e.ids[0] ?? []) {
          ids.push(id);
          stamps.push(at);
        }
      } else if (e.type === 'done') resolve();
      else if (e.type === 'failed') reject(new Error(e.error.message));
    });
    core.handle({
      type: 'generate',
      requestId,
      grantToken: 'bench',
      modelId,
      rows: [promptIds],
      maxNewTokens: maxNew,
      sampling: { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 },
      eosTokenIds: eos,
    });
  });
  waiting.delete(requestId);
  const n = ids.length;
  const first = stamps[0] ?? started;
  const last = stamps[n - 1] ?? started;
  // Frames carry the tokens since the last frame: time from the first frame to the last, tokens after the first frame.
  const firstFrame = stamps.filter((t) => t === first).length;
  return {
    ids,
    ttftMs: first - started,
    decodeTokensPerSecond: n > firstFrame && last > first ? ((n - firstFrame) * 1000) / (last - first) : 0,
    totalMs: last - started,
  };
}

async function handle(cmd: WorkerCommand): Promise<void> {
  switch (cmd.type) {
    case 'load': {
      const t0 = performance.now();
      const spec = await loadModelSpec(cmd.modelDir);
      const threads = cmd.threads ?? 1;
      modelId = spec.id;
      await new Promise<void>((resolve, reject) => {
        calls.set(1, (e) => (e.type === 'reply' && e.ok ? resolve() : reject(new Error('load failed'))));
        core.handle({
          type: 'load',
          callId: 1,
          modelId,
          spec,
          options: { intraOpNumThreads: threads, executionProviders: ['cpu'] },
        });
      });
      send({
        type: 'loaded',
        loadMs: performance.now() - t0,
        detail: `kvdesk engine core in a worker, ${threads} intra-op threads`,
      });
      return;
    }
    case 'generate':
      takeRunTotals();
      send({
        type: 'result',
        sample: { ...(await generate(cmd.promptIds, cmd.maxNewTokens, cmd.eosTokenIds)), ...takeRunTotals() },
      });
      return;
    case 'exit':
      process.exit(0);
  }
}

runWorker(handle);
