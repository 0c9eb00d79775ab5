/**
 * The Responses API's mapping: input items to the host's conversation (calls joined onto their assistant
 * turn, outputs as tool results), and the event stream's items in order for a reply that writes text, calls
 * tools and writes again.
 */
import { describe, expect, it } from 'vitest';
import { mapResponsesRequest, ResponseEvents, type StreamEvent } from '../../../src/main/server/responses-adapter';
import type { GenerationResult } from '../../../src/shared/contract';

describe('mapResponsesRequest', () => {
  it('turns input items into the conversation: instructions first, calls on their turn, outputs as tool results', () => {
    const m = mapResponsesRequest({
      model: 'm',
      instructions: 'Be brief.',
      input: [
        { role: 'developer', content: 'Use tools.' },
        {
          type: 'message',
          role: 'user',
          content: [
            { type: 'input_text', text: 'Find x.' },
            { type: 'input_text', text: 'Be quick.' },
          ],
        },
        { type: 'function_call', call_id: 'c1', name: 'search', arguments: '{"q":"x"}' },
        { type: 'function_call', call_id: 'c2', name: 'search', arguments: '{"q":"y"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'x=1' },
        {
          type: 'function_call_output',
          call_id: 'c2',
          output: [
            { type: 'input_text', text: 'y=2' },
            { type: 'input_text', text: 'z=3' },
          ],
        },
        { role: 'assistant', content: [{ type: 'output_text', text: 'Done.' }] },
        { type: 'function_call', call_id: 'c3', name: 'search', arguments: '{}' },
      ],
      tools: [{ type: 'function', name: 'search', parameters: { type: 'object', properties: {} }, strict: true }],
      tool_choice: { type: 'function', name: 'search' },
      parallel_tool_calls: false,
      max_output_tokens: 9,
      text: { format: { type: 'json_object' } },
    });
    expect(m.request.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'system', content: 'Use tools.' },
      // Parts one per line, as vLLM joins them.
      { role: 'user', content: 'Find x.\nBe quick.' },
      {
        role: 'assistant',
        content: '',
        toolCalls: [
          { id: 'c1', name: 'search', arguments: '{"q":"x"}' },
          { id: 'c2', name: 'search', arguments: '{"q":"y"}' },
        ],
      },
      { role: 'tool', content: 'x=1', toolCallId: 'c1' },
      { role: 'tool', content: 'y=2\nz=3', toolCallId: 'c2' },
      { role: 'assistant', content: 'Done.', toolCalls: [{ id: 'c3', name: 'search', arguments: '{}' }] },
    ]);
    expect(m.request).toMatchObject({
      tools: [{ name: 'search', parameters: { type: 'object', properties: {} } }],
      toolChoice: { name: 'search' },
      parallelToolCalls: false,
      maxNewTokens: 9,
      responseFormat: 'json',
      promptCache: true,
    });
    expect(m.echo).toMatchObject({ tool_choice: { type: 'function', name: 'search' }, parallel_tool_calls: false });
  });
});

describe("a function tool's strict, echoed", () => {
  const tools = [
    { type: 'function', name: 'a', parameters: { type: 'object', properties: { n: { type: 'integer', minimum: 1 } } } },
    { type: 'function', name: 'b', parameters: { type: 'object', properties: {} }, strict: true },
    { type: 'function', name: 'c', parameters: { type: 'object', properties: {} }, strict: false },
  ];
  const strict = (tool_choice?: unknown) =>
    (mapResponsesRequest({ model: 'm', input: 'x', tools, tool_choice }).echo.tools as Array<{ strict: unknown }>).map(
      (t) => t.strict,
    );
  it('says whether kvdesk holds the calls to the whole schema, not what was asked (never null)', () => {
    // auto: a call the model opens is held to its shape, its value bounds not (minimum, pattern, …).
    expect(strict()).toEqual([false, false, false]);
    expect(strict('auto')).toEqual([false, false, false]);
    expect(strict('none')).toEqual([false, false, false]);
    // A forced call is structured output to the tool's schema.
    expect(strict('required')).toEqual([true, true, true]);
    expect(strict({ type: 'function', name: 'c' })).toEqual([false, false, true]);
  });
});

describe('ResponseEvents', () => {
  const head = { id: 'resp_abc', created_at: 1, model: 'm' };
  const echo = mapResponsesRequest({ model: 'm', input: 'x' }).echo;
  const call = { id: 'call_1', name: 'search', arguments: '{"q":"x"}' };
  const result = (finishReason: GenerationResult['finishReason']) =>
    ({
      requestId: 'r',
      modelId: 'm',
      tokenIds: [1, 2],
      text: 'ab',
      finishReason,
      rows: [{ tokenIds: [1, 2], text: 'ab', finishReason }],
      promptTokens: 3,
      reusedTokens: 0,
      bpt: 1,
      kvBytes: 1,
      reservedBytes: 1,
      timings: { queueMs: 0, ttftMs: 0, totalMs: 0, tokensPerSecond: 0 },
    }) as GenerationResult;
  const brief = (events: StreamEvent[]) =>
    events.map((e) => `${e.type}${e.output_index !== undefined ? `@${e.output_index}` : ''}`);

  it('closes the message before a call, opens another for text after it, and completes with the items streamed', () => {
    const s = new ResponseEvents(head, echo);
    const all = [...s.start(), ...s.tokens('Let me ', []), ...s.tokens('look.', [call]), ...s.tokens('Found.', [])];
    const end = s.done(result('tool_calls'));
    expect(brief([...all, ...end])).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added@0',
      'response.content_part.added@0',
      'response.output_text.delta@0',
      'response.output_text.delta@0',
      'response.output_text.done@0',
      'response.content_part.done@0',
      'response.output_item.done@0',
      'response.output_item.added@1',
      'response.function_call_arguments.delta@1',
      'response.function_call_arguments.done@1',
      'response.output_item.done@1',
      'response.output_item.added@2',
      'response.content_part.added@2',
      'response.output_text.delta@2',
      'response.output_text.done@2',
      'response.content_part.done@2',
      'response.output_item.done@2',
      'response.completed',
    ]);
    expect([...all, ...end].map((e) => e.sequence_number)).toEqual([...all, ...end].map((_, i) => i));
    const response = (end[end.length - 1] as unknown as { response: { status: string; output: unknown[] } }).response;
    expect(response.status).toBe('completed');
    expect(response.output).toEqual([
      expect.objectContaining({
        type: 'message',
        id: 'msg_abc_0',
        content: [expect.objectContaining({ text: 'Let me look.' })],
      }),
      {
        type: 'function_call',
        id: 'fc_abc_1',
        call_id: 'call_1',
        name: 'search',
        arguments: '{"q":"x"}',
        status: 'completed',
      },
      expect.objectContaining({
        type: 'message',
        status: 'completed',
        content: [expect.objectContaining({ text: 'Found.' })],
      }),
    ]);
  });

  it('a call whose arguments stream: its item opens at the first piece, each piece a delta, text after it a new message', () => {
    const s = new ResponseEvents(head, echo);
    s.start();
    const all = [
      ...s.tokens('Let me look. ', [], [{ index: 0, id: 'call_1', name: 'search', arguments: '{"q"' }]),
      ...s.tokens('', [], [{ index: 0, arguments: ': "x' }]),
      ...s.tokens('Found.', [call], [{ index: 0, arguments: '"}' }]),
    ];
    const end = s.done(result('tool_calls'));
    expect(brief([...all, ...end])).toEqual([
      'response.output_item.added@0',
      'response.content_part.added@0',
      'response.output_text.delta@0',
      'response.output_text.done@0',
      'response.content_part.done@0',
      'response.output_item.done@0',
      'response.output_item.added@1',
      'response.function_call_arguments.delta@1',
      'response.function_call_arguments.delta@1',
      'response.function_call_arguments.delta@1',
      'response.function_call_arguments.done@1',
      'response.output_item.done@1',
      'response.output_item.added@2',
      'response.content_part.added@2',
      'response.output_text.delta@2',
      'response.output_text.done@2',
      'response.content_part.done@2',
      'response.output_item.done@2',
      'response.completed',
    ]);
    const response = (end[end.length - 1] as unknown as { response: { output: unknown[] } }).response;
    // The arguments as streamed (the text the model wrote), under the call's id.
    expect(response.output[1]).toEqual({
      type: 'function_call',
      id: 'fc_abc_1',
      call_id: 'call_1',
      name: 'search',
      arguments: '{"q": "x"}',
      status: 'completed',
    });
  });

  it('a streaming call cut off by the token limit ends incomplete, before the response does', () => {
    const s = new ResponseEvents(head, echo);
    s.start();
    s.tokens('', [], [{ index: 0, id: 'call_1', name: 'search', arguments: '{"q": "un' }]);
    const end = s.done(result('length'));
    expect(brief(end)).toEqual([
      'response.function_call_arguments.done@0',
      'response.output_item.done@0',
      'response.incomplete',
    ]);
    expect(end[1]).toMatchObject({ item: { arguments: '{"q": "un', status: 'incomplete' } });
  });

  it('a failure after text keeps the text written so far in the failed response', () => {
    const s = new ResponseEvents(head, echo);
    s.start();
    s.tokens('Partial', []);
    const end = s.failed('engine_failed', 'the engine stopped', null);
    expect(brief(end)).toEqual(['error', 'response.failed']);
    expect(end[1]).toMatchObject({
      response: {
        status: 'failed',
        output: [{ type: 'message', status: 'incomplete', content: [{ text: 'Partial' }] }],
      },
    });
  });

  it('an empty reply is one empty message; a reply cut short is incomplete', () => {
    const s = new ResponseEvents(head, echo);
    s.start();
    const end = s.done(result('length'));
    expect(brief(end)).toEqual([
      'response.output_item.added@0',
      'response.content_part.added@0',
      'response.output_text.done@0',
      'response.content_part.done@0',
      'response.output_item.done@0',
      'response.incomplete',
    ]);
    expect(end[end.length - 1]).toMatchObject({
      response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } },
    });
  });
});
