/** onnxruntime-node's name of a provider (`CUDAExecutionProvider` → `cuda`; a short name stays as it is). */
export function backendName(provider: string): string {
  return provider.toLowerCase().replace(/executionprovider$/, '');
}

/**
 * The device a provider places a model on, as budgets are keyed: `cpu` for the
 * CPU provider, `<backend>:<device id>` otherwise. Models on the same key share
 * one budget, so providers that share memory share a key: TensorRT runs on the
 * NVIDIA GPU CUDA numbers (`cuda:0`), and CoreML on Apple silicon uses the
 * unified system memory the CPU budget is derived from (`cpu`).
 */
export function deviceKey(backend: string, deviceId = 0): string {
  const name = backendName(backend);
  if (name === 'cpu' || name === 'coreml') return 'cpu';
  if (name === 'tensorrt') return `cuda:${deviceId}`;
  return `${name}:${deviceId}`;
}
