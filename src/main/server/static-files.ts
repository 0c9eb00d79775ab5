/**
 * Serves the built renderer (out/renderer). Only files under the root are
 * reachable: the URL path is decoded once, normalized, joined, and the real
 * path (after symlinks) must still be inside the root.
 */
import { createHash } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import path from 'node:path';
import { contentTypeOf } from '../../shared/content-types';

/** Headers on every HTML page: never framed by another site, never leaking `?token=` in a Referer. */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'content-security-policy': "frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
};

/**
 * Which build of the UI this server serves: a digest of its index.html (which names the build's hashed scripts), or
 * undefined without a build. A page open since another build was served learns from it that it is out of date.
 */
export function uiBuildOf(root: string): string | undefined {
  try {
    return createHash('sha256')
      .update(readFileSync(path.join(root, 'index.html')))
      .digest('hex')
      .slice(0, 16);
  } catch {
    return undefined;
  }
}

/** What a static lookup found. */
export type StaticOutcome = 'served' | 'not-found' | 'bad-path' | 'no-build';

/**
 * Resolves a URL path to a file under `root`, or null when it is outside,
 * malformed, or not a regular file.
 */
export async function resolveStaticFile(root: string, urlPath: string): Promise<string | null | 'bad-path'> {
  let decoded: string;
  try {
    decoded = decodeURIComponent(urlPath);
  } catch {
    return 'bad-path';
  }
  if (decoded.includes('\0') || decoded.includes('\\')) return 'bad-path';
  const rel = decoded === '/' || decoded === '' ? 'index.html' : path.posix.normalize(decoded).replace(/^\/+/, '');
  if (rel.split('/').includes('..')) return 'bad-path';
  let realRoot: string;
  try {
    realRoot = await realpath(root);
  } catch {
    return null;
  }
  const candidate = path.resolve(realRoot, rel);
  if (!candidate.startsWith(realRoot + path.sep)) return 'bad-path';
  try {
    const real = await realpath(candidate);
    if (!real.startsWith(realRoot + path.sep)) return 'bad-path';
    const s = await stat(real);
    return s.isFile() ? real : null;
  } catch {
    return null;
  }
}

/**
 * The page `/` answers when the renderer has not been built. `ownBuild`: `staticDir` is where `npm run build` writes
 * kvdesk's UI (out/renderer); else a folder of the person's (`--static-dir`), which that build does not fill.
 */
export function noBuildPage(staticDir: string, ownBuild = true): string {
  const fix = ownBuild
    ? `<code>index.html</code> there yet. Build it once (in kvdesk's folder), then reload this page:</p>
<pre>npm run build</pre>`
    : `<code>index.html</code> there. That folder is the one <code>--static-dir</code> named: put a built UI in it,
or start <code>kvdesk serve</code> without <code>--static-dir</code> to serve kvdesk's own UI (which
<code>npm run build</code> builds into kvdesk's out/renderer, not there), then reload this page.</p>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvdesk: the UI is not built</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; line-height: 1.5">
<h1>kvdesk is running, but its UI is not built</h1>
<p>The headless server serves the renderer from <code>${escapeHtml(staticDir)}</code>, and there is no
${fix}
<p>The API works already: <a href="/health">/health</a>, <a href="/v1/models">/v1/models</a>,
<a href="/v1/kvdesk/budget">/v1/kvdesk/budget</a>, <a href="/metrics">/metrics</a>, and the OpenAI-compatible
<code>POST /v1/chat/completions</code> and <code>POST /v1/completions</code>.</p>
</body></html>
`;
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Serves `urlPath` from `root` (GET or HEAD). */
export async function serveStatic(
  root: string,
  urlPath: string,
  res: ServerResponse,
  opts: { head: boolean; extraHeaders?: Record<string, string>; ownBuild?: boolean },
): Promise<StaticOutcome> {
  const found = await resolveStaticFile(root, urlPath);
  if (found === 'bad-path') return 'bad-path';
  if (found === null) {
    if (urlPath !== '/' && urlPath !== '/index.html') return 'not-found';
    const page = noBuildPage(root, opts.ownBuild);
    res.writeHead(200, {
      ...PAGE_HEADERS,
      ...opts.extraHeaders,
      'content-type': 'text/html; charset=utf-8',
      'content-length': String(Buffer.byteLength(page)),
      'cache-control': 'no-store',
    });
    res.end(opts.head ? undefined : page);
    return 'no-build';
  }
  const s = await stat(found);
  const type = contentTypeOf(found);
  res.writeHead(200, {
    ...(type.startsWith('text/html') ? PAGE_HEADERS : { 'x-content-type-options': 'nosniff' }),
    ...opts.extraHeaders,
    'content-type': type,
    'content-length': String(s.size),
    // The renderer is rebuilt in place; revalidating is cheap on loopback and never shows a stale UI.
    'cache-control': 'no-cache',
  });
  if (opts.head) {
    res.end();
    return 'served';
  }
  await new Promise<void>((resolve) => {
    const stream = createReadStream(found);
    stream.on('error', () => {
      res.destroy();
      resolve();
    });
    stream.on('end', () => resolve());
    stream.pipe(res);
  });
  return 'served';
}
