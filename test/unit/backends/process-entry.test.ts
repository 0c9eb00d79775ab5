/**
 * Where the engine and the backend probe start (src/main/backends/process-entry.ts): the bundle a build made, the
 * one KVDESK_BUNDLE_DIR names first (the tests' out/cli), else the TypeScript source through tsx.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { processEntry } from '../../../src/main/backends/process-entry';

describe('processEntry', () => {
  let dir: string;
  let other: string;
  const saved = process.env.KVDESK_BUNDLE_DIR;
  beforeEach(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-entry-'));
    other = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-entry-'));
    delete process.env.KVDESK_BUNDLE_DIR;
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
    rmSync(other, { recursive: true, force: true });
    if (saved === undefined) delete process.env.KVDESK_BUNDLE_DIR;
    else process.env.KVDESK_BUNDLE_DIR = saved;
  });
  const source = '/src/main/engine/process.ts';

  it('runs the bundle beside the caller where a build put it, with the V8 flags and no loader', () => {
    writeFileSync(path.join(dir, 'engine.js'), '');
    expect(processEntry('engine', [dir], source, undefined, ['--flag'])).toEqual({
      file: path.join(dir, 'engine.js'),
      execArgv: ['--flag'],
    });
  });

  it('runs the source through tsx where there is no bundle', () => {
    const entry = processEntry('engine', [dir], source, undefined, ['--flag']);
    expect(entry.file).toBe(source);
    expect(entry.execArgv[0]).toBe('--flag');
    expect(entry.execArgv.slice(1, 2)).toEqual(['--import']);
    expect(entry.execArgv[2]).toMatch(/^file:.*tsx/);
  });

  it('takes the bundle of KVDESK_BUNDLE_DIR first, and passes over that folder where it has none', () => {
    writeFileSync(path.join(dir, 'probe-process.js'), '');
    writeFileSync(path.join(other, 'probe-process.js'), '');
    process.env.KVDESK_BUNDLE_DIR = other;
    expect(processEntry('probe-process', [dir], source, undefined).file).toBe(path.join(other, 'probe-process.js'));
    rmSync(path.join(other, 'probe-process.js'));
    expect(processEntry('probe-process', [dir], source, undefined).file).toBe(path.join(dir, 'probe-process.js'));
  });

  it("runs a test's own entry whatever the bundles: JavaScript as it is, TypeScript through tsx", () => {
    writeFileSync(path.join(dir, 'engine.js'), '');
    process.env.KVDESK_BUNDLE_DIR = dir;
    const js = path.join(other, 'mine.js');
    writeFileSync(js, '');
    expect(processEntry('engine', [dir], source, js)).toEqual({ file: js, execArgv: [] });
    const ts = path.join(other, 'mine.ts');
    const entry = processEntry('engine', [dir], source, ts);
    expect(entry.file).toBe(ts);
    expect(entry.execArgv[0]).toBe('--import');
  });
});
