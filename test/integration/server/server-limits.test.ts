/**
 * One request or one message must not hold the server: a WebSocket message or a JSON body with millions of values
 * is refused before JSON.parse reads it (the connection and the server answer after), a prompt whose length alone
 * says it cannot fit the context is refused before it is tokenized, and a connection that sends nothing is closed.
 */
import { Server } from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { WsServerMessage } from '../../../src/shared/api';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { startTestServer, type TestServer } from './server-helpers';

/** `{"t":"invoke",…,"request":{"x":[{},{},…]}}` of about `bytes` bytes: millions of empty objects. */
function manyObjects(prefix: string, bytes: number, suffix: string): Buffer {
  return Buffer.from(`${prefix}${'{},'.repeat(Math.floor(bytes / 3))}{}${suffix}`);
}

/** /health answers, and how long it took. */
async function health(url: string): Promise<number> {
  const started = Date.now();
  const res = await fetch(`${url}/health`);
  expect(res.status).toBe(200);
  return Date.now() - started;
}

let t: TestServer;
beforeAll(async () => {
  // Messages and bodies of 6 MiB at most: 1,000,000 values (the least the limit is).
  t = await startTestServer({}, { idleTimeoutMs: 400, maxMessageBytes: 6 * 1024 ** 2, maxJsonBytes: 6 * 1024 ** 2 });
});
afterAll(async () => {
  await t?.close();
});

describe('a message or body with millions of values', () => {
  it('a WebSocket call of 5 MiB of `{}` is answered with an error naming the limit, unparsed; the socket and server go on', async () => {
    const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}/ws`);
    const messages: WsServerMessage[] = [];
    ws.on('message', (data) => messages.push(JSON.parse(data.toString()) as WsServerMessage));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    let closed = false;
    ws.on('close', () => {
      closed = true;
    });
    const result = async (id: number) => {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const m = messages.find((x) => x.t === 'result' && x.id === id);
        if (m && m.t === 'result') return m.result;
        if (closed) throw new Error('socket closed');
        if (Date.now() > deadline) throw new Error(`no answer to call ${id}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const started = Date.now();
    ws.send(manyObjects('{"t":"invoke","id":1,"name":"listThreads","request":{"x":[', 5 * 1024 ** 2, ']}}').toString());
    const refused = await result(1);
    const took = Date.now() - started;
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.error.code).toBe('BAD_REQUEST');
    expect(refused.error.message).toContain('more than 1,000,000 JSON values');
    expect(refused.error.message).toContain('--max-message');
    // Parsing it took seconds (tens on a loaded machine); refusing it, a byte scan.
    expect(took).toBeLessThan(5_000);
    // The same socket is answered after, and so is HTTP.
    ws.send(JSON.stringify({ t: 'invoke', id: 2, name: 'listThreads', request: {} }));
    expect((await result(2)).ok).toBe(true);
    expect(closed).toBe(false);
    await health(t.url);
    ws.close();
  });

  it('a generation of 5 MiB of `{}` ends at once with an error frame naming the limit', async () => {
    const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}/ws`);
    const frames: WsServerMessage[] = [];
    ws.on('message', (data) => frames.push(JSON.parse(data.toString()) as WsServerMessage));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    ws.send(manyObjects('{"t":"generate","id":"g1","request":{"x":[', 5 * 1024 ** 2, ']}}').toString());
    const deadline = Date.now() + 30_000;
    let end: WsServerMessage | undefined;
    while (!end && Date.now() < deadline) {
      end = frames.find((m) => m.t === 'frame' && m.id === 'g1');
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(end).toMatchObject({
      t: 'frame',
      id: 'g1',
      frame: {
        type: 'error',
        error: { code: 'BAD_REQUEST', message: expect.stringContaining('1,000,000 JSON values') },
      },
    });
    expect(ws.readyState).toBe(WebSocket.OPEN);
    ws.close();
  });

  it('a message of another shape with too many values closes its socket (1008) saying why', async () => {
    const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}/ws`);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const closed = new Promise<{ code: number; reason: string }>((resolve) =>
      ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
    ws.send(manyObjects('[', 5 * 1024 ** 2, ']').toString());
    const { code, reason } = await closed;
    expect(code).toBe(1008);
    expect(reason).toContain('at most 1,000,000 JSON values');
    await health(t.url);
  });

  it('a JSON body of 5 MiB of `{}` gets 413 naming the limit, unparsed; the server answers after', async () => {
    const started = Date.now();
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: manyObjects('{"model":"default","x":[', 5 * 1024 ** 2, ']}'),
    });
    const took = Date.now() - started;
    expect(res.status).toBe(413);
    const body = (await res.json()) as { error: { message: string; limit_values: number } };
    expect(body.error.limit_values).toBe(1_000_000);
    expect(body.error.message).toContain('more than 1,000,000 JSON values');
    expect(took).toBeLessThan(5_000);
    await health(t.url);
  });

  it('a body of the same size made of long strings (a real chat’s shape) is read', async () => {
    const content = 'word '.repeat(1024 ** 2);
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content }] }),
    });
    // Past the JSON check: the model is what it refuses.
    expect(res.status).toBe(404);
  });
});

describe('a body over the limit, sent whole before the answer is read', () => {
  // Its own server, at the default idle timeout (the one above closes idle connections after 400 ms).
  let own: TestServer;
  beforeAll(async () => {
    own = await startTestServer({}, { loadDefault: false, maxJsonBytes: 6 * 1024 ** 2 });
  });
  afterAll(async () => {
    await own?.close();
  });
  it('gets its 413 every time (not a reset), and the connection serves the next request', async () => {
    // Node's fetch and the OpenAI and Anthropic SDKs send the whole body before they read the answer: with the
    // connection closed at once, the bytes still coming made the kernel reset it, and about half of them got EPIPE.
    const body = Buffer.alloc(16 * 1024 ** 2, 0x20);
    for (let i = 0; i < 6; i++) {
      const res = await fetch(`${own.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(res.status).toBe(413);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('payload_too_large');
    }
    // Read to its end, the body leaves the connection for the next request (kept alive, not closed).
    const answers = await new Promise<string>((resolve, reject) => {
      const url = new URL(own.url);
      const socket = net.connect(Number(url.port), url.hostname);
      let text = '';
      socket.on('data', (d) => {
        text += String(d);
        if (/HTTP\/1\.1 413[\s\S]*HTTP\/1\.1 200/.test(text)) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.once('error', reject);
      socket.once('close', () => resolve(text));
      const big = 7 * 1024 ** 2;
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nContent-Length: ${big}\r\n\r\n`,
      );
      socket.write(Buffer.alloc(big, 0x20));
      socket.write(`GET /v1/models HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`);
    });
    expect(answers).toMatch(/^HTTP\/1\.1 413/);
    expect(answers).toContain('HTTP/1.1 200');
    // Kept alive as long as any connection idle between requests (Node's own 5 s closed it long before).
    expect(answers.toLowerCase()).toContain('keep-alive: timeout=60');
  });
});

describe('a connection that sends nothing', () => {
  it('is closed after the idle timeout; a WebSocket left quiet is not', async () => {
    const url = new URL(t.url);
    const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}/ws`);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const socket = net.connect(Number(url.port), url.hostname);
    const closedAt = await new Promise<number>((resolve, reject) => {
      socket.once('close', () => resolve(Date.now()));
      socket.once('error', reject);
      setTimeout(() => reject(new Error('a silent connection is still open after 10 s')), 10_000).unref();
    });
    expect(closedAt).toBeGreaterThan(0);
    expect(ws.readyState).toBe(WebSocket.OPEN);
    ws.close();
    await health(t.url);
  });
});

/**
 * Sends a request's head and `pieces` of its body (Content-Length `length`), each after `gapMs`, then nothing more;
 * resolves with the answer's status, Connection header and body, and whether the server closed the connection
 * (within 10 s of the last piece).
 */
async function partialBody(
  url: string,
  path: string,
  length: number,
  pieces: string[],
  gapMs = 0,
  contentType = 'application/json',
): Promise<{ status: number; connection: string | undefined; body: string; closed: boolean; ms: number }> {
  const u = new URL(url);
  const socket = net.connect(Number(u.port), u.hostname);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let received = '';
  socket.on('data', (d: Buffer) => {
    received += d.toString('utf8');
  });
  const closed = new Promise<boolean>((resolve) => {
    socket.once('close', () => resolve(true));
    socket.once('error', () => {});
  });
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: ${contentType}\r\nContent-Length: ${length}\r\n\r\n`,
  );
  for (const piece of pieces) {
    await new Promise((r) => setTimeout(r, gapMs));
    socket.write(piece);
  }
  const sent = Date.now();
  const wasClosed = await Promise.race([closed, new Promise<boolean>((r) => setTimeout(() => r(false), 10_000))]);
  const ms = Date.now() - sent;
  socket.destroy();
  const [head = '', body = ''] = received.split('\r\n\r\n');
  return {
    status: Number(head.split(' ')[1]),
    connection: /\r\nconnection: ([^\r]*)/i.exec(head)?.[1],
    body,
    closed: wasClosed,
    ms,
  };
}

/** A browser's upload (multipart, streamed to disk as it comes) that sends the start of one file and stops. */
function stalledUpload(url: string): ReturnType<typeof partialBody> {
  return partialBody(
    url,
    '/api/models/upload',
    100_000,
    ['--b\r\nContent-Disposition: form-data; name="file"; filename="m/config.json"\r\n\r\n{"a'],
    0,
    'multipart/form-data; boundary=b',
  );
}

describe('a body that stops coming', () => {
  it("is answered 408 in its API's shape after the idle timeout, and its connection closed", async () => {
    const shapes: Array<[string, (body: Record<string, unknown>) => unknown]> = [
      ['/v1/chat/completions', (b) => (b.error as { code: string }).code],
      ['/v1/messages', (b) => [b.type, (b.error as { type: string }).type]],
      ['/api/chat', (b) => typeof b.error],
    ];
    const expected: unknown[] = ['request_timeout', ['error', 'invalid_request_error'], 'string'];
    for (const [i, [path, shape]] of shapes.entries()) {
      const r = await partialBody(t.url, path, 200, ['{"model": "default", "messa']);
      expect(r.status, path).toBe(408);
      expect(r.connection).toBe('close');
      expect(r.closed).toBe(true);
      // The idle timeout is 400 ms here: well before Node's requestTimeout (300 s).
      expect(r.ms).toBeLessThan(5_000);
      const body = JSON.parse(r.body) as Record<string, unknown>;
      expect(shape(body), path).toEqual(expected[i]);
      expect(JSON.stringify(body)).toMatch(/The request body stopped arriving: nothing came for 400 ms/);
    }
    // A browser's upload (streamed to disk as it comes) too, in the upload's own answer.
    const r = await stalledUpload(t.url);
    expect(r.status).toBe(408);
    expect(r.closed).toBe(true);
    expect(JSON.parse(r.body)).toMatchObject({
      ok: false,
      error: { message: expect.stringMatching(/^The request body stopped arriving/) },
    });
    await health(t.url);
  });

  it('a body that keeps coming, slowly, is read whole however long it takes', async () => {
    const body = JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] });
    // Eight pieces 250 ms apart: two seconds in all, each gap under the 400 ms idle timeout.
    const pieces = Array.from({ length: 8 }, (_, k) => body.slice((k * body.length) / 8, ((k + 1) * body.length) / 8));
    const r = await partialBody(t.url, '/v1/chat/completions', Buffer.byteLength(body), pieces, 250);
    expect(r.status).toBe(404);
    expect(r.body).toMatch(/no-such-model/);
  });
});

/**
 * Node's own request timeout (300 s, counted from a request's first byte to its last, however steadily its bytes
 * come), made `ms` for servers made until the returned undo: the same cut, soon enough for a test to see it.
 */
function shortenNodeRequestTimeout(ms: number): () => void {
  const own = Symbol('requestTimeout');
  type WithOwn = { [own]?: number };
  Object.defineProperty(Server.prototype, 'requestTimeout', {
    configurable: true,
    get(this: WithOwn) {
      return this[own];
    },
    set(this: WithOwn, value: number) {
      this[own] = value === 300_000 ? ms : value;
    },
  });
  return () => {
    delete (Server.prototype as { requestTimeout?: number }).requestTimeout;
  };
}

describe('an upload that keeps coming', () => {
  let own: TestServer;
  let undo: () => void;
  beforeAll(async () => {
    undo = shortenNodeRequestTimeout(1_500);
    own = await startTestServer({}, { loadDefault: false, idleTimeoutMs: 400 });
  });
  afterAll(async () => {
    await own?.close();
    undo?.();
  });

  it("is read whole however long it takes: Node's request timeout (300 s; 1.5 s here) does not cut it", async () => {
    const head = '--b\r\nContent-Disposition: form-data; name="file"; filename="m/config.json"\r\n\r\n';
    const tail = '\r\n--b--\r\n';
    // A folder of one file sent in 20 pieces 150 ms apart (3 s in all, each gap under the 400 ms idle timeout):
    // a few GB from another machine at 5-20 MB/s, in small.
    const file = `{"model_type": "gpt2", "pad": "${'x'.repeat(2_000)}"}`;
    const body = head + file + tail;
    const pieces = Array.from({ length: 20 }, (_, k) =>
      body.slice((k * body.length) / 20, ((k + 1) * body.length) / 20),
    );
    const started = Date.now();
    const r = await partialBody(
      own.url,
      '/api/models/upload',
      Buffer.byteLength(body),
      pieces,
      150,
      'multipart/form-data; boundary=b',
    );
    expect(Date.now() - started).toBeGreaterThan(2_500);
    // Read to its end and written: the folder itself is what is answered (no tokenizer.json), not a 408.
    expect(r.status, r.body).toBe(422);
    expect(JSON.parse(r.body)).toMatchObject({
      ok: false,
      error: { code: 'PACKAGE_INVALID', detail: { file: 'tokenizer.json' } },
    });
    expect((await fetch(`${own.url}/v1/models`)).status).toBe(200);
  });

  it('one that stops coming is still answered 408 after the idle timeout', async () => {
    const r = await stalledUpload(own.url);
    expect(r.status).toBe(408);
    expect(r.closed).toBe(true);
    expect(r.ms).toBeLessThan(5_000);
    expect(r.body).toMatch(/stopped arriving: nothing came for 400 ms/);
  });

  it('headers that trickle in are cut after the idle timeout in all, though each byte comes within it', async () => {
    const u = new URL(own.url);
    const socket = net.connect(Number(u.port), u.hostname);
    let received = '';
    socket.on('data', (d: Buffer) => {
      received += d.toString('utf8');
    });
    socket.once('error', () => {});
    const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())));
    const started = Date.now();
    // One header byte every 100 ms, for up to 10 s.
    const headers = `GET /health HTTP/1.1\r\nHost: ${u.host}\r\nX-Pad: ${'y'.repeat(200)}`;
    let i = 0;
    const drip = setInterval(() => {
      if (socket.destroyed || i >= headers.length) return;
      socket.write(headers.charAt(i++));
    }, 100);
    const closedAt = await Promise.race([closed, new Promise<number>((r) => setTimeout(() => r(0), 10_000))]);
    clearInterval(drip);
    socket.destroy();
    expect(closedAt, 'a trickle of headers was still held after 10 s').toBeGreaterThan(0);
    // 400 ms of headers, and Node's check every 100 ms.
    expect(closedAt - started).toBeLessThan(3_000);
    expect(received).toMatch(/^HTTP\/1\.1 408/);
  });
});

describe.skipIf(!haveFixtures)(
  `a prompt too long for the context, by its length alone${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it('is refused as context_length_exceeded ("at least" N tokens) without being tokenized', async () => {
      const loaded = await t.hostApi.call('loadModel', { path: fixture('onnxruntime-genai/tiny-random-gpt2-fp32') });
      if (!loaded.ok) throw new Error(loaded.error.message);
      const model = loaded.value.id;
      try {
        // One 300 kB word: tokenizing it held the server 5 s, to refuse it after (the context is 512 tokens).
        const post = (route: string, body: unknown) =>
          fetch(`${t.url}/v1/${route}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model, max_tokens: 2, ...(body as object) }),
          });
        const word = 'a'.repeat(300_000);
        for (const [route, body, what] of [
          ['chat/completions', { messages: [{ role: 'user', content: word }] }, 'messages'],
          ['completions', { prompt: word }, 'prompt'],
        ] as const) {
          const started = Date.now();
          const res = await post(route, body);
          const took = Date.now() - started;
          expect(res.status).toBe(400);
          const error = ((await res.json()) as { error: { code: string; message: string; n_prompt_tokens: number } })
            .error;
          expect(error.code).toBe('context_length_exceeded');
          expect(error.message).toContain(
            `maximum context length is 512 tokens. However, your ${what} resulted in at least ${error.n_prompt_tokens} tokens`,
          );
          // 300,000 bytes over the longest token's 128.
          expect(error.n_prompt_tokens).toBeGreaterThanOrEqual(2344);
          expect(took).toBeLessThan(5_000);
        }
        // Ollama's chat leaves out the oldest turns to fit: the last turn alone is what is refused so.
        const started = Date.now();
        const res = await fetch(`${t.url}/api/chat`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model,
            stream: false,
            messages: [
              { role: 'user', content: 'an older turn' },
              { role: 'assistant', content: 'its reply' },
              { role: 'user', content: word },
            ],
          }),
        });
        expect(res.status).toBe(400);
        expect(((await res.json()) as { error: string }).error).toMatch(
          /^The prompt has at least \d+ tokens with only the system messages and the last turn kept, which leaves no room for a reply in the model's context of 512 tokens/,
        );
        expect(Date.now() - started).toBeLessThan(5_000);
        // A prompt that fits is still answered (this model's vocabulary has none of ChatML's markup: completions).
        const ok = await post('completions', { prompt: 'a' });
        expect(ok.status, await ok.clone().text()).toBe(200);
      } finally {
        await t.hostApi.call('unloadModel', { id: model });
      }
    });
  },
);
