/**
 * The CUDA setup command must match what onnxruntime-node's own installer
 * accepts: these tests read the installer's source in node_modules, so an
 * onnxruntime-node upgrade that renames the flag fails here, not on a user's machine.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CUDA_SETUP_COMMAND, missingProviderLibraries, setupHint } from '../../../src/main/backends/cuda-setup';
import { repoRoot } from '../../helpers/fixtures';

const ORT_NODE = path.join(repoRoot, 'node_modules/onnxruntime-node');

describe('CUDA setup command', () => {
  it("runs onnxruntime-node's install script with a flag its parser knows", () => {
    const [node, script, flag, ...rest] = CUDA_SETUP_COMMAND.split(' ');
    expect(node).toBe('node');
    expect(rest).toEqual([]);
    expect(script).toBe('node_modules/onnxruntime-node/script/install');
    // The package's own postinstall runs the same script.
    const pkg = JSON.parse(readFileSync(path.join(ORT_NODE, 'package.json'), 'utf8')) as {
      scripts: { postinstall: string };
    };
    expect(pkg.scripts.postinstall).toBe('node ./script/install');
    const utils = readFileSync(path.join(ORT_NODE, 'script/install-utils.js'), 'utf8');
    const [name, value] = (flag ?? '').split('=');
    expect(utils).toContain(`startsWith('${name}=')`);
    const metadata = readFileSync(path.join(ORT_NODE, 'script/install-metadata.js'), 'utf8');
    expect(metadata).toContain(`'linux/x64:${value}'`);
    expect(metadata).toContain('libonnxruntime_providers_cuda.so');
  });
});

describe('provider libraries', () => {
  it('lists the CUDA libraries missing from the binding folder', () => {
    const present = new Set(['/b/libonnxruntime_providers_shared.so']);
    expect(missingProviderLibraries('cuda', '/b', 'linux', (f) => present.has(f))).toEqual([
      'libonnxruntime_providers_cuda.so',
    ]);
    expect(missingProviderLibraries('tensorrt', '/b', 'linux', () => false)).toEqual([
      'libonnxruntime_providers_shared.so',
      'libonnxruntime_providers_tensorrt.so',
    ]);
    expect(missingProviderLibraries('cuda', '/b', 'linux', () => true)).toEqual([]);
    // Nothing to check where the installer has no manifest, or for bundled backends.
    expect(missingProviderLibraries('cuda', '/b', 'darwin', () => false)).toEqual([]);
    expect(missingProviderLibraries('webgpu', '/b', 'linux', () => false)).toEqual([]);
  });

  it('gives advice per backend', () => {
    expect(setupHint('cuda', 'darwin')).toContain('linux/x64 only');
    expect(setupHint('webgpu', 'linux')).toContain('libvulkan.so.1');
    expect(setupHint('cpu')).toBeUndefined();
  });
});
