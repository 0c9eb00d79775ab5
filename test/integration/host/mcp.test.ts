/**
 * MCP servers for the window's chats (src/main/host/mcp.ts), with a real MCP server process
 * (test/helpers/mcp-server.ts, the official SDK over stdio): mcp.json read and checked (errors name the field),
 * servers started on use with their tools listed, tools called, failures said, the file read again when it changes;
 * and servers at a URL (test/helpers/mcp-http-server.ts): Streamable HTTP with the entry's headers, the older
 * HTTP+SSE transport when the URL is one of those, through the proxy the environment names, and what a refused or
 * absent server says.
 */
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MCP_FILE, McpHub } from '../../../src/main/host/mcp';
import { restoreProxy, setProxy, startProxy } from '../../helpers/connect-proxy';
import { repoRoot } from '../../helpers/fixtures';
import { type McpHttpServer, startMcpHttp } from '../../helpers/mcp-http-server';

const server = (env: Record<string, string> = {}) => ({
  command: process.execPath,
  args: [path.join(repoRoot, 'bin/run-ts.cjs'), path.join(repoRoot, 'test/helpers/mcp-server.ts')],
  env,
});

let dir: string;
let hub: McpHub;
let tick = 1;
/** Writes mcp.json with a new modification time (the hub reads it again when that changes). */
const write = (json: unknown) => {
  const file = path.join(dir, MCP_FILE);
  writeFileSync(file, typeof json === 'string' ? json : JSON.stringify(json));
  const t = new Date(Date.now() + tick++ * 1000);
  utimesSync(file, t, t);
};

beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-mcp-'));
  hub = new McpHub(dir);
});
afterEach(async () => {
  restoreProxy();
  await hub.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('McpHub', () => {
  it('without mcp.json: no servers, no error', async () => {
    expect(await hub.status()).toEqual({ configPath: path.join(dir, MCP_FILE), servers: [] });
  });

  it('starts a server on use, lists its tools, and calls them', async () => {
    write({ mcpServers: { calc: server() } });
    expect((await hub.status()).servers).toEqual([{ name: 'calc', state: 'idle', tools: [] }]);
    const started = await hub.start(['calc']);
    const calc = started.servers[0];
    expect(calc?.state).toBe('ready');
    expect(calc?.tools.map((t) => t.name)).toEqual(['echo', 'add', 'fail', 'slow']);
    expect(calc?.tools[1]).toMatchObject({
      description: 'Adds two numbers',
      inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } },
    });
    expect(await hub.call('calc', 'add', '{"a": 2, "b": 40}')).toEqual({ content: '42', isError: false });
    expect(await hub.call('calc', 'fail', '{}')).toEqual({ content: 'it broke', isError: true });
    // Arguments the tool's schema refuses: the server's error, as the tool's answer.
    const wrong = await hub.call('calc', 'add', '{"a": "two"}');
    expect(wrong.isError).toBe(true);
    expect(wrong.content).toMatch(/Input validation error/);
    // A key written twice: the last one counts (as JSON.parse reads it), no error of kvdesk's own.
    expect(await hub.call('calc', 'add', '{"a": 1, "a": 5, "b": 1}')).toEqual({ content: '6', isError: false });
    // A number past a double's range (it would reach the tool as null): said, with where it is.
    expect(await hub.call('calc', 'add', '{"a": 1, "b": 6E08044}')).toEqual({
      content: 'The argument b is a number no tool can read (6E08044): write a smaller one.',
      isError: true,
    });
    expect(await hub.call('calc', 'echo', '{"text": "hi"}')).toEqual({ content: 'You said: hi', isError: false });
    // Not JSON, not an object, no such tool: said to the model, nothing called.
    expect(await hub.call('calc', 'add', '{a: 2')).toMatchObject({ isError: true, content: /not JSON/ });
    expect(await hub.call('calc', 'add', '[1, 2]')).toMatchObject({ isError: true, content: /not a JSON object/ });
    expect(await hub.call('calc', 'nope', '{}')).toEqual({
      content: 'The MCP server "calc" has no tool "nope".',
      isError: true,
    });
    // A server mcp.json does not name: refused, naming the file.
    await expect(hub.call('other', 'add', '{}')).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining(`${path.join(dir, MCP_FILE)} names no MCP server "other"`),
    });
  }, 60_000);

  it('a server that does not start says why, with what it said', async () => {
    write({ mcpServers: { broken: server({ KVDESK_TEST_MCP_CRASH: '1' }) } });
    const s = await hub.start(['broken']);
    expect(s.servers[0]).toMatchObject({ name: 'broken', state: 'failed', tools: [] });
    expect(s.servers[0]?.error).toMatch(/\(exit code 3; it said: cannot open the database\)/);
    expect(s.servers[0]?.error).toContain(`check its command in ${path.join(dir, MCP_FILE)}`);
    await expect(hub.call('broken', 'add', '{}')).rejects.toMatchObject({
      message: expect.stringContaining('the MCP server "broken" did not start'),
    });
  }, 60_000);

  it('a server that dies mid-call: the answer says what it last wrote, and the next call starts it again', async () => {
    write({ mcpServers: { dying: server({ KVDESK_TEST_MCP_ONLY: 'exit' }) } });
    const answer = await hub.call('dying', 'exit', '{}');
    expect(answer.isError).toBe(true);
    expect(answer.content).toMatch(
      /^The tool failed: .*Connection closed.* \(exit code 7; it said: out of memory: dying now\)$/,
    );
    // The settings say it stopped, and why, until it runs again.
    expect((await hub.status()).servers).toEqual([
      {
        name: 'dying',
        state: 'exited',
        error: 'the program exited on its own (exit code 7; it said: out of memory: dying now)',
        tools: [],
      },
    ]);
    // Its entry changed: what the old one said is gone; the next call starts it as written now.
    write({ mcpServers: { dying: server({ KVDESK_TEST_MCP_ONLY: 'exit', EXTRA: '1' }) } });
    expect((await hub.status()).servers[0]?.state).toBe('idle');
    // The next call finds it started again (and dying again).
    expect((await hub.call('dying', 'exit', '{}')).content).toMatch(/it said: out of memory: dying now/);
  }, 60_000);

  it('a bad mcp.json is said with the field; a changed entry stops its server', async () => {
    write('{"mcpServers": ');
    expect((await hub.status()).error).toMatch(/is not JSON/);
    write({ mcpServers: { calc: { args: [] } } });
    expect((await hub.status()).error).toMatch(/mcpServers\.calc\.command: .*the form is \{"mcpServers"/);
    write({ mcpServers: { calc: server() } });
    expect((await hub.status()).error).toBeUndefined();
    expect((await hub.start(['calc'])).servers[0]?.state).toBe('ready');
    // The entry changes: the running server stops; the next use starts it as written now.
    write({ mcpServers: { calc: server({ EXTRA: '1' }) } });
    expect((await hub.status()).servers[0]?.state).toBe('idle');
    expect(await hub.call('calc', 'add', '{"a": 1, "b": 1}')).toEqual({ content: '2', isError: false });
    // Read at once by several callers after a change: each sees the file as it is now.
    write({ mcpServers: { calc: server(), more: server() } });
    const [status, answer] = await Promise.all([hub.status(), hub.call('more', 'add', '{"a": 2, "b": 2}')]);
    expect(status.servers.map((s) => s.name)).toEqual(['calc', 'more']);
    expect(answer).toEqual({ content: '4', isError: false });
    // Gone from the file: gone from the status.
    write({ mcpServers: {} });
    expect((await hub.status()).servers).toEqual([]);
  }, 60_000);
});

describe('McpHub, servers at a URL', () => {
  let remote: McpHttpServer | undefined;
  afterEach(async () => {
    await remote?.close();
    remote = undefined;
  });

  it('a user name and password in the address are basic authentication; a query stays out of messages', async () => {
    remote = await startMcpHttp({ token: 's3cret' });
    write({ mcpServers: { web: { url: `${remote.url.replace('http://', 'http://me:pw@')}?key=sk-query` } } });
    const web = (await hub.start(['web'])).servers[0];
    // The test server wants a bearer token: basic authentication is sent, and refused with 401.
    expect(web?.error).toContain(`${remote.url} answered HTTP 401: `);
    expect(web?.error).not.toContain('pw');
    expect(web?.error).not.toContain('sk-query');
    expect(remote.basicAuth.at(-1)).toBe(`Basic ${Buffer.from('me:pw').toString('base64')}`);
  }, 60_000);

  it('Streamable HTTP, with the headers the entry gives', async () => {
    remote = await startMcpHttp({ token: 's3cret' });
    write({ mcpServers: { web: { url: remote.url, headers: { Authorization: 'Bearer s3cret' } } } });
    expect((await hub.status()).servers).toEqual([{ name: 'web', remote: true, state: 'idle', tools: [] }]);
    const web = (await hub.start(['web'])).servers[0];
    expect(web?.state).toBe('ready');
    expect(web?.remote).toBe(true);
    expect(web?.tools.map((t) => t.name)).toEqual(['echo', 'add', 'fail', 'slow']);
    expect(await hub.call('web', 'add', '{"a": 2, "b": 40}')).toEqual({ content: '42', isError: false });
    expect(await hub.call('web', 'fail', '{}')).toEqual({ content: 'it broke', isError: true });
    // Over Streamable HTTP only: no SSE stream was opened. (A secret in the address never shows in a message.)
    expect(remote.requests.filter((r) => !r.startsWith('POST /mcp'))).toEqual(
      remote.requests.filter((r) => r.startsWith('GET /mcp') || r.startsWith('DELETE /mcp')),
    );
    expect(remote.requests.some((r) => r.includes('/sse'))).toBe(false);
  }, 60_000);

  it('through the proxy the environment names (HTTP_PROXY; NO_PROXY reaches directly); one not there is named', async () => {
    remote = await startMcpHttp({});
    const proxy = await startProxy();
    try {
      setProxy({ HTTP_PROXY: proxy.url });
      write({ mcpServers: { web: { url: remote.url } } });
      expect(await hub.call('web', 'add', '{"a": 2, "b": 40}')).toEqual({ content: '42', isError: false });
      expect(proxy.tunnels).toContain(new URL(remote.url).host);
      await hub.close();
      hub = new McpHub(dir);
      setProxy({ HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1' });
      proxy.tunnels.length = 0;
      expect(await hub.call('web', 'add', '{"a": 1, "b": 1}')).toEqual({ content: '2', isError: false });
      expect(proxy.tunnels).toEqual([]);
    } finally {
      proxy.close();
    }
    // A proxy that is not there (its port closed): named, without its password, with what to check.
    await hub.close();
    hub = new McpHub(dir);
    setProxy({ http_proxy: new URL(proxy.url).origin.replace('//', '//me:pw@') });
    const web = (await hub.start(['web'])).servers[0];
    expect(web?.state).toBe('failed');
    expect(web?.error).toContain(`did not answer through the proxy ${proxy.url}:`);
    expect(web?.error).toContain('the proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) right?');
    expect(web?.error).not.toContain('pw');
  }, 60_000);

  it('a session the server ended (it restarted): the call says so, and the next one connects again', async () => {
    remote = await startMcpHttp({ stateful: true });
    write({ mcpServers: { web: { url: remote.url } } });
    expect(await hub.call('web', 'add', '{"a": 1, "b": 1}')).toEqual({ content: '2', isError: false });
    remote.forgetSessions();
    const lost = await hub.call('web', 'add', '{"a": 2, "b": 2}');
    expect(lost.isError).toBe(true);
    expect(lost.content).toMatch(
      /^The tool failed: the connection to the MCP server "web" broke \(HTTP 404: .*\); it is made again at the next call\.$/,
    );
    expect(await hub.call('web', 'add', '{"a": 3, "b": 3}')).toEqual({ content: '6', isError: false });
  }, 60_000);

  it('without the credentials: refused, saying where they go; the older transport is not tried', async () => {
    remote = await startMcpHttp({ token: 's3cret' });
    write({ mcpServers: { web: { url: remote.url } } });
    const web = (await hub.start(['web'])).servers[0];
    expect(web?.state).toBe('failed');
    expect(web?.error).toContain(`${remote.url} answered HTTP 401: `);
    expect(web?.error).toContain('set them under "headers"');
    expect(web?.error).toContain(`check its url in ${path.join(dir, MCP_FILE)}`);
    expect(remote.requests).toEqual(['POST /mcp 401']);
  }, 60_000);

  it('a server of the older HTTP+SSE transport: reached after its 4xx to Streamable HTTP, or at once with "sse"', async () => {
    remote = await startMcpHttp({ sseOnly: true });
    write({ mcpServers: { old: { url: remote.url } } });
    expect((await hub.start(['old'])).servers[0]?.state).toBe('ready');
    expect(await hub.call('old', 'echo', '{"text": "hi"}')).toEqual({ content: 'You said: hi', isError: false });
    expect(remote.requests[0]).toBe('POST /sse 405');
    expect(remote.requests.some((r) => r.startsWith('POST /messages 202'))).toBe(true);

    await hub.close();
    hub = new McpHub(dir);
    remote.requests.length = 0;
    write({ mcpServers: { old: { url: remote.url, type: 'sse' } } });
    expect(await hub.call('old', 'add', '{"a": 1, "b": 2}')).toEqual({ content: '3', isError: false });
    expect(remote.requests.some((r) => r.startsWith('POST /sse'))).toBe(false);
  }, 60_000);

  it('an HTTP+SSE server that forgot the session: the call says so, and the next one connects again', async () => {
    remote = await startMcpHttp({ sseOnly: true });
    write({ mcpServers: { old: { url: remote.url, type: 'sse' } } });
    expect(await hub.call('old', 'add', '{"a": 1, "b": 1}')).toEqual({ content: '2', isError: false });
    remote.forgetSessions();
    const lost = await hub.call('old', 'add', '{"a": 2, "b": 2}');
    expect(lost.isError).toBe(true);
    expect(lost.content).toMatch(
      /^The tool failed: the connection to the MCP server "old" broke \(.*405.*\); it is made again/,
    );
    expect(await hub.call('old', 'add', '{"a": 3, "b": 3}')).toEqual({ content: '6', isError: false });
    // A tool's own error is its answer, not a broken connection: the same connection answers next.
    const streams = remote.requests.filter((r) => r.startsWith('GET /sse')).length;
    expect((await hub.call('old', 'add', '{"a": "x"}')).isError).toBe(true);
    expect(await hub.call('old', 'add', '{"a": 4, "b": 4}')).toEqual({ content: '8', isError: false });
    expect(remote.requests.filter((r) => r.startsWith('GET /sse')).length).toBe(streams);
  }, 60_000);

  it('nobody at the URL: said, with the address (without what could be a secret in it)', async () => {
    const gone = await startMcpHttp();
    const url = gone.url;
    await gone.close();
    write({ mcpServers: { web: { url: `${url.replace('http://', 'http://me:pw@')}?key=sk-secret` } } });
    const web = (await hub.start(['web'])).servers[0];
    expect(web?.state).toBe('failed');
    expect(web?.error).toContain(`${url} did not answer: `);
    expect(web?.error).not.toContain('sk-secret');
    expect(web?.error).not.toContain('pw');
    expect(web?.error).toContain('ECONNREFUSED');
    expect(web?.error).toContain('is the server running?');
    expect(web?.error).toContain('check its url');
  }, 60_000);

  it('entries that are neither, or both, or a wrong address: the field is named', async () => {
    write({ mcpServers: { web: { url: 'ftp://example.com/mcp' } } });
    expect((await hub.status()).error).toMatch(/mcpServers\.web\.url: an http:\/\/ or https:\/\/ address/);
    write({ mcpServers: { web: { url: 'http://127.0.0.1:9/mcp', command: 'node' } } });
    expect((await hub.status()).error).toMatch(/mcpServers\.web\.url: give a "command" or a "url", not both/);
    write({ mcpServers: { web: { url: 'http://127.0.0.1:9/mcp', type: 'stdio' } } });
    expect((await hub.status()).error).toMatch(/mcpServers\.web\.type: "stdio" is for a "command"/);
    write({ mcpServers: { web: { command: 'node', type: 'sse' } } });
    expect((await hub.status()).error).toMatch(/mcpServers\.web\.type: "sse" is for a "url"/);
    write({ mcpServers: { web: { headers: {} } } });
    expect((await hub.status()).error).toMatch(
      /mcpServers\.web\.command: give a "command" \(a program kvdesk starts\) or a "url".*\{"url": "https:/,
    );
  });
});
