/**
 * Memory of accelerator devices, and the KV budget derived from it. NVIDIA
 * GPUs report theirs through nvidia-smi; other GPUs (WebGPU, DirectML) expose
 * no portable query, so their size comes from a setting. The derivation is
 * kept as a record beside the limit, like deriveCpuBudget's, so the person
 * sees which number to change.
 */
import { execFile } from 'node:child_process';
import { KvdeskError } from '../../shared/errors';
import type { BudgetDerivation } from '../../shared/scheduler-types';
import { formatBytes, overMemoryNote, requireBytes } from '../scheduler/budget';

const MIB = 1024 * 1024;

/** The nvidia-smi query kvdesk runs; `nounits` makes the numbers MiB. */
export const NVIDIA_SMI_ARGS = ['--query-gpu=memory.total,memory.used', '--format=csv,noheader,nounits'] as const;

/** One GPU's memory as nvidia-smi reported it. */
export interface GpuMemory {
  /** Position in nvidia-smi's output, which is the CUDA device id (both order by PCI bus by default). */
  index: number;
  totalBytes?: number;
  usedBytes?: number;
  /** Why a figure is missing (`[N/A]`, `[Not Supported]` on some boards, or an unreadable line). */
  problem?: string;
}

function mib(field: string): number | undefined {
  const text = field.trim();
  if (!/^\d+(?:\.\d+)?$/.test(text)) return undefined;
  return Math.round(Number(text) * MIB);
}

/**
 * Parses the output of `nvidia-smi --query-gpu=memory.total,memory.used
 * --format=csv,noheader,nounits`: one `total, used` line per GPU, in MiB.
 * A line that does not read as two numbers keeps its GPU index and says why,
 * so device ids never shift.
 */
export function parseNvidiaSmiMemory(text: string): GpuMemory[] {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  return lines.map((line, index) => {
    const parts = line.split(',');
    const total = parts.length === 2 ? mib(parts[0] ?? '') : undefined;
    const used = parts.length === 2 ? mib(parts[1] ?? '') : undefined;
    const gpu: GpuMemory = { index };
    if (total !== undefined) gpu.totalBytes = total;
    if (used !== undefined) gpu.usedBytes = used;
    if (total === undefined || used === undefined) {
      gpu.problem = `nvidia-smi printed ${JSON.stringify(line.trim())} for GPU ${index}, not "<total MiB>, <used MiB>"`;
    }
    return gpu;
  });
}

/** Runs a command and resolves with its stdout; rejects with the error (ENOENT when it does not exist). */
export type CommandRunner = (file: string, args: readonly string[]) => Promise<string>;

const runCommand: CommandRunner = (file, args) =>
  new Promise((resolve, reject) => {
    execFile(file, [...args], { timeout: 10_000, windowsHide: true }, (err, stdout) => {
      if (err) reject(err);
      else resolve(stdout);
    });
  });

/** The GPUs nvidia-smi reports, or why none could be read. */
export type NvidiaMemoryResult = { ok: true; gpus: GpuMemory[] } | { ok: false; reason: string };

/**
 * Reads NVIDIA GPU memory with nvidia-smi when it is installed. Never throws:
 * a machine without NVIDIA GPUs is normal, and the caller then falls back to a
 * configured size.
 */
export async function readNvidiaGpuMemory(run: CommandRunner = runCommand): Promise<NvidiaMemoryResult> {
  let stdout: string;
  try {
    stdout = await run('nvidia-smi', NVIDIA_SMI_ARGS);
  } catch (err) {
    const e = err as { code?: unknown; message?: unknown };
    if (e.code === 'ENOENT')
      return { ok: false, reason: 'nvidia-smi is not installed (no NVIDIA driver on this machine)' };
    return { ok: false, reason: `nvidia-smi failed: ${String(e.message ?? err).split('\n')[0]}` };
  }
  const gpus = parseNvidiaSmiMemory(stdout);
  if (gpus.length === 0) return { ok: false, reason: 'nvidia-smi reported no GPUs' };
  return { ok: true, gpus };
}

/** Inputs of deriveDeviceBudget; byte counts are whole bytes. */
export interface DeviceBudgetInputs {
  /** The device the budget is for: `cpu`, `cuda:0`, `webgpu:0`, … */
  device: string;
  /** Memory of the device (nvidia-smi, or a configured size). */
  totalBytes: number;
  /**
   * Memory already in use on the device by anything other than the weights
   * counted below (other processes, the desktop), read before this model's
   * weights were placed there; omitted when unknown.
   */
  usedBytes?: number;
  /** Share of the device kvdesk may use, in (0, 1]. */
  fraction: number;
  /** Weights of every model placed on this device. */
  weightsBytes: number;
  /** Allowance for the runtime's workspace and activations on the device. */
  overheadBytes: number;
  /** A person's explicit limit; it wins, and the derivation is kept for display. */
  overrideBytes?: number;
  /** Where totalBytes came from, for the formula (`nvidia-smi`, `configured`). */
  totalSource?: string;
}

/**
 * Derives one device's KV budget: min(memory × fraction, memory − in use)
 * − weights − overhead, clamped at 0. The "in use" term matters on GPUs that
 * other programs share (a desktop compositor, a browser), where the fraction
 * alone could promise memory that is not free. Pure: the host reads the sizes.
 */
export function deriveDeviceBudget(inputs: DeviceBudgetInputs): {
  device: string;
  limitBytes: number;
  derivation: BudgetDerivation;
} {
  const { device, totalBytes, usedBytes, fraction, weightsBytes, overheadBytes, overrideBytes } = inputs;
  requireBytes('totalBytes', totalBytes);
  requireBytes('weightsBytes', weightsBytes);
  requireBytes('overheadBytes', overheadBytes);
  if (usedBytes !== undefined) requireBytes('usedBytes', usedBytes);
  if (overrideBytes !== undefined) requireBytes('overrideBytes', overrideBytes);
  if (!(fraction > 0 && fraction <= 1)) {
    throw new KvdeskError('BAD_REQUEST', `fraction must be in (0, 1], got ${fraction}.`, {
      field: 'fraction',
      value: String(fraction),
    });
  }
  if (usedBytes !== undefined && usedBytes > totalBytes) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `usedBytes (${usedBytes}) exceeds totalBytes (${totalBytes}) for ${device}: the memory reading is inconsistent.`,
      { field: 'usedBytes', value: String(usedBytes) },
    );
  }
  const notes: string[] = [];
  const source = inputs.totalSource === undefined ? '' : ` (${inputs.totalSource})`;
  const share = Math.floor(totalBytes * fraction);
  const free = usedBytes === undefined ? undefined : totalBytes - usedBytes;
  const usable = free === undefined ? share : Math.min(share, free);
  let start = `${formatBytes(totalBytes)} ${device} memory${source} × ${fraction}`;
  if (free !== undefined) {
    start =
      free < share
        ? `${formatBytes(totalBytes)} ${device} memory${source} − ${formatBytes(usedBytes ?? 0)} in use (less than × ${fraction})`
        : `${start} (${formatBytes(free)} free)`;
    if (free < share) {
      notes.push(
        `Other programs use ${formatBytes(usedBytes ?? 0)} of ${device}: only ${formatBytes(free)} is free, less than the ${fraction} share (${formatBytes(share)}).`,
      );
    }
  }
  const derivedBytes = usable - weightsBytes - overheadBytes;
  let formula = `${start} − ${formatBytes(weightsBytes)} weights − ${formatBytes(overheadBytes)} overhead = ${formatBytes(derivedBytes)}`;
  let limitBytes = derivedBytes;
  if (derivedBytes < 0) {
    limitBytes = 0;
    formula += ' → 0 B';
    notes.push(
      `The weights and overhead on ${device} exceed the memory kvdesk may use there by ${formatBytes(-derivedBytes)}: ` +
        'nothing is left for the KV cache. Raise the fraction, free device memory, or load a smaller variant.',
    );
  }
  const base = {
    memory: 'device-memory' as const,
    totalMemoryBytes: totalBytes,
    fraction,
    weightsBytes,
    overheadBytes,
    derivedBytes,
  };
  if (overrideBytes !== undefined) {
    notes.push(`Set by override; the derivation would give ${formatBytes(limitBytes)}.`);
    // What other programs use is not there for kvdesk either.
    notes.push(
      ...overMemoryNote(
        overrideBytes,
        free ?? totalBytes,
        weightsBytes,
        free === undefined ? `${device}'s memory` : `${device}'s free memory`,
      ),
    );
    return {
      device,
      limitBytes: overrideBytes,
      derivation: {
        source: 'override',
        ...base,
        overrideBytes,
        limitBytes: overrideBytes,
        formula: `override ${formatBytes(overrideBytes)} (derived: ${formula})`,
        notes,
      },
    };
  }
  return { device, limitBytes, derivation: { source: 'derived', ...base, limitBytes, formula, notes } };
}

export { deviceKey } from '../../shared/devices';
