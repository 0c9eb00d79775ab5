import { describe, expect, it } from 'vitest';
import { lastLoaded, unloadedEntries } from '../../../src/renderer/lib/library';
import { createAppStore } from '../../../src/renderer/store';
import type { LibraryEntry, ModelInfo } from '../../../src/shared/api';
import type { ModelSpec } from '../../../src/shared/model-spec';

function info(id: string, isDefault = false): ModelInfo {
  return { id, isDefault, backend: 'cpu', loadMs: 1, spec: { id, root: `/models/${id}` } as ModelSpec };
}

describe('models slice', () => {
  it('picks the default model, keeps a choice while it stays loaded, falls back when it goes', () => {
    const store = createAppStore();
    store.getState().setModels([info('a'), info('b', true)]);
    expect(store.getState().activeModelId).toBe('b');
    store.getState().setActiveModel('a');
    store.getState().setModels([info('a'), info('b', true), info('c')]);
    expect(store.getState().activeModelId).toBe('a');
    store.getState().setModels([info('c')]);
    expect(store.getState().activeModelId).toBe('c');
    store.getState().setModels([]);
    expect(store.getState().activeModelId).toBeNull();
  });

  it('keeps the library as the host sends it; the view lists the packages not loaded now', () => {
    const store = createAppStore();
    const a = info('a');
    const b = info('b');
    const entry = (m: ModelInfo): LibraryEntry => ({
      root: m.spec.root,
      id: m.id,
      spec: m.spec,
      missing: false,
      uploaded: false,
      addedAt: 1,
      lastLoadedAt: 2,
    });
    // Two folders may share an id: the view matches loaded models by folder.
    const twin: LibraryEntry = { ...entry(a), root: '/elsewhere/a' };
    store.getState().setLibrary([entry(a), entry(b), twin]);
    store.getState().setModels([a]);
    const { library, models } = store.getState();
    expect(unloadedEntries(library, models, undefined).map((e) => e.root)).toEqual(['/models/b', '/elsewhere/a']);
    // The package the last drop shows has its own card.
    expect(unloadedEntries(library, models, '/models/b').map((e) => e.root)).toEqual(['/elsewhere/a']);
  });

  it('says when a package was last loaded in days, then as a date', () => {
    const now = new Date(2026, 10, 30, 15).getTime();
    expect(lastLoaded(new Date(2026, 10, 30, 1).getTime(), now)).toBe('today');
    expect(lastLoaded(new Date(2026, 10, 29, 23).getTime(), now)).toBe('yesterday');
    expect(lastLoaded(new Date(2026, 10, 27, 12).getTime(), now)).toBe('3 days ago');
    expect(lastLoaded(new Date(2026, 9, 1).getTime(), now)).toBe(new Date(2026, 9, 1).toLocaleDateString());
  });

  it('tracks busy models', () => {
    const store = createAppStore();
    store.getState().setModelBusy('x', true);
    store.getState().setModelBusy('x', true);
    expect(store.getState().busyModels).toEqual(['x']);
    store.getState().setModelBusy('x', false);
    expect(store.getState().busyModels).toEqual([]);
  });
});
