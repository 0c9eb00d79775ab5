/**
 * A thinking model's reasoning in the API adapters, driven with synthetic frames: Anthropic's MessageEvents and
 * the Responses API's ResponseEvents put the reasoning first (a thinking block, a reasoning item), close it when
 * the answer or a call (whole, or streamed as its arguments are written) begins, and close it when the reply is
 * cut while reasoning (the thinking block still signed, the reasoning item incomplete and an empty message after
 * it). Each stream is checked for its shape (blocks and items numbered one after another, each started once and
 * stopped once, one open at a time) and replayed into the body it describes, which must equal the non-streamed
 * body (messageBody, outputItems) of the same result. Then the request mappers: Anthropic's `thinking` and
 * thinking blocks, the Responses API's `reasoning.effort` and reasoning input items, OpenAI's
 * `chat_template_kwargs`, `reasoning_effort` and `reasoning_content`, and their 400s naming the field.
 */
import { describe, expect, it } from 'vitest';
import {
  type MessageEvent,
  MessageEvents,
  mapMessagesRequest,
  messageBody,
} from '../../../src/main/server/anthropic-adapter';
import { jsonText } from '../../../src/main/server/http-util';
import { completionBody, mapOpenAiRequest, usageOf } from '../../../src/main/server/openai-adapter';
import {
  mapResponsesRequest,
  outputItems,
  ResponseEvents,
  responseBody,
  type StreamEvent,
} from '../../../src/main/server/responses-adapter';
import type { FinishReason, GenerationResult, RowResult, ToolCall, ToolCallDelta } from '../../../src/shared/contract';
import { refusal } from '../../helpers/rejection';

type Json = Record<string, unknown>;

/** A finished reply of one row: `reasoning` and `text` as the host splits them, the calls it made. */
function resultOf(
  finishReason: FinishReason,
  row: { reasoning?: string; text?: string; toolCalls?: ToolCall[] },
): GenerationResult {
  const r: RowResult = {
    tokenIds: [1, 2, 3, 4, 5],
    text: row.text ?? '',
    finishReason,
    ...(row.reasoning !== undefined ? { reasoning: row.reasoning, reasoningTokens: 3 } : {}),
    ...(row.toolCalls ? { toolCalls: row.toolCalls } : {}),
  };
  return {
    requestId: 'req-1',
    modelId: 'm',
    tokenIds: r.tokenIds,
    text: r.text,
    ...(r.reasoning !== undefined ? { reasoning: r.reasoning, reasoningTokens: r.reasoningTokens } : {}),
    finishReason,
    rows: [r],
    promptTokens: 7,
    reusedTokens: 0,
    bpt: 1,
    kvBytes: 1,
    reservedBytes: 1,
    timings: { queueMs: 0, ttftMs: 0, totalMs: 0, tokensPerSecond: 0 },
  } as GenerationResult;
}

/** One `tokens` frame of row 0, as the routes pass it on. */
interface Frame {
  text?: string;
  reasoning?: string;
  calls?: ToolCall[];
  deltas?: ToolCallDelta[];
}

const lamp = (id: string, args: string): ToolCall => ({ id, name: 'set_lamp', arguments: args });

// ---------------------------------------------------------------------------------------------------------------
// Anthropic: MessageEvents
// ---------------------------------------------------------------------------------------------------------------

/** Each event as "type index detail": the block sequence at a glance. */
function brief(events: MessageEvent[]): string[] {
  return events.map((e) => {
    const d = e.delta as Json | undefined;
    const block = e.content_block as { type: string } | undefined;
    if (e.type === 'content_block_start') return `start ${e.index} ${block?.type}`;
    if (e.type === 'content_block_delta') {
      const detail = d?.thinking ?? d?.text ?? d?.partial_json ?? JSON.stringify(d?.signature);
      return `${d?.type} ${e.index} ${detail}`;
    }
    if (e.type === 'content_block_stop') return `stop ${e.index}`;
    return e.type;
  });
}

/**
 * The content a stream describes, replayed as a client does, its shape checked on the way: blocks start at the
 * next index, one open at a time, deltas go to the open block, a thinking block's signature is its last delta,
 * every block is stopped once, and none is open at message_delta.
 */
function assembleMessage(events: MessageEvent[]): Json[] {
  const blocks: Json[] = [];
  let open: number | null = null;
  let json = '';
  let signed = false;
  expect(events[events.length - 2]?.type).toBe('message_delta');
  expect(events[events.length - 1]?.type).toBe('message_stop');
  for (const e of events) {
    if (e.type === 'content_block_start') {
      expect(open, 'a block starts while another is open').toBeNull();
      expect(e.index).toBe(blocks.length);
      blocks.push(structuredClone(e.content_block) as Json);
      open = e.index as number;
      json = '';
      signed = false;
    } else if (e.type === 'content_block_delta') {
      expect(e.index).toBe(open);
      expect(signed, 'a delta after the signature').toBe(false);
      const b = blocks[open as number] as Json;
      const d = e.delta as Json;
      if (d.type === 'thinking_delta') {
        expect(b.type).toBe('thinking');
        b.thinking = `${b.thinking}${d.thinking}`;
      } else if (d.type === 'signature_delta') {
        expect(b.type).toBe('thinking');
        b.signature = d.signature;
        signed = true;
      } else if (d.type === 'text_delta') {
        expect(b.type).toBe('text');
        b.text = `${b.text}${d.text}`;
      } else if (d.type === 'input_json_delta') {
        expect(b.type).toBe('tool_use');
        json += d.partial_json;
      } else throw new Error(`unexpected delta ${JSON.stringify(d)}`);
    } else if (e.type === 'content_block_stop') {
      expect(e.index, 'a stop of a block that is not open').toBe(open);
      const b = blocks[open as number] as Json;
      if (b.type === 'thinking') expect(signed, 'a thinking block stopped unsigned').toBe(true);
      if (b.type === 'tool_use') b.input = json === '' ? {} : JSON.parse(json);
      open = null;
    } else if (e.type === 'message_delta') {
      expect(open, 'a block still open at message_delta').toBeNull();
    }
  }
  return blocks;
}

/** Streams `frames` then the result; the events, checked and replayed against messageBody. */
function streamMessage(frames: Frame[], result: GenerationResult): MessageEvent[] {
  const m = new MessageEvents('msg_1', 'm');
  const events = [
    ...m.start(7, 0),
    ...frames.flatMap((f) => m.tokens(f.text ?? '', f.calls ?? [], f.deltas ?? [], f.reasoning ?? '')),
    ...m.done(result),
  ];
  expect(assembleMessage(events)).toEqual(JSON.parse(jsonText(messageBody('m', result))).content);
  return events;
}

describe('MessageEvents: a thinking block first', () => {
  it('reasoning pieces, then text (a frame may hold the last of one and the first of the other)', () => {
    const result = resultOf('eos', { reasoning: 'Let me think. Done.', text: 'Hello there.' });
    const events = streamMessage(
      [{ reasoning: 'Let me' }, { reasoning: ' think.' }, { reasoning: ' Done.', text: 'Hello' }, { text: ' there.' }],
      result,
    );
    expect(brief(events)).toEqual([
      'message_start',
      'start 0 thinking',
      'thinking_delta 0 Let me',
      'thinking_delta 0  think.',
      'thinking_delta 0  Done.',
      'signature_delta 0 ""',
      'stop 0',
      'start 1 text',
      'text_delta 1 Hello',
      'text_delta 1  there.',
      'stop 1',
      'message_delta',
      'message_stop',
    ]);
    expect(events[1]).toMatchObject({ content_block: { type: 'thinking', thinking: '', signature: '' } });
    expect(messageBody('m', result).content).toEqual([
      { type: 'thinking', thinking: 'Let me think. Done.', signature: '' },
      { type: 'text', text: 'Hello there.', citations: null },
    ]);
  });

  it('reasoning, then a call that did not stream: the thinking block closes before the tool_use block', () => {
    const call = lamp('toolu_a', '{"on":true}');
    const result = resultOf('tool_calls', { reasoning: 'The lamp.', toolCalls: [call] });
    const events = streamMessage([{ reasoning: 'The' }, { reasoning: ' lamp.' }, { calls: [call] }], result);
    expect(brief(events)).toEqual([
      'message_start',
      'start 0 thinking',
      'thinking_delta 0 The',
      'thinking_delta 0  lamp.',
      'signature_delta 0 ""',
      'stop 0',
      'start 1 tool_use',
      'input_json_delta 1 {"on":true}',
      'stop 1',
      'message_delta',
      'message_stop',
    ]);
    expect(events.at(-2)).toMatchObject({ delta: { stop_reason: 'tool_use' } });
  });

  it('reasoning, then a call whose input streams (its first piece in the reasoning frame)', () => {
    const call = lamp('toolu_a', '{"on": true}');
    const result = resultOf('tool_calls', { reasoning: 'The lamp.', toolCalls: [call] });
    const events = streamMessage(
      [
        { reasoning: 'The' },
        { reasoning: ' lamp.', deltas: [{ index: 0, id: 'toolu_a', name: 'set_lamp', arguments: '{"on"' }] },
        { deltas: [{ index: 0, arguments: ': tr' }] },
        { calls: [call], deltas: [{ index: 0, arguments: 'ue}' }] },
      ],
      result,
    );
    expect(brief(events)).toEqual([
      'message_start',
      'start 0 thinking',
      'thinking_delta 0 The',
      'thinking_delta 0  lamp.',
      'signature_delta 0 ""',
      'stop 0',
      'start 1 tool_use',
      'input_json_delta 1 {"on"',
      'input_json_delta 1 : tr',
      'input_json_delta 1 ue}',
      'stop 1',
      'message_delta',
      'message_stop',
    ]);
  });

  it('reasoning only, cut by max_tokens: the thinking block is signed and stopped before message_delta', () => {
    const result = resultOf('length', { reasoning: 'Let me think' });
    const events = streamMessage([{ reasoning: 'Let me' }, { reasoning: ' think' }], result);
    expect(brief(events)).toEqual([
      'message_start',
      'start 0 thinking',
      'thinking_delta 0 Let me',
      'thinking_delta 0  think',
      'signature_delta 0 ""',
      'stop 0',
      'message_delta',
      'message_stop',
    ]);
    expect(events.at(-2)).toMatchObject({ delta: { stop_reason: 'max_tokens' } });
    expect(messageBody('m', result).content).toEqual([{ type: 'thinking', thinking: 'Let me think', signature: '' }]);
  });

  it('no reasoning (a model that does not think, or thinking off): no thinking block, as before', () => {
    const result = resultOf('eos', { text: 'Hi.' });
    const events = streamMessage([{ text: 'Hi' }, { text: '.', reasoning: '' }], result);
    expect(brief(events)).toEqual([
      'message_start',
      'start 0 text',
      'text_delta 0 Hi',
      'text_delta 0 .',
      'stop 0',
      'message_delta',
      'message_stop',
    ]);
    // An empty reasoning (thinking switched off) is no block either.
    expect(messageBody('m', resultOf('eos', { reasoning: '', text: 'Hi.' })).content).toEqual([
      { type: 'text', text: 'Hi.', citations: null },
    ]);
  });
});

/** gpt-oss's reply as frames: reasoning, a preamble, more reasoning (another analysis message), the answer. */
const INTERLEAVED: Frame[] = [
  { reasoning: 'Need weather.' },
  { text: 'Let me check.' },
  { reasoning: '\n\nThe preamble' },
  { reasoning: ' is out.' },
  { text: '\n\nIt is sunny.' },
];
const INTERLEAVED_RESULT = () =>
  resultOf('eos', { reasoning: 'Need weather.\n\nThe preamble is out.', text: 'Let me check.\n\nIt is sunny.' });

describe('MessageEvents: reasoning after text or a call (gpt-oss: a preamble, then another analysis message)', () => {
  /** The text of the stream's blocks of one type, in order, added up: what a client that joins them reads. */
  const joined = (blocks: Json[], type: string, key: string) =>
    blocks
      .filter((b) => b.type === type)
      .map((b) => b[key])
      .join('');

  it('the text block closes before the thinking block opens; text after the reasoning is a new block', () => {
    const result = INTERLEAVED_RESULT();
    const m = new MessageEvents('msg_1', 'm');
    const frames = INTERLEAVED;
    const events = [
      ...m.start(7, 0),
      ...frames.flatMap((f) => m.tokens(f.text ?? '', f.calls ?? [], f.deltas ?? [], f.reasoning ?? '')),
      ...m.done(result),
    ];
    expect(brief(events)).toEqual([
      'message_start',
      'start 0 thinking',
      'thinking_delta 0 Need weather.',
      'signature_delta 0 ""',
      'stop 0',
      'start 1 text',
      'text_delta 1 Let me check.',
      'stop 1',
      'start 2 thinking',
      'thinking_delta 2 \n\nThe preamble',
      'thinking_delta 2  is out.',
      'signature_delta 2 ""',
      'stop 2',
      'start 3 text',
      'text_delta 3 \n\nIt is sunny.',
      'stop 3',
      'message_delta',
      'message_stop',
    ]);
    // Every piece is in a block that was started: added up, they are the whole reply's reasoning and text.
    const blocks = assembleMessage(events);
    expect(blocks.map((b) => b.type)).toEqual(['thinking', 'text', 'thinking', 'text']);
    expect(joined(blocks, 'thinking', 'thinking')).toBe(result.reasoning);
    expect(joined(blocks, 'text', 'text')).toBe(result.text);
    // The whole reply, which has no order between them, puts the reasoning first.
    expect(messageBody('m', result).content).toEqual([
      { type: 'thinking', thinking: result.reasoning, signature: '' },
      { type: 'text', text: result.text, citations: null },
    ]);
  });

  it('a call, then reasoning, then text: the tool_use block is stopped before the thinking block', () => {
    const call = lamp('toolu_a', '{"on": true}');
    const result = resultOf('eos', { reasoning: 'The lamp.\n\nIt is on.', text: 'Done.', toolCalls: [call] });
    const m = new MessageEvents('msg_1', 'm');
    const frames: Frame[] = [
      { reasoning: 'The lamp.' },
      { deltas: [{ index: 0, id: 'toolu_a', name: 'set_lamp', arguments: '{"on": ' }] },
      { calls: [call], deltas: [{ index: 0, arguments: 'true}' }] },
      { reasoning: '\n\nIt is on.' },
      { text: 'Done.' },
    ];
    const events = [
      ...m.start(7, 0),
      ...frames.flatMap((f) => m.tokens(f.text ?? '', f.calls ?? [], f.deltas ?? [], f.reasoning ?? '')),
      ...m.done(result),
    ];
    const blocks = assembleMessage(events);
    expect(blocks.map((b) => b.type)).toEqual(['thinking', 'tool_use', 'thinking', 'text']);
    expect(blocks[1]).toMatchObject({ id: 'toolu_a', input: { on: true } });
    expect(joined(blocks, 'thinking', 'thinking')).toBe(result.reasoning);
    expect(blocks[3]).toMatchObject({ text: 'Done.' });
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Responses: ResponseEvents
// ---------------------------------------------------------------------------------------------------------------

const head = { id: 'resp_abc', created_at: 1, model: 'm' };
const echo = mapResponsesRequest({ model: 'm', input: 'x' }).echo;

const briefResponse = (events: StreamEvent[]) =>
  events.map((e) => `${e.type.replace(/^response\./, '')}${e.output_index !== undefined ? `@${e.output_index}` : ''}`);

/**
 * The stream's shape: sequence numbers one after another; items added at the next index, one open at a time,
 * each done once and nothing of it after; the final response's output is the items as each was done.
 */
function checkResponseStream(events: StreamEvent[]): { output: unknown[]; status: string; usage: Json } {
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  const done: unknown[] = [];
  let open: number | null = null;
  for (const e of events) {
    if (e.type === 'response.output_item.added') {
      expect(open, 'an item added while another is open').toBeNull();
      expect(e.output_index).toBe(done.length);
      open = e.output_index as number;
    } else if (e.type === 'response.output_item.done') {
      expect(e.output_index).toBe(open);
      done.push(e.item);
      open = null;
    } else if (e.output_index !== undefined) {
      expect(e.output_index, `${e.type} outside its item`).toBe(open);
    }
  }
  expect(open).toBeNull();
  const last = events[events.length - 1] as unknown as { type: string; response: Json };
  expect(['response.completed', 'response.incomplete']).toContain(last.type);
  expect(last.response.output).toEqual(done);
  return last.response as { output: unknown[]; status: string; usage: Json };
}

/** Streams `frames` then the result; the events after response.in_progress, checked, their output outputItems'. */
function streamResponse(frames: Frame[], result: GenerationResult): StreamEvent[] {
  const s = new ResponseEvents(head, echo);
  const started = s.start();
  const events = [
    ...frames.flatMap((f) => s.tokens(f.text ?? '', f.calls ?? [], f.deltas ?? [], f.reasoning ?? '')),
    ...s.done(result),
  ];
  const response = checkResponseStream([...started, ...events]);
  expect(response.output).toEqual(outputItems(head, result));
  // The final event's response is the non-streamed body.
  const status = result.finishReason === 'length' ? 'incomplete' : 'completed';
  expect(response).toEqual(responseBody(head, echo, status, outputItems(head, result), result));
  return events;
}

const REASONING_EVENTS = [
  'output_item.added@0',
  'content_part.added@0',
  'reasoning_text.delta@0',
  'reasoning_text.delta@0',
  'reasoning_text.done@0',
  'content_part.done@0',
  'output_item.done@0',
];

describe('ResponseEvents: a reasoning item first', () => {
  it('reasoning pieces, then text: the reasoning item is done when the answer begins', () => {
    for (const finish of ['eos', 'length'] as const) {
      const result = resultOf(finish, { reasoning: 'Let me think.', text: 'Hello there.' });
      const events = streamResponse(
        [{ reasoning: 'Let me' }, { reasoning: ' think.', text: 'Hello' }, { text: ' there.' }],
        result,
      );
      expect(briefResponse(events)).toEqual([
        ...REASONING_EVENTS,
        'output_item.added@1',
        'content_part.added@1',
        'output_text.delta@1',
        'output_text.delta@1',
        'output_text.done@1',
        'content_part.done@1',
        'output_item.done@1',
        finish === 'eos' ? 'completed' : 'incomplete',
      ]);
      expect(events[0]).toMatchObject({
        item: { type: 'reasoning', id: 'rs_abc_0', summary: [], content: [], status: 'in_progress' },
      });
      expect(events[1]).toMatchObject({ item_id: 'rs_abc_0', part: { type: 'reasoning_text', text: '' } });
      expect(events[4]).toMatchObject({ item_id: 'rs_abc_0', text: 'Let me think.' });
      // The answer followed the reasoning: it is complete though the reply may be cut.
      expect(outputItems(head, result)).toEqual([
        {
          type: 'reasoning',
          id: 'rs_abc_0',
          summary: [],
          content: [{ type: 'reasoning_text', text: 'Let me think.' }],
          encrypted_content: null,
          status: 'completed',
        },
        expect.objectContaining({
          type: 'message',
          id: 'msg_abc_1',
          status: finish === 'eos' ? 'completed' : 'incomplete',
          content: [expect.objectContaining({ text: 'Hello there.' })],
        }),
      ]);
    }
  });

  it('reasoning, then a call that did not stream: no message between them', () => {
    const call = lamp('call_1', '{"on":true}');
    const result = resultOf('tool_calls', { reasoning: 'Let me think.', toolCalls: [call] });
    const events = streamResponse([{ reasoning: 'Let me' }, { reasoning: ' think.' }, { calls: [call] }], result);
    expect(briefResponse(events)).toEqual([
      ...REASONING_EVENTS,
      'output_item.added@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.done@1',
      'output_item.done@1',
      'completed',
    ]);
  });

  it('reasoning, then a call whose arguments stream (its first piece in the reasoning frame)', () => {
    const call = lamp('call_1', '{"on": true}');
    const result = resultOf('tool_calls', { reasoning: 'Let me think.', toolCalls: [call] });
    const events = streamResponse(
      [
        { reasoning: 'Let me' },
        { reasoning: ' think.', deltas: [{ index: 0, id: 'call_1', name: 'set_lamp', arguments: '{"on"' }] },
        { calls: [call], deltas: [{ index: 0, arguments: ': true}' }] },
      ],
      result,
    );
    expect(briefResponse(events)).toEqual([
      ...REASONING_EVENTS,
      'output_item.added@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.done@1',
      'output_item.done@1',
      'completed',
    ]);
  });

  it('reasoning only, cut by the token limit: the reasoning item is incomplete, an empty message after it', () => {
    const result = resultOf('length', { reasoning: 'Let me think' });
    const events = streamResponse([{ reasoning: 'Let me' }, { reasoning: ' think' }], result);
    expect(briefResponse(events)).toEqual([
      ...REASONING_EVENTS,
      'output_item.added@1',
      'content_part.added@1',
      'output_text.done@1',
      'content_part.done@1',
      'output_item.done@1',
      'incomplete',
    ]);
    expect(outputItems(head, result)).toEqual([
      expect.objectContaining({ type: 'reasoning', status: 'incomplete', content: [expect.anything()] }),
      expect.objectContaining({ type: 'message', id: 'msg_abc_1', status: 'incomplete' }),
    ]);
    // Usage counts the reasoning tokens.
    const last = events.at(-1) as unknown as { response: { usage: Json } };
    expect(last.response.usage).toMatchObject({ output_tokens: 5, output_tokens_details: { reasoning_tokens: 3 } });
  });

  it('reasoning only, ended by the model: the reasoning item and the empty message are complete', () => {
    const result = resultOf('eos', { reasoning: 'Let me think' });
    streamResponse([{ reasoning: 'Let me' }, { reasoning: ' think' }], result);
    expect(outputItems(head, result).map((i) => (i as { status: string }).status)).toEqual(['completed', 'completed']);
  });

  it('no reasoning: no reasoning item, as before', () => {
    const events = streamResponse([{ text: 'Hi', reasoning: '' }], resultOf('eos', { reasoning: '', text: 'Hi' }));
    expect(events.some((e) => e.type.includes('reasoning'))).toBe(false);
  });

  it('a failure while reasoning keeps the reasoning written so far, incomplete, in the failed response', () => {
    const s = new ResponseEvents(head, echo);
    s.start();
    s.tokens('', [], [], 'Let me');
    const end = s.failed('engine_failed', 'the engine stopped', null);
    expect(end[1]).toMatchObject({
      response: {
        status: 'failed',
        output: [{ type: 'reasoning', status: 'incomplete', content: [{ type: 'reasoning_text', text: 'Let me' }] }],
      },
    });
  });
});

describe('ResponseEvents: reasoning after text or a call (gpt-oss: a preamble, then another analysis message)', () => {
  it('the message is done before the reasoning item is added; text after the reasoning is a new message', () => {
    const result = INTERLEAVED_RESULT();
    const s = new ResponseEvents(head, echo);
    const frames = INTERLEAVED;
    const events = [
      ...s.start(),
      ...frames.flatMap((f) => s.tokens(f.text ?? '', f.calls ?? [], f.deltas ?? [], f.reasoning ?? '')),
      ...s.done(result),
    ];
    const { output, status } = checkResponseStream(events);
    expect(status).toBe('completed');
    const items = output as Array<{ type: string; id: string; status: string; content: Array<{ text: string }> }>;
    expect(items.map((i) => `${i.type} ${i.id} ${i.status}`)).toEqual([
      'reasoning rs_abc_0 completed',
      'message msg_abc_1 completed',
      'reasoning rs_abc_2 completed',
      'message msg_abc_3 completed',
    ]);
    // Added up, the items' texts are the whole reply's reasoning and text.
    const text = (type: string) =>
      items
        .filter((i) => i.type === type)
        .map((i) => i.content[0]?.text)
        .join('');
    expect(text('reasoning')).toBe(result.reasoning);
    expect(text('message')).toBe(result.text);
    // The whole reply, which has no order between them, puts the reasoning first.
    expect((outputItems(head, result) as Array<{ type: string }>).map((i) => i.type)).toEqual(['reasoning', 'message']);
  });

  it('a call, then reasoning, then text: the call is done before the reasoning item is added', () => {
    const call = lamp('call_1', '{"on": true}');
    const result = resultOf('eos', { reasoning: 'The lamp.\n\nIt is on.', text: 'Done.', toolCalls: [call] });
    const s = new ResponseEvents(head, echo);
    const frames: Frame[] = [
      { reasoning: 'The lamp.' },
      { deltas: [{ index: 0, id: 'call_1', name: 'set_lamp', arguments: '{"on": ' }] },
      { calls: [call], deltas: [{ index: 0, arguments: 'true}' }] },
      { reasoning: '\n\nIt is on.' },
      { text: 'Done.' },
    ];
    const events = [
      ...s.start(),
      ...frames.flatMap((f) => s.tokens(f.text ?? '', f.calls ?? [], f.deltas ?? [], f.reasoning ?? '')),
      ...s.done(result),
    ];
    const { output } = checkResponseStream(events);
    expect(output).toMatchObject([
      { type: 'reasoning', content: [{ text: 'The lamp.' }] },
      { type: 'function_call', call_id: 'call_1', arguments: '{"on": true}', status: 'completed' },
      { type: 'reasoning', content: [{ text: '\n\nIt is on.' }] },
      { type: 'message', content: [{ text: 'Done.' }] },
    ]);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Request mapping
// ---------------------------------------------------------------------------------------------------------------

function expectRefusal(fn: () => unknown, param: string): void {
  const err = refusal(fn);
  expect(err.status, param).toBe(400);
  expect(err.body.error.param).toBe(param);
}

describe('mapMessagesRequest: thinking', () => {
  const map = (extra: Json = {}) =>
    mapMessagesRequest({ model: 'm', max_tokens: 4096, messages: [{ role: 'user', content: 'hi' }], ...extra }).request;

  it('enabled or adaptive: thinking on; disabled, left out or null: off, as Anthropic', () => {
    expect(map({ thinking: { type: 'enabled', budget_tokens: 2048 } }).thinking).toBe(true);
    expect(map({ thinking: { type: 'adaptive' } }).thinking).toBe(true);
    expect(map({ thinking: { type: 'disabled' } }).thinking).toBe(false);
    expect(map().thinking).toBe(false);
    expect(map({ thinking: null }).thinking).toBe(false);
    // Token counting renders the prompt the same way.
    for (const thinking of [{ thinking: { type: 'disabled' } }, {}]) {
      const counted = mapMessagesRequest(
        { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...thinking },
        { countOnly: true },
      );
      expect(counted.request.thinking).toBe(false);
    }
  });

  it('refuses another thinking with a 400 naming thinking', () => {
    for (const thinking of [{ type: 'sometimes' }, {}, 'enabled', true]) {
      expectRefusal(() => map({ thinking }), 'thinking');
    }
  });

  it("output_config.effort is the request's reasoning effort; another value is a 400 naming it", () => {
    for (const effort of ['low', 'medium', 'high', 'max']) {
      expect(map({ output_config: { effort } }).reasoningEffort, effort).toBe(effort);
    }
    expect(map()).not.toHaveProperty('reasoningEffort');
    expectRefusal(() => map({ output_config: { effort: 'extreme' } }), 'output_config.effort');
  });

  it("an assistant's thinking blocks are its reasoning; redacted_thinking is left out; a user's is refused", () => {
    const messages = [
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'A greeting', signature: 'sig' },
          { type: 'redacted_thinking', data: 'opaque' },
          { type: 'thinking', thinking: ', answer it.', signature: 'sig' },
          { type: 'text', text: 'Hello.' },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'redacted_thinking', data: 'opaque' },
          { type: 'text', text: 'Bye.' },
        ],
      },
      { role: 'user', content: 'and?' },
    ];
    const request = map({ messages });
    expect(request.messages?.[1]).toEqual({
      role: 'assistant',
      content: 'Hello.\n\nBye.',
      reasoning: 'A greeting, answer it.',
    });
    // Consecutive assistant messages are one turn: their reasoning too.
    const both = map({
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello.' }] },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'Second thought.', signature: '' },
            { type: 'text', text: 'Again.' },
          ],
        },
        { role: 'user', content: 'and?' },
      ],
    });
    expect(both.messages?.[1]).toEqual({
      role: 'assistant',
      content: 'Hello.\n\nAgain.',
      reasoning: 'Second thought.',
    });
    // With a call: the reasoning, the text and the call on one turn.
    const withCall = map({
      messages: [
        { role: 'user', content: 'lamp' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'Turn it on.', signature: '' },
            { type: 'tool_use', id: 'toolu_1', name: 'set_lamp', input: { on: true } },
          ],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] },
      ],
    });
    expect(withCall.messages?.[1]).toMatchObject({
      role: 'assistant',
      content: '',
      reasoning: 'Turn it on.',
      toolCalls: [{ id: 'toolu_1', name: 'set_lamp' }],
    });
    // Only redacted reasoning: no reasoning at all.
    const redacted = map({
      messages: [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: [
            { type: 'redacted_thinking', data: 'x' },
            { type: 'text', text: 'Hello.' },
          ],
        },
        { role: 'user', content: 'and?' },
      ],
    });
    expect(redacted.messages?.[1]).toEqual({ role: 'assistant', content: 'Hello.' });
    expectRefusal(
      () => map({ messages: [{ role: 'user', content: [{ type: 'thinking', thinking: 'x', signature: '' }] }] }),
      'messages[0].content[0].type',
    );
  });
});

describe('mapResponsesRequest: reasoning', () => {
  const map = (extra: Json = {}) => mapResponsesRequest({ model: 'm', input: 'hi', ...extra }).request;

  it('effort "none": thinking off; the other efforts go to the request; a summary or null leave the model as it is', () => {
    expect(map({ reasoning: { effort: 'none' } }).thinking).toBe(false);
    expect(map({ reasoning: { effort: 'none' } })).not.toHaveProperty('reasoningEffort');
    for (const effort of ['minimal', 'low', 'medium', 'high', 'xhigh']) {
      const r = map({ reasoning: { effort } });
      expect(r, effort).not.toHaveProperty('thinking');
      expect(r.reasoningEffort, effort).toBe(effort);
    }
    for (const reasoning of [{ summary: 'auto' }, { effort: null }, {}, null]) {
      expect(map({ reasoning }), JSON.stringify(reasoning)).not.toHaveProperty('thinking');
      expect(map({ reasoning }), JSON.stringify(reasoning)).not.toHaveProperty('reasoningEffort');
    }
  });

  it('refuses an unknown effort or a reasoning that is no object, naming it', () => {
    expectRefusal(() => map({ reasoning: { effort: 'extreme' } }), 'reasoning.effort');
    expectRefusal(() => map({ reasoning: { effort: 1 } }), 'reasoning.effort');
    expectRefusal(() => map({ reasoning: 'high' }), 'reasoning');
    expectRefusal(() => map({ reasoning: ['high'] }), 'reasoning');
  });

  it('a reasoning input item is the reasoning of the assistant turn after it (its text, else its summary)', () => {
    const text = (t: string) => [{ type: 'reasoning_text', text: t }];
    const messages = map({
      input: [
        { role: 'user', content: 'hi' },
        { type: 'reasoning', id: 'rs_1', summary: [], content: text('A greeting') },
        { type: 'reasoning', id: 'rs_2', summary: [], content: text(', answer it.') },
        { role: 'assistant', content: [{ type: 'output_text', text: 'Hello.' }] },
        { role: 'user', content: 'lamp' },
        // A summary stands in for the content; it goes to the call's new assistant turn.
        { type: 'reasoning', id: 'rs_3', summary: [{ type: 'summary_text', text: 'Turn it on.' }] },
        { type: 'function_call', call_id: 'c1', name: 'set_lamp', arguments: '{"on":true}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
        // Reasoning before no assistant turn belongs to none.
        { type: 'reasoning', id: 'rs_4', summary: [], content: text('lost') },
        { role: 'user', content: 'thanks' },
      ],
    }).messages;
    expect(messages).toEqual([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'Hello.', reasoning: 'A greeting, answer it.' },
      { role: 'user', content: 'lamp' },
      {
        role: 'assistant',
        content: '',
        reasoning: 'Turn it on.',
        toolCalls: [{ id: 'c1', name: 'set_lamp', arguments: '{"on":true}' }],
      },
      { role: 'tool', content: 'ok', toolCallId: 'c1' },
      { role: 'user', content: 'thanks' },
    ]);
  });
  it("reasoning before calls that join an assistant message adds to that turn's reasoning", () => {
    const messages = map({
      input: [
        { role: 'user', content: 'lamp' },
        { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'First.' }] },
        { role: 'assistant', content: [{ type: 'output_text', text: 'On it.' }] },
        { type: 'reasoning', id: 'rs_2', summary: [], content: [{ type: 'reasoning_text', text: 'Then the call.' }] },
        { type: 'function_call', call_id: 'c1', name: 'set_lamp', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
      ],
    }).messages;
    expect(messages?.[1]).toMatchObject({
      role: 'assistant',
      content: 'On it.',
      reasoning: 'First.\n\nThen the call.',
    });
  });
});

describe('mapOpenAiRequest: thinking', () => {
  const map = (extra: Json = {}) =>
    mapOpenAiRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra }).request;

  it('chat_template_kwargs.enable_thinking switches it; reasoning_effort "none" turns it off, unless the switch says', () => {
    expect(map({ chat_template_kwargs: { enable_thinking: true } }).thinking).toBe(true);
    expect(map({ chat_template_kwargs: { enable_thinking: false } }).thinking).toBe(false);
    expect(map({ chat_template_kwargs: {} })).not.toHaveProperty('thinking');
    expect(map({ chat_template_kwargs: null })).not.toHaveProperty('thinking');
    expect(map({ reasoning_effort: 'none' }).thinking).toBe(false);
    expect(map({ reasoning_effort: 'none' })).not.toHaveProperty('reasoningEffort');
    for (const effort of ['minimal', 'low', 'medium', 'high']) {
      expect(map({ reasoning_effort: effort }), effort).not.toHaveProperty('thinking');
      expect(map({ reasoning_effort: effort }).reasoningEffort, effort).toBe(effort);
    }
    expect(map({ reasoning_effort: 'none', chat_template_kwargs: { enable_thinking: true } }).thinking).toBe(true);
    expect(map()).not.toHaveProperty('thinking');
  });

  it('refuses other template variables, a switch that is no boolean and an unknown effort, naming them', () => {
    expectRefusal(
      () => map({ chat_template_kwargs: { add_generation_prompt: false } }),
      'chat_template_kwargs.add_generation_prompt',
    );
    expectRefusal(
      () => map({ chat_template_kwargs: { enable_thinking: false, custom: 1 } }),
      'chat_template_kwargs.custom',
    );
    expectRefusal(
      () => map({ chat_template_kwargs: { enable_thinking: 'yes' } }),
      'chat_template_kwargs.enable_thinking',
    );
    expectRefusal(() => map({ chat_template_kwargs: 'enable_thinking' }), 'chat_template_kwargs');
    expectRefusal(() => map({ chat_template_kwargs: [] }), 'chat_template_kwargs');
    expectRefusal(() => map({ reasoning_effort: 'extreme' }), 'reasoning_effort');
    expectRefusal(() => map({ reasoning_effort: true }), 'reasoning_effort');
  });

  it("an assistant message's reasoning_content (or vLLM's reasoning) is its reasoning; other roles' is not read", () => {
    const messages = map({
      messages: [
        { role: 'user', content: 'hi', reasoning_content: 'not mine' },
        { role: 'assistant', content: 'Hello.', reasoning_content: 'A greeting.' },
        { role: 'user', content: 'and?' },
        { role: 'assistant', content: 'Yes.', reasoning: 'Agree.' },
        { role: 'user', content: 'so?' },
        {
          role: 'assistant',
          content: null,
          reasoning_content: 'Call it.',
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      ],
    }).messages;
    expect(messages?.[0]).toEqual({ role: 'user', content: 'hi' });
    expect(messages?.[1]).toEqual({ role: 'assistant', content: 'Hello.', reasoning: 'A greeting.' });
    expect(messages?.[3]).toEqual({ role: 'assistant', content: 'Yes.', reasoning: 'Agree.' });
    expect(messages?.[5]).toMatchObject({ role: 'assistant', reasoning: 'Call it.', toolCalls: [{ id: 'c1' }] });
  });
});

describe('OpenAI chat replies: reasoning_content and reasoning_tokens', () => {
  const header = { id: 'chatcmpl-1', created: 1, model: 'm' };
  const body = (result: GenerationResult) =>
    completionBody('chat', header, result, usageOf(result, result.promptTokens)) as {
      choices: Array<{ message: Json }>;
      usage: Json;
    };

  it('reasoning_content only when there is reasoning; reasoning_tokens only for a thinking model', () => {
    const thought = body(resultOf('length', { reasoning: 'Hmm.', text: 'Hi' }));
    expect(thought.choices[0]?.message).toEqual({ role: 'assistant', content: 'Hi', reasoning_content: 'Hmm.' });
    expect(thought.usage.completion_tokens_details).toEqual({ reasoning_tokens: 3 });
    const off = body(resultOf('eos', { reasoning: '', text: 'Hi' }));
    expect(off.choices[0]?.message).toEqual({ role: 'assistant', content: 'Hi' });
    const plain = body(resultOf('eos', { text: 'Hi' }));
    expect(plain.usage).not.toHaveProperty('completion_tokens_details');
    const call = body(resultOf('tool_calls', { reasoning: 'Call it.', toolCalls: [lamp('c1', '{}')] }));
    expect(call.choices[0]?.message).toMatchObject({ content: null, reasoning_content: 'Call it.' });
  });
});

describe('thinking budgets in each API', () => {
  const user = [{ role: 'user', content: 'hi' }];
  it("Anthropic's budget_tokens, chat completions' thinking_budget, Responses' reasoning.max_tokens", () => {
    const anthropic = (thinking: unknown) =>
      mapMessagesRequest({ model: 'm', max_tokens: 4096, messages: user, thinking }).request;
    expect(anthropic({ type: 'enabled', budget_tokens: 1024 })).toMatchObject({ thinking: true, thinkingBudget: 1024 });
    expect(anthropic({ type: 'adaptive' })).not.toHaveProperty('thinkingBudget');
    // A budget of a thinking turned off means nothing.
    expect(anthropic({ type: 'disabled', budget_tokens: 1024 })).not.toHaveProperty('thinkingBudget');
    expect(refusal(() => anthropic({ type: 'enabled', budget_tokens: 1.5 })).body.error.param).toBe(
      'thinking.budget_tokens',
    );
    // As Anthropic: the answer needs room after the reasoning.
    expect(refusal(() => anthropic({ type: 'enabled', budget_tokens: 4096 })).body.error.message).toMatch(
      /less than max_tokens/,
    );
    const chat = (extra: object) => mapOpenAiRequest('chat', { model: 'm', messages: user, ...extra }).request;
    expect(chat({ thinking_budget: 256 }).thinkingBudget).toBe(256);
    expect(chat({}).thinkingBudget).toBeUndefined();
    expect(refusal(() => chat({ thinking_budget: -1 })).body.error.param).toBe('thinking_budget');
    const responses = (reasoning: unknown) => mapResponsesRequest({ model: 'm', input: 'hi', reasoning }).request;
    expect(responses({ max_tokens: 64 }).thinkingBudget).toBe(64);
    expect(refusal(() => responses({ max_tokens: 'lots' })).body.error.param).toBe('reasoning.max_tokens');
  });
});
