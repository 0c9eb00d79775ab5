/**
 * nestedRepeat: the tokenizer patterns real models ship pass; a group that repeats while something inside it
 * repeats (the patterns that backtrack for hours on some text) is found, where it opens; escapes, classes and group
 * prefixes are read as what they are.
 */
import { describe, expect, it } from 'vitest';
import { nestedRepeat } from '../../../src/main/packages/regex-nesting';

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
