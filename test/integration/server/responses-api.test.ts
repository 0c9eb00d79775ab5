/**
 * OpenAI's Responses API through the official `openai` client (`client.responses`) against a real server with
 * the default model: text, the semantic event stream, function calls (forced, so the random model makes one)
 * and their outputs sent back, structured output, incomplete replies, and refusals naming the parameter.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failure } from '../../helpers/rejection';
import { chatPromptOfToolTurn, openaiClient, settled, startTestServer, type TestServer } from './server-helpers';

let t: TestServer;
let client: OpenAI;
beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: 4 * 1024 * 1024 });
  client = openaiClient(t.url);
});
afterAll(async () => {
  await t?.close();
});

const lamp = {
  type: 'function' as const,
  name: 'set_lamp',
  description: 'Turn the lamp on or off',
  parameters: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
  strict: true,
};

const apiError = (p: Promise<unknown>) => failure<InstanceType<typeof OpenAI.APIError>>(p, OpenAI.APIError);

describe('POST /v1/responses', () => {
  it('answers text with the same tokens chat completions gives, usage and the settings repeated back', async () => {
    const r = await client.responses.create({
      model: 'default',
      instructions: 'Be brief.',
      input: 'Hello there',
      max_output_tokens: 12,
      temperature: 0,
      metadata: { run: '1' },
    });
    const chat = await client.chat.completions.create({
      model: 'default',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello there' },
      ],
      max_tokens: 12,
      temperature: 0,
    });
    expect(r.object).toBe('response');
    expect(r.id).toMatch(/^resp_/);
    expect(r.output).toHaveLength(1);
    const item = r.output[0] as { type: string; role: string; content: Array<{ type: string; text: string }> };
    expect(item).toMatchObject({ type: 'message', role: 'assistant' });
    expect(r.output_text).toBe(chat.choices[0]?.message.content);
    expect(r.usage).toMatchObject({
      input_tokens: chat.usage?.prompt_tokens,
      output_tokens: chat.usage?.completion_tokens,
      output_tokens_details: { reasoning_tokens: 0 },
    });
    expect(r.usage?.total_tokens).toBe((r.usage?.input_tokens ?? 0) + (r.usage?.output_tokens ?? 0));
    expect(r).toMatchObject({
      instructions: 'Be brief.',
      max_output_tokens: 12,
      temperature: 0,
      metadata: { run: '1' },
    });
    // Cut by max_output_tokens (the random model never ends by itself in 12 tokens): incomplete, as OpenAI says.
    expect(r.status).toBe('incomplete');
    expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' });
  });

  it('streams the semantic events in order; their deltas add up to the final text', async () => {
    const stream = await client.responses.create({
      model: 'default',
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Tell me something' }] }],
      max_output_tokens: 16,
      temperature: 0,
      stream: true,
    });
    const types: string[] = [];
    const sequence: number[] = [];
    let deltas = '';
    let final: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      types.push(e.type);
      sequence.push(e.sequence_number);
      if (e.type === 'response.output_text.delta') deltas += e.delta;
      if (e.type === 'response.incomplete' || e.type === 'response.completed') final = e.response;
    }
    expect(sequence).toEqual(sequence.map((_, i) => i));
    expect(types.slice(0, 4)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
    ]);
    expect(types.slice(-4)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.incomplete',
    ]);
    const item = final?.output[0] as { content: Array<{ text: string }> } | undefined;
    expect(item?.content[0]?.text).toBe(deltas);
    expect(deltas.length).toBeGreaterThan(0);
    expect(final?.usage?.output_tokens).toBe(16);
  });

  it('a function call: the call item, then its output sent back in the next request', async () => {
    const r = await client.responses.create({
      model: 'default',
      input: 'Lamp on please',
      tools: [lamp],
      tool_choice: 'required',
      max_output_tokens: 60,
    });
    expect(r.status).toBe('completed');
    const call = r.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: 'function_call', name: 'set_lamp', status: 'completed' });
    expect(call.call_id).toMatch(/^call_/);
    expect(typeof JSON.parse(call.arguments).on).toBe('boolean');
    expect(r.output.filter((o) => o.type === 'message')).toHaveLength(0);

    const next = await client.responses.create({
      model: 'default',
      input: [
        { role: 'user', content: 'Lamp on please' },
        call,
        { type: 'function_call_output', call_id: call.call_id, output: '{"ok": true}' },
      ],
      tools: [lamp],
      max_output_tokens: 4,
    });
    expect(next.output[0]?.type).toBe('message');
    // The same conversation through chat completions is the same prompt: the call and its output were read.
    const chat = await chatPromptOfToolTurn(t.url, {
      user: 'Lamp on please',
      call: { id: call.call_id, name: call.name, arguments: call.arguments },
      result: '{"ok": true}',
      tool: { name: lamp.name, description: lamp.description, parameters: lamp.parameters },
    });
    expect(next.usage?.input_tokens ?? 0).toBe(chat);
    // The SDK's stream helper assembles the same kind of response from the events.
    const streamed = await client.responses
      .stream({ model: 'default', input: 'Lamp?', tools: [lamp], tool_choice: 'required', max_output_tokens: 60 })
      .finalResponse();
    expect(streamed.output.find((o) => o.type === 'function_call')).toMatchObject({ name: 'set_lamp' });
  });

  it('streams a named call as its item events, its arguments in pieces as written, then response.completed', async () => {
    const stream = await client.responses.create({
      model: 'default',
      input: 'Lamp?',
      tools: [lamp],
      tool_choice: { type: 'function', name: 'set_lamp' },
      max_output_tokens: 60,
      stream: true,
    });
    const types: string[] = [];
    let args = '';
    let pieces = '';
    const last: { response?: { output: Array<{ type: string; arguments?: string; status?: string }> } } = {};
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.function_call_arguments.delta') pieces += e.delta;
      if (e.type === 'response.function_call_arguments.done') args = e.arguments;
      if (e.type === 'response.completed') last.response = e.response as unknown as typeof last.response;
    }
    expect(types.slice(0, 3)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added']);
    const deltas = types.slice(3, -3);
    expect(deltas.length).toBeGreaterThan(2);
    expect(new Set(deltas)).toEqual(new Set(['response.function_call_arguments.delta']));
    expect(types.slice(-3)).toEqual([
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(pieces).toBe(args);
    expect([{ on: true }, { on: false }]).toContainEqual(JSON.parse(args));
    expect(last.response?.output).toEqual([
      expect.objectContaining({ type: 'function_call', arguments: args, status: 'completed' }),
    ]);
  });

  it('text.format json_schema: the reply conforms', async () => {
    const r = await client.responses.create({
      model: 'default',
      input: 'Is it on?',
      text: {
        format: {
          type: 'json_schema',
          name: 'answer',
          schema: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] },
          strict: true,
        },
      },
      max_output_tokens: 40,
    });
    expect([{ on: true }, { on: false }]).toContainEqual(JSON.parse(r.output_text));
  });

  it("takes Codex's include of reasoning.encrypted_content with store: false (the reasoning items carry it whole)", async () => {
    const r = await client.responses.create({
      model: 'default',
      input: 'hi',
      max_output_tokens: 2,
      store: false,
      include: ['reasoning.encrypted_content'],
      // No alternatives asked for (clients that always send the field send 0): taken as left out.
      top_logprobs: 0,
    });
    expect(r.status).toBe('incomplete');
    expect(r.usage?.output_tokens).toBe(2);
  });

  it('refuses what needs stored state or hosted tools with 400 naming the parameter; nothing is left reserved', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ previous_response_id: 'resp_1' }, 'previous_response_id'],
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ input: [{ type: 'item_reference', id: 'rs_1' }] }, 'input[0].type'],
      [{ reasoning: { effort: 'extreme' } }, 'reasoning.effort'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0]'],
      [{ truncation: 'sometimes' }, 'truncation'],
      [{ max_output_tokens: 0 }, 'max_output_tokens'],
      [
        {
          input: [
            { role: 'user', content: 'x' },
            { type: 'function_call', call_id: 'c', name: 'f', arguments: 'no' },
          ],
        },
        'input[1].arguments',
      ],
      [{ max_tool_calls: 1 }, 'max_tool_calls'],
      [{ top_logprobs: 2 }, 'top_logprobs'],
      [{ include: ['reasoning.encrypted_content', 'message.output_text.logprobs'] }, 'include[1]'],
      [
        {
          tools: [{ ...lamp, parameters: { type: 'object', properties: { n: { type: 'number', minimum: 1 } } } }],
          tool_choice: 'required',
        },
        'tools[0].parameters.properties.n.minimum',
      ],
      [{ text: { format: { type: 'json_schema', name: 'x', schema: { type: 'string' } } } }, 'text.format'],
    ];
    for (const [extra, param] of cases) {
      const err = await apiError(
        client.responses.create({
          model: 'default',
          input: 'hi',
          ...extra,
        } as OpenAI.Responses.ResponseCreateParamsNonStreaming),
      );
      expect(err.status, JSON.stringify(extra)).toBe(400);
      expect(err.param, JSON.stringify(extra)).toBe(param);
    }
    // A tool history the host refuses is named where the client wrote it (the instructions come first in the
    // host's request), in the Responses API's names.
    const history: Array<[unknown[], string, RegExp]> = [
      [
        [
          { role: 'user', content: 'hi' },
          { type: 'function_call_output', call_id: 'zz', output: 'x' },
        ],
        'input[1].call_id',
        / input\[1\] is the result of call id "zz"/,
      ],
      [
        [
          { role: 'user', content: 'hi' },
          { type: 'function_call', call_id: 'c1', name: 'lamp', arguments: '{}' },
          { type: 'function_call', call_id: 'c2', name: 'lamp', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'x' },
          { role: 'user', content: 'and?' },
        ],
        'input[2]',
        / input\[2\] \(id "c2"\) has no tool result before input\[4\]/,
      ],
    ];
    for (const [input, param, message] of history) {
      const err = await apiError(
        client.responses.create({ model: 'default', instructions: 'be brief', input } as never),
      );
      expect(err.status, param).toBe(400);
      expect(err.param, param).toBe(param);
      expect(err.message, param).toMatch(message);
      expect(err.message, param).not.toMatch(/toolCall|messages\[/);
    }
    const missing = await apiError(client.responses.create({ model: 'nope', input: 'hi' }));
    expect(missing.status).toBe(404);
    const snap = await settled(t.url);
    expect(snap.reservedBytes).toBe(0);
  });
});
