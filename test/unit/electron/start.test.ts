import { existsSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  downloadElectron,
  electronPlatformPath,
  headlessArgs,
  lacksDisplay,
  locateElectron,
  missingElectronMessage,
  noDisplayMessage,
  servedUrl,
  serveFlagValue,
  splitServeArgs,
  staleReason,
} from '../../../src/cli/start';

const dir = '/repo/node_modules/electron';

function fs(files: Record<string, string>) {
  return {
    exists: (p: string) => p in files,
    readText: (p: string) => files[p] ?? null,
  };
}

describe('finding the Electron binary without downloading it', () => {
  it('uses path.txt and dist/ like the electron package does', () => {
    const files = fs({
      [`${dir}/package.json`]: '{}',
      [`${dir}/path.txt`]: 'electron',
      [`${dir}/dist/electron`]: '',
    });
    expect(locateElectron({ electronDir: dir, env: {}, platform: 'linux', ...files })).toEqual({
      found: true,
      path: `${dir}/dist/electron`,
    });
  });

  it('reports a package installed without its binary (the offline case)', () => {
    const r = locateElectron({
      electronDir: dir,
      env: {},
      platform: 'linux',
      ...fs({ [`${dir}/package.json`]: '{}' }),
    });
    expect(r.found).toBe(false);
    if (r.found) return;
    expect(r.expected).toBe(`${dir}/dist/electron`);
    expect(r.reason).toMatch(/without its binary/);
  });

  it('honours ELECTRON_OVERRIDE_DIST_PATH, and says when it points nowhere', () => {
    const base = { [`${dir}/package.json`]: '{}' };
    const env = { ELECTRON_OVERRIDE_DIST_PATH: '/opt/electron' };
    expect(
      locateElectron({ electronDir: dir, env, platform: 'linux', ...fs({ ...base, '/opt/electron/electron': '' }) }),
    ).toEqual({
      found: true,
      path: '/opt/electron/electron',
    });
    const missing = locateElectron({ electronDir: dir, env, platform: 'linux', ...fs(base) });
    expect(missing.found ? '' : missing.reason).toMatch(/ELECTRON_OVERRIDE_DIST_PATH/);
  });

  it('reports a missing electron package', () => {
    const r = locateElectron({ electronDir: dir, env: {}, platform: 'linux', ...fs({}) });
    expect(r.found ? '' : r.reason).toMatch(/not installed/);
  });

  it('knows each platform executable', () => {
    expect(electronPlatformPath('linux')).toBe('electron');
    expect(electronPlatformPath('win32')).toBe('electron.exe');
    expect(electronPlatformPath('darwin')).toBe('Electron.app/Contents/MacOS/Electron');
    expect(electronPlatformPath('aix')).toBeNull();
  });
});

describe("npm start fetches Electron's binary itself (npm install does not: the package downloads it on first use)", () => {
  /** An electron package folder whose installer (install.js) is `script`. */
  function electronPackage(script: string): string {
    const d = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-electron-pkg-'));
    writeFileSync(path.join(d, 'package.json'), '{"name":"electron","version":"45.5.0"}');
    writeFileSync(path.join(d, 'install.js'), script);
    return d;
  }
  const env = { PATH: process.env.PATH };

  it("runs the package's installer; once it put the binary in place, the window can open", () => {
    const d = electronPackage(
      "const fs = require('fs'); fs.mkdirSync('dist'); fs.writeFileSync('dist/electron', ''); fs.writeFileSync('path.txt', 'electron');",
    );
    expect(locateElectron({ electronDir: d, env, platform: 'linux' }).found).toBe(false);
    expect(downloadElectron(d, env)).toBeNull();
    expect(locateElectron({ electronDir: d, env, platform: 'linux' })).toEqual({
      found: true,
      path: path.join(d, 'dist/electron'),
    });
  });

  it("says why a download failed, from the first line of the installer's stack trace, and what to check", () => {
    const d = electronPackage(
      "console.error('TypeError: fetch failed\\n    at somewhere (x.js:1:1)'); process.exit(1);",
    );
    const said = downloadElectron(d, env);
    expect(said).toBe(
      "The download of Electron's binary failed (TypeError: fetch failed): offline, or a proxy or firewall blocks it?",
    );
    expect(missingElectronMessage({ expected: d, reason: 'no binary' }, '45.5.0', said ?? '')).toContain(
      `${said} To get it, run \`node node_modules/electron/install.js\``,
    );
  });

  it("keeps the cause of a failed fetch, which the installer's stack leaves out, and says to run it here", () => {
    // A real fetch refused (a port just closed), printed as install.js prints it: err.stack alone.
    const d = electronPackage(
      "const s = require('net').createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); " +
        "s.close(() => fetch('http://127.0.0.1:' + port + '/electron.zip').catch((err) => { console.error(err.stack); process.exit(1); })); });",
    );
    const said = downloadElectron(d, env);
    expect(said).toMatch(
      /^The download of Electron's binary failed \(TypeError: fetch failed: connect ECONNREFUSED 127\.0\.0\.1:\d+\)/,
    );
    // An error printed whole (util.inspect) names its cause on a line of its own: that is kept too.
    const inspected = electronPackage(
      "console.error('TypeError: fetch failed\\n    at x (y.js:1:1) {\\n  [cause]: Error: unable to get local issuer certificate\\n}'); process.exit(1);",
    );
    expect(downloadElectron(inspected, env)).toBe(
      "The download of Electron's binary failed (TypeError: fetch failed; cause: Error: unable to get local issuer certificate): offline, or a proxy or firewall blocks it?",
    );
    const text = missingElectronMessage({ expected: d, reason: 'no binary' }, '45.5.0', said ?? '');
    expect(text).toContain('here once this machine can reach the internet');
    expect(text).not.toContain('on a machine with internet access');
    expect(text).toContain('ELECTRON_GET_USE_PROXY=1');
    expect(text).toContain('ELECTRON_MIRROR');
  });

  it('gives up on a download that does not end in time', () => {
    const d = electronPackage('setTimeout(() => {}, 60_000);');
    expect(downloadElectron(d, env, 500)).toBe(
      "The download of Electron's binary failed: it was still running after 1 s.",
    );
  });

  it('downloads nothing where ELECTRON_SKIP_BINARY_DOWNLOAD is set, and says so', () => {
    const d = electronPackage("require('fs').writeFileSync('ran', '');");
    expect(downloadElectron(d, { ...env, ELECTRON_SKIP_BINARY_DOWNLOAD: '1' })).toContain(
      'ELECTRON_SKIP_BINARY_DOWNLOAD is set',
    );
    expect(existsSync(path.join(d, 'ran'))).toBe(false);
    expect(downloadElectron(d, { ...env, ELECTRON_SKIP_BINARY_DOWNLOAD: '0' })).toBeNull();
    expect(existsSync(path.join(d, 'ran'))).toBe(true);
  });
});

describe('the messages', () => {
  it('explains a missing binary in one paragraph: what happened and how to get it', () => {
    const text = missingElectronMessage(
      {
        expected: '/x/dist/electron',
        reason: 'the electron package is installed without its binary (no /x/dist/electron)',
      },
      '45.5.0',
    );
    expect(text.trimEnd().split('\n')).toHaveLength(1);
    expect(text).toContain('node node_modules/electron/install.js');
    expect(text).toContain('ELECTRON_OVERRIDE_DIST_PATH');
    expect(text).toContain('Electron 45.5.0');
    expect(text).toContain('/x/dist/electron');
    expect(text).toMatch(/headless UI/);
  });

  it('explains a missing display in one paragraph, without parentheses in parentheses or a window nobody sees', () => {
    expect(noDisplayMessage().trimEnd().split('\n')).toHaveLength(1);
    // xvfb-run opens the window on a screen nobody sees: it is for tests, not for using kvdesk.
    expect(noDisplayMessage()).not.toContain('xvfb-run');
    expect(noDisplayMessage()).toContain('in a desktop session');
  });

  it('says a missing display and a missing binary together, and how to get each', () => {
    const missing = { reason: 'the electron package is installed without its binary (no /x/dist/electron)' };
    const packaged = noDisplayMessage({ ...missing, version: '45.5.0', downloadable: true });
    expect(packaged.trimEnd().split('\n')).toHaveLength(1);
    expect(packaged).toContain('neither DISPLAY nor WAYLAND_DISPLAY is set');
    expect(packaged).toContain(`Electron's binary is missing too: ${missing.reason}.`);
    expect(packaged).not.toMatch(/\([^)]*\(/);
    expect(packaged).toContain('node node_modules/electron/install.js');
    expect(packaged).not.toContain('xvfb-run');
    expect(packaged).not.toContain('fails offline');
    const overridden = noDisplayMessage({ ...missing, version: '45.5.0', downloadable: false });
    expect(overridden).toContain('ELECTRON_OVERRIDE_DIST_PATH to a folder holding an Electron 45.5.0 build');
  });

  it('detects a Linux session without a display', () => {
    expect(lacksDisplay('linux', {})).toBe(true);
    expect(lacksDisplay('linux', { DISPLAY: ':0' })).toBe(false);
    expect(lacksDisplay('linux', { WAYLAND_DISPLAY: 'wayland-0' })).toBe(false);
    expect(lacksDisplay('darwin', {})).toBe(false);
  });

  it("finds the URL in kvdesk serve's announcement", () => {
    expect(servedUrl('kvdesk serving http://127.0.0.1:4321')).toBe('http://127.0.0.1:4321');
    expect(servedUrl('kvdesk serving http://127.0.0.1:4321/?token=abc (Ctrl+C stops)')).toBe(
      'http://127.0.0.1:4321/?token=abc',
    );
    expect(servedUrl('loading model…')).toBeNull();
  });
});

describe('build staleness', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-stale-'));
  const out = path.join(tmp, 'out.js');
  const src = path.join(tmp, 'src.ts');

  it('builds when an output is missing', () => {
    writeFileSync(src, 'x');
    expect(staleReason([out], [src])).toMatch(/missing/);
  });

  it('builds when a source is newer than the oldest output, not otherwise', () => {
    writeFileSync(out, 'y');
    utimesSync(src, new Date(1_000_000), new Date(1_000_000));
    utimesSync(out, new Date(2_000_000), new Date(2_000_000));
    expect(staleReason([out], [src])).toBeNull();
    utimesSync(src, new Date(3_000_000), new Date(3_000_000));
    expect(staleReason([out], [src])).toMatch(/changed/);
  });

  it('walks folders for the newest input', () => {
    utimesSync(src, new Date(1_000_000), new Date(1_000_000));
    utimesSync(out, new Date(2_000_000), new Date(2_000_000));
    expect(staleReason([out], [tmp])).toBeNull(); // out itself is in tmp but not newer than itself
    writeFileSync(path.join(tmp, 'late.ts'), 'z');
    expect(staleReason([out], [tmp])).toMatch(/changed/);
  });
});

describe("npm start's headless UI takes kvdesk serve's flags", () => {
  it("splits the arguments after -- into serve's flags, with their values, and the window's", () => {
    expect(
      splitServeArgs([
        '--no-sandbox',
        '--port',
        '9011',
        '--data-dir=/d',
        '--enable-logging',
        '--trust-installed',
        '--model',
        'a',
      ]),
    ).toEqual({
      serve: ['--port', '9011', '--data-dir=/d', '--trust-installed', '--model', 'a'],
      other: ['--no-sandbox', '--enable-logging'],
    });
    // A flag of serve's is not taken as another's value (serve then says the value is missing).
    expect(splitServeArgs(['--host', '--port', '1'])).toEqual({ serve: ['--host', '--port', '1'], other: [] });
    expect(serveFlagValue(['--port', '1', '--host=::1', '--port=2'], 'port')).toBe('2');
    expect(serveFlagValue(['--port', '1', '--host=::1'], 'host')).toBe('::1');
    expect(serveFlagValue(['--data-dir', '/d'], 'port')).toBeUndefined();
  });

  /** A port another program (this test) listens on while `run` runs. */
  async function whileTaken<T>(run: (port: number) => Promise<T>): Promise<T> {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      return await run((taken.address() as net.AddressInfo).port);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  }

  it('takes a free port, and says so, where the default port is taken and the person chose none', async () => {
    // The default port stands in for 8080 (which other programs of this machine may use).
    const { args, notes, port } = await whileTaken(async (port) => ({
      ...(await headlessArgs(['--data-dir', '/d'], port)),
      port,
    }));
    expect(args).toEqual(['--data-dir', '/d', '--port', '0']);
    expect(notes).toBe(
      `kvdesk: port ${port} is in use (another kvdesk, or another program), so the browser UI takes a free port: its URL is below. To choose the port: \`npm start -- --port N\` (or \`npm run serve -- --port N\`).\n`,
    );
  });

  it('keeps a port the person chose, taken or not (serve says so), and the default where it is free', async () => {
    await whileTaken(async (port) => {
      expect(await headlessArgs([`--port=${port}`], port)).toEqual({ args: [`--port=${port}`], notes: '' });
    });
    const free = await whileTaken(async (port) => port); // closed again: free now
    expect(await headlessArgs(['--no-sandbox', '--threads', '1'], free)).toEqual({
      args: ['--threads', '1'],
      notes: "kvdesk: the browser UI leaves out --no-sandbox: the window's, not `kvdesk serve`'s.\n",
    });
  });
});
