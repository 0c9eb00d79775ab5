/**
 * RunnerService end to end: the real scheduler, the real engine process, real
 * onnxruntime on generated and fixture packages. Proves the single admission
 * funnel and that every terminal path returns the reservation.
 */
import { readFileSync } from 'node:fs';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { onnx } from 'onnx-proto';
import { afterAll, afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { type HostSettings, RunnerService } from '../../src/main/host/runner-service';
import { errorFromInfo } from '../../src/main/server/http-util';
import type { StreamFrame } from '../../src/shared/contract';
import { type KvdeskError, toErrorInfo } from '../../src/shared/errors';
import { defaultModelDir, fixture, haveFixtures } from '../helpers/fixtures';
import { holdReplyEnds } from '../helpers/hold-replies';
import { generatedModel, graphVariantsModel, installedPackage, slowModel } from '../helpers/models';
import { rejection } from '../helpers/rejection';

const hosts: RunnerService[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

async function host(settings: Partial<HostSettings> = {}, model = defaultModelDir): Promise<RunnerService> {
  const h = new RunnerService({ intraOpNumThreads: 2, ...settings });
  hosts.push(h);
  await h.loadModel(model);
  return h;
}

/**
 * One host on the default model with the default settings, for the tests that only run requests on it and leave it
 * as they found it (nothing held, nothing loaded, no spy left, its engine not killed): an engine process and a model
 * load for them all rather than one each. A test that changes the host, or counts from a fresh one, takes host().
 */
let shared: Promise<RunnerService> | undefined;
function sharedHost(): Promise<RunnerService> {
  shared ??= (async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    await h.loadModel(defaultModelDir);
    return h;
  })();
  return shared;
}
afterAll(async () => {
  await (await shared)?.close();
});
afterEach(async () => {
  // What the next test on it finds: an empty ledger.
  if (shared) expectEmptyLedger(await shared);
});

const greedy = { greedy: true };
const prompt = [10, 20, 30, 40, 50];

/**
 * Blocks this thread until process `pid`, killed, is a zombie (its files, the IPC channel among them, closed), so
 * that this process has not yet heard of its exit; where /proc is missing, half a second.
 */
function goneUnheard(pid: number): void {
  const wait = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  if (process.platform !== 'linux') {
    wait(500);
    return;
  }
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) return;
    wait(5);
  }
  throw new Error(`process ${pid} did not die within 10 s of SIGKILL`);
}

function expectEmptyLedger(h: RunnerService): void {
  const s = h.snapshot();
  expect(s.reservedBytes).toBe(0);
  expect(s.usedBytes).toBe(0);
  expect(s.running).toHaveLength(0);
  expect(s.queue).toHaveLength(0);
}

describe('the admission funnel', () => {
  it('refuses an over-budget request before any engine work', async () => {
    const h = await host({ kvBudgetBytes: 4 * 1024 });
    const err = await rejection(h.generate({ promptIds: prompt, maxNewTokens: 8, sampling: greedy }).result);
    expect(err.code).toBe('KV_BUDGET_EXCEEDED');
    expect(err.detail).toMatchObject({
      requiredBytes: 6 * 1024,
      budgetBytes: 4096,
      bpt: 1024,
      promptTokens: 5,
      rows: 1,
    });
    const stats = await h.engine.stats();
    expect(stats.runs).toBe(0);
    expect(stats.generations).toBe(0);
    expectEmptyLedger(h);
  });

  it('emits admitted after the reservation, and starts engine work only after admitted', async () => {
    const h = await sharedHost();
    const log: string[] = [];
    // Both taken off again at the end: the host is shared.
    const unlisten = h.onSchedulerEvent((e) => log.push(`sched:${e.type}`));
    const realGenerate = h.engine.generate.bind(h.engine);
    const spy = vi.spyOn(h.engine, 'generate').mockImplementation((token, cmd, handlers) => {
      log.push(`engine:generate live=${h.scheduler.isGrantLive(token)} reserved=${h.snapshot().reservedBytes}`);
      return realGenerate(token, cmd, handlers);
    });
    onTestFinished(() => {
      unlisten();
      spy.mockRestore();
    });
    const frames: StreamFrame['type'][] = [];
    const result = await h.generate({ promptIds: prompt, maxNewTokens: 4, sampling: greedy }, (f) => {
      frames.push(f.type);
      log.push(`frame:${f.type}`);
    }).result;
    const admitted = log.indexOf('sched:admitted');
    const engine = log.findIndex((l) => l.startsWith('engine:generate'));
    expect(admitted).toBeGreaterThan(log.indexOf('sched:accepted'));
    expect(engine).toBeGreaterThan(admitted);
    expect(log[engine]).toBe(`engine:generate live=true reserved=${(5 + 4) * 1024}`);
    expect(log.filter((l) => l === 'sched:admitted')).toHaveLength(1);
    expect(log.filter((l) => l === 'sched:released')).toHaveLength(1);
    expect(frames[0]).toBe('accepted');
    expect(frames[1]).toBe('admitted');
    // The engine's start (with the prompt tokens it reused) before any token.
    expect(frames[2]).toBe('started');
    expect(frames.at(-1)).toBe('done');
    expect(result.reservedBytes).toBe(9 * 1024);
    expectEmptyLedger(h);
  });

  it('the engine refuses work without a live grant from the scheduler', async () => {
    const h = await host();
    const handlers = { onStarted() {}, onTokens() {}, onDone() {}, onFailed() {} };
    expect(() =>
      h.engine.generate(
        'forged-token',
        {
          requestId: 'x',
          modelId: h.listModels()[0]?.id ?? '',
          rows: [prompt],
          maxNewTokens: 2,
          sampling: { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 },
          eosTokenIds: [],
        },
        handlers,
      ),
    ).toThrow(/no live admission grant/);
    expect((await h.engine.stats()).runs).toBe(0);
  });

  it('rows of one sampled request draw different tokens; row 0 keeps the seed', async () => {
    const h = await sharedHost();
    const sampling = { temperature: 1.2, seed: 5 };
    const many = await h.generate({ promptIds: prompt, rows: 3, maxNewTokens: 12, sampling }).result;
    const one = await h.generate({ promptIds: prompt, maxNewTokens: 12, sampling }).result;
    expect(many.rows[0]?.tokenIds).toEqual(one.tokenIds);
    expect(new Set(many.rows.map((r) => r.tokenIds.join(','))).size).toBe(3);
  });

  it('the repetition penalty looks at the window it is given: wide enough, the same reply as no window', async () => {
    const h = await sharedHost();
    const run = async (repetitionWindow?: number) =>
      (
        await h.generate({
          promptIds: prompt,
          maxNewTokens: 40,
          sampling: {
            greedy: true,
            repetitionPenalty: 5,
            ...(repetitionWindow !== undefined ? { repetitionWindow } : {}),
          },
        }).result
      ).tokenIds;
    const whole = await run();
    expect(await run(prompt.length + 40)).toEqual(whole);
    expect(await run(0)).toEqual(whole);
    // A window of one token penalises only the token just written: another reply.
    expect(await run(1)).not.toEqual(whole);
  });

  it('a multi-row request reserves for every row and each row equals its solo run', async () => {
    const h = await sharedHost();
    const solo = await h.generate({ promptIds: prompt, maxNewTokens: 6, sampling: greedy }).result;
    const batch = await h.generate({ promptIds: prompt, rows: 3, maxNewTokens: 6, sampling: greedy }).result;
    expect(batch.reservedBytes).toBe(3 * (5 + 6) * 1024);
    expect(batch.rows).toHaveLength(3);
    for (const row of batch.rows) expect(row.tokenIds).toEqual(solo.tokenIds);
    const mixed = await h.generate({ promptIdRows: [prompt, [7, 8]], maxNewTokens: 6, sampling: greedy }).result;
    expect(mixed.reservedBytes).toBe(2 * (5 + 6) * 1024);
    expect(mixed.rows[0]?.tokenIds).toEqual(solo.tokenIds);
    const short = await h.generate({ promptIds: [7, 8], maxNewTokens: 6, sampling: greedy }).result;
    expect(mixed.rows[1]?.tokenIds).toEqual(short.tokenIds);
  });
});

describe('every terminal path returns the reservation', () => {
  it('after success', async () => {
    const h = await sharedHost();
    const r = await h.generate({ promptIds: prompt, maxNewTokens: 8, sampling: greedy }).result;
    expect(r.tokenIds.length).toBeGreaterThan(0);
    expectEmptyLedger(h);
    expect(h.snapshot().recent.at(-1)?.state).toBe('finished');
  });

  it('after a stop string', async () => {
    const h = await sharedHost();
    const free = await h.generate({ promptIds: prompt, maxNewTokens: 24, sampling: greedy }).result;
    const stop = free.text.slice(3, 5);
    expect(stop.length).toBe(2);
    const r = await h.generate({ promptIds: prompt, maxNewTokens: 24, sampling: greedy, stop: [stop] }).result;
    expect(r.finishReason).toBe('stop');
    expect(r.text).toBe(free.text.slice(0, free.text.indexOf(stop)));
    expectEmptyLedger(h);
    // The engine hears of the stop a frame or more later: what it wrote meanwhile is not the reply's KV.
    const long = await h.generate({ promptIds: prompt, maxNewTokens: 1500, sampling: greedy, stop: [stop] }).result;
    expect(long.tokenIds).toEqual(r.tokenIds);
    expect(long.kvBytes).toBe((long.promptTokens + long.tokenIds.length - 1) * long.bpt);
    // As a reply that ends by itself at the same length holds.
    const same = await h.generate({ promptIds: prompt, maxNewTokens: r.tokenIds.length, sampling: greedy }).result;
    expect(same.kvBytes).toBe(long.kvBytes);
  });

  it('after a cancel mid-generation', async () => {
    const h = await host({}, slowModel());
    let cancelled = false;
    const handle = h.generate({ promptIds: prompt, maxNewTokens: 2000, sampling: greedy }, (f) => {
      if (f.type === 'tokens' && !cancelled) {
        cancelled = true;
        handle.cancel('user');
      }
    });
    const err = await rejection(handle.result);
    expect(err.code).toBe('CANCELLED');
    expectEmptyLedger(h);
    const recent = h.snapshot().recent.at(-1);
    expect(recent?.state).toBe('cancelled');
    // Stopped mid-way, not run to its 2000 (how far it got depends on the machine's load).
    expect(recent?.generatedTokens).toBeLessThan(1000);
  });

  it('after an engine error', async () => {
    const h = await host({ engineEnv: { KVDESK_ENGINE_FAULT_AFTER_RUNS: '3' } });
    const err = await rejection(h.generate({ promptIds: prompt, maxNewTokens: 20, sampling: greedy }).result);
    expect(err.code).toBe('ENGINE_FAILED');
    expect(err.message).toMatch(/injected engine fault/);
    expectEmptyLedger(h);
    expect(h.snapshot().recent.at(-1)?.state).toBe('failed');
  });

  it('after the engine process is killed, and the host recovers', async () => {
    const h = await host({}, slowModel());
    let killed = false;
    const handle = h.generate({ promptIds: prompt, maxNewTokens: 2000, sampling: greedy }, (f) => {
      if (f.type === 'tokens' && !killed) {
        killed = true;
        h.engine.kill();
      }
    });
    const err = await rejection(handle.result);
    expect(err.code).toBe('ENGINE_FAILED');
    expect(err.message).toMatch(/engine process exited/);
    expectEmptyLedger(h);
    // The engine comes back with the same model loaded.
    await vi.waitFor(async () => expect((await h.engine.stats()).models).toHaveLength(1), { timeout: 30_000 });
    const again = await h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result;
    expect(again.tokenIds.length).toBeGreaterThan(0);
  });

  it('after the engine process dies as its client leaves (the cancel meets a closed channel): the host recovers', async () => {
    const h = await host({}, slowModel());
    // The failed write of the cancel, unhandled, took the whole host down (every other stream, the window).
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      let killed = false;
      const handle = h.generate({ promptIds: prompt, maxNewTokens: 2000, sampling: greedy }, (f) => {
        if (f.type !== 'tokens' || killed) return;
        killed = true;
        const pid = h.engine.pid as number;
        process.kill(pid, 'SIGKILL');
        // Gone, and its channel closed, before this process hears of it: the client leaves now.
        goneUnheard(pid);
        handle.cancel('disconnect');
      });
      const err = await rejection(handle.result);
      expect(err.code).toBe('ENGINE_FAILED');
      expectEmptyLedger(h);
      await vi.waitFor(async () => expect((await h.engine.stats()).models).toHaveLength(1), { timeout: 30_000 });
      const again = await h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result;
      expect(again.tokenIds.length).toBeGreaterThan(0);
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('after an engine crash with a request queued: it waits for its model to load again, then runs as it would have', async () => {
    const h = await host({ maxRunning: 1 }, slowModel());
    const other = [7, 8, 9];
    const reference = await h.generate({ promptIds: other, maxNewTokens: 4, sampling: greedy }).result;
    // What happens, in order: the recovery's load of the model, and the queued request's frames.
    const log: string[] = [];
    const load = h.engine.load.bind(h.engine);
    vi.spyOn(h.engine, 'load').mockImplementation((...args) => {
      log.push('load');
      return load(...args).then((r) => {
        log.push('loaded');
        return r;
      });
    });
    let killed = false;
    const first = h.generate({ promptIds: prompt, maxNewTokens: 2000, sampling: greedy }, (f) => {
      if (f.type === 'tokens' && !killed) {
        killed = true;
        h.engine.kill();
      }
    });
    const queued = h.generate({ promptIds: other, maxNewTokens: 4, sampling: greedy }, (f) => log.push(f.type));
    expect(h.snapshot().queue.map((q) => q.id)).toEqual([queued.requestId]);
    expect((await rejection(first.result)).code).toBe('ENGINE_FAILED');
    // The failed request's slot was not handed to it: it waits, reserving nothing, for the model.
    expect(h.snapshot()).toMatchObject({ running: [], reservedBytes: 0, queue: [{ id: queued.requestId }] });
    const r = await queued.result;
    expect(r.tokenIds).toEqual(reference.tokenIds);
    // Never admitted onto the dead engine: only once its model was in again, and once.
    expect(log.filter((l) => l !== 'tokens')).toEqual(['accepted', 'load', 'loaded', 'admitted', 'started', 'done']);
    expect(log.indexOf('tokens')).toBeGreaterThan(log.indexOf('admitted'));
    expect(h.snapshot().counters.admitted).toBe(3);
    expectEmptyLedger(h);
  });

  it('a request sent while the host brings the engine back waits for its model, then runs', async () => {
    const h = await host();
    const pid = h.engine.pid;
    h.engine.kill();
    await vi.waitFor(() => expect(h.engine.pid).not.toBe(pid), { timeout: 20_000 });
    expect(h.listModels()[0]?.reloading).toBe(true);
    const r = await h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result;
    expect(r.tokenIds.length).toBe(2);
    expect(h.listModels()[0]?.reloading).toBeUndefined();
  });

  it('when the host closes (the app quits): running requests end as a shutdown, not as an engine failure', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    await h.loadModel(slowModel());
    let closing: Promise<void> | undefined;
    const handle = h.generate({ promptIds: prompt, maxNewTokens: 2000, sampling: greedy }, (f) => {
      if (f.type === 'tokens') closing ??= h.close();
    });
    const err = await rejection(handle.result);
    await closing;
    expect(err.code).toBe('CANCELLED');
    expect(err.message).toMatch(/shutdown/);
    expect(h.snapshot().recent.map((v) => [v.state, v.endReason])).toEqual([['cancelled', 'shutdown']]);
    expect(h.snapshot().counters.failed).toBe(0);
    // Closed, it starts nothing new: a request is a shutdown at once.
    const late = await rejection(h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result);
    expect(late).toMatchObject({ code: 'CANCELLED', detail: { reason: 'shutdown' } });
    expect(h.snapshot().counters.accepted).toBe(1);
  });

  it('closed, it loads nothing: a load is a shutdown, and starts no engine process (it would outlive the quit)', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    await h.close();
    const err = await rejection(h.loadModel(defaultModelDir));
    expect(err).toMatchObject({ code: 'CANCELLED', detail: { reason: 'shutdown' } });
    expect(err.message).toMatch(/loading model default was cancelled \(shutdown\): kvdesk is closing/);
    expect(h.engine.pid).toBeUndefined();
    expect(h.listModels()).toEqual([]);
  });

  it('after a timeout', async () => {
    const h = await host({}, slowModel());
    const err = await rejection(
      h.generate({ promptIds: prompt, maxNewTokens: 3000, sampling: greedy, timeoutMs: 300 }).result,
    );
    expect(err.code).toBe('TIMEOUT');
    expect(err.message).toMatch(/300 ms/);
    expectEmptyLedger(h);
    expect(h.snapshot().recent.at(-1)?.endReason).toBe('timeout');
  });

  it('a request that ends before its time limit clears its timer (a pending one would keep the reply for hours)', async () => {
    const h = await sharedHost();
    const day = 24 * 3600 * 1000;
    const set = vi.spyOn(globalThis, 'setTimeout');
    const clear = vi.spyOn(globalThis, 'clearTimeout');
    try {
      await h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy, timeoutMs: day }).result;
      const timers = set.mock.results.filter((_, i) => set.mock.calls[i]?.[1] === day).map((r) => r.value);
      expect(timers).toHaveLength(1);
      expect(clear.mock.calls.map((c) => c[0])).toContain(timers[0]);
    } finally {
      set.mockRestore();
      clear.mockRestore();
    }
  });

  it('for a request cancelled while queued', async () => {
    const h = await host({ maxRunning: 1 }, slowModel());
    const first = h.generate({ promptIds: prompt, maxNewTokens: 30, sampling: greedy });
    const frames: string[] = [];
    const second = h.generate({ promptIds: prompt, maxNewTokens: 4, sampling: greedy }, (f) => frames.push(f.type));
    expect(h.snapshot().queue.map((q) => q.id)).toEqual([second.requestId]);
    second.cancel('user');
    expect((await rejection(second.result)).code).toBe('CANCELLED');
    expect(frames).toEqual(['accepted', 'error']);
    await first.result;
    expectEmptyLedger(h);
  });

  it('for a request whose client leaves as its accepted frame is written, while it waits', async () => {
    const h = await host({ maxRunning: 1 });
    const held = holdReplyEnds(h.engine);
    const blocker = h.generate({ promptIds: prompt, maxNewTokens: 1500, sampling: greedy });
    const frames: string[] = [];
    const left = h.generate(
      { promptIds: prompt, maxNewTokens: 4, sampling: greedy, sessionId: 'gone', timeoutMs: 60_000 },
      (f) => {
        frames.push(f.type);
        // A transport that cancels from inside the sink (its socket closed as the frame went out).
        if (f.type === 'accepted') expect(h.cancel(f.requestId, 'disconnect')).toBe(true);
      },
    );
    // Stopped at once, not left waiting for the slot.
    expect(h.snapshot().queue).toEqual([]);
    const err = await rejection(left.result);
    expect(err.code).toBe('CANCELLED');
    expect(err.message).toBe('the request was cancelled while queued (disconnect)');
    expect(frames).toEqual(['accepted', 'error']);
    expect(h.cancel(left.requestId)).toBe(false);
    expect(h.snapshot().recent.at(-1)).toMatchObject({
      id: left.requestId,
      state: 'cancelled',
      endReason: 'disconnect',
    });
    // The thread is free for its next turn.
    expect(h.scheduler.sessionInfo('gone')?.state).toBe('idle');
    blocker.cancel('user');
    await blocker.result.catch(() => undefined);
    held.restore();
    await h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy, sessionId: 'gone' }).result;
    expectEmptyLedger(h);
  });
});

describe('live reconfiguration', () => {
  it('a queued request that a lowered limit can never fit is refused, not left waiting', async () => {
    const h = await host({ maxRunning: 1 }, slowModel());
    const slowBpt = h.listModels()[0]?.spec.bpt as number;
    const first = h.generate({ promptIds: prompt, maxNewTokens: 40, sampling: greedy });
    const waiting = h.generate({
      promptIds: Array.from({ length: 60 }, (_, i) => i + 3),
      maxNewTokens: 4,
      sampling: greedy,
    });
    expect(h.snapshot().queue.map((q) => q.id)).toEqual([waiting.requestId]);
    h.configure({ kvBudgetBytes: (prompt.length + 40) * slowBpt });
    const err = await rejection(waiting.result);
    expect(err.code).toBe('KV_BUDGET_EXCEEDED');
    await first.result;
    expectEmptyLedger(h);
  });

  it('a chat turn that ends over a lowered limit keeps no KV: not in the budget, the engine or the mirror', async () => {
    const h = await host();
    const turn = h.generate({ promptIds: prompt, maxNewTokens: 6, sampling: greedy, sessionId: 'lowered' });
    expect(h.snapshot().running.map((r) => r.id)).toEqual([turn.requestId]);
    // (5 + 6) × 1 KiB reserved; the limit drops under it while the turn runs, which is not evicted.
    h.configure({ kvBudgetBytes: 4 * 1024 });
    await turn.result;
    // The 10 tokens it kept would hold 10 KiB of a 4 KiB budget: the idle KV goes.
    expect(h.scheduler.sessionInfo('lowered')).toMatchObject({ state: 'idle', tokens: 0, heldBytes: 0 });
    expect(h.snapshot()).toMatchObject({ limitBytes: 4 * 1024, heldBytes: 0, reservedBytes: 0 });
    expect(h.sessionMirror('lowered')).toBeUndefined();
    expect((await h.engine.stats()).sessions).toEqual([]);
  });
});

describe("the person's pick of variant and backend", () => {
  it('a graph variant by name: its own graph and weights; an unknown one lists those there are', async () => {
    const dir = graphVariantsModel();
    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    const plain = await h.loadModel(dir);
    expect(plain.spec.graphVariant).toBe('fp32');
    expect(plain.spec.graphVariants?.map((v) => v.name).sort()).toEqual(['fp32', 'q4']);
    const run = async () =>
      (await h.generate({ model: plain.id, promptIds: prompt, maxNewTokens: 8, sampling: greedy }).result).tokenIds;
    const fp32Tokens = await run();
    const q4 = await h.loadModel(dir, { variant: 'q4' });
    expect(q4.id).toBe(plain.id);
    expect(q4.spec.graphVariant).toBe('q4');
    expect(q4.spec.graphPath).toBe(path.join(dir, 'onnx/model_q4.onnx'));
    expect(await run()).not.toEqual(fp32Tokens);
    // Back to fp32: its tokens again.
    await h.loadModel(dir, { variant: 'fp32' });
    expect(await run()).toEqual(fp32Tokens);
    const err = await rejection(h.loadModel(dir, { variant: 'int8' }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain('Graph variant "int8" is not in the package; the package offers: ');
    // The model that was loaded stays loaded.
    expect(h.listModels().find((m) => m.id === plain.id)?.spec.graphVariant).toBe('fp32');
  });

  it("a person's load again: refused under a running reply; while it loads, requests on the model wait for it", async () => {
    const dir = graphVariantsModel();
    // While this file exists, the engine's loads wait: the load again is still on its way when the test acts on it
    // (on a loaded machine it was once in before the second load was tried).
    const hold = path.join(await mkdtemp(path.join(os.tmpdir(), 'kvdesk-reload-hold-')), 'hold-loads');
    const h = new RunnerService({ intraOpNumThreads: 2, engineEnv: { KVDESK_ENGINE_HOLD_LOADS: hold } });
    hosts.push(h);
    const { id } = await h.loadModel(dir);
    const fp32 = await h.generate({ model: id, promptIds: prompt, maxNewTokens: 8, sampling: greedy }).result;
    // The reply cannot end, in the host's eyes, before it is stopped: the load's package reads come first.
    const held = holdReplyEnds(h.engine);
    const long = h.generate({ model: id, promptIds: prompt, maxNewTokens: 1500, sampling: greedy });
    const busy = await rejection(h.loadModel(dir, { variant: 'q4', whileIdle: true }));
    expect(busy.message).toBe(`model ${id} has 1 request in flight; stop it before loading it again`);
    long.cancel();
    await long.result.catch(() => undefined);
    held.restore();
    // While the new load is on its way, requests on the model wait (the engine frees the old session), then run
    // on the new one; one stopped while it waits ends cancelled without running.
    const changes: string[] = [];
    h.onReloadChange((what) => changes.push(what));
    await writeFile(hold, '');
    const reload = h.loadModel(dir, { variant: 'q4', whileIdle: true });
    // (The package is read first; the engine's load, which takes far longer, comes after the mark.)
    await vi.waitFor(() => expect(h.listModels().find((m) => m.id === id)?.reloading).toBe(true), {
      interval: 1,
      timeout: 10_000,
    });
    const frames: StreamFrame[] = [];
    const waiting = h.generate(
      { model: id, promptIds: prompt, maxNewTokens: 8, sampling: greedy, threadId: 'chat-1' },
      (f) => frames.push(f),
    );
    const stopped = h.generate({ promptIds: prompt, maxNewTokens: 8, sampling: greedy });
    // The budget shows both as waiting for the load (in no scheduler: they reserve nothing), the one that named no
    // model under the model it will run on; each start and end of a wait is told.
    expect(changes).toEqual(['model', 'waits', 'waits']);
    expect(h.snapshot().reloadWaits).toEqual([
      { requestId: waiting.requestId, modelId: id, threadId: 'chat-1', since: expect.any(Number) },
      { requestId: stopped.requestId, modelId: id, since: expect.any(Number) },
    ]);
    expect(h.snapshot().queue).toEqual([]);
    // Stopped by id while it waits: it ends at once, the load still on its way.
    expect(h.cancel(stopped.requestId)).toBe(true);
    const cancelled = rejection(stopped.result);
    // Its reason goes with it (a page shows a stop by kvdesk's shutdown apart from the person's).
    expect(await cancelled).toMatchObject({ code: 'CANCELLED', detail: { reason: 'user' } });
    expect(h.listModels().find((m) => m.id === id)?.reloading).toBe(true);
    expect(h.snapshot().reloadWaits?.map((w) => w.requestId)).toEqual([waiting.requestId]);
    // Nor may it be unloaded under the load.
    const unload = await rejection(h.unloadModel(id));
    expect(unload.message).toBe(`model ${id} is loading again: unload it once that load is in`);
    // Nor loaded again a second time before the first is in.
    const twice = await rejection(h.loadModel(dir, { variant: 'fp32', whileIdle: true }));
    expect(twice.message).toBe(`model ${id} is loading again already: load it once that load is in`);
    await rm(hold);
    let settledFirst = false;
    void waiting.result.then(() => {
      settledFirst = !h.listModels().find((m) => m.id === id)?.reloading && frames.length > 0;
    });
    expect(frames).toEqual([]);
    await reload;
    expect(h.listModels().find((m) => m.id === id)).toMatchObject({ spec: { graphVariant: 'q4' } });
    expect(h.listModels().find((m) => m.id === id)).not.toHaveProperty('reloading');
    const waited = await waiting.result;
    expect(h.snapshot()).not.toHaveProperty('reloadWaits');
    expect(settledFirst).toBe(true);
    expect(waited.requestId).toBe(waiting.requestId);
    expect(frames.every((f) => f.requestId === waiting.requestId)).toBe(true);
    // It ran on the q4 graph: its tokens are q4's, not those fp32 gave the same prompt.
    const q4 = await h.generate({ model: id, promptIds: prompt, maxNewTokens: 8, sampling: greedy }).result;
    expect(waited.tokenIds).toEqual(q4.tokenIds);
    expect(waited.tokenIds).not.toEqual(fp32.tokenIds);
  });

  it("requests beyond the queue's places while a model loads again are refused at once, as the queue would", async () => {
    const work = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-reload-queue-'));
    // While this file exists, the engine's loads wait.
    const hold = path.join(work, 'hold-loads');
    const h = await host({ maxRunning: 1, maxQueue: 1, engineEnv: { KVDESK_ENGINE_HOLD_LOADS: hold } });
    await writeFile(hold, '');
    const reload = h.loadModel(defaultModelDir, { whileIdle: true });
    await vi.waitFor(() => expect(h.listModels()[0]?.reloading).toBe(true), { interval: 1, timeout: 10_000 });
    // One runs once the load is in and one queues behind it (one running slot, one queue place): the other four
    // hear it now, not when the load is in.
    const sent = Array.from({ length: 6 }, () => h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy }));
    const ended = new Map<number, KvdeskError>();
    for (const [i, g] of sent.entries()) g.result.catch((err: KvdeskError) => ended.set(i, err));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect([...ended.keys()]).toEqual([2, 3, 4, 5]);
    const refused = [...ended.values()];
    expect(h.listModels()[0]?.reloading).toBe(true);
    expect(h.snapshot().reloadWaits?.map((w) => w.requestId)).toEqual(sent.slice(0, 2).map((g) => g.requestId));
    for (const err of refused) {
      expect(err).toMatchObject({
        code: 'QUEUE_FULL',
        detail: { queueLength: 1, maxQueue: 1, retryAfterMs: expect.any(Number) },
      });
      expect(err.message).toMatch(/^The admission queue is full \(1 waiting, limit 1, .*Retry in about \d+ s\.$/);
    }
    // The HTTP APIs answer 429 with a Retry-After.
    const http = errorFromInfo(toErrorInfo(refused[0]));
    expect(http.status).toBe(429);
    expect(Number(http.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(h.snapshot().counters.rejections).toEqual({ QUEUE_FULL: 4 });
    await rm(hold);
    await reload;
    for (const g of sent.slice(0, 2)) expect((await g.result).tokenIds).toHaveLength(2);
    // Nothing more was refused once the load was in.
    expect(h.snapshot().counters.rejections).toEqual({ QUEUE_FULL: 4 });
    await rm(work, { recursive: true, force: true });
  });

  it('an "installed" ORT package: refused, naming the field, until trusted; then it runs as its folder does', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    const dir = installedPackage();
    const refused = await rejection(h.loadModel(dir));
    expect(refused.code).toBe('PACKAGE_INVALID');
    expect(refused.detail).toMatchObject({ file: 'manifest.json', field: 'layout' });
    expect(refused.message).toContain('only when you trust it explicitly');
    const trusted = await h.loadModel(dir, { trustInstalled: true });
    expect(trusted.spec.packageInfo?.layout).toBe('installed');
    expect(trusted.spec.graphPath).toBe(path.join(defaultModelDir, 'onnx/model.onnx'));
    const plain = await h.loadModel(defaultModelDir, { id: 'plain' });
    const ids = async (model: string) =>
      (await h.generate({ model, promptIds: prompt, maxNewTokens: 6, sampling: greedy }).result).tokenIds;
    expect(await ids(trusted.id)).toEqual(await ids(plain.id));
  });

  it('a backend this machine cannot use: the CPU, with why and what to do; an unknown one is refused', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    const cuda = (await h.listBackends()).find((r) => r.name === 'cuda');
    expect(cuda).toBeDefined();
    const info = await h.loadModel(defaultModelDir, { backend: 'cuda' });
    if (cuda?.usable) {
      expect(info.spec.executionProvider).toBe('CUDAExecutionProvider');
    } else {
      expect(info.spec.executionProvider).toBeUndefined();
      expect(h.deviceOfModel(info.id)).toBe('cpu');
      expect(info.spec.warnings).toContainEqual(
        `cuda was picked, but this machine cannot use it (${cuda?.reason})${cuda?.hint ? `: ${cuda.hint.replace(/\.$/, '')}` : ''}; kvdesk runs the model on the CPU`,
      );
      const r = await h.generate({ model: info.id, promptIds: prompt, maxNewTokens: 4, sampling: greedy }).result;
      expect(r.tokenIds).toHaveLength(4);
    }
    const err = await rejection(h.loadModel(defaultModelDir, { backend: 'quantum' }));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toContain('"quantum" is no backend onnxruntime knows');
  });
});

describe('capping and context', () => {
  it('a capped request stops at its admitted length', async () => {
    const h = await host({ kvBudgetBytes: (5 + 3) * 1024 });
    const frames: StreamFrame[] = [];
    const r = await h.generate({ promptIds: prompt, maxNewTokens: 40, sampling: greedy }, (f) => frames.push(f)).result;
    expect(r.budgetCap).toMatchObject({ requestedMaxTokens: 40, admittedMaxTokens: 3, admittedBytes: 8 * 1024 });
    expect(r.tokenIds.length).toBeLessThanOrEqual(3);
    if (r.finishReason !== 'eos') expect(r.tokenIds).toHaveLength(3);
    const admitted = frames.find((f) => f.type === 'admitted');
    expect(admitted && admitted.type === 'admitted' && admitted.budgetCap?.admittedMaxTokens).toBe(3);
    expectEmptyLedger(h);
  });
});

describe('sessions keep their KV between turns', () => {
  it('a second turn prefills only the new tokens and matches a cold run', async () => {
    const h = await host();
    const turn1 = await h.generate({ promptIds: prompt, maxNewTokens: 4, sampling: greedy, sessionId: 's1' }).result;
    const held = h.scheduler.sessionInfo('s1');
    const heldTokens = prompt.length + turn1.tokenIds.length - 1;
    expect(held?.tokens).toBe(heldTokens);
    expect(held?.heldBytes).toBe(heldTokens * 1024);
    expect(h.snapshot().heldBytes).toBe(heldTokens * 1024);
    const stats = await h.engine.stats();
    expect(stats.sessions).toEqual([{ sessionId: 's1', tokens: heldTokens, kvBytes: heldTokens * 1024 }]);

    const next = [...prompt, ...turn1.tokenIds, 60, 70, 80];
    const frames: StreamFrame[] = [];
    const turn2 = await h.generate({ promptIds: next, maxNewTokens: 5, sampling: greedy, sessionId: 's1' }, (f) =>
      frames.push(f),
    ).result;
    expect(turn2.reusedTokens).toBe(heldTokens);
    const accepted = frames[0];
    expect(accepted?.type === 'accepted' && accepted.promptTokens).toBe(next.length);
    const cold = await h.generate({ promptIds: next, maxNewTokens: 5, sampling: greedy }).result;
    expect(turn2.tokenIds).toEqual(cold.tokenIds);
    expect(cold.reusedTokens).toBe(0);

    h.closeSession('s1');
    expect(h.snapshot().heldBytes).toBe(0);
    await vi.waitFor(async () => expect((await h.engine.stats()).sessions).toEqual([]), { timeout: 10_000 });
  });

  it('a turn that ends on a stop string keeps, in the engine too, only the KV the budget counts', async () => {
    const h = await host();
    const free = await h.generate({ promptIds: prompt, maxNewTokens: 40, sampling: greedy }).result;
    const stop = free.text.slice(3, 5);
    const r = await h.generate({
      sessionId: 's3',
      promptIds: prompt,
      maxNewTokens: 1500,
      sampling: greedy,
      stop: [stop],
    }).result;
    expect(r.finishReason).toBe('stop');
    const held = h.scheduler.sessionInfo('s3');
    expect(held?.tokens).toBeLessThan(prompt.length + 40);
    expect((await h.engine.stats()).sessions).toEqual([
      { sessionId: 's3', tokens: held?.tokens, kvBytes: held?.heldBytes },
    ]);
  });

  it('a turn stopped while queued leaves the session whole in the budget, the engine and the mirror', async () => {
    const h = await host({ maxRunning: 1 });
    const turn1 = await h.generate({ promptIds: prompt, maxNewTokens: 6, sampling: greedy, sessionId: 'q' }).result;
    const kept = [...prompt, ...turn1.tokenIds].slice(0, h.scheduler.sessionInfo('q')?.tokens);
    expect(kept.length).toBeGreaterThan(prompt.length);
    const agree = async () => {
      expect(h.scheduler.sessionInfo('q')).toMatchObject({ state: 'idle', tokens: kept.length });
      expect(h.snapshot().heldBytes).toBe(kept.length * 1024);
      expect(h.sessionMirror('q')?.tokens).toEqual(kept);
      expect((await h.engine.stats()).sessions).toEqual([
        { sessionId: 'q', tokens: kept.length, kvBytes: kept.length * 1024 },
      ]);
    };
    await agree();
    // A reply that cannot end before it is stopped holds the one running slot.
    const held = holdReplyEnds(h.engine);
    const blocker = h.generate({ promptIds: [1, 2, 3], maxNewTokens: 1500, sampling: greedy });
    // One turn continues 3 of the session's tokens, one none; each waits, and is stopped before it runs.
    for (const promptIds of [
      [10, 20, 30, 77, 78],
      [99, 98, 97],
    ]) {
      const turn = h.generate({ promptIds, maxNewTokens: 4, sampling: greedy, sessionId: 'q' });
      expect(h.snapshot().queue.map((r) => r.id)).toEqual([turn.requestId]);
      turn.cancel('user');
      expect((await rejection(turn.result)).code).toBe('CANCELLED');
      await agree();
    }
    blocker.cancel('user');
    await blocker.result.catch(() => undefined);
    held.restore();
    // Its next turn continues all of it.
    const next = await h.generate({ promptIds: [...kept, 60], maxNewTokens: 2, sampling: greedy, sessionId: 'q' })
      .result;
    expect(next.reusedTokens).toBe(kept.length);
  });

  it('a turn stopped as it is admitted keeps the KV its prompt continues, in the budget, the engine and the mirror', async () => {
    const h = await host();
    const turn1 = await h.generate({ promptIds: prompt, maxNewTokens: 6, sampling: greedy, sessionId: 'a' }).result;
    const conversation = [...prompt, ...turn1.tokenIds].slice(0, h.scheduler.sessionInfo('a')?.tokens);
    const agree = async (kept: number[]) => {
      expect(h.scheduler.sessionInfo('a')).toMatchObject({ state: 'idle', tokens: kept.length });
      expect(h.snapshot().heldBytes).toBe(kept.length * 1024);
      expect(h.sessionMirror('a')?.tokens ?? []).toEqual(kept);
      expect((await h.engine.stats()).sessions).toEqual(
        kept.length > 0 ? [{ sessionId: 'a', tokens: kept.length, kvBytes: kept.length * 1024 }] : [],
      );
      expectEmptyLedger(h);
    };
    // A new message on the whole conversation keeps all of it; an edited one (continuing its first 7 positions)
    // keeps those, as its admission left the session, and the engine frees the rest.
    const edited = [...conversation.slice(0, 7), 99, 98];
    for (const [promptIds, kept] of [
      [[...conversation, 60, 70], conversation],
      [edited, conversation.slice(0, 7)],
    ] as const) {
      const turn = h.generate({ promptIds, maxNewTokens: 4, sampling: greedy, sessionId: 'a' }, (f) => {
        if (f.type === 'admitted') h.cancel(f.requestId, 'user');
      });
      const err = await rejection(turn.result);
      expect(err.code).toBe('CANCELLED');
      expect(err.message).toMatch(/before it started/);
      await agree([...kept]);
    }
    const next = await h.generate({ promptIds: [...edited, 60], maxNewTokens: 3, sampling: greedy, sessionId: 'a' })
      .result;
    expect(next.reusedTokens).toBe(7);
    const cold = await h.generate({ promptIds: [...edited, 60], maxNewTokens: 3, sampling: greedy }).result;
    expect(next.tokenIds).toEqual(cold.tokenIds);
    // A time limit that ends a turn keeps nothing of its session, as it does during the reply.
    const timedOut = h.generate(
      { promptIds: [...edited, 60, 61], maxNewTokens: 4, sampling: greedy, sessionId: 'a' },
      (f) => {
        if (f.type === 'admitted') h.cancel(f.requestId, 'timeout');
      },
    );
    expect((await rejection(timedOut.result)).code).toBe('TIMEOUT');
    await agree([]);
  });

  it("a turn stopped during its new message's prefill keeps the conversation's KV and the part read; the next turn reuses it and matches a cold run", async () => {
    const h = await host({ prefillChunkTokens: 16 });
    const turn1 = await h.generate({ promptIds: prompt, maxNewTokens: 6, sampling: greedy, sessionId: 'p' }).result;
    const conversation = [...prompt, ...turn1.tokenIds].slice(0, h.scheduler.sessionInfo('p')?.tokens);
    // A long message, read 16 positions at a time: the stop reaches the engine long before its end.
    const promptIds = [...conversation, ...Array.from({ length: 1500 }, (_, i) => 3 + ((i * 7) % 400))];
    const turn2 = h.generate({ promptIds, maxNewTokens: 4, sampling: greedy, sessionId: 'p' }, (f) => {
      if (f.type === 'prefill') h.cancel(f.requestId, 'user');
    });
    expect((await rejection(turn2.result)).code).toBe('CANCELLED');
    const held = h.scheduler.sessionInfo('p');
    const tokens = held?.tokens ?? 0;
    // The conversation and at least the chunk read before the stop (the engine may have read more before it heard
    // of it), not the whole message.
    expect(tokens).toBeGreaterThanOrEqual(conversation.length + 16);
    expect(tokens).toBeLessThan(promptIds.length);
    expect(held?.heldBytes).toBe(tokens * 1024);
    expect(h.snapshot().heldBytes).toBe(tokens * 1024);
    expect(h.sessionMirror('p')?.tokens).toEqual(promptIds.slice(0, tokens));
    expect((await h.engine.stats()).sessions).toEqual([{ sessionId: 'p', tokens, kvBytes: tokens * 1024 }]);
    expectEmptyLedger(h);
    const next = [...promptIds, 60];
    const turn3 = await h.generate({ promptIds: next, maxNewTokens: 5, sampling: greedy, sessionId: 'p' }).result;
    expect(turn3.reusedTokens).toBe(tokens);
    const cold = await h.generate({ promptIds: next, maxNewTokens: 5, sampling: greedy }).result;
    expect(turn3.tokenIds).toEqual(cold.tokenIds);
  });

  it("a turn that fails during its new message's prefill keeps nothing of its session, in the engine and the mirror too", async () => {
    // The first turn takes one run (its prompt, then its one token); the second fails on its second chunk.
    const h = await host({ prefillChunkTokens: 16, engineEnv: { KVDESK_ENGINE_FAULT_AFTER_RUNS: '2' } });
    const turn1 = await h.generate({ promptIds: prompt, maxNewTokens: 1, sampling: greedy, sessionId: 'e' }).result;
    expect(h.scheduler.sessionInfo('e')?.tokens).toBe(prompt.length);
    const promptIds = [...prompt, ...turn1.tokenIds, ...Array.from({ length: 40 }, (_, i) => 3 + i)];
    const err = await rejection(h.generate({ promptIds, maxNewTokens: 4, sampling: greedy, sessionId: 'e' }).result);
    expect(err.message).toMatch(/injected engine fault/);
    expect(h.scheduler.sessionInfo('e')).toMatchObject({ state: 'idle', tokens: 0, heldBytes: 0 });
    expect(h.sessionMirror('e')).toBeUndefined();
    expect((await h.engine.stats()).sessions).toEqual([]);
    expectEmptyLedger(h);
  });

  it('a turn admitted but refused by the engine client keeps nothing, in the engine and the mirror too', async () => {
    const h = await host();
    await h.generate({ promptIds: prompt, maxNewTokens: 6, sampling: greedy, sessionId: 'f' }).result;
    expect((await h.engine.stats()).sessions).toHaveLength(1);
    vi.spyOn(h.engine, 'generate').mockImplementationOnce(() => {
      throw new Error('the engine client could not send the work');
    });
    const err = await rejection(
      h.generate({ promptIds: prompt, maxNewTokens: 4, sampling: greedy, sessionId: 'f' }).result,
    );
    expect(err.message).toMatch(/could not send/);
    // A turn that failed after its admission keeps no session KV in the budget: nor may the engine or the mirror.
    expect(h.scheduler.sessionInfo('f')).toMatchObject({ state: 'idle', tokens: 0 });
    expect(h.sessionMirror('f')).toBeUndefined();
    expect((await h.engine.stats()).sessions).toEqual([]);
  });

  it('a turn the person stopped keeps its KV as far as its reply went; the next turn reuses it and matches a cold run', async () => {
    const h = await host({}, slowModel());
    let seen = 0;
    const handle = h.generate({ promptIds: prompt, maxNewTokens: 2000, sampling: greedy, sessionId: 's2' }, (f) => {
      if (f.type === 'tokens') seen += f.rows[0]?.ids.length ?? 0;
      if (seen >= 3) handle.cancel('user');
    });
    expect((await rejection(handle.result)).code).toBe('CANCELLED');
    const held = h.scheduler.sessionInfo('s2');
    // The prompt and at least the three tokens seen, as the host saw them (the engine may have gone further).
    expect(held?.tokens).toBeGreaterThanOrEqual(prompt.length + 3);
    expect(h.snapshot().heldBytes).toBe(held?.heldBytes);
    expect(held?.heldBytes).toBe((held?.tokens ?? 0) * (h.listModels()[0]?.spec.bpt ?? 0));
    // The engine, which took steps before it heard of the stop, keeps no more than the budget counts.
    expect((await h.engine.stats()).sessions).toEqual([
      { sessionId: 's2', tokens: held?.tokens, kvBytes: held?.heldBytes },
    ]);
    expectEmptyLedger(h);
    const partial = (h.sessionMirror('s2')?.tokens ?? []).slice(prompt.length);
    expect(partial.length).toBe((held?.tokens ?? 0) - prompt.length);
    const next = [...prompt, ...partial, 60, 70, 80];
    const turn2 = await h.generate({ promptIds: next, maxNewTokens: 5, sampling: greedy, sessionId: 's2' }).result;
    expect(turn2.reusedTokens).toBe(held?.tokens);
    const cold = await h.generate({ promptIds: next, maxNewTokens: 5, sampling: greedy }).result;
    expect(turn2.tokenIds).toEqual(cold.tokenIds);
    h.closeSession('s2');
  });
});

describe.skipIf(!haveFixtures)('a chat template whose markup the vocabulary lacks', () => {
  it('is named as the cause, not the messages; a plain prompt still runs', async () => {
    // Its tokenizer has GPT-2's 50k tokens, the model 1000: the ChatML markup splits into words past 1000.
    const h = await host({}, fixture('onnxruntime-genai/tiny-random-gpt2-fp32'));
    const err = await rejection(h.generate({ messages: [{ role: 'user', content: 'a' }], maxNewTokens: 2 }).result);
    expect(err.code).toBe('TOKEN_OUT_OF_VOCAB');
    expect(err.message).toMatch(/^The chat template's own markup, whatever the messages say, is outside/);
    expect(err.detail).toMatchObject({ field: 'chatTemplate' });
    const plain = await h.generate({ promptIds: [0, 0, 0, 52], maxNewTokens: 2, sampling: greedy }).result;
    expect(plain.tokenIds).toHaveLength(2);
  });
});

describe('sessions across loads', () => {
  it('a thread whose KV was evicted takes its next turn on the same id loaded again with other KV geometry', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2, kvBudgetBytes: 200 * 1024 });
    hosts.push(h);
    await h.loadModel(defaultModelDir, { id: 'm' });
    await h.generate({ model: 'm', sessionId: 'thread-1', promptIds: prompt, maxNewTokens: 3, sampling: greedy })
      .result;
    // A request that needs the whole budget evicts the idle thread's KV: the host's mirror goes, the scheduler's
    // session stays (with the old bytes per token).
    const long = Array.from({ length: 190 }, (_, i) => 10 + i);
    await h.generate({ model: 'm', promptIds: long, maxNewTokens: 8, sampling: greedy }).result;
    expect(h.snapshot().counters.evictions).toBe(1);
    await h.loadModel(slowModel(), { id: 'm', whileIdle: true });
    expect(h.listModels()[0]?.spec.bpt).not.toBe(1024);
    expect(h.scheduler.sessionInfo('thread-1')).toBeUndefined();
    const next = await h.generate({
      model: 'm',
      sessionId: 'thread-1',
      promptIds: [...prompt, 60],
      maxNewTokens: 3,
      sampling: greedy,
    }).result;
    expect(next.tokenIds.length).toBeGreaterThan(0);
  });

  it("the budget shows a package's bytes per token from its load, and the new one's once another is loaded under its id", async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    // Counted from its load, before any request.
    await h.loadModel(defaultModelDir, { id: 'm' });
    expect(h.snapshot().bpt).toBe(1024);
    await h.generate({ model: 'm', promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result;
    expect(h.snapshot().bpt).toBe(1024);
    // Half the layers: half the KV per token.
    const other = await h.loadModel(generatedModel('same-id-two-layers', { numLayers: 2 }), {
      id: 'm',
      whileIdle: true,
    });
    expect(other.spec.bpt).toBe(512);
    // The new package's from its load: never the old package's.
    expect(h.snapshot().bpt).toBe(512);
    await h.generate({ model: 'm', promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result;
    expect(h.snapshot().bpt).toBe(512);
  });
});

describe('a thread that switches models on one device', () => {
  it("starts over on the new model once the old one's turn ended; a turn still running there is waited for", async () => {
    const h = new RunnerService({ intraOpNumThreads: 2, maxRunning: 2 });
    hosts.push(h);
    await h.loadModel(defaultModelDir, { id: 'a' });
    await h.loadModel(slowModel(), { id: 'b' });
    const bBpt = h.listModels().find((m) => m.id === 'b')?.spec.bpt as number;
    const turn = (model: string, maxNewTokens: number) =>
      h.generate({ model, sessionId: 't', promptIds: prompt, maxNewTokens, sampling: greedy });
    await turn('a', 4).result;
    expect(h.scheduler.sessionInfo('t')).toMatchObject({ modelId: 'a', state: 'idle' });
    // While a's turn runs, b's is refused (nothing dropped), in words that say what to do.
    const held = holdReplyEnds(h.engine);
    const running = turn('a', 1500);
    const err = await rejection(turn('b', 3).result);
    expect(err.code).toBe('SESSION_INVALID');
    expect(err.message).toBe(
      `Session t has a running turn (${running.requestId}) on model a (cpu); this turn is for model b (cpu). ` +
        'Wait for that turn to end or cancel it, then send this one.',
    );
    running.cancel('user');
    await running.result.catch(() => undefined);
    held.restore();
    // Idle now: a's KV goes (budget, engine, mirror) and the turn on b runs from the start, as a cold run does.
    const onB = await turn('b', 3).result;
    expect(onB.reusedTokens).toBe(0);
    const cold = await h.generate({ model: 'b', promptIds: prompt, maxNewTokens: 3, sampling: greedy }).result;
    expect(onB.tokenIds).toEqual(cold.tokenIds);
    const kept = prompt.length + onB.tokenIds.length - 1;
    expect(h.scheduler.sessionInfo('t')).toMatchObject({ modelId: 'b', state: 'idle', tokens: kept });
    expect(h.snapshot().heldBytes).toBe(kept * bBpt);
    expect(h.sessionMirror('t')?.modelId).toBe('b');
    expect((await h.engine.stats()).sessions).toEqual([{ sessionId: 't', tokens: kept, kvBytes: kept * bBpt }]);
  });
});

describe('the engine under a load of the same id', () => {
  it('two loads of one id at once keep one onnxruntime session, and an unload leaves none', async () => {
    const h = await host({}, slowModel());
    const model = h.listModels()[0] as { id: string; spec: Parameters<RunnerService['engine']['load']>[1] };
    expect((await h.engine.stats()).openSessions).toBe(1);
    // Straight to the engine (as a first-use load and a person's load of the same package can reach it).
    await Promise.all([0, 1, 2].map(() => h.engine.load(model.id, model.spec, ['cpu'])));
    expect((await h.engine.stats()).openSessions).toBe(1);
    const r = await h.generate({ promptIds: prompt, maxNewTokens: 3, sampling: greedy }).result;
    expect(r.tokenIds).toHaveLength(3);
    await h.unloadModel(model.id);
    expect((await h.engine.stats()).openSessions).toBe(0);
  });

  it('a reply running on the replaced graph finishes on it; the next runs on the new one', async () => {
    const h = await host({}, slowModel());
    const model = h.listModels()[0] as { id: string; spec: Parameters<RunnerService['engine']['load']>[1] };
    let loading: Promise<unknown> | undefined;
    const handle = h.generate({ promptIds: prompt, maxNewTokens: 60, sampling: greedy }, (f) => {
      // Straight to the engine, past the host's guard (as a load racing a first-use load could reach it).
      if (f.type === 'tokens') loading ??= h.engine.load(model.id, model.spec, ['cpu']);
    });
    const done = await handle.result;
    await loading;
    expect(done.tokenIds).toHaveLength(60);
    const next = await h.generate({ promptIds: prompt, maxNewTokens: 3, sampling: greedy }).result;
    expect(next.tokenIds).toEqual(done.tokenIds.slice(0, 3));
  });
});

describe('engine facts', () => {
  it.skipIf(process.platform !== 'linux')(
    "the engine process gets kvdesk's malloc settings, and explicit ones win",
    async () => {
      const environ = async (h: RunnerService) => {
        const text = await readFile(`/proc/${h.engine.pid}/environ`, 'utf8');
        return new Map(text.split('\0').map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
      };
      const a = await environ(await host());
      expect(a.get('MALLOC_MMAP_THRESHOLD_')).toBe(String(64 * 1024 * 1024));
      expect(a.get('MALLOC_TRIM_THRESHOLD_')).toBe(String(512 * 1024 * 1024));
      expect(a.get('GLIBC_TUNABLES')).toBe('glibc.malloc.hugetlb=1');
      const b = await environ(await host({ engineEnv: { MALLOC_TRIM_THRESHOLD_: '1000' } }));
      expect(b.get('MALLOC_TRIM_THRESHOLD_')).toBe('1000');
    },
  );

  // Weights in transparent huge pages decode 25–35 % faster (bench/README.md). Needs glibc ≥ 2.35; THP in "madvise" mode (under "always" every process gets them, so the A/B needs madvise).
  const thp = (() => {
    try {
      return /\[(\w+)\]/.exec(readFileSync('/sys/kernel/mm/transparent_hugepage/enabled', 'utf8'))?.[1];
    } catch {
      return undefined;
    }
  })();
  const glibc = (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime;
  const hugeCapable = thp === 'madvise' && glibc !== undefined && Number(glibc.split('.')[1]) >= 35;
  it.skipIf(!hugeCapable)(
    "the engine's weights land in transparent huge pages, unless the person's GLIBC_TUNABLES turns it off",
    async () => {
      const hugeKiB = async (settings: Partial<HostSettings>) => {
        const h = await host(settings, slowModel());
        const rollup = await readFile(`/proc/${h.engine.pid}/smaps_rollup`, 'utf8');
        return Number(/AnonHugePages:\s+(\d+) kB/.exec(rollup)?.[1]);
      };
      // ≈ 100 MB of weights in 2 MiB pages, also when the person sets other tunables (merged). How many the kernel
      // finds at once depends on how fragmented memory is (a CI run under parallel tests once gave 38 MiB of
      // them): at least some, where the tunable off gives none.
      // (Not read back from /proc/PID/environ: glibc cuts that copy at the first ':' while parsing it.)
      expect(await hugeKiB({})).toBeGreaterThan(10 * 1024);
      expect(await hugeKiB({ engineEnv: { GLIBC_TUNABLES: 'glibc.malloc.tcache_count=0' } })).toBeGreaterThan(
        10 * 1024,
      );
      expect(await hugeKiB({ engineEnv: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' } })).toBe(0);
    },
  );

  it('bpt × length equals the bytes of the real present tensors', async () => {
    const models = [
      defaultModelDir,
      ...(haveFixtures ? [fixture('onnx-genai/tiny-llm'), fixture('onnxruntime-genai/tiny-random-gpt2-fp32')] : []),
    ];
    // One engine holds the three packages, as a host with several models loaded does.
    const h = await host();
    for (const [i, dir] of models.entries()) {
      const model = i === 0 ? 'default' : (await h.loadModel(dir, { id: `bpt-${i}` })).id;
      const ids = dir === defaultModelDir ? prompt : [5, 6, 7];
      const r = await h.generate({ model, promptIds: ids, maxNewTokens: 6, sampling: greedy, rows: 2 }).result;
      const length = ids.length + r.tokenIds.length - 1;
      expect(r.kvBytes, dir).toBe(2 * r.bpt * length);
      expect(r.rows[1]?.tokenIds, dir).toEqual(r.rows[0]?.tokenIds);
    }
  });

  it("the host's event loop keeps running while the engine computes a long prefill", async () => {
    // One engine thread leaves a core to the host even when other test files run beside this one.
    const h = await host({ intraOpNumThreads: 1 }, slowModel());
    const longPrompt = Array.from({ length: 1000 }, (_, i) => 3 + ((i * 7) % 400));
    let maxGap = 0;
    let ticks = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      maxGap = Math.max(maxGap, now - last);
      last = now;
      ticks++;
    }, 5);
    const started = performance.now();
    const r = await h.generate({ promptIds: longPrompt, maxNewTokens: 3, sampling: greedy }).result;
    const elapsed = performance.now() - started;
    clearInterval(timer);
    // The prefill is one session.run of hundreds of ms; had it run on this thread, no timer could fire
    // during it and the largest gap would be at least that long.
    expect(r.timings.ttftMs).toBeGreaterThan(250);
    // Bounds with room for a loaded CI machine (a starved process or a GC pause), still far from a blocked loop.
    expect(maxGap).toBeLessThan(r.timings.ttftMs / 2);
    expect(ticks).toBeGreaterThan(elapsed / 5 / 10);
  });

  it('a bad package is refused naming the file, and nothing stays loaded', async () => {
    const h = await host();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-badpkg-'));
    await cp(defaultModelDir, dir, { recursive: true });
    await writeFile(path.join(dir, 'config.json'), '{ "model_type": "llama", ');
    const err = await rejection(h.loadModel(dir, { id: 'bad' }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toMatch(/config\.json/);
    expect(h.listModels().map((m) => m.id)).toEqual(['default']);
    expect((await h.engine.stats()).models).toEqual(['default']);
  });

  it('a graph onnxruntime cannot run is a clear error; nothing stays loaded and the engine survives', async () => {
    const h = await host();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-badop-'));
    await cp(defaultModelDir, dir, { recursive: true });
    const file = path.join(dir, 'onnx/model.onnx');
    const model = onnx.ModelProto.decode(await readFile(file));
    const node = model.graph?.node?.find((n) => n.opType === 'MatMul');
    expect(node).toBeDefined();
    if (node) node.opType = 'KvdeskNoSuchOp';
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const err = await rejection(h.loadModel(dir, { id: 'broken' }));
    expect(err.code).toBe('MODEL_LOAD_FAILED');
    expect(err.message).toMatch(/KvdeskNoSuchOp/);
    expect(h.listModels().map((m) => m.id)).not.toContain('broken');
    expect((await h.engine.stats()).models).not.toContain('broken');
    const ok = await h.generate({ promptIds: prompt, maxNewTokens: 2, sampling: greedy }).result;
    expect(ok.tokenIds.length).toBeGreaterThan(0);
  });
});
