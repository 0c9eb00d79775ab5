/** The markdown table and the JSON lines of a run. */
import { type AdmissionScenario, pct, SLOW_US } from '../sections/admission';
import type { ConcurrencyResult } from '../sections/concurrency';
import type { ContenderKey, DecodeResult } from '../sections/decode';
import type { DeliveryOutcome } from '../sections/delivery';
import type { FloorResult, ProductsResult } from '../sections/floor';
import type { KvTruthResult } from '../sections/kv-truth';
import type { LookupResult } from '../sections/lookup';
import type { RendererOutcome, RendererStep } from '../sections/renderer';
import { SAMPLED, SAMPLING_MODES, type SamplingResult } from '../sections/sampling';
import type { BenchOptions } from './context';
import { physicalCores } from './cores';
import type { BenchShape } from './models';
import { fmt, median, round } from './stats';

export interface ShapeReport {
  shape: BenchShape;
  /** kvdeskStepBytes: the weights kvdesk's greedy step reads, with its 8-bit head (absent: the file's, unscreened). */
  spec?: { bpt: number; contextLength: number; weightsBytes: number; kvdeskStepBytes?: number };
  decode: DecodeResult | null;
  concurrency: ConcurrencyResult | null;
  kv: KvTruthResult | { skipped: string } | null;
  lookup: LookupResult | null;
  sampling?: SamplingResult | null;
  /** Its body's weight matrices multiplied alone (bench/sections/floor.ts); absent with --skip floor. */
  products?: ProductsResult;
  notes: string[];
}

/** The keys the issue asks for, in its order. */
export interface SummaryJson {
  engineVsRawOrt: number | null;
  engineVsTransformersJs: number | null;
  engineVsTransformersJsEqualThreads: number | null;
  batch8Speedup: number | null;
  /** Beyond the issue's keys: the raw onnxruntime loop's 8 rows in one batch ÷ 1 row, same rounds (what batching
   * gives onnxruntime itself here: the cause when batch8Speedup misses). */
  batch8SpeedupRawOrt: number | null;
  ttftMs32: number | null;
  ttftMs512: number | null;
  eventLoopP99Ms: number | null;
  admissionP99Us: number | null;
  deliveryP99Ms: number | null;
  rendererTokensPerSecond: number | null;
  kvBytesPerTokenMeasuredVsBpt: number | null;
  /** Lookup decoding (beyond the issue's keys): decode tok/s ÷ lookup off when every draft is right, and when every one is wrong. */
  lookupAllRightVsOff: number | null;
  lookupAllWrongVsOff: number | null;
  /** Sampled decoding (beyond the issue's keys): decode tok/s ÷ greedy, temperature 0.7 over the whole vocabulary. */
  sampledVsGreedy: number | null;
}

function samplesOf(d: DecodeResult | null, key: ContenderKey) {
  return d?.contenders.find((c) => c.key === key)?.samples ?? [];
}

/** Median aggregate tok/s at the most streams (or rows) ÷ at one. */
function batchSpeedup(aggregate: Map<number, number[]> | undefined): number | null {
  if (!aggregate || aggregate.size === 0) return null;
  const one = median(aggregate.get(1) ?? []);
  const max = Math.max(...aggregate.keys());
  const top = median(aggregate.get(max) ?? []);
  return one > 0 ? top / one : null;
}

function kvRatio(kv: ShapeReport['kv']): number | null {
  if (!kv || 'skipped' in kv) return null;
  return kv.liveBytesPerToken / kv.bpt;
}

function admissionP99(a: AdmissionScenario[] | null): number | null {
  return a && a.length > 0 ? Math.max(...a.map((s) => s.decideP99Us)) : null;
}

/** One rate of the chat view: the rate it showed, and its long frames. */
function viewStep(step: RendererStep): string {
  return `shown ${Number.isFinite(step.shown) ? `${step.shown.toFixed(0)} tok/s` : 'too short to read'} over ${step.seconds.toFixed(1)} s; ${step.longFrames} frames > 50 ms${step.longFrames > 0 ? ` (longest ${step.longestFrameMs.toFixed(0)} ms${step.longestFrameParts ? `: ${step.longestFrameParts}` : ''})` : ''}; longest rAF gap ${step.maxGapMs.toFixed(0)} ms`;
}

/** The JSON object of one shape; shape-independent figures (delivery, renderer) only on the GPT-2 line. */
export function summaryJson(
  s: ShapeReport | null,
  admission: AdmissionScenario[] | null,
  delivery: DeliveryOutcome,
  renderer: RendererOutcome,
  primary: boolean,
): SummaryJson {
  const d = s?.decode ?? null;
  return {
    engineVsRawOrt: round(median(d?.pairedRatios.vsRaw ?? [])),
    engineVsTransformersJs: round(median(d?.pairedRatios.vsTjsDefault ?? [])),
    engineVsTransformersJsEqualThreads: round(median(d?.pairedRatios.vsTjsEqual ?? [])),
    batch8Speedup: round(batchSpeedup(s?.concurrency?.aggregate)),
    batch8SpeedupRawOrt: round(batchSpeedup(s?.concurrency?.rawAggregate)),
    ttftMs32: round(median(samplesOf(d, 'kvdesk').map((x) => x.ttftMs)), 1),
    ttftMs512: round(median(d?.long.kvdesk ?? []), 1),
    eventLoopP99Ms: round(s?.concurrency?.eventLoop?.p99Ms, 2),
    admissionP99Us: round(admissionP99(admission), 2),
    deliveryP99Ms: primary && 'p99Ms' in delivery ? round(delivery.p99Ms, 2) : null,
    rendererTokensPerSecond: primary && 'tokensPerSecond' in renderer ? round(renderer.tokensPerSecond, 0) : null,
    kvBytesPerTokenMeasuredVsBpt: round(kvRatio(s?.kv ?? null)),
    lookupAllRightVsOff: round(s?.lookup ? median(s.lookup.vsOff.right) : null),
    lookupAllWrongVsOff: round(s?.lookup ? median(s.lookup.vsOff.wrong) : null),
    sampledVsGreedy: round(s?.sampling ? median(s.sampling.vsGreedy.whole) : null),
  };
}

/** Rows of the sampled-decoding figures. */
function samplingRows(x: SamplingResult | null | undefined): string[] {
  if (!x) return [];
  const row = (mode: (typeof SAMPLED)[number]) =>
    `| … ${SAMPLING_MODES[mode].label} | ${fmt(median(x.tps[mode]))} tok/s, ${median(x.vsGreedy[mode]).toFixed(2)}× (${x.vsGreedy[mode].map((v) => v.toFixed(2)).join(' / ')}) | | |`;
  return [
    `| sampled decoding, one stream, ${x.tokens} tokens (RunnerService): ${SAMPLING_MODES.greedy.label} | ${fmt(median(x.tps.greedy))} tok/s | | |`,
    ...SAMPLED.map(row),
  ];
}

/** Rows of the lookup decoding figures. */
function lookupRows(l: LookupResult | null): string[] {
  if (!l) return [];
  const row = (mode: 'real' | 'predicted' | 'right' | 'wrong', what: string) => {
    const n = l.counts[mode];
    return `| … ${what} | ${fmt(median(l.tps[mode]))} tok/s, ${median(l.vsOff[mode]).toFixed(2)}× (${l.vsOff[mode].map((v) => v.toFixed(2)).join(' / ')}); took ${n?.accepted ?? 0} of ${n?.drafted ?? 0} drafted | | |`;
  };
  return [
    `| lookup decoding, one stream, ${l.tokens} tokens, drafts of ≤ ${l.maxDraft} (engine's decoder in the bench process): off | ${fmt(median(l.tps.off))} tok/s | | |`,
    row('real', "on (kvdesk's default), the bench prompt: random weights repeat little of it"),
    row('predicted', "on, given the reply as the client's prediction (Predicted Outputs)"),
    row('right', 'every draft right (a reply that repeats text it has seen)'),
    row('wrong', 'every draft wrong (each miss rests lookup 2, 4 … 32 tokens)'),
  ];
}

function verdict(ok: boolean | null): string {
  return ok === null ? 'not measured' : ok ? 'met' : '**missed**';
}

const SHAPE_TITLE: Record<BenchShape, string> = {
  'gpt2-small': 'GPT-2-small shape (12 layers × 768, vocab 50257, fp32)',
  'llama-small': 'Llama shape (30 layers × 576, 9/3 heads, SwiGLU, RoPE, vocab 49152, fp32)',
};

/**
 * Rows that set the decode figures against the weight-streaming floor: the
 * least time a batch-1 step can take here (every weight read once at the
 * bandwidth onnxruntime's matrix products reached in this run).
 */
function floorRows(s: ShapeReport, floor: FloorResult | null): string[] {
  if (!floor) return ['| weight-streaming floor | skipped (--skip floor) | | |'];
  if (!s.spec || !s.decode) return [];
  const floorMs = s.spec.weightsBytes / (floor.gbPerS * 1e6);
  const tps = (key: ContenderKey) => median(samplesOf(s.decode, key).map((x) => x.decodeTokensPerSecond));
  const share = (t: number) => (t > 0 ? `${((floorMs / (1000 / t)) * 100).toFixed(0)} %` : '—');
  const tjs = tps('tjsDefault');
  const rows = [
    `| weight-streaming floor: ${(s.spec.weightsBytes / 1e6).toFixed(0)} MB of weights ÷ ${floor.gbPerS.toFixed(1)} GB/s (onnxruntime MatMul over 512 MiB of random weights, this run) | ${floorMs.toFixed(1)} ms/token = ${fmt(1000 / floorMs)} tok/s | | |`,
    `| … share of a decode step that is the floor: kvdesk / raw loop / transformers.js (defaults) | ${share(tps('kvdesk'))} / ${share(tps('raw'))} / ${share(tjs)} | | |`,
  ];
  const own = s.spec.kvdeskStepBytes;
  const ownMs = own !== undefined ? own / (floor.gbPerS * 1e6) : undefined;
  const ownShare = (t: number) => (ownMs !== undefined && t > 0 ? `${((ownMs / (1000 / t)) * 100).toFixed(0)} %` : '—');
  if (own !== undefined && ownMs !== undefined) {
    rows.push(
      `| … kvdesk's own floor: its greedy step reads ${(own / 1e6).toFixed(0)} MB (the LM head's 8-bit copy in place of its float32 weights) | ${ownMs.toFixed(1)} ms/token = ${fmt(1000 / ownMs)} tok/s, ${ownShare(tps('kvdesk'))} of kvdesk's step | | |`,
    );
  }
  const p = s.products;
  const kvdeskMs = tps('kvdesk') > 0 ? 1000 / tps('kvdesk') : 0;
  if (p && kvdeskMs > 0) {
    const rest = kvdeskMs - p.ms;
    // The step ×1.5 asks for, from the paired ratio the verdict reads (not the medians of the rows above).
    const paired = median(s.decode.pairedRatios.vsTjsDefault);
    const leave = paired > 0 ? (kvdeskMs * paired) / 1.5 - p.ms : undefined;
    rows.push(
      `| … its body's ${p.matrices} weight matrices alone (${(p.bytes / 1e6).toFixed(0)} MB: all but the LM head), each multiplying one row, in a graph of nothing else, this run | ${p.ms.toFixed(1)} ms = ${((p.ms / kvdeskMs) * 100).toFixed(0)} % of kvdesk's step (${kvdeskMs.toFixed(1)} ms) | | |`,
      `| … the rest of kvdesk's step: the LM head (its 8-bit copy) and the pick, the graph's other nodes (attention, norms, positions, shapes), the host's share | ${rest.toFixed(1)} ms${leave !== undefined ? `; 1.5 × transformers.js (defaults, the paired ratio) would leave it ${leave.toFixed(1)} ms` : ''} | | |`,
    );
  }
  if (tjs > 0) {
    rows.push(
      `| … 1.5 × transformers.js (defaults) would be | ${fmt(1.5 * tjs)} tok/s: the floor would be ${share(1.5 * tjs)} of each step${own !== undefined ? ` (kvdesk's own: ${ownShare(1.5 * tjs)})` : ''} (100 % = a step that only reads weights) | | |`,
    );
  }
  return rows;
}

/**
 * Where onnxruntime's default (one intra-op thread per physical core) comes to kvdesk's threads, "each at defaults"
 * is the equal-threads comparison: the row says so.
 */
function sameThreads(opts: BenchOptions): string {
  const cores = physicalCores();
  return cores === opts.threads
    ? ` (here the same ${cores} threads: onnxruntime's default is one per physical core, and this machine shows ${cores} cores)`
    : '';
}

function shapeSection(opts: BenchOptions, s: ShapeReport, j: SummaryJson, floor: FloorResult | null): string[] {
  const out: string[] = [];
  out.push(`### ${SHAPE_TITLE[s.shape]}`, '');
  if (s.spec)
    out.push(
      `bpt ${s.spec.bpt} B/token, context ${s.spec.contextLength}, weights ${(s.spec.weightsBytes / 1e6).toFixed(0)} MB.`,
      '',
    );
  const d = s.decode;
  if (d) {
    out.push(
      `| contender | decode tok/s (median) | decode tok/s (all rounds) | TTFT 32 ms | TTFT ${opts.longPrompt} ms | setup |`,
      '| --- | ---: | --- | ---: | ---: | --- |',
    );
    for (const c of d.contenders) {
      if (c.skipped) {
        out.push(`| ${c.label} | — | skipped: ${c.skipped} | — | — | |`);
        continue;
      }
      const tps = c.samples.map((x) => x.decodeTokensPerSecond);
      const long = c.key === 'kvdesk' ? d.long.kvdesk : c.key === 'raw' ? d.long.raw : [];
      out.push(
        `| ${c.label} | ${fmt(median(tps))} | ${tps.map((v) => v.toFixed(1)).join(' / ')} | ${fmt(median(c.samples.map((x) => x.ttftMs)), 0)} | ${long.length > 0 ? fmt(median(long), 0) : '—'} | ${c.detail}${c.loadMs !== null ? `, load ${(c.loadMs / 1000).toFixed(1)} s` : ''} |`,
      );
    }
    out.push('');
    // Every contender stops at the end-of-text (their greedy ids are checked equal), which may come before the last.
    const written = d.contenders.find((c) => !c.skipped && c.samples.length > 0)?.samples[0]?.ids.length;
    if (written !== undefined && written < opts.decodeTokens) {
      out.push(
        `The greedy reply ends at an end-of-text token after ${written} of the ${opts.decodeTokens} tokens asked, where every contender stops: the decode figures are over ${written} tokens.`,
        '',
      );
    }
  }
  const c = s.concurrency;
  const kv = s.kv;
  out.push('| figure | value | target | verdict |', '| --- | ---: | --- | --- |');
  const r = (v: number | null, digits = 2) => (v === null ? '—' : v.toFixed(digits));
  out.push(
    `| kvdesk / raw loop, decode tok/s (paired median) | ${r(j.engineVsRawOrt)}× | ≥ 0.95× | ${verdict(j.engineVsRawOrt === null ? null : j.engineVsRawOrt >= 0.95)} |`,
  );
  out.push(
    `| kvdesk / transformers.js, each at defaults${sameThreads(opts)} | ${r(j.engineVsTransformersJs)}× | ≥ 1.5× | ${verdict(j.engineVsTransformersJs === null ? null : j.engineVsTransformersJs >= 1.5)} |`,
  );
  out.push(
    `| kvdesk / transformers.js, equal threads | ${r(j.engineVsTransformersJsEqualThreads)}× | ≥ 1.2× | ${verdict(j.engineVsTransformersJsEqualThreads === null ? null : j.engineVsTransformersJsEqualThreads >= 1.2)} |`,
  );
  out.push(...floorRows(s, floor));
  if (c) {
    const agg = [...c.aggregate].map(([n, v]) => `${n}: ${fmt(median(v))}`).join(', ');
    out.push(`| aggregate tok/s by streams (median) | ${agg} | | |`);
  }
  out.push(
    `| 8 streams / 1 stream, aggregate tok/s | ${r(j.batch8Speedup)}× | ≥ 3× | ${verdict(j.batch8Speedup === null ? null : j.batch8Speedup >= 3)} |`,
  );
  if (c?.rawSkipped) out.push(`| raw onnxruntime loop, rows in one batch | skipped: ${c.rawSkipped} | | |`);
  else if (c && c.rawAggregate.size > 0) {
    const agg = [...c.rawAggregate].map(([n, v]) => `${n}: ${fmt(median(v))}`).join(', ');
    out.push(
      `| raw onnxruntime loop, the same prompts as the rows of one batch: aggregate tok/s by rows (median, same rounds) | ${agg} | | |`,
    );
    const share =
      j.batch8Speedup !== null && j.batch8SpeedupRawOrt !== null
        ? ` (kvdesk's 8 ÷ 1 is ${(j.batch8Speedup / j.batch8SpeedupRawOrt).toFixed(2)}× it)`
        : '';
    out.push(
      `| … 8 rows / 1 row: what batching gives onnxruntime itself on this machine (no scheduler, no padding, no frames) | ${r(j.batch8SpeedupRawOrt)}×${share} | | |`,
    );
  }
  out.push(...samplingRows(s.sampling));
  out.push(...lookupRows(s.lookup));
  out.push(`| TTFT, 32-token prompt (kvdesk, host-side) | ${r(j.ttftMs32, 0)} ms | | |`);
  out.push(`| TTFT, ${opts.longPrompt}-token prompt (kvdesk, host-side) | ${r(j.ttftMs512, 0)} ms | | |`);
  if (c?.eventLoop) {
    out.push(
      `| host event-loop delay with 8 streams, p50 / p99 / max | ${c.eventLoop.p50Ms.toFixed(2)} / ${c.eventLoop.p99Ms.toFixed(2)} / ${c.eventLoop.maxMs.toFixed(2)} ms | p99 < 20 ms | ${verdict(c.eventLoop.p99Ms < 20)} |`,
    );
  }
  if (c && c.batchedMatchesSolo !== null) {
    out.push(
      `| greedy ids of a stream in a batch of 8 = alone | ${c.batchedMatchesSolo ? 'yes' : `no (${c.batchedMismatch})`} | | |`,
    );
  }
  if (kv && !('skipped' in kv)) {
    const ratio = kv.liveBytesPerToken / kv.bpt;
    const x = (b: number | null) => (b === null ? '—' : (b / 2 ** 20).toFixed(0));
    out.push(
      `| engine KV tensors per token / bpt (ArrayBuffer bytes after a full GC before each frame; ${kv.promptTokens}-token prompt + ${kv.generatedTokens} tokens, r² ${kv.liveR2.toFixed(3)}) | ${ratio.toFixed(3)}× (${(kv.liveBytesPerToken / 1024).toFixed(1)} KiB vs ${(kv.bpt / 1024).toFixed(1)} KiB) | within 5% (0.95–1.05×) | ${verdict(Math.abs(ratio - 1) <= 0.05)} |`,
    );
    out.push(
      `| … engine RSS after a full GC, per token / bpt (allocators included) | ${kv.liveRssBytesPerToken === null ? '—' : `${(kv.liveRssBytesPerToken / kv.bpt).toFixed(2)}×`} | | |`,
    );
    out.push(
      `| … the raw onnxruntime loop, same prompt, same method: KV tensors / RSS after GC | ${kv.raw ? `${(kv.raw.liveBytesPerToken / kv.bpt).toFixed(3)}× / ${kv.raw.liveRssBytesPerToken === null ? '—' : `${(kv.raw.liveRssBytesPerToken / kv.bpt).toFixed(2)}×`} (${kv.raw.generatedTokens} tokens)` : '—'} | | |`,
    );
    out.push(
      `| engine memory occupied per token / bpt, no forced GC (garbage included; ±50% run to run) | ${kv.occupiedBytesPerToken === null ? '—' : `${(kv.occupiedBytesPerToken / kv.bpt).toFixed(2)}× (r² ${(kv.occupiedR2 ?? 0).toFixed(2)})`}; RSS before / end / peak ${x(kv.rssBeforeBytes)} / ${x(kv.rssEndBytes)} / ${x(kv.hwmBytes)} MiB | | |`,
    );
  } else if (kv) out.push(`| KV truth | skipped: ${kv.skipped} | within 5% | not measured |`);
  out.push('');
  for (const n of s.notes) out.push(`- ${n}`);
  if (s.notes.length > 0) out.push('');
  return out;
}

export function buildReport(a: {
  opts: BenchOptions;
  machine: string;
  shapes: ShapeReport[];
  floor: FloorResult | null;
  admission: AdmissionScenario[] | null;
  delivery: DeliveryOutcome;
  renderer: RendererOutcome;
  failures: string[];
  elapsedS: number;
}): string {
  const { opts } = a;
  const out: string[] = [];
  out.push(
    `## kvdesk benchmark (${opts.quick ? 'quick' : 'full'}${opts.skip.size > 0 ? `, partial: ${[...opts.skip].join(', ')} left out` : ''}) — ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    '',
  );
  out.push(`Machine: ${a.machine}.`);
  // The settings of the sections that ran (a partial run's left-out sections have none to report).
  const ran = (section: string, setting: string) => (opts.skip.has(section) ? [] : [setting]);
  out.push(
    `Run: ${[
      `${opts.reps} alternating rounds per A/B figure, medians`,
      `decode ${opts.decodeTokens} new tokens greedy after a 32-token prompt`,
      `${opts.threads} intra-op threads`,
      ...ran('concurrency', `streams ${opts.streamCounts.join('/')} × ${opts.streamTokens} tokens`),
      ...ran('kv', `KV truth ${opts.kvPrompt}+${opts.kvTokens} tokens`),
      `took ${(a.elapsedS / 60).toFixed(1)} min`,
    ].join('; ')}.`,
  );
  const g = opts.guard.stats;
  out.push(
    `Noise guard (other processes > ${Math.round(opts.guard.threshold * 100)}% of the CPUs during a sample): ${g.samples} timed samples, ${g.retried} repeated, ${g.keptNoisy} kept noisy, ${(g.waitedMs / 1000).toFixed(0)} s spent waiting for a quiet machine.`,
    '',
  );
  for (const s of a.shapes)
    out.push(
      ...shapeSection(opts, s, summaryJson(s, a.admission, a.delivery, a.renderer, s.shape === 'gpt2-small'), a.floor),
    );
  out.push(
    '### Host, scheduler and transport',
    '',
    '| figure | value | target | verdict |',
    '| --- | ---: | --- | --- |',
  );
  if (a.admission) {
    for (const s of a.admission) {
      out.push(
        `| admission decision (${s.name}), p50 / p99 | ${s.decideP50Us.toFixed(1)} / ${s.decideP99Us.toFixed(1)} µs (submit p99 ${s.submitP99Us.toFixed(1)} µs) | p99 < 50 µs | ${verdict(s.decideP99Us < 50)} |`,
        `| … control in the same cycles (fixed arithmetic, no scheduler), p50 / p99; samples over ${SLOW_US} µs: decisions / control | ${s.controlP50Us.toFixed(1)} / ${s.controlP99Us.toFixed(1)} µs; ${pct(s.decideSlowShare)} / ${pct(s.controlSlowShare)} | | |`,
      );
    }
  } else out.push('| admission decision | skipped | p99 < 50 µs | not measured |');
  const dl = a.delivery;
  if ('p99Ms' in dl) {
    out.push(
      `| token delivery engine → WebSocket client, p50 / p99 / max | ${dl.p50Ms.toFixed(2)} / ${dl.p99Ms.toFixed(2)} / ${dl.maxMs.toFixed(2)} ms (${dl.tokens} tokens, ${dl.frames} frames; ${dl.detail}) | | |`,
    );
  } else out.push(`| token delivery engine → WebSocket client | skipped: ${dl.skipped} | | not measured |`);
  const rd = a.renderer;
  if ('tokensPerSecond' in rd) {
    out.push(
      `| chat view: highest token rate without a frame over 50 ms | ${rd.tokensPerSecond.toFixed(0)} tok/s (${rd.detail}) | ≥ 2000 tok/s | ${verdict(rd.tokensPerSecond >= 2000)} |`,
    );
    for (const step of rd.sweep) {
      out.push(`| … offered ${step.offered} tok/s | ${viewStep(step)} | | |`);
    }
    for (const step of rd.code) {
      out.push(`| … replies that are one code block (Python), offered ${step.offered} tok/s | ${viewStep(step)} | | |`);
    }
  } else out.push(`| chat view token rate | skipped: ${rd.skipped} | ≥ 2000 tok/s | not measured |`);
  out.push('');
  if (a.failures.length > 0) {
    out.push('**Run failed:**', '');
    for (const f of a.failures) out.push(`- ${f}`);
    out.push('');
  }
  return out.join('\n');
}
