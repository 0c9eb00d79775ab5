import { describe, expect, it } from 'vitest';
import { HttpError } from '../../../src/main/server/http-util';
import {
  multipartBoundary,
  parseMultipart,
  uploadFromJson,
  uploadFromMultipart,
} from '../../../src/main/server/upload';

async function encode(form: FormData): Promise<{ body: Buffer; boundary: string }> {
  const req = new Request('http://x/', { method: 'POST', body: form });
  const boundary = multipartBoundary(req.headers.get('content-type') ?? '');
  expect(boundary).not.toBeNull();
  return { body: Buffer.from(await req.arrayBuffer()), boundary: boundary as string };
}

describe('multipart uploads', () => {
  it('decode what a browser FormData sends: the name field and files by path, bytes intact', async () => {
    const bytes = new Uint8Array(256).map((_, i) => i);
    const form = new FormData();
    form.append('name', 'my-pkg');
    form.append('file', new Blob([bytes]), 'my-pkg/onnx/model.onnx');
    form.append('file', new Blob(['{"a":1}\r\n--not-a-boundary']), 'my-pkg/config.json');
    const { body, boundary } = await encode(form);
    const upload = uploadFromMultipart(parseMultipart(body, boundary));
    expect(upload.name).toBe('my-pkg');
    expect(upload.files.map((f) => f.path)).toEqual(['my-pkg/onnx/model.onnx', 'my-pkg/config.json']);
    expect([...(upload.files[0]?.data ?? [])]).toEqual([...bytes]);
    expect(Buffer.from(upload.files[1]?.data ?? []).toString()).toBe('{"a":1}\r\n--not-a-boundary');
  });

  it('names the upload after the first folder when the name field is missing', async () => {
    const form = new FormData();
    form.append('file', new Blob(['x']), 'folder/a.txt');
    const { body, boundary } = await encode(form);
    expect(uploadFromMultipart(parseMultipart(body, boundary)).name).toBe('folder');
  });

  it('reads quoted boundaries and escaped filenames', () => {
    expect(multipartBoundary('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(multipartBoundary('application/json')).toBeNull();
    const body = Buffer.from(
      '--B\r\nContent-Disposition: form-data; name="file"; filename="x%22y.txt"\r\n\r\nhi\r\n--B--\r\n',
    );
    expect(parseMultipart(body, 'B')[0]).toMatchObject({ name: 'file', filename: 'x"y.txt' });
    const ext = Buffer.from(
      '--B\r\nContent-Disposition: form-data; name="file"; filename="a.txt"; filename*=UTF-8\'\'%C3%A9.txt\r\n\r\nhi\r\n--B--\r\n',
    );
    expect(parseMultipart(ext, 'B')[0]?.filename).toBe('é.txt');
  });

  it('refuses bodies that break their boundary with 400', () => {
    const bad = [
      'no boundary here',
      '--B\r\nContent-Disposition: form-data; name="a"\r\n\r\nunterminated',
      '--B\r\nno-headers-end',
      '--Bxx',
    ];
    for (const b of bad) {
      expect(() => parseMultipart(Buffer.from(b), 'B'), b).toThrow(HttpError);
    }
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
