/**
 * Anthropic's streamed content blocks around calls whose input streams as it is written (MessageEvents); the
 * stop reason of a reply the context window cut; text blocks joined one per line.
 */
import { describe, expect, it } from 'vitest';
import {
  type MessageEvent,
  MessageEvents,
  mapMessagesRequest,
  messageBody,
  stopReason,
} from '../../../src/main/server/anthropic-adapter';
import { jsonText } from '../../../src/main/server/http-util';
import type { GenerationResult, ToolCall } from '../../../src/shared/contract';

/** Each event as "type index detail": the block sequence at a glance. */
function brief(events: MessageEvent[]): string[] {
  return events.map((e) => {
    const d = e.delta as { type?: string; text?: string; partial_json?: string } | undefined;
    const block = e.content_block as { type: string; id?: string } | undefined;
    if (e.type === 'content_block_start') return `start ${e.index} ${block?.type}${block?.id ? ` ${block.id}` : ''}`;
    if (e.type === 'content_block_delta') return `delta ${e.index} ${d?.text ?? d?.partial_json}`;
    if (e.type === 'content_block_stop') return `stop ${e.index}`;
    return e.type;
  });
}

const call = (id: string, args: string): ToolCall => ({ id, name: 'set_lamp', arguments: args });
const result: GenerationResult = {
  requestId: 'r1',
  modelId: 'default',
  tokenIds: [1],
  text: '',
  finishReason: 'tool_calls',
  rows: [{ tokenIds: [1], text: '', finishReason: 'tool_calls' }],
  promptTokens: 3,
  reusedTokens: 0,
  bpt: 1,
  kvBytes: 4,
  reservedBytes: 4,
  timings: { queueMs: 0, ttftMs: 1, totalMs: 2, tokensPerSecond: 1 },
};

describe('MessageEvents with streamed input', () => {
  it('text, then a call whose input streams, then text after it in the frame that completes it', () => {
    const m = new MessageEvents('msg_1', 'default');
    const events = [
      ...m.tokens('Sure. ', [], [{ index: 0, id: 'toolu_a', name: 'set_lamp', arguments: '{"on"' }]),
      ...m.tokens('', [], [{ index: 0, arguments: ': tr' }]),
      ...m.tokens('Done.', [call('toolu_a', '{"on":true}')], [{ index: 0, arguments: 'ue}' }]),
      ...m.done(result),
    ];
    expect(brief(events)).toEqual([
      'start 0 text',
      'delta 0 Sure. ',
      'stop 0',
      'start 1 tool_use toolu_a',
      'delta 1 {"on"',
      'delta 1 : tr',
      'delta 1 ue}',
      'stop 1',
      'start 2 text',
      'delta 2 Done.',
      'stop 2',
      'message_delta',
      'message_stop',
    ]);
  });

  it('a call that did not stream is one whole block; a streamed one is not sent again', () => {
    const m = new MessageEvents('msg_2', 'default');
    const events = [
      ...m.tokens('', [call('toolu_a', '{"on":false}')]),
      ...m.tokens('', [], [{ index: 1, id: 'toolu_b', name: 'set_lamp', arguments: '{"on": true}' }]),
      ...m.tokens('', [call('toolu_b', '{"on":true}')]),
    ];
    expect(brief(events)).toEqual([
      'start 0 tool_use toolu_a',
      'delta 0 {"on":false}',
      'stop 0',
      'start 1 tool_use toolu_b',
      'delta 1 {"on": true}',
      'stop 1',
    ]);
  });

  it('a call cut off while its input streams: its block is closed before the message ends', () => {
    const m = new MessageEvents('msg_3', 'default');
    const events = [
      ...m.tokens('', [], [{ index: 0, id: 'toolu_a', name: 'set_lamp', arguments: '{"o' }]),
      ...m.done({ ...result, finishReason: 'length' }),
    ];
    expect(brief(events)).toEqual([
      'start 0 tool_use toolu_a',
      'delta 0 {"o',
      'stop 0',
      'message_delta',
      'message_stop',
    ]);
  });

  it("the whole reply's tool_use input is the call's text, its numbers as written (the stream's pieces have them)", () => {
    const args =
      '{"id": 500444428064428312, "big": 217678567180585060000000000000000000000000000000000000, "s": "1.0"}';
    const text = jsonText(
      messageBody('default', {
        ...result,
        rows: [{ ...result.rows[0], toolCalls: [call('toolu_a', args)] }],
      } as GenerationResult),
    );
    expect(text).toContain(`"input":${args}`);
    expect(JSON.parse(text).content[0]).toEqual({
      type: 'tool_use',
      id: 'toolu_a',
      name: 'set_lamp',
      input: JSON.parse(args),
    });
  });
});

describe('stopReason', () => {
  const reply = (finishReason: GenerationResult['finishReason'], tokens: number, clipped?: number) => ({
    finishReason,
    rows: [{ tokenIds: Array.from({ length: tokens }, (_, i) => i), text: '', finishReason }],
    ...(clipped !== undefined
      ? { clipped: { requestedMaxTokens: 100, clippedMaxTokens: clipped, contextLength: 16 } }
      : {}),
  });

  it('a reply that ran to max_tokens clipped by the context: model_context_window_exceeded', () => {
    expect(stopReason(reply('length', 9, 9))).toBe('model_context_window_exceeded');
    expect(stopReason(reply('context', 9))).toBe('model_context_window_exceeded');
  });

  it('cut before the clipped limit (the KV budget admitted fewer), or not clipped: max_tokens', () => {
    expect(stopReason(reply('length', 5, 9))).toBe('max_tokens');
    expect(stopReason(reply('length', 9))).toBe('max_tokens');
    // Ended by itself within the clipped limit.
    expect(stopReason(reply('eos', 9, 9))).toBe('end_turn');
  });
});

describe('mapMessagesRequest: text blocks', () => {
  it('are joined one per line, as vLLM joins them (glued, two sentences would run into one): system included', () => {
    const text = (t: string) => ({ type: 'text', text: t });
    const m = mapMessagesRequest({
      model: 'm',
      max_tokens: 8,
      system: [text('Be brief.'), text('Be kind.')],
      messages: [
        { role: 'user', content: [text('Summarize the file.'), text('The file says hi.')] },
        {
          role: 'assistant',
          content: [text('It'), text('greets.'), { type: 'tool_use', id: 't1', name: 'f', input: {} }],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: [text('a'), text('b')] },
            text('Thanks.'),
            text('More?'),
          ],
        },
      ],
    });
    expect(m.request.messages).toEqual([
      { role: 'system', content: 'Be brief.\nBe kind.' },
      { role: 'user', content: 'Summarize the file.\nThe file says hi.' },
      { role: 'assistant', content: 'It\ngreets.', toolCalls: [{ id: 't1', name: 'f', arguments: '{}' }] },
      { role: 'tool', content: 'a\nb', toolCallId: 't1' },
      { role: 'user', content: 'Thanks.\nMore?' },
    ]);
  });

  it("sent back as kvdesk streamed them (text, thinking, text), they are the model's text: no line break added", () => {
    const m = mapMessagesRequest({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'user', content: 'Weather?' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Let me check.' },
            { type: 'thinking', thinking: 'The preamble is out.', signature: '' },
            { type: 'text', text: '\n\nIt is sunny.' },
          ],
        },
        { role: 'user', content: 'Thanks.' },
      ],
    });
    expect(m.request.messages?.[1]).toMatchObject({ role: 'assistant', content: 'Let me check.\n\nIt is sunny.' });
  });
});

describe('mapMessagesRequest: thinking and a forced tool_choice', () => {
  const lamp = { name: 'set_lamp', input_schema: { type: 'object', properties: { on: { type: 'boolean' } } } };
  const body = (thinking: unknown, toolChoice: unknown) => ({
    model: 'm',
    max_tokens: 64,
    messages: [{ role: 'user', content: 'Lamp on.' }],
    tools: [lamp],
    tool_choice: toolChoice,
    ...(thinking === undefined ? {} : { thinking }),
  });

  it("are refused together, as Anthropic refuses them: a 400 naming tool_choice, in Anthropic's words", () => {
    for (const thinking of [{ type: 'enabled', budget_tokens: 16 }, { type: 'adaptive' }]) {
      for (const choice of [{ type: 'any' }, { type: 'tool', name: 'set_lamp' }]) {
        let caught: unknown;
        try {
          mapMessagesRequest(body(thinking, choice));
        } catch (err) {
          caught = err;
        }
        const label = JSON.stringify({ thinking, choice });
        expect(caught, label).toMatchObject({
          status: 400,
          body: {
            error: { message: 'Thinking may not be enabled when tool_choice forces tool use.', param: 'tool_choice' },
          },
        });
      }
    }
  });

  it('thinking with auto or none, or a forced call with thinking disabled or left out, is taken', () => {
    const ok: Array<[unknown, unknown]> = [
      [{ type: 'enabled', budget_tokens: 16 }, { type: 'auto' }],
      [{ type: 'adaptive' }, { type: 'none' }],
      [{ type: 'disabled' }, { type: 'any' }],
      [undefined, { type: 'tool', name: 'set_lamp' }],
    ];
    for (const [thinking, choice] of ok) expect(() => mapMessagesRequest(body(thinking, choice))).not.toThrow();
  });
});
