/**
 * Assistant text as Markdown: GFM (tables, lists, task lists), code blocks highlighted by their language (the
 * common ones highlight.js knows) with a copy button on each, and math typeset by KaTeX (`$$…$$`, `\[…\]`,
 * `\(…\)`, `$…$` where it reads as math, and ```math blocks; see lib/math.ts). A formula KaTeX cannot read shows
 * its source, in the error colour.
 */
import { createElement, Fragment, memo, type ReactNode, useEffect, useState, useSyncExternalStore } from 'react';
import ReactMarkdown, { type Components, type Options } from 'react-markdown';
import remarkGfm from 'remark-gfm';
import remarkMath from 'remark-math';
import { COPY_UNAVAILABLE, copyText } from '../lib/clipboard';
import { rehypeDirection } from '../lib/direction';
import { fenced } from '../lib/fence';
import { capitalized } from '../lib/format';
import { markdownBlocks } from '../lib/markdown-blocks';
import { normalizeMath } from '../lib/math';

interface HastLike {
  type: string;
  tagName?: string;
  properties?: { className?: string[] };
  value?: string;
  children?: HastLike[];
}

function textOf(node: HastLike | undefined): string {
  if (!node) return '';
  if (node.type === 'text') return node.value ?? '';
  return (node.children ?? []).map(textOf).join('');
}

export function CopyButton({
  text,
  what,
  label = 'copy',
  testId,
  onCopy,
}: {
  text: string;
  /** What it copies, for its name ("Copy reply 3") and what is said once it has ("Reply 3 copied"). */
  what: string;
  label?: string;
  testId?: string;
  /** Told what a press did: copied, or not (the browser took the text neither way). */
  onCopy?: (copied: boolean) => void;
}) {
  /** What the last press did: copied, or failed (the browser took the text neither way); null once said. */
  const [done, setDone] = useState<'copied' | 'failed' | null>(null);
  /** Copies made: each one's words are a new node in the live region, so a second copy is said again. */
  const [copies, setCopies] = useState(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: each copy shows "copied" for its full time
  useEffect(() => {
    if (!done) return;
    // A failure stays long enough to read what to do instead.
    const timer = setTimeout(() => setDone(null), done === 'failed' ? 6000 : 1200);
    return () => clearTimeout(timer);
  }, [done, copies]);
  return (
    <>
      <button
        type="button"
        className={`copy small ${done === 'failed' ? 'failed' : ''}`}
        data-testid={testId}
        aria-label={`Copy ${what}`}
        onClick={() => {
          void copyText(text).then((copied) => {
            setDone(copied ? 'copied' : 'failed');
            setCopies((n) => n + 1);
            onCopy?.(copied);
          });
        }}
      >
        {done === 'copied' ? 'copied' : done === 'failed' ? COPY_UNAVAILABLE : label}
      </button>
      {/* "copied" said politely, by a region of this button's own: only its press speaks there. */}
      <span className="sr-only" role="status">
        {done && (
          <span key={copies}>
            {done === 'copied' ? `${capitalized(what)} copied` : `${capitalized(what)} not copied: ${COPY_UNAVAILABLE}`}
          </span>
        )}
      </span>
    </>
  );
}

function CodeBlock({ node, children }: { node?: unknown; children?: ReactNode }) {
  // Code reads left to right, in a reply written right to left too.
  return (
    <div className="code-block" dir="ltr">
      <CopyButton text={textOf(node as HastLike).replace(/\n$/, '')} what="code" testId="code-copy" />
      <pre>{children}</pre>
    </div>
  );
}

const components: Components = {
  pre: CodeBlock,
  // A table wider than the reply scrolls sideways in its own box (its cells keep their words whole).
  // Its direction (rehypeDirection's) is its box's too: a right-to-left table starts at the box's right.
  table: ({ children, dir }) => (
    <div className="table-scroll" data-testid="table-scroll" dir={dir}>
      <table dir={dir}>{children}</table>
    </div>
  ),
  // Links in model output must not navigate the app window away.
  a: ({ href, children }) => (
    <a href={href} target="_blank" rel="noreferrer noopener">
      {children}
    </a>
  ),
};

// A lone $ is a dollar: normalizeMath has turned the $…$ that read as math into $$…$$.
const remarkPlugins: Options['remarkPlugins'] = [remarkGfm, [remarkMath, { singleDollarTextMath: false }]];

/**
 * KaTeX (with its stylesheet and fonts) and highlight.js: ~600 KB of the page's 1.4 MB of script, and 30–40 % of the
 * main thread's work in loading the page (measured in the tests' Chromium). They are loaded the first time a piece
 * of a reply holds math, or code to colour, not with the page: until they are (a moment: they come from kvdesk
 * itself), its math shows as its source and its code plain, as a streaming reply's last block shows it.
 */
interface Extras {
  /**
   * The rehype plugins of a piece with its code coloured, and of one without (see below). KaTeX first: a display
   * formula's <pre><code class="language-math"> is no code block to highlight. Directions last: each block gets its
   * own (a Hebrew paragraph right to left, an English one after it left to right), code and math left to right.
   */
  coloured: Options['rehypePlugins'];
  plain: Options['rehypePlugins'];
  /** highlight.js's common languages, as rehype-highlight sets them up, for FencedCode. */
  lowlight: typeof import('../lib/markdown-extras')['lowlight'];
}
let extras: Extras | null = null;
let extrasLoading: Promise<Extras> | null = null;
const extrasHeard = new Set<() => void>();

/** Loads KaTeX and highlight.js (once; again after a failed try); every piece waiting for them renders again. */
export function loadMarkdownExtras(): Promise<Extras> {
  extrasLoading ??= import('../lib/markdown-extras').then(
    ({ katex, sharedHighlight, lowlight }) => {
      extras = { coloured: [katex, sharedHighlight, rehypeDirection], plain: [katex, rehypeDirection], lowlight };
      for (const heard of extrasHeard) heard();
      return extras;
    },
    (err: unknown) => {
      extrasLoading = null;
      throw err;
    },
  );
  return extrasLoading;
}

/** KaTeX and highlight.js where they are loaded; `needed`: this piece shows math or coloured code, so load them. */
function useExtras(needed: boolean): Extras | null {
  const shown = useSyncExternalStore(
    (heard) => {
      extrasHeard.add(heard);
      return () => extrasHeard.delete(heard);
    },
    () => extras,
    () => extras,
  );
  useEffect(() => {
    // (A failure — kvdesk updated under the page, its old chunks gone — leaves the source shown.)
    if (needed && !shown) loadMarkdownExtras().catch(() => {});
  }, [needed, shown]);
  return shown;
}

/** Text that may hold math once normalizeMath has read it: `$$…$$`, or a ```math block. */
function mayHoldMath(normalized: string): boolean {
  return normalized.includes('$$') || normalized.includes('math');
}

/** A fence (```, ~~~) anywhere in the text: it may hold a code block whose language the highlighter colours. */
function mayHoldCode(text: string): boolean {
  return text.includes('```') || text.includes('~~~');
}

/**
 * Memoised on the text: earlier messages never re-parse while another streams. A reply that streams here renders as
 * its top-level blocks (see MarkdownBlocks), from then on; one that shows up finished (a chat opened, a row scrolled
 * into view) parses whole: one parse costs less than one per block (a 14 KB reply of 32 blocks: ~0.6×).
 */
export const Markdown = memo(function Markdown({ text, streaming = false }: { text: string; streaming?: boolean }) {
  const [byBlocks, setByBlocks] = useState(streaming);
  // Continued: it streams again, by blocks (this render is replaced at once by one that has it).
  if (streaming && !byBlocks) setByBlocks(true);
  return byBlocks ? <MarkdownBlocks text={text} streaming={streaming} /> : <MarkdownPiece text={text} />;
});

/**
 * A reply as its top-level blocks (lib/markdown-blocks.ts), each memoised: while it streams, only the last one, the
 * one growing, parses again at each frame, and a block with code renders once more when the reply goes past it (to
 * colour it); when the reply ends, only the last one does. The others keep their elements, so the end of a long
 * reply does not rebuild (and lay out again) all its text in one frame. The markup is the whole text's.
 */
export function MarkdownBlocks({ text, streaming = false }: { text: string; streaming?: boolean }) {
  const blocks = markdownBlocks(text);
  return (
    <>
      {blocks.map((block, i) => (
        // biome-ignore lint/suspicious/noArrayIndexKey: a block's place is its identity; only the last one grows
        <Fragment key={i}>
          {/* The line break react-markdown writes between blocks, so the markup is the whole text's. */}
          {i > 0 && '\n'}
          <MarkdownPiece
            text={block}
            openEnd={streaming && i === blocks.length - 1}
            highlight={(!streaming || i < blocks.length - 1) && mayHoldCode(block)}
          />
        </Fragment>
      ))}
    </>
  );
}

/** A fence's opening line at the margin: its run of ``` or ~~~, and its info string. */
const FENCE_OPEN = /^(`{3,}|~{3,})([^\n]*)$/;

/**
 * A piece that is one fenced code block (a model writing a file: the last block of a streaming reply, still open,
 * or a block of code between two paragraphs): its language and its code, as the Markdown parse reads them. Open,
 * it runs to the end of the piece; closed, only blank lines may follow its closing fence. Null for anything else,
 * and for what this reading does not follow (an indented fence, an info string with escapes or entities, CR line
 * ends, ```math, which is a formula) — those go through the parse.
 */
export function fencedCodeBlock(text: string): { lang: string; code: string } | null {
  if (text.includes('\r')) return null;
  const nl = text.indexOf('\n');
  const opening = FENCE_OPEN.exec(nl < 0 ? text : text.slice(0, nl));
  const fence = opening?.[1];
  const info = opening?.[2]?.trim() ?? '';
  if (!fence || (fence[0] === '`' && info.includes('`')) || /[\\&]/.test(info)) return null;
  const lang = info.split(/[ \t]/)[0] ?? '';
  if (lang === 'math') return null;
  let body = nl < 0 ? '' : text.slice(nl + 1);
  const closing = new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}[ \\t]*$`, 'm').exec(body);
  if (closing) {
    if (!/^[ \t\n]*$/.test(body.slice(closing.index + closing[0].length))) return null;
    body = body.slice(0, closing.index);
  }
  // The parse's value is the lines after the fence, less the last line end; the markup adds one line end.
  const value = body.endsWith('\n') ? body.slice(0, -1) : body;
  return { lang, code: value ? `${value}\n` : '' };
}

function hastToReact(nodes: HastLike[]): ReactNode[] {
  return nodes.map((node) =>
    node.type === 'text'
      ? (node.value ?? '')
      : createElement(
          node.tagName ?? 'span',
          { className: node.properties?.className?.join(' ') },
          ...hastToReact(node.children ?? []),
        ),
  );
}

/**
 * One fenced code block written without the Markdown parse (fencedCodeBlock): the markup the parse gives it, and
 * coloured as rehype-highlight colours it (a language it does not know gets its class, and no colours).
 */
function FencedCode({ lang, code, colour }: { lang: string; code: string; colour: boolean }) {
  const lowlight = useExtras(colour && lang !== '')?.lowlight;
  // Coloured once highlight.js is here.
  const coloured = colour && lang !== '' && lowlight !== undefined;
  let children: ReactNode[] = [code];
  if (coloured && code && lowlight.registered(lang))
    children = hastToReact(lowlight.highlight(lang, code).children as HastLike[]);
  const className = [coloured ? 'hljs' : '', lang ? `language-${lang}` : ''].filter(Boolean).join(' ');
  return (
    <CodeBlock node={{ type: 'element', children: [{ type: 'text', value: code }] }}>
      {createElement('code', { className: className || undefined }, ...children)}
    </CodeBlock>
  );
}

/** Runs `task` in a task of its own when the page is idle (at the latest after `ms`); returns its cancel. */
function whenIdle(task: () => void, ms: number): () => void {
  if (typeof requestIdleCallback === 'function') {
    const id = requestIdleCallback(task, { timeout: ms });
    return () => cancelIdleCallback(id);
  }
  const id = setTimeout(task, 0);
  return () => clearTimeout(id);
}

/**
 * `colour` as the piece shows it: a piece that shows up coloured is coloured at once (a finished reply opened: no
 * flash of plain code), but one that was plain takes its colours in an idle task of its own. Colouring a block
 * means running the highlighter over its code (a block with more than code in it: parsing it again with the
 * highlighter) and building its code anew (a 55-line block: ~15 ms here, with its layout, more the longer it is);
 * in the frame that ends a reply, or that takes the next block's first tokens, it added that to the frame's work.
 */
function useColourLater(colour: boolean): boolean {
  const [shown, setShown] = useState(colour);
  // Plain again (a reply continued: its last block grows again): at once.
  if (!colour && shown) setShown(false);
  useEffect(() => {
    if (colour && !shown) return whenIdle(() => setShown(true), 250);
  }, [colour, shown]);
  return colour && shown;
}

/**
 * Markdown of one piece of a reply, as a whole reply is rendered: `openEnd`, the piece's last line may still grow
 * (the piece a streaming reply ends with); `highlight`, its code is coloured (see plainPlugins): at once if it was
 * from the first render, in an idle task if it became so (useColourLater). A piece that is one fenced code block
 * skips the parse, which costs more the longer the block (7 ms a frame at 50 lines, 16 ms at 800, in Node): its
 * markup is written as the parse would give it, coloured by the highlighter the parse uses (FencedCode). The frame
 * that ends a reply whose last block is code then changes nothing in it; its colours come later.
 */
export const MarkdownPiece = memo(function MarkdownPiece({
  text,
  openEnd = false,
  highlight = !openEnd,
}: {
  text: string;
  openEnd?: boolean;
  highlight?: boolean;
}) {
  const coloured = useColourLater(highlight);
  const code = fencedCodeBlock(text);
  if (code) return <FencedCode lang={code.lang} code={code.code} colour={coloured} />;
  return <ParsedMarkdown text={text} openEnd={openEnd} colour={coloured} />;
});

/** A piece through the Markdown parse (`openEnd`: its math read as a streaming reply's; `colour`: code highlighted). */
export function ParsedMarkdown({ text, openEnd, colour }: { text: string; openEnd: boolean; colour: boolean }) {
  const normalized = normalizeMath(text, { streaming: openEnd });
  const loaded = useExtras(mayHoldMath(normalized) || (colour && mayHoldCode(text)));
  return (
    <ReactMarkdown
      remarkPlugins={remarkPlugins}
      // The last block of a streaming reply is not highlighted (plain): it renders again at every frame, and
      // highlighting a growing code block costs several times the rest (a 200-line block: ~4×), enough to make
      // frames long. A block is coloured once it is finished (the reply went on past it, or ended), in a task of its
      // own (see useColourLater). A block without a code fence is never given the highlighter (it would change
      // nothing there): its props stay as they were, and the end of the reply does not render it again.
      rehypePlugins={loaded ? (colour ? loaded.coloured : loaded.plain) : withoutExtras}
      components={components}
      // Raw HTML in a reply shows as the text the model wrote: react-markdown escapes it (never renders it);
      // skipping it would drop what the model wrote.
    >
      {normalized}
    </ReactMarkdown>
  );
}

/** The rehype plugins until KaTeX and highlight.js are loaded. */
const withoutExtras: Options['rehypePlugins'] = [rehypeDirection];

/** Markdown of a JSON-mode reply: one ```json block, fenced longer than any run of backticks in it. */
export function jsonBlock(text: string): string {
  return fenced(text, 'json');
}
