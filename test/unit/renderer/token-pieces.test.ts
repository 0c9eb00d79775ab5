/** The probabilities view's token texts (src/renderer/lib/token-pieces.ts). */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { alternatives, percent, tokenName, tokenPieces, visible } from '../../../src/renderer/lib/token-pieces';

describe('tokenPieces', () => {
  it('shows a character split over tokens whole, with the token that ends it', () => {
    // "é" is C3 A9; "😀" is F0 9F 98 80.
    expect(
      tokenPieces([{ b: [32, 0xc3] }, { b: [0xa9, 33] }, { b: [0xf0, 0x9f] }, { b: [0x98] }, { b: [0x80] }]),
    ).toEqual([' ', 'é!', '', '', '😀']);
  });

  it('joins to the text the bytes are, however they are split (any text)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), fc.array(fc.nat(8), { maxLength: 40 }), (text, cuts) => {
        const bytes = [...new TextEncoder().encode(text)];
        const tokens: Array<{ b: number[] }> = [];
        let at = 0;
        for (const c of cuts) {
          tokens.push({ b: bytes.slice(at, at + c) });
          at += c;
        }
        tokens.push({ b: bytes.slice(at) });
        expect(tokenPieces(tokens).join('')).toBe(text);
      }),
    );
  });

  it('a reply cut in the middle of a character shows what it has', () => {
    expect(tokenPieces([{ b: [104, 0xc3] }])).toEqual(['h\ufffd']);
  });
});

describe('percent and visible', () => {
  it('says a probability as a person reads it', () => {
    expect(percent(0)).toBe('100 %');
    expect(percent(Math.log(0.832))).toBe('83.2 %');
    expect(percent(Math.log(0.0004))).toBe('< 0.1 %');
    expect(percent(-1e4)).toBe('< 0.1 %');
  });

  it('shows spaces, line ends and an empty token', () => {
    expect(visible(' the\n')).toBe('␣the⏎');
    expect(visible('')).toBe('∅');
  });
});

describe('tokenName and alternatives', () => {
  it("names a token by its visible text and its probability, and lists its place's likeliest the same way", () => {
    expect(tokenName(' the', Math.log(0.832))).toBe('␣the 83.2 %');
    expect(tokenName('', -1e4)).toBe('∅ < 0.1 %');
    expect(
      alternatives({
        top: [
          { t: ' the', lp: Math.log(0.832) },
          { t: '\n', lp: Math.log(0.05) },
        ],
      }),
    ).toEqual(['␣the 83.2 %', '⏎ 5.0 %']);
    expect(alternatives({ top: [] })).toEqual([]);
  });
});
