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
import { searchForm } from '../../shared/text';

/** One occurrence: the message (its place in the thread and its id), and which of that message's it is. */
export interface FindMatch {
  index: number;
  messageId: string;
  nth: number;
}

/** The most occurrences counted; past it the count says "10000+". */
export const MAX_MATCHES = 10_000;

/**
 * Where `word` occurs in `text`, both in their search form (shared/text.ts's searchForm: lower case, NFC), the
 * occurrences not overlapping: the chat list's search and the find compare text alike, so an accent typed composed
 * or decomposed finds the other.
 */
export function* occurrences(text: string, word: string): Generator<number> {
  if (!word) return;
  for (let at = text.indexOf(word); at !== -1; at = text.indexOf(word, at + word.length)) yield at;
}

/** The search form of `query` (what the find looks for); null for a blank query. */
export function queryForm(query: string): string | null {
  return query.trim() ? searchForm(query) : null;
}

/**
 * A message's text in search's form, kept while the message object is unchanged (as the chat list's haystacks):
 * each key typed in the find reads the thread's text once, not lower-cased and composed again.
 */
const forms = new WeakMap<StoredMessage, string>();
function contentForm(m: StoredMessage): string {
  let form = forms.get(m);
  if (form === undefined) {
    form = searchForm(m.content);
    forms.set(m, form);
  }
  return form;
}

/** Every occurrence of `query` (case and Unicode's form aside) in the messages' text, in reading order. */
export function findMatches(messages: readonly StoredMessage[], query: string): FindMatch[] {
  const word = queryForm(query);
  if (!word) return [];
  const out: FindMatch[] = [];
  for (const [index, m] of messages.entries()) {
    if (m.role === 'system') continue;
    let nth = 0;
    for (const _ of occurrences(contentForm(m), word)) {
      if (out.length === MAX_MATCHES) return out;
      out.push({ index, messageId: m.id, nth: nth++ });
    }
  }
  return out;
}
