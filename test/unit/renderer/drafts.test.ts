import { describe, expect, it } from 'vitest';
import {
  DRAFTS_KEY,
  type DraftFileStore,
  type DraftStorage,
  Drafts,
  draftKey,
  MAX_DRAFTS,
} from '../../../src/renderer/lib/drafts';

function memoryStorage(initial?: string): DraftStorage & { raw(): string | null } {
  let value: string | null = initial ?? null;
  return {
    getItem: (key) => (key === DRAFTS_KEY ? value : null),
    setItem: (key, v) => {
      if (key === DRAFTS_KEY) value = v;
    },
    raw: () => value,
  };
}

const file = { name: 'notes.txt', text: 'hello' };

/** A file store in memory whose reads wait until `release` (IndexedDB answers after the page has started). */
function memoryFiles(): DraftFileStore & { kept: Map<string, unknown>; release(): Promise<void> } {
  const kept = new Map<string, unknown>();
  let open: () => void = () => {};
  const gate = new Promise<void>((r) => {
    open = r;
  });
  return {
    kept,
    // Read as it was when asked (as IndexedDB's read transaction, made before this page's writes, sees it).
    readAll: async () => {
      const then = [...kept] as Array<[string, Array<{ name: string; text: string }>]>;
      await gate;
      return then;
    },
    write: (id, files) => {
      if (files.length > 0) kept.set(id, files);
      else kept.delete(id);
    },
    release: async () => {
      open();
      await gate;
      await new Promise((r) => setTimeout(r, 0));
    },
  };
}

describe('per-chat drafts', () => {
  it('keeps the files of as many chats as texts: the least recently given go, from the store too', async () => {
    const files = memoryFiles();
    await files.release();
    const d = new Drafts(memoryStorage(), files);
    for (let i = 0; i <= MAX_DRAFTS; i++) d.set(`c${i}`, { text: '', files: [file] });
    expect(d.get('c0').files).toEqual([]);
    expect(d.get(`c${MAX_DRAFTS}`).files).toEqual([file]);
    expect(files.kept.has('c0')).toBe(false);
    expect(files.kept.size).toBe(MAX_DRAFTS);
  });

  it('files kept for a chat that is gone by the time they are read are let go, from the store too', async () => {
    const files = memoryFiles();
    files.kept.set('gone', [file]);
    files.kept.set('a', [file]);
    const d = new Drafts(memoryStorage(), files);
    // The chats are listed (without 'gone', deleted while the page was closed) before the files are read.
    d.keepOnly(new Set(['a']));
    await files.release();
    expect(d.get('gone').files).toEqual([]);
    expect([...files.kept.keys()]).toEqual(['a']);
    expect(d.get('a').files).toEqual([file]);
  });

  it("with a file store, a chat's files outlive the page: read back a moment after it starts, then said", async () => {
    const storage = memoryStorage();
    const files = memoryFiles();
    await files.release();
    const d = new Drafts(storage, files);
    d.set('a', { text: 'for a', files: [file] });
    d.set('b', { text: 'for b', files: [file] });
    d.set('b', { text: 'for b', files: [] });
    d.set('c', { text: 'c', files: [file] });
    d.keepOnly(new Set(['a', 'b']));
    expect([...files.kept.keys()]).toEqual(['a']);

    // A reload: the texts at once, the files once read (and those listening are told).
    const later = memoryFiles();
    for (const [k, v] of files.kept) later.kept.set(k, v);
    later.kept.set('x', [file]);
    const again = new Drafts(storage, later);
    let told = 0;
    again.onFilesRead(() => told++);
    expect(again.get('a')).toEqual({ text: 'for a', files: [] });
    // Files attached to x on this page before the kept ones are read: those are x's, not the older kept ones.
    const newer = { name: 'new.txt', text: 'newer' };
    again.set('x', { text: '', files: [newer] });
    await later.release();
    expect(told).toBe(1);
    expect(again.get('a')).toEqual({ text: 'for a', files: [file] });
    expect(again.get('x').files).toEqual([newer]);
    expect(later.kept.get('x')).toEqual([newer]);
  });

  it("keeps each chat's text and files apart; the texts outlive the page, the files do not", () => {
    const storage = memoryStorage();
    const d = new Drafts(storage);
    d.set('a', { text: 'for a', files: [file] });
    d.set('b', { text: 'for b', files: [] });
    expect(d.get('a')).toEqual({ text: 'for a', files: [file] });
    expect(d.get('b')).toEqual({ text: 'for b', files: [] });
    expect(d.get('c')).toEqual({ text: '', files: [] });
    const again = new Drafts(storage);
    expect(again.get('a')).toEqual({ text: 'for a', files: [] });
    expect(again.get('b').text).toBe('for b');
  });

  it("two tabs (two Drafts on one storage) keep each other's drafts", () => {
    const storage = memoryStorage();
    const one = new Drafts(storage);
    const two = new Drafts(storage);
    one.set('a', { text: 'from tab one', files: [] });
    two.set('b', { text: 'from tab two', files: [] });
    two.keepOnly(new Set(['a', 'b']));
    const reloaded = new Drafts(storage);
    expect(reloaded.get('a').text).toBe('from tab one');
    expect(reloaded.get('b').text).toBe('from tab two');
  });

  it('a message given back (not sent) is the draft again, before what was written since, and the box is told', () => {
    const storage = memoryStorage();
    const d = new Drafts(storage);
    const told: Array<[string, unknown]> = [];
    d.onChangedElsewhere((id, before) => told.push([id, before]));
    d.giveBack('a', { text: 'sent', files: [file] });
    expect(d.get('a')).toEqual({ text: 'sent', files: [file] });
    const other = { name: 'more.txt', text: 'more' };
    d.set('b', { text: 'written since', files: [other] });
    d.giveBack('b', { text: 'sent', files: [file] });
    expect(d.get('b')).toEqual({ text: 'sent\n\nwritten since', files: [file, other] });
    expect(told).toEqual([
      ['a', { text: '', files: [] }],
      ['b', { text: 'written since', files: [other] }],
    ]);
    // Kept across a reload, as any draft.
    expect(new Drafts(storage).get('b').text).toBe('sent\n\nwritten since');
  });

  it("another tab's change of a draft is this page's at once, and the chat's listeners are told what it was", () => {
    const storage = memoryStorage();
    const here = new Drafts(storage);
    const shared: Array<[string, unknown[]]> = [];
    const there = new Drafts(storage, undefined, { post: (id, files) => shared.push([id, files]) });
    there.set('y', { text: 'hello', files: [file] });
    const told: Array<[string, unknown]> = [];
    here.onChangedElsewhere((id, before) => told.push([id, before]));
    // The storage's event, as the page gets it: the value before and after.
    let was = storage.raw();
    here.textsChangedElsewhere(null, was);
    for (const [id, files] of shared.splice(0)) here.filesChangedElsewhere(id, files as (typeof file)[]);
    expect(here.get('y')).toEqual({ text: 'hello', files: [file] });
    told.length = 0;
    // Sent there: gone here too.
    there.set('y', { text: '', files: [] });
    here.textsChangedElsewhere(was, storage.raw());
    for (const [id, files] of shared.splice(0)) here.filesChangedElsewhere(id, files as (typeof file)[]);
    expect(here.get('y')).toEqual({ text: '', files: [] });
    expect(told).toEqual([
      ['y', { text: 'hello', files: [file] }],
      ['y', { text: '', files: [file] }],
    ]);
    // Only the chats whose text changed are told; the storage cleared is every draft gone.
    told.length = 0;
    was = storage.raw();
    there.set('a', { text: 'a', files: [] });
    here.textsChangedElsewhere(was, storage.raw());
    storage.setItem(DRAFTS_KEY, '{}'); // another tab's localStorage.clear()
    here.textsChangedElsewhere(null, null);
    expect(told.map(([id]) => id)).toEqual(['a', 'a']);
    expect(here.get('a').text).toBe('');
  });

  it('an emptied draft is forgotten, in storage too', () => {
    const storage = memoryStorage();
    const d = new Drafts(storage);
    d.set('a', { text: 'x', files: [file] });
    d.set('a', { text: '', files: [] });
    expect(d.get('a')).toEqual({ text: '', files: [] });
    expect(JSON.parse(storage.raw() ?? '{}')).toEqual({});
  });

  it('keeps the most recently written drafts when there are too many', () => {
    const storage = memoryStorage();
    const d = new Drafts(storage);
    for (let i = 0; i <= MAX_DRAFTS; i++) d.set(`t${i}`, { text: `draft ${i}`, files: [] });
    // t0 was written first; writing it again would have made it the newest.
    expect(d.get('t0').text).toBe('');
    expect(d.get('t1').text).toBe('draft 1');
    expect(Object.keys(JSON.parse(storage.raw() ?? '{}'))).toHaveLength(MAX_DRAFTS);
    d.set('t1', { text: 'draft 1 again', files: [] });
    d.set('new', { text: 'newest', files: [] });
    expect(d.get('t1').text).toBe('draft 1 again');
    expect(d.get('t2').text).toBe('');
  });

  it('forgets the drafts of chats that are gone, not the one written before there was a chat', () => {
    const storage = memoryStorage();
    const d = new Drafts(storage);
    d.set('a', { text: 'a', files: [file] });
    d.set('gone', { text: 'g', files: [file] });
    d.set(null, { text: 'before any chat', files: [] });
    d.keepOnly(new Set(['a']));
    expect(d.get('gone')).toEqual({ text: '', files: [] });
    expect(d.get('a').files).toEqual([file]);
    expect(d.get(null).text).toBe('before any chat');
    expect(Object.keys(JSON.parse(storage.raw() ?? '{}')).sort()).toEqual(['', 'a']);
  });

  it('stored drafts that cannot be read are no drafts (never an error), and a storage that refuses is no loss', () => {
    for (const raw of ['not json', '[1,2]', 'null', '{"a": 3, "b": "kept"}']) {
      const d = new Drafts(memoryStorage(raw));
      expect(d.get('a').text).toBe('');
      if (raw.includes('kept')) expect(d.get('b').text).toBe('kept');
    }
    const refusing: DraftStorage = {
      getItem: () => null,
      setItem: () => {
        throw new Error('QuotaExceededError');
      },
    };
    const d = new Drafts(refusing);
    d.set('a', { text: 'still here', files: [] });
    expect(d.get('a').text).toBe('still here');
  });

  it("each data folder has its own drafts: another folder's are kept, not shown, and shown again with theirs", async () => {
    const storage = memoryStorage();
    const files = memoryFiles();
    await files.release();
    const d = new Drafts(storage, files);
    d.setFolder('A');
    d.keepOnly(new Set(['tA', 'same']));
    d.set('tA', { text: 'for tA', files: [file] });
    d.set('same', { text: "A's", files: [] });
    expect(d.count()).toBe(2);
    // kvdesk started again on folder B (the page kept open): A's chats are not B's.
    d.setFolder('B');
    d.keepOnly(new Set(['tB', 'same']));
    expect(d.count()).toBe(0);
    expect(d.get('same')).toEqual({ text: '', files: [] });
    expect(d.get('tA')).toEqual({ text: '', files: [] });
    d.set('same', { text: "B's", files: [] });
    expect(files.kept.has(draftKey('A', 'tA'))).toBe(true);
    // Back on A (or a page loaded again there): A's drafts, as written.
    const again = new Drafts(storage, files);
    again.setFolder('A');
    again.keepOnly(new Set(['tA', 'same']));
    await new Promise((r) => setTimeout(r, 0));
    expect(again.get('tA')).toEqual({ text: 'for tA', files: [file] });
    expect(again.get('same').text).toBe("A's");
    again.setFolder('B');
    expect(again.get('same').text).toBe("B's");
    // Chats deleted from A go with their drafts when A's chats are listed; B's stay.
    again.setFolder('A');
    again.keepOnly(new Set(['same']));
    expect(files.kept.has(draftKey('A', 'tA'))).toBe(false);
    again.setFolder('B');
    expect(again.get('same').text).toBe("B's");
  });

  it('drafts kept by chat id alone (an earlier version) are the draft of that chat in the first folder that has it', () => {
    const storage = memoryStorage(JSON.stringify({ tA: 'old draft', other: 'not here', '': 'before a chat' }));
    const d = new Drafts(storage);
    d.setFolder('A');
    expect(d.get('tA').text).toBe('old draft');
    d.keepOnly(new Set(['tA']));
    expect(JSON.parse(storage.raw() ?? '{}')).toEqual({
      other: 'not here',
      [draftKey('A', 'tA')]: 'old draft',
      [draftKey('A', '')]: 'before a chat',
    });
    // Another folder does not see A's; the one no folder has yet stays for whichever has its chat.
    d.setFolder('B');
    d.keepOnly(new Set(['tA']));
    expect(d.get('tA').text).toBe('');
    expect(d.get('other').text).toBe('not here');
    // Without a folder (the Electron window) drafts are kept by chat id, as before.
    const electron = new Drafts(memoryStorage(JSON.stringify({ a: 'x', gone: 'y' })));
    electron.keepOnly(new Set(['a']));
    expect(electron.get('a').text).toBe('x');
    expect(electron.get('gone').text).toBe('');
  });
});
