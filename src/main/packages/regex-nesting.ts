/**
 * A cheap guard against tokenizer patterns that may backtrack for hours on some text (ReDoS): a group that repeats
 * while something inside it repeats a varying number of times, as `(a+)+b`, `(?:\s*\w)*` or `(a+){3}`, and a
 * repeat repeated (`a{1,}+`, which the tokenizer library reads as `(?:a{1,})+`). A tokenizer's regex
 * runs on the host's thread, and JavaScript cannot stop a match once it started. The real tokenizers' patterns
 * (GPT-2's, Llama 3's, Qwen's, GPT-4o's, DeepSeek's) repeat no such group. Alternatives that overlap under one repeat,
 * as `(a|a)*b`, are not caught.
 */

/** A group being read: where it opened, and whether anything inside it repeats a varying number of times. */
interface Frame {
  start: number;
  repeats: boolean;
}

/**
 * The quantifier at `at`: whether it lets what precedes it match more than once (`repeats`), whether it matches a
 * run whose length varies (`varies`: `{3}` is three in a row and `?` once or not, no run to split), and where it
 * ends. The tokenizer
 * library reads `{,n}` as `{0,n}`, and `X{n,m}+` as `(?:X{n,m})+`: a second repeat over the first.
 */
function quantifierAt(
  pattern: string,
  at: number,
): { repeats: boolean; varies: boolean; end: number; doubled: boolean } | null {
  const c = pattern[at];
  let end: number;
  let repeats: boolean;
  let varies: boolean;
  if (c === '*' || c === '+') {
    repeats = true;
    varies = true;
    end = at + 1;
  } else if (c === '?') {
    // Once or not: no run of matches to split in several ways.
    repeats = false;
    varies = false;
    end = at + 1;
  } else if (c === '{') {
    const m = /^\{(\d*)(,(\d*))?\}/.exec(pattern.slice(at));
    if (!m || (m[1] === '' && (m[2] === undefined || m[3] === ''))) return null;
    const min = m[1] === '' ? 0 : Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === '' ? Number.POSITIVE_INFINITY : Number(m[3]);
    repeats = max > 1;
    varies = max > 1 && min !== max;
    end = at + m[0].length;
  } else return null;
  // A lazy quantifier (`+?`) repeats as much.
  if (pattern[end] === '?') end += 1;
  // `X{1,}+`: the library repeats the repeat.
  const doubled = c === '{' && (pattern[end] === '+' || pattern[end] === '*');
  if (doubled) end += pattern[end + 1] === '?' ? 2 : 1;
  return { repeats: repeats || doubled, varies: varies || doubled, end, doubled };
}

/** Where an escape starting at `at` (a backslash) ends: `\p{L}`, `\u{1F600}` and `\k<name>` whole. */
function escapeEnd(pattern: string, at: number): number {
  const c = pattern[at + 1];
  if ((c === 'p' || c === 'P' || c === 'u' || c === 'x') && pattern[at + 2] === '{') {
    const close = pattern.indexOf('}', at + 3);
    return close < 0 ? pattern.length : close + 1;
  }
  if (c === 'k' && pattern[at + 2] === '<') {
    const close = pattern.indexOf('>', at + 3);
    return close < 0 ? pattern.length : close + 1;
  }
  return Math.min(at + 2, pattern.length);
}

/** Where a character class starting at `at` (`[`) ends (after its `]`). */
function classEnd(pattern: string, at: number): number {
  let i = at + 1;
  if (pattern[i] === '^') i += 1;
  // A `]` first is a literal in most engines' classes.
  if (pattern[i] === ']') i += 1;
  while (i < pattern.length && pattern[i] !== ']') i = pattern[i] === '\\' ? escapeEnd(pattern, i) : i + 1;
  return Math.min(i + 1, pattern.length);
}

/** Where a group's body starts after its `(` at `at`: past `?:`, `?=`, `?!`, `?<=`, `?<!`, `?<name>`, `?i:`. */
function groupBodyStart(pattern: string, at: number): number {
  let i = at + 1;
  if (pattern[i] !== '?') return i;
  i += 1;
  const c = pattern[i];
  if (c === ':' || c === '=' || c === '!') return i + 1;
  if (c === '<') {
    if (pattern[i + 1] === '=' || pattern[i + 1] === '!') return i + 2;
    const close = pattern.indexOf('>', i);
    return close < 0 ? pattern.length : close + 1;
  }
  // Inline flags: `(?i:…)`, `(?-i:…)`.
  while (i < pattern.length && /[a-zA-Z-]/.test(pattern[i] as string)) i += 1;
  return pattern[i] === ':' ? i + 1 : i;
}

/**
 * The offset of the first group in `pattern` that repeats while something inside it repeats, or undefined when
 * there is none.
 */
export function nestedRepeat(pattern: string): number | undefined {
  const frames: Frame[] = [{ start: 0, repeats: false }];
  let i = 0;
  while (i < pattern.length) {
    const c = pattern[i];
    let atomEnd: number;
    let closed: Frame | undefined;
    if (c === '\\') atomEnd = escapeEnd(pattern, i);
    else if (c === '[') atomEnd = classEnd(pattern, i);
    else if (c === '(') {
      frames.push({ start: i, repeats: false });
      i = groupBodyStart(pattern, i);
      continue;
    } else if (c === ')') {
      closed = frames.length > 1 ? frames.pop() : undefined;
      atomEnd = i + 1;
    } else if (c === '|' || c === '^' || c === '$') {
      i += 1;
      continue;
    } else atomEnd = i + 1;
    const q = quantifierAt(pattern, atomEnd);
    const frame = frames[frames.length - 1] as Frame;
    // `X{2,}+`: a repeat of a varying repeat, as a group would be.
    if (q?.doubled && (q.varies || closed?.repeats)) return closed ? closed.start : i;
    if (closed) {
      if (q?.repeats && closed.repeats) return closed.start;
      if (closed.repeats || q?.varies) frame.repeats = true;
    } else if (q?.varies) frame.repeats = true;
    i = q ? q.end : atomEnd;
  }
  return undefined;
}
