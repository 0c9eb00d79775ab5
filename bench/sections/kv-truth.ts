/**
 * KV truth: does the engine keep bpt bytes per generated token?
 *
 * Live memory (the figure): a fresh engine process runs with --expose-gc and
 * bench/engine/gc-preload.mjs, which does a full garbage collection before each
 * token frame and records the bytes held by ArrayBuffers (the KV tensors) and
 * VmRSS: the least-squares slope of the ArrayBuffer bytes over the decode, ÷ bpt,
 * is the KV the engine really keeps per token (1.00 = exactly one copy). The RSS
 * slope after GC adds what the allocators keep. The raw loop does the same in its
 * own fresh process as the reference.
 *
 * Occupied memory (context): a second fresh engine without forced collections;
 * its VmRSS sampled from /proc every 20 ms shows what the process occupies per
 * token including KV-sized garbage waiting for the collector (noisy: ±50%).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RunnerService } from '../../src/main/host/runner-service';
import { type BenchOptions, log } from '../lib/context';
import { benchRunner, kvdeskGenerate } from '../lib/kvdesk';
import { processMemory } from '../lib/proc';
import type { PromptSource } from '../lib/prompts';
import { linearFit } from '../lib/stats';
import { WorkerClient } from '../lib/worker-client';

export interface KvTruthResult {
  bpt: number;
  promptTokens: number;
  generatedTokens: number;
  /** Bytes held by ArrayBuffers (the KV tensors) after a full GC, per generated token (least squares over the decode). */
  liveBytesPerToken: number;
  liveR2: number;
  /** VmRSS after a full GC per generated token (includes what the allocators keep). */
  liveRssBytesPerToken: number | null;
  /** The raw onnxruntime loop measured the same way, same prompt and tokens. */
  raw: { liveBytesPerToken: number; r2: number; liveRssBytesPerToken: number | null; generatedTokens: number } | null;
  /** Without forced collections: RSS sampled every 20 ms (garbage included). */
  occupiedBytesPerToken: number | null;
  occupiedR2: number | null;
  rssBeforeBytes: number | null;
  rssEndBytes: number | null;
  hwmBytes: number | null;
}

type Fit = { slope: number; r2: number };

/** Least squares over the decode, leaving out its first tenth (prefill's activations are still being released). */
function decodeFit(points: Array<[number, number]>, from: number, generated: number): Fit | null {
  const skip = from + Math.max(16, 0.1 * generated);
  const use = points.filter(([x]) => x >= skip);
  const pts = use.length >= 8 ? use : points;
  if (pts.length < 4) return null;
  const f = linearFit(
    pts.map(([x]) => x),
    pts.map(([, y]) => y),
  );
  return { slope: f.slope, r2: f.r2 };
}

export async function runKvTruth(
  opts: BenchOptions,
  modelDir: string,
  makePrompts: (runner: RunnerService, modelId: string) => PromptSource,
): Promise<KvTruthResult | { skipped: string }> {
  // 1. Tokenizer, prompt choice and the raw reference.
  const first = benchRunner(opts);
  let prompt: number[];
  let newTokens: number;
  let bpt: number;
  let raw: KvTruthResult['raw'];
  let occupied: { fit: Fit | null; before: number | null; end: number | null; hwm: number | null } = {
    fit: null,
    before: null,
    end: null,
    hwm: null,
  };
  try {
    const info = await first.loadModel(modelDir);
    bpt = info.spec.bpt;
    const prompts = makePrompts(first, info.id);
    const promptTokens = Math.min(opts.kvPrompt, info.spec.contextLength - 8);
    newTokens = Math.min(opts.kvTokens, info.spec.contextLength - promptTokens);
    const picked = await rawReference(opts, modelDir, prompts, promptTokens, newTokens, info.spec.eosTokenIds, bpt);
    prompt = picked.prompt;
    raw = picked.raw;
    // 2. Occupied memory of a fresh engine (this one has only loaded the model).
    occupied = await occupiedMemory(opts, first, info.id, prompt, newTokens, bpt);
  } finally {
    await first.close();
  }
  // 3. Live memory of another fresh engine, with a full collection before every token frame.
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-bench-kv-'));
  const trace = path.join(dir, 'memory.jsonl');
  const preload = pathToFileURL(path.join(__dirname, '..', 'engine', 'gc-preload.mjs')).href;
  const live = benchRunner(opts, {
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --expose-gc --import ${preload}`.trim(),
    KVDESK_BENCH_MEMTRACE: trace,
  });
  try {
    const info = await live.loadModel(modelDir);
    await opts.guard.waitQuiet();
    const t = await kvdeskGenerate(live, info.id, prompt, newTokens);
    const points: Array<[number, number, number]> = [];
    try {
      for (const line of readFileSync(trace, 'utf8').split('\n')) {
        if (!line) continue;
        const e = JSON.parse(line) as { n: number; rss: number; ab: number };
        // The engine's final flush goes after the request ended and its KV was released (35 MiB less at 256 + 256
        // tokens): a frame that carries the last token may be that one, so it is no live-KV sample.
        if (e.n < t.sample.ids.length) points.push([e.n, e.rss, e.ab]);
      }
    } catch {
      return { skipped: 'the engine wrote no memory trace: the preload did not run in the engine process' };
    }
    const fit = decodeFit(
      points.map(([n, , ab]) => [n, ab]),
      0,
      t.sample.ids.length,
    );
    const rssFit = decodeFit(
      points.map(([n, rss]) => [n, rss]),
      0,
      t.sample.ids.length,
    );
    if (!fit) return { skipped: `too few memory samples (${points.length})` };
    log(
      `  KV truth: ${prompt.length}+${t.sample.ids.length} tokens, KV tensors ${(fit.slope / 1024).toFixed(1)} KiB/token (r² ${fit.r2.toFixed(2)}) vs bpt ${(bpt / 1024).toFixed(1)} KiB = ${(fit.slope / bpt).toFixed(3)}×; RSS after GC ${rssFit ? (rssFit.slope / bpt).toFixed(2) : '—'}× bpt`,
    );
    return {
      bpt,
      promptTokens: prompt.length,
      generatedTokens: t.sample.ids.length,
      liveBytesPerToken: fit.slope,
      liveR2: fit.r2,
      liveRssBytesPerToken: rssFit?.slope ?? null,
      raw,
      occupiedBytesPerToken: occupied.fit?.slope ?? null,
      occupiedR2: occupied.fit?.r2 ?? null,
      rssBeforeBytes: occupied.before,
      rssEndBytes: occupied.end,
      hwmBytes: occupied.hwm,
    };
  } finally {
    await live.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** VmRSS of the engine sampled every 20 ms during one generation (no forced collections). */
async function occupiedMemory(
  opts: BenchOptions,
  runner: RunnerService,
  modelId: string,
  prompt: number[],
  newTokens: number,
  bpt: number,
): Promise<{ fit: Fit | null; before: number | null; end: number | null; hwm: number | null }> {
  const pid = runner.engine.pid;
  if (pid === undefined) return { fit: null, before: null, end: null, hwm: null };
  await kvdeskGenerate(runner, modelId, prompt.slice(0, 32), 4);
  await opts.guard.waitQuiet();
  const before = await processMemory(pid);
  const points: Array<[number, number]> = [];
  let tokens = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const m = await processMemory(pid);
      if (m && tokens > 0) points.push([tokens, m.rss]);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const t = await kvdeskGenerate(runner, modelId, prompt, newTokens, {
    onFrame: (frame) => {
      if (frame.type === 'tokens') tokens += frame.rows[0]?.ids.length ?? 0;
    },
  });
  const end = await processMemory(pid);
  sampling = false;
  await sampler;
  const fit = decodeFit(points, 0, t.sample.ids.length);
  if (fit) {
    log(
      `  KV truth, occupied (no forced GC): ${(fit.slope / 1024).toFixed(1)} KiB/token (r² ${fit.r2.toFixed(2)}) = ${(fit.slope / bpt).toFixed(2)}× bpt`,
    );
  }
  return { fit, before: before?.rss ?? null, end: end?.rss ?? null, hwm: end?.hwm ?? null };
}

/**
 * The raw loop in a fresh process (--expose-gc) samples its own RSS after a full collection every 4 tokens.
 * Prompt windows are tried in turn until one generates at least 90% of the tokens asked for (at most 6; a
 * request cannot turn EOS off); that prompt is then used for kvdesk too.
 */
async function rawReference(
  opts: BenchOptions,
  modelDir: string,
  prompts: PromptSource,
  promptTokens: number,
  maxNew: number,
  eos: number[],
  bpt: number,
): Promise<{ prompt: number[]; raw: KvTruthResult['raw'] }> {
  const w = new WorkerClient('raw onnxruntime-node loop', 'workers/raw-ort.ts', {}, undefined, ['--expose-gc']);
  let prompt = prompts.prompt(promptTokens, 0);
  try {
    await w.load(modelDir, opts.threads);
    await w.generate(prompt.slice(0, 32), 4, eos);
    let best: { prompt: number[]; memory: Array<[number, number, number]>; tokens: number } | null = null;
    for (let variant = 0; variant < 6; variant++) {
      const candidate = prompts.prompt(promptTokens, variant);
      const s = await w.generate(candidate, maxNew, eos, 4);
      if (!best || s.ids.length > best.tokens)
        best = { prompt: candidate, memory: s.memory ?? [], tokens: s.ids.length };
      if (s.ids.length >= 0.9 * maxNew) break;
      log(`  KV truth: prompt window ${variant} stops at EOS after ${s.ids.length} tokens; trying another`);
    }
    if (!best) return { prompt, raw: null };
    prompt = best.prompt;
    const fit = decodeFit(
      best.memory.map(([n, , ab]) => [n, ab]),
      promptTokens,
      best.tokens,
    );
    const rssFit = decodeFit(
      best.memory.map(([n, rss]) => [n, rss]),
      promptTokens,
      best.tokens,
    );
    if (!fit) return { prompt, raw: null };
    log(
      `  KV truth, raw loop: ${best.tokens} tokens, KV tensors ${(fit.slope / bpt).toFixed(3)}× bpt (r² ${fit.r2.toFixed(2)}); RSS after GC ${rssFit ? (rssFit.slope / bpt).toFixed(2) : '—'}× bpt`,
    );
    return {
      prompt,
      raw: {
        liveBytesPerToken: fit.slope,
        r2: fit.r2,
        liveRssBytesPerToken: rssFit?.slope ?? null,
        generatedTokens: best.tokens,
      },
    };
  } catch (err) {
    log(`  KV truth, raw loop failed: ${err instanceof Error ? err.message : String(err)}`);
    return { prompt, raw: null };
  } finally {
    await w.close();
  }
}
