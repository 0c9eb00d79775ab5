/**
 * Chat files kvdesk cannot use (ThreadStore.list / save): a thread file that does not parse or validate is left
 * as it is and said (log and `problems`, naming the file); a threads folder that cannot be read is an error, not
 * an empty list; fields of a newer kvdesk survive a save from this one.
 */
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ThreadStore } from '../../../src/main/store/thread-store';
import type { Thread } from '../../../src/shared/api';
import { tempStore } from './temp-store';

function store() {
  const made = tempStore('kvdesk-threads-');
  return { ...made, threads: path.join(made.dir, 'threads') };
}

const thread = (id: string, title: string): Thread => ({
  id,
  title,
  createdAt: 1,
  updatedAt: 2,
  messages: [{ id: 'm1', role: 'user', content: 'hello', createdAt: 1 }],
});

describe('a chat that cannot be written', () => {
  it('is an error naming the file and what to do, said in the log once while it keeps failing', async () => {
    const { s, threads, log } = store();
    // A folder (not empty) where the chat's file goes: no write can take its place, whoever runs kvdesk.
    const file = path.join(threads, 't1.json');
    mkdirSync(path.join(file, 'inside'), { recursive: true });
    const attempt = () => s.save(thread('t1', 'My important chat'));
    await expect(attempt()).rejects.toThrow(
      /could not write the chat "My important chat" to .*t1\.json \(E\w+\): move away/,
    );
    await expect(attempt()).rejects.toThrow(file);
    expect(log.filter((l) => l.includes(file) && l.includes('could not write'))).toHaveLength(1);
    expect(readdirSync(threads)).toEqual(['t1.json']); // no temp file left beside it
    // Written once the folder is gone; a failure after that is said again.
    rmSync(file, { recursive: true });
    expect(await attempt()).toBe(1);
    rmSync(file);
    mkdirSync(path.join(file, 'inside'), { recursive: true });
    await expect(s.save({ ...thread('t1', 'My important chat'), revision: 1 })).rejects.toThrow(file);
    expect(log.filter((l) => l.includes(file) && l.includes('could not write'))).toHaveLength(2);
  });

  it.skipIf(process.getuid?.() === 0)('in a folder kvdesk may not write in (EACCES): says to give access', async () => {
    const { s, threads, log } = store();
    await s.save(thread('t1', 'x'));
    chmodSync(threads, 0o500);
    try {
      await expect(s.save({ ...thread('t1', 'y'), revision: 1 })).rejects.toThrow(
        `(EACCES): give your user write access to ${threads}`,
      );
      expect(log.join('\n')).toContain('EACCES');
    } finally {
      chmodSync(threads, 0o700);
    }
  });
});

describe('a thread file that cannot be used', () => {
  it('a truncated one is left as it is, named in the log and in problems; the others list', async () => {
    const { s, threads, log } = store();
    await s.save(thread('t1', 'My important chat'));
    await s.save(thread('t2', 'Second chat'));
    const file = path.join(threads, 't1.json');
    const cut = readFileSync(file, 'utf8').slice(0, 60);
    writeFileSync(file, cut);
    expect((await s.list()).map((t) => t.id)).toEqual(['t2']);
    expect(readFileSync(file, 'utf8')).toBe(cut);
    expect(log.join('\n')).toContain(file);
    expect(s.problems).toHaveLength(1);
    expect(s.problems[0]).toContain(file);
    // Listed again (another page): said once in the log, still one problem.
    await s.list();
    expect(log.filter((l) => l.includes(file))).toHaveLength(1);
    expect(s.problems).toHaveLength(1);
  });

  it("a truncated one is not saved over by a page's old copy: the save is refused, naming the file", async () => {
    const { s, threads, log } = store();
    expect(await s.save(thread('t1', 'Long chat'), 'old-tab')).toBe(1);
    for (let r = 1; r <= 5; r++) await s.save({ ...thread('t1', 'Long chat'), revision: r }, 'new-tab');
    const file = path.join(threads, 't1.json');
    const text = readFileSync(file, 'utf8');
    const cut = text.slice(0, text.length - 30); // its end lost: the turns in it can still be mended
    writeFileSync(file, cut);
    // The old tab still holds revision 1 (also in another kvdesk, which has not read the file since).
    for (const saver of [s, new ThreadStore(path.dirname(threads), { log: (l) => log.push(l) })]) {
      const error = await saver.save({ ...thread('t1', 'Long chat'), revision: 1 }, 'old-tab').catch((e) => e);
      expect(error).toBeInstanceOf(Error);
      expect(error.message).toContain(
        `the chat "Long chat" was not saved over its file: the chat file ${file} is not valid JSON`,
      );
      expect(error.message).toContain('it is left as it is: mend it, or move it out of');
    }
    expect(readFileSync(file, 'utf8')).toBe(cut);
    expect(log.filter((l) => l.includes(file))).toHaveLength(2); // once by each kvdesk
    // Moved out of the way, a save makes the chat anew.
    rmSync(file);
    expect(await s.save({ ...thread('t1', 'Long chat'), revision: 1 }, 'old-tab')).toBe(2);
  });

  it('one with a value of a newer kvdesk names the field', async () => {
    const { s, threads, log } = store();
    const newer = { ...thread('t1', 'x'), messages: [{ id: 'm1', role: 'developer', content: 'hi', createdAt: 1 }] };
    mkdirSync(threads, { recursive: true });
    const file = path.join(threads, 't1.json');
    writeFileSync(file, JSON.stringify(newer));
    // The list reads the chat's head, which is valid; opening it says what is wrong, and nothing writes over it.
    expect((await s.list()).map((t) => t.id)).toEqual(['t1']);
    await expect(s.get('t1')).rejects.toThrow(/t1\.json is not valid \(messages\.0\.role/);
    expect(log.join('\n')).toContain('messages.0.role');
    expect(readFileSync(file, 'utf8')).toBe(JSON.stringify(newer));
  });
});

describe('a thread file whose id is not its name', () => {
  it('a copy beside the chat (abc-backup.json holding abc) is not listed, left alone, and said; delete removes the chat', async () => {
    const { s, threads, log } = store();
    await s.save(thread('abc', 'My chat'));
    const copy = path.join(threads, 'abc-backup.json');
    const copyText = JSON.stringify(thread('abc', 'My chat (copy)'));
    writeFileSync(copy, copyText);
    expect((await s.list()).map((t) => `${t.id}:${t.title}`)).toEqual(['abc:My chat']);
    expect(s.problems).toHaveLength(1);
    expect(s.problems[0]).toContain(copy);
    expect(s.problems[0]).toContain('"abc"');
    expect(log.join('\n')).toContain(copy);
    await s.delete('abc');
    expect(await s.list()).toEqual([]);
    expect(readdirSync(threads)).toEqual(['abc-backup.json']);
    expect(readFileSync(copy, 'utf8')).toBe(copyText);
  });

  it('one holding an id that is not a safe id is not listed (it could be neither saved nor deleted)', async () => {
    const { s, threads } = store();
    mkdirSync(threads, { recursive: true });
    const text = JSON.stringify(thread('has space', 'x'));
    writeFileSync(path.join(threads, 'zzz.json'), text);
    writeFileSync(path.join(threads, 'has space.json'), text);
    expect(await s.list()).toEqual([]);
    expect(s.problems).toHaveLength(2);
    expect(s.problems.join('\n')).toContain('"has space"');
    expect(readFileSync(path.join(threads, 'zzz.json'), 'utf8')).toBe(text);
    expect(readFileSync(path.join(threads, 'has space.json'), 'utf8')).toBe(text);
  });
});

describe('a threads folder that cannot be read', () => {
  it('is an error naming the folder, not an empty list', async () => {
    const { s, threads } = store();
    // A link to itself cannot be listed (ELOOP) whoever runs the test, as a folder without permission (EACCES).
    symlinkSync('threads', threads);
    await expect(s.list()).rejects.toThrow(threads);
  });

  it.skipIf(process.getuid?.() === 0)('without read permission (EACCES): an error naming it', async () => {
    const { s, threads } = store();
    await s.save(thread('t1', 'x'));
    chmodSync(threads, 0o300);
    try {
      await expect(s.list()).rejects.toThrow(threads);
    } finally {
      chmodSync(threads, 0o700);
    }
  });

  it('a missing one is no chats yet', async () => {
    const { s } = store();
    expect(await s.list()).toEqual([]);
  });
});

describe('fields of a newer kvdesk', () => {
  it('are kept when this one saves the thread (the thread and its messages)', async () => {
    const { s, threads } = store();
    const file = path.join(threads, 't1.json');
    mkdirSync(threads, { recursive: true });
    const t = thread('t1', 'x');
    const m = t.messages[0] as Thread['messages'][number];
    writeFileSync(file, JSON.stringify({ ...t, version: 2, folder: 'work', messages: [{ ...m, pinnedAt: 7 }] }));
    const opened = await s.get('t1');
    expect(opened).toEqual(t);
    await s.save({ ...opened, title: 'renamed', messages: [m, { ...m, id: 'm2' }] });
    const onDisk = JSON.parse(readFileSync(file, 'utf8'));
    expect(onDisk).toMatchObject({ title: 'renamed', version: 2, folder: 'work' });
    expect(onDisk.messages).toEqual([
      { ...m, pinnedAt: 7 },
      { ...m, id: 'm2' },
    ]);
  });
});
