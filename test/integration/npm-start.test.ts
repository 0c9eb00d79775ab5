/**
 * `npm start` and `npm run serve` as a person runs them, the real npm and its script shell: the serve flags given
 * after `--` reach the headless UI `npm start` runs where the window cannot open, and `kill <npm pid>` stops every
 * process under npm. npm passes the SIGTERM to its script's shell alone, and dash (sh on Debian and Ubuntu) dies by it
 * without passing it on: the kvdesk wrapper was left adopted by init, with the server on its port and the engine.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { repoRoot } from '../helpers/fixtures';

const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' });
// The shell the bug needs (a shell that execs its one command, as bash does, passes the signal on by being gone).
const dash = ['/bin/dash', '/usr/bin/dash'].find((p) => existsSync(p));

/** A port free now (never 8080, which other programs of this machine may use). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

/** What runs in the group now (Linux; for a failure's message). */
function groupList(pgid: number): string {
  if (process.platform !== 'linux') return '';
  const rows: string[] = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // After "pid (name) ": state ppid pgrp
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) !== pgid) continue;
      rows.push(`${pid} ${readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ')}`);
    } catch {
      // Gone meanwhile.
    }
  }
  return rows.join('\n');
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** A temporary folder, removed after the test. */
async function tmp(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Starts `command args` in a process group of its own (killed after the test) and collects its output. */
function startGroup(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; output: () => string } {
  const child = spawn(command, args, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'], detached: true, env });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => {
    output += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    output += d.toString();
  });
  const pgid = child.pid as number;
  cleanups.push(async () => {
    if (groupAlive(pgid)) process.kill(-pgid, 'SIGKILL');
  });
  return { child, output: () => output };
}

/** The URL the server announces; fails when the group's leader exits first or none comes in 90 s. */
async function servedAt(child: ChildProcess, output: () => string): Promise<string> {
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  await vi.waitFor(
    () => {
      if (exited) throw new Error(`exited before serving:\n${output()}`);
      expect(output()).toMatch(/kvdesk serving http/);
    },
    { timeout: 90_000, interval: 100 },
  );
  return (/kvdesk serving (http:\/\/\S+)/.exec(output()) as RegExpExecArray)[1] as string;
}

/** Every process of the group gone, and the port with them, within 15 s. */
async function allGone(pgid: number, url: string, output: () => string): Promise<void> {
  await vi.waitFor(
    () => {
      if (groupAlive(pgid))
        throw new Error(`processes of group ${pgid} still running:\n${groupList(pgid)}\n${output()}`);
    },
    { timeout: 15_000, interval: 100 },
  );
  await expect(fetch(`${url}/health`)).rejects.toThrow();
}

/** The environment of a person's terminal: no npm script's variables (vitest itself may run under one). */
function plainEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (!/^npm_/i.test(name)) env[name] = value;
  return { ...env, ...(dash ? { npm_config_script_shell: dash } : {}), ...extra };
}

/** serve's flags for a quick server of this test's own: its port, data directory and UI. */
async function serveFlags(port: number): Promise<{ flags: string[]; dataDir: string }> {
  const dataDir = await tmp('kvdesk-npm-data-');
  const ui = await tmp('kvdesk-npm-ui-');
  await writeFile(path.join(ui, 'index.html'), '<!doctype html><p>the test UI</p>\n');
  // --static-dir: nothing to build, the test's own page served.
  return { flags: ['--port', String(port), '--data-dir', dataDir, '--static-dir', ui, '--threads', '1'], dataDir };
}

describe.skipIf(npm.status !== 0 || process.platform === 'win32')(
  'npm start and npm run serve, stopped by a kill of npm',
  () => {
    it('npm start without a window: the serve flags after -- reach the browser UI, and kill <npm pid> ends it all', async () => {
      const port = await freePort();
      const { flags, dataDir } = await serveFlags(port);
      // An Electron build folder without the binary: the window cannot open, on any machine.
      const noElectron = await tmp('kvdesk-npm-electron-');
      const { child, output } = startGroup(
        'npm',
        ['start', '--', '--no-sandbox', ...flags],
        plainEnv({ ELECTRON_OVERRIDE_DIST_PATH: noElectron }),
      );
      const url = await servedAt(child, output);
      expect(url).toBe(`http://127.0.0.1:${port}`);
      expect(output()).toContain('kvdesk: cannot open the desktop window');
      expect(output()).toContain("kvdesk: the browser UI leaves out --no-sandbox: the window's, not `kvdesk serve`'s.");
      expect(await (await fetch(`${url}/`)).text()).toContain('the test UI');
      expect(existsSync(path.join(dataDir, 'library.json'))).toBe(true);
      process.kill(child.pid as number, 'SIGTERM');
      await allGone(child.pid as number, url, output);
    }, 150_000);

    it('npm run serve: kill <npm pid> ends the wrapper, the server and its engine, freeing the port', async () => {
      const port = await freePort();
      const { flags } = await serveFlags(port);
      const { child, output } = startGroup('npm', ['run', 'serve', '--', ...flags], plainEnv());
      const url = await servedAt(child, output);
      expect((await fetch(`${url}/health`)).status).toBe(200);
      process.kill(child.pid as number, 'SIGTERM');
      await allGone(child.pid as number, url, output);
    }, 150_000);
  },
);

describe.skipIf(process.platform !== 'linux')('npm start killed outright (SIGKILL, an OOM kill)', () => {
  it('takes the server it started with it, also where no npm script started it', async () => {
    const port = await freePort();
    const { flags } = await serveFlags(port);
    const { child, output } = startGroup(
      process.execPath,
      [path.join(repoRoot, 'bin/run-ts.cjs'), 'src/cli/start.ts', 'serve', ...flags],
      plainEnv(),
    );
    const wrapper = child.pid as number;
    const url = await servedAt(child, output);
    // start.ts is the wrapper's child; the kvdesk wrapper of serve, its own.
    const [start] = readFileSync(`/proc/${wrapper}/task/${wrapper}/children`, 'utf8').trim().split(/\s+/).map(Number);
    expect(start).toBeGreaterThan(0);
    process.kill(start as number, 'SIGKILL');
    await allGone(wrapper, url, output);
  }, 150_000);
});

describe.skipIf(
  process.platform !== 'linux' ||
    existsSync(path.join(repoRoot, 'node_modules/electron/dist')) ||
    !existsSync(path.join(repoRoot, 'node_modules/electron/install.js')),
)("npm start where Electron's binary was never downloaded", () => {
  it('tries the download itself (npm install does not make it), says why it failed, and serves the browser UI', async () => {
    const port = await freePort();
    const { flags } = await serveFlags(port);
    // A screen to open the window on, and a download that cannot succeed here (a mirror on a closed port, no cache).
    const closed = await freePort();
    const { child, output } = startGroup(
      process.execPath,
      [path.join(repoRoot, 'bin/run-ts.cjs'), 'src/cli/start.ts', ...flags],
      plainEnv({
        DISPLAY: ':99',
        ELECTRON_MIRROR: `http://127.0.0.1:${closed}/`,
        electron_config_cache: await tmp('kvdesk-electron-cache-'),
      }),
    );
    const url = await servedAt(child, output);
    expect(url).toBe(`http://127.0.0.1:${port}`);
    expect(output()).toContain("kvdesk: downloading Electron's binary, once");
    expect(output()).toContain(
      // The fetch's cause too (bin/fetch-cause.cjs), which install.js's stack leaves out.
      `The download of Electron's binary failed (TypeError: fetch failed: connect ECONNREFUSED 127.0.0.1:${closed}): offline, or a proxy or firewall blocks it?`,
    );
    expect(output()).toContain('Until then kvdesk runs its headless UI');
    // Nothing of the failed download was left in the package (the next start tries again).
    expect(existsSync(path.join(repoRoot, 'node_modules/electron/dist'))).toBe(false);
  }, 150_000);

  it('without a screen tries no download, and says both: no display here, and the binary is missing', async () => {
    const port = await freePort();
    const { flags } = await serveFlags(port);
    const { child, output } = startGroup(
      process.execPath,
      [path.join(repoRoot, 'bin/run-ts.cjs'), 'src/cli/start.ts', ...flags],
      plainEnv({ DISPLAY: undefined, WAYLAND_DISPLAY: undefined }),
    );
    await servedAt(child, output);
    expect(output()).not.toContain("kvdesk: downloading Electron's binary");
    expect(output()).not.toContain('fails offline');
    expect(output()).toContain('neither DISPLAY nor WAYLAND_DISPLAY is set');
    expect(output()).toContain(
      "Electron's binary is missing too: the electron package is installed without its binary",
    );
    expect(output()).toContain('kvdesk did not download it, as no window could open here');
    expect(output()).not.toContain('xvfb-run');
    expect(output()).toContain('Until then kvdesk runs its headless UI');
  }, 150_000);
});
