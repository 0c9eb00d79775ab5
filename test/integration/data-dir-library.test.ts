/**
 * The data directory's library file when kvdesk cannot use it (ModelLibrary.open): one that exists but cannot
 * be read is never written over (loads are not remembered until it can be, and the log says what to do); a data
 * directory that is a regular file stops `serve` at start, with a message naming it; a leading `~` in the data
 * directory given, a package path or a flag's file is the home folder; generate and chat never add to the library.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, cp, lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelLibrary } from '../../src/main/host/model-library';
import { loadModelSpec } from '../../src/main/packages';
import { defaultModelDir, repoRoot } from '../helpers/fixtures';
import { rejection } from '../helpers/rejection';

const tmpDirs: string[] = [];
afterAll(async () => {
  await Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function tmp(): Promise<string> {
  const d = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-data-dir-'));
  tmpDirs.push(d);
  return d;
}

describe('a library file that exists but cannot be read', () => {
  // A link to itself cannot be opened (ELOOP) whoever runs the test: the same path as EACCES for a non-root user.
  it('is never written over; the log names it and says what to do', async () => {
    const dataDir = await tmp();
    const file = path.join(dataDir, 'library.json');
    await symlink('library.json', file);
    const log: string[] = [];
    const lib = await ModelLibrary.open(dataDir, { log: (l) => log.push(l), now: () => 4242 });
    expect(lib.list()).toEqual([]);
    expect(log.join('\n')).toContain(file);
    expect(log.join('\n')).toMatch(/access/);

    // A load this session is used, not written over the person's file.
    const own = path.join(await tmp(), 'own');
    await cp(defaultModelDir, own, { recursive: true });
    await lib.loaded(own, await loadModelSpec(own));
    await lib.flush();
    expect(lib.list().map((e) => e.root)).toEqual([own]);
    expect((await lstat(file)).isSymbolicLink()).toBe(true);
    expect(await readdir(dataDir)).toEqual(['library.json']);
  });

  it.skipIf(process.getuid?.() === 0)('without read permission (EACCES): not written over', async () => {
    const dataDir = await tmp();
    const file = path.join(dataDir, 'library.json');
    const text = `${JSON.stringify({ version: 1, packages: [{ root: '/pkgs/a', addedAt: 1, lastLoadedAt: 1 }] })}\n`;
    await writeFile(file, text);
    await chmod(file, 0o200);
    const log: string[] = [];
    const lib = await ModelLibrary.open(dataDir, { log: (l) => log.push(l) });
    expect(log.join('\n')).toContain(file);
    const own = path.join(await tmp(), 'own');
    await cp(defaultModelDir, own, { recursive: true });
    await lib.loaded(own, await loadModelSpec(own));
    await lib.flush();
    await chmod(file, 0o600);
    expect(await readFile(file, 'utf8')).toBe(text);
  });
});

describe('a data directory that is a regular file', () => {
  it('ModelLibrary.open refuses it, naming the path and what to do', async () => {
    const file = path.join(await tmp(), 'not-a-folder');
    await writeFile(file, 'x');
    const err = await rejection(ModelLibrary.open(file));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toContain(file);
    expect(err.message).toMatch(/folder/);
  });

  it('kvdesk serve --data-dir FILE exits at start (code 2) with that message', async () => {
    const file = path.join(await tmp(), 'not-a-folder');
    await writeFile(file, 'x');
    const child = spawn(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), 'serve', '--port', '0', '--data-dir', file],
      {
        cwd: repoRoot,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    // A serve that starts anyway would run until stopped: stop it once it says it serves, and fail.
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
      child.stdout.on('data', () => {
        if (out.includes('kvdesk serving')) child.kill('SIGKILL');
      });
      child.on('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    expect(out).not.toContain('kvdesk serving');
    expect(out).toContain(file);
    expect(code).toBe(2);
  });
});

describe('a data directory this user cannot write', () => {
  // As root, modes stop nobody: the CLI runs as the nobody user (setpriv), as bad-input-cli.test.ts does.
  const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => existsSync(p));
  const root = process.getuid?.() === 0;
  it.skipIf(root && setpriv === undefined)(
    'kvdesk serve refuses it at start (exit 2), naming the folder and EACCES',
    async () => {
      const base = await tmp();
      const home = path.join(base, 'home');
      await mkdir(home, { mode: 0o777 });
      await chmod(home, 0o777);
      await chmod(base, 0o755);
      const as = root
        ? [setpriv as string, '--reuid', '65534', '--regid', '65534', '--clear-groups', 'env', `HOME=${home}`]
        : [];
      for (const [dir, why] of [
        [path.join(base, 'kvd'), `${path.join(base, 'kvd')} could not be made (EACCES)`],
        [base, 'kvdesk cannot write there (EACCES)'],
      ] as const) {
        // A serve that starts anyway runs until stopped: the timeout ends it, and the test fails.
        const r = spawnSync(
          as[0] ?? process.execPath,
          [
            ...as.slice(1),
            ...(root ? [process.execPath] : []),
            path.join(repoRoot, 'bin/kvdesk.cjs'),
            'serve',
            '--port',
            '0',
            '--data-dir',
            dir,
          ],
          { cwd: repoRoot, encoding: 'utf8', timeout: 30_000 },
        );
        expect(r.stdout).not.toContain('kvdesk serving');
        expect(r.stderr).toBe(
          `kvdesk: the data directory ${dir} cannot be used: ${why}. Give a folder kvdesk can write (--data-dir DIR, or $KVDESK_DATA_DIR), or let this user write there\n`,
        );
        expect(r.status).toBe(2);
      }
    },
    90_000,
  );
});

describe('the CLI and a library file that is not JSON', () => {
  it('says on stderr where it was moved (a library id looked up by `inspect` reads it), and answers the command', async () => {
    const dataDir = await tmp();
    await writeFile(path.join(dataDir, 'library.json'), '{"entries": [');
    const child = spawn(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), 'inspect', 'no-such-model', '--data-dir', dataDir],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let err = '';
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.stdout.resume();
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(err).toContain(path.join(dataDir, 'library.json'));
    expect(err).toMatch(/library\.json\.unreadable-/);
    expect((await readdir(dataDir)).some((f) => f.startsWith('library.json.unreadable-'))).toBe(true);
    // The command itself still answers: no such package, in the library or on disk.
    expect(code).toBe(2);
  }, 60_000);
});

describe('a data directory given with a leading ~ (--data-dir=~/kvd, or KVDESK_DATA_DIR quoted)', () => {
  it('is under the home folder, not a folder named ~ in the working directory', async () => {
    const home = await tmp();
    const cwd = await tmp();
    // A library under ~/kvd with one package in it.
    const lib = await ModelLibrary.open(path.join(home, 'kvd'));
    await lib.loaded(defaultModelDir, await loadModelSpec(defaultModelDir));
    await lib.flush();
    const list = (args: string[], dataDirEnv?: string) => {
      const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, USERPROFILE: home };
      delete env.KVDESK_DATA_DIR;
      if (dataDirEnv !== undefined) env.KVDESK_DATA_DIR = dataDirEnv;
      const r = spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), 'list', '--json', ...args], {
        cwd,
        encoding: 'utf8',
        timeout: 60_000,
        env,
      });
      expect(r.status, r.stderr).toBe(0);
      const json = JSON.parse(r.stdout) as { dataDir: string; packages: Array<{ id: string }> };
      return { dataDir: json.dataDir, ids: json.packages.map((p) => p.id) };
    };
    const kvd = { dataDir: path.join(home, 'kvd'), ids: ['default'] };
    expect(list(['--data-dir=~/kvd'])).toEqual(kvd);
    expect(list([], '~/kvd')).toEqual(kvd);
    // `~` alone is the home folder itself: its library is empty.
    expect(list(['--data-dir=~'])).toEqual({ dataDir: home, ids: [] });
    expect(await readdir(cwd)).toEqual([]);
  }, 60_000);
});

describe('an empty data directory (KVDESK_DATA_DIR= , or --data-dir "$DIR" with DIR unset)', () => {
  it('the variable empty is unset (~/.kvdesk), not the working directory; the flag empty is refused naming it', async () => {
    const home = await tmp();
    const cwd = await tmp();
    const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, USERPROFILE: home, KVDESK_DATA_DIR: '' };
    const kvdesk = (...args: string[]) =>
      spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args], {
        cwd,
        encoding: 'utf8',
        timeout: 60_000,
        env,
      });
    const listed = kvdesk('list', '--json');
    expect(listed.status, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as { dataDir: string }).dataDir).toBe(path.join(home, '.kvdesk'));
    for (const args of [
      ['list', '--data-dir', ''],
      ['list', '--data-dir='],
      ['generate', defaultModelDir, '--prompt', 'Hi', '--data-dir', ''],
      ['serve', '--port', '0', '--data-dir', ''],
    ]) {
      // A serve that starts anyway runs until stopped: the timeout ends it, and the test fails.
      const r = kvdesk(...args);
      expect(r.stderr, args.join(' ')).toBe(
        'kvdesk: --data-dir is empty: give a folder, or leave the flag out for $KVDESK_DATA_DIR or ~/.kvdesk\n',
      );
      expect(r.status, args.join(' ')).toBe(2);
    }
    expect(await readdir(cwd)).toEqual([]);
  }, 90_000);
});

describe('a package path or a file flag given with a leading ~ (quoted, where the shell leaves it)', () => {
  it('is under the home folder, as --data-dir is', async () => {
    const home = await tmp();
    const cwd = await tmp();
    await cp(defaultModelDir, path.join(home, 'mymodel'), { recursive: true });
    await writeFile(path.join(home, 'expected.txt'), 'Hello there');
    await writeFile(
      path.join(home, 'mine.jinja'),
      '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}' +
        '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
    );
    const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, USERPROFILE: home };
    const r = spawnSync(
      process.execPath,
      [
        path.join(repoRoot, 'bin/kvdesk.cjs'),
        'generate',
        '~/mymodel',
        '--prompt',
        'Hi',
        '--greedy',
        '--max-new-tokens',
        '2',
        '--prediction-file',
        '~/expected.txt',
        '--chat',
        '--chat-template',
        '~/mine.jinja',
        '--data-dir',
        path.join(home, 'kvd'),
      ],
      { cwd, encoding: 'utf8', timeout: 60_000, env },
    );
    expect(r.status, r.stderr).toBe(0);
    expect(await readdir(cwd)).toEqual([]);
  }, 60_000);
});

describe('generate and chat read the library, and never add to it', () => {
  it('a folder they load is not listed after; list says what adds one', async () => {
    const dataDir = await tmp();
    const run = (args: string[], input?: string) =>
      spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args, '--data-dir', dataDir], {
        cwd: repoRoot,
        encoding: 'utf8',
        timeout: 60_000,
        ...(input !== undefined ? { input } : {}),
      });
    const gen = run(['generate', defaultModelDir, '--prompt', 'Hi', '--greedy', '--max-new-tokens', '2']);
    expect(gen.status, gen.stderr).toBe(0);
    const chat = run(['chat', defaultModelDir, '--greedy', '--max-new-tokens', '2'], 'Hi\n');
    expect(chat.status, chat.stderr).toBe(0);
    const list = run(['list']);
    expect(list.status, list.stderr).toBe(0);
    // Said on stderr: `kvdesk list | cut …` gets no rows, not a sentence.
    expect(list.stdout).toBe('');
    expect(list.stderr).toBe(
      `The library at ${dataDir} is empty: packages join it when kvdesk serve loads them, or when they are uploaded or pulled (generate and chat only read it).\n`,
    );
  }, 60_000);
});

describe('kvdesk list and a library file with an entry it cannot read', () => {
  it('lists the rest, names the entry and why, and leaves the file as it is', async () => {
    const dataDir = await tmp();
    const pkg = path.join(dataDir, 'pkgs', 'kept');
    await cp(defaultModelDir, pkg, { recursive: true });
    const file = path.join(dataDir, 'library.json');
    const text = JSON.stringify({
      version: 1,
      packages: [
        { root: pkg, addedAt: 1, lastLoadedAt: 2 },
        { root: '/somewhere/else', addedAt: 'yesterday', lastLoadedAt: 1 },
      ],
    });
    await writeFile(file, text);
    const child = spawn(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), 'list', '--json', '--data-dir', dataDir],
      {
        cwd: repoRoot,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code).toBe(0);
    expect(
      (JSON.parse(out) as { packages: Array<{ id: string; state: string }> }).packages.map((r) => [r.id, r.state]),
    ).toEqual([['kept', 'ok']]);
    expect(err).toContain('packages.1.addedAt (/somewhere/else)');
    // A command that only reads: the file is as it was, nothing moved or copied.
    expect(await readFile(file, 'utf8')).toBe(text);
    expect((await readdir(dataDir)).sort()).toEqual(['library.json', 'pkgs']);
  }, 60_000);

  it('a library whose only entry cannot be read is not called empty: list says no entry could be read', async () => {
    const dataDir = await tmp();
    const text = JSON.stringify({ version: 1, packages: [{ root: '/somewhere/else', addedAt: 'yesterday' }] });
    await writeFile(path.join(dataDir, 'library.json'), text);
    const list = spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), 'list', '--data-dir', dataDir], {
      cwd: repoRoot,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(list.status, list.stderr).toBe(0);
    expect(list.stderr).toContain('packages.0.addedAt (/somewhere/else)');
    expect(list.stdout).toBe('');
    expect(list.stderr).toContain(
      `The library at ${dataDir} lists no package: no entry of it could be read (the warning above says why).\n`,
    );
  }, 60_000);
});
