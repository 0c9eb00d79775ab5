import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { TestProject } from 'vitest/node';

/**
 * Makes sure the default model package exists (it is generated, never committed), and bundles the CLI from the
 * sources as they are (the tests' `kvdesk` runs it, as a person's does after npm install, and the engines and backend
 * probes the tests start run its engine.js and probe-process.js: KVDESK_BUNDLE_DIR in vitest.config.mts) — again
 * before each rerun in watch mode, so an edited engine is never tested stale.
 */
export default function setup(project: TestProject): void {
  const root = path.resolve(__dirname, '..');
  if (!existsSync(path.join(root, 'resources/models/default/onnx/model.onnx'))) {
    execFileSync(process.execPath, [path.join(root, 'bin/run-ts.cjs'), 'scripts/generate-model.ts', '--default'], {
      cwd: root,
      stdio: 'inherit',
    });
  }
  const bundle = () => {
    execFileSync(process.execPath, [path.join(root, 'scripts/build-cli.cjs'), '--quiet'], {
      cwd: root,
      stdio: 'inherit',
    });
  };
  bundle();
  project.onTestsRerun(bundle);
}
