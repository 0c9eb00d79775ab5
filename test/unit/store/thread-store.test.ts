import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ThreadStore } from '../../../src/main/store/thread-store';
import type { Thread } from '../../../src/shared/api';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function store(): { s: ThreadStore; dir: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-store-'));
  dirs.push(dir);
  return { s: new ThreadStore(dir), dir };
}

const thread = (id: string, title: string): Thread => ({
  id,
  title,
  createdAt: 1,
  updatedAt: 2,
  messages: [],
});

describe('ThreadStore', () => {
  it("concurrent saves of one thread (one page's) all succeed and the last one wins", async () => {
    const { s, dir } = store();
    // Same millisecond, same file: these used to share a temp file, and all but one rename failed (ENOENT).
    const revisions = await Promise.all(Array.from({ length: 20 }, (_, i) => s.save(thread('t1', `v${i}`), 'page')));
    expect(revisions).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect((await s.list()).map((t) => t.title)).toEqual(['v19']);
    expect(readdirSync(path.join(dir, 'threads'))).toEqual(['t1.json']);
  });

  it("a page's save written as kvdesk stopped, its answer lost, is still that page's own once kvdesk is back", async () => {
    const { s, dir } = store();
    expect(await s.save(thread('t9', 'a'), 'page-a')).toBe(1);
    // Page A's next save is written, and kvdesk stops before A hears its revision: A still has revision 1.
    expect(await s.save({ ...thread('t9', 'b'), revision: 1 }, 'page-a')).toBe(2);
    const again = new ThreadStore(dir);
    // Another page's save made from revision 1 is refused; A's own (made from 1 too) is taken, as before the restart.
    await expect(again.save({ ...thread('t9', 'c'), revision: 1 }, 'page-b')).rejects.toMatchObject({
      code: 'SAVE_CONFLICT',
    });
    expect(await new ThreadStore(dir).save({ ...thread('t9', 'd'), revision: 1 }, 'page-a')).toBe(3);
    // The last saver is the store's, not the chat's: never listed, and a save without one names none.
    expect(await new ThreadStore(dir).get('t9')).toEqual({ ...thread('t9', 'd'), revision: 3 });
    expect(await new ThreadStore(dir).list()).toEqual([
      { ...thread('t9', 'd'), messages: undefined, revision: 3, bytes: expect.any(Number) },
    ]);
    await s.save({ ...thread('t9', 'e'), revision: 3 });
    expect(JSON.parse(readFileSync(path.join(dir, 'threads', 't9.json'), 'utf8')).savedBy).toBeUndefined();
    await expect(new ThreadStore(dir).save({ ...thread('t9', 'f'), revision: 3 }, 'page-a')).rejects.toMatchObject({
      code: 'SAVE_CONFLICT',
    });
  });

  it('a delete issued after a save stays deleted', async () => {
    const { s } = store();
    await Promise.all([s.save(thread('t2', 'a')), s.delete('t2')]);
    expect(await s.list()).toEqual([]);
    await Promise.all([s.delete('t2'), s.save(thread('t2', 'b'))]);
    expect((await s.list()).map((t) => t.title)).toEqual(['b']);
  });

  it('concurrent settings saves keep the last', async () => {
    const { s } = store();
    await Promise.all(Array.from({ length: 10 }, (_, i) => s.saveSettings({ lastThreadId: `t${i}` })));
    expect(await s.getSettings()).toEqual({ lastThreadId: 't9' });
  });

  it("a chat's tool grants: what was saved, without reading the chat again; a file another process changed is read", async () => {
    const { s, dir } = store();
    const reads = vi.spyOn(s as unknown as { readThread: (file: string) => Promise<unknown> }, 'readThread');
    await s.save({ ...thread('t3', 'a'), toolsAllowed: ['fs.read'] });
    expect(await s.toolGrants('t3')).toEqual(['fs.read']);
    await s.save({ ...thread('t3', 'a'), toolsAllowed: [], revision: 1 });
    expect(await s.toolGrants('t3')).toEqual([]);
    expect(reads).not.toHaveBeenCalled();
    // Another process (the window, a hand) grants one: read, once.
    const file = path.join(dir, 'threads', 't3.json');
    writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), toolsAllowed: ['web.fetch'] }));
    expect(await s.toolGrants('t3')).toEqual(['web.fetch']);
    expect(await s.toolGrants('t3')).toEqual(['web.fetch']);
    expect(reads).toHaveBeenCalledTimes(1);
    // Deleted: none, whatever was known.
    await s.delete('t3');
    expect(await s.toolGrants('t3')).toEqual([]);
  });
});
