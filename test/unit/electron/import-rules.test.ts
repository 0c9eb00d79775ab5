/**
 * ARCHITECTURE.md's import rules, checked on every file under src/:
 *   shared → nothing but zod; scheduler → shared (pure: no node, no packages);
 *   packages, tokenizer, store → shared + node; engine → packages, tokenizer, shared, onnxruntime-node;
 *   host → all of main but ipc/server and the Electron files; ipc, server → host + shared;
 *   renderer → shared only (no node builtins); preload → electron at run time, shared types only;
 *   only main/index.ts, main/window.ts, main/ipc/ (and the preload) import electron; the composition roots
 *   (main/index.ts, cli) wire the transports, ipc and server.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/fixtures';

const SRC = path.join(repoRoot, 'src');

/** One import of a file. */
interface Import {
  spec: string;
  /** `import type …` / `export type …`, or every named specifier marked `type`. */
  typeOnly: boolean;
}

/** Import specifiers of a source: static (incl. type-only), re-exports, side-effect, dynamic, require. */
function importsOf(source: string): Import[] {
  const found: Import[] = [];
  const statement = /^[ \t]*(import|export)\s+(type\s+)?([^;'"]*?)\s*from\s*['"]([^'"]+)['"]/gm;
  for (const m of source.matchAll(statement)) {
    const clause = m[3] ?? '';
    const names = /^\{([^}]*)\}$/.exec(clause.trim())?.[1];
    const allTyped = Boolean(
      names
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean)
        .every((s) => s.startsWith('type ')),
    );
    found.push({ spec: m[4] as string, typeOnly: Boolean(m[2]) || allTyped });
  }
  for (const m of source.matchAll(/^[ \t]*import\s*['"]([^'"]+)['"]/gm))
    found.push({ spec: m[1] as string, typeOnly: false });
  for (const m of source.matchAll(/\b(?:import|require)\s*\(\s*['"]([^'"]+)['"]\s*\)/g)) {
    // Skip mentions in comments (JSDoc lines, // comments): only code loads modules.
    const lineStart = source.lastIndexOf('\n', m.index) + 1;
    const before = source.slice(lineStart, m.index).trimStart();
    if (before.startsWith('*') || before.startsWith('/*') || before.includes('//')) continue;
    found.push({ spec: m[1] as string, typeOnly: false });
  }
  return found;
}

type Area =
  | 'shared'
  | 'scheduler'
  | 'packages'
  | 'tokenizer'
  | 'store'
  | 'engine'
  | 'host'
  | 'ipc'
  | 'server'
  | 'main-index'
  | 'main-window'
  | 'main-other'
  | 'preload'
  | 'renderer'
  | 'cli'
  | 'other';

/** The architectural area of a path under src/ (relative to src, '/'-separated, extension optional). */
function areaOf(relToSrc: string): Area {
  const p = relToSrc.replace(/\\/g, '/').replace(/\.(ts|tsx)$/, '');
  const [top, second] = p.split('/');
  if (top === 'shared' || top === 'preload' || top === 'renderer' || top === 'cli') return top;
  if (top !== 'main') return 'other';
  if (p === 'main/index') return 'main-index';
  if (p === 'main/window') return 'main-window';
  switch (second) {
    case 'scheduler':
    case 'packages':
    case 'tokenizer':
    case 'store':
    case 'engine':
    case 'host':
    case 'ipc':
    case 'server':
      return second;
    default:
      return 'main-other';
  }
}

interface Rule {
  /** Areas this area may import (its own area is always allowed). */
  areas: Area[];
  /** node: builtins allowed. */
  node: boolean;
  /** Bare packages allowed: a list, or 'any' (electron is decided separately). */
  bare: string[] | 'any';
}

// 'main-other': a main/ folder ARCHITECTURE.md does not list yet (e.g. backends/); main code may use it.
const MAIN_AREAS: Area[] = ['shared', 'scheduler', 'packages', 'tokenizer', 'store', 'engine', 'host', 'main-other'];
const RULES: Record<Area, Rule> = {
  shared: { areas: [], node: false, bare: ['zod'] },
  scheduler: { areas: ['shared'], node: false, bare: [] },
  packages: { areas: ['shared'], node: true, bare: ['yaml', 'zod', 'onnx-proto'] },
  // lossless-json: tool calls' arguments read and written with their numbers as the model wrote them.
  tokenizer: {
    areas: ['shared'],
    node: true,
    bare: ['zod', '@huggingface/tokenizers', '@huggingface/jinja', 'lossless-json'],
  },
  store: { areas: ['shared'], node: true, bare: ['zod'] },
  engine: { areas: ['packages', 'tokenizer', 'shared'], node: true, bare: ['onnxruntime-node'] },
  host: { areas: MAIN_AREAS, node: true, bare: 'any' },
  ipc: { areas: ['host', 'shared'], node: true, bare: ['zod'] },
  server: { areas: ['host', 'shared'], node: true, bare: 'any' },
  // The Electron composition root wires the transports, as the CLI's serve does: IPC, and the HTTP server the
  // window can start (Models view → API server).
  'main-index': { areas: [...MAIN_AREAS, 'ipc', 'server', 'main-window'], node: true, bare: 'any' },
  'main-window': { areas: ['ipc', 'shared'], node: true, bare: [] },
  'main-other': { areas: MAIN_AREAS, node: true, bare: 'any' },
  preload: { areas: ['shared'], node: false, bare: [] },
  renderer: { areas: ['shared'], node: false, bare: 'any' },
  cli: { areas: [...MAIN_AREAS, 'server', 'cli'], node: true, bare: 'any' },
  other: { areas: [], node: true, bare: 'any' },
};
const ELECTRON_AREAS: ReadonlySet<Area> = new Set(['main-index', 'main-window', 'ipc', 'preload']);

function packageName(spec: string): string {
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] as string);
}

/** Violations of one file (path relative to src/) with the given source. */
function violationsOf(relFile: string, source: string): string[] {
  const from = areaOf(relFile);
  const rule = RULES[from];
  const out: string[] = [];
  for (const { spec, typeOnly } of importsOf(source)) {
    const where = `${relFile}: ${spec}`;
    if (spec.startsWith('.')) {
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(relFile.replace(/\\/g, '/')), spec));
      if (target.startsWith('..')) {
        out.push(`${where} (leaves src/)`);
        continue;
      }
      const to = areaOf(target);
      if (to === from) continue;
      if (!rule.areas.includes(to)) out.push(`${where} (${from} may not import ${to})`);
      else if (from === 'preload' && !typeOnly)
        out.push(`${where} (the sandboxed preload may import shared types only)`);
      continue;
    }
    if (spec.startsWith('node:')) {
      if (!rule.node) out.push(`${where} (${from} may not use node builtins)`);
      continue;
    }
    const pkg = packageName(spec);
    if (pkg === 'electron') {
      if (!ELECTRON_AREAS.has(from))
        out.push(`${where} (only main/index.ts, main/window.ts, main/ipc and the preload import electron)`);
      continue;
    }
    if (rule.bare !== 'any' && !rule.bare.includes(pkg)) out.push(`${where} (${from} may not import ${pkg})`);
  }
  return out;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(full));
    else if (/\.(ts|tsx|mts|cts)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(full);
  }
  return out;
}

describe('the import checker itself', () => {
  it('parses every import form it polices', () => {
    const src = [
      "import a from 'x';",
      'import type { B } from "y";',
      "import { type C, type D } from './typed';",
      "import { type E, F } from './mixed';",
      "export { g } from './z';",
      "export * from './star';",
      "import 'side-effect';",
      "const h = await import('dyn');",
      "const i = require('req');",
      'import {',
      '  multi,',
      '  line,',
      "} from './multi';",
      ' * prose that says import x from "not-an-import" inside a comment',
      " * and calls `require('electron')` in a JSDoc line",
      "// const j = require('commented-out');",
    ].join('\n');
    expect(importsOf(src)).toEqual([
      { spec: 'x', typeOnly: false },
      { spec: 'y', typeOnly: true },
      { spec: './typed', typeOnly: true },
      { spec: './mixed', typeOnly: false },
      { spec: './z', typeOnly: false },
      { spec: './star', typeOnly: false },
      { spec: './multi', typeOnly: false },
      { spec: 'side-effect', typeOnly: false },
      { spec: 'dyn', typeOnly: false },
      { spec: 'req', typeOnly: false },
    ]);
  });

  it('classifies areas', () => {
    expect(areaOf('main/index.ts')).toBe('main-index');
    expect(areaOf('main/window')).toBe('main-window');
    expect(areaOf('main/ipc/streams.ts')).toBe('ipc');
    expect(areaOf('main/host')).toBe('host');
    expect(areaOf('renderer/components/Chat.tsx')).toBe('renderer');
    expect(areaOf('shared/api.ts')).toBe('shared');
  });

  it('flags each kind of violation (so the real check can fail)', () => {
    expect(violationsOf('renderer/App.tsx', "import { x } from '../main/host/host-api';")).toHaveLength(1);
    expect(violationsOf('renderer/App.tsx', "import fs from 'node:fs';")).toHaveLength(1);
    expect(violationsOf('renderer/App.tsx', "import { ipcRenderer } from 'electron';")).toHaveLength(1);
    expect(violationsOf('main/scheduler/x.ts', "import { readFile } from 'node:fs/promises';")).toHaveLength(1);
    expect(violationsOf('main/scheduler/x.ts', "import { y } from '../host/runner-service';")).toHaveLength(1);
    expect(violationsOf('main/server/x.ts', "import { app } from 'electron';")).toHaveLength(1);
    expect(violationsOf('main/server/x.ts', "import { registerIpc } from '../ipc';")).toHaveLength(1);
    expect(violationsOf('main/ipc/x.ts', "import { createMainWindow } from '../window';")).toHaveLength(1);
    expect(violationsOf('main/ipc/x.ts', "import { createScheduler } from '../scheduler';")).toHaveLength(1);
    expect(violationsOf('main/host/x.ts', "import { BrowserWindow } from 'electron';")).toHaveLength(1);
    expect(violationsOf('main/host/x.ts', "import { registerIpc } from '../ipc';")).toHaveLength(1);
    expect(violationsOf('shared/x.ts', "import { y } from '../main/host/runner-service';")).toHaveLength(1);
    expect(violationsOf('preload/index.ts', "import { CallSchemas } from '../shared/api';")).toHaveLength(1);
    expect(violationsOf('preload/index.ts', "import zod from 'zod';")).toHaveLength(1);
    expect(violationsOf('cli/start.ts', "import { app } from 'electron';")).toHaveLength(1);
    expect(violationsOf('main/ipc/x.ts', "import { detect } from '../backends';")).toHaveLength(1);
    expect(violationsOf('renderer/x.ts', "import { detect } from '../main/backends';")).toHaveLength(1);
  });

  it('lets the allowed imports through', () => {
    expect(
      violationsOf(
        'preload/index.ts',
        "import { contextBridge } from 'electron';\nimport type { KvdeskApi } from '../shared/api';",
      ),
    ).toEqual([]);
    expect(
      violationsOf(
        'main/ipc/index.ts',
        "import type { HostApi } from '../host/host-api';\nimport { ipcMain } from 'electron';",
      ),
    ).toEqual([]);
    expect(
      violationsOf(
        'main/server/s.ts',
        "import { WebSocketServer } from 'ws';\nimport { KvdeskError } from '../../shared/errors';",
      ),
    ).toEqual([]);
    expect(
      violationsOf(
        'renderer/App.tsx',
        "import { useStore } from 'zustand';\nimport type { Thread } from '../shared/api';",
      ),
    ).toEqual([]);
  });
});

describe('src/ import rules (ARCHITECTURE.md)', () => {
  const files = sourceFiles(SRC);

  it('finds the source tree', () => {
    const areas = new Set(files.map((f) => areaOf(path.relative(SRC, f))));
    for (const a of ['shared', 'scheduler', 'host', 'ipc', 'preload', 'main-index', 'main-window'] as const)
      expect(areas).toContain(a);
  });

  it('every file imports only what its area may import', () => {
    const violations = files.flatMap((f) => violationsOf(path.relative(SRC, f), readFileSync(f, 'utf8')));
    expect(violations).toEqual([]);
  });

  it('only main/index.ts, main/window.ts, main/ipc/ and the preload import electron', () => {
    const importers = files
      .filter((f) => importsOf(readFileSync(f, 'utf8')).some((i) => packageName(i.spec) === 'electron'))
      .map((f) => path.relative(SRC, f).replace(/\\/g, '/'))
      .filter((f) => !f.startsWith('main/ipc/'))
      .sort();
    expect(importers).toEqual(['main/index.ts', 'main/window.ts', 'preload/index.ts']);
  });
});
