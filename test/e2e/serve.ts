/**
 * Starts a real `kvdesk serve --port 0` (real engine process, real scheduler)
 * for the browser tests and the screenshot script, and stops it again.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const ROOT = path.resolve(__dirname, '../..');

/**
 * Builds only the renderer, from the sources as they are, into out/renderer (what serve hosts; about a second). Its
 * output goes to stderr; throws when the build fails.
 */
export function buildRenderer(logLevel: 'warn' | 'error' = 'warn'): void {
  execFileSync(
    process.execPath,
    [
      path.join(ROOT, 'node_modules/vite/bin/vite.js'),
      'build',
      '--config',
      'src/renderer/vite.config.mts',
      '--logLevel',
      logLevel,
    ],
    { cwd: ROOT, stdio: ['ignore', 2, 'inherit'] },
  );
}

export interface ServeHandle {
  url: string;
  /** The process group of the CLI wrapper, the server and its engine process. */
  pid: number;
  dataDir: string;
  /** Everything the server printed (for failure messages). */
  log(): string;
  stop(): Promise<void>;
}

/** Starts the server in its own process group (the CLI wrapper runs the server as a child) and waits for /health. */
export async function startServe(
  extraArgs: string[] = [],
  timeoutMs = 90_000,
  /** Another TypeScript entry that runs `serve` (test/e2e/serve-devices.ts); default the real CLI. */
  entry?: string,
  /** A data directory to use and keep (a restart's); default a fresh one removed on stop. */
  keptDataDir?: string,
  /** Environment variables to add (a test failpoint's). */
  env: Record<string, string> = {},
): Promise<ServeHandle> {
  const dataDir = keptDataDir ?? mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-'));
  const command = entry ? [path.join(ROOT, 'bin/run-ts.cjs'), entry] : [path.join(ROOT, 'bin/kvdesk.cjs')];
  const child: ChildProcess = spawn(
    process.execPath,
    [...command, 'serve', '--port', '0', '--data-dir', dataDir, ...extraArgs],
    { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } },
  );
  let output = '';
  child.stdout?.on('data', (d) => {
    output += String(d);
  });
  child.stderr?.on('data', (d) => {
    output += String(d);
  });
  const stop = async () => {
    if (child.exitCode === null && child.pid !== undefined) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      try {
        process.kill(-child.pid, 'SIGTERM'); // the wrapper and the server it started
      } catch {
        // already gone
      }
      const timer = setTimeout(() => {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }, 10_000);
      await exited;
      clearTimeout(timer);
    }
    if (!keptDataDir) rmSync(dataDir, { recursive: true, force: true });
  };
  const deadline = Date.now() + timeoutMs;
  let url: string | undefined;
  while (Date.now() < deadline) {
    const m = /kvdesk serving (http:\/\/\S+)/.exec(output);
    if (m?.[1]) {
      url = m[1];
      break;
    }
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (!url) {
    await stop();
    throw new Error(`kvdesk serve did not print its URL within ${timeoutMs} ms:\n${output}`);
  }
  // /health answers 200 once the default model is loaded (with the token, when serve wants one).
  const token = extraArgs.includes('--token') ? extraArgs[extraArgs.indexOf('--token') + 1] : undefined;
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  while (Date.now() < deadline) {
    const ok = await fetch(`${url}/health`, { headers }).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return { url, pid: child.pid as number, dataDir, log: () => output, stop };
    await new Promise((r) => setTimeout(r, 200));
  }
  await stop();
  throw new Error(`kvdesk serve at ${url} never reported healthy:\n${output}`);
}
