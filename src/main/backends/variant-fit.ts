/**
 * Before a model is loaded: what each of its variants would cost on the device
 * its backend places it on, and whether that fits the device's KV budget now.
 * Every figure is a number or null with the reason it is unknown, never NaN:
 * the inspector and `kvdesk inspect` print them as they are.
 */
import type { ModelSpec } from '../../shared/model-spec';
import type { BudgetDerivation } from '../../shared/scheduler-types';
import { CPU_PROVIDER } from '../packages/execution-providers';
import { deriveCpuBudget } from '../scheduler/budget';
import type { BackendReport } from './detect';
import { deriveDeviceBudget, deviceKey, type NvidiaMemoryResult } from './device-memory';

/** A device's budget for a model whose weights are `weightsBytes`, or why it cannot be known. */
export type DeviceBudgetFn = (
  weightsBytes: number,
  /** A person's explicit limit for the device: it wins, and the derivation is kept beside it. */
  overrideBytes?: number,
) => { limitBytes: number; derivation: BudgetDerivation } | { unknown: string };

/** One variant (or the one graph of a layout 1–3 package) on its backend's device. */
export interface VariantFit {
  variant: string | null;
  provider: string;
  device: string;
  precision: string | null;
  /** Whether this machine can use the provider (null: no detection result for it). */
  usable: boolean | null;
  selected: boolean;
  weightsBytes: number | null;
  bpt: number | null;
  contextLength: number | null;
  /** KV bytes of one full context at batch 1. */
  kvFullContextBytes: number | null;
  /** KV bytes of `concurrent` full contexts. */
  kvConcurrentBytes: number | null;
  concurrent: number;
  budgetBytes: number | null;
  budgetFormula: string | null;
  fitsOne: boolean | null;
  fitsConcurrent: boolean | null;
  /** Why figures above are null. */
  unknown: string[];
}

function safeProduct(...factors: number[]): number | null {
  const p = factors.reduce((a, b) => a * b, 1);
  return Number.isSafeInteger(p) ? p : null;
}

/**
 * Fit figures for every variant of `spec` (one row for layouts 1–3, on CPU).
 * `budgets` maps a device key (`cpu`, `cuda:0`) to its budget function;
 * a device without one is reported as unknown.
 */
export function variantFits(
  spec: ModelSpec,
  report: readonly BackendReport[] | undefined,
  budgets: Readonly<Record<string, DeviceBudgetFn>>,
  concurrent = 4,
): VariantFit[] {
  const rows =
    spec.variants ??
    ([
      {
        name: null,
        ep: spec.executionProvider ?? CPU_PROVIDER,
        weightsBytes: spec.weightsBytes,
        bpt: spec.bpt,
        contextLength: spec.contextLength,
      },
    ] as Array<{
      name: string | null;
      ep: string;
      precision?: string;
      weightsBytes?: number;
      bpt?: number;
      contextLength?: number;
      unreadable?: string;
    }>);
  return rows.map((v) => {
    const unknown: string[] = [];
    const device = deviceKey(v.ep);
    const probed = report?.find((r) => r.provider === v.ep);
    if (v.unreadable !== undefined) unknown.push(`the variant could not be read: ${v.unreadable}`);
    const weights = v.weightsBytes ?? null;
    const bpt = v.bpt ?? null;
    const ctx = v.contextLength ?? null;
    const full = bpt !== null && ctx !== null ? safeProduct(bpt, ctx) : null;
    const many = full !== null ? safeProduct(full, concurrent) : null;
    let budgetBytes: number | null = null;
    let budgetFormula: string | null = null;
    const budget = budgets[device];
    if (weights === null) {
      unknown.push(`the budget on ${device} depends on the weights, which are unknown`);
    } else if (budget === undefined) {
      unknown.push(`no memory size is known for ${device}`);
    } else {
      const b = budget(weights);
      if ('unknown' in b) unknown.push(b.unknown);
      else {
        budgetBytes = b.limitBytes;
        budgetFormula = b.derivation.formula;
      }
    }
    const fits = (need: number | null): boolean | null =>
      need === null || budgetBytes === null ? null : need <= budgetBytes;
    return {
      variant: v.name,
      provider: v.ep,
      device,
      precision: v.precision ?? null,
      usable: probed === undefined ? (v.ep === CPU_PROVIDER ? true : null) : probed.usable,
      selected: v.name === null || v.name === spec.selectedVariant,
      weightsBytes: weights,
      bpt,
      contextLength: ctx,
      kvFullContextBytes: full,
      kvConcurrentBytes: many,
      concurrent,
      budgetBytes,
      budgetFormula,
      fitsOne: fits(full),
      fitsConcurrent: fits(many),
      unknown,
    };
  });
}

/** Text lines for `kvdesk inspect`: one block per variant; `format` renders byte counts. */
export function formatVariantFits(fits: readonly VariantFit[], format: (bytes: number) => string): string[] {
  const bytes = (n: number | null): string => (n === null ? 'unknown' : format(n));
  const yesNo = (b: boolean | null): string => (b === null ? 'unknown' : b ? 'yes' : 'no');
  const lines: string[] = [];
  for (const f of fits) {
    const head = `${f.selected ? '*' : ' '} ${f.variant ?? '(package)'}  ${f.provider} on ${f.device}${f.precision !== null ? `, ${f.precision}` : ''}`;
    const usable = f.usable === null ? 'not probed' : f.usable ? 'usable here' : 'not usable here';
    lines.push(`${head}  (${usable})`);
    lines.push(
      `      weights ${bytes(f.weightsBytes)}   bpt ${f.bpt === null ? 'unknown' : `${f.bpt} bytes`}   ` +
        `KV full context ${bytes(f.kvFullContextBytes)}   ×${f.concurrent} ${bytes(f.kvConcurrentBytes)}`,
    );
    lines.push(
      `      budget ${bytes(f.budgetBytes)}${f.budgetFormula !== null ? ` (${f.budgetFormula})` : ''}   ` +
        `fits one ${yesNo(f.fitsOne)}, ${f.concurrent} at once ${yesNo(f.fitsConcurrent)}`,
    );
    for (const u of f.unknown) lines.push(`      unknown: ${u}`);
  }
  return lines;
}

/** Where device budgets come from for variantFits. */
export interface BudgetSources {
  /** System RAM, share and overhead: the host's CPU budget settings. */
  cpu: { totalMemoryBytes: number; fraction: number; overheadBytes: number };
  /** nvidia-smi's answer; CUDA and TensorRT devices are NVIDIA GPUs. */
  nvidia?: NvidiaMemoryResult;
  /** Sizes a person configured for GPUs kvdesk cannot query (`webgpu:0`, `dml:0`). */
  configured?: Readonly<Record<string, number>>;
  /** Share of a GPU's memory kvdesk may use. */
  gpuFraction?: number;
  /** Allowance on a GPU for the runtime's workspace and activations. */
  gpuOverheadBytes?: number;
}

/** A GPU may be shared with the desktop; 0.9 leaves it room without wasting a dedicated card. */
export const DEFAULT_GPU_FRACTION = 0.9;
/** onnxruntime's CUDA workspace, cuBLAS handles and activations of a decode step, roughly. */
export const DEFAULT_GPU_OVERHEAD_BYTES = 1024 * 1024 * 1024;

/** Budget functions per device key, from the sources the caller could read. */
export function deviceBudgetFns(sources: BudgetSources): Record<string, DeviceBudgetFn> {
  const fns: Record<string, DeviceBudgetFn> = {
    cpu: (weightsBytes, overrideBytes) =>
      deriveCpuBudget({ ...sources.cpu, weightsBytes, ...(overrideBytes === undefined ? {} : { overrideBytes }) }),
  };
  const fraction = sources.gpuFraction ?? DEFAULT_GPU_FRACTION;
  const overheadBytes = sources.gpuOverheadBytes ?? DEFAULT_GPU_OVERHEAD_BYTES;
  const nvidia = sources.nvidia;
  // CUDA device ids and nvidia-smi indices agree by default (both PCI bus order).
  for (let id = 0; id < Math.max(1, nvidia?.ok ? nvidia.gpus.length : 1); id += 1) {
    // TensorRT and CUDA variants both key to the NVIDIA GPU's `cuda:<id>`.
    const device = deviceKey('cuda', id);
    fns[device] = (weightsBytes, overrideBytes) => {
      if (nvidia === undefined) return { unknown: `${device}: nvidia-smi was not asked` };
      if (!nvidia.ok) return { unknown: `${device}: ${nvidia.reason}` };
      const gpu = nvidia.gpus[id];
      if (gpu?.totalBytes === undefined) return { unknown: `${device}: ${gpu?.problem ?? 'no such GPU'}` };
      return deriveDeviceBudget({
        device,
        totalBytes: gpu.totalBytes,
        ...(gpu.usedBytes === undefined ? {} : { usedBytes: gpu.usedBytes }),
        fraction,
        weightsBytes,
        overheadBytes,
        totalSource: 'nvidia-smi',
        ...(overrideBytes === undefined ? {} : { overrideBytes }),
      });
    };
  }
  for (const [device, totalBytes] of Object.entries(sources.configured ?? {})) {
    fns[device] = (weightsBytes, overrideBytes) =>
      deriveDeviceBudget({
        device,
        totalBytes,
        fraction,
        weightsBytes,
        overheadBytes,
        totalSource: 'configured',
        ...(overrideBytes === undefined ? {} : { overrideBytes }),
      });
  }
  return fns;
}
