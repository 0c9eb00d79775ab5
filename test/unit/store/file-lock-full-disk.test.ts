/**
 * A disk that fills while a lock file is made (made, then its text cannot be written): the half-made lock is
 * removed, and the error says the disk is full. The disk's refusal is made here (a real full disk needs a mount):
 * while `full` names a code, a file handle's write of a lock's text (it names its token) fails with that code.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { withFileLock } from '../../../src/main/store/file-lock';
import { ThreadStore } from '../../../src/main/store/thread-store';

const full = { code: '' };
let dir = '';
let spy: MockInstance | undefined;
beforeEach(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-full-'));
  // FileHandle's prototype, from a handle of our own: the spy sees every handle the lock opens.
  const probe = await open(dir, 'r');
  const proto = Object.getPrototypeOf(probe) as { writeFile: (...args: unknown[]) => Promise<void> };
  await probe.close();
  const real = proto.writeFile;
  spy = vi.spyOn(proto, 'writeFile').mockImplementation(async function (this: unknown, ...args: unknown[]) {
    const data = args[0];
    if (full.code && typeof data === 'string' && data.includes('"token"')) {
      throw Object.assign(new Error(`${full.code}: no space left on device, write`), { code: full.code });
    }
    return real.apply(this, args);
  });
});
afterEach(() => {
  spy?.mockRestore();
  full.code = '';
  rmSync(dir, { recursive: true, force: true });
});

describe('a full disk while a lock file is made', () => {
  it('a delete is refused saying to free space; no half-made lock is left, and the next delete goes at once', async () => {
    const s = new ThreadStore(dir, { log: () => {} });
    await s.save({ id: 't1', title: 'x', createdAt: 1, updatedAt: 2, messages: [] });
    full.code = 'ENOSPC';
    await expect(s.delete('t1')).rejects.toThrow(
      `could not make the lock file ${path.join(dir, 'threads', 't1.json.lock')} for the chat "t1" (ENOSPC): free some space on its disk`,
    );
    expect(readdirSync(path.join(dir, 'threads'))).toEqual(['t1.json']);
    full.code = '';
    const started = Date.now();
    await s.delete('t1');
    expect(Date.now() - started).toBeLessThan(5_000); // not the 30 s a stale lock waits
    expect(readdirSync(path.join(dir, 'threads'))).toEqual([]);
    expect(readdirSync(dir).filter((n) => n.endsWith('.lock'))).toEqual([]);
  });

  it('over quota (EDQUOT) is said as a full disk too', async () => {
    full.code = 'EDQUOT';
    const lock = path.join(dir, 'deleted-threads.json.lock');
    await expect(withFileLock(lock, async () => 'ran', { what: 'the list of deleted chats' })).rejects.toThrow(
      `could not make the lock file ${lock} for the list of deleted chats (EDQUOT): free some space on its disk`,
    );
    expect(existsSync(lock)).toBe(false);
  });
});
