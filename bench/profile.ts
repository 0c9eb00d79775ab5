/**
 * Where does kvdesk's decode time go, next to the raw onnxruntime loop?
 * `node bin/run-ts.cjs bench/profile.ts [--shape gpt2-small] [--reps 3] [--tokens 128]`
 *
 * Contenders, alternating round by round on the same file and threads:
 *   raw          the raw loop (bench/workers/raw-ort.ts)
 *   raw-nospin   the same with session.intra_op.allow_spinning = 0
 *   raw-1t       the same with one intra-op thread
 *   raw-mask     the raw loop building its attention mask per step as kvdesk does (number[] → BigInt64Array)
 *   raw+host     the raw loop sending an IPC message per token to a process that then works 0.45 ms (kvdesk's host per token)
 *   raw+host/3   the same with one message every 3 tokens and 0.6 ms of work (frames batched over 3 steps)
 *   engine       kvdesk's decode loop (LoadedDecoder) called in-process: no host, no IPC
 *   engine+ipc   kvdesk's engine core (frame batching, events) sending its events over IPC to a process that ignores them
 *   runner       the full RunnerService path (host + scheduler + engine process + IPC)
 * For the worker contenders the time inside session.run is measured, so the
 * loop's own cost per token is (wall − run) / tokens. For the runner the host
 * process's CPU time per token is measured (it competes with the engine's
 * threads on a 2-core machine). Short (32-token prompt) and long (512) contexts.
 */
import os from 'node:os';
import { RunnerService } from '../src/main/host/runner-service';
import { flagValue, parseArgs } from './lib/args';
import { log, rotate } from './lib/context';
import { kvdeskGenerate } from './lib/kvdesk';
import { type BenchShape, ensureModel } from './lib/models';
import { promptSource } from './lib/prompts';
import { fmt, median } from './lib/stats';
import { WorkerClient } from './lib/worker-client';
import type { GenerationSample } from './lib/worker-protocol';

interface Row {
  name: string;
  gen: (prompt: number[], n: number) => Promise<GenerationSample & { hostCpuMs?: number }>;
  close: () => Promise<void>;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const get = (flag: string, dflt: string) => flagValue(argv, flag, dflt);
  const shape = get('--shape', 'gpt2-small') as BenchShape;
  const reps = Number(get('--reps', '3'));
  const tokens = Number(get('--tokens', '128'));
  const threads = Math.max(1, os.availableParallelism());
  const opts = parseArgs(['--quick', '--no-report']);
  const model = ensureModel(shape, log);
  const timing = { KVDESK_BENCH_RUN_TIMING: '1' };
  const rows: Row[] = [];
  const worker = async (name: string, entry: string, t: number, env: Record<string, string>) => {
    const w = new WorkerClient(name, entry, { ...timing, ...env });
    await w.load(model.dir, t);
    rows.push({ name, gen: (p, n) => w.generate(p, n, eos), close: () => w.close() });
  };
  const runner = new RunnerService({ intraOpNumThreads: threads, maxRunning: 8, kvBudgetBytes: 8 * 1024 ** 3 });
  const info = await runner.loadModel(model.dir);
  const eos = info.spec.eosTokenIds;
  await worker('raw', 'workers/raw-ort.ts', threads, {});
  if (argv.includes('--all'))
    await worker('raw-nospin', 'workers/raw-ort.ts', threads, {
      KVDESK_BENCH_ORT_EXTRA: JSON.stringify({ session: { intra_op: { allow_spinning: '0' } } }),
    });
  if (threads > 1 && argv.includes('--all')) await worker('raw-1t', 'workers/raw-ort.ts', 1, {});
  if (argv.includes('--all')) await worker('raw-mask', 'workers/raw-ort.ts', threads, { KVDESK_BENCH_MASK: 'rebuild' });
  // A host that works `busyMs` on every message the loop sends (every `every` tokens), right when it arrives:
  // like RunnerService handling a token frame while the engine starts its next step.
  const busy = (ms: number) => () => {
    const until = performance.now() + ms;
    while (performance.now() < until) {}
  };
  const synced = async (name: string, every: number, busyMs: number, env: Record<string, string>) => {
    const w = new WorkerClient(
      name,
      'workers/raw-ort.ts',
      { ...timing, ...env, KVDESK_BENCH_NOTIFY: String(every) },
      busy(busyMs),
    );
    await w.load(model.dir, threads);
    rows.push({ name, gen: (p, n) => w.generate(p, n, eos), close: () => w.close() });
  };
  await synced('raw+host', 1, 0.45, {});
  await synced('raw+host/3', 3, 0.6, {});
  if (argv.includes('--all')) {
    await synced('raw-nospin+host', 1, 0.45, {
      KVDESK_BENCH_ORT_EXTRA: JSON.stringify({ session: { intra_op: { allow_spinning: '0' } } }),
    });
  }
  await worker('engine', 'workers/kvdesk-inproc.ts', threads, {});
  await worker('engine+ipc', 'workers/kvdesk-core.ts', threads, {});
  rows.push({
    name: 'runner',
    gen: async (p, n) => {
      const cpu = process.cpuUsage();
      const t = await kvdeskGenerate(runner, info.id, p, n);
      const used = process.cpuUsage(cpu);
      return { ...t.sample, hostCpuMs: (used.user + used.system) / 1000 };
    },
    close: () => runner.close(),
  });
  const prompts = promptSource(runner, info.id, 1200);
  const table: string[] = [
    `| context | contender | decode tok/s (median) | ms/token in session.run | ms/token around it | host CPU ms/token |`,
    '| --- | --- | ---: | ---: | ---: | ---: |',
  ];
  for (const [label, plen] of [
    ['32-token prompt', 32],
    ['512-token prompt', 512],
  ] as const) {
    const prompt = prompts.prompt(plen, 1);
    for (const r of rows) await r.gen(prompt, 4);
    const got = new Map<string, Array<GenerationSample & { hostCpuMs?: number }>>(rows.map((r) => [r.name, []]));
    for (let k = 0; k < reps; k++) {
      for (const r of rotate(rows, k)) {
        const s = await opts.guard.sample(`${r.name} ${label}`, () => r.gen(prompt, tokens));
        got.get(r.name)?.push(s);
      }
      log(
        `${label} round ${k + 1}: ${rows.map((r) => `${r.name} ${got.get(r.name)?.[k]?.decodeTokensPerSecond.toFixed(1)}`).join(', ')}`,
      );
    }
    for (const r of rows) {
      const ss = got.get(r.name) ?? [];
      const perTok = (f: (s: GenerationSample & { hostCpuMs?: number }) => number | undefined) => {
        const v = ss.map(f).filter((x): x is number => x !== undefined && Number.isFinite(x));
        return v.length > 0 ? median(v) : null;
      };
      // Decode phase: from the first token to the last; its runs are all runs but the prefill.
      const decodeRun = (s: GenerationSample) =>
        s.runMs !== undefined && s.prefillRunMs !== undefined ? s.runMs - s.prefillRunMs : undefined;
      const inRun = perTok((s) => {
        const d = decodeRun(s);
        return d === undefined ? undefined : d / Math.max(1, s.ids.length - 1);
      });
      const around = perTok((s) => {
        const d = decodeRun(s);
        return d === undefined ? undefined : (s.totalMs - s.ttftMs - d) / Math.max(1, s.ids.length - 1);
      });
      const host = perTok((s) => (s.hostCpuMs !== undefined ? s.hostCpuMs / s.ids.length : undefined));
      table.push(
        `| ${label} | ${r.name} | ${fmt(median(ss.map((s) => s.decodeTokensPerSecond)))} | ${fmt(inRun, 2)} | ${fmt(around, 3)} | ${fmt(host, 3)} |`,
      );
    }
  }
  for (const r of rows) await r.close();
  process.stdout.write(`${table.join('\n')}\n\nnoise guard: ${JSON.stringify(opts.guard.stats)}\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`profile: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
