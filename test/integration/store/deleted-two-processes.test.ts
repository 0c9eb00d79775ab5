/**
 * Two kvdesks on one data folder deleting chats at the same moment: each delete is noted in deleted-threads.json
 * (a late save of the chat from a page that had not heard of it is refused), none written over by the other's write.
 * Two real processes, each with its own store, delete their own chats one after the other, as fast as they can.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { DELETED_FILE } from '../../../src/main/store/thread-store';

const ROOT = path.resolve(__dirname, '../../..');
const EACH = 100;
let dataDir = '';
const children: ChildProcess[] = [];

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** Starts a store process deleting `<prefix>-0…`; `said(line)` resolves once it said it (rejects, with its output, if it exited first). */
function start(prefix: string) {
  const child = spawn(
    process.execPath,
    [path.join(ROOT, 'bin/run-ts.cjs'), 'test/helpers/delete-chats.ts', dataDir, prefix, String(EACH)],
    { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  children.push(child);
  let out = '';
  child.stdout?.on('data', (d) => {
    out += String(d);
  });
  child.stderr?.on('data', (d) => {
    out += String(d);
  });
  const said = (line: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (out.includes(`${line}\n`)) resolve();
        else if (child.exitCode !== null) reject(new Error(`${prefix} exited before "${line}":\n${out}`));
        else setTimeout(check, 20);
      };
      check();
    });
  return { child, said };
}

it("two kvdesks on one data folder deleting chats at the same moment: every delete is noted, none lost to the other's write", async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-deleted-two-'));
  const a = start('a');
  const b = start('b');
  await Promise.all([a.said('ready'), b.said('ready')]);
  a.child.stdin?.write('go\n');
  b.child.stdin?.write('go\n');
  await Promise.all([a.said('done'), b.said('done')]);
  const noted = (
    JSON.parse(readFileSync(path.join(dataDir, DELETED_FILE), 'utf8')) as { deleted: { id: string }[] }
  ).deleted.map((e) => e.id);
  const missing = [...['a', 'b'].flatMap((p) => Array.from({ length: EACH }, (_, i) => `${p}-${i}`))].filter(
    (id) => !noted.includes(id),
  );
  expect(missing).toEqual([]);
  expect(noted).toHaveLength(2 * EACH);
  // The lock is let go.
  expect(existsSync(path.join(dataDir, `${DELETED_FILE}.lock`))).toBe(false);
}, 120_000);
