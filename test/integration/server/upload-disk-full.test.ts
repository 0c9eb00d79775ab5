/**
 * A package upload that meets a full disk (a real one: a small tmpfs holds the data folder) is answered 507 with
 * what to do (the models folder, the room the upload needs and what is free), said once in the server's log, and
 * leaves nothing behind: no `.incoming-*` folder, no empty `.incoming-*.lock` (a lock made but not written). So is
 * one whose files fit but whose move into the library does not (the library file cannot be written): no package
 * folder is left that the library file does not list, and no lock.
 * Mounting needs root (or CAP_SYS_ADMIN): where kvdesk's tests cannot mount, this test is skipped and says why.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { readdir, readFile, rm, truncate } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';
import { type RunningServer, startServer } from '../../../src/main/server';
import { defaultModelDir } from '../../helpers/fixtures';

const mountAt = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-full-'));
const mounted = (() => {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mountAt], { stdio: 'ignore' });
    return true;
  } catch {
    console.warn('upload-disk-full: skipped, cannot mount a small tmpfs here (needs root)');
    return false;
  }
})();

let hostApi: HostApi;
let server: RunningServer;
const log: string[] = [];
const dataDir = path.join(mountAt, 'data');
const filler = path.join(mountAt, 'filler');

beforeAll(async () => {
  if (!mounted) return;
  hostApi = await createHostApi({
    runner: new RunnerService({ intraOpNumThreads: 1 }),
    dataDir,
    log: (l) => log.push(l),
  });
  server = await startServer({ hostApi, staticDir: path.join(dataDir, 'no-renderer') });
});
afterAll(async () => {
  await server?.close();
  await hostApi?.close();
  if (mounted) execFileSync('umount', [mountAt]);
  rmSync(mountAt, { recursive: true, force: true });
});

/** Fills the disk to its last byte. */
function fill(): void {
  const fd = openSync(filler, 'a');
  const block = Buffer.alloc(16 * 1024);
  try {
    for (;;) writeSync(fd, block);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    // The last bytes: a page's worth less than a block may still fit.
    try {
      for (;;) writeSync(fd, Buffer.alloc(512));
    } catch {}
  } finally {
    closeSync(fd);
  }
}

async function upload(bytes: number): Promise<{ status: number; body: { ok: boolean; error?: { message: string } } }> {
  const form = new FormData();
  form.append('name', 'big');
  form.append('file', new Blob([Buffer.alloc(bytes, 7)]), 'big/onnx/model.onnx');
  const r = await fetch(`${server.url}/api/models/upload?load=false`, { method: 'POST', body: form });
  return { status: r.status, body: (await r.json()) as { ok: boolean; error?: { message: string } } };
}

const leftovers = async () =>
  (await readdir(path.join(dataDir, 'models')).catch(() => [] as string[])).filter((n) => n.startsWith('.incoming'));

describe.skipIf(!mounted)('an upload on a full disk', () => {
  it('is refused with 507 saying where, how much is needed and free, once in the log; nothing is left', async () => {
    const models = path.join(dataDir, 'models');
    // Room for the upload's lock and folder, not for its 1 MiB file.
    fill();
    await truncate(filler, Math.max(0, statSync(filler).size - 64 * 1024));
    const cut = await upload(1024 * 1024);
    expect(cut.status, JSON.stringify(cut.body)).toBe(507);
    expect(cut.body.ok).toBe(false);
    expect(cut.body.error?.message).toMatch(
      new RegExp(
        `^not enough space on the disk of ${models.replace(/[/\\]/g, '\\$&')}: the upload needs 1\\.\\d+ MiB, [\\d.]+ KiB is free\\. Free some space there`,
      ),
    );
    expect(await leftovers()).toEqual([]);
    // Not even room for the lock: the same answer, and no empty lock left.
    fill();
    const none = await upload(1024 * 1024);
    expect(none.status, JSON.stringify(none.body)).toBe(507);
    expect(none.body.error?.message).toContain(`not enough space on the disk of ${models}`);
    expect(await leftovers()).toEqual([]);
    const said = log.filter((l) => l.includes('not enough space'));
    expect(said).toHaveLength(2);
    expect(said[0]).toContain(`kvdesk: an upload was refused: not enough space on the disk of ${models}`);
    // Space again: the upload is written whole and checked (not a package: refused for that, and removed).
    await rm(filler);
    const written = await upload(1024 * 1024);
    expect(written.status, JSON.stringify(written.body)).toBe(422);
    expect(written.body.error?.message).toContain('is not a model package');
    expect(await leftovers()).toEqual([]);
  });
  it('one whose files fit but whose move into the library meets a full disk is the same 507; nothing is left', async () => {
    const models = path.join(dataDir, 'models');
    /** The default package's files, under the folder `name`. */
    const files = (dir: string, rel = ''): string[] =>
      readdirSync(path.join(dir, rel), { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? files(dir, path.join(rel, e.name)) : [path.join(rel, e.name)],
      );
    const send = async (name: string, load: boolean) => {
      const form = new FormData();
      for (const f of files(defaultModelDir))
        form.append('file', new Blob([readFileSync(path.join(defaultModelDir, f))]), `${name}/${f}`);
      const r = await fetch(`${server.url}/api/models/upload?load=${load}`, { method: 'POST', body: form });
      return { status: r.status, body: (await r.json()) as { ok: boolean; error?: { message: string } } };
    };
    // The disk fills once the upload is written, as the package is moved into the library.
    const importStaged = hostApi.importStaged;
    hostApi.importStaged = (u) => {
      fill();
      return importStaged(u);
    };
    const before = log.filter((l) => l.includes('not enough space')).length;
    try {
      for (const load of [false, true]) {
        const full = await send('pkg', load);
        expect(full.status, JSON.stringify(full.body)).toBe(507);
        expect(full.body.ok).toBe(false);
        expect(full.body.error?.message).toMatch(
          new RegExp(
            `^not enough space on the disk of ${models.replace(/[/\\]/g, '\\$&')}: [\\d.]+ [KM]iB is free\\. Free some space there .*kvdesk kept nothing of it\\.$`,
          ),
        );
        // No package folder, no upload folder, no lock (the library's or an upload's).
        expect(await readdir(models)).toEqual([]);
        expect((await readdir(dataDir)).filter((n) => n.endsWith('.lock') || n.endsWith('.tmp'))).toEqual([]);
        expect(await readFile(path.join(dataDir, 'library.json'), 'utf8').catch(() => '')).not.toContain('pkg');
        await rm(filler);
      }
    } finally {
      hostApi.importStaged = importStaged;
    }
    const said = log.filter((l) => l.includes('not enough space')).slice(before);
    expect(said).toHaveLength(2);
    expect(said[0]).toContain(`kvdesk: an upload was refused: not enough space on the disk of ${models}`);
    // With room, the same upload joins the library (and the file lists it).
    const room = await send('pkg', false);
    expect(room.status, JSON.stringify(room.body)).toBe(200);
    expect(await readdir(models)).toEqual(['pkg']);
    expect(await readFile(path.join(dataDir, 'library.json'), 'utf8')).toContain(path.join(models, 'pkg'));
  });
});
