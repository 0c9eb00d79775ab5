/**
 * `--kv-budget [DEVICE=]SIZE` and `--device-memory DEVICE=SIZE`: per-device
 * sizes on the command line. A plain size is the CPU's budget, as before;
 * `cuda:0=6GiB` sets that GPU's. Device keys are `cpu` or `<backend>:<id>`.
 */
import type { HostSettings } from '../main/host/runner-service';
import { PROVIDER_ALIASES } from '../main/packages';
import { deviceKey } from '../shared/devices';
import { KvdeskError } from '../shared/errors';
import { byteSizeFlag } from './common';

const DEVICE = /^(cpu|[a-z][a-z0-9]*:\d+)=(.+)$/;

/** Backends whose devices have a budget of their own (`cuda:0`); TensorRT and CoreML share another's. */
const OWN_DEVICE_BACKENDS = Object.keys(PROVIDER_ALIASES).filter((n) => n !== 'cpu' && deviceKey(n) === `${n}:0`);

/**
 * A device key the host never uses would set a budget nothing reads: a backend onnxruntime does not know
 * (`foo:0`) is refused naming the devices there are, and one that shares another's budget (`tensorrt:0` is
 * `cuda:0`'s, `coreml:0` the CPU's) names the key to write.
 */
function checkDevice(flag: string, value: string, device: string, size: string): string {
  if (device === 'cpu') return device;
  const [backend = '', id = '0'] = device.split(':');
  if (!Object.hasOwn(PROVIDER_ALIASES, backend)) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `--${flag} ${value}: kvdesk knows no device "${device}" (no backend is called "${backend}"). Devices are cpu and BACKEND:N, BACKEND one of ${OWN_DEVICE_BACKENDS.join(', ')} (e.g. cpu, cuda:0, webgpu:0)`,
      { field: flag, value },
    );
  }
  const key = deviceKey(backend, Number(id));
  // `cuda:00` is `cuda:0`.
  if (key === `${backend}:${Number(id)}`) return key;
  const instead = key === 'cpu' ? (flag === 'kv-budget' ? `--${flag} ${size}` : undefined) : `--${flag} ${key}=${size}`;
  throw new KvdeskError(
    'BAD_REQUEST',
    `--${flag} ${value}: ${backend} runs on ${key === 'cpu' ? "the CPU's memory" : key} and shares its budget, so kvdesk never reads "${device}"` +
      (instead === undefined ? "; the CPU's memory is read from the system" : `: give ${instead}`),
    { field: flag, value },
  );
}

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
  // The size as it was written (the match is of the lower-cased value).
  const device = checkDevice(flag, value, m[1] as string, value.trim().slice(value.trim().indexOf('=') + 1));
  return { device, bytes: byteSizeFlag(flag, m[2] as string) as number };
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
