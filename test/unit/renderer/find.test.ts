/** Find in a chat (src/renderer/lib/find.ts): every occurrence of a word in the thread's messages, in order. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { findMatches, MAX_MATCHES } from '../../../src/renderer/lib/find';
import type { StoredMessage } from '../../../src/shared/api';

const msg = (id: string, content: string, role: StoredMessage['role'] = 'assistant'): StoredMessage => ({
  id,
  role,
  content,
  createdAt: 0,
});

describe('findMatches', () => {
  it('finds each occurrence, case aside, in reading order, with its place in its message', () => {
    const thread = [
      msg('s', 'Tides everywhere', 'system'),
      msg('u', 'Tell me about the tides.', 'user'),
      msg('a', 'TIDES rise; tides fall. Ti-des are not.'),
      msg('b', 'nothing here'),
    ];
    expect(findMatches(thread, 'tides')).toEqual([
      { index: 1, messageId: 'u', nth: 0 },
      { index: 2, messageId: 'a', nth: 0 },
      { index: 2, messageId: 'a', nth: 1 },
    ]);
  });

  it('counts occurrences that do not overlap, and nothing for an empty or blank query', () => {
    expect(findMatches([msg('a', 'aaaa')], 'aa')).toHaveLength(2);
    expect(findMatches([msg('a', 'text')], '')).toEqual([]);
    expect(findMatches([msg('a', 'a  b')], '  ')).toEqual([]);
  });

  it(`stops counting at ${MAX_MATCHES}`, () => {
    expect(findMatches([msg('a', 'x'.repeat(MAX_MATCHES + 50))], 'x')).toHaveLength(MAX_MATCHES);
  });

  it('finds a word as written, also after characters whose lower case is longer (İ), and any character literally', () => {
    expect(findMatches([msg('a', 'İİ İstanbul bul')], 'bul')).toHaveLength(2);
    expect(findMatches([msg('a', 'a.b a*b (a) [x] \\d $1')], '.')).toHaveLength(1);
    expect(findMatches([msg('a', 'a.b a*b (a) [x] \\d $1')], '(a)')).toHaveLength(1);
    expect(findMatches([msg('a', 'a.b a*b (a) [x] \\d $1')], '\\d')).toHaveLength(1);
    expect(findMatches([msg('a', 'ÉCOLE école')], 'école')).toHaveLength(2);
  });

  it('finds an accent however it was typed, as the chat list search does (searchForm: lower case, NFC)', () => {
    const thread = [
      msg('composed', 'Le caf\u00e9 est CAF\u00c9.'),
      msg('decomposed', 'un cafe\u0301'),
      msg('plain', 'cafe'),
    ];
    const ids = (q: string) => findMatches(thread, q).map((f) => f.messageId);
    expect(ids('cafe\u0301')).toEqual(['composed', 'composed', 'decomposed']);
    expect(ids('caf\u00e9')).toEqual(['composed', 'composed', 'decomposed']);
    expect(ids('CAF\u00c9')).toEqual(['composed', 'composed', 'decomposed']);
    // As in the list: a letter without its accent is another letter.
    expect(ids('cafe')).toEqual(['plain']);
  });

  it('agrees with a plain count of the lower-cased text (any ASCII text, any word)', () => {
    const ascii = (max: number) => fc.string({ unit: fc.constantFrom(...'aAbB .*$\\('), maxLength: max });
    fc.assert(
      fc.property(fc.array(ascii(20), { maxLength: 5 }), ascii(3), (texts, word) => {
        fc.pre(word.trim().length > 0);
        const thread = texts.map((t, i) => msg(`m${i}`, t));
        const expected = texts.map((t) => t.toLocaleLowerCase().split(word.toLocaleLowerCase()).length - 1);
        const found = findMatches(thread, word);
        expect(texts.map((_, i) => found.filter((f) => f.index === i).length)).toEqual(expected);
      }),
    );
  });
});
