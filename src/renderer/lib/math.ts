/**
 * Math in a model's Markdown, made readable for remark-math (which, as set up in Markdown.tsx, reads `$$…$$` only:
 * a lone `$` is a dollar). Models write math in LaTeX's delimiters as often as in Markdown's:
 *
 * - `\[ … \]` (display) becomes a `$$` block on its own lines; `\( … \)` (inline) becomes `$$…$$` in the line;
 * - `$…$` becomes `$$…$$` where it reads as math by pandoc's rule: the opening `$` has a non-space right after it,
 *   the closing one a non-space right before it and no digit right after it (so "$5 and $10" stays money).
 *
 * Code is left as written: fenced blocks (``` or ~~~) and inline code spans. A delimiter not yet closed (a reply
 * still streaming) stays text until its close arrives.
 */

const FENCE = /^ {0,3}(`{3,}|~{3,})/;

/** The text with math in `$$` delimiters, code untouched. */
export function normalizeMath(text: string): string {
  // Quick exit: nothing that could be math.
  if (!text.includes('$') && !text.includes('\\(') && !text.includes('\\[')) return text;
  const out: string[] = [];
  let prose: string[] = [];
  let fence: string | null = null;
  const flush = () => {
    if (prose.length > 0) out.push(convertProse(prose.join('\n')));
    prose = [];
  };
  for (const line of text.split('\n')) {
    if (fence !== null) {
      out.push(line);
      // A closing fence: the same character, at least as long, nothing after it.
      const m = FENCE.exec(line);
      if (
        m &&
        (m[1] as string)[0] === fence[0] &&
        (m[1] as string).length >= fence.length &&
        !line.slice(m[0].length).trim()
      ) {
        fence = null;
      }
      continue;
    }
    const m = FENCE.exec(line);
    // A backtick fence's info string holds no backtick (else it is inline code).
    if (m && !((m[1] as string)[0] === '`' && line.slice(m[0].length).includes('`'))) {
      flush();
      out.push(line);
      fence = m[1] as string;
      continue;
    }
    prose.push(line);
  }
  flush();
  return out.join('\n');
}

/** Inline code spans: a run of backticks, then the same run (CommonMark's rule, within the prose given). */
const CODE_SPAN = /(`+)[\s\S]*?[^`]\1(?!`)/g;
/** A code span's place while the math is read: private-use characters around its number. */
const PLACEHOLDER = /\uE000(\d+)\uE001/g;

function convertProse(text: string): string {
  const spans: string[] = [];
  // Code spans out of the way, each as its number between two private-use characters.
  let s = text.replace(CODE_SPAN, (m) => `\uE000${spans.push(m) - 1}\uE001`);
  // Display math: \[ … \] over any lines, as a $$ block.
  s = s.replace(/\\\[([\s\S]+?)\\\]/g, (_, body: string) => `\n$$\n${body.trim()}\n$$\n`);
  // Inline math: \( … \) within a paragraph (no blank line inside).
  s = s.replace(/\\\(((?:(?!\n\s*\n)[\s\S])+?)\\\)/g, (_, body: string) => `$$${body.trim()}$$`);
  // Single dollars by pandoc's rule (an escaped \$ and a $$ already there are not openers).
  s = s.replace(/(?<![\\$])\$(?=[^\s$])((?:\\\$|[^$\n])*?[^\s\\$])\$(?![\d$])/g, (_, body: string) => `$$${body}$$`);
  return s.replace(PLACEHOLDER, (_, i: string) => spans[Number(i)] as string);
}
