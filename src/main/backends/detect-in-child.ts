/**
 * Backend detection off the main process. Creating a session is synchronous
 * native work in onnxruntime-node (CUDA start-up can take seconds), and a
 * broken provider library can abort the process that loads it; the Electron
 * main process serves the UI's IPC, so it must do neither. This forks the
 * probe process, and when it dies mid-probe marks that backend unusable and
 * starts a new one for the backends not yet probed.
 */
import { fork } from 'node:child_process';
import path from 'node:path';
import { ORT_ENV } from '../../shared/ort-env';
import { providerName } from '../packages/execution-providers';
import { setupHint } from './cuda-setup';
import { type BackendReport, stripAnsi } from './detect';
import type { ProbeMessage } from './probe-process';
import { type ProcessEntry, processEntry } from './process-entry';

/** Options of detectBackendsInChildProcess. */
export interface ChildDetectOptions {
  /** Kills a probe process that has not answered after this long (a hung driver), default 60 s. */
  timeoutMs?: number;
  /** Explicit probe entry (tests, bundles); defaults to the built probe-process.js or the TypeScript source. */
  entry?: string;
}

/** The probe entry: the bundled probe-process.js in a build, else the TS source run through tsx. */
function resolveEntry(explicit?: string): ProcessEntry {
  return processEntry('probe-process', [__dirname], path.join(__dirname, 'probe-process.ts'), explicit);
}

interface RunResult {
  report?: BackendReport[];
  /** The backend being probed when the process died or hung. */
  crashedOn?: string;
  why: string;
}

function runOnce(skip: string[], options: ChildDetectOptions): Promise<RunResult> {
  const { file, execArgv } = resolveEntry(options.entry);
  const child = fork(file, [`--skip=${skip.join(',')}`], {
    execArgv,
    serialization: 'advanced',
    env: { ...ORT_ENV, ...process.env },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    // Only the tail matters for saying why a provider crashed.
    stderr = (stderr + chunk.toString('utf8')).slice(-4000);
  });
  let probing: string | undefined;
  return new Promise<RunResult>((resolve) => {
    let settled = false;
    const finish = (result: RunResult): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const tail = (): string => {
      const lines = stripAnsi(stderr)
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '');
      return lines.length === 0 ? '' : `; its last output: ${lines.slice(-3).join(' | ').slice(0, 600)}`;
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      finish({
        ...(probing === undefined ? {} : { crashedOn: probing }),
        why: `the probe did not finish within ${options.timeoutMs ?? 60_000} ms (a hung driver?)${tail()}`,
      });
    }, options.timeoutMs ?? 60_000);
    child.on('message', (msg: ProbeMessage) => {
      if (msg.type === 'probing') probing = msg.backend;
      else if (msg.type === 'report') finish({ report: msg.report, why: '' });
      else finish({ why: `backend detection failed: ${msg.message}` });
    });
    child.on('error', (err) => finish({ why: `could not start the probe process: ${err.message}` }));
    child.on('exit', (code, signal) => {
      finish({
        ...(probing === undefined ? {} : { crashedOn: probing }),
        why: `the probe process ${signal !== null ? `was killed by ${signal}` : `exited with code ${code}`}${tail()}`,
      });
    });
  });
}

/**
 * detectBackends in a child process, surviving providers that crash or hang it.
 * The result has the same shape; a backend that took the process down is
 * reported unusable with what the process last printed.
 */
export async function detectBackendsInChildProcess(options: ChildDetectOptions = {}): Promise<BackendReport[]> {
  const done: BackendReport[] = [];
  // Each crash removes one backend, so this ends; the bound guards against a process that dies before probing anything.
  for (let attempt = 0; attempt < 16; attempt += 1) {
    const result = await runOnce(
      done.map((r) => r.name),
      options,
    );
    if (result.report !== undefined) return [...done, ...result.report];
    if (result.crashedOn === undefined) throw new Error(result.why);
    const name = result.crashedOn;
    const report: BackendReport = {
      name,
      provider: providerName(name),
      inBinding: true,
      bundled: false,
      usable: false,
      reason: result.why,
    };
    const hint = setupHint(name);
    if (hint !== undefined) report.hint = hint;
    done.push(report);
  }
  throw new Error('backend detection kept crashing the probe process');
}
