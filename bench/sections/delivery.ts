/**
 * Token delivery latency from the engine to a WebSocket client of the real
 * `kvdesk serve` (src/cli/main.ts serve, unmodified). A preload given through
 * NODE_OPTIONS timestamps each token frame as the engine process sends it; the
 * client timestamps the frame as it arrives. Both clocks are CLOCK_MONOTONIC
 * (process.hrtime), shared by every process on the machine. The engine's own
 * ≤ 50 ms frame batching is not included (a frame's age is counted from its send).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { WebSocket } from 'ws';
import { type BenchOptions, log } from '../lib/context';
import { percentile } from '../lib/stats';
import { tsxExecArgv } from '../lib/worker-client';

export interface DeliveryResult {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  tokens: number;
  frames: number;
  /** The same under 8 concurrent streams. */
  loaded: { p50Ms: number; p99Ms: number; maxMs: number; frames: number } | null;
  detail: string;
}
export type DeliveryOutcome = DeliveryResult | { skipped: string };

const root = path.resolve(__dirname, '..', '..');

interface Arrival {
  requestId: string;
  tokens: number;
  at: bigint;
}

/** Starts `kvdesk serve` on a free port; resolves with its URL and the id of the benchmark model. */
async function startServe(
  opts: BenchOptions,
  modelDir: string,
  dataDir: string,
  trace: string,
): Promise<{ child: ChildProcess; url: string; modelId: string }> {
  const preload = pathToFileURL(path.join(__dirname, '..', 'engine', 'trace-preload.mjs')).href;
  const args = [
    ...tsxExecArgv(),
    path.join(root, 'src/cli/main.ts'),
    'serve',
    '--port',
    '0',
    '--model',
    modelDir,
    '--data-dir',
    dataDir,
    '--threads',
    String(opts.threads),
    '--max-running',
    '8',
    '--kv-budget',
    '4GiB',
  ];
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: {
      ...process.env,
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${preload}`.trim(),
      KVDESK_BENCH_TRACE: trace,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kvdesk serve did not report its URL within 180 s; stderr: ${err.slice(-400)}`));
    }, 180_000);
    const check = () => {
      const url = /kvdesk serving (http:\/\/\S+)/.exec(out)?.[1];
      const modelId = /kvdesk: loaded (\S+) \(bpt/.exec(err)?.[1];
      if (url && modelId) {
        clearTimeout(timer);
        resolve({ child, url, modelId });
      }
    };
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      check();
    });
    child.stderr?.on('data', (d: Buffer) => {
      err += d.toString();
      check();
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(
          `kvdesk serve exited before it was ready (code ${code}, signal ${signal}): ${err.trim().split('\n').slice(-3).join(' / ')}`,
        ),
      );
    });
  });
}

async function stopServe(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const hard = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await gone;
  clearTimeout(hard);
}

/** A WebSocket client that runs generations and timestamps every token frame on arrival. */
class Client {
  readonly arrivals: Arrival[] = [];
  private readonly done = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
  private seq = 0;

  constructor(private readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const at = process.hrtime.bigint();
      const msg = JSON.parse(data.toString()) as {
        t: string;
        id?: string;
        frame?: { type: string; requestId: string; rows?: Array<{ ids: number[] }>; error?: { message: string } };
      };
      if (msg.t !== 'frame' || !msg.frame || !msg.id) return;
      const f = msg.frame;
      if (f.type === 'tokens') {
        const n = (f.rows ?? []).reduce((a, r) => a + r.ids.length, 0);
        if (n > 0) this.arrivals.push({ requestId: f.requestId, tokens: n, at });
      } else if (f.type === 'done') this.done.get(msg.id)?.resolve();
      else if (f.type === 'error') this.done.get(msg.id)?.reject(new Error(f.error?.message ?? 'generation failed'));
    });
  }

  generate(modelId: string, promptIds: number[], maxNewTokens: number): Promise<void> {
    const id = `bench-${++this.seq}`;
    return new Promise((resolve, reject) => {
      this.done.set(id, { resolve, reject });
      this.ws.send(
        JSON.stringify({
          t: 'generate',
          id,
          request: { model: modelId, promptIds, maxNewTokens, sampling: { greedy: true } },
        }),
      );
    });
  }
}

/** Pairs each client frame with the engine send that carried the same cumulative token count of the same request. */
function latencies(trace: string, arrivals: Arrival[], since: number): Array<{ arrival: Arrival; ms: number }> {
  const sends = new Map<string, Map<number, bigint>>();
  const totals = new Map<string, number>();
  for (const line of readFileSync(trace, 'utf8').split('\n')) {
    if (!line) continue;
    const e = JSON.parse(line) as { r: string; n: number; t: string };
    const total = (totals.get(e.r) ?? 0) + e.n;
    totals.set(e.r, total);
    let m = sends.get(e.r);
    if (!m) {
      m = new Map();
      sends.set(e.r, m);
    }
    m.set(total, BigInt(e.t));
  }
  const seen = new Map<string, number>();
  const out: Array<{ arrival: Arrival; ms: number }> = [];
  for (const [i, a] of arrivals.entries()) {
    const total = (seen.get(a.requestId) ?? 0) + a.tokens;
    seen.set(a.requestId, total);
    if (i < since) continue;
    const sent = sends.get(a.requestId)?.get(total);
    if (sent !== undefined) out.push({ arrival: a, ms: Number(a.at - sent) / 1e6 });
  }
  return out;
}

export async function runDelivery(opts: BenchOptions, modelDir: string): Promise<DeliveryOutcome> {
  if (!existsSync(path.join(root, 'src/cli/serve.ts')))
    return { skipped: 'src/cli/serve.ts (kvdesk serve) does not exist yet' };
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-bench-serve-'));
  const trace = path.join(dataDir, 'engine-trace.jsonl');
  let child: ChildProcess | null = null;
  try {
    const started = await startServe(opts, modelDir, dataDir, trace);
    child = started.child;
    log(`  kvdesk serve at ${started.url}, model ${started.modelId}`);
    const ws = new WebSocket(`${started.url.replace(/^http/, 'ws')}/ws`);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const client = new Client(ws);
    const prompt = Array.from({ length: 32 }, (_, i) => 300 + ((i * 37) % 400));
    await client.generate(started.modelId, prompt, 4);
    const since = client.arrivals.length;
    const tokens = opts.quick ? 64 : 128;
    // A disturbed generation is measured again; its frames stay out of the figures.
    let single: Arrival[] = [];
    for (let r = 0; r < opts.reps; r++) {
      let from = client.arrivals.length;
      await opts.guard.sample(`delivery, generation ${r + 1}`, async () => {
        from = client.arrivals.length;
        await client.generate(started.modelId, prompt, tokens);
      });
      single = single.concat(client.arrivals.slice(from));
    }
    let from8 = client.arrivals.length;
    await opts.guard.sample('delivery, 8 streams', () => {
      from8 = client.arrivals.length;
      return Promise.all(
        Array.from({ length: 8 }, (_, k) =>
          client.generate(
            started.modelId,
            prompt.map((v) => v + k),
            opts.streamTokens,
          ),
        ),
      );
    });
    ws.close();
    if (!existsSync(trace))
      return { skipped: 'the engine trace is empty: the preload did not run in the engine process' };
    const one = latencies(trace, client.arrivals, since)
      .filter((l) => single.includes(l.arrival))
      .map((l) => l.ms);
    const eight = latencies(trace, client.arrivals, from8).map((l) => l.ms);
    if (one.length === 0) return { skipped: 'no token frame could be paired with an engine send' };
    const res: DeliveryResult = {
      p50Ms: percentile(one, 50),
      p99Ms: percentile(one, 99),
      maxMs: Math.max(...one),
      tokens: opts.reps * tokens,
      frames: one.length,
      loaded:
        eight.length > 0
          ? {
              p50Ms: percentile(eight, 50),
              p99Ms: percentile(eight, 99),
              maxMs: Math.max(...eight),
              frames: eight.length,
            }
          : null,
      detail: `one stream, ${opts.reps} × ${tokens} tokens`,
    };
    log(
      `  delivery: p50 ${res.p50Ms.toFixed(2)} ms, p99 ${res.p99Ms.toFixed(2)} ms over ${res.frames} frames` +
        (res.loaded
          ? `; with 8 streams p50 ${res.loaded.p50Ms.toFixed(2)} ms, p99 ${res.loaded.p99Ms.toFixed(2)} ms`
          : ''),
    );
    return res;
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    log(`  delivery failed: ${why}`);
    return { skipped: `failed: ${why}` };
  } finally {
    if (child) await stopServe(child);
    rmSync(dataDir, { recursive: true, force: true });
  }
}
