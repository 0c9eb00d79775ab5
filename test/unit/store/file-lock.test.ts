import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { withFileLock } from '../../../src/main/store/file-lock';

let dir = '';
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-lock-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A pid no process has any more: a node process that ran and exited. */
const gonePid = () => Number(execFileSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']));

describe('withFileLock', () => {
  it('lets one holder at a time do its read-then-write: none of 40 increments lost', async () => {
    const lock = path.join(dir, 'n.lock');
    const file = path.join(dir, 'n');
    writeFileSync(file, '0');
    await Promise.all(
      Array.from({ length: 40 }, () =>
        withFileLock(lock, async () => {
          const n = Number(readFileSync(file, 'utf8'));
          await new Promise((r) => setTimeout(r, 1));
          writeFileSync(file, String(n + 1));
        }),
      ),
    );
    expect(readFileSync(file, 'utf8')).toBe('40');
    expect(existsSync(lock)).toBe(false);
  });

  it('takes a lock whose holder is gone (its pid is no process here), or one older than staleMs', async () => {
    const lock = path.join(dir, 'x.lock');
    writeFileSync(lock, JSON.stringify({ pid: gonePid(), host: os.hostname(), at: Date.now(), token: 'old' }));
    expect(await withFileLock(lock, async () => 'ran', { waitMs: 5_000 })).toBe('ran');
    expect(existsSync(lock)).toBe(false);
    // A live process (this one's parent), but an old lock: its holder is taken as stuck.
    writeFileSync(
      lock,
      JSON.stringify({ pid: process.ppid, host: os.hostname(), at: Date.now() - 60_000, token: 't' }),
    );
    expect(await withFileLock(lock, async () => 'ran', { waitMs: 5_000, staleMs: 30_000 })).toBe('ran');
    expect(existsSync(lock)).toBe(false);
  });

  it("a lock whose time is to come (another machine's clock ahead) is aged from when it was met: stale after staleMs", async () => {
    const lock = path.join(dir, 'skew.lock');
    writeFileSync(lock, JSON.stringify({ pid: 5, host: 'nas-peer', at: Date.now() + 600_000, token: 'ahead' }));
    expect(await withFileLock(lock, async () => 'ran', { waitMs: 5_000, staleMs: 300 })).toBe('ran');
    expect(existsSync(lock)).toBe(false);
  });

  it('makes the folder of a lock whose folder is not there yet', async () => {
    const lock = path.join(dir, 'new', 'z.lock');
    expect(await withFileLock(lock, async () => 'ran')).toBe('ran');
    expect(existsSync(path.join(dir, 'new'))).toBe(true);
  });

  it('a lock a live holder keeps past waitMs is an error naming the lock file and what to do; it is left as it is', async () => {
    const lock = path.join(dir, 'y.lock');
    const held = JSON.stringify({ pid: process.ppid, host: os.hostname(), at: Date.now(), token: 'live' });
    writeFileSync(lock, held);
    let ran = false;
    await expect(
      withFileLock(
        lock,
        async () => {
          ran = true;
        },
        { waitMs: 100, what: 'the list of deleted chats' },
      ),
    ).rejects.toThrow(
      `the list of deleted chats is locked by ${lock}, kept by process ${process.ppid} on ${os.hostname()}`,
    );
    expect(ran).toBe(false);
    expect(readFileSync(lock, 'utf8')).toBe(held);
  });

  it('a lock it cannot read (a folder in its place) is an error naming it within seconds, not a wait forever', async () => {
    const lock = path.join(dir, 'deleted-threads.json.lock');
    mkdirSync(path.join(lock, 'inside'), { recursive: true });
    let ran = false;
    const started = Date.now();
    await expect(
      withFileLock(
        lock,
        async () => {
          ran = true;
        },
        { what: 'the list of deleted chats' },
      ),
    ).rejects.toThrow(
      `the list of deleted chats is locked by ${lock}, which kvdesk cannot read (EISDIR): if no kvdesk runs on this data folder, delete it`,
    );
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(ran).toBe(false);
    expect(existsSync(path.join(lock, 'inside'))).toBe(true); // left as it is
  }, 10_000);
});
