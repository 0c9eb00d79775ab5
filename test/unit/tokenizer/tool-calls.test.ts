/**
 * Tool calls read out of replies: the forms models write them in, the filter that separates them from the
 * reply's text however the text is chunked, and the conversation as a chat template receives it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createStreamDecoder, createTextTokenizer, renderChatTemplate } from '../../../src/main/tokenizer';
import {
  BARE_JSON,
  callsOf,
  createToolCallFilter,
  GLM_XML,
  HERMES,
  jsonValueEnd,
  MISTRAL,
  MISTRAL_ARGS,
  QWEN_XML,
  shortId,
  TOOL_CALL_TAG,
  type ToolCall,
  type ToolCallFormat,
  toolCallFormat,
  toolChatTurns,
} from '../../../src/main/tokenizer/tool-calls';
import type { ToolCallDelta } from '../../../src/shared/contract';
import { QWEN3_CODER_CALLS } from '../../helpers/chat-templates';
import { byteLevelTokenizerJson } from './tokenizer-builders';

const NAMES = new Set(['get_weather', 'search']);

/** Feeds `chunks` through a fresh filter; the content and the calls (ids left out). */
function run(
  format: ToolCallFormat,
  chunks: string[],
  opts: { forced?: boolean; forcedName?: string; skip?: string } = {},
) {
  const f = createToolCallFilter(format, NAMES, opts);
  let content = '';
  const calls: ToolCall[] = [];
  for (const c of [...chunks.map((c) => f.push(c)), f.flush()]) {
    content += c.content;
    calls.push(...c.calls);
  }
  return { content, calls: calls.map(({ name, arguments: a }) => ({ name, arguments: a })) };
}

/** Every way of cutting `text` into pieces gives the same result as one push. */
function sameForEveryChunking(format: ToolCallFormat, text: string) {
  const whole = run(format, [text]);
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: text.length }), { maxLength: 12 }), (cuts) => {
      const at = [0, ...[...new Set(cuts)].sort((a, b) => a - b), text.length];
      const pieces = at.slice(1).map((end, i) => text.slice(at[i], end));
      expect(run(format, pieces)).toEqual(whole);
    }),
    { numRuns: 150 },
  );
  return whole;
}

describe('toolCallFormat', () => {
  it("reads the form from the template's markers; a template without tools gets kvdesk's Hermes form", () => {
    expect(toolCallFormat('{{ tools }} <tool_call>', true)).toBe(HERMES);
    expect(toolCallFormat('{{ tools }} [TOOL_CALLS]', true)).toBe(MISTRAL);
    expect(toolCallFormat('{{ tools }} [TOOL_CALLS]{{ name }}[ARGS]', true)).toBe(MISTRAL_ARGS);
    expect(toolCallFormat('{{ tools }} <tool_call>\n<function={{ name }}>', true)).toBe(QWEN_XML);
    expect(toolCallFormat('{{ tools }} <tool_call>{{ name }}<arg_key>', true)).toBe(GLM_XML);
    expect(toolCallFormat('{{ tools }} <|tool_call|>', true)).toBe(TOOL_CALL_TAG);
    expect(toolCallFormat('{{ tools }} {"name": function name, "parameters": …}', true)).toBe(BARE_JSON);
    expect(toolCallFormat('{{ messages }} [TOOL_CALLS]', false)).toBe(HERMES);
    expect(toolCallFormat(undefined, false)).toBe(HERMES);
  });
});

describe('callsOf', () => {
  it('takes one call object or an array of them, with arguments or parameters, as an object or JSON text', () => {
    const strip = (calls: ToolCall[] | null) => calls?.map(({ name, arguments: a }) => ({ name, a }));
    expect(strip(callsOf({ name: 'search', arguments: { q: 'x' } }, NAMES))).toEqual([
      { name: 'search', a: '{"q":"x"}' },
    ]);
    expect(strip(callsOf({ name: 'search', parameters: { q: 1 } }, NAMES))).toEqual([{ name: 'search', a: '{"q":1}' }]);
    expect(strip(callsOf({ name: 'search', arguments: '{"q": 2}' }, NAMES))).toEqual([
      { name: 'search', a: '{"q": 2}' },
    ]);
    expect(strip(callsOf({ name: 'search' }, NAMES))).toEqual([{ name: 'search', a: '{}' }]);
    expect(strip(callsOf([{ name: 'search' }, { name: 'get_weather', arguments: {} }], NAMES))).toHaveLength(2);
  });

  it('is null for anything that is not calls to the listed tools', () => {
    for (const v of [
      { name: 'rm_rf', arguments: {} },
      { arguments: {} },
      { name: 'search', arguments: [1] },
      { name: 'search', arguments: 'not json' },
      { name: 'search', arguments: '[1]' },
      [],
      [{ name: 'search' }, 3],
      'search',
      null,
    ]) {
      expect(callsOf(v, NAMES), JSON.stringify(v)).toBeNull();
    }
  });

  it('gives each call its own id in OpenAI form', () => {
    const calls = callsOf([{ name: 'search' }, { name: 'search' }], NAMES) as ToolCall[];
    expect(calls[0]?.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(calls[0]?.id).not.toBe(calls[1]?.id);
  });
});

describe('jsonValueEnd', () => {
  it('finds the end of an object or array, minding brackets and quotes in strings', () => {
    const v = ' {"a": "}]\\"{", "b": [1, {"c": []}]} tail';
    expect(v.slice(0, jsonValueEnd(v, 0))).toBe(' {"a": "}]\\"{", "b": [1, {"c": []}]}');
    expect(jsonValueEnd('[[]]x', 0)).toBe(4);
    expect(jsonValueEnd('{"a": "}"', 0)).toBe(-1);
    expect(jsonValueEnd('   ', 0)).toBe(-1);
    expect(jsonValueEnd(' hello {}', 0)).toBe(-2);
  });
});

describe('createToolCallFilter', () => {
  const call = (name: string, args: object) => ({ name, arguments: JSON.stringify(args) });

  it('Hermes: text around calls is content, each <tool_call> block a call, for every chunking', () => {
    const text =
      'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"q": "a <tool_call> b"}}\n</tool_call> Done.';
    // White space between and after calls only separates them: dropped.
    expect(sameForEveryChunking(HERMES, text)).toEqual({
      content: 'Let me check. Done.',
      calls: [call('get_weather', { city: 'Oslo' }), call('search', { q: 'a <tool_call> b' })],
    });
  });

  it("keeps a call's numbers as the model wrote them (none turned into null or rounded), compact", () => {
    const text =
      '<tool_call>\n{"name": "search", "arguments": {"q": 9e999, "id": 12345678901234567890, "r": [1.50, -0.0E+2]}}\n</tool_call>';
    expect(sameForEveryChunking(HERMES, text).calls).toEqual([
      { name: 'search', arguments: '{"q":9e999,"id":12345678901234567890,"r":[1.50,-0.0E+2]}' },
    ]);
    // A repeated key (free-form arguments do not hold keys distinct) reads as JSON.parse reads it, the last one
    // winning, its numbers still as written: a call, not text.
    const repeated = '<tool_call>\n{"name": "search", "arguments": {"a": 1, "a": 12345678901234567890}}\n</tool_call>';
    expect(sameForEveryChunking(HERMES, repeated)).toEqual({
      content: '',
      calls: [{ name: 'search', arguments: '{"a":12345678901234567890}' }],
    });
    // An arguments value that is a number is no arguments object.
    const number = 'A <tool_call>{"name": "search", "arguments": 5}</tool_call> B';
    expect(sameForEveryChunking(HERMES, number)).toEqual({ content: number, calls: [] });
  });

  it('holds back only what could be the opening: text streams as it comes', () => {
    const f = createToolCallFilter(HERMES, NAMES);
    expect(f.push('Hello <to').content).toBe('Hello ');
    expect(f.push('day').content).toBe('<today');
    expect(f.push(' <').content).toBe(' ');
    expect(f.flush().content).toBe('<');
  });

  it('release (reasoning follows): lets out what it held, a call cut off as text, and reads on after', () => {
    const f = createToolCallFilter(HERMES, NAMES);
    expect(f.push('Let me check <').content).toBe('Let me check ');
    expect(f.release()).toEqual({ content: '<', calls: [], deltas: [] });
    expect(f.push('<tool_call>{"name": "search"').content).toBe('');
    expect(f.release().content).toBe('<tool_call>{"name": "search"');
    const after = f.push('<tool_call>{"name": "search", "arguments": {}}</tool_call>');
    expect(after.calls.map((c) => c.name)).toEqual(['search']);
    // After a call, the white space it holds (dropped unless text follows) and its closing tag stay held.
    expect(f.release().content).toBe('');
    expect(f.flush().content).toBe('');
    // An XML call whose closing tag never came is one, as at the end.
    const x = createToolCallFilter(QWEN_XML, NAMES);
    x.push('<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n');
    expect(x.release().calls.map(({ name, arguments: a }) => ({ name, arguments: a }))).toEqual([
      call('search', { q: 'x' }),
    ]);
    // A bare-JSON reply's leading white space, and a forced call, are not given up.
    const bare = createToolCallFilter(BARE_JSON, NAMES);
    expect(bare.push('\n').content + bare.release().content).toBe('');
    expect(bare.push('{"name": "search", "arguments": {}}').calls.map((c) => c.name)).toEqual(['search']);
    const forced = createToolCallFilter(HERMES, NAMES, { forced: true });
    expect(forced.release().content).toBe('');
    expect(forced.push('{"name": "search", "arguments": {}}').calls.map((c) => c.name)).toEqual(['search']);
  });

  it('gives back as content a block that is not a call: unknown tool, bad JSON, no JSON, or cut off', () => {
    for (const text of [
      'A <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> B',
      'A <tool_call>{"name": "search", "arguments": {"q": }}</tool_call> B',
      'A <tool_call> not json </tool_call> B',
      'A <tool_call>{"name": "search", "arguments": {"q": "x"',
    ]) {
      expect(sameForEveryChunking(HERMES, text), text).toEqual({ content: text, calls: [] });
    }
  });

  it('white space after the last call is dropped; text after it is kept', () => {
    const c = '<tool_call>{"name": "search"}</tool_call>';
    expect(sameForEveryChunking(HERMES, `\n${c}\n\n`)).toEqual({ content: '\n', calls: [call('search', {})] });
    expect(sameForEveryChunking(HERMES, `${c}\n\nSee above.`)).toEqual({
      content: 'See above.',
      calls: [call('search', {})],
    });
  });

  it("Mistral's later form: the name, [ARGS], then the arguments; each call its own marker; ids of 9 characters", () => {
    const text = 'Ok.[TOOL_CALLS]search[ARGS]{"q": "x"}[TOOL_CALLS]get_weather[ARGS]{}';
    expect(sameForEveryChunking(MISTRAL_ARGS, text)).toEqual({
      content: 'Ok.',
      calls: [call('search', { q: 'x' }), call('get_weather', {})],
    });
    for (const odd of [
      '[TOOL_CALLS]rm_rf[ARGS]{}',
      '[TOOL_CALLS]a long sentence, not a name',
      '[TOOL_CALLS]search[ARGS]"x"',
    ]) {
      expect(sameForEveryChunking(MISTRAL_ARGS, odd), odd).toEqual({ content: odd, calls: [] });
    }
    const f = createToolCallFilter(MISTRAL_ARGS, NAMES);
    const [made] = f.push('[TOOL_CALLS]search[ARGS]{}').calls;
    expect(made?.id).toMatch(/^[A-Za-z0-9]{9}$/);
    // Forced, the prompt ends with `[TOOL_CALLS]search[ARGS]`: the reply is the arguments.
    expect(run(MISTRAL_ARGS, ['{"q":', '"y"}'], { forced: true, forcedName: 'search' })).toEqual({
      content: '',
      calls: [call('search', { q: 'y' })],
    });
  });

  it('XML forms: plain-text values typed by the parameter schemas; anything not a call is content', () => {
    const paramSchemas = new Map([
      [
        'search',
        {
          q: { type: 'string' },
          limit: { type: 'integer' },
          opts: { type: 'object' },
          exact: { type: 'boolean' },
          version: { anyOf: [{ type: 'string' }, { type: 'null' }] },
          mode: { enum: ['true', 'false', '1'] },
          any: {},
        },
      ],
    ]);
    const read = (format: ToolCallFormat, text: string) => {
      const f = createToolCallFilter(format, NAMES, { paramSchemas });
      const outs = [...[...text].map((c) => f.push(c)), f.flush()];
      return {
        content: outs.map((o) => o.content).join(''),
        calls: outs.flatMap((o) => o.calls).map(({ name, arguments: a }) => ({ name, arguments: a })),
      };
    };
    const param = (k: string, v: string) => `<parameter=${k}>\n${v}\n</parameter>\n`;
    const qwen = `Sure.\n<tool_call>\n<function=search>\n${param('q', '42')}${param('limit', '5')}${param('opts', '{"deep": true}')}${param('exact', 'True')}${param('version', '1.10')}${param('mode', 'true')}${param('any', '7')}</function>\n</tool_call>`;
    expect(read(QWEN_XML, qwen)).toEqual({
      content: 'Sure.\n',
      // Strings stay as written (an Optional[str] "1.10", a string enum's "true", a parameter without a type).
      calls: [
        call('search', {
          q: '42',
          limit: 5,
          opts: { deep: true },
          exact: true,
          version: '1.10',
          mode: 'true',
          any: '7',
        }),
      ],
    });
    expect(sameForEveryChunking(QWEN_XML, qwen).calls).toHaveLength(1);
    // A value may hold `</parameter>` itself (a coding model writing XML); `__proto__` is an argument like any.
    const tricky = `<tool_call>\n<function=search>\n${param('q', 'a</parameter>b')}${param('__proto__', 'x')}</function>\n</tool_call>`;
    expect(JSON.parse(read(QWEN_XML, tricky).calls[0]?.arguments ?? '')).toEqual(
      JSON.parse('{"q": "a</parameter>b", "__proto__": "x"}'),
    );
    // A reply that ends without the closing tags (end token, max tokens, a stop string) still made its call.
    expect(read(QWEN_XML, `<tool_call>\n<function=search>\n${param('q', 'x')}</function>\n`).calls).toEqual([
      call('search', { q: 'x' }),
    ]);
    expect(read(QWEN_XML, '<tool_call>\n<function=search>\n<parameter=q>\nx').calls).toEqual([
      call('search', { q: 'x' }),
    ]);
    const glm = '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Oslo\n</arg_value>\n</tool_call>';
    expect(read(GLM_XML, glm)).toEqual({ content: '', calls: [call('get_weather', { city: 'Oslo' })] });
    expect(read(GLM_XML, glm.replace('</tool_call>', '')).calls).toEqual([call('get_weather', { city: 'Oslo' })]);
    for (const odd of [
      '<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>',
      '<tool_call>\n<function=search>\nloose text\n</function>\n</tool_call>',
    ]) {
      expect(read(QWEN_XML, odd), odd).toEqual({ content: odd, calls: [] });
    }
    // Prose that mentions the tag is given back at once, not held until the reply ends.
    const f = createToolCallFilter(QWEN_XML, NAMES, { paramSchemas });
    expect(f.push('Use the <tool_call> tag when').content).toBe('Use the <tool_call> tag when');
  });

  it("Qwen3-Coder: an earlier call's null argument, which its template writes None, reads back as null", () => {
    const paramSchemas = new Map([
      [
        'search',
        {
          q: { type: 'string' },
          limit: { type: 'integer' },
          opts: { type: 'object' },
          exact: { type: 'boolean' },
          after: { type: ['integer', 'null'] },
          any: {},
          label: { anyOf: [{ type: 'string' }, { type: 'null' }] },
          mode: { enum: ['a', null] },
          kind: { enum: ['None', 'Some'] },
        },
      ],
    ]);
    const args = {
      q: 'x',
      limit: null,
      opts: null,
      exact: null,
      after: null,
      any: null,
      label: null,
      mode: null,
      kind: null,
    };
    const { messages } = toolChatTurns(
      [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'search', arguments: JSON.stringify(args) }] },
      ],
      undefined,
      true,
      QWEN_XML,
    );
    const written = renderChatTemplate(QWEN3_CODER_CALLS, messages, { addGenerationPrompt: false });
    expect(written).toContain('<parameter=limit>\nNone\n</parameter>');
    const f = createToolCallFilter(QWEN_XML, NAMES, { paramSchemas });
    const calls = [f.push(written), f.flush()].flatMap((o) => o.calls);
    // A parameter that may be a string keeps the text: the string "None" is written the same.
    expect(JSON.parse(calls[0]?.arguments ?? '')).toEqual({
      ...args,
      q: 'x',
      any: 'None',
      label: 'None',
      kind: 'None',
    });
    // The model's own null is read the same way.
    const g = createToolCallFilter(QWEN_XML, NAMES, { paramSchemas });
    const own = g.push(
      '<tool_call>\n<function=search>\n<parameter=limit>\nnull\n</parameter>\n</function>\n</tool_call>',
    );
    expect(own.calls.map((c) => JSON.parse(c.arguments))).toEqual([{ limit: null }]);
  });

  it('a call whose closing tag never came is still a call', () => {
    expect(run(HERMES, ['<tool_call>\n{"name": "search"}'])).toEqual({ content: '', calls: [call('search', {})] });
    expect(run(HERMES, ['<tool_call>{"name": "search"} and more'])).toEqual({
      content: 'and more',
      calls: [call('search', {})],
    });
  });

  it('Mistral and <|tool_call|>: an array of calls after the marker', () => {
    const m = '[TOOL_CALLS] [{"name": "search", "arguments": {"q": "x"}}, {"name": "get_weather", "arguments": {}}]';
    expect(sameForEveryChunking(MISTRAL, m)).toEqual({
      content: '',
      calls: [call('search', { q: 'x' }), call('get_weather', {})],
    });
    const t = 'ok<|tool_call|>[{"name": "search", "arguments": {}}]<|/tool_call|>';
    expect(sameForEveryChunking(TOOL_CALL_TAG, t)).toEqual({ content: 'ok', calls: [call('search', {})] });
  });

  it('bare JSON (Llama 3): a reply that is a call object from its first character; not one in the middle', () => {
    expect(sameForEveryChunking(BARE_JSON, '\n {"name": "search", "parameters": {"q": "x"}}')).toEqual({
      content: '',
      calls: [call('search', { q: 'x' })],
    });
    const mid = 'Use {"name": "search", "parameters": {}} like this';
    expect(sameForEveryChunking(BARE_JSON, mid)).toEqual({ content: mid, calls: [] });
    const notCall = '{"answer": 42} is JSON';
    expect(sameForEveryChunking(BARE_JSON, notCall)).toEqual({ content: notCall, calls: [] });
  });

  it('forced: the whole reply is one call object (the opening is in the prompt); cut off, it is content', () => {
    expect(run(HERMES, ['{"name":"search",', '"arguments":{"q":"x"}}'], { forced: true })).toEqual({
      content: '',
      calls: [call('search', { q: 'x' })],
    });
    expect(run(MISTRAL, ['{"name":"search","arguments":{"q":'], { forced: true })).toEqual({
      content: '{"name":"search","arguments":{"q":',
      calls: [],
    });
  });

  it('forced with the opening written after a reasoning (skip): read past it, in any pieces; a reply without it is the call', () => {
    const body = '{"name":"search","arguments":{"q":"x"}}';
    for (const chunks of [
      ['\n\n<tool_call>\n', body],
      ['\n', '<tool', '_call>', '\n{"name":"search",', '"arguments":{"q":"x"}}'],
      [body],
    ]) {
      expect(run(HERMES, chunks, { forced: true, skip: '<tool_call>\n' }), JSON.stringify(chunks)).toEqual({
        content: '',
        calls: [call('search', { q: 'x' })],
      });
    }
    expect(
      run(MISTRAL_ARGS, ['[TOOL_CALLS]search[ARGS]', '{"q":"y"}'], {
        forced: true,
        forcedName: 'search',
        skip: '[TOOL_CALLS]search[ARGS]',
      }),
    ).toEqual({
      content: '',
      calls: [call('search', { q: 'y' })],
    });
    // Cut inside the opening (kvdesk's text, not the model's): nothing.
    expect(run(HERMES, ['\n<tool'], { forced: true, skip: '<tool_call>\n' })).toEqual({ content: '', calls: [] });
  });

  it('reads calls streamed token by token from a real tokenizer, keeping a special marker token', () => {
    const json = byteLevelTokenizerJson();
    (json.added_tokens as object[]).push({
      id: 257,
      content: '[TOOL_CALLS]',
      special: true,
      normalized: false,
      lstrip: false,
      rstrip: false,
      single_word: false,
    });
    const tok = createTextTokenizer({ tokenizerJson: json, vocabSize: 258 });
    const ids = tok.encode('Sure.[TOOL_CALLS][{"name": "search", "arguments": {"q": "été"}}]', {
      addSpecialTokens: false,
    });
    expect(ids).toContain(257);
    const read = (keep: boolean) => {
      const decoder = createStreamDecoder(tok, {
        skipSpecialTokens: true,
        ...(keep ? { keepSpecialIds: new Set([257]) } : {}),
      });
      const f = createToolCallFilter(MISTRAL, NAMES);
      const outs = [...ids.map((id) => f.push(decoder.push(id))), f.push(decoder.flush()), f.flush()];
      return {
        content: outs.map((o) => o.content).join(''),
        calls: outs.flatMap((o) => o.calls).map(({ name, arguments: a }) => ({ name, arguments: a })),
      };
    };
    expect(read(true)).toEqual({ content: 'Sure.', calls: [call('search', { q: 'été' })] });
    // Skipped like any special token, the marker is gone and the call is only text.
    expect(read(false).calls).toEqual([]);
  });
});

describe('createToolCallFilter: arguments streamed as they are written', () => {
  /** Feeds pieces with streamArguments; content, complete calls (with ids) and the deltas, in order. */
  function streamed(
    format: ToolCallFormat,
    pieces: string[],
    opts: { forced?: boolean; forcedName?: string } = {},
  ): { content: string; calls: ToolCall[]; deltas: ToolCallDelta[] } {
    const f = createToolCallFilter(format, NAMES, { ...opts, streamArguments: true });
    const outs = [...pieces.map((p) => f.push(p)), f.flush()];
    return {
      content: outs.map((o) => o.content).join(''),
      calls: outs.flatMap((o) => o.calls),
      deltas: outs.flatMap((o) => o.deltas),
    };
  }

  /** Each call's deltas: the first gives the call's id and name, the rest only text; joined, its arguments. */
  function assembled(deltas: ToolCallDelta[]): Array<{ id?: string; name?: string; arguments: string }> {
    const out: Array<{ id?: string; name?: string; arguments: string }> = [];
    for (const d of deltas) {
      const c = out[d.index];
      if (!c) {
        expect(d.id, 'the first delta of a call names it').toBeDefined();
        out[d.index] = { id: d.id, name: d.name, arguments: d.arguments };
      } else {
        expect(d.id).toBeUndefined();
        c.arguments += d.arguments;
      }
    }
    return out;
  }

  const cases: Array<[string, ToolCallFormat, string, { forced?: boolean; forcedName?: string }?]> = [
    [
      'Hermes',
      HERMES,
      'Let me look. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2]}}\n</tool_call>',
    ],
    [
      'Hermes, arguments before the name',
      HERMES,
      '<tool_call>{"arguments": {"q": "a \\"b\\" {c}"}, "name": "search"}</tool_call> ok',
    ],
    [
      'Mistral, two calls',
      MISTRAL,
      '[TOOL_CALLS][{"name": "search", "arguments": {"q": "x"}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]',
    ],
    ['name[ARGS]', MISTRAL_ARGS, '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome", "days": 3}'],
    [
      'Hermes, a key written twice',
      HERMES,
      '<tool_call>\n{"name": "search", "arguments": {"a": 1, "a": 2}}\n</tool_call>',
    ],
    ['bare JSON', BARE_JSON, '{"name": "search", "parameters": {"q": "y"}}'],
    ['forced', HERMES, '{"name": "get_weather", "arguments": {"city": "Lima"}}', { forced: true }],
    ['forced name[ARGS]', MISTRAL_ARGS, '{"city": "Kyiv"}', { forced: true, forcedName: 'get_weather' }],
  ];

  for (const [label, format, text, opts] of cases) {
    it(`${label}: however the text is cut, the deltas assemble each call as written, under its final id`, () => {
      const plain = run(format, [text], opts);
      expect(plain.calls.length).toBeGreaterThan(0);
      fc.assert(
        fc.property(fc.array(fc.integer({ min: 0, max: text.length }), { maxLength: 16 }), (cuts) => {
          const at = [0, ...[...new Set(cuts)].sort((a, b) => a - b), text.length];
          const got = streamed(
            format,
            at.slice(1).map((end, i) => text.slice(at[i], end)),
            opts,
          );
          // Streaming changes nothing else.
          expect(got.content).toBe(plain.content);
          expect(got.calls.map(({ name, arguments: a }) => ({ name, arguments: a }))).toEqual(plain.calls);
          const built = assembled(got.deltas);
          expect(built).toHaveLength(got.calls.length);
          for (const [k, call] of got.calls.entries()) {
            expect(built[k]?.id).toBe(call.id);
            expect(built[k]?.name).toBe(call.name);
            // The text as the model wrote it (spaces kept): the same object as the call's.
            expect(JSON.parse(built[k]?.arguments ?? '')).toEqual(JSON.parse(call.arguments));
            expect(text).toContain(built[k]?.arguments);
          }
        }),
        { numRuns: 120 },
      );
    });
  }

  it('nothing streams without the option, in the XML forms, or for a tool that is not listed', () => {
    const f = createToolCallFilter(HERMES, NAMES);
    expect(f.push('<tool_call>{"name": "search", "arguments": {"q": "x"').deltas).toEqual([]);
    expect(
      streamed(QWEN_XML, ['<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>'])
        .deltas,
    ).toEqual([]);
    expect(streamed(HERMES, ['<tool_call>{"name": "delete_all", "arguments": {"x": 1}}</tool_call>']).deltas).toEqual(
      [],
    );
  });

  it('a call cut before its end is text, as without streaming; its arguments went out as far as written', () => {
    const got = streamed(HERMES, ['<tool_call>{"name": "search", "arguments": {"q": "unfin']);
    expect(got.calls).toEqual([]);
    expect(got.content).toBe('<tool_call>{"name": "search", "arguments": {"q": "unfin');
    expect(assembled(got.deltas)).toEqual([
      { id: expect.stringMatching(/^call_/), name: 'search', arguments: '{"q": "unfin' },
    ]);
  });
});

describe('toolChatTurns', () => {
  const tools = [{ name: 'search', description: 'Search the web', parameters: { type: 'object', properties: {} } }];
  const conversation = [
    { role: 'system' as const, content: 'Be brief.' },
    { role: 'user' as const, content: 'Find x' },
    {
      role: 'assistant' as const,
      content: '',
      toolCalls: [
        { id: 'call_1', name: 'search', arguments: '{"q":"x"}' },
        { id: 'call_2', name: 'search', arguments: '{"q":"y"}' },
      ],
    },
    { role: 'tool' as const, content: 'x is 1', toolCallId: 'call_1' },
    { role: 'tool' as const, content: 'y is 2', toolCallId: 'call_2' },
  ];

  it("a template that reads tools gets them, and the turns in transformers' form", () => {
    const { messages, tools: shown } = toolChatTurns(conversation, tools, true);
    expect(shown).toEqual([
      {
        type: 'function',
        function: { name: 'search', description: 'Search the web', parameters: tools[0]?.parameters },
      },
    ]);
    expect(messages[2]?.tool_calls).toEqual([
      { id: 'call_1', type: 'function', function: { name: 'search', arguments: { q: 'x' } } },
      { id: 'call_2', type: 'function', function: { name: 'search', arguments: { q: 'y' } } },
    ]);
    // A result's tool name is found from the call it answers.
    expect(messages[3]).toEqual({ role: 'tool', content: 'x is 1', tool_call_id: 'call_1', name: 'search' });
  });

  it('one that does not gets the tools in its system message, calls as text, and results as a user turn', () => {
    const { messages, tools: shown } = toolChatTurns(conversation, tools, false);
    expect(shown).toBeUndefined();
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user']);
    expect(messages[0]?.content).toMatch(/^Be brief\.\n\n# Tools\n/);
    expect(messages[0]?.content).toContain(
      '{"type":"function","function":{"name":"search","description":"Search the web","parameters":{"type":"object","properties":{}}}}',
    );
    expect(messages[2]?.content).toBe(
      '<tool_call>\n{"name":"search","arguments":{"q":"x"}}\n</tool_call>\n<tool_call>\n{"name":"search","arguments":{"q":"y"}}\n</tool_call>',
    );
    expect(messages[3]?.content).toBe(
      '<tool_response>\nx is 1\n</tool_response>\n<tool_response>\ny is 2\n</tool_response>',
    );
    // Without a system message, kvdesk's description heads the first user turn (some templates refuse a system role).
    const noSystem = toolChatTurns([{ role: 'user', content: 'hi' }], tools, false).messages;
    expect(noSystem).toHaveLength(1);
    expect(noSystem[0]?.content).toMatch(/^# Tools\n[\s\S]*\n\nhi$/);
    // Without tools this request, earlier calls are still text.
    expect(toolChatTurns(conversation, undefined, false).messages[0]?.content).toBe('Be brief.');
  });

  it("writes an earlier call's numbers back as the model wrote them, none rounded or made null", () => {
    const args = '{"id": 12345678901234567890, "big": 1e400, "f": 1.0, "p": 0.1e1, "s": "1.0"}';
    const { messages } = toolChatTurns(
      [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'f', arguments: args }] },
        { role: 'tool', toolCallId: 'c1', content: 'ok' },
      ],
      undefined,
      false,
    );
    expect(messages[1]?.content).toBe(
      '<tool_call>\n{"name":"f","arguments":{"id":12345678901234567890,"big":1e400,"f":1.0,"p":0.1e1,"s":"1.0"}}\n</tool_call>',
    );
  });

  it('writes an earlier call whose arguments repeat a key as JSON.parse reads them (the last one), not as a string', () => {
    const { messages } = toolChatTurns(
      [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'f', arguments: '{"a": 1, "a": 1e400}' }] },
      ],
      undefined,
      false,
    );
    expect(messages[1]?.content).toBe('<tool_call>\n{"name":"f","arguments":{"a":1e400}}\n</tool_call>');
  });

  it("a template that reads tool calls writes an earlier call's numbers as the model wrote them", () => {
    // Qwen2.5's template (its tokenizer_config.json), the part that writes an assistant turn and its calls.
    const qwen25 =
      "{%- for message in messages %}{%- if message.role == \"assistant\" %}{{- '<|im_start|>' + message.role }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}";
    const args =
      '{"id": 12345678901234567890, "big": 1e400, "f": 1.0, "p": 0.1e1, "n": -2, "x": 0.5, "s": "1.0", "l": [1.50, {"z": -0}], "o": {"k": 1e400}}';
    const { messages } = toolChatTurns(
      [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'f', arguments: args }] },
      ],
      undefined,
      true,
    );
    expect(renderChatTemplate(qwen25, messages, { addGenerationPrompt: false })).toBe(
      `<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {"id": 12345678901234567890, "big": 1e400, "f": 1.0, "p": 0.1e1, "n": -2, "x": 0.5, "s": "1.0", "l": [1.50, {"z": -0}], "o": {"k": 1e400}}}\n</tool_call><|im_end|>\n`,
    );
    // Printed, through `string` (Qwen3-Coder's `args_value | string`) and inside a printed list, as written too;
    // the template still sees numbers.
    const reads =
      '{%- for c in messages[1].tool_calls %}{%- for k, v in c.function.arguments | items %}{{ k }}={{ v }},{% if v is not mapping %}{{ v | string }}{% endif %},{{ v is number }},{{ v is mapping }};{% endfor %}{% endfor %}';
    expect(renderChatTemplate(reads, messages, { addGenerationPrompt: false })).toBe(
      'id=12345678901234567890,12345678901234567890,True,False;big=1e400,1e400,True,False;f=1.0,1.0,True,False;p=0.1e1,0.1e1,True,False;n=-2,-2,True,False;x=0.5,0.5,True,False;s=1.0,1.0,False,False;l=[1.50, {"z": -0}],[1.50, {"z": -0}],False,False;o={"k": 1e400},,False,True;',
    );
    expect(
      renderChatTemplate('{{ (messages[1].tool_calls[0].function.arguments.f + 1) | string }}', messages, {
        addGenerationPrompt: false,
      }),
    ).toBe('2.0');
  });

  it("Mistral's forms: ids the template would refuse are mapped to 9 characters, the same for a call and its result", () => {
    const { messages } = toolChatTurns(conversation, tools, true, MISTRAL);
    const mapped = messages[2]?.tool_calls?.[0]?.id;
    expect(mapped).toMatch(/^[A-Za-z0-9]{9}$/);
    expect(mapped).toBe(shortId('call_1'));
    expect(messages[3]?.tool_call_id).toBe(mapped);
    expect(messages[4]?.tool_call_id).toBe(shortId('call_2'));
    expect(shortId('call_2')).not.toBe(mapped);
    expect(shortId('Ab3dE6gH9')).toBe('Ab3dE6gH9');
  });

  it('renders through a template that reads tools and tool calls', () => {
    // A small template in the manner of those that show tools (written here, not a model's).
    const template = [
      '{%- if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}{{ "\\n" }}{% endif %}',
      '{%- for m in messages %}{{ m.role }}:',
      '{%- if m.tool_calls is defined %}{% for c in m.tool_calls %}[{{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}',
      '{%- elif m.role == "tool" %}({{ m.name }}) {{ m.content }}{% else %}{{ m.content }}{% endif %}{{ "\\n" }}{% endfor %}',
    ].join('');
    const turns = toolChatTurns(conversation.slice(1, 4), tools, true);
    const text = renderChatTemplate(template, turns.messages, {
      addGenerationPrompt: false,
      ...(turns.tools ? { tools: turns.tools } : {}),
    });
    expect(text).toBe(
      'TOOLS:search;\nuser:Find x\nassistant:[search {"q": "x"}][search {"q": "y"}]\ntool:(search) x is 1\n',
    );
  });
});
