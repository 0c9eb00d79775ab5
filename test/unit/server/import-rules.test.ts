import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/fixtures';

const SERVER_DIR = path.join(repoRoot, 'src/main/server');
const ALLOWED_DIRS = [SERVER_DIR, path.join(repoRoot, 'src/main/host'), path.join(repoRoot, 'src/shared')];
// ARCHITECTURE.md: server → host + shared (plus node builtins, the WebSocket library, and the multipart parser that
// streams uploads to disk).
const ALLOWED_BARE = new Set(['ws', 'busboy']);

function importsOf(source: string): string[] {
  const found: string[] = [];
  const re = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"]([^'"]+)['"]/g;
  for (const m of source.matchAll(re)) if (m[1] !== undefined) found.push(m[1]);
  return found;
}

describe('src/main/server import rules', () => {
  it('imports only host, shared, node builtins, ws and busboy', async () => {
    const files = (await fs.readdir(SERVER_DIR)).filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(5);
    const violations: string[] = [];
    for (const file of files) {
      const source = await fs.readFile(path.join(SERVER_DIR, file), 'utf8');
      for (const spec of importsOf(source)) {
        if (spec.startsWith('node:') || ALLOWED_BARE.has(spec)) continue;
        if (spec.startsWith('.')) {
          const target = path.resolve(SERVER_DIR, spec);
          if (ALLOWED_DIRS.some((d) => target === d || target.startsWith(d + path.sep))) continue;
        }
        violations.push(`${file}: ${spec}`);
      }
    }
    expect(violations).toEqual([]);
  });
});
