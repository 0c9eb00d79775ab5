/**
 * npm before 11.19 ignores package.json's allowScripts and runs onnxruntime-node's install script (its CUDA
 * download): package.json's engines ask for the npm the README names, and the lockfile records the same.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/fixtures';

const json = (file: string) => JSON.parse(readFileSync(path.join(repoRoot, file), 'utf8'));

describe("package.json's engines", () => {
  it('ask for the npm that honours allowScripts, as the README says', () => {
    const pkg = json('package.json') as { engines: Record<string, string>; allowScripts: Record<string, boolean> };
    expect(pkg.allowScripts['onnxruntime-node']).toBe(false);
    expect(pkg.engines.npm).toBe('>=11.19');
    expect(readFileSync(path.join(repoRoot, 'README.md'), 'utf8')).toContain('**npm 11.19 or newer**');
    const lock = json('package-lock.json') as { packages: Record<string, { engines?: Record<string, string> }> };
    expect(lock.packages['']?.engines).toEqual(pkg.engines);
  });
});
