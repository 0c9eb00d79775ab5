/**
 * The test MCP server (test/helpers/mcp-test-server.ts) at a URL, as a remote server in a person's mcp.json:
 * Streamable HTTP at `/mcp` (stateless: a server per request, as the SDK's stateless example; `stateful`: a session
 * per client, which `forgetSessions` ends as a restart of the server would), or — `sseOnly` — the
 * older HTTP+SSE transport (GET `/sse` opens the stream, POST `/messages` carries the requests), whose server answers
 * a Streamable HTTP POST with 405. With `token`, every request without `Authorization: Bearer <token>` gets 401.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { testMcpServer } from './mcp-test-server';

export interface McpHttpServer {
  /** The address for mcp.json's `url`. */
  url: string;
  /** Requests it answered, as `METHOD /path status`. */
  requests: string[];
  /** The basic-authentication headers requests brought. */
  basicAuth: string[];
  /**
   * Forgets every session (`stateful`, or the HTTP+SSE streams' ids), as a server that restarted: their next
   * request gets 404 (405 for an SSE stream's messages).
   */
  forgetSessions(): void;
  close(): Promise<void>;
}

export async function startMcpHttp(
  opts: { token?: string; sseOnly?: boolean; stateful?: boolean } = {},
): Promise<McpHttpServer> {
  const requests: string[] = [];
  const basicAuth: string[] = [];
  const streams = new Map<string, SSEServerTransport>();
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const server = http.createServer((req, res) => {
    const where = new URL(req.url ?? '/', 'http://x');
    res.on('finish', () => requests.push(`${req.method} ${where.pathname} ${res.statusCode}`));
    if (req.headers.authorization?.startsWith('Basic ')) basicAuth.push(req.headers.authorization);
    if (opts.token !== undefined && req.headers.authorization !== `Bearer ${opts.token}`) {
      res.writeHead(401, { 'content-type': 'text/plain' }).end('a bearer token is needed');
      return;
    }
    void (async () => {
      if (opts.sseOnly) {
        if (req.method === 'GET' && where.pathname === '/sse') {
          const transport = new SSEServerTransport('/messages', res);
          streams.set(transport.sessionId, transport);
          res.on('close', () => streams.delete(transport.sessionId));
          await testMcpServer().connect(transport);
          return;
        }
        const stream = streams.get(where.searchParams.get('sessionId') ?? '');
        if (req.method === 'POST' && where.pathname === '/messages' && stream) {
          await stream.handlePostMessage(req, res);
          return;
        }
        res.writeHead(405).end();
        return;
      }
      if (opts.stateful && where.pathname === '/mcp') {
        const id = req.headers['mcp-session-id'];
        const known = typeof id === 'string' ? sessions.get(id) : undefined;
        if (known) {
          await known.handleRequest(req, res);
          return;
        }
        if (id !== undefined) {
          res.writeHead(404, { 'content-type': 'text/plain' }).end('no such session');
          return;
        }
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => {
            sessions.set(sid, transport);
          },
        });
        await testMcpServer().connect(transport);
        await transport.handleRequest(req, res);
        return;
      }
      if (req.method === 'POST' && where.pathname === '/mcp') {
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
        const mcp = testMcpServer();
        res.on('close', () => {
          void transport.close();
          void mcp.close();
        });
        await mcp.connect(transport);
        await transport.handleRequest(req, res);
        return;
      }
      res.writeHead(405).end();
    })().catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${opts.sseOnly ? '/sse' : '/mcp'}`,
    requests,
    basicAuth,
    forgetSessions: () => {
      sessions.clear();
      streams.clear();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
