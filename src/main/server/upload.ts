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
 * Writing, path confinement and validation are the host's job (importFiles).
 */
import { httpError } from './http-util';

/** A decoded upload, as HostApi.importFiles takes it. */
export interface DecodedUpload {
  name: string;
  files: Array<{ path: string; data: Uint8Array }>;
}

/** One part of a multipart body. */
export interface MultipartPart {
  /** The form field name. */
  name: string;
  /** Present for file parts. */
  filename?: string;
  contentType?: string;
  data: Buffer;
}

function dispositionParams(header: string): Record<string, string> {
  const params: Record<string, string> = {};
  const re = /;\s*([^=;\s]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)/g;
  for (const m of header.matchAll(re)) {
    const key = (m[1] as string).toLowerCase();
    let v = (m[2] as string).trim();
    if (v.startsWith('"')) v = v.slice(1, -1).replace(/\\(.)/g, '$1');
    if (key.endsWith('*')) {
      // RFC 5987: filename*=UTF-8''percent-encoded
      const ext = /^[^']*'[^']*'(.*)$/.exec(v);
      try {
        params[key.slice(0, -1)] = decodeURIComponent(ext ? (ext[1] as string) : v);
      } catch {
        // Keep the plain form if the extended one is malformed.
      }
      continue;
    }
    if (!(key in params)) params[key] = v;
  }
  return params;
}

/** Browsers escape only these three characters in multipart filenames (HTML spec); a literal % stays literal. */
function unescapeFilename(name: string): string {
  return name.replace(/%22/gi, '"').replace(/%0D/gi, '\r').replace(/%0A/gi, '\n');
}

/**
 * Splits a complete multipart/form-data body. Throws HttpError 400 when the
 * body does not follow the boundary it declared.
 */
export function parseMultipart(body: Buffer, boundary: string): MultipartPart[] {
  const delimiter = Buffer.from(`--${boundary}`);
  const separator = Buffer.from(`\r\n--${boundary}`);
  const malformed = (why: string) =>
    httpError(400, `The multipart body is malformed: ${why}.`, 'invalid_multipart', 'body');
  let pos = body.indexOf(delimiter);
  if (pos < 0) throw malformed('the boundary never appears');
  pos += delimiter.length;
  const parts: MultipartPart[] = [];
  for (;;) {
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) return parts; // "--": the closing delimiter
    if (body[pos] !== 0x0d || body[pos + 1] !== 0x0a) throw malformed('a boundary is not followed by CRLF');
    pos += 2;
    const headerEnd = body.indexOf('\r\n\r\n', pos);
    if (headerEnd < 0) throw malformed('a part has no end of headers');
    const headers: Record<string, string> = {};
    for (const line of body.subarray(pos, headerEnd).toString('utf8').split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const next = body.indexOf(separator, headerEnd + 4);
    if (next < 0) throw malformed('the closing boundary is missing');
    const disposition = headers['content-disposition'] ?? '';
    const params = dispositionParams(disposition);
    if (!/^form-data\b/i.test(disposition) || params.name === undefined)
      throw malformed('a part has no form-data name');
    const part: MultipartPart = { name: params.name, data: body.subarray(headerEnd + 4, next) };
    if (params.filename !== undefined) part.filename = unescapeFilename(params.filename);
    if (headers['content-type'] !== undefined) part.contentType = headers['content-type'];
    parts.push(part);
    pos = next + separator.length;
  }
}

/** The boundary of a multipart/form-data Content-Type, or null for any other type. */
export function multipartBoundary(contentType: string | undefined): string | null {
  if (!contentType || !/^multipart\/form-data\b/i.test(contentType)) return null;
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? ((m[1] ?? m[2]) as string) : null;
}

/** Decodes a multipart upload: field `name` plus file parts. */
export function uploadFromMultipart(parts: MultipartPart[]): DecodedUpload {
  const nameField = parts.find((p) => p.filename === undefined && p.name === 'name');
  const files = parts
    .filter((p) => p.filename !== undefined)
    .map((p) => ({
      path: p.filename as string,
      data: new Uint8Array(p.data.buffer, p.data.byteOffset, p.data.byteLength),
    }));
  const name = nameField?.data.toString('utf8').trim() || (files[0]?.path.split('/')[0] ?? '');
  if (name.length === 0)
    throw httpError(400, 'The upload has no "name" field and no files to name it after.', 'invalid_upload', 'name');
  return { name, files };
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
