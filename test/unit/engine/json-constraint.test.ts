import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  constraintFor,
  feedByte,
  initialJsonState,
  jsonDone,
  MAX_DEPTH,
  MAX_WHITESPACE_RUN,
  type ReplyConstraint,
  type TokenTable,
  tokenTable,
} from '../../../src/main/engine/json-constraint';
import { MAX_NUMBER_DIGITS } from '../../../src/main/engine/json-schema';
import type { SamplingParams } from '../../../src/main/engine/protocol';
import { createRng, Sampler } from '../../../src/main/engine/sampling';
import { fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import {
  acceptedBytes,
  boundaryNumbers,
  gpt2Table,
  LEAST_INFINITE,
  parses,
  tokenOf,
  validUtf8,
  walkTokens,
} from '../../helpers/json-text';

/** Feeds a text's UTF-8 bytes (or bytes); how many were accepted and whether the object closed. */
function feed(text: string | Uint8Array): { accepted: number; total: number; done: boolean; doneBefore: boolean } {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  const st = initialJsonState();
  let doneBefore = false;
  for (const [i, b] of bytes.entries()) {
    if (jsonDone(st)) doneBefore = true;
    if (!feedByte(st, b)) return { accepted: i, total: bytes.length, done: false, doneBefore };
  }
  return { accepted: bytes.length, total: bytes.length, done: jsonDone(st), doneBefore };
}

const objects = fc.dictionary(fc.string({ unit: 'binary' }), fc.jsonValue({ maxDepth: 4 }), { maxKeys: 6 });

describe('the JSON recogniser', () => {
  it('accepts every JSON object, compact or indented, and is done exactly at its last byte', () => {
    fc.assert(
      fc.property(objects, fc.constantFrom(0, 1, 2, '\t'), (obj, indent) => {
        const text = JSON.stringify(obj, null, indent);
        const r = feed(text);
        expect(r.accepted).toBe(r.total);
        expect(r.done).toBe(true);
        expect(r.doneBefore).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it('accepts a whole text only if JSON.parse reads it as an object, and every object text JSON.parse reads', () => {
    const alphabet = fc.constantFrom(
      ...['{', '}', '[', ']', '"', ':', ',', ' ', '\n', '0', '1', '9', '-', '+', '.', 'e', 'E'],
      ...['t', 'r', 'u', 'e', 'f', 'a', 'l', 's', 'n', '\\', 'x', 'é', '\u0001', 'u', 'A'],
      ...['{"a":', '"b"', 'true', 'null', '1.5e3', '[]', '{}', '\\u00e9', '\\n'],
    );
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 24 }), (parts) => {
        const text = parts.join('');
        let parsed: unknown;
        let ok = true;
        try {
          parsed = JSON.parse(text);
        } catch {
          ok = false;
        }
        const isObject = ok && typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed);
        const r = feed(text);
        const wholeAndDone = r.accepted === r.total && r.done;
        if (wholeAndDone) expect(isObject, text).toBe(true);
        // The reply starts with its `{` and ends at the closing `}`: whitespace around it is not part of it.
        if (isObject && text === text.trim()) expect(wholeAndDone, text).toBe(true);
      }),
      { numRuns: 5000 },
    );
  });

  it('rejects what is not a JSON object: other top-level values, bad numbers, bad escapes, control characters', () => {
    for (const text of [
      ' {}',
      '[1]',
      '"a"',
      '1',
      'true',
      '{"a":01}',
      '{"a":1.}',
      '{"a":-}',
      '{"a":"\\q"}',
      '{"a":"\u0001"}',
      // Digits past MAX_NUMBER_DIGITS: a model running on with them.
      `{"a":${'9'.repeat(MAX_NUMBER_DIGITS.int + 1)}}`,
      `{"a":0.${'9'.repeat(MAX_NUMBER_DIGITS.frac + 1)}}`,
      `{"a":9E+${'4'.repeat(MAX_NUMBER_DIGITS.exp + 1)}}`,
    ]) {
      expect(feed(text).accepted, text).toBeLessThan(feed(text).total);
    }
    // Every number JavaScript writes stays possible, at the caps.
    const extremes = [1e20, -1.7976931348623157e308, 5e-324, 0.0000012345678901234567, -123456789012345680000];
    for (const text of [
      '{"a":{"b":[1,2,{"c":null}]},"d":-0.5e-3}',
      '{ }',
      '{"\\u00e9":"\\"x\\""}',
      JSON.stringify({ extremes }),
    ]) {
      expect(feed(text), text).toMatchObject({ done: true });
    }
  });

  it('refuses a number at the digit that makes JavaScript read it as ±Infinity, and every finite one stays', () => {
    const maxValue = ((2n ** 53n - 1n) * 2n ** 971n).toString();
    const cases: [string, boolean][] = [
      ['1e999', false],
      ['-1e400', false],
      ['1e309', false],
      [`1${'0'.repeat(309)}`, false],
      [LEAST_INFINITE, false],
      [`-${LEAST_INFINITE}`, false],
      [`${LEAST_INFINITE.slice(0, 300)}.5e9`, false],
      ['1.7976931348623159e308', false],
      ['0.001e312', false],
      ['1e308', true],
      [`1${'0'.repeat(308)}`, true],
      [maxValue, true],
      [`-${maxValue}.999`, true],
      [(BigInt(LEAST_INFINITE) - 1n).toString(), true],
      [`${(BigInt(LEAST_INFINITE) - 1n).toString()}.${'9'.repeat(24)}`, true],
      ['1.7976931348623157e308', true],
      // Rounds down to Number.MAX_VALUE.
      ['1.7976931348623158e308', true],
      ['0.001e311', true],
      // Zero and underflow to zero are finite.
      ['0e999', true],
      ['-0.000e999', true],
      ['1e-999', true],
      [`${maxValue}e-999`, true],
    ];
    for (const [n, finite] of cases) {
      expect(Number.isFinite(Number(n)), n).toBe(finite);
      const text = `{"a":${n}}`;
      const r = feed(text);
      expect(r.accepted, n).toBe(acceptedBytes('{"a":', n, '}'));
      expect(r.done, n).toBe(finite);
    }
    // Near the boundary, in every form: the recogniser agrees with JavaScript byte by byte.
    fc.assert(
      fc.property(boundaryNumbers, (n) => {
        const r = feed(`{"a":${n}}`);
        expect(r.accepted, n).toBe(acceptedBytes('{"a":', n, '}'));
      }),
      { numRuns: 2000 },
    );
  });

  it('takes only valid UTF-8 in strings: a character may be cut across bytes, a string never closes inside one', () => {
    const hex = (h: string) => Buffer.from(h.replace(/ /g, ''), 'hex');
    // Each character at the edges of its form's range.
    for (const h of ['c2 80', 'df bf', 'e0 a0 80', 'ed 9f bf', 'ee 80 80', 'ef bf bf', 'f0 90 80 80', 'f4 8f bf bf']) {
      for (const [open, close] of [
        ['{"a":"', '"}'],
        ['{"', '":1}'],
      ] as const) {
        const bytes = Buffer.concat([Buffer.from(open), hex(h), Buffer.from(close)]);
        expect(feed(bytes), h).toMatchObject({ done: true });
      }
    }
    // Bytes no valid text has there, refused at the byte (the count of bytes before it).
    for (const [h, at] of [
      ['80', 0], // a continuation byte with no lead
      ['bf', 0],
      ['c0 80', 0], // overlong forms
      ['c1 bf', 0],
      ['e0 9f bf', 1],
      ['f0 8f bf bf', 1],
      ['ed a0 80', 1], // a surrogate (U+D800)
      ['ed bf bf', 1],
      ['f4 90 80 80', 1], // past U+10FFFF
      ['f5 80 80 80', 0],
      ['ff', 0],
      ['c3 41', 1], // a lead byte then no continuation
      ['e2 82 22', 2], // the closing quote inside a character
      ['e2 82 5c', 2],
      ['f0 9f 98 c3', 3],
    ] as const) {
      for (const [open, close] of [
        ['{"a":"', '"}'],
        ['{"', '":1}'],
      ] as const) {
        const bytes = Buffer.concat([Buffer.from(open), hex(h), Buffer.from(close)]);
        expect(feed(bytes).accepted, `${open}${h}`).toBe(open.length + at);
      }
    }
    // Characters' bytes, whole or not.
    const pieces = fc
      .tuple(fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }), fc.nat(3))
      .map(([c, cut]) => Buffer.from(c).subarray(0, cut === 0 ? undefined : cut));
    // Any bytes in a string: taken whole exactly when they are UTF-8 that JSON.parse reads.
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.uint8Array({ minLength: 1, maxLength: 1 }), pieces), { maxLength: 8 }),
        (parts) => {
          const content = Buffer.concat(parts);
          const bytes = Buffer.concat([Buffer.from('{"a":"'), content, Buffer.from('"}')]);
          // (Valid UTF-8 decodes to a string that says what its bytes do.)
          expect(feed(bytes).done).toBe(validUtf8(content, true) && parses(bytes.toString('utf8')));
        },
      ),
      { numRuns: 3000 },
    );
  });

  it('nests objects and arrays up to MAX_DEPTH levels, and no deeper', () => {
    const deep = `{"a":${'['.repeat(MAX_DEPTH - 1)}1${']'.repeat(MAX_DEPTH - 1)}}`;
    expect(feed(deep).done).toBe(true);
    const tooDeep = `{"a":${'['.repeat(MAX_DEPTH)}`;
    expect(feed(tooDeep).accepted).toBe(tooDeep.length - 1);
    // Each level remembers its kind: closing with the other bracket is refused at any depth.
    const mixed = `{"a":[{"b":${'[{"c":'.repeat(60)}1`;
    expect(feed(`${mixed}}]`).accepted).toBe(mixed.length + 2);
    expect(feed(`${mixed}]`).accepted).toBe(mixed.length);
  });

  it('caps a run of whitespace outside strings, not inside them', () => {
    expect(feed(`{${' '.repeat(MAX_WHITESPACE_RUN)}}`).done).toBe(true);
    expect(feed(`{${' '.repeat(MAX_WHITESPACE_RUN + 1)}}`).accepted).toBe(1 + MAX_WHITESPACE_RUN);
    expect(feed(`{"${' '.repeat(100)}":1}`).done).toBe(true);
  });
});

/** JSON mode's constraint (any JSON object), as the engine builds it. */
const jsonMode = (t: TokenTable) => constraintFor({ table: t, json: true }) as ReplyConstraint;

describe('JSON mode constraint', () => {
  const pieces = ['{', '}', '"a"', ':', '1', ' ', 'x', '{"', '', '</s>', '"', 'b', '}}'];
  const table = tokenTable(
    pieces.map((p) => [...Buffer.from(p)]),
    [9],
  );
  const allowedNow = (c: ReplyConstraint) => {
    const x = new Float32Array(pieces.length + 2);
    c.mask(x, x.length);
    return [...x.keys()].filter((i) => x[i] !== Number.NEGATIVE_INFINITY).map((i) => pieces[i] ?? `#${i}`);
  };

  it('allows only tokens that continue a JSON object, never special or empty tokens, and ends at the close', () => {
    const c = jsonMode(table);
    expect(allowedNow(c)).toEqual(['{', '{"']);
    c.accept(0);
    expect(allowedNow(c)).toEqual(['}', '"a"', ' ', '"']);
    c.accept(2);
    expect(allowedNow(c)).toEqual([':', ' ']);
    c.accept(3);
    expect(allowedNow(c)).toEqual(['{', '"a"', '1', ' ', '{"', '"']);
    c.accept(4);
    expect(c.done).toBe(false);
    expect(allowedNow(c)).toEqual(['}', '1', ' ']);
    c.accept(1);
    expect(c.done).toBe(true);
    expect(allowedNow(c)).toEqual([]);
    expect(() => c.accept(1)).toThrow(/does not continue/);
  });
});

describe.skipIf(!haveFixtures)(
  `JSON mode's constraint over tiny-random-gpt2's byte-level vocabulary (${haveFixtures ? 'fixtures' : fixturesSkipReason})`,
  () => {
    let table: Awaited<ReturnType<typeof gpt2Table>>;
    beforeAll(async () => {
      table = await gpt2Table();
    });
    const id = (bytes: number[]) => {
      const found = tokenOf(table, bytes);
      if (found < 0) throw new Error(`no token is ${Buffer.from(bytes).toString('hex')}`);
      return found;
    };

    it('allows the byte tokens that continue a character in a string, and no other byte, nor the closing quote', () => {
      const c = jsonMode(table);
      for (const b of Buffer.from('{"a":"')) c.accept(id([b]));
      const bytesAllowed = () => Array.from({ length: 256 }, (_, b) => b).filter((b) => c.allows(id([b])));
      // Between characters: ASCII text but the quote's closing and the escape, and lead bytes.
      const ascii = Array.from({ length: 0x60 }, (_, i) => 0x20 + i);
      const leads = Array.from({ length: 0xf5 - 0xc2 }, (_, i) => 0xc2 + i);
      expect(bytesAllowed()).toEqual([...ascii, ...leads]);
      c.accept(id([0xe2]));
      expect(bytesAllowed()).toEqual(Array.from({ length: 0x40 }, (_, i) => 0x80 + i));
      expect(c.allows(id([0x22]))).toBe(false);
      c.accept(id([0x82]));
      c.accept(id([0xac]));
      expect(c.allows(id([0x22]))).toBe(true);
      // After ED only 80-9F (no surrogates); after F4 only 80-8F.
      c.accept(id([0xed]));
      expect(bytesAllowed()).toEqual(Array.from({ length: 0x20 }, (_, i) => 0x80 + i));
    });

    it('random walks that favour pieces of characters write only valid UTF-8, and JSON that parses when done', () => {
      const rnd = createRng(11);
      let multiByte = 0;
      for (let w = 0; w < 6; w++) {
        const c = jsonMode(table);
        const bytes = Uint8Array.from(walkTokens(c, table, 30, rnd));
        multiByte += bytes.filter((b) => b >= 0xc2).length;
        expect(validUtf8(bytes, c.done), Buffer.from(bytes).toString('hex')).toBe(true);
        if (c.done) expect(typeof JSON.parse(Buffer.from(bytes).toString('utf8'))).toBe('object');
      }
      // The walks wrote characters of several bytes.
      expect(multiByte).toBeGreaterThan(20);
    });

    it('refuses number tokens that would make the number ±Infinity', () => {
      const after = (text: string) => {
        const c = jsonMode(table);
        for (const b of Buffer.from(text)) c.accept(id([b]));
        return (n: string) => c.allows(id([...Buffer.from(n)]));
      };
      const exponent = after('{"a":1e');
      expect(['308', '309', '400', '999'].map(exponent)).toEqual([true, false, false, false]);
      const negative = after('{"a":-1.8e');
      expect(['307', '308'].map(negative)).toEqual([true, false]);
      // Tiny numbers underflow to 0, which JSON keeps.
      expect(after('{"a":1e-')('999')).toBe(true);
    });
  },
);

describe('Sampler in JSON mode', () => {
  // Ids: 0 '{', 1 '}', 2 'x', 3 '"k":1', 4 special, 5 ' '.
  const table = tokenTable(
    ['{', '}', 'x', '"k":1', '<eos>', ' '].map((p) => [...Buffer.from(p)]),
    [4],
  );
  const sampler = (p: Partial<SamplingParams>) =>
    new Sampler(
      { greedy: false, temperature: 1, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 3, ...p },
      6,
      [],
      jsonMode(table),
    );

  it('greedy takes the most likely token that continues the object, and is finished when it closes', () => {
    const s = sampler({ greedy: true });
    // 'x' and the special token are the most likely, and never allowed.
    const logits = new Float32Array([1, 0.5, 9, 2, 8, 0]);
    expect(s.sample(logits, 0, 6)).toBe(0);
    expect(s.sample(logits, 0, 6)).toBe(3);
    expect(s.finished).toBe(false);
    expect(s.sample(logits, 0, 6)).toBe(1);
    expect(s.finished).toBe(true);
    // Nothing continues a closed object.
    expect(s.sample(logits, 0, 6)).toBe(-1);
  });

  it('sampled draws keep to allowed tokens, in proportion to their probabilities', () => {
    const logits = new Float32Array([0, Math.log(3), 5, 0, 5, 0]);
    const counts = new Map<number, number>();
    const n = 4000;
    for (let i = 0; i < n; i++) {
      const s = sampler({ seed: i });
      s.sample(new Float32Array([1, 0, 0, 0, 0, 0]), 0, 6); // '{'
      const id = s.sample(logits, 0, 6);
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    // After '{': '}' (weight 3) or '"k":1' (weight 1) or ' ' (weight 1); never 'x' or the special token.
    expect([...counts.keys()].sort()).toEqual([1, 3, 5]);
    expect((counts.get(1) ?? 0) / n).toBeCloseTo(3 / 5, 1);
    expect((counts.get(3) ?? 0) / n).toBeCloseTo(1 / 5, 1);
  });
});
