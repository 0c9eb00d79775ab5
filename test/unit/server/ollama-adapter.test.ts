import { describe, expect, it } from 'vitest';
import { errorFromInfo } from '../../../src/main/server/http-util';
import {
  chatMessages,
  doneReason,
  loadReply,
  mapOllamaRequest,
  ollamaChunk,
  ollamaError,
  ollamaFinalChunk,
  ollamaReply,
  psJson,
  replyMetrics,
  resolveModel,
  showJson,
  tagJson,
} from '../../../src/main/server/ollama-adapter';
import { mapOpenAiRequest } from '../../../src/main/server/openai-adapter';
import type { ModelInfo } from '../../../src/shared/api';
import type { GenerationResult } from '../../../src/shared/contract';
import type { ModelSpec } from '../../../src/shared/model-spec';
import { refusal } from '../../helpers/rejection';

const chat = (extra: Record<string, unknown> = {}) =>
  mapOllamaRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

describe('mapOllamaRequest: /api/chat', () => {
  it('a conversation that ends with an assistant message is a reply to continue, as Ollama', () => {
    const m = chat({
      messages: [
        { role: 'user', content: 'x' },
        { role: 'assistant', content: 'Once' },
      ],
    });
    expect(m.request).toMatchObject({ continueFinal: true });
    expect(chat().request).not.toHaveProperty('continueFinal');
  });

  it('streams by default, keeps the conversation and caches its prompt', () => {
    const m = chat();
    expect(m).toMatchObject({ kind: 'chat', model: 'm', stream: true });
    expect(m.request).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      promptCache: true,
      // Ollama's window for the repetition penalty (the package's, when it has one).
      sampling: { repetitionWindow: 64 },
      // As Ollama: a conversation longer than the context loses its oldest turns.
      contextOverflow: 'drop-oldest',
    });
    expect(chat({ stream: false }).stream).toBe(false);
  });

  it('maps options to sampling under the contract names', () => {
    const m = chat({
      options: {
        temperature: 0.5,
        top_p: 0.9,
        top_k: 40,
        min_p: 0.05,
        seed: 7,
        num_predict: 12,
        stop: ['END', ''],
        repeat_penalty: 1.2,
        frequency_penalty: 0.5,
        presence_penalty: -0.5,
      },
    });
    expect(m.request?.maxNewTokens).toBe(12);
    expect(m.request?.stop).toEqual(['END']);
    expect(m.request?.sampling).toEqual({
      temperature: 0.5,
      topP: 0.9,
      topK: 40,
      minP: 0.05,
      seed: 7,
      repetitionPenalty: 1.2,
      // Ollama's default window for the repetition penalty.
      repetitionWindow: 64,
      frequencyPenalty: 0.5,
      presencePenalty: -0.5,
    });
  });

  it('num_predict below 1 leaves the length to the context; seed -1 is a random one; top_k ≤ 0 is none', () => {
    for (const n of [-1, -2, 0, -3])
      expect(chat({ options: { num_predict: n } }).request?.maxNewTokens).toBe(1_000_000);
    // Beyond kvdesk's longest reply: kept as asked, for runGeneration to ask the longest and name it in the clip.
    expect(chat({ options: { num_predict: 5_000_000 } }).request?.maxNewTokens).toBe(5_000_000);
    expect(chat({ options: { seed: -1 } }).request?.sampling).toEqual({ repetitionWindow: 64 });
    // Up to the largest exact integer, the seed itself; any other integer (Ollama's is an int64) is a seed too, as
    // the OpenAI endpoints map it.
    const max = Number.MAX_SAFE_INTEGER;
    expect(chat({ options: { seed: max } }).request?.sampling).toEqual({ seed: max, repetitionWindow: 64 });
    for (const seed of [-2, 2 ** 53, 2 ** 63])
      expect(chat({ options: { seed } }).request?.sampling?.seed).toBe(
        mapOpenAiRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], seed }).request.sampling
          ?.seed,
      );
    expect(refusal(() => chat({ options: { seed: 1.5 } })).message).toBe('"options.seed" must be an integer, got 1.5.');
    expect(chat({ options: { top_k: -1 } }).request?.sampling).toEqual({ topK: 0, repetitionWindow: 64 });
    expect(chat({ options: { temperature: null } }).request?.sampling).toEqual({ repetitionWindow: 64 });
  });

  it('accepts and ignores the options that only tell Ollama how to load a model, and ones it does not know', () => {
    const m = chat({ options: { num_ctx: 8192, num_gpu: 99, num_thread: 4, use_mmap: true, mirostat: 0 } });
    expect(m.request).toEqual(chat().request);
    // As Ollama ignores an option it does not know (clients pass their own through, e.g. embedding_only).
    expect(chat({ options: { embedding_only: false, new_topic_penalty: 1, temprature: 0.2 } }).request).toEqual(
      chat().request,
    );
    expect(chat({ keep_alive: '5m' }).request).toEqual(chat().request);
  });

  it('repeat_last_n: the window of the repetition penalty (64 unless told), -1 all tokens, 0 off', () => {
    const sampling = (options: Record<string, unknown>) => chat({ options }).request?.sampling;
    expect(sampling({ repeat_penalty: 1.3 })).toEqual({ repetitionPenalty: 1.3, repetitionWindow: 64 });
    expect(sampling({ repeat_penalty: 1.3, repeat_last_n: 8 })).toEqual({
      repetitionPenalty: 1.3,
      repetitionWindow: 8,
    });
    expect(sampling({ repeat_penalty: 1.3, repeat_last_n: -1 })).toEqual({
      repetitionPenalty: 1.3,
      repetitionWindow: 0,
    });
    expect(sampling({ repeat_penalty: 1.3, repeat_last_n: 0 })).toMatchObject({ repetitionPenalty: 1 });
    for (const bad of [-2, 1.5, 'all', 2_000_000]) {
      expect(refusal(() => chat({ options: { repeat_last_n: bad } })).body.error.param).toBe('options.repeat_last_n');
    }
  });

  it('think: on, off, or a level (on); thinking in an assistant message is its reasoning; raw prompts are text', () => {
    expect(chat({ think: true }).request?.thinking).toBe(true);
    expect(chat({ think: false }).request?.thinking).toBe(false);
    expect(chat({ think: 'low' }).request?.thinking).toBe(true);
    expect(chat({ think: 'low' }).request?.reasoningEffort).toBe('low');
    expect(chat({ think: 'high' }).request?.reasoningEffort).toBe('high');
    expect(chat({ think: true }).request).not.toHaveProperty('reasoningEffort');
    expect(chat({ think: null }).request?.thinking).toBeUndefined();
    expect(chat().request?.thinking).toBeUndefined();
    const history = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'Hello.', thinking: 'A greeting.' },
      { role: 'user', content: 'and?' },
    ];
    expect(chat({ messages: history }).request?.messages?.[1]).toEqual({
      role: 'assistant',
      content: 'Hello.',
      reasoning: 'A greeting.',
    });
    expect(mapOllamaRequest('generate', { model: 'm', prompt: 'x', think: false }).request?.thinking).toBe(false);
    expect(mapOllamaRequest('generate', { model: 'm', prompt: 'x', raw: true, think: false }).request?.thinking).toBe(
      undefined,
    );
  });

  it('format "json" is JSON mode, a schema object structured output, "" plain text', () => {
    expect(chat({ format: 'json' }).request?.responseFormat).toBe('json');
    const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
    expect(chat({ format: schema }).request?.jsonSchema).toEqual(schema);
    const plain = chat({ format: '' }).request;
    expect(plain?.responseFormat).toBeUndefined();
    expect(plain?.jsonSchema).toBeUndefined();
  });

  it('maps tools, and an empty message list is a load with nothing to generate', () => {
    const m = chat({ tools: [weather] });
    expect(m.request?.tools).toEqual([
      { name: 'get_weather', description: 'Weather of a city', parameters: weather.function.parameters },
    ]);
    // With a format: the reply is calls or the JSON (the host decides whether it can be either).
    expect(chat({ tools: [weather], format: 'json' }).request).toMatchObject({ responseFormat: 'json', tools: [{}] });
    expect(mapOllamaRequest('chat', { model: 'm', messages: [] }).request).toBeNull();
    expect(mapOllamaRequest('chat', { model: 'm' }).request).toBeNull();
  });

  it('takes top_p 0 as the likeliest token alone, as the OpenAI and Anthropic routes do (and Ollama: one token kept)', () => {
    expect(chat({ options: { top_p: 0 } }).request?.sampling).toEqual({ repetitionWindow: 64, topP: 0 });
    expect(mapOllamaRequest('generate', { model: 'm', prompt: 'hi', options: { top_p: 0 } }).request?.sampling).toEqual(
      { repetitionWindow: 64, topP: 0 },
    );
  });

  it('refuses bad input with a 400 naming the field', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ model: undefined }, 'model'],
      [{ stream: 'yes' }, 'stream'],
      [{ think: 'max' }, 'think'],
      [{ think: 1 }, 'think'],
      [{ format: 'xml' }, 'format'],
      [{ options: 'hot' }, 'options'],
      [{ options: { temperature: 'hot' } }, 'options.temperature'],
      [{ options: { temperature: -1 } }, 'options.temperature'],
      [{ options: { top_p: 1.5 } }, 'options.top_p'],
      [{ options: { top_p: -0.1 } }, 'options.top_p'],
      [{ options: { top_k: 1.5 } }, 'options.top_k'],
      [{ options: { num_predict: 1.5 } }, 'options.num_predict'],
      [{ options: { stop: [1] } }, 'options.stop'],
      [{ options: { frequency_penalty: 3 } }, 'options.frequency_penalty'],
      [{ options: { mirostat: 2 } }, 'options.mirostat'],
      [{ options: { typical_p: 0.7 } }, 'options.typical_p'],
      [{ messages: 'hi' }, 'messages'],
      [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
      [{ messages: [{ role: 'user', content: 3 }] }, 'messages[0].content'],
      [{ messages: [{ role: 'user', content: 'x', images: ['aGk='] }] }, 'messages[0].images'],
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: [] } }] }, 'tools[0].function.parameters'],
    ];
    for (const [extra, param] of cases) {
      const err = refusal(() => chat(extra));
      expect(err.status, JSON.stringify(extra)).toBe(400);
      expect(err.body.error.param, JSON.stringify(extra)).toBe(param);
      expect(err.message).toContain(param.replace(/^body$/, ''));
    }
    expect(refusal(() => mapOllamaRequest('chat', [])).body.error.param).toBe('body');
  });
});

describe('chatMessages: tool history without call ids', () => {
  const call = (name: string, args: unknown) => ({ function: { name, arguments: args } });

  it('gives each call an id and the tool messages after it answer them in order', () => {
    const turns = chatMessages([
      { role: 'user', content: 'Weather in Oslo and Paris?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [call('get_weather', { city: 'Oslo' }), call('get_weather', '{"city":"Paris"}')],
      },
      { role: 'tool', content: 'cold' },
      { role: 'tool', content: 'mild' },
      { role: 'assistant', content: 'Cold and mild.' },
      { role: 'user', content: 'And Rome?' },
      { role: 'assistant', content: '', tool_calls: [call('get_weather', { city: 'Rome' })] },
      { role: 'tool', tool_name: 'get_weather', content: 'warm' },
    ]);
    expect(turns[1]?.toolCalls).toEqual([
      { id: 'call_1_0', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { id: 'call_1_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    ]);
    expect(turns[2]).toEqual({ role: 'tool', content: 'cold', toolCallId: 'call_1_0', name: 'get_weather' });
    expect(turns[3]).toEqual({ role: 'tool', content: 'mild', toolCallId: 'call_1_1', name: 'get_weather' });
    expect(turns[7]).toEqual({ role: 'tool', content: 'warm', toolCallId: 'call_6_0', name: 'get_weather' });
  });

  it('a tool_name answers the first unanswered call of that name; a client id is kept and answered by tool_call_id', () => {
    const turns = chatMessages([
      { role: 'user', content: 'go' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [call('a', {}), { id: 'call_xyz', function: { name: 'b', arguments: {} } }],
      },
      { role: 'tool', tool_name: 'b', content: 'B' },
      { role: 'tool', tool_name: 'a', content: 'A' },
    ]);
    expect(turns[1]?.toolCalls?.map((c) => c.id)).toEqual(['call_1_0', 'call_xyz']);
    expect(turns[2]).toMatchObject({ toolCallId: 'call_xyz', name: 'b' });
    expect(turns[3]).toMatchObject({ toolCallId: 'call_1_0', name: 'a' });
    const byId = chatMessages([
      { role: 'user', content: 'go' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { id: 'k1', ...call('a', {}) },
          { id: 'k2', ...call('a', {}) },
        ],
      },
      { role: 'tool', tool_call_id: 'k2', content: '2' },
      { role: 'tool', tool_call_id: 'k1', content: '1' },
    ]);
    expect(byId.slice(2).map((t) => t.toolCallId)).toEqual(['k2', 'k1']);
    // A history whose calls lost their ids (ollama-python drops them) still pairs results kept with an id: by
    // name, else in order. Roles are read as Ollama reads them, in any case.
    const lost = chatMessages([
      { role: 'User', content: 'go' },
      { role: 'ASSISTANT', content: '', tool_calls: [call('a', {}), call('b', {})] },
      { role: 'tool', tool_call_id: 'call_from_reply_1', tool_name: 'b', content: 'B' },
      { role: 'tool', tool_call_id: 'call_from_reply_0', content: 'A' },
    ]);
    expect(lost.map((t) => t.role)).toEqual(['user', 'assistant', 'tool', 'tool']);
    expect(lost.slice(2).map((t) => t.toolCallId)).toEqual(['call_1_1', 'call_1_0']);
  });

  it('refuses a result that answers no call, a call left unanswered and arguments that are no object', () => {
    const lone = refusal(() =>
      chatMessages([
        { role: 'user', content: 'x' },
        { role: 'tool', tool_name: 'a', content: 'r' },
      ]),
    );
    expect(lone.body.error.param).toBe('messages[1]');
    expect(lone.message).toMatch(/answers no call/);
    const wrongName = refusal(() =>
      chatMessages([
        { role: 'user', content: 'x' },
        { role: 'assistant', content: '', tool_calls: [call('a', {})] },
        { role: 'tool', tool_name: 'b', content: 'r' },
      ]),
    );
    expect(wrongName.body.error.param).toBe('messages[2]');
    expect(wrongName.message).toMatch(/still unanswered: a/);
    const open = refusal(() =>
      chatMessages([
        { role: 'user', content: 'x' },
        { role: 'assistant', content: '', tool_calls: [call('a', {})] },
        { role: 'user', content: 'y' },
      ]),
    );
    expect(open.body.error.param).toBe('messages[1].tool_calls[0]');
    expect(open.message).toMatch(/before messages\[2\]/);
    const atEnd = refusal(() =>
      chatMessages([
        { role: 'user', content: 'x' },
        { role: 'assistant', content: '', tool_calls: [call('a', {})] },
      ]),
    );
    expect(atEnd.message).toMatch(/before the reply/);
    for (const args of ['[1]', 3, '{broken']) {
      const err = refusal(() =>
        chatMessages([
          { role: 'user', content: 'x' },
          { role: 'assistant', content: '', tool_calls: [call('a', args)] },
          { role: 'tool', content: 'r' },
        ]),
      );
      expect(err.body.error.param).toBe('messages[1].tool_calls[0].function.arguments');
    }
  });
});

describe('mapOllamaRequest: /api/generate', () => {
  it('templated: one user turn under the system prompt; raw: the prompt as written', () => {
    const t = mapOllamaRequest('generate', { model: 'm', prompt: 'Hi', system: 'Be brief.', options: { seed: 1 } });
    expect(t.request).toEqual({
      model: 'm',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ],
      promptCache: true,
      sampling: { seed: 1, repetitionWindow: 64 },
    });
    const r = mapOllamaRequest('generate', { model: 'm', prompt: 'Hi', raw: true, options: { num_predict: 3 } });
    expect(r.request).toEqual({
      model: 'm',
      prompt: 'Hi',
      promptCache: true,
      maxNewTokens: 3,
      sampling: { repetitionWindow: 64 },
    });
    expect(mapOllamaRequest('generate', { model: 'm', prompt: '' }).request).toBeNull();
    expect(mapOllamaRequest('generate', { model: 'm' }).request).toBeNull();
  });

  it('refuses suffix, images, context, template and a system beside raw, naming them; empty ones pass', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ suffix: 'return x' }, 'suffix'],
      [{ images: ['aGk='] }, 'images'],
      [{ context: [1, 2, 3] }, 'context'],
      [{ template: '{{ .Prompt }}' }, 'template'],
      [{ raw: true, system: 'sys' }, 'system'],
      [{ prompt: 3 }, 'prompt'],
    ];
    for (const [extra, param] of cases) {
      const err = refusal(() => mapOllamaRequest('generate', { model: 'm', prompt: 'Hi', ...extra }));
      expect(err.body.error.param, JSON.stringify(extra)).toBe(param);
      expect(err.message).toContain(`"${param}"`);
    }
    const fine = mapOllamaRequest('generate', { model: 'm', prompt: 'Hi', suffix: '', images: [], context: [] });
    expect(fine.request).not.toBeNull();
  });
});

describe('keep_alive', () => {
  it('is read as Ollama reads it (parseDuration, tested on its own): ms, null for ever; not a duration, a 400', () => {
    const keep = (keep_alive: unknown) =>
      mapOllamaRequest('chat', { model: 'm', messages: [], keep_alive }).keepAliveMs;
    expect(keep(300)).toBe(300_000);
    expect(keep('1h30m')).toBe(5_400_000);
    expect(keep(-1)).toBeNull();
    expect(mapOllamaRequest('chat', { model: 'm', messages: [] }).keepAliveMs).toBeUndefined();
    for (const bad of ['soon', '', true, {}]) {
      expect(refusal(() => keep(bad)).body.error.param, String(bad)).toBe('keep_alive');
    }
  });

  it('an empty request with keep_alive 0 asks to unload; one with messages or another keep_alive does not', () => {
    expect(mapOllamaRequest('chat', { model: 'm', messages: [], keep_alive: 0 }).unload).toBe(true);
    expect(mapOllamaRequest('generate', { model: 'm', keep_alive: '0s' }).unload).toBe(true);
    expect(mapOllamaRequest('chat', { model: 'm', messages: [] }).unload).toBe(false);
    expect(mapOllamaRequest('chat', { model: 'm', messages: [], keep_alive: '5m' }).unload).toBe(false);
    const chat = mapOllamaRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'hi' }], keep_alive: 0 });
    expect(chat.request).not.toBeNull();
    expect(chat.unload).toBe(false);
  });
});

describe('resolveModel', () => {
  it("takes the id, or the id with Ollama's :latest tag; anything else is a 404 listing what is loaded", () => {
    expect(resolveModel('default', ['default'])).toBe('default');
    expect(resolveModel('default:latest', ['default'])).toBe('default');
    expect(resolveModel('x:latest', ['x:latest', 'x'])).toBe('x:latest');
    const err = refusal(() => resolveModel('llama3.2:3b', ['default', 'other']));
    expect(err.status).toBe(404);
    expect(err.message).toBe(
      'model "llama3.2:3b" not found: kvdesk knows default, other (GET /api/tags lists them; add packages with --model or the UI).',
    );
    expect(ollamaError(err).body).toEqual({ error: err.message });
  });
});

const result = (over: Partial<GenerationResult> = {}): GenerationResult => ({
  requestId: 'r1',
  modelId: 'm',
  tokenIds: [1, 2, 3],
  text: 'abc',
  finishReason: 'length',
  rows: [{ tokenIds: [1, 2, 3], text: 'abc', finishReason: 'length' }],
  promptTokens: 9,
  reusedTokens: 0,
  bpt: 1,
  kvBytes: 1,
  reservedBytes: 1,
  timings: { queueMs: 2, ttftMs: 12, totalMs: 42.5, tokensPerSecond: 10 },
  ...over,
});

describe('replies', () => {
  it('done_reason: stop for a reply that ended itself (also with calls), length when it ran out of room', () => {
    expect(['eos', 'stop', 'tool_calls'].map((r) => doneReason(r as never))).toEqual(['stop', 'stop', 'stop']);
    expect(['length', 'context', 'cancelled'].map((r) => doneReason(r as never))).toEqual([
      'length',
      'length',
      'length',
    ]);
  });

  it('counts and nanosecond durations from the host timings', () => {
    expect(replyMetrics(result())).toEqual({
      total_duration: 42_500_000,
      load_duration: 0,
      prompt_eval_count: 9,
      prompt_eval_duration: 10_000_000,
      eval_count: 3,
      eval_duration: 30_500_000,
    });
    // A request that loaded its model first: the load counts in the total.
    expect(replyMetrics(result(), 120)).toMatchObject({ total_duration: 162_500_000, load_duration: 120_000_000 });
  });

  it('chat and generate bodies, chunks, the final line and the load answer', () => {
    const chatBody = ollamaReply('chat', 'default:latest', result());
    expect(chatBody).toMatchObject({
      model: 'default:latest',
      message: { role: 'assistant', content: 'abc' },
      done: true,
      done_reason: 'length',
      eval_count: 3,
    });
    expect(Number.isNaN(Date.parse(chatBody.created_at as string))).toBe(false);
    expect(ollamaReply('generate', 'm', result())).toMatchObject({ response: 'abc', done: true });
    expect(ollamaChunk('chat', 'm', 'ab')).toMatchObject({
      message: { role: 'assistant', content: 'ab' },
      done: false,
    });
    expect(ollamaChunk('generate', 'm', 'ab')).toMatchObject({ response: 'ab', done: false });
    expect(ollamaFinalChunk('chat', 'm', result())).toMatchObject({
      message: { role: 'assistant', content: '' },
      done: true,
      done_reason: 'length',
      prompt_eval_count: 9,
    });
    expect(loadReply('generate', 'm')).toMatchObject({ response: '', done: true, done_reason: 'load' });
    expect(loadReply('chat', 'm')).toMatchObject({ message: { role: 'assistant', content: '' }, done_reason: 'load' });
  });

  it("tool calls come back in Ollama's form: arguments as an object; white space beside them is no content", () => {
    const calls = [
      { id: 'call_a', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { id: 'call_b', name: 'get_weather', arguments: '{}' },
    ];
    const body = ollamaReply(
      'chat',
      'm',
      result({
        finishReason: 'tool_calls',
        rows: [{ tokenIds: [1], text: '\n', finishReason: 'tool_calls', toolCalls: calls }],
      }),
    );
    expect(body.done_reason).toBe('stop');
    expect(body.message).toEqual({
      role: 'assistant',
      content: '',
      tool_calls: [
        { id: 'call_a', function: { index: 0, name: 'get_weather', arguments: { city: 'Oslo' } } },
        { id: 'call_b', function: { index: 1, name: 'get_weather', arguments: {} } },
      ],
    });
    const streamed = ollamaChunk('chat', 'm', '', calls.slice(1), 1);
    expect(
      (streamed.message as { tool_calls: Array<{ function: { index: number } }> }).tool_calls[0]?.function.index,
    ).toBe(1);
  });
});

describe('ollamaError', () => {
  it('is {"error": message}; a full queue is 503 with Retry-After; host fields get their Ollama name', () => {
    const full = ollamaError(
      errorFromInfo({ code: 'QUEUE_FULL', message: 'queue full', detail: { retryAfterMs: 1500 } }),
    );
    expect(full).toEqual({ status: 503, body: { error: 'queue full' }, headers: { 'retry-after': '2' } });
    const budget = ollamaError(errorFromInfo({ code: 'KV_BUDGET_EXCEEDED', message: 'never fits' }));
    expect(budget.status).toBe(400);
    const schema = ollamaError(
      errorFromInfo({
        code: 'BAD_REQUEST',
        message: 'jsonSchema (json_schema.schema) is not one kvdesk can enforce: minimum',
        detail: { field: 'jsonSchema.properties.n.minimum' },
      }),
      'chat',
    );
    expect(schema.body.error).toBe(
      "format is not one kvdesk can enforce: minimum (Ollama's field: format.properties.n.minimum)",
    );
    const withTools = ollamaError(
      errorFromInfo({
        code: 'BAD_REQUEST',
        message:
          "tools beside JSON output (responseFormat / jsonSchema): a reply that may be either needs its calls held to a grammar, and kvdesk cannot hold a call to these tools' schemas.",
        detail: { field: 'tools' },
      }),
      'chat',
    );
    expect(withTools.body.error).toBe(
      "tools beside JSON output (format): a reply that may be either needs its calls held to a grammar, and kvdesk cannot hold a call to these tools' schemas.",
    );
    // Ollama has no tool_choice: what to send instead.
    const noChoice = ollamaError(
      errorFromInfo({
        code: 'BAD_REQUEST',
        message:
          'This model (gpt-oss) writes JSON output in its final message, where it cannot call a tool: send tools or JSON output (responseFormat / jsonSchema), or toolChoice (tool_choice) "none" for the JSON alone.',
        detail: { field: 'tools' },
      }),
      'chat',
    );
    expect(noChoice.body.error).toBe(
      'This model (gpt-oss) writes JSON output in its final message, where it cannot call a tool: send tools or JSON output (format), or the request without tools for the JSON alone.',
    );
    const temp = ollamaError(
      errorFromInfo({ code: 'BAD_REQUEST', message: 'bad', detail: { field: 'sampling.topP' } }),
      'generate',
    );
    expect(temp.body.error).toBe("bad (Ollama's field: options.top_p)");
    const prompt = ollamaError(
      errorFromInfo({ code: 'BAD_REQUEST', message: 'bad', detail: { field: 'messages[1].content' } }),
      'generate',
    );
    expect(prompt.body.error).toBe("bad (Ollama's field: prompt)");
    const same = ollamaError(
      errorFromInfo({ code: 'BAD_REQUEST', message: 'bad', detail: { field: 'tools' } }),
      'chat',
    );
    expect(same.body.error).toBe('bad');
    expect(ollamaError(errorFromInfo({ code: 'MODEL_NOT_LOADED', message: 'gone' })).status).toBe(404);
  });
});

const spec = (over: Partial<ModelSpec> = {}): ModelSpec =>
  ({
    id: 'default',
    root: '/nowhere',
    modelType: 'llama',
    weightsBytes: 1234,
    numLayers: 4,
    contextLength: 2048,
    vocabSize: 512,
    bpt: 512,
    layout: 'hf-optimum',
    eosTokenIds: [511, 509],
    bosTokenId: 509,
    chatTemplate: '{{ messages }}',
    search: { temperature: 0.7, topK: 50 },
    kv: {
      kind: 'dynamic',
      tensors: [
        {
          layer: 0,
          role: 'key',
          past: 'p',
          present: 'q',
          dtype: 'float32',
          shape: [],
          batchAxis: 0,
          seqAxis: 2,
          kvHeads: 2,
          headDim: 16,
          bytesPerToken: 128,
        },
      ],
    },
    ...over,
  }) as ModelSpec;

const info = (over: Partial<ModelInfo> = {}): ModelInfo => ({
  id: 'default',
  spec: spec(),
  loadMs: 5,
  backend: 'cpu',
  isDefault: true,
  ...over,
});

describe('model listings', () => {
  const facts = { modifiedAt: '2026-01-02T03:04:05.000Z' };

  it('/api/tags: what kvdesk knows, empty where it does not (digest, parameter size)', () => {
    expect(tagJson(info(), facts)).toEqual({
      name: 'default:latest',
      model: 'default:latest',
      modified_at: '2026-01-02T03:04:05.000Z',
      size: 1234,
      digest: '',
      details: {
        parent_model: '',
        format: 'onnx',
        family: 'llama',
        families: ['llama'],
        parameter_size: '',
        quantization_level: '',
      },
    });
    const fp16 = info({ spec: spec({ modelType: undefined, graphVariant: 'fp16' }) });
    expect(tagJson(fp16, facts).details).toMatchObject({ family: '', families: null, quantization_level: 'fp16' });
  });

  it('/api/ps: no VRAM on the CPU, the weights on an accelerator; never expires', () => {
    expect(psJson(info())).toMatchObject({ size: 1234, size_vram: 0, context_length: 2048 });
    expect(psJson(info({ backend: 'cuda' })).size_vram).toBe(1234);
    expect(Date.parse(psJson(info()).expires_at as string)).toBeGreaterThan(Date.now());
  });

  it('/api/show: details, model_info under the architecture, the template, the capabilities', () => {
    const body = showJson(info(), facts);
    expect(body).toMatchObject({
      template: '{{ messages }}',
      capabilities: ['completion', 'tools'],
      modified_at: facts.modifiedAt,
      details: { format: 'onnx', family: 'llama' },
      model_info: {
        'general.architecture': 'llama',
        'llama.context_length': 2048,
        'llama.block_count': 4,
        'llama.vocab_size': 512,
        'llama.attention.head_count_kv': 2,
        'llama.attention.key_length': 16,
        'tokenizer.ggml.bos_token_id': 509,
        'tokenizer.ggml.eos_token_id': 511,
        'kvdesk.bpt': 512,
        'kvdesk.backend': 'cpu',
      },
    });
    expect(body.parameters).toMatch(/^temperature +0\.7\ntop_k +50$/);
    const bare = showJson(info({ spec: spec({ chatTemplate: undefined, search: {} }) }), facts);
    expect(bare.template).toBeUndefined();
    expect(bare.parameters).toBeUndefined();
    // do_sample false: decoded greedily on every face, whatever temperature its generation_config also gives.
    const greedy = showJson(info({ spec: spec({ search: { temperature: 0.7, topK: 50, doSample: false } }) }), facts);
    expect(greedy.parameters).toMatch(/^temperature +0\ntop_k +50$/);
    const greedyBare = showJson(info({ spec: spec({ search: { doSample: false } }) }), facts);
    expect(greedyBare.parameters).toMatch(/^temperature +0$/);
  });
});
