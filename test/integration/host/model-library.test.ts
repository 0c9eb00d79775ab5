/**
 * The model library (src/main/host/model-library.ts), directly and through HostApi over a real RunnerService:
 * loads remembered across restarts (and loadable again from the remembered folder), most recently loaded first,
 * a corrupt library file moved aside (never overwritten), uploads found under `<dataDir>/models`, folders gone or
 * packages gone bad since their load, forgetting (own folders kept, uploads deleted, a loaded upload refused),
 * two folders with one id, and the `library` event.
 */
import { existsSync } from 'node:fs';
import { cp, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { ModelLibrary } from '../../../src/main/host/model-library';
import { RunnerService } from '../../../src/main/host/runner-service';
import { loadModelSpec } from '../../../src/main/packages';
import type { LibraryEntry } from '../../../src/shared/api';
import { KvdeskError } from '../../../src/shared/errors';
import type { ModelSpec } from '../../../src/shared/model-spec';
import { defaultModelDir } from '../../helpers/fixtures';
import { holdReplyEnds, noEndBias } from '../../helpers/hold-replies';
import { graphVariantsModel, installedPackage, thinkingModel } from '../../helpers/models';
import { rejection } from '../../helpers/rejection';

const tmpDirs: string[] = [];
const apis: HostApi[] = [];

afterEach(async () => {
  await Promise.all(apis.splice(0).map((a) => a.close()));
});
afterAll(async () => {
  await Promise.all(tmpDirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function tmp(prefix = 'kvdesk-library-'): Promise<string> {
  const d = await mkdtemp(path.join(os.tmpdir(), prefix));
  tmpDirs.push(d);
  return d;
}

/** A copy of the default package in `dest`: its id is the folder's name. */
async function copyPackage(dest: string, from = defaultModelDir): Promise<string> {
  await cp(from, dest, { recursive: true });
  return dest;
}

/** A host over a real runner; no default model unless asked. */
async function makeApi(dataDir: string, opts: { defaultModel?: boolean; log?: string[] } = {}): Promise<HostApi> {
  const lines = opts.log;
  const api = await createHostApi({
    runner: new RunnerService({ intraOpNumThreads: 1 }),
    dataDir,
    ...(opts.defaultModel ? { defaultModelDir } : {}),
    log: (line) => lines?.push(line),
  });
  apis.push(api);
  return api;
}

/** A clock the test moves: every call is one millisecond later. */
function clock(start = 1_000): () => number {
  let t = start;
  return () => t++;
}

async function specOf(dir: string): Promise<ModelSpec> {
  return loadModelSpec(dir);
}

function roots(entries: LibraryEntry[]): string[] {
  return entries.map((e) => e.root);
}

async function readStored(dataDir: string): Promise<{ version: number; packages: Array<{ root: string }> }> {
  return JSON.parse(await readFile(path.join(dataDir, 'library.json'), 'utf8'));
}

describe('remembered loads', () => {
  it('a load is remembered across a restart, validated again, and loads again from its folder', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const second = await copyPackage(path.join(pkgs, 'second'));

    const first = await makeApi(dataDir, { defaultModel: true });
    const loaded = await first.call('loadModel', { path: second });
    expect(loaded).toMatchObject({ ok: true, value: { id: 'second' } });
    await first.libraryChecked;
    await first.close();
    apis.splice(apis.indexOf(first), 1);

    // The file holds the folders, most recently loaded first.
    expect((await readStored(dataDir)).packages.map((p) => p.root)).toEqual([second, defaultModelDir]);

    const log: string[] = [];
    const again = await makeApi(dataDir, { log });
    expect(await again.call('listModels', {})).toEqual({ ok: true, value: [] });
    await again.libraryChecked;
    const listed = await again.call('listLibrary', {});
    if (!listed.ok) throw new Error(listed.error.message);
    expect(roots(listed.value)).toEqual([second, defaultModelDir]);
    expect(listed.value[0]).toMatchObject({
      root: second,
      id: 'second',
      missing: false,
      uploaded: false,
      spec: { id: 'second', root: second },
    });
    expect(listed.value[0]?.error).toBeUndefined();
    expect(listed.value[1]).toMatchObject({ id: 'default', missing: false, uploaded: false, spec: { id: 'default' } });
    expect(listed.value[0]?.lastLoadedAt).toBeGreaterThanOrEqual(listed.value[1]?.lastLoadedAt ?? Infinity);
    // Both are offered to requests: valid, present, not loaded.
    expect(again.loadable().map((e) => e.id)).toEqual(['second', 'default']);

    const reloaded = await again.call('loadModel', { path: listed.value[0]?.root ?? '' });
    expect(reloaded).toMatchObject({ ok: true, value: { id: 'second', isDefault: false } });
    expect(again.loadable().map((e) => e.id)).toEqual(['default']);
    expect(log.filter((l) => /library/.test(l))).toEqual([]);
  });

  it('the default model joins the library at start; a `library` event comes with every load', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const second = await copyPackage(path.join(pkgs, 'second'));
    const api = await makeApi(dataDir, { defaultModel: true });
    await api.libraryChecked;
    expect(api.library.list().map((e) => [e.id, e.root])).toEqual([['default', defaultModelDir]]);

    const events: LibraryEntry[][] = [];
    api.on('library', (e) => events.push(e));
    expect((await api.call('loadModel', { path: second })).ok).toBe(true);
    expect(events).toHaveLength(1);
    expect(roots(events[0] ?? [])).toEqual([second, defaultModelDir]);
    expect(events[0]?.[0]).toMatchObject({ id: 'second', spec: { id: 'second' }, uploaded: false });

    // Loading it again moves it nowhere new but is an event too; the file follows.
    expect((await api.call('loadModel', { path: defaultModelDir })).ok).toBe(true);
    expect(events).toHaveLength(2);
    expect(roots(events[1] ?? [])).toEqual([defaultModelDir, second]);
    await api.library.flush();
    expect((await readStored(dataDir)).packages.map((p) => p.root)).toEqual([defaultModelDir, second]);
  });

  it('a folder gone from where the library had it gives its id up: the bundled model is `default` in a new clone', async () => {
    // A clone at another path (or a moved folder, a git worktree): the library names the old one `default`.
    const dataDir = await tmp();
    const gone = path.join(await tmp(), 'gone', 'resources', 'models', 'default');
    const entry = { root: gone, id: 'default', uploaded: false, addedAt: 1, lastLoadedAt: 1 };
    await writeFile(path.join(dataDir, 'library.json'), JSON.stringify({ version: 1, packages: [entry] }));
    const log: string[] = [];
    const api = await makeApi(dataDir, { defaultModel: true, log });
    await api.libraryChecked;
    expect(api.runner.listModels().map((m) => m.id)).toEqual(['default']);
    // The old entry stays listed, missing, under an id of its own: the person can put it back or forget it.
    expect(api.library.list().map((e) => [e.id, e.root, e.missing])).toEqual([
      ['default', defaultModelDir, false],
      ['default-2', gone, true],
    ]);
    expect(log.filter((l) => l.includes(gone))).toEqual([
      `kvdesk: the id default is now the folder ${defaultModelDir}'s; the entry for ${gone} is listed as default-2`,
    ]);
    await api.library.flush();
    const stored = (await readStored(dataDir)).packages as Array<{ root: string; id: string }>;
    expect(stored.map((p) => [p.root, p.id]).sort()).toEqual(
      [
        [defaultModelDir, 'default'],
        [gone, 'default-2'],
      ].sort(),
    );

    // A library an earlier kvdesk wrote after the same clone (the bundled one as `default-2`) is mended at start.
    const bitten = await tmp();
    const was = [entry, { root: defaultModelDir, id: 'default-2', uploaded: false, addedAt: 2, lastLoadedAt: 2 }];
    await writeFile(path.join(bitten, 'library.json'), JSON.stringify({ version: 1, packages: was }));
    const again = await makeApi(bitten, { defaultModel: true });
    await again.libraryChecked;
    expect(again.runner.listModels().map((m) => m.id)).toEqual(['default']);
    expect(again.library.list().map((e) => [e.id, e.root])).toEqual([
      ['default', defaultModelDir],
      ['default-2', gone],
    ]);
  });

  it('a folder of one name loaded where one of that name is gone does not take its id (a drive not mounted keeps it)', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const here = await copyPackage(path.join(pkgs, 'here', 'same'));
    const gone = path.join(pkgs, 'gone', 'same');
    const entries = [
      { root: gone, id: 'same', uploaded: false, addedAt: 1, lastLoadedAt: 1 },
      { root: here, id: 'same-2', uploaded: false, addedAt: 2, lastLoadedAt: 2 },
    ];
    await writeFile(path.join(dataDir, 'library.json'), JSON.stringify({ version: 1, packages: entries }));
    const api = await makeApi(dataDir);
    await api.libraryChecked;
    // A present folder keeps the id it has across restarts.
    const r = await api.call('loadModel', { path: here });
    expect(r.ok && r.value.id).toBe('same-2');
    // A new folder of that name while the other is away: an id of its own; the missing one's comes back with it.
    const third = await copyPackage(path.join(pkgs, 'third', 'same'));
    const t = await api.call('loadModel', { path: third });
    expect(t.ok && t.value.id).toBe('same-3');
    expect(
      api.library
        .list()
        .map((e) => [e.id, e.root])
        .sort(),
    ).toEqual(
      [
        ['same', gone],
        ['same-2', here],
        ['same-3', third],
      ].sort(),
    );
  });

  it('lists the most recently loaded first; a load again moves a package to the top, keeping when it was added', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const a = await copyPackage(path.join(pkgs, 'alpha'));
    const b = await copyPackage(path.join(pkgs, 'beta'));
    const c = await copyPackage(path.join(pkgs, 'gamma'));
    const changes: LibraryEntry[][] = [];
    const lib = await ModelLibrary.open(dataDir, { now: clock(), onChange: (e) => changes.push(e) });
    expect(lib.list()).toEqual([]);
    await lib.loaded(a, await specOf(a)); // 1000
    await lib.loaded(b, await specOf(b)); // 1001
    await lib.loaded(c, await specOf(c)); // 1002
    expect(roots(lib.list())).toEqual([c, b, a]);
    await lib.loaded(a, await specOf(a)); // 1003
    expect(roots(lib.list())).toEqual([a, c, b]);
    expect(lib.list()[0]).toMatchObject({ id: 'alpha', addedAt: 1000, lastLoadedAt: 1003 });
    expect(changes).toHaveLength(4);
    expect(roots(changes[3] ?? [])).toEqual([a, c, b]);

    // A library opened again keeps the order and the dates; a relative root is made absolute.
    await lib.flush();
    const reopened = await ModelLibrary.open(dataDir);
    expect(reopened.list()).toEqual(
      lib.list().map(({ spec: _spec, ...rest }) => ({ ...rest, id: path.basename(rest.root) })),
    );
    await reopened.loaded(path.relative(process.cwd(), b), await specOf(b));
    expect(roots(reopened.list())).toEqual([b, a, c]);
  });
});

/** A copy (its own folder, removed after the tests) of the package with two graph variants, fp32 and q4. */
async function variantsCopy(): Promise<string> {
  return copyPackage(path.join(await tmp(), 'variants'), graphVariantsModel());
}

describe('how a package was loaded', () => {
  it('the pick is kept: a load without one, a restart and a load on first use load it the same way', async () => {
    const dataDir = await tmp();
    const dir = await variantsCopy();
    const graphOf = (api: HostApi) => api.runner.listModels().find((m) => m.id === 'variants')?.spec.graphVariant;

    const first = await makeApi(dataDir);
    expect((await first.call('loadModel', { path: dir, variant: 'q4' })).ok).toBe(true);
    expect(graphOf(first)).toBe('q4');
    expect((await first.call('unloadModel', { id: 'variants' })).ok).toBe(true);
    // Loaded again without a pick: as last picked.
    expect((await first.call('loadModel', { path: dir })).ok).toBe(true);
    expect(graphOf(first)).toBe('q4');
    await first.libraryChecked;
    await first.close();
    apis.splice(apis.indexOf(first), 1);
    const stored = (await readStored(dataDir)).packages as Array<{ root: string; load?: unknown }>;
    expect(stored.find((p) => p.root === dir)?.load).toEqual({ variant: 'q4' });

    // After a restart: listed with its pick, checked as it loads, and a request naming it loads it so.
    const again = await makeApi(dataDir);
    await again.libraryChecked;
    const listed = await again.call('listLibrary', {});
    if (!listed.ok) throw new Error(listed.error.message);
    expect(listed.value.find((e) => e.root === dir)).toMatchObject({
      load: { variant: 'q4' },
      spec: { graphVariant: 'q4' },
    });
    await again.ensureModel('variants');
    expect(graphOf(again)).toBe('q4');

    // Another pick replaces it.
    expect((await again.call('loadModel', { path: dir, variant: 'fp32' })).ok).toBe(true);
    expect(graphOf(again)).toBe('fp32');
    const relisted = await again.call('listLibrary', {});
    expect(relisted.ok && relisted.value.find((e) => e.root === dir)?.load).toEqual({ variant: 'fp32' });
  });

  it('a pick names what it changes (the rest is kept); the card reads the kept one; no load again under a reply', async () => {
    const dataDir = await tmp();
    const dir = await variantsCopy();
    const api = await makeApi(dataDir);
    expect((await api.call('loadModel', { path: dir, variant: 'q4' })).ok).toBe(true);
    // The header's backend pick names the backend only: the graph stays q4.
    expect((await api.call('loadModel', { path: dir, backend: 'cpu' })).ok).toBe(true);
    expect(api.runner.listModels().find((m) => m.id === 'variants')?.spec.graphVariant).toBe('q4');
    const listed = await api.call('listLibrary', {});
    expect(listed.ok && listed.value.find((e) => e.root === dir)?.load).toEqual({ variant: 'q4', backend: 'cpu' });
    // Checked again (a card of the folder), it reads as it would load.
    const checked = await api.call('checkPackage', { path: dir });
    expect(checked.ok && checked.value.ok && checked.value.spec.graphVariant).toBe('q4');
    // While a reply runs on it, the person's load again is refused, and the reply goes on. Its end waits for its
    // cancel (holdReplyEnds), so it still runs whenever the load comes.
    const held = holdReplyEnds(api.runner.engine);
    try {
      const long = api.runner.generate({
        model: 'variants',
        promptIds: [5, 6, 7],
        maxNewTokens: 100_000,
        sampling: { greedy: true, logitBias: noEndBias(dir) },
      });
      await held.tokens();
      const refused = await api.call('loadModel', { path: dir, variant: 'fp32' });
      expect(refused.ok).toBe(false);
      if (!refused.ok)
        expect(refused.error.message).toBe('model variants has 1 request in flight; stop it before loading it again');
      long.cancel();
      expect((await rejection(long.result)).code).toBe('CANCELLED');
      expect(held.cancelled).toEqual([long.requestId]);
    } finally {
      held.restore();
    }
    expect((await api.call('loadModel', { path: dir, variant: 'fp32' })).ok).toBe(true);
  });

  it('a library check of a package whose kept pick it cannot read keeps the package valid', async () => {
    const dataDir = await tmp();
    const dir = await variantsCopy();
    const first = await makeApi(dataDir);
    expect((await first.call('loadModel', { path: dir, variant: 'q4' })).ok).toBe(true);
    await first.libraryChecked;
    await first.close();
    apis.splice(apis.indexOf(first), 1);
    await rm(path.join(dir, 'onnx/model_q4.onnx'));
    const again = await makeApi(dataDir);
    await again.libraryChecked;
    const listed = await again.call('listLibrary', {});
    const entry = listed.ok ? listed.value.find((e) => e.root === dir) : undefined;
    expect(entry?.error).toBeUndefined();
    expect(entry?.spec?.graphVariant).toBeUndefined(); // the plain model.onnx, the only graph left
    expect(again.loadable().map((e) => e.id)).toContain('variants');
  });

  it('a kept pick the package no longer has: loaded as kvdesk picks, said in the log, and the pick dropped', async () => {
    const dataDir = await tmp();
    const dir = await variantsCopy();
    const log: string[] = [];
    const api = await makeApi(dataDir, { log });
    expect((await api.call('loadModel', { path: dir, variant: 'q4' })).ok).toBe(true);
    expect((await api.call('unloadModel', { id: 'variants' })).ok).toBe(true);
    await rm(path.join(dir, 'onnx/model_q4.onnx'));
    const loaded = await api.call('loadModel', { path: dir });
    expect(loaded.ok && loaded.value.spec.graphPath).toBe(path.join(dir, 'onnx/model.onnx'));
    expect(log.some((l) => l.includes(`${dir} could not load as last picked (`))).toBe(true);
    const listed = await api.call('listLibrary', {});
    expect(listed.ok && listed.value.find((e) => e.root === dir)?.load).toBeUndefined();
    // An explicit pick the package lacks is refused, not replaced.
    const refused = await api.call('loadModel', { path: dir, variant: 'q4' });
    expect(refused.ok).toBe(false);
  });
});

describe('a kept pick follows the model, not the folder', () => {
  const TEMPLATE = '{% for m in messages %}<<{{ m.content }}>>{% endfor %}';

  it("another package copied into the folder: the person's template is not applied to it; dropped, and said", async () => {
    const dataDir = await tmp();
    const dir = await copyPackage(path.join(await tmp(), 'mine'));
    const log: string[] = [];
    const api = await makeApi(dataDir, { log });
    const first = await api.call('loadModel', { path: dir, chatTemplate: TEMPLATE });
    expect(first.ok && first.value.spec.chatTemplate).toBe(TEMPLATE);
    expect((await api.call('unloadModel', { id: 'mine' })).ok).toBe(true);
    // The same model again: its pick holds.
    const again = await api.call('loadModel', { path: dir });
    expect(again.ok && again.value.spec.chatTemplate).toBe(TEMPLATE);
    expect((await api.call('unloadModel', { id: 'mine' })).ok).toBe(true);
    // Another model in its place (a thinking model, whose own template marks its reasoning).
    await rm(dir, { recursive: true });
    await copyPackage(dir, thinkingModel());
    const other = await api.call('loadModel', { path: dir });
    if (!other.ok) throw new Error(other.error.message);
    expect(other.value.spec.chatTemplateEdited).toBeUndefined();
    expect(other.value.spec.chatTemplate).toBe((await specOf(thinkingModel())).chatTemplate);
    expect(log.filter((l) => l.includes(`${dir} holds another model than the one its last pick was made for`))).toEqual(
      [expect.stringContaining('a chat template of your own')],
    );
    const listed = await api.call('listLibrary', {});
    expect(listed.ok && listed.value.find((e) => e.root === dir)?.load).toBeUndefined();
    await api.library.flush();
    const stored = (await readStored(dataDir)).packages.find((p) => p.root === dir) as { load?: unknown };
    expect(stored.load).toBeUndefined();
  });

  it('trust given to an "installed" package is not given to another one put in its folder', async () => {
    const dataDir = await tmp();
    const dir = await copyPackage(path.join(await tmp(), 'installed'), installedPackage());
    const api = await makeApi(dataDir);
    expect((await api.call('loadModel', { path: dir, trustInstalled: true })).ok).toBe(true);
    const id = api.runner.listModels()[0]?.id as string;
    expect((await api.call('unloadModel', { id })).ok).toBe(true);
    // Loaded again: trusted still.
    expect((await api.call('loadModel', { path: dir })).ok).toBe(true);
    expect((await api.call('unloadModel', { id })).ok).toBe(true);
    // Another installed package's manifest there now, naming another folder of this machine.
    const manifest = JSON.parse(await readFile(path.join(dir, 'manifest.json'), 'utf8'));
    manifest.package_name = 'someone-else';
    manifest.components.model.variants.cpu.variant_directory = graphVariantsModel();
    await writeFile(path.join(dir, 'manifest.json'), JSON.stringify(manifest));
    const refused = await api.call('loadModel', { path: dir });
    expect(refused.ok).toBe(false);
    if (!refused.ok) expect(refused.error.message).toContain('only when you trust it explicitly');
    // Trusted anew, it loads.
    expect((await api.call('loadModel', { path: dir, trustInstalled: true })).ok).toBe(true);
  });
});

describe('a library file that cannot be read', () => {
  it('is moved aside untouched and logged; the library starts empty and writes a new file', async () => {
    const dataDir = await tmp();
    const file = path.join(dataDir, 'library.json');
    const garbage = '{"version": 1, "packages": [ oops';
    await writeFile(file, garbage);
    const log: string[] = [];
    const lib = await ModelLibrary.open(dataDir, { log: (l) => log.push(l), now: () => 4242 });
    expect(lib.list()).toEqual([]);
    const aside = `${file}.unreadable-4242`;
    expect(await readFile(aside, 'utf8')).toBe(garbage);
    expect(existsSync(file)).toBe(false);
    expect(log).toHaveLength(1);
    expect(log[0]).toContain(file);
    expect(log[0]).toContain(aside);
    expect(log[0]).toMatch(/not valid/);

    // An upload found again now may well have been loaded before: the file that knew is gone, so no guess.
    await copyPackage(path.join(dataDir, 'models', 'found'));
    await lib.refresh();
    expect(lib.list()[0]).toMatchObject({ id: 'found', uploaded: true });
    expect(lib.list()[0]?.neverLoaded).toBeUndefined();
    // Added after that scan (a download finished in this session): that one never loaded.
    await copyPackage(path.join(dataDir, 'models', 'pulled'));
    await lib.refresh();
    expect(lib.list().find((e) => e.id === 'pulled')?.neverLoaded).toBe(true);

    // The next load writes a fresh file; the one moved aside stays as it was.
    const pkgs = await tmp();
    const own = await copyPackage(path.join(pkgs, 'own'));
    await lib.loaded(own, await specOf(own));
    await lib.flush();
    expect((await readStored(dataDir)).packages.map((p) => p.root)).toContain(own);
    expect(await readFile(aside, 'utf8')).toBe(garbage);
  });

  it('one entry of the wrong shape is left out, named with why; the rest is kept; the file is copied aside before it is written', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const good = await copyPackage(path.join(pkgs, 'good'));
    const file = path.join(dataDir, 'library.json');
    const wrong = JSON.stringify({
      version: 1,
      packages: [
        { root: '/x', uploaded: 'yes', addedAt: 1, lastLoadedAt: 1 },
        { root: good, addedAt: 2, lastLoadedAt: 2 },
        { root: '/y', addedAt: 'yesterday', lastLoadedAt: 3 },
      ],
    });
    await writeFile(file, wrong);
    const log: string[] = [];
    const api = await makeApi(dataDir, { defaultModel: true, log });
    await api.libraryChecked;
    const line = log.find((l) => l.includes('cannot read'));
    expect(line).toContain('2 entries this kvdesk cannot read, left out of the library (the rest is kept)');
    expect(line).toContain('packages.0.uploaded (/x): ');
    expect(line).toContain('packages.2.addedAt (/y): ');
    // The good entry is kept, with the default model loaded at this start.
    expect(api.library.list().map((e) => e.id)).toEqual(['default', 'good']);
    expect(api.loadable().map((e) => e.id)).toEqual(['good']);
    await api.library.flush();
    // The file as it was is kept beside it (copied before the first write), never moved.
    const aside = (await readdir(dataDir)).filter((n) => n.startsWith('library.json.unreadable-'));
    expect(aside).toHaveLength(1);
    expect(await readFile(path.join(dataDir, aside[0] ?? ''), 'utf8')).toBe(wrong);
    expect((await readStored(dataDir)).packages.map((p) => p.root)).toEqual([defaultModelDir, good]);
  });

  it('a newer kvdesk’s file: used as far as it can be read, never moved or written over, and said', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const good = await copyPackage(path.join(pkgs, 'good'));
    const own = await copyPackage(path.join(pkgs, 'own'));
    const file = path.join(dataDir, 'library.json');
    const newer = `${JSON.stringify({
      version: 2,
      packages: [
        { root: good, addedAt: 2, lastLoadedAt: 2, pinned: true },
        { root: '/z', addedAt: { when: 'now' }, lastLoadedAt: 3 },
      ],
      shelves: ['work'],
    })}\n`;
    await writeFile(file, newer);
    const log: string[] = [];
    const lib = await ModelLibrary.open(dataDir, { log: (l) => log.push(l) });
    await lib.refresh();
    expect(lib.list().map((e) => e.id)).toEqual(['good']);
    expect(lib.find('good')).toBeDefined();
    expect(log.join('\n')).toContain(
      `the model library ${file} was written by a newer kvdesk (its version 2; this one reads version 1): it is used as far as this kvdesk can read it, and left as it is; left out, as this kvdesk cannot read them: packages.1.addedAt (/z)`,
    );
    // A load is not written into it; nothing is moved or copied aside.
    await lib.loaded(own, await specOf(own));
    await lib.flush();
    expect(await readFile(file, 'utf8')).toBe(newer);
    expect(await readdir(dataDir)).toEqual(['library.json']);
  });

  it('a root written as a relative path is read from the data directory, not from where kvdesk runs', async () => {
    const dataDir = await tmp();
    const inside = await copyPackage(path.join(dataDir, 'mine', 'pkg'));
    await writeFile(
      path.join(dataDir, 'library.json'),
      JSON.stringify({ version: 1, packages: [{ root: 'mine/pkg', addedAt: 1, lastLoadedAt: 1 }] }),
    );
    const lib = await ModelLibrary.open(dataDir);
    await lib.refresh();
    expect(lib.list()).toEqual([expect.objectContaining({ root: inside, id: 'pkg', missing: false })]);
    expect(lib.find('pkg')?.root).toBe(inside);
  });
});

describe('refresh', () => {
  it('adds folders under <dataDir>/models as uploads (not staging folders or files), with one change event', async () => {
    const dataDir = await tmp();
    const models = path.join(dataDir, 'models');
    const up = await copyPackage(path.join(models, 'uploaded-one'));
    await copyPackage(path.join(models, '.incoming-abc123'));
    await writeFile(path.join(models, 'notes.txt'), 'not a package');
    const changes: LibraryEntry[][] = [];
    const lib = await ModelLibrary.open(dataDir, { onChange: (e) => changes.push(e) });
    expect(lib.list()).toEqual([]);
    await lib.refresh();
    expect(changes).toHaveLength(1);
    expect(lib.list()).toHaveLength(1);
    expect(lib.list()[0]).toMatchObject({
      root: up,
      id: 'uploaded-one',
      uploaded: true,
      missing: false,
      // No library file yet: added since, never loaded.
      neverLoaded: true,
      spec: { id: 'uploaded-one' },
    });
    expect(lib.find('uploaded-one')?.root).toBe(up);
    // Saved, and not added twice by a second refresh.
    await lib.refresh();
    expect(lib.list()).toHaveLength(1);
    expect((await readStored(dataDir)).packages).toEqual([expect.objectContaining({ root: up, uploaded: true })]);
  });

  it('through HostApi: an upload found at start is offered to requests once checked', async () => {
    const dataDir = await tmp();
    const up = await copyPackage(path.join(dataDir, 'models', 'dropped'));
    const api = await makeApi(dataDir);
    await api.libraryChecked;
    expect(api.loadable()).toEqual([expect.objectContaining({ root: up, id: 'dropped', uploaded: true })]);
  });

  it('a package whose folder is gone is missing, with an error naming the folder; back again, it is valid', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const gone = await copyPackage(path.join(pkgs, 'gone'));
    const lib = await ModelLibrary.open(dataDir);
    await lib.loaded(gone, await specOf(gone));
    expect(lib.find('gone')?.root).toBe(gone);
    await rm(gone, { recursive: true });
    await lib.refresh();
    const [entry] = lib.list();
    expect(entry).toMatchObject({ root: gone, id: 'gone', missing: true, uploaded: false });
    expect(entry?.spec).toBeUndefined();
    expect(entry?.error?.message).toContain(gone);
    expect(entry?.error?.message).toMatch(/not there/);
    expect(lib.find('gone')).toBeUndefined();

    await copyPackage(gone);
    await lib.refresh();
    expect(lib.list()[0]).toMatchObject({ missing: false, spec: { id: 'gone' } });
    expect(lib.list()[0]?.error).toBeUndefined();
    expect(lib.find('gone')?.root).toBe(gone);
  });

  it('a package whose files went bad shows an error naming the file, and is not missing', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const noTok = await copyPackage(path.join(pkgs, 'no-tokenizer'));
    const badCfg = await copyPackage(path.join(pkgs, 'bad-config'));
    const lib = await ModelLibrary.open(dataDir, { now: clock() });
    await lib.loaded(noTok, await specOf(noTok));
    await lib.loaded(badCfg, await specOf(badCfg));
    await rm(path.join(noTok, 'tokenizer.json'));
    await writeFile(path.join(badCfg, 'config.json'), '{ "model_type": ');
    await lib.refresh();
    const byId = new Map(lib.list().map((e) => [e.id, e]));
    const tok = byId.get('no-tokenizer');
    expect(tok).toMatchObject({ missing: false, error: { code: 'PACKAGE_INVALID', file: 'tokenizer.json' } });
    expect(tok?.error?.message).toMatch(/tokenizer\.json/);
    expect(tok?.spec).toBeUndefined();
    const cfg = byId.get('bad-config');
    expect(cfg).toMatchObject({ missing: false, error: { code: 'PACKAGE_INVALID', file: 'config.json' } });
    expect(cfg?.error?.message).toMatch(/config\.json/);
    expect(cfg?.spec).toBeUndefined();
    expect(lib.find('no-tokenizer')).toBeUndefined();
    expect(lib.find('bad-config')).toBeUndefined();
  });

  it('through HostApi: bad and missing packages are listed but not offered to requests', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const bad = await copyPackage(path.join(pkgs, 'bad'));
    const gone = await copyPackage(path.join(pkgs, 'gone'));
    const first = await makeApi(dataDir);
    expect((await first.call('loadModel', { path: bad })).ok).toBe(true);
    expect((await first.call('loadModel', { path: gone })).ok).toBe(true);
    await first.close();
    apis.splice(apis.indexOf(first), 1);
    await rm(path.join(bad, 'tokenizer.json'));
    await rm(gone, { recursive: true });

    const api = await makeApi(dataDir);
    await api.libraryChecked;
    const r = await api.call('listLibrary', {});
    expect(r).toMatchObject({
      ok: true,
      value: [
        { root: gone, missing: true, error: { message: expect.stringContaining(gone) } },
        { root: bad, missing: false, error: { file: 'tokenizer.json' } },
      ],
    });
    expect(api.loadable()).toEqual([]);
    // A request naming them is told why they cannot load; one naming nothing known, what is known.
    const refused = await rejection(api.ensureModel('bad'));
    expect(refused).toMatchObject({ code: 'MODEL_NOT_LOADED' });
    expect(refused.message).toMatch(/^model "bad" is in the library, but its package cannot load: .*tokenizer\.json/);
    expect((await rejection(api.ensureModel('gone'))).message).toContain(gone);
    expect((await rejection(api.ensureModel('gpt-4o'))).message).toBe(
      'model "gpt-4o" is neither loaded nor in the library (known: none)',
    );
    expect(api.runner.listModels()).toEqual([]);
  });
});

describe('a package that breaks after the check', () => {
  it('requests naming it at once share one check of it', async () => {
    const dataDir = await tmp();
    const pkg = await copyPackage(path.join(await tmp(), 'checked-once'));
    let changes = 0;
    const lib = await ModelLibrary.open(dataDir, { now: clock(), onChange: () => changes++ });
    await lib.loaded(pkg, await specOf(pkg));
    changes = 0;
    await Promise.all([lib.recheck(pkg), lib.recheck(pkg), lib.recheck(pkg)]);
    expect(changes).toBe(1);
    await lib.recheck(pkg);
    expect(changes).toBe(2);
  });

  it('a failed load checks it again: its row names the file instead of offering Load', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const pkg = await copyPackage(path.join(pkgs, 'will-break'));
    const api = await makeApi(dataDir);
    expect((await api.call('loadModel', { path: pkg })).ok).toBe(true);
    expect((await api.call('unloadModel', { id: 'will-break' })).ok).toBe(true);
    await rm(path.join(pkg, 'tokenizer.json'));
    const load = await api.call('loadModel', { path: pkg });
    expect(load).toMatchObject({ ok: false, error: { code: 'PACKAGE_INVALID' } });
    const listed = await api.call('listLibrary', {});
    const row = (listed.ok ? listed.value : []).find((e) => e.root === pkg);
    expect(row).toMatchObject({ missing: false, error: { code: 'PACKAGE_INVALID', file: 'tokenizer.json' } });
    expect(row?.spec).toBeUndefined();
  });
});

describe('forget', () => {
  it("forgets a folder of one's own without touching its files; deletes kvdesk's copy of an upload", async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const own = await copyPackage(path.join(pkgs, 'own'));
    const up = await copyPackage(path.join(dataDir, 'models', 'up'));
    const changes: LibraryEntry[][] = [];
    const lib = await ModelLibrary.open(dataDir, { now: clock(), onChange: (e) => changes.push(e) });
    await lib.loaded(own, await specOf(own));
    await lib.loaded(up, await specOf(up));
    expect(lib.list().map((e) => [e.id, e.uploaded])).toEqual([
      ['up', true],
      ['own', false],
    ]);

    await lib.forget(own);
    expect(roots(lib.list())).toEqual([up]);
    expect(existsSync(path.join(own, 'config.json'))).toBe(true);
    expect((await specOf(own)).id).toBe('own');

    await lib.forget(up);
    expect(lib.list()).toEqual([]);
    expect(existsSync(up)).toBe(false);
    expect(changes).toHaveLength(4);
    expect(changes[3]).toEqual([]);
    await lib.flush();
    expect((await readStored(dataDir)).packages).toEqual([]);
    // Nothing else under the data directory went with it.
    expect(existsSync(path.join(dataDir, 'models'))).toBe(true);
  });

  it('an unknown root is BAD_REQUEST, directly and through forgetModel', async () => {
    const dataDir = await tmp();
    const lib = await ModelLibrary.open(dataDir);
    const nowhere = path.join(dataDir, 'nowhere');
    await expect(lib.forget(nowhere)).rejects.toBeInstanceOf(KvdeskError);
    await expect(lib.forget(nowhere)).rejects.toMatchObject({ code: 'BAD_REQUEST' });

    const api = await makeApi(dataDir);
    const r = await api.call('forgetModel', { root: nowhere });
    expect(r).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    if (!r.ok) expect(r.error.message).toContain(nowhere);
  });

  it('forgetModel refuses to delete a loaded upload (its files stay); unloaded, it goes', async () => {
    const dataDir = await tmp();
    const api = await makeApi(dataDir);
    const files: Array<{ path: string; data: Uint8Array }> = [];
    for (const e of await readdir(defaultModelDir, { withFileTypes: true, recursive: true })) {
      if (!e.isFile() || e.name.startsWith('.')) continue;
      const abs = path.join(e.parentPath, e.name);
      files.push({ path: `dropped/${path.relative(defaultModelDir, abs)}`, data: await readFile(abs) });
    }
    const imported = await api.importFiles({ name: 'dropped', files });
    if (!imported.ok) throw new Error(imported.error.message);
    const root = path.join(dataDir, 'models', 'dropped');
    expect(imported.value.model?.id).toBe('dropped');
    expect(api.library.list()).toEqual([expect.objectContaining({ root, uploaded: true })]);

    const refused = await api.call('forgetModel', { root });
    expect(refused).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    if (!refused.ok) expect(refused.error.message).toMatch(/dropped is loaded/);
    expect(existsSync(path.join(root, 'tokenizer.json'))).toBe(true);
    expect(roots(api.library.list())).toEqual([root]);

    expect((await api.call('unloadModel', { id: 'dropped' })).ok).toBe(true);
    expect(await api.call('forgetModel', { root })).toEqual({ ok: true, value: null });
    expect(existsSync(root)).toBe(false);
    expect(api.library.list()).toEqual([]);
  });

  it("forgetModel of a loaded folder of one's own forgets it; the model stays loaded and the files stay", async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const own = await copyPackage(path.join(pkgs, 'own'));
    const api = await makeApi(dataDir);
    expect((await api.call('loadModel', { path: own })).ok).toBe(true);
    expect(await api.call('forgetModel', { root: own })).toEqual({ ok: true, value: null });
    expect(api.library.list()).toEqual([]);
    expect(api.runner.listModels().map((m) => m.id)).toEqual(['own']);
    expect(existsSync(path.join(own, 'tokenizer.json'))).toBe(true);
  });
});

describe('two folders of one name', () => {
  it('each has an id of its own, kept when it loads again; find() gives the folder the id is, and no other', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const a = await copyPackage(path.join(pkgs, 'a', 'same'));
    const b = await copyPackage(path.join(pkgs, 'b', 'same'));
    const lib = await ModelLibrary.open(dataDir, { now: clock() });
    await lib.loaded(a, await specOf(a));
    await lib.loaded(b, await specOf(b));
    expect(lib.list().map((e) => [e.id, e.spec?.id, e.spec?.displayName])).toEqual([
      ['same-2', 'same-2', 'same (same-2)'],
      ['same', 'same', 'same'],
    ]);
    expect(lib.find('same')?.root).toBe(a);
    expect(lib.find('same-2')?.root).toBe(b);
    await lib.loaded(a, await specOf(a));
    expect(lib.list().map((e) => [e.root, e.id])).toEqual([
      [a, 'same'],
      [b, 'same-2'],
    ]);
    expect(lib.find('other')).toBeUndefined();

    // The one an id is gone bad: a request naming it gets no other folder.
    await rm(path.join(a, 'tokenizer.json'));
    await lib.refresh();
    expect(lib.find('same')).toBeUndefined();
    expect(lib.find('same-2')?.root).toBe(b);
    // Kept in the file: the same ids after a restart.
    await lib.flush();
    const again = await ModelLibrary.open(dataDir);
    expect(again.list().map((e) => [e.root, e.id])).toEqual([
      [a, 'same'],
      [b, 'same-2'],
    ]);
  });

  it('through HostApi: both load and stay loaded; unloaded, each loads on first use by its id', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const a = await copyPackage(path.join(pkgs, 'a', 'same'));
    const b = await copyPackage(path.join(pkgs, 'b', 'same'));
    const api = await makeApi(dataDir);
    expect((await api.call('loadModel', { path: a })).ok).toBe(true);
    expect((await api.call('loadModel', { path: b })).ok).toBe(true);
    expect(api.runner.listModels().map((m) => [m.id, m.spec.root])).toEqual([
      ['same', a],
      ['same-2', b],
    ]);
    expect((await api.call('unloadModel', { id: 'same-2' })).ok).toBe(true);
    await api.libraryChecked;
    expect(api.loadable()).toEqual([expect.objectContaining({ id: 'same-2', root: b })]);
    await api.ensureModel('same-2');
    expect(api.runner.listModels().map((m) => [m.id, m.spec.root])).toEqual([
      ['same', a],
      ['same-2', b],
    ]);
    expect(api.loadable()).toEqual([]);
  });
});

describe('what decides that a package is kvdesk’s copy', () => {
  it('a data directory reached through a link: uploads are recognised, and a loaded one is never deleted', async () => {
    const real = await tmp();
    const link = path.join(await tmp(), 'data-link');
    await symlink(real, link);
    const api = await makeApi(link);
    const files = await Promise.all(
      (await readdir(defaultModelDir, { recursive: true, withFileTypes: true }))
        .filter((d) => d.isFile())
        .map(async (d) => {
          const abs = path.join(d.parentPath, d.name);
          return { path: `dropped/${path.relative(defaultModelDir, abs)}`, data: new Uint8Array(await readFile(abs)) };
        }),
    );
    const up = await api.importFiles({ name: 'dropped', files });
    expect(up.ok).toBe(true);
    const entry = api.library.list().find((e) => e.id === 'dropped');
    expect(entry?.uploaded).toBe(true);
    // Named through the link while it is loaded: refused, the files stay.
    const refused = await api.call('forgetModel', { root: path.join(link, 'models', 'dropped') });
    expect(refused.ok).toBe(false);
    expect(existsSync(path.join(real, 'models', 'dropped', 'config.json'))).toBe(true);
    expect((await api.call('unloadModel', { id: 'dropped' })).ok).toBe(true);
    expect((await api.call('forgetModel', { root: path.join(link, 'models', 'dropped') })).ok).toBe(true);
    expect(existsSync(path.join(real, 'models', 'dropped'))).toBe(false);
  });

  it('never the file’s word: a folder of one’s own marked "uploaded" by hand is forgotten, not deleted', async () => {
    const dataDir = await tmp();
    const mine = await copyPackage(path.join(await tmp(), 'mine'));
    await writeFile(
      path.join(dataDir, 'library.json'),
      JSON.stringify({
        version: 1,
        packages: [{ root: mine, id: 'mine', uploaded: true, addedAt: 1, lastLoadedAt: 2 }],
      }),
    );
    const lib = await ModelLibrary.open(dataDir);
    // The stored id stands until the check; the place decides what an upload is.
    expect(lib.list()).toEqual([expect.objectContaining({ root: mine, id: 'mine', uploaded: false })]);
    await lib.forget(mine);
    expect(existsSync(path.join(mine, 'config.json'))).toBe(true);
  });

  it('two loads in the same millisecond: the later one comes first', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const a = await copyPackage(path.join(pkgs, 'a'));
    const b = await copyPackage(path.join(pkgs, 'b'));
    const lib = await ModelLibrary.open(dataDir, { now: () => 5 });
    await lib.loaded(a, await specOf(a));
    await lib.loaded(b, await specOf(b));
    expect(roots(lib.list())).toEqual([b, a]);
    await lib.loaded(a, await specOf(a));
    expect(roots(lib.list())).toEqual([a, b]);
  });
});

describe('two processes on one data directory', () => {
  /** Two libraries open on one data directory, as the window (or `kvdesk serve`) and `kvdesk pull` are. */
  async function twoOn(dataDir: string): Promise<[ModelLibrary, ModelLibrary]> {
    return [
      await ModelLibrary.open(dataDir, { now: clock(1_000) }),
      await ModelLibrary.open(dataDir, { now: clock(5_000) }),
    ];
  }

  it('each save keeps what the other added, and what either forgot stays forgotten', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const [p1, p2, p3] = await Promise.all(['p1', 'p2', 'p3'].map((n) => copyPackage(path.join(pkgs, n))));
    const first = await ModelLibrary.open(dataDir);
    await first.loaded(p1 as string, await specOf(p1 as string));
    await first.flush();
    const [a, b] = await twoOn(dataDir);
    const stored = async () => (await readStored(dataDir)).packages.map((p) => path.basename(p.root)).sort();

    await b.loaded(p2 as string, await specOf(p2 as string));
    await b.flush();
    await a.loaded(p3 as string, await specOf(p3 as string));
    await a.flush();
    // A's save kept B's addition (it wrote its whole library over the file).
    expect(await stored()).toEqual(['p1', 'p2', 'p3']);
    expect(
      roots(a.list())
        .map((r) => path.basename(r))
        .sort(),
    ).toEqual(['p1', 'p2', 'p3']);

    // B forgets p1; A, which still lists it, loads again what it has: p1 is not brought back.
    await b.forget(p1 as string);
    await b.flush();
    expect(await stored()).toEqual(['p2', 'p3']);
    await a.loaded(p3 as string, await specOf(p3 as string));
    await a.flush();
    expect(await stored()).toEqual(['p2', 'p3']);
    expect(
      roots(a.list())
        .map((r) => path.basename(r))
        .sort(),
    ).toEqual(['p2', 'p3']);

    // A forgets p2 (B still lists it); B's next save leaves it forgotten, and keeps A's latest load of p3.
    await a.forget(p2 as string);
    await a.flush();
    await b.loaded(p1 as string, await specOf(p1 as string));
    await b.flush();
    expect(await stored()).toEqual(['p1', 'p3']);
    // Loaded again after it was forgotten elsewhere: it is back, as a load records it.
    expect(existsSync(p2 as string)).toBe(true);
  });

  it('sync() reads what another process added, checked; find() then knows it; unchanged, nothing is read', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const pulled = await copyPackage(path.join(pkgs, 'pulled'));
    const [a, b] = await twoOn(dataDir);
    const changes: LibraryEntry[][] = [];
    const watched = await ModelLibrary.open(dataDir, { onChange: (e) => changes.push(e) });
    await b.added(pulled, await specOf(pulled));
    await b.flush();
    expect(a.find('pulled')).toBeUndefined();
    await a.sync();
    expect(a.find('pulled')).toMatchObject({ root: pulled, spec: { id: 'pulled' }, neverLoaded: true });
    await watched.sync();
    expect(changes).toHaveLength(1);
    await watched.sync();
    expect(changes).toHaveLength(1);
  });

  it('through HostApi: a request naming a package another process added loads it (the library is read again)', async () => {
    const dataDir = await tmp();
    const pkgs = await tmp();
    const pulled = await copyPackage(path.join(pkgs, 'pulled'));
    const api = await makeApi(dataDir, { defaultModel: true });
    await api.libraryChecked;
    const other = await ModelLibrary.open(dataDir);
    await other.added(pulled, await specOf(pulled));
    await other.flush();
    await api.ensureModel('pulled');
    expect(api.runner.listModels().map((m) => m.id)).toContain('pulled');
    await api.library.flush();
    expect((await readStored(dataDir)).packages.map((p) => p.root).sort()).toEqual([defaultModelDir, pulled].sort());
    // A name nobody added is still refused, naming what is known.
    await expect(api.ensureModel('nobody')).rejects.toMatchObject({ code: 'MODEL_NOT_LOADED' });
  });
});
