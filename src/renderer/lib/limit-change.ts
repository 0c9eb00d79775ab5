/** What a new KV limit would do before it is set (pure): the idle sessions whose kept KV it would drop. */
import type { SchedulerSnapshot } from '../../shared/scheduler-types';

type Occupancy = Pick<SchedulerSnapshot, 'reservedBytes' | 'heldBytes' | 'sessions'>;

/**
 * How many sessions a limit of `bytes` would drop, as the scheduler's reconfigure does: while what is reserved and
 * held is over the limit, the least recently used session holding KV gives it up (running work is never dropped).
 */
export function sessionsDroppedBy(snap: Occupancy, bytes: number): number {
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

/**
 * Going back to the derived limit: what it comes to and the sessions it would drop, when it would drop any (a
 * limit set directly, with no derivation to go back to, tells nothing here: the host derives it then).
 */
export function derivedLimitDrops(
  snap: Occupancy & Pick<SchedulerSnapshot, 'derivation'>,
): { bytes: number; drops: number } | undefined {
  const derived = snap.derivation.derivedBytes;
  if (derived === undefined) return undefined;
  const bytes = Math.max(0, derived);
  const drops = sessionsDroppedBy(snap, bytes);
  return drops > 0 ? { bytes, drops } : undefined;
}
