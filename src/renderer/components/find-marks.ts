/**
 * The marks of a find (lib/find.ts) on the messages on screen, with the CSS Custom Highlight API: no change to the
 * page's nodes (React owns them), the current occurrence in its own colour (styles.css's ::highlight rules).
 */
import { placedSearchForm } from '../../shared/text';
import { type FindMatch, occurrences, queryForm } from '../lib/find';

/**
 * The ranges of `query` (case and Unicode's form aside, as lib/find.ts counts them) in an element's text as a
 * person reads it: its text nodes one after the other (an occurrence may span several: emphasis, a highlighted code
 * token), without what is not read as the text (KaTeX's MathML copy of a formula, buttons).
 */
export function rangesIn(el: Element, query: string): Range[] {
  const word = queryForm(query);
  if (!word) return [];
  const doc = el.ownerDocument;
  const nodes: Text[] = [];
  const starts: number[] = [];
  let text = '';
  const walker = doc.createTreeWalker(el, NodeFilter.SHOW_TEXT, {
    acceptNode: (n) =>
      n.parentElement?.closest('.katex-mathml, button') ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT,
  });
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    starts.push(text.length);
    nodes.push(node as Text);
    text += node.nodeValue ?? '';
  }
  /** The text node and offset of a position in the joined text (the last node starting at or before it). */
  const at = (pos: number): [Text, number] => {
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((starts[mid] as number) <= pos) lo = mid;
      else hi = mid - 1;
    }
    return [nodes[lo] as Text, pos - (starts[lo] as number)];
  };
  const ranges: Range[] = [];
  // Found in the search form, marked on the text's own characters (the form's places mapped back).
  const form = placedSearchForm(text);
  for (const found of occurrences(form.text, word)) {
    const [from, to] = form.place(found, found + word.length);
    const r = doc.createRange();
    r.setStart(...at(from));
    r.setEnd(...at(to));
    ranges.push(r);
  }
  return ranges;
}

const ALL = 'kvdesk-find';
const CURRENT = 'kvdesk-find-current';

/**
 * Marks the occurrences in the messages on screen under `root` (their text: `[data-testid="message-text"]`),
 * `current` apart; returns the current occurrence's range when it is on screen. Without the Highlight API
 * (an old browser), nothing is marked.
 */
export function markMatches(root: Element, query: string, current: FindMatch | null): Range | null {
  let found: Range | null = null;
  const others: Range[] = [];
  for (const msg of root.querySelectorAll<HTMLElement>('[data-message-id]')) {
    const text = msg.querySelector('[data-testid="message-text"]');
    if (!text) continue;
    const ranges = rangesIn(text, query);
    const mine = current && msg.dataset.messageId === current.messageId ? current.nth : -1;
    ranges.forEach((r, i) => {
      if (i === mine) found = r;
      else others.push(r);
    });
  }
  const highlights = typeof CSS !== 'undefined' ? CSS.highlights : undefined;
  if (highlights) {
    highlights.set(ALL, new Highlight(...others));
    if (found) highlights.set(CURRENT, new Highlight(found));
    else highlights.delete(CURRENT);
  }
  return found;
}

/** Takes every mark away (the find bar closed). */
export function clearMarks(): void {
  if (typeof CSS === 'undefined' || !CSS.highlights) return;
  CSS.highlights.delete(ALL);
  CSS.highlights.delete(CURRENT);
}
