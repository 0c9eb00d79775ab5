/**
 * The `kvdesk` wrapper (bin/run-child.cjs) runs the program as its child and passes signals on. A terminal's Ctrl+C
 * reaches the whole foreground process group, the child included: the child gets it once, not once from the terminal
 * and again from the wrapper (a copy that came as a chat exited once ended it by the signal, exit 130). Without a
 * terminal, a SIGINT sent to the wrapper alone still reaches the child. A child a signal killed leaves the wrapper
 * killed by the same signal.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/fixtures';

const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-wrapper-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A program that counts the SIGINTs it gets in the half second after the first, says how many, and exits 0. */
const counter = path.join(dir, 'counter.cjs');
writeFileSync(
  counter,
  `let n = 0;
process.on('SIGINT', () => {
  n += 1;
  if (n === 1) setTimeout(() => { process.stdout.write('SIGINTs: ' + n + '\\n'); process.exit(0); }, 500);
});
process.stdout.write('ready\\n');
setInterval(() => {}, 1000);
`,
);
const launcher = `require(${JSON.stringify(path.join(repoRoot, 'bin/run-child.cjs'))}).runNodeChild([${JSON.stringify(counter)}])`;

/** Runs `command` (a child process) until it exits; `poke` is called once it has said "ready". */
function run(child: ReturnType<typeof spawn>, poke: () => void): Promise<{ code: number | null; output: string }> {
  let output = '';
  let poked = false;
  child.stdout?.on('data', (d) => {
    output += String(d);
    if (!poked && output.includes('ready')) {
      poked = true;
      poke();
    }
  });
  const hung = setTimeout(() => child.kill('SIGKILL'), 20_000);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(hung);
      resolve({ code, output });
    }),
  );
}

const script = spawnSync('script', ['--version'], { encoding: 'utf8' });

describe('the kvdesk wrapper passes signals on', () => {
  it.skipIf(script.status !== 0)(
    `in a terminal, Ctrl+C reaches the program once${script.status !== 0 ? ' (skipped: no `script` command to give it a terminal)' : ''}`,
    async () => {
      // `exec`: a shell left as the wrapper's parent (dash, when SHELL is /bin/sh) would die by the Ctrl+C itself.
      const command = `exec '${process.execPath}' -e '${launcher}'`;
      const child = spawn('script', ['-qec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
      const { code, output } = await run(child, () => child.stdin?.write('\x03'));
      expect(output).toContain('SIGINTs: 1\r\n');
      expect(code, output).toBe(0);
    },
    30_000,
  );

  it.skipIf(script.status !== 0)(
    `at a terminal, a SIGINT another program sends to a wrapper whose input is no terminal reaches the program${script.status !== 0 ? ' (skipped: no `script` command to give it a terminal)' : ''}`,
    async () => {
      // A script's background job (no job control: it stays in the terminal's foreground group), stopped by kill -INT
      // as a script, an IDE's task runner or `timeout --foreground` stops it: no terminal typed it.
      const command = `'${process.execPath}' -e '${launcher}' </dev/null & P=$!; sleep 1.5; kill -INT $P; wait $P; echo "rc=$?"`;
      const child = spawn('script', ['-qec', `bash -c '${command.replaceAll("'", "'\\''")}'`, '/dev/null'], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const { output } = await run(child, () => {});
      expect(output).toContain('SIGINTs: 1\r\n');
      expect(output).toContain('rc=0');
    },
    30_000,
  );

  it('without a terminal, a SIGINT sent to the wrapper reaches the program', async () => {
    // Its own session: no terminal whose foreground it could be in (vitest's, run at a terminal).
    const child = spawn(process.execPath, ['-e', launcher], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    const { code, output } = await run(child, () => child.kill('SIGINT'));
    expect(output).toContain('SIGINTs: 1\n');
    expect(code, output).toBe(0);
  }, 30_000);

  it('a program a signal killed: the wrapper ends by the same signal, as its parent (a shell) must see it', () => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      const victim = path.join(dir, `killed-${signal}.cjs`);
      writeFileSync(victim, `process.kill(process.pid, ${JSON.stringify(signal)});\nsetTimeout(() => {}, 5000);\n`);
      const wrapped = `require(${JSON.stringify(path.join(repoRoot, 'bin/run-child.cjs'))}).runNodeChild([${JSON.stringify(victim)}])`;
      const r = spawnSync(process.execPath, ['-e', wrapped], { encoding: 'utf8', timeout: 20_000 });
      // Not exit 128 + N: a shell takes that for a program that handled the signal, and its loop goes on.
      expect({ status: r.status, signal: r.signal }, r.stderr).toEqual({ status: null, signal });
    }
  }, 30_000);
});
