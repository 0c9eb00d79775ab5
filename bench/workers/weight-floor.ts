/**
 * The weight-streaming floor of a decode step on this machine: how fast
 * onnxruntime-node's matrix products read weights when a run is nothing else.
 * A batch-1 decode step multiplies one row by every weight matrix once, so it
 * cannot take less than (weight bytes ÷ this bandwidth). Forked by
 * bench/sections/floor.ts with the engine's environment (huge pages):
 * `load` creates the session and warms it up, `measure` times runs; the
 * process stays until its parent disconnects (the noise guard counts live
 * descendants as the bench's own CPU time, not exited ones).
 */
import { type InferenceSession, ort, type Tensor } from '../lib/ort';

type FloorCommand = { type: 'load'; modelPath: string; threads: number } | { type: 'measure'; runs: number };

let session: InferenceSession | null = null;
let feeds: Record<string, Tensor> = {};

async function handle(cmd: FloorCommand): Promise<unknown> {
  if (cmd.type === 'load') {
    session = await ort.InferenceSession.create(cmd.modelPath, {
      intraOpNumThreads: cmd.threads,
      graphOptimizationLevel: 'all',
    });
    const meta = session.inputMetadata[0];
    const width = meta?.isTensor ? (meta.shape[1] as number) : 0;
    feeds = {
      [session.inputNames[0] as string]: new ort.Tensor('float32', new Float32Array(width).fill(1), [1, width]),
    };
    for (let i = 0; i < 3; i++) await session.run(feeds);
    return { type: 'loaded' };
  }
  if (!session) throw new Error('weight floor: measure before load');
  const ms: number[] = [];
  for (let i = 0; i < cmd.runs; i++) {
    const t0 = performance.now();
    await session.run(feeds);
    ms.push(performance.now() - t0);
  }
  return { type: 'measured', ms };
}

process.on('message', (msg) => {
  handle(msg as FloorCommand).then(
    (reply) => process.send?.(reply),
    (err: unknown) => process.send?.({ type: 'error', message: err instanceof Error ? err.message : String(err) }),
  );
});
process.on('disconnect', () => process.exit(0));
