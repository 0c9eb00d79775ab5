import { describe, expect, it } from 'vitest';
import type { BackendReport } from '../../../src/main/backends/detect';
import { deviceBudgetFns, formatVariantFits, variantFits } from '../../../src/main/backends/variant-fit';
import type { ModelSpec, PackageVariantInfo } from '../../../src/shared/model-spec';

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;
const CPU = 'CPUExecutionProvider';
const CUDA = 'CUDAExecutionProvider';

function spec(variants?: PackageVariantInfo[], selected?: string): ModelSpec {
  return {
    weightsBytes: 100 * MIB,
    bpt: 1024,
    contextLength: 2048,
    ...(variants === undefined ? {} : { variants }),
    ...(selected === undefined ? {} : { selectedVariant: selected }),
  } as ModelSpec;
}

const variant = (name: string, ep: string, extra: Partial<PackageVariantInfo> = {}): PackageVariantInfo => ({
  component: 'model',
  name,
  ep,
  directory: name,
  usable: ep === CPU,
  weightsBytes: GIB,
  bpt: 4096,
  contextLength: 8192,
  ...extra,
});

const report: BackendReport[] = [
  { name: 'cpu', provider: CPU, inBinding: true, bundled: true, usable: true },
  { name: 'cuda', provider: CUDA, inBinding: true, bundled: false, usable: false, reason: 'no libs' },
];

const cpuSources = { cpu: { totalMemoryBytes: 16 * GIB, fraction: 0.5, overheadBytes: 512 * MIB } };

describe('variantFits', () => {
  it('gives a layout 1–3 package one CPU row with its figures and budget', () => {
    const [row, ...rest] = variantFits(spec(), report, deviceBudgetFns(cpuSources), 4);
    expect(rest).toEqual([]);
    expect(row).toEqual({
      variant: null,
      provider: CPU,
      device: 'cpu',
      precision: null,
      usable: true,
      selected: true,
      weightsBytes: 100 * MIB,
      bpt: 1024,
      contextLength: 2048,
      kvFullContextBytes: 2 * MIB,
      kvConcurrentBytes: 8 * MIB,
      concurrent: 4,
      budgetBytes: 8 * GIB - 100 * MIB - 512 * MIB,
      budgetFormula: '16.0 GiB system RAM × 0.5 − 100.0 MiB weights − 512.0 MiB overhead = 7.4 GiB',
      fitsOne: true,
      fitsConcurrent: true,
      unknown: [],
    });
  });

  it('budgets each variant on its own device with its own weights, from nvidia-smi for CUDA', () => {
    const budgets = deviceBudgetFns({
      ...cpuSources,
      nvidia: { ok: true, gpus: [{ index: 0, totalBytes: 8 * GIB, usedBytes: GIB }] },
      gpuFraction: 0.5,
      gpuOverheadBytes: 0,
    });
    const fits = variantFits(
      spec([variant('cuda', CUDA, { precision: 'fp16', bpt: 100 * 1024 }), variant('cpu', CPU)], 'cpu'),
      report,
      budgets,
      2,
    );
    expect(fits.map((f) => [f.variant, f.device, f.usable, f.selected, f.precision])).toEqual([
      ['cuda', 'cuda:0', false, false, 'fp16'],
      ['cpu', 'cpu', true, true, null],
    ]);
    const cuda = fits[0];
    expect(cuda?.budgetBytes).toBe(4 * GIB - GIB);
    expect(cuda?.kvFullContextBytes).toBe(800 * MIB);
    expect(cuda?.fitsOne).toBe(true);
    expect(cuda?.kvConcurrentBytes).toBe(1600 * MIB);
    expect(cuda?.fitsConcurrent).toBe(true);
    const tight = variantFits(spec([variant('cuda', CUDA, { bpt: 300 * 1024 })]), report, budgets, 2)[0];
    expect(tight?.fitsOne).toBe(true);
    expect(tight?.fitsConcurrent).toBe(false);
  });

  it('says why a figure is unknown instead of printing NaN', () => {
    const fits = variantFits(
      spec([
        variant('cuda', CUDA),
        variant('web', 'WebGpuExecutionProvider'),
        { component: 'model', name: 'broken', ep: CPU, directory: 'broken', usable: true, unreadable: 'bad graph' },
      ]),
      undefined,
      deviceBudgetFns({ ...cpuSources, nvidia: { ok: false, reason: 'nvidia-smi is not installed' } }),
    );
    expect(fits[0]).toMatchObject({ budgetBytes: null, fitsOne: null, usable: null });
    expect(fits[0]?.unknown).toEqual(['cuda:0: nvidia-smi is not installed']);
    expect(fits[1]?.unknown).toEqual(['no memory size is known for webgpu:0']);
    expect(fits[2]).toMatchObject({ weightsBytes: null, bpt: null, kvFullContextBytes: null, fitsOne: null });
    expect(fits[2]?.unknown).toEqual([
      'the variant could not be read: bad graph',
      'the budget on cpu depends on the weights, which are unknown',
    ]);
    const text = formatVariantFits(fits, (n) => `${n}B`).join('\n');
    expect(text).not.toContain('NaN');
    expect(text).toContain('bpt unknown');
    expect(text).toContain('unknown: no memory size is known for webgpu:0');
  });

  it('uses a configured size for GPUs kvdesk cannot query', () => {
    const budgets = deviceBudgetFns({
      ...cpuSources,
      configured: { 'webgpu:0': 8 * GIB },
      gpuFraction: 1,
      gpuOverheadBytes: 0,
    });
    const [web] = variantFits(spec([variant('web', 'WebGpuExecutionProvider')]), report, budgets);
    expect(web?.budgetBytes).toBe(7 * GIB);
    expect(web?.budgetFormula).toContain('(configured)');
  });

  it('prints one block per variant, marking the chosen one', () => {
    const fits = variantFits(spec([variant('cpu', CPU)], 'cpu'), report, deviceBudgetFns(cpuSources), 4);
    const lines = formatVariantFits(fits, (n) => `${n} bytes`);
    expect(lines[0]).toBe('* cpu  CPUExecutionProvider on cpu  (usable here)');
    expect(lines[1]).toContain(`KV full context ${4096 * 8192} bytes`);
    expect(lines[2]).toContain('fits one yes, 4 at once yes');
  });
});
