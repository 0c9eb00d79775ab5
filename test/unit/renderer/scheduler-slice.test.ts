import { describe, expect, it } from 'vitest';
import { createAppStore } from '../../../src/renderer/store';
import { TIMELINE_LIMIT } from '../../../src/renderer/store/scheduler-slice';
import { snapshot } from './fixtures';

describe('scheduler slice', () => {
  it('keeps the latest snapshot; an older one arriving late is ignored', () => {
    const store = createAppStore();
    store.getState().setSnapshot(snapshot({ at: 10, reservedBytes: 5 }));
    store.getState().setSnapshot(snapshot({ at: 5, reservedBytes: 1 }));
    expect(store.getState().snapshot?.reservedBytes).toBe(5);
    store.getState().setSnapshot(snapshot({ at: 11, reservedBytes: 7 }));
    expect(store.getState().snapshot?.reservedBytes).toBe(7);
  });

  it('replace takes a snapshot from a restarted host whose clock started over', () => {
    const store = createAppStore();
    store.getState().setSnapshot(snapshot({ at: 10_000 }));
    store.getState().setSnapshot(snapshot({ at: 3, limitBytes: 42 }), true);
    expect(store.getState().snapshot?.limitBytes).toBe(42);
  });

  it('timeline leaves out progress events and keeps the newest ones', () => {
    const store = createAppStore();
    store.getState().pushEvents([
      { type: 'accepted', at: 1, requestId: 'a', modelId: 'm', rows: 1, promptTokens: 3, maxNewTokens: 4 },
      { type: 'progress', at: 2, requestId: 'a', generatedTokens: 1, usedBytes: 4, reservedBytes: 7 },
      { type: 'firstToken', at: 3, requestId: 'a', ttftMs: 2 },
    ]);
    expect(store.getState().events.map((e) => e.type)).toEqual(['accepted', 'firstToken']);
    const before = store.getState().events;
    store
      .getState()
      .pushEvents([{ type: 'progress', at: 4, requestId: 'a', generatedTokens: 2, usedBytes: 5, reservedBytes: 7 }]);
    expect(store.getState().events).toBe(before); // nothing to show: no update, no re-render
    store.getState().pushEvents(
      Array.from({ length: TIMELINE_LIMIT + 10 }, (_, i) => ({
        type: 'queued' as const,
        at: 10 + i,
        requestId: `q${i}`,
        position: 0,
        queueLength: 1,
      })),
    );
    const events = store.getState().events;
    expect(events).toHaveLength(TIMELINE_LIMIT);
    expect(events[events.length - 1]?.at).toBe(10 + TIMELINE_LIMIT + 9);
  });
});
