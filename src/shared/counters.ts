/** Scheduler counters added up: every device's as one (for /metrics, and a dropped device's kept). */
import type { HistogramView, SchedulerCounters } from './scheduler-types';

/** Two histograms of the same buckets as one (a different bucketing keeps the first: it cannot be merged). */
function mergeHistograms(a: HistogramView, b: HistogramView): HistogramView {
  if (a.bounds.length !== b.bounds.length || a.bounds.some((x, i) => x !== b.bounds[i])) return a;
  return {
    bounds: a.bounds,
    counts: a.counts.map((n, i) => n + (b.counts[i] ?? 0)),
    count: a.count + b.count,
    sum: a.sum + b.sum,
  };
}

/** Every device's counters as one: each request is counted by the scheduler of the device its model is on. */
export function totalCounters(all: readonly SchedulerCounters[]): SchedulerCounters {
  const [first, ...rest] = all;
  if (first === undefined) throw new Error('totalCounters: no counters');
  return rest.reduce<SchedulerCounters>((t, c) => {
    const rejections: SchedulerCounters['rejections'] = { ...t.rejections };
    for (const [code, n] of Object.entries(c.rejections) as Array<[keyof typeof rejections, number]>) {
      rejections[code] = (rejections[code] ?? 0) + n;
    }
    return {
      accepted: t.accepted + c.accepted,
      admitted: t.admitted + c.admitted,
      finished: t.finished + c.finished,
      cancelled: t.cancelled + c.cancelled,
      failed: t.failed + c.failed,
      rejections,
      budgetCapped: t.budgetCapped + c.budgetCapped,
      contextClipped: t.contextClipped + c.contextClipped,
      evictions: t.evictions + c.evictions,
      generationTokens: t.generationTokens + c.generationTokens,
      ttftSeconds: mergeHistograms(t.ttftSeconds, c.ttftSeconds),
      queueTimeSeconds: mergeHistograms(t.queueTimeSeconds, c.queueTimeSeconds),
    };
  }, first);
}
