/**
 * Tools for the window's chats from MCP servers (the Model Context Protocol, as LM Studio, Claude Desktop and
 * Cursor use it): `<data-dir>/mcp.json` names the servers in their common form,
 *
 *     { "mcpServers": {
 *         "files": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"] },
 *         "docs": { "url": "https://example.com/mcp", "headers": { "Authorization": "Bearer …" } } } }
 *
 * A `command` is a process kvdesk starts, speaking MCP over its stdin and stdout; a `url` is a server already
 * running, reached over Streamable HTTP (or the older HTTP+SSE transport, tried when the URL answers Streamable
 * HTTP's first request with a 4xx; `"type": "sse"` goes there at once). kvdesk connects to each the first time a
 * chat uses it, lists its tools for the model, and calls one when the person lets a call of the model run. The
 * file is read again whenever it changed; a server whose entry changed or went is stopped.
 */
import type { ChildProcess } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { isLosslessNumber, parse as losslessParse } from 'lossless-json';
import { z } from 'zod';
import type { McpServerStatus, McpStatus, McpToolResult } from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import { proxyFetch } from './proxy-fetch';

/**
 * The MCP SDK's client parts, loaded at the first connection to a server: a kvdesk with no MCP server in use never
 * loads them (with the copies of zod they bring, about a tenth of a second of every start of serve, the CLI and the
 * window, which each make a McpHub).
 */
async function loadSdk() {
  const [client, sse, stdio, http, types] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/sse.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js'),
  ]);
  return {
    Client: client.Client,
    SSEClientTransport: sse.SSEClientTransport,
    StdioClientTransport: stdio.StdioClientTransport,
    getDefaultEnvironment: stdio.getDefaultEnvironment,
    StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
    StreamableHTTPError: http.StreamableHTTPError,
    ErrorCode: types.ErrorCode,
    McpError: types.McpError,
  };
}
let sdkLoaded: ReturnType<typeof loadSdk> | undefined;
const sdk = () => {
  sdkLoaded ??= loadSdk();
  return sdkLoaded;
};

export const MCP_FILE = 'mcp.json';

/** How long a server may take to start and list its tools (`npx -y` downloads it the first time), and a tool to answer. */
const START_MS = 120_000;
const CALL_MS = 120_000;
/** The most text of a tool's answer the model is given (the rest is cut, and said so). */
const RESULT_CHARS = 100_000;

/** The form of an entry, for errors about one. */
const FORM =
  '{"mcpServers": {"name": {"command": "…", "args": […], "env": {…}}}} for a program kvdesk starts, {"mcpServers": {"name": {"url": "https://…", "headers": {…}}}} for a server already running';

const ServerEntry = z
  .object({
    command: z.string().min(1).max(4096).optional(),
    args: z.array(z.string().max(32_768)).max(256).optional(),
    env: z.record(z.string(), z.string().max(32_768)).optional(),
    cwd: z.string().min(1).max(4096).optional(),
    url: z
      .url({ protocol: /^https?$/, error: 'an http:// or https:// address of the MCP server' })
      .max(4096)
      .optional(),
    headers: z.record(z.string().min(1).max(256), z.string().max(16_384)).optional(),
    /** As Claude Code and VS Code write it; `sse` skips the Streamable HTTP try. */
    type: z.enum(['stdio', 'http', 'streamable-http', 'streamableHttp', 'sse']).optional(),
  })
  .loose()
  .superRefine((e, ctx) => {
    const issue = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
    if (e.command === undefined && e.url === undefined) {
      issue('command', 'give a "command" (a program kvdesk starts) or a "url" (a server already running)');
    } else if (e.command !== undefined && e.url !== undefined) {
      issue('url', 'give a "command" or a "url", not both');
    } else if (e.type === 'stdio' && e.url !== undefined) {
      issue('type', '"stdio" is for a "command"; a "url" is "http" or "sse"');
    } else if (e.type !== undefined && e.type !== 'stdio' && e.command !== undefined) {
      issue('type', `"${e.type}" is for a "url"; a "command" is "stdio"`);
    }
  });
const McpFile = z.object({ mcpServers: z.record(z.string().min(1).max(100), ServerEntry) }).loose();
type ServerEntry = z.infer<typeof ServerEntry>;

interface Running {
  entry: string;
  client: Client;
  tools: McpServerStatus['tools'];
}

/** A zod issue as the person reads it: where in mcp.json, what is wrong. */
function where(issue: z.core.$ZodIssue): string {
  return issue.path.length > 0 ? `${issue.path.join('.')}: ${issue.message}` : issue.message;
}

export class McpHub {
  private readonly file: string;
  private servers: Record<string, ServerEntry> = {};
  private configError: string | undefined;
  private readAt = -1;
  private readonly running = new Map<string, Running>();
  /** How each stdio server ended (its exit code) and what it wrote on stderr lately (its last lines). */
  private readonly saidBy = new WeakMap<Client, () => string>();
  private readonly starting = new Map<string, Promise<Running>>();
  private readonly failed = new Map<string, string>();
  /** Servers that stopped on their own after they ran, and why (until they start again). */
  private readonly exited = new Map<string, string>();
  private closed = false;
  private reloading: Promise<void> | null = null;

  constructor(dataDir: string) {
    this.file = path.join(dataDir, MCP_FILE);
  }

  /** The servers mcp.json names, which run and their tools, and what went wrong. */
  async status(): Promise<McpStatus> {
    await this.reload();
    return {
      configPath: this.file,
      ...(this.configError ? { error: this.configError } : {}),
      servers: Object.keys(this.servers).map((name) => this.serverStatus(name)),
    };
  }

  /** Starts the named servers that do not run yet (those that fail say why in their status). */
  async start(names: readonly string[]): Promise<McpStatus> {
    await this.reload();
    await Promise.all(names.filter((n) => this.servers[n]).map((n) => this.ensure(n).catch(() => undefined)));
    return this.status();
  }

  /** Calls a server's tool with the model's arguments (JSON text of an object). */
  async call(server: string, tool: string, argumentsJson: string): Promise<McpToolResult> {
    let args: unknown;
    try {
      args = argumentsJson.trim() === '' ? {} : JSON.parse(argumentsJson);
    } catch {
      return { content: `The arguments are not JSON: ${argumentsJson.slice(0, 200)}`, isError: true };
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) {
      return { content: 'The arguments are not a JSON object.', isError: true };
    }
    // A number past a double's range would reach the tool as null: said to the model instead. (A repeated key,
    // which JSON.parse lets the last one win, is no error here.)
    let huge: { at: string; text: string } | undefined;
    try {
      huge = outOfRange(losslessParse(argumentsJson));
    } catch {
      huge = undefined;
    }
    if (huge) {
      return {
        content: `The argument ${huge.at} is a number no tool can read (${huge.text}): write a smaller one.`,
        isError: true,
      };
    }
    await this.reload();
    if (!this.servers[server]) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `${this.file} names no MCP server "${server}" (any more): add it back, or let the model use another tool.`,
        {
          field: 'server',
        },
      );
    }
    const run = await this.ensure(server);
    if (!run.tools.some((t) => t.name === tool)) {
      return { content: `The MCP server "${server}" has no tool "${tool}".`, isError: true };
    }
    try {
      const result = await run.client.callTool({ name: tool, arguments: args as Record<string, unknown> }, undefined, {
        timeout: CALL_MS,
      });
      return { content: textOf(result.content), isError: result.isError === true };
    } catch (err) {
      // (Loaded: this server was connected to.)
      const { McpError, ErrorCode } = await sdk();
      // The connection to a server at a URL broke (its session ended, it restarted): anything but the server's own
      // answer (an MCP error) drops this connection, and the next call connects again.
      if (this.servers[server]?.url !== undefined && !(err instanceof McpError)) {
        if (this.running.get(server)?.client === run.client) void this.stop(server);
        const code = (err as { code?: unknown }).code;
        const status = typeof code === 'number' && code >= 100 ? `HTTP ${code}: ` : '';
        return {
          content: `The tool failed: the connection to the MCP server "${server}" broke (${status}${(err as Error).message}); it is made again at the next call.`,
          isError: true,
        };
      }
      // A server that died mid-call (its connection closed): what it last wrote on stderr says why.
      const died = err instanceof McpError && err.code === ErrorCode.ConnectionClosed;
      const why = died ? this.saidBy.get(run.client)?.() : undefined;
      return {
        content: `The tool failed: ${(err as Error).message}${why ? ` (${why})` : ''}`,
        isError: true,
      };
    }
  }

  /** Stops every server (kvdesk closing). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.running.keys()].map((n) => this.stop(n)));
  }

  private serverStatus(name: string): McpServerStatus {
    const kind = this.servers[name]?.url !== undefined ? { remote: true as const } : {};
    const run = this.running.get(name);
    if (run) return { name, ...kind, state: 'ready', tools: run.tools };
    if (this.starting.has(name)) return { name, ...kind, state: 'starting', tools: [] };
    const error = this.failed.get(name);
    if (error) return { name, ...kind, state: 'failed', error, tools: [] };
    const gone = this.exited.get(name);
    return gone
      ? { name, ...kind, state: 'exited', error: gone, tools: [] }
      : { name, ...kind, state: 'idle', tools: [] };
  }

  /** Reads mcp.json again when it changed (or appeared, or went); callers at once share one read. */
  private reload(): Promise<void> {
    if (!this.reloading) {
      this.reloading = this.read().finally(() => {
        this.reloading = null;
      });
    }
    return this.reloading;
  }

  private async read(): Promise<void> {
    const at = await stat(this.file).then(
      (s) => s.mtimeMs,
      () => 0,
    );
    if (at === this.readAt) return;
    let next: Record<string, ServerEntry> = {};
    this.configError = undefined;
    if (at !== 0) {
      const text = await readFile(this.file, 'utf8').catch(() => '');
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch (err) {
        this.configError = `${this.file} is not JSON (${(err as Error).message}): fix it; kvdesk reads it again at the next look.`;
      }
      if (!this.configError) {
        const parsed = McpFile.safeParse(json);
        if (parsed.success) next = parsed.data.mcpServers;
        else {
          this.configError = `${this.file}: ${where(parsed.error.issues[0] as z.core.$ZodIssue)} (the form is ${FORM}).`;
        }
      }
    }
    // A server whose entry changed or went stops; it starts again, as written now, when a chat uses it.
    const stale = [...new Set([...this.running.keys(), ...this.failed.keys(), ...this.exited.keys()])].filter(
      (name) => JSON.stringify(next[name]) !== this.running.get(name)?.entry,
    );
    for (const name of stale) {
      this.failed.delete(name);
      this.exited.delete(name);
    }
    await Promise.all(stale.map((name) => this.stop(name)));
    this.servers = next;
    this.readAt = at;
  }

  private ensure(name: string): Promise<Running> {
    const run = this.running.get(name);
    if (run) return Promise.resolve(run);
    const pending = this.starting.get(name);
    if (pending) return pending;
    const entry = this.servers[name] as ServerEntry;
    const started = this.launch(name, entry).then(
      (r) => {
        this.starting.delete(name);
        if (this.closed) {
          void r.client.close().catch(() => {});
          throw new KvdeskError('CANCELLED', 'kvdesk is closing.');
        }
        // mcp.json changed while it started: this one is not the server it names now.
        if (JSON.stringify(this.servers[name]) !== r.entry) {
          void r.client.close().catch(() => {});
          throw new KvdeskError(
            'BAD_REQUEST',
            `the MCP server "${name}" changed in ${this.file} while it started: try again.`,
            {
              field: 'server',
            },
          );
        }
        this.running.set(name, r);
        this.failed.delete(name);
        this.exited.delete(name);
        return r;
      },
      (err: unknown) => {
        this.starting.delete(name);
        const why = (err as Error).message;
        this.failed.set(name, why);
        throw new KvdeskError('BAD_REQUEST', `the MCP server "${name}" did not start: ${why}`, { field: 'server' });
      },
    );
    this.starting.set(name, started);
    return started;
  }

  private async launch(name: string, entry: ServerEntry): Promise<Running> {
    const deadline = Date.now() + START_MS;
    const timer = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`no answer within ${START_MS / 1000} s`)), START_MS).unref(),
    );
    let client: Client | undefined;
    try {
      client = await this.connect(entry, timer);
      const tools: McpServerStatus['tools'] = [];
      let cursor: string | undefined;
      do {
        const page = await Promise.race([client.listTools(cursor ? { cursor } : {}), timer]);
        for (const t of page.tools) {
          tools.push({
            name: t.name,
            ...(t.description ? { description: t.description.slice(0, 4000) } : {}),
            inputSchema: t.inputSchema as Record<string, unknown>,
          });
        }
        cursor = page.nextCursor;
      } while (cursor && tools.length < 1000 && Date.now() < deadline);
      // A server that exits (or a connection that closes) is connected again at its next use; until then its
      // status says it stopped, with what it last wrote. (kvdesk's own stops take it out of `running` first.)
      const connected = client;
      connected.onclose = () => {
        if (this.running.get(name)?.client !== connected) return;
        this.running.delete(name);
        const why = this.saidBy.get(connected)?.();
        this.exited.set(
          name,
          entry.url
            ? 'the connection closed'
            : `the program exited on its own (${why || 'it wrote nothing on stderr'})`,
        );
      };
      return { entry: JSON.stringify(entry), client: connected, tools };
    } catch (err) {
      void client?.close().catch(() => {});
      throw new Error(`${(err as Error).message} — check its ${entry.url ? 'url' : 'command'} in ${this.file}`);
    }
  }

  /** A client connected to the entry's server: its process started, or its URL reached. */
  private async connect(entry: ServerEntry, timer: Promise<never>): Promise<Client> {
    const {
      Client,
      SSEClientTransport,
      StdioClientTransport,
      getDefaultEnvironment,
      StreamableHTTPClientTransport,
      StreamableHTTPError,
    } = await sdk();
    const attempt = async (transport: Transport): Promise<Client> => {
      const client = new Client({ name: 'kvdesk', version: '1' });
      try {
        await Promise.race([client.connect(transport), timer]);
        return client;
      } catch (err) {
        void client.close().catch(() => {});
        throw err;
      }
    };
    if (entry.url) {
      const url = new URL(entry.url);
      const headers: Record<string, string> = { ...entry.headers };
      // A user name and password in the address are HTTP basic authentication (fetch refuses them in a URL).
      if (url.username || url.password) {
        const has = Object.keys(headers).some((h) => h.toLowerCase() === 'authorization');
        const basic = Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`);
        if (!has) headers.Authorization = `Basic ${basic.toString('base64')}`;
        url.username = '';
        url.password = '';
      }
      // As messages name it: no query (where hosted servers put their keys), in their words either.
      const shown = `${url.origin}${url.pathname}`;
      const scrub = (text: string) => (url.search ? text.split(url.search).join('?…') : text);
      const requestInit: RequestInit = { headers };
      // Through the proxy the environment names (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), which Node's fetch ignores.
      const viaProxy = proxyFetch(url.href);
      const options = { requestInit, ...(viaProxy ? { fetch: viaProxy.fetch } : {}) };
      const sse = () => attempt(new SSEClientTransport(url, options));
      const because = (err: unknown) => {
        const code = (err as { code?: unknown }).code;
        if (typeof code === 'number' && code >= 100) {
          const hint = code === 401 || code === 403 ? ' (the server wants credentials: set them under "headers")' : '';
          return new Error(`${shown} answered HTTP ${code}: ${scrub((err as Error).message)}${hint}`);
        }
        const cause = (err as { cause?: { code?: unknown } }).cause?.code;
        return new Error(
          `${shown} did not answer${viaProxy ? ` through the proxy ${viaProxy.proxy}` : ''}: ${scrub((err as Error).message)}${typeof cause === 'string' ? ` (${cause})` : ''}; ${viaProxy ? 'is the server running, and the proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) right?' : 'is the server running?'}`,
        );
      };
      if (entry.type === 'sse') return sse().catch((err) => Promise.reject(because(err)));
      try {
        return await attempt(new StreamableHTTPClientTransport(url, options));
      } catch (err) {
        // A 4xx other than "who are you" from a server of the older HTTP+SSE transport: that one, as the spec says.
        const code = err instanceof StreamableHTTPError ? err.code : undefined;
        const older =
          entry.type === undefined && code !== undefined && code >= 400 && code < 500 && code !== 401 && code !== 403;
        if (!older) throw because(err);
        return sse().catch(() => Promise.reject(because(err)));
      }
    }
    const transport = new StdioClientTransport({
      command: entry.command as string,
      args: entry.args ?? [],
      env: { ...getDefaultEnvironment(), ...(entry.env ?? {}) },
      ...(entry.cwd ? { cwd: entry.cwd } : {}),
      stderr: 'pipe',
    });
    // What the server says on stderr, and how it ended, for the error when it fails to start, or when a call
    // fails later.
    let said = '';
    transport.stderr?.on('data', (d: Buffer) => {
      said = (said + d.toString('utf8')).slice(-2000);
    });
    let ended = '';
    const start = transport.start.bind(transport);
    transport.start = async () => {
      await start();
      // The SDK keeps its child process to itself and drops the exit code, which says much (a crash, a signal, a
      // usage error): read it there, where it is (with no process there, the messages go without it).
      const child = (transport as unknown as { _process?: ChildProcess })._process;
      child?.once('exit', (code, signal) => {
        ended = signal ? `killed by ${signal}` : `exit code ${code}`;
      });
    };
    const why = () => {
      const tail = lastLines(said);
      return [ended, tail ? `it said: ${tail}` : ''].filter(Boolean).join('; ');
    };
    try {
      const client = await attempt(transport);
      this.saidBy.set(client, why);
      return client;
    } catch (err) {
      const because = why();
      throw new Error(`${(err as Error).message}${because ? ` (${because})` : ''}`);
    }
  }

  private async stop(name: string): Promise<void> {
    const run = this.running.get(name);
    this.running.delete(name);
    if (run) await run.client.close().catch(() => {});
  }
}

/** The last lines a server wrote on stderr, on one line. */
function lastLines(text: string): string {
  return text.trim().split('\n').slice(-3).join(' / ');
}

/** The first number (as written) a double cannot hold, and where it is (`a`, `list[2].b`); undefined when none. */
function outOfRange(value: unknown, at = ''): { at: string; text: string } | undefined {
  if (isLosslessNumber(value)) return Number.isFinite(Number(value.value)) ? undefined : { at, text: value.value };
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) {
      const hit = outOfRange(v, `${at}[${i}]`);
      if (hit) return hit;
    }
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const hit = outOfRange(v, at ? `${at}.${k}` : k);
      if (hit) return hit;
    }
  }
  return undefined;
}

/** A tool's answer as the model reads it: its text parts; other parts named (the model reads text only). */
function textOf(content: unknown): string {
  const parts = Array.isArray(content) ? content : [];
  const text = parts
    .map((p: { type?: string; text?: string; mimeType?: string; resource?: { uri?: string; text?: string } }) => {
      if (p.type === 'text') return p.text ?? '';
      if (p.type === 'resource') return p.resource?.text ?? `[resource ${p.resource?.uri ?? ''}]`;
      return `[${p.type ?? 'content'}${p.mimeType ? ` ${p.mimeType}` : ''}: not shown to the model]`;
    })
    .join('\n');
  return text.length > RESULT_CHARS
    ? `${text.slice(0, RESULT_CHARS)}\n[… cut: the answer was ${text.length} characters]`
    : text;
}
