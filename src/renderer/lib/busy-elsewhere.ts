/**
 * Whether a chat has a reply on its way that another window or tab sent: the host's budget lists a request for
 * the chat (queued, running, or waiting for its model to load again) that this page is not writing. That page saves
 * the reply's text so far as it goes; here it reads as interrupted unless this says otherwise.
 */
import type { BudgetSnapshot, SchedulerEvent } from '../../shared/scheduler-types';

/** Events after which a request holds nothing and writes no more: it is over. */
const ENDS = new Set<SchedulerEvent['type']>(['finished', 'cancelled', 'failed', 'rejected', 'released']);

export function busyElsewhere(
  snapshot: BudgetSnapshot | null,
  threadId: string,
  liveHere: Iterable<{ threadId: string }>,
  events: readonly SchedulerEvent[] = [],
  own: ReadonlySet<string> = ownRequests,
): boolean {
  for (const l of liveHere) if (l.threadId === threadId) return false;
  if (!snapshot) return false;
  // A request this page sent is its own, also just after its reply ended here; and one whose end the host has
  // announced is over (the budget, sent at most ten times a second, may list either a moment longer than the events
  // that come with it say: a turn sent then must not be refused as busy).
  const over = (id: string) => events.some((e) => ENDS.has(e.type) && 'requestId' in e && e.requestId === id);
  const theirs = (id: string, thread: string | undefined) => thread === threadId && !own.has(id) && !over(id);
  const devices = snapshot.devices.length > 0 ? snapshot.devices : [snapshot];
  for (const d of devices) {
    if (d.running.some((r) => theirs(r.id, r.threadId)) || d.queue.some((r) => theirs(r.id, r.threadId))) return true;
  }
  return (snapshot.reloadWaits ?? []).some((w) => theirs(w.requestId, w.threadId));
}

/** The requests this page sent (the latest thousand), by id. */
const ownRequests = new Set<string>();
const OWN_KEPT = 1000;

export function noteOwnRequest(id: string): void {
  ownRequests.add(id);
  if (ownRequests.size > OWN_KEPT) ownRequests.delete(ownRequests.values().next().value as string);
}
