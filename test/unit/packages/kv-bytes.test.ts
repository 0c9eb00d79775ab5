import { describe, expect, it } from 'vitest';
import { kvBytesForTokens, tokensForKvBytes } from '../../../src/main/packages/index';
import type { KvSpec } from '../../../src/shared/model-spec';

const dynamic = { kv: { kind: 'dynamic', tensors: [] } as KvSpec, bpt: 1280, contextLength: 512 };
const staticSpec = {
  kv: {
    kind: 'static',
    cache: {
      writeIndicesInput: 'w',
      kvSequenceLengthInput: 'l',
      writeIndicesDtype: 'int64',
      kvSequenceLengthDtype: 'int64',
      keyCacheInputs: [],
      valueCacheInputs: [],
      keyCacheOutputs: [],
      valueCacheOutputs: [],
      shape: ['batch', 16, 16],
      dtype: 'float32',
      seqAxis: 1,
    },
  } as KvSpec,
  bpt: 128,
  contextLength: 16,
};

describe('kvBytesForTokens', () => {
  it('grows by bpt per token per row for a dynamic cache', () => {
    expect(kvBytesForTokens(dynamic, 0)).toBe(0);
    expect(kvBytesForTokens(dynamic, 10)).toBe(12_800);
    expect(kvBytesForTokens(dynamic, 10, 3)).toBe(38_400);
  });

  it('costs the full buffer for a static cache whatever the token count', () => {
    expect(kvBytesForTokens(staticSpec, 1)).toBe(128 * 16);
    expect(kvBytesForTokens(staticSpec, 9, 2)).toBe(128 * 16 * 2);
  });

  it('is zero without a cache', () => {
    expect(kvBytesForTokens({ kv: { kind: 'none' }, bpt: 0, contextLength: 8 }, 100)).toBe(0);
  });

  it('refuses negative or fractional counts', () => {
    expect(() => kvBytesForTokens(dynamic, -1)).toThrow(RangeError);
    expect(() => kvBytesForTokens(dynamic, 1.5)).toThrow(RangeError);
    expect(() => kvBytesForTokens(dynamic, 1, 0)).toThrow(RangeError);
  });
});

describe('tokensForKvBytes', () => {
  it('inverts kvBytesForTokens for dynamic caches, rounding down', () => {
    expect(tokensForKvBytes(dynamic, 12_800)).toBe(10);
    expect(tokensForKvBytes(dynamic, 12_799)).toBe(9);
    expect(tokensForKvBytes(dynamic, 38_400, 3)).toBe(10);
  });

  it('is all or nothing for static caches', () => {
    expect(tokensForKvBytes(staticSpec, 2048)).toBe(16);
    expect(tokensForKvBytes(staticSpec, 2047)).toBe(0);
  });
});
