/**
 * The OpenAI-compatible API through the official `openai` client against a
 * real server (real scheduler, real engine process, the default model):
 * chat and completions, stream and not, n, stop, usage, budget caps, and
 * every refusal with its status code and numbers.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { PROMPT_CACHE_PREFIX } from '../../../src/shared/prompt-cache';
import { fixture, haveFixtures } from '../../helpers/fixtures';
import { holdReplyEnds, noEndBias } from '../../helpers/hold-replies';
import { slowModel } from '../../helpers/models';
import { failure } from '../../helpers/rejection';
import { scriptedPackage } from '../../helpers/scripted-model';
import { writeTwinPackages } from '../../helpers/static-cache-models';
import {
  budget,
  eventually,
  LONG_CHAT,
  openaiClient,
  settled,
  startTestServer,
  type TestServer,
} from './server-helpers';

const BUDGET = 4 * 1024 * 1024;
let t: TestServer;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: BUDGET });
  client = openaiClient(t.url);
});
afterAll(async () => {
  await t?.close();
});

const hi = [{ role: 'user' as const, content: 'hi' }];

const apiError = (p: Promise<unknown>) => failure<InstanceType<typeof OpenAI.APIError>>(p, OpenAI.APIError);

/**
 * Structured output's replies to "hi" for seeds 1 to 4 (temperature 1): each starts as `start` says; those that
 * ended by themselves (at least one), for the caller to check against the schema.
 */
async function schemaReplies(
  name: string,
  schema: Record<string, unknown>,
  maxTokens: number,
  start: RegExp,
): Promise<string[]> {
  const stopped: string[] = [];
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: maxTokens,
      temperature: 1,
      seed,
      response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
    });
    const c = r.choices[0] as (typeof r.choices)[number];
    const text = c.message.content ?? '';
    expect(text, text).toMatch(start);
    if (c.finish_reason === 'stop') stopped.push(text);
  }
  expect(stopped.length).toBeGreaterThan(0);
  return stopped;
}

/** The scheduler's record of an ended request. */
async function recent(id: string) {
  const snap = await budget(t.url);
  const view = snap.recent.find((r) => r.id === id);
  expect(view, `request ${id} in the snapshot's recent list`).toBeDefined();
  return view as NonNullable<typeof view>;
}

describe('GET /v1/models', () => {
  it('lists the loaded default model with its context length', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    expect(ids).toEqual(['default']);
    const m = page.data[0] as unknown as {
      object: string;
      max_model_len: number;
      kvdesk: { bpt: number; is_default: boolean };
    };
    expect(m.object).toBe('model');
    expect(m.max_model_len).toBe(2048);
    expect(m.kvdesk).toMatchObject({
      bpt: 1024,
      is_default: true,
      logits: {
        last: true,
        detail: expect.stringMatching(/^LM head MatMul fed the last position/),
        batching: expect.stringMatching(/^requests share one batch, each row left-padded to the longest \(checked/),
      },
    });
  });
});

describe('GET /v1/models/{id}', () => {
  it('retrieves one loaded model as the list shows it; an unknown id is a 404 naming the known ones', async () => {
    const m = await client.models.retrieve('default');
    const listed = (await client.models.list()).data[0];
    expect(m).toEqual(listed);
    const err = await apiError(client.models.retrieve('gpt-4o'));
    expect(err.status).toBe(404);
    expect(err.code).toBe('model_not_found');
    expect(err.message).toMatch(/model "gpt-4o" is neither loaded nor in the library \(known: default\)/);
  });

  it('lists the models once a call: the library read once, the loaded models asked for once', async () => {
    const sync = vi.spyOn(t.hostApi.library, 'sync');
    const call = vi.spyOn(t.hostApi, 'call');
    try {
      // A name no loaded model has (resolved against the list), found or not.
      for (const [id, status] of [
        ['default:latest', 200],
        ['gpt-4o', 404],
      ] as const) {
        sync.mockClear();
        call.mockClear();
        expect((await fetch(`${t.url}/v1/models/${encodeURIComponent(id)}`)).status, id).toBe(status);
        expect(sync, id).toHaveBeenCalledTimes(1);
        expect(
          call.mock.calls.filter(([name]) => name === 'listModels'),
          id,
        ).toHaveLength(1);
      }
    } finally {
      sync.mockRestore();
      call.mockRestore();
    }
  });

  it('answers an id that is not valid percent-encoding with a 400 naming the model, and goes on', async () => {
    for (const bad of ['%E0%A4%A', '%']) {
      const res = await fetch(`${t.url}/v1/models/${bad}`);
      expect(res.status, bad).toBe(400);
      const body = (await res.json()) as { error: { param: string; message: string } };
      expect(body.error.param).toBe('model');
      expect(body.error.message).toMatch(/not valid percent-encoding/);
    }
    expect((await client.models.retrieve('default')).id).toBe('default');
  });
});

describe('chat completions', () => {
  it('answers a non-streamed chat with usage that matches the scheduler record', async () => {
    const r = await client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 8, temperature: 0 });
    expect(r.object).toBe('chat.completion');
    expect(r.model).toBe('default');
    expect(r.choices).toHaveLength(1);
    const c = r.choices[0] as (typeof r.choices)[number];
    expect(c.message.role).toBe('assistant');
    expect(typeof c.message.content).toBe('string');
    const usage = r.usage as NonNullable<typeof r.usage>;
    expect(usage.completion_tokens).toBeGreaterThan(0);
    expect(usage.completion_tokens).toBeLessThanOrEqual(8);
    expect(c.finish_reason).toBe(usage.completion_tokens === 8 ? 'length' : 'stop');
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
    const kv = (r as unknown as { kvdesk: { request_id: string; reserved_bytes: number } }).kvdesk;
    expect(r.id).toBe(`chatcmpl-${kv.request_id}`);
    const view = await recent(kv.request_id);
    // The chat template wraps "hi", so the prompt is more than one token.
    expect(usage.prompt_tokens).toBe(view.promptTokens);
    expect(usage.prompt_tokens).toBeGreaterThan(3);
    expect(usage.completion_tokens).toBe(view.generatedTokens);
    expect(kv.reserved_bytes).toBe((usage.prompt_tokens + 8) * 1024);
  });

  it('streams a role chunk, content deltas equal to the non-streamed reply, a finish chunk, usage and [DONE]', async () => {
    const plain = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 12,
      temperature: 0,
    });
    const stream = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 12,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const ch of stream) chunks.push(ch);
    expect(chunks.length).toBeGreaterThanOrEqual(3);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text).toBe(plain.choices[0]?.message.content);
    const finals = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finals).toHaveLength(1);
    expect(finals[0]?.choices[0]?.finish_reason).toBe(plain.choices[0]?.finish_reason);
    const last = chunks[chunks.length - 1] as OpenAI.Chat.Completions.ChatCompletionChunk;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual(plain.usage);
    // Every chunk but the usage one carries usage: null, as OpenAI's do.
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
  });

  it('leaves usage out of a stream that did not ask for it', async () => {
    const stream = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 4,
      stream: true,
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const ch of stream) chunks.push(ch);
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(chunks[chunks.length - 1]?.choices[0]?.finish_reason).toMatch(/^(stop|length)$/);
  });

  it('gives n choices, streamed and not', async () => {
    const r = await client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 6, n: 2, seed: 5 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1]);
    const usage = r.usage as NonNullable<typeof r.usage>;
    const view = await recent((r as unknown as { kvdesk: { request_id: string } }).kvdesk.request_id);
    expect(view.rows).toBe(2);
    // Prompt counted once, completions of both rows counted.
    expect(usage.prompt_tokens).toBe(view.promptTokens);
    expect(usage.completion_tokens).toBeGreaterThanOrEqual(2);
    expect(usage.completion_tokens).toBeLessThanOrEqual(12);

    const plain = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 6,
      n: 2,
      temperature: 0,
    });
    const stream = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 6,
      n: 2,
      temperature: 0,
      stream: true,
    });
    const roles = new Set<number>();
    const finishes = new Map<number, string>();
    const texts = ['', ''];
    for await (const ch of stream) {
      for (const c of ch.choices) {
        if (c.delta.role === 'assistant') roles.add(c.index);
        if (c.finish_reason) finishes.set(c.index, c.finish_reason);
        texts[c.index] += c.delta.content ?? '';
      }
    }
    expect([...roles].sort()).toEqual([0, 1]);
    expect([...finishes.keys()].sort()).toEqual([0, 1]);
    // Each streamed choice carries its own row's text.
    expect(texts).toEqual(plain.choices.map((c) => c.message.content));
    expect(texts[1]?.length).toBeGreaterThan(0);
  });

  it('speaks SSE exactly: data lines, a role chunk first, [DONE] last', async () => {
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', messages: hi, max_tokens: 3, stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-cache');
    const text = await res.text();
    expect(text.endsWith('\n\n')).toBe(true);
    const events = text.trimEnd().split('\n\n');
    expect(events.every((e) => e.startsWith('data: '))).toBe(true);
    expect(events[events.length - 1]).toBe('data: [DONE]');
    const chunks = events.slice(0, -1).map(
      (e) =>
        JSON.parse(e.slice(6)) as {
          choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }>;
        },
    );
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks[chunks.length - 1]?.choices[0]?.finish_reason).toMatch(/^(stop|length)$/);
    expect(chunks.slice(0, -1).every((c) => c.choices[0]?.finish_reason === null)).toBe(true);
  });

  it('ends at a stop string, given alone or in a list', async () => {
    const full = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 24,
      temperature: 0,
    });
    const text = full.choices[0]?.message.content ?? '';
    expect(text.length).toBeGreaterThan(6);
    const stop = text.slice(3, 6);
    const cut = text.slice(0, text.indexOf(stop));
    const one = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 24,
      temperature: 0,
      stop,
    });
    expect(one.choices[0]?.message.content).toBe(cut);
    expect(one.choices[0]?.finish_reason).toBe('stop');
    const list = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 24,
      temperature: 0,
      stop: ['never-in-this-text', stop],
    });
    expect(list.choices[0]?.message.content).toBe(cut);
  });

  it('gives the same sample for the same seed', async () => {
    const ask = (seed: number) =>
      client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 16, temperature: 1, seed });
    const a = await ask(11);
    const b = await ask(11);
    expect(a.choices[0]?.message.content).toBe(b.choices[0]?.message.content);
    // OpenAI's seed is an int64: a negative one, or one past 2^53 (sent as written), is a seed too; -1 a random one.
    const raw = async (seed: string) => {
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: `{"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 1, "seed": ${seed}}`,
      });
      expect(res.status, seed).toBe(200);
      return ((await res.json()) as OpenAI.ChatCompletion).choices[0]?.message.content;
    };
    const replies: Array<string | null | undefined> = [];
    for (const seed of ['9223372036854775807', '-5']) {
      const first = await raw(seed);
      expect(await raw(seed), seed).toBe(first);
      replies.push(first);
    }
    expect(replies[0]).not.toBe(replies[1]);
  });

  it('takes a predicted reply (Predicted Outputs): the same reply, its drafts counted in usage; a bad one is a 400', async () => {
    const ask = (extra: Record<string, unknown>) =>
      client.chat.completions.create({
        model: 'default',
        messages: [{ role: 'user', content: 'Write out the list again' }],
        max_tokens: 48,
        temperature: 0,
        ...extra,
      } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const plain = await ask({});
    const text = plain.choices[0]?.message.content ?? '';
    expect(text.length).toBeGreaterThan(0);
    // Without a prediction, lookup decoding's own drafts (the greedy reply repeats itself) are kvdesk's figures
    // only: OpenAI counts prediction tokens for Predicted Outputs, and clients bill the rejected ones.
    const own = (plain as unknown as { kvdesk: { lookup?: { drafted_tokens: number } } }).kvdesk.lookup;
    expect(own?.drafted_tokens).toBeGreaterThan(0);
    expect(plain.usage?.completion_tokens_details).toBeUndefined();
    const predicted = await ask({ prediction: { type: 'content', content: text } });
    expect(predicted.choices[0]?.message.content).toBe(text);
    const details = predicted.usage?.completion_tokens_details as
      | { accepted_prediction_tokens: number; rejected_prediction_tokens: number }
      | undefined;
    expect(details?.accepted_prediction_tokens).toBeGreaterThan(10);
    const extras = (predicted as unknown as { kvdesk: { lookup: { drafted_tokens: number; accepted_tokens: number } } })
      .kvdesk;
    expect(extras.lookup.accepted_tokens).toBe(details?.accepted_prediction_tokens);
    // Every drafted token was either taken or not.
    expect((details?.accepted_prediction_tokens ?? 0) + (details?.rejected_prediction_tokens ?? -1)).toBe(
      extras.lookup.drafted_tokens,
    );
    // /metrics counts them, as vLLM's speculative-decoding counters.
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    const counter = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(metrics)?.[1]);
    expect(counter('kvdesk_spec_decode_num_accepted_tokens_total')).toBeGreaterThanOrEqual(
      extras.lookup.accepted_tokens,
    );
    expect(counter('kvdesk_spec_decode_num_draft_tokens_total')).toBeGreaterThanOrEqual(extras.lookup.drafted_tokens);
    // Text parts are the same prediction.
    const parts = await ask({ prediction: { type: 'content', content: [{ type: 'text', text }] } });
    expect(parts.choices[0]?.message.content).toBe(text);
    for (const bad of [{ type: 'text', content: text }, { type: 'content', content: 7 }, 'text']) {
      const err = await apiError(ask({ prediction: bad }));
      expect(err.status).toBe(400);
      expect(err.param).toBe('prediction');
    }
    const many = await apiError(ask({ prediction: { type: 'content', content: text }, n: 2 }));
    expect(many.status).toBe(400);
    expect(many.message).toMatch(/"prediction" goes with one choice/);
    // A stop string that cuts the reply early: the drafts the model took after it are not in the reply, so they
    // count as rejected (OpenAI: accepted prediction tokens are tokens of the completion).
    const stop = text.slice(Math.floor(text.length / 3), Math.floor(text.length / 3) + 3);
    const cut = await ask({ prediction: { type: 'content', content: text }, stop: [stop] });
    expect(cut.choices[0]?.finish_reason).toBe('stop');
    expect(text.startsWith(cut.choices[0]?.message.content ?? '-')).toBe(true);
    const cutDetails = cut.usage?.completion_tokens_details as typeof details;
    const written = cut.usage?.completion_tokens ?? 0;
    expect(written).toBeLessThan(plain.usage?.completion_tokens ?? 0);
    expect(cutDetails?.accepted_prediction_tokens).toBeGreaterThan(0);
    expect(cutDetails?.accepted_prediction_tokens).toBeLessThan(written);
    const cutExtras = (cut as unknown as typeof extras & { kvdesk: typeof extras }).kvdesk;
    expect((cutDetails?.accepted_prediction_tokens ?? 0) + (cutDetails?.rejected_prediction_tokens ?? -1)).toBe(
      cutExtras.lookup.drafted_tokens,
    );
  });

  it('says a prediction went unused where lookup decoding is off (serve --lookup 0): kvdesk.prediction_unused, none counted', async () => {
    const off = await startTestServer({ kvBudgetBytes: BUDGET, lookupDraftTokens: 0 });
    try {
      const offClient = openaiClient(off.url);
      const params = {
        model: 'default',
        messages: [{ role: 'user' as const, content: 'Write out the list again' }],
        max_tokens: 16,
        temperature: 0,
      };
      const plain = await offClient.chat.completions.create(params);
      const text = plain.choices[0]?.message.content ?? '';
      type Extras = { kvdesk: { prediction_unused?: { reason: string; message: string }; lookup?: unknown } };
      expect((plain as unknown as Extras).kvdesk.prediction_unused).toBeUndefined();
      const prediction = { type: 'content' as const, content: text };
      const predicted = await offClient.chat.completions.create({ ...params, prediction });
      // The reply is the model's all the same; no draft was checked, and usage says so.
      expect(predicted.choices[0]?.message.content).toBe(text);
      expect(predicted.usage?.completion_tokens_details).toEqual({
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      });
      const unused = (predicted as unknown as Extras).kvdesk;
      expect(unused.lookup).toBeUndefined();
      expect(unused.prediction_unused?.reason).toBe('lookup_off');
      expect(unused.prediction_unused?.message).toMatch(/--lookup 0/);
      // A stream says it in its last chunk's kvdesk object, as it does a budget cap.
      const stream = await offClient.chat.completions.create({ ...params, prediction, stream: true });
      const said: unknown[] = [];
      for await (const c of stream) {
        const extras = (c as unknown as Partial<Extras>).kvdesk;
        if (extras) said.push(extras.prediction_unused);
      }
      expect(said).toEqual([unused.prediction_unused]);
    } finally {
      await off.close();
    }
  });

  it('says a prediction went unused where the model cannot run lookup decoding (a static KV cache): lookup_unavailable', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-twins-'));
    const twins = writeTwinPackages(dir, { layers: 2, hidden: 32, heads: 2, capacity: 256, seed: 7 });
    const s = await startTestServer({ kvBudgetBytes: BUDGET }, { loadDefault: false });
    try {
      const ids: Record<string, string> = {};
      for (const [kind, at] of [
        ['static', twins.staticDir],
        ['dynamic', twins.dynamicDir],
      ] as const) {
        const r = await s.hostApi.call('loadModel', { path: at });
        if (!r.ok) throw new Error(r.error.message);
        ids[kind] = r.value.id;
      }
      const sc = openaiClient(s.url);
      type Extras = { kvdesk: { prediction_unused?: { reason: string; message: string }; lookup?: unknown } };
      const ask = (model: string, content?: string) =>
        sc.chat.completions.create({
          model,
          messages: [{ role: 'user' as const, content: 'Write out the list again' }],
          max_tokens: 16,
          temperature: 0,
          ...(content !== undefined ? { prediction: { type: 'content' as const, content } } : {}),
        });
      for (const kind of ['dynamic', 'static'] as const) {
        const text = (await ask(ids[kind] as string)).choices[0]?.message.content ?? '';
        const predicted = await ask(ids[kind] as string, text);
        expect(predicted.choices[0]?.message.content).toBe(text);
        const extras = (predicted as unknown as Extras).kvdesk;
        if (kind === 'dynamic') {
          // The same weights with a growing cache draft from it.
          expect(extras.prediction_unused).toBeUndefined();
          expect(predicted.usage?.completion_tokens_details?.accepted_prediction_tokens).toBeGreaterThan(0);
        } else {
          expect(extras.lookup).toBeUndefined();
          expect(predicted.usage?.completion_tokens_details).toEqual({
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
          });
          expect(extras.prediction_unused?.reason).toBe('lookup_unavailable');
          expect(extras.prediction_unused?.message).toMatch(/cannot run on this model: its KV cache is static/);
        }
      }
    } finally {
      await s.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says when the KV budget capped the reply: finish_reason length and kvdesk.budget_cap, in every API', async () => {
    // Find the prompt length, then give a budget that holds it plus exactly 10 new tokens.
    const probe = await client.chat.completions.create({ model: 'default', messages: LONG_CHAT, max_tokens: 1 });
    const p = (probe.usage as NonNullable<typeof probe.usage>).prompt_tokens;
    await t.hostApi.call('configureBudget', { kvBudgetBytes: (p + 10) * 1024 });
    try {
      const r = await client.chat.completions.create({
        model: 'default',
        messages: LONG_CHAT,
        max_tokens: 100,
        temperature: 0,
      });
      expect(r.choices[0]?.finish_reason).toBe('length');
      expect(r.usage?.completion_tokens).toBe(10);
      const kv = (r as unknown as { kvdesk: { budget_cap: Record<string, number> } }).kvdesk;
      expect(kv.budget_cap).toEqual({
        requested_max_tokens: 100,
        admitted_max_tokens: 10,
        requested_bytes: (p + 100) * 1024,
        admitted_bytes: (p + 10) * 1024,
        available_bytes: (p + 10) * 1024,
      });
      const stream = await client.chat.completions.create({
        model: 'default',
        messages: LONG_CHAT,
        max_tokens: 100,
        temperature: 0,
        stream: true,
      });
      type Final = {
        choices: Array<{ finish_reason: string | null }>;
        kvdesk?: { budget_cap?: { admitted_max_tokens: number } };
      };
      let final: Final | undefined;
      for await (const ch of stream) if (ch.choices[0]?.finish_reason) final = ch as unknown as Final;
      expect(final?.choices[0]?.finish_reason).toBe('length');
      expect(final?.kvdesk?.budget_cap?.admitted_max_tokens).toBe(10);

      // The Anthropic and Ollama APIs say it too, streamed or not (SCHEDULER.md: reported, never silent). Greedy, as
      // above: a sampled reply (a random seed each request) could end at an end token before the cap.
      const post = (route: string, body: Record<string, unknown>) =>
        fetch(`${t.url}${route}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'default', messages: LONG_CHAT, ...body }),
        });
      const lines = async (res: Response) =>
        (await res.text())
          .split('\n')
          .filter((l) => l.startsWith('{') || l.startsWith('data: {'))
          .map((l) => JSON.parse(l.replace(/^data: /, '')) as Record<string, unknown>);
      type Kv = { kvdesk?: { budget_cap?: { admitted_max_tokens: number; requested_max_tokens: number } } };
      const anthropic = (await (await post('/v1/messages', { max_tokens: 100, temperature: 0 })).json()) as Kv & {
        stop_reason: string;
      };
      expect(anthropic.stop_reason).toBe('max_tokens');
      expect(anthropic.kvdesk?.budget_cap).toMatchObject({ admitted_max_tokens: 10, requested_max_tokens: 100 });
      const anthropicStream = await lines(
        await post('/v1/messages', { max_tokens: 100, temperature: 0, stream: true }),
      );
      const delta = anthropicStream.find((e) => e.type === 'message_delta') as Kv & { delta: { stop_reason: string } };
      expect(delta.delta.stop_reason).toBe('max_tokens');
      expect(delta.kvdesk?.budget_cap).toMatchObject({ admitted_max_tokens: 10, requested_max_tokens: 100 });
      for (const stream of [false, true]) {
        const ollama = await lines(await post('/api/chat', { stream, options: { num_predict: 100, temperature: 0 } }));
        const last = ollama.at(-1) as Kv & { done: boolean; done_reason: string; eval_count: number };
        expect(last).toMatchObject({ done: true, done_reason: 'length', eval_count: 10 });
        expect(last.kvdesk?.budget_cap).toMatchObject({ admitted_max_tokens: 10, requested_max_tokens: 100 });
      }
    } finally {
      await t.hostApi.call('configureBudget', { kvBudgetBytes: BUDGET });
    }
  });

  it('clips a max_tokens beyond any context (1e9) to what the context leaves, naming the number asked, in every API', async () => {
    const probe = await client.chat.completions.create({ model: 'default', messages: LONG_CHAT, max_tokens: 1 });
    const p = (probe.usage as NonNullable<typeof probe.usage>).prompt_tokens;
    // A budget for 5 new tokens keeps the replies short (the context clip comes first, the budget cap after it).
    await t.hostApi.call('configureBudget', { kvBudgetBytes: (p + 5) * 1024 });
    const post = async (route: string, body: Record<string, unknown>) => {
      const res = await fetch(`${t.url}${route}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'default', messages: LONG_CHAT, temperature: 0, ...body }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    type Kv = { kvdesk?: { context_clip?: unknown } };
    const clip = { requested_max_tokens: 1e9, clipped_max_tokens: 2048 - p, n_ctx: 2048 };
    try {
      for (const field of ['max_tokens', 'max_completion_tokens']) {
        const openai = await post('/v1/chat/completions', { [field]: 1e9 });
        expect(openai.status, JSON.stringify(openai.body)).toBe(200);
        expect((openai.body as Kv).kvdesk?.context_clip).toEqual(clip);
      }
      const anthropic = await post('/v1/messages', { max_tokens: 1e9 });
      expect(anthropic.status, JSON.stringify(anthropic.body)).toBe(200);
      expect((anthropic.body as Kv).kvdesk?.context_clip).toEqual(clip);
      const ollama = await post('/api/chat', { stream: false, options: { num_predict: 1e9, temperature: 0 } });
      expect(ollama.status, JSON.stringify(ollama.body)).toBe(200);
      expect((ollama.body as Kv).kvdesk?.context_clip).toEqual(clip);
      // Within kvdesk's range, as before: the number asked.
      const within = await post('/v1/chat/completions', { max_tokens: 100_000 });
      expect((within.body as Kv).kvdesk?.context_clip).toEqual({ ...clip, requested_max_tokens: 100_000 });
      // Still refused: what is not a whole number of tokens, 1 or more.
      for (const bad of [0, -5, 1.5]) {
        const refused = await post('/v1/chat/completions', { max_tokens: bad });
        expect(refused.status).toBe(400);
        expect((refused.body as { error: { param: string } }).error.param).toBe('max_tokens');
      }
    } finally {
      await t.hostApi.call('configureBudget', { kvBudgetBytes: BUDGET });
    }
  });
});

describe('completions', () => {
  it('completes a prompt, streamed text equal to the plain reply', async () => {
    const plain = await client.completions.create({
      model: 'default',
      prompt: 'Once upon a time',
      max_tokens: 10,
      temperature: 0,
    });
    expect(plain.object).toBe('text_completion');
    expect(plain.choices).toHaveLength(1);
    expect(plain.usage?.prompt_tokens).toBe(9);
    const stream = await client.completions.create({
      model: 'default',
      prompt: 'Once upon a time',
      max_tokens: 10,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.Completions.CompletionUsage | undefined | null;
    for await (const ch of stream) {
      expect(ch.object).toBe('text_completion');
      text += ch.choices[0]?.text ?? '';
      finish = ch.choices[0]?.finish_reason ?? finish;
      if (ch.usage) usage = ch.usage;
    }
    expect(text).toBe(plain.choices[0]?.text);
    expect(finish).toBe(plain.choices[0]?.finish_reason);
    // The same prompt again continues the first one's prompt cache.
    expect(usage).toEqual({
      ...plain.usage,
      prompt_tokens_details: { cached_tokens: (plain.usage?.prompt_tokens ?? 0) - 1 },
    });
  });

  it('maps n and several prompts to choices in order', async () => {
    const r = await client.completions.create({
      model: 'default',
      prompt: ['a', 'Once upon a time'],
      max_tokens: 3,
      n: 2,
      temperature: 0,
    });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    // Greedy: both copies of a prompt agree; the two prompts' replies are their solo replies.
    expect(r.choices[0]?.text).toBe(r.choices[1]?.text);
    expect(r.choices[2]?.text).toBe(r.choices[3]?.text);
    const solo = await client.completions.create({
      model: 'default',
      prompt: 'Once upon a time',
      max_tokens: 3,
      temperature: 0,
    });
    expect(r.choices[2]?.text).toBe(solo.choices[0]?.text);
    // Prompt tokens: 1 ("a") + 9, each counted once.
    expect(r.usage?.prompt_tokens).toBe(10);
  });

  it("seeds each prompt's replies as its request alone: the same whatever else the list holds", async () => {
    const sampled = { model: 'default', max_tokens: 6, temperature: 1, seed: 4 };
    const alone = await client.completions.create({ ...sampled, prompt: 'Hi', n: 2 });
    const listed = await client.completions.create({ ...sampled, prompt: ['Once upon a time there', 'Hi'], n: 2 });
    expect(listed.choices.slice(2).map((c) => c.text)).toEqual(alone.choices.map((c) => c.text));
    // n's copies still differ from one another; a prompt listed twice gets the same replies twice.
    expect(alone.choices[0]?.text).not.toBe(alone.choices[1]?.text);
    const twice = await client.completions.create({ ...sampled, prompt: ['Hi', 'Hi'] });
    expect(twice.choices.map((c) => c.text)).toEqual([alone.choices[0]?.text, alone.choices[0]?.text]);
  });

  it('accepts token ids as the prompt', async () => {
    const r = await client.completions.create({
      model: 'default',
      prompt: [10, 20, 30, 40, 50],
      max_tokens: 4,
      temperature: 0,
    });
    expect(r.usage?.prompt_tokens).toBe(5);
    expect(r.usage?.completion_tokens).toBe(4);
  });
});

/** A completion token's bytes: its text, or the bytes a `bytes:\xNN…` name spells. */
function tokenBytes(token: string): Buffer {
  if (!token.startsWith('bytes:')) return Buffer.from(token, 'utf8');
  const hex = token.slice('bytes:'.length);
  expect(hex).toMatch(/^(\\x[0-9a-f]{2})+$/);
  return Buffer.from(hex.replaceAll('\\x', ''), 'hex');
}

describe('logprobs, penalties, logit bias and JSON mode', () => {
  // The default model's end tokens, banned so that replies run to max_tokens.
  const noEnd = { '509': -100, '511': -100 };

  it('a reply that ends at an end token lists no entry for it: the bytes spell the content', async () => {
    let ended = 0;
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const body = { model: 'default', messages: hi, max_tokens: 48, temperature: 1.5, seed, logprobs: true };
      const r = await client.chat.completions.create(body);
      const choice = r.choices[0] as (typeof r.choices)[number];
      if (choice.finish_reason !== 'stop') continue;
      ended += 1;
      const content = choice.logprobs?.content ?? [];
      expect(Buffer.from(content.flatMap((t) => t.bytes ?? [])).toString('utf8'), `seed ${seed}`).toBe(
        choice.message.content,
      );
      expect(content.map((t) => t.token)).not.toContain('<|im_end|>');
      expect(content.map((t) => t.token)).not.toContain('<|endoftext|>');
    }
    expect(ended, 'some replies must end at an end token').toBeGreaterThan(0);
  });

  it('chat: each token with its log-probability, bytes and alternatives, the same streamed and not', async () => {
    const body = {
      model: 'default',
      messages: hi,
      max_tokens: 10,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      logit_bias: noEnd,
    };
    const r = await client.chat.completions.create(body);
    const choice = r.choices[0] as (typeof r.choices)[number];
    const content = choice.logprobs?.content ?? [];
    expect(content).toHaveLength(r.usage?.completion_tokens ?? -1);
    expect(Buffer.from(content.flatMap((t) => t.bytes ?? [])).toString('utf8')).toBe(choice.message.content);
    for (const t of content) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs).toHaveLength(3);
      // Greedy: the chosen token is the most likely.
      expect(t.top_logprobs[0]).toEqual({ token: t.token, logprob: t.logprob, bytes: t.bytes });
    }
    const stream = await client.chat.completions.create({ ...body, stream: true });
    const streamed: typeof content = [];
    for await (const ch of stream) streamed.push(...(ch.choices[0]?.logprobs?.content ?? []));
    // The stream continued the first request's prompt cache: the same tokens, log-probabilities to rounding.
    const close = (a: { token: string; logprob: number }, b: { token: string; logprob: number }) => {
      expect(a.token).toBe(b.token);
      expect(Math.abs(a.logprob - b.logprob)).toBeLessThan(1e-4);
    };
    expect(streamed).toHaveLength(content.length);
    for (const [i, t] of streamed.entries()) {
      close(t, content[i] as (typeof content)[number]);
      for (const [k, alt] of t.top_logprobs.entries()) close(alt, content[i]?.top_logprobs[k] as typeof alt);
    }
    const plain = await client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 4 });
    expect(plain.choices[0]?.logprobs).toBeNull();
  });

  it('completions: tokens, token_logprobs, top_logprobs with the chosen token, and text offsets', async () => {
    const r = await client.completions.create({
      model: 'default',
      prompt: 'Once upon',
      max_tokens: 8,
      temperature: 0,
      logprobs: 2,
      logit_bias: noEnd,
    });
    const choice = r.choices[0] as (typeof r.choices)[number];
    const lp = choice.logprobs as NonNullable<typeof choice.logprobs>;
    expect(lp.tokens).toHaveLength(8);
    expect(lp.token_logprobs).toHaveLength(8);
    for (const [i, token] of (lp.tokens ?? []).entries()) {
      const top = lp.top_logprobs?.[i] as Record<string, number>;
      expect(top[token]).toBe(lp.token_logprobs?.[i]);
      expect(Object.keys(top).length).toBeGreaterThanOrEqual(1);
      expect(Object.keys(top).length).toBeLessThanOrEqual(3);
      const offset = lp.text_offset?.[i] as number;
      if (!token.startsWith('bytes:')) expect(choice.text.slice(offset, offset + token.length)).toBe(token);
    }
  });

  it('completions: text offsets count characters, as Python does, past emoji and tokens that end mid-character', async () => {
    // The schema makes the reply write this value; the byte-level model spells its characters in byte tokens.
    const value = 'é😀x€y 🎉!';
    const body = {
      model: 'default',
      prompt: 'Once upon',
      max_tokens: 60,
      temperature: 0,
      logprobs: 1,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'v', schema: { type: 'object', properties: { s: { const: value } }, required: ['s'] } },
      },
    };
    const r = await client.completions.create(body as OpenAI.CompletionCreateParamsNonStreaming);
    const choice = r.choices[0] as (typeof r.choices)[number];
    expect(JSON.parse(choice.text)).toEqual({ s: value });
    const lp = choice.logprobs as NonNullable<typeof choice.logprobs>;
    const tokens = lp.tokens as string[];
    const offsets = lp.text_offset as number[];
    expect(offsets).toHaveLength(tokens.length);
    // Python's view of the text: one index per character (code point).
    const chars = [...choice.text];
    for (const [i, token] of tokens.entries()) {
      const at = offsets[i] as number;
      if (i > 0) expect(at, `token ${i}`).toBeGreaterThanOrEqual(offsets[i - 1] as number);
      // A token that is a piece of a character points at that character; a whole one at its own text.
      if (token.startsWith('bytes:')) expect(Buffer.byteLength(chars[at] ?? ''), `token ${i}`).toBeGreaterThan(1);
      else
        expect(chars.slice(at).join('').startsWith(token), `token ${i} ${JSON.stringify(token)} at ${at}`).toBe(true);
    }
    // The reply spelled characters in pieces, and wrote whole tokens after them.
    const pieceAt = tokens.findIndex((tk) => tk.startsWith('bytes:'));
    expect(pieceAt, 'a token ends mid-character').toBeGreaterThanOrEqual(0);
    expect(tokens.slice(pieceAt).some((tk) => !tk.startsWith('bytes:') && tk !== '"' && tk !== '}')).toBe(true);
    // Each piece named by its bytes (\xNN, as OpenAI's legacy API names them): together the tokens are the text.
    expect(Buffer.concat(tokens.map(tokenBytes)).toString('utf8')).toBe(choice.text);
    const stream = await client.completions.create({ ...body, stream: true } as OpenAI.CompletionCreateParamsStreaming);
    const streamed = { tokens: [] as string[], offsets: [] as number[] };
    for await (const ch of stream) {
      streamed.tokens.push(...(ch.choices[0]?.logprobs?.tokens ?? []));
      streamed.offsets.push(...(ch.choices[0]?.logprobs?.text_offset ?? []));
    }
    expect(streamed).toEqual({ tokens, offsets });
  });

  it.skipIf(!haveFixtures)(
    'completions: top_logprobs holds N tokens, pieces of characters each a key of its own (bytes:\\xNN), the chosen one with its own logprob',
    async () => {
      // tiny-random-gpt2's byte-level vocabulary: these rows' alternatives are many single bytes, the second row's
      // reply pieces of characters.
      const dir = fixture('onnxruntime-genai/tiny-random-gpt2-fp32');
      const loaded = await t.hostApi.call('loadModel', { path: dir });
      if (!loaded.ok) throw new Error(loaded.error.message);
      const model = loaded.value.id;
      try {
        const body = {
          model,
          prompt: [
            [0, 0, 0, 52],
            [0, 0, 195, 731],
            [100, 150, 120],
          ],
          max_tokens: 4,
          temperature: 0,
          logprobs: 20,
        };
        const whole = await client.completions.create(body);
        const stream = await client.completions.create({ ...body, stream: true });
        const streamed: Array<{ tokens: string[]; top: Array<Record<string, number>> }> = [];
        for await (const ch of stream) {
          for (const c of ch.choices) {
            const row = streamed[c.index] ?? { tokens: [], top: [] };
            streamed[c.index] = row;
            row.tokens.push(...(c.logprobs?.tokens ?? []));
            row.top.push(...((c.logprobs?.top_logprobs ?? []) as Array<Record<string, number>>));
          }
        }
        expect(whole.choices).toHaveLength(3);
        let pieces = 0;
        for (const choice of whole.choices) {
          const lp = choice.logprobs as NonNullable<typeof choice.logprobs>;
          const tokens = lp.tokens as string[];
          const top = lp.top_logprobs as Array<Record<string, number>>;
          for (const [i, token] of tokens.entries()) {
            const keys = Object.keys(top[i] ?? {});
            // 20 alternatives (OpenAI's N), and the chosen token beside them where it is not one (N + 1).
            expect([20, 21], `choice ${choice.index} token ${i}: ${JSON.stringify(keys)}`).toContain(keys.length);
            if (keys.length === 21) expect(keys[20]).toBe(token);
            expect(top[i]?.[token]).toBe(lp.token_logprobs?.[i]);
            pieces += keys.filter((k) => k.startsWith('bytes:')).length;
            for (const k of keys) tokenBytes(k);
          }
          expect(Buffer.concat(tokens.map(tokenBytes)).toString('utf8')).toBe(choice.text);
          expect(streamed[choice.index]).toEqual({ tokens, top });
        }
        expect(pieces).toBeGreaterThan(0);
        expect(whole.choices[1]?.logprobs?.tokens?.slice(1).every((tk) => tk.startsWith('bytes:'))).toBe(true);
      } finally {
        expect((await t.hostApi.call('unloadModel', { id: model })).ok).toBe(true);
        // Out of the library too (the fixture's files stay): the other tests' model lists are the default alone.
        expect((await t.hostApi.call('forgetModel', { root: dir })).ok).toBe(true);
      }
    },
  );

  it('frequency and presence penalties change a greedy reply; logit bias forces a token', async () => {
    const ask = (extra: Record<string, unknown>) =>
      client.chat.completions.create({
        model: 'default',
        messages: hi,
        max_tokens: 16,
        temperature: 0,
        logit_bias: noEnd,
        ...extra,
      });
    const plain = (await ask({})).choices[0]?.message.content;
    expect((await ask({ frequency_penalty: 1.5 })).choices[0]?.message.content).not.toBe(plain);
    expect((await ask({ presence_penalty: 1.5 })).choices[0]?.message.content).not.toBe(plain);
    const forced = await client.completions.create({
      model: 'default',
      prompt: 'a',
      max_tokens: 3,
      logit_bias: { '42': 100 },
      logprobs: 0,
    });
    const tok = t.hostApi.runner.tokenizerOf('default');
    expect(forced.choices[0]?.text).toBe(tok.decode([42, 42, 42]));
    // No alternatives asked for: each position's top_logprobs holds the chosen token alone.
    const lp = forced.choices[0]?.logprobs;
    expect(lp?.top_logprobs?.[0]).toEqual({ [lp?.tokens?.[0] as string]: lp?.token_logprobs?.[0] });
  });

  it('ignore_eos (vLLM): a reply its end-of-text would end at once writes on to max_tokens', async () => {
    // Its end-of-text forced: the reply ends at its first token.
    const ends = Object.fromEntries(Object.keys(noEndBias()).map((id) => [id, 100]));
    const ask = (extra: Record<string, unknown>) =>
      client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 12, logit_bias: ends, ...extra });
    const ended = await ask({});
    expect(ended.choices[0]?.finish_reason).toBe('stop');
    expect(ended.usage?.completion_tokens).toBeLessThanOrEqual(1);
    const onward = await ask({ ignore_eos: true });
    expect(onward.choices[0]?.finish_reason).toBe('length');
    expect(onward.usage?.completion_tokens).toBe(12);
    const bad = await apiError(ask({ ignore_eos: 'yes' }));
    expect(bad.status).toBe(400);
    expect(bad.message).toContain('ignore_eos');
  });

  it('response_format json_object: replies are JSON objects (or their start, cut by max_tokens), streamed too', async () => {
    let stopped = 0;
    for (const seed of [1, 2, 3, 4, 5]) {
      const body = {
        model: 'default',
        messages: [{ role: 'user' as const, content: 'Reply in JSON.' }],
        max_tokens: 120,
        temperature: 1,
        seed,
        response_format: { type: 'json_object' as const },
      };
      const r = await client.chat.completions.create(body);
      const c = r.choices[0] as (typeof r.choices)[number];
      const text = c.message.content ?? '';
      expect(text.startsWith('{'), text).toBe(true);
      if (c.finish_reason === 'stop') {
        stopped++;
        expect(typeof JSON.parse(text)).toBe('object');
      } else expect(c.finish_reason).toBe('length');
      const stream = await client.chat.completions.create({ ...body, stream: true });
      let streamed = '';
      for await (const ch of stream) streamed += ch.choices[0]?.delta.content ?? '';
      expect(streamed).toBe(text);
    }
    expect(stopped).toBeGreaterThan(0);
  });

  it('response_format json_schema: replies conform to the schema; a schema kvdesk cannot enforce is a 400', async () => {
    const schema = {
      type: 'object',
      properties: { answer: { type: 'string' }, sure: { type: 'boolean' }, n: { type: ['integer', 'null'] } },
      required: ['answer', 'sure', 'n'],
      additionalProperties: false,
    };
    const replies = await schemaReplies('reply', schema, 120, /^\{ ?"answer": ?"/);
    for (const text of replies) {
      const v = JSON.parse(text);
      expect(Object.keys(v)).toEqual(['answer', 'sure', 'n']);
      expect(typeof v.answer).toBe('string');
      expect(typeof v.sure).toBe('boolean');
      expect(v.n === null || Number.isInteger(v.n)).toBe(true);
    }
    const err = await apiError(
      client.chat.completions.create({
        model: 'default',
        messages: hi,
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'x',
            schema: { type: 'object', properties: { s: { type: 'string', format: 'email' } } },
          },
        },
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toContain('schema.properties.s.format');
    // In the API's own names.
    expect(err.message).toMatch(/^400 response_format\.json_schema\.schema is not one kvdesk can enforce: /);
  });

  it('response_format from a Pydantic model with a nested one ($defs, $ref): replies conform to it', async () => {
    // As the Python SDK sends `response_format=Trip` (a model using Place twice; a Literal city, which the random
    // model finishes: a free string may run on).
    const schema = {
      $defs: {
        Place: {
          type: 'object',
          properties: { city: { enum: ['Oslo', 'Lima'], title: 'City' }, sunny: { type: 'boolean', title: 'Sunny' } },
          required: ['city', 'sunny'],
          additionalProperties: false,
          title: 'Place',
        },
      },
      type: 'object',
      properties: { start: { $ref: '#/$defs/Place' }, end: { $ref: '#/$defs/Place' } },
      required: ['start', 'end'],
      additionalProperties: false,
      title: 'Trip',
    };
    const validate = new Ajv({ strict: false }).compile(schema);
    const replies = await schemaReplies('Trip', schema, 200, /^\{ ?"start": ?\{ ?"city": ?"(O|L)/);
    for (const text of replies) expect(validate(JSON.parse(text)), text).toBe(true);
  });

  it('response_format whose $refs name schemas by $anchor ("#place") and by an embedded $id: replies conform to it', async () => {
    // A generator's `$anchor` names (`#place`), and a pointer into a model embedded as a resource of its own (its
    // `$id`), whose `#/$defs/city` is its own city, not the root's (which the replies would break).
    const schema = {
      $defs: {
        Place: {
          $anchor: 'place',
          type: 'object',
          properties: { city: { $ref: '#/$defs/Town/properties/name' }, sunny: { type: 'boolean' } },
          required: ['city', 'sunny'],
          additionalProperties: false,
        },
        Town: {
          $id: 'https://example.com/town.json',
          type: 'object',
          properties: { name: { $ref: '#/$defs/city' } },
          $defs: { city: { enum: ['Oslo', 'Lima'] } },
        },
        city: { enum: ['Rome'] },
      },
      type: 'object',
      properties: { start: { $ref: '#place' }, end: { $ref: '#place' } },
      required: ['start', 'end'],
      additionalProperties: false,
    };
    const validate = new Ajv2020({ strict: false }).compile(schema);
    const replies = await schemaReplies('Trip', schema, 200, /^\{ ?"start": ?\{ ?"city": ?"(O|L)/);
    for (const text of replies) expect(validate(JSON.parse(text)), text).toBe(true);
  });

  it('tools beside response_format (an Agents SDK agent with an output type): each reply is calls or the JSON', async () => {
    const format = zodResponseFormat(z.object({ ok: z.boolean() }), 'verdict');
    const city = z.object({ city: z.enum(['Paris', 'Oslo']) });
    const tools = [
      {
        type: 'function' as const,
        function: { name: 'get_weather', parameters: zodResponseFormat(city, 'x').json_schema.schema, strict: true },
      },
    ];
    const finished = { calls: 0, json: 0 };
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await client.chat.completions.create({
        model: 'default',
        messages: hi,
        max_tokens: 120,
        temperature: 1,
        seed,
        tools,
        response_format: format,
      });
      const c = r.choices[0] as (typeof r.choices)[number];
      const text = c.message.content ?? '';
      if (c.message.tool_calls?.length) {
        finished.calls++;
        for (const call of c.message.tool_calls) {
          if (call.type !== 'function') throw new Error(`a ${call.type} call`);
          expect(call.function.name).toBe('get_weather');
          expect(city.safeParse(JSON.parse(call.function.arguments)).success, call.function.arguments).toBe(true);
        }
        continue;
      }
      // Never free text: the JSON, or its start where max_tokens cut it.
      expect(text, text).toMatch(/^\{/);
      if (c.finish_reason !== 'stop') continue;
      finished.json++;
      expect([{ ok: true }, { ok: false }]).toContainEqual(JSON.parse(text));
    }
    // Both came up (with these seeds: one call, five answers).
    expect(finished.calls, JSON.stringify(finished)).toBeGreaterThan(0);
    expect(finished.json, JSON.stringify(finished)).toBeGreaterThan(0);
  });

  it("the SDK's zodResponseFormat: an integer's bounds (zod writes ±2^53 − 1 for every .int()) are held", async () => {
    const shape = z.object({ stars: z.number().int().min(1).max(5), count: z.number().int(), ok: z.boolean() });
    const format = zodResponseFormat(shape, 'review');
    // (What the SDK sends: bounds on both integers.)
    expect(JSON.stringify(format.json_schema.schema)).toContain('"maximum":9007199254740991');
    let stopped = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await client.chat.completions.create({
        model: 'default',
        messages: hi,
        max_tokens: 120,
        temperature: 1,
        seed,
        response_format: format,
      });
      const c = r.choices[0] as (typeof r.choices)[number];
      const text = c.message.content ?? '';
      expect(text, text).toMatch(/^\{ ?"stars": ?[1-5][,}]/);
      if (c.finish_reason !== 'stop') continue;
      stopped++;
      expect(shape.safeParse(JSON.parse(text)).success, text).toBe(true);
    }
    expect(stopped).toBeGreaterThan(0);
  });

  it('names a field over what kvdesk takes as the client wrote it', async () => {
    // (A max_tokens over kvdesk's range is as many as the context leaves: see the context clip's test.)
    const body = { model: 'default', messages: hi, thinking_budget: 1e8 };
    const err = await apiError(client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming));
    expect(err.status).toBe(400);
    expect(err.param).toBe('thinking_budget');
    expect(err.message).toBe('400 invalid thinking_budget: Too big: expected number to be <=1000000');
  });

  it('refuses a logit bias for a token id the model does not have, naming the parameter', async () => {
    const err = await apiError(
      client.chat.completions.create({ model: 'default', messages: hi, logit_bias: { '512': 5 } }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toContain('logit_bias');
    expect(err.message).toContain('512');
  });
});

describe('/metrics', () => {
  it('counts every row of a multi-row request in kvdesk_generation_tokens_total', async () => {
    const count = async () => {
      const text = await (await fetch(`${t.url}/metrics`)).text();
      return Number(/^kvdesk_generation_tokens_total (\d+)$/m.exec(text)?.[1]);
    };
    const before = await count();
    const r = await client.completions.create({
      model: 'default',
      prompt: ['One', 'Two', 'Three'],
      max_tokens: 12,
      n: 2,
      temperature: 1,
      seed: 4,
    });
    expect(r.choices).toHaveLength(6);
    expect(await count()).toBe(before + (r.usage?.completion_tokens ?? 0));
  });
});

describe('the prompt cache', () => {
  it('a conversation’s next turn reports its cached tokens and answers as a cold server would', async () => {
    const first = [{ role: 'user' as const, content: 'Describe the harbour at dawn, briefly.' }];
    const ask = (messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[]) =>
      client.chat.completions.create({ model: 'default', messages, max_tokens: 10, temperature: 0 });
    const r1 = await ask(first);
    expect(r1.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
    const second = [
      ...first,
      { role: 'assistant' as const, content: r1.choices[0]?.message.content ?? '' },
      { role: 'user' as const, content: 'And at dusk?' },
    ];
    const r2 = await ask(second);
    const cached = r2.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    expect(cached).toBeGreaterThanOrEqual(r1.usage?.prompt_tokens ?? Number.POSITIVE_INFINITY);
    expect(cached).toBeLessThan(r2.usage?.prompt_tokens ?? 0);
    // The scheduler lists the cache as an idle session holding that conversation's KV.
    const view = await recent((r2 as unknown as { kvdesk: { request_id: string } }).kvdesk.request_id);
    expect(view.sessionId?.startsWith(PROMPT_CACHE_PREFIX)).toBe(true);
    const snap = await budget(t.url);
    expect(snap.sessions.find((s) => s.sessionId === view.sessionId)).toMatchObject({ state: 'idle' });
    // The same turn on a server without the cache gives the same reply.
    const cold = await startTestServer({ kvBudgetBytes: BUDGET, promptCacheSessions: 0 });
    try {
      const r = await openaiClient(cold.url).chat.completions.create({
        model: 'default',
        messages: second,
        max_tokens: 10,
        temperature: 0,
      });
      expect(r.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
      expect(r.choices[0]?.message.content).toBe(r2.choices[0]?.message.content);
      expect((await budget(cold.url)).sessions).toEqual([]);
    } finally {
      await cold.close();
    }
  }, 60_000);

  it('n > 1 does not use it', async () => {
    const r = await client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 4, n: 2 });
    const view = await recent((r as unknown as { kvdesk: { request_id: string } }).kvdesk.request_id);
    expect(view.sessionId).toBeUndefined();
  });
});

describe('tool calls', () => {
  const tools = [
    {
      type: 'function' as const,
      function: {
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: {
          type: 'object',
          properties: { city: { enum: ['Paris', 'Oslo'] }, hourly: { type: 'boolean' } },
          required: ['city'],
        },
      },
    },
    { type: 'function' as const, function: { name: 'now' } },
  ];
  const ask = [{ role: 'user' as const, content: 'Weather in Oslo?' }];

  it('tool_choice required: the message carries the call, content null, finish_reason tool_calls', async () => {
    const r = await client.chat.completions.create({
      model: 'default',
      messages: ask,
      tools,
      tool_choice: 'required',
      max_tokens: 120,
      temperature: 1,
      seed: 2,
    });
    const c = r.choices[0] as (typeof r.choices)[number];
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.content).toBeNull();
    const call = c.message.tool_calls?.[0];
    expect(c.message.tool_calls).toHaveLength(1);
    expect(call?.type).toBe('function');
    expect(call?.id).toMatch(/^call_/);
    const fn = (call as { function: { name: string; arguments: string } }).function;
    expect(['get_weather', 'now']).toContain(fn.name);
    const args = JSON.parse(fn.arguments);
    if (fn.name === 'now') expect(args).toEqual({});
    else expect(['Paris', 'Oslo']).toContain(args.city);

    // The next turn sends the call and its result back, as clients do.
    const next = await client.chat.completions.create({
      model: 'default',
      messages: [...ask, c.message, { role: 'tool', tool_call_id: call?.id ?? '', content: '{"temp": 21}' }] as never,
      tools,
      max_tokens: 4,
    });
    expect(next.choices[0]?.message.role).toBe('assistant');
  });

  it('tool_choice auto, a reply of text: its role chunk comes first, content "", then the text, as the whole reply', async () => {
    const request = { model: 'default', messages: ask, tools, max_tokens: 6, temperature: 0 };
    const whole = (await client.chat.completions.create(request)).choices[0];
    expect(whole?.message.tool_calls ?? []).toEqual([]);
    const deltas: Array<Record<string, unknown>> = [];
    for await (const part of await client.chat.completions.create({ ...request, stream: true })) {
      const choice = part.choices[0];
      if (choice && !choice.finish_reason) deltas.push(choice.delta as Record<string, unknown>);
    }
    expect(deltas[0]).toEqual({ role: 'assistant', content: '' });
    expect(deltas.slice(1).every((d) => Object.keys(d).join() === 'content')).toBe(true);
    expect(deltas.map((d) => d.content).join('')).toBe(whole?.message.content);
  });

  it("holds each call to its own tool's schema where two tools' Pydantic models share a $defs name", async () => {
    // Before: the second tool's "#/$defs/Item" was read in the first tool's parameters (place_order got {"flag": …}).
    const item = (key: string, type: string) => ({
      type: 'object',
      properties: { [key]: { type } },
      required: [key],
      additionalProperties: false,
    });
    const tool = (name: string, arg: string, def: string, schema: unknown) => ({
      type: 'function' as const,
      function: {
        name,
        parameters: {
          type: 'object',
          properties: { [arg]: { $ref: `#/$defs/${def}` } },
          required: [arg],
          additionalProperties: false,
          $defs: { [def]: schema },
        },
      },
    });
    const variants = [
      [
        tool('place_order', 'order', 'Item', item('qty', 'integer')),
        tool('set_toggle', 'toggle', 'Item', item('flag', 'boolean')),
      ],
      [
        tool('place_order', 'order', 'OrderItem', item('qty', 'integer')),
        tool('set_toggle', 'toggle', 'ToggleItem', item('flag', 'boolean')),
      ],
    ];
    const called = new Set<string>();
    for (const tools of variants) {
      const validate = new Map(
        tools.map((t) => [t.function.name, new Ajv2020({ strict: false }).compile(t.function.parameters)]),
      );
      const choices = ['required', { type: 'function' as const, function: { name: 'set_toggle' } }] as const;
      for (const tool_choice of choices) {
        for (const seed of [1, 3]) {
          const r = await client.chat.completions.create({
            model: 'default',
            messages: ask,
            tools,
            tool_choice,
            max_tokens: 120,
            temperature: 1,
            seed,
          });
          const c = r.choices[0] as (typeof r.choices)[number];
          expect(c.finish_reason).toBe('tool_calls');
          for (const call of c.message.tool_calls ?? []) {
            if (call.type !== 'function') throw new Error(`a ${call.type} call`);
            const check = validate.get(call.function.name);
            expect(check, call.function.name).toBeDefined();
            const ok = check?.(JSON.parse(call.function.arguments));
            expect(ok, `${call.function.name} ${call.function.arguments} ${JSON.stringify(check?.errors)}`).toBe(true);
            called.add(call.function.name);
          }
        }
      }
      // Beside JSON output the calls must be held to a grammar: it takes both tools (before: a 400).
      const r = await client.chat.completions.create({
        model: 'default',
        messages: ask,
        tools,
        response_format: { type: 'json_object' },
        max_tokens: 60,
        temperature: 1,
        seed: 1,
      });
      for (const call of r.choices[0]?.message.tool_calls ?? []) {
        if (call.type !== 'function') throw new Error(`a ${call.type} call`);
        expect(validate.get(call.function.name)?.(JSON.parse(call.function.arguments)), call.function.arguments).toBe(
          true,
        );
      }
    }
    expect([...called].sort()).toEqual(['place_order', 'set_toggle']);
  });

  it('streams a forced call as OpenAI does: id and name first, then its arguments as they are written', async () => {
    const request = {
      model: 'default',
      messages: ask,
      tools,
      tool_choice: { type: 'function' as const, function: { name: 'get_weather' } },
      max_tokens: 120,
      temperature: 1,
      seed: 3,
    };
    const stream = await client.chat.completions.create({ ...request, stream: true });
    const deltas: Array<{
      index: number;
      id?: string;
      type?: string;
      function?: { name?: string; arguments?: string };
    }> = [];
    let finish: string | null = null;
    let content = '';
    let opening: unknown;
    for await (const part of stream) {
      const choice = part.choices[0];
      if (!choice) continue;
      // The role chunk of a reply that is a call has no text: content null, as OpenAI sends it (an AI SDK made an
      // empty text part of "").
      opening ??= choice.delta;
      content += choice.delta.content ?? '';
      const inChunk = (choice.delta.tool_calls ?? []) as typeof deltas;
      // One entry per call in a chunk, as OpenAI sends (a frame's pieces of the call are joined).
      expect(new Set(inChunk.map((d) => d.index)).size).toBe(inChunk.length);
      deltas.push(...inChunk);
      finish = choice.finish_reason ?? finish;
    }
    expect(opening).toEqual({ role: 'assistant', content: null });
    expect(content).toBe('');
    expect(finish).toBe('tool_calls');
    // (That the arguments go out as written, over several frames, is the host's test: tool-calls.test.ts.)
    expect(deltas[0]).toMatchObject({
      index: 0,
      id: expect.stringMatching(/^call_/),
      type: 'function',
      function: { name: 'get_weather' },
    });
    for (const d of deltas.slice(1)) {
      expect(d.index).toBe(0);
      expect(d.id).toBeUndefined();
      expect(Object.keys(d.function ?? {})).toEqual(['arguments']);
    }
    const assembled = deltas.map((d) => d.function?.arguments ?? '').join('');
    const args = JSON.parse(assembled) as { city: string };
    expect(['Paris', 'Oslo']).toContain(args.city);
    // The same seed without a stream: the same call.
    const whole = await client.chat.completions.create(request);
    const call = whole.choices[0]?.message.tool_calls?.[0] as { function: { arguments: string } } | undefined;
    expect(JSON.parse(call?.function.arguments ?? '')).toEqual(args);
  });

  it('400 naming the message for a tool result that answers no call', async () => {
    const err = await apiError(
      client.chat.completions.create({
        model: 'default',
        messages: [...ask, { role: 'tool', tool_call_id: 'call_nope', content: 'x' }],
        tools,
      }),
    );
    expect(err.status).toBe(400);
    expect(err.param).toBe('messages[1].tool_call_id');
    expect(err.message).toMatch(
      / messages\[1\] is the result of call id "call_nope", but the assistant turn before it made no call with that id/,
    );
  });

  it('400 naming the place in the parameters schema a forced call cannot follow', async () => {
    const err = await apiError(
      client.chat.completions.create({
        model: 'default',
        messages: ask,
        tools: [
          {
            type: 'function',
            function: {
              name: 'f',
              parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'a+' } } },
            },
          },
        ],
        tool_choice: 'required',
      }),
    );
    expect(err.status).toBe(400);
    expect(err.param).toBe('tools[0].function.parameters.properties.s.pattern');
    expect(err.message).toMatch(/let the model choose/);
  });
});

describe('a call whose arguments repeat a key', () => {
  // A package whose model writes one Hermes call whose free-form arguments name "a" twice (the grammar holds no
  // keys distinct); a template that shows the tools (no long description of them: the script holds only for a
  // prompt read in one run) and whose model writes calls in the Hermes form. On a server without the prompt
  // cache, which would give the second request a cached prompt.
  const CALL = '<tool_call>\n{"name": "f", "arguments": {"a": 1, "a": 2}}\n</tool_call>';
  const TEMPLATE =
    '{# calls: <tool_call>{"name": …, "arguments": …}</tool_call> #}{% for t in tools %}{{ t.function.name }};{% endfor %}' +
    '{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}';
  let cold: TestServer;
  let dir: string;
  let model: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-repeated-key-'));
    const pkg = scriptedPackage(dir, {
      template: TEMPLATE,
      specials: ['<|end|>'],
      ends: ['<|end|>'],
      // (White space before the call, as models often write: no content, streamed or whole.)
      script: (p) => p.tokenizer.encode(`\n\n${CALL}`, { addSpecialTokens: false }),
    });
    cold = await startTestServer({ kvBudgetBytes: BUDGET, promptCacheSessions: 0 }, { loadDefault: false });
    const loaded = await cold.hostApi.call('loadModel', { path: pkg.dir });
    if (!loaded.ok) throw new Error(loaded.error.message);
    model = loaded.value.id;
  }, 60_000);
  afterAll(async () => {
    await cold?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('is a call streamed and whole alike, read as JSON.parse reads it (the last "a")', async () => {
    const request = {
      model,
      messages: hi,
      tools: [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object' } } }],
      max_tokens: 64,
      temperature: 0,
    };
    const c = openaiClient(cold.url);
    const whole = (await c.chat.completions.create(request)).choices[0];
    expect(whole?.finish_reason).toBe('tool_calls');
    expect(whole?.message.content).toBeNull();
    const call = whole?.message.tool_calls?.[0] as { function: { name: string; arguments: string } } | undefined;
    expect(whole?.message.tool_calls).toHaveLength(1);
    expect(call?.function).toEqual({ name: 'f', arguments: '{"a":2}' });

    let content = '';
    let finish: string | null = null;
    let args = '';
    const names: string[] = [];
    let opening: Record<string, unknown> | undefined;
    for await (const part of await c.chat.completions.create({ ...request, stream: true })) {
      const choice = part.choices[0];
      if (!choice) continue;
      // tool_choice auto: the role waits for the reply's first words, and comes with its call, content null (the
      // whole reply's content), as OpenAI sends it; not a role chunk of "" sent before anything was written.
      opening ??= choice.delta as Record<string, unknown>;
      content += choice.delta.content ?? '';
      for (const d of choice.delta.tool_calls ?? []) {
        if (d.function?.name) names.push(d.function.name);
        args += d.function?.arguments ?? '';
      }
      finish = choice.finish_reason ?? finish;
    }
    expect(opening).toMatchObject({
      role: 'assistant',
      content: null,
      tool_calls: [{ index: 0, function: { name: 'f' } }],
    });
    // The call streamed is the reply's call: not taken back as text at the end.
    expect(content).toBe('');
    expect(finish).toBe('tool_calls');
    expect(names).toEqual(['f']);
    expect(JSON.parse(args)).toEqual(JSON.parse(call?.function.arguments ?? ''));
  });
});

describe('refusals', () => {
  it('400 context_length_exceeded with the prompt and context sizes', async () => {
    const err = await apiError(
      client.completions.create({ model: 'default', prompt: Array(2048).fill(7), max_tokens: 4 }),
    );
    expect(err.status).toBe(400);
    expect(err.code).toBe('context_length_exceeded');
    expect(err.param).toBe('prompt');
    expect(err.error).toMatchObject({ n_prompt_tokens: 2048, n_ctx: 2048, type: 'invalid_request_error' });
    expect(err.message).toMatch(/2048/);
  });

  it('400 kv_budget_exceeded with required_bytes and budget_bytes, before any engine work', async () => {
    await t.hostApi.call('configureBudget', { kvBudgetBytes: 8 * 1024 });
    try {
      const engineSpy = vi.spyOn(t.runner.engine, 'generate');
      const err = await apiError(
        client.completions.create({ model: 'default', prompt: Array(10).fill(7), max_tokens: 4 }),
      );
      expect(err.status).toBe(400);
      expect(err.code).toBe('kv_budget_exceeded');
      expect(err.error).toMatchObject({
        required_bytes: 11 * 1024,
        budget_bytes: 8 * 1024,
        bpt: 1024,
        n_prompt_tokens: 10,
        rows: 1,
      });
      expect(engineSpy).not.toHaveBeenCalled();
      engineSpy.mockRestore();
    } finally {
      await t.hostApi.call('configureBudget', { kvBudgetBytes: BUDGET });
    }
  });

  it('names which of several prompts is refused (prompt[i], in param and message), streamed or not, whatever n', async () => {
    const refusal = async (body: Record<string, unknown>) => {
      const err = await apiError(
        client.completions.create({ model: 'default', max_tokens: 2, ...body } as OpenAI.CompletionCreateParams),
      );
      expect(err.status).toBe(400);
      return err;
    };
    const long = Array(2048).fill(7);
    for (const extra of [{}, { stream: true }, { n: 2 }, { n: 3, stream: true }]) {
      const err = await refusal({ prompt: [[7, 7], long, [8]], ...extra });
      expect(err.code, JSON.stringify(extra)).toBe('context_length_exceeded');
      expect(err.param).toBe('prompt[1]');
      // OpenAI's words (clients match "maximum context length"), naming the prompt, its count said once.
      expect(err.message).toBe(
        "400 This model's maximum context length is 2048 tokens. However, your prompt[1] resulted in 2048 tokens, which leaves no room for a reply. Shorten prompt[1] or leave it out, or use a model with a longer context.",
      );
      expect(err.error).toMatchObject({ n_prompt_tokens: 2048, n_ctx: 2048 });
    }
    const oov = await refusal({ prompt: [[1, 2], [3], [5, 99999]], n: 2 });
    expect(oov.code).toBe('token_out_of_vocab');
    expect(oov.param).toBe('prompt[2]');
    expect(oov.message).toMatch(/^400 prompt\[2\]: Prompt id 99999 at position 1 /);
    const empty = await refusal({ prompt: ['hi', ''], stream: true });
    expect(empty.param).toBe('prompt[1]');
    expect(empty.message).toMatch(/^400 prompt\[1\] is empty/);
    await t.hostApi.call('configureBudget', { kvBudgetBytes: 8 * 1024 });
    try {
      // Its one row alone is over the budget: that prompt is the one to shorten.
      for (const extra of [{}, { stream: true }]) {
        const err = await refusal({ prompt: [[7], Array(10).fill(7)], ...extra });
        expect(err.code).toBe('kv_budget_exceeded');
        expect(err.param).toBe('prompt[1]');
        expect(err.message).toMatch(/^400 prompt\[1\] alone needs 11\.0 KiB of KV cache .* KV budget is 8\.0 KiB/);
        expect(err.error).toMatchObject({ budget_bytes: 8 * 1024, n_prompt_tokens: 10, rows: 2 });
      }
      // Each fits alone, not the batch: the request's, not one prompt's.
      const batch = await refusal({
        prompt: [
          [7, 7, 7],
          [7, 7, 7, 7],
        ],
      });
      expect(batch.code).toBe('kv_budget_exceeded');
      expect(batch.param).toBeNull();
      expect(batch.message).toMatch(/2 rows/);
    } finally {
      await t.hostApi.call('configureBudget', { kvBudgetBytes: BUDGET });
    }
    // One prompt is still `prompt`.
    expect((await refusal({ prompt: [long] })).param).toBe('prompt');
  });

  it('429 with Retry-After when the queue is full, and the queued request still completes', async () => {
    await t.hostApi.call('configureBudget', { maxRunning: 1, maxQueue: 1 });
    // Hold the first request's engine start so it stays running while the queue fills: deterministic, no timing.
    const real = t.runner.engine.generate.bind(t.runner.engine);
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const spy = vi.spyOn(t.runner.engine, 'generate').mockImplementationOnce((token, cmd, handlers) => {
      void released.then(() => real(token, cmd, handlers));
    });
    try {
      const first = await client.chat.completions.create({
        model: 'default',
        messages: hi,
        max_tokens: 4,
        stream: true,
      });
      const queued = client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 4 });
      await eventually(
        () => budget(t.url),
        (s) => s.queue.length === 1 && s.running.length === 1,
      );
      // Refused while the stream would open: a plain 429, not a broken stream.
      const err = await apiError(
        client.chat.completions.create({ model: 'default', messages: hi, max_tokens: 4, stream: true }),
      );
      expect(err.status).toBe(429);
      expect(err.code).toBe('queue_full');
      expect(Number(err.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(err.error).toMatchObject({ queue_length: 1, max_queue: 1, kvdesk_code: 'QUEUE_FULL' });
      release();
      let text = '';
      for await (const ch of first) text += ch.choices[0]?.delta.content ?? '';
      expect(text.length).toBeGreaterThan(0);
      const q = await queued;
      expect(q.choices[0]?.finish_reason).toMatch(/^(stop|length)$/);
    } finally {
      release();
      spy.mockRestore();
      await t.hostApi.call('configureBudget', { maxRunning: 4, maxQueue: 256 });
    }
  });

  it('refuses a streamed request with a plain HTTP error, before any stream starts', async () => {
    const res = await fetch(`${t.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', prompt: Array(2048).fill(7), max_tokens: 4, stream: true }),
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('context_length_exceeded');
    const err = await apiError(
      client.chat.completions.create({
        model: 'default',
        messages: hi,
        stream: true,
        max_tokens: 4,
        logit_bias: { '999999': 5 },
      }),
    );
    expect(err.status).toBe(400);
    expect(err.param).toBe('logit_bias');
  });

  it('keeps a queued stream unanswered until admission, so an end while queued is still a plain HTTP error', async () => {
    await t.hostApi.call('configureBudget', { maxRunning: 1 });
    const real = t.runner.engine.generate.bind(t.runner.engine);
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const spy = vi.spyOn(t.runner.engine, 'generate').mockImplementationOnce((token, cmd, handlers) => {
      void released.then(() => real(token, cmd, handlers));
    });
    try {
      const first = await client.chat.completions.create({
        model: 'default',
        messages: hi,
        max_tokens: 4,
        stream: true,
      });
      let answered = false;
      const queued = fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'default', messages: hi, max_tokens: 4, stream: true }),
      }).then((res) => {
        answered = true;
        return res;
      });
      const waiting = await eventually(
        () => budget(t.url),
        (s) => s.queue.length === 1,
      );
      await new Promise((r) => setTimeout(r, 100));
      expect(answered).toBe(false);
      // Ended while queued (here: cancelled from the UI): the client gets a plain HTTP error, not a broken stream.
      const cancelled = await t.hostApi.call('cancel', { requestId: (waiting.queue[0] as { id: string }).id });
      expect(cancelled).toEqual({ ok: true, value: { cancelled: true } });
      const res = await queued;
      expect(res.status).toBe(503);
      // Not to be retried: the OpenAI and Anthropic SDKs retry a 503 unless told not to.
      expect(res.headers.get('x-should-retry')).toBe('false');
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('cancelled');
      release();
      for await (const _ of first) {
        // drain
      }
    } finally {
      release();
      spy.mockRestore();
      await t.hostApi.call('configureBudget', { maxRunning: 4 });
    }
    await settled(t.url);
  });

  it('404 model_not_found for a model that is not loaded', async () => {
    const err = await apiError(client.chat.completions.create({ model: 'gpt-4o', messages: hi }));
    expect(err.status).toBe(404);
    expect(err.code).toBe('model_not_found');
    expect(err.param).toBe('model');
    expect(err.message).toMatch(/gpt-4o/);
    // In the shape of the route's other errors: the field at fault is `param`, nothing beside it.
    const message = 'model "gpt-4o" is neither loaded nor in the library (known: default)';
    const shape = {
      error: {
        message,
        type: 'invalid_request_error',
        code: 'model_not_found',
        param: 'model',
        kvdesk_code: 'MODEL_NOT_LOADED',
      },
    };
    expect(err.error).toEqual(shape.error);
    for (const [p, body] of [
      ['/v1/completions', { model: 'gpt-4o', prompt: 'hi' }],
      ['/v1/responses', { model: 'gpt-4o', input: 'hi' }],
    ] as const) {
      const res = await fetch(`${t.url}${p}`, { method: 'POST', body: JSON.stringify(body) });
      expect(res.status, p).toBe(404);
      expect(await res.json(), p).toEqual(shape);
    }
  });

  it('400 for malformed parameters, naming the parameter', async () => {
    const temp = await apiError(client.chat.completions.create({ model: 'default', messages: hi, temperature: 5 }));
    expect(temp.status).toBe(400);
    expect(temp.param).toBe('temperature');
    const empty = await apiError(client.chat.completions.create({ model: 'default', messages: [] }));
    expect(empty.status).toBe(400);
    expect(empty.param).toBe('messages');
    const tools = await apiError(
      client.chat.completions.create({
        model: 'default',
        messages: hi,
        tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
        tool_choice: { type: 'function', function: { name: 'g' } },
      }),
    );
    expect(tools.status).toBe(400);
    expect(tools.param).toBe('tool_choice');
    expect(tools.message).toMatch(/names "g", which is not among the tools \(f\)/);
    // What only the host can check (the model's vocabulary) comes back as 400 too, in the API's names.
    const bias = await apiError(
      client.chat.completions.create({ model: 'default', messages: hi, logit_bias: { '999999': 5 } }),
    );
    expect(bias.status).toBe(400);
    expect(bias.code).toBe('invalid_request');
    expect(bias.param).toBe('logit_bias');
    expect(bias.message).toMatch(
      /^400 logit_bias: token id 999999 is outside the model's vocabulary of 512 ids \(0–511\)/,
    );
    // top_p 0 is the likeliest token alone: the greedy reply.
    const nucleus = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 6,
      top_p: 0,
      seed: 1,
    });
    const greedy = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 6,
      temperature: 0,
    });
    expect(nucleus.choices[0]?.message.content).toBe(greedy.choices[0]?.message.content);
  });

  it('400 for what would change the reply and kvdesk cannot do (audio out, a web search); modalities ["text"] is taken', async () => {
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } }, 'modalities[1]'],
      [{ audio: { voice: 'alloy', format: 'wav' } }, 'audio'],
      [{ web_search_options: {} }, 'web_search_options'],
    ];
    for (const [extra, param] of refused) {
      const body = { model: 'default', messages: hi, max_tokens: 2, ...extra };
      const err = await apiError(client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming));
      expect(err.status, JSON.stringify(extra)).toBe(400);
      expect(err.param).toBe(param);
      expect(err.message).toMatch(/not supported: kvdesk/);
    }
    const text = await client.chat.completions.create({
      model: 'default',
      messages: hi,
      max_tokens: 2,
      modalities: ['text'],
    });
    expect(text.choices[0]?.finish_reason).toBeDefined();
  });

  it('takes an empty suffix as none: the reply of the same request without it', async () => {
    // "" asks for no text after the completion: the request is one without a suffix.
    const plain = await client.completions.create({ model: 'default', prompt: 'a', max_tokens: 2, temperature: 0 });
    const suffixed = await client.completions.create({
      model: 'default',
      prompt: 'a',
      max_tokens: 2,
      temperature: 0,
      suffix: '',
    });
    expect(suffixed.choices[0]?.text).toBe(plain.choices[0]?.text);
    const filled = await apiError(client.completions.create({ model: 'default', prompt: 'a', suffix: 'z' }));
    expect(filled.param).toBe('suffix');
  });

  it('400 invalid_json for a body that is not JSON', async () => {
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      body: '{"model":',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; type: string } };
    expect(body.error).toMatchObject({ code: 'invalid_json', type: 'invalid_request_error' });
  });

  it('takes a body that begins with a UTF-8 byte order mark (a file PowerShell or Notepad saved) as the JSON after it', async () => {
    const json = JSON.stringify({ model: 'default', prompt: 'a', max_tokens: 2, temperature: 0 });
    const post = (body: Buffer) =>
      fetch(`${t.url}/v1/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    const plain = await post(Buffer.from(json));
    const marked = await post(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(json)]));
    expect(marked.status, await marked.clone().text()).toBe(200);
    const text = (res: Response) => res.json().then((b) => (b as { choices: { text: string }[] }).choices[0]?.text);
    expect(await text(marked)).toBe(await text(plain));
  });
});

describe('failures inside the server', () => {
  it('still answer the client (500) instead of leaving it waiting', async () => {
    const spy = vi.spyOn(t.runner, 'tokenizerOf').mockImplementation(() => {
      throw new Error('tokenizer exploded');
    });
    try {
      const err = await apiError(client.completions.create({ model: 'default', prompt: ['a', 'b'], max_tokens: 2 }));
      expect(err.status).toBe(500);
      expect(err.code).toBe('internal_error');
      expect(err.message).toMatch(/tokenizer exploded/);
    } finally {
      spy.mockRestore();
    }
    await settled(t.url);
  });
});

describe('disconnects', () => {
  it('a client that aborts a stream cancels its request and returns the reservation', async () => {
    // On the slow model (milliseconds a token), its end-of-text banned and its max tokens clipped only by its
    // context (about 4,000 tokens, all within the budget), the reply runs for many seconds unless stopped: the
    // engine cannot have written the whole of it when the client's abort comes, right after the first token.
    expect((await t.hostApi.call('configureBudget', { kvBudgetBytes: 128 * 1024 * 1024 })).ok).toBe(true);
    const slow = await t.hostApi.call('loadModel', { path: slowModel() });
    if (!slow.ok) throw new Error(slow.error.message);
    const model = slow.value.id;
    try {
      const before = (await budget(t.url)).counters.cancelled;
      const controller = new AbortController();
      const endless = { model, messages: LONG_CHAT, temperature: 0, logit_bias: noEndBias(slowModel()) };
      const stream = await client.chat.completions.create(
        { ...endless, max_tokens: 100_000, stream: true },
        { signal: controller.signal },
      );
      let id = '';
      try {
        for await (const ch of stream) {
          id = ch.id.replace(/^chatcmpl-/, '');
          if (ch.choices[0]?.delta.content) {
            controller.abort();
            break; // reading on after an abort can hang in Node 20's undici (see load.test.ts)
          }
        }
      } catch {
        // The client reports its own abort; what matters is what the server did.
      }
      const snap = await settled(t.url);
      expect(snap.counters.cancelled).toBe(before + 1);
      const view = snap.recent.find((r) => r.id === id);
      expect(view).toMatchObject({ state: 'cancelled', endReason: 'disconnect' });
      expect(view?.generatedTokens).toBeLessThan(1500);
      // The conversation's KV stayed in the prompt cache: the client's retry reads its prompt from there (all
      // but the last token, which must run again to give the first token's logits).
      const retry = await client.chat.completions.create({ model, messages: LONG_CHAT, max_tokens: 2, temperature: 0 });
      expect(retry.usage?.prompt_tokens_details?.cached_tokens).toBe((view?.promptTokens ?? 0) - 1);
    } finally {
      expect((await t.hostApi.call('unloadModel', { id: model })).ok).toBe(true);
      await t.hostApi.call('configureBudget', { kvBudgetBytes: BUDGET });
    }
  });

  it('a client that gives up on a non-streamed request cancels it too', async () => {
    const before = (await budget(t.url)).counters.cancelled;
    const controller = new AbortController();
    // The reply's end waits for the server's cancel (holdReplyEnds): the abort cannot come after it.
    const held = holdReplyEnds(t.runner.engine);
    try {
      const pending = client.chat.completions.create(
        { model: 'default', messages: LONG_CHAT, max_tokens: 100_000, temperature: 0, logit_bias: noEndBias() },
        { signal: controller.signal },
      );
      const [id] = await held.tokens();
      controller.abort();
      await expect(pending).rejects.toThrow();
      const snap = await settled(t.url);
      expect(held.cancelled).toEqual([id]);
      expect(snap.counters.cancelled).toBe(before + 1);
      expect(snap.recent[snap.recent.length - 1]).toMatchObject({
        id,
        state: 'cancelled',
        endReason: 'disconnect',
      });
    } finally {
      held.restore();
    }
  });
});

describe("the request id (OpenAI's x-request-id header)", () => {
  // A conversation of its own: the prompt cache holds no other test's.
  const ask = [{ role: 'user' as const, content: 'Which request is this?' }];
  it("is the host's id of the generation, the one the inspector lists: the SDK's _request_id, streamed or not", async () => {
    const r = await client.chat.completions.create({ model: 'default', messages: ask, max_tokens: 2, temperature: 0 });
    expect(r._request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(r.id).toBe(`chatcmpl-${r._request_id}`);
    expect((await recent(r._request_id as string)).id).toBe(r._request_id);
    const streamed = await client.chat.completions
      .create({ model: 'default', messages: ask, max_tokens: 2, temperature: 0, stream: true })
      .withResponse();
    let id: string | undefined;
    for await (const c of streamed.data) id = c.id;
    expect(streamed.request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(id).toBe(`chatcmpl-${streamed.request_id}`);
    const text = await client.completions.create({
      model: 'default',
      prompt: 'Which request?',
      max_tokens: 2,
      temperature: 0,
    });
    expect(text.id).toBe(`cmpl-${text._request_id}`);
    const response = await client.responses.create({ model: 'default', input: 'Which request?', max_output_tokens: 2 });
    expect(response.id).toBe(`resp_${response._request_id?.replaceAll('-', '')}`);
  });

  it('every other answer has one too: the model list, a refusal (its requestID), an Ollama line', async () => {
    const { request_id } = await client.models.list().withResponse();
    expect(request_id).toMatch(/^[0-9a-f-]{36}$/);
    const err = await apiError(client.chat.completions.create({ model: 'default', messages: [], max_tokens: 2 }));
    expect(err.status).toBe(400);
    expect(err.requestID).toMatch(/^[0-9a-f-]{36}$/);
    const tags = await fetch(`${t.url}/api/tags`);
    expect(tags.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    expect(tags.headers.get('request-id')).toBe(tags.headers.get('x-request-id'));
  });

  it("a client's own sane x-request-id comes back in x-request-id; request-id stays kvdesk's (the reply's id)", async () => {
    const own = 'trace-4f2a/retry:1 of 3';
    const post = (path: string, body: unknown, id: string) =>
      fetch(`${t.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': id },
        body: JSON.stringify(body),
      });
    const chat = await post('/v1/chat/completions', { model: 'default', messages: ask, max_tokens: 2 }, own);
    expect(chat.headers.get('x-request-id')).toBe(own);
    const kvdesk = chat.headers.get('request-id') as string;
    expect(kvdesk).toMatch(/^[0-9a-f-]{36}$/);
    expect(((await chat.json()) as { id: string }).id).toBe(`chatcmpl-${kvdesk}`);
    expect((await recent(kvdesk)).id).toBe(kvdesk);
    // Anthropic's SDK reads request-id: kvdesk's, as the message id has it.
    const message = await post(
      '/v1/messages',
      { model: 'default', messages: [{ role: 'user', content: 'Which?' }], max_tokens: 2 },
      own,
    );
    expect(message.headers.get('x-request-id')).toBe(own);
    const msgId = message.headers.get('request-id') as string;
    expect(((await message.json()) as { id: string }).id).toBe(`msg_${msgId.replaceAll('-', '')}`);
    // Answers no generation gives (a refusal, the model list) echo it too.
    const refused = await post('/v1/chat/completions', { model: 'default', messages: [], max_tokens: 2 }, own);
    expect(refused.status).toBe(400);
    expect(refused.headers.get('x-request-id')).toBe(own);
    expect(refused.headers.get('request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const list = await fetch(`${t.url}/v1/models`, { headers: { 'x-request-id': own } });
    expect(list.headers.get('x-request-id')).toBe(own);
    // One that is no id to echo (longer than 128 characters, not printable ASCII, blank): kvdesk's in both.
    for (const odd of ['x'.repeat(129), 'caf\u00e9', '   ']) {
      const r = await fetch(`${t.url}/v1/models`, { headers: { 'x-request-id': odd } });
      expect(r.headers.get('x-request-id'), JSON.stringify(odd)).toMatch(/^[0-9a-f-]{36}$/);
      expect(r.headers.get('request-id')).toBe(r.headers.get('x-request-id'));
    }
    const longest = 'y'.repeat(128);
    const fits = await fetch(`${t.url}/v1/models`, { headers: { 'x-request-id': longest } });
    expect(fits.headers.get('x-request-id')).toBe(longest);
  });
});
