import { describe, expect, it } from 'vitest';
import { createAppStore } from '../../../src/renderer/store';
import type { ModelInfo } from '../../../src/shared/api';
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

  it('remembers unloaded packages until they are loaded again', () => {
    const store = createAppStore();
    const a = info('a');
    store.getState().rememberUnloaded({ root: a.spec.root, spec: a.spec });
    store.getState().rememberUnloaded({ root: a.spec.root, spec: a.spec });
    expect(store.getState().unloaded).toHaveLength(1);
    store.getState().setModels([a]);
    expect(store.getState().unloaded).toHaveLength(0);
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
