/**
 * A local imitation of the Hugging Face Hub's file API, for tests of hub downloads (src/main/host/hub-download.ts).
 *
 * - GET /api/models/{owner}/{name}/tree/{rev}?recursive=true: the files (and folders) as the hub lists them: `oid`
 *   the git blob sha1; LFS files (`*.onnx`, `*.onnx_data*`, or at least `lfsMinBytes`) with `lfs: {oid: sha256,
 *   size, pointerSize}` and `oid` the sha1 of their pointer. With `pageSize`, pages linked by `Link: <…>; rel="next"`.
 * - GET /api/models?search=…&filter=…&pipeline_tag=…&sort=downloads&limit=…&expand=…: the repositories whose id holds
 *   `search` as one piece (case aside), with each `filter` among their tags (a repo with an .onnx file is tagged `onnx`) and the
 *   pipeline tag asked (`text-generation` unless `meta` says otherwise), most downloaded first, in the fields
 *   `expand` names (and `id`, `_id`), as the hub answers.
 * - GET /api/models/{owner}/{name}/revision/{rev}: `{id, sha}`, the commit the revision is at (every revision in
 *   `revisions` is a branch at the repository's head; a commit is its own).
 * - Revisions are branches at the head commit, or a commit's sha: `hub.push(repo, files)` makes a new head (the
 *   branch moves on; the files at the old commit stay reachable by its sha).
 * - GET /{owner}/{name}/resolve/{rev}/{path}: a small file itself; an LFS file redirects (302) to /cdn/{sha256}.
 *   Both answer `Range: bytes=N-` with 206 and the rest.
 * - 401 without the right `Authorization: Bearer <token>` for a gated repo, and for an unknown repo without a token
 *   (as the hub hides private ones); 404 for an unknown repo with a token, and for an unknown revision or file.
 *
 * Faults, settable any time through `hub.faults`: `cutAfter` (the next download of that path sends `bytes` bytes of
 * its body, then the socket is destroyed; once; with `after`, only once those paths were sent whole), `hold` (downloads of
 * that path send half of it, then the rest once `until` returns true), `holdListing` (the listing's requests answered once
 * it returns true), `corrupt` (paths served with their first byte flipped),
 * `ignoreRange` (200 and the whole file, whatever the Range), `refuseRange` (416 to every Range, as a server or proxy
 * that will not serve a part's rest), `silent` (no answer at all). `requests` logs every request; `served` counts the body bytes sent of each
 * path. A Range from the file's end or past it is a 416 (RFC 9110), as the hub's.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { defaultModelDir } from './fixtures';

export interface FakeHubOptions {
  /** Entries per tree page (default: all on one page). */
  pageSize?: number;
  /** Repos ("owner/name") that need `token`. */
  gated?: Set<string>;
  token?: string;
  /** Files at least this big are LFS (besides *.onnx and *.onnx_data*); default 10 MiB. */
  lfsMinBytes?: number;
  /** Revisions that exist (every repo has the same files at each); default ['main']. */
  revisions?: string[];
  /** What the model list says of a repo (defaults: 0 downloads and likes, text-generation, tags from its files). */
  meta?: Record<string, RepoMeta>;
}

export interface RepoMeta {
  downloads?: number;
  likes?: number;
  lastModified?: string;
  pipeline_tag?: string;
  library_name?: string;
  tags?: string[];
}

export interface FakeHubFaults {
  /**
   * With `after`: the cut waits until it returns true (the test's view of the client: files it has in place), so
   * what it names completes first.
   */
  cutAfter?: { path: string; bytes: number; after?: () => boolean } | undefined;
  /** Downloads of this path send half the file, then nothing more until the client goes (a stalled transfer). */
  stall?: string | undefined;
  /** Downloads of `path` send half the file, then the rest once `until` returns true (a transfer held half way). */
  hold?: { path: string; until: () => boolean } | undefined;
  /** Requests are taken and never answered (no status, no headers), as a hub that hangs. */
  silent?: boolean;
  /** The listing's requests (a revision's commit, the file tree) are answered once it returns true. */
  holdListing?: (() => boolean) | undefined;
  corrupt: Set<string>;
  ignoreRange: boolean;
  refuseRange: boolean;
}

export interface FakeRequest {
  method: string;
  path: string;
  range?: string;
  auth?: string;
}

export interface FakeHub {
  url: string;
  requests: FakeRequest[];
  /** Body bytes sent of each file path ("onnx/model.onnx"), all requests together. */
  served: Map<string, number>;
  faults: FakeHubFaults;
  options: Required<Omit<FakeHubOptions, 'token'>> & { token?: string };
  /** The commit a repository's branches are at. */
  head(repo: string): string;
  /** A new commit of the repository with these files: its branches move there. */
  push(repo: string, files: Record<string, Buffer | string>): string;
  close(): Promise<void>;
}

const sha = (alg: string, data: Buffer | string) => createHash(alg).update(data).digest('hex');
const gitBlob = (data: Buffer) => sha('sha1', Buffer.concat([Buffer.from(`blob ${data.length}\0`), data]));

export async function startFakeHub(
  repos: Record<string, Record<string, Buffer | string>>,
  opts: FakeHubOptions = {},
): Promise<FakeHub> {
  const options = {
    pageSize: opts.pageSize ?? Number.POSITIVE_INFINITY,
    gated: opts.gated ?? new Set<string>(),
    lfsMinBytes: opts.lfsMinBytes ?? 10 * 1024 * 1024,
    revisions: opts.revisions ?? ['main'],
    meta: opts.meta ?? {},
    ...(opts.token ? { token: opts.token } : {}),
  };
  const faults: FakeHubFaults = { corrupt: new Set(), ignoreRange: false, refuseRange: false };
  const requests: FakeRequest[] = [];
  const served = new Map<string, number>();
  const isLfs = (p: string, data: Buffer) => /\.onnx$|\.onnx_data/.test(p) || data.length >= options.lfsMinBytes;
  const bytesOf = (v: Buffer | string) => (typeof v === 'string' ? Buffer.from(v) : v);
  const cdn = new Map<string, { path: string; data: Buffer }>(); // sha256 → file, registered by its redirect
  // Commits: each repository's head, and the files of every commit by `repo@sha`.
  const heads = new Map<string, string>();
  const commits = new Map<string, Record<string, Buffer | string>>();
  const commit = (repo: string, files: Record<string, Buffer | string>) => {
    const id = sha('sha1', `${repo}#${commits.size}`);
    commits.set(`${repo}@${id}`, files);
    heads.set(repo, id);
    repos[repo] = files;
    return id;
  };
  for (const [repo, files] of Object.entries(repos)) commit(repo, files);
  /** The files of a repository at a revision (a branch: its head), or undefined when it has no such revision. */
  const filesAt = (repo: string, rev: string) =>
    options.revisions.includes(rev) ? repos[repo] : commits.get(`${repo}@${rev}`);

  function tree(repo: string, rev: string): object[] {
    const files = Object.entries(filesAt(repo, rev) ?? {}).sort(([a], [b]) => a.localeCompare(b));
    const dirs = new Set(
      files.flatMap(([p]) =>
        p
          .split('/')
          .slice(0, -1)
          .map((_, i, a) => a.slice(0, i + 1).join('/')),
      ),
    );
    return [
      ...[...dirs].sort().map((p) => ({ type: 'directory', oid: sha('sha1', p), size: 0, path: p })),
      ...files.map(([p, v]) => {
        const data = bytesOf(v);
        if (!isLfs(p, data)) return { type: 'file', oid: gitBlob(data), size: data.length, path: p };
        const sha256 = sha('sha256', data);
        const pointer = Buffer.from(
          `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256}\nsize ${data.length}\n`,
        );
        const lfs = { oid: sha256, size: data.length, pointerSize: pointer.length };
        return { type: 'file', oid: gitBlob(pointer), size: data.length, lfs, path: p };
      }),
    ];
  }

  /** The model list's answer to `url`'s query. */
  function search(url: URL): string {
    const q = (url.searchParams.get('search') ?? '').toLowerCase();
    const filters = url.searchParams.getAll('filter');
    const pipeline = url.searchParams.get('pipeline_tag');
    const expand = url.searchParams.getAll('expand');
    const limit = Number(url.searchParams.get('limit') ?? 1000);
    const hits = Object.keys(repos)
      .map((id) => {
        const m = options.meta[id] ?? {};
        const files = Object.keys(repos[id] ?? {});
        const tags = m.tags ?? (files.some((f) => f.endsWith('.onnx')) ? ['onnx'] : []);
        const full: Record<string, unknown> = {
          _id: sha('sha1', id).slice(0, 24),
          id,
          downloads: m.downloads ?? 0,
          likes: m.likes ?? 0,
          lastModified: m.lastModified ?? '2026-11-01T00:00:00.000Z',
          gated: options.gated.has(id) ? 'manual' : false,
          private: false,
          pipeline_tag: m.pipeline_tag ?? 'text-generation',
          ...(m.library_name ? { library_name: m.library_name } : {}),
          tags,
        };
        return full;
      })
      .filter(
        (h) =>
          String(h.id).toLowerCase().includes(q) &&
          filters.every((f) => (h.tags as string[]).includes(f)) &&
          (!pipeline || h.pipeline_tag === pipeline),
      )
      .sort((a, b) => (b.downloads as number) - (a.downloads as number))
      .slice(0, limit)
      .map((h) =>
        expand.length === 0
          ? h
          : Object.fromEntries(Object.entries(h).filter(([k]) => k === 'id' || k === '_id' || expand.includes(k))),
      );
    return JSON.stringify(hits);
  }

  function sendFile(req: http.IncomingMessage, res: http.ServerResponse, filePath: string, original: Buffer): void {
    let data = original;
    if (faults.corrupt.has(filePath) && data.length > 0) {
      data = Buffer.from(data);
      data[0] = (data[0] as number) ^ 0xff;
    }
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const from = m && !faults.ignoreRange ? Number(m[1]) : 0;
    if (m && !faults.ignoreRange && (from >= data.length || faults.refuseRange)) {
      return void res.writeHead(416, { 'content-range': `bytes */${data.length}` }).end();
    }
    let body = data.subarray(from);
    res.writeHead(m && !faults.ignoreRange ? 206 : 200, {
      'content-type': 'application/octet-stream',
      'content-length': body.length,
      'accept-ranges': 'bytes',
      ...(m && !faults.ignoreRange ? { 'content-range': `bytes ${from}-${data.length - 1}/${data.length}` } : {}),
    });
    const cut = faults.cutAfter?.path === filePath ? faults.cutAfter : undefined;
    if (cut) {
      faults.cutAfter = undefined;
      body = body.subarray(0, cut.bytes);
    }
    if (faults.stall === filePath) body = body.subarray(0, body.length >> 1);
    served.set(filePath, (served.get(filePath) ?? 0) + body.length);
    const hold = faults.hold?.path === filePath ? faults.hold : undefined;
    if (faults.stall === filePath) res.write(body);
    else if (hold) {
      const half = body.length >> 1;
      res.write(body.subarray(0, half));
      const rest = () => {
        if (res.destroyed) return;
        if (hold.until()) res.end(body.subarray(half));
        else setTimeout(rest, 10);
      };
      rest();
    } else if (cut) {
      const send = () => res.write(body, () => res.socket?.destroy());
      const after = cut.after;
      // Without `after`, a moment for the files already under way (the client aborts the others when the cut comes).
      if (!after) setTimeout(send, 100);
      else {
        const ready = () => void (after() ? send() : setTimeout(ready, 10));
        ready();
      }
    } else res.end(body);
  }

  const handle = (req: http.IncomingMessage, res: http.ServerResponse): unknown => {
    const url = new URL(req.url ?? '/', base);
    requests.push({
      method: req.method ?? 'GET',
      path: url.pathname + url.search,
      ...(req.headers.range ? { range: req.headers.range } : {}),
      ...(req.headers.authorization ? { auth: req.headers.authorization } : {}),
    });
    if (faults.silent) return;
    const until = faults.holdListing;
    if (until && /^\/api\/models\/[^/]+\/[^/]+\/(tree|revision)\//.test(url.pathname)) {
      const answer = () => {
        if (res.destroyed) return;
        if (until()) respond(req, res, url);
        else setTimeout(answer, 10);
      };
      return answer();
    }
    return respond(req, res, url);
  };

  const respond = (req: http.IncomingMessage, res: http.ServerResponse, url: URL): unknown => {
    const fail = (status: number, error: string) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ error }));
    const segs = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (url.pathname === '/api/models')
      return res.writeHead(200, { 'content-type': 'application/json' }).end(search(url));
    if (segs[0] === 'cdn') {
      // A signed URL on another origin: as S3 behind the hub's CDN, a request that also brings a token is refused.
      if (req.headers.authorization) return fail(400, 'Only one auth mechanism allowed');
      const hit = cdn.get(segs[1] ?? '');
      return hit ? sendFile(req, res, hit.path, hit.data) : fail(404, 'Entry not found');
    }
    const api = segs[0] === 'api' && segs[1] === 'models' && (segs[4] === 'tree' || segs[4] === 'revision');
    const [owner, name, kind, rev, ...rest] = api ? segs.slice(2) : segs;
    const repo = `${owner}/${name}`;
    if ((api ? kind !== 'tree' && kind !== 'revision' : kind !== 'resolve') || !rev) return fail(404, 'Not found');
    // As the hub: without a token, an unknown repository is a 401 (private ones are hidden), with one a 404.
    if (!repos[repo])
      return req.headers.authorization ? fail(404, 'Repository not found') : fail(401, 'Invalid username or password.');
    if (options.gated.has(repo) && req.headers.authorization !== `Bearer ${options.token}`) {
      return fail(401, `Access to model ${repo} is restricted. You must have access to it and be authenticated.`);
    }
    const files = filesAt(repo, rev);
    if (!files) return fail(404, 'Revision not found');
    if (api && kind === 'revision') {
      const at = options.revisions.includes(rev) ? (heads.get(repo) as string) : rev;
      return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: repo, sha: at }));
    }
    if (api) {
      const all = tree(repo, rev);
      const at = Number(url.searchParams.get('cursor') ?? 0);
      const next = at + options.pageSize;
      if (next < all.length) {
        const link = new URL(url);
        link.searchParams.set('cursor', String(next));
        res.setHeader('link', `<${link.href}>; rel="next"`);
      }
      return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(all.slice(at, next)));
    }
    const filePath = rest.join('/');
    const content = files[filePath];
    if (content === undefined) return fail(404, 'Entry not found');
    const data = bytesOf(content);
    if (!isLfs(filePath, data)) return sendFile(req, res, filePath, data);
    const sha256 = sha('sha256', data);
    cdn.set(sha256, { path: filePath, data });
    res.writeHead(302, { location: `${cdnBase}/cdn/${sha256}` }).end();
  };
  const server = http.createServer(handle);
  // The CDN large files redirect to: another origin, as the hub's.
  const cdnServer = http.createServer(handle);
  const listen = (srv: http.Server) =>
    new Promise<string>((resolve) =>
      srv.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(srv.address() as AddressInfo).port}`)),
    );
  const base = await listen(server);
  const cdnBase = await listen(cdnServer);
  return {
    url: base,
    requests,
    served,
    faults,
    options,
    head: (repo) => heads.get(repo) as string,
    push: commit,
    close: async () => {
      for (const srv of [server, cdnServer]) {
        await new Promise<void>((resolve, reject) => {
          srv.closeAllConnections();
          srv.close((err) => (err ? reject(err) : resolve()));
        });
      }
    },
  };
}

/**
 * The generated default model as a transformers.js-style repository (config, tokenizer, onnx/model.onnx) with a
 * second graph, onnx/model_q4.onnx (the same bytes: a variant to choose, q4 first on a CPU).
 */
export function defaultModelRepo(): Record<string, Buffer | string> {
  const read = (rel: string) => readFileSync(path.join(defaultModelDir, rel));
  const graph = read('onnx/model.onnx');
  return {
    ...Object.fromEntries(
      ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'].map((f) => [f, read(f)]),
    ),
    'README.md': '# tiny chat\n',
    'onnx/model.onnx': graph,
    'onnx/model_q4.onnx': graph,
  };
}
