/**
 * The renderer's one store, built from typed slices. It is a vanilla zustand
 * store so the bridge can write to it from outside React; components read it
 * with `useApp(selector)` and narrow selectors.
 */
import { createStore, type StoreApi } from 'zustand/vanilla';
import { createChatSlice } from './chat-slice';
import { createModelsSlice } from './models-slice';
import { createSchedulerSlice } from './scheduler-slice';
import { createSettingsSlice } from './settings-slice';
import type { AppState } from './types';

export type AppStore = StoreApi<AppState>;

export function createAppStore(): AppStore {
  return createStore<AppState>()((...a) => ({
    ...createModelsSlice(...a),
    ...createChatSlice(...a),
    ...createSchedulerSlice(...a),
    ...createSettingsSlice(...a),
  }));
}

export type { AppState } from './types';
