/**
 * What a static (in-place) KV cache costs through onnxruntime-node.
 * `node bin/run-ts.cjs bench/static-cache.ts [--reps 3] [--tokens 64] [--capacity 2048]`
 *
 * Twin onnx-genai packages with the same weights (test/helpers/static-cache-models.ts: 8 layers × 512, ONNX
 * Attention op), one with a growing past/present cache and one with a static cache written by TensorScatter,
 * written to bench/models/static-twins (git-ignored). Alternating rounds, medians:
 *   engine ms per token of each (LoadedDecoder, greedy, 32-token prompt; mean over the tokens after the first);
 *   one static decode step straight on onnxruntime (mean of 16) with the cache outputs bound to the input tensors in
 *   `run`'s fetches, with fresh outputs, and fetching the logits only (the cache update then never reaches
 *   JavaScript: the floor of what binding could give if onnxruntime-node wrote in place).
 */
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { LoadedDecoder } from '../src/main/engine/decoder';
import { loadModelSpec } from '../src/main/packages';
import { GREEDY } from '../test/helpers/generation';
import { writeTwinPackages } from '../test/helpers/static-cache-models';
import { flagValue } from './lib/args';
import { log, rotate } from './lib/context';
import { fmt, median } from './lib/stats';

const LAYERS = 8;
const HIDDEN = 512;

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const get = (flag: string, dflt: number) => Number(flagValue(argv, flag, String(dflt)));
  const reps = Math.max(3, get('--reps', 3));
  const tokens = get('--tokens', 64);
  const capacity = get('--capacity', 2048);
  const threads = Math.min(2, os.availableParallelism());
  const root = path.join(__dirname, 'models', 'static-twins');
  log(`writing twin packages to ${root}`);
  const dirs = writeTwinPackages(root, { layers: LAYERS, hidden: HIDDEN, heads: 8, capacity, seed: 7 });
  const options = { intraOpNumThreads: threads, executionProviders: ['cpu'] };
  const dynamic = await LoadedDecoder.load(await loadModelSpec(dirs.dynamicDir), options);
  const fixed = await LoadedDecoder.load(await loadModelSpec(dirs.staticDir), options);
  const raw = await ort.InferenceSession.create(path.join(dirs.staticDir, 'model.onnx'), {
    intraOpNumThreads: threads,
    graphOptimizationLevel: 'all',
    logSeverityLevel: 4,
  });
  const prompt = Array.from({ length: 32 }, (_, i) => 3 + ((i * 37) % 500));

  const decode = async (d: LoadedDecoder): Promise<{ msPerToken: number; ids: number[] }> => {
    const ids: number[] = [];
    let first = 0;
    await d.generate(
      { rows: [prompt], maxNewTokens: tokens, sampling: GREEDY, eosTokenIds: [] },
      {
        onStart: () => {},
        onStep: (got) => {
          ids.push(got[0] as number);
          if (ids.length === 1) first = performance.now();
        },
        stopRequested: () => null,
        countRun: () => {},
      },
    );
    return { msPerToken: (performance.now() - first) / (tokens - 1), ids };
  };

  const buffers = new Map<string, ort.Tensor>();
  for (let l = 0; l < LAYERS; l++) {
    for (const kind of ['key', 'value']) {
      buffers.set(
        `${kind}_cache.${l}`,
        new ort.Tensor('float32', new Float32Array(capacity * HIDDEN), [1, capacity, HIDDEN]),
      );
    }
  }
  const bound: Record<string, ort.Tensor | null> = { logits: null };
  for (let l = 0; l < LAYERS; l++) {
    bound[`updated_key_cache.${l}`] = buffers.get(`key_cache.${l}`) as ort.Tensor;
    bound[`updated_value_cache.${l}`] = buffers.get(`value_cache.${l}`) as ort.Tensor;
  }
  const int64 = (v: number, dims: number[]) => new ort.Tensor('int64', BigInt64Array.from([BigInt(v)]), dims);
  // Mean per step (as the engine rows are): the garbage collections that the fresh output copies cause
  // belong to the cost, and a median of steps would leave them out.
  const step = async (mode: 'bound' | 'fresh' | 'logits'): Promise<number> => {
    const t0 = performance.now();
    for (let i = 0; i < 16; i++) {
      const at = 32 + i;
      const feeds = {
        input_ids: int64(5, [1, 1]),
        position_ids: int64(at, [1, 1]),
        write_indices: int64(at, [1]),
        kv_seqlen: int64(at + 1, [1]),
        ...Object.fromEntries(buffers),
      };
      if (mode === 'bound') await raw.run(feeds, bound);
      else if (mode === 'fresh') await raw.run(feeds);
      else await raw.run(feeds, ['logits']);
    }
    return (performance.now() - t0) / 16;
  };

  const rows = [
    'engine, growing cache',
    'engine, static cache',
    'step: outputs bound',
    'step: fresh outputs',
    'step: logits only',
  ];
  const samples = new Map<string, number[]>(rows.map((r) => [r, []]));
  const runs: Array<[string, () => Promise<number>]> = [
    [rows[0] as string, async () => (await decode(dynamic)).msPerToken],
    [
      rows[1] as string,
      async () => {
        const a = await decode(fixed);
        const b = await decode(dynamic);
        if (a.ids.join() !== b.ids.join()) throw new Error('the twins generated different greedy tokens');
        return a.msPerToken;
      },
    ],
    [rows[2] as string, () => step('bound')],
    [rows[3] as string, () => step('fresh')],
    [rows[4] as string, () => step('logits')],
  ];
  for (let r = 0; r < reps; r++) {
    for (const [name, fn] of rotate(runs, r)) samples.get(name)?.push(await fn());
    log(`round ${r + 1}/${reps} done`);
  }
  const cacheMiB = (2 * LAYERS * capacity * HIDDEN * 4) / 2 ** 20;
  console.log(
    `### Static vs growing KV cache (${LAYERS} layers × ${HIDDEN}, static cache of ${capacity} positions = ${fmt(cacheMiB)} MiB, ${threads} threads, ${reps} rounds)\n`,
  );
  console.log('| measured | ms (median) | all rounds |');
  console.log('| --- | ---: | --- |');
  for (const name of rows) {
    const v = samples.get(name) ?? [];
    console.log(`| ${name} | ${fmt(median(v))} | ${v.map((x) => fmt(x)).join(' / ')} |`);
  }
  console.log(
    '\nEngine rows: ms per generated token after the first; step rows: one decode step on onnxruntime alone.',
  );
  await Promise.all([dynamic.dispose(), fixed.dispose(), raw.release()]);
}

void main();
