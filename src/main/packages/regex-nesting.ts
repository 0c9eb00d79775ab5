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
  // A lazy quantifier (`+?`) repeats as much; a possessive one (`++`, `?+`), which the tokenizer library reads as
  // the plain one, too.
  if (pattern[end] === '?') end += 1;
  else if (c !== '{' && pattern[end] === '+') end += 1;
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

/**
 * Where a group's body starts after its `(` at `at`: past `?:`, `?>` (atomic: the tokenizer library reads it as
 * `?:`, backtracking into it), `?=`, `?!`, `?<=`, `?<!`, `?<name>`, `?i:`.
 */
function groupBodyStart(pattern: string, at: number): number {
  let i = at + 1;
  if (pattern[i] !== '?') return i;
  i += 1;
  const c = pattern[i];
  if (c === ':' || c === '=' || c === '!' || c === '>') return i + 1;
  if (c === '<') {
    if (pattern[i + 1] === '=' || pattern[i + 1] === '!') return i + 2;
    const close = pattern.indexOf('>', i);
    return close < 0 ? pattern.length : close + 1;
  }
  // Inline flags: `(?i:…)`, `(?-i:…)`.
  while (i < pattern.length && /[a-zA-Z-]/.test(pattern[i] as string)) i += 1;
  return pattern[i] === ':' ? i + 1 : i;
}

/** The most levels of groups a pattern may nest for overlappingRepeat to read it (real tokenizers nest 3). */
export const MAX_GROUP_DEPTH = 100;

/**
 * How deep `pattern`'s groups nest, and the offset of the first `(` at its deepest level (read without recursion,
 * whatever the depth).
 */
export function groupDepth(pattern: string): { depth: number; at: number } {
  let depth = 0;
  let most = { depth: 0, at: 0 };
  for (let i = 0; i < pattern.length; ) {
    const c = pattern[i];
    if (c === '\\') i = escapeEnd(pattern, i);
    else if (c === '[') i = classEnd(pattern, i);
    else {
      if (c === '(') {
        depth += 1;
        if (depth > most.depth) most = { depth, at: i };
      } else if (c === ')' && depth > 0) depth -= 1;
      i += 1;
    }
  }
  return most;
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
  /** Its offset in the pattern. */
  start: number;
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
      const start = this.i;
      const atom = this.atom(caseless);
      const q = quantifierAt(this.pattern, this.i);
      let min = 1;
      let max = 1;
      if (q) {
        const c = this.pattern[this.i];
        const counts = /^\{(\d*)(,(\d*))?\}/.exec(this.pattern.slice(this.i, this.i + 40));
        if (c === '*' || c === '?') min = 0;
        else if (counts) min = Number(counts[1] || 0);
        // A fixed count (`{3}`) is a run of that many: no split; a repeat repeated (`X{1,}+`) varies.
        if (q.doubled || c === '*' || c === '+') max = Number.POSITIVE_INFINITY;
        else if (counts)
          max = counts[2] === undefined ? min : counts[3] === '' ? Number.POSITIVE_INFINITY : Number(counts[3]);
        if (q.doubled) min = Math.min(min, 1);
        this.i = q.end;
      }
      (branches[branches.length - 1] as Item[]).push({ atom, min, max, start });
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

/**
 * Characters tried on two atoms: ASCII and Latin-1; a letter, digit, mark and space of other scripts, with the
 * lower- and upper-case letters of the scripts that have case (so `\p{sc=Greek}` meets `\p{Ll}` at `α`); and every
 * character the pattern writes (so two classes' ranges that meet meet at a character tried: the greater of their
 * lower ends).
 */
const SAMPLES: readonly string[] = [
  ...Array.from({ length: 256 }, (_, c) => String.fromCharCode(c)),
  ...'ĀāŉſƀǅʰΩωΆάϐЖжѐԱաႠⴀᲐაᏀꭰⰀⰰⲀⲁꙀꙁḀḁἀἈＡａ',
  ...['𐐀', '𐐨', '𐒰', '𐓘', '𐲀', '𐳀', '𑢠', '𑣀', '𖹀', '𖹠', '𞤀', '𞤢', '𐕰', '𐖗'],
  ...'אع٣०กँ中あア한Ⅻ\u0301\u2028\u2029\u3000\u200b\u1680\ufeff€−😀',
];

/** A set of samples (bit i: SAMPLES-and-written[i]), or every character. */
type CharSet = bigint;

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

/** Oniguruma's escapes as the tokenizer library rewrites them for JavaScript, outside a class and in one. */
const WORD_CHARS = '\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}';
const ESCAPES: Record<string, [string, string | null]> = {
  s: ['\\p{White_Space}', '\\p{White_Space}'],
  S: ['\\P{White_Space}', '\\P{White_Space}'],
  d: ['\\p{Nd}', '\\p{Nd}'],
  D: ['\\P{Nd}', '\\P{Nd}'],
  w: [`[${WORD_CHARS}\\u00B2\\u00B3\\u00B9\\u00BC-\\u00BE]`, WORD_CHARS],
  W: [`[^${WORD_CHARS}\\u00B2\\u00B3\\u00B9\\u00BC-\\u00BE]`, null],
  h: ['[0-9A-Fa-f]', '0-9A-Fa-f'],
  H: ['[^0-9A-Fa-f]', null],
  a: ['\\x07', '\\x07'],
  e: ['\\x1B', '\\x1B'],
};

/**
 * A character atom's source as the tokenizer library runs it (it rewrites Oniguruma's syntax to JavaScript's):
 * `.` is `[^\n]` (it matches `\r`), `\s` is `\p{White_Space}`, `\d` `\p{Nd}`, `\w` Unicode's word characters,
 * `\x{20}` `\u{20}`. Null for what this does not read (a class in a class, an intersection, a POSIX class): tried
 * as any character.
 */
function librarySource(source: string): string | null {
  if (source === '.') return '[^\\n]';
  const inClass = source.startsWith('[');
  if (inClass && (source.slice(1).includes('[') || source.includes('&&'))) return null;
  let out = '';
  for (let i = 0; i < source.length; ) {
    if (source[i] !== '\\') {
      out += source[i];
      i += 1;
      continue;
    }
    const end = escapeEnd(source, i);
    const text = source.slice(i, end);
    const rewrite = ESCAPES[source[i + 1] ?? ''];
    if (text.length === 2 && rewrite) {
      const r = inClass ? rewrite[1] : rewrite[0];
      if (r === null) return null;
      out += r;
    } else out += text.startsWith('\\x{') ? `\\u{${text.slice(3)}` : text;
    i = end;
  }
  return out;
}

/** One character atom as a JavaScript test of one character; null where JavaScript cannot read it. */
function characterTest(atom: Extract<Atom, { k: 'char' }>): RegExp | null {
  const source = librarySource(atom.source);
  if (source === null) return null;
  const flags = atom.caseless ? 'iu' : 'u';
  try {
    return new RegExp(`^(?:${source})$`, flags);
  } catch {
    // The library reads a property JavaScript does not know (`\p{Greek}`) as a script.
    try {
      return new RegExp(`^(?:${source.replace(/\\([pP])\{([A-Za-z_]+)\}/g, '\\$1{Script=$2}')})$`, flags);
    } catch {
      return null;
    }
  }
}

/**
 * The samples each atom and each choice may begin with, each computed once (a pattern of a thousand alternatives
 * is read in one pass over them, not a pass per pair).
 */
class Sets {
  readonly all: CharSet;
  private readonly bySource = new Map<string, CharSet>();
  private readonly firsts = new WeakMap<Item[], CharSet>();
  private readonly inside = new WeakMap<Alt, CharSet>();
  private readonly overlaps = new WeakMap<Alt, boolean>();

  constructor(readonly samples: readonly string[]) {
    this.all = (1n << BigInt(samples.length)) - 1n;
  }

  /** The samples an atom may match as its first character (a backreference, or what JavaScript cannot read: all). */
  atom(a: Atom): CharSet {
    if (a.k === 'empty') return 0n;
    if (a.k === 'anything') return this.all;
    if (a.k === 'group') return this.within(a.alt);
    const key = `${a.caseless ? 'i' : '-'}${a.source}`;
    let set = this.bySource.get(key);
    if (set === undefined) {
      const test = characterTest(a);
      set = 0n;
      if (test === null) set = this.all;
      else for (const [i, ch] of this.samples.entries()) if (test.test(ch)) set |= 1n << BigInt(i);
      this.bySource.set(key, set);
    }
    return set;
  }

  /** The samples a sequence's match may begin with. */
  first(seq: Item[]): CharSet {
    let set = this.firsts.get(seq);
    if (set !== undefined) return set;
    set = 0n;
    for (const it of seq) {
      const a = it.atom;
      if (a.k === 'char' || a.k === 'anything') set |= this.atom(a);
      else if (a.k === 'group' && !a.around) for (const b of a.alt) set |= this.first(b);
      if (!(it.min === 0 || atomNullable(a))) break;
    }
    this.firsts.set(seq, set);
    return set;
  }

  /** The samples any character of a choice may be (each of its atoms, at any depth). */
  within(alt: Alt): CharSet {
    let set = this.inside.get(alt);
    if (set !== undefined) return set;
    set = 0n;
    for (const seq of alt)
      for (const it of seq) if (!(it.atom.k === 'group' && it.atom.around)) set |= this.atom(it.atom);
    this.inside.set(alt, set);
    return set;
  }

  /**
   * Whether a choice (at any depth) can split one text two ways: two alternatives that may begin with one
   * character, or two neighbours in a sequence that each match a varying count (`a?a?`, `\s*\s+`) of a character
   * they share.
   */
  ambiguous(alt: Alt): boolean {
    let known = this.overlaps.get(alt);
    if (known !== undefined) return known;
    known = false;
    if (alt.length > 1) {
      let seen = 0n;
      for (const seq of alt) {
        const f = this.first(seq);
        if ((seen & f) !== 0n) {
          known = true;
          break;
        }
        seen |= f;
      }
    }
    if (!known) known = alt.some((seq) => this.neighboursVary(seq, 2) !== undefined);
    if (!known) known = alt.some((seq) => seq.some((it) => it.atom.k === 'group' && this.ambiguous(it.atom.alt)));
    this.overlaps.set(alt, known);
    return known;
  }

  /**
   * Whether `run` items of a sequence in a row (what may match nothing between them aside) each match a varying
   * count of a character the one before shares: with 2 a repeat splits its text two ways, with 3 a search tries
   * n³ splits at each of n places (`\s*\s*\s*!`).
   */
  neighboursVary(seq: Item[], run: number): number | undefined {
    let chain = 0;
    let from = 0;
    let last = 0n;
    for (const it of seq) {
      const varies = run === 2 ? it.min < it.max : it.max > 1 && it.min < it.max;
      if (varies) {
        const set = this.atom(it.atom);
        if (chain > 0 && (set & last) !== 0n) chain += 1;
        else {
          chain = 1;
          from = it.start;
        }
        last = set;
        if (chain >= run) return from;
      } else if (!(it.min === 0 || atomNullable(it.atom))) chain = 0;
    }
    return undefined;
  }
}

/**
 * The offset of the first group in `pattern` that repeats (`*`, `+`, `{n,}`, `{n,m}` with m > 1) while two
 * alternatives inside it may begin with the same character, as `(a|a)*b`, `(a|aa)+$`, `(\w|\d)*x` or `((a|a)b)*`:
 * a run of n characters then splits in up to 2^n ways, each tried before a match fails. Undefined when there is
 * none. Alternatives that begin differently (`(?:\x{20}|b)+`) are read one way only. Some patterns that cannot
 * split so are found too (`(?:ab|ac)+`: both begin with `a`); real tokenizers repeat no alternatives.
 */
export function overlappingRepeat(pattern: string): number | undefined {
  const deep = groupDepth(pattern);
  if (deep.depth > MAX_GROUP_DEPTH) {
    throw new RangeError(
      `groups nested ${deep.depth} deep (at offset ${deep.at}); kvdesk reads at most ${MAX_GROUP_DEPTH}`,
    );
  }
  const reader = new TreeReader(pattern);
  const top: Alt = [];
  // A stray `)` closes nothing: read on past it.
  while (reader.i < pattern.length) {
    top.push(...reader.alt(false));
    if (pattern[reader.i] === ')') reader.i += 1;
  }
  const sets = new Sets([...new Set([...SAMPLES, ...writtenCharacters(pattern)])]);
  const find = (alt: Alt): number | undefined => {
    for (const seq of alt) {
      // Three repeats in a row over one character (outside any repeated group too).
      const run = sets.neighboursVary(seq, 3);
      if (run !== undefined) return run;
      for (const it of seq) {
        if (it.atom.k !== 'group') continue;
        if (it.max > 1 && sets.ambiguous(it.atom.alt)) return it.atom.start;
        const inner = find(it.atom.alt);
        if (inner !== undefined) return inner;
      }
    }
    return undefined;
  };
  return find(top);
}
