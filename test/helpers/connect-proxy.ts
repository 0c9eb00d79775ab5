/**
 * A proxy for the tests of kvdesk's requests through HTTPS_PROXY / HTTP_PROXY (the hub, MCP servers at a URL): it
 * tunnels each CONNECT to its target, as a corporate proxy does; `tunnels` lists the targets. And the environment
 * variables that name one, set for a test and put back after it.
 */
import net from 'node:net';

export interface ConnectProxy {
  url: string;
  tunnels: string[];
  close(): void;
}

export async function startProxy(): Promise<ConnectProxy> {
  const tunnels: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.once('data', (head) => {
      const m = /^CONNECT (\S+):(\d+) HTTP\/1\.[01]\r\n/.exec(head.toString('latin1'));
      if (!m) {
        client.end('HTTP/1.1 405 Method Not Allowed\r\n\r\n');
        return;
      }
      tunnels.push(`${m[1]}:${m[2]}`);
      const target = net.connect(Number(m[2]), m[1] as string, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        client.pipe(target).pipe(client);
      });
      sockets.add(target);
      target.on('error', () => client.destroy());
      client.on('error', () => target.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    tunnels,
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

const VARIABLES = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'NO_PROXY', 'no_proxy'] as const;
const saved = Object.fromEntries(VARIABLES.map((n) => [n, process.env[n]]));

/** Names a proxy (and what it leaves out) in this process's environment, and nothing else. */
export function setProxy(vars: Partial<Record<(typeof VARIABLES)[number], string>>): void {
  for (const n of VARIABLES) delete process.env[n];
  Object.assign(process.env, vars);
}

/** The variables as they were before the first setProxy (an afterEach's). */
export function restoreProxy(): void {
  for (const n of VARIABLES) {
    if (saved[n] === undefined) delete process.env[n];
    else process.env[n] = saved[n];
  }
}
