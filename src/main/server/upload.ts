/**
 * Decoding of a browser folder upload (POST /api/models/upload). Two forms:
 *
 * - `multipart/form-data` (what a page sends with FormData): a text field
 *   `name` (the folder's name) and one part per file whose filename is the
 *   file's path inside the folder (`fd.append('file', file, 'pkg/onnx/model.onnx')`).
 *   Bytes stay bytes, so this is the form for real weights.
 * - `application/json`: `{ name, files: [{ path, dataBase64 }] }`, handy for
 *   small packages and scripts; base64 lives in one JS string, so it is capped
 *   lower than multipart.
 *
 * A multipart body is streamed to a folder on disk as it arrives (receiveMultipart), never held in memory;
 * validation is the host's job (importStaged, importFiles).
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import busboy from 'busboy';
import type { ImportedPackage } from '../../shared/api';
import { KvdeskError, type Result } from '../../shared/errors';
import { safeRelativePath, uploadPathCheck, uploadWriteError } from '../host/host-api';
import { bodyStalled, drainUnreadBody, errorFromInfo, HttpError, httpError, sendJson, tooLarge } from './http-util';

/** A decoded upload, as HostApi.importFiles takes it. */
export interface DecodedUpload {
  name: string;
  files: Array<{ path: string; data: Uint8Array }>;
}

/**
 * The upload's `load` query parameter: left out (or `true`, `1`) the package loads once it is in; `false` (or
 * `0`) leaves it checked and in the library, for the window's card to load as the person picks.
 */
export function uploadLoads(url: URL): boolean {
  const given = url.searchParams.get('load');
  if (given === null || given === 'true' || given === '1') return true;
  if (given === 'false' || given === '0') return false;
  throw httpError(
    400,
    `the query parameter load is "${given}": give load=false to add the package without loading it, or leave it out to load it`,
    'invalid_request',
    'load',
  );
}

/**
 * The upload's answer, in the Result envelope: loaded, its value is the model (ModelInfo, as it always was);
 * with load=false, the package's copy in the library (ImportedPackage: root and spec).
 */
export function sendImported(
  res: ServerResponse,
  result: Result<ImportedPackage>,
  loaded: boolean,
  /** Its request, whose body's rest is dropped when it was not read (refused before): drainUnreadBody. */
  req?: IncomingMessage,
): void {
  if (!result.ok) {
    // A full disk (HostApi.uploadNoRoom): 507 Insufficient Storage, not a bug's 500.
    const status = result.error.detail?.diskFull === true ? 507 : errorFromInfo(result.error).status;
    sendJson(res, status, result);
    if (req) drainUnreadBody(req);
    return;
  }
  const { model, ...kept } = result.value;
  sendJson(res, 200, { ok: true, value: loaded && model ? model : kept });
}

/** Browsers escape only these three characters in multipart filenames (HTML spec); a literal % stays literal. */
function unescapeFilename(name: string): string {
  return name.replace(/%22/gi, '"').replace(/%0D/gi, '\r').replace(/%0A/gi, '\n');
}

/** The boundary of a multipart/form-data Content-Type, or null for any other type. */
export function multipartBoundary(contentType: string | undefined): string | null {
  if (!contentType || !/^multipart\/form-data\b/i.test(contentType)) return null;
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? ((m[1] ?? m[2]) as string) : null;
}

/** Decodes a JSON upload `{ name, files: [{ path, dataBase64 }] }`. */
export function uploadFromJson(body: unknown): DecodedUpload {
  const bad = (why: string, param: string) =>
    httpError(400, `The upload is malformed: ${why}.`, 'invalid_upload', param);
  if (!body || typeof body !== 'object') throw bad('the body must be an object { name, files }', 'body');
  const { name, files } = body as { name?: unknown; files?: unknown };
  if (typeof name !== 'string' || name.trim().length === 0) throw bad('"name" must be a non-empty string', 'name');
  if (!Array.isArray(files)) throw bad('"files" must be an array of { path, dataBase64 }', 'files');
  return {
    name: name.trim(),
    files: files.map((f: unknown, i) => {
      const file = f as { path?: unknown; dataBase64?: unknown } | null;
      if (!file || typeof file.path !== 'string' || typeof file.dataBase64 !== 'string') {
        throw bad(`files[${i}] must be { path: string, dataBase64: string }`, `files[${i}]`);
      }
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(file.dataBase64))
        throw bad(`files[${i}].dataBase64 is not base64`, `files[${i}].dataBase64`);
      const data = Buffer.from(file.dataBase64, 'base64');
      return { path: file.path, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
    }),
  };
}

/**
 * Streams a browser's multipart upload (a text field `name`, one file part per file, named by its path in the
 * folder) into `dir`, each file written as its bytes arrive; returns the upload's name (the field, else the
 * first file's folder). Refuses with 413 past `limit` bytes (`raise`: how the person running the server raises
 * it), with 400 for a path that leaves the folder, a body that breaks its boundary or one cut off (its client
 * gone, at any point). It settles once each file it wrote is closed, so the caller may remove `dir` then.
 */
export function receiveMultipart(
  req: Readable & { headers: IncomingHttpHeaders },
  dir: string,
  limit: number,
  raise?: string,
): Promise<string> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(tooLarge(declared, limit, raise));
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      parser = busboy({ headers: req.headers, preservePath: true, defParamCharset: 'utf8' });
    } catch (err) {
      reject(
        httpError(400, `The multipart body is malformed: ${(err as Error).message}.`, 'invalid_multipart', 'body'),
      );
      return;
    }
    let received = 0;
    const check = uploadPathCheck();
    let name: string | undefined;
    let first: string | undefined;
    let failed = false;
    const writes: Array<Promise<void>> = [];
    /**
     * File parts being written, each with the stream that counts its bytes and the file it goes to: a failure
     * destroys all three, the rest of the body is dropped. Each is destroyed, as none alone settles every
     * pipeline: a part whose end busboy had read but not yet emitted counts as done to pipeline once destroyed, and
     * a count destroyed after its part ended but before its own end reached the file leaves that file waiting for
     * ever (it never finishes nor closes, and the upload is never answered: seen on a loaded machine).
     */
    const open = new Map<Readable, { counted: Transform; file?: WriteStream }>();
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      req.unpipe(parser);
      req.resume();
      for (const [stream, { counted, file }] of open) {
        counted.destroy();
        stream.destroy();
        file?.destroy();
      }
      // The files being written close first: the folder the caller removes next has nothing more coming.
      void Promise.allSettled(writes).then(() => reject(err));
    };
    /** The client went before the body's end (a cancelled upload, a closed tab): nothing more comes. */
    const cutOff = () =>
      fail(
        httpError(
          400,
          'The upload was cut off: the connection closed before the end of its body. Send the whole folder again.',
          'invalid_upload',
          'body',
        ),
      );
    // A body that stops coming: answered once the connection's idle timeout passes with nothing, as a JSON body is.
    req.on('timeout', () => fail(bodyStalled((req as { socket?: { timeout?: number } }).socket?.timeout)));
    parser.on('field', (field, value) => {
      if (field === 'name') name = value.trim();
    });
    parser.on('file', (_field, stream, info) => {
      if (failed) {
        stream.resume();
        return;
      }
      const raw = unescapeFilename(info.filename ?? '');
      let rel: string;
      try {
        rel = safeRelativePath(raw);
        check(rel);
      } catch (err) {
        stream.resume();
        fail(httpError(400, (err as KvdeskError).message, 'invalid_upload', 'file'));
        return;
      }
      first ??= rel;
      const target = path.join(dir, rel);
      const counted = new Transform({
        transform(chunk: Buffer, _enc, done) {
          received += chunk.length;
          if (received > limit) done(tooLarge(received, limit, raise));
          else done(null, chunk);
        },
      });
      const writing: { counted: Transform; file?: WriteStream } = { counted };
      open.set(stream, writing);
      writes.push(
        (async () => {
          await mkdir(path.dirname(target), { recursive: true });
          // Failed meanwhile (the part is destroyed): no file is made in the folder the caller removes next.
          if (failed) return;
          const file = createWriteStream(target, { flags: 'wx' });
          writing.file = file;
          try {
            await pipeline(stream, counted, file);
          } finally {
            // pipeline settles at an error before the file has closed: the caller hears once nothing is written.
            if (!file.closed) await new Promise<void>((closed) => file.once('close', () => closed()));
          }
          open.delete(stream);
        })().catch((err: unknown) => {
          open.delete(stream);
          stream.resume();
          // A path the disk refuses is said with the path in the upload, never the staging folder's.
          const said = err instanceof HttpError ? err : uploadWriteError(err, rel);
          fail(
            said instanceof KvdeskError && said.code === 'BAD_REQUEST'
              ? httpError(400, said.message, 'invalid_upload', 'file')
              : said,
          );
        }),
      );
    });
    parser.on('close', () => {
      void Promise.all(writes).then(() => {
        if (failed) return;
        const named = name || first?.split('/')[0] || '';
        if (named.length === 0) {
          fail(
            httpError(400, 'The upload has no "name" field and no files to name it after.', 'invalid_upload', 'name'),
          );
        } else resolve(named);
      });
    });
    parser.on('error', (err: Error) =>
      fail(httpError(400, `The multipart body is malformed: ${err.message}.`, 'invalid_multipart', 'body')),
    );
    req.on('error', fail);
    // A request gone before this ran (its client left while the caller made the folder) emits nothing more: no
    // 'end' reaches the parser and no 'error' (nobody listened then), so it is told here.
    req.on('close', () => {
      if (!req.readableEnded) cutOff();
    });
    if (req.destroyed) cutOff();
    else req.pipe(parser);
  });
}
