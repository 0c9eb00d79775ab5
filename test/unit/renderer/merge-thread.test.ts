/**
 * A chat another page saved while this page writes a reply in it (bridge's mergeThread): the other's fields and
 * messages, this page's reply as it has it, and what only this page has, where it has it.
 */
import { describe, expect, it } from 'vitest';
import { mergeThread } from '../../../src/renderer/lib/merge-thread';
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
});
