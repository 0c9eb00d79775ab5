/**
 * The `drop-oldest` context overflow policy through the HTTP APIs, on a real server with a generated model of
 * a 256-token context: Ollama's `/api/chat` always leaves out the oldest turns (keeping system messages), as
 * Ollama does; OpenAI's chat completions and Responses refuse by default (400 context_length_exceeded) and
 * leave them out with `truncation: "auto"`, saying how many in `kvdesk.context_drop`; the reply is the one the
 * kept turns get on their own; any other `truncation` is a 400 naming it.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LONG_CONVERSATION, SMALL_CONTEXT, smallContextModel } from '../../helpers/models';
import { failure } from '../../helpers/rejection';
import { openaiClient, settled, startTestServer, type TestServer } from './server-helpers';

type Json = Record<string, unknown>;
type Message = { role: 'system' | 'user' | 'assistant'; content: string };

const CONTEXT = SMALL_CONTEXT;
const MAX_TOKENS = 16;
let t: TestServer;
let client: OpenAI;
let model: string;

beforeAll(async () => {
  t = await startTestServer({ intraOpNumThreads: 2 }, { loadDefault: false });
  client = openaiClient(t.url);
  const r = await t.hostApi.call('loadModel', { path: smallContextModel() });
  if (!r.ok) throw new Error(r.error.message);
  expect(r.value.spec.contextLength).toBe(CONTEXT);
  model = r.value.id;
}, 120_000);
afterAll(async () => {
  await t?.close();
});

const SYSTEM: Message = { role: 'system', content: 'You answer in one short sentence.' };
const LONG: Message[] = LONG_CONVERSATION as Message[];
const ASK: Message = { role: 'user', content: 'And which of them is the longest?' };
/** The system message, then the turns: what is left out are the first of TURNS. */
const TURNS: Message[] = [...LONG, ASK];
const MESSAGES: Message[] = [SYSTEM, ...TURNS];
/** The conversation with its first `dropped` non-system messages left out. */
const kept = (dropped: number): Message[] => [SYSTEM, ...TURNS.slice(dropped)];

const apiError = (p: Promise<unknown>) => failure<InstanceType<typeof OpenAI.APIError>>(p, OpenAI.APIError);

async function post(p: string, body: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${t.url}${p}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

/** A greedy chat completion, `extra` (kvdesk's `truncation`) added to the body. */
async function chat(messages: Message[], extra: Json = {}) {
  return client.chat.completions.create({
    model,
    messages,
    max_tokens: MAX_TOKENS,
    temperature: 0,
    logprobs: true,
    ...extra,
  } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
}

const contextDrop = (body: unknown) =>
  (body as { kvdesk?: { context_drop?: { dropped_messages: number; n_ctx: number } } }).kvdesk?.context_drop;

/** The prompt tokens of a conversation, as the host renders it. */
const promptTokens = (messages: Message[]) => t.runner.countPromptTokens({ model, messages });

describe('a conversation longer than the context, through the HTTP APIs', () => {
  it('chat completions: 400 context_length_exceeded by default and with truncation "disabled"', async () => {
    expect(promptTokens(MESSAGES)).toBeGreaterThan(CONTEXT);
    for (const extra of [{}, { truncation: 'disabled' }]) {
      const err = await apiError(chat(MESSAGES, extra));
      expect(err.status).toBe(400);
      expect(err.code).toBe('context_length_exceeded');
      expect(err.param).toBe('messages');
    }
  });

  it("the refusal's message is in each API's own words, which clients match: the numbers once, and what to do there", async () => {
    const tokens = promptTokens(MESSAGES);
    // OpenAI's, as LiteLLM's ContextWindowExceededError reads it ("maximum context length"), in each endpoint; a
    // conversation's turns may be left out ("truncation": "auto").
    const openAi = (what: string, count: number) =>
      `This model's maximum context length is ${CONTEXT} tokens. However, your ${what} resulted in ${count} tokens, which leaves no room for a reply.`;
    const leaveOut = (what: string) =>
      `${openAi(what, tokens)} Shorten the ${what}, or leave out the oldest turns ("truncation": "auto" has kvdesk do that).`;
    const chatError = await post('/v1/chat/completions', { model, messages: MESSAGES, max_tokens: MAX_TOKENS });
    expect(chatError.status).toBe(400);
    expect((chatError.body.error as Json).message).toBe(leaveOut('messages'));
    const input = TURNS.map((m) => ({ role: m.role, content: m.content }));
    const responsesError = await post('/v1/responses', { model, instructions: SYSTEM.content, input });
    expect(responsesError.status).toBe(400);
    expect((responsesError.body.error as Json).message).toBe(leaveOut('input'));
    // A completion's prompt has no turns, nor a chat to start anew.
    const prompt = 'word '.repeat(CONTEXT);
    const promptLength = t.runner.countPromptTokens({ model, prompt });
    const completionError = await post('/v1/completions', { model, prompt, max_tokens: MAX_TOKENS });
    expect(completionError.status).toBe(400);
    expect((completionError.body.error as Json).message).toBe(
      `${openAi('prompt', promptLength)} Shorten the prompt, or use a model with a longer context.`,
    );
    // Ollama's: one /api/generate call has no chat to start anew; /api/chat has left out the oldest turns already.
    const last: Message = { role: 'user', content: prompt };
    const generateError = await post('/api/generate', { model, prompt, stream: false });
    expect(generateError.status).toBe(400);
    expect(generateError.body).toEqual({
      // (in the chat template, as /api/generate writes a prompt without raw)
      error: `The prompt has ${promptTokens([last])} tokens, which leaves no room for a reply in the model's context of ${CONTEXT} tokens. Shorten the prompt, or use a model with a longer context.`,
    });
    const ollamaChatError = await post('/api/chat', { model, messages: [SYSTEM, ...LONG, last], stream: false });
    expect(ollamaChatError.status).toBe(400);
    expect(ollamaChatError.body).toEqual({
      error: `The prompt has ${promptTokens([SYSTEM, last])} tokens with only the system messages and the last turn kept, which leaves no room for a reply in the model's context of ${CONTEXT} tokens. Shorten them, or use a model with a longer context.`,
    });
    // Anthropic's, which Claude Code compacts on and LiteLLM reads: the longest prompt leaves a token for the reply.
    for (const stream of [false, true]) {
      const anthropic = await post('/v1/messages', {
        model,
        system: SYSTEM.content,
        messages: TURNS,
        max_tokens: MAX_TOKENS,
        stream,
      });
      expect(anthropic.status).toBe(400);
      expect(anthropic.body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
      const message = (anthropic.body.error as Json).message as string;
      expect(message).toBe(
        `prompt is too long: ${tokens} tokens > ${CONTEXT - 1} maximum. Shorten the messages, or leave out the oldest turns.`,
      );
      expect(Number(/prompt is too long[^0-9]*(\d+)\s*tokens?/.exec(message)?.[1])).toBe(tokens);
      expect(message).not.toContain('maximum context length');
    }
    expect((await settled(t.url)).reservedBytes).toBe(0);
  });

  it('with truncation "auto", a last turn the context cannot take is refused saying what would help, not to turn truncation on', async () => {
    // Its earlier turns are left out; the system message and the last turn alone are still too long.
    const last: Message = { role: 'user', content: 'word '.repeat(CONTEXT) };
    const alone = promptTokens([SYSTEM, last]);
    expect(alone).toBeGreaterThanOrEqual(CONTEXT);
    const said = (what: string, kept: string) =>
      `This model's maximum context length is ${CONTEXT} tokens. However, your ${what} resulted in ${alone} tokens with only ${kept} kept, which leaves no room for a reply ("truncation": "auto" leaves out the earlier turns, never these). Shorten them, or use a model with a longer context.`;
    const chatError = await post('/v1/chat/completions', {
      model,
      messages: [SYSTEM, ...LONG, last],
      max_tokens: MAX_TOKENS,
      truncation: 'auto',
    });
    expect(chatError.status).toBe(400);
    expect(chatError.body.error).toMatchObject({
      code: 'context_length_exceeded',
      param: 'messages',
      n_prompt_tokens: alone,
      message: said('messages', 'the system messages and the last turn'),
    });
    const input = [...LONG, last].map((m) => ({ role: m.role, content: m.content }));
    const responsesError = await post('/v1/responses', {
      model,
      instructions: SYSTEM.content,
      input,
      truncation: 'auto',
    });
    expect(responsesError.status).toBe(400);
    expect(responsesError.body.error).toMatchObject({
      code: 'context_length_exceeded',
      n_prompt_tokens: alone,
      message: said('input', 'the instructions, system messages and the last turn'),
    });
    // Tools are kept too (they are in the prompt whatever turns are left out): the words name them.
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }];
    const withTools = await post('/v1/chat/completions', {
      model,
      messages: [SYSTEM, ...LONG, last],
      max_tokens: MAX_TOKENS,
      truncation: 'auto',
      tools,
    });
    expect(withTools.status).toBe(400);
    const message = (withTools.body.error as Json).message as string;
    expect(message).toContain('with only the system messages, the tools and the last turn kept');
    expect(message).not.toContain('"truncation": "auto" has kvdesk do that');
    // No system message sent: none is named.
    const bare = await post('/v1/chat/completions', {
      model,
      messages: [...LONG, last],
      max_tokens: MAX_TOKENS,
      truncation: 'auto',
    });
    expect(bare.status).toBe(400);
    expect((bare.body.error as Json).message).toContain(
      'with only the last turn kept, which leaves no room for a reply ("truncation": "auto" leaves out the earlier turns, never the last). Shorten it,',
    );
    expect((await settled(t.url)).reservedBytes).toBe(0);
  });

  it('a conversation of hundreds of KB is refused from its newest turns, not rendered whole: at least that many tokens', async () => {
    // 600 exchanges of ~700 characters (~440 KB). It used to be rendered and tokenized whole first (tens of seconds
    // for a chat of MBs, every other request waiting, or the template's time limit, which blamed the package).
    const para = (i: number) => `Exchange ${i}: ${'the river runs past the old mill. '.repeat(20)}`;
    const big: Message[] = Array.from({ length: 600 }, (_, i) => [
      { role: 'user' as const, content: para(i) },
      { role: 'assistant' as const, content: `Answer ${i}. ${para(i)}` },
    ]).flat();
    big.push(ASK);
    const tok = t.runner.tokenizerOf(model);
    const encode = tok.encode;
    let encoded = 0;
    tok.encode = (text, opts) => {
      encoded += text.length;
      return encode.call(tok, text, opts);
    };
    let chatError: { status: number; body: Json };
    let anthropic: { status: number; body: Json };
    try {
      chatError = await post('/v1/chat/completions', { model, messages: [SYSTEM, ...big], max_tokens: MAX_TOKENS });
      anthropic = await post('/v1/messages', { model, system: SYSTEM.content, messages: big, max_tokens: MAX_TOKENS });
    } finally {
      tok.encode = encode;
    }
    const chars = big.reduce((n, m) => n + m.content.length, 0);
    expect(encoded).toBeLessThan(chars / 20);
    expect(chatError.status).toBe(400);
    const e = chatError.body.error as Json;
    expect(e).toMatchObject({ code: 'context_length_exceeded', n_ctx: CONTEXT, counted_up_to: CONTEXT - 1 });
    const counted = e.n_prompt_tokens as number;
    expect(counted).toBeGreaterThanOrEqual(CONTEXT);
    expect(e.message).toBe(
      `This model's maximum context length is ${CONTEXT} tokens. However, your messages resulted in at least ${counted} tokens, which leaves no room for a reply. Shorten the messages, or leave out the oldest turns ("truncation": "auto" has kvdesk do that).`,
    );
    // Anthropic's: still the words clients match, with the number they read.
    expect(anthropic.status).toBe(400);
    const message = (anthropic.body.error as Json).message as string;
    expect(message).toMatch(/^prompt is too long: at least \d+ tokens > 255 maximum\./);
    expect(Number(/prompt is too long[^0-9]*(\d+)\s*tokens?/.exec(message)?.[1])).toBeGreaterThanOrEqual(CONTEXT);
    expect((await settled(t.url)).reservedBytes).toBe(0);
  });

  it('Anthropic: a reply the context window cut (max_tokens clipped to the room left) stops with model_context_window_exceeded', async () => {
    const messages = [{ role: 'user', content: 'Tell me a long story' }];
    const room = CONTEXT - t.runner.countPromptTokens({ model, messages: messages as Message[] });
    const ask = (maxTokens: number, stream = false) =>
      fetch(`${t.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages, max_tokens: maxTokens, temperature: 0, stream }),
      });
    const cut = (await (await ask(10 * CONTEXT)).json()) as Json;
    // The reply ran to the room the context left: the window cut it, not max_tokens.
    expect(cut.kvdesk).toMatchObject({
      context_clip: { requested_max_tokens: 10 * CONTEXT, clipped_max_tokens: room },
    });
    expect((cut.usage as Json).output_tokens).toBe(room);
    expect(cut.stop_reason).toBe('model_context_window_exceeded');
    const streamed = await (await ask(10 * CONTEXT, true)).text();
    const delta = streamed
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)) as Json)
      .find((e) => e.type === 'message_delta');
    expect(delta?.delta).toMatchObject({ stop_reason: 'model_context_window_exceeded' });
    // max_tokens the context leaves room for: the reply cut at it stops with max_tokens, as before.
    const short = (await (await ask(8)).json()) as Json;
    expect((short.kvdesk as Json).context_clip).toBeUndefined();
    expect(short.stop_reason).toBe('max_tokens');
  });

  it('chat completions with truncation "auto": the oldest whole turns left out, the reply the kept turns get alone', async () => {
    const r = await chat(MESSAGES, { truncation: 'auto' });
    const drop = contextDrop(r);
    expect(drop).toEqual({ dropped_messages: expect.any(Number), n_ctx: CONTEXT });
    const dropped = drop?.dropped_messages ?? 0;
    expect(dropped).toBeGreaterThan(0);
    // Whole turns (a user message and its reply): the kept conversation opens with a user message.
    expect(dropped % 2).toBe(0);
    // The fewest that leave the reply its room and fill at most half of it (so the conversation's next turns
    // keep this start and continue its cached KV): one turn fewer would fill more.
    const half = (CONTEXT - MAX_TOKENS) / 2;
    expect(promptTokens(kept(dropped))).toBeLessThanOrEqual(half);
    expect(promptTokens(kept(dropped - 2))).toBeGreaterThan(half);
    expect(r.usage?.prompt_tokens).toBe(promptTokens(kept(dropped)));
    // The system message stays, the prompt is the kept turns: the same reply as they get with no truncation.
    const alone = await chat(kept(dropped));
    expect(contextDrop(alone)).toBeUndefined();
    expect(alone.usage?.prompt_tokens).toBe(r.usage?.prompt_tokens);
    expect(r.choices[0]?.message.content).toBeTruthy();
    expect(r.choices[0]?.message.content).toBe(alone.choices[0]?.message.content);
    // Each token's probability too (a reply of a few tokens could agree by chance; these would not).
    const got = r.choices[0]?.logprobs?.content ?? [];
    const want = alone.choices[0]?.logprobs?.content ?? [];
    expect(got.length).toBeGreaterThan(0);
    expect(got.map((l) => l.token)).toEqual(want.map((l) => l.token));
    for (const [i, l] of got.entries()) expect(l.logprob).toBeCloseTo(want[i]?.logprob ?? Number.NaN, 4);
  });

  it('chat completions with truncation "auto", streamed: a reply instead of an error, the drop in its last chunk', async () => {
    const stream = await client.chat.completions.create({
      model,
      messages: MESSAGES,
      max_tokens: MAX_TOKENS,
      temperature: 0,
      stream: true,
      truncation: 'auto',
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    let text = '';
    let drop: ReturnType<typeof contextDrop>;
    let finish: string | null | undefined;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
      drop = contextDrop(c) ?? drop;
    }
    expect(finish).toBeTruthy();
    expect(drop?.dropped_messages).toBeGreaterThan(0);
    expect(drop?.n_ctx).toBe(CONTEXT);
    expect(text).toBe((await chat(MESSAGES, { truncation: 'auto' })).choices[0]?.message.content);
  });

  it('a conversation that fits is not touched by truncation "auto"', async () => {
    const short = kept(TURNS.length - 3);
    const r = await chat(short, { truncation: 'auto' });
    expect(contextDrop(r)).toBeUndefined();
    expect(r.choices[0]?.message.content).toBe((await chat(short)).choices[0]?.message.content);
  });

  it('Ollama /api/chat leaves out the oldest turns, as Ollama does: the prompt and reply of the kept turns', async () => {
    const r = await post('/api/chat', {
      model,
      messages: MESSAGES,
      stream: false,
      options: { num_predict: MAX_TOKENS, temperature: 0 },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.done).toBe(true);
    // The same drop as chat completions' truncation "auto" (the same reply room): its prompt, its reply.
    const auto = await chat(MESSAGES, { truncation: 'auto' });
    const dropped = contextDrop(auto)?.dropped_messages ?? 0;
    expect(dropped).toBeGreaterThan(0);
    expect(r.body.prompt_eval_count).toBe(auto.usage?.prompt_tokens);
    expect(r.body.prompt_eval_count).toBe(promptTokens(kept(dropped)));
    expect(r.body.prompt_eval_count).toBeLessThan(promptTokens(MESSAGES));
    const message = r.body.message as { role: string; content: string };
    expect(message.role).toBe('assistant');
    expect(message.content).toBeTruthy();
    expect(message.content).toBe(auto.choices[0]?.message.content);
    // Streamed too: the lines add up to the same reply, the last one done.
    const res = await fetch(`${t.url}/api/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: MESSAGES, options: { num_predict: MAX_TOKENS, temperature: 0 } }),
    });
    expect(res.status).toBe(200);
    const lines = (await res.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Json);
    expect(lines.at(-1)).toMatchObject({ done: true, prompt_eval_count: r.body.prompt_eval_count });
    expect(lines.map((l) => (l.message as { content?: string } | undefined)?.content ?? '').join('')).toBe(
      message.content,
    );
  });

  it('Responses: truncation "auto" answers, echoes it and says what was left out; "disabled" or none is a 400', async () => {
    const input = TURNS.map((m) => ({ role: m.role, content: m.content }));
    const base = { model, instructions: SYSTEM.content, input, max_output_tokens: MAX_TOKENS, temperature: 0 };
    const r = await client.responses.create({ ...base, truncation: 'auto' });
    expect(r.truncation).toBe('auto');
    const drop = contextDrop(r);
    expect(drop?.n_ctx).toBe(CONTEXT);
    // As chat completions with the instructions as its system message: the same drop, prompt and reply.
    const auto = await chat(MESSAGES, { truncation: 'auto' });
    expect(drop?.dropped_messages).toBe(contextDrop(auto)?.dropped_messages);
    expect(r.usage?.input_tokens).toBe(auto.usage?.prompt_tokens);
    expect(r.output_text).toBe(auto.choices[0]?.message.content);
    for (const extra of [{}, { truncation: 'disabled' as const }]) {
      const err = await apiError(client.responses.create({ ...base, ...extra }));
      expect(err.status).toBe(400);
      expect(err.code).toBe('context_length_exceeded');
      expect(err.param).toBe('input');
    }
    // A conversation that fits: nothing left out, "auto" still echoed (and "disabled" when not asked).
    const short = await client.responses.create({ ...base, input: input.slice(-3), truncation: 'auto' });
    expect(short.truncation).toBe('auto');
    expect(contextDrop(short)).toBeUndefined();
    const plain = await client.responses.create({ ...base, input: input.slice(-3) });
    expect(plain.truncation).toBe('disabled');
    expect(plain.output_text).toBe(short.output_text);
  });

  it('Responses streamed with truncation "auto": completes, echoing it, with the drop', async () => {
    const input = TURNS.map((m) => ({ role: m.role, content: m.content }));
    const stream = await client.responses.create({
      model,
      instructions: SYSTEM.content,
      input,
      max_output_tokens: MAX_TOKENS,
      temperature: 0,
      truncation: 'auto',
      stream: true,
    });
    const types: string[] = [];
    let last: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.created') expect(e.response.truncation).toBe('auto');
      if (e.type === 'response.completed' || e.type === 'response.incomplete') last = e.response;
    }
    expect(types).not.toContain('response.failed');
    expect(last?.truncation).toBe('auto');
    expect(contextDrop(last)?.dropped_messages).toBeGreaterThan(0);
  });

  it('any other truncation is a 400 naming it, on chat completions and Responses; nothing is left reserved', async () => {
    for (const value of ['sometimes', true, 1]) {
      const c = await apiError(chat(MESSAGES.slice(-1), { truncation: value }));
      expect(c.status).toBe(400);
      expect(c.param).toBe('truncation');
      const r = await apiError(
        client.responses.create({
          model,
          input: 'hi',
          truncation: value,
        } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming),
      );
      expect(r.status).toBe(400);
      expect(r.param).toBe('truncation');
    }
    expect((await settled(t.url)).reservedBytes).toBe(0);
  });
});
