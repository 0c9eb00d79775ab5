/**
 * A data folder is its person's alone (src/main/store/private-data.ts): kvdesk makes its folders 0700 and its data
 * files 0600 whatever the umask, tightens a data folder of its own that an earlier kvdesk left open to other users,
 * and only says so of a folder that holds other things too. POSIX modes: not run on Windows.
 */
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { prepareDataDir } from '../../../src/main/host/model-library';
import { dataFolderId } from '../../../src/main/store/data-id';
import { withFileLock } from '../../../src/main/store/file-lock';
import { tightenDataDir } from '../../../src/main/store/private-data';
import { ThreadStore } from '../../../src/main/store/thread-store';
import { writeAtomic } from '../../../src/main/store/write-atomic';

const mode = (p: string) => statSync(p).mode & 0o777;

let base: string;
let umask: number;
beforeEach(() => {
  // The usual umask, which leaves what it makes readable by everyone.
  umask = process.umask(0o022);
  base = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-private-'));
});
afterEach(() => {
  process.umask(umask);
  rmSync(base, { recursive: true, force: true });
});

describe.skipIf(process.platform === 'win32')('a data folder is yours only', () => {
  it('writeAtomic makes its folders 0700 and its file 0600, and a rewrite closes a file that was open', async () => {
    const file = path.join(base, 'd2', 'threads', 't1.json');
    await writeAtomic(file, '{}');
    expect(mode(path.join(base, 'd2')).toString(8)).toBe('700');
    expect(mode(path.join(base, 'd2', 'threads')).toString(8)).toBe('700');
    expect(mode(file).toString(8)).toBe('600');
    chmodSync(file, 0o644);
    await writeAtomic(file, '{"a":1}');
    expect(mode(file).toString(8)).toBe('600');
    // A mode given is still exact.
    await writeAtomic(path.join(base, 'shared.txt'), 'x', { mode: 0o640 });
    expect(mode(path.join(base, 'shared.txt')).toString(8)).toBe('640');
  });

  it('chats, settings, the deleted list, the folder id and the locks are 0600 in 0700 folders', async () => {
    const dir = path.join(base, 'data', 'here');
    await prepareDataDir(dir);
    expect(mode(path.join(base, 'data')).toString(8)).toBe('700');
    expect(mode(dir).toString(8)).toBe('700');
    const store = new ThreadStore(dir, { log: () => {} });
    await store.save({ id: 't1', title: 'secret', createdAt: 1, updatedAt: 1, messages: [] });
    await store.saveSettings({ theme: 'dark' });
    await store.save({ id: 't2', title: 'gone', createdAt: 1, updatedAt: 1, messages: [] });
    await store.delete('t2');
    expect(await dataFolderId(dir, () => {})).toMatch(/^[0-9a-f-]{36}$/);
    let lockMode = 0;
    await withFileLock(path.join(dir, 'library.json.lock'), async () => {
      lockMode = mode(path.join(dir, 'library.json.lock'));
    });
    expect(lockMode.toString(8)).toBe('600');
    expect(mode(path.join(dir, 'threads')).toString(8)).toBe('700');
    for (const f of ['threads/t1.json', 'settings.json', 'deleted-threads.json', 'kvdesk-id'])
      expect(mode(path.join(dir, f)).toString(8), f).toBe('600');
  });

  it("an earlier kvdesk's open data folder is made yours only at start, and said; model packages keep their modes", async () => {
    const dir = path.join(base, 'old');
    mkdirSync(path.join(dir, 'threads'), { recursive: true, mode: 0o755 });
    mkdirSync(path.join(dir, 'models', 'pkg'), { recursive: true, mode: 0o755 });
    chmodSync(dir, 0o755);
    writeFileSync(path.join(dir, 'threads', 't1.json'), '{}', { mode: 0o644 });
    for (const f of ['settings.json', 'library.json', 'kvdesk-id', 'mcp.json', 'settings.json.unreadable-1'])
      writeFileSync(path.join(dir, f), '{}', { mode: 0o644 });
    writeFileSync(path.join(dir, 'models', 'pkg', 'model.onnx'), 'x', { mode: 0o644 });
    const log: string[] = [];
    await prepareDataDir(dir, (l) => log.push(l));
    expect(mode(dir).toString(8)).toBe('700');
    expect(mode(path.join(dir, 'threads')).toString(8)).toBe('700');
    for (const f of ['settings.json', 'library.json', 'kvdesk-id', 'mcp.json', 'settings.json.unreadable-1'])
      expect(mode(path.join(dir, f)).toString(8), f).toBe('600');
    expect(mode(path.join(dir, 'models')).toString(8)).toBe('755');
    expect(mode(path.join(dir, 'models', 'pkg', 'model.onnx')).toString(8)).toBe('644');
    expect(log).toEqual([
      `kvdesk: the data folder ${dir} could be read by other users of this computer (mode 0755); it holds only kvdesk's data, so it is now yours only (0700), as kvdesk makes it`,
    ]);
    // Once closed, nothing more is said.
    await prepareDataDir(dir, (l) => log.push(l));
    expect(log).toHaveLength(1);
  });

  it('a folder given that holds other things too keeps its mode, said with how to close it; its kvdesk files are closed', async () => {
    const dir = path.join(base, 'documents');
    mkdirSync(path.join(dir, 'threads'), { recursive: true, mode: 0o755 });
    chmodSync(dir, 0o755);
    writeFileSync(path.join(dir, 'notes.txt'), 'mine', { mode: 0o644 });
    writeFileSync(path.join(dir, 'settings.json'), '{}', { mode: 0o644 });
    const log: string[] = [];
    await prepareDataDir(dir, (l) => log.push(l));
    expect(mode(dir).toString(8)).toBe('755');
    expect(mode(path.join(dir, 'notes.txt')).toString(8)).toBe('644');
    expect(mode(path.join(dir, 'threads')).toString(8)).toBe('700');
    expect(mode(path.join(dir, 'settings.json')).toString(8)).toBe('600');
    expect(log).toEqual([
      `kvdesk: the data folder ${dir} can be read by other users of this computer (mode 0755). It holds more than kvdesk's data (notes.txt), so kvdesk leaves its mode as it is; its chats, settings and library in it are yours only. To close the folder too: chmod 700 ${dir}`,
    ]);
  });

  it('an empty folder made for kvdesk is closed without a word; on Windows nothing is changed', async () => {
    const empty = path.join(base, 'empty');
    mkdirSync(empty, { mode: 0o755 });
    const log: string[] = [];
    await prepareDataDir(empty, (l) => log.push(l));
    expect(mode(empty).toString(8)).toBe('700');
    expect(log).toEqual([]);
    const open = path.join(base, 'win');
    mkdirSync(open, { mode: 0o755 });
    writeFileSync(path.join(open, 'settings.json'), '{}', { mode: 0o644 });
    await tightenDataDir(open, (l) => log.push(l), 'win32');
    expect(mode(open).toString(8)).toBe('755');
    expect(mode(path.join(open, 'settings.json')).toString(8)).toBe('644');
    expect(log).toEqual([]);
  });

  it("the desktop window's files (Chromium's: drafts, cookies, caches) and a file manager's are the folder's own: it is closed, they too", async () => {
    const dir = path.join(base, 'dot-kvdesk');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    writeFileSync(path.join(dir, 'settings.json'), '{}', { mode: 0o644 });
    for (const d of ['Local Storage', 'Cache', 'Code Cache', 'GPUCache', 'IndexedDB', 'Session Storage'])
      mkdirSync(path.join(dir, d), { mode: 0o755 });
    for (const f of ['Preferences', 'Local State', 'Cookies', 'Cookies-journal', '.DS_Store', 'Thumbs.db'])
      writeFileSync(path.join(dir, f), 'x', { mode: 0o644 });
    // Chromium's lock is a link (to the host name and its process id): left as it is.
    symlinkSync('box-1234', path.join(dir, 'SingletonLock'));
    const log: string[] = [];
    await prepareDataDir(dir, (l) => log.push(l));
    expect(mode(dir).toString(8)).toBe('700');
    for (const d of ['Local Storage', 'Cache', 'IndexedDB']) expect(mode(path.join(dir, d)).toString(8), d).toBe('700');
    for (const f of ['Preferences', 'Cookies', 'settings.json'])
      expect(mode(path.join(dir, f)).toString(8), f).toBe('600');
    expect(lstatSync(path.join(dir, 'SingletonLock')).isSymbolicLink()).toBe(true);
    expect(log).toEqual([
      `kvdesk: the data folder ${dir} could be read by other users of this computer (mode 0755); it holds only kvdesk's data, so it is now yours only (0700), as kvdesk makes it`,
    ]);
    await prepareDataDir(dir, (l) => log.push(l));
    expect(log).toHaveLength(1);
  });

  it('on a file system that keeps no modes (chmod succeeds, changes nothing) nothing is said, at any start', async () => {
    const only = path.join(base, 'vfat-only');
    const mixed = path.join(base, 'vfat-mixed');
    for (const dir of [only, mixed]) {
      mkdirSync(path.join(dir, 'threads'), { recursive: true, mode: 0o755 });
      chmodSync(dir, 0o755);
      writeFileSync(path.join(dir, 'settings.json'), '{}', { mode: 0o644 });
    }
    writeFileSync(path.join(mixed, 'notes.txt'), 'mine', { mode: 0o644 });
    const log: string[] = [];
    // A chmod that succeeds and changes nothing, as on a file system that keeps no modes (vfat, exFAT, drvfs).
    const keepsNoModes = async () => {};
    for (const dir of [only, mixed, only, mixed]) {
      await tightenDataDir(dir, (l) => log.push(l), process.platform, keepsNoModes);
    }
    expect(mode(only).toString(8)).toBe('755');
    expect(log).toEqual([]);
  });
});
