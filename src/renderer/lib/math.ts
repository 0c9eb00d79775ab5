/**
 * Math in a model's Markdown, made readable for remark-math (which, as set up in Markdown.tsx, reads `$$…$$` only:
 * a lone `$` is a dollar). Models write math in LaTeX's delimiters as often as in Markdown's:
 *
 * - `\[ … \]` (display) becomes a `$$` block on its own lines; `\( … \)` (inline) becomes `$$…$$` in the line;
 * - `$…$` becomes `$$…$$` where it reads as math by pandoc's rule: the opening `$` has a non-space right after it,
 *   the closing one a non-space right before it and no digit right after it (so "$5 and $10" stays money); a
 *   shell's variable in a path (`$HOME/bin:$PATH`) and a stretch over 300 characters are not math.
 *
 * Code is left as written: fenced blocks (``` or ~~~) and inline code spans. A delimiter not yet closed (a reply
 * still streaming) stays text until its close arrives.
 */

/** A fence line: its container's prefix (indentation, `>` of quotes), then ``` or ~~~ (three or more). */
const FENCE = /^((?:[ \t]*>)*[ \t]*)(`{3,}|~{3,})/;

/** An open code fence: its marker, and its indentation (after its quotes' `>`), for where its close may be. */
export interface OpenFence {
  marker: string;
  indent: number;
}

const indentOf = (prefix: string) => (prefix.match(/[ \t]*$/) as RegExpMatchArray)[0].replace(/\t/g, '    ').length;

/** The code fence open after `line`, given the one open before it (null: none): opened, closed, or as it was. */
export function fenceAfter(fence: OpenFence | null, line: string): OpenFence | null {
  const m = FENCE.exec(line);
  const marker = m?.[2];
  if (fence !== null) {
    // A closing fence: the same character, at least as long, nothing after it, and indented at most 3 spaces
    // within its container (CommonMark; one indented more is a line of the code). The container is not tracked
    // here: an opening indented 0–3 is taken to be at the container's edge (top level, or a list item's text
    // written flush), a deeper one (nested in a list) lets its close sit up to 3 spaces past it.
    const closes = indentOf(m?.[1] ?? '') <= (fence.indent <= 3 ? 3 : fence.indent + 3);
    const closing =
      marker &&
      marker[0] === fence.marker[0] &&
      marker.length >= fence.marker.length &&
      !line.slice(m[0].length).trim() &&
      closes;
    return closing ? null : fence;
  }
  // A backtick fence's info string holds no backtick (else it is inline code).
  if (marker && !(marker[0] === '`' && line.slice(m[0].length).includes('`'))) {
    return { marker, indent: indentOf(m[1] ?? '') };
  }
  return null;
}

/** The text with math in `$$` delimiters, code untouched. */
export function normalizeMath(text: string, { streaming = false } = {}): string {
  // Quick exit: nothing that could be math.
  if (!text.includes('$') && !text.includes('\\(') && !text.includes('\\[')) return text;
  const out: string[] = [];
  let prose: string[] = [];
  let fence: OpenFence | null = null;
  // A reply still being written: its last line may go on (`$$a$$` then " is the area"), so it is not yet a line of
  // only $$…$$.
  const flush = (last = false) => {
    if (prose.length > 0) out.push(convertProse(prose.join('\n'), last && streaming));
    prose = [];
  };
  for (const line of text.split('\n')) {
    const next = fenceAfter(fence, line);
    if (fence !== null || next !== null) {
      // A line of code, or a fence (opening one: the prose before it ends).
      if (fence === null) flush();
      out.push(line);
    } else prose.push(line);
    fence = next;
  }
  flush(true);
  return out.join('\n');
}

/**
 * Inline code spans (CommonMark's rule, within a paragraph): a run of backticks no backtick touches, its text,
 * the same run.
 */
const CODE_SPAN = /(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n)[\s\S])*?[^`]\1(?!`)/g;
/** `$$…$$` already there: math as it is. */
const DISPLAY_DOLLARS = /\$\$[\s\S]*?\$\$/g;
/** A place kept while the math is read: private-use characters around its number. */
const PLACEHOLDER = /\uE000(\d+)\uE001/g;
/**
 * `\[ … \]`: an opening and a closing not escaped themselves (an even run of backslashes before each: `\\[2pt]`,
 * LaTeX's line break with space, opens nothing).
 */
const DISPLAY = /(?<!\\)((?:\\\\)*)\\\[([\s\S]+?)(?<!\\)((?:\\\\)*)\\\]/g;
/** `\( … \)`, within a paragraph (no blank line inside). */
const INLINE = /(?<!\\)((?:\\\\)*)\\\(((?:(?!\n[ \t]*\n)[\s\S])+?)(?<!\\)((?:\\\\)*)\\\)/g;
/** A line's container prefix: quotes' `>`, indentation, and a list item's marker (its text's indentation). */
const CONTAINER = /^((?:[ \t]*>)*[ \t]*)((?:[-*+]|\d{1,9}[.)])[ \t]+)?/;

/**
 * A line that is only `$$…$$` (in its quotes): display math, as a model that writes it so means it (remark-math
 * reads `$$` in a line as inline math).
 */
const DISPLAY_LINE = /^((?: {0,3}>[ \t]?)* {0,3})\$\$([^$\n]*[^$\s][^$\n]*)\$\$[ \t]*$/gm;

/** `openEnd`: the prose's last line may still grow (a reply being written). */
function convertProse(prose: string, openEnd = false): string {
  const text = prose.replace(DISPLAY_LINE, (m: string, pre: string, body: string, at: number) =>
    openEnd && at + m.length === prose.length ? m : `${pre}$$\n${pre}${body.trim()}\n${pre}$$`,
  );
  const kept: string[] = [];
  const keep = (m: string) => `\uE000${kept.push(m) - 1}\uE001`;
  // Code spans and $$ math out of the way.
  let s = text.replace(CODE_SPAN, keep).replace(DISPLAY_DOLLARS, keep);
  // Display math as a $$ block on lines of its own, in the list item or quote its opening is in.
  s = s.replace(DISPLAY, (_m, pre: string, body: string, inner: string, at: number, whole: string) => {
    const lineStart = whole.lastIndexOf('\n', at) + 1;
    const c = CONTAINER.exec(whole.slice(lineStart, at)) as RegExpExecArray;
    const indent = `${c[1] ?? ''}${' '.repeat((c[2] ?? '').length)}`;
    const lines = `${body}${inner}`
      .trim()
      .split('\n')
      .map((l) => `${indent}${l.trim()}`);
    return `${pre}\n${indent}$$\n${lines.join('\n')}\n${indent}$$\n${indent}`;
  });
  s = s.replace(INLINE, (_m, pre: string, body: string, inner: string) => `${pre}$$${`${body}${inner}`.trim()}$$`);
  // Single dollars by pandoc's rule (an escaped \$ and a $$ already there are not openers). Two more, for what
  // chats are full of: a shell's variable in a path or a list (`$HOME/bin:$PATH`) opens nothing, and a stretch of
  // more than 300 characters between two dollars is prose that has two of them, not math.
  s = s.replace(
    /(?<![\\$])\$(?=[^\s$])(?![A-Z_][A-Z0-9_]*(?:\/[a-z.~]|:\$))((?:\\\$|[^$\n]){0,299}?[^\s\\$])\$(?![\d$])/g,
    (_, body: string) => `$$${body}$$`,
  );
  // What was kept, back in its place (a kept $$ block may hold a kept code span's mark: twice).
  const restore = (t: string) => t.replace(PLACEHOLDER, (_, i: string) => kept[Number(i)] as string);
  return restore(restore(s));
}
