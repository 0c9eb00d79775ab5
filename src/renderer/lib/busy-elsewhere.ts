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
): boolean {
  for (const l of liveHere) if (l.threadId === threadId) return false;
  if (!snapshot) return false;
  const devices = snapshot.devices.length > 0 ? snapshot.devices : [snapshot];
  for (const d of devices) {
    if (d.running.some((r) => r.threadId === threadId) || d.queue.some((r) => r.threadId === threadId)) return true;
  }
  return (snapshot.reloadWaits ?? []).some((w) => w.threadId === threadId);
}
