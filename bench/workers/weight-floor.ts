/**
 * The weight-streaming floor of a decode step on this machine: how fast
 * onnxruntime-node's matrix products read weights when a run is nothing else.
 * A batch-1 decode step multiplies one row by every weight matrix once, so it
 * cannot take less than (weight bytes ÷ this bandwidth). Driven by
 * bench/sections/floor.ts through WorkerClient, with the engine's environment
 * (huge pages): `load` creates the session of the folder's model.onnx and warms
 * it up, `floor` times runs. Also times a shape's body products alone
 * (bench/sections/floor.ts), whose graph has one input per row width.
 */
import path from 'node:path';
import { type InferenceSession, ort, type Tensor } from '../lib/ort';
import { runWorker, send } from '../lib/worker-main';
import type { WorkerCommand } from '../lib/worker-protocol';

let session: InferenceSession | null = null;
let feeds: Record<string, Tensor> = {};

async function handle(cmd: WorkerCommand): Promise<void> {
  switch (cmd.type) {
    case 'load': {
      const started = performance.now();
      session = await ort.InferenceSession.create(path.join(cmd.modelDir, 'model.onnx'), {
        ...(cmd.threads !== null ? { intraOpNumThreads: cmd.threads } : {}),
        graphOptimizationLevel: 'all',
      });
      // Every input is one row [1, width] (the products alone have one per width): filled with ones.
      feeds = {};
      session.inputMetadata.forEach((meta, i) => {
        const width = meta.isTensor ? (meta.shape[1] as number) : 0;
        feeds[session?.inputNames[i] as string] = new ort.Tensor('float32', new Float32Array(width).fill(1), [
          1,
          width,
        ]);
      });
      for (let i = 0; i < 3; i++) await session.run(feeds);
      send({ type: 'loaded', loadMs: performance.now() - started, detail: 'matrix chain' });
      return;
    }
    case 'floor': {
      if (!session) throw new Error('weight floor: measure before load');
      const ms: number[] = [];
      for (let i = 0; i < cmd.runs; i++) {
        const t0 = performance.now();
        await session.run(feeds);
        ms.push(performance.now() - t0);
      }
      send({ type: 'floor', ms });
      return;
    }
    case 'exit':
      await session?.release();
      process.exit(0);
  }
}

runWorker(handle, false);
