/**
 * A reply's tokens as text, for the probabilities view: each token's bytes decoded in order, so a character split
 * over two tokens (an emoji, a CJK character in a byte-level vocabulary) shows whole, with the token that ends it
 * (the one before it shows nothing of it). Pure, for the tests.
 */
import type { TokenProbability } from '../../shared/api';

export function tokenPieces(tokens: readonly Pick<TokenProbability, 'b'>[]): string[] {
  const decoder = new TextDecoder('utf-8');
  return tokens.map((t, i) => decoder.decode(new Uint8Array(t.b), { stream: i < tokens.length - 1 }));
}

/** A probability as a person reads it: "83.2 %", "< 0.1 %". */
export function percent(logprob: number): string {
  const p = Math.exp(logprob) * 100;
  return p < 0.1 ? '< 0.1 %' : `${p >= 99.95 ? '100' : p.toFixed(1)} %`;
}

/** A token's text with its spaces and line ends visible (the alternatives' list). */
export function visible(text: string): string {
  return text.replace(/ /g, '␣').replace(/\n/g, '⏎').replace(/\t/g, '⇥') || '∅';
}

/** What a token is called, on its card and to a screen reader: its text as `visible` shows it, then its probability. */
export function tokenName(piece: string, logprob: number): string {
  return `${visible(piece)} ${percent(logprob)}`;
}

/** The likeliest tokens at a token's place, each as its card lists it ("␣the 83.2 %"), likeliest first. */
export function alternatives(token: Pick<TokenProbability, 'top'>): string[] {
  return token.top.map((a) => tokenName(a.t, a.lp));
}
