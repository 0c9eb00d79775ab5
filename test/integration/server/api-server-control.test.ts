/**
 * The desktop window's API server (Models view → API server), through the contract calls the window makes, over
 * the real host, engine and HTTP server: it starts on 127.0.0.1 and answers the APIs with the window's own models
 * (a generation there shows in the same scheduler), moves to another port, stops (its port closes), says why it
 * cannot start on a port in use, and leaves the host's calls working throughout. `kvdesk serve`'s status says
 * where its API answers and refuses to be started or stopped from a page.
 */
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import { RunnerService } from '../../../src/main/host/runner-service';
import { API_KEY_FILE, createApiServerControl, lanAddresses, serveControl } from '../../../src/main/server';
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
    keyFile: path.join(dataDir, API_KEY_FILE),
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

async function call<T>(
  name: 'apiServerStatus' | 'startApiServer' | 'stopApiServer' | 'newApiKey',
  request = {},
): Promise<T> {
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

/**
 * The status of a GET on a fresh connection (fetch would reuse a kept-alive socket of a server that restarted on
 * the same port, which it closed); rejects when nothing answers.
 */
function statusOf(url: string, key?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, headers: key ? { authorization: `Bearer ${key}` } : {} }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('error', reject);
  });
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
      lan: false,
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

  it('with the key: every request carries it; it is kept, readable by this user only; a new one replaces it', async () => {
    const port = await freePort();
    const on = await call<ApiServerStatus>('startApiServer', { port, requireKey: true });
    const key = on.key ?? '';
    expect(on).toEqual({
      running: true,
      controlledBy: 'window',
      url: `http://127.0.0.1:${port}`,
      port,
      tokenRequired: true,
      lan: false,
      key,
    });
    expect(key).toMatch(/^kvd-[A-Za-z0-9_-]{43}$/);
    const keyFile = path.join(dataDir, API_KEY_FILE);
    expect((await readFile(keyFile, 'utf8')).trim()).toBe(key);
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    const models = (k?: string) => statusOf(`${on.url}/v1/models`, k);
    expect(await models()).toBe(401);
    expect(await models('kvd-wrong')).toBe(401);
    expect(await models(key)).toBe(200);

    // Turned off on the same port: no key wanted, none shown.
    const open = await call<ApiServerStatus>('startApiServer', { port, requireKey: false });
    expect(open).toMatchObject({ running: true, port, tokenRequired: false, lan: false });
    expect(open.key).toBeUndefined();
    expect(await models()).toBe(200);
    // On again: the same key (it is kept), until a new one is asked for.
    expect((await call<ApiServerStatus>('startApiServer', { port, requireKey: true })).key).toBe(key);
    const renewed = await call<ApiServerStatus>('newApiKey');
    expect(renewed).toMatchObject({ running: true, port, tokenRequired: true });
    expect(renewed.key).not.toBe(key);
    expect(await models(key)).toBe(401);
    expect(await models(renewed.key)).toBe(200);
    expect((await readFile(keyFile, 'utf8')).trim()).toBe(renewed.key);

    // Another window's control (kvdesk started again) reads the kept key; one not of kvdesk's making is replaced.
    await call('stopApiServer');
    const again = createApiServerControl({ host: async () => hostApi, keyFile });
    try {
      expect((await again.start({ port: 0, requireKey: true })).key).toBe(renewed.key);
    } finally {
      await again.close();
    }
    await writeFile(keyFile, 'password\n');
    const fresh = createApiServerControl({ host: async () => hostApi, keyFile });
    try {
      const st = await fresh.start({ port: 0, requireKey: true });
      expect(st.key).toMatch(/^kvd-/);
      expect((await readFile(keyFile, 'utf8')).trim()).toBe(st.key);
    } finally {
      await fresh.close();
    }
  }, 60_000);

  it('with CORS: a page of any site may call the model APIs (the key still wanted); off again on the same port', async () => {
    const port = await freePort();
    const preflight = () =>
      new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.request(
          `http://127.0.0.1:${port}/v1/chat/completions`,
          {
            method: 'OPTIONS',
            agent: false,
            headers: { origin: 'https://chat.example', 'access-control-request-method': 'POST' },
          },
          (res) => {
            res.resume();
            resolve(res);
          },
        );
        req.once('error', reject);
        req.end();
      });
    const on = await call<ApiServerStatus>('startApiServer', { port, requireKey: true, cors: true });
    expect(on).toMatchObject({ running: true, port, tokenRequired: true, cors: true });
    const answered = await preflight();
    expect(answered.statusCode).toBe(204);
    expect(answered.headers['access-control-allow-origin']).toBe('https://chat.example');
    const off = await call<ApiServerStatus>('startApiServer', { port, requireKey: true });
    expect(off.cors).toBeUndefined();
    expect((await preflight()).statusCode).toBe(403);
    await call('stopApiServer');
  });

  it('on the local network: every address, always with the key, its addresses listed', async () => {
    const port = await freePort();
    // Asked without the key: the key is wanted all the same.
    const on = await call<ApiServerStatus>('startApiServer', { port, lan: true, requireKey: false });
    const key = on.key ?? '';
    expect(on).toMatchObject({ running: true, port, tokenRequired: true, lan: true });
    expect(key).toMatch(/^kvd-/);
    expect(on.lanUrls).toEqual(lanAddresses().map((a) => `http://${a}:${port}`));
    expect(await statusOf(`http://127.0.0.1:${port}/v1/models`)).toBe(401);
    expect(await statusOf(`http://127.0.0.1:${port}/v1/models`, key)).toBe(200);
    // From another address of this computer, as another device of the network reaches it.
    for (const url of on.lanUrls ?? []) {
      expect(await statusOf(`${url}/v1/models`)).toBe(401);
      expect(await statusOf(`${url}/v1/models`, key)).toBe(200);
    }
    // Back to this computer only: another address no longer reaches it.
    const local = await call<ApiServerStatus>('startApiServer', { port });
    expect(local).toMatchObject({ running: true, port, tokenRequired: false, lan: false });
    expect(local.lanUrls).toBeUndefined();
    for (const url of on.lanUrls ?? []) await expect(statusOf(`${url}/v1/models`)).rejects.toThrow(/ECONNREFUSED/);
    expect(await statusOf(`http://127.0.0.1:${port}/v1/models`)).toBe(200);
    await call('stopApiServer');
  }, 60_000);

  it('on the local network: an address this computer gets after the start is its own too', async () => {
    const port = await freePort();
    const on = await call<ApiServerStatus>('startApiServer', { port, lan: true });
    const key = on.key ?? '';
    // A request that names the server by an address it does not have yet (as after joining a network).
    const byName = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const req = http.get(
          {
            host: '127.0.0.1',
            port,
            path: '/v1/models',
            agent: false,
            headers: { host: `${host}:${port}`, authorization: `Bearer ${key}` },
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.once('error', reject);
      });
    expect(await byName('10.99.0.7')).toBe(403);
    const real = os.networkInterfaces();
    const spy = vi.spyOn(os, 'networkInterfaces').mockReturnValue({
      ...real,
      wlan9: [
        {
          address: '10.99.0.7',
          netmask: '255.255.255.0',
          family: 'IPv4',
          mac: '02:00:00:00:00:09',
          internal: false,
          cidr: '10.99.0.7/24',
        },
      ],
    });
    try {
      await new Promise((r) => setTimeout(r, 1100));
      expect(await byName('10.99.0.7')).toBe(200);
      expect((await call<ApiServerStatus>('apiServerStatus')).lanUrls).toContain(`http://10.99.0.7:${port}`);
    } finally {
      spy.mockRestore();
    }
    await call('stopApiServer');
  }, 30_000);

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
      await expect(status.start({ port: 1234 })).rejects.toThrow('this page is served by `kvdesk serve`');
      await expect(status.stop()).rejects.toThrow('whose API runs as long as it does');
    } finally {
      await t.close();
    }
  });
});
