/**
 * Where a process kvdesk forks (the engine, the backend probe) starts: its bundle (`<name>.js`) where a build put it,
 * else its TypeScript source through tsx (a checkout run from the sources). KVDESK_BUNDLE_DIR names another folder
 * whose bundle comes first: the test runner points it at out/cli, which its global setup bundles from the sources
 * as they are, so the tests' engines start as a person's do (about a third of a second sooner than through tsx).
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

export interface ProcessEntry {
  file: string;
  execArgv: string[];
}

/**
 * The entry of process `name`, whose bundle is looked for in `bundleDirs` and whose source is `source`; `explicit`
 * (a test's own entry) wins, run through tsx unless it is JavaScript. `v8Flags` go first either way.
 */
export function processEntry(
  name: string,
  bundleDirs: readonly string[],
  source: string,
  explicit: string | undefined,
  v8Flags: readonly string[] = [],
): ProcessEntry {
  const dirs = process.env.KVDESK_BUNDLE_DIR ? [process.env.KVDESK_BUNDLE_DIR, ...bundleDirs] : bundleDirs;
  const candidates = explicit !== undefined ? [explicit] : dirs.map((dir) => path.join(dir, `${name}.js`));
  for (const file of candidates) if (file.endsWith('.js') && existsSync(file)) return { file, execArgv: [...v8Flags] };
  return {
    file: explicit ?? source,
    execArgv: [...v8Flags, '--import', pathToFileURL(require.resolve('tsx')).href],
  };
}
