/**
 * The KV budget of one device, as the host derives it: the CPU's from system
 * RAM, an NVIDIA GPU's from nvidia-smi, any other GPU's from a size the person
 * configured — each minus the weights of the models placed on that device.
 * A device whose memory cannot be known gets a zero budget whose derivation
 * says which setting to give, so nothing is admitted there on a guess.
 */
import type { BudgetDerivation } from '../../shared/scheduler-types';
import type { NvidiaMemoryResult } from '../backends/device-memory';
import { deviceBudgetFns } from '../backends/variant-fit';
import { formatBytes } from '../scheduler/budget';

/** What the host knows about the devices' memory and what the person set. */
export interface DeviceBudgetInputs {
  /** `cpu`, `cuda:0`, `webgpu:0`, … */
  device: string;
  /** Weights of every model placed on the device. */
  weightsBytes: number;
  /** The CPU budget settings (system RAM, share, overhead). */
  cpu: { totalMemoryBytes: number; fraction: number; overheadBytes: number };
  /** nvidia-smi's answer, read before the first model's weights went onto the GPU. */
  nvidia?: NvidiaMemoryResult;
  /** Configured memory sizes of GPUs kvdesk cannot query (`webgpu:0` → bytes). */
  deviceMemoryBytes?: Readonly<Record<string, number>>;
  /** The person's explicit KV budget for this device. */
  overrideBytes?: number;
  gpuFraction: number;
  gpuOverheadBytes: number;
}

/** The budget of one device and how it was reached. */
export function deriveHostDeviceBudget(inputs: DeviceBudgetInputs): {
  limitBytes: number;
  derivation: BudgetDerivation;
} {
  const { device, weightsBytes, overrideBytes } = inputs;
  const fns = deviceBudgetFns({
    cpu: inputs.cpu,
    ...(inputs.nvidia === undefined ? {} : { nvidia: inputs.nvidia }),
    ...(inputs.deviceMemoryBytes === undefined ? {} : { configured: inputs.deviceMemoryBytes }),
    gpuFraction: inputs.gpuFraction,
    gpuOverheadBytes: inputs.gpuOverheadBytes,
  });
  const fn = fns[device];
  const result = fn
    ? fn(weightsBytes, overrideBytes)
    : { unknown: `${device}: kvdesk cannot read how much memory this device has` };
  if (!('unknown' in result)) return result;
  const how =
    `Give its size: kvdesk serve --device-memory ${device}=SIZE (e.g. 8GiB), ` +
    `or its KV budget directly: --kv-budget ${device}=SIZE.`;
  if (overrideBytes !== undefined) {
    return {
      limitBytes: overrideBytes,
      derivation: {
        source: 'override',
        memory: 'device-memory',
        weightsBytes,
        overrideBytes,
        limitBytes: overrideBytes,
        formula: `override ${formatBytes(overrideBytes)} (memory unknown: ${result.unknown})`,
        notes: [`Set by override; the memory of ${device} is unknown (${result.unknown}).`],
      },
    };
  }
  return {
    limitBytes: 0,
    derivation: {
      source: 'derived',
      memory: 'device-memory',
      weightsBytes,
      limitBytes: 0,
      formula: `memory unknown (${result.unknown}) → 0 B`,
      notes: [`Nothing on ${device} is admitted until kvdesk knows its memory. ${how}`],
    },
  };
}
