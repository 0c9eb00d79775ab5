/**
 * The engine process loads only what it needs: its own modules, a few shared
 * ones, node builtins and onnxruntime-node. Its KV tensors trigger a garbage
 * collection every step or two, and each collection marks the whole heap: a
 * schema library in there (zod: ~3 MB of heap) made every decode step measurably
 * slower. This walks the value imports (not `import type`) from the entry.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/fixtures';

const ENTRY = path.join(repoRoot, 'src/main/engine/process.ts');

function valueImports(source: string): string[] {
  const found: string[] = [];
  const re = /^\s*(?:import|export)\s+(?!type\b)(?:[^'";]*?\bfrom\s*)?['"]([^'"]+)['"]/gm;
  for (const m of source.matchAll(re)) if (m[1] !== undefined) found.push(m[1]);
  return found;
}

function resolveTs(from: string, spec: string): string {
  const base = path.resolve(path.dirname(from), spec);
  for (const candidate of [base, `${base}.ts`, path.join(base, 'index.ts')]) {
    try {
      if (readFileSync(candidate) && candidate.endsWith('.ts')) return candidate;
    } catch {
      // try the next form
    }
  }
  throw new Error(`${from}: cannot resolve ${spec}`);
}

describe('the engine process', () => {
  it('loads no npm package but onnxruntime-node', () => {
    const seen = new Set<string>();
    const bare = new Set<string>();
    const stack = [ENTRY];
    while (stack.length > 0) {
      const file = stack.pop() as string;
      if (seen.has(file)) continue;
      seen.add(file);
      for (const spec of valueImports(readFileSync(file, 'utf8'))) {
        if (spec.startsWith('.')) stack.push(resolveTs(file, spec));
        else if (!spec.startsWith('node:')) bare.add(spec);
      }
    }
    expect(seen.size).toBeGreaterThan(5);
    expect([...seen].map((f) => path.relative(repoRoot, f))).toContain('src/shared/errors.ts');
    expect([...bare].sort()).toEqual(['onnxruntime-node']);
  });
});
