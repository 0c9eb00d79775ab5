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
  noticeUrgent: false,
  announcement: null,
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
  setNotice(notice, stays = false, urgent = false) {
    set(stays ? { stickyNotice: notice } : { notice, noticeUrgent: urgent });
  },
  announce(text) {
    set((s) => ({ announcement: { text, seq: (s.announcement?.seq ?? 0) + 1 } }));
  },
  setApiServer(apiServer) {
    set({ apiServer });
  },
});
