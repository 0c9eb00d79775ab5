import { pbkdf2 } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { HttpError } from '../../../src/main/server/http-util';
import { multipartBoundary, receiveMultipart, uploadFromJson } from '../../../src/main/server/upload';
import { failure } from '../../helpers/rejection';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-upload-'));
  dirs.push(d);
  return d;
}

/** A request as the server gets it: headers, and the body in pieces as a socket gives them. */
function request(body: Buffer, contentType: string, pieces = 7): Readable & { headers: Record<string, string> } {
  const size = Math.ceil(body.length / pieces);
  const chunks = Array.from({ length: pieces }, (_, i) => body.subarray(i * size, (i + 1) * size));
  const req = Readable.from(chunks) as Readable & { headers: Record<string, string> };
  req.headers = { 'content-type': contentType, 'content-length': String(body.length) };
  return req;
}

async function encode(form: FormData): Promise<{ body: Buffer; type: string }> {
  const req = new Request('http://x/', { method: 'POST', body: form });
  const type = req.headers.get('content-type') ?? '';
  expect(multipartBoundary(type)).not.toBeNull();
  return { body: Buffer.from(await req.arrayBuffer()), type };
}

describe('multipart uploads, streamed to disk', () => {
  it('write what a browser FormData sends into the folder, by path, bytes intact; the name field names it', async () => {
    const bytes = new Uint8Array(300_000).map((_, i) => i % 251);
    const form = new FormData();
    form.append('name', 'my-pkg');
    form.append('file', new Blob([bytes]), 'my-pkg/onnx/model.onnx');
    form.append('file', new Blob(['{"a":1}\r\n--not-a-boundary']), 'my-pkg/config.json');
    const { body, type } = await encode(form);
    const dir = tempDir();
    expect(await receiveMultipart(request(body, type), dir, 1 << 20)).toBe('my-pkg');
    expect(readdirSync(path.join(dir, 'my-pkg')).sort()).toEqual(['config.json', 'onnx']);
    expect(Buffer.compare(readFileSync(path.join(dir, 'my-pkg/onnx/model.onnx')), Buffer.from(bytes))).toBe(0);
    expect(readFileSync(path.join(dir, 'my-pkg/config.json'), 'utf8')).toBe('{"a":1}\r\n--not-a-boundary');
  });

  it('names the upload after the first folder when the name field is missing', async () => {
    const form = new FormData();
    form.append('file', new Blob(['x']), 'folder/a.txt');
    const { body, type } = await encode(form);
    expect(await receiveMultipart(request(body, type), tempDir(), 1024)).toBe('folder');
  });

  it('reads quoted boundaries, escaped and UTF-8 filenames', async () => {
    expect(multipartBoundary('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(multipartBoundary('application/json')).toBeNull();
    const dir = tempDir();
    const body = Buffer.from(
      '--B\r\nContent-Disposition: form-data; name="file"; filename="p/x%22y.txt"\r\n\r\nhi\r\n' +
        '--B\r\nContent-Disposition: form-data; name="file"; filename="p/\u00e9.txt"\r\n\r\nho\r\n--B--\r\n',
    );
    expect(await receiveMultipart(request(body, 'multipart/form-data; boundary=B'), dir, 1024)).toBe('p');
    expect(readdirSync(path.join(dir, 'p')).sort()).toEqual(['x"y.txt', 'é.txt']);
  });

  it('refuses with 413 past the limit, declared or not, and with 400 a path that leaves the folder or a broken body', async () => {
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(5000)]), 'big/model.onnx');
    const { body, type } = await encode(form);
    expect((await failure(receiveMultipart(request(body, type), tempDir(), 4096), HttpError)).status).toBe(413);
    const undeclared = request(body, type);
    delete undeclared.headers['content-length'];
    expect((await failure(receiveMultipart(undeclared, tempDir(), 4096), HttpError)).status).toBe(413);

    const leaving = Buffer.from(
      '--B\r\nContent-Disposition: form-data; name="file"; filename="../evil.txt"\r\n\r\nhi\r\n--B--\r\n',
    );
    const dir = tempDir();
    const evil = await failure(
      receiveMultipart(request(leaving, 'multipart/form-data; boundary=B'), dir, 1024),
      HttpError,
    );
    expect(evil.status).toBe(400);
    expect(evil.message).toMatch(/leaves the package/);
    expect(readdirSync(dir)).toEqual([]);

    const broken = Buffer.from('--B\r\nContent-Disposition: form-data; name="a"\r\n\r\nunterminated');
    expect(
      (await failure(receiveMultipart(request(broken, 'multipart/form-data; boundary=B'), tempDir(), 1024), HttpError))
        .status,
    ).toBe(400);
  });
});

/** Settles as `p` does, or fails once `ms` passed without it settling: an upload that never ends. */
function within<T>(p: Promise<T>, ms = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the upload had not ended after ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Files under `dir` this process holds open (Linux's /proc/self/fd). */
function openUnder(dir: string): string[] {
  return readdirSync('/proc/self/fd').flatMap((fd) => {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      return target.startsWith(`${dir}${path.sep}`) ? [target] : [];
    } catch {
      return [];
    }
  });
}

describe('an upload cut off or refused part way', () => {
  it('ends with a 400 when its client went before the body ended, before the upload began or during it', async () => {
    const form = new FormData();
    form.append('name', 'cut');
    form.append('file', new Blob([new Uint8Array(200_000)]), 'cut/a.bin');
    const { body, type } = await encode(form);
    // Gone while the server made the upload's folder: the request emits nothing more.
    const gone = request(body, type);
    gone.destroy();
    const early = await failure(within(receiveMultipart(gone, tempDir(), 1 << 20)), HttpError);
    expect(early.status).toBe(400);
    expect(early.message).toMatch(/cut off/);
    // Gone in the middle of the file: destroyed without an error, as a request whose socket closed.
    const half = new Readable({ read() {} }) as Readable & { headers: Record<string, string> };
    half.headers = { 'content-type': type, 'content-length': String(body.length) };
    half.push(body.subarray(0, body.length / 2));
    const dir = tempDir();
    const received = receiveMultipart(half, dir, 1 << 20);
    setImmediate(() => half.destroy());
    expect((await failure(within(received), HttpError)).message).toMatch(/cut off/);
    if (existsSync('/proc/self/fd')) expect(openUnder(dir)).toEqual([]);
  });

  it.skipIf(!existsSync('/proc/self/fd'))('closes every file it was writing before it refuses', async () => {
    for (let i = 0; i < 5; i++) {
      const form = new FormData();
      form.append('name', 'clash');
      form.append('file', new Blob([new Uint8Array(3_000_000).fill(7)]), 'clash/a.bin');
      form.append('file', new Blob(['x']), 'clash/a.bin/x');
      const { body, type } = await encode(form);
      const dir = tempDir();
      const refused = await failure(within(receiveMultipart(request(body, type, 50), dir, 1 << 30)), HttpError);
      expect(refused.message).toContain('both as a file and as the folder');
      // The caller removes the folder next: no file of it is still being written.
      expect(openUnder(dir)).toEqual([]);
    }
  });
});

describe('a refusal while a file waits on the disk', () => {
  it('answers, though the file had the whole part but not yet its end', async () => {
    // A part fully read, its file still writing (the disk slow: here libuv's thread pool busy) and the rest of it
    // waiting in the stream that counts its bytes; then a part whose path clashes. Ending the counting stream alone
    // left that file waiting for ever: the upload was never answered (seen on a loaded machine).
    const headers = (name: string) =>
      `content-disposition: form-data; name="file"; filename="${name}"\r\ncontent-type: application/octet-stream\r\n\r\n`;
    const req = new Readable({ read() {} }) as Readable & { headers: Record<string, string> };
    req.headers = { 'content-type': 'multipart/form-data; boundary=B' };
    const dir = tempDir();
    const received = receiveMultipart(req, dir, 1 << 20);
    req.push(`--B\r\n${headers('p/a/b')}`);
    req.push(Buffer.alloc(1, 1));
    // Its file open: the write goes on.
    for (let i = 0; i < 500 && !existsSync(path.join(dir, 'p/a/b')); i++) await sleep(10);
    expect(existsSync(path.join(dir, 'p/a/b'))).toBe(true);
    await sleep(50);
    // Every thread of the pool busy for a while: the file's next writes wait.
    const threads = Number(process.env.UV_THREADPOOL_SIZE) || 4;
    const busy = Array.from(
      { length: threads },
      () => new Promise((done) => pbkdf2('x', 'y', 2_000_000, 32, 'sha256', done)),
    );
    // More than the file takes before it pushes back, then the rest of the part and its end.
    req.push(Buffer.alloc(40_000, 2));
    await sleep(50);
    req.push(Buffer.concat([Buffer.alloc(8_000, 3), Buffer.from('\r\n--B\r\n')]));
    await sleep(100);
    req.push(`${headers('p/a')}x\r\n--B--\r\n`);
    req.push(null);
    const refused = await failure(within(received), HttpError);
    expect(refused.message).toContain('both as a file and as the folder');
    await Promise.all(busy);
  });
});

describe('JSON uploads', () => {
  it('decode base64 files', () => {
    const u = uploadFromJson({
      name: ' pkg ',
      files: [{ path: 'pkg/a.bin', dataBase64: Buffer.from([1, 2, 3]).toString('base64') }],
    });
    expect(u.name).toBe('pkg');
    expect([...(u.files[0]?.data ?? [])]).toEqual([1, 2, 3]);
  });

  it('refuse malformed bodies with 400 and the field', () => {
    const cases: Array<[unknown, string]> = [
      [null, 'body'],
      [{ files: [] }, 'name'],
      [{ name: 'x' }, 'files'],
      [{ name: 'x', files: [{ path: 'a' }] }, 'files[0]'],
      [{ name: 'x', files: [{ path: 'a', dataBase64: 'not base64!' }] }, 'files[0].dataBase64'],
    ];
    for (const [body, param] of cases) {
      try {
        uploadFromJson(body);
        throw new Error('expected a refusal');
      } catch (err) {
        expect(err).toBeInstanceOf(HttpError);
        expect((err as HttpError).status).toBe(400);
        expect((err as HttpError).body.error.param).toBe(param);
      }
    }
  });
});
