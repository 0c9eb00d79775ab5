import { describe, expect, it } from 'vitest';
import { ENGINE_MALLOC_ENV, engineEnvironment } from '../../../src/main/host/engine-client';
import { ORT_ENV } from '../../../src/shared/ort-env';

describe('engineEnvironment', () => {
  it("puts kvdesk's malloc settings under the person's environment and the explicit env", () => {
    expect(engineEnvironment({ PATH: '/bin' }, undefined)).toEqual({
      ...ENGINE_MALLOC_ENV,
      ...ORT_ENV,
      PATH: '/bin',
      GLIBC_TUNABLES: 'glibc.malloc.hugetlb=1',
    });
    const env = engineEnvironment({ MALLOC_TRIM_THRESHOLD_: '7' }, { MALLOC_MMAP_THRESHOLD_: '9' });
    expect(env.MALLOC_TRIM_THRESHOLD_).toBe('7');
    expect(env.MALLOC_MMAP_THRESHOLD_).toBe('9');
  });

  it("turns onnxruntime's telemetry off, unless the person's environment says otherwise", () => {
    expect(engineEnvironment({}, undefined).ORT_DISABLE_TELEMETRY).toBe('1');
    expect(engineEnvironment({ ORT_DISABLE_TELEMETRY: '0' }, undefined).ORT_DISABLE_TELEMETRY).toBe('0');
  });

  it("adds the huge-page tunable to the person's own tunables", () => {
    expect(engineEnvironment({ GLIBC_TUNABLES: 'glibc.malloc.tcache_count=0' }, undefined).GLIBC_TUNABLES).toBe(
      'glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1',
    );
    expect(engineEnvironment({}, { GLIBC_TUNABLES: 'glibc.pthread.rseq=0' }).GLIBC_TUNABLES).toBe(
      'glibc.pthread.rseq=0:glibc.malloc.hugetlb=1',
    );
  });

  it('leaves a hugetlb setting the person chose alone', () => {
    for (const own of ['glibc.malloc.hugetlb=0', 'glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=2']) {
      expect(engineEnvironment({ GLIBC_TUNABLES: own }, undefined).GLIBC_TUNABLES).toBe(own);
      expect(engineEnvironment({}, { GLIBC_TUNABLES: own }).GLIBC_TUNABLES).toBe(own);
    }
  });
});
