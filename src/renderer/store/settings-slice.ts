/** UI settings (persisted through saveSettings) and window state (not persisted). */
import type { StateCreator } from 'zustand/vanilla';
import type { AppState, SettingsSlice } from './types';

/** How many earlier passing notices stay shown beside the newest (the oldest goes first). */
export const EARLIER_NOTICES_KEPT = 3;
let noticeSeq = 0;

export const createSettingsSlice: StateCreator<AppState, [], [], SettingsSlice> = (set) => ({
  ui: { inspectorOpen: true },
  view: 'chat',
  connection: 'connecting',
  transport: null,
  notice: null,
  stickyNotice: null,
  noticeUrgent: false,
  earlierNotices: [],
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
    if (stays) {
      set({ stickyNotice: notice });
      return;
    }
    set((s) => {
      // The one showing stays in sight when another comes: last wins no more.
      const earlier = s.earlierNotices.filter((n) => n.text !== notice && n.text !== s.notice);
      if (notice !== null && s.notice !== null && s.notice !== notice)
        earlier.push({ text: s.notice, seq: ++noticeSeq, since: Date.now() });
      return { notice, noticeUrgent: urgent, earlierNotices: earlier.slice(-EARLIER_NOTICES_KEPT) };
    });
  },
  dropNotice(text) {
    set((s) => ({
      ...(s.notice === text ? { notice: null } : {}),
      earlierNotices: s.earlierNotices.filter((n) => n.text !== text),
    }));
  },
  announce(text) {
    set((s) => ({ announcement: { text, seq: (s.announcement?.seq ?? 0) + 1 } }));
  },
  setApiServer(apiServer) {
    set({ apiServer });
  },
});
