/**
 * Requests queued when the engine process crashes, on the real engine and scheduler: they lost nothing, so they
 * wait, queued, for their model to load again (through a second crash too) and then run; they are refused,
 * naming the model, when it cannot load again or when the engine keeps failing; and one cancelled while it waits
 * leaves nothing behind. The first crash always comes while a long request runs and another is queued behind it
 * (one running slot). Where a test must act while the recovery's load is on its way, the engine's
 * KVDESK_ENGINE_HOLD_LOADS failpoint holds that load (the model's first load is not held: the file is made later).
 */
import { linkSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type EngineRecovery, RunnerService } from '../../../src/main/host/runner-service';
import type { SchedulerEvent } from '../../../src/shared/scheduler-types';
import { defaultModelDir } from '../../helpers/fixtures';
import { slowModel } from '../../helpers/models';
import { rejection } from '../../helpers/rejection';

const greedy = { greedy: true };
const LONG = [10, 20, 30, 40, 50];
const SHORT = [7, 8, 9];

const hosts: RunnerService[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

interface Setup {
  h: RunnerService;
  /** While this file exists, the engine's loads wait. */
  hold: string;
  work: string;
  events: SchedulerEvent[];
}

/** A host of one running slot with the slow model loaded (`model`'s package instead), then each of `more`. */
async function setup(model: (work: string) => string = () => slowModel(), more: string[] = []): Promise<Setup> {
  const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-crash-queue-'));
  dirs.push(work);
  const hold = path.join(work, 'hold-loads');
  const h = new RunnerService({ intraOpNumThreads: 2, maxRunning: 1, engineEnv: { KVDESK_ENGINE_HOLD_LOADS: hold } });
  hosts.push(h);
  await h.loadModel(model(work));
  for (const dir of more) await h.loadModel(dir);
  const events: SchedulerEvent[] = [];
  h.onSchedulerEvent((e) => events.push(e));
  return { h, hold, work, events };
}

/** The package at `src` again under `work`, its files hard links (the slow model's graph is 100 MB). */
function linkedPackage(src: string, work: string): string {
  const dir = path.join(work, 'package');
  const link = (from: string, to: string) => {
    mkdirSync(to, { recursive: true });
    for (const entry of readdirSync(from, { withFileTypes: true })) {
      if (entry.isDirectory()) link(path.join(from, entry.name), path.join(to, entry.name));
      else linkSync(path.join(from, entry.name), path.join(to, entry.name));
    }
  };
  link(src, dir);
  return dir;
}

/**
 * A long request on the first model, and a short one queued behind it (on `queuedModel`, else the first model);
 * at the long one's first tokens `atCrash` runs and the engine is killed.
 */
function crashWithOneQueued(h: RunnerService, atCrash: () => void = () => {}, queuedModel?: string) {
  let killed = false;
  const first = h.listModels()[0]?.id;
  const running = h.generate({ model: first, promptIds: LONG, maxNewTokens: 2000, sampling: greedy }, (f) => {
    if (f.type === 'tokens' && !killed) {
      killed = true;
      atCrash();
      h.engine.kill();
    }
  });
  const frames: string[] = [];
  const queued = h.generate({ model: queuedModel ?? first, promptIds: SHORT, maxNewTokens: 4, sampling: greedy }, (f) =>
    frames.push(f.type),
  );
  expect(h.snapshot().queue.map((q) => q.id)).toEqual([queued.requestId]);
  return { running, queued, frames };
}

/** Kills the engine the recovery started (its load is held) once it is there, and waits until it is gone. */
async function killRecoveringEngine(h: RunnerService, before: number | undefined): Promise<number> {
  await vi.waitFor(() => expect(h.engine.pid ?? before).not.toBe(before), { timeout: 20_000 });
  const pid = h.engine.pid as number;
  h.engine.kill();
  // A SIGKILL, its exit event and the next fork: more than vitest's 1 s default on a loaded machine.
  await vi.waitFor(() => expect(h.engine.pid).not.toBe(pid), { timeout: 20_000 });
  return pid;
}

/** Generations and cancel handles the host still keeps (a request that ended must leave neither). */
function pending(h: RunnerService): { generations: number; cancels: number } {
  const inside = h as unknown as { generations: Map<string, unknown>; cancels: Map<string, unknown> };
  return { generations: inside.generations.size, cancels: inside.cancels.size };
}

/** A request's scheduler events, but its progress reports. */
function typesOf(events: SchedulerEvent[], id: string): string[] {
  const progress = new Set(['firstToken', 'progress']);
  return events.filter((e) => 'requestId' in e && e.requestId === id && !progress.has(e.type)).map((e) => e.type);
}

describe('a request queued when the engine crashes', () => {
  it('waits through a second crash while its model loads back, then runs as it would have', async () => {
    // Queued on the second model, which loads back after the first: the recovery the second crash overtakes
    // must not let it go on a dead engine.
    const { h, hold, events } = await setup(undefined, [defaultModelDir]);
    const second = h.listModels()[1]?.id as string;
    const reference = await h.generate({ model: second, promptIds: SHORT, maxNewTokens: 4, sampling: greedy }).result;
    const first = h.engine.pid;
    const { running, queued, frames } = crashWithOneQueued(h, () => writeFileSync(hold, ''), second);
    expect((await rejection(running.result)).code).toBe('ENGINE_FAILED');
    await killRecoveringEngine(h, first);
    expect(h.snapshot()).toMatchObject({ running: [], reservedBytes: 0, queue: [{ id: queued.requestId }] });
    rmSync(hold);
    const r = await queued.result;
    expect(r.tokenIds).toEqual(reference.tokenIds);
    expect(frames.filter((f) => f !== 'tokens')).toEqual(['accepted', 'admitted', 'started', 'done']);
    expect(typesOf(events, queued.requestId)).toEqual(['accepted', 'queued', 'admitted', 'finished', 'released']);
    expect(pending(h)).toEqual({ generations: 0, cancels: 0 });
    expect(h.listModels().map((m) => m.reloading)).toEqual([undefined, undefined]);
  });

  it('is refused, naming the model, when its model cannot load again', async () => {
    let dir = '';
    const { h } = await setup((work) => {
      dir = linkedPackage(slowModel(), work);
      return dir;
    });
    const id = h.listModels()[0]?.id as string;
    // The graph goes before the engine dies: the recovery cannot load it again.
    const { running, queued, frames } = crashWithOneQueued(h, () => rmSync(path.join(dir, 'onnx/model.onnx')));
    expect((await rejection(running.result)).code).toBe('ENGINE_FAILED');
    const err = await rejection(queued.result);
    expect(err.code).toBe('ENGINE_FAILED');
    expect(err.message).toContain(`could not load model ${id} again`);
    expect(err.message).toContain('before this request started');
    expect(err.detail).toMatchObject({ modelId: id });
    expect(frames).toEqual(['accepted', 'error']);
    expect(h.listModels()).toEqual([]);
    expect(h.snapshot()).toMatchObject({ queue: [], running: [], reservedBytes: 0 });
    expect(h.snapshot().counters.admitted).toBe(1);
    expect(pending(h)).toEqual({ generations: 0, cancels: 0 });
  });

  it('cancelled while it waits, leaves nothing behind; the model comes back all the same', async () => {
    const { h, hold, events } = await setup();
    const { running, queued, frames } = crashWithOneQueued(h, () => writeFileSync(hold, ''));
    expect((await rejection(running.result)).code).toBe('ENGINE_FAILED');
    expect(h.listModels()[0]?.reloading).toBe(true);
    queued.cancel('user');
    expect(await rejection(queued.result)).toMatchObject({ code: 'CANCELLED' });
    expect(frames).toEqual(['accepted', 'error']);
    expect(h.snapshot()).toMatchObject({ queue: [], running: [], reservedBytes: 0 });
    expect(pending(h)).toEqual({ generations: 0, cancels: 0 });
    expect(typesOf(events, queued.requestId)).toEqual(['accepted', 'queued', 'cancelled']);
    rmSync(hold);
    // Sent while the model loads back, this one waits for it, then runs; the cancelled one never does.
    const after = await h.generate({ promptIds: SHORT, maxNewTokens: 2, sampling: greedy }).result;
    expect(after.tokenIds).toHaveLength(2);
    expect(h.listModels()[0]?.reloading).toBeUndefined();
    expect(h.snapshot().counters).toMatchObject({ admitted: 2, cancelled: 1 });
    expect(pending(h)).toEqual({ generations: 0, cancels: 0 });
  });

  it('requests sent while its model loads back take what places it leaves; the rest are refused at once', async () => {
    const { h, hold } = await setup();
    h.configure({ maxQueue: 1 });
    const reference = await h.generate({ promptIds: SHORT, maxNewTokens: 4, sampling: greedy }).result;
    const { running, queued } = crashWithOneQueued(h, () => writeFileSync(hold, ''));
    expect((await rejection(running.result)).code).toBe('ENGINE_FAILED');
    expect(h.listModels()[0]?.reloading).toBe(true);
    // The queued one runs when the model is back and one more queues behind it: a third hears now that the
    // queue is full.
    const waiting = h.generate({ promptIds: SHORT, maxNewTokens: 4, sampling: greedy });
    const surplus = h.generate({ promptIds: SHORT, maxNewTokens: 4, sampling: greedy });
    let refused: unknown;
    surplus.result.catch((err: unknown) => {
      refused = err;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(refused).toMatchObject({ code: 'QUEUE_FULL', detail: { queueLength: 1, maxQueue: 1 } });
    expect(h.listModels()[0]?.reloading).toBe(true);
    expect(h.snapshot().reloadWaits?.map((w) => w.requestId)).toEqual([waiting.requestId]);
    rmSync(hold);
    for (const g of [queued, waiting]) expect((await g.result).tokenIds).toEqual(reference.tokenIds);
    expect(h.snapshot().counters.rejections).toEqual({ QUEUE_FULL: 1 });
    expect(pending(h)).toEqual({ generations: 0, cancels: 0 });
  });

  it('stops waiting after three crashes in a row while its model loads back: refused, saying so', async () => {
    const { h, hold } = await setup();
    let pid = h.engine.pid;
    const { running, queued, frames } = crashWithOneQueued(h, () => writeFileSync(hold, ''));
    expect((await rejection(running.result)).code).toBe('ENGINE_FAILED');
    for (let crash = 2; crash <= 3; crash++) pid = await killRecoveringEngine(h, pid);
    expect(h.snapshot().queue.map((q) => q.id)).toEqual([queued.requestId]);
    await killRecoveringEngine(h, pid);
    const err = await rejection(queued.result);
    expect(err.code).toBe('ENGINE_FAILED');
    expect(err.message).toContain('each time kvdesk loaded its models back (4 failures in a row)');
    expect(frames).toEqual(['accepted', 'error']);
    expect(h.snapshot()).toMatchObject({ queue: [], running: [], reservedBytes: 0 });
    // The host still brings the model back; that recovery's end starts the count again, so at the next crash a
    // queued request waits once more.
    rmSync(hold);
    await vi.waitFor(() => expect(h.listModels()[0]?.reloading).toBeUndefined(), { timeout: 20_000 });
    const again = crashWithOneQueued(h);
    expect((await rejection(again.running.result)).code).toBe('ENGINE_FAILED');
    expect((await again.queued.result).tokenIds).toHaveLength(4);
  });
});

describe('what the host is told of a crash (its log says it)', () => {
  it('what died, the models loading back, the running request failed and the queued one waiting; then each model back', async () => {
    // The small default model: the long reply is killed at its first tokens whatever the model.
    const { h } = await setup(() => defaultModelDir);
    const told: EngineRecovery[] = [];
    h.onEngineRecovery((e) => told.push(e));
    const model = h.listModels()[0]?.id as string;
    const { running, queued } = crashWithOneQueued(h);
    expect((await rejection(running.result)).code).toBe('ENGINE_FAILED');
    await queued.result;
    expect(told).toEqual([
      {
        type: 'crashed',
        reason: expect.stringMatching(/^the engine process exited \(code null, signal SIGKILL\)$/),
        models: [model],
        failedRequests: 1,
        queuedRequests: 1,
        queuedWait: true,
      },
      { type: 'back', modelId: model, ms: expect.any(Number) },
    ]);
  });
});
