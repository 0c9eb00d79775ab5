/**
 * `kvdesk` as a shell script uses it: real `kvdesk` processes (the bin/ wrapper and its program) with stdin, stdout
 * and stderr from pipes. What goes to stdout is the data alone, stderr can be quieted, and the exit codes say what
 * happened.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultModelDir, repoRoot } from '../helpers/fixtures';

const BIN = path.join(repoRoot, 'bin/kvdesk.cjs');
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-scripts-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** `kvdesk ARGS` with `input` on stdin: its exit code, stdout and stderr. */
function kvdesk(args: string[], input = '', env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    input,
    timeout: 60_000,
    env: { ...process.env, ...env },
  });
  return { code: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

describe('kvdesk generate in a script', () => {
  it('-q / --quiet leaves out the summary line; the reply is the same, and an error is still said', () => {
    const args = ['generate', defaultModelDir, '--prompt', 'hi', '--max-new-tokens', '3', '--seed', '1'];
    const loud = kvdesk(args);
    expect(loud.code, loud.stderr).toBe(0);
    expect(loud.stderr).toMatch(/kvdesk: 3 tokens, finish length/);
    const quiet = kvdesk([...args, '--quiet']);
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stderr).toBe('');
    expect(quiet.stdout).toBe(loud.stdout);
    const bad = kvdesk([...args.slice(0, -2), '--seed', '-2', '-q']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--seed must be 0 or more, got -2');
  }, 60_000);

  it('a package that is not there is said at once, before the prompt on stdin has ended', async () => {
    // (sleep 20; echo hi) | kvdesk generate no-such-model: stdin stays open until the command has ended, or 20 s.
    const child = spawn(process.execPath, [BIN, 'generate', 'no-such-model', '--data-dir', dataDir], {
      cwd: repoRoot,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += String(d);
    });
    let stdinEnded = false;
    const late = setTimeout(() => {
      stdinEnded = true;
      child.stdin.end('hi\n');
    }, 20_000);
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    clearTimeout(late);
    expect(stdinEnded, 'it waited for stdin to end').toBe(false);
    expect(code, stderr).toBe(2);
    expect(stderr).toContain('no-such-model');
  }, 60_000);

  it('several rows into a pipe whose reader is gone (| head -c 10): no summary, no stack trace, exit 141', async () => {
    const child = spawn(
      process.execPath,
      [BIN, 'generate', defaultModelDir, '--prompt', 'hi', '--rows', '4', '--max-new-tokens', '8', '--seed', '1'],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    // The reader goes before the rows are printed.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += String(d);
    });
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    expect(stderr).toBe('');
    expect(code).toBe(141);
  }, 60_000);

  it('--prompt-ids takes decimal token ids only, naming the item that is not one', () => {
    for (const bad of ['0x10', '1e2', '1.0']) {
      const r = kvdesk(['generate', defaultModelDir, '--prompt-ids', `1,${bad},2`, '--max-new-tokens', '1']);
      expect(r.code, bad).toBe(2);
      expect(r.stderr, bad).toContain(
        `--prompt-ids expects comma-separated token ids (decimal whole numbers, 0 or more): "${bad}" in "1,${bad},2" is not one`,
      );
    }
  }, 60_000);
});
