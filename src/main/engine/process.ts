/**
 * Entry point of the engine process (child_process.fork). Everything that
 * blocks on onnxruntime happens here, never on the host's event loop.
 */
import { Worker } from 'node:worker_threads';
import { createEngineCore } from './engine-core';
import type { EngineCommand, EngineEvent } from './protocol';

function send(event: EngineEvent): void {
  // The host may go away between the check and the write (quit mid-stream): that is not an engine error.
  if (process.connected) process.send?.(event, undefined, undefined, () => {});
}

/**
 * Watches, on a thread of its own, for the host's end: kills this process when its parent has changed (the host
 * died and it was adopted) or is gone. Run every half second, also while onnxruntime blocks the engine's own thread.
 */
const WATCH_HOST = `
const { workerData } = require('node:worker_threads');
setInterval(() => {
  let gone = process.ppid !== workerData.host;
  try {
    process.kill(workerData.host, 0);
  } catch (err) {
    if (err.code === 'ESRCH') gone = true;
  }
  if (gone) process.kill(workerData.engine, 'SIGKILL');
}, 500);
`;

process.on('error', () => {});
// Ctrl-C reaches the whole process group, and so does a group's SIGTERM (systemd's stop, `kill -TERM -PGID`): the
// engine ends when the host disconnects (or kills it), not before, so the host can cancel requests and release their
// reservations cleanly, and does not take an engine killed under it for a crash to recover from.
process.on('SIGINT', () => {});
process.on('SIGTERM', () => {});

const core = createEngineCore(send);
process.on('message', (msg) => core.handle(msg as EngineCommand));
// The host going away (crash, kill) must not leave an orphan engine computing. Its disconnect is heard between
// commands only: a model load blocks this thread in onnxruntime for seconds (minutes for a large model), and the
// watch ends the engine then.
process.on('disconnect', () => process.exit(0));
new Worker(WATCH_HOST, { eval: true, workerData: { host: process.ppid, engine: process.pid }, execArgv: [] }).unref();
send({ type: 'ready', pid: process.pid });
