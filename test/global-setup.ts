import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/**
 * Makes sure the default model package exists (it is generated, never committed), and bundles the CLI from the
 * sources as they are (the tests' `kvdesk` runs it, as a person's does after npm install).
 */
export default function setup(): void {
  const root = path.resolve(__dirname, '..');
  if (!existsSync(path.join(root, 'resources/models/default/onnx/model.onnx'))) {
    execFileSync(process.execPath, [path.join(root, 'bin/run-ts.cjs'), 'scripts/generate-model.ts', '--default'], {
      cwd: root,
      stdio: 'inherit',
    });
  }
  execFileSync(process.execPath, [path.join(root, 'scripts/build-cli.cjs'), '--quiet'], {
    cwd: root,
    stdio: 'inherit',
  });
}
