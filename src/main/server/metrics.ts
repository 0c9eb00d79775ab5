/**
 * Prometheus text exposition (format 0.0.4) of one scheduler snapshot. Every
 * figure is read from the same snapshot, so /metrics and /v1/kvdesk/budget
 * agree whenever they are taken at the same instant. Names follow vLLM where it
 * has one (SCHEDULER.md, "What is exposed").
 */
import { totalCounters } from '../../shared/counters';
import type { BudgetSnapshot, HistogramView, SchedulerSnapshot } from '../../shared/scheduler-types';

/** Content-Type of the Prometheus text format. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** Refusal codes always exported (as 0 until they happen) so dashboards can rate() them from the start. */
const ALWAYS_EXPORTED = ['CONTEXT_OVERFLOW', 'KV_BUDGET_EXCEEDED', 'QUEUE_FULL'];

function value(n: number): string {
  if (Number.isNaN(n)) return 'NaN';
  if (n === Number.POSITIVE_INFINITY) return '+Inf';
  if (n === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(n);
}

function label(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/**
 * Renders the snapshot's gauges, counters and histograms. The unlabelled budget
 * gauges (`kvdesk_kv_*`) are the CPU budget's (the snapshot's top level); the
 * request gauges, counters and histograms count every device's requests; with a
 * `devices` list, the `kvdesk_device_*{device}` series give each device's budget,
 * occupancy and counts.
 */
export function prometheusText(s: SchedulerSnapshot | BudgetSnapshot): string {
  const out: string[] = [];
  const metric = (name: string, type: 'gauge' | 'counter' | 'histogram', help: string) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  };
  const sample = (name: string, v: number, labels?: Record<string, string>) => {
    const l = labels
      ? `{${Object.entries(labels)
          .map(([k, x]) => `${k}="${label(x)}"`)
          .join(',')}}`
      : '';
    out.push(`${name}${l} ${value(v)}`);
  };
  /** A metric of one unlabelled sample. */
  const one = (name: string, type: 'gauge' | 'counter', help: string, v: number) => {
    metric(name, type, help);
    sample(name, v);
  };
  const histogram = (name: string, help: string, h: HistogramView) => {
    metric(name, 'histogram', help);
    h.bounds.forEach((bound, i) => {
      sample(`${name}_bucket`, h.counts[i] ?? 0, { le: value(bound) });
    });
    sample(`${name}_bucket`, h.count, { le: '+Inf' });
    sample(`${name}_sum`, h.sum);
    sample(`${name}_count`, h.count);
  };
  const devices = 'devices' in s ? s.devices : [];
  const every = devices.length > 0 ? devices : [s];
  // A GPU whose last model went took its scheduler along: its counts stay in `retiredCounters`.
  const retired = 'retiredCounters' in s && s.retiredCounters ? [s.retiredCounters] : [];
  const c = totalCounters([...every.map((d) => d.counters), ...retired]);

  one(
    'kvdesk_num_requests_running',
    'gauge',
    'Requests admitted and running in the engine.',
    every.reduce((n, d) => n + d.running.length, 0),
  );
  one(
    'kvdesk_num_requests_waiting',
    'gauge',
    'Requests accepted and waiting in the admission queue.',
    every.reduce((n, d) => n + d.queue.length, 0),
  );
  one('kvdesk_kv_budget_bytes', 'gauge', 'KV-cache byte budget B the scheduler admits against.', s.limitBytes);
  one('kvdesk_kv_reserved_bytes', 'gauge', 'Bytes reserved by running requests.', s.reservedBytes);
  one(
    'kvdesk_kv_used_bytes',
    'gauge',
    'KV bytes running requests actually hold (never above their reservation).',
    s.usedBytes,
  );
  one('kvdesk_kv_held_bytes', 'gauge', 'Bytes retained by idle chat sessions.', s.heldBytes);
  one('kvdesk_kv_free_bytes', 'gauge', 'Budget not reserved or held.', s.freeBytes);
  one(
    'kvdesk_kv_usage_ratio',
    'gauge',
    'Share of the budget committed: (reserved + held) / budget; 0 with a zero budget.',
    s.limitBytes > 0 ? (s.reservedBytes + s.heldBytes) / s.limitBytes : 0,
  );
  one('kvdesk_max_running', 'gauge', 'Requests that may run at once.', s.maxRunning);
  one('kvdesk_max_queue', 'gauge', 'Requests that may wait in the queue.', s.maxQueue);

  metric('kvdesk_rejections_total', 'counter', 'Requests refused, by kvdesk error code.');
  const codes = new Set([...ALWAYS_EXPORTED, ...Object.keys(c.rejections)]);
  for (const code of [...codes].sort()) {
    sample('kvdesk_rejections_total', c.rejections[code as keyof typeof c.rejections] ?? 0, { code });
  }
  metric(
    'kvdesk_requests_total',
    'counter',
    'Requests by lifecycle event: accepted, admitted, finished, cancelled, failed.',
  );
  sample('kvdesk_requests_total', c.accepted, { event: 'accepted' });
  sample('kvdesk_requests_total', c.admitted, { event: 'admitted' });
  sample('kvdesk_requests_total', c.finished, { event: 'finished' });
  sample('kvdesk_requests_total', c.cancelled, { event: 'cancelled' });
  sample('kvdesk_requests_total', c.failed, { event: 'failed' });
  one(
    'kvdesk_budget_capped_total',
    'counter',
    'Requests admitted with fewer new tokens than asked because of the KV budget.',
    c.budgetCapped,
  );
  one(
    'kvdesk_context_clipped_total',
    'counter',
    'Requests whose max new tokens the context window clipped.',
    c.contextClipped,
  );
  one('kvdesk_session_evictions_total', 'counter', 'Idle sessions whose retained KV was dropped.', c.evictions);
  one(
    'kvdesk_generation_tokens_total',
    'counter',
    'Generated tokens, every row of a multi-row request counted.',
    c.generationTokens,
  );
  // vLLM's speculative-decoding counters: here lookup decoding's drafts (and a prediction's).
  const lookup = 'lookup' in s && s.lookup ? s.lookup : { drafted: 0, accepted: 0 };
  one(
    'kvdesk_spec_decode_num_draft_tokens_total',
    'counter',
    'Tokens lookup decoding drafted and checked (from earlier text or a predicted reply).',
    lookup.drafted,
  );
  one(
    'kvdesk_spec_decode_num_accepted_tokens_total',
    'counter',
    'Drafted tokens the model took: each one a decode step saved.',
    lookup.accepted,
  );

  if (devices.length > 0) {
    const perDevice: Array<[string, string, (d: (typeof devices)[number]) => number]> = [
      ['kvdesk_device_kv_budget_bytes', 'KV-cache byte budget of each device (cpu, cuda:0, …).', (d) => d.limitBytes],
      ['kvdesk_device_kv_reserved_bytes', 'Bytes reserved by running requests, per device.', (d) => d.reservedBytes],
      ['kvdesk_device_kv_used_bytes', 'KV bytes running requests hold, per device.', (d) => d.usedBytes],
      ['kvdesk_device_kv_held_bytes', 'Bytes retained by idle chat sessions, per device.', (d) => d.heldBytes],
      ['kvdesk_device_num_requests_running', 'Requests running, per device.', (d) => d.running.length],
      ['kvdesk_device_num_requests_waiting', 'Requests waiting, per device.', (d) => d.queue.length],
    ];
    for (const [name, help, read] of perDevice) {
      metric(name, 'gauge', help);
      for (const d of devices) sample(name, read(d), { device: d.device });
    }
  }

  histogram('kvdesk_time_to_first_token_seconds', 'Time from acceptance to the first generated token.', c.ttftSeconds);
  histogram('kvdesk_request_queue_time_seconds', 'Time from acceptance to admission.', c.queueTimeSeconds);
  return `${out.join('\n')}\n`;
}
