/**
 * Before the browser tests: Debian Chromium must exist, the default model must
 * exist, the renderer is built fresh into out/renderer (what serve hosts), and the CLI into out/cli.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { TEST_CHROMIUM } from './chromium';
import { buildRenderer, ROOT } from './serve';

export default function globalSetup(): void {
  if (!existsSync(TEST_CHROMIUM)) {
    throw new Error(
      `The browser tests run in Debian's Chromium at ${TEST_CHROMIUM}, which is missing. Install it with ` +
        '`apt-get update && apt-get install -y chromium chromium-headless-shell` (the headless shell: the same ' +
        'browser, faster tests; or set KVDESK_CHROMIUM to another Chromium binary).',
    );
  }
  if (!existsSync(path.join(ROOT, 'resources/models/default/onnx/model.onnx'))) {
    execFileSync(process.execPath, [path.join(ROOT, 'bin/run-ts.cjs'), 'scripts/generate-model.ts', '--default'], {
      cwd: ROOT,
      stdio: 'inherit',
    });
  }
  if (process.env.KVDESK_E2E_SKIP_BUILD !== '1') {
    // Only the renderer: main/preload are not needed by `serve`.
    buildRenderer();
  }
  // The CLI's bundle from the sources as they are: the servers the tests start run it (bin/kvdesk.cjs).
  execFileSync(process.execPath, [path.join(ROOT, 'scripts/build-cli.cjs'), '--quiet'], {
    cwd: ROOT,
    stdio: 'inherit',
  });
}
