/**
 * Whether a chat has a reply on its way that another window or tab sent: the host's budget lists a request for
 * the chat (queued, running, or waiting for its model to load again) that this page is not writing. That page saves
 * the reply's text so far as it goes; here it reads as interrupted unless this says otherwise.
 */
import type { BudgetSnapshot } from '../../shared/scheduler-types';

export function busyElsewhere(
  snapshot: BudgetSnapshot | null,
  threadId: string,
  liveHere: Iterable<{ threadId: string }>,
  own: ReadonlySet<string> = ownRequests,
): boolean {
  for (const l of liveHere) if (l.threadId === threadId) return false;
  if (!snapshot) return false;
  // A request this page sent is its own, also just after its reply ended here (the budget, sent at most ten
  // times a second, may list it a moment longer).
  const theirs = (r: { id: string; threadId?: string }) => r.threadId === threadId && !own.has(r.id);
  const devices = snapshot.devices.length > 0 ? snapshot.devices : [snapshot];
  for (const d of devices) {
    if (d.running.some(theirs) || d.queue.some(theirs)) return true;
  }
  return (snapshot.reloadWaits ?? []).some((w) => w.threadId === threadId && !own.has(w.requestId));
}

/** The requests this page sent (the latest thousand), by id. */
const ownRequests = new Set<string>();
const OWN_KEPT = 1000;

export function noteOwnRequest(id: string): void {
  ownRequests.add(id);
  if (ownRequests.size > OWN_KEPT) ownRequests.delete(ownRequests.values().next().value as string);
}
