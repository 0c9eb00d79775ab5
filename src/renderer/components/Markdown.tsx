/**
 * Assistant text as Markdown: GFM (tables, lists, task lists), code blocks highlighted by their language (the
 * common ones highlight.js knows) with a copy button on each, and math typeset by KaTeX (`$$…$$`, `\[…\]`,
 * `\(…\)`, `$…$` where it reads as math, and ```math blocks; see lib/math.ts). A formula KaTeX cannot read shows
 * its source, in the error colour.
 */
import 'katex/dist/katex.min.css';
import { Fragment, memo, type ReactNode, useEffect, useState } from 'react';
import ReactMarkdown, { type Components, type Options } from 'react-markdown';
import rehypeHighlight from 'rehype-highlight';
import rehypeKatex from 'rehype-katex';
import remarkGfm from 'remark-gfm';
import remarkMath from 'remark-math';
import { fenced } from '../lib/fence';
import { capitalized } from '../lib/format';
import { markdownBlocks } from '../lib/markdown-blocks';
import { normalizeMath } from '../lib/math';

interface HastLike {
  type: string;
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
}: {
  text: string;
  /** What it copies, for its name ("Copy reply 3") and what is said once it has ("Reply 3 copied"). */
  what: string;
  label?: string;
  testId?: string;
}) {
  const [done, setDone] = useState(false);
  /** Copies made: each one's words are a new node in the live region, so a second copy is said again. */
  const [copies, setCopies] = useState(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: each copy shows "copied" for its full time
  useEffect(() => {
    if (!done) return;
    const timer = setTimeout(() => setDone(false), 1200);
    return () => clearTimeout(timer);
  }, [done, copies]);
  return (
    <>
      <button
        type="button"
        className="copy small"
        data-testid={testId}
        aria-label={`Copy ${what}`}
        onClick={() => {
          void navigator.clipboard?.writeText(text).then(
            () => {
              setDone(true);
              setCopies((n) => n + 1);
            },
            () => {},
          );
        }}
      >
        {done ? 'copied' : label}
      </button>
      {/* "copied" said politely, by a region of this button's own: only its press speaks there. */}
      <span className="sr-only" role="status">
        {done && <span key={copies}>{`${capitalized(what)} copied`}</span>}
      </span>
    </>
  );
}

function CodeBlock({ node, children }: { node?: unknown; children?: ReactNode }) {
  return (
    <div className="code-block">
      <CopyButton text={textOf(node as HastLike).replace(/\n$/, '')} what="code" testId="code-copy" />
      <pre>{children}</pre>
    </div>
  );
}

const components: Components = {
  pre: CodeBlock,
  // A table wider than the reply scrolls sideways in its own box (its cells keep their words whole).
  table: ({ children }) => (
    <div className="table-scroll" data-testid="table-scroll">
      <table>{children}</table>
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
const katex: [typeof rehypeKatex, Parameters<typeof rehypeKatex>[0]] = [
  rehypeKatex,
  { strict: 'ignore', maxExpand: 1000, maxSize: 50 },
];
// KaTeX first: a display formula's <pre><code class="language-math"> is no code block to highlight.
const rehypePlugins: Options['rehypePlugins'] = [katex, [rehypeHighlight, { detect: false }]];
/**
 * While a reply streams, its code is not highlighted: its last block renders again at every frame, and
 * highlighting a growing code block costs several times the rest (a 200-line block: ~4×), enough to make frames
 * long; the colours come when the reply ends.
 */
const streamingPlugins: Options['rehypePlugins'] = [katex];

/**
 * Memoised on the text: earlier messages never re-parse while another streams. A streaming reply renders as its
 * top-level blocks (lib/markdown-blocks.ts), each memoised: only the last one, the one growing, parses again at
 * each frame.
 */
export const Markdown = memo(function Markdown({ text, streaming = false }: { text: string; streaming?: boolean }) {
  if (!streaming) return <MarkdownPiece text={text} />;
  const blocks = markdownBlocks(text);
  return (
    <>
      {blocks.map((block, i) => (
        // biome-ignore lint/suspicious/noArrayIndexKey: a block's place is its identity; only the last one grows
        <Fragment key={i}>
          {/* The line break react-markdown writes between blocks, so the markup is the whole text's. */}
          {i > 0 && '\n'}
          <MarkdownPiece text={block} streaming openEnd={i === blocks.length - 1} />
        </Fragment>
      ))}
    </>
  );
});

/**
 * Markdown of one piece of a reply, as a whole reply is rendered: `streaming` without highlighting (see
 * streamingPlugins); `openEnd`, the piece's last line may still grow (the piece a streaming reply ends with).
 */
export const MarkdownPiece = memo(function MarkdownPiece({
  text,
  streaming = false,
  openEnd = streaming,
}: {
  text: string;
  streaming?: boolean;
  openEnd?: boolean;
}) {
  return (
    <ReactMarkdown
      remarkPlugins={remarkPlugins}
      rehypePlugins={streaming ? streamingPlugins : rehypePlugins}
      components={components}
      // Raw HTML in a reply shows as the text the model wrote: react-markdown escapes it (never renders it);
      // skipping it would drop what the model wrote.
    >
      {normalizeMath(text, { streaming: openEnd })}
    </ReactMarkdown>
  );
});

/** Markdown of a JSON-mode reply: one ```json block, fenced longer than any run of backticks in it. */
export function jsonBlock(text: string): string {
  return fenced(text, 'json');
}
