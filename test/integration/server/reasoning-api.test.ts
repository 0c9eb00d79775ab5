/**
 * A thinking model's reasoning through the four HTTP APIs, on a real server with the generated thinking model
 * (Qwen3's template and `enable_thinking` switch, `</think>` one token) and the default model. The prompt is one
 * for which the random model ends its reasoning by itself (found in beforeAll), so every API, none of which but
 * OpenAI's has a logit bias, sees a reply with both reasoning and answer. Against the host's own greedy result
 * for the same request: OpenAI's `reasoning_content` (and its stream's deltas and reasoning_tokens), Ollama's
 * `thinking` (chat and generate, streamed or not), Anthropic's thinking block (its stream's thinking_delta,
 * signature_delta and block order), and the Responses reasoning item (its stream's reasoning_text events and
 * reasoning_tokens) are the host's reasoning, their answers the host's answer, streamed pieces add up to them with
 * no reasoning after the answer began. Thinking switched off in each API's terms leaves no reasoning and renders
 * a longer prompt (the template closes the reasoning); asking the default model to think is a 400 naming the
 * field in the API's terms, and the server goes on; an earlier turn's reasoning sent back in each API's shape
 * reaches the template (the prompt the host counts for it); Ollama's `/api/show` says which model thinks.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage, GenerateRequest, GenerationResult } from '../../../src/shared/contract';
import { naturalThinkingQuestion, THINK_END_ID, thinkingModel } from '../../helpers/models';
import { failure } from '../../helpers/rejection';
import { ndjsonLines, openaiClient, startTestServer, type TestServer } from './server-helpers';

type Json = Record<string, unknown>;

const MAX = 16;
let t: TestServer;
let openai: OpenAI;
let anthropic: Anthropic;
/** The thinking model's id. */
let model: string;
/** A question the greedy thinking model reasons about for a few tokens, then answers. */
let NATURAL: string;
/** The host's greedy replies to it: thinking as the template does by default, and switched off. */
let ON: GenerationResult;
let OFF: GenerationResult;

/** The host's own greedy reply: the oracle every API is checked against. */
function host(req: Partial<GenerateRequest> = {}): Promise<GenerationResult> {
  return t.runner.generate({
    model,
    messages: [{ role: 'user', content: NATURAL }],
    maxNewTokens: MAX,
    sampling: { greedy: true },
    ...req,
  }).result;
}

/** The prompt tokens the host renders for a conversation. */
const promptOf = (messages: ChatMessage[], extra: Partial<GenerateRequest> = {}) =>
  t.runner.countPromptTokens({ model, messages, ...extra });

/** Structured output's schema in the JSON-output tests: a short answer, so the reply fits after its reasoning. */
const ANSWER_SCHEMA = {
  type: 'object',
  properties: { answer: { type: 'string', enum: ['yes', 'no'] } },
  required: ['answer'],
  additionalProperties: false,
};

/** An earlier assistant turn's reasoning, sent back with the conversation. */
const REASONED = 'They greet me, so I greet them back.';
/** A conversation with an earlier assistant turn (and its reasoning, if given), as the host takes it. */
const hostTurns = (reasoning?: string): ChatMessage[] => [
  { role: 'user', content: 'Hi' },
  { role: 'assistant', content: 'Hello.', ...(reasoning ? { reasoning } : {}) },
  { role: 'user', content: NATURAL },
];

beforeAll(async () => {
  t = await startTestServer({ intraOpNumThreads: 2 }, { loadDefault: true });
  openai = openaiClient(t.url);
  anthropic = new Anthropic({ baseURL: t.url, apiKey: 'unused', maxRetries: 0 });
  const r = await t.hostApi.call('loadModel', { path: thinkingModel() });
  if (!r.ok) throw new Error(r.error.message);
  model = r.value.id;
  // Without a bias the random model mostly reasons to the end; a few questions make it write </think> early.
  const found = await naturalThinkingQuestion(
    (content) =>
      t.runner.generate({ model, messages: [{ role: 'user', content }], maxNewTokens: MAX, sampling: { greedy: true } })
        .result,
  );
  NATURAL = found.question;
  expect(found.reply.tokenIds.indexOf(THINK_END_ID)).toBeGreaterThanOrEqual(2);
  ON = await host();
  OFF = await host({ thinking: false });
}, 120_000);
afterAll(async () => {
  await t?.close();
});

const ask = () => [{ role: 'user' as const, content: NATURAL }];

/** One streamed piece: reasoning or answer text (a piece with both has the reasoning first). */
type Piece = { reasoning?: string; text?: string };

/** Streamed pieces add up to the host's reasoning and answer, and no reasoning comes once the answer began. */
function expectPieces(pieces: Piece[], oracle: GenerationResult = ON): void {
  const flat = pieces.flatMap((p) => [
    ...(p.reasoning ? [{ reasoning: p.reasoning }] : []),
    ...(p.text ? [{ text: p.text }] : []),
  ]);
  expect(flat.map((p) => p.reasoning ?? '').join('')).toBe(oracle.reasoning);
  expect(flat.map((p) => p.text ?? '').join('')).toBe(oracle.text);
  const lastReasoning = flat.findLastIndex((p) => p.reasoning !== undefined);
  const firstText = flat.findIndex((p) => p.text !== undefined);
  expect(lastReasoning).toBeGreaterThanOrEqual(0);
  expect(firstText).toBeGreaterThan(lastReasoning);
  // Streamed as written, not in one piece at the end.
  expect(flat.filter((p) => p.reasoning !== undefined).length).toBeGreaterThan(1);
}

describe('the oracle', () => {
  it('the host splits the reply to NATURAL into reasoning and answer at its own </think>', () => {
    expect(ON.reasoning?.length).toBeGreaterThan(0);
    expect(ON.text.trim().length).toBeGreaterThan(0);
    expect(ON.reasoningTokens).toBe(ON.tokenIds.indexOf(THINK_END_ID) + 1);
    expect(ON.tokenIds).toHaveLength(MAX);
    // Switched off, the template closes the reasoning itself: the prompt is longer and the reply all answer.
    expect(OFF.reasoning ?? '').toBe('');
    expect(OFF.text.length).toBeGreaterThan(0);
    expect(OFF.promptTokens).toBeGreaterThan(ON.promptTokens);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// OpenAI chat completions
// ---------------------------------------------------------------------------------------------------------------

type ChatMessageOut = { content: string | null; reasoning_content?: string };
type Usage = { prompt_tokens: number; completion_tokens_details?: { reasoning_tokens: number } };
const openaiError = (p: Promise<unknown>) => failure<InstanceType<typeof OpenAI.APIError>>(p, OpenAI.APIError);

function chat(extra: Json = {}, messages: unknown[] = ask()) {
  return openai.chat.completions.create({
    model,
    messages,
    max_tokens: MAX,
    temperature: 0,
    ...extra,
  } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
}

describe('OpenAI chat completions', () => {
  it('message.reasoning_content is the host reasoning, content its answer; usage counts the reasoning tokens', async () => {
    const c = await chat();
    const message = c.choices[0]?.message as unknown as ChatMessageOut;
    expect(message.reasoning_content).toBe(ON.reasoning);
    expect(message.content).toBe(ON.text);
    expect(c.choices[0]?.finish_reason).toBe('length');
    const usage = c.usage as unknown as Usage;
    expect(usage.completion_tokens_details?.reasoning_tokens).toBe(ON.reasoningTokens);
    expect(usage.prompt_tokens).toBe(ON.promptTokens);
  });

  it('streams delta.reasoning_content pieces before the content pieces; the usage chunk counts reasoning tokens', async () => {
    const stream = await openai.chat.completions.create({
      model,
      messages: ask(),
      max_tokens: MAX,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const pieces: Piece[] = [];
    let usage: Usage | undefined;
    for await (const c of stream) {
      const delta = c.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      if (delta) pieces.push({ reasoning: delta.reasoning_content, text: delta.content ?? undefined });
      if (c.usage) usage = c.usage as unknown as Usage;
    }
    expectPieces(pieces);
    expect(usage?.completion_tokens_details?.reasoning_tokens).toBe(ON.reasoningTokens);
  });

  it('response_format json_schema: reasoning_content is the reasoning, content the JSON after it', async () => {
    const oracle = await host({ jsonSchema: ANSWER_SCHEMA, maxNewTokens: 128 });
    expect(oracle.reasoning?.length).toBeGreaterThan(0);
    const c = await chat({
      max_tokens: 128,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: ANSWER_SCHEMA, strict: true } },
    });
    const message = c.choices[0]?.message as unknown as ChatMessageOut;
    expect(message.reasoning_content).toBe(oracle.reasoning);
    expect(message.content).toBe(oracle.text);
    expect(JSON.parse(message.content ?? '')).toEqual({ answer: expect.stringMatching(/^(yes|no)$/) });
    expect(c.choices[0]?.finish_reason).toBe('stop');
  });

  it('tool_choice required: reasoning_content is the reasoning, then the call (streamed alike)', async () => {
    const tools = [
      { name: 'f', parameters: { type: 'object', properties: { x: { type: 'integer' } }, required: ['x'] } },
    ];
    const oracle = await host({ tools, toolChoice: 'required', maxNewTokens: 1024 });
    expect(oracle.reasoning?.length).toBeGreaterThan(0);
    const call = oracle.rows[0]?.toolCalls?.[0];
    expect(call?.name).toBe('f');
    const request = {
      max_tokens: 1024,
      tools: tools.map((t) => ({ type: 'function', function: t })),
      tool_choice: 'required',
    };
    const c = await chat(request);
    const message = c.choices[0]?.message as unknown as ChatMessageOut & {
      tool_calls?: Array<{ function: { name: string; arguments: string } }>;
    };
    expect(message.reasoning_content).toBe(oracle.reasoning);
    expect(message.tool_calls?.map((t) => t.function)).toEqual([{ name: 'f', arguments: call?.arguments }]);
    expect(c.choices[0]?.finish_reason).toBe('tool_calls');
    const stream = await openai.chat.completions.create({
      model,
      messages: ask(),
      temperature: 0,
      stream: true,
      ...request,
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    let reasoning = '';
    let args = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as {
        reasoning_content?: string;
        tool_calls?: Array<{ function?: { arguments?: string } }>;
      };
      // The call's arguments come after the reasoning, not inside it.
      if (delta?.reasoning_content) expect(args).toBe('');
      reasoning += delta?.reasoning_content ?? '';
      args += delta?.tool_calls?.map((t) => t.function?.arguments ?? '').join('') ?? '';
    }
    expect(reasoning).toBe(oracle.reasoning);
    // (As the model wrote them; the whole call's are the same JSON, written compactly.)
    expect(JSON.parse(args)).toEqual(JSON.parse(call?.arguments ?? ''));
  });

  it('enable_thinking false or reasoning_effort "none": no reasoning_content, the longer prompt, the host reply', async () => {
    for (const extra of [
      { chat_template_kwargs: { enable_thinking: false } },
      { reasoning_effort: 'none' },
      // The switch outranks the effort.
      { chat_template_kwargs: { enable_thinking: false }, reasoning_effort: 'high' },
    ]) {
      const c = await chat(extra);
      const message = c.choices[0]?.message as unknown as ChatMessageOut;
      expect(message, JSON.stringify(extra)).not.toHaveProperty('reasoning_content');
      expect(message.content).toBe(OFF.text);
      expect(c.usage?.prompt_tokens).toBe(OFF.promptTokens);
      expect(c.usage?.prompt_tokens).toBeGreaterThan(ON.promptTokens);
    }
    // Streamed: no reasoning chunk either.
    const stream = await openai.chat.completions.create({
      model,
      messages: ask(),
      max_tokens: MAX,
      temperature: 0,
      stream: true,
      reasoning_effort: 'none',
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    let text = '';
    for await (const c of stream) {
      expect(c.choices[0]?.delta ?? {}).not.toHaveProperty('reasoning_content');
      text += c.choices[0]?.delta?.content ?? '';
    }
    expect(text).toBe(OFF.text);
    // enable_thinking true and the other efforts leave the model thinking.
    for (const extra of [{ chat_template_kwargs: { enable_thinking: true } }, { reasoning_effort: 'low' }]) {
      const c = await chat(extra);
      const message = c.choices[0]?.message as unknown as ChatMessageOut;
      expect(message.reasoning_content).toBe(ON.reasoning);
      expect(c.usage?.prompt_tokens).toBe(ON.promptTokens);
    }
  });

  it('a model that does not think: enable_thinking true is a 400 naming thinking, and the server goes on', async () => {
    const err = await openaiError(
      openai.chat.completions.create({
        model: 'default',
        messages: ask(),
        max_tokens: 2,
        chat_template_kwargs: { enable_thinking: true },
      } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming),
    );
    expect(err.status).toBe(400);
    expect(err.param).toBe('chat_template_kwargs.enable_thinking');
    expect(err.message).toMatch(/does not think/);
    // Off, or an effort, is nothing to refuse for a model that does not think.
    for (const extra of [{ chat_template_kwargs: { enable_thinking: false } }, { reasoning_effort: 'none' }, {}]) {
      const c = await openai.chat.completions.create({
        model: 'default',
        messages: ask(),
        max_tokens: 2,
        ...extra,
      } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(c.choices[0]?.message).not.toHaveProperty('reasoning_content');
      expect(c.usage).not.toHaveProperty('completion_tokens_details');
    }
    // Other template variables and unknown efforts are refused before any generation.
    const kwarg = await openaiError(chat({ chat_template_kwargs: { enable_thinking: true, tools_in_user: 1 } }));
    expect([kwarg.status, kwarg.param]).toEqual([400, 'chat_template_kwargs.tools_in_user']);
    const effort = await openaiError(chat({ reasoning_effort: 'extreme' }));
    expect([effort.status, effort.param]).toEqual([400, 'reasoning_effort']);
  });

  it("an assistant turn's reasoning_content (or reasoning) reaches the template", async () => {
    const turns = (reasoning?: Json): unknown[] => [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello.', ...reasoning },
      { role: 'user', content: NATURAL },
    ];
    const withReasoning = promptOf(hostTurns(REASONED));
    expect(withReasoning).toBeGreaterThan(promptOf(hostTurns()));
    const without = await chat({ max_tokens: 1 }, turns());
    expect(without.usage?.prompt_tokens).toBe(promptOf(hostTurns()));
    for (const key of ['reasoning_content', 'reasoning']) {
      const c = await chat({ max_tokens: 1 }, turns({ [key]: REASONED }));
      expect(c.usage?.prompt_tokens, key).toBe(withReasoning);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Ollama
// ---------------------------------------------------------------------------------------------------------------

function post(p: string, body: unknown): Promise<Response> {
  return fetch(`${t.url}${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

async function ollama(p: string, body: Json): Promise<Json> {
  const res = await post(p, { stream: false, ...body });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Json;
}

const lines = ndjsonLines;

const greedy = { temperature: 0, num_predict: MAX };
type OllamaMessage = { role: string; content: string; thinking?: string };
const messageOf = (b: Json) => b.message as OllamaMessage;

describe('Ollama', () => {
  it('/api/chat: message.thinking is the host reasoning, content its answer; think true is the same', async () => {
    for (const think of [{}, { think: true }, { think: 'high' }]) {
      const body = await ollama('/api/chat', { model, messages: ask(), options: greedy, ...think });
      expect(messageOf(body), JSON.stringify(think)).toEqual({
        role: 'assistant',
        content: ON.text,
        thinking: ON.reasoning,
      });
      expect(body).toMatchObject({ done: true, done_reason: 'length', eval_count: MAX });
      expect(body.prompt_eval_count).toBe(ON.promptTokens);
    }
  });

  it('/api/chat streamed: message.thinking pieces, then content pieces, then the done line', async () => {
    const got = await lines(await post('/api/chat', { model, messages: ask(), options: greedy }));
    const last = got[got.length - 1] as Json;
    expect(last).toMatchObject({ done: true, done_reason: 'length', message: { role: 'assistant', content: '' } });
    expect(messageOf(last)).not.toHaveProperty('thinking');
    const pieces = got.slice(0, -1).map((l) => {
      expect(l.done).toBe(false);
      return { reasoning: messageOf(l).thinking, text: messageOf(l).content };
    });
    expectPieces(pieces);
  });

  it('/api/generate: thinking beside response, streamed or not', async () => {
    const body = await ollama('/api/generate', { model, prompt: NATURAL, options: greedy });
    expect(body.thinking).toBe(ON.reasoning);
    expect(body.response).toBe(ON.text);
    const got = await lines(await post('/api/generate', { model, prompt: NATURAL, options: greedy }));
    expect(got[got.length - 1]).toMatchObject({ done: true, response: '' });
    expectPieces(got.slice(0, -1).map((l) => ({ reasoning: l.thinking as string, text: l.response as string })));
  });

  it('format with a schema: thinking is the reasoning, content the JSON after it', async () => {
    const oracle = await host({ jsonSchema: ANSWER_SCHEMA, maxNewTokens: 128 });
    const body = await ollama('/api/chat', {
      model,
      messages: ask(),
      options: { ...greedy, num_predict: 128 },
      format: ANSWER_SCHEMA,
    });
    expect(messageOf(body)).toEqual({ role: 'assistant', content: oracle.text, thinking: oracle.reasoning });
    expect(JSON.parse(messageOf(body).content)).toHaveProperty('answer');
  });

  it('think false: no thinking, the longer prompt, the host reply', async () => {
    const body = await ollama('/api/chat', { model, messages: ask(), options: greedy, think: false });
    expect(messageOf(body)).toEqual({ role: 'assistant', content: OFF.text });
    expect(body.prompt_eval_count).toBe(OFF.promptTokens);
    const got = await lines(await post('/api/chat', { model, messages: ask(), options: greedy, think: false }));
    for (const l of got) expect(messageOf(l)).not.toHaveProperty('thinking');
    expect(got.map((l) => messageOf(l).content).join('')).toBe(OFF.text);
    const generated = await ollama('/api/generate', { model, prompt: NATURAL, options: greedy, think: false });
    expect(generated).not.toHaveProperty('thinking');
    expect(generated.response).toBe(OFF.text);
    expect(generated.prompt_eval_count).toBe(OFF.promptTokens);
  });

  it("a model that does not think: think true is a 400 naming Ollama's field, and the server goes on", async () => {
    for (const stream of [true, false]) {
      const res = await post('/api/chat', { model: 'default', messages: ask(), think: true, stream });
      expect(res.status).toBe(400);
      const error = ((await res.json()) as { error: string }).error;
      expect(error).toMatch(/does not think/);
      expect(error.endsWith("(Ollama's field: think)")).toBe(true);
    }
    const res = await post('/api/generate', { model: 'default', prompt: 'x', think: 'medium', stream: false });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/\(Ollama's field: think\)$/);
    const body = await ollama('/api/chat', { model: 'default', messages: ask(), options: { num_predict: 2 } });
    expect(body).toMatchObject({ done: true, eval_count: 2 });
    expect(messageOf(body)).not.toHaveProperty('thinking');
    const off = await ollama('/api/chat', {
      model: 'default',
      messages: ask(),
      think: false,
      options: { num_predict: 2 },
    });
    expect(off).toMatchObject({ done: true, eval_count: 2 });
  });

  it("an assistant message's thinking reaches the template", async () => {
    const turns = (thinking?: string) => [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello.', ...(thinking ? { thinking } : {}) },
      { role: 'user', content: NATURAL },
    ];
    const withIt = promptOf(hostTurns(REASONED));
    const without = promptOf(hostTurns());
    expect(withIt).toBeGreaterThan(without);
    const a = await ollama('/api/chat', { model, messages: turns(REASONED), options: { num_predict: 1 } });
    expect(a.prompt_eval_count).toBe(withIt);
    const b = await ollama('/api/chat', { model, messages: turns(), options: { num_predict: 1 } });
    expect(b.prompt_eval_count).toBe(without);
  });

  it('/api/show: capabilities include "thinking" for the thinking model only', async () => {
    const thinking = await ollama('/api/show', { model });
    expect(thinking.capabilities).toContain('thinking');
    expect(thinking.capabilities).toContain('completion');
    const plain = await ollama('/api/show', { model: 'default' });
    expect(plain.capabilities).not.toContain('thinking');
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Anthropic Messages
// ---------------------------------------------------------------------------------------------------------------

const anthropicError = (p: Promise<unknown>) => failure<InstanceType<typeof Anthropic.APIError>>(p, Anthropic.APIError);

function message(extra: Json = {}, messages: unknown[] = ask()) {
  return anthropic.messages.create({
    model,
    messages,
    max_tokens: MAX,
    temperature: 0,
    ...extra,
  } as unknown as Anthropic.MessageCreateParamsNonStreaming);
}

const inputOf = (u: Anthropic.Usage) => (u.input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);

describe('Anthropic Messages', () => {
  it('thinking enabled: the content starts with a thinking block of the host reasoning, then the text of its answer', async () => {
    const expected = [
      { type: 'thinking', thinking: ON.reasoning, signature: '' },
      { type: 'text', text: ON.text, citations: null },
    ];
    for (const thinking of [
      { thinking: { type: 'enabled', budget_tokens: MAX - 1 } },
      { thinking: { type: 'adaptive' } },
    ]) {
      const m = await message(thinking);
      expect(m.content, JSON.stringify(thinking)).toEqual(expected);
      expect(m.stop_reason).toBe('max_tokens');
      expect(m.usage.output_tokens).toBe(MAX);
      expect(inputOf(m.usage)).toBe(ON.promptTokens);
    }
  });

  it('streams the thinking block (thinking_delta pieces, a signature_delta), then the text block; the SDK assembles the same message', async () => {
    const enabled = { thinking: { type: 'enabled', budget_tokens: MAX - 1 } } as const;
    const stream = await anthropic.messages.create({
      model,
      messages: ask(),
      max_tokens: MAX,
      temperature: 0,
      stream: true,
      ...enabled,
    } as Anthropic.MessageCreateParamsStreaming);
    const events: Anthropic.RawMessageStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    // Each event in brief: the block sequence at a glance.
    const brief = events.map((e) => {
      if (e.type === 'content_block_start') return `start${e.index}:${e.content_block.type}`;
      if (e.type === 'content_block_delta') return `delta${e.index}:${e.delta.type}`;
      if (e.type === 'content_block_stop') return `stop${e.index}`;
      return e.type;
    });
    expect(brief.join(' ')).toMatch(
      /^message_start start0:thinking (delta0:thinking_delta )+delta0:signature_delta stop0 start1:text (delta1:text_delta )+stop1 message_delta message_stop$/,
    );
    const pieces = events.flatMap((e): Piece[] => {
      if (e.type !== 'content_block_delta') return [];
      if (e.delta.type === 'thinking_delta') return [{ reasoning: e.delta.thinking }];
      if (e.delta.type === 'text_delta') return [{ text: e.delta.text }];
      return [];
    });
    expectPieces(pieces);
    const signature = events.find((e) => e.type === 'content_block_delta' && e.delta.type === 'signature_delta');
    expect(signature).toMatchObject({ delta: { signature: '' } });
    const final = await anthropic.messages
      .stream({ model, messages: ask(), max_tokens: MAX, temperature: 0, ...enabled })
      .finalMessage();
    expect(final.content).toEqual([
      { type: 'thinking', thinking: ON.reasoning, signature: '' },
      { type: 'text', text: ON.text, citations: null },
    ]);
    // Not enabled: thinking off, the stream has the text block only.
    const plain = await anthropic.messages
      .stream({ model, messages: ask(), max_tokens: MAX, temperature: 0 })
      .finalMessage();
    expect(plain.content).toEqual([{ type: 'text', text: OFF.text, citations: null }]);
  });

  it('thinking disabled: no thinking block, the longer prompt, the host reply', async () => {
    const m = await message({ thinking: { type: 'disabled' } });
    expect(m.content).toEqual([{ type: 'text', text: OFF.text, citations: null }]);
    expect(inputOf(m.usage)).toBe(OFF.promptTokens);
    const counted = await anthropic.messages.countTokens({ model, messages: ask(), thinking: { type: 'disabled' } });
    expect(counted.input_tokens).toBe(OFF.promptTokens);
    // Without `thinking` (or null), as Anthropic: thinking off, not a reasoning written and hidden — a reply of a
    // few tokens is the answer, not an empty content with its tokens spent on reasoning no one sees.
    expect(OFF.promptTokens).toBeGreaterThan(ON.promptTokens);
    const short = await host({ thinking: false, maxNewTokens: 3 });
    expect(short.text).toMatch(/\S/);
    for (const thinking of [{}, { thinking: null }]) {
      const left = await message(thinking);
      expect(left.content, JSON.stringify(thinking)).toEqual([{ type: 'text', text: OFF.text, citations: null }]);
      expect(inputOf(left.usage)).toBe(OFF.promptTokens);
      const brief = await message({ ...thinking, max_tokens: 3 });
      expect(brief.content, JSON.stringify(thinking)).toEqual([{ type: 'text', text: short.text, citations: null }]);
      expect(brief.usage.output_tokens).toBe(3);
    }
    expect((await anthropic.messages.countTokens({ model, messages: ask() })).input_tokens).toBe(OFF.promptTokens);
    const stream = await anthropic.messages.create({
      model,
      messages: ask(),
      max_tokens: MAX,
      temperature: 0,
      thinking: { type: 'disabled' },
      stream: true,
    } as Anthropic.MessageCreateParamsStreaming);
    let text = '';
    for await (const e of stream) {
      if (e.type === 'content_block_start') expect(e.content_block.type).toBe('text');
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
    }
    expect(text).toBe(OFF.text);
  });

  it('a prefill that opens the reasoning itself, thinking off: the reply is the text it continues, reasoning and all', async () => {
    // The prefill's `<think>`: the prompt ends inside the reasoning whatever the switch says (the template's switch
    // writes the generation prompt, which a prefill has not), so on and off write the same tokens. A question
    // whose reasoning, so begun, the model ends by itself within MAX tokens:
    const prefill = { role: 'assistant' as const, content: '<think>' };
    const { question } = await naturalThinkingQuestion(
      (content) =>
        t.runner.generate({
          model,
          messages: [{ role: 'user', content }, prefill],
          continueFinal: true,
          thinking: true,
          maxNewTokens: MAX,
          sampling: { greedy: true },
        }).result,
    );
    const prefilled = [{ role: 'user', content: question }, prefill];
    const on = await message({ thinking: { type: 'enabled', budget_tokens: MAX - 1 } }, prefilled);
    const [thought, answer] = on.content as Array<{ type: string; thinking?: string; text?: string }>;
    expect(thought?.type).toBe('thinking');
    expect(answer?.type).toBe('text');
    for (const thinking of [{}, { thinking: { type: 'disabled' } }]) {
      const off = await message(thinking, prefilled);
      const label = JSON.stringify(thinking);
      expect(
        off.content.map((b) => b.type),
        label,
      ).toEqual(['text']);
      const text = (off.content[0] as Anthropic.TextBlock).text;
      // The reasoning's rest, its close and the answer, as the model wrote them (split, they are on's blocks).
      expect(text, label).toContain('</think>');
      const [rest, after] = text.split('</think>');
      expect(rest?.trim(), label).toBe(thought?.thinking);
      expect(after?.trim(), label).toBe(answer?.text?.trim());
      expect(off.usage.output_tokens).toBe(on.usage.output_tokens);
    }
    // Streamed alike: text deltas only, adding up to the same text.
    const stream = await anthropic.messages.create({
      model,
      messages: prefilled,
      max_tokens: MAX,
      temperature: 0,
      stream: true,
    } as Anthropic.MessageCreateParamsStreaming);
    let streamed = '';
    for await (const e of stream) {
      if (e.type === 'content_block_start') expect(e.content_block.type).toBe('text');
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') streamed += e.delta.text;
    }
    expect(streamed.split('</think>')[0]?.trim()).toBe(thought?.thinking);
  });

  it('a model that does not think: thinking enabled is a 400 invalid_request_error about thinking, and the server goes on', async () => {
    for (const stream of [false, true]) {
      const err = await anthropicError(
        anthropic.messages.create({
          model: 'default',
          messages: ask(),
          max_tokens: 2,
          thinking: { type: 'enabled', budget_tokens: 1 },
          stream,
        } as Anthropic.MessageCreateParamsNonStreaming),
      );
      expect(err.status).toBe(400);
      const body = err.error as { type: string; error: { type: string; message: string; param?: string } };
      expect(body.type).toBe('error');
      expect(body.error.type).toBe('invalid_request_error');
      expect(body.error.message).toMatch(/thinking/);
      expect(body.error.param).toBe('thinking');
    }
    const m = await anthropic.messages.create({
      model: 'default',
      messages: ask(),
      max_tokens: 2,
      thinking: { type: 'disabled' },
    });
    expect(m.content.map((b) => b.type)).toEqual(['text']);
    const bad = await anthropicError(message({ thinking: { type: 'sometimes' } }));
    expect(bad.status).toBe(400);
  });

  it("an assistant's thinking block reaches the template; a redacted_thinking block is left out", async () => {
    const turns = (blocks: unknown[]) => [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: [...blocks, { type: 'text', text: 'Hello.' }] },
      { role: 'user', content: NATURAL },
    ];
    // Without `thinking`: thinking off, as the host renders it.
    const withIt = promptOf(hostTurns(REASONED), { thinking: false });
    const without = promptOf(hostTurns(), { thinking: false });
    expect(withIt).toBeGreaterThan(without);
    const thought = await message({ max_tokens: 1 }, turns([{ type: 'thinking', thinking: REASONED, signature: 'x' }]));
    expect(inputOf(thought.usage)).toBe(withIt);
    const redacted = await message({ max_tokens: 1 }, turns([{ type: 'redacted_thinking', data: 'opaque' }]));
    expect(inputOf(redacted.usage)).toBe(without);
    const counted = await anthropic.messages.countTokens({
      model,
      messages: turns([{ type: 'thinking', thinking: REASONED, signature: 'x' }]),
    } as Anthropic.MessageCountTokensParams);
    expect(counted.input_tokens).toBe(withIt);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// OpenAI Responses
// ---------------------------------------------------------------------------------------------------------------

type Item = Json & { type: string; id: string; status?: string };

function respond(extra: Json = {}, input: unknown = NATURAL) {
  return openai.responses.create({
    model,
    input,
    max_output_tokens: MAX,
    temperature: 0,
    ...extra,
  } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
}

/** Output items without their ids (each response has its own), which are checked apart. */
const withoutIds = (items: unknown[]) => items.map((i) => ({ ...(i as Item), id: undefined }));

describe('OpenAI Responses', () => {
  it('a reasoning item of the host reasoning, then the message of its answer; usage counts reasoning tokens', async () => {
    const r = await respond();
    expect(r.status).toBe('incomplete');
    const output = r.output as unknown as Item[];
    expect(output).toHaveLength(2);
    expect(output[0]).toEqual({
      type: 'reasoning',
      id: expect.stringMatching(/^rs_/),
      summary: [],
      content: [{ type: 'reasoning_text', text: ON.reasoning }],
      encrypted_content: null,
      // The answer followed it: the reasoning is complete though the reply was cut.
      status: 'completed',
    });
    expect(output[1]).toMatchObject({
      type: 'message',
      id: expect.stringMatching(/^msg_/),
      status: 'incomplete',
      content: [{ type: 'output_text', text: ON.text }],
    });
    expect(r.output_text).toBe(ON.text);
    expect(r.usage?.output_tokens_details.reasoning_tokens).toBe(ON.reasoningTokens);
    expect(r.usage?.input_tokens).toBe(ON.promptTokens);
  });

  it('streams the reasoning item (reasoning_text deltas) before the message; the final output is the non-streamed one', async () => {
    const whole = await respond();
    const stream = await openai.responses.create({
      model,
      input: NATURAL,
      max_output_tokens: MAX,
      temperature: 0,
      stream: true,
    });
    const events: Array<Json & { type: string }> = [];
    for await (const e of stream) events.push(e as unknown as Json & { type: string });
    const brief = events.map((e) => `${e.type.replace(/^response\./, '')}${e.output_index ?? ''}`);
    expect(brief.join(' ')).toMatch(
      new RegExp(
        '^created in_progress output_item.added0 content_part.added0 (reasoning_text.delta0 )+' +
          'reasoning_text.done0 content_part.done0 output_item.done0 ' +
          'output_item.added1 content_part.added1 (output_text.delta1 )+output_text.done1 content_part.done1 ' +
          'output_item.done1 incomplete$',
      ),
    );
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const pieces = events.flatMap((e): Piece[] => {
      if (e.type === 'response.reasoning_text.delta') return [{ reasoning: e.delta as string }];
      if (e.type === 'response.output_text.delta') return [{ text: e.delta as string }];
      return [];
    });
    expectPieces(pieces);
    expect(events.find((e) => e.type === 'response.reasoning_text.done')).toMatchObject({ text: ON.reasoning });
    expect(events[2]).toMatchObject({ item: { type: 'reasoning', status: 'in_progress' } });
    const end = events[events.length - 1] as unknown as { response: { output: Item[]; usage: Json } };
    expect(withoutIds(end.response.output)).toEqual(withoutIds(whole.output));
    expect(end.response.output[0]?.id).toMatch(/^rs_/);
    expect(end.response.usage).toMatchObject({ output_tokens_details: { reasoning_tokens: ON.reasoningTokens } });
  });

  it('reasoning effort "none": no reasoning item, the longer prompt, the host reply; other efforts leave it on', async () => {
    const off = await respond({ reasoning: { effort: 'none' } });
    expect((off.output as unknown as Item[]).map((i) => i.type)).toEqual(['message']);
    expect(off.output_text).toBe(OFF.text);
    expect(off.usage?.input_tokens).toBe(OFF.promptTokens);
    expect(off.usage?.output_tokens_details.reasoning_tokens).toBe(0);
    const stream = await openai.responses.create({
      model,
      input: NATURAL,
      max_output_tokens: MAX,
      temperature: 0,
      reasoning: { effort: 'none' },
      stream: true,
    } as OpenAI.Responses.ResponseCreateParamsStreaming);
    for await (const e of stream) expect(e.type).not.toMatch(/reasoning/);
    const low = await respond({ reasoning: { effort: 'low', summary: 'auto' } });
    expect((low.output as unknown as Item[]).map((i) => i.type)).toEqual(['reasoning', 'message']);
    expect(low.usage?.input_tokens).toBe(ON.promptTokens);
    // The default model: an effort is nothing to refuse (the Responses API has no way to ask it to think).
    const plain = await openai.responses.create({
      model: 'default',
      input: NATURAL,
      max_output_tokens: 2,
      reasoning: { effort: 'high' },
    });
    expect(plain.output.map((i) => i.type)).toEqual(['message']);
  });

  it('a reasoning input item reaches the template with the assistant message after it', async () => {
    const withIt = promptOf(hostTurns(REASONED));
    const without = promptOf(hostTurns());
    expect(withIt).toBeGreaterThan(without);
    const input = (reasoning: Json[]) => [
      { role: 'user', content: 'Hi' },
      ...reasoning,
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello.' }] },
      { role: 'user', content: NATURAL },
    ];
    const cases: Array<[Json[], number]> = [
      [[], without],
      [[{ type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: REASONED }] }], withIt],
      // A summary stands in where the item has no content.
      [[{ type: 'reasoning', id: 'rs_2', summary: [{ type: 'summary_text', text: REASONED }] }], withIt],
    ];
    for (const [items, expected] of cases) {
      const r = await respond({ max_output_tokens: 1 }, input(items));
      expect(r.usage?.input_tokens, JSON.stringify(items)).toBe(expected);
    }
  });
});
