/** HostApi over a real RunnerService: call validation, uploads, threads, throttled budget events. */
import { mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createHostApi, DELETED_THREADS_KEPT, type HostApi, safeRelativePath } from '../../src/main/host/host-api';
import { RunnerService } from '../../src/main/host/runner-service';
import type { Thread } from '../../src/shared/api';
import type { StreamFrame } from '../../src/shared/contract';
import { defaultModelDir } from '../helpers/fixtures';

const apis: HostApi[] = [];
afterEach(async () => {
  await Promise.all(apis.splice(0).map((a) => a.close()));
});

async function makeApi(): Promise<{ api: HostApi; dataDir: string }> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-host-'));
  const api = await createHostApi({ runner: new RunnerService({ intraOpNumThreads: 1 }), dataDir, defaultModelDir });
  apis.push(api);
  return { api, dataDir };
}

async function packageFiles(dir: string, prefix: string): Promise<Array<{ path: string; data: Uint8Array }>> {
  const out: Array<{ path: string; data: Uint8Array }> = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || entry.name.startsWith('.')) continue;
    const abs = path.join(entry.parentPath, entry.name);
    out.push({ path: `${prefix}/${path.relative(dir, abs)}`, data: await readFile(abs) });
  }
  return out;
}

describe('HostApi', () => {
  it('loads the default model at start and lists it as the default', async () => {
    const { api } = await makeApi();
    const r = await api.call('listModels', {});
    expect(r.ok).toBe(true);
    if (r.ok) {
      expect(r.value).toHaveLength(1);
      expect(r.value[0]).toMatchObject({ isDefault: true, backend: 'cpu', logits: { last: true } });
      expect(r.value[0]?.spec.bpt).toBe(1024);
    }
    // The budget's snapshot counts its bytes per token from its load, before any request.
    expect(api.runner.snapshot().bpt).toBe(1024);
  });

  it('refuses malformed requests with BAD_REQUEST naming the field', async () => {
    const { api } = await makeApi();
    const r = await api.call('configureBudget', { maxRunning: -3 });
    expect(r).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    if (!r.ok) expect(r.error.message).toMatch(/maxRunning/);
    const unknown = await api.call('nope' as 'listModels', {});
    expect(unknown).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    const inherited = await api.call('toString' as 'listModels', {});
    expect(inherited).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    const extra = await api.call('listModels', { sneaky: 1 });
    expect(extra.ok).toBe(false);
  });

  it('a generation with invalid input ends in one error frame', async () => {
    const { api } = await makeApi();
    const frames: StreamFrame[] = [];
    api.generate({ prompt: 'x', promptIds: [1] }, (f) => frames.push(f));
    await new Promise((r) => setTimeout(r, 20));
    expect(frames).toHaveLength(1);
    expect(frames[0]).toMatchObject({ type: 'error', error: { code: 'BAD_REQUEST' } });
  });

  it('checkPackage reports the file at fault without loading anything', async () => {
    const { api } = await makeApi();
    const r = await api.call('checkPackage', { path: path.join(defaultModelDir, 'onnx') });
    expect(r.ok).toBe(true);
    if (r.ok) {
      expect(r.value.ok).toBe(false);
      if (!r.value.ok) expect(r.value.error.code).toBe('PACKAGE_INVALID');
    }
    const models = await api.call('listModels', {});
    expect(models.ok && models.value.length).toBe(1);
  });

  it('imports an uploaded package folder into the library and loads it', async () => {
    const { api, dataDir } = await makeApi();
    const files = await packageFiles(defaultModelDir, 'my-model');
    const r = await api.importFiles({ name: 'my model', files });
    expect(r.ok, JSON.stringify(r)).toBe(true);
    if (r.ok) expect(r.value.spec.root).toBe(path.join(dataDir, 'models', 'my-model'));
    const listed = await api.call('listModels', {});
    expect(listed.ok && listed.value.map((m) => m.spec.root)).toContain(path.join(dataDir, 'models', 'my-model'));
    // The same folder again is the library's copy: no second copy, no second model.
    const again = await api.importFiles({ name: 'my model', files });
    expect(again.ok && again.value.spec.root).toBe(path.join(dataDir, 'models', 'my-model'));
    expect(await readdir(path.join(dataDir, 'models'))).toEqual(['my-model']);
    const models = await api.call('listModels', {});
    expect(models.ok && models.value.filter((m) => m.spec.root.startsWith(path.join(dataDir, 'models')))).toHaveLength(
      1,
    );
    // A changed file is another package: a copy beside it.
    const changed = files.map((f) =>
      f.path.endsWith('generation_config.json') ? { ...f, data: new TextEncoder().encode('{"max_new_tokens": 7}') } : f,
    );
    const other = await api.importFiles({ name: 'my model', files: changed });
    expect(other.ok && other.value.spec.root).toBe(path.join(dataDir, 'models', 'my-model-2'));
    // It says so (the first one had the name to itself).
    expect(other.ok && other.value.nameTaken).toBe(true);
    expect(r.ok && r.value.nameTaken).toBeUndefined();
  });

  it('an upload with load false joins the library checked, unloaded, for its card to load', async () => {
    const { api, dataDir } = await makeApi();
    const files = await packageFiles(defaultModelDir, 'kept');
    const root = path.join(dataDir, 'models', 'kept');
    const r = await api.importFiles({ name: 'kept', files, load: false });
    if (!r.ok) throw new Error(r.error.message);
    expect(r.value).toMatchObject({ root, spec: { root, id: 'kept' } });
    expect(r.value.model).toBeUndefined();
    const loadedRoots = async () => {
      const listed = await api.call('listModels', {});
      return listed.ok ? listed.value.map((m) => m.spec.root) : [];
    };
    expect(await loadedRoots()).not.toContain(root);
    expect(r.value.existing).toBeUndefined();
    expect(api.library.list()[0]).toMatchObject({
      root,
      id: 'kept',
      uploaded: true,
      neverLoaded: true,
      spec: { bpt: r.value.spec.bpt },
    });
    // The same folder again: the library's copy, still not loaded, and no second copy.
    const again = await api.importFiles({ name: 'kept', files, load: false });
    expect(again.ok && again.value).toMatchObject({ root, existing: true });
    expect(await readdir(path.join(dataDir, 'models'))).toEqual(['kept']);
    expect(await loadedRoots()).not.toContain(root);
    // The card's Load: by the root the upload answered with.
    const loaded = await api.call('loadModel', { path: root });
    expect(loaded.ok && loaded.value.spec.root).toBe(root);
    expect(await loadedRoots()).toContain(root);
    expect(api.library.list().find((e) => e.root === root)?.neverLoaded).toBeUndefined();
    // A bad package is refused the same way, and nothing of it is kept.
    const bad = await api.importFiles({
      name: 'bad',
      files: [{ path: 'bad/config.json', data: new TextEncoder().encode('{') }],
      load: false,
    });
    expect(bad).toMatchObject({ ok: false, error: { code: 'PACKAGE_INVALID' } });
    expect(await readdir(path.join(dataDir, 'models'))).toEqual(['kept']);
    expect(
      api.library
        .list()
        .filter((e) => e.uploaded)
        .map((e) => e.root),
    ).toEqual([root]);
  });

  it('refuses an upload that leaves the package and keeps nothing of a bad one', async () => {
    const { api, dataDir } = await makeApi();
    const outside = await api.importFiles({ name: 'evil', files: [{ path: '../../etc/x', data: new Uint8Array(1) }] });
    expect(outside).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    const bad = await api.importFiles({
      name: 'bad',
      files: [{ path: 'bad/config.json', data: new TextEncoder().encode('{') }],
    });
    expect(bad).toMatchObject({ ok: false, error: { code: 'PACKAGE_INVALID' } });
    // A folder that is no package at all: the refusal names the folder the person chose, not the staging copy.
    const notPackage = await api.importFiles({
      name: 'empty-ish',
      files: [{ path: 'empty-ish/readme.txt', data: new TextEncoder().encode('hi') }],
    });
    expect(notPackage.ok).toBe(false);
    const message = notPackage.ok ? '' : notPackage.error.message;
    expect(message).toMatch(/^the uploaded folder "empty-ish" is not a model package/);
    expect(JSON.stringify(notPackage)).not.toContain('.incoming-');
    const left = await readdir(path.join(dataDir, 'models')).catch(() => []);
    expect(left).toEqual([]);
    expect(() => safeRelativePath('/abs')).toThrow(/absolute/);
    expect(() => safeRelativePath('C:\\x')).toThrow(/absolute/);
    expect(safeRelativePath('a/./b\\c')).toBe('a/b/c');
  });

  it("two hosts on one data folder: a theme changed through one keeps the other's new preset, and its pages hear of it", async () => {
    // No model is loaded: settings are all they do here.
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-host-'));
    const host = () => createHostApi({ runner: new RunnerService({ intraOpNumThreads: 1 }), dataDir });
    const [a, b] = await Promise.all([host(), host()]);
    apis.push(a, b);
    const heard: unknown[] = [];
    a.on('settings', (x) => heard.push(x));
    const p1 = { name: 'P1' };
    const p2 = { name: 'P2 from B' };
    expect((await a.call('getSettings', {})).ok).toBe(true);
    expect((await a.call('saveSettings', { theme: 'dark', presets: [p1] })).ok).toBe(true);
    const fromB = await b.call('getSettings', {});
    if (!fromB.ok) throw new Error(fromB.error.message);
    expect((await b.call('saveSettings', { ...fromB.value, presets: [p1, p2] })).ok).toBe(true);
    // A's page still holds [P1] and changes the theme.
    expect((await a.call('saveSettings', { theme: 'light', presets: [p1] })).ok).toBe(true);
    const after = await b.call('getSettings', {});
    expect(after.ok && after.value).toEqual({ theme: 'light', presets: [p1, p2] });
    expect(heard.at(-1)).toEqual({ theme: 'light', presets: [p1, p2] });
  });

  it('persists threads and settings, and deleting a thread closes its session', async () => {
    const { api, dataDir } = await makeApi();
    const thread: Thread = { id: 't1', title: 'Hello', createdAt: 1, updatedAt: 2, messages: [] };
    expect((await api.call('saveThread', thread)).ok).toBe(true);
    expect((await api.call('saveSettings', { lastThreadId: 't1' })).ok).toBe(true);
    const frames: StreamFrame[] = [];
    await new Promise<void>((resolve) => {
      api.generate({ promptIds: [5, 6, 7], maxNewTokens: 3, sampling: { greedy: true }, sessionId: 't1' }, (f) => {
        frames.push(f);
        if (f.type === 'done' || f.type === 'error') resolve();
      });
    });
    expect(frames.at(-1)?.type).toBe('done');
    expect(api.runner.snapshot().heldBytes).toBeGreaterThan(0);
    const listed = await api.call('listThreads', {});
    expect(listed.ok && listed.value.map((t) => t.id)).toEqual(['t1']);
    expect(await api.call('getSettings', {})).toEqual({ ok: true, value: { lastThreadId: 't1' } });
    expect((await api.call('deleteThread', { id: 't1' })).ok).toBe(true);
    expect(api.runner.snapshot().heldBytes).toBe(0);
    const after = await api.call('listThreads', {});
    expect(after.ok && after.value).toEqual([]);
    expect((await api.call('saveThread', { ...thread, id: '../x' })).ok).toBe(false);
    // A page that had not heard of the delete (its reply's last save) does not bring it back.
    const late = await api.call('saveThread', { ...thread, updatedAt: 3 });
    expect(late).toMatchObject({ ok: false, error: { message: expect.stringContaining('was deleted') } });
    const still = await api.call('listThreads', {});
    expect(still.ok && still.value).toEqual([]);
    // Nor after kvdesk restarted (the page's save waited while it was away): its data folder remembers the delete.
    await api.close();
    const again = await createHostApi({
      runner: new RunnerService({ intraOpNumThreads: 1 }),
      dataDir,
      defaultModelDir,
    });
    apis.push(again);
    const later = await again.call('saveThread', { ...thread, revision: 1, savedBy: 'page-a' });
    expect(later).toMatchObject({
      ok: false,
      error: { message: 'the chat "Hello" was deleted in another window or tab' },
    });
    expect(await again.call('listThreads', {})).toEqual({ ok: true, value: [] });
  });

  it('lists summaries and answers a chat whole when it is opened: a big chat is not sent with the list nor its saves', async () => {
    const { api } = await makeApi();
    const events: string[] = [];
    api.on('thread', (e) => events.push(JSON.stringify(e)));
    const text = 'page table entries, résumé λ\n'.repeat(60_000); // about 1.7 MB of an attached file's text
    const big: Thread = {
      id: 'big',
      title: 'Report',
      createdAt: 1,
      updatedAt: 2,
      messages: [{ id: 'u1', role: 'user', content: 'Read it', createdAt: 1, attachments: [{ name: 'r.pdf', text }] }],
    };
    expect(await api.call('saveThread', { ...big, savedBy: 'page-a' })).toEqual({ ok: true, value: { revision: 1 } });
    const listed = await api.call('listThreads', {});
    expect(listed).toMatchObject({ ok: true, value: [{ id: 'big', title: 'Report', revision: 1 }] });
    expect(JSON.stringify(listed).length).toBeLessThan(500);
    expect(listed.ok && listed.value[0]?.bytes).toBeGreaterThan(text.length);
    // The other pages hear of the save: its summary and revision, not its 2 MB.
    expect(events).toHaveLength(1);
    expect(events[0]?.length).toBeLessThan(500);
    expect(JSON.parse(events[0] ?? '{}')).toMatchObject({ summary: { id: 'big', revision: 1 }, savedBy: 'page-a' });
    expect(await api.call('openThread', { id: 'big' })).toEqual({ ok: true, value: { ...big, revision: 1 } });
    // A chat with no file (deleted in another tab) says so; a bad id is refused as in a save.
    expect(await api.call('openThread', { id: 'nope' })).toMatchObject({
      ok: false,
      error: { code: 'BAD_REQUEST', detail: { reason: 'gone' } },
    });
    expect(await api.call('openThread', { id: '../x' })).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    expect(await api.call('searchThreads', { query: 'TABLE r.pdf' })).toEqual({ ok: true, value: ['big'] });
    // A pin and a rename from the list: sent and told of without its messages, which stay.
    const pin = { id: 'big', revision: 1, title: 'Report (read)', pinned: true, savedBy: 'page-b' };
    expect(await api.call('updateThread', pin)).toEqual({ ok: true, value: { revision: 2 } });
    expect(events).toHaveLength(2);
    expect(events[1]?.length).toBeLessThan(500);
    expect(JSON.parse(events[1] ?? '{}')).toMatchObject({
      summary: { id: 'big', title: 'Report (read)', pinned: true, revision: 2 },
      savedBy: 'page-b',
    });
    expect(await api.call('openThread', { id: 'big' })).toEqual({
      ok: true,
      value: { ...big, title: 'Report (read)', pinned: true, revision: 2 },
    });
    // By a save's rules: made from a revision another page saved over, refused; a field it does not change, refused.
    expect(await api.call('updateThread', { id: 'big', revision: 1, pinned: false, savedBy: 'page-a' })).toMatchObject({
      ok: false,
      error: { code: 'SAVE_CONFLICT', detail: { revision: 2, base: 1 } },
    });
    expect(await api.call('updateThread', { id: 'big', revision: 2, messages: [] })).toMatchObject({
      ok: false,
      error: { code: 'BAD_REQUEST' },
    });
    expect(events).toHaveLength(2);
  });

  it("measures a page's chat up to the context it asks (countUpTo): a chat far longer is said to be, not counted whole", async () => {
    const { api } = await makeApi();
    const line = 'the river runs past the old mill and under the stone bridge. '.repeat(12);
    const messages = Array.from({ length: 150 }, (_, i) => [
      { role: 'user' as const, content: `${i}: ${line}` },
      { role: 'assistant' as const, content: `${i}. ${line}` },
    ]).flat();
    const tok = api.runner.tokenizerOf(api.runner.listModels()[0]?.id ?? '');
    const encode = tok.encode.bind(tok);
    let encoded = 0;
    tok.encode = (text, opts) => {
      encoded += text.length;
      return encode(text, opts);
    };
    try {
      const r = await api.call('measurePrompt', { messages, countUpTo: 2048 });
      expect(r).toMatchObject({ ok: true, value: { contextLength: 2048, countedUpTo: 2048 } });
      expect(r.ok && r.value.promptTokens).toBeGreaterThan(2048);
      // A few prompts about the context's size were counted, not the chat's 115 KB.
      expect(encoded).toBeLessThan(50_000);
    } finally {
      tok.encode = encode;
    }
    // Without it, counted whole, as before.
    const whole = await api.call('measurePrompt', { messages });
    expect(whole.ok && whole.value.countedUpTo).toBeUndefined();
    expect(await api.call('measurePrompt', { messages, countUpTo: 0 })).toMatchObject({
      ok: false,
      error: { code: 'BAD_REQUEST', message: expect.stringContaining('countUpTo') },
    });
  });

  it('remembers the latest deleted chats only, and no id it refused (the set grew with every call for ever)', async () => {
    const { api } = await makeApi();
    const thread: Thread = { id: 'old', title: 'Old', createdAt: 1, updatedAt: 2, messages: [] };
    // An id refused as no chat's name is not remembered: that chat could not exist, and a save of it is refused anyway.
    const refused = await api.call('deleteThread', { id: '../x' });
    expect(refused).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    expect((await api.call('saveThread', thread)).ok).toBe(true);
    expect((await api.call('deleteThread', { id: 'old' })).ok).toBe(true);
    expect((await api.call('saveThread', thread)).ok).toBe(false);
    // As many later deletes as are remembered: the oldest is forgotten, and its late save taken.
    const later = Array.from({ length: DELETED_THREADS_KEPT }, (_, i) => `gone-${i}`);
    for (const ids of [later.slice(0, 1), later.slice(1)]) {
      await Promise.all(ids.map((id) => api.call('deleteThread', { id })));
    }
    expect((await api.call('saveThread', thread)).ok).toBe(true);
    expect((await api.call('saveThread', { ...thread, id: 'gone-0' })).ok).toBe(false);
  });

  it('tells every page of a saved or deleted chat, with the page that saved it', async () => {
    const { api } = await makeApi();
    const seen: unknown[] = [];
    api.on('thread', (e) => seen.push(['thread', e.summary.id, e.savedBy]));
    api.on('threadDeleted', (e) => seen.push(['deleted', e.id]));
    const thread: Thread = { id: 't2', title: 'Hi', createdAt: 1, updatedAt: 2, messages: [] };
    expect((await api.call('saveThread', { ...thread, savedBy: 'page-a' })).ok).toBe(true);
    expect((await api.call('deleteThread', { id: 't2' })).ok).toBe(true);
    expect(seen).toEqual([
      ['thread', 't2', 'page-a'],
      ['deleted', 't2'],
    ]);
    // The page's name is not part of the chat.
    const listed = await api.call('listThreads', {});
    expect(listed.ok && listed.value).toEqual([]);
  });

  it("refuses a save made from a revision another page saved over (nothing written), and takes one page's saves in a row", async () => {
    const { api, dataDir } = await makeApi();
    const seen: unknown[] = [];
    // Each save's summary and revision (the chat's messages are fetched by a page that has it open).
    api.on('thread', (e) => seen.push([e.savedBy, e.summary.revision, 'messages' in e.summary]));
    const msg = (id: string, content: string) => ({ id, role: 'user' as const, content, createdAt: 1 });
    const chat: Thread = { id: 't3', title: 'Two pages', createdAt: 1, updatedAt: 2, messages: [msg('m1', 'hi')] };
    // The first save of a new chat; both pages open it as saved.
    expect(await api.call('saveThread', { ...chat, savedBy: 'page-a' })).toEqual({ ok: true, value: { revision: 1 } });
    const opened = await api.call('listThreads', {});
    expect(opened.ok && opened.value[0]?.revision).toBe(1);
    // Page A saves its turn, and again before the first is answered (both made from revision 1): both taken.
    const a = { ...chat, revision: 1, savedBy: 'page-a', messages: [msg('m1', 'hi'), msg('a5', 'A turn')] };
    const [a1, a2] = await Promise.all([
      api.call('saveThread', a),
      api.call('saveThread', { ...a, messages: [...a.messages, msg('a6', 'A more')] }),
    ]);
    expect([a1, a2]).toEqual([
      { ok: true, value: { revision: 2 } },
      { ok: true, value: { revision: 3 } },
    ]);
    // Page B had not heard of them: its turn, made from revision 1, is refused and writes nothing.
    const b = { ...chat, revision: 1, savedBy: 'page-b', messages: [msg('m1', 'hi'), msg('b5', 'B turn')] };
    const late = await api.call('saveThread', b);
    expect(late).toMatchObject({
      ok: false,
      error: { code: 'SAVE_CONFLICT', detail: { id: 't3', revision: 3, base: 1 } },
    });
    expect(!late.ok && late.error.message).toContain('was saved in another window or tab');
    const listed = await api.call('openThread', { id: 't3' });
    expect(listed.ok && listed.value).toMatchObject({
      revision: 3,
      messages: [{ id: 'm1' }, { id: 'a5' }, { id: 'a6' }],
    });
    // Made from the revision saved, B's save is taken; A's next from its old one is refused in turn.
    expect(await api.call('saveThread', { ...b, revision: 3 })).toEqual({ ok: true, value: { revision: 4 } });
    expect(await api.call('saveThread', { ...a, revision: 3 })).toMatchObject({
      ok: false,
      error: { code: 'SAVE_CONFLICT' },
    });
    expect(seen).toEqual([
      ['page-a', 1, false],
      ['page-a', 2, false],
      ['page-a', 3, false],
      ['page-b', 4, false],
    ]);
    // A chat file from before revisions loads, and saves as revision 0 (a copy from it without one too).
    const old = { id: 'old1', title: 'Before revisions', createdAt: 1, updatedAt: 1, messages: [msg('m1', 'kept')] };
    await writeFile(path.join(dataDir, 'threads', 'old1.json'), JSON.stringify(old));
    const all = await api.call('openThread', { id: 'old1' });
    expect(all.ok && all.value).toEqual(old);
    expect(await api.call('saveThread', { ...old, savedBy: 'page-a' })).toEqual({ ok: true, value: { revision: 1 } });
    expect(await api.call('saveThread', { ...old, savedBy: 'page-b' })).toMatchObject({
      ok: false,
      error: { code: 'SAVE_CONFLICT' },
    });
    // Renamed from the revision saved, and deleted: both as before.
    expect(await api.call('saveThread', { ...old, title: 'Renamed', revision: 1 })).toEqual({
      ok: true,
      value: { revision: 2 },
    });
    expect((await api.call('deleteThread', { id: 'old1' })).ok).toBe(true);
  });

  it('broadcasts budget snapshots at most 10 times a second, the last state included', async () => {
    const { api } = await makeApi();
    const times: number[] = [];
    let last: number | undefined;
    api.on('budget', (s) => {
      times.push(Date.now());
      last = s.reservedBytes;
    });
    const done = Array.from(
      { length: 3 },
      () =>
        new Promise<void>((resolve) => {
          api.generate({ promptIds: [5, 6, 7], maxNewTokens: 40, sampling: { greedy: true } }, (f) => {
            if (f.type === 'done' || f.type === 'error') resolve();
          });
        }),
    );
    await Promise.all(done);
    await new Promise((r) => setTimeout(r, 250));
    expect(times.length).toBeGreaterThan(0);
    for (let i = 1; i < times.length; i++)
      expect((times[i] as number) - (times[i - 1] as number)).toBeGreaterThanOrEqual(95);
    expect(last).toBe(0);
  });
});
