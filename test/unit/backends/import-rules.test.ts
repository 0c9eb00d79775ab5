import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/fixtures';

const BACKENDS_DIR = path.join(repoRoot, 'src/main/backends');
// backends → shared, packages (provider names), scheduler (byte formatting), node builtins, onnxruntime-node, onnx-proto;
// never host, server or ipc: those depend on backends, not the other way.
const ALLOWED_DIRS = ['src/main/backends', 'src/main/packages', 'src/main/scheduler', 'src/shared'].map((d) =>
  path.join(repoRoot, d),
);
const ALLOWED_BARE = new Set(['onnxruntime-node', 'onnx-proto']);

function importsOf(source: string): string[] {
  const found: string[] = [];
  const re = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"]([^'"]+)['"]/g;
  for (const m of source.matchAll(re)) if (m[1] !== undefined) found.push(m[1]);
  return found;
}

describe('src/main/backends import rules', () => {
  it('imports nothing from host, server or ipc', async () => {
    const files = (await fs.readdir(BACKENDS_DIR)).filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(4);
    const violations: string[] = [];
    for (const file of files) {
      const source = await fs.readFile(path.join(BACKENDS_DIR, file), 'utf8');
      for (const spec of importsOf(source)) {
        if (spec.startsWith('node:') || ALLOWED_BARE.has(spec)) continue;
        if (spec.startsWith('.')) {
          const target = path.resolve(BACKENDS_DIR, spec);
          if (ALLOWED_DIRS.some((d) => target === d || target.startsWith(d + path.sep))) continue;
        }
        violations.push(`${file}: ${spec}`);
      }
    }
    expect(violations).toEqual([]);
  });
});
