/**
 * Bad input over HTTP: a clear 4xx naming what to fix, nothing left on disk, and the server answering the next
 * client as before (no 500, no staging path in the answer, no route broken for everyone by one request).
 */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultModelDir } from '../helpers/fixtures';
import { startTestServer, type TestServer } from './server/server-helpers';

let t: TestServer;
let files: Array<{ path: string; data: Buffer }>;
beforeAll(async () => {
  t = await startTestServer({}, { maxUploadBytes: 64 * 1024 * 1024 });
  const names = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'onnx/model.onnx'];
  files = await Promise.all(names.map(async (n) => ({ path: n, data: await readFile(path.join(defaultModelDir, n)) })));
});
afterAll(async () => {
  await t?.close();
});

const longName = 'a'.repeat(300);

async function jsonUpload(name: string, list: Array<{ path: string; data: Buffer }>) {
  const r = await fetch(`${t.url}/api/models/upload`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, files: list.map((f) => ({ path: f.path, dataBase64: f.data.toString('base64') })) }),
  });
  return { status: r.status, body: (await r.json()) as { ok: boolean; error?: { code: string; message: string } } };
}

async function multipartUpload(name: string, list: Array<{ path: string; data: Buffer }>) {
  const form = new FormData();
  form.append('name', name);
  for (const f of list) form.append('file', new Blob([f.data]), `${name}/${f.path}`);
  const r = await fetch(`${t.url}/api/models/upload`, { method: 'POST', body: form });
  return { status: r.status, body: (await r.json()) as { ok: boolean; error?: { code: string; message: string } } };
}

/** Nothing of a refused upload stays beside the library. */
async function noStaging(): Promise<void> {
  const left = await readdir(path.join(t.dataDir, 'models')).catch(() => []);
  expect(left.filter((n) => n.startsWith('.incoming'))).toEqual([]);
}

describe('upload paths the disk cannot hold are 400s naming the path', () => {
  for (const [form, send] of [
    ['JSON', jsonUpload],
    ['multipart', multipartUpload],
  ] as const) {
    it(`${form}: the same path twice`, async () => {
      const r = await send('twice', [{ path: 'tokenizer.json', data: Buffer.from('{}') }, ...files]);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error?.code).toBe('BAD_REQUEST');
      expect(r.body.error?.message).toContain('tokenizer.json twice');
      await noStaging();
    });

    it(`${form}: a file and a folder of the same name`, async () => {
      for (const list of [
        [{ path: 'onnx/model.onnx/x', data: Buffer.from('x') }, ...files],
        [...files, { path: 'onnx/model.onnx/x', data: Buffer.from('x') }],
      ]) {
        const r = await send('clash', list);
        expect(r.status, JSON.stringify(r.body)).toBe(400);
        expect(r.body.error?.message).toContain('onnx/model.onnx both as a file and as the folder of');
        expect(r.body.error?.message).not.toContain('.incoming');
      }
      await noStaging();
    });

    it(`${form}: a file name over 255 bytes`, async () => {
      const r = await send('long', [{ path: longName, data: Buffer.from('x') }, ...files]);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error?.message).toContain('255 bytes');
      expect(r.body.error?.message).not.toContain('.incoming');
      expect(r.body.error?.message).not.toContain(t.dataDir);
      await noStaging();
    });
  }

  it('the server still takes a good upload afterwards', async () => {
    const r = await multipartUpload('good', files);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });
});

describe("Ollama's keep_alive longer than any clock", () => {
  it('/api/ps still answers every client after a request with keep_alive "99999999999h" or 1e300', async () => {
    // A library model (not loaded) that the request loads on first use, with that time to live.
    const r0 = await multipartUpload('ttl-model', files);
    expect(r0.status).toBe(200);
    expect((await t.hostApi.call('unloadModel', { id: 'ttl-model' })).ok).toBe(true);
    for (const keep_alive of ['99999999999h', 1e300]) {
      const g = await fetch(`${t.url}/api/generate`, {
        method: 'POST',
        body: JSON.stringify({
          model: 'ttl-model',
          prompt: 'hi',
          stream: false,
          keep_alive,
          options: { num_predict: 1 },
        }),
      });
      expect(g.status, await g.text()).toBe(200);
      const ps = await fetch(`${t.url}/api/ps`);
      const text = await ps.text();
      expect(ps.status, text).toBe(200);
      const listed = (JSON.parse(text) as { models: Array<{ name: string; expires_at: string }> }).models;
      const entry = listed.find((m) => m.name === 'ttl-model:latest');
      expect(entry).toBeDefined();
      expect(Number.isNaN(Date.parse(entry?.expires_at ?? ''))).toBe(false);
    }
  });
});

describe("a call's arguments in the history nested thousands of levels deep", () => {
  /** `{"a":{"a":…1…}}`, `levels` deep, as JSON text: the test's own JSON.stringify could not write it either. */
  const deep = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
  async function send(p: string, body: string): Promise<{ status: number; text: string }> {
    const r = await fetch(`${t.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    return { status: r.status, text: await r.text() };
  }
  const openai = (args: string) =>
    `{"model":"default","max_tokens":2,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"x","arguments":${args}}}]},{"role":"tool","tool_call_id":"a","content":"r"}]}`;
  const ollama = (args: string) =>
    `{"model":"default","stream":false,"options":{"num_predict":2},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"x","arguments":${args}}}]},{"role":"tool","content":"r"}]}`;
  const anthropic = (input: string) =>
    `{"model":"default","max_tokens":2,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"x","input":${input}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"r"}]}]}`;

  it('are a 400 naming the arguments on every API (OpenAI, Ollama, Anthropic), not a 500; the server goes on', async () => {
    const said =
      /nests more than 256 levels of objects and arrays, the most kvdesk takes: send the call's arguments less deeply nested\.$/;
    const chat = await send('/v1/chat/completions', openai(deep(5000)));
    expect(chat.status, chat.text).toBe(400);
    const err = (JSON.parse(chat.text) as { error: { message: string; param: string } }).error;
    expect(err.param).toBe('messages[1].tool_calls[0].function.arguments');
    expect(err.message).toMatch(said);
    expect(err.message).toMatch(/^messages\[1\]\.tool_calls\[0\]\.function\.arguments nests/);

    // Ollama's arguments as an object, and as JSON text (read into one).
    for (const args of [deep(5000), JSON.stringify(deep(5000))]) {
      const r = await send('/api/chat', ollama(args));
      expect(r.status, r.text.slice(0, 300)).toBe(400);
      const message = (JSON.parse(r.text) as { error: string }).error;
      expect(message).toMatch(/^messages\[1\]\.tool_calls\[0\]\.function\.arguments nests/);
      expect(message).toMatch(said);
    }

    const messages = await send('/v1/messages', anthropic(deep(5000)));
    expect(messages.status, messages.text).toBe(400);
    const refusal = JSON.parse(messages.text) as { type: string; error: { type: string; message: string } };
    expect(refusal).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', param: 'messages[1].content[0].input' },
    });
    expect(refusal.error.message).toMatch(/^messages\[1\]\.content\[0\]\.input nests/);
    expect(refusal.error.message).toMatch(said);

    // Arguments nested as a tool's parameters may be are taken.
    for (const [p, body] of [
      ['/v1/chat/completions', openai(deep(100))],
      ['/api/chat', ollama(deep(100))],
      ['/v1/messages', anthropic(deep(100))],
    ] as const) {
      const r = await send(p, body);
      expect(r.status, `${p}: ${r.text.slice(0, 300)}`).toBe(200);
    }
    expect((await fetch(`${t.url}/health`)).status).toBe(200);
  });
});
