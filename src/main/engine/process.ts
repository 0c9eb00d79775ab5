/**
 * Entry point of the engine process (child_process.fork). Everything that
 * blocks on onnxruntime happens here, never on the host's event loop.
 */
import { createEngineCore } from './engine-core';
import type { EngineCommand, EngineEvent } from './protocol';

function send(event: EngineEvent): void {
  // The host may go away between the check and the write (quit mid-stream): that is not an engine error.
  if (process.connected) process.send?.(event, undefined, undefined, () => {});
}

process.on('error', () => {});
// Ctrl-C reaches the whole process group; the engine ends when the host disconnects, not before,
// so the host can cancel requests and release their reservations cleanly.
process.on('SIGINT', () => {});

const core = createEngineCore(send);
process.on('message', (msg) => core.handle(msg as EngineCommand));
// The host going away (crash, kill) must not leave an orphan engine computing.
process.on('disconnect', () => process.exit(0));
send({ type: 'ready', pid: process.pid });
