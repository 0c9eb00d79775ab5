/**
 * A reply rendered block by block (src/renderer/lib/markdown-blocks.ts, Markdown.tsx): the blocks join to the text,
 * and the chat view's markup is the markup of the whole text rendered at once, at every point of a streaming reply
 * and once it ended (code coloured), for replies made of what models write (paragraphs, headings, lists loose and
 * tight, quotes, code with blank lines, display math in either delimiter, tables, rules).
 */
import path from 'node:path';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { markdownBlocks } from '../../../src/renderer/lib/markdown-blocks';

// Loaded by name, not imported: the node project's type check leaves out React's types and the renderer's JSX.
const RENDERER = path.resolve(__dirname, '../../../src/renderer');
const load = <T>(module: string): Promise<T> => import(/* @vite-ignore */ module);
type Create = (type: unknown, props: unknown) => unknown;
let h: Create;
let renderToStaticMarkup: (element: unknown) => string;
let Markdown: unknown;
let ParsedMarkdown: unknown;
let MarkdownBlocks: unknown;
let fencedCodeBlock: (text: string) => { lang: string; code: string } | null;
beforeAll(async () => {
  h = (await load<{ createElement: Create }>('react')).createElement;
  ({ renderToStaticMarkup } = await load<{ renderToStaticMarkup: typeof renderToStaticMarkup }>('react-dom/server'));
  let loadMarkdownExtras: () => Promise<unknown>;
  ({ Markdown, ParsedMarkdown, MarkdownBlocks, fencedCodeBlock, loadMarkdownExtras } = await load<{
    Markdown: unknown;
    ParsedMarkdown: unknown;
    MarkdownBlocks: unknown;
    fencedCodeBlock: typeof fencedCodeBlock;
    loadMarkdownExtras: () => Promise<unknown>;
  }>(`${RENDERER}/components/Markdown.tsx`));
  // KaTeX and highlight.js, which the page loads when a reply first needs them: the markup compared is theirs too.
  await loadMarkdownExtras();
});

/** Pieces of replies, each a top-level block or a run of them. */
const PIECES = [
  'A paragraph of prose, with `code` and a [link](https://example.com).',
  'Two lines\nof one paragraph, costing $5 and $10.',
  '# A heading',
  '## Steps\n1. first\n2. second\n3. third',
  '- loose item\n\n- another loose item\n\n  with a second paragraph',
  '1. one\n\n2. two',
  '> a quote\n>\n> its second paragraph',
  '> one quote\n\n> then a second, or the same',
  '```ts\nconst a = 1;\n\nconst b = 2;\n```',
  '~~~\nplain\n\n\nstill code\n~~~',
  // A fence indented 4 more than its opening is a line of the code, not its close.
  '```\n    ```\n\nstill code\n```',
  '```python\ndef f():\n    return 1\n\n# a comment, not a heading\n\n    indented\n```',
  // Fences a reading of an open code block must follow as the parse does, or leave to it.
  '````md\n```\ninner\n```\n````',
  '~~~js title="a" ```\nlet x = 1;\n\n\tlet y;\n~~~',
  '```math\nx^2\n```',
  '```c\\+\\+\nint a;\n```',
  '```\n<b>&amp;</b> $x$\n```',
  // Closed blocks read without the parse: empty, blank, a closing fence with spaces, languages the highlighter
  // does not know, an alias, a tab.
  '```\n```',
  '```py\n\n```',
  '~~~ rust\nfn main() {}\n  ~~~   ',
  '```no-highlight\nlet x = 1;\n```',
  '```klingon\nqaStaHvIS\n```',
  '```c++\nint a = 1;\n\treturn a;\n```',
  '$$\nx^2 + 1\n\n= y\n$$',
  '\\[\n\\frac{a}{b}\n\n\\]',
  'Inline math $\\pi r^2$ and \\( a \\) here.',
  '| a | b |\n| --- | --- |\n| 1 | 2 |',
  '---',
  '    indented code\n\n    more of it',
  'Term with a footnote[^1].\n\n[^1]: The note.',
  'A [reference][r] link.\n\n[r]: https://example.com',
  '* star item\n\n* star item two\n\nAfter the list.',
];

/** A streaming reply as the chat view renders it (by blocks), and the whole text rendered at once as it streams. */
const streamed = (text: string) => renderToStaticMarkup(h(Markdown, { text, streaming: true }));
const streamedWhole = (text: string) => renderToStaticMarkup(h(ParsedMarkdown, { text, openEnd: true, colour: false }));
/** A finished reply: by blocks (as one that streamed in the view), and whole (its code coloured). */
const finished = (text: string) => renderToStaticMarkup(h(MarkdownBlocks, { text }));
const finishedWhole = (text: string) => renderToStaticMarkup(h(ParsedMarkdown, { text, openEnd: false, colour: true }));
/** Markup with highlight.js's colours taken out of its code blocks (the `hljs` class and the spans in them). */
const uncoloured = (markup: string) =>
  markup.replace(
    /<code class="hljs ([^"]*)">([\s\S]*?)<\/code>/g,
    (_, classes: string, code: string) => `<code class="${classes}">${code.replace(/<\/?span[^>]*>/g, '')}</code>`,
  );

describe('markdownBlocks', () => {
  it('splits at blank lines before what starts a block at the margin, never inside code, math or lists', () => {
    expect(markdownBlocks('a\n\nb\n\n# c')).toEqual(['a\n\n', 'b\n\n', '# c']);
    expect(markdownBlocks('```\na\n\nb\n```\n\nc')).toEqual(['```\na\n\nb\n```\n\n', 'c']);
    expect(markdownBlocks('$$\na\n\nb\n$$\n\nc')).toEqual(['$$\na\n\nb\n$$\n\n', 'c']);
    expect(markdownBlocks('\\[\na\n\nb\n\\]\n\nc')).toEqual(['\\[\na\n\nb\n\\]\n\n', 'c']);
    expect(markdownBlocks('- a\n\n- b\n\n  c\n\n1. d\n\n2. e')).toEqual(['- a\n\n- b\n\n  c\n\n1. d\n\n2. e']);
    // A blank line ends a quote: the next `>` opens another.
    expect(markdownBlocks('> e\n>\n> f\n\n> g')).toEqual(['> e\n>\n> f\n\n', '> g']);
    expect(markdownBlocks('a\n\nb\n\n[r]: x')).toEqual(['a\n\nb\n\n[r]: x']);
    // Not split yet: the fence is still open.
    expect(markdownBlocks('```\na\n\nb')).toEqual(['```\na\n\nb']);
  });

  it('joins back to the text, whatever it is', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom('a', ' ', '\n', '`', '~', '$', '\\', '[', ']', '>', '-', '1', '.') }),
        (text) => {
          expect(markdownBlocks(text).join('')).toBe(text);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('renders block by block what the whole text renders, at every point of a reply and at its end', () => {
    let split = 0;
    let highlighted = 0;
    let colouredLive = 0;
    let growingCode = 0;
    let finishedCode = 0;
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...PIECES), { minLength: 1, maxLength: 7 }),
        fc.array(fc.nat(), { minLength: 6, maxLength: 6 }),
        (pieces, cuts) => {
          const reply = pieces.join('\n\n');
          for (const cut of [...cuts.map((c) => c % (reply.length + 1)), reply.length]) {
            const shown = reply.slice(0, cut);
            const blocks = markdownBlocks(shown);
            if (blocks.length > 1) split++;
            for (const block of blocks) {
              const code = fencedCodeBlock(block);
              if (code && block === blocks[blocks.length - 1]) growingCode++;
              else if (code) finishedCode++;
            }
            // Code blocks the reply went past are coloured already; the rest is the whole text's markup.
            const live = streamed(shown);
            expect(uncoloured(live), JSON.stringify(shown)).toBe(streamedWhole(shown));
            const done = blocks.slice(0, -1).join('');
            if (done.includes('```ts') || done.includes('```python')) {
              colouredLive++;
              expect(live, JSON.stringify(shown)).toContain('<span class="hljs-keyword">');
            }
          }
          // The reply once it ended, rendered by blocks as well, and whole (a chat opened): its code coloured as the
          // whole text's.
          expect(finished(reply), JSON.stringify(reply)).toBe(finishedWhole(reply));
          expect(renderToStaticMarkup(h(Markdown, { text: reply })), JSON.stringify(reply)).toBe(finishedWhole(reply));
          if (reply.includes('```ts') || reply.includes('```python')) highlighted++;
        },
      ),
      { numRuns: 120 },
    );
    // The comparison saw split replies (a render that never splits would pass it anyway).
    expect(split).toBeGreaterThan(100);
    // And finished replies with code in a language the highlighter colours, and code blocks (whose markup is
    // written without the parse), growing at the end of a reply and finished before it. The first two counts are
    // small and swing from run to run (in 400 runs of this property: replies with such code 25 on average, as few
    // as 13; points of a reply past such code 45, as few as 15), so a few of each are asked for; the split and code
    // counts were never under 230.
    expect(highlighted).toBeGreaterThanOrEqual(5);
    expect(colouredLive).toBeGreaterThanOrEqual(5);
    expect(growingCode).toBeGreaterThan(50);
    expect(finishedCode).toBeGreaterThan(50);
  });

  it('reads a fenced code block, open or closed, as the parse does, and leaves what it does not follow to the parse', () => {
    expect(fencedCodeBlock('```py')).toEqual({ lang: 'py', code: '' });
    expect(fencedCodeBlock('```py extra\na\n\nb')).toEqual({ lang: 'py', code: 'a\n\nb\n' });
    expect(fencedCodeBlock('~~~\n  x\n')).toEqual({ lang: '', code: '  x\n' });
    expect(fencedCodeBlock('````\n```\nx')).toEqual({ lang: '', code: '```\nx\n' });
    expect(fencedCodeBlock('```py\na\n```')).toEqual({ lang: 'py', code: 'a\n' });
    expect(fencedCodeBlock('```py\na\n\n   ````  \n\n \n')).toEqual({ lang: 'py', code: 'a\n\n' });
    expect(fencedCodeBlock('~~~\n```\n~~~')).toEqual({ lang: '', code: '```\n' });
    for (const left of [
      '```py\na\n```\nafter',
      '```py\na\n```\n\nafter',
      '```py\r\na',
      ' ```py\na',
      '```math\nx',
      '```c\\+\\+\na',
      '``py\na',
      'a\n```py\nb',
    ]) {
      expect(fencedCodeBlock(left), JSON.stringify(left)).toBeNull();
    }
  });

  it('colours code in finished blocks only, and only in the blocks that hold it', () => {
    const reply = 'Some prose.\n\n```python\ndef f():\n    return 1\n```\n\nMore prose.';
    expect(finished(reply)).toContain('<span class="hljs-keyword">def</span>');
    // One that shows up finished is parsed whole: the same markup.
    expect(renderToStaticMarkup(h(Markdown, { text: reply }))).toBe(finished(reply));
    // Streaming, the block the reply went past is coloured as it will be; the block still growing is not.
    expect(streamed(reply)).toBe(finished(reply));
    expect(streamed(reply.slice(0, reply.indexOf('\n\nMore')))).not.toContain('hljs');
    // Indented code has no language: nothing to colour (so the block is parsed without the highlighter).
    expect(finished('Prose.\n\n    def f(): pass')).not.toContain('hljs');
  });
});
