/**
 * Text cut to a length and text compared in search (pure, unit-tested): shared, so that the window and kvdesk cut
 * and search alike.
 *
 * A length here is JavaScript's: UTF-16 code units, as `String.length` and zod's `.max()` count them, so a text cut
 * to `max` passes a check of `.max(max)`.
 */

const graphemes =
  typeof Intl !== 'undefined' && 'Segmenter' in Intl
    ? new Intl.Segmenter(undefined, { granularity: 'grapheme' })
    : null;

/**
 * The start of `text`, at most `max` UTF-16 code units long, cut between two user-perceived characters (grapheme
 * clusters): never inside an emoji (its surrogate pair, a ZWJ sequence, a flag), nor between a letter and its marks.
 * A first character longer than `max` on its own (a letter under hundreds of marks) is cut between code points, so
 * the result is never a lone surrogate and is empty only where `text` is or `max` is 0.
 */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 0) return '';
  let end = 0;
  if (graphemes) {
    // Whether a cluster ends at a place depends on the characters before it and the one code point after it: the
    // first max + 2 units tell every place up to max (segmenting a long text whole would read all of it).
    for (const { index, segment } of graphemes.segment(text.slice(0, max + 2))) {
      if (index + segment.length > max) break;
      end = index + segment.length;
    }
  }
  if (end === 0) {
    // No segmenter, or a first cluster longer than `max`: between code points.
    end = max;
    const last = text.charCodeAt(end - 1);
    if (last >= 0xd800 && last <= 0xdbff) end--;
  }
  return text.slice(0, end);
}

/**
 * A text as search compares it: lower case, and in Unicode's composed form (NFC), so `é` typed as one code point
 * (U+00E9) finds an `e` followed by a combining acute (U+0301), and the other way round. Both sides of a search go
 * through it.
 */
export function searchForm(text: string): string {
  const lower = text.toLowerCase();
  // Nothing from U+0300 up (combining marks, and every character NFC may change, start there): it is NFC already,
  // and a chat of 50 MB of English is not read once more (normalize took 2.5 s of the host's thread on one).
  return MAY_CHANGE_IN_NFC.test(lower) ? lower.normalize('NFC') : lower;
}

const MAY_CHANGE_IN_NFC = /[\u0300-\uffff]/;
