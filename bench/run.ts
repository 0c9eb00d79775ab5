/**
 * kvdesk's benchmark: `npm run bench` (full) or `npm run bench -- --quick`.
 * Progress goes to stderr; stdout gets the markdown table, then (for the Llama
 * shape, when measured) one JSON line, then the GPT-2-shape JSON line last.
 * Exits 1 when greedy tokens differ between kvdesk, the raw onnxruntime loop
 * and transformers.js, or when a kvdesk section fails. See bench/README.md.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { presetConfig } from '../scripts/model-gen/index';
import { screenProductBytes } from '../src/main/engine/head-screen';
import { parseArgs, USAGE, UsageError } from './lib/args';
import { type BenchOptions, log } from './lib/context';
import { benchRunner } from './lib/kvdesk';
import { type BenchShape, ensureModel, modelDir } from './lib/models';
import { machineLine } from './lib/proc';
import { promptSource } from './lib/prompts';
import { buildReport, type ShapeReport, summaryJson } from './lib/report';
import { type AdmissionScenario, runAdmission } from './sections/admission';
import { runConcurrency } from './sections/concurrency';
import { runDecode } from './sections/decode';
import { runDelivery } from './sections/delivery';
import { type FloorResult, runFloor, runProducts } from './sections/floor';
import { runKvTruth } from './sections/kv-truth';
import { runLookup } from './sections/lookup';
import { runRenderer } from './sections/renderer';
import { runSampling } from './sections/sampling';

async function measureShape(opts: BenchOptions, shape: BenchShape, failures: string[]): Promise<ShapeReport> {
  log(`${shape}: model package`);
  const model = ensureModel(shape, log);
  log(`  ${model.dir}: ${model.status} (${(model.ms / 1000).toFixed(1)} s)`);
  const report: ShapeReport = { shape, decode: null, concurrency: null, kv: null, lookup: null, notes: [] };
  const runner = benchRunner(opts);
  try {
    const info = await runner.loadModel(model.dir);
    // With its 8-bit screen, kvdesk's greedy step reads the head's 8-bit copy in place of its float32 weights: fewer
    // bytes than the file's (README, "Greedy decoding … read an 8-bit copy of the LM head").
    const config = presetConfig(shape);
    const head = config.vocabSize * config.hiddenSize;
    const screened = info.logits.screen?.startsWith('greedy picks') === true;
    report.spec = {
      bpt: info.spec.bpt,
      contextLength: info.spec.contextLength,
      weightsBytes: info.spec.weightsBytes,
      ...(screened
        ? {
            kvdeskStepBytes:
              info.spec.weightsBytes - 4 * head + screenProductBytes(config.vocabSize, config.hiddenSize),
          }
        : {}),
    };
    log(
      `  kvdesk loaded ${info.id} in ${(info.loadMs / 1000).toFixed(1)} s (bpt ${info.spec.bpt}, engine pid ${runner.engine.pid})`,
    );
    const need = Math.max(opts.longPrompt, opts.kvPrompt) + 8 * 97 + 64;
    const prompts = promptSource(runner, info.id, need);
    log(`${shape}: decode comparison (${opts.reps} rounds × ${opts.decodeTokens} tokens, prompt 32)`);
    report.decode = await runDecode(opts, runner, info.id, model.dir, info.loadMs, info.spec.eosTokenIds, prompts);
    failures.push(...report.decode.mismatches);
    if (opts.skip.has('concurrency')) report.notes.push('concurrency: skipped by --skip concurrency');
    else {
      log(`${shape}: concurrent streams ${opts.streamCounts.join('/')} (${opts.streamTokens} tokens each)`);
      report.concurrency = await runConcurrency(opts, runner, info.id, prompts, model.dir);
      if (report.concurrency.batchedMismatch)
        report.notes.push(`batching changed greedy tokens: ${report.concurrency.batchedMismatch}`);
    }
    if (opts.skip.has('sampling')) report.notes.push('sampled decoding: skipped by --skip sampling');
    else {
      log(
        `${shape}: sampled decoding (${opts.reps} rounds × ${opts.sideTokens} tokens: greedy, whole vocabulary, package defaults)`,
      );
      report.sampling = await runSampling(opts, runner, info.id, prompts);
    }
    if (opts.skip.has('lookup')) report.notes.push('lookup decoding: skipped by --skip lookup');
    else {
      log(
        `${shape}: lookup decoding (${opts.reps} rounds × ${opts.sideTokens} tokens: off, real, predicted, right, wrong)`,
      );
      report.lookup = await runLookup(opts, model.dir, prompts);
      if (report.lookup.mismatch) failures.push(`${shape}: ${report.lookup.mismatch}`);
      report.notes.push(...report.lookup.nearTies);
    }
  } finally {
    await runner.close();
  }
  if (opts.skip.has('kv')) report.kv = { skipped: 'skipped by --skip kv' };
  else {
    log(`${shape}: KV truth (fresh engine, ${opts.kvPrompt}-token prompt, ${opts.kvTokens} new tokens)`);
    const need = opts.kvPrompt + 64;
    report.kv = await runKvTruth(opts, model.dir, (r, id) => promptSource(r, id, need));
  }
  return report;
}

async function main(): Promise<number> {
  let opts: BenchOptions;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`${err.message ? `bench: ${err.message}\n` : ''}${USAGE}\n`);
    return err.message ? 2 : 0;
  }
  const started = performance.now();
  const machine = await machineLine();
  log(`machine: ${machine.text}`);
  if (machine.busyBefore !== null && machine.busyBefore > 0.25) {
    log(
      `WARNING: ${Math.round(machine.busyBefore * 100)}% of the CPUs were busy before the bench started; absolute figures will be low, ratios noisy`,
    );
  }
  const failures: string[] = [];
  const shapes: ShapeReport[] = [];
  for (const shape of opts.shapes) shapes.push(await measureShape(opts, shape, failures));

  let floor: FloorResult | null = null;
  if (!opts.skip.has('floor')) {
    log('weight-streaming floor (onnxruntime MatMul over 512 MiB of random weights)');
    floor = await runFloor(opts);
    for (const s of shapes.filter((x) => x.decode)) {
      const graph = path.join(modelDir(s.shape), 'onnx', 'model.onnx');
      s.products = await runProducts(opts, s.shape, graph, presetConfig(s.shape).vocabSize);
    }
  }
  let admission: AdmissionScenario[] | null = null;
  if (!opts.skip.has('admission')) {
    log('admission micro-benchmark (pure scheduler)');
    admission = await runAdmission(opts);
  }
  const gpt2Dir = ensureModel('gpt2-small', () => {}).dir;
  log('token delivery over the WebSocket transport');
  const delivery = opts.skip.has('delivery')
    ? { skipped: 'skipped by --skip delivery' }
    : await runDelivery(opts, gpt2Dir);
  log('chat view rate in Chromium');
  const renderer = opts.skip.has('renderer')
    ? { skipped: 'skipped by --skip renderer' }
    : await runRenderer(opts, gpt2Dir);

  const elapsedS = (performance.now() - started) / 1000;
  const report = buildReport({
    opts,
    machine: machine.text,
    shapes,
    floor,
    admission,
    delivery,
    renderer,
    failures,
    elapsedS,
  });
  process.stdout.write(`${report}\n`);
  if (opts.reportPath) {
    mkdirSync(path.dirname(opts.reportPath), { recursive: true });
    writeFileSync(opts.reportPath, `${report}\n`);
    log(`report written to ${path.relative(process.cwd(), opts.reportPath)}`);
  }
  for (const s of shapes.filter((x) => x.shape !== 'gpt2-small')) {
    process.stdout.write(
      `${JSON.stringify({ shape: s.shape, ...summaryJson(s, admission, delivery, renderer, false) })}\n`,
    );
  }
  const gpt2 = shapes.find((s) => s.shape === 'gpt2-small');
  const last = gpt2
    ? summaryJson(gpt2, admission, delivery, renderer, true)
    : summaryJson(null, admission, delivery, renderer, true);
  process.stdout.write(`${JSON.stringify(last)}\n`);
  if (failures.length > 0) {
    for (const f of failures) log(`FAILED: ${f}`);
    return 1;
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
