/**
 * Guard against other processes on a shared machine. A timed sample is only
 * kept when the CPU time used by processes outside this benchmark's own tree
 * (this process and every descendant: engines, contenders, kvdesk serve,
 * Chromium) stayed under a threshold while it ran; otherwise it is measured
 * again. Before each sample the guard waits (bounded) for the machine to be
 * quiet. Linux /proc only; elsewhere every sample is kept as measured.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { log } from './context';

interface Snap {
  busy: number;
  total: number;
  ours: number;
}

function readStat(pid: string): { ppid: number; cpu: number } | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(rest[1]), cpu: Number(rest[11]) + Number(rest[12]) };
  } catch {
    return null;
  }
}

function snapshot(): Snap | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const total = v.reduce((a, b) => a + b, 0);
    const busy = total - (v[3] ?? 0) - (v[4] ?? 0);
    const stats = new Map<number, { ppid: number; cpu: number }>();
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const s = readStat(name);
      if (s) stats.set(Number(name), s);
    }
    const children = new Map<number, number[]>();
    for (const [pid, s] of stats) {
      const list = children.get(s.ppid) ?? [];
      list.push(pid);
      children.set(s.ppid, list);
    }
    let ours = 0;
    const stack = [process.pid];
    while (stack.length > 0) {
      const pid = stack.pop() as number;
      ours += stats.get(pid)?.cpu ?? 0;
      for (const c of children.get(pid) ?? []) stack.push(c);
    }
    return { busy, total, ours };
  } catch {
    return null;
  }
}

function foreign(a: Snap | null, b: Snap | null): number | null {
  if (!a || !b || b.total <= a.total) return null;
  return Math.max(0, b.busy - a.busy - (b.ours - a.ours)) / (b.total - a.total);
}

/** Counts of what the guard did, for the report. */
export interface NoiseStats {
  samples: number;
  retried: number;
  keptNoisy: number;
  waitedMs: number;
}

export class NoiseGuard {
  readonly stats: NoiseStats = { samples: 0, retried: 0, keptNoisy: 0, waitedMs: 0 };

  /**
   * @param threshold share of all CPUs (0–1) other processes may use during a sample
   * @param deadline performance.now() after which the guard stops waiting and retrying (quick mode's time box)
   */
  constructor(
    readonly threshold: number,
    private readonly deadline: number,
    private readonly maxWaitMs: number,
  ) {}

  /** Foreign CPU share over `ms` milliseconds (null off Linux). */
  async foreignOver(ms: number): Promise<number | null> {
    const a = snapshot();
    await new Promise((r) => setTimeout(r, ms));
    return foreign(a, snapshot());
  }

  /** Waits until other processes leave the CPUs alone for 300 ms, or the wait limit passes. */
  async waitQuiet(): Promise<void> {
    const started = performance.now();
    while (performance.now() - started < this.maxWaitMs && performance.now() < this.deadline) {
      const share = await this.foreignOver(300);
      if (share === null || share < this.threshold) break;
    }
    this.stats.waitedMs += performance.now() - started;
  }

  /** Runs a timed sample until it ran on a quiet machine (at most `tries` times); returns the last value. */
  async sample<T>(label: string, fn: () => Promise<T>, tries = 4): Promise<T> {
    this.stats.samples++;
    let value: T | undefined;
    for (let t = 1; ; t++) {
      await this.waitQuiet();
      const a = snapshot();
      value = await fn();
      const share = foreign(a, snapshot());
      if (share === null || share < this.threshold) return value;
      if (t >= tries || performance.now() > this.deadline) {
        this.stats.keptNoisy++;
        log(`  (kept a noisy sample of ${label}: other processes used ${Math.round(share * 100)}% of the CPUs)`);
        return value;
      }
      this.stats.retried++;
      log(`  (repeating ${label}: other processes used ${Math.round(share * 100)}% of the CPUs)`);
    }
  }
}
