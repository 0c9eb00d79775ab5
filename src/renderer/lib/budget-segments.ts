/**
 * The budget bar's segments from a snapshot: per running request its used and
 * reserved-not-yet-used bytes, per idle session its held bytes, then what is
 * free. Pure, so the proportions are unit-tested rather than eyeballed.
 */
import type { SchedulerSnapshot } from '../../shared/scheduler-types';
import { exactBytes, formatBytes } from './format';

export type SegmentKind = 'used' | 'reserved' | 'held' | 'free';

export interface BudgetSegment {
  kind: SegmentKind;
  bytes: number;
  /** Share of the bar, 0..1. */
  fraction: number;
  /** Tooltip: what the segment is, whose it is, exact bytes. */
  label: string;
  /** The request or session behind it. */
  owner?: string;
}

/** What a budget over its limit (one lowered under running replies) does: said with it wherever it is shown. */
export const OVER_LIMIT_EFFECT = 'running replies finish, nothing new starts until it is under';

export interface BudgetBarModel {
  segments: BudgetSegment[];
  /** Bytes the bar's full width stands for: the limit, or more when usage is over a lowered limit. */
  scaleBytes: number;
  /** Where the limit sits (0..1); below 1 only when over the limit. */
  limitAt: number;
  /** The limit's mark, said: where it is, and how far over it the budget is (when it is). */
  limitLabel: string;
  totals: Record<SegmentKind, number>;
}

/** Short display name for a thread or session id. */
export type NameOf = (threadOrSessionId: string | undefined) => string | undefined;

export function budgetBar(snap: SchedulerSnapshot, nameOf: NameOf = () => undefined): BudgetBarModel {
  const segments: Omit<BudgetSegment, 'fraction'>[] = [];
  for (const r of snap.running) {
    const who = nameOf(r.threadId ?? r.sessionId);
    const owner = `request ${r.id.slice(0, 8)}${who ? ` (${who})` : ''}`;
    const used = Math.min(r.usedBytes, r.reservedBytes);
    if (used > 0)
      segments.push({
        kind: 'used',
        bytes: used,
        owner,
        label: `${owner}: used ${formatBytes(used)} — ${exactBytes(used)}`,
      });
    const rest = r.reservedBytes - used;
    if (rest > 0) {
      segments.push({
        kind: 'reserved',
        bytes: rest,
        owner,
        label: `${owner}: reserved, not yet used ${formatBytes(rest)} — ${exactBytes(rest)} (of ${exactBytes(r.reservedBytes)} reserved)`,
      });
    }
  }
  for (const s of snap.sessions) {
    if (s.heldBytes <= 0) continue;
    const who = nameOf(s.sessionId) ?? s.sessionId.slice(0, 10);
    const owner = `session ${who}`;
    segments.push({
      kind: 'held',
      bytes: s.heldBytes,
      owner,
      label: `${owner}: holds ${formatBytes(s.heldBytes)} of KV between turns (${s.tokens} tokens) — ${exactBytes(s.heldBytes)}`,
    });
  }
  const taken = snap.reservedBytes + snap.heldBytes;
  const free = Math.max(0, snap.limitBytes - taken);
  if (free > 0) segments.push({ kind: 'free', bytes: free, label: `free ${formatBytes(free)} — ${exactBytes(free)}` });
  const scaleBytes = Math.max(snap.limitBytes, taken, 1);
  const totals: Record<SegmentKind, number> = {
    used: snap.usedBytes,
    reserved: Math.max(0, snap.reservedBytes - snap.usedBytes),
    held: snap.heldBytes,
    free,
  };
  return {
    segments: segments.map((s) => ({ ...s, fraction: s.bytes / scaleBytes })),
    scaleBytes,
    limitAt: snap.limitBytes / scaleBytes,
    limitLabel:
      taken > snap.limitBytes
        ? `limit ${formatBytes(snap.limitBytes)}, ${formatBytes(taken - snap.limitBytes)} over it: ${OVER_LIMIT_EFFECT}`
        : `limit ${formatBytes(snap.limitBytes)}`,
    totals,
  };
}
