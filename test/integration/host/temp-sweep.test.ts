/**
 * What saves cut off leave beside the data files (src/main/store/write-atomic.ts, sweepTemps): a kvdesk killed
 * while it wrote a chat leaves `threads/<id>.json.<pid>.<ms>.<n>.tmp`, as large as the chat. Cleared when a host
 * starts, with real processes: never the temp file of a save another live kvdesk is making.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';

const tmpDirs: string[] = [];
const apis: HostApi[] = [];
const children: ChildProcess[] = [];

afterEach(async () => {
  await Promise.all(apis.splice(0).map((a) => a.close()));
  for (const c of children.splice(0)) c.kill('SIGKILL');
});
afterAll(async () => {
  await Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** A kvdesk killed in the middle of a save: its pid is no process any more. */
async function killedPid(): Promise<number> {
  const c = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  await new Promise((r) => c.once('spawn', r));
  c.kill('SIGKILL');
  await new Promise((r) => c.once('exit', r));
  return c.pid as number;
}

describe('at host start', () => {
  it('removes the temp files of saves that never finished, and says so once; keeps a live save and the data', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-temps-'));
    tmpDirs.push(dataDir);
    const threads = path.join(dataDir, 'threads');
    await mkdir(threads, { recursive: true });
    const chat = JSON.stringify({ id: 'c1', title: 'kept', messages: [], createdAt: 1, updatedAt: 1 });
    await writeFile(path.join(threads, 'c1.json'), chat);
    const ago = async (file: string, ms: number) => {
      const t = new Date(Date.now() - ms);
      await utimes(file, t, t);
    };
    const temp = async (dir: string, name: string, bytes: number, idleMs = 0) => {
      const file = path.join(dir, name);
      await writeFile(file, 'x'.repeat(bytes));
      if (idleMs) await ago(file, idleMs);
      return file;
    };
    const dead = await killedPid();
    const live = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    children.push(live);
    await new Promise((r) => live.once('spawn', r));
    const now = Date.now();
    // Killed during a chat's save, and during the settings' save.
    await temp(threads, `c1.json.${dead}.${now - 60_000}.3.tmp`, 3000, 60_000);
    await temp(dataDir, `settings.json.${dead}.${now - 60_000}.4.tmp`, 1000, 60_000);
    // An earlier process that had this very pid (a container started again).
    await temp(threads, `c2.json.${process.pid}.${now - 3_600_000}.1.tmp`, 24, 3_600_000);
    // Another kvdesk, running, in the middle of its save: kept.
    const inFlight = await temp(threads, `c1.json.${live.pid}.${now}.9.tmp`, 500);
    // A pid used again by another process since: judged by its age.
    await temp(threads, `c3.json.${live.pid}.${now - 3_600_000}.2.tmp`, 10, 3_600_000);
    const log: string[] = [];
    const api = await createHostApi({
      runner: new RunnerService({ intraOpNumThreads: 1 }),
      dataDir,
      log: (l) => log.push(l),
    });
    apis.push(api);
    expect((await readdir(threads)).sort()).toEqual(['c1.json', path.basename(inFlight)].sort());
    expect((await readdir(dataDir)).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    const said = log.filter((l) => l.includes('temp file'));
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/removed 4 temp files \(3\.9\d* KiB\) left by saves that never finished/);
    expect(said[0]).toContain(threads);
    const listed = await api.call('listThreads', {});
    expect(listed.ok && listed.value.map((t) => t.id)).toEqual(['c1']);
  });
});
