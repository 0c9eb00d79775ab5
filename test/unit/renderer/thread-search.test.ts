/**
 * The chat list's search in the window (ThreadList.tsx, matchingThreadIds): an accent typed as one code point
 * (é, U+00E9) finds it written as a letter and a combining mark (e + U+0301), and the other way round.
 */
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Thread } from '../../../src/shared/api';
import { thread } from './fixtures';

// Loaded by name, not imported: the node project's type check leaves out React's types and the renderer's JSX.
const RENDERER = path.resolve(__dirname, '../../../src/renderer');
let matchingThreadIds: (threads: Thread[], query: string) => string[];
beforeAll(async () => {
  ({ matchingThreadIds } = (await import(/* @vite-ignore */ `${RENDERER}/components/ThreadList.tsx`)) as {
    matchingThreadIds: typeof matchingThreadIds;
  });
});

describe('the chat list search', () => {
  const msg = (content: string) => ({ id: `m-${content.length}`, role: 'user' as const, content, createdAt: 1 });
  const chats = [
    thread('decomposed', { title: 'Recipes', messages: [msg('A cre\u0300me bru\u0302le\u0301e')] }),
    thread('composed', { title: 'Caf\u00e9 notes', messages: [msg('Nothing else')] }),
    thread('plain', { title: 'Cafe', messages: [msg('creme brulee')] }),
  ];

  it('finds an accent whether it was typed composed or decomposed', () => {
    expect(matchingThreadIds(chats, 'CR\u00c8ME br\u00fbl\u00e9e')).toEqual(['decomposed']);
    expect(matchingThreadIds(chats, 'cafe\u0301')).toEqual(['composed']);
    expect(matchingThreadIds(chats, 'caf\u00e9')).toEqual(['composed']);
    expect(matchingThreadIds(chats, 'cafe')).toEqual(['plain']);
  });
});
