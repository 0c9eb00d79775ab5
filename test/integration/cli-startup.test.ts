/**
 * kvdesk's light commands start without the model stack: `kvdesk --version`, `--help`, a command's help (chat's and
 * serve's too) and a flag's error load none of zod, the ONNX reader (onnx-proto, protobufjs), yaml, the template
 * renderer or the tokenizer, which took a third of a second before the command was even read. Each `kvdesk` is a real
 * process (bin/kvdesk.cjs, the CLI's bundle), with test/helpers/module-recorder.cjs saying which npm packages its
 * processes loaded.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/fixtures';

const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-startup-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What a model needs, and a light command must not load. */
const MODEL_STACK = ['zod', 'onnx-proto', 'protobufjs', 'yaml', '@huggingface/jinja', '@huggingface/tokenizers'];

let runs = 0;
/** Runs `kvdesk ARGS`; its exit code, and the npm packages its processes (the wrapper and the CLI) loaded. */
function kvdesk(...args: string[]): { status: number | null; packages: string[]; stderr: string } {
  const log = path.join(dir, `modules-${runs++}.log`);
  const r = spawnSync(process.execPath, [path.join(repoRoot, 'bin/kvdesk.cjs'), ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    env: {
      ...process.env,
      KVDESK_DATA_DIR: path.join(dir, 'data'),
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${path.join(repoRoot, 'test/helpers/module-recorder.cjs')}`,
      KVDESK_MODULE_LOG: log,
    },
    timeout: 30_000,
  });
  let lines: string[] = [];
  try {
    lines = readFileSync(log, 'utf8').trim().split('\n');
  } catch {}
  return { status: r.status, packages: [...new Set(lines.map((l) => l.split(' ')[2] as string))], stderr: r.stderr };
}

describe('kvdesk start-up', () => {
  it.each([
    [['--version']],
    [['--help']],
    [['pull', '--help']],
    [['chat', '--help']],
    [['chat', 'M', '--bogus']],
    [['serve', '--help']],
    [['generate', '--promt', 'hi']],
    [['search', '--bogus']],
  ])('kvdesk %j loads none of the model stack', (args) => {
    const r = kvdesk(...args);
    expect(r.status, r.stderr).toBe(args.some((a) => a.includes('bog') || a === '--promt') ? 2 : 0);
    expect(r.packages.filter((p) => MODEL_STACK.includes(p))).toEqual([]);
  });

  it('a command that reads a package loads it (the recorder sees what a command loads)', () => {
    const r = kvdesk('generate', path.join(dir, 'no-such-package'), '--prompt', 'hi');
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr).toContain('does not exist');
    expect(r.packages).toEqual(expect.arrayContaining(['zod', 'onnx-proto', 'yaml']));
  });
});
