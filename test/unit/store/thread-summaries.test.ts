/**
 * The chat list is made of summaries read from the head of each chat file; a chat's messages (and the files
 * attached to them, which can run to tens of MB) come whole only when it is opened.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ThreadStore } from '../../../src/main/store/thread-store';
import type { Thread } from '../../../src/shared/api';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function store(): { s: ThreadStore; dir: string; threads: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-summaries-'));
  dirs.push(dir);
  return { s: new ThreadStore(dir, { log: () => {} }), dir, threads: path.join(dir, 'threads') };
}

/** A chat with a big attached file (a PDF's text), as a person's would be. */
function bigChat(id: string, mb: number): Thread {
  const text = 'The page cache keeps "recent" pages résumé λ\n'.repeat(Math.ceil((mb * 1_000_000) / 46));
  return {
    id,
    title: 'Read this report',
    createdAt: 1,
    updatedAt: 5,
    pinned: true,
    messages: [
      { id: 'u1', role: 'user', content: 'Summarise it', createdAt: 2, attachments: [{ name: 'report.pdf', text }] },
      { id: 'a1', role: 'assistant', content: 'It is about caches.', createdAt: 3 },
    ],
  };
}

describe('the chat list', () => {
  it("answers each chat's summary, not its messages; opening the chat answers it whole", async () => {
    const { s, threads } = store();
    const big = bigChat('big', 1.9);
    await s.save(big, 'page-a');
    await s.save({ id: 'small', title: 'Hi', createdAt: 1, updatedAt: 9, messages: [] });
    const listed = await s.list();
    expect(listed).toEqual([
      { id: 'small', title: 'Hi', createdAt: 1, updatedAt: 9, revision: 1, bytes: expect.any(Number) },
      {
        id: 'big',
        title: 'Read this report',
        createdAt: 1,
        updatedAt: 5,
        pinned: true,
        revision: 1,
        bytes: statSync(path.join(threads, 'big.json')).size,
      },
    ]);
    // The big chat's text is not in the list's answer.
    expect(JSON.stringify(listed).length).toBeLessThan(1000);
    expect(await new ThreadStore(path.dirname(threads)).get('big')).toEqual({ ...big, revision: 1 });
  });

  it('reads only the head of a chat file: one whose messages are damaged is listed, and opening it says so', async () => {
    const { s, threads } = store();
    await s.save(bigChat('big', 0.2));
    const file = path.join(threads, 'big.json');
    const text = readFileSync(file, 'utf8');
    // Damage the middle of its messages (the list never reads them).
    const at = text.indexOf('"messages"') + 500;
    const damaged = `${text.slice(0, at)}\u0000not json${text.slice(at + 8)}`;
    writeFileSync(file, damaged);
    const fresh = new ThreadStore(path.dirname(threads), { log: () => {} });
    expect((await fresh.list()).map((t) => `${t.id}:${t.title}:${t.revision}`)).toEqual(['big:Read this report:1']);
    await expect(fresh.get('big')).rejects.toThrow(/big\.json is not valid JSON.*it is left as it is/);
    expect(readFileSync(file, 'utf8')).toBe(damaged);
  });

  it('lists a file of an older kvdesk (its revision and saver after its messages) from its head and end', async () => {
    const { dir, threads } = store();
    mkdirSync(threads, { recursive: true });
    const big = bigChat('old1', 0.2);
    const { messages, ...fields } = big;
    // As kvdesk wrote it before its messages came last; a newer kvdesk's field is kept too.
    const file = path.join(threads, 'old1.json');
    writeFileSync(file, JSON.stringify({ folder: 'work', ...fields, messages, revision: 4, savedBy: 'page-]x' }));
    const s = new ThreadStore(dir, { log: () => {} });
    expect(await s.list()).toEqual([{ ...fields, revision: 4, bytes: statSync(file).size }]);
    const opened = await s.get('old1');
    expect(opened).toEqual({ ...big, revision: 4 });
    // Saved by this kvdesk: messages last, the newer kvdesk's field kept.
    await s.save({ ...opened, title: 'Renamed' }, 'page-]x');
    const written = readFileSync(file, 'utf8');
    expect(Object.keys(JSON.parse(written))).toEqual([
      'folder',
      'id',
      'title',
      'createdAt',
      'updatedAt',
      'pinned',
      'revision',
      'savedBy',
      'messages',
    ]);
    expect((await new ThreadStore(dir).list())[0]).toMatchObject({ title: 'Renamed', revision: 5 });
  });

  it('lists an older file whose list field came after its revision and pin (its `]` is not the messages end)', async () => {
    const { dir, threads } = store();
    mkdirSync(threads, { recursive: true });
    const { messages, pinned: _, ...fields } = bigChat('old2', 0.05);
    // An older kvdesk added a field a chat took after its first save at the end: "Always" on a tool.
    const file = path.join(threads, 'old2.json');
    const later = { pinned: true, revision: 3, toolsAllowed: ['files/read_file'], savedBy: 'page-old' };
    writeFileSync(file, JSON.stringify({ ...fields, messages, ...later }));
    const s = new ThreadStore(dir, { log: () => {} });
    const { savedBy: _saver, ...listed } = later;
    expect(await s.list()).toEqual([{ ...fields, ...listed, bytes: statSync(file).size }]);
  });

  it('is searched by kvdesk: a word in an attached file finds the chat, not opened here', async () => {
    const { s } = store();
    await s.save(bigChat('big', 0.2));
    await s.save({
      id: 'other',
      title: 'Other',
      createdAt: 1,
      updatedAt: 2,
      messages: [{ id: 'm', role: 'user', content: 'Nothing about it', createdAt: 1 }],
    });
    expect(await s.search('RÉSUMÉ cache')).toEqual(['big']);
    expect(await s.search('nothing')).toEqual(['other']);
    expect(await s.search('other nothing')).toEqual(['other']);
    expect(await s.search('cache nothing')).toEqual([]);
  });

  // An accent is one code point (é, U+00E9) or a letter and a combining mark (e + U+0301), as the text was typed:
  // either finds the other, in a message, a title or a file.
  it('is searched by kvdesk alike whether an accent was typed composed or decomposed', async () => {
    const { s } = store();
    const chat = (id: string, title: string, content: string): Thread => ({
      id,
      title,
      createdAt: 1,
      updatedAt: 2,
      messages: [{ id: 'm', role: 'user', content, createdAt: 1 }],
    });
    await s.save(chat('decomposed', 'Recipes', 'A cre\u0300me bru\u0302le\u0301e'));
    await s.save(chat('composed', 'Caf\u00e9 notes', 'Nothing else'));
    expect(await s.search('CR\u00c8ME br\u00fbl\u00e9e')).toEqual(['decomposed']);
    expect(await s.search('cafe\u0301')).toEqual(['composed']);
    expect(await s.search('caf\u00e9')).toEqual(['composed']);
  });
});
