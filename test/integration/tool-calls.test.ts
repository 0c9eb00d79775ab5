/**
 * Tool calling on the real host and engine with the default model (a random model: it never calls a tool
 * unless made to). `required` and a named tool make every reply that ends by itself one call to a listed
 * tool whose arguments conform to that tool's schema (checked by ajv); `auto` shows the tools and gives back
 * a reply without calls whole; earlier calls and results reach a template without tool support as the same
 * text kvdesk describes; a package whose template has its own form (here Mistral's) gets its own opening.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Ajv from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerService } from '../../src/main/host/runner-service';
import { applyChat } from '../../src/main/tokenizer';
import { MISTRAL, toolChatTurns } from '../../src/main/tokenizer/tool-calls';
import type { GenerateRequest, StreamFrame, ToolCall, ToolDefinition } from '../../src/shared/contract';
import { KvdeskError } from '../../src/shared/errors';
import { defaultModelDir } from '../helpers/fixtures';

const ajv = new Ajv({ strict: false });

// Arguments the random model can finish: enums, booleans, short arrays (a free string or number may run on).
const weather: ToolDefinition = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: {
    type: 'object',
    properties: { city: { enum: ['Paris', 'Oslo', 'Lima'] }, days: { enum: [1, 2, 3] }, hourly: { type: 'boolean' } },
    required: ['city'],
  },
};
const lights: ToolDefinition = {
  name: 'set_lights',
  parameters: {
    type: 'object',
    properties: { on: { type: 'boolean' }, rooms: { type: 'array', items: { enum: ['hall', 'den'] }, maxItems: 2 } },
  },
};
const TOOLS = [weather, lights];
const schemaOf = (name: string) => TOOLS.find((t) => t.name === name)?.parameters as object;
const messages = [{ role: 'user' as const, content: 'What is the weather in Paris?' }];

let host: RunnerService;
let nativeDir: string;
let hermesDir: string;
/** The id of `<tool_call>` in the hermes package: one token there, as in Qwen's vocabulary. */
const TOOL_CALL_ID = 509;
const readTemplate = () =>
  JSON.parse(readFileSync(path.join(nativeDir, 'tokenizer_config.json'), 'utf8')).chat_template;
beforeAll(async () => {
  host = new RunnerService({ intraOpNumThreads: 2 });
  await host.loadModel(defaultModelDir, { id: 'default' });
  // The default package with a template of its own that shows tools and expects Mistral's form; like
  // Mistral's and Gemma's own templates, it refuses ids that are not 9 letters and digits, and a system role.
  nativeDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-tools-'));
  cpSync(defaultModelDir, nativeDir, { recursive: true });
  const configPath = path.join(nativeDir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configPath, 'utf8'));
  config.chat_template =
    "{% if tools %}{{ '[AVAILABLE_TOOLS]' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{% endif %}" +
    "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" +
    '{% if m.tool_calls is defined %}{% for c in m.tool_calls %}{% if c.id | length != 9 %}' +
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}{% endfor %}" +
    "{{ '[TOOL_CALLS]' + (m.tool_calls | tojson) }}" +
    "{% elif m.role == 'tool' %}{% if m.tool_call_id | length != 9 %}{{ raise_exception('bad id') }}{% endif %}" +
    "{{ '[TOOL_RESULTS]' + m.content + '[/TOOL_RESULTS]' }}" +
    "{% else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  writeFileSync(configPath, JSON.stringify(config));
  await host.loadModel(nativeDir, { id: 'native' });

  // The default package as a Hermes-form model (Qwen's): its template shows tools and writes calls in
  // <tool_call> tags, and <tool_call> is one token (the unused <|endoftext|>, renamed), so a logit bias can make
  // the random model open a call whenever it writes free text.
  hermesDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-hermes-'));
  cpSync(defaultModelDir, hermesDir, { recursive: true });
  const edit = (file: string, change: (json: Record<string, unknown>) => void) => {
    const at = path.join(hermesDir, file);
    const json = JSON.parse(readFileSync(at, 'utf8'));
    change(json);
    writeFileSync(at, JSON.stringify(json));
  };
  edit('tokenizer.json', (t) => {
    const added = (t.added_tokens as Array<{ id: number }>).find((a) => a.id === TOOL_CALL_ID);
    Object.assign(added as object, { content: '<tool_call>', special: false });
  });
  edit('tokenizer_config.json', (c) => {
    (c.added_tokens_decoder as Record<string, unknown>)[String(TOOL_CALL_ID)] = {
      content: '<tool_call>',
      special: false,
    };
    c.bos_token = null;
    c.pad_token = null;
    c.chat_template =
      "{% if tools %}{{ '<|im_start|>system\\n<tools>' + (tools | tojson) + '</tools>\\nCall one in <tool_call></tool_call> tags.<|im_end|>\\n' }}{% endif %}" +
      "{% for m in messages %}{% if m.tool_calls is defined %}{{ '<|im_start|>assistant\\n' }}{% for c in m.tool_calls %}{{ '<tool_call>\\n' + (c.function | tojson) + '\\n</tool_call>' }}{% endfor %}{{ '<|im_end|>\\n' }}" +
      "{% else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}" +
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  });
  edit('generation_config.json', (g) => {
    g.eos_token_id = 511;
  });
  edit('config.json', (c) => {
    c.bos_token_id = null;
    c.pad_token_id = null;
  });
  await host.loadModel(hermesDir, { id: 'hermes' });
}, 60_000);
afterAll(async () => {
  await host?.close();
  if (nativeDir) rmSync(nativeDir, { recursive: true, force: true });
  if (hermesDir) rmSync(hermesDir, { recursive: true, force: true });
});

const ask = (seed: number, extra: Partial<GenerateRequest> = {}, sink?: (f: StreamFrame) => void) =>
  host.generate({ messages, tools: TOOLS, maxNewTokens: 160, sampling: { temperature: 1, seed }, ...extra }, sink)
    .result;

/** A reply that ended with its call: exactly one, to a listed tool, arguments valid for it, no text. */
function expectOneValidCall(row: { text: string; finishReason: string; toolCalls?: ToolCall[] }, label: string) {
  if (row.finishReason !== 'tool_calls') {
    expect(row.finishReason, `${label}: ${row.text}`).toBe('length');
    expect(row.toolCalls, label).toBeUndefined();
    return null;
  }
  expect(row.text, label).toBe('');
  expect(row.toolCalls, label).toHaveLength(1);
  const call = (row.toolCalls as ToolCall[])[0] as ToolCall;
  // OpenAI's style, or Mistral's 9 letters and digits.
  expect(call.id).toMatch(/^(call_[0-9a-f]{24}|[A-Za-z0-9]{9})$/);
  const args: unknown = JSON.parse(call.arguments);
  expect(ajv.validate(schemaOf(call.name), args), `${label}: ${call.name} ${call.arguments}`).toBe(true);
  return call;
}

describe('tool calls', () => {
  it('required: every reply that ends by itself is one call to a listed tool with valid arguments', async () => {
    const names = new Set<string>();
    for (let seed = 1; seed <= 8; seed++) {
      const r = await ask(seed, { toolChoice: 'required' });
      const call = expectOneValidCall(r.rows[0] as never, `seed ${seed}`);
      if (call) names.add(call.name);
    }
    // Both alternatives of the call's schema were taken: the union is open to either.
    expect([...names].sort()).toEqual(['get_weather', 'set_lights']);
  });

  it('a named tool is the one called', async () => {
    let calls = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const r = await ask(seed, { toolChoice: { name: 'set_lights' } });
      const call = expectOneValidCall(r.rows[0] as never, `seed ${seed}`);
      if (call) {
        expect(call.name).toBe('set_lights');
        calls++;
      }
    }
    expect(calls).toBeGreaterThanOrEqual(2);
  });

  it('stop strings do not cut a forced call (it is the whole reply)', async () => {
    const r = await ask(2, { toolChoice: 'required', stop: ['"', ':'] });
    expectOneValidCall(r.rows[0] as never, 'with stop strings');
    expect(r.finishReason).toBe('tool_calls');
  });

  it('streams the call in a tokens frame, and no text', async () => {
    const frames: StreamFrame[] = [];
    const r = await ask(2, { toolChoice: 'required' }, (f) => frames.push(f));
    const streamed = frames.flatMap((f) => (f.type === 'tokens' ? f.rows : []));
    expect(streamed.map((row) => row.text).join('')).toBe(r.text);
    expect(streamed.flatMap((row) => row.toolCalls ?? [])).toEqual(r.rows[0]?.toolCalls ?? []);
    expect(r.finishReason).toBe('tool_calls');
  });

  it('rows of one request each make their own call', async () => {
    const r = await ask(5, { toolChoice: 'required', rows: 3 });
    const calls = r.rows.map((row, i) => expectOneValidCall(row, `row ${i}`));
    expect(calls.filter((c) => c !== null).length).toBeGreaterThanOrEqual(2);
    const ids = calls.flatMap((c) => (c ? [c.id] : []));
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('auto shows the tools to the model; a reply without a call comes back whole, none shows nothing', async () => {
    const tok = host.tokenizerOf('default');
    const plain = await host.generate({ messages, maxNewTokens: 24, sampling: { temperature: 1, seed: 4 } }).result;
    const auto = await ask(4, { maxNewTokens: 24 });
    const none = await ask(4, { maxNewTokens: 24, toolChoice: 'none' });
    // kvdesk's description of the two tools is in the prompt (the default template has none of its own).
    expect(auto.promptTokens).toBeGreaterThan(plain.promptTokens + 100);
    expect(auto.rows[0]?.toolCalls).toBeUndefined();
    expect(auto.text).toBe(tok.decode(auto.tokenIds, { skipSpecialTokens: true }));
    expect(none.promptTokens).toBe(plain.promptTokens);
    expect(none.text).toBe(plain.text);
  });

  it('JSON output with tool_choice none: a JSON reply that calls no tool, as without the tools', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
    const asked = { maxNewTokens: 40, jsonSchema: schema, sampling: { temperature: 1, seed: 3 } };
    const plain = await host.generate({ messages, ...asked }).result;
    const none = await ask(3, { ...asked, toolChoice: 'none' });
    expect(none.rows[0]?.toolCalls).toBeUndefined();
    expect(none.text).toBe(plain.text);
    expect([{ ok: true }, { ok: false }]).toContainEqual(JSON.parse(none.text));
    // A required call is the whole reply, written to the call's schema: the JSON output is for the replies after it.
    let calls = 0;
    for (const seed of [1, 2, 3]) {
      if (
        expectOneValidCall(
          (await ask(seed, { ...asked, maxNewTokens: 160, toolChoice: 'required' })).rows[0] as never,
          `seed ${seed}`,
        )
      )
        calls++;
    }
    expect(calls).toBeGreaterThan(0);
  });

  it('JSON output with tool_choice auto: each reply is calls held to their tools, or the JSON held to its schema', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
    const tok = host.tokenizerOf('hermes');
    const lt = tok.encode('<', { addSpecialTokens: false });
    expect(lt).toHaveLength(1);
    const run = (seed: number, bias: number) =>
      host.generate({
        model: 'hermes',
        messages,
        tools: TOOLS,
        jsonSchema: schema,
        maxNewTokens: 200,
        // Toward the call's opening (one token here), or away from it (whole or begun with `<`).
        sampling: {
          temperature: 1,
          seed,
          logitBias: { [TOOL_CALL_ID]: bias, ...(bias < 0 ? { [lt[0] as number]: bias } : {}) },
        },
      }).result;
    for (const seed of [1, 2, 3]) {
      const called = await run(seed, 12);
      const row = called.rows[0] as { text: string; toolCalls?: ToolCall[]; finishReason: string };
      expect(called.tokenIds[0], `seed ${seed}`).toBe(TOOL_CALL_ID);
      expect(row.toolCalls?.length, `seed ${seed}: ${row.text}`).toBeGreaterThan(0);
      // Calls only: no text between or after them (a client that asked for JSON would parse it) — but for a
      // call the token limit cut, given back as it was written.
      expect(row.text.replace(/^<tool_call>[\s\S]*$/, ''), `seed ${seed} (${row.finishReason})`).toBe('');
      for (const call of row.toolCalls ?? []) {
        expect(ajv.validate(schemaOf(call.name), JSON.parse(call.arguments)), call.arguments).toBe(true);
      }
      // Away from a call, the reply is the JSON, ended as its object closes: no call, no text around it.
      const answered = await run(seed, -100);
      expect(answered.rows[0]?.toolCalls, `seed ${seed}`).toBeUndefined();
      expect(answered.finishReason).toBe('eos');
      expect([{ ok: true }, { ok: false }]).toContainEqual(JSON.parse(answered.text));
    }
  });

  it("JSON output with auto in Llama 3's bare form: an object is a call only where the call's grammar took it", async () => {
    // The default package with a template that shows tools and has no call marker: calls are bare JSON objects.
    const bareDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-bare-'));
    try {
      cpSync(defaultModelDir, bareDir, { recursive: true });
      const configPath = path.join(bareDir, 'tokenizer_config.json');
      const config = JSON.parse(readFileSync(configPath, 'utf8'));
      config.chat_template =
        "{% if tools %}{{ '<|im_start|>system\\n' + (tools | tojson) + '<|im_end|>\\n' }}{% endif %}" +
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}" +
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
      writeFileSync(configPath, JSON.stringify(config));
      await host.loadModel(bareDir, { id: 'bare' });
      // An answer whose first key is a call's, naming a tool: the two readings go together until one refuses a byte.
      const answer = {
        type: 'object',
        properties: { name: { enum: ['get_weather', 'set_lights'] }, ok: { type: 'boolean' } },
        required: ['name', 'ok'],
      };
      const kinds = { calls: 0, answers: 0 };
      for (let seed = 1; seed <= 8; seed++) {
        const r = await host.generate({
          model: 'bare',
          messages,
          tools: TOOLS,
          jsonSchema: answer,
          maxNewTokens: 120,
          sampling: { temperature: 1, seed },
        }).result;
        const row = r.rows[0] as { text: string; toolCalls?: ToolCall[]; finishReason: string };
        if (row.toolCalls) {
          kinds.calls++;
          // The form takes one call; then the reply ends (its end token has text in this vocabulary: `<|im_end|>`).
          expect(row.finishReason, `seed ${seed}: ${row.text}`).toBe('tool_calls');
          expect(row.text.trim()).toBe('');
          for (const call of row.toolCalls) {
            expect(ajv.validate(schemaOf(call.name), JSON.parse(call.arguments)), call.arguments).toBe(true);
          }
        } else if (row.finishReason === 'eos') {
          kinds.answers++;
          expect(ajv.validate(answer, JSON.parse(row.text)), row.text).toBe(true);
        } else {
          expect(row.text, `seed ${seed}`).toMatch(/^\{/);
        }
      }
      // Both came up (with these seeds: four of each).
      expect(kinds.calls, JSON.stringify(kinds)).toBeGreaterThan(0);
      expect(kinds.answers, JSON.stringify(kinds)).toBeGreaterThan(0);
    } finally {
      await host.unloadModel('bare').catch(() => {});
      rmSync(bareDir, { recursive: true, force: true });
    }
  });

  it('earlier calls and results reach a template without tool support as the text kvdesk describes', async () => {
    const args = '{"city":"Oslo","days":2,"hourly":false}';
    const withCalls = await host.generate({
      messages: [
        ...messages,
        { role: 'assistant', content: '', toolCalls: [{ id: 'call_9', name: 'get_weather', arguments: args }] },
        { role: 'tool', content: 'Sunny, 21 C', toolCallId: 'call_9' },
      ],
      maxNewTokens: 12,
      sampling: { greedy: true },
    }).result;
    const asText = await host.generate({
      messages: [
        ...messages,
        { role: 'assistant', content: `<tool_call>\n{"name":"get_weather","arguments":${args}}\n</tool_call>` },
        { role: 'user', content: '<tool_response>\nSunny, 21 C\n</tool_response>' },
      ],
      maxNewTokens: 12,
      sampling: { greedy: true },
    }).result;
    expect(withCalls.promptTokens).toBe(asText.promptTokens);
    expect(withCalls.tokenIds).toEqual(asText.tokenIds);
  });

  it("a template with its own form (Mistral's) gets its opening, and its replies are read as calls", async () => {
    const auto = await host.generate({ model: 'native', messages, tools: TOOLS, maxNewTokens: 8 }).result;
    const forced = await host.generate({
      model: 'native',
      messages,
      tools: TOOLS,
      toolChoice: 'required',
      maxNewTokens: 160,
      sampling: { temperature: 1, seed: 3 },
    }).result;
    // `[TOOL_CALLS] [` ends the forced prompt: the default vocabulary spells it in several tokens.
    const tok = host.tokenizerOf('native');
    expect(forced.promptTokens - auto.promptTokens).toBe(
      tok.encode('[TOOL_CALLS] [', { addSpecialTokens: false }).length,
    );
    const call = expectOneValidCall(forced.rows[0] as never, 'native') as ToolCall;
    expect(forced.finishReason).toBe('tool_calls');
    expect(call.id).toMatch(/^[A-Za-z0-9]{9}$/);

    // The next turn, with the call and its result, as an OpenAI client sends it (its own style of id, too).
    for (const id of [call.id, 'call_0123456789abcdef01234567']) {
      const next = await host.generate({
        model: 'native',
        messages: [
          ...messages,
          { role: 'assistant', content: '', toolCalls: [{ ...call, id }] },
          { role: 'tool', content: '{"temp": 21}', toolCallId: id },
        ],
        tools: TOOLS,
        maxNewTokens: 4,
      }).result;
      expect(next.promptTokens).toBeGreaterThan(auto.promptTokens);
    }
    // Without tools this turn, the earlier call and result still reach the template in its own form.
    const history = [
      ...messages,
      { role: 'assistant' as const, content: '', toolCalls: [call] },
      { role: 'tool' as const, content: '{"temp": 21}', toolCallId: call.id },
    ];
    const expected = applyChat(tok, readTemplate(), toolChatTurns(history, undefined, true, MISTRAL).messages).ids;
    expect(host.countPromptTokens({ model: 'native', messages: history })).toBe(expected.length);
  });

  it('auto: each call the model opens is held to its tool’s schema and closed, and the reply goes on', async () => {
    const tok = host.tokenizerOf('hermes');
    expect(tok.encode('<tool_call>', { addSpecialTokens: false })).toEqual([TOOL_CALL_ID]);
    let calls = 0;
    for (const seed of [1, 2, 3]) {
      // The bias makes the model open a call wherever text is free; inside a call, only the schema decides.
      const r = await host.generate({
        model: 'hermes',
        messages,
        tools: TOOLS,
        maxNewTokens: 200,
        sampling: { temperature: 1, seed, logitBias: { [TOOL_CALL_ID]: 12 } },
      }).result;
      const row = r.rows[0] as { text: string; toolCalls?: ToolCall[]; finishReason: string };
      const made = row.toolCalls ?? [];
      for (const call of made) {
        expect(ajv.validate(schemaOf(call.name), JSON.parse(call.arguments)), `${call.name} ${call.arguments}`).toBe(
          true,
        );
      }
      calls += made.length;
      // Each call's tag was closed, so the reply went on to open the next.
      const tags = r.tokenIds.filter((id) => id === TOOL_CALL_ID).length;
      expect(made.length).toBeGreaterThanOrEqual(tags - 1);
    }
    expect(calls).toBeGreaterThanOrEqual(3);
  });

  it('auto: held calls stream their arguments as written; with a stop string (which could cut one) they do not', async () => {
    const run = async (extra: { stop?: string[]; parallelToolCalls?: boolean }) => {
      const frames: StreamFrame[] = [];
      const r = await host.generate(
        {
          model: 'hermes',
          messages,
          tools: TOOLS,
          maxNewTokens: 200,
          sampling: { temperature: 1, seed: 2, logitBias: { [TOOL_CALL_ID]: 12 } },
          ...extra,
        },
        (f) => frames.push(f),
      ).result;
      const deltas = frames.flatMap((f) =>
        f.type === 'tokens' ? f.rows.flatMap((row) => row.toolCallDeltas ?? []) : [],
      );
      return { calls: r.rows[0]?.toolCalls ?? [], deltas };
    };
    const { calls, deltas } = await run({});
    expect(calls.length).toBeGreaterThan(1);
    for (const [k, call] of calls.entries()) {
      const mine = deltas.filter((d) => d.index === k);
      // First the call's id and name, then pieces of its arguments, over several frames.
      expect(mine[0]).toMatchObject({ id: call.id, name: call.name });
      expect(mine.length).toBeGreaterThan(2);
      expect(JSON.parse(mine.map((d) => d.arguments).join(''))).toEqual(JSON.parse(call.arguments));
    }
    expect(new Set(deltas.map((d) => d.index))).toEqual(new Set(calls.map((_, k) => k)));
    expect((await run({ stop: ['never written'] })).deltas).toEqual([]);
    // Without parallel calls only the first call's arguments go out.
    const one = await run({ parallelToolCalls: false });
    expect(one.calls).toHaveLength(1);
    expect(new Set(one.deltas.map((d) => d.index))).toEqual(new Set([0]));
  });

  it('parallelToolCalls false: the reply ends with its first call', async () => {
    const ask = (parallelToolCalls: boolean) =>
      host.generate({
        model: 'hermes',
        messages,
        tools: TOOLS,
        parallelToolCalls,
        maxNewTokens: 200,
        sampling: { temperature: 1, seed: 2, logitBias: { [TOOL_CALL_ID]: 12 } },
      }).result;
    const [one, many] = [await ask(false), await ask(true)];
    expect(many.rows[0]?.toolCalls?.length).toBeGreaterThan(1);
    expect(one.rows[0]?.toolCalls).toHaveLength(1);
    expect(one.finishReason).toBe('tool_calls');
    // It stopped there: the same first call, and far fewer tokens than the reply that went on.
    expect(one.rows[0]?.toolCalls?.[0]?.arguments).toBe(many.rows[0]?.toolCalls?.[0]?.arguments);
    expect(one.tokenIds.length).toBeLessThan(many.tokenIds.length / 2);
  });

  it('refuses a forced call to a schema it cannot enforce, naming the place', async () => {
    const strict: ToolDefinition = {
      name: 'count',
      parameters: { type: 'object', properties: { n: { type: 'number', maximum: 9 } } },
    };
    const err = await host.generate({ messages, tools: [strict], toolChoice: 'required' }).result.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(KvdeskError);
    expect((err as KvdeskError).code).toBe('BAD_REQUEST');
    expect((err as KvdeskError).detail).toEqual({ field: 'tools[0].parameters.properties.n.maximum' });
  });
});
