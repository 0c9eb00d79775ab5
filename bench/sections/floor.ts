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
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { GraphBuilder, int, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import { uniformTensor } from '../../scripts/model-gen/prng';
import { engineEnvironment } from '../../src/main/host/engine-client';
import { type BenchOptions, log } from '../lib/context';
import type { BenchShape } from '../lib/models';
import { median } from '../lib/stats';
import { weightMatrices } from '../lib/weight-matrices';
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

/** ms of `runs` runs of a folder's model.onnx in a fresh worker with the engine's environment and threads. */
async function timeRuns(opts: BenchOptions, name: string, modelPath: string, runs: number): Promise<number[]> {
  // The engine's environment (huge pages, malloc settings), as kvdesk's host gives its engine process.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(engineEnvironment(process.env, undefined))) if (v !== undefined) env[k] = v;
  const worker = new WorkerClient(name, 'workers/weight-floor.ts', env);
  try {
    await worker.load(path.dirname(modelPath), opts.threads);
    return await opts.guard.sample(name, () => worker.floor(runs));
  } finally {
    await worker.close();
  }
}

export async function runFloor(opts: BenchOptions): Promise<FloorResult> {
  const modelPath = ensureFloorModel();
  const runs = opts.quick ? 10 : 30;
  const ms = await timeRuns(opts, 'weight floor', modelPath, runs);
  const gbPerS = ms.map((m) => FLOOR_WEIGHT_BYTES / (m / 1000) / 1e9);
  const result = { gbPerS: median(gbPerS), runs: gbPerS };
  log(
    `  weight floor: onnxruntime MatMul reads ${result.gbPerS.toFixed(1)} GB/s (median of ${runs} runs over ${FLOOR_WEIGHT_BYTES / 2 ** 20} MiB)`,
  );
  return result;
}

/** A shape's body products alone: its weight matrices but the LM head, each multiplying one row. */
export interface ProductsResult {
  matrices: number;
  bytes: number;
  /** Median ms of one run of them all. */
  ms: number;
}

/**
 * bench/models/<shape>-products/model.onnx (git-ignored, rewritten when the shape's matrices change): one MatMul
 * per weight matrix of the shape's graph but the LM head (the matrices with a side as long as the vocabulary),
 * with random weights of the same dims, in the graph's order, each fed the latest product of its width (the
 * graph's input of that width for the first) so they run one after another as a decode step's do; the products
 * nothing reads are concatenated per width into the graph's few outputs. Nothing else: no norms, attention,
 * rotary or shape arithmetic — what a decode step of this graph costs in onnxruntime if those cost nothing.
 */
function ensureProductsModel(
  shape: BenchShape,
  shapeModel: string,
  vocab: number,
): { file: string; bytes: number; matrices: number } {
  const dims = weightMatrices(shapeModel)
    .map((m) => m.dims)
    .filter(([k, n]) => k !== vocab && n !== vocab);
  const bytes = dims.reduce((sum, [k, n]) => sum + k * n * 4, 0);
  const file = path.resolve(__dirname, '..', 'models', `${shape}-products`, 'model.onnx');
  const stampFile = path.join(path.dirname(file), 'matrices.json');
  const stamp = JSON.stringify(dims);
  if (existsSync(file) && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) {
    return { file, bytes, matrices: dims.length };
  }
  log(
    `  writing ${shape}'s products alone (${dims.length} matrices, ${(bytes / 2 ** 20).toFixed(0)} MiB) to ${path.relative(process.cwd(), file)}`,
  );
  mkdirSync(path.dirname(file), { recursive: true });
  const b = new GraphBuilder(`${shape}-products`);
  const latest = new Map<number, string>();
  const inputs = new Map<number, string>();
  const unread = new Set<string>();
  const widthOf = new Map<string, number>();
  const input = (k: number): string => {
    const known = inputs.get(k);
    if (known !== undefined) return known;
    const name = b.input(`x${k}`, 'float32', [1, k]);
    inputs.set(k, name);
    return name;
  };
  dims.forEach(([k, n], i) => {
    const x = latest.get(k) ?? input(k);
    unread.delete(x);
    const w = b.weight(`w${i}`, [k, n], () => uniformTensor(k * n, 1 + i, 1 / Math.sqrt(k)));
    const y = b.op('MatMul', [x, w]);
    latest.set(n, y);
    unread.add(y);
    widthOf.set(y, n);
  });
  const byWidth = new Map<number, string[]>();
  for (const y of unread) {
    const n = widthOf.get(y) as number;
    byWidth.set(n, [...(byWidth.get(n) ?? []), y]);
  }
  for (const [n, ys] of byWidth) {
    const name = `y${n}`;
    if (ys.length === 1) b.op('Identity', ys, {}, name);
    else b.op('Concat', ys, { axis: int(1) }, name);
    b.output(name, 'float32', [1, n * ys.length]);
  }
  writeOnnxModel(file, b, { producerName: 'kvdesk-bench', producerVersion: '1', opsetVersion: 17, irVersion: 8 });
  writeFileSync(stampFile, stamp);
  return { file, bytes, matrices: dims.length };
}

export async function runProducts(
  opts: BenchOptions,
  shape: BenchShape,
  shapeModel: string,
  vocab: number,
): Promise<ProductsResult> {
  const model = ensureProductsModel(shape, shapeModel, vocab);
  const ms = median(await timeRuns(opts, `${shape} products`, model.file, opts.quick ? 10 : 30));
  log(
    `  ${shape}: its ${model.matrices} body matrices alone (${(model.bytes / 1e6).toFixed(0)} MB) take ${ms.toFixed(2)} ms a run (${(model.bytes / (ms * 1e6)).toFixed(1)} GB/s)`,
  );
  return { matrices: model.matrices, bytes: model.bytes, ms };
}
