/**
 * A streaming reply's Markdown, split into top-level blocks that render alone as they render together: the chat
 * view then parses only the last block again as tokens arrive, and memoises the others. Parsed whole at every
 * frame, a reply cost each frame 10 ms at 8 KB and 32 ms at 32 KB (React's server renderer in Node).
 *
 * A split falls at a blank line outside fenced code and display math (`$$`, `\[`), and only before a line that
 * starts at the margin with something other than a list item: a list that a blank line runs through stays whole
 * (split, it would render as two, spaced otherwise), and an indented line may belong to the block before it. A
 * reply that defines a link reference or a footnote is not split. The blocks joined are the text.
 */
import { fenceAfter, type OpenFence } from './math';

/** A link reference's or footnote's definition (`[r]: https://…`, `[^1]: …`). */
const DEFINITION = /^ {0,3}\[[^\]\n]+\]:/m;
/** A line a block may start with: at the margin, no list item (a blank line ends a quote: the next `>` opens another). */
const STARTS_BLOCK = /^(?!\s|[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$))\S/;

export function markdownBlocks(text: string): string[] {
  // A link reference or footnote defined anywhere serves every block (and footnotes gather at the end): such a
  // reply stays whole.
  if (DEFINITION.test(text)) return [text];
  const blocks: string[] = [];
  let start = 0;
  let fence: OpenFence | null = null;
  // `$$` seen an odd number of times, and `\[` not yet closed: display math, which may hold blank lines.
  let dollars = false;
  let brackets = 0;
  let blankBefore = false;
  let at = 0;
  for (const line of text.split('\n')) {
    if (blankBefore && fence === null && !dollars && brackets === 0 && STARTS_BLOCK.test(line)) {
      blocks.push(text.slice(start, at));
      start = at;
    }
    const next = fenceAfter(fence, line);
    if (fence === null && next === null) {
      if (count(line, '$$') % 2 === 1) dollars = !dollars;
      brackets = Math.max(0, brackets + count(line, '\\[') - count(line, '\\]'));
    }
    fence = next;
    blankBefore = line.trim() === '';
    at += line.length + 1;
  }
  blocks.push(text.slice(start));
  return blocks;
}

function count(line: string, what: string): number {
  return line.split(what).length - 1;
}
