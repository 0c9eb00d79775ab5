/**
 * What downloads and uploads that never ended leave in `<dataDir>/models` (src/main/host/staging-sweep.ts): cleared
 * when a host starts, with real files and processes — a `kvdesk serve` killed in the middle of an upload, stopped
 * downloads whose package is there or that nobody touched for weeks — and never a folder another live kvdesk is
 * writing (its lock).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';
import { repoRoot } from '../../helpers/fixtures';

const tmpDirs: string[] = [];
const apis: HostApi[] = [];
const children: ChildProcess[] = [];

afterEach(async () => {
  await Promise.all(apis.splice(0).map((a) => a.close()));
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null && c.pid) {
      try {
        process.kill(-c.pid, 'SIGKILL');
      } catch {
        c.kill('SIGKILL');
      }
    }
  }
});
afterAll(async () => {
  await Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function tmp(): Promise<string> {
  const d = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-sweep-'));
  tmpDirs.push(d);
  return d;
}

async function host(dataDir: string, log: string[] = []): Promise<HostApi> {
  const api = await createHostApi({
    runner: new RunnerService({ intraOpNumThreads: 1 }),
    dataDir,
    log: (l) => log.push(l),
  });
  apis.push(api);
  await api.libraryChecked;
  return api;
}

/** A process that lives until the test ends (a kvdesk writing somewhere, as far as a lock can tell). */
function liveProcess(): ChildProcess {
  const c = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore', detached: true });
  children.push(c);
  return c;
}

/** A dead process's pid. */
async function deadPid(): Promise<number> {
  const c = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
  await new Promise((r) => c.once('exit', r));
  return c.pid as number;
}

async function aged(dir: string, days: number): Promise<void> {
  const t = new Date(Date.now() - days * 24 * 3600 * 1000);
  for (const e of await readdir(dir, { recursive: true })) await utimes(path.join(dir, e), t, t);
  await utimes(dir, t, t);
}

describe('at host start', () => {
  it('clears abandoned uploads and downloads that can never resume; keeps what a live kvdesk writes', async () => {
    const dataDir = await tmp();
    const models = path.join(dataDir, 'models');
    const folder = async (name: string, lock?: string, lockBeside = false) => {
      const dir = path.join(models, name);
      await mkdir(path.join(dir, 'onnx'), { recursive: true });
      await writeFile(path.join(dir, 'onnx', 'model.onnx.part'), Buffer.alloc(1000, 1));
      if (lock !== undefined) await writeFile(lockBeside ? `${dir}.lock` : path.join(dir, '.lock'), lock);
      return dir;
    };
    const live = liveProcess();
    const dead = await deadPid();
    // A package in place (not a valid one: the sweep never looks inside), and stopped downloads.
    await mkdir(path.join(models, 'present'), { recursive: true });
    const ofPresent = await folder('.present.0123456789ab.partial');
    const ofPresentHeld = await folder('.present.bbbbbbbbbbbb.partial', String(live.pid));
    const recent = await folder('.absent.0123456789ab.partial', String(dead));
    const old = await folder('.old.0123456789ab.partial');
    await aged(old, 15);
    // Uploads: a server killed during one (its lock names a dead process), one being written now, an older
    // kvdesk's (no lock) recent and old.
    const killed = await folder('.incoming-aaaa', String(dead), true);
    const writing = await folder('.incoming-bbbb', String(live.pid), true);
    const unlockedRecent = await folder('.incoming-cccc');
    const unlockedOld = await folder('.incoming-dddd');
    await aged(unlockedOld, 2);
    await writeFile(path.join(models, '.incoming-eeee.lock'), String(dead)); // a lock whose folder went

    const log: string[] = [];
    await host(dataDir, log);
    const left = (await readdir(models)).sort();
    expect(left).toEqual(
      [
        'present',
        path.basename(ofPresentHeld),
        path.basename(recent),
        path.basename(writing),
        `${path.basename(writing)}.lock`,
        path.basename(unlockedRecent),
      ].sort(),
    );
    const said = log.join('\n');
    for (const gone of [ofPresent, old, killed, unlockedOld]) expect(said).toContain(`removed ${gone} (`);
    expect(said).toContain(`which no download resumes: ${path.join(models, 'present')} is there already`);
    expect(said).toContain('a download stopped 15 days ago');
    expect(said).toContain('an upload that never finished (kvdesk stopped during it)');
  });
});

/** Starts `kvdesk serve` on `dataDir` (its own process group); resolves with its URL. */
async function startServe(dataDir: string): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(
    process.execPath,
    [path.join(repoRoot, 'bin/kvdesk.cjs'), 'serve', '--port', '0', '--threads', '1', '--data-dir', dataDir],
    { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  children.push(child);
  let err = '';
  child.stderr?.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /^kvdesk serving (http:\/\/127\.0\.0\.1:\d+)$/m.exec(out);
      if (m) resolve(m[1] as string);
    });
    child.once('exit', (code) => reject(new Error(`kvdesk serve exited with ${code}: ${err}`)));
  });
  return { child, url, stderr: () => err };
}

/** Sends the start of a multipart upload of a large file, and leaves the request open. */
function uploadStart(url: string): http.ClientRequest {
  const u = new URL(url);
  const b = '----kvdesk-test';
  const req = http.request({
    host: u.hostname,
    port: u.port,
    path: '/api/models/upload',
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${b}` },
  });
  req.on('error', () => {});
  req.write(
    `--${b}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n--${b}\r\nContent-Disposition: form-data; name="file"; filename="big/onnx/model.onnx"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  req.write(Buffer.alloc(4 << 20, 3));
  return req;
}

async function incoming(models: string): Promise<string[]> {
  return (await readdir(models).catch(() => [] as string[])).filter((n) => /^\.incoming-[0-9a-f]+$/.test(n));
}

async function until(what: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await what())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('kvdesk serve killed during an upload', () => {
  it('the next start clears what it wrote; a host started during a live upload leaves that one alone', async () => {
    const dataDir = await tmp();
    const models = path.join(dataDir, 'models');
    const first = await startServe(dataDir);
    const req = uploadStart(first.url);
    await until(async () => (await incoming(models)).length === 1);
    const [left] = await incoming(models);
    // Killed as a crash, an OOM or a power cut kills it: nothing of it runs on.
    process.kill(-(first.child.pid as number), 'SIGKILL');
    await new Promise((r) => first.child.once('exit', r));
    req.destroy();
    expect(await incoming(models)).toEqual([left]);

    const second = await startServe(dataDir);
    await until(async () => !(await incoming(models)).includes(left as string));
    expect(second.stderr()).toContain(`removed ${path.join(models, left as string)} (`);

    // An upload to the second, under way, while another host starts on the same data directory.
    const req2 = uploadStart(second.url);
    await until(async () => (await incoming(models)).length === 1);
    const [live] = await incoming(models);
    await host(dataDir);
    expect(await incoming(models)).toEqual([live]);
    req2.destroy();
    // The server drops it once the client is gone.
    await until(async () => (await readdir(models)).filter((n) => n.startsWith('.incoming-')).length === 0);
  }, 60_000);
});
