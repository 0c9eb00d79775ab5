/**
 * Host events to the window. 'budget' (already throttled ≤ 10 Hz by the host)
 * and 'models' go out as they come; discrete 'scheduler' events are gathered
 * for one frame (16 ms) and sent as one message, so a burst of admissions and
 * releases never becomes a burst of IPC messages.
 */
import type { HostEventName, HostEvents } from '../../shared/api';
import { HOST_EVENT_NAMES } from './validate';

/** What the forwarder subscribes to (HostApi.on). */
export interface HostEventSource {
  on<E extends HostEventName>(event: E, fn: (payload: HostEvents[E]) => void): () => void;
}

/** Sends one batch of payloads of one event to the window. */
export type EventSink = (event: HostEventName, payloads: unknown[]) => void;

/** Scheduler events are batched over this window. */
export const SCHEDULER_BATCH_MS = 16;

/** Subscribes to every host event and forwards it; returns the unsubscribe function. */
export function forwardHostEvents(source: HostEventSource, sink: EventSink, batchMs = SCHEDULER_BATCH_MS): () => void {
  let pending: unknown[] = [];
  let timer: ReturnType<typeof setTimeout> | null = null;
  const flush = () => {
    timer = null;
    const batch = pending;
    pending = [];
    if (batch.length > 0) sink('scheduler', batch);
  };
  const unsubscribers = HOST_EVENT_NAMES.map((name) =>
    source.on(name, (payload: unknown) => {
      if (name !== 'scheduler') {
        sink(name, [payload]);
        return;
      }
      pending.push(payload);
      timer ??= setTimeout(flush, batchMs);
    }),
  );
  return () => {
    for (const off of unsubscribers) off();
    if (timer) clearTimeout(timer);
    timer = null;
    pending = [];
  };
}
