/**
 * The CUDA and TensorRT providers are not in onnxruntime-node's npm tarball
 * (too large for the registry). Its own install script downloads them from
 * NuGet (Microsoft.ML.OnnxRuntime.Gpu.Linux) next to the binding, but kvdesk's
 * package.json sets `allowScripts: { "onnxruntime-node": false }`, so that
 * postinstall never ran: the person runs it once, on purpose.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';

/**
 * The command that installs the CUDA 12 provider libraries: scripts/setup-cuda.cjs, which runs onnxruntime-node's
 * installer (node_modules/onnxruntime-node/script/install.js) with `--onnxruntime-node-install` outside npm's
 * environment and then checks the libraries are there. The installer's own `--onnxruntime-node-install=cuda12` (or
 * `ONNXRUNTIME_NODE_INSTALL=cuda12`) is not used: onnxruntime-node 1.30's parser drops a named value, and under
 * `npm run` the installer then exits 0 having installed nothing.
 */
export const CUDA_SETUP_COMMAND = 'node scripts/setup-cuda.cjs';

export const CUDA_SETUP_SCRIPT = 'setup:cuda';

/**
 * Provider libraries the installer puts next to the binding, per platform: the
 * manifest in install-metadata.js (linux/x64 is the only platform it covers).
 */
const PROVIDER_LIBRARIES: Record<string, Record<string, string[]>> = {
  linux: {
    cuda: ['libonnxruntime_providers_shared.so', 'libonnxruntime_providers_cuda.so'],
    tensorrt: ['libonnxruntime_providers_shared.so', 'libonnxruntime_providers_tensorrt.so'],
  },
};

/** Folder holding onnxruntime-node's binding for this platform (bin/napi-v6/<platform>/<arch>). */
export function bindingDir(platform: string = process.platform, arch: string = process.arch): string | undefined {
  let pkg: string;
  try {
    pkg = path.dirname(require.resolve('onnxruntime-node/package.json'));
  } catch {
    return undefined;
  }
  return path.join(pkg, 'bin', 'napi-v6', platform, arch);
}

/**
 * Provider library files `backend` needs that are missing from `dir`; empty
 * when none are missing or kvdesk does not know what the backend needs there.
 */
export function missingProviderLibraries(
  backend: string,
  dir: string | undefined = bindingDir(),
  platform: string = process.platform,
  exists: (file: string) => boolean = existsSync,
): string[] {
  const needed = PROVIDER_LIBRARIES[platform]?.[backend];
  if (needed === undefined || dir === undefined) return [];
  return needed.filter((name) => !exists(path.join(dir, name)));
}

/** What the person can do when `backend` is not usable, or undefined when kvdesk has no advice. */
export function setupHint(backend: string, platform: string = process.platform): string | undefined {
  switch (backend) {
    case 'cuda':
    case 'tensorrt':
      return platform === 'linux' && process.arch === 'x64'
        ? `Install the provider libraries with onnxruntime-node's installer: run \`npm run ${CUDA_SETUP_SCRIPT}\` in kvdesk's folder; ` +
            `the machine also needs an NVIDIA driver, CUDA 12 and cuDNN 9${backend === 'tensorrt' ? ' and TensorRT 10' : ''} on the library path.`
        : `onnxruntime-node publishes ${backend === 'cuda' ? 'CUDA' : 'TensorRT'} provider libraries for linux/x64 only; on this platform use another backend.`;
    case 'webgpu':
      return platform === 'linux'
        ? 'WebGPU needs a GPU with a Vulkan driver and the Vulkan loader (libvulkan.so.1, e.g. the libvulkan1 package).'
        : 'WebGPU needs a GPU driver with Direct3D 12 (Windows) or Metal (macOS).';
    case 'dml':
      return 'DirectML needs Windows 10 1903+ and a DirectX 12 GPU.';
    case 'coreml':
      return 'CoreML needs macOS 10.15+.';
    default:
      return undefined;
  }
}
