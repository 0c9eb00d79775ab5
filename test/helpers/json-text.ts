import path from 'node:path';
import fc from 'fast-check';
import { type TokenTable, tokenTable } from '../../src/main/engine/json-constraint';
import { loadTokenizer } from '../../src/main/tokenizer';
import { fixture } from './fixtures';

/** 2^1024 - 2^970 in full: the least value JavaScript reads as Infinity (309 digits). */
export const LEAST_INFINITE = (2n ** 1024n - 2n ** 970n).toString();

/**
 * How many bytes of `prefix + n + suffix` a recogniser should take: all of them, or those before the digit at
 * which n so far reads as ±Infinity in JavaScript (the oracle: Number, as JSON.parse reads numbers).
 */
export function acceptedBytes(prefix: string, n: string, suffix: string): number {
  for (let i = 1; i <= n.length; i++) {
    if (Math.abs(Number(n.slice(0, i))) === Number.POSITIVE_INFINITY) return prefix.length + i - 1;
  }
  return prefix.length + n.length + suffix.length;
}

/**
 * JSON numbers near the least infinite value, within MAX_NUMBER_DIGITS: LEAST_INFINITE's first digits with one
 * of them one up or down, as an integer of 300-odd digits or with a point and an exponent that puts it near
 * 10^309; signed or not.
 */
export const boundaryNumbers = fc
  .record({
    sign: fc.constantFrom('', '-'),
    len: fc.oneof(fc.integer({ min: 1, max: 30 }), fc.integer({ min: 300, max: 312 })),
    at: fc.nat(),
    tweak: fc.integer({ min: -1, max: 1 }),
    point: fc.nat(),
    shift: fc.integer({ min: -2, max: 2 }),
    e: fc.constantFrom('e', 'E', 'e+', 'E+'),
  })
  .map(({ sign, len, at, tweak, point, shift, e }) => {
    const digits = [...LEAST_INFINITE.padEnd(len, '0').slice(0, len)].map(Number);
    const k = at % len;
    digits[k] = Math.min(9, Math.max(k === 0 ? 1 : 0, (digits[k] as number) + tweak));
    const d = digits.join('');
    if (len > 30) return `${sign}${d.slice(0, len + shift)}`;
    // At most 24 digits after the point.
    const p = Math.max(point % (len + 1), len - 24);
    const frac = d.slice(p);
    return `${sign}${p === 0 ? '0' : d.slice(0, p)}${frac ? `.${frac}` : ''}${e}${309 - p + shift}`;
  });

/** Whether bytes are UTF-8 that a streaming decoder could still complete (`whole`: that it is complete). */
export function validUtf8(bytes: Uint8Array, whole: boolean): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: !whole });
    return true;
  } catch {
    return false;
  }
}

/** Whether JSON.parse reads a text. */
export function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * The token table of tiny-random-gpt2's byte-level BPE vocabulary (50,295 tokens, the 256 single bytes among
 * them), built as the host builds it for JSON mode.
 */
export async function gpt2Table(): Promise<TokenTable> {
  const dir = fixture('onnxruntime-genai/tiny-random-gpt2-fp32');
  const tok = await loadTokenizer({ tokenizerJson: path.join(dir, 'tokenizer.json') }, { vocabSize: 50295 });
  const ids = Array.from({ length: tok.vocabSize }, (_, id) => id);
  return tokenTable(
    ids.map((id) => (tok.idToToken(id) === undefined ? [] : tok.tokenPiece(id).bytes)),
    ids.filter((id) => tok.isSpecial(id)),
  );
}

/** The id of the token that is exactly these bytes (-1 when none is). */
export function tokenOf(table: TokenTable, bytes: readonly number[]): number {
  const { offsets } = table;
  for (let id = 0; id + 1 < offsets.length; id++) {
    const from = offsets[id] as number;
    if ((offsets[id + 1] as number) - from !== bytes.length) continue;
    if (bytes.every((b, i) => table.bytes[from + i] === b)) return id;
  }
  return -1;
}

/**
 * A random walk through a constraint over a vocabulary: each step masks the logits and draws among the tokens
 * left, those with bytes ≥ 0x80 (pieces of characters) most of the time when any is allowed. The bytes written.
 */
export function walkTokens(
  c: { mask(x: Float32Array, vocab: number): number; accept(id: number): void; done: boolean },
  table: TokenTable,
  steps: number,
  rnd: () => number,
): number[] {
  const vocab = table.offsets.length - 1;
  const written: number[] = [];
  const x = new Float32Array(vocab);
  for (let s = 0; s < steps && !c.done; s++) {
    x.fill(0);
    if (c.mask(x, vocab) === 0) throw new Error(`no token continues after ${Buffer.from(written).toString('hex')}`);
    // (Loops, not [...x.keys()].filter: a vocabulary of 50,257 each step made these walks seconds long.)
    const allowed: number[] = [];
    const high: number[] = [];
    for (let id = 0; id < vocab; id++) {
      if (x[id] !== 0) continue;
      allowed.push(id);
      if ((table.bytes[table.offsets[id] as number] as number) >= 0x80) high.push(id);
    }
    const pool = high.length > 0 && rnd() < 0.8 ? high : allowed;
    const id = pool[Math.floor(rnd() * pool.length)] as number;
    c.accept(id);
    written.push(...table.bytes.subarray(table.offsets[id] as number, table.offsets[id + 1] as number));
  }
  return written;
}
