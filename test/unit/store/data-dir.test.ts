/**
 * The data folder the window and `kvdesk serve` (the browser UI `npm start` falls back to) both use
 * (src/main/store/data-dir.ts): one folder, so that chats made in one are there in the other; an existing window's
 * folder is kept where ~/.kvdesk holds nothing.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { chooseDataDir, dataDirFlag, electronUserDataDir } from '../../../src/main/store/data-dir';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A home folder and the window's old data folder in it (Electron's userData, as on Linux). */
function home(): { home: string; legacy: string } {
  const h = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-home-'));
  dirs.push(h);
  return { home: h, legacy: path.join(h, '.config', 'kvdesk') };
}

describe('chooseDataDir', () => {
  it('is ~/.kvdesk for the window and serve alike when nothing names another', () => {
    const h = home();
    expect(chooseDataDir({ env: {}, ...h })).toEqual({ dir: path.join(h.home, '.kvdesk') });
    // The window's folder with only Chromium's files (no chats, settings or library) is no reason to stay there.
    mkdirSync(path.join(h.legacy, 'Local Storage'), { recursive: true });
    expect(chooseDataDir({ env: {}, ...h })).toEqual({ dir: path.join(h.home, '.kvdesk') });
  });

  it("keeps the window's old folder where it holds kvdesk data and ~/.kvdesk does not, and says so", () => {
    const h = home();
    mkdirSync(path.join(h.legacy, 'threads'), { recursive: true });
    const choice = chooseDataDir({ env: {}, ...h });
    expect(choice.dir).toBe(h.legacy);
    expect(choice.note).toContain(`using the data folder ${h.legacy}`);
    expect(choice.note).toContain(path.join(h.home, '.kvdesk'));
    // Once ~/.kvdesk has data of its own, that is the folder.
    mkdirSync(path.join(h.home, '.kvdesk'));
    writeFileSync(path.join(h.home, '.kvdesk', 'library.json'), '{"version":1,"packages":[]}');
    expect(chooseDataDir({ env: {}, ...h })).toEqual({ dir: path.join(h.home, '.kvdesk') });
  });

  it("keeps the window's old folder while it holds chats and ~/.kvdesk only a library (a serve run once); both: says so", () => {
    const h = home();
    mkdirSync(path.join(h.legacy, 'threads'), { recursive: true });
    writeFileSync(path.join(h.legacy, 'threads', 't1.json'), '{}');
    writeFileSync(path.join(h.legacy, 'settings.json'), '{}');
    const kvd = path.join(h.home, '.kvdesk');
    mkdirSync(path.join(kvd, 'models'), { recursive: true });
    writeFileSync(path.join(kvd, 'library.json'), '{"version":1,"packages":[]}');
    const choice = chooseDataDir({ env: {}, ...h });
    expect(choice.dir).toBe(h.legacy);
    expect(choice.note).toContain(`using the data folder ${h.legacy}`);
    // Chats in both: ~/.kvdesk, and the other is named.
    mkdirSync(path.join(kvd, 'threads'));
    writeFileSync(path.join(kvd, 'threads', 't2.json'), '{}');
    const both = chooseDataDir({ env: {}, ...h });
    expect(both.dir).toBe(kvd);
    expect(both.note).toContain(`${h.legacy}, where the desktop window kept its chats before, holds 1 chat too`);
  });

  it('--data-dir, then $KVDESK_DATA_DIR (an empty one unset), win over both; an empty --data-dir is refused', () => {
    const h = home();
    mkdirSync(path.join(h.legacy, 'threads'), { recursive: true });
    const env = { KVDESK_DATA_DIR: '/srv/kvd-env' };
    expect(chooseDataDir({ flag: '/srv/kvd', env, ...h })).toEqual({ dir: '/srv/kvd' });
    expect(chooseDataDir({ env, ...h })).toEqual({ dir: '/srv/kvd-env' });
    expect(chooseDataDir({ env: { KVDESK_DATA_DIR: ' ' }, ...h }).dir).toBe(h.legacy);
    expect(chooseDataDir({ flag: '~/kvd', env: {}, ...h }).dir).toBe(path.join(os.homedir(), 'kvd'));
    expect(() => chooseDataDir({ flag: '', env: {}, ...h })).toThrow(/--data-dir is empty/);
  });

  it("Electron's userData folder for kvdesk, per platform", () => {
    expect(electronUserDataDir('linux', {}, '/home/a')).toBe('/home/a/.config/kvdesk');
    expect(electronUserDataDir('linux', { XDG_CONFIG_HOME: '/cfg' }, '/home/a')).toBe('/cfg/kvdesk');
    expect(electronUserDataDir('darwin', {}, '/Users/a')).toBe('/Users/a/Library/Application Support/kvdesk');
  });
});

describe('dataDirFlag (the window reads --data-dir from its arguments)', () => {
  it('takes `--data-dir V` and `--data-dir=V`, the last one; none is undefined; a flag without value is empty', () => {
    expect(dataDirFlag(['/app', '--no-sandbox'])).toBeUndefined();
    expect(dataDirFlag(['/app', '--data-dir', '/a', '--data-dir=/b'])).toBe('/b');
    expect(dataDirFlag(['/app', '--data-dir=/a'])).toBe('/a');
    expect(dataDirFlag(['/app', '--data-dir'])).toBe('');
  });
});
