import { describe, expect, it } from 'vitest';
import {
  deriveDeviceBudget,
  deviceKey,
  NVIDIA_SMI_ARGS,
  parseNvidiaSmiMemory,
  readNvidiaGpuMemory,
} from '../../../src/main/backends/device-memory';
import { KvdeskError } from '../../../src/shared/errors';

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

describe('parseNvidiaSmiMemory', () => {
  it('reads one "total, used" line per GPU, in MiB', () => {
    // Real H200 output of --query-gpu=memory.total,memory.used --format=csv,noheader,nounits.
    expect(parseNvidiaSmiMemory('143771, 4\n81559, 1234\n')).toEqual([
      { index: 0, totalBytes: 143771 * MIB, usedBytes: 4 * MIB },
      { index: 1, totalBytes: 81559 * MIB, usedBytes: 1234 * MIB },
    ]);
  });

  it('tolerates CRLF, blank lines and spaces', () => {
    expect(parseNvidiaSmiMemory('\r\n  24576 ,  512  \r\n\r\n')).toEqual([
      { index: 0, totalBytes: 24576 * MIB, usedBytes: 512 * MIB },
    ]);
  });

  it('keeps a GPU whose figures are not numbers, saying why, so ids do not shift', () => {
    const gpus = parseNvidiaSmiMemory('[N/A], [N/A]\n16384, 100\ngarbage\n');
    expect(gpus[0]).toEqual({
      index: 0,
      problem: 'nvidia-smi printed "[N/A], [N/A]" for GPU 0, not "<total MiB>, <used MiB>"',
    });
    expect(gpus[1]).toEqual({ index: 1, totalBytes: 16384 * MIB, usedBytes: 100 * MIB });
    expect(gpus[2]?.problem).toContain('"garbage"');
    expect(gpus[2]?.totalBytes).toBeUndefined();
  });

  it('reads nothing from empty output', () => {
    expect(parseNvidiaSmiMemory('')).toEqual([]);
  });
});

describe('readNvidiaGpuMemory', () => {
  it('runs nvidia-smi with the memory query', async () => {
    const calls: Array<[string, readonly string[]]> = [];
    const result = await readNvidiaGpuMemory(async (file, args) => {
      calls.push([file, args]);
      return '8192, 1024\n';
    });
    expect(calls).toEqual([['nvidia-smi', ['--query-gpu=memory.total,memory.used', '--format=csv,noheader,nounits']]]);
    expect(NVIDIA_SMI_ARGS).toEqual(['--query-gpu=memory.total,memory.used', '--format=csv,noheader,nounits']);
    expect(result).toEqual({ ok: true, gpus: [{ index: 0, totalBytes: 8 * GIB, usedBytes: GIB }] });
  });

  it('says nvidia-smi is missing instead of throwing', async () => {
    const result = await readNvidiaGpuMemory(async () => {
      throw Object.assign(new Error('spawn nvidia-smi ENOENT'), { code: 'ENOENT' });
    });
    expect(result).toEqual({ ok: false, reason: 'nvidia-smi is not installed (no NVIDIA driver on this machine)' });
  });

  it('reports a failing nvidia-smi and an empty answer', async () => {
    const failed = await readNvidiaGpuMemory(async () => {
      throw Object.assign(new Error('Command failed\nNVIDIA-SMI has failed because it could not communicate'), {
        code: 9,
      });
    });
    expect(failed).toEqual({ ok: false, reason: 'nvidia-smi failed: Command failed' });
    expect(await readNvidiaGpuMemory(async () => '\n')).toEqual({ ok: false, reason: 'nvidia-smi reported no GPUs' });
  });
});

describe('deriveDeviceBudget', () => {
  const base = { device: 'cuda:0', totalBytes: 80 * GIB, fraction: 0.9, weightsBytes: 4 * GIB, overheadBytes: GIB };

  it('takes the fraction of device memory minus weights and overhead', () => {
    const b = deriveDeviceBudget({ ...base, totalSource: 'nvidia-smi' });
    expect(b.device).toBe('cuda:0');
    expect(b.limitBytes).toBe(Math.floor(80 * GIB * 0.9) - 5 * GIB);
    expect(b.derivation).toMatchObject({
      source: 'derived',
      memory: 'device-memory',
      totalMemoryBytes: 80 * GIB,
      fraction: 0.9,
      weightsBytes: 4 * GIB,
      overheadBytes: GIB,
      derivedBytes: b.limitBytes,
      limitBytes: b.limitBytes,
      notes: [],
    });
    expect(b.derivation.formula).toBe(
      '80.0 GiB cuda:0 memory (nvidia-smi) × 0.9 − 4.0 GiB weights − 1.0 GiB overhead = 67.0 GiB',
    );
  });

  it('never promises more than is free when other programs use the device', () => {
    const roomy = deriveDeviceBudget({ ...base, usedBytes: 2 * GIB });
    expect(roomy.limitBytes).toBe(Math.floor(80 * GIB * 0.9) - 5 * GIB);
    expect(roomy.derivation.formula).toContain('(78.0 GiB free)');
    const crowded = deriveDeviceBudget({ ...base, usedBytes: 30 * GIB });
    expect(crowded.limitBytes).toBe(50 * GIB - 5 * GIB);
    expect(crowded.derivation.formula).toBe(
      '80.0 GiB cuda:0 memory − 30.0 GiB in use (less than × 0.9) − 4.0 GiB weights − 1.0 GiB overhead = 45.0 GiB',
    );
    expect(crowded.derivation.notes[0]).toContain('only 50.0 GiB is free');
  });

  it('clamps at 0 with a note when the weights do not leave room', () => {
    const b = deriveDeviceBudget({ ...base, totalBytes: 4 * GIB });
    expect(b.limitBytes).toBe(0);
    expect(b.derivation.derivedBytes).toBe(Math.floor(4 * GIB * 0.9) - 5 * GIB);
    expect(b.derivation.formula.endsWith(' → 0 B')).toBe(true);
    expect(b.derivation.notes[0]).toContain('nothing is left for the KV cache');
  });

  it('lets an override win and keeps the derivation', () => {
    const b = deriveDeviceBudget({ ...base, overrideBytes: 2 * GIB });
    expect(b.limitBytes).toBe(2 * GIB);
    expect(b.derivation.source).toBe('override');
    expect(b.derivation.formula).toMatch(/^override 2\.0 GiB \(derived: .* = 67\.0 GiB\)$/);
    expect(b.derivation.notes).toEqual(['Set by override; the derivation would give 67.0 GiB.']);
    const over = deriveDeviceBudget({ ...base, overrideBytes: 999 * GIB });
    expect(over.derivation.notes[1]).toMatch(
      /^999\.0 GiB is more than cuda:0's memory holds beside the weights \(76\.0 GiB\): replies admitted under it can run out of memory before the budget stops them\.$/,
    );
    // Memory other programs use counts against it: 10 GiB is too much with 70 of 80 GiB in use.
    const busy = deriveDeviceBudget({ ...base, usedBytes: 70 * GIB, overrideBytes: 10 * GIB });
    expect(busy.derivation.notes.at(-1)).toMatch(
      /^10\.0 GiB is more than cuda:0's free memory holds beside the weights \(6\.0 GiB\)/,
    );
    expect(deriveDeviceBudget({ ...base, usedBytes: 70 * GIB, overrideBytes: 6 * GIB }).derivation.notes).toHaveLength(
      2,
    );
  });

  it('refuses inputs that are not byte counts or fractions', () => {
    expect(() => deriveDeviceBudget({ ...base, totalBytes: -1 })).toThrow(KvdeskError);
    expect(() => deriveDeviceBudget({ ...base, weightsBytes: 1.5 })).toThrow('weightsBytes');
    expect(() => deriveDeviceBudget({ ...base, fraction: 0 })).toThrow('fraction must be in (0, 1]');
    expect(() => deriveDeviceBudget({ ...base, fraction: 1.01 })).toThrow('fraction');
    expect(() => deriveDeviceBudget({ ...base, usedBytes: 81 * GIB })).toThrow('exceeds totalBytes');
    expect(deriveDeviceBudget({ ...base, fraction: 1 }).limitBytes).toBe(75 * GIB);
  });
});

describe('deviceKey', () => {
  it('keys budgets by device: one for CPU, one per GPU per backend', () => {
    expect(deviceKey('CPUExecutionProvider')).toBe('cpu');
    expect(deviceKey('cpu', 3)).toBe('cpu');
    expect(deviceKey('CUDAExecutionProvider')).toBe('cuda:0');
    expect(deviceKey('cuda', 1)).toBe('cuda:1');
    expect(deviceKey('WebGpuExecutionProvider')).toBe('webgpu:0');
    expect(deviceKey('DmlExecutionProvider', 1)).toBe('dml:1');
  });
  it('gives providers that share memory one key', () => {
    // TensorRT runs on the CUDA device: one GPU, one budget.
    expect(deviceKey('TensorrtExecutionProvider', 1)).toBe('cuda:1');
    // CoreML on Apple silicon uses unified system memory: the CPU budget.
    expect(deviceKey('CoreMLExecutionProvider')).toBe('cpu');
  });
});
