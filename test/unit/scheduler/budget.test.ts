import { describe, expect, it } from 'vitest';
import {
  deriveCpuBudget,
  explicitDerivation,
  formatBytes,
  formatBytesApart,
  parseByteSize,
} from '../../../src/main/scheduler/budget';
import { KvdeskError } from '../../../src/shared/errors';

const GiB = 1024 ** 3;

function thrown(fn: () => unknown): KvdeskError {
  try {
    fn();
  } catch (err) {
    if (err instanceof KvdeskError) return err;
    throw err;
  }
  throw new Error('expected a KvdeskError');
}

describe('formatBytes', () => {
  it('shows exact bytes below 1 KiB', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
  });

  it('uses binary units with one decimal', () => {
    expect(formatBytes(1024)).toBe('1.0 KiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(1024 ** 2 - 1)).toBe('1024.0 KiB');
    expect(formatBytes(1024 ** 2)).toBe('1.0 MiB');
    expect(formatBytes(3.2 * GiB)).toBe('3.2 GiB');
    expect(formatBytes(1024 ** 4)).toBe('1.0 TiB');
  });

  it('stops at TiB', () => {
    expect(formatBytes(1024 ** 5)).toBe('1024.0 TiB');
  });

  it('sets two sizes side by side with as many decimals as tell them apart, up to exact bytes', () => {
    expect(formatBytesApart(1645568, 1635328)).toEqual(['1.57 MiB', '1.56 MiB']);
    expect(formatBytesApart(3 * GiB, 2 * GiB)).toEqual(['3.0 GiB', '2.0 GiB']);
    expect(formatBytesApart(GiB, GiB)).toEqual(['1.0 GiB', '1.0 GiB']);
    expect(formatBytesApart(GiB + 1, GiB)).toEqual(['1,073,741,825 B', '1,073,741,824 B']);
    expect(formatBytesApart(400, 512)).toEqual(['400 B', '512 B']);
  });

  it('marks negative sizes with a minus sign', () => {
    expect(formatBytes(-2048)).toBe('−2.0 KiB');
    expect(formatBytes(-5)).toBe('−5 B');
  });
});

describe('deriveCpuBudget', () => {
  it('is RAM × fraction − weights − overhead and keeps every input', () => {
    const { limitBytes, derivation } = deriveCpuBudget({
      totalMemoryBytes: 16 * GiB,
      fraction: 0.5,
      weightsBytes: 2 * GiB,
      overheadBytes: GiB,
    });
    expect(limitBytes).toBe(5 * GiB);
    expect(derivation).toEqual({
      source: 'derived',
      memory: 'system-ram',
      totalMemoryBytes: 16 * GiB,
      fraction: 0.5,
      weightsBytes: 2 * GiB,
      overheadBytes: GiB,
      derivedBytes: 5 * GiB,
      limitBytes: 5 * GiB,
      formula: '16.0 GiB system RAM × 0.5 − 2.0 GiB weights − 1.0 GiB overhead = 5.0 GiB',
      notes: [],
    });
  });

  it('rounds the RAM share down to whole bytes', () => {
    const { limitBytes } = deriveCpuBudget({
      totalMemoryBytes: 1001,
      fraction: 0.5,
      weightsBytes: 0,
      overheadBytes: 0,
    });
    expect(limitBytes).toBe(500);
  });

  it('accepts a fraction of exactly 1', () => {
    const { limitBytes } = deriveCpuBudget({
      totalMemoryBytes: 1000,
      fraction: 1,
      weightsBytes: 100,
      overheadBytes: 0,
    });
    expect(limitBytes).toBe(900);
  });

  it('gives exactly 0 without a note when nothing is left', () => {
    const { limitBytes, derivation } = deriveCpuBudget({
      totalMemoryBytes: 1000,
      fraction: 1,
      weightsBytes: 600,
      overheadBytes: 400,
    });
    expect(limitBytes).toBe(0);
    expect(derivation.notes).toEqual([]);
    expect(derivation.formula).toBe('1000 B system RAM × 1 − 600 B weights − 400 B overhead = 0 B');
  });

  it('clamps a negative result to 0 with a note that says by how much', () => {
    const { limitBytes, derivation } = deriveCpuBudget({
      totalMemoryBytes: 4 * GiB,
      fraction: 0.5,
      weightsBytes: 3 * GiB,
      overheadBytes: 0,
    });
    expect(limitBytes).toBe(0);
    expect(derivation.limitBytes).toBe(0);
    expect(derivation.derivedBytes).toBe(-GiB);
    expect(derivation.formula).toBe('4.0 GiB system RAM × 0.5 − 3.0 GiB weights − 0 B overhead = −1.0 GiB → 0 B');
    expect(derivation.notes).toEqual([
      "The model's weights and overhead exceed 0.5 of system RAM by 1.0 GiB: nothing is left for the KV cache. " +
        'Raise the fraction, free memory, or load a smaller model.',
    ]);
  });

  it('lets an override win and still shows the derivation', () => {
    const { limitBytes, derivation } = deriveCpuBudget({
      totalMemoryBytes: 16 * GiB,
      fraction: 0.5,
      weightsBytes: 2 * GiB,
      overheadBytes: GiB,
      overrideBytes: 2 * GiB,
    });
    expect(limitBytes).toBe(2 * GiB);
    expect(derivation).toEqual({
      source: 'override',
      memory: 'system-ram',
      totalMemoryBytes: 16 * GiB,
      fraction: 0.5,
      weightsBytes: 2 * GiB,
      overheadBytes: GiB,
      derivedBytes: 5 * GiB,
      overrideBytes: 2 * GiB,
      limitBytes: 2 * GiB,
      formula: 'override 2.0 GiB (derived: 16.0 GiB system RAM × 0.5 − 2.0 GiB weights − 1.0 GiB overhead = 5.0 GiB)',
      notes: ['Set by override; the derivation would give 5.0 GiB.'],
    });
  });

  it('an override of more than the RAM beside the weights says it can run out of memory; up to that, nothing', () => {
    const inputs = { totalMemoryBytes: 16 * GiB, fraction: 0.5, weightsBytes: 2 * GiB, overheadBytes: GiB };
    expect(deriveCpuBudget({ ...inputs, overrideBytes: 14 * GiB }).derivation.notes).toEqual([
      'Set by override; the derivation would give 5.0 GiB.',
    ]);
    expect(deriveCpuBudget({ ...inputs, overrideBytes: 14 * GiB + 1 }).derivation.notes).toEqual([
      'Set by override; the derivation would give 5.0 GiB.',
      // One byte over: said in bytes, not "14.0 GiB is more than … (14.0 GiB)".
      '15,032,385,537 B is more than system RAM holds beside the weights (15,032,385,536 B): replies admitted under it can run out of memory before the budget stops them.',
    ]);
  });

  it('accepts an override of 0', () => {
    const { limitBytes } = deriveCpuBudget({
      totalMemoryBytes: 1000,
      fraction: 1,
      weightsBytes: 0,
      overheadBytes: 0,
      overrideBytes: 0,
    });
    expect(limitBytes).toBe(0);
  });

  it.each([
    ['totalMemoryBytes', { totalMemoryBytes: -1 }, '-1'],
    ['totalMemoryBytes', { totalMemoryBytes: 1.5 }, '1.5'],
    ['weightsBytes', { weightsBytes: -1 }, '-1'],
    ['overheadBytes', { overheadBytes: Number.NaN }, 'NaN'],
    ['overrideBytes', { overrideBytes: -3 }, '-3'],
  ])('refuses a malformed %s', (field, patch, shown) => {
    const err = thrown(() =>
      deriveCpuBudget({ totalMemoryBytes: 1000, fraction: 0.5, weightsBytes: 0, overheadBytes: 0, ...patch }),
    );
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toBe(`${field} must be a whole number of bytes ≥ 0, got ${shown}.`);
    expect(err.detail).toEqual({ field, value: shown });
  });

  it.each([0, -0.5, 1.01, Number.NaN])('refuses fraction %s', (fraction) => {
    const err = thrown(() => deriveCpuBudget({ totalMemoryBytes: 1000, fraction, weightsBytes: 0, overheadBytes: 0 }));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toBe(`fraction must be in (0, 1], got ${fraction}.`);
    expect(err.detail).toEqual({ field: 'fraction', value: String(fraction) });
  });
});

describe('explicitDerivation', () => {
  it('records a directly set limit', () => {
    expect(explicitDerivation(4096)).toEqual({
      source: 'explicit',
      limitBytes: 4096,
      formula: 'set to 4.0 KiB',
      notes: [],
    });
  });

  it('keeps a note', () => {
    expect(explicitDerivation(0, 'from --kv-budget').notes).toEqual(['from --kv-budget']);
  });

  it('refuses a negative limit', () => {
    const err = thrown(() => explicitDerivation(-1));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toBe('limitBytes must be a whole number of bytes ≥ 0, got -1.');
  });
});

describe('parseByteSize', () => {
  it.each([
    ['512', 512],
    ['0', 0],
    ['100B', 100],
    ['100 b', 100],
    ['64KiB', 65536],
    ['2GiB', 2 * GiB],
    ['2 gib', 2 * GiB],
    ['3MiB', 3 * 1024 ** 2],
    ['1TiB', 1024 ** 4],
    ['1.5GB', 1.5e9],
    ['1KB', 1000],
    [' 10 mb ', 1e7],
    ['2TB', 2e12],
    ['2g', 2 * GiB],
    ['2G', 2 * GiB],
    ['1k', 1024],
    ['1m', 1024 ** 2],
    ['1t', 1024 ** 4],
    ['0.5KiB', 512],
    ['.5KiB', 512],
    ['.25KiB', 256],
    ['1.0001KiB', 1024],
    ['1.9', 1],
  ])('reads %j as %d bytes', (input, bytes) => {
    expect(parseByteSize(input)).toBe(bytes);
  });

  it.each(['', 'abc', '-1', '1.5.5', '12 XB', 'GiB', '1e3', '1 2', '1.', '99999999999TiB', 'x1KiB', '1KiBx'])(
    'refuses %j with a clear error',
    (input) => {
      const err = thrown(() => parseByteSize(input));
      expect(err.code).toBe('BAD_REQUEST');
      expect(err.message).toBe(
        `Cannot read "${input}" as a byte size: write a number with an optional unit, e.g. 512, 64KiB, 2GiB or 1.5GB.`,
      );
      expect(err.detail).toEqual({ input });
    },
  );
});
