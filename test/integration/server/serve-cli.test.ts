/**
 * `kvdesk serve` as a person runs it: the real CLI process on an ephemeral
 * port, the printed URL, the official client against it, and a clean stop.
 * Also the serve command in-process, to see its shutdown close everything.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { chmod, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { serve } from '../../../src/cli/serve';
import { prepareDataDir } from '../../../src/main/host/model-library';
import { lanAddresses } from '../../../src/main/server';
import { defaultModelDir, repoRoot } from '../../helpers/fixtures';
import { holdReplyEnds, noEndBias } from '../../helpers/hold-replies';
import { slowModel } from '../../helpers/models';
import { eventually, LONG_CHAT, openaiClient, rawRequest, startTestServer } from './server-helpers';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whether process `pid` runs: a zombie (dead, not yet reaped: an orphan's, where init does not reap) does not. */
function running(pid: number): boolean {
  if (!alive(pid)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return process.platform !== 'linux';
  }
}

/** The URL a `kvdesk serve` process prints once it listens; rejects when it exits first or prints none in 60 s. */
function printedUrl(child: ChildProcess, stderr: () => string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no URL printed within 60 s; stderr: ${stderr()}`)), 60_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /^kvdesk serving (http:\/\/127\.0\.0\.1:\d+)$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    });
    child.once('exit', (code) => reject(new Error(`kvdesk serve exited with ${code}; stderr: ${stderr()}`)));
  });
}

describe('kvdesk serve --port 0 (a real process)', () => {
  let child: ChildProcess;
  let url: string;
  let stderr = '';
  let dataDir: string;
  /** Which npm packages each of its processes loaded (test/helpers/module-recorder.cjs). */
  let moduleLog: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-cli-'));
    moduleLog = path.join(dataDir, 'modules.log');
    // Its own process group, so the test can stop the wrapper, the server and the engine together, as Ctrl-C does.
    child = spawn(
      process.execPath,
      [
        path.join(repoRoot, 'bin/kvdesk.cjs'),
        'serve',
        '--port',
        '0',
        '--kv-budget',
        '64KiB',
        '--max-queue',
        '4',
        '--max-body',
        '64KiB',
        '--max-bodies',
        '64KiB',
        '--threads',
        '1',
        '--log-requests',
        '--data-dir',
        dataDir,
      ],
      {
        cwd: repoRoot,
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
        env: {
          ...process.env,
          NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${path.join(repoRoot, 'test/helpers/module-recorder.cjs')}`,
          KVDESK_MODULE_LOG: moduleLog,
        },
      },
    );
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    url = await printedUrl(child, () => stderr);
  });

  afterAll(async () => {
    if (child?.pid && alive(child.pid)) process.kill(-child.pid, 'SIGKILL');
    await rm(dataDir, { recursive: true, force: true });
  });

  it('prints a URL where the default model is healthy', async () => {
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok', models: ['default'] });
    // --log-requests: its line on stderr.
    await expect.poll(() => stderr).toMatch(/^kvdesk: \S+ 127\.0\.0\.1 GET \/health 200 \d+ ms id=\S+$/m);
  });

  it('serves the official client: chat and completions, streamed and not', async () => {
    const client = openaiClient(url);
    const chat = await client.chat.completions.create({
      model: 'default',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 5,
      temperature: 0,
    });
    expect(chat.choices[0]?.message.role).toBe('assistant');
    expect(chat.usage?.completion_tokens).toBeGreaterThan(0);
    const stream = await client.completions.create({
      model: 'default',
      prompt: 'Once upon a time',
      max_tokens: 5,
      temperature: 0,
      stream: true,
    });
    let text = '';
    for await (const ch of stream) text += ch.choices[0]?.text ?? '';
    const plain = await client.completions.create({
      model: 'default',
      prompt: 'Once upon a time',
      max_tokens: 5,
      temperature: 0,
    });
    expect(text).toBe(plain.choices[0]?.text);
  });

  it('loads onnxruntime in its engine process only, and no MCP client while no MCP server is used', async () => {
    // (After the replies above: the host has served chats, the engine has run them.)
    const lines = readFileSync(moduleLog, 'utf8').trim().split('\n');
    const loadedBy = (script: RegExp) =>
      lines.filter((l) => script.test(l.split(' ')[1] ?? '')).map((l) => l.split(' ')[2]);
    const host = loadedBy(/[\\/]main\.(js|ts)$/);
    const engine = loadedBy(/[\\/](engine\.js|process\.ts)$/);
    expect(host).toContain('@huggingface/tokenizers');
    expect(engine).toContain('onnxruntime-node');
    // The native runtime (~100 ms and ~15 MB a process) and the MCP SDK (its own zod copies) are not the host's.
    expect(host).not.toContain('onnxruntime-node');
    expect(host).not.toContain('@modelcontextprotocol/sdk');
  });

  it('applies --kv-budget: a request over 64 KiB is refused with its numbers', async () => {
    const client = openaiClient(url);
    const err = await client.completions
      .create({ model: 'default', prompt: Array(80).fill(7), max_tokens: 4 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err).toMatchObject({ status: 400, code: 'kv_budget_exceeded' });
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({
      required_bytes: 81 * 1024,
      budget_bytes: 64 * 1024,
    });
    const snap = (await (await fetch(`${url}/v1/kvdesk/budget`)).json()) as { limitBytes: number; maxQueue: number };
    expect(snap).toMatchObject({ limitBytes: 64 * 1024, maxQueue: 4 });
  });

  it('applies --max-body: a larger JSON body is a 413 that names the flag, and the server goes on', async () => {
    const body = JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'x'.repeat(70_000) }] });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(res.status).toBe(413);
    const err = ((await res.json()) as { error: { message: string; limit_bytes: number } }).error;
    expect(err.limit_bytes).toBe(64 * 1024);
    expect(err.message).toMatch(/at most 65536 bytes\. Send less, or start kvdesk serve with a larger --max-body/);
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });

  it('applies --max-bodies: a body over the bodies held at once alone is a 413 that names the flag', async () => {
    // A JSON upload counts among the bodies held (a JSON body that could be over them alone is refused at start).
    const body = JSON.stringify({ name: 'big', files: [{ path: 'big/x.bin', dataBase64: 'A'.repeat(70_000) }] });
    const res = await fetch(`${url}/api/models/upload`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(res.status).toBe(413);
    const err = ((await res.json()) as { error: { message: string; detail: { limitBytes: number } } }).error;
    expect(err.detail.limitBytes).toBe(64 * 1024);
    expect(err.message).toMatch(
      /more than the 65536 bytes of request bodies .* start kvdesk serve with a larger --max-bodies/,
    );
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });

  it('/health stays 200 once the model is unloaded (keep_alive 0): idle, naming what loads on first request', async () => {
    const unload = await fetch(`${url}/api/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', prompt: '', keep_alive: 0, stream: false }),
    });
    expect(unload.status).toBe(200);
    const idle = await fetch(`${url}/health`);
    expect(idle.status).toBe(200);
    expect(await idle.json()).toEqual({
      status: 'idle',
      models: [],
      loadable: ['default'],
      message: 'No model is loaded now; the first request naming one of `loadable` loads it.',
    });
    // The next request loads it again, as /health said.
    const reply = await openaiClient(url).completions.create({ model: 'default', prompt: 'Once', max_tokens: 2 });
    expect(reply.choices[0]?.text).toBeTypeOf('string');
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'ok', models: ['default'] });
  });

  it.skipIf(process.platform !== 'linux')(
    'an engine killed outright (SIGKILL) is said on stderr: what died, that it restarts, what the requests lost',
    async () => {
      const children = (pid: number) =>
        readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
      // The wrapper's child is the server; the engine is the server's child running engine.js.
      const [server] = children(child.pid as number);
      const engine = children(server as number).find((pid) =>
        readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('engine'),
      );
      expect(engine).toBeGreaterThan(0);
      const before = stderr.length;
      process.kill(engine as number, 'SIGKILL');
      await vi.waitFor(
        () => expect(stderr.slice(before)).toMatch(/the engine is back: default loaded again after \d+ ms/),
        {
          timeout: 30_000,
          interval: 100,
        },
      );
      expect(stderr.slice(before)).toContain(
        'kvdesk: the engine process exited (code null, signal SIGKILL); restarting it, loading default back. ' +
          '0 running requests failed (ENGINE_FAILED, reservations released)',
      );
      // And it answers again.
      const reply = await openaiClient(url).completions.create({ model: 'default', prompt: 'Once', max_tokens: 2 });
      expect(reply.choices[0]?.text).toBeTypeOf('string');
    },
    60_000,
  );

  it('stops on SIGTERM, leaving no process behind', async () => {
    const pid = child.pid as number;
    process.kill(-pid, 'SIGTERM');
    const deadline = Date.now() + 15_000;
    // The whole group (wrapper, server, engine) must be gone.
    for (;;) {
      let groupAlive = true;
      try {
        process.kill(-pid, 0);
      } catch {
        groupAlive = false;
      }
      if (!groupAlive) break;
      if (Date.now() > deadline) throw new Error(`processes of group ${pid} still running; stderr: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  });
});

describe.skipIf(process.platform !== 'linux')('the kvdesk wrapper killed outright (SIGKILL, an OOM kill)', () => {
  it('takes the server it started with it: nothing keeps the port, nothing is left adopted by init', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-kill-'));
    const child = spawn(
      process.execPath,
      [path.join(repoRoot, 'bin/kvdesk.cjs'), 'serve', '--port', '0', '--threads', '1', '--data-dir', dataDir],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
    );
    const wrapper = child.pid as number;
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    try {
      const url = await printedUrl(child, () => stderr);
      // The server is the wrapper's child (then the engine, its own).
      const [server] = readFileSync(`/proc/${wrapper}/task/${wrapper}/children`, 'utf8')
        .trim()
        .split(/\s+/)
        .map(Number);
      expect(server).toBeGreaterThan(0);
      process.kill(wrapper, 'SIGKILL');
      await vi.waitFor(() => expect(alive(server as number)).toBe(false), { timeout: 15_000, interval: 100 });
      await expect(fetch(`${url}/health`)).rejects.toThrow();
      // Nothing of the group is left (the engine went with the server).
      await vi.waitFor(() => expect(() => process.kill(-wrapper, 0)).toThrow(), { timeout: 15_000, interval: 100 });
    } finally {
      try {
        process.kill(-wrapper, 'SIGKILL');
      } catch {
        // Gone already.
      }
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 90_000);
});

/**
 * Streams a long reply from `kvdesk serve` in its own process group, sends `signal` to the whole group, and checks
 * that the stream ends with its shutdown event and that every process of the group exits.
 */
/**
 * `kvdesk serve ARGS` in this process until it printed its URL: what it printed on stdout and stderr so far, and its
 * stop (which checks it exits 0).
 */
async function serveHere(args: string[]): Promise<{ out: () => string; err: () => string; stop(): Promise<void> }> {
  let out = '';
  let err = '';
  let stop!: () => void;
  const until = new Promise<void>((r) => {
    stop = r;
  });
  const running = serve(args, { out: (s) => (out += s), err: (s) => (err += s) }, { until });
  await eventually(
    () => out,
    (o) => /kvdesk serving/.test(o),
    30_000,
  );
  return {
    out: () => out,
    err: () => err,
    stop: async () => {
      stop();
      expect(await running).toBe(0);
    },
  };
}

async function signalWhileStreaming(signal: 'SIGINT' | 'SIGTERM'): Promise<void> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `kvdesk-serve-${signal.toLowerCase()}-`));
  const child = spawn(
    process.execPath,
    [path.join(repoRoot, 'bin/kvdesk.cjs'), 'serve', '--port', '0', '--model', slowModel(), '--data-dir', dataDir],
    { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  const pid = child.pid as number;
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const ended = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.on('exit', (code, got) => resolve(got ?? code)),
  );
  try {
    const url = await printedUrl(child, () => stderr);
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: path.basename(slowModel()),
        messages: [{ role: 'user', content: 'Tell me a long story.' }],
        max_tokens: 2000,
        logit_bias: noEndBias(slowModel()),
        stream: true,
      }),
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.includes('"content"')) text += decoder.decode((await reader.read()).value);
    // The wrapper forwards the signal it got to the server, which got its own: two at once, one signal.
    process.kill(-pid, signal);
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      text += decoder.decode(chunk.value);
    }
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.at(-1), stderr).toMatch(/"reason":"shutdown"/);
    const deadline = Date.now() + 15_000;
    while (alive(-pid)) {
      if (Date.now() > deadline) throw new Error(`group ${pid} still running; stderr: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(stderr).toContain(`${signal}: shutting down`);
    // Shut down cleanly, and ended by the signal, as its parent (a shell, systemd) expects of what it stopped.
    expect(await ended, stderr).toBe(signal);
  } finally {
    if (alive(-pid)) process.kill(-pid, 'SIGKILL');
    await rm(dataDir, { recursive: true, force: true });
  }
}

describe('Ctrl+C on kvdesk serve (SIGINT to its process group, as a terminal sends it)', () => {
  it('ends a stream in flight with its shutdown event, then every process of the group exits', async () => {
    await signalWhileStreaming('SIGINT');
  }, 120_000);
});

describe("SIGTERM to kvdesk serve's process group (systemd's stop, `kill -TERM -PGID`)", () => {
  it('ends a stream in flight with its shutdown event (the engine is not killed under it), then the group exits', async () => {
    await signalWhileStreaming('SIGTERM');
  }, 120_000);
});

/**
 * `kvdesk serve` in its own process group, its engine blocked in the default model's load (as onnxruntime's load
 * blocks it: seconds, minutes for a large model) until `release` (the KVDESK_ENGINE_BLOCK_LOADS failpoint).
 */
async function serveBlockedInLoad(): Promise<{
  group: number;
  engine: number;
  stderr: () => string;
  release: () => Promise<void>;
}> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-block-'));
  const block = path.join(dir, 'block-loads');
  writeFileSync(block, '');
  const child = spawn(
    process.execPath,
    [path.join(repoRoot, 'bin/kvdesk.cjs'), 'serve', '--port', '0', '--data-dir', path.join(dir, 'data')],
    {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      env: { ...process.env, KVDESK_ENGINE_BLOCK_LOADS: block },
    },
  );
  const group = child.pid as number;
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const release = async () => {
    rmSync(block, { force: true });
    if (alive(-group)) process.kill(-group, 'SIGKILL');
    await rm(dir, { recursive: true, force: true });
  };
  try {
    // The engine writes its pid there as it blocks.
    const engine = await vi.waitFor(
      () => {
        const pid = Number(readFileSync(block, 'utf8'));
        if (!(pid > 0)) throw new Error(`the engine has not started loading; stderr: ${stderr}`);
        return pid;
      },
      { timeout: 60_000, interval: 50 },
    );
    return { group, engine, stderr: () => stderr, release };
  } catch (err) {
    await release();
    throw err;
  }
}

describe('kvdesk serve stopped while a model loads (its engine blocked in the load)', () => {
  it('Ctrl+C: it says it shuts down, and stops, its engine too, without waiting for the load', async () => {
    const s = await serveBlockedInLoad();
    try {
      process.kill(-s.group, 'SIGINT');
      // The load never ends by itself: the engine is stopped under it (after a grace of 2 s).
      await vi.waitFor(() => expect(alive(-s.group), s.stderr()).toBe(false), { timeout: 15_000, interval: 50 });
      expect(running(s.engine)).toBe(false);
      expect(s.stderr()).toContain('SIGINT: shutting down');
      // The load it cut short is no failure to report.
      expect(s.stderr()).not.toMatch(/did not load/);
    } finally {
      await s.release();
    }
  }, 90_000);

  it.skipIf(process.platform !== 'linux')(
    'killed outright (SIGKILL, an OOM kill): its engine does not run on, though the load blocks it',
    async () => {
      const s = await serveBlockedInLoad();
      try {
        const stat = readFileSync(`/proc/${s.engine}/stat`, 'utf8');
        const server = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        expect(server).not.toBe(s.group);
        process.kill(server, 'SIGKILL');
        await vi.waitFor(() => expect(running(s.engine), s.stderr()).toBe(false), { timeout: 10_000, interval: 50 });
      } finally {
        await s.release();
      }
    },
    90_000,
  );
});

describe('serve (in-process)', () => {
  it('/health is 503 only when no model is loaded and the library has none to load', async () => {
    const t = await startTestServer({}, { loadDefault: false });
    try {
      const res = await fetch(`${t.url}/health`);
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ status: 'no_model', models: [], message: /--model DIR/ });
    } finally {
      await t.close();
    }
  });

  it('/health is 503 load_failed, with the reason, while the default model failed to load and none has loaded since', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-health-'));
    // The default model as an update left it: config.json cut short.
    const broken = path.join(dataDir, 'broken');
    await cp(defaultModelDir, broken, { recursive: true });
    await writeFile(path.join(broken, 'config.json'), '{"model_type": ');
    try {
      // An earlier run loaded a package, which the library keeps.
      const earlier = await startTestServer({}, { dataDir });
      await earlier.close();
      const t = await startTestServer({}, { dataDir, defaultModel: broken });
      try {
        // (The library's packages are checked again in the background after the start.)
        await t.hostApi.libraryChecked;
        const res = await fetch(`${t.url}/health`);
        expect(res.status).toBe(503);
        const body = (await res.json()) as { message: string };
        expect(body).toMatchObject({
          status: 'load_failed',
          models: [],
          loadable: ['default'],
          error: { code: 'PACKAGE_INVALID', path: broken, message: expect.stringContaining('config.json') },
        });
        expect(body.message).toMatch(
          new RegExp(
            `^The default model at ${broken} did not load: .*config\\.json.*\\. Fix it and restart kvdesk, or load another: a request naming one of \`loadable\` loads it\\.$`,
          ),
        );
        // A request loads the library's package: ready from then on.
        const reply = await openaiClient(t.url).completions.create({ model: 'default', prompt: 'Once', max_tokens: 1 });
        expect(reply.choices).toHaveLength(1);
        expect(await (await fetch(`${t.url}/health`)).json()).toEqual({ status: 'ok', models: ['default'] });
      } finally {
        await t.close();
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('refuses to bind off loopback without a token, with a clear message and exit code 2', async () => {
    let err = '';
    const code = await serve(['--host', '0.0.0.0', '--port', '0', '--data-dir', os.tmpdir()], {
      out: () => {},
      err: (s) => (err += s),
    });
    expect(code).toBe(2);
    expect(err).toMatch(/without a token/);
    expect(err).toMatch(/--token/);
  });

  it('refuses bad flags with exit code 2', async () => {
    let err = '';
    const io = { out: () => {}, err: (s: string) => (err += s) };
    expect(await serve(['--port', 'eighty'], io)).toBe(2);
    expect(err).toMatch(/--port expects a whole number/);
    expect(await serve(['--kv-budget', 'lots'], io)).toBe(2);
    expect(err).toMatch(/byte size/);
    expect(await serve(['--device-memory', '8GiB'], io)).toBe(2);
    expect(err).toMatch(/--device-memory 8GiB: give DEVICE=SIZE/);
    expect(await serve(['--max-body', 'lots'], io)).toBe(2);
    expect(err).toMatch(/--max-body: Cannot read "lots" as a byte size/);
    expect(await serve(['--max-bodies', 'lots'], io)).toBe(2);
    expect(err).toMatch(/--max-bodies: Cannot read "lots" as a byte size/);
    expect(await serve(['--max-message', '1GiB'], io)).toBe(2);
    expect(err).toMatch(/--max-message: 1GiB is more than a message can be .*give 500MiB or less/);
    expect(await serve(['--allow-origin', 'localhost:3000', '--data-dir', os.tmpdir()], io)).toBe(2);
    expect(err).toMatch(/--allow-origin: "localhost:3000" is not an origin to allow: .*http:\/\/localhost:3000/);
    expect(await serve(['--prefill-chunk', '0'], io)).toBe(2);
    expect(err).toMatch(/--prefill-chunk expects a whole number ≥ 1, got "0"/);
    expect(await serve(['--first-use-ttl', 'soon'], io)).toBe(2);
    expect(err).toMatch(/--first-use-ttl expects a duration such as 90s, 60m or 2h, or never; got "soon"/);
    // An empty value (`--port "$PORT"` with PORT unset) is no number, not 0 (a free port). A serve that starts anyway
    // stops at once: `until` has come.
    for (const [flag, min] of [
      ['port', 0],
      ['max-running', 1],
      ['prompt-cache', 0],
    ] as const) {
      err = '';
      expect(await serve([`--${flag}`, '', '--data-dir', os.tmpdir()], io, { until: Promise.resolve() })).toBe(2);
      expect(err).toBe(
        `kvdesk: --${flag} expects a whole number ≥ ${min}, got an empty value (see kvdesk serve --help)\n`,
      );
    }
    err = '';
    expect(await serve(['--threads', ' '], io, { until: Promise.resolve() })).toBe(2);
    expect(err).toMatch(/^kvdesk: --threads expects an integer, got an empty value: give one, or leave the flag out/);
  });

  it('refuses --max-bodies under --max-body (exit 2), naming both and what to give', async () => {
    let err = '';
    const io = { out: () => {}, err: (s: string) => (err += s) };
    // (Were it taken, the server would start and stop at once: `until` has come.)
    const run = (flags: string[]) => serve([...flags, '--data-dir', os.tmpdir()], io, { until: Promise.resolve() });
    expect(await run(['--max-body', '64KiB', '--max-bodies', '48KiB'])).toBe(2);
    expect(err).toBe(
      'kvdesk: --max-bodies 48KiB is less than --max-body 64KiB: a JSON body between the two could never be read, each one a 413. Give --max-bodies 64KiB or more, or a --max-body no larger than --max-bodies\n',
    );
    err = '';
    expect(await run(['--max-bodies', '16MiB'])).toBe(2);
    expect(err).toMatch(
      /^kvdesk: --max-bodies 16MiB is less than --max-body 32MiB \(its default\): .*Give --max-bodies 32MiB or more/,
    );
  });

  it('a port taken is said before any --model loads (exit 2)', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as net.AddressInfo;
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-taken-'));
    let err = '';
    try {
      const io = { out: () => {}, err: (s: string) => (err += s) };
      const args = ['--port', String(port), '--model', defaultModelDir, '--data-dir', dataDir];
      const code = await serve(args, io, { env: {} });
      expect(code).toBe(2);
      expect(err).toBe(
        `kvdesk: cannot listen: listen EADDRINUSE: address already in use 127.0.0.1:${port}. Choose another --port or --host.\n`,
      );
      // Started by `npm run serve`, the flags go after `--`: said so.
      err = '';
      const npmEnv = { npm_lifecycle_event: 'serve', npm_command: 'run-script' };
      expect(await serve(args, io, { env: npmEnv })).toBe(2);
      expect(err).toBe(
        `kvdesk: cannot listen: listen EADDRINUSE: address already in use 127.0.0.1:${port}. Choose another port or host: \`npm run serve -- --port N\` (or \`npm run serve -- --host H\`).\n`,
      );
    } finally {
      taken.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('a data directory that cannot be made or written is refused before anything loads (exit 2), naming why', async () => {
    const cases: Array<[string, string]> = [
      ['/dev/null/kvd', '/dev/null is not a folder (ENOTDIR)'],
      ...(existsSync('/proc/self')
        ? ([['/proc/kvd', '/proc/kvd could not be made (ENOENT)']] as Array<[string, string]>)
        : []),
    ];
    for (const [dir, why] of cases) {
      let err = '';
      const code = await serve(['--port', '0', '--model', defaultModelDir, '--data-dir', dir], {
        out: () => {},
        err: (s) => (err += s),
      });
      expect(code, err).toBe(2);
      expect(err).toBe(
        `kvdesk: the data directory ${dir} cannot be used: ${why}. Give a folder kvdesk can write (--data-dir DIR, or $KVDESK_DATA_DIR)\n`,
      );
    }
  }, 30_000);

  it('a data directory is made a folder at a time, and one this user cannot write is refused', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-dirs-'));
    try {
      await prepareDataDir(path.join(base, 'a/b/c'));
      expect(existsSync(path.join(base, 'a/b/c'))).toBe(true);
      // Root writes through any mode: the refusal needs a user that modes stop.
      if (process.getuid?.() === 0) return;
      await chmod(path.join(base, 'a'), 0o500);
      await expect(prepareDataDir(path.join(base, 'a/d'))).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: `the data directory ${path.join(base, 'a/d')} cannot be used: ${path.join(base, 'a/d')} could not be made (EACCES). Give a folder kvdesk can write (--data-dir DIR, or $KVDESK_DATA_DIR), or let this user write there`,
      });
      await expect(prepareDataDir(path.join(base, 'a/b'))).rejects.toMatchObject({
        message: expect.stringContaining('kvdesk cannot write there (EACCES)'),
      });
    } finally {
      await chmod(path.join(base, 'a'), 0o700).catch(() => {});
      await rm(base, { recursive: true, force: true });
    }
  });

  it('a --kv-budget over what the memory holds is taken, with its note on stderr; so is a UI not built', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-budget-'));
    const noUi = path.join(dataDir, 'no-ui');
    const server = await serveHere([
      '--port',
      '0',
      '--kv-budget',
      '64TiB',
      '--data-dir',
      dataDir,
      '--threads',
      '1',
      '--static-dir',
      noUi,
    ]);
    try {
      expect(server.err()).toMatch(
        /^kvdesk: KV budget note: 64\.0 TiB is more than system RAM holds beside the weights \(.+\): replies admitted under it can run out of memory before the budget stops them\.$/m,
      );
      expect(server.err()).toContain(
        `kvdesk: --static-dir ${noUi} has no index.html: the browser UI there answers a "not built" page; the API works.\n`,
      );
      // The page names that folder and what fills it: `npm run build` writes kvdesk's own UI elsewhere.
      const url = (/kvdesk serving (\S+)/.exec(server.out()) as RegExpExecArray)[1];
      const page = await (await fetch(`${url}/`)).text();
      expect(page).toContain(`<code>${noUi}</code>`);
      expect(page).toContain('That folder is the one <code>--static-dir</code> named: put a built UI in it');
      expect(page).not.toContain('<pre>npm run build</pre>');
    } finally {
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('bound to every address, says where other devices reach it; bound to a LAN address, serves at that one', async () => {
    const lan = lanAddresses();
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-lan-'));
    /** serve on `host` until its URL is printed. */
    const start = (host: string) =>
      serveHere(['--host', host, '--port', '0', '--token', 'tok-lan', '--data-dir', dataDir, '--threads', '1']);
    const bearer = { headers: { authorization: 'Bearer tok-lan' } };
    try {
      const wild = await start('0.0.0.0');
      try {
        const port = Number((/kvdesk serving http:\/\/127\.0\.0\.1:(\d+)\n/.exec(wild.out()) as RegExpExecArray)[1]);
        const urls = lan.map((a) => `http://${a}:${port}`);
        expect(wild.out()).toContain(
          `kvdesk: on the local network ${urls.length > 0 ? `at ${urls.join(', ')}` : 'once this computer has an address (it has none now)'}\n`,
        );
        expect(wild.out()).toContain(
          `kvdesk: open http://127.0.0.1:${port}/?token=tok-lan in a browser${urls.length > 0 ? ` (on another device: ${urls.map((u) => `${u}/?token=tok-lan`).join(', ')})` : ''}\n`,
        );
        for (const url of urls) expect((await fetch(`${url}/health`, bearer)).status).toBe(200);
      } finally {
        await wild.stop();
      }
      // Bound to one LAN address, nothing listens on 127.0.0.1: the URL printed is that address's.
      const address = lan[0];
      if (address === undefined) return;
      const one = await start(address);
      try {
        const url = (/^kvdesk serving (\S+)$/m.exec(one.out()) as RegExpExecArray)[1] as string;
        expect(new URL(url).hostname).toBe(address);
        expect((await fetch(`${url}/health`, bearer)).status).toBe(200);
        expect(one.out()).not.toContain('on the local network');
      } finally {
        await one.stop();
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 90_000);

  it('--allow-host and $KVDESK_ALLOWED_HOSTS let names of yours in (Open WebUI in Docker); others stay refused', async () => {
    let help = '';
    expect(await serve(['--help'], { out: (s) => (help += s), err: () => {} })).toBe(0);
    expect(help).toMatch(/\n {2}--allow-host NAME +a name clients reach the server by/);
    expect(help).toContain('host.docker.internal for Open WebUI in Docker');
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-hosts-'));
    vi.stubEnv('KVDESK_ALLOWED_HOSTS', 'box.local, proxy.example:443');
    const server = await serveHere([
      '--port',
      '0',
      '--allow-host',
      'host.docker.internal',
      '--allow-host',
      'Nas.LAN',
      '--data-dir',
      dataDir,
    ]);
    try {
      const url = (/kvdesk serving (\S+)/.exec(server.out()) as RegExpExecArray)[1] as string;
      const port = new URL(url).port;
      // Each name given without a port is said at start: the UI through it on 80 or 443 needs the port given.
      expect(server.err()).toContain(
        'kvdesk: --allow-host host.docker.internal, --allow-host nas.lan, --allow-host box.local names no port: the UI opened through it on port 80 or 443',
      );
      expect(server.err()).toContain(
        'give --allow-host host.docker.internal:80, --allow-host nas.lan:80, --allow-host box.local:80 (or :443 for https) instead',
      );
      // A name given is taken with the server's port and without (a proxy on 80 or 443 sends none); one given with
      // 443 also bare (https://proxy.example/ sends "proxy.example").
      for (const host of [
        `host.docker.internal:${port}`,
        'host.docker.internal',
        `nas.lan:${port}`,
        'nas.lan',
        `box.local:${port}`,
        'proxy.example:443',
        'proxy.example',
      ]) {
        expect((await rawRequest(url, { path: '/v1/models', headers: { host } })).status, host).toBe(200);
      }
      for (const host of [`evil.example:${port}`, 'host.docker.internal:1', `proxy.example:${port}`]) {
        const r = await rawRequest(url, { path: '/v1/models', headers: { host } });
        expect(r.status, host).toBe(403);
        expect(JSON.parse(r.body).error).toMatchObject({
          code: 'host_not_allowed',
          message: expect.stringContaining('start kvdesk serve with --allow-host NAME'),
        });
      }
    } finally {
      await server.stop();
      vi.unstubAllEnvs();
      await rm(dataDir, { recursive: true, force: true });
    }
    // A name that is none is refused before anything loads, naming where it came from.
    let err = '';
    const io = { out: () => {}, err: (s: string) => (err += s) };
    expect(await serve(['--allow-host', 'http://box.local', '--data-dir', dataDir], io)).toBe(2);
    expect(err).toBe(
      'kvdesk: --allow-host: "http://box.local" is not a host name to allow: give the name clients reach the server by, as their Host header says it (no scheme, no path), e.g. host.docker.internal, box.local or proxy.example:443 (a port where it is not the server\'s)\n',
    );
    expect(await serve(['--allow-host', '*', '--data-dir', dataDir], io)).toBe(2);
    expect(err).toMatch(/--allow-host: "\*" would let any name in, which undoes the DNS-rebinding guard/);
    vi.stubEnv('KVDESK_ALLOWED_HOSTS', 'box.local/ui');
    try {
      expect(await serve(['--data-dir', dataDir], io)).toBe(2);
      expect(err).toMatch(/\$KVDESK_ALLOWED_HOSTS: "box\.local\/ui" is not a host name to allow/);
    } finally {
      vi.unstubAllEnvs();
    }
  }, 60_000);

  it('loads each --model, serves, and closes the engine when told to stop', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-serve-inproc-'));
    let out = '';
    let stop!: () => void;
    const until = new Promise<void>((r) => {
      stop = r;
    });
    const running = serve(
      ['--port', '0', '--model', defaultModelDir, '--data-dir', dataDir, '--token', 'tok-123', '--threads', '1'],
      {
        out: (s) => (out += s),
        err: () => {},
      },
      { until },
    );
    try {
      const deadline = Date.now() + 30_000;
      while (!/kvdesk serving/.test(out)) {
        if (Date.now() > deadline) throw new Error('serve did not print its URL');
        await new Promise((r) => setTimeout(r, 20));
      }
      const url = (/kvdesk serving (\S+)/.exec(out) as RegExpExecArray)[1] as string;
      expect(out).toContain(`${url}/?token=tok-123`);
      expect((await fetch(`${url}/health`)).status).toBe(401);
      const health = await fetch(`${url}/health`, { headers: { authorization: 'Bearer tok-123' } });
      expect(await health.json()).toEqual({ status: 'ok', models: ['default'] });
      stop();
      expect(await running).toBe(0);
      await expect(fetch(`${url}/health`)).rejects.toThrow();
    } finally {
      stop();
      await running;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('closing the server', () => {
  it('ends streams in flight as a shutdown (shutdown.test.ts), which returns their bytes', async () => {
    const t = await startTestServer({ kvBudgetBytes: 4 * 1024 * 1024 });
    // The reply's end waits for the server's cancel (holdReplyEnds): it is still streaming when the server closes.
    const held = holdReplyEnds(t.runner.engine);
    try {
      const stream = await openaiClient(t.url).chat.completions.create({
        model: 'default',
        messages: LONG_CHAT,
        max_tokens: 100_000,
        temperature: 0,
        logit_bias: noEndBias(),
        stream: true,
      });
      let streaming!: () => void;
      const firstToken = new Promise<void>((resolve) => {
        streaming = resolve;
      });
      const reading = (async () => {
        for await (const ch of stream) {
          // keep reading until the server goes away
          if (ch.choices[0]?.delta.content) streaming();
        }
      })().then(
        () => 'closed',
        (e: unknown) => e,
      );
      await Promise.race([firstToken, reading]); // a reply that fails before its first token fails below
      await t.server.close();
      // The stream ended with the server's shutdown event (which the client throws as an error), not with its
      // connection cut once the close's grace ran out, and not as a reply that ended by itself.
      expect(await reading).toMatchObject({ message: expect.stringMatching(/shut/i) });
      const snap = await eventually(
        () => t.runner.snapshot(),
        (s) => s.running.length === 0,
      );
      expect(snap.reservedBytes).toBe(0);
      expect(snap.recent[snap.recent.length - 1]).toMatchObject({ state: 'cancelled', endReason: 'shutdown' });
      expect(held.cancelled).toEqual([snap.recent[snap.recent.length - 1]?.id]);
    } finally {
      held.restore();
      await t.close();
    }
  });
});
