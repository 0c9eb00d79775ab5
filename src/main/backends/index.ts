/**
 * Execution backends: which providers this machine can use (detection), how to
 * install the ones that need extra libraries, and device memory for per-device
 * KV budgets. May import onnxruntime-node (it probes providers) but nothing
 * from host, server or ipc: those call in, never the other way.
 */
export { bindingDir, CUDA_SETUP_COMMAND, CUDA_SETUP_SCRIPT, missingProviderLibraries, setupHint } from './cuda-setup';
export {
  type BackendReport,
  bestBackend,
  type DetectOptions,
  describeReport,
  detectBackends,
  probeWithOnnxruntime,
  type SupportedBackend,
  usableProviders,
} from './detect';
export { type ChildDetectOptions, detectBackendsInChildProcess } from './detect-in-child';
export {
  type CommandRunner,
  type DeviceBudgetInputs,
  deriveDeviceBudget,
  deviceKey,
  type GpuMemory,
  NVIDIA_SMI_ARGS,
  type NvidiaMemoryResult,
  parseNvidiaSmiMemory,
  readNvidiaGpuMemory,
} from './device-memory';
export { probeModelBytes } from './probe-graph';
export {
  type BudgetSources,
  DEFAULT_GPU_FRACTION,
  DEFAULT_GPU_OVERHEAD_BYTES,
  type DeviceBudgetFn,
  deviceBudgetFns,
  formatVariantFits,
  type VariantFit,
  variantFits,
} from './variant-fit';
