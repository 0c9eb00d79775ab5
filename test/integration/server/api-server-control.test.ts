/**
 * The desktop window's API server (Models view → API server), through the contract calls the window makes, over
 * the real host, engine and HTTP server: it starts on 127.0.0.1 and answers the APIs with the window's own models
 * (a generation there shows in the same scheduler), moves to another port, stops (its port closes), says why it
 * cannot start on a port in use, and leaves the host's calls working throughout. `kvdesk serve`'s status says
 * where its API answers and refuses to be started or stopped from a page.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';
import { createApiServerControl, serveControl } from '../../../src/main/server';
import type { ApiServerStatus } from '../../../src/shared/api';
import { defaultModelDir } from '../../helpers/fixtures';
import { startTestServer } from './server-helpers';

let dataDir: string;
let hostApi: HostApi;
let control: ReturnType<typeof createApiServerControl>;
const log: string[] = [];

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-api-server-'));
  let resolveHost!: (h: HostApi) => void;
  const host = new Promise<HostApi>((r) => {
    resolveHost = r;
  });
  control = createApiServerControl({
    host: () => host,
    staticDir: path.join(dataDir, 'no-renderer'),
    log: (line) => log.push(line),
  });
  hostApi = await createHostApi({
    runner: new RunnerService({ intraOpNumThreads: 1 }),
    dataDir,
    defaultModelDir,
    log: () => {},
    apiServer: control,
  });
  resolveHost(hostApi);
}, 60_000);

afterAll(async () => {
  await control.close();
  await hostApi.close();
  await rm(dataDir, { recursive: true, force: true });
});

async function call<T>(name: 'apiServerStatus' | 'startApiServer' | 'stopApiServer', request = {}): Promise<T> {
  const r = await hostApi.call(name, request);
  if (!r.ok) throw new Error(`${name}: ${r.error.message}`);
  return r.value as T;
}

/** A port nobody listens on right now. */
async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Nobody listens on the URL's port any more (a new connection is refused). */
async function refused(url: string): Promise<void> {
  const port = Number(new URL(url).port);
  const code = await new Promise<string | undefined>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(undefined);
    });
    socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code));
  });
  expect(code).toBe('ECONNREFUSED');
}

describe("the window's API server", () => {
  it('is off until started; then the APIs answer on 127.0.0.1 with the window’s models and scheduler', async () => {
    expect(await call<ApiServerStatus>('apiServerStatus')).toEqual({
      running: false,
      controlledBy: 'window',
      tokenRequired: false,
    });
    const port = await freePort();
    const on = await call<ApiServerStatus>('startApiServer', { port });
    expect(on).toEqual({
      running: true,
      controlledBy: 'window',
      url: `http://127.0.0.1:${port}`,
      port,
      tokenRequired: false,
    });
    expect(await call<ApiServerStatus>('apiServerStatus')).toEqual(on);

    const models = (await (await fetch(`${on.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain('default');
    const accepted: string[] = [];
    const off = hostApi.on('scheduler', (e) => {
      if (e.type === 'accepted') accepted.push(e.modelId);
    });
    const res = await fetch(`${on.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    // The request ran in the window's own scheduler (the inspector shows it).
    off();
    expect(accepted).toEqual(['default']);

    // Starting again on the same port keeps it; another port moves it (the old one closes).
    expect(await call<ApiServerStatus>('startApiServer', { port })).toEqual(on);
    expect(log.filter((l) => l.includes('stopped'))).toEqual([]); // not restarted: its clients keep their sockets
    const other = await freePort();
    const moved = await call<ApiServerStatus>('startApiServer', { port: other });
    expect(moved.url).toBe(`http://127.0.0.1:${other}`);
    await refused(on.url ?? '');
    expect((await fetch(`${moved.url}/v1/models`)).status).toBe(200);

    const stopped = await call<ApiServerStatus>('stopApiServer');
    expect(stopped).toEqual({ running: false, controlledBy: 'window', tokenRequired: false });
    await refused(moved.url ?? '');
    // The host itself is untouched.
    expect((await hostApi.call('listModels', {})).ok).toBe(true);
  }, 60_000);

  it('a move to a port in use leaves it where it was; every start and stop is announced', async () => {
    const heard: ApiServerStatus[] = [];
    const off = hostApi.on('apiServer', (st) => heard.push(st));
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    const busy = (blocker.address() as net.AddressInfo).port;
    try {
      const on = await call<ApiServerStatus>('startApiServer', { port: await freePort() });
      const r = await hostApi.call('startApiServer', { port: busy });
      expect(r.ok).toBe(false);
      expect(await call<ApiServerStatus>('apiServerStatus')).toEqual(on);
      expect((await fetch(`${on.url}/v1/models`)).status).toBe(200);
      await call<ApiServerStatus>('stopApiServer');
      // Started, the failed move (still where it was), stopped.
      expect(heard.map((s) => s.running)).toEqual([true, true, false]);
      expect(heard[1]).toEqual(on);
    } finally {
      off();
      await new Promise<void>((r) => blocker.close(() => r()));
    }
  });

  it('says why it cannot listen on a port in use, and stays off', async () => {
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    const port = (blocker.address() as net.AddressInfo).port;
    try {
      const r = await hostApi.call('startApiServer', { port });
      expect(r.ok).toBe(false);
      if (!r.ok) {
        expect(r.error.code).toBe('BAD_REQUEST');
        expect(r.error.message).toContain(`port ${port} is in use`);
      }
      expect((await call<ApiServerStatus>('apiServerStatus')).running).toBe(false);
    } finally {
      await new Promise<void>((r) => blocker.close(() => r()));
    }
  });

  it('refuses a port outside 0–65535, naming the field', async () => {
    const r = await hostApi.call('startApiServer', { port: 70_000 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toContain('field port');
  });
});

describe("kvdesk serve's API", () => {
  it('says where it answers, and cannot be started or stopped from a page', async () => {
    const t = await startTestServer({}, { loadDefault: false });
    try {
      const status = serveControl(() => t.server, true);
      expect(status.status()).toEqual({
        running: true,
        controlledBy: 'serve',
        url: t.url,
        port: t.server.port,
        tokenRequired: true,
      });
      await expect(status.start(1234)).rejects.toThrow('this page is served by `kvdesk serve`');
      await expect(status.stop()).rejects.toThrow('whose API runs as long as it does');
    } finally {
      await t.close();
    }
  });
});
