/**
 * `kvdesk` in shell scripts, stopped by Ctrl+C: real `kvdesk` processes (the bin/ wrapper and its program), in a
 * pseudo-terminal (`script`) where a terminal's Ctrl+C is under test. A command that Ctrl+C ends ends by SIGINT
 * (not exit 130), so the shell's loop running it stops too; a chat reading its turns from a file or a pipe ends at
 * the first Ctrl+C, saying so, rather than going on with the turns after it.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/fixtures';
import { slowModel } from '../helpers/models';

const BIN = path.join(repoRoot, 'bin/kvdesk.cjs');
const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-signals-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const script = spawnSync('script', ['--version'], { encoding: 'utf8' });
const bash = spawnSync('bash', ['--version'], { encoding: 'utf8' });
const noTerminal = script.status !== 0 ? ' (skipped: no `script` command to give it a terminal)' : '';

const terminals: ChildProcess[] = [];
afterEach(() => {
  for (const child of terminals.splice(0)) child.kill('SIGKILL');
});

/** The shell line `command` in a pseudo-terminal: what it shows (as text), a wait for it, and the exit. */
function inTerminal(command: string) {
  const child = spawn('script', ['-qec', command, '/dev/null'], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] });
  terminals.push(child);
  let output = '';
  const waiters: Array<() => void> = [];
  child.stdout.on('data', (d) => {
    output += String(d);
    for (const w of waiters.splice(0)) w();
  });
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the terminal's escape sequences are what it drops
  const plain = () => output.replace(/\x1b\[[0-9;?]*[A-Za-z]|\r/g, '');
  const until = (test: () => boolean): Promise<void> =>
    new Promise((resolve, reject) => {
      const late = setTimeout(
        () => reject(new Error(`still waiting after 30 s; the terminal shows:\n${plain()}`)),
        30_000,
      );
      const check = () => {
        if (test()) {
          clearTimeout(late);
          resolve();
        } else waiters.push(check);
      };
      check();
    });
  const exited = new Promise<number>((resolve) => {
    const hung = setTimeout(() => child.kill('SIGKILL'), 40_000);
    child.on('exit', (code) => {
      clearTimeout(hung);
      resolve(code ?? -1);
    });
  });
  return { child, plain, until, exited };
}

const q = (s: string) => `'${s}'`;
const kvdesk = `${q(process.execPath)} ${q(BIN)}`;
/** A long reply (the slow model writes tokens for seconds), streamed to the terminal. */
const longGenerate = () =>
  `${kvdesk} generate ${q(slowModel())} --prompt hi --greedy --max-new-tokens 2000 --threads 1`;

describe('Ctrl+C on kvdesk in a shell script', () => {
  it.skipIf(script.status !== 0 || bash.status !== 0)(
    `stops the shell's loop, as it stops a loop of any command it kills${noTerminal}`,
    async () => {
      const t = inTerminal(
        `exec bash -c ${q(`for i in 1 2 3; do echo "start $i"; ${longGenerate().replaceAll("'", '"')}; echo "iter $i rc=$?"; done; echo END`)}`,
      );
      // The reply is being written: Ctrl+C, as typed at the terminal (to its whole foreground group).
      await t.until(() => /start 1\n.{40}/s.test(t.plain()));
      t.child.stdin?.write('\x03');
      await t.exited;
      // bash saw its command die by SIGINT, and ended by it too: no later pass, nothing after the loop.
      expect(t.plain()).not.toContain('iter 1');
      expect(t.plain()).not.toContain('start 2');
      expect(t.plain()).not.toContain('END');
    },
    60_000,
  );

  it.skipIf(script.status !== 0 || bash.status !== 0)(
    `a chat whose turns come from a file ends at the first Ctrl+C, says so, and ends by SIGINT${noTerminal}`,
    async () => {
      const questions = path.join(dir, 'questions.txt');
      writeFileSync(questions, 'Tell me a long story.\nAnd another one.\nAnd a third.\n');
      const chat = `${kvdesk} chat ${q(slowModel())} --greedy --max-new-tokens 2000 --threads 1 < ${q(questions)}`;
      const t = inTerminal(`exec bash -c ${q(`${chat.replaceAll("'", '"')}; echo "chat ended: $?"`)}`);
      await t.until(() => /loaded in [^\n]*\n.{40}/s.test(t.plain()));
      t.child.stdin?.write('\x03');
      await t.exited;
      expect(t.plain()).toContain('kvdesk: interrupted: the chat ends; the rest of its input is not read');
      // One interruption, one message: the Ctrl+C came to the chat once.
      expect(t.plain().split('interrupted').length - 1).toBe(1);
      // The chat ended by SIGINT, so bash did too: it did not go on as after a command that handled the Ctrl+C.
      expect(t.plain()).not.toContain('chat ended');
    },
    60_000,
  );
});

describe('kvdesk chat with its turns from a pipe, SIGINT (kill -INT, no terminal)', () => {
  it('ends the chat, the reply being written too; the later turns do not run; the process ends by SIGINT', async () => {
    // Its own session: no terminal whose foreground it could be in (the wrapper passes this SIGINT on).
    const child = spawn(
      process.execPath,
      [BIN, 'chat', slowModel(), '--greedy', '--max-new-tokens', '2000', '--threads', '1', '--verbose'],
      { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'], detached: true },
    );
    terminals.push(child);
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (d) => {
      stderr += String(d);
    });
    const writing = new Promise<void>((resolve) =>
      child.stdout.on('data', (d) => {
        stdout += String(d);
        if (stdout.length > 20) resolve();
      }),
    );
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('close', (code, signal) => resolve({ code, signal })),
    );
    child.stdin.end('Tell me a long story.\nAnd lakes?\n/set parameter num_predict 3\n');
    await writing;
    child.kill('SIGINT');
    expect(await exited, stderr).toEqual({ code: null, signal: 'SIGINT' });
    expect(stderr).toContain('kvdesk: interrupted: the chat ends; the rest of its input is not read');
    // No reply ran to its end (the first was stopped), and no later turn ran.
    expect(stderr).not.toMatch(/tokens, finish/);
    expect(stderr).not.toContain('set num_predict');
  }, 60_000);
});
