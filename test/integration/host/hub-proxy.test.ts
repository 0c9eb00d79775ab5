/**
 * Hub requests through the proxy the environment names (HTTPS_PROXY / HTTP_PROXY, NO_PROXY), as curl, pip and
 * Ollama take it: Node's own fetch ignores those variables, so behind a proxy every search and pull failed. A real
 * tunnelling proxy (HTTP CONNECT) in front of the local imitation of the hub (test/helpers/fake-hub.ts).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { downloadHubModel } from '../../../src/main/host/hub-download';
import { searchHub } from '../../../src/main/host/hub-search';
import { type ConnectProxy, restoreProxy, setProxy, startProxy } from '../../helpers/connect-proxy';
import { defaultModelRepo, type FakeHub, startFakeHub } from '../../helpers/fake-hub';

afterEach(restoreProxy);

let hub: FakeHub;
let proxy: ConnectProxy;
const repo = defaultModelRepo();
beforeAll(async () => {
  hub = await startFakeHub({ 'onnx-community/tiny-chat': repo }, { meta: { 'onnx-community/tiny-chat': {} } });
  proxy = await startProxy();
});
afterAll(() => {
  hub?.close();
  proxy?.close();
});

describe('the hub behind a proxy', () => {
  it('searches and pulls through the proxy HTTP_PROXY names, bytes intact', async () => {
    setProxy({ HTTP_PROXY: proxy.url });
    const hubAt = new URL(hub.url).host;
    expect((await searchHub('tiny', { endpoint: hub.url })).map((h) => h.repo)).toEqual(['onnx-community/tiny-chat']);
    expect(proxy.tunnels).toContain(hubAt);
    const models = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-proxy-pull-'));
    try {
      const { root } = await downloadHubModel('onnx-community/tiny-chat', models, { endpoint: hub.url });
      expect((await readFile(path.join(root, 'onnx/model_q4.onnx'))).equals(repo['onnx/model_q4.onnx'] as Buffer)).toBe(
        true,
      );
    } finally {
      await rm(models, { recursive: true, force: true });
    }
    // The download went through it too (the hub's, and its file store's, where large files are redirected).
    expect(proxy.tunnels.filter((t) => t === hubAt).length).toBeGreaterThan(1);
  });

  it('takes HTTPS_PROXY for https only: a hub at an http address is reached directly', async () => {
    setProxy({ HTTPS_PROXY: proxy.url });
    proxy.tunnels.length = 0;
    expect(await searchHub('tiny', { endpoint: hub.url })).toHaveLength(1);
    expect(proxy.tunnels).toEqual([]);
  });

  it('goes straight to a host NO_PROXY names', async () => {
    setProxy({ HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1' });
    proxy.tunnels.length = 0;
    expect(await searchHub('tiny', { endpoint: hub.url })).toHaveLength(1);
    expect(proxy.tunnels).toEqual([]);
    // Such a host that does not answer is not blamed on the proxy, which was not used.
    const err = await searchHub('tiny', { endpoint: 'http://127.0.0.1:9' }).catch((e: unknown) => e as Error);
    expect((err as Error).message).toMatch(/^could not reach http:\/\/127\.0\.0\.1:9: /);
  });

  it('a proxy that cannot be reached is named in the error, with what to check', async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    setProxy({ http_proxy: `http://user:secret@127.0.0.1:${port}` });
    const err = await searchHub('tiny', { endpoint: hub.url }).catch((e: unknown) => e as Error);
    expect(err).toMatchObject({ code: 'DOWNLOAD_FAILED' });
    expect((err as Error).message).toContain(`through the proxy http://127.0.0.1:${port}`);
    expect((err as Error).message).toContain('Check the proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY)');
    expect((err as Error).message).not.toContain('secret');
  });
});
