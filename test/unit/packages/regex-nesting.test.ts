/**
 * nestedRepeat: the tokenizer patterns real models ship pass; a group that repeats while something inside it
 * repeats (the patterns that backtrack for hours on some text) is found, where it opens; escapes, classes and group
 * prefixes are read as what they are. overlappingRepeat: a group that repeats while two of the alternatives inside it
 * can begin with the same character is found; alternatives that begin differently, and choices not repeated, pass.
 */
import { describe, expect, it } from 'vitest';
import { groupDepth, MAX_GROUP_DEPTH, nestedRepeat, overlappingRepeat } from '../../../src/main/packages/regex-nesting';

/** Split patterns of real tokenizer.json files (pre_tokenizer.pretokenizers[…].pattern.Regex). */
const REAL: Record<string, string> = {
  'GPT-2': "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  'Llama 3':
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  Qwen2:
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  'GPT-4o (o200k)':
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  'DeepSeek-V3 (digits)': '\\p{N}{1,3}',
  'DeepSeek-V3 (CJK)': '[一-龥\\u3040-ゟ゠-ヿ]+',
  'DeepSeek-V3 (words)':
    '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
  'line ends, repeated': '(?:\\r?\\n)+',
  Tekken:
    '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
  'DeepSeek LLM': '\\s?[!-/:-~！-／：-～‘-‟　-。]+',
  Falcon: '[\\p{P}\\$\\+<=>\\^~\\|`]+',
  BLOOM: ' ?[^(\\s|[.,!?…。，、।۔،])]+',
  Chameleon: '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z',
  'Chameleon (spaces)': '([\\t\\n]|    |  )',
  // Possessive repeats, which the tokenizer library reads as plain ones.
  Bailing:
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
  SuperBPE: '(?=(\\d{3})+(?!\\d))',
};

describe('nestedRepeat', () => {
  for (const [name, pattern] of Object.entries(REAL)) {
    it(`${name}: none`, () => {
      expect(nestedRepeat(pattern)).toBeUndefined();
    });
  }

  it('finds a repeated group with a repeat inside, where the group opens', () => {
    for (const [pattern, at] of [
      ['(a+)+b', 0],
      ['x(?:\\s*\\w)*', 1],
      ['((ab)*)*', 0],
      ['(a{2,})+', 0],
      ['(x+y?)*', 0],
      ['(a+){3}', 0],
      ['ok|(?<w>\\p{L}+)+$', 3],
      ['((?:a|b)+c)+', 0],
      ['(?i:a+)+', 0],
      ['(a+?)+?', 0],
      // The tokenizer library reads `X{n,m}+` as `(?:X{n,m})+`, and `{,n}` as `{0,n}`.
      ['a{1,}+b', 0],
      ['x\\p{L}{2,}+(?!\\S)', 1],
      ['\\s{1,3}*x', 0],
      ['(?:a+){,30}b', 0],
      ['(?:a{,9})+b', 0],
    ] as const) {
      expect(nestedRepeat(pattern), pattern).toBe(at);
    }
  });

  it('reads escapes, classes and single repeats as what they are', () => {
    for (const pattern of [
      '\\(a+\\)+',
      '[(]+[)]*',
      '[\\]+]+',
      '(a+)?',
      '(a+){1}',
      '(a+){0,1}',
      '(?:ab)+c*',
      '\\p{L}+\\u{1F600}*',
      '(?=a+)b',
      '[a-z]{1,3}(?:x){2}',
      // A fixed count is a run in a row, `?` once or not: the right-to-left digit split, line ends repeated.
      '(?:\\d{3})+',
      '\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))',
      '(?:\\r?\\n)+',
      '(?:\\x{20}|b)+',
    ]) {
      expect(nestedRepeat(pattern), pattern).toBeUndefined();
    }
  });
});

describe('overlappingRepeat', () => {
  for (const [name, pattern] of Object.entries(REAL)) {
    it(`${name}: none`, () => {
      expect(overlappingRepeat(pattern)).toBeUndefined();
    });
  }

  it('finds a repeated choice whose alternatives can begin alike, where the repeated group opens', () => {
    for (const [pattern, at] of [
      ['(a|a)*b', 0],
      ['(a|aa)+$', 0],
      ['(\\w|\\d)*x', 0],
      // Deeper inside the repeat, repeated a fixed number of times, either case, classes that meet.
      ['x((a|a)b)*c', 1],
      ['(?:a|a){30}', 0],
      ['(?i:a|A)+', 0],
      ['ok|(?:[a-z]|[x-y])+', 3],
      ['(?:\\p{L}|[一-龥])+', 0],
      ['(?:[^\\s]|\\u{1F600})+', 0],
      // After what may match nothing, past a lookahead, and a backreference (which may match anything).
      ['(?:b?a|a)+', 0],
      ['(?:x|(?=y)x)*', 0],
      ['(?:(\\w)|\\1)+', 0],
      // Read as the tokenizer library runs them: an atomic group is a plain one (it backtracks into it), `.`
      // matches `\r` (the library reads it as `[^\n]`), a script meets a case (`α` is both).
      ['(?>a|a)*b', 0],
      ['(?:.|\\r)+!', 0],
      ['(?:\\p{sc=Greek}|\\p{Ll})+!', 0],
      ['(?:\\p{Greek}|\\p{Ll})+!', 0],
      ['(?:\\w|\\u00B2)+x', 0],
      // Neighbours that each match a varying count of one character: in a repeat, two split a run two ways; three
      // in a row split it n³ ways at each place a search starts.
      ['(?:a?a?)+b', 0],
      ['x(?:\\s*\\s+)+!', 1],
      ['\\s*\\s*\\s*\\s*!', 0],
      ['ab|c\\d+x?\\p{Nd}*\\d{1,5}!', 4],
    ] as const) {
      expect(overlappingRepeat(pattern), pattern).toBe(at);
    }
  });

  it('passes choices that begin differently or do not repeat, and common validation patterns', () => {
    for (const pattern of [
      '(?:\\x{20}|b)+',
      '(?:a|b)+',
      '(?i:a|b)+',
      '(?:[a-m]|[n-z])*',
      '(?:\\p{Lu}|\\p{Ll})+',
      '(a|a)?b',
      '(?:\\r\\n|\\n)+',
      '^[A-Z]{3}-\\d{4}$',
      '^(\\+\\d{1,3})?\\d{10}$',
      '^[\\w.+-]+@[\\w-]+\\.[\\w.-]+$',
      '^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$',
      // Neighbours of different characters, a fixed count, two repeats in a row outside a repeat (Llama 3's
      // `\s*[\r\n]+`).
      '(?:\\r?\\n)+',
      '(?:a?b?)+c',
      '(?:\\d{3})+',
      '\\s*[\\r\\n]+',
      '(?:.|\\n)+!',
    ]) {
      expect(overlappingRepeat(pattern), pattern).toBeUndefined();
    }
  });

  // Sizes that took minutes (pairwise compiles) or overflowed the stack before: read in one pass, or refused.
  it('reads a choice of thousands of alternatives in one pass over them', { timeout: 60_000 }, () => {
    const alternatives = Array.from({ length: 3000 }, (_, i) => `${String.fromCodePoint(0x4e00 + i)}x`);
    expect(overlappingRepeat(`(?:${alternatives.join('|')})+`)).toBeUndefined();
    // The last one begins as the first does.
    expect(overlappingRepeat(`y(?:${alternatives.join('|')}|一y)+`)).toBe(1);
  });

  it('refuses groups nested deeper than it reads, naming the depth and where, without recursing', () => {
    const deep = `${'(?:'.repeat(5000)}a${')'.repeat(5000)}`;
    expect(groupDepth(deep)).toEqual({ depth: 5000, at: 3 * 4999 });
    expect(() => overlappingRepeat(deep)).toThrow(
      `groups nested 5000 deep (at offset 14997); kvdesk reads at most ${MAX_GROUP_DEPTH}`,
    );
    expect(nestedRepeat(deep)).toBeUndefined();
    const shallow = `${'('.repeat(MAX_GROUP_DEPTH)}a${')'.repeat(MAX_GROUP_DEPTH)}`;
    expect(overlappingRepeat(shallow)).toBeUndefined();
    // Escaped and classed parentheses are no groups.
    expect(groupDepth('\\((a[(])').depth).toBe(1);
  });
});
