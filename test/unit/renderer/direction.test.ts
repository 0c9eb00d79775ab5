/**
 * The writing direction of people's text (lib/direction.ts): the one most of its letters read in; a reply's outside
 * its code and math; and each block of a reply's Markdown given its own (rehypeDirection).
 */
import { describe, expect, it } from 'vitest';
import {
  type DirNode,
  directionKeeper,
  isolated,
  isolateRuns,
  MARKDOWN_READ_CHARS,
  markdownDirection,
  setDirections,
  textDirection,
} from '../../../src/renderer/lib/direction';

describe('textDirection', () => {
  it('is the one most of its letters read in, past digits, spaces and punctuation (a tie: the first’s)', () => {
    expect(textDirection('שלום עולם?')).toBe('rtl');
    expect(textDirection('مرحبا')).toBe('rtl');
    expect(textDirection('ދިވެހި')).toBe('rtl');
    expect(textDirection('12, «שלום» and')).toBe('rtl');
    // A language lesson opens with the word it teaches; a Hebrew line with a brand name.
    expect(textDirection('שלום means hello — how do I say goodbye?')).toBe('ltr');
    expect(textDirection('**مرحبا** (marhaban) is the most common way to say hello')).toBe('ltr');
    expect(textDirection('iPhone שלי לא נטען מאתמול')).toBe('rtl');
    expect(textDirection('Hello שלום')).toBe('ltr');
    expect(textDirection('Привет')).toBe('ltr');
    expect(textDirection('日本語')).toBe('ltr');
    expect(textDirection('123 — !?')).toBeUndefined();
    expect(textDirection('')).toBeUndefined();
  });
});

describe('markdownDirection', () => {
  it('reads past code and math to the first words', () => {
    expect(markdownDirection('```python\nprint("hi")\n```\n\nשלום')).toBe('rtl');
    expect(markdownDirection('`ls -la` היא פקודה')).toBe('rtl');
    expect(markdownDirection('$$x = y$$ זה נכון')).toBe('rtl');
    expect(markdownDirection('\\( a \\) اختبار')).toBe('rtl');
    expect(markdownDirection('# Title\n\nשלום עולם')).toBe('rtl');
    expect(markdownDirection('# Title\n\nשלום')).toBe('ltr');
    expect(markdownDirection('```js\nlet x = 1;')).toBeUndefined();
    expect(markdownDirection('1. **שלום**')).toBe('rtl');
  });
});

/** A HAST element. */
const el = (tagName: string, children: DirNode[], properties: Record<string, unknown> = {}): DirNode => ({
  type: 'element',
  tagName,
  properties,
  children,
});
const text = (value: string): DirNode => ({ type: 'text', value });

describe('directionKeeper', () => {
  it("a streaming reply's direction is worked out at each frame until its first 16 KB are in, then kept", () => {
    let calls = 0;
    const directionOf = directionKeeper((text) => {
      calls++;
      return markdownDirection(text);
    });
    // A Hebrew reply streamed 1 KB a frame to 40 KB, then English after it (too late to change it).
    const chunk = 'שלום עולם, זו תשובה ארוכה. '.repeat(40).slice(0, 1024);
    let reply = '';
    const frames: Array<'ltr' | 'rtl' | undefined> = [];
    while (reply.length < 40 * 1024) {
      reply += chunk;
      frames.push(directionOf(reply));
    }
    for (let i = 0; i < 20; i++) {
      reply += 'English words after it. '.repeat(40);
      frames.push(directionOf(reply));
    }
    expect(new Set(frames)).toEqual(new Set(['rtl']));
    expect(markdownDirection(reply)).toBe('rtl');
    // Read at each frame while shorter than what is read of it, and once when it got there: never after.
    expect(calls).toBe(Math.ceil(MARKDOWN_READ_CHARS / 1024));
    // Another text (the reply edited, another version shown) is read again, and its own direction kept.
    expect(directionOf(`${'Hello there. '.repeat(2000)}`)).toBe('ltr');
    expect(calls).toBe(Math.ceil(MARKDOWN_READ_CHARS / 1024) + 1);
    expect(directionOf(`${'Hello there. '.repeat(2000)}and more`)).toBe('ltr');
    expect(calls).toBe(Math.ceil(MARKDOWN_READ_CHARS / 1024) + 1);
    // Short again: read each time.
    expect(directionOf('שלום')).toBe('rtl');
    expect(directionOf('שלום עולם')).toBe('rtl');
    expect(calls).toBe(Math.ceil(MARKDOWN_READ_CHARS / 1024) + 3);
  });
});

describe('setDirections', () => {
  it('gives each block its direction, and code and math left to right', () => {
    const tree: DirNode = {
      type: 'root',
      children: [
        el('p', [text('שלום?')]),
        el('ul', [el('li', [el('p', [text('פריט')]), el('ul', [el('li', [text('item')])])])]),
        el('blockquote', [el('p', [el('code', [text('x')]), text(' ציטוט')])]),
        el('pre', [el('code', [text('print(1)')])]),
        el('p', [el('span', [text('x')], { className: ['katex'] })]),
        el('ol', [el('li', [text('12')])]),
        el('table', [el('tbody', [el('tr', [el('td', [text('עמודה')])])])]),
      ],
    };
    setDirections(tree);
    const [p, ul, quote, pre, math, ol, table] = tree.children ?? [];
    expect(p?.properties?.dir).toBe('rtl');
    expect(ul?.properties?.dir).toBe('rtl');
    const li = ul?.children?.[0];
    // A list item holding a paragraph: the browser's dir="auto" would not look into the paragraph (it has its own).
    expect(li?.properties?.dir).toBe('rtl');
    expect(li?.children?.[1]?.properties?.dir).toBe('ltr');
    // A quote that starts with code: its words, not its code, give its direction.
    expect(quote?.properties?.dir).toBe('rtl');
    expect(quote?.children?.[0]?.children?.[0]?.properties?.dir).toBe('ltr');
    expect(pre?.properties?.dir).toBe('ltr');
    expect(math?.children?.[0]?.properties?.dir).toBe('ltr');
    // Nothing strong: it follows its parent.
    expect(ol?.properties?.dir).toBeUndefined();
    expect(table?.properties?.dir).toBe('rtl');
  });
});

describe('isolateRuns', () => {
  it('cuts a string made with isolated() into its names and the text around them, without the marks', () => {
    expect(isolateRuns(`The chat “${isolated('שלום!')}” was deleted.`)).toEqual([
      { text: 'The chat “', isolated: false },
      { text: 'שלום!', isolated: true },
      { text: '” was deleted.', isolated: false },
    ]);
    expect(isolateRuns(`${isolated('a')} and ${isolated('b')}`)).toEqual([
      { text: 'a', isolated: true },
      { text: ' and ', isolated: false },
      { text: 'b', isolated: true },
    ]);
    expect(isolateRuns('no names')).toEqual([{ text: 'no names', isolated: false }]);
  });

  it('keeps the marks a name holds itself inside it; a stray end mark is text, an unclosed name runs to the end', () => {
    expect(isolateRuns(`x ${isolated('a\u2068b\u2069c')} y`)).toEqual([
      { text: 'x ', isolated: false },
      { text: 'a\u2068b\u2069c', isolated: true },
      { text: ' y', isolated: false },
    ]);
    expect(isolateRuns('a\u2069b')).toEqual([{ text: 'a\u2069b', isolated: false }]);
    expect(isolateRuns(`x ${isolated('a\u2068b')} y`)).toEqual([
      { text: 'x ', isolated: false },
      { text: 'a\u2068b\u2069 y', isolated: true },
    ]);
  });
});
