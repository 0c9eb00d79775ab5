/**
 * kvdesk's own package (its folder and package.json), found from this file up: the same answer whether the code
 * runs from its sources, from the CLI's bundle (out/cli) or from Electron's build (out/main).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

let found: { root: string; version: string } | null | undefined;

/** The folder of kvdesk's package.json and its version; null when none is found above this file. */
export function ownPackage(): { root: string; version: string } | null {
  if (found !== undefined) return found;
  found = null;
  for (let dir = __dirname; ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (pkg.name === 'kvdesk' && typeof pkg.version === 'string') {
        found = { root: dir, version: pkg.version };
        break;
      }
    } catch {
      // No package.json here: look further up.
    }
    if (path.dirname(dir) === dir) break;
  }
  return found;
}
