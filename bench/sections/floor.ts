/**
 * The weight-streaming floor: onnxruntime-node's matrix products on a model that
 * is nothing but a chain of 32 fp32 matrices of 2048 × 2048 (512 MiB, more than
 * either bench model's weights), one row at a time as in batch-1 decode, in a
 * fresh process with the engine's environment and threads. Weight bytes ÷ that
 * bandwidth is the least time a batch-1 decode step can take on this machine, so
 * the report can say how much of each contender's step is something else.
 *
 * The weights are random and every matrix differs, as a real model's do: on this
 * VM a chain of constant-filled matrices read 45–48 GB/s against 26–28 GB/s for
 * random ones of the same size (something below the guest — page sharing or
 * compression — makes repeated content cheaper), which would put the floor far
 * too low.
 */
import { existsSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { GraphBuilder, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import { uniformTensor } from '../../scripts/model-gen/prng';
import { engineEnvironment } from '../../src/main/host/engine-client';
import { type BenchOptions, log } from '../lib/context';
import { median } from '../lib/stats';
import { WorkerClient } from '../lib/worker-client';

const WIDTH = 2048;
const MATRICES = 32;
export const FLOOR_WEIGHT_BYTES = WIDTH * WIDTH * 4 * MATRICES;

export interface FloorResult {
  /** Median over the timed runs, GB/s of weights read. */
  gbPerS: number;
  runs: number[];
}

/** bench/models/weight-floor/model.onnx (git-ignored, written once): x [1, 2048] → 32 MatMuls with seeded random weights (scaled so values stay finite). */
function ensureFloorModel(): string {
  const file = path.resolve(__dirname, '..', 'models', 'weight-floor', 'model.onnx');
  if (existsSync(file) && statSync(file).size > FLOOR_WEIGHT_BYTES) return file;
  log(
    `  writing the weight-floor model (${FLOOR_WEIGHT_BYTES / 2 ** 20} MiB of random weights) to ${path.relative(process.cwd(), file)}`,
  );
  mkdirSync(path.dirname(file), { recursive: true });
  const b = new GraphBuilder('weight-floor');
  let h = b.input('x', 'float32', [1, WIDTH]);
  for (let i = 0; i < MATRICES; i++) {
    const w = b.weight(`w${i}`, [WIDTH, WIDTH], () => uniformTensor(WIDTH * WIDTH, 1 + i, 1 / Math.sqrt(WIDTH)));
    h = b.op('MatMul', [h, w], {}, i === MATRICES - 1 ? 'y' : undefined);
  }
  b.output('y', 'float32', [1, WIDTH]);
  writeOnnxModel(file, b, { producerName: 'kvdesk-bench', producerVersion: '1', opsetVersion: 17, irVersion: 8 });
  return file;
}

export async function runFloor(opts: BenchOptions): Promise<FloorResult> {
  const modelPath = ensureFloorModel();
  const runs = opts.quick ? 10 : 30;
  // The engine's environment (huge pages, malloc settings), as kvdesk's host gives its engine process.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(engineEnvironment(process.env, undefined))) if (v !== undefined) env[k] = v;
  const worker = new WorkerClient('weight floor', 'workers/weight-floor.ts', env);
  try {
    await worker.load(path.dirname(modelPath), opts.threads);
    const ms = await opts.guard.sample('weight floor', () => worker.floor(runs));
    const gbPerS = ms.map((m) => FLOOR_WEIGHT_BYTES / (m / 1000) / 1e9);
    const result = { gbPerS: median(gbPerS), runs: gbPerS };
    log(
      `  weight floor: onnxruntime MatMul reads ${result.gbPerS.toFixed(1)} GB/s (median of ${runs} runs over ${FLOOR_WEIGHT_BYTES / 2 ** 20} MiB)`,
    );
    return result;
  } finally {
    await worker.close();
  }
}
