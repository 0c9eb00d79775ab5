/**
 * Opt-in instrumentation for bench/profile.ts: wraps InferenceSession.prototype.run
 * of the onnxruntime-node copy a contender uses, so the time inside run can be
 * told apart from the time the decode loop spends around it.
 */
import { ort } from './ort';

const totals = { ms: 0, runs: 0, firstMs: 0 };
let installed = false;

/** Installs the wrapper once when $KVDESK_BENCH_RUN_TIMING is set. */
export function installRunTimer(): void {
  if (installed || !process.env.KVDESK_BENCH_RUN_TIMING) return;
  installed = true;
  const proto = (ort.InferenceSession as unknown as { prototype: { run: (...args: unknown[]) => Promise<unknown> } })
    .prototype;
  const original = proto.run;
  proto.run = async function (this: unknown, ...args: unknown[]) {
    const t = performance.now();
    try {
      return await original.apply(this, args);
    } finally {
      const ms = performance.now() - t;
      if (totals.runs === 0) totals.firstMs = ms;
      totals.ms += ms;
      totals.runs++;
    }
  };
}

/** Returns and resets the totals since the last call (undefined fields when not installed). */
export function takeRunTotals(): { runMs?: number; runs?: number; prefillRunMs?: number } {
  if (!installed) return {};
  const out = { runMs: totals.ms, runs: totals.runs, prefillRunMs: totals.firstMs };
  totals.ms = 0;
  totals.runs = 0;
  totals.firstMs = 0;
  return out;
}
