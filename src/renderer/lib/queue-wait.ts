/**
 * Why a queued request waits, from the budget snapshot (UI.md: every queueing is explained with the numbers and
 * one thing the person can do): every running slot is taken, requests ahead of it come first (first come, first
 * served), the KV budget is committed to running replies and idle sessions, or it would fit alone but not padded
 * to the width of the batch it would join; or its model is being loaded again after the engine stopped (a queued
 * request then waits for it, whatever the budget). DOM-free, for the chat's queued note.
 */
import type { BudgetSnapshot, DeviceBudgetSnapshot, SchedulerRequestView } from '../../shared/scheduler-types';
import { formatBytes, formatInteger } from './format';

export interface QueueWait {
  /** 0 for the head of the queue. */
  position: number;
  reason: 'slots' | 'behind' | 'budget' | 'padding' | 'reloading';
  device: string;
  running: number;
  maxRunning: number;
  freeBytes: number;
  limitBytes: number;
  /** Reason `padding`: its own reservation, and the positions per row of the batch's widest reservation. */
  ownBytes?: number;
  batchWidth?: number;
}

/**
 * The least a queued request reserves once admitted: its rows × its own positions (its session's prefix, prompt and
 * max tokens, or a static cache's fixed length) × bytes per token. Joining a batch of longer replies pads its rows
 * to their width, which takes more; the scheduler reckons that (and a budget cap) only as it admits it.
 */
export function leastReservation(r: SchedulerRequestView): number {
  return r.rows * (r.fixedTokens ?? r.sessionPrefixTokens + r.promptTokens + r.maxNewTokens) * r.bpt;
}

/**
 * What a queued request reserves once admitted, as far as the limit tells: its full reservation (leastReservation),
 * or, where that is more than the whole limit, at most the limit's whole positions — it can then only be admitted
 * with its reply capped (SCHEDULER.md: the largest whole number of tokens that fits). A static cache is never
 * capped. `capped`: the figure is that cap's most, not a least.
 */
export function queuedReservation(r: SchedulerRequestView, limitBytes: number): { bytes: number; capped: boolean } {
  const full = leastReservation(r);
  const perPosition = r.rows * r.bpt;
  if (r.fixedTokens !== undefined || perPosition <= 0 || full <= limitBytes) return { bytes: full, capped: false };
  return { bytes: Math.floor(limitBytes / perPosition) * perPosition, capped: true };
}

/**
 * Where the request waits and why; null when the snapshot does not have it queued. `reloading`: the models being
 * loaded again (ModelInfo.reloading); a queued request of one waits for it.
 */
export function queueWait(
  snapshot: BudgetSnapshot | null,
  requestId: string | undefined,
  reloading: ReadonlySet<string> = new Set(),
): QueueWait | null {
  if (!snapshot || !requestId) return null;
  const devices: DeviceBudgetSnapshot[] = snapshot.devices.length > 0 ? snapshot.devices : [snapshot];
  for (const d of devices) {
    const position = d.queue.findIndex((q) => q.id === requestId);
    if (position < 0) continue;
    const head = d.queue[position] as SchedulerRequestView;
    const ownBytes = leastReservation(head);
    // Fitting alone, it waits only because its rows would be padded to the batch's widest reservation (every
    // running request of a padded batch reserves its rows that wide).
    const widths = d.running
      .filter((r) => r.modelId === head.modelId && r.bpt > 0)
      .map((r) => Math.round(r.reservedBytes / (r.rows * r.bpt)));
    const batchWidth = Math.max(0, ...widths);
    const padded = head.fixedTokens === undefined && head.bpt > 0 && ownBytes <= d.freeBytes && batchWidth > 0;
    const reason = reloading.has(head.modelId)
      ? 'reloading'
      : d.running.length >= d.maxRunning
        ? 'slots'
        : position > 0
          ? 'behind'
          : padded
            ? 'padding'
            : 'budget';
    return {
      position,
      reason,
      ...(reason === 'padding' ? { ownBytes, batchWidth } : {}),
      device: d.device,
      running: d.running.length,
      maxRunning: d.maxRunning,
      freeBytes: d.freeBytes,
      limitBytes: d.limitBytes,
    };
  }
  return null;
}

/**
 * Where a queued request is and why it waits, in a few words (the inspector's request row; the chat's note says it
 * whole, with what to do): `position 1 · all 4 running slots are taken`. One that waits only for those ahead of it
 * says its place alone (the head's row says why the queue waits; "first come, first served" on every row after it
 * said nothing new).
 */
export function queueWaitBrief(wait: QueueWait): string {
  if (wait.reason === 'behind') return `position ${wait.position + 1}`;
  const why =
    wait.reason === 'slots'
      ? wait.maxRunning === 1
        ? 'the one running slot is taken'
        : `all ${wait.maxRunning} running slots are taken`
      : wait.reason === 'reloading'
        ? 'its model is loading again'
        : wait.reason === 'padding'
          ? `its ${formatBytes(wait.ownBytes ?? 0)} would fit, not padded to the batch's ${formatInteger(wait.batchWidth ?? 0)} positions`
          : `waits for KV: ${formatBytes(wait.freeBytes)} free of ${formatBytes(wait.limitBytes)}`;
  return `position ${wait.position + 1} · ${why}`;
}
