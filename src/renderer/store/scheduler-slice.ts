/** The latest budget snapshot and the scheduler's event timeline. */

import type { StateCreator } from 'zustand/vanilla';
import type { SchedulerEvent } from '../../shared/scheduler-types';
import type { AppState, SchedulerSlice, TimelineEvent } from './types';

/** Timeline entries kept; older ones scroll away (the host keeps counters for totals). */
export const TIMELINE_LIMIT = 400;

function isTimelineEvent(e: SchedulerEvent): e is TimelineEvent {
  return e.type !== 'progress';
}

export const createSchedulerSlice: StateCreator<AppState, [], [], SchedulerSlice> = (set) => ({
  snapshot: null,
  events: [],

  setSnapshot(snapshot, replace = false) {
    set((s) => {
      // A getSnapshot reply can arrive after a newer broadcast: latest wins. After a reconnect the
      // host may have restarted with a new clock, so the bridge replaces unconditionally then.
      if (!replace && s.snapshot && snapshot.at < s.snapshot.at) return {};
      return { snapshot };
    });
  },

  pushEvents(events) {
    const kept = events.filter(isTimelineEvent);
    if (kept.length === 0) return;
    set((s) => {
      const all = s.events.concat(kept);
      return { events: all.length > TIMELINE_LIMIT ? all.slice(all.length - TIMELINE_LIMIT) : all };
    });
  },
});
