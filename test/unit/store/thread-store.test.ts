import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DELETED_FILE, DELETED_THREADS_KEPT, ThreadStore } from '../../../src/main/store/thread-store';
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

  it('a delete refused (its note cannot be written) leaves the chat as the store knew it: listed, found, its size known', async () => {
    const { s, dir } = store();
    await s.save({
      ...thread('t5', 'kept'),
      messages: [{ id: 'm1', role: 'user', content: 'hello there', createdAt: 1 }],
    });
    await s.list();
    const bytes = s.bytesOf('t5');
    expect(bytes).toBeGreaterThan(0);
    // A folder where deleted-threads.json goes: the delete is refused, the file stays.
    mkdirSync(path.join(dir, DELETED_FILE));
    writeFileSync(path.join(dir, DELETED_FILE, 'keep'), 'x');
    await expect(s.delete('t5')).rejects.toThrow(path.join(dir, DELETED_FILE));
    expect(s.bytesOf('t5')).toBe(bytes);
    expect((await s.list()).map((t) => t.id)).toEqual(['t5']);
    expect(await s.search('hello')).toEqual(['t5']);
    // Deleted once it can be noted.
    rmSync(path.join(dir, DELETED_FILE), { recursive: true });
    await s.delete('t5');
    expect(s.bytesOf('t5')).toBe(0);
    expect(await s.list()).toEqual([]);
  });

  it('a delete issued after a save stays deleted', async () => {
    const { s } = store();
    await Promise.all([s.save(thread('t2', 'a')), s.delete('t2')]);
    expect(await s.list()).toEqual([]);
    // A save issued after the delete (a page that had not heard of it) does not bring it back.
    const [, late] = await Promise.allSettled([s.delete('t2'), s.save(thread('t2', 'b'))]);
    expect(late).toMatchObject({ status: 'rejected', reason: { code: 'BAD_REQUEST', detail: { reason: 'deleted' } } });
    expect(await s.list()).toEqual([]);
  });

  it('a chat deleted stays deleted across a restart: a late save of an older revision is refused, a new chat saves', async () => {
    const { s, dir } = store();
    expect(await s.save(thread('t7', 'a'), 'page-a')).toBe(1);
    expect(await s.save({ ...thread('t7', 'b'), revision: 1 }, 'page-a')).toBe(2);
    await s.delete('t7');
    // kvdesk restarts; a page that had not heard of the delete (its save waited while kvdesk was away) sends its own.
    const again = new ThreadStore(dir);
    for (const [revision, by] of [
      [1, 'page-b'],
      [2, 'page-a'],
      [undefined, undefined],
    ] as const) {
      await expect(again.save({ ...thread('t7', 'late'), revision }, by)).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: 'the chat "late" was deleted in another window or tab',
        detail: { field: 'id', reason: 'deleted' },
      });
    }
    expect(await again.list()).toEqual([]);
    // A new chat (a fresh id) saves; and one put back by hand (a backup) is its own again.
    expect(await again.save(thread('t8', 'new'), 'page-b')).toBe(1);
    writeFileSync(path.join(dir, 'threads', 't7.json'), JSON.stringify({ ...thread('t7', 'restored'), revision: 2 }));
    expect(await new ThreadStore(dir).save({ ...thread('t7', 'restored'), revision: 2 }, 'page-b')).toBe(3);
  });

  it("two kvdesks on one data folder keep each other's deletes: a stale save through the other is refused", async () => {
    const { s: a, dir } = store();
    const b = new ThreadStore(dir);
    await a.save(thread('ta', 'a chat'), 'page');
    await b.save(thread('tb', 'b chat'), 'page');
    // Both read the list before either deletes (each caches it).
    await a.save(thread('tx', 'x'), 'page');
    await b.save(thread('ty', 'y'), 'page');
    await a.delete('ta');
    await b.delete('tb');
    const kept = JSON.parse(readFileSync(path.join(dir, DELETED_FILE), 'utf8')).deleted as Array<{ id: string }>;
    expect(kept.map((e) => e.id)).toEqual(['ta', 'tb']);
    // A page of B's that had not heard of A's delete saves A's chat: it must not come back.
    await expect(b.save({ ...thread('ta', 'a chat'), revision: 1 }, 'page')).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      detail: { reason: 'deleted' },
    });
    await expect(a.save({ ...thread('tb', 'b chat'), revision: 1 }, 'page')).rejects.toMatchObject({
      detail: { reason: 'deleted' },
    });
    expect(readdirSync(path.join(dir, 'threads')).sort()).toEqual(['tx.json', 'ty.json']);
  });

  it('two kvdesks on one data folder saving one chat from the same revision: one is written, the other is refused', async () => {
    const { s: a, dir } = store();
    const b = new ThreadStore(dir);
    for (let i = 0; i < 10; i++) {
      const id = `race${i}`;
      expect(await a.save(thread(id, 'base'), 'page-a')).toBe(1);
      await b.get(id); // B's page opened it: both hold revision 1
      const results = await Promise.allSettled([
        a.save({ ...thread(id, 'from A'), revision: 1 }, 'page-a2'),
        b.save({ ...thread(id, 'from B'), revision: 1 }, 'page-b'),
      ]);
      const written = results.filter((r) => r.status === 'fulfilled');
      expect(written, `chat ${id}: ${JSON.stringify(results)}`).toHaveLength(1);
      expect(results.find((r) => r.status === 'rejected')).toMatchObject({ reason: { code: 'SAVE_CONFLICT' } });
      const kept = (await new ThreadStore(dir).get(id)).title;
      expect(kept).toBe(results[0].status === 'fulfilled' ? 'from A' : 'from B');
    }
    expect(readdirSync(path.join(dir, 'threads')).filter((n) => !n.endsWith('.json'))).toEqual([]);
  });

  it('keeps the latest deleted chats in the data folder; a list it cannot read is moved aside, naming it', async () => {
    const { s, dir } = store();
    await Promise.all(Array.from({ length: DELETED_THREADS_KEPT + 1 }, (_, i) => s.delete(`d${i}`)));
    const kept = JSON.parse(readFileSync(path.join(dir, DELETED_FILE), 'utf8')).deleted as Array<{ id: string }>;
    expect(kept).toHaveLength(DELETED_THREADS_KEPT);
    expect(kept[0]?.id).toBe('d1');
    expect(await new ThreadStore(dir).save(thread('d0', 'forgotten'))).toBe(1);
    await expect(new ThreadStore(dir).save(thread('d1', 'remembered'))).rejects.toMatchObject({ code: 'BAD_REQUEST' });
    await expect(s.delete('../x')).rejects.toMatchObject({ code: 'BAD_REQUEST' });
    writeFileSync(path.join(dir, DELETED_FILE), '{"deleted": [');
    const log: string[] = [];
    const fresh = new ThreadStore(dir, { log: (l) => log.push(l), now: () => 42 });
    expect(await fresh.save(thread('d2', 'saved'))).toBe(1);
    expect(log).toEqual([
      `kvdesk: the list of deleted chats ${path.join(dir, DELETED_FILE)} is not valid (it should be {"deleted": [{"id", "at"}]}); it was moved to ${path.join(dir, DELETED_FILE)}.unreadable-42, and a new one is started`,
    ]);
    expect(readFileSync(path.join(dir, `${DELETED_FILE}.unreadable-42`), 'utf8')).toBe('{"deleted": [');
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

  it("a list change (update) writes only the chat's name and pin, by a save's revision rules; the messages stay", async () => {
    const { s, dir } = store();
    const message = { id: 'm1', role: 'user' as const, content: 'hello', createdAt: 1 };
    await s.save({ ...thread('t4', 'a'), messages: [message], toolsAllowed: ['fs.read'] }, 'page-a');
    const renamed = await s.update('t4', { title: 'b', pinned: true }, 1, 'page-b');
    expect(renamed.revision).toBe(2);
    const opened = await s.get('t4');
    expect(opened).toMatchObject({ title: 'b', pinned: true, revision: 2, toolsAllowed: ['fs.read'] });
    expect(opened.messages).toEqual([message]);
    // Its messages stay last (the list reads the head), and its summary is the one written.
    expect(readFileSync(path.join(dir, 'threads', 't4.json'), 'utf8')).toMatch(/"messages":\[.*\]\}$/);
    expect((await s.list())[0]).toMatchObject({ title: 'b', pinned: true, revision: 2 });
    expect((await s.update('t4', { pinned: false }, 2, 'page-b')).thread.pinned).toBeUndefined();
    // Made from revision 1 while page B saved revision 3 since: refused, nothing written.
    await expect(s.update('t4', { title: 'c' }, 1, 'page-a')).rejects.toMatchObject({
      code: 'SAVE_CONFLICT',
      detail: { revision: 3, base: 1 },
    });
    expect((await s.get('t4')).title).toBe('b');
    await s.delete('t4');
    await expect(s.update('t4', { pinned: true }, 3, 'page-b')).rejects.toMatchObject({
      detail: { field: 'id', reason: 'deleted' },
    });
    await expect(s.update('t5', { pinned: true }, 0)).rejects.toMatchObject({ detail: { reason: 'gone' } });
    expect(await s.list()).toEqual([]);
  });
});
