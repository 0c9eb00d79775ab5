import { describe, expect, it } from 'vitest';
import { applyDeviceFlags } from '../../../src/cli/device-flags';
import { deriveHostDeviceBudget } from '../../../src/main/host/device-budgets';
import type { HostSettings } from '../../../src/main/host/runner-service';

const GIB = 1024 ** 3;
const base = {
  weightsBytes: 1 * GIB,
  cpu: { totalMemoryBytes: 32 * GIB, fraction: 0.5, overheadBytes: 0.5 * GIB },
  gpuFraction: 0.9,
  gpuOverheadBytes: 1 * GIB,
};

describe('deriveHostDeviceBudget', () => {
  it('derives the CPU from system RAM, an override winning', () => {
    expect(deriveHostDeviceBudget({ ...base, device: 'cpu' }).limitBytes).toBe(16 * GIB - 1.5 * GIB);
    const o = deriveHostDeviceBudget({ ...base, device: 'cpu', overrideBytes: 123 });
    expect(o.limitBytes).toBe(123);
    expect(o.derivation.source).toBe('override');
    expect(o.derivation.derivedBytes).toBe(16 * GIB - 1.5 * GIB);
  });

  it('derives an NVIDIA GPU from nvidia-smi: free memory bounds the share', () => {
    const nvidia = { ok: true as const, gpus: [{ index: 0, totalBytes: 24 * GIB, usedBytes: 4 * GIB }] };
    const b = deriveHostDeviceBudget({ ...base, device: 'cuda:0', nvidia });
    // min(24 × 0.9 = 21.6, 24 − 4 = 20) − 1 weights − 1 overhead
    expect(b.limitBytes).toBe(18 * GIB);
    expect(b.derivation.memory).toBe('device-memory');
    expect(b.derivation.formula).toContain('nvidia-smi');
    const o = deriveHostDeviceBudget({ ...base, device: 'cuda:0', nvidia, overrideBytes: 2 * GIB });
    expect(o.limitBytes).toBe(2 * GIB);
    expect(o.derivation.source).toBe('override');
  });

  it('uses a configured size for GPUs kvdesk cannot query', () => {
    const b = deriveHostDeviceBudget({ ...base, device: 'webgpu:0', deviceMemoryBytes: { 'webgpu:0': 10 * GIB } });
    expect(b.limitBytes).toBe(Math.floor(10 * GIB * 0.9) - 2 * GIB);
    expect(b.derivation.formula).toContain('configured');
  });

  it('gives a device of unknown memory a zero budget that names the setting, unless overridden', () => {
    const u = deriveHostDeviceBudget({ ...base, device: 'dml:1' });
    expect(u.limitBytes).toBe(0);
    expect(u.derivation.notes.join(' ')).toContain('--device-memory dml:1=SIZE');
    expect(u.derivation.notes.join(' ')).toContain('--kv-budget dml:1=SIZE');
    const failed = { ok: false as const, reason: 'nvidia-smi is not installed' };
    const n = deriveHostDeviceBudget({ ...base, device: 'cuda:0', nvidia: failed });
    expect(n.limitBytes).toBe(0);
    expect(n.derivation.formula).toContain('nvidia-smi is not installed');
    const o = deriveHostDeviceBudget({ ...base, device: 'dml:1', overrideBytes: 3 * GIB });
    expect(o.limitBytes).toBe(3 * GIB);
    expect(o.derivation.source).toBe('override');
  });
});

describe('--kv-budget [DEVICE=]SIZE and --device-memory DEVICE=SIZE', () => {
  it('a plain size is the CPU budget; DEVICE= sets a GPU', () => {
    const s: Partial<HostSettings> = {};
    applyDeviceFlags(s, ['2GiB', 'cuda:0=6GiB', 'CUDA:1=1GiB'], ['webgpu:0=8GiB']);
    expect(s.kvBudgetBytes).toBe(2 * GIB);
    expect(s.deviceKvBudgetBytes).toEqual({ 'cuda:0': 6 * GIB, 'cuda:1': 1 * GIB });
    expect(s.deviceMemoryBytes).toEqual({ 'webgpu:0': 8 * GIB });
    const c: Partial<HostSettings> = {};
    applyDeviceFlags(c, ['cpu=1GiB'], undefined);
    expect(c.kvBudgetBytes).toBe(GIB);
  });

  it('refuses what it cannot read, naming the flag', () => {
    expect(() => applyDeviceFlags({}, undefined, ['8GiB'])).toThrow(/--device-memory 8GiB: give DEVICE=SIZE/);
    expect(() => applyDeviceFlags({}, undefined, ['cpu=8GiB'])).toThrow(/--device-memory cpu=8GiB/);
    expect(() => applyDeviceFlags({}, ['cuda:0=lots'], undefined)).toThrow(/lots/);
  });
});
