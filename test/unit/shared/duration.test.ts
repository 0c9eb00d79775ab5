import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration } from '../../../src/shared/duration';

describe('parseDuration', () => {
  it("reads seconds and Go's duration text; a negative value is for ever", () => {
    expect(parseDuration(0)).toBe(0);
    expect(parseDuration(2.5)).toBe(2500);
    expect(parseDuration('45')).toBe(45_000);
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('1h30m')).toBe(5_400_000);
    expect(parseDuration('1h0m10s')).toBe(3_610_000);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('+2s')).toBe(2000);
    expect(parseDuration(' 0s ')).toBe(0);
    expect(parseDuration('-0')).toBe(0);
    expect(parseDuration(-1)).toBeNull();
    expect(parseDuration('-1')).toBeNull();
    expect(parseDuration('-5m')).toBeNull();
  });

  it('anything else is not a duration', () => {
    for (const v of [
      '',
      ' ',
      'm',

      '5 m',
      '5mm',
      '5x',
      'h1',
      '1h-5m',
      'never',
      null,
      undefined,
      true,
      {},
      Number.NaN,
      Infinity,
    ])
      expect(parseDuration(v), String(v)).toBeUndefined();
  });
});

describe('formatDuration', () => {
  it('writes seconds below a minute, then minutes, then hours and minutes', () => {
    expect(formatDuration(45_000)).toBe('45 s');
    expect(formatDuration(60 * 60_000)).toBe('1 h');
    expect(formatDuration(5 * 60_000)).toBe('5 min');
    expect(formatDuration(90 * 60_000)).toBe('1 h 30 min');
  });
});
