/**
 * npm before 11.19 ignores package.json's allowScripts and runs onnxruntime-node's install script (its CUDA
 * download): package.json's engines ask for the npm the README names, and the lockfile records the same.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
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

  it('ask for a Node every locked package runs on (Vite, electron-vite, Rolldown), as the README says', () => {
    // semver is in the lock (npm's own packages use it); it reads the ranges as npm does.
    const semver = createRequire(path.join(repoRoot, 'package.json'))('semver') as {
      satisfies(v: string, range: string): boolean;
    };
    const pkg = json('package.json') as { engines: Record<string, string> };
    const lock = json('package-lock.json') as { packages: Record<string, { engines?: Record<string, string> }> };
    // The lowest Node of each line the engines allow, and the one before (refused).
    const lowest = ['20.19.0', '22.13.0'];
    for (const v of lowest) expect(semver.satisfies(v, pkg.engines.node as string)).toBe(true);
    for (const v of ['20.18.1', '22.12.0', '21.7.3'])
      expect(semver.satisfies(v, pkg.engines.node as string)).toBe(false);
    // Electron's packages ask for 22.12 but run on Electron's own Node or load on 20.19 (README: EBADENGINE).
    const harmless = new Set(['electron', '@electron/get', '@electron-internal/extract-zip']);
    const refused: string[] = [];
    for (const [at, p] of Object.entries(lock.packages)) {
      const name = at.replace(/^.*node_modules\//, '');
      const range = p.engines?.node;
      if (at === '' || range === undefined) continue;
      for (const v of lowest) {
        if (!semver.satisfies(v, range) && !(v.startsWith('20.') && harmless.has(name)))
          refused.push(`${name} ${range} (${v})`);
      }
    }
    expect(refused).toEqual([]);
    const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
    expect(readme).toContain('**Node 20.19 or newer** (on Node 22, 22.13 or newer');
    expect(readme).toContain('EBADENGINE');
  });
});
