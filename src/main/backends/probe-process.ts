/**
 * Entry of the backend probe process (forked by detectBackendsInChildProcess).
 * Runs detection with the real onnxruntime and reports over IPC: each backend
 * as it is about to be probed, then the whole report. A provider library that
 * crashes the process therefore takes down only this process, and the parent
 * knows which backend did it.
 */
import { type BackendReport, detectBackends } from './detect';

/** Messages the probe process sends its parent. */
export type ProbeMessage =
  | { type: 'probing'; backend: string }
  | { type: 'report'; report: BackendReport[] }
  | { type: 'failed'; message: string };

function send(message: ProbeMessage): Promise<void> {
  return new Promise((resolve) => {
    if (process.send === undefined) {
      process.stdout.write(`${JSON.stringify(message)}\n`);
      resolve();
    } else process.send(message, undefined, undefined, () => resolve());
  });
}

async function main(): Promise<void> {
  const skipArg = process.argv.find((a) => a.startsWith('--skip='));
  const skip =
    skipArg === undefined
      ? []
      : skipArg
          .slice('--skip='.length)
          .split(',')
          .filter((s) => s !== '');
  try {
    const report = await detectBackends({
      skip,
      onProbe: (backend) => {
        void send({ type: 'probing', backend });
      },
    });
    await send({ type: 'report', report });
  } catch (err) {
    await send({ type: 'failed', message: err instanceof Error ? err.message : String(err) });
  }
  // GPU runtimes can leave threads behind that keep the process alive.
  process.exit(0);
}

void main();
