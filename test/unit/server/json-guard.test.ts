import { describe, expect, it } from 'vitest';
import { parseJson } from '../../../src/main/server/http-util';
import { countJsonValues, maxJsonValuesFor, UI_BYTES_PER_VALUE } from '../../../src/main/server/json-guard';

const count = (text: string, max = 1e9) => countJsonValues(Buffer.from(text), max);

/** The objects, arrays and items in them of a parsed value (the value itself included). */
function valuesOf(v: unknown): number {
  if (Array.isArray(v)) return 1 + v.reduce((n: number, x) => n + valuesOf(x), 0);
  if (v !== null && typeof v === 'object') return 1 + Object.values(v).reduce((n: number, x) => n + valuesOf(x), 0);
  return 1;
}

describe('countJsonValues', () => {
  it('counts containers and the commas between items, not what strings hold', () => {
    expect(count('1')).toBe(1);
    expect(count('[{},{},{}]')).toBe(7);
    expect(count('{"a":"{{{[[[,,,"}')).toBe(2);
    // An escaped quote does not end a string; an escaped backslash before a quote does.
    expect(count('{"a":"x\\"{,{,","b":[1,2]}')).toBe(5);
    expect(count('["\\\\",{}]')).toBe(4);
    expect(count('["\\\\\\"[,[",{}]')).toBe(4);
    expect(count('"unterminated {,[')).toBe(1);
  });

  it('stops once past the limit', () => {
    expect(count(`[${'{},'.repeat(1000)}{}]`, 10)).toBe(11);
  });

  it('is never below the values JSON.parse makes, less the first item of each container, for a chat save', () => {
    const message = (i: number) => ({
      id: `m${i}`,
      role: i % 2 ? 'assistant' : 'user',
      content: `text with "quotes", {braces}, [brackets] and \\ backslashes ${'x'.repeat(i % 50)}`,
      createdAt: i,
      ...(i % 2
        ? {
            stats: { promptTokens: 10, generatedTokens: 20, tokensPerSecond: 3.5 },
            writtenBy: [{ id: 'default', name: 'default' }],
            probabilities: [{ b: [32, 116], lp: -0.5, top: [{ t: ' {', lp: -0.5 }] }],
          }
        : { attachments: [{ name: 'a.txt', text: '{"json":[1,2,3]} inside, a file' }] }),
    });
    const chat = {
      id: 't',
      title: 'a chat',
      createdAt: 1,
      updatedAt: 2,
      messages: Array.from({ length: 500 }, (_, i) => message(i)),
    };
    const text = JSON.stringify({ t: 'invoke', id: 3, name: 'saveThread', request: chat });
    const counted = count(text);
    const parsed = JSON.parse(text) as unknown;
    expect(counted).toBeLessThanOrEqual(valuesOf(parsed));
    // Every value but the first item of each container is counted.
    let containers = 0;
    const walk = (v: unknown) => {
      if (v !== null && typeof v === 'object') {
        containers++;
        for (const x of Object.values(v)) walk(x);
      }
    };
    walk(parsed);
    expect(counted).toBeGreaterThanOrEqual(valuesOf(parsed) - containers);
  });

  it("allows one value per 64 bytes of an API body's size limit, one per 8 of a UI message's, and at least a million", () => {
    expect(maxJsonValuesFor(256 * 1024 ** 2)).toBe(4_194_304);
    expect(maxJsonValuesFor(32 * 1024 ** 2)).toBe(1_000_000);
    expect(maxJsonValuesFor(256 * 1024 ** 2, UI_BYTES_PER_VALUE)).toBe(33_554_432);
    expect(maxJsonValuesFor(4 * 1024 ** 2, UI_BYTES_PER_VALUE)).toBe(1_000_000);
  });

  it("reads any chat's save within its size limit, one whose replies kept 20 alternatives a token included", () => {
    // The most values a save holds for its bytes: every token of every reply with its probability and the most
    // alternatives a token keeps (TokenProbability: 20), each of one or two characters, log-probabilities as the
    // page writes them (doubles, JSON.stringify's shortest form).
    let seed = 7;
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return (seed + 1) / (2 ** 31 + 1);
    };
    const token = () => ({
      b: [97 + Math.floor(rnd() * 26)],
      lp: Math.log(rnd()),
      top: Array.from({ length: 20 }, () => ({
        t: String.fromCharCode(97 + Math.floor(rnd() * 26)),
        lp: Math.log(rnd()),
      })),
    });
    const reply = {
      id: 'a1',
      role: 'assistant',
      content: 'x'.repeat(4096),
      createdAt: 1,
      probabilities: Array.from({ length: 4096 }, token),
    };
    const save = Buffer.from(
      JSON.stringify({
        t: 'invoke',
        id: 1,
        name: 'saveThread',
        request: { id: 't', title: 't', createdAt: 1, updatedAt: 1, messages: [reply] },
      }),
    );
    // Per byte, so at every size limit (a million at the least).
    expect(countJsonValues(save, Number.POSITIVE_INFINITY) * UI_BYTES_PER_VALUE).toBeLessThanOrEqual(save.length);
  });
});

describe('parseJson', () => {
  const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
  const status = (fn: () => unknown) => {
    try {
      fn();
      return 'parsed';
    } catch (err) {
      return (err as { status?: number; body?: { error?: { code?: string } } }).body?.error?.code;
    }
  };

  it('skips a leading UTF-8 byte order mark, which RFC 8259 lets a parser ignore; the guard counts the same bytes', () => {
    const body = '{"model":"émoji","messages":[{"role":"user","content":"\ufeff stays"}]}';
    expect(parseJson(Buffer.concat([BOM, Buffer.from(body)]), 100)).toEqual(JSON.parse(body));
    // 1 + the object's two containers and commas: 5 values; a limit of 4 is over with the mark as without it.
    const values = countJsonValues(Buffer.from(body), 1e9);
    expect(status(() => parseJson(Buffer.concat([BOM, Buffer.from(body)]), values))).toBe('parsed');
    expect(status(() => parseJson(Buffer.concat([BOM, Buffer.from(body)]), values - 1))).toBe('payload_too_large');
    // Only at the start, and only once: a second mark, or one in the middle, is not JSON.
    expect(status(() => parseJson(Buffer.concat([BOM, BOM, Buffer.from(body)]), 100))).toBe('invalid_json');
    expect(status(() => parseJson(Buffer.concat([Buffer.from(' '), BOM, Buffer.from(body)]), 100))).toBe(
      'invalid_json',
    );
  });
});
