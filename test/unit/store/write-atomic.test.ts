/**
 * writeAtomic (src/main/store/write-atomic.ts): a write that fails leaves no temp file behind; the data is flushed to
 * disk before the file appears under its name; a mode is exact whatever the umask.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { open } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { writeAtomic } from '../../../src/main/store/write-atomic';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('writeAtomic', () => {
  it('a failed rename removes its temp file and rejects', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    // A folder that is not empty where the file goes: the rename fails (EISDIR / ENOTEMPTY), the write did not.
    const target = path.join(dir, 'settings.json');
    mkdirSync(target);
    writeFileSync(path.join(target, 'keep'), 'x');
    await expect(writeAtomic(target, '{}')).rejects.toThrow();
    expect(readdirSync(dir)).toEqual(['settings.json']);
  });

  it('writes the file', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    await writeAtomic(path.join(dir, 'a.json'), '{"a":1}');
    expect(readdirSync(dir)).toEqual(['a.json']);
  });

  it('flushes the new content to disk before the file takes its name, and the folder after', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    const file = path.join(dir, 'library.json');
    writeFileSync(file, 'old');
    // FileHandle's prototype, from a handle of our own: the spies see every handle writeAtomic opens.
    const probe = await open(file, 'r');
    const proto = Object.getPrototypeOf(probe) as { datasync: () => Promise<void>; sync: () => Promise<void> };
    await probe.close();
    const seen: string[] = [];
    const datasync = vi.spyOn(proto, 'datasync').mockImplementation(async function (this: unknown) {
      // At the flush the name still holds the old file, and the temp file the whole new content.
      const tmp = readdirSync(dir).filter((n) => n.endsWith('.tmp'));
      seen.push(
        `datasync old=${readFileSync(file, 'utf8')} tmp=${tmp.map((n) => readFileSync(path.join(dir, n), 'utf8'))}`,
      );
    });
    const sync = vi.spyOn(proto, 'sync').mockImplementation(async () => {
      seen.push(`sync file=${readFileSync(file, 'utf8')}`);
    });
    try {
      await writeAtomic(file, 'new');
    } finally {
      datasync.mockRestore();
      sync.mockRestore();
    }
    expect(seen).toEqual(['datasync old=old tmp=new', 'sync file=new']);
    expect(readdirSync(dir)).toEqual(['library.json']);
  });

  it('gives the file exactly the mode asked for, or owner-only, whatever the umask', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    // A umask that takes the owner's write bit too: open()'s mode alone would give 0o400.
    const before = process.umask(0o277);
    try {
      await writeAtomic(path.join(dir, 'api-key'), 'k', { mode: 0o600 });
      process.umask(0);
      await writeAtomic(path.join(dir, 'plain.json'), '{}');
    } finally {
      process.umask(before);
    }
    expect(statSync(path.join(dir, 'api-key')).mode & 0o777).toBe(0o600);
    // A data file is its owner's only, even where the umask would let everyone read it.
    expect(statSync(path.join(dir, 'plain.json')).mode & 0o777).toBe(0o600);
    expect(existsSync(path.join(dir, 'api-key'))).toBe(true);
  });

  it('saves on a file system that refuses chmod (ENOTSUP, EPERM): the file was created with its mode already', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    for (const code of ['ENOTSUP', 'EPERM']) {
      // A chmod that fails as a file system that keeps no modes refuses it (some FUSE mounts).
      const refused = async (file: string) => {
        throw Object.assign(new Error(`${code}: operation not supported, chmod '${file}'`), { code });
      };
      await writeAtomic(path.join(dir, 'library.json'), `{"code":"${code}"}`, { setMode: refused });
      expect(readFileSync(path.join(dir, 'library.json'), 'utf8')).toBe(`{"code":"${code}"}`);
      expect(readdirSync(dir)).toEqual(['library.json']);
    }
  });
});
