/**
 * `npm run setup:cuda`, as the README gives it, must reach onnxruntime-node's download of the CUDA provider (it
 * once exited 0 having fetched nothing: under npm the installer took itself for onnxruntime-node's own `npm ci`),
 * and a run that leaves no libraries must fail saying so. No network is needed: HTTPS_PROXY points at a local proxy
 * that notes where the installer wanted to go and refuses the tunnel.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/fixtures';

const onLinuxX64 = process.platform === 'linux' && process.arch === 'x64';

describe.skipIf(!onLinuxX64)('npm run setup:cuda (linux/x64, where onnxruntime-node publishes the provider)', () => {
  const tunnels: string[] = [];
  let proxy: http.Server;
  let proxyUrl: string;

  beforeAll(async () => {
    proxy = http.createServer((_req, res) => res.writeHead(502).end());
    proxy.on('connect', (req, socket) => {
      tunnels.push(req.url ?? '');
      socket.end('HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n');
    });
    proxy.listen(0, '127.0.0.1');
    await once(proxy, 'listening');
    proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  });

  afterAll(() => {
    proxy.close();
  });

  it("runs onnxruntime-node's download, and fails naming what is missing when it cannot fetch", async () => {
    const env: NodeJS.ProcessEnv = {};
    for (const [key, value] of Object.entries(process.env)) {
      if (!/^(npm_|GLOBAL_AGENT_|ONNXRUNTIME_NODE_INSTALL|https?_proxy$|no_proxy$)/i.test(key)) env[key] = value;
    }
    env.HTTPS_PROXY = proxyUrl;
    const child = spawn('npm', ['run', '--silent', 'setup:cuda'], { cwd: repoRoot, env });
    let output = '';
    child.stdout.on('data', (b: Buffer) => {
      output += b.toString();
    });
    child.stderr.on('data', (b: Buffer) => {
      output += b.toString();
    });
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(tunnels, output).toContain('api.nuget.org:443');
    expect(code, output).toBe(1);
    expect(output).toMatch(/the CUDA provider libraries were not installed: the installer failed/);
    expect(output).toMatch(/Missing from .*libonnxruntime_providers_cuda\.so/);
    expect(output).toContain('set HTTPS_PROXY');
  }, 30_000);
});
