/**
 * `kvdesk inspect` on an ORT package: every variant with its fit figures per
 * backend, the chosen one marked, and the machine's backends with reasons.
 */
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../../../src/cli/main';
import { defaultModelDir } from '../../helpers/fixtures';

const made: string[] = [];
afterAll(async () => {
  await Promise.all(made.map((d) => fs.rm(d, { recursive: true, force: true })));
});

/** The default model twice, as a CUDA and a CPU variant (Hugging Face folders). */
async function twoVariantPackage(): Promise<string> {
  const parent = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-inspect-'));
  made.push(parent);
  const dir = path.join(parent, 'two-variants');
  for (const v of ['cuda', 'cpu']) {
    for (const rel of [
      'config.json',
      'generation_config.json',
      'tokenizer.json',
      'tokenizer_config.json',
      'onnx/model.onnx',
    ]) {
      await fs.mkdir(path.dirname(path.join(dir, v, rel)), { recursive: true });
      await fs.copyFile(path.join(defaultModelDir, rel), path.join(dir, v, rel));
    }
  }
  const variants = {
    cuda: { ep: 'CUDAExecutionProvider', device: 'gpu', additional_metadata: { precision: 'fp32' } },
    cpu: { ep: 'CPUExecutionProvider', device: 'cpu', additional_metadata: { precision: 'fp32' } },
  };
  await fs.writeFile(
    path.join(dir, 'manifest.json'),
    JSON.stringify({ schema_version: '1.0', package_name: 'two', components: { model: { variants } } }),
  );
  return dir;
}

async function run(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(args, { out: (s) => (out += s), err: (s) => (err += s) });
  return { code, out, err };
}

describe('kvdesk inspect on an ORT package', () => {
  it('--json lists the variants with fit figures per backend and the backend report', async () => {
    const dir = await twoVariantPackage();
    const r = await run('inspect', dir, '--json');
    expect(r.code, r.err).toBe(0);
    const json = JSON.parse(r.out) as {
      layout: string;
      selectedVariant: string;
      backendReport: Array<{ name: string; usable: boolean; reason?: string }>;
      fits: Array<Record<string, unknown>>;
    };
    expect(json.layout).toBe('ort-package');
    const cudaUsable = json.backendReport.find((b) => b.name === 'cuda')?.usable === true;
    expect(json.selectedVariant).toBe(cudaUsable ? 'cuda' : 'cpu');
    expect(json.backendReport.find((b) => b.name === 'cpu')?.usable).toBe(true);
    expect(json.fits.map((f) => [f.variant, f.provider, f.device, f.selected])).toEqual([
      ['cuda', 'CUDAExecutionProvider', 'cuda:0', cudaUsable],
      ['cpu', 'CPUExecutionProvider', 'cpu', !cudaUsable],
    ]);
    const cpu = json.fits[1] as Record<string, unknown>;
    expect(cpu.bpt).toBe(1024);
    expect(cpu.kvFullContextBytes).toBe(1024 * 2048);
    expect(cpu.kvConcurrentBytes).toBe(4 * 1024 * 2048);
    expect(typeof cpu.budgetBytes).toBe('number');
    expect(cpu.fitsOne).toBe(true);
    // The CUDA row has a number or says why not: never NaN.
    const cuda = json.fits[0] as { budgetBytes: number | null; unknown: string[] };
    if (cuda.budgetBytes === null) expect(cuda.unknown.join(' ')).toMatch(/nvidia-smi|cuda:0/);
    expect(r.out).not.toContain('NaN');
  });

  it('prints the variants as text, with the chosen one marked', async () => {
    const dir = await twoVariantPackage();
    const r = await run('inspect', dir, '--variant', 'cpu');
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain('variants (* = chosen)');
    expect(r.out).toContain('* cpu  CPUExecutionProvider on cpu, fp32  (usable here)');
    expect(r.out).toMatch(/ {2}cuda {2}CUDAExecutionProvider on cuda:0, fp32/);
    expect(r.out).toContain('cpu (CPUExecutionProvider): usable');
    expect(r.out).not.toContain('NaN');
  });

  it('refuses a backend the package does not offer, with exit code 2', async () => {
    const dir = await twoVariantPackage();
    const r = await run('inspect', dir, '--backend', 'webgpu', '--json');
    expect(r.code).toBe(2);
    const error = (JSON.parse(r.out) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('PACKAGE_INVALID');
    expect(error.message).toContain('no variant for WebGpuExecutionProvider');
  });
});
