import { describe, expect, it } from 'vitest';
import { MAX_DURATION_MS, parseDuration } from '../../../src/shared/duration';

describe('parseDuration: a time longer than any clock can say is for ever', () => {
  it("anything past Go's longest duration (about 292 years, Ollama's own limit) is for ever, as negative is", () => {
    expect(parseDuration('99999999999h')).toBeNull();
    expect(parseDuration(1e300)).toBeNull();
    expect(parseDuration('1e300')).toBeUndefined(); // not a duration: Go's syntax has no exponent
    expect(parseDuration(`${'9'.repeat(400)}s`)).toBeNull();
    expect(parseDuration(Number.MAX_VALUE)).toBeNull();
  });

  it('keeps every duration up to the limit as it is', () => {
    expect(parseDuration('2562047h')).toBe(2_562_047 * 3_600_000);
    expect(parseDuration(MAX_DURATION_MS / 1000)).toBe(MAX_DURATION_MS);
    expect(parseDuration('8760h')).toBe(8760 * 3_600_000);
  });

  it('whatever it returns can be added to now and still be a date', () => {
    for (const v of ['99999999999h', 1e300, '2562047h47m16s', 9.2e9, '-5m', 0]) {
      const ms = parseDuration(v);
      if (typeof ms === 'number') expect(() => new Date(Date.now() + ms).toISOString(), String(v)).not.toThrow();
    }
  });
});
