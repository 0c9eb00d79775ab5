/** What a new KV limit would do before it is set (pure): the idle chats whose kept KV it would drop. */
import type { SchedulerSnapshot } from '../../shared/scheduler-types';

/**
 * How many sessions a limit of `bytes` would drop, as the scheduler's reconfigure does: while what is reserved and
 * held is over the limit, the least recently used session holding KV gives it up (running work is never dropped).
 */
export function sessionsDroppedBy(
  snap: Pick<SchedulerSnapshot, 'reservedBytes' | 'heldBytes' | 'sessions'>,
  bytes: number,
): number {
  let usage = snap.reservedBytes + snap.heldBytes;
  let dropped = 0;
  for (const s of snap.sessions) {
    if (usage <= bytes) break;
    if (s.heldBytes <= 0) continue;
    usage -= s.heldBytes;
    dropped++;
  }
  return dropped;
}
