/**
 * Decode tok/s and TTFT of kvdesk (RunnerService: scheduler + engine process)
 * against the raw onnxruntime-node loop and transformers.js on the same file,
 * alternating the contenders round by round; greedy tokens must match.
 */
import type { RunnerService } from '../../src/main/host/runner-service';
import { type BenchOptions, log, rotate } from '../lib/context';
import { benchRunner, kvdeskGenerate } from '../lib/kvdesk';
import type { PromptSource } from '../lib/prompts';
import { WorkerClient } from '../lib/worker-client';
import type { GenerationSample } from '../lib/worker-protocol';
import { transformersEntry } from '../workers/transformers-js';

export type ContenderKey = 'kvdesk' | 'raw' | 'tjsDefault' | 'tjsEqual';

/** One column of the comparison. */
export interface ContenderResult {
  key: ContenderKey;
  label: string;
  detail: string;
  loadMs: number | null;
  samples: GenerationSample[];
  /** Why the column is empty, when it is. */
  skipped: string | null;
}

export interface DecodeResult {
  contenders: ContenderResult[];
  /** TTFT samples for the long prompt (kvdesk and the raw loop, alternating). */
  long: { kvdesk: number[]; raw: number[] };
  /** Per-round ratios (paired, so slow drifts of a noisy machine cancel). */
  pairedRatios: { vsRaw: number[]; vsTjsDefault: number[]; vsTjsEqual: number[] };
  /** Token mismatches; any makes the run fail. */
  mismatches: string[];
}

interface Live {
  result: ContenderResult;
  run: (prompt: number[], maxNew: number) => Promise<GenerationSample>;
  close: () => Promise<void>;
  /** Worker contenders are suspended while the others are measured (see WorkerClient.pause). */
  pause?: () => void;
  resume?: () => void;
  /** Replaces the contender's process(es) with fresh ones that load the model again. */
  reopen?: () => Promise<void>;
}

/** Runs one contender's sample with every other worker contender suspended. */
async function alone<T>(all: Live[], c: Live, fn: () => Promise<T>): Promise<T> {
  for (const o of all) if (o !== c) o.pause?.();
  c.resume?.();
  try {
    return await fn();
  } finally {
    c.pause?.();
  }
}

function firstDifference(a: number[], b: number[]): number {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/** Compares a contender's ids to the reference; records a mismatch. */
function checkIds(mismatches: string[], what: string, ref: number[], got: number[]): void {
  const at = firstDifference(ref, got);
  if (at >= 0) {
    mismatches.push(
      `${what}: greedy ids differ at position ${at} (reference ${ref.slice(at, at + 5).join(',') || 'end'}, got ${got.slice(at, at + 5).join(',') || 'end'}; lengths ${ref.length} vs ${got.length})`,
    );
  }
}

export async function runDecode(
  opts: BenchOptions,
  runner: RunnerService,
  modelId: string,
  modelDir: string,
  kvdeskLoadMs: number,
  eos: number[],
  prompts: PromptSource,
): Promise<DecodeResult> {
  // The host's own runner serves until the first reopen; fresh ones after that (closed here).
  let current = runner;
  const live: Live[] = [
    {
      result: {
        key: 'kvdesk',
        label: 'kvdesk (RunnerService)',
        detail: `${opts.threads} intra-op threads`,
        loadMs: kvdeskLoadMs,
        samples: [],
        skipped: null,
      },
      run: async (p, n) => (await kvdeskGenerate(current, modelId, p, n)).sample,
      close: async () => {
        if (current !== runner) await current.close();
      },
      reopen: async () => {
        if (current !== runner) await current.close();
        current = benchRunner(opts);
        await current.loadModel(modelDir);
      },
    },
  ];
  const workers: Array<{ key: ContenderKey; label: string; entry: string; threads: number | null }> = [
    { key: 'raw', label: 'raw onnxruntime-node loop', entry: 'workers/raw-ort.ts', threads: opts.threads },
  ];
  if (opts.skip.has('tjs')) {
    live.push(skipped('tjsDefault', 'transformers.js (defaults)', 'skipped by --skip tjs'));
    live.push(skipped('tjsEqual', `transformers.js (${opts.threads} threads)`, 'skipped by --skip tjs'));
  } else if (!transformersEntry()) {
    const why =
      '@huggingface/transformers is not installed in bench/node_modules (cd bench && npm install --ignore-scripts)';
    live.push(skipped('tjsDefault', 'transformers.js (defaults)', why));
    live.push(skipped('tjsEqual', `transformers.js (${opts.threads} threads)`, why));
  } else {
    workers.push({
      key: 'tjsDefault',
      label: 'transformers.js (defaults)',
      entry: 'workers/transformers-js.ts',
      threads: null,
    });
    workers.push({
      key: 'tjsEqual',
      label: `transformers.js (${opts.threads} threads)`,
      entry: 'workers/transformers-js.ts',
      threads: opts.threads,
    });
  }
  // Loads one after another: loading is not measured against anything, and parallel loads only thrash two cores.
  for (const w of workers) {
    let client = new WorkerClient(w.label, w.entry);
    try {
      const loaded = await client.load(modelDir, w.threads);
      log(`  loaded ${w.label} in ${(loaded.loadMs / 1000).toFixed(1)} s (${loaded.detail})`);
      live.push({
        result: {
          key: w.key,
          label: w.label,
          detail: loaded.detail,
          loadMs: loaded.loadMs,
          samples: [],
          skipped: null,
        },
        run: (p, n) => client.generate(p, n, eos),
        close: () => client.close(),
        pause: () => client.pause(),
        resume: () => client.resume(),
        reopen: async () => {
          await client.close();
          client = new WorkerClient(w.label, w.entry);
          await client.load(modelDir, w.threads);
          client.pause();
        },
      });
      client.pause();
    } catch (err) {
      const why = err instanceof Error ? (err.message.split('\n')[0] ?? err.message) : String(err);
      log(`  ${w.label} could not load the model: ${why}`);
      await client.close().catch(() => {});
      live.push(skipped(w.key, w.label, `could not load the model: ${why}`));
    }
  }
  const active = live.filter((l) => l.result.skipped === null);
  const mismatches: string[] = [];
  const prompt = prompts.prompt(32);
  try {
    let reference: number[] | null = null;
    for (let r = 0; r < opts.reps; r++) {
      // Fresh processes each round, loaded in the round's order: on this VM a process loaded after the others
      // decodes up to ~12 % faster than an identical one loaded before them (measured with two copies of the
      // raw loop), so a fixed load order would decide the comparison. Rotating it spreads that effect evenly.
      for (const c of rotate(active, r)) await c.reopen?.();
      // Warm-up: first runs pay for lazy allocations in every runtime.
      for (const c of rotate(active, r)) await alone(active, c, () => c.run(prompt, 8));
      for (const c of rotate(active, r)) {
        const s = await opts.guard.sample(`${c.result.key} round ${r + 1}`, () =>
          alone(active, c, () => c.run(prompt, opts.decodeTokens)),
        );
        c.result.samples.push(s);
        if (reference === null) reference = s.ids;
        else checkIds(mismatches, `${c.result.label}, round ${r + 1}`, reference, s.ids);
      }
      const line = active
        .map((c) => `${c.result.key} ${c.result.samples[r]?.decodeTokensPerSecond.toFixed(1)} tok/s`)
        .join(', ');
      log(`  decode round ${r + 1}/${opts.reps}: ${line}`);
    }
    const long = { kvdesk: [] as number[], raw: [] as number[] };
    const raw = active.find((c) => c.result.key === 'raw');
    const kv = active.find((c) => c.result.key === 'kvdesk');
    const longPrompt = prompts.prompt(opts.longPrompt, 1);
    if (kv && raw) {
      // First long prefills grow the runtimes' arenas: one unmeasured run each.
      for (const c of [kv, raw]) await alone(active, c, () => c.run(longPrompt, 1));
      let longRef: number[] | null = null;
      for (let r = 0; r < opts.reps; r++) {
        for (const c of rotate([kv, raw], r)) {
          const s = await opts.guard.sample(`${c.result.key} ${opts.longPrompt}-token TTFT`, () =>
            alone(active, c, () => c.run(longPrompt, 1)),
          );
          (c === kv ? long.kvdesk : long.raw).push(s.ttftMs);
          if (longRef === null) longRef = s.ids;
          else checkIds(mismatches, `${c.result.label}, ${opts.longPrompt}-token prompt`, longRef, s.ids);
        }
      }
      log(
        `  TTFT ${opts.longPrompt}-token prompt: kvdesk ${long.kvdesk.map((v) => v.toFixed(0)).join('/')} ms, raw ${long.raw.map((v) => v.toFixed(0)).join('/')} ms`,
      );
    }
    const pairedRatios = {
      vsRaw: paired(live, 'kvdesk', 'raw'),
      vsTjsDefault: paired(live, 'kvdesk', 'tjsDefault'),
      vsTjsEqual: paired(live, 'kvdesk', 'tjsEqual'),
    };
    return { contenders: live.map((l) => l.result), long, pairedRatios, mismatches };
  } finally {
    for (const c of live) await c.close();
  }
}

function skipped(key: ContenderKey, label: string, why: string): Live {
  return {
    result: { key, label, detail: '', loadMs: null, samples: [], skipped: why },
    run: () => Promise.reject(new Error(why)),
    close: async () => {},
  };
}

function paired(live: Live[], a: ContenderKey, b: ContenderKey): number[] {
  const A = live.find((l) => l.result.key === a)?.result.samples ?? [];
  const B = live.find((l) => l.result.key === b)?.result.samples ?? [];
  const out: number[] = [];
  for (let i = 0; i < Math.min(A.length, B.length); i++) {
    const x = A[i]?.decodeTokensPerSecond ?? 0;
    const y = B[i]?.decodeTokensPerSecond ?? 0;
    if (x > 0 && y > 0) out.push(x / y);
  }
  return out;
}
