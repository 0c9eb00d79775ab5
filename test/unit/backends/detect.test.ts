/**
 * Backend detection with injected provider results: no GPU, no onnxruntime
 * session; what matters is which backends are asked, what the report says
 * about each, and which backend a package gets.
 */
import { describe, expect, it } from 'vitest';
import {
  type BackendReport,
  bestBackend,
  cleanOrtMessage,
  describeReport,
  detectBackends,
  type SupportedBackend,
  usableProviders,
} from '../../../src/main/backends/detect';

const NPM_LINUX: SupportedBackend[] = [
  { name: 'cpu', bundled: true },
  { name: 'webgpu', bundled: true },
  { name: 'cuda', bundled: false },
  { name: 'tensorrt', bundled: false },
];

/** A probe that succeeds for `ok` and throws the given message for the others; records the order it was asked in. */
function fakeProbe(ok: string[], failures: Record<string, string> = {}) {
  const asked: string[] = [];
  const probe = async (backend: string): Promise<void> => {
    asked.push(backend);
    if (!ok.includes(backend)) throw new Error(failures[backend] ?? `${backend} is not here`);
  };
  return { probe, asked };
}

describe('detectBackends', () => {
  it('probes every backend the binding lists and reports each with its reason', async () => {
    const { probe, asked } = fakeProbe(['cpu'], {
      webgpu: 'Failed to get a WebGPU adapter: No supported adapters.',
      cuda: 'OrtSessionOptionsAppendExecutionProvider_Cuda: Failed to load shared library',
    });
    const report = await detectBackends({ probe, supported: () => NPM_LINUX, platform: 'linux' });
    expect(asked).toEqual(['cpu', 'webgpu', 'cuda', 'tensorrt']);
    expect(report.map((r) => [r.name, r.provider, r.usable, r.bundled, r.inBinding])).toEqual([
      ['cpu', 'CPUExecutionProvider', true, true, true],
      ['webgpu', 'WebGpuExecutionProvider', false, true, true],
      ['cuda', 'CUDAExecutionProvider', false, false, true],
      ['tensorrt', 'TensorrtExecutionProvider', false, false, true],
    ]);
    expect(report[0]?.reason).toBeUndefined();
    expect(report[1]?.reason).toBe('Failed to get a WebGPU adapter: No supported adapters.');
    expect(report[1]?.hint).toContain('Vulkan');
    expect(report[2]?.reason).toBe('OrtSessionOptionsAppendExecutionProvider_Cuda: Failed to load shared library');
    expect(report[2]?.hint).toContain('npm run setup:cuda');
  });

  it('measures each probe', async () => {
    let t = 0;
    const report = await detectBackends({
      probe: async () => {
        t += 25;
      },
      supported: () => [{ name: 'cpu', bundled: true }],
      now: () => t,
      platform: 'linux',
    });
    expect(report.find((r) => r.name === 'cpu')?.probeMs).toBe(25);
  });

  it('reports the OS backends and CUDA even when the binding lacks them, without probing them', async () => {
    const { probe, asked } = fakeProbe(['cpu', 'dml']);
    const win = await detectBackends({
      probe,
      supported: () => [
        { name: 'cpu', bundled: true },
        { name: 'dml', bundled: true },
      ],
      platform: 'win32',
    });
    expect(asked).toEqual(['cpu', 'dml']);
    expect(win.map((r) => [r.name, r.usable])).toEqual([
      ['cpu', true],
      ['webgpu', false],
      ['cuda', false],
      ['dml', true],
    ]);
    expect(win.find((r) => r.name === 'cuda')?.reason).toContain('has no cuda provider');
    const mac = await detectBackends({ probe, supported: () => [{ name: 'cpu', bundled: true }], platform: 'darwin' });
    expect(mac.map((r) => r.name)).toEqual(['cpu', 'webgpu', 'cuda', 'coreml']);
    expect(mac.find((r) => r.name === 'coreml')).toMatchObject({ usable: false, inBinding: false });
  });

  it('skips backends it is told are already known', async () => {
    const { probe, asked } = fakeProbe(['cpu']);
    const report = await detectBackends({ probe, supported: () => NPM_LINUX, platform: 'linux', skip: ['cuda'] });
    expect(asked).toEqual(['cpu', 'webgpu', 'tensorrt']);
    expect(report.map((r) => r.name)).toEqual(['cpu', 'webgpu', 'tensorrt']);
  });

  it('tells who is being probed before each probe (so a crash can be blamed)', async () => {
    const order: string[] = [];
    await detectBackends({
      probe: async (b) => {
        order.push(`probe ${b}`);
      },
      onProbe: (b) => order.push(`told ${b}`),
      supported: () => NPM_LINUX.slice(0, 2),
      platform: 'linux',
    });
    expect(order).toEqual(['told cpu', 'probe cpu', 'told webgpu', 'probe webgpu']);
  });

  it('cleans onnxruntime error text and caps its length', async () => {
    expect(
      cleanOrtMessage(
        '/onnxruntime_src/onnxruntime/core/providers/webgpu/webgpu_context.cc:136 onnxruntime::webgpu::WebGpuContext::Initialize(...)::<lambda()> adapter_result.status == wgpu::RequestAdapterStatus::Success was false. Failed to get a WebGPU adapter: No supported adapters.',
      ),
    ).toBe('Failed to get a WebGPU adapter: No supported adapters.');
    expect(cleanOrtMessage('[ONNXRuntimeError] : 1 : FAIL : Load model failed')).toBe('Load model failed');
    const report = await detectBackends({
      probe: async () => {
        throw new Error('x'.repeat(5000));
      },
      supported: () => [{ name: 'cpu', bundled: true }],
      platform: 'linux',
    });
    expect(report[0]?.reason?.length).toBe(400);
  });
});

const report = (usable: string[]): BackendReport[] =>
  ['cpu', 'webgpu', 'cuda', 'dml'].map((name) => ({
    name,
    provider: {
      cpu: 'CPUExecutionProvider',
      webgpu: 'WebGpuExecutionProvider',
      cuda: 'CUDAExecutionProvider',
      dml: 'DmlExecutionProvider',
    }[name] as string,
    inBinding: true,
    bundled: true,
    usable: usable.includes(name),
    ...(usable.includes(name) ? {} : { reason: `${name} missing` }),
  }));

describe('bestBackend', () => {
  it('picks the best usable backend among those offered', () => {
    expect(bestBackend(['CPUExecutionProvider', 'CUDAExecutionProvider'], report(['cpu']))).toBe(
      'CPUExecutionProvider',
    );
    expect(bestBackend(['CPUExecutionProvider', 'CUDAExecutionProvider'], report(['cpu', 'cuda']))).toBe(
      'CUDAExecutionProvider',
    );
    expect(bestBackend(['cpu', 'webgpu'], report(['cpu', 'webgpu', 'cuda']))).toBe('WebGpuExecutionProvider');
    expect(bestBackend(['CUDAExecutionProvider'], report(['cpu', 'webgpu']))).toBeUndefined();
    expect(bestBackend([], report(['cpu']))).toBeUndefined();
  });

  it('lists the usable providers best first, for loadModelSpec', () => {
    expect(usableProviders(report(['cpu', 'webgpu', 'cuda']))).toEqual([
      'CUDAExecutionProvider',
      'WebGpuExecutionProvider',
      'CPUExecutionProvider',
    ]);
    expect(usableProviders(report([]))).toEqual([]);
  });

  it('describes each backend in one line', () => {
    const lines = describeReport(report(['cpu']));
    expect(lines[0]).toBe('cpu (CPUExecutionProvider): usable');
    expect(lines[2]).toBe('cuda (CUDAExecutionProvider): not usable — cuda missing');
  });
});
