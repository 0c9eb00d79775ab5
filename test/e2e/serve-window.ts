/**
 * `kvdesk serve` whose page gets the desktop window's API server control (src/main/server/api-server-control.ts,
 * the one the Electron main process makes) instead of serve's own report, so the Models view's API server card —
 * start, stop, the local network, the API key — runs in Chromium as it does in the window. The key is kept in the
 * data directory, as the window keeps it in its own. Everything else is the real serve. Run as
 * `node bin/run-ts.cjs test/e2e/serve-window.ts serve [serve flags]`.
 */
import path from 'node:path';
import { serve } from '../../src/cli/serve';
import { API_KEY_FILE, createApiServerControl } from '../../src/main/server';
import { dataFolderId } from '../../src/main/store/data-id';

const args = process.argv.slice(2);
serve(
  args[0] === 'serve' ? args.slice(1) : args,
  {
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
  },
  {
    apiServer: (host, dataDir) =>
      createApiServerControl({
        host,
        keyFile: path.join(dataDir, API_KEY_FILE),
        dataId: () => dataFolderId(dataDir, (line) => process.stderr.write(`${line}\n`)),
        log: (line) => process.stderr.write(`${line}\n`),
      }),
  },
).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`serve-window: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
