/**
 * Ollama's native API against a real server with the default model, over plain fetch (as Ollama's clients
 * speak it): chat and generate with the same tokens the OpenAI endpoints give, newline-delimited JSON streams
 * whose pieces add up to the non-streamed reply, JSON mode and structured output, tool history without call
 * ids rendered as chat completions renders it, the model listings, refusals in Ollama's `{"error"}` shape
 * (before a stream and as its last line), and the server's token.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OLLAMA_API_VERSION } from '../../../src/main/server/ollama-routes';
import { repoRoot } from '../../helpers/fixtures';
import { holdReplyEnds } from '../../helpers/hold-replies';
import {
  budget,
  chatPromptOfToolTurn,
  eventually,
  LONG_CHAT,
  ndjsonLines,
  openaiClient,
  settled,
  startTestServer,
  type TestServer,
} from './server-helpers';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: 4 * 1024 * 1024 });
});
afterAll(async () => {
  await t?.close();
});

type Json = Record<string, unknown>;

function post(p: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${t.url}${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

async function json(p: string, body: unknown): Promise<Json> {
  const res = await post(p, body);
  expect(res.status, await res.clone().text()).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return (await res.json()) as Json;
}

const lines = ndjsonLines;

/** Greedy, so the random default model gives the same tokens every time. */
const greedy = (n: number) => ({ temperature: 0, seed: 1, num_predict: n });
const hello = [{ role: 'user', content: 'Hello there' }];
const message = (b: Json) => b.message as { role: string; content: string; tool_calls?: unknown[] };

describe('POST /api/chat', () => {
  it('answers with the tokens chat completions gives; counts and nanosecond durations', async () => {
    const body = await json('/api/chat', { model: 'default', messages: hello, stream: false, options: greedy(12) });
    const chat = await openaiClient(t.url).chat.completions.create({
      model: 'default',
      messages: [{ role: 'user', content: 'Hello there' }],
      max_tokens: 12,
      temperature: 0,
    });
    expect(body).toMatchObject({ model: 'default', done: true, done_reason: 'length', eval_count: 12 });
    expect(message(body)).toEqual({ role: 'assistant', content: chat.choices[0]?.message.content });
    expect(body.prompt_eval_count).toBe(chat.usage?.prompt_tokens);
    expect(body.load_duration).toBe(0);
    for (const k of ['total_duration', 'prompt_eval_duration', 'eval_duration']) {
      expect(Number.isInteger(body[k]), k).toBe(true);
      expect(body[k] as number, k).toBeGreaterThan(0);
    }
    expect(body.total_duration as number).toBeGreaterThanOrEqual(
      (body.prompt_eval_duration as number) + (body.eval_duration as number) - 1,
    );
    expect(Number.isNaN(Date.parse(body.created_at as string))).toBe(false);
  });

  it('streams by default: NDJSON pieces that add up to the non-streamed reply, then a done line', async () => {
    const ask = { model: 'default:latest', messages: hello, options: greedy(16) };
    const whole = await json('/api/chat', { ...ask, stream: false });
    const got = await lines(await post('/api/chat', ask));
    const last = got[got.length - 1] as Json;
    const pieces = got.slice(0, -1);
    expect(pieces.length).toBeGreaterThan(1);
    for (const p of pieces) {
      expect(p).toMatchObject({ model: 'default:latest', done: false, message: { role: 'assistant' } });
    }
    expect(pieces.map((p) => message(p).content).join('')).toBe(message(whole).content);
    expect(last).toMatchObject({
      model: 'default:latest',
      done: true,
      done_reason: 'length',
      eval_count: 16,
      message: { role: 'assistant', content: '' },
    });
    expect(last.prompt_eval_count).toBe(whole.prompt_eval_count);
  });

  it('num_predict -1 leaves the length to the context: the request may fill it, not the package default of 256', async () => {
    const body = await json('/api/chat', {
      model: 'default',
      messages: hello,
      stream: false,
      options: { temperature: 0, seed: 1, num_predict: -1 },
    });
    const prompt = body.prompt_eval_count as number;
    const view = (await budget(t.url)).recent.at(-1);
    // The scheduler admitted it for the whole rest of the 2048-token context.
    expect(view?.maxNewTokens).toBe(2048 - prompt);
    expect(body.eval_count as number).toBeLessThanOrEqual(2048 - prompt);
  });

  it('an empty message list loads the model: done at once with done_reason "load"', async () => {
    const body = await json('/api/chat', { model: 'default', messages: [], stream: false });
    expect(body).toMatchObject({ model: 'default', done: true, done_reason: 'load', message: { content: '' } });
    const streamed = await lines(await post('/api/chat', { model: 'default', messages: [] }));
    expect(streamed).toHaveLength(1);
    expect(streamed[0]).toMatchObject({ done: true, done_reason: 'load' });
  });

  it('format "json": replies are JSON objects (or their start, cut by num_predict)', async () => {
    // Seeded sampling: greedy decoding of the random model writes an object longer than any small limit.
    let stopped = 0;
    for (const seed of [1, 2, 3, 4, 5]) {
      const body = await json('/api/chat', {
        model: 'default',
        messages: [{ role: 'user', content: 'Reply in JSON.' }],
        format: 'json',
        stream: false,
        options: { temperature: 1, seed, num_predict: 120 },
      });
      const text = message(body).content;
      expect(text.startsWith('{'), text).toBe(true);
      if (body.done_reason === 'stop') {
        stopped++;
        const value = JSON.parse(text) as unknown;
        expect(typeof value).toBe('object');
        expect(Array.isArray(value)).toBe(false);
      } else expect(body.done_reason).toBe('length');
    }
    expect(stopped).toBeGreaterThan(0);
  });

  it('format as a JSON schema: the reply conforms (checked with ajv), streamed or not', async () => {
    const schema = {
      type: 'object',
      properties: { city: { enum: ['Oslo', 'Paris'] }, on: { type: 'boolean' } },
      required: ['city', 'on'],
    };
    const validate = new Ajv().compile(schema);
    const ask = { model: 'default', messages: [{ role: 'user', content: 'Which city?' }], format: schema };
    const body = await json('/api/chat', { ...ask, stream: false, options: { num_predict: 60 } });
    expect(body.done_reason).toBe('stop');
    const value = JSON.parse(message(body).content) as unknown;
    expect(validate(value), JSON.stringify(validate.errors)).toBe(true);
    const got = await lines(await post('/api/chat', { ...ask, options: { num_predict: 60 } }));
    const text = got
      .slice(0, -1)
      .map((p) => message(p).content)
      .join('');
    expect(validate(JSON.parse(text))).toBe(true);
    expect(got[got.length - 1]).toMatchObject({ done: true, done_reason: 'stop' });
  });

  it('tools with a format: each reply is calls (arguments as objects) or the JSON the format asks for', async () => {
    const lamp = {
      name: 'set_lamp',
      parameters: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
    };
    const format = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
    const seen = { calls: 0, json: 0 };
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const body = await json('/api/chat', {
        model: 'default',
        messages: [{ role: 'user', content: 'Lamp on please' }],
        tools: [{ type: 'function', function: lamp }],
        format,
        stream: false,
        options: { temperature: 1, seed, num_predict: 120 },
      });
      const reply = message(body);
      if (reply.tool_calls?.length) {
        seen.calls++;
        expect(reply.content.trim()).toBe('');
        for (const call of reply.tool_calls) {
          expect(call).toMatchObject({ function: { name: 'set_lamp', arguments: { on: expect.any(Boolean) } } });
        }
      } else if (body.done_reason === 'stop') {
        seen.json++;
        expect([{ ok: true }, { ok: false }]).toContainEqual(JSON.parse(reply.content));
      }
    }
    // Both came up (with these seeds: one call, five answers).
    expect(seen.calls, JSON.stringify(seen)).toBeGreaterThan(0);
    expect(seen.json, JSON.stringify(seen)).toBeGreaterThan(0);
  });

  it('tool history without call ids renders as chat completions renders it; the reply is well-formed', async () => {
    const tool = {
      name: 'set_lamp',
      description: 'Turn the lamp on or off',
      parameters: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
    };
    const body = await json('/api/chat', {
      model: 'default',
      messages: [
        { role: 'user', content: 'Lamp on please' },
        { role: 'assistant', content: '', tool_calls: [{ function: { name: 'set_lamp', arguments: { on: true } } }] },
        { role: 'tool', tool_name: 'set_lamp', content: 'done' },
      ],
      tools: [{ type: 'function', function: tool }],
      stream: false,
      options: greedy(8),
    });
    expect(body.done).toBe(true);
    expect(['stop', 'length']).toContain(body.done_reason);
    const reply = message(body);
    expect(reply.role).toBe('assistant');
    expect(typeof reply.content).toBe('string');
    for (const call of reply.tool_calls ?? []) {
      expect(call).toMatchObject({ function: { name: 'set_lamp' } });
      expect(typeof (call as { function: { arguments: unknown } }).function.arguments).toBe('object');
    }
    const chat = await chatPromptOfToolTurn(t.url, {
      user: 'Lamp on please',
      call: { id: 'call_1_0', name: 'set_lamp', arguments: '{"on":true}' },
      result: 'done',
      tool,
    });
    expect(body.prompt_eval_count).toBe(chat);
    // A call left without its result is refused before anything runs, in Ollama's words.
    const open = await post('/api/chat', {
      model: 'default',
      messages: [
        { role: 'user', content: 'Lamp on please' },
        { role: 'assistant', content: '', tool_calls: [{ function: { name: 'set_lamp', arguments: { on: true } } }] },
        { role: 'user', content: 'Well?' },
      ],
      stream: false,
    });
    expect(open.status).toBe(400);
    expect(((await open.json()) as { error: string }).error).toMatch(/^messages\[1\]\.tool_calls\[0\] \(set_lamp\)/);
  });
});

describe('POST /api/generate', () => {
  it('templated: the prompt is one user turn under the system prompt, as /api/chat renders it', async () => {
    const gen = await json('/api/generate', {
      model: 'default',
      prompt: 'Hello there',
      system: 'Be brief.',
      stream: false,
      options: greedy(10),
    });
    const chat = await json('/api/chat', {
      model: 'default',
      messages: [{ role: 'system', content: 'Be brief.' }, ...hello],
      stream: false,
      options: greedy(10),
    });
    expect(gen).toMatchObject({ model: 'default', done: true, done_reason: 'length', eval_count: 10 });
    expect(gen.response).toBe(message(chat).content);
    expect(gen.prompt_eval_count).toBe(chat.prompt_eval_count);
    expect(gen).not.toHaveProperty('context');
  });

  it('raw: the prompt as written, the tokens /v1/completions gives; streamed pieces add up to it', async () => {
    const ask = { model: 'default', prompt: 'Once upon a time', raw: true, options: greedy(12) };
    const whole = await json('/api/generate', { ...ask, stream: false });
    const completion = await openaiClient(t.url).completions.create({
      model: 'default',
      prompt: 'Once upon a time',
      max_tokens: 12,
      temperature: 0,
    });
    expect(whole.response).toBe(completion.choices[0]?.text);
    expect(whole.prompt_eval_count).toBe(completion.usage?.prompt_tokens);
    const got = await lines(await post('/api/generate', ask));
    expect(
      got
        .slice(0, -1)
        .map((p) => p.response)
        .join(''),
    ).toBe(whole.response);
    expect(got[got.length - 1]).toMatchObject({ response: '', done: true, done_reason: 'length', eval_count: 12 });
  });

  it('an empty prompt loads the model: done_reason "load"', async () => {
    const body = await json('/api/generate', { model: 'default', stream: false });
    expect(body).toMatchObject({ model: 'default', response: '', done: true, done_reason: 'load' });
  });
});

describe('the model listings', () => {
  it('GET /api/tags lists the loaded models as Ollama does, empty where kvdesk does not know', async () => {
    const res = await fetch(`${t.url}/api/tags`);
    expect(res.status).toBe(200);
    const { models } = (await res.json()) as { models: Json[] };
    expect(models).toHaveLength(1);
    const m = models[0] as Json;
    expect(m).toMatchObject({
      name: 'default:latest',
      model: 'default:latest',
      digest: '',
      details: { format: 'onnx', family: 'llama', parameter_size: '' },
    });
    expect(m.size as number).toBeGreaterThan(0);
    expect(Number.isNaN(Date.parse(m.modified_at as string))).toBe(false);
    // The listed name is one a client can chat with (Open WebUI looks up name:latest in this list and sends it).
    const reply = await json('/api/chat', { model: m.model, messages: hello, stream: false, options: greedy(2) });
    expect(reply).toMatchObject({ model: 'default:latest', done: true });
  });

  it('GET /api/ps: on the CPU, no VRAM; the context length; never expires', async () => {
    const res = await fetch(`${t.url}/api/ps`);
    const { models } = (await res.json()) as { models: Json[] };
    expect(models[0]).toMatchObject({ name: 'default:latest', size_vram: 0, context_length: 2048 });
    expect(Date.parse(models[0]?.expires_at as string)).toBeGreaterThan(Date.now());
  });

  it('POST /api/show: details, model_info, template, capabilities; by model or name, with :latest', async () => {
    const body = await json('/api/show', { model: 'default' });
    expect(body).toMatchObject({
      capabilities: ['completion', 'tools'],
      details: { format: 'onnx', family: 'llama' },
      model_info: { 'general.architecture': 'llama', 'llama.context_length': 2048, 'llama.block_count': 4 },
    });
    expect(body.template).toMatch(/<\|im_start\|>/);
    expect(await json('/api/show', { name: 'default:latest' })).toEqual({ ...body, modified_at: body.modified_at });
    const missing = await post('/api/show', { model: 'llama3.2' });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({
      error:
        'model "llama3.2" not found: kvdesk knows default (GET /api/tags lists them; add packages with --model or the UI).',
    });
  });

  it('GET /api/version is the Ollama API level kvdesk speaks, with its own version beside it', async () => {
    const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string };
    const res = await fetch(`${t.url}/api/version`);
    expect(await res.json()).toEqual({ version: OLLAMA_API_VERSION, kvdesk: pkg.version });
  });
});

describe("errors in Ollama's shape", () => {
  const error = async (res: Response, status: number): Promise<string> => {
    expect(res.status).toBe(status);
    const body = (await res.json()) as Json;
    expect(Object.keys(body)).toEqual(['error']);
    expect(typeof body.error).toBe('string');
    return body.error as string;
  };

  it('an unknown model is a 404 naming it; bad input a 400 naming the field; the server stays up', async () => {
    for (const p of ['/api/chat', '/api/generate']) {
      const err = await error(await post(p, { model: 'nope', messages: hello, prompt: 'hi' }), 404);
      expect(err).toMatch(/^model "nope" not found: kvdesk knows default/);
    }
    expect(
      await error(await post('/api/chat', { model: 'default', messages: hello, options: { temperature: 'hot' } }), 400),
    ).toMatch(/"options\.temperature" must be a number/);
    // A model that does not think cannot be asked to (as Ollama: "does not support thinking").
    expect(await error(await post('/api/chat', { model: 'default', messages: hello, think: true }), 400)).toMatch(
      /does not think.*\(Ollama's field: think\)$/,
    );
    expect(await error(await post('/api/generate', { model: 'default', prompt: 'x', suffix: 'y' }), 400)).toMatch(
      /"suffix"/,
    );
    expect(await error(await post('/api/generate', { model: 'default', prompt: 'x', context: [1] }), 400)).toMatch(
      /"context"/,
    );
    // A refusal from the host names Ollama's field too.
    const schema = { type: 'object', properties: { n: { type: 'number', minimum: 1 } }, required: ['n'] };
    for (const p of ['/api/chat', '/api/generate']) {
      const refused = await error(
        await post(p, { model: 'default', messages: hello, prompt: 'hi', format: schema }),
        400,
      );
      // In Ollama's names: its JSON schema is `format` (not the contract's jsonSchema, nor OpenAI's json_schema).
      expect(refused).toMatch(/^format is not one kvdesk can enforce: /);
      expect(refused).not.toMatch(/jsonSchema|json_schema/);
      expect(refused).toMatch(/\(Ollama's field: format\.properties\.n\.minimum\)$/);
    }
    expect(await error(await post('/api/chat', '{"model":'), 400)).toMatch(/not valid JSON/);
    expect(await error(await fetch(`${t.url}/api/chat`), 405)).toMatch(/use POST/);
    expect(await error(await post('/api/embed', { model: 'default', input: 'x' }), 404)).toMatch(/There is no/);
    // kvdesk's own upload under /api keeps answering the renderer in its Result envelope.
    const upload = await post('/api/models/upload', {});
    expect(upload.status).toBe(400);
    expect(await upload.json()).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    expect((await fetch(`${t.url}/health`)).status).toBe(200);
    expect((await settled(t.url)).reservedBytes).toBe(0);
  });

  it('a failure after the stream began is its last line, {"error": …}', async () => {
    // The reply's end waits for the host's cancel (holdReplyEnds): it is still streaming when the window stops it,
    // however slow the machine (1,500 greedy tokens on the default model take about a second).
    const held = holdReplyEnds(t.runner.engine);
    try {
      const res = await post('/api/chat', { model: 'default', messages: LONG_CHAT, options: greedy(1500) });
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let text = '';
      while (!text.includes('\n')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      const running = await eventually(
        () => budget(t.url),
        (s) => s.running.length === 1,
      );
      const id = (running.running[0] as { id: string }).id;
      // Stopped from the window (or the inspector) while it streams.
      await t.hostApi.call('cancel', { requestId: id });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      const got = text
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as Json);
      expect(got[0]).toMatchObject({ done: false });
      const last = got[got.length - 1] as Json;
      expect(Object.keys(last)).toEqual(['error']);
      expect(last.error).toMatch(/cancel/i);
      expect(got.some((l) => l.done === true)).toBe(false);
      expect(held.cancelled).toEqual([id]);
      expect((await settled(t.url)).reservedBytes).toBe(0);
    } finally {
      held.restore();
    }
  });
});

describe('with --token', () => {
  let secured: TestServer;
  beforeAll(async () => {
    secured = await startTestServer({}, { token: 'sesame' });
  });
  afterAll(async () => {
    await secured?.close();
  });

  it("needs the token as a bearer token, and refuses without it in Ollama's shape", async () => {
    const ask = (headers: Record<string, string>) =>
      fetch(`${secured.url}/api/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ model: 'default', prompt: 'hi', stream: false, options: greedy(2) }),
      });
    const ok = await ask({ authorization: 'Bearer sesame' });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as Json).eval_count).toBe(2);
    for (const headers of [{}, { authorization: 'Bearer open' }] as Array<Record<string, string>>) {
      const refused = await ask(headers);
      expect(refused.status).toBe(401);
      expect(await refused.json()).toEqual({ error: expect.stringMatching(/requires its access token/) });
    }
    expect((await fetch(`${secured.url}/api/tags`)).status).toBe(401);
  });
});
