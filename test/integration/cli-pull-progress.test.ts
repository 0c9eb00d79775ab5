/**
 * `kvdesk pull` (a real process) in a script's log, against a local imitation of the hub (test/helpers/fake-hub.ts):
 * without a terminal its progress is a line every 5 s or each 10 % (not 4 a second), a stall is said after the state
 * it stopped at (not one throttled away), and Ctrl+C says how to resume, which the same command then does, saying
 * where it resumes from (at a terminal too); `--json` interrupted by Ctrl+C or SIGTERM prints what arrived as JSON.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pull } from '../../src/cli/pull';
import { listHubVariants, planDownload } from '../../src/main/host/hub-download';
import { formatBytes } from '../../src/shared/format';
import { defaultModelRepo, type FakeHub, startFakeHub } from '../helpers/fake-hub';
import { defaultModelDir, repoRoot } from '../helpers/fixtures';

const REPO = 'onnx-community/tiny-chat';
const GRAPH = 'onnx/model_q4.onnx'; // the variant kvdesk takes (q4)
const BIN = path.join(repoRoot, 'bin/kvdesk.cjs');
let hub: FakeHub;
const dirs: string[] = [];
const dataDir = () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-pull-progress-'));
  dirs.push(dir);
  return dir;
};

beforeAll(async () => {
  hub = await startFakeHub({ [REPO]: defaultModelRepo() }, { lfsMinBytes: 10_000 });
}, 60_000);
afterAll(async () => {
  await hub?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const env = (extra: NodeJS.ProcessEnv = {}) => ({ ...process.env, HF_ENDPOINT: hub.url, HF_TOKEN: '', ...extra });

/** The progress lines of a pull's stderr: the bytes each shows. */
const progress = (stderr: string) => [...stderr.matchAll(/^pulling .*: (.+) \/ (.+) (\d+)%$/gm)].map((m) => m[1]);

describe('kvdesk pull without a terminal', () => {
  it('a stall is said after the state it stopped at', async () => {
    hub.faults.stall = GRAPH;
    hub.served.clear();
    try {
      const r = await new Promise<{ status: number | null; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          [BIN, 'pull', REPO, '--data-dir', dataDir()],
          { cwd: repoRoot, env: env({ KVDESK_HUB_TIMEOUT_MS: '1500' }), timeout: 60_000 },
          (err, _stdout, stderr) => resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
        ),
      );
      expect(r.status, r.stderr).toBe(4);
      expect(r.stderr).toMatch(/no data for 2 s/);
      // The last line before the error shows what arrived (what the hub sent), not a state from before it.
      const sent = [...hub.served.values()].reduce((a, b) => a + b, 0);
      expect(sent).toBeGreaterThan(0);
      expect(progress(r.stderr).at(-1), r.stderr).toBe(formatBytes(sent));
    } finally {
      hub.faults.stall = undefined;
    }
  }, 60_000);

  it('Ctrl+C says how to resume and ends by SIGINT; the same command resumes, in a few lines of progress', async () => {
    let released = false;
    hub.faults.hold = { path: GRAPH, until: () => released };
    const dir = dataDir();
    const child = spawn(process.execPath, [BIN, 'pull', REPO, '--data-dir', dir], {
      cwd: repoRoot,
      env: env(),
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own session: no terminal whose foreground it could be in (the wrapper passes this SIGINT on).
      detached: true,
    });
    let stderr = '';
    const halfWay = new Promise<void>((resolve) =>
      child.stderr.on('data', (d) => {
        stderr += String(d);
        if (/ [1-9]\d?%$/m.test(stderr)) resolve();
      }),
    );
    const ended = new Promise<NodeJS.Signals | number | null>((resolve) =>
      child.on('close', (code, signal) => resolve(signal ?? code)),
    );
    try {
      await halfWay;
      child.kill('SIGINT');
      expect(await ended, stderr).toBe('SIGINT');
      expect(stderr).toMatch(
        /kvdesk: interrupted: run the same command again to resume \(what arrived stays in .+\)\n$/,
      );
    } finally {
      released = true;
      hub.faults.hold = undefined;
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    // What the interrupted pull left of the graph: the part the next one says it resumes from.
    const staging = /what arrived stays in (.+)\)\n$/.exec(stderr)?.[1] as string;
    const part = statSync(path.join(staging, `${GRAPH}.part`)).size;
    expect(part).toBeGreaterThan(0);
    const asked = hub.requests.length;
    const again = await new Promise<{ status: number | null; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        [BIN, 'pull', REPO, '--data-dir', dir],
        { cwd: repoRoot, env: env(), timeout: 60_000 },
        (err, _o, e) => resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stderr: e }),
      ),
    );
    expect(again.status, again.stderr).toBe(0);
    // Resumed: the graph's rest was asked for from where it stopped.
    expect(hub.requests.slice(asked).some((q) => q.range !== undefined && q.range !== 'bytes=0-')).toBe(true);
    // It says so, before its first progress line: where the graph goes on from, of how much.
    const graph = statSync(path.join(dir, 'models', 'tiny-chat-q4', GRAPH)).size;
    expect(part).toBeLessThan(graph);
    const resuming = `kvdesk: resuming ${GRAPH} at ${formatBytes(part)} of ${formatBytes(graph)}\n`;
    expect(again.stderr).toContain(resuming);
    expect(again.stderr.indexOf(resuming)).toBeLessThan(again.stderr.indexOf('pulling '));
    // A line each 10 % at most (and the first and last), not one every 250 ms.
    const lines = progress(again.stderr);
    expect(lines.length, again.stderr).toBeGreaterThan(0);
    expect(lines.length, again.stderr).toBeLessThanOrEqual(12);
  }, 90_000);

  it('--json, interrupted (Ctrl+C or SIGTERM): one JSON object on stdout saying what arrived and how to resume, then it ends by the signal', async () => {
    const graph = readFileSync(path.join(defaultModelDir, 'onnx/model.onnx'));
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      let released = false;
      hub.faults.hold = { path: GRAPH, until: () => released };
      const dir = dataDir();
      const plan = await planDownload(await listHubVariants(REPO, { endpoint: hub.url }), path.join(dir, 'models'));
      const child = spawn(process.execPath, [BIN, 'pull', REPO, '--json', '--data-dir', dir], {
        cwd: repoRoot,
        env: env(),
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => {
        stdout += String(d);
      });
      child.stderr.on('data', (d) => {
        stderr += String(d);
      });
      const ended = new Promise<NodeJS.Signals | number | null>((resolve) =>
        child.on('close', (code, sig) => resolve(sig ?? code)),
      );
      try {
        // The held graph's first half has arrived.
        const part = path.join(plan.staging, `${GRAPH}.part`);
        const half = graph.length >> 1;
        for (let i = 0; i < 1000; i++) {
          if ((statSync(part, { throwIfNoEntry: false })?.size ?? 0) >= half) break;
          await new Promise((r) => setTimeout(r, 20));
        }
        child.kill(signal);
        expect(await ended, stderr).toBe(signal);
      } finally {
        released = true;
        hub.faults.hold = undefined;
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }
      expect(stderr).toMatch(/kvdesk: interrupted: run the same command again to resume/);
      // One JSON object: what the staging folder holds, of the variant's.
      expect(stdout).toMatch(/^\{.*\}\n$/);
      const said = JSON.parse(stdout);
      const sizes = plan.variant.files.map((f) => {
        const whole = statSync(path.join(plan.staging, f.to), { throwIfNoEntry: false });
        if (whole) return { whole: whole.size };
        return { part: statSync(path.join(plan.staging, `${f.to}.part`), { throwIfNoEntry: false })?.size ?? 0 };
      });
      expect(said).toEqual({
        status: 'interrupted',
        signal,
        repo: REPO,
        variant: 'q4',
        commit: hub.head(REPO),
        doneBytes: sizes.reduce((n, s) => n + (s.whole ?? s.part ?? 0), 0),
        totalBytes: plan.variant.bytes,
        filesDone: sizes.filter((s) => s.whole !== undefined).length,
        filesPartial: sizes.filter((s) => (s.part ?? 0) > 0).length,
        filesTotal: plan.variant.files.length,
        staging: plan.staging,
        resume: 'run the same command again',
      });
      expect(said.doneBytes).toBeGreaterThanOrEqual(graph.length >> 1);
      expect(said.filesPartial).toBeGreaterThanOrEqual(1);
    }
  }, 60_000);

  it('a pull of a package another one is downloading exits 4 (try again), not 2 (bad input)', async () => {
    let released = false;
    hub.faults.hold = { path: GRAPH, until: () => released };
    const dir = dataDir();
    const first = spawn(process.execPath, [BIN, 'pull', REPO, '--data-dir', dir], {
      cwd: repoRoot,
      env: env(),
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    try {
      const asked = hub.requests.length;
      while (!hub.requests.slice(asked).some((q) => q.path.includes('model_q4.onnx')))
        await new Promise((r) => setTimeout(r, 20));
      const second = await new Promise<{ status: number | null; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          [BIN, 'pull', REPO, '--data-dir', dir],
          { cwd: repoRoot, env: env(), timeout: 60_000 },
          (err, _o, e) => resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stderr: e }),
        ),
      );
      expect(second.stderr).toContain(`${REPO} is being downloaded already`);
      expect(second.status, second.stderr).toBe(4);
    } finally {
      first.kill('SIGKILL');
      released = true;
      hub.faults.hold = undefined;
    }
  }, 60_000);
});

describe('kvdesk pull at a terminal', () => {
  it('a pull that finds a part of a file says where it resumes, on a line of its own before the progress line', async () => {
    const dir = dataDir();
    const modelsDir = path.join(dir, 'models');
    const plan = await planDownload(await listHubVariants(REPO, { endpoint: hub.url }), modelsDir);
    // What a pull cut off left: the graph's first bytes.
    const graph = readFileSync(path.join(defaultModelDir, 'onnx/model.onnx'));
    const part = 100_000;
    mkdirSync(path.join(plan.staging, 'onnx'), { recursive: true });
    writeFileSync(path.join(plan.staging, `${GRAPH}.part`), graph.subarray(0, part));
    let err = '';
    let out = '';
    const saved = { endpoint: process.env.HF_ENDPOINT, token: process.env.HF_TOKEN };
    process.env.HF_ENDPOINT = hub.url;
    process.env.HF_TOKEN = '';
    try {
      const code = await pull(
        [REPO, '--data-dir', dir],
        {
          out: (s) => {
            out += s;
          },
          err: (s) => {
            err += s;
          },
        },
        true,
      );
      expect(code, err).toBe(0);
    } finally {
      for (const [key, value] of [
        ['HF_ENDPOINT', saved.endpoint],
        ['HF_TOKEN', saved.token],
      ] as const) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
    expect(out).toBe('tiny-chat-q4\n');
    // Its own line, then the progress line redrawn in place (\r), ended before the last words.
    expect(err).toMatch(
      new RegExp(
        `^kvdesk: resuming ${GRAPH.replace('.', '\\.')} at ${formatBytes(part)} of ${formatBytes(graph.length)}\\n\\rpulling `,
      ),
    );
    // It asked for the rest only.
    expect(hub.requests.some((q) => q.range === `bytes=${part}-`)).toBe(true);
  }, 60_000);
});
