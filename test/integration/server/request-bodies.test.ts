/**
 * Request bodies as the server reads them: bytes that are not UTF-8 are refused (400 in each API's error shape,
 * naming the offset) rather than fed to the model as U+FFFD.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './server-helpers';

let t: TestServer;
beforeAll(async () => {
  // No model: a body the server reads whole is answered 404 for its model, past every body check.
  t = await startTestServer({}, { loadDefault: false });
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
