/**
 * Text cut to a length and text compared in search (pure, unit-tested): shared, so that the window and kvdesk cut
 * and search alike.
 *
 * A length here is JavaScript's: UTF-16 code units, as `String.length` and zod's `.max()` count them, so a text cut
 * to `max` passes a check of `.max(max)`.
 */

/**
 * The grapheme segmenter, made at its first use: making one loads ICU's break rules (~25 ms), which every kvdesk
 * process (and the window) that loads this module paid at its start, most never cutting a text.
 */
let segmenter: Intl.Segmenter | null | undefined;
function graphemeSegmenter(): Intl.Segmenter | null {
  segmenter ??=
    typeof Intl !== 'undefined' && 'Segmenter' in Intl
      ? new Intl.Segmenter(undefined, { granularity: 'grapheme' })
      : null;
  return segmenter;
}

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
  const graphemes = graphemeSegmenter();
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

/**
 * `searchForm(text)` with, for each of its code units, the part of `text` it came from, so that a place found in the
 * search form is a place in the text (a find's highlight). Lower case and NFC change lengths (`İ` lowers to `i` and
 * a combining dot; `e` and U+0301 compose to one `é`): a unit of a part that changed maps to the whole part (one
 * code point lowered, one user-perceived character normalized), a unit that did not change to itself.
 */
export interface PlacedSearchForm {
  /** `searchForm(text)`. */
  text: string;
  /** Where in `text` (the original) the search form's units [from, to) begin and end. */
  place(from: number, to: number): [number, number];
}

export function placedSearchForm(text: string): PlacedSearchForm {
  // Below U+0300 only İ lowers to more than one unit, and NFC changes nothing: the same places.
  if (!/\u0130|[\u0300-\uffff]/.test(text)) {
    return { text: text.toLowerCase(), place: (from, to) => [from, to] };
  }
  // Without İ every code point lowers to as many units as it has (Unicode's only unconditional lower case of another
  // length; Final_Sigma keeps it): text in NFC already (Cyrillic, CJK, an English curly quote) keeps its places. The
  // walk below took 100 ms on 200 KB of Russian, at each key typed in the find bar.
  if (!text.includes('\u0130')) {
    const lower = text.toLowerCase();
    if (lower.normalize('NFC') === lower) return { text: lower, place: (from, to) => [from, to] };
  }
  // starts[i], ends[i]: the original part the search form's unit i comes from.
  let starts: number[] = [];
  let ends: number[] = [];
  // Lower case of the whole (Final_Sigma looks at the letters around a Σ), cut at each code point's own lower case:
  // outside Final_Sigma, which keeps the length, a code point lowers alone as it does in the whole.
  const lower = text.toLowerCase();
  let l = 0;
  let o = 0;
  for (const cp of text) {
    const n = cp.toLowerCase().length;
    for (let k = 0; k < n; k++) {
      starts.push(n === cp.length ? o + k : o);
      ends.push(n === cp.length ? o + k + 1 : o + cp.length);
    }
    l += n;
    o += cp.length;
  }
  if (l !== lower.length) return wholePlaces(text);
  // NFC of each character with the marks after it on its own: composition and the marks' reordering stay inside
  // one (checked below: where they did not, the whole text is one part).
  const want = lower.normalize('NFC');
  if (want === lower) return { text: lower, place: (from, to) => [starts[from] ?? 0, ends[to - 1] ?? 0] };
  let out = '';
  const s2: number[] = [];
  const e2: number[] = [];
  let at = 0;
  for (const [piece] of lower.matchAll(WITH_MARKS)) {
    const nfc = piece.normalize('NFC');
    if (nfc === piece) {
      for (let k = 0; k < piece.length; k++) {
        s2.push(starts[at + k] as number);
        e2.push(ends[at + k] as number);
      }
    } else {
      const from = starts[at] as number;
      const to = ends[at + piece.length - 1] as number;
      for (let k = 0; k < nfc.length; k++) {
        s2.push(from);
        e2.push(to);
      }
    }
    out += nfc;
    at += piece.length;
  }
  if (out !== want) return wholePlaces(text);
  starts = s2;
  ends = e2;
  return { text: out, place: (from, to) => [starts[from] ?? 0, ends[to - 1] ?? 0] };
}

/**
 * A code point and the marks that follow it (or marks alone, at the start), where NFC composes and reorders: a
 * combining mark, or a Hangul vowel or final consonant jamo (not marks, but they compose with the jamo before them).
 */
const WITH_MARKS =
  /[^\p{M}\u1160-\u11ff\ud7b0-\ud7ff][\p{M}\u1160-\u11ff\ud7b0-\ud7ff]*|[\p{M}\u1160-\u11ff\ud7b0-\ud7ff]+/gsu;

/** A text whose parts could not be told apart: every place found is the whole text (still found, marked coarsely). */
function wholePlaces(text: string): PlacedSearchForm {
  return { text: searchForm(text), place: () => [0, text.length] };
}
