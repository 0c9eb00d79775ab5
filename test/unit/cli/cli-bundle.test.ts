/**
 * Which code `kvdesk` runs (bin/cli-bundle.cjs): the CLI's bundle only while it is complete and at least as new as
 * every source file and package.json, so an edit is never run stale; and the bundle itself, made by
 * scripts/build-cli.cjs (in test/global-setup.ts, not here: other test files run it meanwhile), runs the real CLI.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/fixtures';

const { freshCliBundle } = createRequire(__filename)(path.join(repoRoot, 'bin/cli-bundle.cjs')) as {
  freshCliBundle(root: string): string | null;
};

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A stand-in for kvdesk's folder: sources, package.json and a bundle, each file with the time (s) given. */
function tree(times: Record<string, number>): string {
  const root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-cli-bundle-'));
  dirs.push(root);
  for (const [file, seconds] of Object.entries(times)) {
    const p = path.join(root, file);
    mkdirSync(path.dirname(p), { recursive: true });
    writeFileSync(p, '');
    utimesSync(p, seconds, seconds);
  }
  return root;
}

const BUNDLE = { 'out/cli/main.js': 2000, 'out/cli/engine.js': 2000, 'out/cli/probe-process.js': 2000 };

describe('the CLI bundle kvdesk runs', () => {
  it('is run while it is at least as new as every source file and package.json', () => {
    const root = tree({ ...BUNDLE, 'src/cli/main.ts': 1000, 'src/main/deep/er/x.ts': 2000, 'package.json': 1500 });
    expect(freshCliBundle(root)).toBe(path.join(root, 'out/cli/main.js'));
  });

  it('is not run once a source file, however deep, or package.json is newer', () => {
    expect(freshCliBundle(tree({ ...BUNDLE, 'src/cli/main.ts': 1000, 'src/main/deep/er/x.ts': 2001 }))).toBeNull();
    expect(freshCliBundle(tree({ ...BUNDLE, 'src/cli/main.ts': 1000, 'package.json': 2001 }))).toBeNull();
  });

  it('is not run when one of its files is missing or older than the sources', () => {
    const { 'out/cli/engine.js': _, ...noEngine } = BUNDLE;
    expect(freshCliBundle(tree({ ...noEngine, 'src/cli/main.ts': 1000 }))).toBeNull();
    expect(freshCliBundle(tree({ ...BUNDLE, 'out/cli/probe-process.js': 900, 'src/cli/main.ts': 1000 }))).toBeNull();
    expect(freshCliBundle(tree({ 'src/cli/main.ts': 1000 }))).toBeNull();
  });

  it("is what this checkout's kvdesk runs after the build (the test run's setup), and it answers as the CLI does", () => {
    expect(freshCliBundle(repoRoot)).toBe(path.join(repoRoot, 'out/cli/main.js'));
    const out = execFileSync(process.execPath, [path.join(repoRoot, 'out/cli/main.js'), '--version'], {
      encoding: 'utf8',
    });
    expect(out).toMatch(/^kvdesk \d+\.\d+\.\d+\nonnxruntime-node \d+\.\d+\.\d+\n$/);
  });
});
