/**
 * A cheap guard against tokenizer patterns that may backtrack for hours on some text (ReDoS): a group that repeats
 * while something inside it repeats a varying number of times, as `(a+)+b`, `(?:\s*\w)*` or `(a+){3}`, and a
 * repeat repeated (`a{1,}+`, which the tokenizer library reads as `(?:a{1,})+`). A tokenizer's regex
 * runs on the host's thread, and JavaScript cannot stop a match once it started. The real tokenizers' patterns
 * (GPT-2's, Llama 3's, Qwen's, GPT-4o's, DeepSeek's) repeat no such group. Alternatives that overlap under one repeat,
 * as `(a|a)*b`, backtrack so too: overlappingRepeat finds those.
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

/**
 * A pattern read as a tree, for overlappingRepeat: alternatives of sequences of atoms, each atom with its repeat
 * count. A character atom keeps its source (a literal, an escape, a class or `.`) to be tried on characters; a
 * backreference (`\1`, `\k<name>`) may match anything.
 */
type Atom =
  | { k: 'char'; source: string; caseless: boolean }
  | { k: 'group'; alt: Alt; start: number; around: boolean }
  | { k: 'empty' }
  | { k: 'anything' };
interface Item {
  atom: Atom;
  min: number;
  max: number;
}
type Alt = Item[][];

/** Reads a pattern into a tree from `i`: alt() up to the closing `)` of the group it is in, or the end. */
class TreeReader {
  i = 0;
  constructor(readonly pattern: string) {}

  alt(caseless: boolean): Alt {
    const branches: Item[][] = [[]];
    while (this.i < this.pattern.length && this.pattern[this.i] !== ')') {
      if (this.pattern[this.i] === '|') {
        this.i += 1;
        branches.push([]);
        continue;
      }
      const atom = this.atom(caseless);
      const q = quantifierAt(this.pattern, this.i);
      let min = 1;
      let max = 1;
      if (q) {
        const c = this.pattern[this.i];
        // Only whether it may match nothing and whether it repeats matter here.
        if (c === '*' || c === '?' || /^\{(0*|0*,\d*)\}/.test(this.pattern.slice(this.i))) min = 0;
        if (q.repeats) max = Number.POSITIVE_INFINITY;
        this.i = q.end;
      }
      (branches[branches.length - 1] as Item[]).push({ atom, min, max });
    }
    return branches;
  }

  atom(caseless: boolean): Atom {
    const p = this.pattern;
    const at = this.i;
    const c = p[at];
    if (c === '(') {
      const body = groupBodyStart(p, at);
      const head = p.slice(at + 1, body);
      const around = /^\?(=|!|<=|<!)$/.test(head);
      // Inline flags: `(?i:…)` reads its letters either case, `(?-i:…)` not.
      const flags = /^\?([a-zA-Z]*)(?:-([a-zA-Z]*))?:$/.exec(head);
      const inner = flags ? (caseless || flags[1]?.includes('i') === true) && !flags[2]?.includes('i') : caseless;
      this.i = body;
      const alt = this.alt(inner);
      if (p[this.i] === ')') this.i += 1;
      return { k: 'group', alt, start: at, around };
    }
    if (c === '^' || c === '$') {
      this.i += 1;
      return { k: 'empty' };
    }
    if (c === '[') {
      this.i = classEnd(p, at);
      return { k: 'char', source: p.slice(at, this.i), caseless };
    }
    if (c === '\\') {
      this.i = escapeEnd(p, at);
      const e = p[at + 1] ?? '';
      if (/[bBAzZG]/.test(e)) return { k: 'empty' };
      if (/[1-9k]/.test(e)) return { k: 'anything' };
      return { k: 'char', source: p.slice(at, this.i), caseless };
    }
    this.i = at + ((p.codePointAt(at) ?? 0) > 0xffff ? 2 : 1);
    return { k: 'char', source: p.slice(at, this.i), caseless };
  }
}

/** Whether an atom or a sequence may match nothing. */
const atomNullable = (a: Atom): boolean =>
  a.k === 'empty' || (a.k === 'group' && (a.around || a.alt.some(seqNullable)));
const seqNullable = (seq: Item[]): boolean => seq.every((it) => it.min === 0 || atomNullable(it.atom));

/** The character atoms a sequence's match may begin with (a backreference as `anything`). */
function firstAtoms(seq: Item[], out: Atom[]): Atom[] {
  for (const it of seq) {
    if (it.atom.k === 'char' || it.atom.k === 'anything') out.push(it.atom);
    else if (it.atom.k === 'group' && !it.atom.around) for (const b of it.atom.alt) firstAtoms(b, out);
    if (!(it.min === 0 || atomNullable(it.atom))) break;
  }
  return out;
}

/**
 * Characters tried on two alternatives' first atoms: ASCII and Latin-1, a letter, digit, mark and space of other
 * scripts, and every character the pattern writes (so two classes' ranges that meet meet at a character tried:
 * the greater of their lower ends).
 */
const SAMPLES: readonly string[] = [
  ...Array.from({ length: 256 }, (_, c) => String.fromCharCode(c)),
  ...'ĀǅʰΩЖאع٣กँ中あア한Ⅻ\u0301\u2028\u3000\u200b€−😀',
];

/** The characters `pattern` writes, literally or by a code escape (`\u00e9`, `\x{20}`, `\u{1F600}`). */
function writtenCharacters(pattern: string): string[] {
  const out = [...pattern];
  for (const m of pattern.matchAll(
    /\\(?:u\{([0-9a-fA-F]+)\}|x\{([0-9a-fA-F]+)\}|u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2}))/g,
  )) {
    const code = Number.parseInt((m[1] ?? m[2] ?? m[3] ?? m[4]) as string, 16);
    if (code <= 0x10ffff) out.push(String.fromCodePoint(code));
  }
  return out;
}

/** One character atom as a JavaScript test of one character; null where JavaScript cannot read it. */
function characterTest(atom: Extract<Atom, { k: 'char' }>): RegExp | null {
  // Oniguruma's `\x{20}` is JavaScript's `\u{20}` (the tokenizer library rewrites it so).
  const source = atom.source.replace(/\\x\{/g, '\\u{');
  try {
    return new RegExp(`^(?:${source})$`, atom.caseless ? 'iu' : 'u');
  } catch {
    return null;
  }
}

/** Whether a character may begin a match of both lists of first atoms. */
function shareFirst(a: Atom[], b: Atom[], samples: readonly string[]): boolean {
  if (a.length === 0 || b.length === 0) return false;
  const tests = (atoms: Atom[]) => atoms.map((x) => (x.k === 'char' ? characterTest(x) : null)) as (RegExp | null)[];
  const ta = tests(a);
  const tb = tests(b);
  // An atom JavaScript cannot read, or a backreference, may begin with anything.
  if (ta.includes(null) || tb.includes(null)) return true;
  return samples.some((ch) => ta.some((t) => t?.test(ch)) && tb.some((t) => t?.test(ch)));
}

/** Whether some alternation in `alt` (at any depth) has two alternatives that may begin with one character. */
function overlapsWithin(alt: Alt, samples: readonly string[]): boolean {
  if (alt.length > 1) {
    const firsts = alt.map((b) => firstAtoms(b, []));
    for (let x = 0; x < firsts.length; x++) {
      for (let y = x + 1; y < firsts.length; y++) {
        if (shareFirst(firsts[x] as Atom[], firsts[y] as Atom[], samples)) return true;
      }
    }
  }
  return alt.some((seq) => seq.some((it) => it.atom.k === 'group' && overlapsWithin(it.atom.alt, samples)));
}

/**
 * The offset of the first group in `pattern` that repeats (`*`, `+`, `{n,}`, `{n,m}` with m > 1) while two
 * alternatives inside it may begin with the same character, as `(a|a)*b`, `(a|aa)+$`, `(\w|\d)*x` or `((a|a)b)*`:
 * a run of n characters then splits in up to 2^n ways, each tried before a match fails. Undefined when there is
 * none. Alternatives that begin differently (`(?:\x{20}|b)+`) are read one way only. Some patterns that cannot
 * split so are found too (`(?:ab|ac)+`: both begin with `a`); real tokenizers repeat no alternatives.
 */
export function overlappingRepeat(pattern: string): number | undefined {
  const reader = new TreeReader(pattern);
  const top: Alt = [];
  // A stray `)` closes nothing: read on past it.
  while (reader.i < pattern.length) {
    top.push(...reader.alt(false));
    if (pattern[reader.i] === ')') reader.i += 1;
  }
  const samples = [...new Set([...SAMPLES, ...writtenCharacters(pattern)])];
  const find = (alt: Alt): number | undefined => {
    for (const seq of alt) {
      for (const it of seq) {
        if (it.atom.k !== 'group') continue;
        if (it.max > 1 && overlapsWithin(it.atom.alt, samples)) return it.atom.start;
        const inner = find(it.atom.alt);
        if (inner !== undefined) return inner;
      }
    }
    return undefined;
  };
  return find(top);
}
