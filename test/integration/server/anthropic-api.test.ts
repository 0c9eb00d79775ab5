/**
 * Anthropic's Messages API through the official `@anthropic-ai/sdk` client against a real server with the
 * default model: text with the same tokens chat completions gives, the event stream, tool use (forced, so the
 * random model makes a call) and its result sent back, structured output, token counting that matches what a
 * request uses, the server's token as x-api-key, and refusals in Anthropic's error shape.
 */
import Anthropic from '@anthropic-ai/sdk';
import { type LosslessNumber, parse as losslessParse } from 'lossless-json';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failure } from '../../helpers/rejection';
import { chatPromptOfToolTurn, openaiClient, settled, startTestServer, type TestServer } from './server-helpers';

let t: TestServer;
let client: Anthropic;
beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: 4 * 1024 * 1024 });
  client = new Anthropic({ baseURL: t.url, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await t?.close();
});

const lamp = {
  name: 'set_lamp',
  description: 'Turn the lamp on or off',
  input_schema: { type: 'object' as const, properties: { on: { type: 'boolean' } }, required: ['on'] },
};

const apiError = (p: Promise<unknown>) => failure<InstanceType<typeof Anthropic.APIError>>(p, Anthropic.APIError);

describe('POST /v1/messages', () => {
  it('answers text with the same tokens chat completions gives; usage and stop reason', async () => {
    const m = await client.messages.create({
      model: 'default',
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'Hello there' }],
      max_tokens: 12,
      temperature: 0,
    } as Anthropic.MessageCreateParamsNonStreaming);
    const chat = await openaiClient(t.url).chat.completions.create({
      model: 'default',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello there' },
      ],
      max_tokens: 12,
      temperature: 0,
    });
    expect(m).toMatchObject({ type: 'message', role: 'assistant', model: 'default', stop_reason: 'max_tokens' });
    expect(m.id).toMatch(/^msg_/);
    expect(m.content).toEqual([{ type: 'text', text: chat.choices[0]?.message.content, citations: null }]);
    expect(m.usage.output_tokens).toBe(12);
    // The second identical request reads the first's KV from the prompt cache.
    expect((m.usage.input_tokens ?? 0) + (m.usage.cache_read_input_tokens ?? 0)).toBe(chat.usage?.prompt_tokens);
  });

  it('a final assistant message is a prefill the reply continues, as chat completions with continue_final_message', async () => {
    const messages = [
      { role: 'user' as const, content: 'Hello there' },
      { role: 'assistant' as const, content: 'Well, the sea' },
    ];
    const m = await client.messages.create({
      model: 'default',
      messages,
      max_tokens: 8,
      temperature: 0,
    } as Anthropic.MessageCreateParamsNonStreaming);
    const chat = await openaiClient(t.url).chat.completions.create({
      model: 'default',
      messages,
      max_tokens: 8,
      temperature: 0,
      continue_final_message: true,
    } as never);
    const asTurn = await openaiClient(t.url).chat.completions.create({
      model: 'default',
      messages,
      max_tokens: 8,
      temperature: 0,
    });
    // The same continuation from both; the prefill is not repeated in the reply.
    expect(m.content).toEqual([{ type: 'text', text: chat.choices[0]?.message.content, citations: null }]);
    const prompt = (m.usage.input_tokens ?? 0) + (m.usage.cache_read_input_tokens ?? 0);
    expect(prompt).toBe(chat.usage?.prompt_tokens);
    // Sent as a finished turn, the prompt has its end and a new reply's opening too.
    expect(asTurn.usage?.prompt_tokens).toBeGreaterThan(prompt);
  });

  it('names the stop sequence that ended the reply, streamed or not', async () => {
    const ask = {
      model: 'default',
      messages: [{ role: 'user', content: 'Hello there' }],
      max_tokens: 16,
      temperature: 0,
    };
    const whole = await client.messages.create(ask as Anthropic.MessageCreateParamsNonStreaming);
    const text = (whole.content[0] as { text: string }).text;
    // A piece of the greedy reply's middle ends it there; a sequence that never occurs does nothing.
    const stop = text.slice(6, 9);
    expect(stop.length).toBe(3);
    const stopSequences = ['\u0000never', stop];
    const cut = await client.messages.create({
      ...ask,
      stop_sequences: stopSequences,
    } as Anthropic.MessageCreateParamsNonStreaming);
    expect(cut.stop_reason).toBe('stop_sequence');
    expect(cut.stop_sequence).toBe(stop);
    expect(cut.content).toEqual([{ type: 'text', text: text.slice(0, text.indexOf(stop)), citations: null }]);
    expect(whole.stop_sequence).toBeNull();
    const stream = await client.messages.create({
      ...ask,
      stop_sequences: stopSequences,
      stream: true,
    } as Anthropic.MessageCreateParamsStreaming);
    let streamed: string | null | undefined;
    for await (const e of stream) if (e.type === 'message_delta') streamed = e.delta.stop_sequence;
    expect(streamed).toBe(stop);
  });

  it('streams message_start, the text block, message_delta and message_stop; deltas add up to the text', async () => {
    const stream = await client.messages.create({
      model: 'default',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me something' }] }],
      max_tokens: 16,
      temperature: 0,
      stream: true,
    } as Anthropic.MessageCreateParamsStreaming);
    const types: string[] = [];
    let text = '';
    let stop: string | null = null;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
      if (e.type === 'message_delta') stop = e.delta.stop_reason;
    }
    expect(types[0]).toBe('message_start');
    expect(types[1]).toBe('content_block_start');
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(new Set(types.slice(2, -3))).toEqual(new Set(['content_block_delta']));
    expect(text.length).toBeGreaterThan(0);
    expect(stop).toBe('max_tokens');
  });

  it('tool_choice any: a tool_use block with input for the tool; its tool_result goes back next turn', async () => {
    const m = await client.messages.create({
      model: 'default',
      messages: [{ role: 'user', content: 'Lamp on please' }],
      tools: [lamp],
      tool_choice: { type: 'any' },
      max_tokens: 60,
    });
    expect(m.stop_reason).toBe('tool_use');
    expect(m.content).toHaveLength(1);
    const use = m.content[0] as Anthropic.ToolUseBlock;
    expect(use).toMatchObject({ type: 'tool_use', name: 'set_lamp' });
    // Anthropic's form of id (as its own API makes them), not OpenAI's call_….
    expect(use.id).toMatch(/^toolu_01[A-Za-z0-9]{22}$/);
    expect(typeof (use.input as { on: unknown }).on).toBe('boolean');

    const next = await client.messages.create({
      model: 'default',
      messages: [
        { role: 'user', content: 'Lamp on please' },
        { role: 'assistant', content: m.content as Anthropic.ContentBlockParam[] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'done' }] },
      ],
      tools: [lamp],
      max_tokens: 4,
    });
    expect(next.role).toBe('assistant');
    // The same conversation through chat completions (the call and its result in OpenAI's form) is the same prompt.
    const chat = await chatPromptOfToolTurn(t.url, {
      user: 'Lamp on please',
      call: { id: use.id, name: use.name, arguments: JSON.stringify(use.input) },
      result: 'done',
      tool: { name: lamp.name, description: lamp.description, parameters: lamp.input_schema },
    });
    expect((next.usage.input_tokens ?? 0) + (next.usage.cache_read_input_tokens ?? 0)).toBe(chat);

    // A call made elsewhere (OpenAI's call_… id, pasted into the conversation) and its result: taken as they are.
    const pasted = 'call_9f2c1e07b4a5d6c3e8f1a2b0';
    const other = await client.messages.create({
      model: 'default',
      messages: [
        { role: 'user', content: 'Lamp on please' },
        { role: 'assistant', content: [{ type: 'tool_use', id: pasted, name: 'set_lamp', input: use.input }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: pasted, content: 'done' }] },
      ],
      tools: [lamp],
      max_tokens: 4,
    });
    expect(other.role).toBe('assistant');
    expect(other.content.length).toBeGreaterThan(0);
    const otherChat = await chatPromptOfToolTurn(t.url, {
      user: 'Lamp on please',
      call: { id: pasted, name: use.name, arguments: JSON.stringify(use.input) },
      result: 'done',
      tool: { name: lamp.name, description: lamp.description, parameters: lamp.input_schema },
    });
    expect((other.usage.input_tokens ?? 0) + (other.usage.cache_read_input_tokens ?? 0)).toBe(otherChat);
  });

  it('streams a named tool call as a tool_use block whose input arrives as it is written, then tool_use', async () => {
    const request = {
      model: 'default',
      messages: [{ role: 'user' as const, content: 'Lamp?' }],
      tools: [lamp],
      tool_choice: { type: 'tool' as const, name: 'set_lamp' },
      max_tokens: 60,
      temperature: 1,
      top_k: 0,
    };
    const stream = client.messages.stream(request);
    const types: string[] = [];
    let json = '';
    let stop: string | null = null;
    let id = '';
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'content_block_start') {
        expect(e.content_block).toMatchObject({ type: 'tool_use', name: 'set_lamp', input: {} });
        id = (e.content_block as { id: string }).id;
      }
      if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') json += e.delta.partial_json;
      if (e.type === 'message_delta') stop = e.delta.stop_reason;
    }
    // One block: started, its input in several pieces, stopped.
    expect(types[0]).toBe('message_start');
    expect(types[1]).toBe('content_block_start');
    const pieces = types.slice(2, -3);
    expect(pieces.length).toBeGreaterThan(2);
    expect(new Set(pieces)).toEqual(new Set(['content_block_delta']));
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect([{ on: true }, { on: false }]).toContainEqual(JSON.parse(json));
    expect(stop).toBe('tool_use');
    // The SDK assembles the same input from the pieces.
    const final = await stream.finalMessage();
    expect(final.content).toEqual([
      expect.objectContaining({ type: 'tool_use', name: 'set_lamp', input: JSON.parse(json) }),
    ]);
    expect(id).toMatch(/^toolu_01[A-Za-z0-9]{22}$/);
    expect((final.content[0] as Anthropic.ToolUseBlock).id).toBe(id);
  });

  it("a tool_use input has the model's own numbers, streamed or not (none rounded or rewritten)", async () => {
    // The greedy reply writes a number JSON.parse changes (293E+86 comes back as 2.93e+88 once parsed and written).
    const request = {
      model: 'default',
      messages: [{ role: 'user', content: 'n?' }],
      tools: [
        { name: 'count', input_schema: { type: 'object', properties: { n: { type: 'number' } }, required: ['n'] } },
      ],
      tool_choice: { type: 'tool', name: 'count' },
      max_tokens: 60,
      temperature: 0,
    };
    const post = (body: object) =>
      fetch(`${t.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }).then((r) => r.text());
    const whole = losslessParse(await post(request)) as { content: Array<{ type: string; input?: unknown }> };
    let streamed = '';
    for (const line of (await post({ ...request, stream: true })).split('\n')) {
      const e = line.startsWith('data: ') ? JSON.parse(line.slice(6)) : null;
      if (e?.delta?.type === 'input_json_delta') streamed += e.delta.partial_json;
    }
    const input = whole.content.find((b) => b.type === 'tool_use')?.input as { n: LosslessNumber };
    expect(input).toEqual(losslessParse(streamed));
    expect(JSON.stringify(JSON.parse(input.n.value))).not.toBe(input.n.value);
  });

  it('output_config.format json_schema: the reply conforms', async () => {
    const m = await client.messages.create({
      model: 'default',
      messages: [{ role: 'user', content: 'Is it on?' }],
      max_tokens: 40,
      output_config: {
        format: {
          type: 'json_schema',
          schema: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
        },
      },
    } as Anthropic.MessageCreateParamsNonStreaming);
    expect([{ on: true }, { on: false }]).toContainEqual(JSON.parse((m.content[0] as Anthropic.TextBlock).text));
    expect(m.stop_reason).toBe('end_turn');
  });

  it('count_tokens gives the prompt tokens a request with the same fields uses', async () => {
    const params = {
      model: 'default',
      system: 'Be brief.',
      messages: [{ role: 'user' as const, content: 'Count me' }],
      tools: [lamp],
    };
    const counted = await client.messages.countTokens(params);
    // The SDK's stream helper assembles the message from the events; its usage is the final one.
    const first = await client.messages.stream({ ...params, max_tokens: 1 }).finalMessage();
    expect(first.usage.input_tokens + (first.usage.cache_read_input_tokens ?? 0)).toBe(counted.input_tokens);
    // Sent again, the prompt is read from the prompt cache (all of it but the last token), streamed or not.
    const events: Anthropic.MessageStreamEvent[] = [];
    const again = await client.messages
      .stream({ ...params, max_tokens: 1 })
      .on('streamEvent', (e) => events.push(structuredClone(e))) // a copy: the helper updates its message in place
      .finalMessage();
    expect(again.usage.cache_read_input_tokens).toBe(counted.input_tokens - 1);
    expect(again.usage.input_tokens).toBe(1);
    // message_start already has the final input and cache-read counts (clients read them from there).
    const start = events.find((e) => e.type === 'message_start');
    expect(start?.message.usage).toMatchObject({ input_tokens: 1, cache_read_input_tokens: counted.input_tokens - 1 });
    expect(events[0]?.type).toBe('message_start');
    const plain = await client.messages.create({ ...params, max_tokens: 1 });
    expect(plain.usage).toMatchObject({ input_tokens: 1, cache_read_input_tokens: counted.input_tokens - 1 });
    // The tools are in the prompt.
    const bare = await client.messages.countTokens({ ...params, tools: [] });
    expect(counted.input_tokens).toBeGreaterThan(bare.input_tokens + 20);
  });

  it("refuses what it cannot honour with a 400 in Anthropic's shape naming the parameter; nothing stays reserved", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ max_tokens: undefined }, 'max_tokens'],
      // The default model does not think; a budget not under max_tokens is refused before that.
      [{ thinking: { type: 'enabled' } }, 'thinking'],
      [{ thinking: { type: 'enabled', budget_tokens: 1024 } }, 'thinking.budget_tokens'],
      [{ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 'tools[0].type'],
      [{ messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 'messages[0].content[0].type'],
      [{ tools: [lamp], tool_choice: { type: 'tool', name: 'nope' } }, 'tool_choice'],
      // As Anthropic: a forced call leaves no room to think (before the default model's not thinking is said).
      [{ thinking: { type: 'enabled', budget_tokens: 2 }, tools: [lamp], tool_choice: { type: 'any' } }, 'tool_choice'],
      [
        {
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: 'Here is ' },
          ],
        },
        'messages[1].content',
      ],
      [
        {
          tools: [{ ...lamp, input_schema: { type: 'object', properties: { n: { type: 'number', minimum: 1 } } } }],
          tool_choice: { type: 'any' },
        },
        'tools[0].input_schema.properties.n.minimum',
      ],
      [{ output_config: { format: { type: 'json_schema', schema: { type: 'string' } } } }, 'output_config.format'],
      // Empty content, as Anthropic refuses it (a final assistant prefill may be empty).
      [{ messages: [{ role: 'user', content: '' }] }, 'messages[0].content'],
      [
        {
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: [] },
            { role: 'user', content: 'more' },
          ],
        },
        'messages[1].content',
      ],
    ];
    for (const [extra, param] of cases) {
      const err = await apiError(
        client.messages.create({
          model: 'default',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
          ...extra,
        } as Anthropic.MessageCreateParamsNonStreaming),
      );
      expect(err.status, JSON.stringify(extra)).toBe(400);
      const body = err.error as { type: string; error: { type: string; param: string } };
      expect(body.type).toBe('error');
      expect(body.error.type).toBe('invalid_request_error');
      expect(body.error.param, JSON.stringify(extra)).toBe(param);
    }
    // A tool history the host refuses is named where the client wrote it (the system prompt comes first in the
    // host's request), in Anthropic's names.
    const history: Array<[Anthropic.MessageParam[], string, RegExp]> = [
      [
        [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'ok' },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'x' }] },
        ],
        'messages[2].content[0].tool_use_id',
        /^messages\[2\]\.content\[0\] is the result of call id "t1"/,
      ],
      [
        [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Let me.' },
              { type: 'tool_use', id: 't1', name: 'lamp', input: {} },
            ],
          },
          { role: 'user', content: 'well?' },
        ],
        'messages[1].content[1]',
        /^messages\[1\]\.content\[1\] \(id "t1"\) has no tool result before messages\[2\]/,
      ],
    ];
    for (const [messages, param, message] of history) {
      const err = await apiError(
        client.messages.create({ model: 'default', system: 'be brief', messages, max_tokens: 4 }),
      );
      const body = err.error as { error: { param: string; message: string } };
      expect(err.status, param).toBe(400);
      expect(body.error.param, param).toBe(param);
      expect(body.error.message, param).toMatch(message);
      expect(body.error.message, param).not.toMatch(/toolCall|tool_call_id/);
    }
    const missing = await apiError(
      client.messages.create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    );
    expect(missing.status).toBe(404);
    // As the route's other errors (and count_tokens'): `param` names the field, nothing beside it.
    expect(missing.error).toEqual({
      type: 'error',
      error: {
        type: 'not_found_error',
        message: 'model "nope" is neither loaded nor in the library (known: default)',
        code: 'model_not_found',
        param: 'model',
        kvdesk_code: 'MODEL_NOT_LOADED',
      },
    });
    // Errors the server raises before the route (a body that is not JSON) are in Anthropic's shape too.
    const notJson = await fetch(`${t.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":',
    });
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect((await settled(t.url)).reservedBytes).toBe(0);
  });

  it('consecutive user turns are one turn, as Anthropic combines them (templates want roles to alternate)', async () => {
    const split = await client.messages.countTokens({
      model: 'default',
      messages: [
        { role: 'user', content: 'First part.' },
        { role: 'user', content: [{ type: 'text', text: 'Second part.' }] },
      ],
    });
    const joined = await client.messages.countTokens({
      model: 'default',
      messages: [{ role: 'user', content: 'First part.\n\nSecond part.' }],
    });
    expect(split.input_tokens).toBe(joined.input_tokens);
  });
});

describe('text blocks and parts, in every API', () => {
  it('reach the model one per line (as vLLM joins them): counted, run and read from the prompt cache as that text', async () => {
    const text = (t: string) => ({ type: 'text' as const, text: t });
    const system = 'Be brief.\nBe kind.';
    const ask = 'Summarize the file.\nThe file says hi.';
    const parts = {
      model: 'default',
      system: [text('Be brief.'), text('Be kind.')],
      messages: [{ role: 'user' as const, content: [text('Summarize the file.'), text('The file says hi.')] }],
    };
    const joined = { model: 'default', system, messages: [{ role: 'user' as const, content: ask }] };
    const counted = (await client.messages.countTokens(parts)).input_tokens;
    expect(counted).toBe((await client.messages.countTokens(joined)).input_tokens);
    // Glued, the two sentences would be other tokens.
    const glued = {
      ...joined,
      system: 'Be brief.Be kind.',
      messages: [{ role: 'user' as const, content: ask.replace('\n', '') }],
    };
    expect((await client.messages.countTokens(glued)).input_tokens).not.toBe(counted);
    // The blocks' request and the text's are one prompt: the second reads all of the first's KV but its last token.
    const first = await client.messages.create({ ...parts, max_tokens: 1 });
    expect(first.usage.input_tokens + (first.usage.cache_read_input_tokens ?? 0)).toBe(counted);
    const second = await client.messages.create({ ...joined, max_tokens: 1 });
    expect(second.usage.cache_read_input_tokens).toBe(counted - 1);
    // Chat completions' text parts and the Responses API's input_text parts: the same prompt as the text.
    const openai = openaiClient(t.url);
    const chat = (content: string | Array<{ type: 'text'; text: string }>, sys: typeof content) =>
      openai.chat.completions.create({
        model: 'default',
        messages: [
          { role: 'system', content: sys },
          { role: 'user', content },
        ],
        max_tokens: 1,
      } as Parameters<typeof openai.chat.completions.create>[0] & { stream?: false });
    const chatParts = await chat(parts.messages[0]?.content ?? [], parts.system);
    const chatText = await chat(ask, system);
    expect(chatParts.usage?.prompt_tokens).toBe(chatText.usage?.prompt_tokens);
    expect(chatText.usage?.prompt_tokens_details?.cached_tokens).toBe((chatText.usage?.prompt_tokens ?? 0) - 1);
    const input = (content: string | Array<{ type: 'input_text'; text: string }>) =>
      openai.responses.create({
        model: 'default',
        instructions: system,
        input: [{ role: 'user', content }],
        max_output_tokens: 16,
      });
    const responseParts = await input([
      { type: 'input_text', text: 'Summarize the file.' },
      { type: 'input_text', text: 'The file says hi.' },
    ]);
    expect(responseParts.usage?.input_tokens).toBe((await input(ask)).usage?.input_tokens);
  });
});

describe("the request id (Anthropic's request-id header)", () => {
  it("is the host's id of the generation, which the message id carries: the SDK's _request_id, streamed or not", async () => {
    const params = {
      model: 'default',
      messages: [{ role: 'user' as const, content: 'hi' }],
      max_tokens: 2,
      temperature: 0,
    };
    const { data, request_id } = await client.messages.create(params).withResponse();
    expect(request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect((await client.messages.create(params))._request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(data.id).toBe(`msg_${request_id?.replaceAll('-', '')}`);
    const streamed = await client.messages.create({ ...params, stream: true }).withResponse();
    let id: string | undefined;
    for await (const e of streamed.data) if (e.type === 'message_start') id = e.message.id;
    expect(streamed.request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(streamed.request_id).not.toBe(request_id);
    expect(id).toBe(`msg_${streamed.request_id?.replaceAll('-', '')}`);
  });

  it('every other answer has one too: count_tokens, the model list, an error (its requestID)', async () => {
    const counted = await client.messages.countTokens({
      model: 'default',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(counted._request_id).toMatch(/^[0-9a-f-]{36}$/);
    const { request_id } = await client.models.list().withResponse();
    expect(request_id).toMatch(/^[0-9a-f-]{36}$/);
    const err = await apiError(
      client.messages.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    );
    expect(err.status).toBe(404);
    expect(err.requestID).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('GET /v1/models through the Anthropic client', () => {
  it("lists and retrieves models in Anthropic's shape too (type, display_name, created_at, one page)", async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(['default']);
    const m = page.data[0] as (typeof page.data)[number];
    expect(m).toMatchObject({ type: 'model', id: 'default', display_name: 'default' });
    expect(Number.isNaN(Date.parse(m.created_at))).toBe(false);
    expect(m.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(page.has_more).toBe(false);
    expect(page).toMatchObject({ first_id: 'default', last_id: 'default' });
    expect(await client.models.retrieve('default')).toMatchObject({
      type: 'model',
      id: 'default',
      display_name: 'default',
    });
  });
});

describe('the access token as x-api-key', () => {
  let secured: TestServer;
  beforeAll(async () => {
    secured = await startTestServer({}, { token: 'sesame' });
  });
  afterAll(async () => {
    await secured?.close();
  });

  it("Anthropic's clients send it as x-api-key (newer ones as a bearer token): accepted; a wrong key is a 401", async () => {
    // Greedy: a sampled reply could end after one token.
    const body = JSON.stringify({
      model: 'default',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      temperature: 0,
    });
    const post = (key: string) =>
      fetch(`${secured.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        body,
      });
    const raw = await post('sesame');
    expect(raw.status).toBe(200);
    expect(((await raw.json()) as { usage: { output_tokens: number } }).usage.output_tokens).toBe(2);
    const refused = await post('open');
    expect(refused.status).toBe(401);
    // In Anthropic's shape, as its other errors.
    expect(await refused.json()).toMatchObject({
      type: 'error',
      error: { type: 'authentication_error', message: expect.stringMatching(/token/i) },
    });
    const ok = new Anthropic({ baseURL: secured.url, apiKey: 'sesame', maxRetries: 0 });
    const m = await ok.messages.create({
      model: 'default',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      temperature: 0,
    } as Anthropic.MessageCreateParamsNonStreaming);
    expect(m.usage.output_tokens).toBe(2);
    const wrong = new Anthropic({ baseURL: secured.url, apiKey: 'open', maxRetries: 0 });
    const err = await apiError(
      wrong.messages.create({ model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    );
    expect(err.status).toBe(401);
  });
});
