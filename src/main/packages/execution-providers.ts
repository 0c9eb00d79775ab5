/**
 * Execution provider names. Packages write them in several spellings
 * (onnxruntime-genai `cuda`, ORT packages `CUDAExecutionProvider`,
 * onnxruntime-node `cuda`); kvdesk compares them only in ORT's full form so a
 * CUDA variant is recognised whichever way a file spelled it.
 */
import { KvdeskError } from '../../shared/errors';

/** The provider every onnxruntime build has. */
export const CPU_PROVIDER = 'CPUExecutionProvider';

/** Lower-case short names (onnxruntime-genai provider_options keys, onnxruntime-node backend names) → ORT names. */
export const PROVIDER_ALIASES: Readonly<Record<string, string>> = {
  cpu: 'CPUExecutionProvider',
  cuda: 'CUDAExecutionProvider',
  tensorrt: 'TensorrtExecutionProvider',
  nvtensorrtrtx: 'NvTensorRTRTXExecutionProvider',
  rocm: 'ROCMExecutionProvider',
  migraphx: 'MIGraphXExecutionProvider',
  dml: 'DmlExecutionProvider',
  coreml: 'CoreMLExecutionProvider',
  qnn: 'QNNExecutionProvider',
  openvino: 'OpenVINOExecutionProvider',
  webgpu: 'WebGpuExecutionProvider',
  vitisai: 'VitisAIExecutionProvider',
  xnnpack: 'XnnpackExecutionProvider',
  js: 'JsExecutionProvider',
};

const BY_LOWER_FULL_NAME = new Map(Object.values(PROVIDER_ALIASES).map((full) => [full.toLowerCase(), full]));

/**
 * The ORT name of a provider written either way (`cuda`, `CUDA`,
 * `CUDAExecutionProvider`, `cudaexecutionprovider`); undefined for a name
 * kvdesk does not know, so callers can decide whether to pass it through.
 */
export function knownProviderName(name: string): string | undefined {
  const lower = name.trim().toLowerCase();
  return PROVIDER_ALIASES[lower] ?? BY_LOWER_FULL_NAME.get(lower);
}

/** Like knownProviderName, but an unknown name is kept (as `<name>ExecutionProvider`), never dropped. */
export function providerName(name: string): string {
  const known = knownProviderName(name);
  if (known !== undefined) return known;
  const trimmed = name.trim();
  return trimmed.endsWith('ExecutionProvider') ? trimmed : `${trimmed}ExecutionProvider`;
}

/** The onnxruntime-node backend name of an ORT provider name (`CUDAExecutionProvider` → `cuda`), or undefined. */
export function providerShortName(name: string): string | undefined {
  const full = knownProviderName(name);
  if (full === undefined) return undefined;
  return Object.entries(PROVIDER_ALIASES).find(([, v]) => v === full)?.[0];
}

/** The ORT provider a backend name (`cuda`, `CUDAExecutionProvider`…) asks for; an unknown name is refused. */
export function backendProvider(name: string): string {
  const wanted = providerName(name);
  if (providerShortName(wanted) === undefined) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `"${name}" is no backend onnxruntime knows: pick cpu, cuda, tensorrt, webgpu, dml or coreml (kvdesk inspect PACKAGE lists what this machine can use)`,
      { field: 'backend' },
    );
  }
  return wanted;
}

/**
 * Which provider to prefer when several are usable, best first: dedicated GPU
 * runtimes, then OS GPU/NPU APIs, then WebGPU (portable but slower), CPU last
 * because every machine has it. TensorRT ranks below CUDA: it compiles an engine
 * per shape profile, which makes the first load of an LLM take minutes.
 */
export const PROVIDER_PREFERENCE: readonly string[] = [
  'CUDAExecutionProvider',
  'NvTensorRTRTXExecutionProvider',
  'TensorrtExecutionProvider',
  'ROCMExecutionProvider',
  'MIGraphXExecutionProvider',
  'DmlExecutionProvider',
  'CoreMLExecutionProvider',
  'QNNExecutionProvider',
  'OpenVINOExecutionProvider',
  'WebGpuExecutionProvider',
  'XnnpackExecutionProvider',
  'CPUExecutionProvider',
];

/** Rank of a provider in PROVIDER_PREFERENCE (lower is better); unknown providers rank just above CPU. */
export function providerRank(name: string): number {
  const full = providerName(name);
  const index = PROVIDER_PREFERENCE.indexOf(full);
  if (index >= 0) return index;
  return PROVIDER_PREFERENCE.length - 1.5;
}

/**
 * The best of `offered` that is also in `usable` (both in any spelling), as the
 * ORT name; undefined when none is. Ties keep the order of `offered`.
 */
export function bestUsableProvider(offered: readonly string[], usable: readonly string[]): string | undefined {
  const can = new Set(usable.map(providerName));
  const candidates = [...new Set(offered.map(providerName))].filter((p) => can.has(p));
  let best: string | undefined;
  for (const p of candidates) if (best === undefined || providerRank(p) < providerRank(best)) best = p;
  return best;
}
