import { describe, expect, it } from 'vitest';
import { prometheusText } from '../../../src/main/server/metrics';
import type { SchedulerSnapshot } from '../../../src/shared/scheduler-types';

function snapshot(): SchedulerSnapshot {
  const view = {
    id: 'r',
    modelId: 'm',
    state: 'running' as const,
    priority: 0,
    rows: 1,
    promptTokens: 3,
    sessionPrefixTokens: 0,
    requestedMaxTokens: 4,
    maxNewTokens: 4,
    bpt: 8,
    reservedBytes: 56,
    usedBytes: 40,
    generatedTokens: 2,
  };
  return {
    at: 0,
    limitBytes: 200,
    reservedBytes: 56,
    usedBytes: 40,
    heldBytes: 24,
    freeBytes: 120,
    bpt: 8,
    derivation: { source: 'explicit', limitBytes: 200, formula: '200 B', notes: [] },
    maxRunning: 4,
    maxQueue: 16,
    queue: [
      { ...view, id: 'q', state: 'queued', reservedBytes: 0, usedBytes: 0 },
      { ...view, id: 'q2', state: 'queued', reservedBytes: 0, usedBytes: 0 },
    ],
    running: [view],
    sessions: [],
    recent: [],
    counters: {
      accepted: 10,
      admitted: 8,
      finished: 6,
      cancelled: 1,
      failed: 0,
      rejections: { QUEUE_FULL: 3, BAD_REQUEST: 1 },
      budgetCapped: 2,
      contextClipped: 1,
      evictions: 0,
      generationTokens: 77,
      ttftSeconds: { bounds: [0.1, 1], counts: [2, 5], count: 6, sum: 3.5 },
      queueTimeSeconds: { bounds: [0.5], counts: [8], count: 8, sum: 0.25 },
    },
    violations: [],
  };
}

function parse(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.trimEnd().split('\n')) {
    if (line.startsWith('#')) {
      expect(line).toMatch(/^# (HELP|TYPE) kvdesk_[a-z_]+ .+$/);
      continue;
    }
    const m = /^(kvdesk_[a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    expect(m, line).not.toBeNull();
    out.set((m as RegExpExecArray)[1] as string, (m as RegExpExecArray)[2] as string);
  }
  return out;
}

describe('prometheusText', () => {
  const text = prometheusText(snapshot());
  const m = parse(text);

  it('exports the gauges of the snapshot', () => {
    expect(m.get('kvdesk_num_requests_running')).toBe('1');
    expect(m.get('kvdesk_num_requests_waiting')).toBe('2');
    expect(m.get('kvdesk_kv_budget_bytes')).toBe('200');
    expect(m.get('kvdesk_kv_reserved_bytes')).toBe('56');
    expect(m.get('kvdesk_kv_used_bytes')).toBe('40');
    expect(m.get('kvdesk_kv_held_bytes')).toBe('24');
    expect(m.get('kvdesk_kv_usage_ratio')).toBe(String((56 + 24) / 200));
  });

  it('exports counters, with the main refusal codes even at zero', () => {
    expect(m.get('kvdesk_rejections_total{code="QUEUE_FULL"}')).toBe('3');
    expect(m.get('kvdesk_rejections_total{code="BAD_REQUEST"}')).toBe('1');
    expect(m.get('kvdesk_rejections_total{code="KV_BUDGET_EXCEEDED"}')).toBe('0');
    expect(m.get('kvdesk_rejections_total{code="CONTEXT_OVERFLOW"}')).toBe('0');
    expect(m.get('kvdesk_budget_capped_total')).toBe('2');
    expect(m.get('kvdesk_generation_tokens_total')).toBe('77');
    expect(m.get('kvdesk_requests_total{event="admitted"}')).toBe('8');
  });

  it('exports histograms with cumulative buckets, +Inf = count, sum and count', () => {
    expect(m.get('kvdesk_time_to_first_token_seconds_bucket{le="0.1"}')).toBe('2');
    expect(m.get('kvdesk_time_to_first_token_seconds_bucket{le="1"}')).toBe('5');
    expect(m.get('kvdesk_time_to_first_token_seconds_bucket{le="+Inf"}')).toBe('6');
    expect(m.get('kvdesk_time_to_first_token_seconds_sum')).toBe('3.5');
    expect(m.get('kvdesk_time_to_first_token_seconds_count')).toBe('6');
    expect(m.get('kvdesk_request_queue_time_seconds_bucket{le="0.5"}')).toBe('8');
    expect(m.get('kvdesk_request_queue_time_seconds_count')).toBe('8');
    expect(text).toMatch(/# TYPE kvdesk_time_to_first_token_seconds histogram/);
    expect(text).toMatch(/# TYPE kvdesk_rejections_total counter/);
    expect(text).toMatch(/# TYPE kvdesk_kv_budget_bytes gauge/);
  });

  it('declares each metric once and ends with a newline', () => {
    const types = text.split('\n').filter((l) => l.startsWith('# TYPE'));
    expect(new Set(types).size).toBe(types.length);
    expect(text.endsWith('\n')).toBe(true);
  });

  it('reports a zero usage ratio for a zero budget', () => {
    const s = snapshot();
    s.limitBytes = 0;
    expect(parse(prometheusText(s)).get('kvdesk_kv_usage_ratio')).toBe('0');
  });
});
