import { describe, expect, it } from 'vitest';
import { anthropicError } from '../../../src/main/server/anthropic-adapter';
import { errorFromInfo } from '../../../src/main/server/http-util';
import {
  completionBody,
  kvdeskExtras,
  logprobsJson,
  mapOpenAiRequest,
  openAiFinishReason,
  toolCallDeltasChoice,
  toolCallsChoice,
  usageOf,
} from '../../../src/main/server/openai-adapter';
import { createTextTokenizer } from '../../../src/main/tokenizer';
import type { GenerationResult } from '../../../src/shared/contract';
import { refusal } from '../../helpers/rejection';
import { byteFallbackTokenizerJson } from '../tokenizer/tokenizer-builders';

const chat = (extra: Record<string, unknown> = {}) => ({
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
});

describe('mapOpenAiRequest', () => {
  it('maps a chat body to messages, sampling, stop and rows', () => {
    const m = mapOpenAiRequest(
      'chat',
      chat({
        max_tokens: 7,
        temperature: 0.5,
        top_p: 0.9,
        seed: 3,
        stop: 'END',
        n: 2,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    expect(m.request).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      rows: 2,
      maxNewTokens: 7,
      sampling: { temperature: 0.5, topP: 0.9, seed: 3 },
      stop: ['END'],
    });
    expect(m).toMatchObject({ stream: true, includeUsage: true, n: 2, promptCount: 1 });
  });

  it('prefers max_completion_tokens, reads vLLM extras, drops empty stops and null fields', () => {
    const m = mapOpenAiRequest(
      'chat',
      chat({
        max_tokens: 5,
        max_completion_tokens: 9,
        top_k: 40,
        min_p: 0.1,
        repetition_penalty: 1.2,
        stop: ['', 'x'],
        temperature: null,
      }),
    );
    expect(m.request.maxNewTokens).toBe(9);
    expect(m.request.sampling).toEqual({ topK: 40, minP: 0.1, repetitionPenalty: 1.2 });
    expect(m.request.stop).toEqual(['x']);
    expect(mapOpenAiRequest('chat', chat({ stop: [''] })).request.stop).toBeUndefined();
    expect(mapOpenAiRequest('chat', chat({ top_k: -1 })).request.sampling).toEqual({ topK: 0 });
    expect(mapOpenAiRequest('chat', chat({ ignore_eos: true })).request.ignoreEos).toBe(true);
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: 'a', ignore_eos: true }).request.ignoreEos).toBe(true);
    expect(mapOpenAiRequest('chat', chat({ ignore_eos: false })).request.ignoreEos).toBeUndefined();
    // llama.cpp's cache_prompt: false keeps the request out of the prompt cache.
    expect(mapOpenAiRequest('chat', chat({})).request.promptCache).toBe(true);
    expect(mapOpenAiRequest('chat', chat({ cache_prompt: true })).request.promptCache).toBe(true);
    expect(mapOpenAiRequest('chat', chat({ cache_prompt: false })).request.promptCache).toBeUndefined();
    expect(() => mapOpenAiRequest('chat', chat({ cache_prompt: 'no' }))).toThrow(/cache_prompt/);
  });

  it("reads llama.cpp's repeat_last_n as the repetition penalty's window: -1 all tokens, 0 off", () => {
    const sampling = (body: Record<string, unknown>) => mapOpenAiRequest('chat', chat(body)).request.sampling;
    expect(sampling({ repetition_penalty: 1.2, repeat_last_n: 64 })).toEqual({
      repetitionPenalty: 1.2,
      repetitionWindow: 64,
    });
    expect(sampling({ repetition_penalty: 1.2, repeat_last_n: -1 })).toEqual({
      repetitionPenalty: 1.2,
      repetitionWindow: 0,
    });
    expect(sampling({ repetition_penalty: 1.2, repeat_last_n: 0 })).toEqual({ repetitionPenalty: 1 });
    expect(refusal(() => mapOpenAiRequest('chat', chat({ repeat_last_n: -5 }))).body.error.param).toBe('repeat_last_n');
  });

  it('only asks for usage in a stream when include_usage is true; stream_options needs a stream, as OpenAI and vLLM say', () => {
    expect(mapOpenAiRequest('chat', chat({ stream: true })).includeUsage).toBe(false);
    expect(mapOpenAiRequest('chat', chat({ stream: true, stream_options: { include_usage: true } })).includeUsage).toBe(
      true,
    );
    expect(mapOpenAiRequest('chat', chat({ stream: true, stream_options: null })).includeUsage).toBe(false);
    for (const [extra, param, text] of [
      [{ stream_options: { include_usage: true } }, 'stream_options', /only allowed when "stream" is true/],
      [{ stream: true, stream_options: 'yes' }, 'stream_options', /must be an object/],
      [{ stream: true, stream_options: { include_usage: 'yes' } }, 'stream_options.include_usage', /a boolean/],
    ] as const) {
      const err = refusal(() => mapOpenAiRequest('chat', chat(extra)));
      expect(err.body.error.param, JSON.stringify(extra)).toBe(param);
      expect(err.message).toMatch(text);
    }
  });

  it('checks each sampling number against the range the host takes, naming it: top_p 0 is the likeliest token alone', () => {
    // The host reads a nucleus of 0 as the likeliest token alone (the OpenAI API test checks the reply).
    expect(mapOpenAiRequest('chat', chat({ top_p: 0 })).request.sampling).toEqual({ topP: 0 });
    expect(mapOpenAiRequest('chat', chat({ top_k: -1 })).request.sampling).toEqual({ topK: 0 });
    // llama.cpp's -1: a random seed.
    expect(mapOpenAiRequest('chat', chat({ seed: -1 })).request.sampling).toBeUndefined();
    // Up to the largest exact integer (the contract's and the CLI's), the seed itself. OpenAI's seed is an int64:
    // a negative, or one past 2^53 (JSON.parse rounds it, the same text always the same way), is a seed in that
    // range, a different one for each (their low 32 bits differ too).
    const max = Number.MAX_SAFE_INTEGER;
    expect(mapOpenAiRequest('chat', chat({ seed: max })).request.sampling).toEqual({ seed: max });
    const seeds = [-2, -(2 ** 62), 2 ** 53, 2 ** 53 + 2, JSON.parse('9223372036854775807'), 2 ** 63 - 2 ** 11, 1e300];
    const mapped = seeds.map((seed) => mapOpenAiRequest('chat', chat({ seed })).request.sampling?.seed as number);
    for (const s of mapped) expect(Number.isSafeInteger(s) && s >= 0).toBe(true);
    expect(new Set(mapped.map((s) => s % 2 ** 32)).size).toBe(seeds.length);
    expect(mapOpenAiRequest('chat', chat({ seed: -2 })).request.sampling?.seed).toBe(mapped[0]);
    for (const [extra, param] of [
      [{ seed: 1.5 }, 'seed'],
      [{ seed: '7' }, 'seed'],
      [{ top_k: -5 }, 'top_k'],
      [{ temperature: -1 }, 'temperature'],
      [{ temperature: 2.5 }, 'temperature'],
      [{ min_p: 2 }, 'min_p'],
      [{ repetition_penalty: 0 }, 'repetition_penalty'],
      // The older name is read too when the newer one is there.
      [{ max_completion_tokens: 2, max_tokens: 'x' }, 'max_tokens'],
    ] as const) {
      const err = refusal(() => mapOpenAiRequest('chat', chat(extra)));
      expect(err.body.error.param, JSON.stringify(extra)).toBe(param);
      expect(err.message).toMatch(new RegExp(`^"${param}" must be`));
    }
    // Past a double's range (1e400 parses as Infinity, which JSON writes as null): said so, not "got null".
    const huge = refusal(() => mapOpenAiRequest('chat', chat({ temperature: JSON.parse('1e400') })));
    expect(huge.message).toBe('"temperature" must be a number, got a number too large to hold (Infinity).');
  });

  it('refuses a tool message without tool_call_id, naming it', () => {
    const err = refusal(() =>
      mapOpenAiRequest('chat', {
        model: 'm',
        messages: [
          { role: 'user', content: 'w?' },
          { role: 'tool', content: 'sunny' },
        ],
      }),
    );
    expect(err.body.error.param).toBe('messages[1].tool_call_id');
    expect(err.message).toMatch(/tool_call_id is required/);
  });

  it('refuses a user message without content, as OpenAI does; an assistant message with calls needs none', () => {
    const err = refusal(() => mapOpenAiRequest('chat', { model: 'm', messages: [{ role: 'user' }] }));
    expect(err.body.error.param).toBe('messages[0].content');
    expect(err.message).toMatch(/content is required for a user message/);
    const calls = [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }];
    expect(() =>
      mapOpenAiRequest('chat', {
        model: 'm',
        messages: [
          { role: 'user', content: 'w?' },
          { role: 'assistant', tool_calls: calls },
          { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
        ],
      }),
    ).not.toThrow();
  });

  it('turns developer into system and joins text parts one per line (as vLLM: glued, two sentences run into one)', () => {
    const m = mapOpenAiRequest('chat', {
      model: 'm',
      messages: [
        {
          role: 'developer',
          content: [
            { type: 'text', text: 'be brief' },
            { type: 'text', text: 'be kind' },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Summarize the file.' },
            { type: 'text', text: 'The file says hi.' },
          ],
        },
        { role: 'assistant', content: null },
      ],
    });
    expect(m.request.messages).toEqual([
      { role: 'system', content: 'be brief\nbe kind' },
      { role: 'user', content: 'Summarize the file.\nThe file says hi.' },
      { role: 'assistant', content: '' },
    ]);
  });

  it('maps completion prompts: text, ids, several of each (each run n times)', () => {
    // One prompt and one reply go through the prompt cache; several rows or prompts do not.
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: 'x' }).request).toEqual({
      model: 'm',
      prompt: 'x',
      promptCache: true,
    });
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: [1, 2], n: 3 }).request).toEqual({
      model: 'm',
      promptIds: [1, 2],
      rows: 3,
    });
    const texts = mapOpenAiRequest('completion', { model: 'm', prompt: ['a', 'b'], n: 2 });
    expect(texts.request).toMatchObject({ prompts: ['a', 'b'], rows: 2 });
    expect(texts).toMatchObject({ promptCount: 2, promptTexts: ['a', 'b'], promptIdLengths: null });
    const ids = mapOpenAiRequest('completion', { model: 'm', prompt: [[1], [2, 3]] });
    expect(ids.request.promptIdRows).toEqual([[1], [2, 3]]);
    expect(ids.promptIdLengths).toEqual([1, 2]);
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: ['only'] }).request).toEqual({
      model: 'm',
      prompt: 'only',
      promptCache: true,
    });
    expect(texts.request.promptCache).toBeUndefined();
    expect(mapOpenAiRequest('chat', chat({ n: 2 })).request.promptCache).toBeUndefined();
    expect(mapOpenAiRequest('chat', chat()).request.promptCache).toBe(true);
    expect(ids.request.promptCache).toBeUndefined();
  });

  it('refuses malformed input with 400 and the parameter', () => {
    const cases: Array<[string, unknown, string]> = [
      ['chat', [], 'body'],
      ['chat', { messages: [{ role: 'user', content: 'x' }] }, 'model'],
      ['chat', { model: 'm', messages: [] }, 'messages'],
      ['chat', { model: 'm', messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
      ['chat', { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url' }] }] }, 'messages[0].content'],
      ['chat', chat({ temperature: 2.5 }), 'temperature'],
      ['chat', chat({ temperature: '1' }), 'temperature'],
      ['chat', chat({ top_p: 1.5 }), 'top_p'],
      ['chat', chat({ n: 0 }), 'n'],
      ['chat', chat({ n: 1.5 }), 'n'],
      ['chat', chat({ max_tokens: 0 }), 'max_tokens'],
      ['chat', chat({ seed: 1.5 }), 'seed'],
      ['chat', chat({ stop: [1] }), 'stop'],
      ['chat', chat({ stream: 'yes' }), 'stream'],
      ['chat', chat({ ignore_eos: 1 }), 'ignore_eos'],
      ['chat', chat({ tools: [{ type: 'function' }] }), 'tools[0].function'],
      ['chat', chat({ tools: [{ type: 'retrieval' }] }), 'tools[0].type'],
      ['chat', chat({ tools: { type: 'function' } }), 'tools'],
      [
        'chat',
        chat({ tools: [{ type: 'function', function: { name: 'f', parameters: [] } }] }),
        'tools[0].function.parameters',
      ],
      ['chat', chat({ tool_choice: 'always' }), 'tool_choice'],
      ['chat', chat({ tool_choice: { type: 'function' } }), 'tool_choice'],
      ['chat', chat({ functions: [{ name: 'f' }] }), 'functions'],
      ['chat', chat({ function_call: { name: 'f' } }), 'function_call'],
      ['chat', chat({ parallel_tool_calls: 'no' }), 'parallel_tool_calls'],
      [
        'chat',
        { model: 'm', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 1 }] }] },
        'messages[0].tool_calls[0]',
      ],
      ['completion', { model: 'm', prompt: 'a', tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
      ['chat', chat({ logprobs: 1 }), 'logprobs'],
      ['chat', chat({ top_logprobs: 3 }), 'top_logprobs'],
      ['chat', chat({ logprobs: true, top_logprobs: 21 }), 'top_logprobs'],
      ['chat', chat({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }), 'response_format'],
      ['chat', chat({ response_format: { type: 'yaml' } }), 'response_format'],
      ['chat', chat({ response_format: 'json' }), 'response_format'],
      ['chat', chat({ frequency_penalty: 2.5 }), 'frequency_penalty'],
      ['chat', chat({ presence_penalty: -3 }), 'presence_penalty'],
      ['chat', chat({ logit_bias: { '1': 101 } }), 'logit_bias'],
      ['chat', chat({ logit_bias: { abc: 5 } }), 'logit_bias'],
      ['chat', chat({ logit_bias: [5] }), 'logit_bias'],
      ['completion', { model: 'm', prompt: 'a', logprobs: 1.5 }, 'logprobs'],
      ['completion', { model: 'm', prompt: 'a', logprobs: 21 }, 'logprobs'],
      ['completion', { model: 'm' }, 'prompt'],
      ['completion', { model: 'm', prompt: [] }, 'prompt'],
      ['completion', { model: 'm', prompt: ['a', 1] }, 'prompt'],
      ['completion', { model: 'm', prompt: 'a', echo: true }, 'echo'],
      ['completion', { model: 'm', prompt: 'a', suffix: 'z' }, 'suffix'],
      ['completion', { model: 'm', prompt: 'a', best_of: 3 }, 'best_of'],
      ['chat', chat({ modalities: ['text', 'audio'] }), 'modalities[1]'],
      ['chat', chat({ modalities: 'text' }), 'modalities'],
      ['chat', chat({ audio: { voice: 'alloy', format: 'wav' } }), 'audio'],
      ['chat', chat({ web_search_options: {} }), 'web_search_options'],
      ['chat', chat({ web_search_options: { search_context_size: 'low' } }), 'web_search_options'],
    ];
    for (const [kind, body, param] of cases) {
      const err = refusal(() => mapOpenAiRequest(kind as 'chat' | 'completion', body));
      expect(err.status, JSON.stringify(body)).toBe(400);
      expect(err.body.error.param, JSON.stringify(body)).toBe(param);
      expect(err.body.error.type).toBe('invalid_request_error');
    }
  });

  it('takes an empty suffix as none', () => {
    for (const extra of [{ suffix: '' }, { suffix: null }, { suffix: [] }]) {
      expect(mapOpenAiRequest('completion', { model: 'm', prompt: 'a', ...extra }).request.prompt).toBe('a');
    }
  });

  it('takes modalities ["text"], and audio or web_search_options null, as asking for nothing', () => {
    for (const extra of [{ modalities: ['text'] }, { modalities: [] }, { audio: null }, { web_search_options: null }]) {
      expect(mapOpenAiRequest('chat', chat(extra)).request.messages).toEqual([{ role: 'user', content: 'hi' }]);
    }
  });

  it('says what to do with output kvdesk cannot write (audio) or a web search it cannot make', () => {
    const message = (extra: Record<string, unknown>) =>
      refusal(() => mapOpenAiRequest('chat', chat(extra))).body.error.message;
    expect(message({ modalities: ['text', 'audio'] })).toMatch(/"audio".*text only.*\["text"\]/);
    expect(message({ audio: { voice: 'alloy', format: 'wav' } })).toMatch(/"audio".*without it/);
    expect(message({ web_search_options: {} })).toMatch(/does not search the web.*"tools"/);
  });

  it('maps penalties, logit bias, logprobs and JSON mode', () => {
    const c = mapOpenAiRequest(
      'chat',
      chat({ frequency_penalty: 0.5, presence_penalty: -1, logit_bias: { '07': -100, 50256: 3 }, logprobs: true }),
    );
    expect(c.request.sampling).toEqual({
      frequencyPenalty: 0.5,
      presencePenalty: -1,
      logitBias: { 7: -100, 50256: 3 },
    });
    expect(c.request.logprobs).toBe(0);
    expect(mapOpenAiRequest('chat', chat({ logprobs: true, top_logprobs: 5 })).request.logprobs).toBe(5);
    expect(mapOpenAiRequest('chat', chat({ logprobs: false })).request.logprobs).toBeUndefined();
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: 'a', logprobs: 3 }).request.logprobs).toBe(3);
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: 'a', logprobs: 0 }).request.logprobs).toBe(0);
    expect(mapOpenAiRequest('completion', { model: 'm', prompt: 'a' }).request.logprobs).toBeUndefined();
    expect(mapOpenAiRequest('chat', chat({ response_format: { type: 'json_object' } })).request.responseFormat).toBe(
      'json',
    );
    expect(
      mapOpenAiRequest('chat', chat({ response_format: { type: 'text' } })).request.responseFormat,
    ).toBeUndefined();
    const schema = { type: 'object', properties: { a: { type: 'integer' } } };
    const structured = mapOpenAiRequest(
      'chat',
      chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } }),
    ).request;
    expect(structured.jsonSchema).toEqual(schema);
    expect(structured.responseFormat).toBeUndefined();
  });

  it('maps tools, tool_choice, parallel_tool_calls, and the calls and results of earlier turns', () => {
    const params = { type: 'object', properties: { q: { type: 'string' } } };
    const c = mapOpenAiRequest(
      'chat',
      chat({
        messages: [
          { role: 'user', content: 'find x' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } }],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'x is 1' },
        ],
        tools: [
          { type: 'function', function: { name: 'search', description: 'Find', parameters: params, strict: true } },
          { type: 'function', function: { name: 'now' } },
        ],
        tool_choice: { type: 'function', function: { name: 'search' } },
        parallel_tool_calls: false,
      }),
    ).request;
    expect(c.tools).toEqual([{ name: 'search', description: 'Find', parameters: params }, { name: 'now' }]);
    expect(c.toolChoice).toEqual({ name: 'search' });
    expect(c.parallelToolCalls).toBe(false);
    expect(c.messages).toEqual([
      { role: 'user', content: 'find x' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'search', arguments: '{"q":"x"}' }] },
      { role: 'tool', content: 'x is 1', toolCallId: 'call_1' },
    ]);
    expect(mapOpenAiRequest('chat', chat({ tool_choice: 'required' })).request.toolChoice).toBe('required');
  });

  it('answers calls as OpenAI does: content null beside them, finish_reason tool_calls, numbered in a stream', () => {
    const call = { id: 'call_1', name: 'search', arguments: '{"q":"x"}' };
    const result = {
      requestId: 'r',
      modelId: 'm',
      tokenIds: [1],
      text: '',
      finishReason: 'tool_calls' as const,
      rows: [{ tokenIds: [1], text: '', finishReason: 'tool_calls' as const, toolCalls: [call] }],
      promptTokens: 1,
      reusedTokens: 0,
      bpt: 1,
      kvBytes: 1,
      reservedBytes: 1,
      timings: { queueMs: 0, ttftMs: 0, totalMs: 0, tokensPerSecond: 0 },
    };
    const body = completionBody('chat', { id: 'x', created: 0, model: 'm' }, result, usageOf(result, 1)) as {
      choices: Array<{ message: unknown; finish_reason: string }>;
    };
    expect(body.choices[0]).toMatchObject({
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } }],
      },
      finish_reason: 'tool_calls',
    });
    expect(toolCallsChoice(0, [call, { ...call, id: 'call_2' }], 3)).toEqual({
      index: 0,
      delta: {
        tool_calls: [
          { index: 3, id: 'call_1', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } },
          { index: 4, id: 'call_2', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } },
        ],
      },
      logprobs: null,
      finish_reason: null,
    });
  });

  it('lets harmless defaults through', () => {
    expect(() =>
      mapOpenAiRequest(
        'chat',
        chat({
          frequency_penalty: 0,
          presence_penalty: 0,
          tools: [],
          tool_choice: 'none',
          logprobs: false,
          response_format: { type: 'text' },
          user: 'u',
        }),
      ),
    ).not.toThrow();
  });
});

describe('toolCallDeltasChoice', () => {
  it('sends one entry per call in a chunk: pieces of one call are joined, a new call starts its own', () => {
    const choice = toolCallDeltasChoice(0, [
      { index: 0, id: 'call_a', name: 'f', arguments: '{' },
      { index: 0, arguments: '"x"' },
      { index: 0, arguments: ': 1}' },
      { index: 1, id: 'call_b', name: 'g', arguments: '' },
      { index: 1, arguments: '{}' },
    ]);
    expect(choice.delta).toEqual({
      tool_calls: [
        { index: 0, id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"x": 1}' } },
        { index: 1, id: 'call_b', type: 'function', function: { name: 'g', arguments: '{}' } },
      ],
    });
    // A chunk that goes on with a call begun earlier carries its index and the new text only.
    expect(
      toolCallDeltasChoice(0, [
        { index: 1, arguments: '{' },
        { index: 1, arguments: '}' },
      ]).delta,
    ).toEqual({
      tool_calls: [{ index: 1, function: { arguments: '{}' } }],
    });
  });
});

describe('errorFromInfo', () => {
  it('names a message of the host request where the client wrote it, in its API’s names', () => {
    const answersNone = {
      code: 'BAD_REQUEST' as const,
      message: 'messages[2] is the result of call id "zz", but the assistant turn before it made no call with that id.',
      detail: { field: 'messages[2].toolCallId' },
    };
    const chat = errorFromInfo(answersNone, { prompt: 'messages' }).body.error;
    expect(chat.param).toBe('messages[2].tool_call_id');
    expect(chat.field).toBeUndefined();
    expect(chat.message).toMatch(/^messages\[2\] is the result/);
    // Responses: the instructions came first; input[1] was the result.
    const origins = [
      { path: 'instructions' },
      { path: 'input[0]' },
      { path: 'input[1]', toolCallId: 'input[1].call_id' },
    ];
    const responses = errorFromInfo(answersNone, { prompt: 'input', api: 'responses', origins }).body.error;
    expect(responses.param).toBe('input[1].call_id');
    expect(responses.message).toMatch(/^input\[1\] is the result of call id "zz"/);
    // Anthropic: a call left unanswered, in a tool_use block.
    const open = {
      code: 'BAD_REQUEST' as const,
      message:
        'messages[1].toolCalls[1] (id "t2") has no tool result before messages[2]: send its result (for call id "t2") right after the assistant turn that made the call.',
      detail: { field: 'messages[1].toolCalls[1]' },
    };
    const anthropicOrigins = [
      { path: 'system' },
      { path: 'messages[0]', calls: ['messages[0].content[1]', 'messages[0].content[2]'] },
      { path: 'messages[1]' },
    ];
    const anthropic = errorFromInfo(open, { prompt: 'messages', api: 'anthropic', origins: anthropicOrigins }).body
      .error;
    expect(anthropic.param).toBe('messages[0].content[2]');
    expect(anthropic.message).toMatch(
      /^messages\[0\]\.content\[2\] \(id "t2"\) has no tool result before messages\[1\]:/,
    );
    const args = errorFromInfo(
      { code: 'BAD_REQUEST', message: 'bad', detail: { field: 'messages[1].toolCalls[0].arguments' } },
      { prompt: 'messages', api: 'anthropic', origins: anthropicOrigins },
    );
    expect(args.body.error.param).toBe('messages[0].content[1].input');
  });

  it('speaks the API’s names for the fields a host refusal mentions', () => {
    const hint = { prompt: 'messages' };
    const topP = errorFromInfo(
      {
        code: 'BAD_REQUEST',
        message: 'invalid generate request: field sampling.topP: Too small: expected number to be >0',
        detail: { field: 'sampling.topP' },
      },
      hint,
    ).body.error;
    expect(topP).toMatchObject({ param: 'top_p', message: 'invalid top_p: Too small: expected number to be >0' });
    const bias = errorFromInfo(
      {
        code: 'BAD_REQUEST',
        message: 'sampling.logitBias (logit_bias): token id 999999 is outside the vocabulary',
        detail: { field: 'sampling.logitBias' },
      },
      hint,
    ).body.error;
    expect(bias).toMatchObject({
      param: 'logit_bias',
      message: 'logit_bias: token id 999999 is outside the vocabulary',
    });
    const choice = {
      code: 'BAD_REQUEST' as const,
      message: 'toolChoice (tool_choice) names "x"',
      detail: { field: 'toolChoice' },
    };
    expect(errorFromInfo(choice, { prompt: 'input', api: 'responses' }).body.error.message).toBe(
      'tool_choice names "x"',
    );
    const json = {
      code: 'BAD_REQUEST' as const,
      message:
        'This model (gpt-oss) writes JSON output in its final message, where it cannot call a tool: send tools or JSON output (responseFormat / jsonSchema), or toolChoice (tool_choice) "none" for the JSON alone.',
      detail: { field: 'tools' },
    };
    expect(errorFromInfo(json, hint).body.error.message).toMatch(
      /send tools or JSON output \(response_format\), or tool_choice "none" for the JSON alone\.$/,
    );
    expect(errorFromInfo(json, { prompt: 'input', api: 'responses' }).body.error.message).toMatch(
      /or tool_choice "none" for the JSON alone\.$/,
    );
    // Anthropic's choice is an object: what to send, as it is sent there.
    expect(errorFromInfo(json, { prompt: 'messages', api: 'anthropic' }).body.error.message).toMatch(
      /\(output_config\.format\), or tool_choice \{"type": "none"\} for the JSON alone\.$/,
    );
    // A tool's schema where each API keeps it: the message and its param agree.
    const object = {
      code: 'BAD_REQUEST' as const,
      message: 'tools[0].parameters ("f") must describe an object',
      detail: { field: 'tools[0].parameters.type' },
    };
    expect(errorFromInfo(object, hint).body.error).toMatchObject({
      param: 'tools[0].function.parameters.type',
      message: 'tools[0].function.parameters ("f") must describe an object',
    });
    expect(errorFromInfo(object, { prompt: 'messages', api: 'anthropic' }).body.error).toMatchObject({
      param: 'tools[0].input_schema.type',
      message: 'tools[0].input_schema ("f") must describe an object',
    });
    // The prompt as a whole is the API's prompt parameter; Ollama's errors keep the host's words.
    const empty = { code: 'BAD_REQUEST' as const, message: 'the prompt is empty', detail: { field: 'messages' } };
    expect(errorFromInfo(empty, { prompt: 'input', api: 'responses' }).body.error.param).toBe('input');
    expect(errorFromInfo(choice, { prompt: 'messages', rename: false }).body.error.message).toBe(choice.message);
    // A completion's prompt, in whichever form it came.
    for (const field of ['promptIds[0]', 'promptIdRows[1][2]', 'prompts']) {
      const e = errorFromInfo({ code: 'BAD_REQUEST', message: 'm', detail: { field } }, { prompt: 'prompt' });
      expect(e.body.error.param, field).toBe(field.replace(/^\w+/, 'prompt'));
    }
  });

  it('maps context overflow to 400 context_length_exceeded with n_prompt_tokens and n_ctx', () => {
    const e = errorFromInfo(
      {
        code: 'CONTEXT_OVERFLOW',
        message: 'too long',
        detail: { promptTokens: 3000, contextLength: 2048, sessionTokens: 0 },
      },
      { prompt: 'prompt' },
    );
    expect(e.status).toBe(400);
    expect(e.body.error).toEqual({
      // OpenAI's words, which clients match ("maximum context length"), the numbers once, and what to do with a
      // prompt (the host's words, which say the numbers again and speak of chats, left out).
      message:
        "This model's maximum context length is 2048 tokens. However, your prompt resulted in 3000 tokens, which leaves no room for a reply. Shorten the prompt, or use a model with a longer context.",
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      param: 'prompt',
      n_prompt_tokens: 3000,
      n_ctx: 2048,
      session_tokens: 0,
      kvdesk_code: 'CONTEXT_OVERFLOW',
    });
    // A session's tokens count with the prompt's; the Responses API's prompt is its input.
    const info = {
      code: 'CONTEXT_OVERFLOW' as const,
      message: 'too long',
      detail: { promptTokens: 40, contextLength: 64, sessionTokens: 30 },
    };
    expect(errorFromInfo(info, { prompt: 'input', api: 'responses' }).body.error).toMatchObject({
      message:
        'This model\'s maximum context length is 64 tokens. However, your input resulted in 70 tokens, which leaves no room for a reply. Shorten the input, or leave out the oldest turns ("truncation": "auto" has kvdesk do that).',
    });
    // Anthropic's route says it in Anthropic's words; Ollama's keeps the host's.
    const anthropic = errorFromInfo(info, { prompt: 'messages', api: 'anthropic' });
    expect(anthropic.body.error).toMatchObject({ message: 'too long' });
    expect(anthropicError(anthropic).body.error).toMatchObject({
      type: 'invalid_request_error',
      message: 'prompt is too long: 70 tokens > 63 maximum. Shorten the messages, or leave out the oldest turns.',
    });
    expect(errorFromInfo(info, { prompt: 'messages', rename: false }).body.error).toMatchObject({
      message: 'too long',
    });
    // Another 400 keeps its message in Anthropic's shape.
    const other = errorFromInfo({ code: 'BAD_REQUEST', message: 'no' }, { prompt: 'messages', api: 'anthropic' });
    expect(anthropicError(other).body.error).toMatchObject({ message: 'no' });
  });

  it('maps budget refusals to 400 kv_budget_exceeded with required_bytes and budget_bytes', () => {
    const e = errorFromInfo({
      code: 'KV_BUDGET_EXCEEDED',
      message: 'm',
      detail: { requiredBytes: 11, budgetBytes: 8, bpt: 1, promptTokens: 10, rows: 1 },
    });
    expect(e.status).toBe(400);
    expect(e.body.error).toMatchObject({
      code: 'kv_budget_exceeded',
      required_bytes: 11,
      budget_bytes: 8,
      bpt: 1,
      n_prompt_tokens: 10,
      rows: 1,
      param: null,
    });
  });

  it('maps a full queue to 429 with Retry-After in whole seconds (at least 1)', () => {
    const e = errorFromInfo({
      code: 'QUEUE_FULL',
      message: 'm',
      detail: { retryAfterMs: 2300, queueLength: 4, maxQueue: 4 },
    });
    expect(e.status).toBe(429);
    expect(e.headers['retry-after']).toBe('3');
    expect(e.body.error).toMatchObject({ type: 'rate_limit_error', code: 'queue_full', queue_length: 4, max_queue: 4 });
    expect(
      errorFromInfo({ code: 'QUEUE_FULL', message: 'm', detail: { retryAfterMs: 10 } }).headers['retry-after'],
    ).toBe('1');
    expect(errorFromInfo({ code: 'QUEUE_FULL', message: 'm' }).headers['retry-after']).toBe('1');
    expect(errorFromInfo({ code: 'BAD_REQUEST', message: 'm' }).headers['retry-after']).toBeUndefined();
  });

  it('maps the other codes to their statuses', () => {
    const status = (code: Parameters<typeof errorFromInfo>[0]['code']) => errorFromInfo({ code, message: 'm' }).status;
    expect(status('MODEL_NOT_LOADED')).toBe(404);
    expect(errorFromInfo({ code: 'MODEL_NOT_LOADED', message: 'm' }, { prompt: 'messages' }).body.error).toMatchObject({
      code: 'model_not_found',
      param: 'model',
    });
    expect(status('BAD_REQUEST')).toBe(400);
    expect(status('TOKEN_OUT_OF_VOCAB')).toBe(400);
    expect(status('PACKAGE_INVALID')).toBe(422);
    expect(status('SESSION_INVALID')).toBe(409);
    expect(status('ENGINE_FAILED')).toBe(500);
    expect(status('INTERNAL')).toBe(500);
    expect(status('TIMEOUT')).toBe(504);
    expect(status('CANCELLED')).toBe(503);
    expect(errorFromInfo({ code: 'ENGINE_FAILED', message: 'm' }).body.error.type).toBe('server_error');
  });
});

describe('responses', () => {
  const result: GenerationResult = {
    requestId: 'r1',
    modelId: 'm',
    tokenIds: [1, 2],
    text: 'ab',
    finishReason: 'eos',
    rows: [
      { tokenIds: [1, 2], text: 'ab', finishReason: 'eos' },
      { tokenIds: [3, 4, 5], text: 'cde', finishReason: 'length' },
    ],
    promptTokens: 4,
    reusedTokens: 0,
    bpt: 8,
    kvBytes: 56,
    reservedBytes: 64,
    budgetCap: {
      requestedMaxTokens: 9,
      admittedMaxTokens: 4,
      requestedBytes: 104,
      admittedBytes: 64,
      availableBytes: 64,
    },
    timings: { queueMs: 1, ttftMs: 2, totalMs: 3, tokensPerSecond: 4 },
  };

  it('say why a prediction went unused, and what to do, for each reason', () => {
    const said = (predictionUnused: NonNullable<GenerationResult['predictionUnused']>) =>
      (kvdeskExtras({ ...result, predictionUnused }) as { prediction_unused: { reason: string; message: string } })
        .prediction_unused;
    expect(said({ reason: 'lookup_off' })).toEqual({
      reason: 'lookup_off',
      message: expect.stringMatching(/--lookup 0/),
    });
    const unavailable = said({ reason: 'lookup_unavailable', detail: 'its KV cache is static' });
    expect(unavailable.reason).toBe('lookup_unavailable');
    expect(unavailable.message).toMatch(/cannot run on this model: its KV cache is static; so the prediction/);
    const batched = said({ reason: 'batched' });
    expect(batched.reason).toBe('batched');
    expect(batched.message).toMatch(/beside other requests .* no other reply under way/);
    expect(kvdeskExtras(result).prediction_unused).toBeUndefined();
  });

  it('map finish reasons: the reply ended by itself → stop, ran out of room → length', () => {
    expect(openAiFinishReason('eos')).toBe('stop');
    expect(openAiFinishReason('stop')).toBe('stop');
    expect(openAiFinishReason('length')).toBe('length');
    expect(openAiFinishReason('context')).toBe('length');
  });

  it('count usage over every row, the prompt once', () => {
    expect(usageOf(result, 4)).toEqual({
      prompt_tokens: 4,
      completion_tokens: 5,
      total_tokens: 9,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    expect(usageOf({ ...result, reusedTokens: 3 }, 4).prompt_tokens_details).toEqual({ cached_tokens: 3 });
  });

  it('build a chat body with one choice per row and the budget cap', () => {
    const body = completionBody('chat', { id: 'chatcmpl-r1', created: 5, model: 'm' }, result, usageOf(result, 4));
    expect(body).toMatchObject({
      id: 'chatcmpl-r1',
      object: 'chat.completion',
      choices: [
        { index: 0, message: { role: 'assistant', content: 'ab' }, finish_reason: 'stop' },
        { index: 1, message: { role: 'assistant', content: 'cde' }, finish_reason: 'length' },
      ],
      kvdesk: {
        request_id: 'r1',
        reserved_bytes: 64,
        budget_cap: {
          requested_max_tokens: 9,
          admitted_max_tokens: 4,
          requested_bytes: 104,
          admitted_bytes: 64,
          available_bytes: 64,
        },
      },
    });
    const text = completionBody('completion', { id: 'cmpl-r1', created: 5, model: 'm' }, result, usageOf(result, 4));
    expect(text).toMatchObject({
      object: 'text_completion',
      choices: [
        { index: 0, text: 'ab' },
        { index: 1, text: 'cde' },
      ],
    });
  });

  it('write logprobs as OpenAI does: chat content entries, completions arrays with the chosen token in top_logprobs', () => {
    const tokens = [
      {
        id: 1,
        token: ' a',
        bytes: [32, 97],
        logprob: -0.5,
        textOffset: 0,
        top: [
          { id: 2, token: ' b', bytes: [32, 98], logprob: -0.25 },
          { id: 1, token: ' a', bytes: [32, 97], logprob: -0.5 },
        ],
      },
      {
        id: 3,
        token: '\ufffd',
        bytes: [0xe2],
        logprob: -2,
        textOffset: 2,
        top: [{ id: 4, token: 'x', bytes: [120], logprob: -1 }],
      },
    ];
    expect(logprobsJson('chat', tokens)).toEqual({
      content: [
        {
          token: ' a',
          logprob: -0.5,
          bytes: [32, 97],
          top_logprobs: [
            { token: ' b', logprob: -0.25, bytes: [32, 98] },
            { token: ' a', logprob: -0.5, bytes: [32, 97] },
          ],
        },
        { token: '\ufffd', logprob: -2, bytes: [0xe2], top_logprobs: [{ token: 'x', logprob: -1, bytes: [120] }] },
      ],
      refusal: null,
    });
    expect(logprobsJson('completion', tokens)).toEqual({
      tokens: [' a', 'bytes:\\xe2'],
      token_logprobs: [-0.5, -2],
      top_logprobs: [
        { ' b': -0.25, ' a': -0.5 },
        { x: -1, 'bytes:\\xe2': -2 },
      ],
      text_offset: [0, 2],
    });
    expect(logprobsJson('chat', undefined)).toBeNull();
    const withLogprobs = { ...result, rows: result.rows.map((r, i) => (i === 0 ? { ...r, logprobs: tokens } : r)) };
    const body = completionBody('chat', { id: 'c', created: 5, model: 'm' }, withLogprobs, usageOf(result, 4));
    const choices = body.choices as Array<Record<string, unknown>>;
    expect(choices[0]?.logprobs).toEqual(logprobsJson('chat', tokens));
    expect(choices[1]?.logprobs).toBeNull();
  });

  it("name a completion's pieces of characters by their bytes, each its own key, the chosen token's logprob its own", () => {
    const piece = (id: number, bytes: number[], logprob: number) => ({
      id,
      token: Buffer.from(bytes).toString('utf8'),
      bytes,
      logprob,
    });
    const alts = [
      piece(10, [0xe2, 0x80], -1),
      piece(11, [0x99], -1.5),
      piece(12, [0x20, 0xf0, 0x9f], -2),
      // A whole character, even U+FFFD itself, is its text.
      piece(13, [0xef, 0xbf, 0xbd], -2.5),
      piece(14, [0xc3, 0xa9], -3),
      // Keys an object's prototype would hide.
      piece(15, [...Buffer.from('constructor')], -3.5),
      piece(16, [...Buffer.from('__proto__')], -4),
    ];
    // The chosen token is the second piece (not the first with U+FFFD as its text), then one outside the top.
    const tokens = [
      { ...piece(11, [0x99], -1.5), textOffset: 0, top: alts },
      { ...piece(17, [0xa9], -9), textOffset: 1, top: alts },
    ];
    const lp = logprobsJson('completion', tokens) as { tokens: string[]; top_logprobs: Array<Record<string, number>> };
    expect(lp.tokens).toEqual(['bytes:\\x99', 'bytes:\\xa9']);
    const top = [
      ['bytes:\\xe2\\x80', -1],
      ['bytes:\\x99', -1.5],
      ['bytes:\\x20\\xf0\\x9f', -2],
      ['\ufffd', -2.5],
      ['é', -3],
      ['constructor', -3.5],
      ['__proto__', -4],
    ];
    // (As the client reads the JSON: JSON.parse makes "__proto__" a key like the others.)
    const [first, second] = lp.top_logprobs.map((m) => Object.entries(JSON.parse(JSON.stringify(m))));
    expect(first).toEqual(top);
    expect(second).toEqual([...top, ['bytes:\\xa9', -9]]);
  });

  it('name a SentencePiece byte token by its bytes where another token has its text: each its own key and logprob', () => {
    type TP = { id: number; token: string; bytes: number[]; byte?: true };
    // A SentencePiece vocabulary's h and <0x68>, e and <0x65>: the same text and bytes, as its tokenizer gives them.
    const tok = createTextTokenizer({ tokenizerJson: byteFallbackTokenizerJson(), vocabSize: 270 });
    const piece = (raw: string) => ({
      id: tok.tokenToId(raw) as number,
      ...tok.tokenPiece(tok.tokenToId(raw) as number),
    });
    const [a, byteA, b, byteB] = ['h', '<0x68>', 'e', '<0x65>'].map(piece) as [TP, TP, TP, TP];
    const tokens = [
      // The byte token the likelier: still its bytes, A its text.
      {
        ...a,
        logprob: -1,
        textOffset: 0,
        top: [
          { ...byteA, logprob: -0.5 },
          { ...a, logprob: -1 },
          { ...b, logprob: -2 },
        ],
      },
      // The byte token chosen, A among the alternatives: the chosen token is named by its bytes in tokens too.
      {
        ...byteA,
        logprob: -0.7,
        textOffset: 1,
        top: [
          { ...a, logprob: -0.6 },
          { ...b, logprob: -3 },
        ],
      },
      // No other token with its text: a byte token is its text, as before.
      {
        ...byteB,
        logprob: -0.1,
        textOffset: 2,
        top: [
          { ...byteB, logprob: -0.1 },
          { ...a, logprob: -4 },
        ],
      },
    ];
    const lp = logprobsJson('completion', tokens) as { tokens: string[]; top_logprobs: Array<Record<string, number>> };
    expect(lp.tokens).toEqual(['h', 'bytes:\\x68', 'e']);
    expect(lp.top_logprobs).toEqual([
      { 'bytes:\\x68': -0.5, h: -1, e: -2 },
      { h: -0.6, e: -3, 'bytes:\\x68': -0.7 },
      { e: -0.1, h: -4 },
    ]);
  });
});
