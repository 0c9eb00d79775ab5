/**
 * Loading on first use against a real server: packages loaded before (the library) are listed beside the
 * loaded models by OpenAI's and Ollama's listings, and a request that names one loads it first, on every
 * generating route; concurrent requests share one load; a package loaded that way gives way to the next one
 * loaded that way when it is idle, never to a model the person loaded nor to one kept for ever (`keep_alive: -1`);
 * Ollama's empty request loads and its `keep_alive: 0` unloads, and a reply with `keep_alive: 0` unloads its model
 * once over; a name in neither place is still a 404. No sweep of idle models runs here (an hour apart): what
 * unloads a model is a request’s doing. A client that leaves while its model loads is never submitted.
 */
import { cp, mkdtemp, readdir, rename, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';
import { type RunningServer, startServer } from '../../../src/main/server';
import type { LibraryEntry, ModelInfo } from '../../../src/shared/api';
import type { SchedulerEvent } from '../../../src/shared/scheduler-types';
import { defaultModelDir } from '../../helpers/fixtures';
import { holdReplyEnds, noEndBias } from '../../helpers/hold-replies';
import { eventually, LONG_CHAT, ndjsonLines, settled } from './server-helpers';

type Json = Record<string, unknown>;

let dataDir: string;
let pkgs: string;
let second: string;
let third: string;
let runner: RunnerService;
let hostApi: HostApi;
let server: RunningServer;
let url: string;
/** The host's log lines since the last test began. */
const logs: string[] = [];

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-jit-'));
  pkgs = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-jit-pkgs-'));
  second = path.join(pkgs, 'second');
  third = path.join(pkgs, 'third');
  await cp(defaultModelDir, second, { recursive: true });
  await cp(defaultModelDir, third, { recursive: true });
  runner = new RunnerService({ intraOpNumThreads: 1 });
  hostApi = await createHostApi({
    runner,
    dataDir,
    defaultModelDir,
    log: (l) => logs.push(l),
    firstUseSweepMs: 60 * 60_000,
  });
  server = await startServer({ hostApi, staticDir: path.join(dataDir, 'no-renderer') });
  url = server.url;
  // The person loads both once and unloads them: they stay in the library.
  for (const dir of [second, third]) {
    const r = await hostApi.call('loadModel', { path: dir });
    if (!r.ok) throw new Error(r.error.message);
    expect((await hostApi.call('unloadModel', { id: r.value.id })).ok).toBe(true);
  }
  await hostApi.libraryChecked;
});

afterAll(async () => {
  await server?.close();
  await hostApi?.close();
  await rm(dataDir, { recursive: true, force: true });
  await rm(pkgs, { recursive: true, force: true });
});

beforeEach(async () => {
  // Every test starts with the default model loaded alone, second and third in the library only.
  for (const id of ['second', 'third']) {
    if (loadedIds().includes(id)) expect((await hostApi.call('unloadModel', { id })).ok).toBe(true);
  }
  if (!loadedIds().includes('default'))
    expect((await hostApi.call('loadModel', { path: defaultModelDir })).ok).toBe(true);
  logs.length = 0;
});

function loadedIds(): string[] {
  return runner
    .listModels()
    .map((m) => m.id)
    .sort();
}

function firstUseLoads(id: string): string[] {
  return logs.filter((l) => l.startsWith(`kvdesk: loaded ${id} from `) && l.endsWith(' on first use'));
}

function post(p: string, body: unknown): Promise<Response> {
  return fetch(`${url}${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

async function ok(res: Response | Promise<Response>): Promise<Json> {
  const r = await res;
  const text = await r.text();
  expect(r.status, text).toBe(200);
  return JSON.parse(text) as Json;
}

async function get(p: string): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${url}${p}`);
  return { status: res.status, body: (await res.json()) as Json };
}

const chat = (model: string, extra: Json = {}) =>
  post('/v1/chat/completions', {
    model,
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 2,
    temperature: 0,
    ...extra,
  });

describe('the listings', () => {
  it('GET /v1/models lists the loaded models, then the library packages with kvdesk.loaded false', async () => {
    const { status, body } = await get('/v1/models');
    expect(status).toBe(200);
    const data = body.data as Array<{ id: string; object: string; kvdesk: Json; max_model_len: number }>;
    expect(data.map((m) => [m.id, m.kvdesk.loaded])).toEqual([
      ['default', true],
      ['third', false],
      ['second', false],
    ]);
    expect(data[0]?.kvdesk).toMatchObject({ loaded: true, backend: 'cpu', is_default: true });
    const lib = data.find((m) => m.id === 'second');
    expect(lib).toMatchObject({
      object: 'model',
      max_model_len: 2048,
      kvdesk: { loaded: false, root: second, bpt: 1024 },
    });
    expect(lib?.kvdesk).not.toHaveProperty('backend');
    expect(loadedIds()).toEqual(['default']);

    const one = await get('/v1/models/second');
    expect(one.status).toBe(200);
    expect(one.body).toEqual(lib);
    const missing = await get('/v1/models/nope');
    expect(missing.status).toBe(404);
    expect(JSON.stringify(missing.body)).toMatch(/model \\"nope\\" is neither loaded nor in the library/);
    // Listing loads nothing.
    expect(loadedIds()).toEqual(['default']);
  });

  it('a library package named by its request is listed as loaded once loaded', async () => {
    await ok(chat('second'));
    const { body } = await get('/v1/models');
    const data = body.data as Array<{ id: string; kvdesk: Json }>;
    expect(data.map((m) => [m.id, m.kvdesk.loaded])).toEqual([
      ['default', true],
      ['second', true],
      ['third', false],
    ]);
  });
});

describe('loading on first use', () => {
  it('a chat completion naming a library package loads it and answers from it', async () => {
    const reply = await ok(chat('second'));
    expect(reply).toMatchObject({ object: 'chat.completion', model: 'second', usage: { completion_tokens: 2 } });
    expect(loadedIds()).toEqual(['default', 'second']);
    expect(firstUseLoads('second')).toHaveLength(1);
    expect(firstUseLoads('second')[0]).toContain(second);
    // Loaded now: a second request loads nothing again; the same weights answer the same as the default.
    const again = await ok(chat('second'));
    expect(firstUseLoads('second')).toHaveLength(1);
    const base = await ok(chat('default'));
    expect((again.choices as Json[])[0]).toEqual((base.choices as Json[])[0]);
  });

  it('concurrent requests naming it share one load, and all succeed', async () => {
    const libraryEvents: LibraryEntry[][] = [];
    const modelEvents: ModelInfo[][] = [];
    const offLib = hostApi.on('library', (e) => libraryEvents.push(e));
    const offModels = hostApi.on('models', (e) => modelEvents.push(e));
    try {
      const replies = await Promise.all([
        ok(chat('second')),
        ok(chat('second', { max_tokens: 3 })),
        ok(
          post('/api/chat', {
            model: 'second',
            messages: [{ role: 'user', content: 'hi' }],
            stream: false,
            options: { num_predict: 2, temperature: 0 },
          }),
        ),
        ok(post('/v1/messages', { model: 'second', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] })),
      ]);
      expect(replies.map((r) => r.model)).toEqual(['second', 'second', 'second', 'second']);
    } finally {
      offLib();
      offModels();
    }
    expect(firstUseLoads('second')).toHaveLength(1);
    expect(libraryEvents).toHaveLength(1);
    expect(modelEvents).toHaveLength(1);
    expect(loadedIds()).toEqual(['default', 'second']);
  });

  it('every generating route loads the library package it names', async () => {
    const user = [{ role: 'user', content: 'hi' }];
    const routes: Array<[string, (model: string) => Promise<Response>]> = [
      ['chat completions', (m) => chat(m)],
      ['completions', (m) => post('/v1/completions', { model: m, prompt: 'hi', max_tokens: 2, temperature: 0 })],
      ['responses', (m) => post('/v1/responses', { model: m, input: 'hi', max_output_tokens: 2, temperature: 0 })],
      ['messages', (m) => post('/v1/messages', { model: m, max_tokens: 2, messages: user })],
      [
        'ollama chat',
        (m) => post('/api/chat', { model: m, messages: user, stream: false, options: { num_predict: 2 } }),
      ],
      [
        'ollama generate',
        (m) =>
          post('/api/generate', { model: `${m}:latest`, prompt: 'hi', stream: false, options: { num_predict: 2 } }),
      ],
    ];
    for (const [name, send] of routes) {
      if (loadedIds().includes('second')) expect((await hostApi.call('unloadModel', { id: 'second' })).ok).toBe(true);
      const res = await send('second');
      expect(res.status, `${name}: ${await res.clone().text()}`).toBe(200);
      await res.text();
      expect(loadedIds(), name).toEqual(['default', 'second']);
    }
    expect(firstUseLoads('second')).toHaveLength(routes.length);
  });

  it('Anthropic count_tokens on a library package loads it and counts as the same tokenizer does', async () => {
    const body = { messages: [{ role: 'user', content: 'Count these words please' }] };
    const base = await ok(post('/v1/messages/count_tokens', { ...body, model: 'default' }));
    expect(loadedIds()).toEqual(['default']);
    const counted = await ok(post('/v1/messages/count_tokens', { ...body, model: 'second' }));
    expect(counted).toEqual({ input_tokens: base.input_tokens });
    expect(base.input_tokens).toBeGreaterThan(0);
    expect(loadedIds()).toEqual(['default', 'second']);
  });

  it('loading a third on first use unloads the second (loaded that way, idle); the default stays', async () => {
    await ok(chat('second'));
    expect(loadedIds()).toEqual(['default', 'second']);
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'third']);
    expect(logs).toContain('kvdesk: unloaded second (loaded on first use) to load third');
    // And back: third gives way to second.
    await ok(chat('second'));
    expect(loadedIds()).toEqual(['default', 'second']);
    // The library still offers the one unloaded.
    expect(hostApi.loadable().map((e) => e.id)).toEqual(['third']);
  });

  it('a package kept for ever (keep_alive -1) never gives way; one with a time to live still does', async () => {
    await ok(chat('third'));
    const forEver = await ok(
      post('/api/generate', {
        model: 'second',
        prompt: 'hi',
        keep_alive: -1,
        stream: false,
        options: { num_predict: 2 },
      }),
    );
    expect(forEver).toMatchObject({ done: true });
    // third, kept 60 minutes idle, made way for second.
    expect(loadedIds()).toEqual(['default', 'second']);
    expect(logs).toContain('kvdesk: unloaded third (loaded on first use) to load second');
    // second is kept for ever: third loads beside it, as /api/ps promised.
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'second', 'third']);
    expect(logs).not.toContain('kvdesk: unloaded second (loaded on first use) to load third');
    const ps = (await get('/api/ps')).body.models as Array<{ name: string; expires_at: string }>;
    expect(ps.find((m) => m.name === 'second:latest')?.expires_at).toBe('9999-12-31T23:59:59Z');
    // A keep_alive with an end gives it a time to live again: it gives way once more.
    await ok(post('/api/chat', { model: 'second', messages: [], keep_alive: '10m', stream: false }));
    expect((await hostApi.call('unloadModel', { id: 'third' })).ok).toBe(true);
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'third']);
  });

  it('a reply with keep_alive 0 unloads its library package once over, streamed or not; the person’s model stays', async () => {
    await ok(chat('second'));
    const reply = await ok(
      post('/api/chat', {
        model: 'second',
        messages: [{ role: 'user', content: 'hi' }],
        keep_alive: 0,
        stream: false,
        options: { num_predict: 2 },
      }),
    );
    expect(reply).toMatchObject({ done: true, done_reason: 'length' });
    // Right after the reply, not at a sweep (none runs here).
    const said = (id: string) => `kvdesk: unloaded ${id} (loaded on first use) after its request (keep_alive 0)`;
    await eventually(
      () => logs,
      (l) => l.includes(said('second')),
      5_000,
    );
    expect(loadedIds()).toEqual(['default']);
    // Loaded by that very request, streamed.
    const lines = await ndjsonLines(
      await post('/api/generate', { model: 'third', prompt: 'hi', keep_alive: '0s', options: { num_predict: 2 } }),
    );
    expect(lines.at(-1)).toMatchObject({ done: true });
    expect(firstUseLoads('third')).toHaveLength(1);
    await eventually(
      () => logs,
      (l) => l.includes(said('third')),
      5_000,
    );
    expect(loadedIds()).toEqual(['default']);
    // A model loaded otherwise stays until unloaded.
    await ok(
      post('/api/chat', {
        model: 'default',
        messages: [{ role: 'user', content: 'hi' }],
        keep_alive: 0,
        stream: false,
        options: { num_predict: 2 },
      }),
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(loadedIds()).toEqual(['default']);
  });

  it('a package the person loaded never gives way', async () => {
    expect((await hostApi.call('loadModel', { path: second })).ok).toBe(true);
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'second', 'third']);
    expect(logs.filter((l) => l.includes('unloaded'))).toEqual([]);
  });

  it('a package loaded on first use that the person loads again is theirs: it stays', async () => {
    await ok(chat('second'));
    expect((await hostApi.call('loadModel', { path: second })).ok).toBe(true);
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'second', 'third']);
  });

  it('one still answering a request stays loaded beside the next', async () => {
    await ok(chat('second'));
    // The reply's end waits for the server's cancel (holdReplyEnds): it runs on second until the test aborts it,
    // however long third takes to load.
    const held = holdReplyEnds(runner.engine);
    try {
      const abort = new AbortController();
      const long = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'second',
          messages: LONG_CHAT,
          max_tokens: 100_000,
          temperature: 0,
          logit_bias: noEndBias(second),
          stream: true,
        }),
        signal: abort.signal,
      });
      expect(long.status).toBe(200);
      const reader = long.body?.getReader();
      await reader?.read(); // The stream has begun
      await held.tokens(); // and the engine writes the reply: the request runs on second.
      try {
        await ok(chat('third'));
        expect(loadedIds()).toEqual(['default', 'second', 'third']);
      } finally {
        abort.abort();
        await reader?.cancel().catch(() => {});
      }
      await settled(url);
    } finally {
      held.restore();
    }
    // Idle now, second (still counted as loaded on first use) gives way to the next such load.
    expect((await hostApi.call('unloadModel', { id: 'third' })).ok).toBe(true);
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'third']);
  });

  it('a library package whose files went bad since: the request gets the package error, the server stays up', async () => {
    const tok = path.join(third, 'tokenizer.json');
    await rename(tok, `${tok}.away`);
    try {
      const res = await chat('third');
      const text = await res.text();
      expect(res.status, text).toBe(422);
      expect(text).toMatch(/tokenizer\.json/);
      expect(loadedIds()).toEqual(['default']);
    } finally {
      await rename(`${tok}.away`, tok);
    }
    await ok(chat('third'));
    expect(loadedIds()).toEqual(['default', 'third']);
  });

  it('a name neither loaded nor in the library is still a 404, and loads nothing', async () => {
    const user = [{ role: 'user', content: 'hi' }];
    const cases: Array<[string, Json]> = [
      ['/v1/chat/completions', { model: 'nope', messages: user, max_tokens: 2 }],
      ['/v1/responses', { model: 'nope', input: 'hi', max_output_tokens: 2 }],
      ['/v1/messages', { model: 'nope', max_tokens: 2, messages: user }],
      ['/v1/messages/count_tokens', { model: 'nope', messages: user }],
      ['/api/chat', { model: 'nope', messages: user, stream: false }],
      ['/api/chat', { model: 'nope', messages: [], stream: false }],
      ['/api/generate', { model: 'nope', prompt: 'hi', stream: false }],
      ['/api/show', { model: 'nope' }],
    ];
    for (const [p, body] of cases) {
      const res = await post(p, body);
      expect(res.status, `${p}: ${await res.clone().text()}`).toBe(404);
      expect(await res.text()).toContain('nope');
    }
    expect(loadedIds()).toEqual(['default']);
    expect(logs.filter((l) => l.includes('first use'))).toEqual([]);
  });
});

describe("Ollama's listings, load and unload", () => {
  it('/api/tags lists the library packages as name:latest after the loaded ones', async () => {
    const { status, body } = await get('/api/tags');
    expect(status).toBe(200);
    const models = body.models as Array<{ name: string; model: string; size: number }>;
    expect(models.map((m) => m.name)).toEqual(['default:latest', 'third:latest', 'second:latest']);
    expect(models[2]).toMatchObject({ model: 'second:latest', size: models[0]?.size });
    // /api/ps is what is loaded.
    const ps = await get('/api/ps');
    expect((ps.body.models as Array<{ name: string }>).map((m) => m.name)).toEqual(['default:latest']);
    expect(loadedIds()).toEqual(['default']);
  });

  it('/api/show answers for a library package without loading it (and without a backend)', async () => {
    const shown = await ok(post('/api/show', { model: 'second:latest' }));
    const info = shown.model_info as Json;
    expect(info['kvdesk.bpt']).toBe(1024);
    expect(info).not.toHaveProperty('kvdesk.backend');
    expect(typeof shown.template).toBe('string');
    expect(loadedIds()).toEqual(['default']);
    const base = await ok(post('/api/show', { model: 'default' }));
    expect((base.model_info as Json)['kvdesk.backend']).toBe('cpu');
    expect(shown.template).toBe(base.template);
  });

  it('an empty /api/chat loads it ("load"); keep_alive 0 unloads it ("unload")', async () => {
    const loaded = await ok(post('/api/chat', { model: 'second', messages: [], stream: false }));
    expect(loaded).toMatchObject({ done: true, done_reason: 'load' });
    expect(loadedIds()).toEqual(['default', 'second']);
    expect(firstUseLoads('second')).toHaveLength(1);
    // Again: it stays loaded, nothing loads twice.
    expect(await ok(post('/api/chat', { model: 'second', messages: [], stream: false }))).toMatchObject({
      done_reason: 'load',
    });
    expect(firstUseLoads('second')).toHaveLength(1);

    const unloaded = await ok(post('/api/chat', { model: 'second', messages: [], keep_alive: 0, stream: false }));
    expect(unloaded).toMatchObject({ done: true, done_reason: 'unload' });
    expect(loadedIds()).toEqual(['default']);
    // Still in the library: listed, and loadable again.
    expect(hostApi.loadable().map((e) => e.id)).toContain('second');
    // Unloading what is not loaded is answered the same way.
    expect(
      await ok(post('/api/chat', { model: 'second', messages: [], keep_alive: '0', stream: false })),
    ).toMatchObject({ done_reason: 'unload' });
    expect(loadedIds()).toEqual(['default']);
  });

  it('an empty /api/generate loads; keep_alive "0s" and "0m" unload; a streamed load is one line', async () => {
    const loaded = await ok(post('/api/generate', { model: 'third:latest', prompt: '', stream: false }));
    expect(loaded).toMatchObject({ done: true, done_reason: 'load' });
    expect(loadedIds()).toEqual(['default', 'third']);
    expect(
      await ok(post('/api/generate', { model: 'third', prompt: '', keep_alive: '0s', stream: false })),
    ).toMatchObject({ done_reason: 'unload' });
    expect(loadedIds()).toEqual(['default']);

    const streamed = await post('/api/chat', { model: 'third', messages: [] });
    expect(streamed.status).toBe(200);
    const lines = (await streamed.text()).trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '')).toMatchObject({ done_reason: 'load' });
    expect(loadedIds()).toEqual(['default', 'third']);
    expect(
      await ok(post('/api/chat', { model: 'third', messages: [], keep_alive: '0m', stream: false })),
    ).toMatchObject({ done_reason: 'unload' });
    expect(loadedIds()).toEqual(['default']);
  });

  it('a reply that loaded its model reports the load as load_duration (in the total); a later one reports 0', async () => {
    const ask = (stream: boolean) =>
      post('/api/chat', {
        model: 'second',
        messages: [{ role: 'user', content: 'hi' }],
        stream,
        options: { num_predict: 2, temperature: 0 },
      });
    const first = await ok(ask(false));
    expect(first.load_duration).toBeGreaterThan(0);
    expect(first.total_duration as number).toBeGreaterThan(first.load_duration as number);
    const again = await ok(ask(false));
    expect(again.load_duration).toBe(0);
    // Streamed: the last line carries it.
    expect((await hostApi.call('unloadModel', { id: 'second' })).ok).toBe(true);
    const lines = (await (await ask(true)).text()).trim().split('\n');
    const last = JSON.parse(lines[lines.length - 1] ?? '{}') as Json;
    expect(last).toMatchObject({ done: true });
    expect(last.load_duration).toBeGreaterThan(0);
  });

  it('/api/ps gives a model loaded on first use its expiry (60 min idle by default); keep_alive sets it', async () => {
    const expiry = async (name: string) => {
      const ps = (await get('/api/ps')).body.models as Array<{ name: string; expires_at: string }>;
      return ps.find((m) => m.name === name)?.expires_at;
    };
    const before = Date.now();
    await ok(post('/api/chat', { model: 'second', messages: [], stream: false }));
    const at = Date.parse((await expiry('second:latest')) ?? '');
    expect(at).toBeGreaterThanOrEqual(before + 60 * 60_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 60 * 60_000);
    // The person's models never expire.
    expect(await expiry('default:latest')).toBe('9999-12-31T23:59:59Z');
    // keep_alive on a later request: 10 minutes from now, then for ever.
    await ok(post('/api/chat', { model: 'second', messages: [], keep_alive: '10m', stream: false }));
    const ten = Date.parse((await expiry('second:latest')) ?? '');
    expect(Math.abs(ten - (Date.now() + 10 * 60_000))).toBeLessThan(5_000);
    await ok(post('/api/generate', { model: 'second', prompt: '', keep_alive: -1, stream: false }));
    expect(await expiry('second:latest')).toBe('9999-12-31T23:59:59Z');
    // A request without one (any route) sets the default again, as Ollama's do: the last one's is not every client's.
    await ok(post('/api/chat', { model: 'second', messages: [], stream: false }));
    const again = Date.parse((await expiry('second:latest')) ?? '');
    expect(Math.abs(again - (Date.now() + 60 * 60_000))).toBeLessThan(5_000);
    await ok(post('/api/generate', { model: 'second', prompt: '', keep_alive: '10m', stream: false }));
    await ok(
      post('/v1/chat/completions', { model: 'second', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    );
    expect(Math.abs(Date.parse((await expiry('second:latest')) ?? '') - (Date.now() + 60 * 60_000))).toBeLessThan(
      5_000,
    );
    // A keep_alive that is no duration is a 400 naming it.
    const bad = await post('/api/chat', { model: 'second', messages: [], keep_alive: 'soon' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as Json).error).toMatch(/keep_alive/);
  });

  it('a request that waited for another one’s load on first use sets its own keep_alive too', async () => {
    await hostApi.call('unloadModel', { id: 'second' });
    const expiry = async () =>
      ((await get('/api/ps')).body.models as Array<{ name: string; expires_at: string }>).find(
        (m) => m.name === 'second:latest',
      )?.expires_at;
    // The first loads it (10 minutes); the second, sent while it loads, asks for ever, and comes last.
    const loading = post('/api/generate', { model: 'second', prompt: '', keep_alive: '10m', stream: false });
    const waiting = post('/api/generate', { model: 'second', prompt: '', keep_alive: -1, stream: false });
    await ok(loading);
    await ok(waiting);
    expect(await expiry()).toBe('9999-12-31T23:59:59Z');
  });

  it('DELETE /api/delete forgets a library package (its folder stays); loaded, it is unloaded first; unknown, a 404', async () => {
    const del = (model: string) =>
      fetch(`${url}/api/delete`, {
        method: 'DELETE',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model }),
      });
    await ok(post('/api/chat', { model: 'second', messages: [], stream: false }));
    expect(hostApi.runner.listModels().map((m) => m.id)).toContain('second');
    // Loaded: unloaded, then forgotten, as Ollama deletes a model it is running.
    const gone = await del('second:latest');
    expect(hostApi.runner.listModels().map((m) => m.id)).not.toContain('second');
    expect(gone.status).toBe(200);
    expect(await gone.text()).toBe('');
    const tags = (await get('/api/tags')).body.models as Array<{ name: string }>;
    expect(tags.map((t) => t.name)).not.toContain('second:latest');
    expect(hostApi.library.list().map((e) => e.id)).not.toContain('second');
    // A folder of one's own is never deleted.
    expect((await readdir(second)).length).toBeGreaterThan(0);
    expect((await del('second')).status).toBe(404);
    expect((await fetch(`${url}/api/delete`)).status).toBe(405);
    // Back into the library for whatever runs after.
    expect((await hostApi.call('loadModel', { path: second })).ok).toBe(true);
    expect((await hostApi.call('unloadModel', { id: 'second' })).ok).toBe(true);
  });
});

describe("a name as Ollama's listings give it, on every API", () => {
  // Last: it loads library packages, which changes the listings' order the tests above read.
  it('default:latest and second:latest (what /api/tags lists) name those models on the OpenAI, Responses and Anthropic routes', async () => {
    const tags = await get('/api/tags');
    expect((tags.body.models as Array<{ name: string }>).map((m) => m.name)).toContain('second:latest');
    // Listed by Ollama's name, then used on /v1 (as VS Code's Ollama provider and Open WebUI do).
    expect((await ok(chat('default:latest'))).usage).toMatchObject({ completion_tokens: 2 });
    // Answered under the name it was asked by, as Ollama's OpenAI routes do.
    expect((await ok(chat('second:latest'))).model).toBe('second:latest');
    expect(firstUseLoads('second')).toHaveLength(1);
    await ok(post('/v1/responses', { model: 'third:latest', input: 'hi', max_output_tokens: 2 }));
    expect(loadedIds()).toContain('third');
    const msg = { model: 'default:latest', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
    expect((await ok(post('/v1/messages', msg))).type).toBe('message');
    expect((await ok(post('/v1/messages/count_tokens', msg))).input_tokens).toBeGreaterThan(0);
    const one = await get('/v1/models/default%3Alatest');
    expect(one).toMatchObject({ status: 200, body: { id: 'default' } });
    // A name that means nothing is still a 404 naming the models there are.
    const res = await chat('nope:latest');
    expect(res.status).toBe(404);
    expect(await res.text()).toContain('model \\"nope:latest\\" is neither loaded nor in the library');
  });
});

describe('with --first-use-ttl never', () => {
  it('a library model still makes way for the next (only a request’s keep_alive -1 keeps one beside it)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-jit-never-'));
    const lines: string[] = [];
    const never = new RunnerService({ intraOpNumThreads: 1 });
    const host = await createHostApi({
      runner: never,
      dataDir: dir,
      defaultModelDir,
      log: (l) => lines.push(l),
      firstUseTtlMs: null,
      firstUseSweepMs: 60 * 60_000,
    });
    const srv = await startServer({ hostApi: host, staticDir: path.join(dir, 'no-renderer') });
    try {
      for (const d of [second, third]) {
        const r = await host.call('loadModel', { path: d });
        if (!r.ok) throw new Error(r.error.message);
        expect((await host.call('unloadModel', { id: r.value.id })).ok).toBe(true);
      }
      const ask = async (model: string) => {
        const r = await fetch(`${srv.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
        });
        expect(r.status, await r.text()).toBe(200);
      };
      const ids = () =>
        never
          .listModels()
          .map((m) => m.id)
          .sort();
      await ask('second');
      await ask('third');
      expect(ids()).toEqual(['default', 'third']);
      expect(lines).toContain('kvdesk: unloaded second (loaded on first use) to load third');
    } finally {
      await srv.close();
      await host.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('a client that leaves while its model loads', () => {
  it('is never admitted, on any route: the other client’s prompt cache stays and nothing is reserved', async () => {
    // A small limit, most of it held by an idle prompt cache: admitting any 40-token reply would evict it.
    expect((await hostApi.call('configureBudget', { kvBudgetBytes: 64 * 1024 })).ok).toBe(true);
    // Each load is held (after the real one) until the client has gone.
    const realLoad = runner.loadModel.bind(runner);
    let loading: () => void = () => {};
    let release: () => void = () => {};
    const spy = vi.spyOn(runner, 'loadModel').mockImplementation(async (...args) => {
      const info = await realLoad(...args);
      const gate = new Promise<void>((r) => {
        release = r;
      });
      loading();
      await gate;
      return info;
    });
    const events: SchedulerEvent[] = [];
    const off = hostApi.on('scheduler', (e) => events.push(e));
    try {
      const user = [{ role: 'user', content: 'Keep this conversation, please.' }];
      await ok(chat('default', { messages: user, max_tokens: 40, logit_bias: noEndBias() }));
      const before = await settled(url);
      const held = before.sessions.reduce((n, s) => n + s.heldBytes, 0);
      expect(held).toBeGreaterThan(32 * 1024);
      const hi = [{ role: 'user', content: 'hi' }];
      const routes: Array<[string, string, Json]> = [
        ['chat completions', '/v1/chat/completions', { messages: hi, max_tokens: 40 }],
        ['chat completions, streamed', '/v1/chat/completions', { messages: hi, max_tokens: 40, stream: true }],
        ['responses', '/v1/responses', { input: 'hi', max_output_tokens: 40 }],
        ['messages', '/v1/messages', { messages: hi, max_tokens: 40 }],
        ['ollama chat', '/api/chat', { messages: hi, options: { num_predict: 40 } }],
      ];
      for (const [name, route, body] of routes) {
        if (loadedIds().includes('second')) expect((await hostApi.call('unloadModel', { id: 'second' })).ok).toBe(true);
        events.length = 0;
        const started = new Promise<void>((r) => {
          loading = r;
        });
        const controller = new AbortController();
        const sent = fetch(`${url}${route}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'second', ...body }),
          signal: controller.signal,
        }).catch((err: unknown) => err);
        await started;
        controller.abort();
        expect(await sent, name).toBeInstanceOf(Error);
        // The server sees the connection close, then the load comes in.
        await new Promise((r) => setTimeout(r, 200));
        release();
        await eventually(loadedIds, (ids) => ids.includes('second'));
        await new Promise((r) => setTimeout(r, 200));
        const after = await settled(url);
        // No request event, no eviction (the load itself reconfigures the budget: its weights take memory).
        expect(
          events.filter((e) => e.type !== 'reconfigured').map((e) => e.type),
          name,
        ).toEqual([]);
        expect(after.counters.accepted, name).toBe(before.counters.accepted);
        expect(after.counters.evictions, name).toBe(before.counters.evictions);
        expect(
          after.sessions.reduce((n, s) => n + s.heldBytes, 0),
          name,
        ).toBe(held);
        expect(after.recent.map((r) => r.id)).toEqual(before.recent.map((r) => r.id));
      }
      // The kept conversation is still there for its client: its prompt is read from the cache.
      const again = await ok(chat('default', { messages: user, max_tokens: 1 }));
      expect(((again.usage as Json).prompt_tokens_details as Json).cached_tokens).toBeGreaterThan(0);
    } finally {
      off();
      spy.mockRestore();
      release();
      expect((await hostApi.call('configureBudget', { kvBudgetBytes: null })).ok).toBe(true);
    }
  });
});
