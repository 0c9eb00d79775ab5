/** UI settings (persisted through saveSettings) and window state (not persisted). */
import type { StateCreator } from 'zustand/vanilla';
import type { AppState, SettingsSlice } from './types';

export const createSettingsSlice: StateCreator<AppState, [], [], SettingsSlice> = (set) => ({
  ui: { inspectorOpen: true },
  view: 'chat',
  connection: 'connecting',
  transport: null,
  notice: null,
  stickyNotice: null,
  apiServer: null,
  sidebarOpen: false,
  inspectorDrawer: false,

  setSidebarOpen(sidebarOpen) {
    set({ sidebarOpen });
  },
  setInspectorDrawer(inspectorDrawer) {
    set({ inspectorDrawer });
  },
  setUi(patch) {
    set((s) => ({ ui: { ...s.ui, ...patch } }));
  },
  setView(view) {
    set({ view });
  },
  setConnection(connection) {
    set({ connection });
  },
  setTransport(transport) {
    set({ transport });
  },
  setNotice(notice, stays = false) {
    set(stays ? { stickyNotice: notice } : { notice });
  },
  setApiServer(apiServer) {
    set({ apiServer });
  },
});
