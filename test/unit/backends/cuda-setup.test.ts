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
  it("is package.json's setup:cuda, and runs onnxruntime-node's installer with a flag its parser keeps", () => {
    const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(pkg.scripts['setup:cuda']).toBe(CUDA_SETUP_COMMAND);
    const script = readFileSync(path.join(repoRoot, 'scripts/setup-cuda.cjs'), 'utf8');
    expect(script).toContain("[installer, '--onnxruntime-node-install']");
    // The bare flag is read as "install" (true), which installs the platform's required manifests: cuda12 here.
    const utils = readFileSync(path.join(ORT_NODE, 'script/install-utils.js'), 'utf8');
    expect(utils).toContain("process.argv[i] === '--onnxruntime-node-install'");
    const metadata = require(path.join(ORT_NODE, 'script/install-metadata.js')) as {
      requirements: Record<string, string[]>;
      manifests: Record<string, Record<string, unknown>>;
    };
    expect(metadata.requirements['linux/x64']).toEqual(['cuda12']);
    // The libraries the script checks for are those the manifest installs.
    const { LIBRARIES } = require(path.join(repoRoot, 'scripts/setup-cuda.cjs')) as { LIBRARIES: string[] };
    expect(
      Object.keys(metadata.manifests['linux/x64:cuda12'] ?? {})
        .map((f) => path.basename(f))
        .sort(),
    ).toEqual([...LIBRARIES].sort());
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
