import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/fixtures';

const PACKAGES_DIR = path.join(repoRoot, 'src/main/packages');
const SHARED_DIR = path.join(repoRoot, 'src/shared');
// ARCHITECTURE.md: packages → shared + node builtins (+ the parsing libraries they need); never onnxruntime.
const ALLOWED_BARE = new Set(['yaml', 'zod', 'onnx-proto']);

/** Import specifiers of a TypeScript source (static, dynamic and type-only imports and re-exports). */
function importsOf(source: string): string[] {
  const found: string[] = [];
  const re = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"]([^'"]+)['"]/g;
  for (const m of source.matchAll(re)) if (m[1] !== undefined) found.push(m[1]);
  return found;
}

describe('src/main/packages import rules', () => {
  it('parses the import forms it must police', () => {
    expect(
      importsOf(
        `import a from 'x';\nimport type { B } from "y";\nexport { c } from './z';\nconst d = await import('w');\nimport 'side';`,
      ),
    ).toEqual(['x', 'y', './z', 'w', 'side']);
  });

  it('imports only shared, node builtins, its own modules and yaml/zod/onnx-proto', async () => {
    const files = (await fs.readdir(PACKAGES_DIR)).filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(5);
    const violations: string[] = [];
    for (const file of files) {
      const source = await fs.readFile(path.join(PACKAGES_DIR, file), 'utf8');
      for (const spec of importsOf(source)) {
        if (spec.startsWith('node:') || ALLOWED_BARE.has(spec)) continue;
        if (spec.startsWith('.')) {
          const target = path.resolve(PACKAGES_DIR, spec);
          if (target.startsWith(PACKAGES_DIR + path.sep) || target.startsWith(SHARED_DIR + path.sep)) continue;
        }
        violations.push(`${file}: ${spec}`);
      }
    }
    expect(violations).toEqual([]);
  });
});
