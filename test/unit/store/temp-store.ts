/** A ThreadStore on a data directory of its own, removed after each test, with its log kept. */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach } from 'vitest';
import { ThreadStore } from '../../../src/main/store/thread-store';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

export function tempStore(prefix: string, now?: () => number): { s: ThreadStore; dir: string; log: string[] } {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  const log: string[] = [];
  return { s: new ThreadStore(dir, { log: (l) => log.push(l), ...(now ? { now } : {}) }), dir, log };
}
