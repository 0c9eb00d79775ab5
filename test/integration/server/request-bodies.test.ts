/**
 * Request bodies as the server reads them: bytes that are not UTF-8 are refused (400 in each API's error shape,
 * naming the offset) rather than fed to the model as U+FFFD; and the bodies read into memory at once, across
 * requests, stay under one cap (a body with no room now: 503 with Retry-After; one over the cap alone: 413), real
 * concurrent requests on a real server, which answers after.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './server-helpers';

const MIB = 1024 ** 2;
/** The cap on bodies held at once in these tests: room for two bodies of 1 MB, not three. */
const CAP = 2.5 * MIB;

let t: TestServer;
beforeAll(async () => {
  // No model: a body the server reads whole is answered 404 for its model, past every body check.
  t = await startTestServer({}, { loadDefault: false, maxJsonBytes: 4 * MIB, maxBodiesBytes: CAP });
});
afterAll(async () => {
  await t?.close();
});

const post = (p: string, body: Uint8Array) =>
  fetch(`${t.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

describe('a body that is not UTF-8', () => {
  // Latin-1's "café": é is the one byte 0xe9, at this offset.
  const head = '{"model":"default","messages":[{"role":"user","content":"caf';
  const latin1 = Buffer.concat([Buffer.from(head), Buffer.from([0xe9]), Buffer.from('"}]}')]);

  it('is a 400 in the OpenAI shape naming the byte and its offset, and saying to send UTF-8', async () => {
    const res = await post('/v1/chat/completions', latin1);
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid_json',
      param: null,
      byte_offset: head.length,
    });
    expect(body.error.message).toBe(
      `The request body is not UTF-8 text (byte 0xe9 at offset ${head.length}): send the JSON encoded as UTF-8, as RFC 8259 requires.`,
    );
  });

  it("is a 400 in Anthropic's and Ollama's shapes on their routes", async () => {
    const anthropic = await post('/v1/messages', latin1);
    expect(anthropic.status).toBe(400);
    const a = (await anthropic.json()) as { type: string; error: { type: string; message: string } };
    expect(a.type).toBe('error');
    expect(a.error.type).toBe('invalid_request_error');
    expect(a.error.message).toContain(`byte 0xe9 at offset ${head.length}`);
    const ollama = await post('/api/chat', latin1);
    expect(ollama.status).toBe(400);
    const o = (await ollama.json()) as { error: string };
    expect(o.error).toContain(`byte 0xe9 at offset ${head.length}): send the JSON encoded as UTF-8`);
  });

  it('counts a byte order mark in the offset, and says when the body ends inside a character', async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const marked = await post('/v1/chat/completions', Buffer.concat([bom, latin1]));
    expect(((await marked.json()) as { error: { byte_offset: number } }).error.byte_offset).toBe(head.length + 3);
    // "é" in UTF-8 is c3 a9: the body cut after c3.
    const cut = await post('/v1/completions', Buffer.concat([Buffer.from('{"prompt":"caf'), Buffer.from([0xc3])]));
    expect(cut.status).toBe(400);
    expect(((await cut.json()) as { error: { message: string } }).error.message).toContain(
      'byte 0xc3 at offset 14, where the body ends inside a character',
    );
  });

  it('a UTF-8 body, with or without a byte order mark, is read (refused only for its model)', async () => {
    const utf8 = Buffer.from(`${head}é"}]}`);
    for (const body of [utf8, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), utf8])]) {
      const res = await post('/v1/chat/completions', body);
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
    }
  });
});

/** A request on its own connection, its headers sent and `sent` bytes of its body: the rest waits for `finish`. */
interface Held {
  /** The response's status line and body, once one comes (or the connection closes). */
  answer: Promise<{ status: number; headers: string; body: string }>;
  finish(): void;
  destroy(): void;
}

function hold(p: string, opts: { size: number; sent: number; chunked?: boolean; contentType?: string }): Held {
  const socket = net.connect(new URL(t.url).port as unknown as number, '127.0.0.1');
  const { size, sent } = opts;
  const chunk = (n: number) => {
    const bytes = Buffer.alloc(n, 0x20);
    return opts.chunked ? Buffer.concat([Buffer.from(`${n.toString(16)}\r\n`), bytes, Buffer.from('\r\n')]) : bytes;
  };
  socket.write(
    `POST ${p} HTTP/1.1\r\nHost: ${new URL(t.url).host}\r\nContent-Type: ${opts.contentType ?? 'application/json'}\r\n${opts.chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${size}`}\r\n\r\n`,
  );
  // A JSON body: `{` then spaces, `}` at its end.
  socket.write(opts.chunked ? Buffer.from('1\r\n{\r\n') : '{');
  socket.write(chunk(sent - 1));
  let got = '';
  socket.on('data', (d) => {
    got += d.toString();
  });
  socket.on('error', () => {});
  const answer = new Promise<{ status: number; headers: string; body: string }>((resolve) => {
    const done = () => {
      const [headers = '', body = ''] = got.split('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(headers)?.[1] ?? 0), headers, body });
    };
    socket.on('data', () => {
      const length = /content-length: (\d+)/i.exec(got)?.[1];
      const at = got.indexOf('\r\n\r\n');
      if (length !== undefined && at >= 0 && Buffer.byteLength(got.slice(at + 4)) >= Number(length)) done();
    });
    socket.on('close', done);
  });
  return {
    answer,
    finish() {
      const rest = size - sent - 1;
      if (opts.chunked) socket.write(Buffer.concat([chunk(rest), Buffer.from('1\r\n}\r\n0\r\n\r\n')]));
      else socket.write(Buffer.concat([Buffer.alloc(rest, 0x20), Buffer.from('}')]));
    },
    destroy: () => socket.destroy(),
  };
}

/** Whether `held` has an answer within `ms`. */
const answered = (held: Held, ms: number) =>
  Promise.race([held.answer.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

/** What a body held in these tests has sent of its 1,000,000 bytes: room is taken as bytes come. */
const HELD = 999_000;

/** Waits until the server holds `n` held bodies' bytes (it reads a body once its request's headers are in). */
async function untilHeld(n: number): Promise<void> {
  // A body 1 byte past the room they leave finds none, answered at once.
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = await fetch(`${t.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Buffer.alloc(CAP - n * HELD + 1, 0x20),
    });
    await probe.arrayBuffer();
    if (probe.status === 503) return;
    if (Date.now() > deadline) throw new Error(`the server never held ${n} bodies`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('bodies read at once', () => {
  it('past the cap, a body is a 503 with Retry-After in its route’s shape; read bodies give their room back', async () => {
    const first = hold('/v1/chat/completions', { size: 1_000_000, sent: HELD });
    const second = hold('/v1/messages', { size: 1_000_000, sent: HELD });
    await untilHeld(2);
    // A third: refused once its bytes pass the room left.
    const third = hold('/v1/chat/completions', { size: 1_000_000, sent: 900_000 });
    const openai = await third.answer;
    expect(openai.status).toBe(503);
    expect(openai.headers).toMatch(/\r\nretry-after: 1\r\n/i);
    const e = JSON.parse(openai.body) as { error: Record<string, unknown> };
    expect(e.error).toMatchObject({ type: 'server_error', code: 'server_busy', limit_bytes: CAP });
    expect(e.error.message).toContain(`of the ${CAP} it holds in memory at once`);
    // Sent in chunks (no Content-Length): refused once its bytes pass the room left, in Anthropic's shape.
    const chunked = hold('/v1/messages', { size: 1_000_000, sent: 900_000, chunked: true });
    const anthropic = await chunked.answer;
    expect(anthropic.status).toBe(503);
    expect(anthropic.headers).toMatch(/\r\nretry-after: 1\r\n/i);
    expect(JSON.parse(anthropic.body)).toMatchObject({ type: 'error', error: { code: 'server_busy' } });
    // Ollama's shape, and the JSON upload's Result envelope (its body is held in memory too).
    const ollama = await hold('/api/chat', { size: 1_000_000, sent: 900_000 }).answer;
    expect(ollama.status).toBe(503);
    expect(JSON.parse(ollama.body).error).toContain('has no room for this one');
    const upload = await hold('/api/models/upload', { size: 1_000_000, sent: 900_000 }).answer;
    expect(upload.status).toBe(503);
    expect(upload.headers).toMatch(/\r\nretry-after: 1\r\n/i);
    expect(JSON.parse(upload.body)).toMatchObject({ ok: false, error: { code: 'QUEUE_FULL' } });
    // A multipart upload streams to disk, not memory: not counted (its folder is refused, not the server busy).
    const multipart = hold('/api/models/upload', {
      size: 1_000_000,
      sent: 900_000,
      contentType: 'multipart/form-data; boundary=x',
    });
    expect(await answered(multipart, 300)).toBe(false);
    multipart.destroy();
    // The two held go on and are answered as any body is (their model is not here).
    first.finish();
    second.finish();
    expect((await first.answer).status).toBe(400);
    expect((await second.answer).status).toBe(400);
    // Their room is given back: two more fit, and so does one a client leaves midway.
    const gone = hold('/v1/chat/completions', { size: 1_000_000, sent: HELD });
    const kept = hold('/v1/chat/completions', { size: 1_000_000, sent: HELD });
    await untilHeld(2);
    gone.destroy();
    // Its close reaches the server in a moment: until then a body may still find no room.
    let after = hold('/v1/chat/completions', { size: 1_000_000, sent: 900_000 });
    for (let i = 0; i < 20 && (await answered(after, 300)); i++) {
      expect((await after.answer).status).toBe(503);
      after = hold('/v1/chat/completions', { size: 1_000_000, sent: 900_000 });
    }
    expect(await answered(after, 300)).toBe(false);
    kept.finish();
    after.finish();
    expect((await kept.answer).status).toBe(400);
    expect((await after.answer).status).toBe(400);
    expect((await fetch(`${t.url}/v1/models`)).status).toBe(200);
  });

  it('one body over the cap alone is a 413 naming it, also sent in chunks (no Content-Length to say so)', async () => {
    const res = await post('/v1/chat/completions', Buffer.alloc(3 * MIB, 0x20));
    expect(res.status).toBe(413);
    const body = (await res.json()) as { error: { message: string; limit_bytes: number } };
    expect(body.error.limit_bytes).toBe(CAP);
    expect(body.error.message).toContain(`more than the ${CAP} bytes of request bodies this server holds in memory`);
    // Not a 503 to send again (that could never fit): its own bytes are no other body's.
    const chunked = await hold('/v1/chat/completions', { size: 3 * MIB, sent: 2_900_000, chunked: true }).answer;
    expect(chunked.status).toBe(413);
    expect(JSON.parse(chunked.body).error.message).toContain(`more than the ${CAP} bytes of request bodies`);
  });

  it('clients that say large bodies and send almost nothing hold no room: other bodies are read', async () => {
    // Room was taken at what Content-Length said: four such stalled the API for everyone (a 503 each time).
    const stalled = Array.from({ length: 4 }, () => hold('/v1/chat/completions', { size: 1_000_000, sent: 1 }));
    try {
      await new Promise((r) => setTimeout(r, 200));
      const res = await post('/v1/chat/completions', Buffer.alloc(1_000_000, 0x20));
      // Past the cap: the body is read, and refused for what it is (not JSON), not for room.
      expect(res.status).toBe(400);
      for (const s of stalled) expect(await answered(s, 0)).toBe(false);
    } finally {
      for (const s of stalled) s.destroy();
    }
  });
});
