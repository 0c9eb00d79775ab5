/**
 * Who may reach the server and what it serves: Host/Origin checks (DNS
 * rebinding), the token off loopback (HTTP, cookie, WebSocket), the static
 * renderer without traversal, health before and after a model loads, and
 * package uploads with their size limit.
 */
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startServer } from '../../../src/main/server';
import { defaultModelDir } from '../../helpers/fixtures';
import { openaiClient, rawRequest, startTestServer, type TestServer } from './server-helpers';

/** Opens a WebSocket and reports the HTTP status it was refused with (101 when it opened). */
function wsStatus(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.once('error', (err) => reject(err));
  });
}

describe('a loopback server without a model', () => {
  let t: TestServer;
  let staticDir: string;
  let outside: string;
  beforeAll(async () => {
    staticDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-static-'));
    outside = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-outside-'));
    await mkdir(path.join(staticDir, 'assets'));
    await writeFile(path.join(staticDir, 'index.html'), '<!doctype html><title>kvdesk ui</title>');
    await writeFile(path.join(staticDir, 'assets/app.js'), 'console.log(1)');
    await writeFile(path.join(staticDir, 'assets/app.css'), 'body{}');
    await writeFile(path.join(outside, 'secret.txt'), 'SECRET');
    await symlink(path.join(outside, 'secret.txt'), path.join(staticDir, 'assets/link.txt'));
    t = await startTestServer({}, { loadDefault: false, staticDir, maxUploadBytes: 4 * 1024 * 1024 });
  });
  afterAll(async () => {
    await t?.close();
    await rm(staticDir, { recursive: true, force: true });
    await rm(outside, { recursive: true, force: true });
  });

  const host = () => `127.0.0.1:${t.server.port}`;

  it('answers only to its own Host names (403 for a rebinding name)', async () => {
    for (const h of [host(), `localhost:${t.server.port}`, `[::1]:${t.server.port}`]) {
      expect((await rawRequest(t.url, { path: '/v1/models', headers: { host: h } })).status, h).toBe(200);
    }
    for (const h of ['evil.example', `evil.example:${t.server.port}`, `127.0.0.1:${t.server.port + 1}`, '127.0.0.1']) {
      const r = await rawRequest(t.url, { path: '/v1/models', headers: { host: h } });
      expect(r.status, h).toBe(403);
      expect(JSON.parse(r.body).error).toMatchObject({ code: 'host_not_allowed', type: 'permission_error' });
    }
  });

  it('refuses a foreign Origin (403) and accepts its own', async () => {
    const own = await rawRequest(t.url, {
      path: '/v1/models',
      headers: { host: host(), origin: `http://localhost:${t.server.port}` },
    });
    expect(own.status).toBe(200);
    for (const origin of [
      'http://evil.example',
      `http://evil.example:${t.server.port}`,
      'null',
      `http://127.0.0.1:${t.server.port + 1}`,
    ]) {
      const r = await rawRequest(t.url, {
        method: 'POST',
        path: '/v1/completions',
        headers: { host: host(), origin },
        body: '{}',
      });
      expect(r.status, origin).toBe(403);
      expect(JSON.parse(r.body).error.code).toBe('origin_not_allowed');
    }
    expect(await wsStatus(`${t.url.replace('http', 'ws')}/ws`, { origin: 'http://evil.example' })).toBe(403);
    expect(await wsStatus(`${t.url.replace('http', 'ws')}/ws`, { origin: `http://127.0.0.1:${t.server.port}` })).toBe(
      101,
    );
  });

  it('serves the renderer with content types, and nothing outside it', async () => {
    const index = await fetch(`${t.url}/`);
    expect(index.status).toBe(200);
    expect(index.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(index.headers.get('x-frame-options')).toBe('DENY');
    expect(await index.text()).toContain('kvdesk ui');
    const js = await fetch(`${t.url}/assets/app.js`);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await fetch(`${t.url}/assets/app.css`)).headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect((await fetch(`${t.url}/assets/missing.js`)).status).toBe(404);
    const rel = path.relative(staticDir, path.join(outside, 'secret.txt'));
    const attempts = [
      `/${rel}`,
      `/assets/../../${path.basename(outside)}/secret.txt`,
      `/%2e%2e/${path.basename(outside)}/secret.txt`,
      `/..%2f${path.basename(outside)}%2fsecret.txt`,
      `/assets/..%2f..%2f${path.basename(outside)}%2fsecret.txt`,
      `/assets/%2e%2e%5c%2e%2e%5c${path.basename(outside)}%5csecret.txt`,
      '/assets/link.txt',
      '/%00',
      '/%E0%A4%A',
    ];
    for (const p of attempts) {
      const r = await rawRequest(t.url, { path: p, headers: { host: host() } });
      expect([400, 404], `${p} → ${r.status}`).toContain(r.status);
      expect(r.body).not.toContain('SECRET');
    }
  });

  it('says how to build the UI when the renderer build is missing', async () => {
    const empty = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-nobuild-'));
    const s = await startServer({ hostApi: t.hostApi, staticDir: path.join(empty, 'renderer') });
    try {
      const r = await fetch(`${s.url}/`);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toContain('text/html');
      expect(await r.text()).toContain('npm run build');
      expect((await fetch(`${s.url}/app.js`)).status).toBe(404);
    } finally {
      await s.close();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('answers unknown API paths 404 and wrong methods 405, in the OpenAI error shape', async () => {
    const unknown = await fetch(`${t.url}/v1/embeddings`, { method: 'POST', body: '{}' });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('not_found');
    const wrong = await fetch(`${t.url}/v1/chat/completions`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
  });

  it('health is 503 while no model is loaded nor could be, then 200 with the model', async () => {
    const before = await fetch(`${t.url}/health`);
    expect(before.status).toBe(503);
    expect(await before.json()).toMatchObject({ status: 'no_model', models: [] });
    const loaded = await t.hostApi.call('loadModel', { path: defaultModelDir });
    expect(loaded.ok).toBe(true);
    const after = await fetch(`${t.url}/health`);
    expect(after.status).toBe(200);
    expect(await after.json()).toEqual({ status: 'ok', models: ['default'] });
  });

  it('uploads a package folder as multipart, validates and loads it', async () => {
    const form = new FormData();
    form.append('name', 'uploaded-pkg');
    const files = [
      'config.json',
      'generation_config.json',
      'tokenizer.json',
      'tokenizer_config.json',
      'onnx/model.onnx',
    ];
    for (const f of files) {
      form.append('file', new Blob([await readFile(path.join(defaultModelDir, f))]), `default/${f}`);
    }
    const r = await fetch(`${t.url}/api/models/upload`, { method: 'POST', body: form });
    const body = (await r.json()) as { ok: boolean; value: { id: string; spec: { bpt: number } } };
    expect(r.status, JSON.stringify(body)).toBe(200);
    expect(body.ok).toBe(true);
    expect(body.value.id).toBe('uploaded-pkg');
    expect(body.value.spec.bpt).toBe(1024);
    const models = (await (await fetch(`${t.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain('uploaded-pkg');
    // Streamed to a folder beside the library's packages, which goes once the package is in.
    expect(await readdir(path.join(t.dataDir, 'models'))).toEqual(['uploaded-pkg']);
  });

  it('with ?load=false an upload joins the library unloaded, answering its copy; a load that is no yes/no is a 400', async () => {
    const form = new FormData();
    form.append('name', 'later-pkg');
    for (const f of [
      'config.json',
      'generation_config.json',
      'tokenizer.json',
      'tokenizer_config.json',
      'onnx/model.onnx',
    ]) {
      form.append('file', new Blob([await readFile(path.join(defaultModelDir, f))]), `default/${f}`);
    }
    const r = await fetch(`${t.url}/api/models/upload?load=false`, { method: 'POST', body: form });
    const body = (await r.json()) as { ok: boolean; value: { root: string; spec: { id: string; bpt: number } } };
    expect(r.status, JSON.stringify(body)).toBe(200);
    expect(body.value).toMatchObject({
      root: path.join(t.dataDir, 'models', 'later-pkg'),
      spec: { id: 'later-pkg', bpt: 1024 },
    });
    // Listed to load on first use, not loaded (Ollama's /api/ps lists what is loaded).
    const listed = (await (await fetch(`${t.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(listed.data.map((m) => m.id)).toContain('later-pkg');
    const running = (await (await fetch(`${t.url}/api/ps`)).json()) as { models: Array<{ name: string }> };
    expect(running.models.length).toBeGreaterThan(0);
    expect(running.models.map((m) => m.name)).not.toContain('later-pkg:latest');
    const unclear = await fetch(`${t.url}/api/models/upload?load=maybe`, { method: 'POST', body: form });
    expect(unclear.status).toBe(400);
    expect(await unclear.json()).toMatchObject({
      ok: false,
      error: { code: 'BAD_REQUEST', message: expect.stringContaining('the query parameter load is "maybe"') },
    });
  });

  it('refuses a bad package (JSON form) with the validation error, and a path that leaves the package', async () => {
    const bad = await fetch(`${t.url}/api/models/upload`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'broken',
        files: [{ path: 'broken/config.json', dataBase64: Buffer.from('{').toString('base64') }],
      }),
    });
    expect(bad.status).toBeGreaterThanOrEqual(400);
    expect(bad.status).toBeLessThan(500);
    expect(await bad.json()).toMatchObject({ ok: false, error: { code: 'PACKAGE_INVALID' } });
    const leaving = await fetch(`${t.url}/api/models/upload`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'evil', files: [{ path: '../../evil.txt', dataBase64: 'AAAA' }] }),
    });
    expect(leaving.status).toBe(400);
    expect(await leaving.json()).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
  });

  it('answers 413 to an upload over the size limit', async () => {
    const form = new FormData();
    form.append('name', 'too-big');
    form.append('file', new Blob([new Uint8Array(5 * 1024 * 1024)]), 'too-big/model.onnx');
    const r = await fetch(`${t.url}/api/models/upload`, { method: 'POST', body: form });
    expect(r.status).toBe(413);
    expect(await r.json()).toMatchObject({
      ok: false,
      error: { code: 'BAD_REQUEST', detail: { limitBytes: 4 * 1024 * 1024 } },
    });
    // Nothing of it stays on disk.
    expect((await readdir(path.join(t.dataDir, 'models')).catch(() => [])).filter((n) => n.startsWith('.'))).toEqual(
      [],
    );
    // The server is still there for the next request.
    expect((await fetch(`${t.url}/health`)).status).toBe(200);
  });
});

describe('origins allowed to call the model APIs (--allow-origin)', () => {
  const TOKEN = 'cors-secret';
  const APP = 'http://localhost:3000';
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({}, { token: TOKEN, allowedOrigins: [`${APP}/`, 'https://other.example'] });
  });
  afterAll(async () => {
    await t?.close();
  });
  const host = () => `127.0.0.1:${t.server.port}`;

  it("answers the browser's preflight without the token, then the call with it, each saying the origin may read it", async () => {
    const preflight = await rawRequest(t.url, {
      method: 'OPTIONS',
      path: '/v1/chat/completions',
      headers: {
        host: host(),
        origin: APP,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, x-stainless-os',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe(APP);
    expect(preflight.headers['access-control-allow-methods']).toMatch(/POST/);
    expect(preflight.headers['access-control-allow-headers']).toBe('authorization, content-type, x-stainless-os');
    const body = JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    const call = await rawRequest(t.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { host: host(), origin: APP, authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body,
    });
    expect(call.status).toBe(200);
    expect(call.headers['access-control-allow-origin']).toBe(APP);
    expect(call.headers.vary).toMatch(/Origin/);
    // The page may read the request id, under OpenAI's SDKs' name and Anthropic's.
    const exposed = String(call.headers['access-control-expose-headers']).split(/,\s*/);
    expect(exposed).toEqual(expect.arrayContaining(['x-request-id', 'request-id', 'retry-after']));
    expect(call.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(call.headers['request-id']).toBe(call.headers['x-request-id']);
    // Without the token: refused, in words the page can read.
    const anonymous = await rawRequest(t.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { host: host(), origin: APP, 'content-type': 'application/json' },
      body,
    });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers['access-control-allow-origin']).toBe(APP);
    // Told what works from a page: the header, not the UI's ?token= (whose cookie the page never gets).
    expect(JSON.parse(anonymous.body).error.message).toMatch(
      /Authorization: Bearer <token>.* with each request from this page/,
    );
    expect(JSON.parse(anonymous.body).error.message).not.toContain('?token=');
    // The UI's cookie and ?token= are not a page of another site's: its browser would attach the cookie by itself.
    const cookie = await rawRequest(t.url, {
      path: '/v1/models',
      headers: { host: host(), origin: APP, cookie: `kvdesk_token_${t.server.port}=${TOKEN}` },
    });
    expect(cookie.status).toBe(401);
    const query = await rawRequest(t.url, {
      path: `/v1/models?token=${TOKEN}`,
      headers: { host: host(), origin: APP },
    });
    expect(query.status).toBe(401);
    // A model id with a slash in it is a model API route too.
    const slashed = await rawRequest(t.url, {
      path: '/v1/models/onnx-community/Qwen3-0.6B-ONNX',
      headers: { host: host(), origin: APP, authorization: `Bearer ${TOKEN}` },
    });
    expect(slashed.status).toBe(404);
    expect(slashed.headers['access-control-allow-origin']).toBe(APP);
    // Ollama's routes too.
    const tags = await rawRequest(t.url, {
      path: '/api/tags',
      headers: { host: host(), origin: APP, authorization: `Bearer ${TOKEN}` },
    });
    expect(tags.status).toBe(200);
    expect(tags.headers['access-control-allow-origin']).toBe(APP);
  });

  it('refuses other origins, and the allowed ones outside the model APIs (UI, chats, uploads, management)', async () => {
    const evil = await rawRequest(t.url, {
      method: 'OPTIONS',
      path: '/v1/chat/completions',
      headers: { host: host(), origin: 'http://evil.example', 'access-control-request-method': 'POST' },
    });
    expect(evil.status).toBe(403);
    expect(evil.headers['access-control-allow-origin']).toBeUndefined();
    expect(JSON.parse(evil.body).error.message).toMatch(/--allow-origin http:\/\/evil\.example/);
    for (const where of [
      '/v1/kvdesk/budget',
      '/api/pull',
      '/api/delete',
      '/api/models/upload',
      '/metrics',
      '/health',
    ]) {
      const r = await rawRequest(t.url, {
        path: where,
        headers: { host: host(), origin: APP, authorization: `Bearer ${TOKEN}` },
      });
      expect(r.status, where).toBe(403);
      expect(r.headers['access-control-allow-origin'], where).toBeUndefined();
    }
    // The UI's files are what any client with the token gets: not refused for their Origin, and no CORS header lets
    // another site's page read them.
    const ui = await rawRequest(t.url, {
      path: '/',
      headers: { host: host(), origin: APP, authorization: `Bearer ${TOKEN}` },
    });
    expect(ui.status).not.toBe(403);
    expect(ui.headers['access-control-allow-origin']).toBeUndefined();
    const ws = `${t.url.replace('http', 'ws')}/ws?token=${TOKEN}`;
    expect(await wsStatus(ws, { origin: APP })).toBe(403);
    // A rebinding Host is refused before any origin is looked at.
    const rebound = await rawRequest(t.url, {
      method: 'OPTIONS',
      path: '/v1/models',
      headers: { host: 'evil.example', origin: APP, 'access-control-request-method': 'GET' },
    });
    expect(rebound.status).toBe(403);
  });

  it('refuses to start with an origin that is not one', async () => {
    for (const bad of ['localhost:3000', 'http://localhost:3000/app', 'file:///x']) {
      await expect(startServer({ hostApi: t.hostApi, allowedOrigins: [bad] })).rejects.toThrow(
        /is not an origin to allow: give one as a browser sends it/,
      );
    }
  });
});

describe('a page of any origin (--allow-origin *) is answered without the folders of this computer', () => {
  let t: TestServer;
  let base: string;
  beforeAll(async () => {
    base = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-folders-'));
    t = await startTestServer({}, { allowedOrigins: ['*'], dataDir: path.join(base, 'data') });
  });
  afterAll(async () => {
    await t?.close();
    await rm(base, { recursive: true, force: true });
  });
  const EVIL = 'https://evil.example';

  it('in every model listing and in an error that names a package folder; the UI and clients without an Origin keep them', async () => {
    // A package of its own in the library, not loaded: its folder is its `root`, and an error names it.
    const pkg = path.join(base, 'packages', 'pkg');
    await cp(defaultModelDir, pkg, { recursive: true });
    expect((await t.hostApi.call('loadModel', { path: pkg })).ok).toBe(true);
    for (const model of ['default', 'pkg']) {
      const unload = await fetch(`${t.url}/api/generate`, {
        method: 'POST',
        body: JSON.stringify({ model, keep_alive: 0 }),
      });
      expect(unload.status, model).toBe(200);
    }
    const folders = [defaultModelDir, pkg, t.dataDir, base];
    const get = (p: string, origin?: string) =>
      rawRequest(t.url, { path: p, headers: { host: `127.0.0.1:${t.server.port}`, ...(origin ? { origin } : {}) } });
    // No Origin (a client that is no web page): the folders are there, so what follows can tell.
    const own = await get('/v1/models');
    expect(own.body).toContain(JSON.stringify(pkg));
    expect(own.body).toContain(JSON.stringify(defaultModelDir));
    // The UI's own page keeps them too.
    expect((await get('/v1/models', `http://localhost:${t.server.port}`)).body).toContain(JSON.stringify(pkg));
    const show = JSON.stringify({ model: 'pkg' });
    for (const [p, body] of [
      ['/v1/models', undefined],
      ['/v1/models/pkg', undefined],
      ['/api/tags', undefined],
      ['/api/ps', undefined],
      ['/api/show', show],
    ] as const) {
      const r = await rawRequest(t.url, {
        method: body ? 'POST' : 'GET',
        path: p,
        headers: { host: `127.0.0.1:${t.server.port}`, origin: EVIL, 'anthropic-version': '2023-06-01' },
        ...(body ? { body } : {}),
      });
      expect(r.status, p).toBe(200);
      expect(r.headers['access-control-allow-origin'], p).toBe(EVIL);
      for (const f of folders) expect(r.body, `${p}: ${f}`).not.toContain(f);
      expect(() => JSON.parse(r.body), p).not.toThrow();
    }
    const listed = JSON.parse((await get('/v1/models', EVIL)).body) as { data: Array<{ id: string; kvdesk: object }> };
    expect(listed.data.find((m) => m.id === 'pkg')?.kvdesk).not.toHaveProperty('root');
    // A package whose folder lost its config: the error names the folder, except to the page of another origin.
    await rm(path.join(pkg, 'config.json'));
    const chat = (origin?: string) =>
      rawRequest(t.url, {
        method: 'POST',
        path: '/v1/chat/completions',
        headers: {
          host: `127.0.0.1:${t.server.port}`,
          'content-type': 'application/json',
          ...(origin ? { origin } : {}),
        },
        body: JSON.stringify({ model: 'pkg', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
      });
    const plain = await chat();
    expect(plain.status).toBeGreaterThanOrEqual(400);
    expect(plain.body).toContain(pkg);
    const foreign = await chat(EVIL);
    // (The library now knows the package cannot load: refused as a model that is not there, naming its folder.)
    expect(foreign.status).toBeGreaterThanOrEqual(400);
    for (const f of folders) expect(foreign.body, f).not.toContain(f);
    expect(foreign.body).toContain('<folder of model pkg>');
    expect(() => JSON.parse(foreign.body)).not.toThrow();
    // Its streams still go out whole (the answer is read as it is written): OpenAI's events, Ollama's lines.
    const streamed = await rawRequest(t.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { host: `127.0.0.1:${t.server.port}`, 'content-type': 'application/json', origin: EVIL },
      body: JSON.stringify({
        model: 'default',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 3,
        stream: true,
      }),
    });
    expect(streamed.status).toBe(200);
    expect(streamed.body.trim().endsWith('data: [DONE]')).toBe(true);
    const lines = await rawRequest(t.url, {
      method: 'POST',
      path: '/api/chat',
      headers: { host: `127.0.0.1:${t.server.port}`, origin: EVIL },
      body: JSON.stringify({
        model: 'default',
        messages: [{ role: 'user', content: 'hi' }],
        options: { num_predict: 3 },
      }),
    });
    expect(lines.status).toBe(200);
    expect(JSON.parse(lines.body.trim().split('\n').at(-1) as string)).toMatchObject({ done: true });
  });

  it("never rewrites what the model writes: a path its schema requires (a tool call, a response format, Ollama's) goes as it is", async () => {
    // A path in a folder kvdesk hides from this page: the model is made to write it, and the page must get it.
    const file = path.join(t.dataDir, 'notes.txt');
    const schema = {
      type: 'object',
      properties: { path: { const: file } },
      required: ['path'],
      additionalProperties: false,
    };
    const post = (p: string, body: object) =>
      rawRequest(t.url, {
        method: 'POST',
        path: p,
        headers: { host: `127.0.0.1:${t.server.port}`, 'content-type': 'application/json', origin: EVIL },
        body: JSON.stringify(body),
      });
    const ask = { model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 200, temperature: 0 };
    const format = {
      ...ask,
      response_format: { type: 'json_schema', json_schema: { name: 'p', schema, strict: true } },
    };
    const answered = await post('/v1/chat/completions', format);
    expect(answered.status, answered.body).toBe(200);
    expect(answered.headers['access-control-allow-origin']).toBe(EVIL);
    // An answer kvdesk writes whole keeps its length.
    expect(answered.headers['content-length']).toBe(String(Buffer.byteLength(answered.body)));
    expect(JSON.parse(JSON.parse(answered.body).choices[0].message.content)).toEqual({ path: file });
    const tool = await post('/v1/chat/completions', {
      ...ask,
      tools: [{ type: 'function', function: { name: 'read_file', parameters: schema, strict: true } }],
      tool_choice: { type: 'function', function: { name: 'read_file' } },
    });
    expect(tool.status, tool.body).toBe(200);
    const call = JSON.parse(tool.body).choices[0].message.tool_calls[0];
    expect(JSON.parse(call.function.arguments)).toEqual({ path: file });
    // Streamed, however its chunks split the path.
    const streamed = await post('/v1/chat/completions', { ...format, stream: true });
    const text = streamed.body
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? '')
      .join('');
    expect(JSON.parse(text)).toEqual({ path: file });
    const ollama = await post('/api/generate', {
      model: 'default',
      prompt: 'hi',
      format: schema,
      stream: false,
      options: { num_predict: 200, temperature: 0 },
    });
    expect(ollama.status, ollama.body).toBe(200);
    expect(JSON.parse(JSON.parse(ollama.body).response)).toEqual({ path: file });
  });
});

describe('a name given with --allow-host and no port', () => {
  const TOKEN = 'box-secret';
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({}, { loadDefault: false, host: '0.0.0.0', token: TOKEN, allowedHosts: ['box.local'] });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("is a Host it answers to, but a page on that name's port 80 is not the UI: the UI's cookie does not let it in", async () => {
    const ws = `${t.url.replace('http', 'ws')}/ws`;
    const cookie = `kvdesk_token_${t.server.port}=${TOKEN}`;
    const host = `box.local:${t.server.port}`;
    // The UI opened by that name on the server's port.
    expect(await wsStatus(ws, { host, origin: `http://${host}`, cookie })).toBe(101);
    // Another web app on box.local (port 80, or 443): its browser sends the same-site cookie; refused.
    expect(await wsStatus(ws, { host, origin: 'http://box.local', cookie })).toBe(403);
    expect(await wsStatus(ws, { host, origin: 'https://box.local', cookie })).toBe(403);
    const refused = await rawRequest(t.url, {
      path: '/v1/kvdesk/budget',
      headers: { host, origin: 'http://box.local', cookie },
    });
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body).error.message).toContain('--allow-host box.local:80');
    // The bare name stays a Host it answers to (a proxy's, a browser's on a default port).
    const bare = await rawRequest(t.url, { path: '/health', headers: { host: 'box.local', cookie } });
    expect(bare.status).not.toBe(403);
  });
});

describe('a reverse proxy on port 80 of a name given with --allow-host and no port', () => {
  const TOKEN = 'proxy-secret';
  let t: TestServer;
  let staticDir: string;
  beforeAll(async () => {
    staticDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-static-'));
    await mkdir(path.join(staticDir, 'assets'));
    await writeFile(path.join(staticDir, 'index.html'), '<!doctype html><title>kvdesk ui</title>');
    await writeFile(path.join(staticDir, 'assets/index-abc.js'), 'console.log(1)');
    await writeFile(path.join(staticDir, 'assets/index-abc.css'), 'body{}');
    t = await startTestServer({}, { loadDefault: false, staticDir, token: TOKEN, allowedHosts: ['proxy.example'] });
  });
  afterAll(async () => {
    await t?.close();
    await rm(staticDir, { recursive: true, force: true });
  });

  it("serves the UI's files to its page (a module script goes with an Origin); the WebSocket and the APIs stay its own origins'", async () => {
    const cookie = `kvdesk_token_${t.server.port}=${TOKEN}`;
    const page = { host: 'proxy.example', origin: 'http://proxy.example', cookie };
    for (const [p, text] of [
      ['/assets/index-abc.js', 'console.log(1)'],
      ['/assets/index-abc.css', 'body{}'],
      ['/', 'kvdesk ui'],
    ] as const) {
      const r = await rawRequest(t.url, { path: p, headers: page });
      expect(r.status, p).toBe(200);
      expect(r.body, p).toContain(text);
      expect(r.headers['content-length'], p).toBe(String(Buffer.byteLength(r.body)));
    }
    // The token is still asked for them.
    const noCookie = await rawRequest(t.url, { path: '/assets/index-abc.js', headers: { ...page, cookie: '' } });
    expect(noCookie.status).toBe(401);
    // Nothing else: the WebSocket, reading routes, changing ones.
    const ws = `${t.url.replace('http', 'ws')}/ws`;
    expect(await wsStatus(ws, page)).toBe(403);
    // The page hears no reason from a refused WebSocket: it asks with a POST there, answered why (the UI shows it).
    const why = await rawRequest(t.url, { method: 'POST', path: '/ws', headers: page });
    expect(why.status).toBe(403);
    expect(JSON.parse(why.body).error.message).toContain('start kvdesk serve with --allow-host proxy.example:80');
    const own = { host: `127.0.0.1:${t.server.port}`, origin: `http://127.0.0.1:${t.server.port}`, cookie };
    expect((await rawRequest(t.url, { method: 'POST', path: '/ws', headers: own })).status).toBe(405);
    for (const [method, p] of [
      ['GET', '/v1/kvdesk/budget'],
      ['GET', '/health'],
      ['GET', '/metrics'],
      ['GET', '/v1/models'],
      ['POST', '/assets/index-abc.js'],
      ['DELETE', '/api/delete'],
    ] as const) {
      const r = await rawRequest(t.url, {
        method,
        path: p,
        headers: page,
        ...(method === 'GET' ? {} : { body: '{}' }),
      });
      expect(r.status, `${method} ${p}`).toBe(403);
      expect(r.body, p).toMatch(/origin_not_allowed|is not this server's UI/);
    }
  });
});

describe.skipIf(process.platform === 'win32')('the data folder a server makes', () => {
  it('is yours only: a chat saved over the WebSocket is 0600 in 0700 folders, whatever the umask', async () => {
    const umask = process.umask(0o022);
    const base = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-modes-'));
    const dataDir = path.join(base, 'x', 'd2');
    const t = await startTestServer({}, { loadDefault: false, dataDir });
    try {
      const ws = new WebSocket(`${t.url.replace('http', 'ws')}/ws`);
      const chat = { id: 't1', title: 'private', createdAt: 1, updatedAt: 1, messages: [] };
      const result = await new Promise<unknown>((resolve, reject) => {
        ws.on('message', (data) => {
          const m = JSON.parse(data.toString()) as { t: string; id?: number; result?: unknown };
          if (m.t === 'result' && m.id === 1) resolve(m.result);
        });
        ws.once('open', () => ws.send(JSON.stringify({ t: 'invoke', id: 1, name: 'saveThread', request: chat })));
        ws.once('error', reject);
      });
      ws.close();
      expect(result).toMatchObject({ ok: true });
      const mode = async (p: string) => ((await stat(path.join(dataDir, p))).mode & 0o777).toString(8);
      for (const folder of ['../', '.', 'threads']) expect(await mode(folder), folder).toBe('700');
      expect(await mode('threads/t1.json')).toBe('600');
    } finally {
      process.umask(umask);
      await t.close();
      await rm(base, { recursive: true, force: true });
    }
  });
});

describe('off loopback', () => {
  it('refuses to listen on another address without a token', async () => {
    const t = await startTestServer({}, { loadDefault: false });
    try {
      await expect(startServer({ hostApi: t.hostApi, host: '0.0.0.0' })).rejects.toThrow(/without a token.*--token/s);
    } finally {
      await t.close();
    }
  });

  describe('with a token', () => {
    const TOKEN = 'correct-horse-battery-staple';
    let t: TestServer;
    beforeAll(async () => {
      t = await startTestServer({}, { host: '0.0.0.0', token: TOKEN });
    });
    afterAll(async () => {
      await t?.close();
    });

    it('answers 401 without the token, 200 with it (Bearer)', async () => {
      expect(t.url).toBe(`http://127.0.0.1:${t.server.port}`);
      const none = await fetch(`${t.url}/v1/models`);
      expect(none.status).toBe(401);
      expect(((await none.json()) as { error: { code: string } }).error.code).toBe('invalid_token');
      expect((await fetch(`${t.url}/v1/models`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
      expect((await fetch(`${t.url}/health`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
      const models = await openaiClient(t.url, TOKEN).models.list();
      expect(models.data.map((m) => m.id)).toEqual(['default']);
      await expect(openaiClient(t.url, 'wrong').models.list()).rejects.toMatchObject({ status: 401 });
    });

    it('takes ?token= once and hands the browser a cookie for the rest', async () => {
      const page = await fetch(`${t.url}/?token=${TOKEN}`);
      expect(page.status).toBe(200);
      const cookie = page.headers.get('set-cookie') ?? '';
      expect(cookie).toMatch(new RegExp(`^kvdesk_token_${t.server.port}=`));
      expect(cookie).toMatch(/HttpOnly/);
      expect(cookie).toMatch(/SameSite=Strict/);
      const pair = cookie.split(';')[0] as string;
      expect((await fetch(`${t.url}/v1/kvdesk/budget`, { headers: { cookie: pair } })).status).toBe(200);
      expect(
        (await fetch(`${t.url}/v1/kvdesk/budget`, { headers: { cookie: `kvdesk_token_${t.server.port}=nope` } }))
          .status,
      ).toBe(401);
    });

    it('requires the token on the WebSocket too', async () => {
      const ws = `${t.url.replace('http', 'ws')}/ws`;
      expect(await wsStatus(ws)).toBe(401);
      expect(await wsStatus(`${ws}?token=${TOKEN}`)).toBe(101);
      expect(await wsStatus(ws, { authorization: `Bearer ${TOKEN}` })).toBe(101);
    });

    it('still checks Host with the right token', async () => {
      const r = await rawRequest(t.url, {
        path: '/health',
        headers: { host: 'evil.example', authorization: `Bearer ${TOKEN}` },
      });
      expect(r.status).toBe(403);
    });
  });
});
