/**
 * Bad input never breaks the server: every generating endpoint of every API (OpenAI's chat, completions and
 * responses, Anthropic's messages and token count, Ollama's chat, generate and show) gets valid requests with
 * one field replaced by an arbitrary JSON value, or an arbitrary JSON body. Each answer is a 200 or a 4xx (a
 * 503 only for a full queue or a budget that cannot hold the request) with a JSON body, never a 5xx from a
 * crash; the server answers /health after, and nothing is left running.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settled, startTestServer, type TestServer } from './server-helpers';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: 4 * 1024 * 1024 });
});
afterAll(async () => {
  await t?.close();
});

const user = [{ role: 'user', content: 'Hi' }];
const tools = [
  {
    type: 'function',
    function: { name: 'lamp', parameters: { type: 'object', properties: { on: { type: 'boolean' } } } },
  },
];
// Each endpoint's valid request, short and not streamed; the length fields are never replaced (a random one
// could ask for the whole context).
const ENDPOINTS: Array<{ path: string; body: Record<string, unknown>; keep: string[] }> = [
  {
    path: '/v1/chat/completions',
    body: { model: 'default', messages: user, max_tokens: 2, temperature: 0, tools, tool_choice: 'auto', stop: ['x'] },
    keep: ['max_tokens'],
  },
  {
    path: '/v1/completions',
    body: { model: 'default', prompt: 'Hi', max_tokens: 2, n: 1, logprobs: 1 },
    keep: ['max_tokens'],
  },
  {
    path: '/v1/responses',
    body: { model: 'default', input: 'Hi', max_output_tokens: 2, instructions: 'Be brief', tools: [] },
    keep: ['max_output_tokens'],
  },
  {
    path: '/v1/messages',
    body: { model: 'default', messages: user, max_tokens: 2, system: 'Be brief', stop_sequences: ['x'] },
    keep: ['max_tokens'],
  },
  { path: '/v1/messages/count_tokens', body: { model: 'default', messages: user, system: 'x' }, keep: [] },
  {
    path: '/api/chat',
    body: { model: 'default', messages: user, stream: false, options: { num_predict: 2, temperature: 0 }, tools },
    keep: [],
  },
  {
    path: '/api/generate',
    body: { model: 'default', prompt: 'Hi', stream: false, options: { num_predict: 2 }, system: 'x' },
    keep: [],
  },
  { path: '/api/show', body: { model: 'default' }, keep: [] },
];

/** Fields the APIs read (each API ignores or refuses the others'), and Ollama's options. */
const FIELDS = [
  ...['model', 'messages', 'prompt', 'input', 'system', 'instructions', 'tools', 'tool_choice', 'stream', 'n'],
  ...['temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stop', 'stop_sequences', 'logit_bias', 'logprobs'],
  ...['top_logprobs', 'response_format', 'format', 'text', 'parallel_tool_calls', 'stream_options', 'metadata'],
  ...['frequency_penalty', 'presence_penalty', 'output_config', 'thinking', 'think', 'raw', 'suffix', 'images'],
  ...['context', 'template', 'keep_alive', 'options', 'name', 'repeat_penalty', 'repeat_last_n', 'mirostat'],
  ...['max_completion_tokens', 'echo', 'best_of', 'user', 'store', 'previous_response_id', 'include', 'truncation'],
];

/** A request with one field (or one of `options`' fields) replaced by, or added as, an arbitrary JSON value. */
const mutated = fc
  .record({
    endpoint: fc.constantFrom(...ENDPOINTS),
    key: fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...FIELDS) }, { weight: 1, arbitrary: fc.string() }),
    inOptions: fc.boolean(),
    value: fc.jsonValue({ maxDepth: 3 }),
  })
  .map(({ endpoint, key, inOptions, value }) => {
    const body: Record<string, unknown> = structuredClone(endpoint.body);
    if (endpoint.keep.includes(key) || key === 'num_predict') return { path: endpoint.path, body };
    if (inOptions && endpoint.path.startsWith('/api/')) {
      body.options = { ...(body.options as object), [key]: value };
      (body.options as Record<string, unknown>).num_predict = 2;
    } else if (key !== 'stream') body[key] = value;
    return { path: endpoint.path, body };
  });

async function post(path: string, body: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${t.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: res.status, text: await res.text() };
}

/** The answer is a 200 or a refusal, with a JSON body (NDJSON lines for an Ollama stream). */
function expectAnswered(label: string, r: { status: number; text: string }): void {
  const ok = r.status === 200 || (r.status >= 400 && r.status < 500) || r.status === 503;
  expect(ok, `${label} → ${r.status} ${r.text.slice(0, 300)}`).toBe(true);
  const lines = r.text.split('\n').filter((l) => l.trim() !== '');
  expect(lines.length, label).toBeGreaterThan(0);
  for (const line of lines) expect(() => JSON.parse(line), `${label}: ${line.slice(0, 200)}`).not.toThrow();
}

describe('the API under arbitrary input', () => {
  it('answers valid requests with one field replaced by anything with a 200 or a 4xx, never a crash', async () => {
    await fc.assert(
      fc.asyncProperty(mutated, async ({ path, body }) => {
        const r = await post(path, JSON.stringify(body));
        expectAnswered(`${path} ${JSON.stringify(body).slice(0, 300)}`, r);
      }),
      { numRuns: 250 },
    );
  }, 120_000);

  it('answers arbitrary JSON bodies with a 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ENDPOINTS.map((e) => e.path)),
        fc.jsonValue({ maxDepth: 3 }),
        async (path, v) => {
          const r = await post(path, JSON.stringify(v));
          expectAnswered(`${path} ${JSON.stringify(v).slice(0, 200)}`, r);
          // Only a body that happens to be a valid request could be answered, and a random one never is.
          expect(r.status, `${path} ${JSON.stringify(v).slice(0, 200)}`).toBeGreaterThanOrEqual(400);
        },
      ),
      { numRuns: 150 },
    );
  }, 120_000);

  it('is still up after, with nothing left running', async () => {
    const health = await fetch(`${t.url}/health`);
    expect(health.status).toBe(200);
    const snap = await settled(t.url);
    expect(snap.violations).toEqual([]);
  });
});
