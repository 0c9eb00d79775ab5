/**
 * The host's recovery after an engine crash, when the engine crashes again while it loads the models back (a
 * timing the real engine cannot be made to hit on cue: its loads are stood in for here). The second recovery
 * loads every model again, once, and the host keeps knowing them; after close nothing is loaded again.
 */
import { describe, expect, it } from 'vitest';
import { defaultHostSettings, RunnerService } from '../../../src/main/host/runner-service';

interface Inside {
  models: Map<string, unknown>;
  reloading: Map<string, Promise<void>>;
  refreshBudget(): void;
  dropDeviceIfUnused(device: string): void;
  onEngineCrash(reason: string): void;
  engine: { load(id: string): Promise<unknown> };
}

function withStandIns() {
  const host = new RunnerService(defaultHostSettings());
  const inside = host as unknown as Inside;
  for (const id of ['A', 'B']) inside.models.set(id, { id, device: 'cpu', spec: { id }, tokenizer: { close() {} } });
  inside.refreshBudget = () => {};
  inside.dropDeviceIfUnused = () => {};
  const loads: Array<{ id: string; resolve(): void; reject(e: Error): void }> = [];
  inside.engine.load = (id: string) =>
    new Promise((resolve, reject) => loads.push({ id, resolve: () => resolve({}), reject }));
  return { host, inside, loads };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('crash recovery', () => {
  it('a crash while the models load back: loaded again once each, and none forgotten', async () => {
    const { inside, loads } = withStandIns();
    inside.onEngineCrash('crash 1');
    await tick();
    expect(loads.map((l) => l.id)).toEqual(['A']);
    // The engine dies again during A's load: the client rejects the load, then reports the crash.
    loads[0]?.reject(new Error('the engine process exited'));
    inside.onEngineCrash('crash 2');
    for (let i = 0; i < 8; i++) {
      await tick();
      for (const l of loads.slice(1)) l.resolve();
    }
    expect(loads.map((l) => l.id)).toEqual(['A', 'A', 'B']);
    expect([...inside.models.keys()]).toEqual(['A', 'B']);
    expect([...inside.reloading.keys()]).toEqual([]);
  });

  it('closing stops a recovery: no engine is started again to load the rest', async () => {
    const { host, inside, loads } = withStandIns();
    inside.onEngineCrash('crash');
    await tick();
    const closing = host.close();
    loads[0]?.reject(new Error('the engine process exited'));
    await closing;
    for (let i = 0; i < 4; i++) await tick();
    expect(loads.map((l) => l.id)).toEqual(['A']);
  });
});
