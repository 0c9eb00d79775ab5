/**
 * A chat another page saved while this page writes a reply in it (bridge's mergeThread): the other's fields and
 * messages, this page's reply as it has it, and what only this page has, where it has it.
 */
import { describe, expect, it } from 'vitest';
import {
  conflictCopy,
  holdsAll,
  mergeThread,
  sameSettings,
  takeSettings,
} from '../../../src/renderer/lib/merge-thread';
import type { Thread } from '../../../src/shared/api';

const msg = (id: string, role: 'user' | 'assistant', content: string) => ({ id, role, content, createdAt: 1 });
const thread = (title: string, messages: Thread['messages']): Thread => ({
  id: 't',
  title,
  createdAt: 1,
  updatedAt: 2,
  messages,
});

describe('mergeThread', () => {
  it("takes the other's title and messages, keeps this page's reply, and places what only this page has", () => {
    const local = thread('Old title', [
      msg('u1', 'user', 'first'),
      msg('a1', 'assistant', 'a reply written here, longer now'),
      msg('u2', 'user', 'only here'),
    ]);
    const remote = thread('Renamed elsewhere', [
      msg('u1', 'user', 'first (edited elsewhere)'),
      msg('a1', 'assistant', 'a reply written'),
      msg('u3', 'user', 'sent elsewhere'),
    ]);
    const merged = mergeThread(remote, local, new Set(['a1']));
    expect(merged.title).toBe('Renamed elsewhere');
    expect(merged.messages.map((m) => [m.id, m.content])).toEqual([
      ['u1', 'first (edited elsewhere)'],
      ['a1', 'a reply written here, longer now'],
      ['u2', 'only here'],
      ['u3', 'sent elsewhere'],
    ]);
  });

  it("a save another page got in first: what of this page's copy it lacks, and that copy as a chat of its own", () => {
    const saved = {
      ...thread('Chat', [msg('u1', 'user', 'hi'), msg('a1', 'assistant', 'hello'), msg('u2', 'user', 'theirs')]),
      revision: 4,
    };
    const same = thread('Chat', [msg('a1', 'assistant', 'hello'), msg('u1', 'user', 'hi')]);
    expect(holdsAll(saved, same)).toBe(true);
    // A turn it has not, or a reply it has shorter (saved from this page before it ended): lacking.
    expect(holdsAll(saved, thread('Chat', [msg('u1', 'user', 'hi'), msg('u3', 'user', 'mine')]))).toBe(false);
    expect(holdsAll(saved, thread('Chat', [msg('u1', 'user', 'hi'), msg('a1', 'assistant', 'hello there')]))).toBe(
      false,
    );
    // Settings compared whatever the order their fields were put in.
    const a = { ...saved, sampling: { temperature: 0.5, topP: 0.9 } };
    const b = { ...saved, revision: 5, sampling: { topP: 0.9, temperature: 0.5 } };
    expect(sameSettings(a, b)).toBe(true);
    expect(sameSettings(a, { ...b, title: 'Renamed' })).toBe(false);
    const mine = {
      ...thread('Chat', [msg('u1', 'user', 'hi'), msg('u3', 'user', 'mine')]),
      revision: 3,
      pinned: true,
      toolsAllowed: ['fs/read'],
    };
    const copy = conflictCopy(mine, 't-copy', 'm-copy', 99);
    expect(copy).toEqual({
      id: 't-copy',
      title: 'Chat (conflicted copy)',
      createdAt: 99,
      updatedAt: 99,
      messages: [
        { ...msg('u1', 'user', 'hi'), id: 'm-copy-0' },
        { ...msg('u3', 'user', 'mine'), id: 'm-copy-1' },
      ],
    });
    expect(conflictCopy({ ...mine, title: 'x'.repeat(200) }, 't', 'm', 1).title).toHaveLength(200);
  });

  it("another page's reply that this page only showed, grown since: not this page's to keep, and a rename made here is taken", () => {
    // Page B heard A's reply at 'Once' (revision 3), renamed the chat, and its save was refused: A saved more since.
    const base = { ...thread('Chat', [msg('u1', 'user', 'hi'), msg('a1', 'assistant', 'Once')]), revision: 3 };
    const saved = {
      ...thread('Chat', [msg('u1', 'user', 'hi'), msg('a1', 'assistant', 'Once upon a time')]),
      revision: 5,
      updatedAt: 9,
    };
    const mine = { ...base, title: 'Renamed in B' };
    expect(holdsAll(saved, mine)).toBe(false);
    expect(holdsAll(saved, mine, base)).toBe(true);
    // A turn B wrote since is still B's: lacking.
    expect(holdsAll(saved, { ...mine, messages: [...mine.messages, msg('u2', 'user', 'mine')] }, base)).toBe(false);
    // Only the name changed here, and the other left it: B's name on the chat as saved (its messages, its revision).
    expect(takeSettings(saved, mine, base)).toEqual({ ...saved, title: 'Renamed in B' });
    // Renamed in both: the other's stands (null: B is told). Nothing changed here, or nothing known: null.
    expect(takeSettings({ ...saved, title: 'Renamed in A' }, mine, base)).toBeNull();
    expect(takeSettings(saved, { ...base, revision: 3 }, base)).toBeNull();
    expect(takeSettings(saved, mine, undefined)).toBeNull();
  });
});
