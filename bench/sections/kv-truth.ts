/**
 * KV truth: does the engine process's memory grow by bpt per generated token?
 * A fresh RunnerService (fresh engine process, cold allocator) generates one
 * long greedy sequence; the engine's VmRSS is sampled from /proc while tokens
 * arrive. The decode phase's least-squares slope of RSS over tokens, divided by
 * bpt, is the figure (prefill's one-time activations fall outside the fit).
 */
import { RunnerService } from '../../src/main/host/runner-service';
import { type BenchOptions, log } from '../lib/context';
import { kvdeskGenerate } from '../lib/kvdesk';
import { processMemory } from '../lib/proc';
import type { PromptSource } from '../lib/prompts';
import { linearFit } from '../lib/stats';
import { WorkerClient } from '../lib/worker-client';

export interface KvTruthResult {
  bpt: number;
  promptTokens: number;
  generatedTokens: number;
  /** RSS bytes per generated token over the decode phase (least squares). */
  slopeBytesPerToken: number;
  r2: number;
  /** (RSS at the last token − RSS at the first token) / tokens in between. */
  endpointBytesPerToken: number;
  rssBeforeBytes: number;
  rssAfterPrefillBytes: number;
  rssEndBytes: number;
  hwmBytes: number;
  samples: number;
  /** The same slope for the raw onnxruntime loop on the same prompt (a fresh process): what the graph format itself costs. */
  raw: { slopeBytesPerToken: number; r2: number; generatedTokens: number } | null;
}

export async function runKvTruth(
  opts: BenchOptions,
  modelDir: string,
  makePrompts: (runner: RunnerService, modelId: string) => PromptSource,
): Promise<KvTruthResult | { skipped: string }> {
  const runner = new RunnerService({ intraOpNumThreads: opts.threads, maxRunning: 8, kvBudgetBytes: 8 * 1024 ** 3 });
  let result: KvTruthResult | { skipped: string };
  let raw: KvTruthResult['raw'] = null;
  try {
    const info = await runner.loadModel(modelDir);
    const pid = runner.engine.pid;
    if (pid === undefined) return { skipped: 'the engine process has no pid' };
    const prompts = makePrompts(runner, info.id);
    const context = info.spec.contextLength;
    const promptTokens = Math.min(opts.kvPrompt, context - 8);
    const newTokens = Math.min(opts.kvTokens, context - promptTokens);
    // The raw loop first, in its own fresh process; it also picks a prompt whose greedy continuation does not hit
    // EOS early (a request cannot turn EOS off), so the KV really grows by the requested number of tokens.
    const picked = await rawReference(
      opts,
      modelDir,
      prompts,
      promptTokens,
      newTokens,
      info.spec.eosTokenIds,
      info.spec.bpt,
    );
    raw = picked.raw;
    const prompt = picked.prompt;
    // Warm-up: a short run so one-time allocations (weights touched, thread pool, arena's first chunk) are in the baseline.
    await kvdeskGenerate(runner, info.id, prompts.prompt(32, 3), 4);
    await new Promise((r) => setTimeout(r, 300));
    // Memory is not disturbed by other processes' CPU use, but GC timing is: start on a quiet machine.
    await opts.guard.waitQuiet();
    const before = await processMemory(pid);
    if (!before) return { skipped: `cannot read /proc/${pid}/status` };
    const xs: number[] = [];
    const ys: number[] = [];
    let tokens = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const m = await processMemory(pid);
        if (m && tokens > 0) {
          xs.push(tokens);
          ys.push(m.rss);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const trace = await kvdeskGenerate(runner, info.id, prompt, newTokens, (frame) => {
      if (frame.type === 'tokens') tokens += frame.rows[0]?.ids.length ?? 0;
    });
    const end = await processMemory(pid);
    sampling = false;
    await sampler;
    const generated = trace.sample.ids.length;
    if (xs.length < 8 || !end) return { skipped: `too few memory samples (${xs.length})` };
    // The first tenth of the decode still releases prefill's activations and logits: leave it out of the fit.
    const skip = Math.max(16, 0.1 * generated);
    const keep = xs.map((x, i) => [x, ys[i] as number] as const).filter(([x]) => x >= skip);
    const fit =
      keep.length >= 8
        ? linearFit(
            keep.map(([x]) => x),
            keep.map(([, y]) => y),
          )
        : linearFit(xs, ys);
    const firstX = xs[0] as number;
    const lastX = xs[xs.length - 1] as number;
    result = {
      bpt: info.spec.bpt,
      promptTokens,
      generatedTokens: generated,
      slopeBytesPerToken: fit.slope,
      r2: fit.r2,
      endpointBytesPerToken:
        lastX > firstX ? ((ys[ys.length - 1] as number) - (ys[0] as number)) / (lastX - firstX) : Number.NaN,
      rssBeforeBytes: before.rss,
      rssAfterPrefillBytes: ys[0] as number,
      rssEndBytes: end.rss,
      hwmBytes: end.hwm,
      samples: xs.length,
      raw,
    };
    log(
      `  KV truth: ${promptTokens}+${generated} tokens, RSS ${(before.rss / 2 ** 20).toFixed(0)} → ${(result.rssAfterPrefillBytes / 2 ** 20).toFixed(0)} (after prefill) → ${(end.rss / 2 ** 20).toFixed(0)} MiB, ` +
        `slope ${(fit.slope / 1024).toFixed(1)} KiB/token (r² ${fit.r2.toFixed(2)}) vs bpt ${(info.spec.bpt / 1024).toFixed(1)} KiB = ${(fit.slope / info.spec.bpt).toFixed(2)}×`,
    );
  } finally {
    await runner.close();
  }
  return result;
}

/**
 * The raw loop in a fresh process samples its own RSS every 4 tokens. Prompt windows are tried in turn until one
 * generates at least 90% of the tokens asked for (at most 6); that prompt is then used for kvdesk too.
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
  const w = new WorkerClient('raw onnxruntime-node loop', 'workers/raw-ort.ts');
  let prompt = prompts.prompt(promptTokens, 0);
  try {
    await w.load(modelDir, opts.threads);
    await w.generate(prompt.slice(0, 32), 4, eos);
    let best: { prompt: number[]; memory: Array<[number, number]>; tokens: number } | null = null;
    for (let variant = 0; variant < 6; variant++) {
      const candidate = prompts.prompt(promptTokens, variant);
      await opts.guard.waitQuiet();
      const s = await w.generate(candidate, maxNew, eos, 4);
      if (!best || s.ids.length > best.tokens)
        best = { prompt: candidate, memory: s.memory ?? [], tokens: s.ids.length };
      if (s.ids.length >= 0.9 * maxNew) break;
      log(`  KV truth: prompt window ${variant} stops at EOS after ${s.ids.length} tokens; trying another`);
    }
    if (!best) return { prompt, raw: null };
    prompt = best.prompt;
    const mem = best.memory;
    if (mem.length < 8) return { prompt, raw: null };
    const decode = mem.filter(([t]) => t >= promptTokens + Math.max(16, 0.1 * best.tokens));
    const use = decode.length >= 8 ? decode : mem;
    const fit = linearFit(
      use.map(([t]) => t),
      use.map(([, r]) => r),
    );
    log(
      `  KV truth, raw loop: ${best.tokens} tokens, slope ${(fit.slope / 1024).toFixed(1)} KiB/token (r² ${fit.r2.toFixed(2)}) = ${(fit.slope / bpt).toFixed(2)}× bpt`,
    );
    return { prompt, raw: { slopeBytesPerToken: fit.slope, r2: fit.r2, generatedTokens: best.tokens } };
  } catch (err) {
    log(`  KV truth, raw loop failed: ${err instanceof Error ? err.message : String(err)}`);
    return { prompt, raw: null };
  } finally {
    await w.close();
  }
}
