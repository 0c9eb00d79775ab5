/**
 * The marks of a find (lib/find.ts) on the messages on screen, with the CSS Custom Highlight API: no change to the
 * page's nodes (React owns them), the current occurrence in its own colour (styles.css's ::highlight rules).
 */
import type { FindMatch } from '../lib/find';

/** The ranges of `query` (case aside) in an element's text, in document order (one text node each). */
export function rangesIn(el: Element, query: string): Range[] {
  const q = query.toLocaleLowerCase();
  if (!q.trim()) return [];
  const ranges: Range[] = [];
  const walker = el.ownerDocument.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = (node.nodeValue ?? '').toLocaleLowerCase();
    for (let at = text.indexOf(q); at >= 0; at = text.indexOf(q, at + q.length)) {
      const r = el.ownerDocument.createRange();
      r.setStart(node, at);
      r.setEnd(node, at + q.length);
      ranges.push(r);
    }
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
