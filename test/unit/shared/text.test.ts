/**
 * Text cut to a length (shared/text.ts) and where the window cuts: a title, a chat's renamed title, a preset's or
 * a file's name cut inside an emoji was saved with half of it (a lone surrogate); and search's form, which makes an
 * accent typed composed find it written decomposed and the other way round.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { attachmentFrom } from '../../../src/renderer/lib/attachments';
import { branchTitle, conflictTitle } from '../../../src/renderer/lib/merge-thread';
import { presetName } from '../../../src/renderer/lib/presets';
import { importedTitle, parseThreadImport } from '../../../src/renderer/lib/thread-export';
import { createAppStore } from '../../../src/renderer/store';
import { titleFrom } from '../../../src/renderer/store/chat-slice';
import { Thread, ThreadFields } from '../../../src/shared/api';
import { cutText, placedSearchForm, searchForm } from '../../../src/shared/text';

/** A lone surrogate: half of a character outside the BMP (the u flag matches a surrogate only when it is alone). */
const LONE = /[\uD800-\uDFFF]/u;
const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });
const clusters = (s: string) => Array.from(segmenter.segment(s), (x) => x.segment);

describe('cutText', () => {
  it('keeps a text that fits, and cuts between characters', () => {
    expect(cutText('hello', 5)).toBe('hello');
    expect(cutText('hello', 3)).toBe('hel');
    expect(cutText('hello', 0)).toBe('');
    // An emoji is two code units: one left of the limit is no room for it.
    expect(cutText('ab😀c', 3)).toBe('ab');
    expect(cutText('ab😀c', 4)).toBe('ab😀');
  });

  it('keeps a letter with its marks, and emoji sequences whole', () => {
    expect(cutText('abe\u0301', 3)).toBe('ab');
    expect(cutText('a👩‍👩‍👧b', 5)).toBe('a');
    expect(cutText('a🇫🇷', 4)).toBe('a');
    expect(cutText('नमस्ते', 4)).toBe('नम');
  });

  it('cuts a first character longer than the limit between code points', () => {
    expect(cutText(`e${'\u0301'.repeat(10)}`, 4)).toBe(`e${'\u0301'.repeat(3)}`);
    expect(cutText('😀😀', 3)).toBe('😀');
    expect(cutText('😀', 1)).toBe('');
  });

  it('is a prefix of the text, at most the limit long, ending between two of its characters', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), fc.nat(90), (text, max) => {
        const cut = cutText(text, max);
        expect(cut.length).toBeLessThanOrEqual(max);
        expect(text.startsWith(cut)).toBe(true);
        expect(LONE.test(cut)).toBe(false);
        const all = clusters(text);
        // A first character longer than the limit is cut between code points.
        if ((all[0]?.length ?? 0) > max) return;
        const kept = clusters(cut);
        // Whole characters of the text, as many as fit.
        expect(kept).toEqual(all.slice(0, kept.length));
        const next = all[kept.length];
        if (next !== undefined && next.length <= max) expect(cut.length + next.length).toBeGreaterThan(max);
      }),
      { numRuns: 300 },
    );
  });

  // It segments the start of the text only: the code point after the limit, whole, decides whether it is a place.
  it('keeps an emoji with its skin tone just past the limit', () => {
    expect(cutText('ab👍🏽 long text', 4)).toBe('ab');
    expect(cutText('ab👍🏽 long text', 6)).toBe('ab👍🏽');
  });
});

describe('texts the window cuts', () => {
  // Emoji one code unit each side of each limit: a cut by code units leaves half of one.
  const emojiAt = (limit: number) => `${'a'.repeat(limit - 1)}😀 and more`;

  it("a chat's title from its first message", () => {
    const title = titleFrom(emojiAt(48));
    expect(LONE.test(title)).toBe(false);
    expect(title).toBe(`${'a'.repeat(47)}…`);
    expect(Thread.shape.title.safeParse(title).success).toBe(true);
  });

  it('a title the person types, which kvdesk takes (200 code units at most)', () => {
    const store = createAppStore();
    store
      .getState()
      .loadThreads([{ id: 'a', title: 'x', createdAt: 1, updatedAt: 1, messages: [] } satisfies Thread as Thread]);
    store.getState().renameThread('a', emojiAt(200));
    const title = store.getState().threads[0]?.title ?? '';
    expect(title).toBe('a'.repeat(199));
    expect(ThreadFields.safeParse({ title: `${'😀'.repeat(99)}` }).success).toBe(true);
    store.getState().renameThread('a', '😀'.repeat(150));
    const emojis = store.getState().threads[0]?.title ?? '';
    expect(emojis).toBe('😀'.repeat(100));
    expect(ThreadFields.safeParse({ title: emojis }).success).toBe(true);
  });

  it("a conflicted copy's title", () => {
    const title = conflictTitle(`a${'😀'.repeat(100)}`);
    expect(LONE.test(title)).toBe(false);
    expect(title.length).toBeLessThanOrEqual(200);
    expect(title.endsWith(' (conflicted copy)')).toBe(true);
  });

  it("an imported chat's title, which kvdesk takes (one of 200 emoji was 400 code units: refused)", () => {
    const r = parseThreadImport(
      JSON.stringify({ title: '😀'.repeat(200), messages: [{ role: 'user', content: 'hi' }] }),
      'chat.json',
    );
    if (!r.ok) throw new Error(r.error);
    expect(r.thread.title).toBe('😀'.repeat(100));
    expect(Thread.safeParse(r.thread).success).toBe(true);
  });

  it("a branch's title, and an import's beside a chat of its name", () => {
    const branch = branchTitle(`a${'😀'.repeat(100)}`);
    expect(branch).toBe(`a${'😀'.repeat(95)} (branch)`);
    expect(ThreadFields.safeParse({ title: branch }).success).toBe(true);
    const imported = importedTitle(emojiAt(180), 2);
    expect(imported).toBe(`${'a'.repeat(179)} (imported 2)`);
    expect(ThreadFields.safeParse({ title: imported }).success).toBe(true);
  });

  it("a preset's name", () => {
    expect(presetName(`  ${emojiAt(80)}`)).toBe('a'.repeat(79));
    expect(presetName('  calm  ')).toBe('calm');
  });

  it("an attached file's name", () => {
    const r = attachmentFrom(`${emojiAt(255)}.txt`, new TextEncoder().encode('text'));
    if (!r.ok) throw new Error(r.error);
    expect(r.attachment.name).toBe('a'.repeat(254));
  });
});

describe('searchForm', () => {
  it('is lower case and composed, whichever way an accent was written', () => {
    expect(searchForm('CAF\u00c9')).toBe('caf\u00e9');
    expect(searchForm('Cafe\u0301')).toBe('caf\u00e9');
    expect(searchForm('e\u0301').includes(searchForm('\u00e9'))).toBe(true);
    expect(searchForm('\u00e9').includes(searchForm('E\u0301'))).toBe(true);
    expect(searchForm('한국어')).toBe('한국어'.normalize('NFC'));
  });

  it('is NFC whatever the text: the same as lower case then normalize (which it skips where it changes nothing)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (text) => {
        expect(searchForm(text)).toBe(text.toLowerCase().normalize('NFC'));
      }),
      { numRuns: 500 },
    );
    // Decomposed Hangul jamo, an Ohm sign (NFC: Ω), a mark after ASCII.
    for (const text of ['\u1100\u1161', '\u2126', 'a\u0308']) {
      expect(searchForm(text)).toBe(text.toLowerCase().normalize('NFC'));
    }
  });
});

describe('placedSearchForm', () => {
  /** The original text under each occurrence of `word`'s search form in `text`'s. */
  const marked = (text: string, word: string) => {
    const form = placedSearchForm(text);
    const w = searchForm(word);
    const out: string[] = [];
    for (let at = form.text.indexOf(w); at !== -1; at = form.text.indexOf(w, at + w.length)) {
      const [from, to] = form.place(at, at + w.length);
      out.push(text.slice(from, to));
    }
    return out;
  };

  it('is searchForm, and marks the original characters where folding changed lengths', () => {
    expect(marked('Le caf\u00e9, un cafe\u0301 !', 'CAFE\u0301')).toEqual(['caf\u00e9', 'cafe\u0301']);
    expect(marked('x cafe\u0301 y', 'f\u00e9')).toEqual(['fe\u0301']);
    expect(marked('\u0130\u0130 \u0130stanbul bul', 'bul')).toEqual(['bul', 'bul']);
    expect(marked('\u0130\u0130 \u0130stanbul', 'stan')).toEqual(['stan']);
    // A part of a folded character finds the whole character.
    expect(marked('\u0130x', 'i')).toEqual(['\u0130']);
    expect(marked('\u039f\u0394\u039f\u03a3 \u0391', '\u03bf\u03b4\u03bf\u03c2')).toEqual(['\u039f\u0394\u039f\u03a3']);
    expect(marked('\u{1F600}a\u0301 \u1100\u1161\u11a8!', '\u00e1')).toEqual(['a\u0301']);
    expect(marked('\u{1F600}a\u0301 \u1100\u1161\u11a8!', '\uac01!')).toEqual(['\u1100\u1161\u11a8!']);
  });

  it('is searchForm of any text, and a place of one unit maps inside the text', () => {
    const unit = fc.constantFrom(
      ...Array.from(
        'aAe\u00e9\u00c9\u0301\u0130\u03a3 \u1100\u1161\u11a8\u{1F600}\u0323\u212b\u0b15\u0b47\u0b3e\u03c3',
      ),
    );
    fc.assert(
      fc.property(
        fc.array(unit, { maxLength: 30 }).map((u) => u.join('')),
        (text) => {
          const form = placedSearchForm(text);
          expect(form.text).toBe(searchForm(text));
          for (let i = 0; i < form.text.length; i++) {
            const [from, to] = form.place(i, i + 1);
            expect(0 <= from && from < to && to <= text.length).toBe(true);
          }
        },
      ),
    );
  });
});
