/**
 * A real headless server for the server tests: RunnerService with the real
 * engine process, HostApi over it (default model loaded), startServer on an
 * ephemeral loopback port.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { expect } from 'vitest';
import { createHostApi, type HostApi } from '../../../src/main/host/host-api';
import type { HubOptions } from '../../../src/main/host/hub-download';
import { type HostSettings, RunnerService } from '../../../src/main/host/runner-service';
import { type RunningServer, type ServerOptions, startServer } from '../../../src/main/server';
import type { SchedulerSnapshot } from '../../../src/shared/scheduler-types';
import { defaultModelDir } from '../../helpers/fixtures';

/** A server and everything behind it. */
export interface TestServer {
  url: string;
  server: RunningServer;
  hostApi: HostApi;
  runner: RunnerService;
  dataDir: string;
  close(): Promise<void>;
}

/**
 * Starts a server; `loadDefault: false` leaves it without a model, `defaultModel` starts it with that folder as its
 * default model instead, `dataDir` on a data folder of the test's own (left as it is on close).
 */
export async function startTestServer(
  settings: Partial<HostSettings> = {},
  options: Partial<Omit<ServerOptions, 'hostApi'>> & {
    loadDefault?: boolean;
    defaultModel?: string;
    dataDir?: string;
    hub?: HubOptions;
  } = {},
): Promise<TestServer> {
  const { loadDefault = true, defaultModel = defaultModelDir, dataDir: ownDataDir, hub, ...serverOptions } = options;
  const dataDir = ownDataDir ?? (await mkdtemp(path.join(os.tmpdir(), 'kvdesk-server-test-')));
  const runner = new RunnerService({ intraOpNumThreads: 1, ...settings });
  const hostApi = await createHostApi({
    runner,
    dataDir,
    ...(loadDefault ? { defaultModelDir: defaultModel } : {}),
    ...(hub ? { hub } : {}),
    log: () => {},
  });
  const server = await startServer({ hostApi, staticDir: path.join(dataDir, 'no-renderer'), ...serverOptions });
  return {
    url: server.url,
    server,
    hostApi,
    runner,
    dataDir,
    async close() {
      await server.close();
      await hostApi.close();
      if (ownDataDir === undefined) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Prompt tokens of a conversation through chat completions: a user turn, one call of a tool and its result.
 * Other APIs' tests compare their own prompt for the same conversation with it.
 */
export async function chatPromptOfToolTurn(
  url: string,
  turn: {
    user: string;
    call: { id: string; name: string; arguments: string };
    result: string;
    tool: { name: string; description?: string; parameters: Record<string, unknown> };
  },
): Promise<number | undefined> {
  const chat = await openaiClient(url).chat.completions.create({
    model: 'default',
    messages: [
      { role: 'user', content: turn.user },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: turn.call.id, type: 'function', function: { name: turn.call.name, arguments: turn.call.arguments } },
        ],
      },
      { role: 'tool', tool_call_id: turn.call.id, content: turn.result },
    ],
    tools: [{ type: 'function', function: turn.tool }],
    max_tokens: 1,
  });
  return chat.usage?.prompt_tokens;
}

/** The official client against a server; no retries, so a 429 reaches the test. */
export function openaiClient(url: string, apiKey = 'x'): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
}

/** GET /v1/kvdesk/budget. */
export async function budget(url: string, init: RequestInit = {}): Promise<SchedulerSnapshot> {
  const res = await fetch(`${url}/v1/kvdesk/budget`, init);
  expect(res.status).toBe(200);
  return (await res.json()) as SchedulerSnapshot;
}

/** Polls until `check` holds (or fails the test after `timeoutMs`). */
export async function eventually<T>(
  fn: () => Promise<T> | T,
  check: (v: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (check(v)) return v;
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(v).slice(0, 2000)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits until nothing runs or waits and no byte is reserved. */
export function settled(url: string): Promise<SchedulerSnapshot> {
  return eventually(
    () => budget(url),
    (s) => s.reservedBytes === 0 && s.running.length === 0 && s.queue.length === 0,
  );
}

/** A raw HTTP request with exactly the headers and path given (fetch normalizes paths and forbids Host). */
export function rawRequest(
  url: string,
  opts: { method?: string; path: string; headers?: Record<string, string>; body?: string | Buffer },
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, method: opts.method ?? 'GET', path: opts.path, headers: opts.headers ?? {} },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** A chat prompt whose greedy reply runs to 1500 tokens on the default model (no eos): a request that stays running. */
export const LONG_CHAT = [{ role: 'user' as const, content: 'Tell me a long story' }];

/** An Ollama NDJSON stream's lines, each parsed; the stream is a 200 of application/x-ndjson, every line ended. */
export async function ndjsonLines(res: Response): Promise<Array<Record<string, unknown>>> {
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('application/x-ndjson');
  const text = await res.text();
  expect(text.endsWith('\n')).toBe(true);
  return text
    .slice(0, -1)
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}
