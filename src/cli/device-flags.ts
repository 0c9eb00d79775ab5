/**
 * `--kv-budget [DEVICE=]SIZE` and `--device-memory DEVICE=SIZE`: per-device
 * sizes on the command line. A plain size is the CPU's budget, as before;
 * `cuda:0=6GiB` sets that GPU's. Device keys are `cpu` or `<backend>:<id>`.
 */
import type { HostSettings } from '../main/host/runner-service';
import { KvdeskError } from '../shared/errors';
import { byteSizeFlag } from './common';

const DEVICE = /^(cpu|[a-z][a-z0-9]*:\d+)=(.+)$/;

function split(flag: string, value: string, requireDevice: boolean): { device: string; bytes: number } {
  const m = DEVICE.exec(value.trim().toLowerCase());
  if (!m) {
    if (requireDevice) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `--${flag} ${value}: give DEVICE=SIZE, e.g. --${flag} webgpu:0=8GiB (devices: cpu, cuda:0, webgpu:0, dml:0, …)`,
        { field: flag, value },
      );
    }
    return { device: 'cpu', bytes: byteSizeFlag(flag, value) as number };
  }
  return { device: m[1] as string, bytes: byteSizeFlag(flag, m[2] as string) as number };
}

/** Applies the repeatable per-device flags to host settings. */
export function applyDeviceFlags(
  settings: Partial<HostSettings>,
  kvBudget: readonly string[] | undefined,
  deviceMemory: readonly string[] | undefined,
): void {
  for (const value of kvBudget ?? []) {
    const { device, bytes } = split('kv-budget', value, false);
    if (device === 'cpu') settings.kvBudgetBytes = bytes;
    else settings.deviceKvBudgetBytes = { ...settings.deviceKvBudgetBytes, [device]: bytes };
  }
  for (const value of deviceMemory ?? []) {
    const { device, bytes } = split('device-memory', value, true);
    if (device === 'cpu') {
      throw new KvdeskError(
        'BAD_REQUEST',
        `--device-memory ${value}: the CPU's memory is read from the system; set its KV budget with --kv-budget SIZE`,
        { field: 'device-memory', value },
      );
    }
    settings.deviceMemoryBytes = { ...settings.deviceMemoryBytes, [device]: bytes };
  }
}
