import { describe, expect, it } from 'vitest';
import { countJsonValues, maxJsonValuesFor } from '../../../src/main/server/json-guard';

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

  it('allows one value per 64 bytes of a size limit, and at least a million', () => {
    expect(maxJsonValuesFor(256 * 1024 ** 2)).toBe(4_194_304);
    expect(maxJsonValuesFor(32 * 1024 ** 2)).toBe(1_000_000);
  });
});
