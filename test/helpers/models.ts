import os from 'node:os';
import path from 'node:path';
import { generateModelPackage, type ModelGenConfig, presetConfig } from '../../scripts/model-gen';

/**
 * Writes (once per machine, cached under the temp dir) a generated model
 * package with the given overrides of the default preset, and returns its path.
 */
export function generatedModel(name: string, overrides: Partial<ModelGenConfig>): string {
  const config: ModelGenConfig = { ...presetConfig('default'), ...overrides, name };
  const dir = path.join(os.tmpdir(), 'kvdesk-test-models', name);
  generateModelPackage(dir, config);
  return dir;
}

/** A model big enough that one prefill takes a noticeable time on a CPU (≈25M parameters). */
export function slowModel(): string {
  return generatedModel('slow-llama', {
    numLayers: 8,
    hiddenSize: 512,
    numHeads: 8,
    numKvHeads: 4,
    headDim: 64,
    intermediateSize: 1376,
    vocabSize: 2048,
    maxPositions: 4096,
  });
}
