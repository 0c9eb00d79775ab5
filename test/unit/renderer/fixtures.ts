/** Builders for renderer tests: snapshots, request views, threads, stream frames. */
import type { Thread } from '../../../src/shared/api';
import type { GenerationResult, StreamFrame } from '../../../src/shared/contract';
import type { BudgetSnapshot, DeviceBudgetSnapshot, SchedulerRequestView } from '../../../src/shared/scheduler-types';

const histogram = { bounds: [], counts: [], count: 0, sum: 0 };

/** A host snapshot with one device (the CPU) unless `devices` is given. */
export function snapshot(over: Partial<BudgetSnapshot> = {}): BudgetSnapshot {
  const { devices, ...top } = over;
  const cpu = deviceSnapshot(top);
  return { ...cpu, devices: devices ?? [cpu] };
}

export function deviceSnapshot(over: Partial<DeviceBudgetSnapshot> = {}): DeviceBudgetSnapshot {
  return {
    device: 'cpu',
    models: [],
    at: 1000,
    limitBytes: 1_000_000,
    reservedBytes: 0,
    usedBytes: 0,
    heldBytes: 0,
    freeBytes: 1_000_000,
    bpt: 1024,
    derivation: { source: 'explicit', limitBytes: 1_000_000, formula: '1000000 bytes', notes: [] },
    maxRunning: 4,
    maxQueue: 256,
    queue: [],
    running: [],
    sessions: [],
    recent: [],
    counters: {
      accepted: 0,
      admitted: 0,
      finished: 0,
      cancelled: 0,
      failed: 0,
      rejections: {},
      budgetCapped: 0,
      contextClipped: 0,
      evictions: 0,
      generationTokens: 0,
      ttftSeconds: histogram,
      queueTimeSeconds: histogram,
    },
    violations: [],
    ...over,
  };
}

export function requestView(over: Partial<SchedulerRequestView> = {}): SchedulerRequestView {
  return {
    id: 'req-1',
    modelId: 'default',
    state: 'running',
    priority: 0,
    rows: 1,
    promptTokens: 10,
    sessionPrefixTokens: 0,
    requestedMaxTokens: 100,
    maxNewTokens: 100,
    bpt: 1024,
    reservedBytes: 110 * 1024,
    usedBytes: 0,
    generatedTokens: 0,
    ...over,
  };
}

export function thread(id: string, over: Partial<Thread> = {}): Thread {
  return { id, title: `thread ${id}`, createdAt: 1, updatedAt: 1, messages: [], ...over };
}

export function result(over: Partial<GenerationResult> = {}): GenerationResult {
  return {
    requestId: 'r1',
    modelId: 'default',
    tokenIds: [1, 2, 3],
    text: 'abc',
    finishReason: 'eos',
    rows: [{ tokenIds: [1, 2, 3], text: 'abc', finishReason: 'eos' }],
    promptTokens: 5,
    reusedTokens: 0,
    bpt: 1024,
    kvBytes: 8 * 1024,
    reservedBytes: 16 * 1024,
    timings: { queueMs: 1, ttftMs: 12, totalMs: 30, tokensPerSecond: 100 },
    ...over,
  };
}

export function tokens(text: string, ids: number[] = [text.length]): StreamFrame {
  return { type: 'tokens', requestId: 'r1', rows: [{ ids, text }] };
}
