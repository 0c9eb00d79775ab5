/**
 * Padded batches: the engine runs a model's running requests as one batch whose rows are padded on the left to
 * the longest, so a short request's rows hold as many positions as its longest neighbour's. The scheduler charges
 * that padding. Random arrivals, decode steps, early ends and cancels, with an engine simulated beside it (each
 * running request's rows grow by one position a step, up to its admitted width), are checked after every step:
 * the real padded KV of the batch never exceeds what its requests have reserved, the budget is never exceeded,
 * a head that fits is admitted, and a cap is the largest that fits.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { explicitDerivation } from '../../../src/main/scheduler/budget';
import { createScheduler } from '../../../src/main/scheduler/scheduler';
import type {
  AdmissionGrant,
  RequestShape,
  SchedulerEvent,
  SchedulerRequestView,
} from '../../../src/shared/scheduler-types';

const BPT = 4;
const CONTEXT = 64;

type Action =
  | { kind: 'submit'; rows: number; prompt: number; max: number; padded: boolean; wide: boolean }
  | { kind: 'step' }
  | { kind: 'end'; index: number }
  | { kind: 'cancel'; index: number };

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({
    kind: fc.constant('submit' as const),
    rows: fc.integer({ min: 1, max: 3 }),
    prompt: fc.integer({ min: 1, max: 40 }),
    max: fc.integer({ min: 1, max: 30 }),
    // Mostly the padded model; a few of another model, which must not count in its batch.
    padded: fc.oneof({ arbitrary: fc.constant(true), weight: 4 }, { arbitrary: fc.constant(false), weight: 1 }),
    // A package of the same id loaded again with other KV geometry while replies of the old one run: its
    // requests count 4 times the bytes a position.
    wide: fc.oneof({ arbitrary: fc.constant(false), weight: 4 }, { arbitrary: fc.constant(true), weight: 1 }),
  }),
  { arbitrary: fc.constant({ kind: 'step' as const }), weight: 3 },
  fc.record({ kind: fc.constant('end' as const), index: fc.nat({ max: 7 }) }),
  fc.record({ kind: fc.constant('cancel' as const), index: fc.nat({ max: 7 }) }),
);

/** What admitting `head` with rows `width` wide costs next to `batch` (restated from the rule, not read back). */
function cost(head: SchedulerRequestView, batch: readonly SchedulerRequestView[], width: number): number {
  const widest = Math.max(0, ...batch.map(widthOf));
  const others = batch.reduce((n, v) => n + v.rows * v.bpt, 0);
  return head.rows * head.bpt * Math.max(widest, width) + others * Math.max(0, width - widest);
}

/** Positions per row a running request may reach. */
function widthOf(v: SchedulerRequestView): number {
  return v.promptTokens + (v.admittedMaxTokens ?? v.maxNewTokens);
}

function run(limit: number, actions: Action[]): void {
  const events: SchedulerEvent[] = [];
  const s = createScheduler({
    limitBytes: limit,
    derivation: explicitDerivation(limit),
    maxRunning: 4,
    maxQueue: 64,
    now: () => 0,
  });
  s.subscribe((e) => events.push(e));
  const grants = new Map<string, AdmissionGrant>();
  /** The simulated engine: positions generated so far by each running request (every row alike). */
  const generated = new Map<string, number>();
  const models = new Map<string, string>();
  let next = 0;

  const check = () => {
    const snap = s.snapshot();
    // Capacity.
    expect(snap.reservedBytes + snap.heldBytes).toBeLessThanOrEqual(snap.limitBytes);
    expect(snap.reservedBytes).toBe(snap.running.reduce((n, v) => n + v.reservedBytes, 0));
    const batch = snap.running.filter((v) => v.modelId === 'p');
    // The engine's batch: every row as wide as its longest row now.
    const longest = Math.max(0, ...batch.map((v) => v.promptTokens + (generated.get(v.id) ?? 0)));
    const rowBytes = batch.reduce((n, v) => n + v.rows * v.bpt, 0);
    const reserved = batch.reduce((n, v) => n + v.reservedBytes, 0);
    expect(rowBytes * longest, 'padded KV over the batch reservations').toBeLessThanOrEqual(reserved);
    // Each request's reservation: its rows as wide as the batch's widest reservation, whatever it grows into.
    const widest = Math.max(0, ...batch.map(widthOf));
    for (const v of batch) {
      expect(v.reservedBytes, v.id).toBe(v.rows * widest * v.bpt);
      expect(v.paddingBytes ?? 0, v.id).toBe(v.rows * (widest - widthOf(v)) * v.bpt);
    }
    for (const v of snap.running.filter((x) => x.modelId === 'q')) {
      expect(v.reservedBytes).toBe(v.rows * widthOf(v) * BPT);
      expect(v.paddingBytes).toBeUndefined();
    }
    // Progress: a head that fits now would have been admitted.
    const head = snap.queue[0];
    if (head !== undefined && snap.running.length < snap.maxRunning) {
      const free = snap.limitBytes - snap.reservedBytes;
      const next = head.modelId === 'p' ? batch : [];
      const full = cost(head, next, head.promptTokens + head.maxNewTokens);
      const alone = head.rows * (head.promptTokens + head.maxNewTokens) * head.bpt;
      const mayCap = snap.running.length === 0 || (snap.queue.length === 1 && alone > snap.limitBytes);
      const minimum = cost(head, next, head.promptTokens + 1);
      expect(full > free && !(mayCap && minimum <= free), `head ${head.id} fits but waits`).toBe(true);
    }
    if (snap.running.length === 0) expect(snap.queue).toEqual([]);
  };

  /**
   * Ends `id` with `end` and checks what it gave back: a running request returns its own reservation plus the
   * padding it was charged at that moment (the view just before the end), in the return value and in its one
   * `released` event; a queued one returns 0 and is never released.
   */
  const endChecked = (id: string, end: () => number) => {
    const view = s.snapshot().running.find((v) => v.id === id);
    const grant = grants.get(id);
    const want = view === undefined ? 0 : (grant as AdmissionGrant).reservedBytes + (view.paddingBytes ?? 0);
    expect(end(), `${id} returned`).toBe(want);
    const released = events.filter((e) => e.type === 'released' && e.requestId === id);
    expect(released, `${id} released`).toEqual(view === undefined ? [] : [expect.objectContaining({ bytes: want })]);
  };

  for (const a of actions) {
    const snap = s.snapshot();
    if (a.kind === 'submit') {
      const id = `r${next++}`;
      const modelId = a.padded ? 'p' : 'q';
      models.set(id, modelId);
      const shape: RequestShape = {
        id,
        modelId,
        bpt: a.wide && a.padded ? 4 * BPT : BPT,
        contextLength: CONTEXT,
        rows: a.rows,
        promptTokens: a.prompt,
        maxNewTokens: a.max,
        ...(a.padded ? { paddedBatch: true } : {}),
      };
      const before = s.snapshot();
      const result = s.submit(shape, {
        onAdmitted: (g) => {
          grants.set(g.requestId, g);
          generated.set(g.requestId, 0);
        },
      });
      // A request is refused only when it cannot fit an empty budget.
      if (!result.ok) expect(a.rows * (a.prompt + 1) * shape.bpt).toBeGreaterThan(before.limitBytes);
    } else if (a.kind === 'step') {
      for (const v of snap.running) {
        const done = generated.get(v.id) ?? 0;
        if (done < (v.admittedMaxTokens as number)) {
          generated.set(v.id, done + 1);
          s.progress(v.id, { generatedTokens: done + 1, usedBytes: v.rows * (v.promptTokens + done + 1) * v.bpt });
        } else {
          endChecked(v.id, () => s.finish(v.id, 'length'));
          generated.delete(v.id);
        }
      }
    } else if (a.kind === 'end') {
      const v = snap.running[a.index % Math.max(1, snap.running.length)];
      if (v !== undefined) {
        endChecked(v.id, () => s.finish(v.id, 'eos'));
        generated.delete(v.id);
      }
    } else {
      const all = [...snap.running, ...snap.queue];
      const v = all[a.index % Math.max(1, all.length)];
      if (v !== undefined) {
        endChecked(v.id, () => s.cancel(v.id, 'user'));
        generated.delete(v.id);
      }
    }
    check();
  }
  // Caps: the largest width whose cost fitted what was free then.
  for (const e of events) {
    if (e.type !== 'admitted' || e.budgetCap === undefined) continue;
    expect(e.budgetCap.admittedBytes).toBeLessThanOrEqual(e.budgetCap.availableBytes);
    expect(e.admittedMaxTokens).toBeGreaterThanOrEqual(1);
  }
  // Everything ends: nothing stays reserved, and every admission was released once with what it held then.
  for (const v of [...s.snapshot().running, ...s.snapshot().queue]) endChecked(v.id, () => s.cancel(v.id, 'user'));
  const end = s.snapshot();
  expect(end.reservedBytes).toBe(0);
  const admitted = events.filter((e) => e.type === 'admitted').map((e) => e.requestId);
  const released = events.filter((e) => e.type === 'released').map((e) => e.requestId);
  expect(released.sort()).toEqual(admitted.sort());
  expect(new Set(admitted).size).toBe(admitted.length);
}

describe('padded batches', () => {
  it('keep the real padded KV within the reservations, and admit what fits', () => {
    fc.assert(fc.property(fc.integer({ min: 40 * BPT, max: 600 * BPT }), fc.array(action, { maxLength: 60 }), run), {
      numRuns: 300,
    });
  });

  it('charge a short request the padding of the long one it runs beside, and release it when the long one ends', () => {
    const events: SchedulerEvent[] = [];
    const s = createScheduler({
      limitBytes: 1500 * BPT,
      derivation: explicitDerivation(1500 * BPT),
      maxRunning: 4,
      maxQueue: 8,
      now: () => 0,
    });
    s.subscribe((e) => events.push(e));
    const shape = (id: string, promptTokens: number, maxNewTokens: number): RequestShape => ({
      id,
      modelId: 'p',
      bpt: BPT,
      contextLength: 4096,
      rows: 1,
      promptTokens,
      maxNewTokens,
      paddedBatch: true,
    });
    const noop = { onAdmitted: () => {} };
    expect(s.submit(shape('long', 600, 40), noop).ok).toBe(true);
    // Alone it would need 35 positions; beside the long one its row is 640 wide.
    expect(s.submit(shape('short', 5, 30), noop).ok).toBe(true);
    let snap = s.snapshot();
    expect(snap.running.map((v) => [v.id, v.reservedBytes, v.paddingBytes])).toEqual([
      ['long', 640 * BPT, undefined],
      ['short', 640 * BPT, (640 - 35) * BPT],
    ]);
    // A third does not fit beside them (it would be 640 wide too), though its own 35 positions would.
    expect(s.submit(shape('third', 5, 30), noop).ok).toBe(true);
    expect(s.snapshot().queue.map((v) => v.id)).toEqual(['third']);
    const released = s.finish('long', 'eos');
    expect(released).toBe(640 * BPT);
    snap = s.snapshot();
    expect(snap.running.map((v) => [v.id, v.reservedBytes, v.paddingBytes])).toEqual([
      ['short', 35 * BPT, undefined],
      ['third', 35 * BPT, undefined],
    ]);
    expect(events.find((e) => e.type === 'admitted' && e.requestId === 'short')).toMatchObject({
      reservedBytes: 640 * BPT,
    });
    expect(s.finish('short', 'eos')).toBe(35 * BPT);
  });
});
