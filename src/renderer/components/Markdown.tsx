/** Assistant text as Markdown (GFM tables, lists, code) with a copy button on every code block. */
import { memo, type ReactNode, useState } from 'react';
import ReactMarkdown, { type Components } from 'react-markdown';
import remarkGfm from 'remark-gfm';
import { fenced } from '../lib/fence';

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

export function CopyButton({ text, label = 'copy', testId }: { text: string; label?: string; testId?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      className="copy small"
      data-testid={testId}
      onClick={() => {
        void navigator.clipboard?.writeText(text).then(
          () => {
            setDone(true);
            setTimeout(() => setDone(false), 1200);
          },
          () => {},
        );
      }}
    >
      {done ? 'copied' : label}
    </button>
  );
}

function CodeBlock({ node, children }: { node?: unknown; children?: ReactNode }) {
  return (
    <div className="code-block">
      <CopyButton text={textOf(node as HastLike).replace(/\n$/, '')} testId="code-copy" />
      <pre>{children}</pre>
    </div>
  );
}

const components: Components = {
  pre: CodeBlock,
  // Links in model output must not navigate the app window away.
  a: ({ href, children }) => (
    <a href={href} target="_blank" rel="noreferrer noopener">
      {children}
    </a>
  ),
};

const plugins = [remarkGfm];

/** Memoised on the text: earlier messages never re-parse while another streams. */
export const Markdown = memo(function Markdown({ text }: { text: string }) {
  return (
    <ReactMarkdown remarkPlugins={plugins} components={components} skipHtml>
      {text}
    </ReactMarkdown>
  );
});

/** Markdown of a JSON-mode reply: one ```json block, fenced longer than any run of backticks in it. */
export function jsonBlock(text: string): string {
  return fenced(text, 'json');
}
