import { explicitDerivation } from '../../../src/main/scheduler/budget';
import {
  createScheduler,
  type Scheduler,
  type SchedulerOptions,
  type SubmitAccepted,
} from '../../../src/main/scheduler/scheduler';
import type { Result } from '../../../src/shared/errors';
import type { AdmissionGrant, RequestShape, SchedulerEvent } from '../../../src/shared/scheduler-types';

/** A scheduler with a manual clock, a full event log and every grant it handed out. */
export interface TestScheduler {
  scheduler: Scheduler;
  clock: { now: number };
  advance(ms: number): void;
  events: SchedulerEvent[];
  /** Grants by request id, as onAdmitted received them. */
  grants: Map<string, AdmissionGrant>;
  /** Session ids passed to onEvict, in order. */
  evicted: string[];
  /** Submits with a listener that records the grant. */
  submit(r: RequestShape): Result<SubmitAccepted>;
  /** Event types in order, optionally only those about one request or session. */
  types(id?: string): string[];
  /** The events of one type. */
  ofType<T extends SchedulerEvent['type']>(type: T): Array<Extract<SchedulerEvent, { type: T }>>;
}

export interface TestSchedulerOptions {
  limit?: number;
  maxRunning?: number;
  maxQueue?: number;
  historyLimit?: number;
  onEvict?: (sessionId: string) => void;
}

export function createTestScheduler(o: TestSchedulerOptions = {}): TestScheduler {
  const clock = { now: 1000 };
  const events: SchedulerEvent[] = [];
  const grants = new Map<string, AdmissionGrant>();
  const evicted: string[] = [];
  const limit = o.limit ?? 1 << 20;
  const opts: SchedulerOptions = {
    limitBytes: limit,
    derivation: explicitDerivation(limit),
    maxRunning: o.maxRunning ?? 4,
    maxQueue: o.maxQueue ?? 16,
    now: () => clock.now,
    onEvict: (sid) => {
      evicted.push(sid);
      o.onEvict?.(sid);
    },
  };
  if (o.historyLimit !== undefined) opts.historyLimit = o.historyLimit;
  const scheduler = createScheduler(opts);
  scheduler.subscribe((e) => events.push(e));
  const about = (e: SchedulerEvent): string | undefined =>
    'requestId' in e && e.requestId !== undefined ? e.requestId : 'sessionId' in e ? e.sessionId : undefined;
  return {
    scheduler,
    clock,
    advance(ms) {
      clock.now += ms;
    },
    events,
    grants,
    evicted,
    submit(r) {
      return scheduler.submit(r, { onAdmitted: (g) => grants.set(g.requestId, g) });
    },
    types(id) {
      return events.filter((e) => id === undefined || about(e) === id).map((e) => e.type);
    },
    ofType(type) {
      return events.filter((e) => e.type === type) as never;
    },
  };
}

let nextId = 0;

export interface ReqOptions {
  id?: string;
  rows?: number;
  prompt?: number;
  max?: number;
  bpt?: number;
  context?: number;
  priority?: number;
  session?: string;
  model?: string;
  thread?: string;
}

/** A request shape with small defaults: 1 row, prompt 3, max 8, 128 B/token, context 64, model m. */
export function req(o: ReqOptions = {}): RequestShape {
  nextId += 1;
  const r: RequestShape = {
    id: o.id ?? `r${nextId}`,
    modelId: o.model ?? 'm',
    bpt: o.bpt ?? 128,
    contextLength: o.context ?? 64,
    rows: o.rows ?? 1,
    promptTokens: o.prompt ?? 3,
    maxNewTokens: o.max ?? 8,
  };
  if (o.priority !== undefined) r.priority = o.priority;
  if (o.session !== undefined) r.sessionId = o.session;
  if (o.thread !== undefined) r.threadId = o.thread;
  return r;
}

/** Unwraps an ok Result or fails the test with the error. */
export function unwrap<T>(r: Result<T>): T {
  if (!r.ok) throw new Error(`expected ok, got ${r.error.code}: ${r.error.message}`);
  return r.value;
}

/** The error of a failed Result, or a test failure. */
export function errorOf<T>(r: Result<T>) {
  if (r.ok) throw new Error('expected an error result');
  return r.error;
}
