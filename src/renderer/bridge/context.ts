/** React access to the store and the bridge: narrow selectors for reading, bridge actions for doing. */
import { createContext, useContext } from 'react';
import { useStore } from 'zustand';
import type { AppState, AppStore } from '../store';
import type { Bridge } from './bridge';

export interface AppContextValue {
  store: AppStore;
  bridge: Bridge;
}

export const AppContext = createContext<AppContextValue | null>(null);

function useAppContext(): AppContextValue {
  const ctx = useContext(AppContext);
  if (!ctx) throw new Error('AppContext missing: render inside <AppContext.Provider>');
  return ctx;
}

/** Reads one narrow slice of the store; the component re-renders only when it changes. */
export function useApp<T>(selector: (s: AppState) => T): T {
  return useStore(useAppContext().store, selector);
}

/** The bridge's actions. */
export function useBridge(): Bridge {
  return useAppContext().bridge;
}

/** The store itself, for event handlers that read state once without subscribing. */
export function useAppStore(): AppStore {
  return useAppContext().store;
}
