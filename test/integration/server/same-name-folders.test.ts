/**
 * Two folders of one name are two models, against a real server: each loads under an id of its own (`model`,
 * `model-2`), both stay loaded and every API reaches each; loading one again keeps its id and leaves the other be;
 * the ids stay with their folders after a restart; names keep their letters (`模型`, `ünï`), so different names are
 * different ids; an upload named as a loaded folder is told apart; and Ollama's DELETE /api/delete never unloads or
 * deletes a package other than the one the name is.
 */
import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { ModelLibrary } from '../../../src/main/host/model-library';
import { RunnerService } from '../../../src/main/host/runner-service';
import { slugify } from '../../../src/main/packages/spec-assembly';
import { type RunningServer, startServer } from '../../../src/main/server';
import { defaultModelDir } from '../../helpers/fixtures';

let pkgs: string;
/** Open hosts and servers, closed after each test. */
const open: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  pkgs = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-same-name-'));
});
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});
afterAll(async () => {
  await rm(pkgs, { recursive: true, force: true });
});

/** A copy of the default package at `pkgs/rel` (its folder's name is the last part). */
async function pkg(rel: string): Promise<string> {
  const dir = path.join(pkgs, rel);
  await mkdir(path.dirname(dir), { recursive: true });
  await cp(defaultModelDir, dir, { recursive: true });
  return dir;
}

async function serve(dataDir: string): Promise<{ hostApi: HostApi; url: string }> {
  const hostApi = await createHostApi({
    runner: new RunnerService({ intraOpNumThreads: 1 }),
    dataDir,
    defaultModelDir,
  });
  open.push(hostApi);
  const server: RunningServer = await startServer({ hostApi, staticDir: path.join(dataDir, 'no-renderer') });
  open.push(server);
  await hostApi.libraryChecked;
  return { hostApi, url: server.url };
}

async function load(hostApi: HostApi, dir: string): Promise<string> {
  const r = await hostApi.call('loadModel', { path: dir });
  if (!r.ok) throw new Error(r.error.message);
  return r.value.id;
}

/** The folder each loaded model is loaded from, by id. */
function loaded(hostApi: HostApi): Record<string, string> {
  return Object.fromEntries(hostApi.runner.listModels().map((m) => [m.id, m.spec.root]));
}

/** Which folder answers a chat completion naming `model`. */
async function answers(url: string, model: string): Promise<number> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  });
  return r.status;
}

describe('two folders of one name', () => {
  it('both load under ids of their own and stay loaded; each is reached by its id; a reload keeps its id', async () => {
    const dataDir = await mkdtemp(path.join(pkgs, 'data-'));
    const x = await pkg('x/model');
    const y = await pkg('y/model');
    const { hostApi, url } = await serve(dataDir);
    expect(await load(hostApi, x)).toBe('model');
    expect(await load(hostApi, y)).toBe('model-2');
    expect(loaded(hostApi)).toMatchObject({ model: x, 'model-2': y });
    // Told apart wherever models are listed (the window's picker shows the name).
    const names = Object.fromEntries(hostApi.runner.listModels().map((m) => [m.id, m.spec.displayName]));
    expect(names).toMatchObject({ model: 'model', 'model-2': 'model (model-2)' });
    const v1 = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(v1.data.map((m) => m.id)).toEqual(expect.arrayContaining(['model', 'model-2']));
    const tags = (await (await fetch(`${url}/api/tags`)).json()) as { models: Array<{ name: string }> };
    expect(tags.models.map((m) => m.name)).toEqual(expect.arrayContaining(['model:latest', 'model-2:latest']));
    expect(await answers(url, 'model')).toBe(200);
    expect(await answers(url, 'model-2')).toBe(200);
    // The same folder again is a reload: its id, the other left loaded.
    expect(await load(hostApi, x)).toBe('model');
    expect(await load(hostApi, y)).toBe('model-2');
    expect(loaded(hostApi)).toMatchObject({ model: x, 'model-2': y });
    const library = hostApi.library.list();
    expect(library.filter((e) => e.root === x || e.root === y).map((e) => [e.id, e.spec?.id])).toEqual([
      ['model-2', 'model-2'],
      ['model', 'model'],
    ]);

    // After a restart, each folder keeps its id, whichever loads first.
    for (const o of open.splice(0).reverse()) await o.close();
    const again = await serve(dataDir);
    expect(await load(again.hostApi, y)).toBe('model-2');
    expect(await load(again.hostApi, x)).toBe('model');
    // Unloaded, a library package loads on first use by its id: the folder that id is.
    expect((await again.hostApi.call('unloadModel', { id: 'model-2' })).ok).toBe(true);
    expect(await answers(again.url, 'model-2')).toBe(200);
    expect(loaded(again.hostApi)).toMatchObject({ model: x, 'model-2': y });
  });

  it('a library written with one id for two folders gives the more recently loaded that id, the other its own', async () => {
    const dataDir = await mkdtemp(path.join(pkgs, 'data-'));
    const x = await pkg('old-x/model');
    const y = await pkg('old-y/model');
    const packages = [
      { root: x, id: 'model', addedAt: 1, lastLoadedAt: 1 },
      { root: y, id: 'model', addedAt: 2, lastLoadedAt: 2 },
    ];
    await writeFile(path.join(dataDir, 'library.json'), JSON.stringify({ version: 1, packages }));
    const lib = await ModelLibrary.open(dataDir);
    expect(lib.list().map((e) => [e.root, e.id])).toEqual([
      [y, 'model'],
      [x, 'model-2'],
    ]);
  });

  it('names keep their letters: different names are different ids', async () => {
    expect(slugify('sp ace ünï 模型 ✓')).toBe('sp-ace-ünï-模型');
    expect(slugify('通义千问')).toBe('通义千问');
    expect(slugify('Mistral 7B (Q4)')).toBe('mistral-7b-q4');
    expect(slugify('✓✓')).toBe('model');
    const dataDir = await mkdtemp(path.join(pkgs, 'data-'));
    const dirs = [await pkg('u/模型'), await pkg('u/通义千问'), await pkg('u/sp ace ünï 模型 ✓'), await pkg('u/model')];
    const { hostApi, url } = await serve(dataDir);
    const ids = [];
    for (const dir of dirs) ids.push(await load(hostApi, dir));
    expect(ids).toEqual(['模型', '通义千问', 'sp-ace-ünï-模型', 'model']);
    for (const id of ids) expect(await answers(url, id)).toBe(200);
    // Named decomposed (u + ◌̈, as macOS writes folder names): the same name.
    expect(await answers(url, 'sp-ace-ünï-模型'.normalize('NFD'))).toBe(200);
    expect(Object.keys(loaded(hostApi))).toEqual(expect.arrayContaining(ids));
  });
});

describe('DELETE /api/delete with folders of one name', () => {
  it('unloads the model the name is, and deletes no other package', async () => {
    const dataDir = await mkdtemp(path.join(pkgs, 'data-'));
    const mine = await pkg('p/model');
    const { hostApi, url } = await serve(dataDir);
    expect(await load(hostApi, mine)).toBe('model');
    // Forgotten in the library, it stays loaded under its id.
    expect((await hostApi.call('forgetModel', { root: mine })).ok).toBe(true);
    expect(loaded(hostApi)).toMatchObject({ model: mine });
    // Two uploads named model: kept apart from it and from each other.
    const files = async (prefix: string) =>
      (await readdir(defaultModelDir, { recursive: true, withFileTypes: true }))
        .filter((e) => e.isFile())
        .map((e) => path.join(e.parentPath, e.name))
        .map(async (abs) => ({
          path: `${prefix}/${path.relative(defaultModelDir, abs)}`,
          data: await readFile(abs),
        }));
    const a = await hostApi.importFiles({ name: 'model', files: await Promise.all(await files('model')) });
    const changed = (await Promise.all(await files('model'))).map((f) =>
      f.path.endsWith('generation_config.json') ? { ...f, data: new TextEncoder().encode('{"max_new_tokens": 7}') } : f,
    );
    const b = await hostApi.importFiles({ name: 'model', files: changed, load: false });
    if (!a.ok || !b.ok) throw new Error(JSON.stringify([a, b]));
    // (The second upload's folder is model-2, a name the first upload's id has: so model-2-2.)
    expect([a.value.spec.id, b.value.spec.id]).toEqual(['model-2', 'model-2-2']);
    // Each says it is known by another id than its name.
    expect([a.value.nameTaken, b.value.nameTaken]).toEqual([true, true]);
    expect(loaded(hostApi)).toMatchObject({ model: mine, 'model-2': a.value.root });
    const uploads = await readdir(path.join(dataDir, 'models'));
    expect(uploads.sort()).toEqual(['model', 'model-2']);

    const r = await fetch(`${url}/api/delete`, {
      method: 'DELETE',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'model' }),
    });
    expect(r.status, await r.text()).toBe(200);
    // The model named "model" is unloaded; the uploads stay on disk, in the library, and the loaded one loaded.
    expect(Object.keys(loaded(hostApi))).not.toContain('model');
    expect(loaded(hostApi)).toMatchObject({ 'model-2': a.value.root });
    expect((await readdir(path.join(dataDir, 'models'))).sort()).toEqual(['model', 'model-2']);
    expect(hostApi.library.list().map((e) => e.id)).toEqual(expect.arrayContaining(['model-2', 'model-2-2']));
    // Its own folder is never deleted either.
    expect((await readdir(mine)).length).toBeGreaterThan(0);
  });
});
