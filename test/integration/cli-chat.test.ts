/**
 * `kvdesk chat` as a person (or a script) runs it: the CLI's main() with stdin from a pipe (a real `kvdesk` process
 * where the process itself is under test: a pipe's reply, signals, a terminal, a reader gone), real onnxruntime. A turn's reply is the one `generate --chat` gives the same message; later turns reuse the
 * conversation's KV; a block between `"""` lines is one turn; commands answer on stderr and never end the chat;
 * a conversation longer than the context goes on without its oldest turns (or is refused, and goes on); Ctrl+C
 * stops a reply without ending the chat; a thinking model's reasoning goes to stderr between Ollama's lines, its
 * reply alone to stdout, and /set nothink turns it off.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ChatSession } from '../../src/cli/chat';
import { main } from '../../src/cli/main';
import { RunnerService } from '../../src/main/host/runner-service';
import type { GenerationResult } from '../../src/shared/contract';
import { ALTERNATING_CHATML } from '../helpers/chat-templates';
import { defaultModelDir, repoRoot } from '../helpers/fixtures';
import { holdReplyEnds, noEndBias } from '../helpers/hold-replies';
import {
  naturalThinkingQuestion,
  replyLimitModel,
  slowModel,
  smallContextModel,
  thinkingModel,
} from '../helpers/models';

const BIN = path.join(repoRoot, 'bin/kvdesk.cjs');
const GREEDY = ['--greedy', '--max-new-tokens', '12'];

/** A real `kvdesk` process, its stdin from a pipe that gives `input`: the process around the chat is under test. */
function kvdeskProcess(args: string[], input = ''): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: repoRoot, encoding: 'utf8', input, timeout: 90_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/**
 * `kvdesk ARGS` with `input` piped in, through the CLI's main() in this process (its engine a process of its own, as
 * always): what the chat does with the lines it reads, without two Node processes for each run. What it writes on
 * stdout and stderr, and its exit code. Signals, a terminal and a reader gone run a real process (kvdeskProcess).
 */
async function kvdesk(
  args: string[],
  input: string | Buffer = '',
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io = { out: (s: string) => (stdout += s), err: (s: string) => (stderr += s) };
  const code = await main(args, io, Readable.from([input]));
  return { code, stdout, stderr };
}

/** The figures line of each reply (--verbose): its prompt and reused tokens. */
function figures(stderr: string): Array<{ prompt: number; reused: number }> {
  return [...stderr.matchAll(/prompt (\d+) tokens \((\d+) reused\)/g)].map((m) => ({
    prompt: Number(m[1]),
    reused: Number(m[2]),
  }));
}

describe('kvdesk chat', () => {
  it('answers a line as generate --chat answers the same message', async () => {
    const alone = await kvdesk(['generate', defaultModelDir, '--chat', '--prompt', 'Tell me about rivers.', ...GREEDY]);
    expect(alone.code, alone.stderr).toBe(0);
    // A real process, stdin a pipe: the reply on its stdout is the reply.
    const r = kvdeskProcess(['chat', defaultModelDir, ...GREEDY], 'Tell me about rivers.\n');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(alone.stdout);
    expect(r.stderr).toContain('default (hf-optimum, context 2048 tokens) loaded');
    // Prefill in chunks of 8 tokens: the same reply.
    const chunked = await kvdesk(
      ['chat', defaultModelDir, ...GREEDY, '--prefill-chunk', '8'],
      'Tell me about rivers.\n',
    );
    expect(chunked.code, chunked.stderr).toBe(0);
    expect(chunked.stdout).toBe(alone.stdout);
  }, 60_000);

  it('keeps the conversation and its KV between turns; /clear starts over', async () => {
    const r = await kvdesk(
      ['chat', defaultModelDir, ...GREEDY, '--verbose', '--system', 'You are brief.'],
      'Tell me about rivers.\nAnd lakes?\n/clear\nAnd lakes?\n',
    );
    expect(r.code, r.stderr).toBe(0);
    const [first, second, cleared] = figures(r.stderr);
    expect(first?.reused).toBe(0);
    // The second turn continues the first: its whole prompt is reused.
    expect(second?.reused).toBeGreaterThanOrEqual(first?.prompt ?? Number.POSITIVE_INFINITY);
    expect(second?.prompt).toBeGreaterThan(first?.prompt ?? 0);
    // After /clear the same question is the conversation's first turn again.
    expect(cleared?.reused).toBe(0);
    expect(cleared?.prompt).toBeLessThan(second?.prompt ?? 0);
    expect(r.stderr).toContain('the conversation was cleared');
    const replies = r.stdout.split('\n').filter((l) => l.length > 0);
    expect(replies.length).toBeGreaterThanOrEqual(3);
  }, 60_000);

  it('reads its turns as UTF-8, a BOM dropped, or UTF-16 by its BOM; bytes that are not text end it saying where', async () => {
    const turns = 'Tell me about rivers.\nAnd lakes?\n';
    const args = ['chat', defaultModelDir, ...GREEDY, '--verbose'];
    const plain = await kvdesk(args, turns);
    expect(plain.code, plain.stderr).toBe(0);
    expect(figures(plain.stderr)).toHaveLength(2);
    // PowerShell 5 pipes UTF-16 LE with its BOM: the same turns, not NUL-laced text.
    const wide = await kvdesk(args, Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(turns, 'utf16le')]));
    expect(wide.code, wide.stderr).toBe(0);
    expect(wide.stdout).toBe(plain.stdout);
    expect(figures(wide.stderr)).toEqual(figures(plain.stderr));
    // A UTF-8 BOM is no part of the first turn; a Latin-1 line later ends the chat there, naming its byte.
    const mixed = await kvdesk(
      args,
      Buffer.concat([Buffer.from('\ufeffTell me about rivers.\n'), Buffer.from('And caf\xe9s?\n', 'latin1')]),
    );
    expect(mixed.code).toBe(2);
    expect(figures(mixed.stderr)).toEqual(figures(plain.stderr).slice(0, 1));
    expect(mixed.stderr).toContain('kvdesk: stdin is not UTF-8 text (byte 0xe9 at offset 32): save it as UTF-8\n');
  }, 60_000);

  it('a block is a message even when it starts with a slash, and one the input ends inside is still sent', async () => {
    const r = await kvdesk(
      ['chat', defaultModelDir, ...GREEDY, '--verbose'],
      '"""\n/usr/bin is a folder\n"""\n"""\nunfinished\n',
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toContain('unknown command');
    expect(r.stderr).toContain('the input ended inside a """ block; sending it as it is');
    expect(figures(r.stderr)).toHaveLength(2);
  }, 60_000);

  it('a block between """ lines is one turn of several lines', async () => {
    const alone = await kvdesk([
      'generate',
      defaultModelDir,
      '--chat',
      '--prompt',
      'First line\nsecond line',
      ...GREEDY,
    ]);
    expect(alone.code, alone.stderr).toBe(0);
    const r = await kvdesk(['chat', defaultModelDir, ...GREEDY, '--verbose'], '"""\nFirst line\nsecond line\n"""\n');
    expect(r.code, r.stderr).toBe(0);
    expect(figures(r.stderr)).toHaveLength(1);
    expect(r.stdout).toBe(alone.stdout);
  }, 60_000);

  it('/set parameter top_p 0 is the likeliest token alone, as Ollama and the APIs take it', async () => {
    const greedy = await kvdesk(['chat', defaultModelDir, ...GREEDY], 'Tell me about rivers.\n');
    expect(greedy.code, greedy.stderr).toBe(0);
    // A high temperature that, unbounded, strays from the likeliest tokens; a nucleus of 0 keeps only them.
    const r = await kvdesk(
      ['chat', defaultModelDir, '--temperature', '2', '--seed', '5', '--max-new-tokens', '12'],
      '/set parameter top_p 0\n/show parameters\nTell me about rivers.\n',
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('kvdesk: set top_p to 0 (the likeliest token alone)\n');
    expect(r.stderr).toMatch(/top_p\s+0\n/);
    expect(r.stdout).toBe(greedy.stdout);
  }, 60_000);

  it('commands answer on stderr and the chat goes on; /bye ends it; a piped chat with lines not understood exits 2', async () => {
    const r = await kvdesk(
      ['chat', defaultModelDir, ...GREEDY, '--verbose'],
      [
        '/nonsense',
        '/set parameter warmth 3',
        '/set parameter temprature 0.5',
        '/set parameter max_tokens 8',
        '/set parameter top_k many',
        '/set parameter temperature 20',
        '/set parameter seed 9',
        '/set parameter seed -1',
        '/set parameter top_k -1',
        '/set parameter top_k 5',
        '/set parameter num_predict -1',
        '/set parameter num_predict 4',
        '/set parameter repeat_penalty 1.3',
        '/set parameter repeat_last_n -1',
        '/set parameter repeat_last_n 0',
        '/show parameters',
        '/show info',
        'Hello',
        '/bye',
        'never answered',
        '',
      ].join('\n'),
    );
    // The chat went on past the lines it did not understand; a script still learns of them.
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('unknown command "/nonsense"');
    // A name it does not know is said, with the one meant where it is a typo or another tool's name away.
    expect(r.stderr).toContain(
      'kvdesk: unknown parameter warmth\nkvdesk: /set parameter NAME VALUE, NAME one of temperature',
    );
    expect(r.stderr).toContain('kvdesk: unknown parameter temprature: did you mean temperature?\n');
    expect(r.stderr).toContain('kvdesk: unknown parameter max_tokens: did you mean num_predict?\n');
    expect(r.stderr).toContain('top_k expects a number, got "many"');
    // Read as Ollama's API reads them: out of range refused (and not kept), -1 for the seed is "random" (none).
    expect(r.stderr).toContain('temperature must be in [0, 10], got 20');
    expect(r.stderr).toContain('set seed to its default');
    expect(r.stderr).not.toMatch(/seed\s+9/);
    // The answer says what was kept: top_k -1 is 0, off (as /show parameters would show it).
    expect(r.stderr).toContain('set top_k to 0 (off)');
    expect(r.stderr).toContain('set num_predict to -1\n');
    expect(r.stderr).toContain('set repeat_last_n to -1\n');
    expect(r.stderr).toContain('set repeat_last_n to 0: the repetition penalty is off');
    expect(r.stderr).toMatch(/top_k\s+5/);
    expect(r.stderr).toMatch(/num_predict\s+4/);
    // repeat_last_n 0 turns the penalty off, as in Ollama.
    expect(r.stderr).toMatch(/repeat_penalty\s+1\n/);
    expect(r.stderr).not.toMatch(/repeat_last_n\s+\d/);
    expect(r.stderr).toContain('context   2048 tokens');
    // num_predict applies: at most 4 tokens; and /bye ended the chat before the last line.
    expect(r.stderr).toMatch(/kvdesk: [1-4] tokens, finish/);
    expect(figures(r.stderr)).toHaveLength(1);
  }, 60_000);

  it('a piped line that starts with / but is no command is said, the chat goes on, and it exits 2', async () => {
    const r = await kvdesk(
      ['chat', defaultModelDir, ...GREEDY, '--verbose'],
      '/etc/hosts: what is this file for?\nTell me about rivers.\n',
    );
    expect(r.stderr).toContain(
      'kvdesk: unknown command "/etc/hosts:"; type /? for the commands, or put a message that starts with / between """ lines',
    );
    expect(figures(r.stderr)).toHaveLength(1);
    expect(r.code, r.stderr).toBe(2);
    // Bad /set and /show lines too; good commands alone exit 0.
    for (const line of ['/set', '/set parameter top_k many', '/show everything']) {
      expect((await kvdesk(['chat', defaultModelDir, ...GREEDY], `${line}\n`)).code, line).toBe(2);
    }
    const good = await kvdesk(['chat', defaultModelDir, ...GREEDY], '/set parameter top_k 5\n/show info\n/?\n');
    expect(good.code, good.stderr).toBe(0);
  }, 60_000);

  it('a conversation longer than the context goes on without its oldest turns, or is refused and goes on', async () => {
    const small = smallContextModel();
    const lines = Array.from(
      { length: 8 },
      (_, i) => `Question ${i + 1}: what is the name of the river that runs through town number ${i + 1}?`,
    );
    const input = `${lines.join('\n')}\n`;
    const dropped = await kvdesk(['chat', small, '--greedy', '--max-new-tokens', '16', '--verbose'], input);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(figures(dropped.stderr)).toHaveLength(8);
    expect(dropped.stderr).toMatch(
      /outgrew the model's 256-token context: the model no longer sees its first \d+ messages/,
    );
    expect(dropped.stderr).not.toContain('leaves no room for a reply');

    const refused = await kvdesk(
      ['chat', small, '--greedy', '--max-new-tokens', '16', '--verbose', '--context-overflow', 'refuse'],
      input,
    );
    // The chat went on; a script still learns that turns failed (context overflow: exit 2).
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toContain("leaves no room for a reply in the model's context of 256 tokens");
    expect(refused.stderr).toContain('that message was not added to the conversation');
    expect(figures(refused.stderr).length).toBeLessThan(8);
  }, 90_000);

  it('a --kv-budget over what the memory holds is taken, with its note on stderr', async () => {
    const r = await kvdesk(['chat', defaultModelDir, ...GREEDY, '--kv-budget', '64TiB'], 'Hi\n');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^kvdesk: KV budget note: 64\.0 TiB is more than system RAM holds beside the weights/m);
  }, 60_000);

  it('a reply the context or the KV budget cuts short says so, with what to do', async () => {
    const clipped = await kvdesk(['chat', smallContextModel(), '--greedy', '--max-new-tokens', '1000'], 'Hi\n');
    expect(clipped.code, clipped.stderr).toBe(0);
    expect(clipped.stderr).toMatch(
      /kvdesk: max new tokens clipped from 1000 to \d+ by the context window \(256 tokens\)/,
    );
    const capped = await kvdesk(
      ['chat', defaultModelDir, '--greedy', '--max-new-tokens', '100', '--kv-budget', '40KiB'],
      'Hi\n',
    );
    expect(capped.code, capped.stderr).toBe(0);
    expect(capped.stderr).toMatch(
      /kvdesk: reply capped at \d+ tokens by the KV budget \(asked 100; needs \d+ bytes, 40960 available\): raise --kv-budget, or \/clear to start a shorter conversation/,
    );
    // More than the contract's ceiling: clipped all the same, and the note names the number asked.
    const huge = await kvdesk(['chat', smallContextModel(), '--greedy', '--max-new-tokens', '1e9'], 'Hi\n');
    expect(huge.code, huge.stderr).toBe(0);
    expect(huge.stderr).toMatch(/max new tokens clipped from 1000000000 to \d+ by the context window \(256 tokens\)/);
    // Neither says anything when nothing was cut.
    const whole = await kvdesk(['chat', defaultModelDir, ...GREEDY], 'Hi\n');
    expect(whole.stderr).not.toMatch(/capped at|clipped from/);
  });

  it("a reply the default limit (the package's) stops says so, with how to raise it; a limit set is no news", async () => {
    const model = replyLimitModel(8);
    const r = await kvdesk(
      ['chat', model, '--greedy', '--verbose'],
      'Tell me about rivers.\n/set parameter num_predict 8\nTell me about rivers.\n',
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr.match(/kvdesk: 8 tokens, finish length/g)).toHaveLength(2);
    // Once: the second reply stopped at the limit the chat set.
    expect(r.stderr.match(/stopped at its limit/g)).toHaveLength(1);
    expect(r.stderr).toContain(
      'kvdesk: the reply stopped at its limit of 8 tokens: /set parameter num_predict N for longer ones (-1: as many as the context leaves), or start the chat with --max-new-tokens N\n',
    );
    const flag = await kvdesk(['chat', model, '--greedy', '--max-new-tokens', '8'], 'Tell me about rivers.\n');
    expect(flag.code, flag.stderr).toBe(0);
    expect(flag.stderr).not.toContain('stopped at its limit');
  }, 60_000);

  it('a reply stopped before it began takes its message with it: the next turn is answered where turns must alternate', async () => {
    // A template that refuses two user messages in a row, as Gemma's, Mistral's and Llama 2's do; one running slot,
    // held by a reply that cannot end before it is stopped, so the chat's turn waits in the queue.
    const host = new RunnerService({ intraOpNumThreads: 2, maxRunning: 1 });
    const held = holdReplyEnds(host.engine);
    try {
      const model = await host.loadModel(defaultModelDir, { id: 'alternating', chatTemplate: ALTERNATING_CHATML });
      const blocker = host.generate({
        model: 'alternating',
        messages: [{ role: 'user', content: 'Hold the slot' }],
        maxNewTokens: 1000,
        sampling: { logitBias: noEndBias() },
      });
      await held.tokens();
      let out = '';
      let err = '';
      const io = {
        out: (s: string) => {
          out += s;
        },
        err: (s: string) => {
          err += s;
        },
      };
      const options = {
        sampling: { greedy: true },
        maxNewTokens: 4,
        verbose: false,
        contextOverflow: 'refuse' as const,
      };
      const session = new ChatSession(host, model, options, io);
      // Stopped (Ctrl+C) while it waits in the queue.
      const stopped = session.line('A question stopped before its reply');
      expect(session.stop()).toBe(true);
      await stopped;
      expect(err).toContain('kvdesk: stopped before the reply began: that message was not added to the conversation.');
      expect(out.trim()).toBe('');
      blocker.cancel();
      await blocker.result.catch(() => undefined);
      held.restore();
      await session.line('Another question');
      expect(session.failed, err).toBeNull();
      expect(err).not.toContain('Conversation roles must alternate');
      expect(out.trim().length).toBeGreaterThan(0);
    } finally {
      held.restore();
      await host.close();
    }
  }, 60_000);

  it('Ctrl+C between the turns of a piped chat ends it by SIGINT (as generate): the later turns do not run', async () => {
    // Its own session: no terminal whose foreground it could be in (the wrapper passes this SIGINT on).
    const child = spawn(process.execPath, [BIN, 'chat', defaultModelDir, ...GREEDY, '--verbose'], {
      cwd: repoRoot,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    let stderr = '';
    const answered = new Promise<void>((resolve) => {
      child.stderr.on('data', (d) => {
        stderr += String(d);
        if (figures(stderr).length > 0) resolve();
      });
    });
    child.stdout.resume();
    const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
      child.on('close', (code, signal) => resolve(signal ?? code)),
    );
    // (echo a; sleep 1; echo b; echo c) | kvdesk chat …, and SIGINT while it waits for b.
    child.stdin.write('Tell me about rivers.\n');
    await answered;
    child.kill('SIGINT');
    await new Promise((resolve) => setTimeout(resolve, 500));
    child.stdin.end('And lakes?\n/set parameter num_predict 3\n');
    // Ended by the signal, so that a shell's loop running it stops too (exit 130 said it handled the Ctrl+C).
    expect(await exited, stderr).toBe('SIGINT');
    expect(figures(stderr)).toHaveLength(1);
    expect(stderr).not.toContain('set num_predict');
  }, 90_000);

  it('a reader that goes away (| head) ends the chat: the reply stops, no turn follows, no stack trace, exit 141', async () => {
    const child = spawn(
      process.execPath,
      [BIN, 'chat', slowModel(), '--greedy', '--max-new-tokens', '2000', '--verbose'],
      {
        cwd: repoRoot,
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += String(d);
    });
    child.stdout.once('data', () => child.stdout.destroy());
    child.stdin.end('Tell me a very long story.\n/set parameter num_predict 3\nAnd then?\n');
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    expect(stderr).not.toMatch(/EPIPE|Unhandled|\n\s+at /);
    // Neither the stopped reply nor a later turn has a figures line; the command after it never ran.
    expect(figures(stderr)).toHaveLength(0);
    expect(stderr).not.toContain('set num_predict');
    expect(code, stderr).toBe(141);
  }, 90_000);

  // A terminal: `script` gives the CLI a pseudo-terminal, as a person's shell does. The command is `exec`ed: a shell
  // that stays as its parent (dash, when SHELL is /bin/sh) is in the terminal's foreground group and dies by Ctrl+C.
  const script = spawnSync('script', ['--version'], { encoding: 'utf8' });
  // A test that failed leaves no terminal behind: its chat (or shell) ends with the terminal (SIGHUP).
  const terminals: ChildProcess[] = [];
  afterEach(() => {
    for (const child of terminals.splice(0)) child.kill('SIGKILL');
  });
  /**
   * The shell line `command` in a pseudo-terminal (`script`): what the terminal shows so far (and as text alone), a
   * wait for it to show something, and the exit code.
   */
  const underScript = (command: string) => {
    const child = spawn('script', ['-qec', command, '/dev/null'], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] });
    terminals.push(child);
    let output = '';
    const waiters: Array<{ test: () => boolean; resolve: () => void }> = [];
    child.stdout.on('data', (d) => {
      output += String(d);
      for (const w of waiters.splice(0))
        if (w.test()) w.resolve();
        else waiters.push(w);
    });
    /** What the terminal shows so far as text: the cursor's moves, the line's erasing and carriage returns left out. */
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the terminal's escape sequences are what it drops
    const plain = () => output.replace(/\x1b\[[0-9;?]*[A-Za-z]|\r/g, '');
    // A wait that fails after 30 s saying what the terminal shows, rather than the test's timeout saying nothing.
    const until = (test: () => boolean) =>
      test()
        ? Promise.resolve()
        : new Promise<void>((resolve, reject) => {
            const late = setTimeout(
              () => reject(new Error(`still waiting after 30 s; the terminal shows:\n${plain()}`)),
              30_000,
            );
            waiters.push({
              test,
              resolve: () => {
                clearTimeout(late);
                resolve();
              },
            });
          });
    const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? -1)));
    return { child, output: () => output, plain, until, exited };
  };
  /** `node <args>` in a pseudo-terminal, with `shellTail` after it on its shell line (a redirection). */
  const inTerminal = (args: string[], shellTail = '') =>
    underScript(`exec '${process.execPath}' ${args.map((a) => `'${a}'`).join(' ')}${shellTail}`);
  /** A chat's exit code, a chat still running after `ms` killed (-1): the test says what it did, not a timeout. */
  const endedWithin = async (t: { child: ReturnType<typeof spawn>; exited: Promise<number> }, ms = 20_000) => {
    const hung = setTimeout(() => t.child.kill('SIGKILL'), ms);
    const code = await t.exited;
    clearTimeout(hung);
    return code;
  };
  it.skipIf(script.status !== 0)(
    `in a terminal: prompts, Ctrl+C at the prompt says how to leave, Ctrl+D leaves${script.status !== 0 ? ' (skipped: no `script` command to give it a terminal)' : ''}`,
    async () => {
      const { child, output, until, exited } = inTerminal([BIN, 'chat', defaultModelDir, ...GREEDY]);
      const prompts = () => output().split('>>> ').length - 1;
      await until(() => prompts() >= 1);
      expect(output()).toContain('/? for help, Ctrl+D or /bye to end.');
      child.stdin.write('Tell me about rivers.\r');
      await until(() => prompts() >= 2);
      child.stdin.write('\x03');
      await until(() => output().includes('Use Ctrl + d or /bye to exit.'));
      // A line not understood is said; the person saw it, and the chat still exits 0.
      child.stdin.write('/nonsense\r');
      await until(() => output().includes('unknown command "/nonsense"'));
      child.stdin.write('\x04');
      expect(await exited, output()).toBe(0);
    },
    60_000,
  );

  /**
   * A chat in a terminal writing a long reply (greedy, some 340 tokens on this model: seconds, long enough to press
   * keys in), once it has begun; `ended` is its exit code, a hung chat killed after 20 s (-1).
   */
  const longReply = async () => {
    const t = inTerminal([BIN, 'chat', slowModel(), '--greedy', '--max-new-tokens', '2000', '--verbose']);
    await t.until(() => t.output().includes('>>> '));
    t.child.stdin.write('once upon a time\r');
    const typed = () => t.output().indexOf('once upon a time');
    await t.until(() => typed() >= 0 && t.output().length > typed() + 40);
    return { ...t, ended: () => endedWithin(t) };
  };

  it.skipIf(script.status !== 0)(
    'in a terminal: Ctrl+D while a reply is written ends the chat after that reply, exit 0',
    async () => {
      const { child, output, ended } = await longReply();
      // Still being written: it has no figures line yet.
      expect(figures(output())).toHaveLength(0);
      child.stdin.write('\x04');
      expect(await ended(), output()).toBe(0);
      expect(figures(output())).toHaveLength(1);
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal: Ctrl+C after that Ctrl+D still stops just the reply, exit 0',
    async () => {
      const { child, output, until, ended } = await longReply();
      child.stdin.write('\x04');
      const after = output().length;
      await until(() => output().length > after + 20);
      child.stdin.write('\x03');
      expect(await ended(), output()).toBe(0);
      // Stopped: no figures line, which only a reply that ended by itself prints.
      expect(figures(output())).toHaveLength(0);
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal with stdout in a file: prompts and typing on the terminal, the replies alone in the file',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-chat-out-'));
      const file = path.join(dir, 'out.txt');
      try {
        const { child, output, until, exited } = inTerminal([BIN, 'chat', defaultModelDir, ...GREEDY], ` > '${file}'`);
        const prompts = () => output().split('>>> ').length - 1;
        await until(() => prompts() >= 1);
        child.stdin.write('Tell me about rivers.\r');
        await until(() => prompts() >= 2);
        child.stdin.write('/bye\r');
        expect(await exited, output()).toBe(0);
        expect(output()).toContain('Tell me about rivers.');
        const piped = await kvdesk(['chat', defaultModelDir, ...GREEDY], 'Tell me about rivers.\n');
        expect(readFileSync(file, 'utf8')).toBe(piped.stdout);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal: Ctrl+C drops the line being typed, so what is sent is what the screen shows',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-chat-out-'));
      const file = path.join(dir, 'out.txt');
      try {
        const t = inTerminal([BIN, 'chat', defaultModelDir, ...GREEDY, '--verbose'], ` > '${file}'`);
        const prompts = () => t.output().split('>>> ').length - 1;
        await t.until(() => prompts() >= 1);
        // A command typed, then dropped; a message typed, then dropped.
        t.child.stdin.write('/foo');
        await t.until(() => t.plain().endsWith('/foo'));
        t.child.stdin.write('\x03');
        await t.until(() => prompts() >= 2);
        t.child.stdin.write('never mind');
        await t.until(() => t.plain().endsWith('never mind'));
        t.child.stdin.write('\x03');
        await t.until(() => prompts() >= 3);
        t.child.stdin.write('Tell me about rivers.\r');
        await t.until(() => figures(t.output()).length > 0 || t.output().includes('unknown command'));
        // The line on screen was the whole message: the reply is the one to it alone.
        expect(t.output()).not.toContain('unknown command');
        t.child.stdin.write('/bye\r');
        expect(await endedWithin(t), t.output()).toBe(0);
        const piped = await kvdesk(['chat', defaultModelDir, ...GREEDY], 'Tell me about rivers.\n');
        expect(readFileSync(file, 'utf8')).toBe(piped.stdout);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal: keys typed while a reply is written stay out of it and show at the next prompt, as typed there',
    async () => {
      const t = await longReply();
      const start = t.plain().indexOf('once upon a time');
      t.child.stdin.write('/by');
      await t.until(() => figures(t.output()).length > 0);
      // The reply (up to its figures line) has none of it; the next prompt has it, and goes on with what is typed.
      const reply = t.plain().slice(start, t.plain().indexOf('kvdesk: ', start));
      expect(reply).not.toContain('/by');
      await t.until(() => t.plain().endsWith('>>> /by'));
      t.child.stdin.write('e\r');
      expect(await t.ended(), t.output()).toBe(0);
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal: Ctrl+C stops the reply being written; it stays in the conversation, and the chat goes on',
    async () => {
      // (A chat reading a pipe or a file ends at Ctrl+C instead: cli-signals.test.ts.)
      const t = inTerminal([BIN, 'chat', slowModel(), '--greedy', '--max-new-tokens', '2000', '--verbose']);
      await t.until(() => t.output().includes('>>> '));
      t.child.stdin.write('Tell me a very long story.\r');
      const start = t.plain().length;
      await t.until(() => t.plain().length > start + 60);
      t.child.stdin.write('\x03');
      await t.until(() => t.plain().split('>>> ').length - 1 >= 2);
      t.child.stdin.write('/show info\r');
      await t.until(() => /chat +2 messages/.test(t.plain()));
      t.child.stdin.write('/set parameter num_predict 3\r');
      await t.until(() => t.plain().split('>>> ').length - 1 >= 4);
      t.child.stdin.write('And then?\r');
      await t.until(() => figures(t.output()).length > 0);
      t.child.stdin.write('/bye\r');
      expect(await endedWithin(t), t.output()).toBe(0);
      // One figures line: the stopped reply has none, the next one has.
      expect(figures(t.output())).toHaveLength(1);
      expect(t.plain()).toMatch(/kvdesk: [1-3] tokens, finish/);
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal: Ctrl+C while a reply is written drops what was typed meanwhile with the reply',
    async () => {
      const t = await longReply();
      const prompts = () => t.output().split('>>> ').length - 1;
      t.child.stdin.write('and so');
      const after = t.output().length;
      await t.until(() => t.output().length > after + 20);
      t.child.stdin.write('\x03');
      await t.until(() => prompts() >= 2);
      t.child.stdin.write('/bye\r');
      expect(await t.ended(), t.output()).toBe(0);
      expect(t.plain()).not.toContain('and so');
      expect(t.plain()).toContain('>>> /bye\n');
    },
    60_000,
  );

  it.skipIf(script.status !== 0)(
    'in a terminal: Ctrl+D inside a """ block ends the chat without sending the block, and says so',
    async () => {
      const t = inTerminal([BIN, 'chat', defaultModelDir, ...GREEDY, '--verbose']);
      await t.until(() => t.output().includes('>>> '));
      t.child.stdin.write('"""\r');
      await t.until(() => t.plain().endsWith('... '));
      t.child.stdin.write('half a draft\r');
      await t.until(() => t.plain().endsWith('half a draft\n... '));
      t.child.stdin.write('\x04');
      expect(await endedWithin(t), t.output()).toBe(0);
      expect(t.output()).toContain('kvdesk: the """ block was not sent: the chat ended before its closing """');
      expect(t.output()).not.toContain('sending it as it is');
      expect(figures(t.output())).toHaveLength(0);
    },
    60_000,
  );

  const bash = spawnSync('bash', ['--version'], { encoding: 'utf8' });
  it.skipIf(script.status !== 0 || bash.status !== 0)(
    'in a terminal: Ctrl+Z stops the chat (the `kvdesk` wrapper too) and gives the shell back; fg goes on where it was',
    async () => {
      // A shell with job control, as a person's.
      const t = underScript("export PS1='sh> ' HISTFILE=/dev/null; exec bash --norc --noprofile -i");
      const shellPrompts = () => t.plain().split('\nsh> ').length - 1;
      await t.until(() => t.plain().includes('sh> '));
      t.child.stdin.write(`'${process.execPath}' '${BIN}' chat '${defaultModelDir}' ${GREEDY.join(' ')} --verbose\r`);
      await t.until(() => t.plain().includes('>>> '));
      t.child.stdin.write('Tell me');
      await t.until(() => t.plain().endsWith('>>> Tell me'));
      const before = shellPrompts();
      t.child.stdin.write('\x1a');
      // The shell has the terminal again: the job is stopped, the wrapper with the chat.
      await t.until(() => shellPrompts() > before);
      expect(t.plain()).toMatch(/\[1\]\+ +Stopped/);
      t.child.stdin.write('fg\r');
      // Drawn again with what was typed, and read again.
      await t.until(() => /fg\n.*\n>>> Tell me$/.test(t.plain()));
      t.child.stdin.write(' about rivers.\r');
      await t.until(() => figures(t.output()).length > 0);
      t.child.stdin.write('/bye\r');
      await t.until(() => shellPrompts() > before + 1);
      t.child.stdin.write('echo "chat exit code $?"; exit\r');
      expect(await endedWithin(t), t.output()).toBe(0);
      expect(t.plain()).toContain('chat exit code 0');
    },
    60_000,
  );

  it('bad arguments exit 2 and name them', async () => {
    const none = await kvdesk(['chat']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('chat takes exactly one package path or library id');
    const policy = await kvdesk(['chat', defaultModelDir, '--context-overflow', 'sometimes']);
    expect(policy.code).toBe(2);
    expect(policy.stderr).toContain('--context-overflow expects drop-oldest or refuse, got "sometimes"');
    const missing = await kvdesk(['chat', 'no-such-model', '--data-dir', path.join(repoRoot, 'no-such-dir')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('there is no package folder "no-such-model"');
    // Values out of range are refused before the model loads, naming the flag.
    for (const [flags, text] of [
      [['--top-p', '9'], '--top-p must be between 0 and 1, got 9'],
      [['--max-new-tokens', '0'], '--max-new-tokens must be 1 or more, got 0'],
      [['--seed', '-2'], '--seed must be 0 or more, got -2 (-1: a random seed)'],
      [['--prefill-chunk', '0'], '--prefill-chunk expects a whole number ≥ 1, got "0"'],
    ] as const) {
      const r = await kvdesk(['chat', defaultModelDir, ...flags], 'Hi\n');
      expect(r.code, flags.join(' ')).toBe(2);
      expect(r.stderr).toContain(text);
      expect(r.stderr).not.toContain('loaded in');
    }
  }, 60_000);

  it('a piped chat whose turns were refused goes on, and exits with the refusal’s code', async () => {
    const r = await kvdesk(['chat', defaultModelDir, ...GREEDY, '--kv-budget', '10'], 'Hi\nthere\n');
    expect(r.stderr.match(/KV budget is 10 B/g)).toHaveLength(2);
    expect(r.code).toBe(3);
  }, 60_000);

  it("a thinking model: reasoning on stderr between Ollama's lines, the reply alone on stdout; /set nothink", async () => {
    // A prompt on which the greedy model ends its reasoning by itself within 16 tokens, and its reply there.
    const host = new RunnerService({ intraOpNumThreads: 2 });
    const dir = thinkingModel();
    let found: { question: string; reply: GenerationResult };
    try {
      await host.loadModel(dir, { id: 'thinking' });
      found = await naturalThinkingQuestion(
        (content) =>
          host.generate({
            model: 'thinking',
            messages: [{ role: 'user', content }],
            maxNewTokens: 16,
            sampling: { greedy: true },
          }).result,
      );
    } finally {
      await host.close();
    }
    const r = await kvdesk(
      ['chat', dir, '--greedy', '--max-new-tokens', '16'],
      `${found.question}\n/set nothink\n/show info\n${found.question}\n`,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`Thinking...\n${found.reply.reasoning}\n...done thinking.\n\n`);
    const replies = r.stdout.split('\n');
    expect(replies[0]).toBe(found.reply.text);
    // Turned off, the next reply does not reason (the template closed it), and /show info says so.
    expect(r.stderr.match(/Thinking\.\.\./g)).toHaveLength(1);
    expect(r.stderr).toContain('kvdesk: thinking off');
    expect(r.stderr).toMatch(/thinking {2}off \(its template's enable_thinking\), in <think>…<\/think>/);
    expect(replies[1]?.length).toBeGreaterThan(0);
    // generate --chat: the same reply, its reasoning in the JSON result; --nothink, none.
    const args = [
      'generate',
      dir,
      '--chat',
      '--prompt',
      found.question,
      '--greedy',
      '--max-new-tokens',
      '16',
      '--json',
    ];
    const json = JSON.parse((await kvdesk(args)).stdout) as {
      text: string;
      reasoning?: string;
      reasoningTokens?: number;
    };
    expect(json).toMatchObject({ text: found.reply.text, reasoning: found.reply.reasoning });
    expect(json.reasoningTokens).toBe(found.reply.reasoningTokens);
    expect(JSON.parse((await kvdesk([...args, '--nothink'])).stdout)).toMatchObject({
      reasoning: '',
      reasoningTokens: 0,
    });
    // A budget of 0: the reasoning is closed before it begins, and the reply is the answer.
    expect(JSON.parse((await kvdesk([...args, '--thinking-budget', '0'])).stdout)).toMatchObject({ reasoning: '' });
    // A model that does not think says so and changes nothing.
    const plain = await kvdesk(['chat', defaultModelDir, ...GREEDY], '/set think\n');
    expect(plain.stderr).toContain('default does not think: there is nothing to turn on');
    expect(plain.code).toBe(2);
    const flag = await kvdesk(['chat', defaultModelDir, '--think'], 'hi\n');
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain('--think: default does not think');
    const raw = await kvdesk(['generate', defaultModelDir, '--prompt', 'hi', '--nothink']);
    expect(raw.code).toBe(2);
    expect(raw.stderr).toContain('--think and --nothink go with --chat');
  }, 90_000);
});
