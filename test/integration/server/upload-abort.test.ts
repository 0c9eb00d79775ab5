/**
 * A multipart package upload whose client goes away, at any point of its body: the server ends the upload, removes
 * its `.incoming-*` folder and that folder's lock, and answers the next client as before. Raw sockets, as a browser
 * tab closed mid-upload or a killed curl leaves the server: headers and part of the body in, then the connection
 * gone, with the Content-Length claiming more.
 */
import { readdir, readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultModelDir } from '../../helpers/fixtures';
import { eventually, startTestServer, type TestServer } from './server-helpers';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({}, { maxUploadBytes: 64 * 1024 * 1024 });
});
afterAll(async () => {
  await t?.close();
});

const B = '----kvdesk-abort';
const fileHead = (p: string) =>
  `--${B}\r\nContent-Disposition: form-data; name="file"; filename="${p}"\r\nContent-Type: application/octet-stream\r\n\r\n`;
const namePart = `--${B}\r\nContent-Disposition: form-data; name="name"\r\n\r\ncut\r\n`;

/** The body sent before the client goes, for each point it goes at. */
const cuts: Array<[string, Buffer]> = [
  ['right after the headers', Buffer.alloc(0)],
  ['after the name part', Buffer.from(namePart)],
  [
    'in the middle of the first file',
    Buffer.concat([Buffer.from(namePart + fileHead('cut/a.bin')), Buffer.alloc(8192, 1)]),
  ],
  [
    'between two files',
    Buffer.concat([
      Buffer.from(namePart + fileHead('cut/a.bin')),
      Buffer.alloc(8192, 1),
      Buffer.from(`\r\n${fileHead('cut/onnx/b.bin')}`),
    ]),
  ],
];

/** Opens a connection, sends the upload's headers (claiming 32 MiB) and `body`, and resolves once it is sent. */
async function startUpload(body: Buffer): Promise<net.Socket> {
  const socket = net.connect(t.server.port, '127.0.0.1');
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const head =
    'POST /api/models/upload?load=false HTTP/1.1\r\n' +
    `Host: 127.0.0.1:${t.server.port}\r\n` +
    `Content-Type: multipart/form-data; boundary=${B}\r\n` +
    `Content-Length: ${32 * 1024 * 1024}\r\n\r\n`;
  await new Promise<void>((resolve) => socket.write(Buffer.concat([Buffer.from(head), body]), () => resolve()));
  return socket;
}

/** Upload folders and locks in the library's folder, but those an earlier test left (each test says its own). */
async function incoming(earlier: string[] = []): Promise<string[]> {
  const names = await readdir(path.join(t.dataDir, 'models')).catch(() => [] as string[]);
  return names.filter((n) => n.startsWith('.incoming-') && !earlier.includes(n));
}

/** Waits (bounded) until the server has removed every upload folder and lock of this test. */
async function cleanedUp(what: string, earlier: string[]): Promise<void> {
  await eventually(
    () => incoming(earlier),
    (left) => left.length === 0,
    10_000,
  ).catch((err: Error) => {
    throw new Error(`an upload cut off ${what} was left on the server: ${err.message}`);
  });
}

describe('an upload whose client goes away', () => {
  for (const [when, body] of cuts) {
    it(`${when}: leaves nothing behind, and the server answers the next upload`, async () => {
      // Gone at once (the request's end may come while the server is still setting the upload up), and gone once
      // the upload's folder is there (it is being written).
      const earlier = await incoming();
      for (let i = 0; i < 6; i++) {
        const socket = await startUpload(body);
        if (i % 2 === 1)
          await eventually(
            () => incoming(earlier),
            (left) => left.length > 0,
            10_000,
          );
        socket.destroy();
        await cleanedUp(when, earlier);
      }
      const health = await fetch(`${t.url}/health`);
      expect(health.status).toBe(200);

      const form = new FormData();
      form.append('name', 'after-cut');
      for (const n of [
        'config.json',
        'generation_config.json',
        'tokenizer.json',
        'tokenizer_config.json',
        'onnx/model.onnx',
      ]) {
        form.append('file', new Blob([await readFile(path.join(defaultModelDir, n))]), `after-cut/${n}`);
      }
      const r = await fetch(`${t.url}/api/models/upload?load=false`, { method: 'POST', body: form });
      const answer = (await r.json()) as { ok: boolean; value?: { root: string } };
      expect(r.status, JSON.stringify(answer)).toBe(200);
      expect(answer.ok).toBe(true);
      expect(await incoming(earlier)).toEqual([]);
      const del = await fetch(`${t.url}/api/delete`, {
        method: 'DELETE',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'after-cut' }),
      });
      expect(del.status).toBe(200);
    });
  }
});
