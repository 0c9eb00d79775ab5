/** The benchmark model packages: generated with the project's own generator into bench/models/<shape> (git-ignored), reused when up to date. */
import path from 'node:path';
import { generateModelPackage, presetConfig } from '../../scripts/model-gen/index';

/** The shapes the issue names. */
export type BenchShape = 'gpt2-small' | 'llama-small';

/** Folder of a shape's package. */
export function modelDir(shape: BenchShape): string {
  return path.resolve(__dirname, '..', 'models', shape);
}

/** Generates the package unless its stamp says it is up to date; returns the folder and what was done. */
export function ensureModel(
  shape: BenchShape,
  log: (line: string) => void,
): { dir: string; status: string; ms: number } {
  const dir = modelDir(shape);
  const started = performance.now();
  const result = generateModelPackage(dir, presetConfig(shape), { log: (line) => log(`  ${line}`) });
  return { dir, status: result.status, ms: performance.now() - started };
}
