/**
 * The side of a benchmark worker process (bench/workers/*): its events to the
 * orchestrator, its memory reading, and its command loop.
 */
import { readFileSync } from 'node:fs';
import { installRunTimer } from './run-timer';
import type { WorkerCommand, WorkerEvent } from './worker-protocol';

/** Sends one event to the orchestrator (WorkerClient). */
export function send(event: WorkerEvent): void {
  process.send?.(event);
}

/** This process's resident memory in bytes (NaN off Linux). */
export function rss(): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

/**
 * Runs the worker: each command goes to `handle` (a thrown error is reported as
 * an `error` event), the worker exits with its orchestrator, and says `ready`.
 * `timeRuns` installs the session.run timer the profile reads.
 */
export function runWorker(handle: (cmd: WorkerCommand) => Promise<void>, timeRuns = true): void {
  if (timeRuns) installRunTimer();
  process.on('message', (msg) => {
    handle(msg as WorkerCommand).catch((err: unknown) =>
      send({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
    );
  });
  process.on('disconnect', () => process.exit(0));
  send({ type: 'ready', pid: process.pid });
}
