import { describe, expect, it } from 'vitest';
import {
  byteChange,
  exactBytes,
  formatBytes,
  formatInteger,
  formatMs,
  formatRate,
  parseByteSize,
} from '../../../src/renderer/lib/format';

describe('formatBytes (binary units)', () => {
  it.each([
    [0, '0 B'],
    [1023, '1023 B'],
    [1024, '1.00 KiB'],
    [1536, '1.50 KiB'],
    [989 * 1024, '989 KiB'],
    [2 * 1024 ** 2, '2.00 MiB'],
    [8 * 1024 ** 2, '8.00 MiB'],
    [24 * 1024 ** 3, '24.0 GiB'],
    [11.3 * 1024 ** 3, '11.3 GiB'],
    [3 * 1024 ** 4, '3.00 TiB'],
  ])('%d → %s', (n, s) => {
    expect(formatBytes(n)).toBe(s);
  });

  it('never prints 1024 of a unit when rounding carries', () => {
    expect(formatBytes(1024 * 1024 - 1)).toBe('1.00 MiB');
    expect(formatBytes(1024 ** 3 - 100)).toBe('1.00 GiB');
  });

  it('keeps the sign of negative figures (a derivation can go below zero)', () => {
    expect(formatBytes(-2048)).toBe('−2.00 KiB');
  });

  it('exact bytes group thousands independent of locale', () => {
    expect(exactBytes(2097152)).toBe('2,097,152 bytes');
    expect(formatInteger(999)).toBe('999');
    expect(formatInteger(1000)).toBe('1,000');
    expect(formatInteger(-1234567)).toBe('−1,234,567');
  });
});

describe('times and rates', () => {
  it('formats milliseconds and seconds', () => {
    expect(formatMs(180.4)).toBe('180 ms');
    expect(formatMs(0.25)).toBe('0.25 ms');
    expect(formatMs(2400)).toBe('2.4 s');
    expect(formatMs(125_000)).toBe('2 min 5 s');
  });
  it('formats token rates', () => {
    expect(formatRate(41.26)).toBe('41.3 tok/s');
    expect(formatRate(1132.2)).toBe('1132 tok/s');
  });
});

describe('parseByteSize (the inspector limit box)', () => {
  it.each([
    ['512', 512],
    ['64KiB', 64 * 1024],
    ['64 kib', 64 * 1024],
    ['1.5 GiB', 1.5 * 1024 ** 3],
    ['2g', 2 * 1024 ** 3],
    // As --kv-budget reads it: GB is decimal, GiB binary.
    ['2GB', 2e9],
    ['10 kb', 10_000],
    ['300 MiB', 300 * 1024 ** 2],
    ['10b', 10],
  ])('%s → %d', (text, n) => {
    expect(parseByteSize(text)).toBe(n);
  });
  it.each(['', 'abc', '-5', '5 XiB', '1e3', '12 KiB extra'])('refuses %j', (text) => {
    expect(parseByteSize(text)).toBeNull();
  });
});

describe('byteChange', () => {
  it('shows the figures as they read, or the exact bytes where they read the same', () => {
    expect(byteChange(1024 ** 3, 2 * 1024 ** 3)).toBe('1.00 GiB → 2.00 GiB');
    const limit = 12_134_567_890;
    expect(byteChange(limit, limit + 4096)).toBe('12,134,567,890 → 12,134,571,986 bytes (+4.00 KiB)');
    expect(byteChange(limit, limit - 4096)).toBe('12,134,567,890 → 12,134,563,794 bytes (−4.00 KiB)');
    expect(byteChange(limit, limit)).toBe('11.3 GiB (unchanged)');
  });
});
