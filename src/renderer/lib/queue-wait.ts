/**
 * Why a queued request waits, from the budget snapshot (UI.md: every queueing is explained with the numbers and
 * one thing the person can do): every running slot is taken, requests ahead of it come first (first come, first
 * served), or the KV budget is committed to running replies and idle sessions. DOM-free, for the chat's queued note.
 */
import type { BudgetSnapshot, DeviceBudgetSnapshot } from '../../shared/scheduler-types';

export interface QueueWait {
  /** 0 for the head of the queue. */
  position: number;
  reason: 'slots' | 'behind' | 'budget';
  device: string;
  running: number;
  maxRunning: number;
  freeBytes: number;
  limitBytes: number;
}

/** Where the request waits and why; null when the snapshot does not have it queued. */
export function queueWait(snapshot: BudgetSnapshot | null, requestId: string | undefined): QueueWait | null {
  if (!snapshot || !requestId) return null;
  const devices: DeviceBudgetSnapshot[] = snapshot.devices.length > 0 ? snapshot.devices : [snapshot];
  for (const d of devices) {
    const position = d.queue.findIndex((q) => q.id === requestId);
    if (position < 0) continue;
    const reason = d.running.length >= d.maxRunning ? 'slots' : position > 0 ? 'behind' : 'budget';
    return {
      position,
      reason,
      device: d.device,
      running: d.running.length,
      maxRunning: d.maxRunning,
      freeBytes: d.freeBytes,
      limitBytes: d.limitBytes,
    };
  }
  return null;
}
