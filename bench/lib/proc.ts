/** Reading the machine and a process from /proc (Linux): memory of the engine process, how busy the CPUs are. */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import os from 'node:os';

/** VmRSS and VmHWM of a process in bytes, or null when /proc is not readable. */
export async function processMemory(pid: number): Promise<{ rss: number; hwm: number } | null> {
  try {
    const text = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string): number => {
      const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text);
      return m ? Number(m[1]) * 1024 : Number.NaN;
    };
    return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
  } catch {
    return null;
  }
}

function cpuTimes(): { busy: number; total: number } | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    const total = v.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

/** Share of all CPUs (0–1) that was busy over `ms` milliseconds; null off Linux. */
export async function cpuBusyShare(ms: number): Promise<number | null> {
  const a = cpuTimes();
  await new Promise((r) => setTimeout(r, ms));
  const b = cpuTimes();
  if (!a || !b || b.total === a.total) return null;
  return (b.busy - a.busy) / (b.total - a.total);
}

/** One line that says how quiet the machine is: cores, load average, and CPU already busy before the bench starts. */
export async function machineLine(): Promise<{ text: string; busyBefore: number | null }> {
  const busy = await cpuBusyShare(1000);
  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  const cpus = os.availableParallelism();
  const model = os.cpus()[0]?.model ?? 'unknown CPU';
  const busyText = busy === null ? 'unknown' : `${Math.round(busy * 100)}%`;
  return {
    text: `${cpus} CPUs (${model}), Node ${process.version}, load average ${load}, CPU busy before start ${busyText}`,
    busyBefore: busy,
  };
}
