/**
 * Find in the open chat (Ctrl/Cmd+F): where a word occurs in the thread's messages. The thread is virtualized
 * (only rows on screen are in the page), so the browser's own find cannot see most of it: the occurrences are
 * counted in the messages' text here, the one shown is scrolled to, and the rows on screen get their occurrences
 * marked (components/find-marks.ts). Pure, for the store's tests.
 *
 * Counting reads a message's text as written (a reply's Markdown source); marking reads the page's text of the
 * message. They agree on plain words; an occurrence the Markdown hides (in a link's address, split by emphasis)
 * is counted but not marked.
 */
import type { StoredMessage } from '../../shared/api';

/** One occurrence: the message (its place in the thread and its id), and which of that message's it is. */
export interface FindMatch {
  index: number;
  messageId: string;
  nth: number;
}

/** The most occurrences counted; past it the count says "10000+". */
export const MAX_MATCHES = 10_000;

/**
 * The pattern of `query`: its characters as they are, case aside (Unicode's simple case folding, which keeps
 * every text's length: positions found are positions in the text itself); null for a blank query.
 */
export function queryPattern(query: string): RegExp | null {
  if (!query.trim()) return null;
  return new RegExp(query.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'giu');
}

/** Every occurrence of `query` (case aside) in the messages' text, in reading order. */
export function findMatches(messages: readonly StoredMessage[], query: string): FindMatch[] {
  const pattern = queryPattern(query);
  if (!pattern) return [];
  const out: FindMatch[] = [];
  for (const [index, m] of messages.entries()) {
    if (m.role === 'system') continue;
    let nth = 0;
    for (const _ of m.content.matchAll(pattern)) {
      if (out.length === MAX_MATCHES) return out;
      out.push({ index, messageId: m.id, nth: nth++ });
    }
  }
  return out;
}
