/**
 * Downloads from the Hugging Face Hub through the host and its front ends, against a local imitation of the hub's
 * file API (test/helpers/fake-hub.ts) serving the generated default model: the window's calls (look up the
 * variants, download with progress in the `downloads` event, cancel, refusals), Ollama's `POST /api/pull` (its
 * progress lines, then the model answering `/api/chat` by its library id; a second client's pull following the
 * first's download; a client gone during the hub's listing, and a pull arriving while the download is being
 * cancelled), and `kvdesk pull` (a real process).
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { downloadHubModel } from '../../../src/main/host/hub-download';
import type { DownloadStatus } from '../../../src/shared/api';
import { defaultModelRepo, type FakeHub, startFakeHub } from '../../helpers/fake-hub';
import { defaultModelDir, repoRoot } from '../../helpers/fixtures';
import { eventually, startTestServer, type TestServer } from './server-helpers';

const REPO = 'onnx-community/tiny-chat';
let hub: FakeHub;
let t: TestServer;

beforeAll(async () => {
  hub = await startFakeHub({ [REPO]: defaultModelRepo() }, { lfsMinBytes: 10_000, revisions: ['main', 'dev'] });
  t = await startTestServer({ intraOpNumThreads: 2 }, { hub: { endpoint: hub.url } });
}, 60_000);
afterAll(async () => {
  await t?.close();
  await hub?.close();
});

const sizeOr0 = (p: string) => statSync(p, { throwIfNoEntry: false })?.size ?? 0;

/** Waits for a download to end, as the window does: from the `downloads` events. */
function ended(id: string): Promise<DownloadStatus> {
  return new Promise((resolve) => {
    const off = t.hostApi.on('downloads', (list) => {
      const d = list.find((x) => x.id === id);
      if (d && d.state !== 'running') {
        off();
        resolve(d);
      }
    });
  });
}

async function post(p: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${t.url}${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

/** `kvdesk <args>` (a real process) against the fake hub; not spawnSync: the hub answers from this process. */
const kvdesk = (args: string[], timeout = 60_000) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args],
      { cwd: repoRoot, env: { ...process.env, HF_ENDPOINT: hub.url, HF_TOKEN: '' }, timeout },
      (err, stdout, stderr) => resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });

describe('the window: look up, download, the library', () => {
  it('lists the variants, downloads one into the library with progress, and loads it', async () => {
    const variants = await t.hostApi.call('hubVariants', { repo: REPO });
    expect(variants.ok && variants.value).toMatchObject({ repo: REPO, recommended: 'q4' });
    expect(variants.ok && variants.value.variants.map((v) => v.name)).toEqual(['q4', 'fp32']);
    const progress: DownloadStatus[][] = [];
    const off = t.hostApi.on('downloads', (list) => progress.push(list));
    const started = await t.hostApi.call('downloadModel', { repo: REPO, variant: 'q4' });
    if (!started.ok) throw new Error(started.error.message);
    expect(started.value).toMatchObject({ repo: REPO, variant: 'q4', state: 'running' });
    const done = await ended(started.value.id);
    off();
    expect(done).toMatchObject({ state: 'done', libraryId: 'tiny-chat-q4' });
    expect(done.doneBytes).toBe(done.totalBytes);
    // Progress went out as bytes arrived, never backwards.
    const seen = progress.map((l) => l.find((d) => d.id === started.value.id)?.doneBytes ?? 0);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    const entry = t.hostApi.library.list().find((e) => e.id === 'tiny-chat-q4');
    expect(entry?.spec?.layout).toBe('hf-optimum');
    const listed = await t.hostApi.call('listDownloads', {});
    expect(listed.ok && listed.value.find((d) => d.id === started.value.id)?.state).toBe('done');
    // It loads from the library as any package.
    const loaded = await t.hostApi.call('loadModel', { path: entry?.root as string });
    expect(loaded.ok).toBe(true);
  });

  it('refuses at once what cannot be downloaded, naming why', async () => {
    const missing = await t.hostApi.call('downloadModel', { repo: 'nobody/nothing' });
    expect(missing.ok ? null : missing.error).toMatchObject({ code: 'BAD_REQUEST' });
    // Downloaded already (the first test's): refused at once, saying where it is.
    const twice = await t.hostApi.call('downloadModel', { repo: REPO, variant: 'q4' });
    expect(twice.ok ? null : twice.error).toMatchObject({ code: 'BAD_REQUEST', detail: { present: true } });
    const variant = await t.hostApi.call('downloadModel', { repo: REPO, variant: 'q8' });
    expect(variant.ok ? null : variant.error.message).toMatch(/has no variant "q8": it offers q4 .*, fp32/);
    const bad = await t.hostApi.call('hubVariants', { repo: 'not a repo' });
    expect(bad.ok ? null : bad.error.message).toMatch(/owner\/name/);
  });

  it('a cancelled download says so, and the next one resumes from what arrived', async () => {
    // The graph stalls half way: the download is running when it is cancelled.
    hub.faults.stall = 'onnx/model.onnx';
    const started = await t.hostApi.call('downloadModel', { repo: REPO, variant: 'fp32' });
    if (!started.ok) throw new Error(started.error.message);
    // Some of the graph is on disk (its .part in the staging folder): the side files may finish first.
    const graphPart = () => {
      const models = path.join(t.dataDir, 'models');
      const stage = readdirSync(models).find((n) => n.startsWith('.tiny-chat-fp32.') && n.endsWith('.partial'));
      return stage ? sizeOr0(path.join(models, stage, 'onnx/model.onnx.part')) : 0;
    };
    for (let i = 0; i < 1000 && graphPart() === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(graphPart()).toBeGreaterThan(0);
    const before = hub.requests.length;
    expect((await t.hostApi.call('cancelDownload', { id: started.value.id })).ok).toBe(true);
    const cancelled = await ended(started.value.id);
    expect(cancelled.state).toBe('cancelled');
    expect(cancelled.error).toBeUndefined();
    hub.faults.stall = undefined;
    const again = await t.hostApi.call('downloadModel', { repo: REPO, variant: 'fp32' });
    if (!again.ok) throw new Error(again.error.message);
    expect(await ended(again.value.id)).toMatchObject({ state: 'done', libraryId: 'tiny-chat-fp32' });
    // What had arrived of the graph was kept: it was asked for from there on.
    expect(hub.requests.slice(before).some((r) => r.range !== undefined && /^bytes=[1-9]\d*-$/.test(r.range))).toBe(
      true,
    );
  });
});

describe('searching the hub', () => {
  it('the window finds the repository by a word of its name; a bad search is refused by field', async () => {
    const r = await t.hostApi.call('searchHub', { query: 'TINY' });
    expect(r.ok && r.value).toEqual([expect.objectContaining({ repo: REPO, gated: false })]);
    expect(new URL(hub.requests.at(-1)?.path ?? '', hub.url).searchParams.get('search')).toBe('TINY');
    const limited = await t.hostApi.call('searchHub', { query: 'tiny', limit: 1 });
    expect(limited.ok && limited.value.length).toBe(1);
    for (const bad of [{ query: '' }, { query: '  ' }, { query: 'tiny', limit: 0 }, { query: 'tiny', extra: 1 }]) {
      const refused = await t.hostApi.call('searchHub', bad as { query: string });
      expect(refused.ok ? null : refused.error.code).toBe('BAD_REQUEST');
    }
  });

  it('kvdesk search prints the hits (as JSON with --json), and says when there are none', async () => {
    const found = await kvdesk(['search', 'tiny', 'chat']);
    expect(found.status, found.stderr).toBe(0);
    expect(found.stdout).toMatch(/^onnx-community\/tiny-chat +0 downloads +0 likes +2026-11-01\n$/);
    expect(found.stderr).toContain(`kvdesk pull ${REPO} --list`);
    // Of two words, the hub is asked for one; the hits hold both.
    expect(new URL(hub.requests.at(-1)?.path ?? '', hub.url).searchParams.get('search')).toBe('tiny');
    const json = await kvdesk(['search', 'tiny', '--json', '--limit', '5']);
    expect(JSON.parse(json.stdout)).toEqual([expect.objectContaining({ repo: REPO, downloads: 0 })]);
    const none = await kvdesk(['search', 'zzz']);
    expect(none.status).toBe(0);
    expect(none.stdout).toBe('');
    expect(none.stderr).toContain('no ONNX language model on the hub matches "zzz"');
    for (const args of [['search'], ['search', 'x', '--limit', '0']]) {
      const bad = await kvdesk(args);
      expect(bad.status, args.join(' ')).toBe(2);
    }
    const word = await kvdesk(['search', 'x', '--limit', 'abc']);
    expect(word.stderr).toContain('kvdesk: --limit expects an integer, got "abc"');
  }, 60_000);
});

describe("Ollama's /api/pull", () => {
  it("streams Ollama's progress lines, then the model answers by its library id", async () => {
    // A fresh data directory: nothing downloaded yet.
    const t2 = await startTestServer({ intraOpNumThreads: 2 }, { hub: { endpoint: hub.url }, loadDefault: false });
    try {
      const res = await fetch(`${t2.url}/api/pull`, {
        method: 'POST',
        body: JSON.stringify({ model: `hf.co/${REPO}:latest` }),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain('application/x-ndjson');
      const lines = (await res.text())
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { status?: string; total?: number; completed?: number });
      expect(lines[0]).toEqual({ status: 'pulling manifest' });
      expect(lines.at(-1)).toEqual({ status: 'success' });
      const pulling = lines.filter((l) => l.status === 'pulling q4');
      expect(pulling.length).toBeGreaterThan(0);
      expect(pulling.at(-1)?.completed).toBe(pulling.at(-1)?.total);
      const tags = (await (await fetch(`${t2.url}/api/tags`)).json()) as { models: Array<{ name: string }> };
      expect(tags.models.map((m) => m.name)).toContain('tiny-chat-q4:latest');
      const chat = await fetch(`${t2.url}/api/chat`, {
        method: 'POST',
        body: JSON.stringify({
          model: 'tiny-chat-q4',
          messages: [{ role: 'user', content: 'Hi' }],
          stream: false,
          options: { num_predict: 4 },
        }),
      });
      expect(chat.status).toBe(200);
      // And by the name it was pulled by, as Ollama's.
      const byPulled = await fetch(`${t2.url}/api/chat`, {
        method: 'POST',
        body: JSON.stringify({
          model: `hf.co/${REPO}:q4`,
          messages: [{ role: 'user', content: 'Hi' }],
          stream: false,
          options: { num_predict: 4 },
        }),
      });
      expect(byPulled.status).toBe(200);
      expect(((await byPulled.json()) as { model: string }).model).toBe(`hf.co/${REPO}:q4`);
      // Pulled again, it is there already: success at once, as Ollama's pull of a model it has.
      const requests = hub.requests.length;
      const again = await fetch(`${t2.url}/api/pull`, {
        method: 'POST',
        body: JSON.stringify({ model: REPO, stream: false }),
      });
      expect(again.status).toBe(200);
      expect(await again.json()).toEqual({ status: 'success' });
      // Only looked up (the revision's commit, its files), nothing fetched.
      expect(hub.requests.slice(requests).every((r) => /\/(tree|revision)\//.test(r.path))).toBe(true);
    } finally {
      await t2.close();
    }
  }, 60_000);

  it('a client that goes away stops its pull, as Ollama does; the next pull resumes', async () => {
    const t2 = await startTestServer({ intraOpNumThreads: 2 }, { hub: { endpoint: hub.url }, loadDefault: false });
    hub.faults.stall = 'onnx/model.onnx';
    try {
      const abort = new AbortController();
      const res = await fetch(`${t2.url}/api/pull`, {
        method: 'POST',
        body: JSON.stringify({ model: `hf.co/${REPO}:fp32` }),
        signal: abort.signal,
      });
      expect(res.status).toBe(200);
      const running = () => t2.hostApi.downloads.list().find((d) => d.variant === 'fp32');
      for (let i = 0; i < 1000 && running()?.state !== 'running'; i++) await new Promise((r) => setTimeout(r, 10));
      expect(running()?.state).toBe('running');
      abort.abort();
      for (let i = 0; i < 1000 && running()?.state === 'running'; i++) await new Promise((r) => setTimeout(r, 10));
      expect(running()?.state).toBe('cancelled');
      hub.faults.stall = undefined;
      const again = await fetch(`${t2.url}/api/pull`, {
        method: 'POST',
        body: JSON.stringify({ model: `hf.co/${REPO}:fp32`, stream: false }),
      });
      expect(await again.json()).toEqual({ status: 'success' });
    } finally {
      hub.faults.stall = undefined;
      await t2.close();
    }
  }, 60_000);

  it("a second client's pull of a model downloading follows that download to its end; the first client's going does not stop it", async () => {
    const t2 = await startTestServer({ intraOpNumThreads: 2 }, { hub: { endpoint: hub.url }, loadDefault: false });
    // The graph is held half way until the other clients follow the download.
    let release = false;
    hub.faults.hold = { path: 'onnx/model.onnx', until: () => release };
    const graphBytes = (defaultModelRepo()['onnx/model.onnx'] as Buffer).length;
    const servedBefore = hub.served.get('onnx/model.onnx') ?? 0;
    const pull = (body: Record<string, unknown>, signal?: AbortSignal) =>
      fetch(`${t2.url}/api/pull`, {
        method: 'POST',
        body: JSON.stringify({ model: `hf.co/${REPO}:fp32`, ...body }),
        ...(signal ? { signal } : {}),
      });
    try {
      const first = new AbortController();
      const a = await pull({}, first.signal);
      expect(a.status).toBe(200);
      const downloads = () => t2.hostApi.downloads.list().filter((d) => d.variant === 'fp32');
      await eventually(downloads, (l) => l[0]?.state === 'running' && l[0].doneBytes > 0);
      const b = await pull({});
      expect(b.status).toBe(200);
      const c = pull({ stream: false });
      // The first client goes: the download runs on for the others.
      first.abort();
      await new Promise((r) => setTimeout(r, 300));
      expect(downloads()[0]?.state).toBe('running');
      release = true;
      const lines = (await b.text())
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { status?: string; total?: number; completed?: number });
      expect(lines[0]).toEqual({ status: 'pulling manifest' });
      // The running download's progress, from how far it had come to its end.
      const pulling = lines.filter((l) => l.status === 'pulling fp32');
      expect(pulling[0]?.completed).toBeGreaterThan(0);
      expect(pulling.at(-1)?.completed).toBe(pulling.at(-1)?.total);
      expect(lines.at(-1)).toEqual({ status: 'success' });
      const unstreamed = await c;
      expect(unstreamed.status).toBe(200);
      expect(await unstreamed.json()).toEqual({ status: 'success' });
      // One download: the graph came from the hub once.
      expect(downloads().map((d) => d.state)).toEqual(['done']);
      expect((hub.served.get('onnx/model.onnx') ?? 0) - servedBefore).toBe(graphBytes);
      const tags = (await (await fetch(`${t2.url}/api/tags`)).json()) as { models: Array<{ name: string }> };
      expect(tags.models.map((m) => m.name)).toContain('tiny-chat-fp32:latest');
    } finally {
      release = true;
      hub.faults.hold = undefined;
      await t2.close();
    }
  }, 60_000);

  it('a client that goes away while the hub is asked for the listing does not keep the download going for the others', async () => {
    const t2 = await startTestServer({ intraOpNumThreads: 2 }, { hub: { endpoint: hub.url }, loadDefault: false });
    // The graph is held half way: the download runs until the last client goes.
    hub.faults.hold = { path: 'onnx/model.onnx', until: () => false };
    const downloads = () => t2.hostApi.downloads.list().filter((d) => d.variant === 'fp32');
    // Each pull's download as it comes back to the server (followed or not).
    const returned: Array<{ followed?: true }> = [];
    const start = t2.hostApi.downloads.start.bind(t2.hostApi.downloads);
    t2.hostApi.downloads.start = async (...args) => {
      const started = await start(...args);
      returned.push(started);
      return started;
    };
    const pull = (signal: AbortSignal) =>
      fetch(`${t2.url}/api/pull`, { method: 'POST', body: JSON.stringify({ model: `hf.co/${REPO}:fp32` }), signal });
    try {
      const first = new AbortController();
      expect((await pull(first.signal)).status).toBe(200);
      await eventually(downloads, (l) => l[0]?.state === 'running' && l[0].doneBytes > 0);
      // A second client's pull: it goes while the hub is asked for the listing, before it follows the download.
      let listed = false;
      hub.faults.holdListing = () => listed;
      const asked = hub.requests.length;
      const second = new AbortController();
      const gone = pull(second.signal).catch((err: Error) => err.name);
      await eventually(
        () => hub.requests.slice(asked),
        (r) => r.some((q) => q.path.includes('/revision/')),
      );
      second.abort();
      expect(await gone).toBe('AbortError');
      await new Promise((r) => setTimeout(r, 300));
      listed = true;
      await eventually(
        () => returned.length,
        (n) => n === 2,
      );
      expect(returned[1]?.followed).toBe(true);
      // The first client goes, the last one left: the download stops.
      first.abort();
      await eventually(downloads, (l) => l[0]?.state === 'cancelled', 5000);
    } finally {
      hub.faults.hold = undefined;
      hub.faults.holdListing = undefined;
      await t2.close();
    }
  }, 60_000);

  it('a pull arriving while the download of it is being cancelled downloads it afresh, not following it to "cancelled"', async () => {
    // The graph's transfer, once cancelled, lets go when the test says (as a connection slow to close): until
    // then the download is being cancelled, still running.
    let unwind = () => {};
    const unwound = new Promise<void>((r) => {
      unwind = r;
    });
    let slow = true;
    const slowToStop: typeof fetch = async (input, init) => {
      if (!slow || !String(input).endsWith('/onnx/model.onnx')) return fetch(input, init);
      slow = false;
      const { signal: _, ...rest } = init ?? {};
      const res = await fetch(input, rest);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const body = new ReadableStream<Uint8Array>({
        async pull(c) {
          const r = await reader.read();
          if (r.done) c.close();
          else c.enqueue(r.value);
        },
        async cancel(reason) {
          await unwound;
          await reader.cancel(reason);
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    const t2 = await startTestServer(
      { intraOpNumThreads: 2 },
      { hub: { endpoint: hub.url, fetch: slowToStop }, loadDefault: false },
    );
    let release = false;
    hub.faults.hold = { path: 'onnx/model.onnx', until: () => release };
    const downloads = () => t2.hostApi.downloads.list().filter((d) => d.variant === 'fp32');
    try {
      // The window's download, cancelled there.
      const started = await t2.hostApi.call('downloadModel', { repo: REPO, variant: 'fp32' });
      if (!started.ok) throw new Error(started.error.message);
      // Half the graph in (the side files are a few kB): its transfer is the one under way.
      const graphBytes = (defaultModelRepo()['onnx/model.onnx'] as Buffer).length;
      await eventually(downloads, (l) => l[0]?.state === 'running' && l[0].doneBytes >= graphBytes >> 1);
      expect((await t2.hostApi.call('cancelDownload', { id: started.value.id })).ok).toBe(true);
      await new Promise((r) => setTimeout(r, 100));
      expect(downloads().map((d) => d.state)).toEqual(['running']);
      // A pull meanwhile: it looks the repository up, and finds the download being cancelled.
      const asked = hub.requests.length;
      const pulled = fetch(`${t2.url}/api/pull`, {
        method: 'POST',
        body: JSON.stringify({ model: `hf.co/${REPO}:fp32`, stream: false }),
      });
      await eventually(
        () => hub.requests.slice(asked),
        (r) => r.some((q) => q.path.includes('/tree/')),
      );
      await new Promise((r) => setTimeout(r, 200));
      release = true;
      unwind();
      const res = await pulled;
      expect(await res.json()).toEqual({ status: 'success' });
      expect(downloads().map((d) => d.state)).toEqual(['done', 'cancelled']);
    } finally {
      release = true;
      unwind();
      hub.faults.hold = undefined;
      await t2.close();
    }
  }, 60_000);

  it('the model answers by every name /api/pull takes (a revision before or after the variant); a revision not pulled says how to pull it', async () => {
    const t2 = await startTestServer({ intraOpNumThreads: 2 }, { hub: { endpoint: hub.url }, loadDefault: false });
    try {
      const pulled = await post2(t2.url, '/api/pull', { model: `hf.co/${REPO}:q4@main`, stream: false });
      expect(pulled.status, pulled.text).toBe(200);
      const commit = hub.head(REPO);
      // /api/show answered 404 (`kvdesk knows tiny-chat-q4`) for each: the tag was read as "q4@main".
      for (const model of [
        `hf.co/${REPO}:q4@main`,
        `${REPO}@main:q4`,
        `${REPO}@main`,
        `hf.co/${REPO}:latest@main`,
        `${REPO}:q4@${commit}`,
      ]) {
        const show = await post2(t2.url, '/api/show', { model });
        expect(show.status, `${model}: ${show.text}`).toBe(200);
      }
      const chat = await post2(t2.url, '/api/chat', {
        model: `hf.co/${REPO}:q4@main`,
        messages: [{ role: 'user', content: 'Hi' }],
        stream: false,
        options: { num_predict: 2 },
      });
      expect(chat.status, chat.text).toBe(200);
      expect(JSON.parse(chat.text).model).toBe(`hf.co/${REPO}:q4@main`);
      const openai = await post2(t2.url, '/v1/chat/completions', {
        model: `${REPO}@main:q4`,
        max_tokens: 2,
        messages: [{ role: 'user', content: 'Hi' }],
      });
      expect(openai.status, openai.text).toBe(200);
      // At a revision it was not pulled at: said so, with the package there and the requests that pull the other.
      const why = `"hf.co/${REPO}:q4@dev" names ${REPO} (q4) at revision dev, and the library's tiny-chat-q4 was pulled from ${REPO}:q4 at main (commit ${commit.slice(0, 12)}), not at dev: name it as ${REPO}:q4 or ${REPO}@main:q4, or, to have dev instead, DELETE /api/delete {"model":"tiny-chat-q4"}, then POST /api/pull {"model":"${REPO}@dev:q4"}.`;
      const dev = await post2(t2.url, '/api/show', { model: `hf.co/${REPO}:q4@dev` });
      expect(dev.status).toBe(404);
      expect(JSON.parse(dev.text)).toEqual({ error: why });
      const devOpenai = await post2(t2.url, '/v1/chat/completions', {
        model: `hf.co/${REPO}:q4@dev`,
        max_tokens: 2,
        messages: [{ role: 'user', content: 'Hi' }],
      });
      expect(devOpenai.status).toBe(404);
      expect(JSON.parse(devOpenai.text).error).toMatchObject({ message: why, code: 'model_not_found', param: 'model' });
      // Doing as it says: the name at dev answers, and the one at main is the one not pulled now.
      const del = await fetch(`${t2.url}/api/delete`, {
        method: 'DELETE',
        body: JSON.stringify({ model: 'tiny-chat-q4' }),
      });
      expect(del.status).toBe(200);
      const again = await post2(t2.url, '/api/pull', { model: `${REPO}@dev:q4`, stream: false });
      expect(again.status, again.text).toBe(200);
      expect((await post2(t2.url, '/api/show', { model: `hf.co/${REPO}:q4@dev` })).status).toBe(200);
      const main = await post2(t2.url, '/api/show', { model: `hf.co/${REPO}:q4@main` });
      expect(main.status).toBe(404);
      expect(JSON.parse(main.text).error).toContain('pulled from onnx-community/tiny-chat:q4 at dev');
    } finally {
      await t2.close();
    }
  }, 60_000);

  it("an unknown repository is an error in Ollama's shape", async () => {
    // Without a token the hub answers 401 for a repository that does not exist (it hides private ones).
    const r = await post('/api/pull', { model: 'hf.co/nobody/nothing' });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text)).toEqual({ error: expect.stringMatching(/HTTP 401.*does not exist, or is gated/) });
    const none = await post('/api/pull', {});
    expect(none.status).toBe(400);
  });
});

describe('kvdesk pull', () => {
  it('lists, downloads into the library (the id on stdout), and refuses a bad name with exit 2', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-pull-'));
    try {
      const list = await kvdesk(['pull', REPO, '--list', '--data-dir', dataDir]);
      expect(list.status, list.stderr).toBe(0);
      expect(list.stdout).toMatch(/q4 .*hf-optimum \(default\)/);
      const r = await kvdesk(['pull', REPO, '--data-dir', dataDir]);
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toBe('tiny-chat-q4\n');
      expect(r.stderr).toMatch(/pulling onnx-community\/tiny-chat \(q4\): .* 100%/);
      expect(readdirSync(path.join(dataDir, 'models'))).toEqual(['tiny-chat-q4']);
      // Again: there already, nothing downloaded, the id all the same (as `ollama pull`).
      const again = await kvdesk(['pull', REPO, '--data-dir', dataDir]);
      expect(again.status, again.stderr).toBe(0);
      expect(again.stdout).toBe('tiny-chat-q4\n');
      expect(again.stderr).toContain('is downloaded already');
      const listed = await kvdesk(['list', '--json', '--data-dir', dataDir]);
      // The library says where it came from.
      expect(JSON.parse(listed.stdout).packages).toEqual([
        expect.objectContaining({
          id: 'tiny-chat-q4',
          state: 'ok',
          source: { repo: REPO, revision: 'main', variant: 'q4', commit: hub.head(REPO) },
        }),
      ]);
      // A word is no repository: the way to find one is said.
      const bad = await kvdesk(['pull', 'nope', '--data-dir', dataDir]);
      expect(bad.status).toBe(2);
      expect(bad.stderr).toContain('"nope" is not a repository (owner/name): find one with kvdesk search "nope"');
      const worse = await kvdesk(['pull', 'no/pe/x', '--data-dir', dataDir]);
      expect(worse.status).toBe(2);
      expect(worse.stderr).toContain('is not a Hugging Face repository');
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('a data directory that cannot be made or written is refused before anything downloads (exit 2), naming why', async () => {
    const cases: Array<[string, string]> = [
      ['/dev/null/kvd', '/dev/null is not a folder (ENOTDIR)'],
      // Node's recursive mkdir spins for good there (the kernel answers ENOENT to every mkdir).
      ...(existsSync('/proc/self')
        ? ([['/proc/kvd', '/proc/kvd could not be made (ENOENT)']] as Array<[string, string]>)
        : []),
    ];
    for (const [dir, why] of cases) {
      const r = await kvdesk(['pull', REPO, '--data-dir', dir], 15_000);
      expect(r.status, r.stderr).toBe(2);
      expect(r.stderr).toBe(
        `kvdesk: the data directory ${dir} cannot be used: ${why}. Give a folder kvdesk can write (--data-dir DIR, or $KVDESK_DATA_DIR)\n`,
      );
    }
  }, 60_000);

  it('says what it sweeps: a stopped download of the package at another revision, a line each', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-pull-'));
    const modelsDir = path.join(dataDir, 'models');
    try {
      // A download at the commit main is at, cut off: its staging folder stays, for a try at that revision.
      hub.faults.cutAfter = { path: 'onnx/model_q4.onnx', bytes: 1000 };
      await expect(
        downloadHubModel(`${REPO}@${hub.head(REPO)}`, modelsDir, { endpoint: hub.url, token: '' }),
      ).rejects.toMatchObject({ code: 'DOWNLOAD_FAILED' });
      const stopped = readdirSync(modelsDir).map((n) => path.join(modelsDir, n));
      expect(stopped).toEqual([expect.stringMatching(/\.partial$/)]);
      const r = await kvdesk(['pull', REPO, '--data-dir', dataDir]);
      expect(r.status, r.stderr).toBe(0);
      expect(readdirSync(modelsDir)).toEqual(['tiny-chat-q4']);
      expect(r.stderr).toContain(`kvdesk: removed ${stopped[0]} (`);
      expect(r.stderr).toContain(`${path.join(modelsDir, 'tiny-chat-q4')} is there already`);
    } finally {
      hub.faults.cutAfter = undefined;
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('into the data directory of a running server: it answers the pulled model, and its own saves keep it', async () => {
    // A second package the server knows, loaded on first use after the pull: its save must keep the pulled one.
    const other = path.join(mkdtempSync(path.join(os.tmpdir(), 'kvdesk-pull-other-')), 'other');
    cpSync(defaultModelDir, other, { recursive: true });
    const s = await startTestServer({ intraOpNumThreads: 1 }, { hub: { endpoint: hub.url } });
    try {
      const loaded = await s.hostApi.call('loadModel', { path: other });
      expect(loaded.ok).toBe(true);
      expect((await s.hostApi.call('unloadModel', { id: 'other' })).ok).toBe(true);
      await s.hostApi.libraryChecked;
      const r = await kvdesk(['pull', REPO, '--data-dir', s.dataDir]);
      expect(r.status, r.stderr).toBe(0);
      const ids = () =>
        JSON.parse(readFileSync(path.join(s.dataDir, 'library.json'), 'utf8')).packages.map(
          (p: { id: string }) => p.id,
        );
      expect(ids()).toContain('tiny-chat-q4');
      // The server lists it and answers it, by its id and by the name it was pulled by.
      const tags = (await (await fetch(`${s.url}/api/tags`)).json()) as { models: Array<{ name: string }> };
      expect(tags.models.map((m) => m.name)).toContain('tiny-chat-q4:latest');
      const chat = await post2(s.url, '/api/chat', {
        model: 'tiny-chat-q4',
        stream: false,
        options: { num_predict: 2 },
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(chat.status, chat.text).toBe(200);
      // Another library package loaded on first use: the server writes the library, keeping the pulled one.
      const chat2 = await post2(s.url, '/v1/chat/completions', {
        model: 'other',
        max_tokens: 2,
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(chat2.status, chat2.text).toBe(200);
      await s.hostApi.library.flush();
      expect(ids().sort()).toEqual(['default', 'other', 'tiny-chat-q4']);
      const listed = await kvdesk(['list', '--json', '--data-dir', s.dataDir]);
      expect(
        JSON.parse(listed.stdout)
          .packages.map((p: { id: string }) => p.id)
          .sort(),
      ).toEqual(['default', 'other', 'tiny-chat-q4']);
    } finally {
      await s.close();
      rmSync(path.dirname(other), { recursive: true, force: true });
    }
  }, 90_000);
});

async function post2(url: string, p: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}
