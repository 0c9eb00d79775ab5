/**
 * Real backend detection on this machine: CPU must be usable everywhere;
 * every other backend is either usable or says why not. GPU-only facts are
 * asserted only where detection found the GPU backend usable.
 */
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  detectBackends,
  detectBackendsInChildProcess,
  probeWithOnnxruntime,
  readNvidiaGpuMemory,
  usableProviders,
} from '../../../src/main/backends';

const made: string[] = [];
afterAll(async () => {
  await Promise.all(made.map((d) => fs.rm(d, { recursive: true, force: true })));
});

describe('detectBackends on this machine', () => {
  it('finds CPU usable and gives a reason for every backend that is not', async () => {
    const report = await detectBackends();
    const cpu = report.find((r) => r.name === 'cpu');
    expect(cpu).toMatchObject({ provider: 'CPUExecutionProvider', usable: true, inBinding: true, bundled: true });
    expect(cpu?.probeMs).toBeGreaterThanOrEqual(0);
    for (const r of report) if (!r.usable) expect(r.reason, r.name).toMatch(/\S/);
    expect(report.map((r) => r.name)).toEqual(expect.arrayContaining(['cpu', 'webgpu', 'cuda']));
    expect(usableProviders(report)).toContain('CPUExecutionProvider');
  });

  it('caches the answer, and probes again on refresh', async () => {
    const first = detectBackends();
    expect(detectBackends()).toBe(first);
    const again = detectBackends({ refresh: true });
    expect(again).not.toBe(first);
    expect((await again).find((r) => r.name === 'cpu')?.usable).toBe(true);
  });

  it("the real probe fails with onnxruntime's reason for a backend that does not exist", async () => {
    await expect(probeWithOnnxruntime('no-such-backend')).rejects.toThrow(/no-such-backend/);
  });

  it('gives the same answer from a child process', async () => {
    const inProcess = await detectBackends();
    const child = await detectBackendsInChildProcess();
    expect(child.map((r) => [r.name, r.usable])).toEqual(inProcess.map((r) => [r.name, r.usable]));
  });

  it('survives a probe process that dies mid-probe, blaming that backend and probing the rest', async () => {
    // A stand-in probe process: dies while "probing" cuda unless told to skip it, as a broken provider library would.
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-probe-'));
    made.push(dir);
    const entry = path.join(dir, 'fake-probe.js');
    await fs.writeFile(
      entry,
      `const skip = (process.argv.find((a) => a.startsWith('--skip=')) || '--skip=').slice(7).split(',');
if (!skip.includes('cuda')) {
  process.send({ type: 'probing', backend: 'cpu' });
  process.send({ type: 'probing', backend: 'cuda' }, () => { process.stderr.write('Segmentation fault in libcudnn\\n'); process.exit(139); });
} else {
  const cpu = { name: 'cpu', provider: 'CPUExecutionProvider', inBinding: true, bundled: true, usable: true };
  process.send({ type: 'report', report: [cpu] }, () => process.exit(0));
}
`,
    );
    const report = await detectBackendsInChildProcess({ entry });
    expect(report.map((r) => [r.name, r.usable])).toEqual([
      ['cuda', false],
      ['cpu', true],
    ]);
    expect(report[0]?.reason).toContain('exited with code 139');
    expect(report[0]?.reason).toContain('Segmentation fault in libcudnn');
  });

  it('kills a probe process that hangs', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-probe-'));
    made.push(dir);
    const entry = path.join(dir, 'hang.js');
    await fs.writeFile(
      entry,
      `const skip = (process.argv.find((a) => a.startsWith('--skip=')) || '--skip=').slice(7).split(',');
if (skip.includes('webgpu')) process.send({ type: 'report', report: [] }, () => process.exit(0));
else { process.send({ type: 'probing', backend: 'webgpu' }); setInterval(() => {}, 1000); }
`,
    );
    const report = await detectBackendsInChildProcess({ entry, timeoutMs: 1500 });
    expect(report).toHaveLength(1);
    expect(report[0]).toMatchObject({ name: 'webgpu', usable: false });
    expect(report[0]?.reason).toContain('did not finish within 1500 ms');
  });
});

describe('NVIDIA device memory on this machine', () => {
  it('reads nvidia-smi when it is installed, and says why not otherwise', async () => {
    const result = await readNvidiaGpuMemory();
    if (result.ok) {
      for (const gpu of result.gpus) {
        expect(gpu.problem).toBeUndefined();
        expect(gpu.totalBytes).toBeGreaterThan(0);
        expect(gpu.usedBytes).toBeLessThanOrEqual(gpu.totalBytes ?? 0);
      }
    } else {
      expect(result.reason).toMatch(/nvidia-smi/);
    }
  });
});
