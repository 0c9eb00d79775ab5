import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { noBuildPage, resolveStaticFile } from '../../../src/main/server/static-files';
import { contentTypeOf } from '../../../src/shared/content-types';

let base: string;
let root: string;
beforeAll(async () => {
  base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'kvdesk-static-unit-')));
  root = path.join(base, 'root');
  await mkdir(path.join(root, 'assets'), { recursive: true });
  await writeFile(path.join(root, 'index.html'), 'i');
  await writeFile(path.join(root, 'assets/a.js'), 'a');
  await writeFile(path.join(base, 'secret.txt'), 's');
  await symlink(path.join(base, 'secret.txt'), path.join(root, 'assets/out.txt'));
  await symlink(path.join(root, 'assets/a.js'), path.join(root, 'assets/in.js'));
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('resolveStaticFile', () => {
  it('maps / to index.html and paths to files under the root', async () => {
    expect(await resolveStaticFile(root, '/')).toBe(path.join(root, 'index.html'));
    expect(await resolveStaticFile(root, '/assets/a.js')).toBe(path.join(root, 'assets/a.js'));
    expect(await resolveStaticFile(root, '/assets/%61.js')).toBe(path.join(root, 'assets/a.js'));
    // A link that stays inside the root is fine.
    expect(await resolveStaticFile(root, '/assets/in.js')).toBe(path.join(root, 'assets/a.js'));
  });

  it('finds nothing for directories and missing files', async () => {
    expect(await resolveStaticFile(root, '/assets')).toBeNull();
    expect(await resolveStaticFile(root, '/nope.js')).toBeNull();
    expect(await resolveStaticFile(path.join(base, 'missing'), '/')).toBeNull();
  });

  it('refuses every way out of the root', async () => {
    // Paths a URL parser would not produce are checked too: the function must not rely on its caller.
    for (const p of [
      '../secret.txt',
      'assets/../../secret.txt',
      '/a\\..\\..\\secret.txt',
      '/%00',
      '/%E0%A4%A',
      '/assets/out.txt',
    ]) {
      expect(await resolveStaticFile(root, p), p).toBe('bad-path');
    }
    // A leading slash keeps ".." inside the root: these resolve to files that do not exist there.
    for (const p of ['/../secret.txt', '/assets/..%2f..%2fsecret.txt', '/..%2fsecret.txt']) {
      expect(await resolveStaticFile(root, p), p).toBeNull();
    }
  });
});

describe('noBuildPage', () => {
  it("says npm run build for kvdesk's own out/renderer, and for a --static-dir folder what fills that one", () => {
    expect(noBuildPage('/k/out/renderer')).toContain('<pre>npm run build</pre>');
    const own = noBuildPage('/srv/ui', false);
    expect(own).toContain('<code>/srv/ui</code>');
    expect(own).toContain('put a built UI in it');
    expect(own).not.toContain('<pre>npm run build</pre>');
  });
});

describe('contentTypeOf', () => {
  it('knows the renderer build types and falls back to octet-stream', () => {
    expect(contentTypeOf('index.html')).toBe('text/html; charset=utf-8');
    expect(contentTypeOf('a.JS')).toBe('text/javascript; charset=utf-8');
    expect(contentTypeOf('a.css')).toBe('text/css; charset=utf-8');
    expect(contentTypeOf('a.svg')).toBe('image/svg+xml');
    expect(contentTypeOf('a.woff2')).toBe('font/woff2');
    expect(contentTypeOf('a.wasm')).toBe('application/wasm');
    expect(contentTypeOf('a.bin')).toBe('application/octet-stream');
  });
});
