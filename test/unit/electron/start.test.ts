import { mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  electronPlatformPath,
  lacksDisplay,
  locateElectron,
  missingElectronMessage,
  noDisplayMessage,
  servedUrl,
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

  it('explains a missing display in one paragraph', () => {
    expect(noDisplayMessage().trimEnd().split('\n')).toHaveLength(1);
    expect(noDisplayMessage()).toContain('xvfb-run');
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
