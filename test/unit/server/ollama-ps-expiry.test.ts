import { describe, expect, it } from 'vitest';
import { NEVER_EXPIRES, psJson } from '../../../src/main/server/ollama-adapter';
import type { ModelInfo } from '../../../src/shared/api';
import type { ModelSpec } from '../../../src/shared/model-spec';

const info = (firstUse: ModelInfo['firstUse']): ModelInfo => ({
  id: 'm',
  spec: { id: 'm', weightsBytes: 10, contextLength: 16, vocabSize: 32 } as ModelSpec,
  loadMs: 1,
  backend: 'cpu',
  isDefault: false,
  ...(firstUse === undefined ? {} : { firstUse }),
});

describe('/api/ps expires_at never throws', () => {
  it('a time to live no date can hold lists the model as never expiring (one bad request must not break /api/ps)', () => {
    for (const ttlMs of [1e300, Number.MAX_VALUE, Infinity, Number.NaN, 8.64e15]) {
      expect(psJson(info({ ttlMs, lastUsedAt: Date.now() })).expires_at, String(ttlMs)).toBe(NEVER_EXPIRES);
    }
    expect(psJson(info({ ttlMs: 1000, lastUsedAt: Number.NaN })).expires_at).toBe(NEVER_EXPIRES);
  });

  it('an ordinary time to live is when the model goes', () => {
    const at = Date.UTC(2026, 0, 2, 3, 4, 5);
    expect(psJson(info({ ttlMs: 60_000, lastUsedAt: at })).expires_at).toBe('2026-01-02T03:05:05.000Z');
    expect(psJson(info({ ttlMs: null, lastUsedAt: at })).expires_at).toBe(NEVER_EXPIRES);
    expect(psJson(info(undefined)).expires_at).toBe(NEVER_EXPIRES);
  });
});
