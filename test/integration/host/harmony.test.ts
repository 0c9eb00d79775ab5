/**
 * gpt-oss's Harmony format on the real engine: packages whose model writes a Harmony reply token by token (a
 * scripted graph, test/helpers/scripted-model.ts) behind a Harmony chat template. The reply is read apart as
 * it streams: the analysis message is the reasoning, the final one the answer, a message to a function a call.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerService } from '../../../src/main/host/runner-service';
import type { ChatMessage, GenerateRequest, StreamFrame } from '../../../src/shared/contract';
import { HARMONY } from '../../../src/shared/reasoning';
import { ANALYSIS, ANSWER, REPLY, tokens, harmonyPackage as writeHarmony } from '../../helpers/harmony-model';
import type { ScriptedPackage } from '../../helpers/scripted-model';

const harmonyPackage = (name: string, parts: string[]) => writeHarmony(path.join(root, name), parts);

const ASK: ChatMessage[] = [{ role: 'user', content: 'Why is the sky blue?' }];

let root: string;
let h: RunnerService;
let reply: ScriptedPackage;

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-harmony-'));
  h = new RunnerService({ intraOpNumThreads: 2 });
  reply = harmonyPackage('reply', REPLY);
  await h.loadModel(reply.dir, { id: 'reply' });
}, 60_000);

afterAll(async () => {
  await h?.close();
  rmSync(root, { recursive: true, force: true });
});

const run = (req: Partial<GenerateRequest>, sink?: (f: StreamFrame) => void) =>
  h.generate({ model: 'reply', messages: ASK, maxNewTokens: 64, sampling: { greedy: true }, ...req }, sink).result;

const WEATHER: ChatMessage[] = [{ role: 'user', content: 'Weather in Paris?' }];
const WEATHER_TOOLS = [
  { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
];
/** A reply that reasons, then calls get_weather (its body last). */
const CALL_PARTS = [
  '<|channel|>',
  'analysis',
  '<|message|>',
  'Need weather.',
  '<|end|>',
  '<|start|>',
  'assistant to=functions.get_weather',
  '<|channel|>',
  'commentary json',
  '<|message|>',
  '{"city": "Paris"}',
];

describe('a Harmony (gpt-oss) model', () => {
  it('is a thinking model whose reasoning is its analysis channel', () => {
    expect(h.listModels().find((m) => m.id === 'reply')?.spec.reasoning).toEqual(HARMONY);
  });

  it('streams the analysis message as reasoning and the final one as the answer, without headers or markers', async () => {
    const frames: StreamFrame[] = [];
    const r = await run({}, (f) => frames.push(f));
    expect(r.reasoning).toBe(ANALYSIS);
    expect(r.text).toBe(ANSWER);
    expect(r.finishReason).toBe('eos');
    // The analysis message's header, body and end are its reasoning tokens; the final one's header is not.
    const open = tokens(reply, ['<|channel|>', 'analysis', '<|message|>']).length;
    const body = tokens(reply, [ANALYSIS]).length;
    expect(r.reasoningTokens).toBe(open + body + 1);
    const rows = frames.flatMap((f) => (f.type === 'tokens' ? f.rows : []));
    expect(rows.map((row) => row.reasoning ?? '').join('')).toBe(ANALYSIS);
    expect(rows.map((row) => row.text).join('')).toBe(ANSWER);
  });

  it("gives an earlier turn's reasoning to the template as `thinking`, as gpt-oss's reads it", () => {
    const turns = (reasoning?: string): ChatMessage[] => [
      ...ASK,
      { role: 'assistant', content: ANSWER, ...(reasoning ? { reasoning } : {}) },
      { role: 'user', content: 'And at sunset?' },
    ];
    const shown = h.measurePrompt({ model: 'reply', messages: turns(ANALYSIS) }).promptTokens;
    const plain = h.measurePrompt({ model: 'reply', messages: turns() }).promptTokens;
    const analysis = tokens(reply, [
      '<|start|>',
      'assistant',
      '<|channel|>',
      'analysis',
      '<|message|>',
      ANALYSIS,
      '<|end|>',
    ]);
    expect(shown - plain).toBe(analysis.length);
  });

  it('a thinking budget ends the analysis and opens the final message, as Harmony writes it', async () => {
    const free = await run({});
    const open = tokens(reply, ['<|channel|>', 'analysis', '<|message|>']).length;
    const close = tokens(reply, ['<|end|>', '<|start|>', 'assistant', '<|channel|>', 'final', '<|message|>']);
    const budget = 3;
    const r = await run({ thinkingBudget: budget });
    expect(r.tokenIds.slice(0, open + budget)).toEqual(free.tokenIds.slice(0, open + budget));
    // No line breaks around it (as a <think> model's close has): the close is the final message's header.
    expect(r.tokenIds.slice(open + budget, open + budget + close.length)).toEqual(close);
    expect(r.reasoning).toBe(reply.tokenizer.decode(free.tokenIds.slice(open, open + budget)).trim());
  });

  it('thinking: false opens the final message after an empty analysis, and the reply is all answer', async () => {
    const direct = harmonyPackage('direct', [ANSWER]);
    await h.loadModel(direct.dir, { id: 'direct' });
    const measure = (req: Partial<GenerateRequest>) =>
      h.measurePrompt({ model: 'direct', messages: ASK, ...req }).promptTokens;
    const suffix = tokens(direct, ['<|channel|>', 'analysis', '<|message|>', '<|end|>', '<|start|>', 'assistant']);
    const final = tokens(direct, ['<|channel|>', 'final', '<|message|>']);
    expect(measure({ thinking: false }) - measure({})).toBe(suffix.length + final.length);
    // JSON output: the analysis is opened for the model (the engine ends it with the final message's header);
    // told not to think, the final message is opened for it.
    const analysis = tokens(direct, ['<|channel|>', 'analysis', '<|message|>']);
    expect(measure({ responseFormat: 'json' }) - measure({})).toBe(analysis.length);
    expect(measure({ responseFormat: 'json', thinking: false })).toBe(measure({ thinking: false }));
    // With tools the next message's channel is left to the model: a call is a commentary message.
    const tools = [{ name: 'now', parameters: { type: 'object', properties: {} } }];
    expect(measure({ thinking: false, tools }) - measure({ tools })).toBe(suffix.length);
    const frames: StreamFrame[] = [];
    const r = await h.generate(
      { model: 'direct', messages: ASK, thinking: false, maxNewTokens: 32, sampling: { greedy: true } },
      (f) => frames.push(f),
    ).result;
    expect(r.text).toBe(ANSWER);
    expect(r.reasoning ?? '').toBe('');
    // The answer streams as it is written (the splitter starts in the final body, holding nothing back).
    const texts = frames.flatMap((f) => (f.type === 'tokens' ? f.rows.map((row) => row.text) : []));
    expect(texts.filter((t) => t !== '').length).toBeGreaterThan(0);
  });

  it('JSON output: the analysis (opened in the prompt) is the reasoning, the final message the JSON', async () => {
    const json = '{"color": "blue"}';
    const header = ['<|end|>', '<|start|>', 'assistant', '<|channel|>', 'final', '<|message|>'];
    // The prompt opens the analysis: the model writes its body.
    const pkg = harmonyPackage('json', [ANALYSIS, ...header, json]);
    await h.loadModel(pkg.dir, { id: 'json' });
    const schema = { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] };
    const ask = (model: string) =>
      h.generate({ model, messages: ASK, jsonSchema: schema, maxNewTokens: 128, sampling: { greedy: true } }).result;
    const r = await ask('json');
    expect(r.reasoning).toBe(ANALYSIS);
    expect(r.text).toBe(json);
    expect(r.finishReason).toBe('eos');
    // A model that would head its final message otherwise (gpt-oss writes `<|constrain|>json` in it when asked for
    // JSON) or write another message first (a commentary preamble): once its analysis ends, the final message's
    // header is written for it, and the JSON is that message's body, held from its first byte.
    for (const [name, after] of [
      ['constrain', ['<|start|>', 'assistant', '<|channel|>', 'final', ' ', '<|constrain|>', 'json', '<|message|>']],
      ['preamble', ['<|start|>', 'assistant', '<|channel|>', 'commentary', '<|message|>', 'In JSON.', '<|end|>']],
    ] as const) {
      const other = harmonyPackage(name, [ANALYSIS, '<|end|>', ...after, json]);
      await h.loadModel(other.dir, { id: name });
      const o = await ask(name);
      expect(o.reasoning, name).toBe(ANALYSIS);
      const end = o.tokenIds.indexOf(other.ids['<|end|>'] as number);
      const written = tokens(other, header);
      expect(o.tokenIds.slice(end, end + written.length), name).toEqual(written);
      expect(o.text.startsWith('{'), name).toBe(true);
      expect(o.text, name).not.toContain('In JSON.');
      await h.unloadModel(name);
    }
    await h.unloadModel('json');
  });

  it('reads a message to a function as a tool call', async () => {
    const caller = harmonyPackage('caller', [
      '<|channel|>',
      'analysis',
      '<|message|>',
      'Need the weather.',
      '<|end|>',
      '<|start|>',
      'assistant',
      '<|channel|>',
      'commentary to=functions.get_weather ',
      '<|constrain|>',
      'json',
      '<|message|>',
      '{"city": "Tokyo"}',
      '<|call|>',
    ]);
    await h.loadModel(caller.dir, { id: 'caller' });
    const tools = [
      {
        name: 'get_weather',
        description: 'Weather in a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    ];
    const r = await h.generate({
      model: 'caller',
      messages: [{ role: 'user', content: 'Weather in Tokyo?' }],
      tools,
      maxNewTokens: 256,
      sampling: { greedy: true },
    }).result;
    expect(r.reasoning).toBe('Need the weather.');
    const calls = r.rows[0]?.toolCalls;
    expect(calls).toHaveLength(1);
    expect(calls?.[0]?.name).toBe('get_weather');
    expect(JSON.parse(calls?.[0]?.arguments ?? '')).toEqual({ city: 'Tokyo' });
    expect(r.text).toBe('');
    expect(r.finishReason).toBe('tool_calls');
    // A thinking budget the analysis stays within ends with it: the call after it is not counted, nor cut.
    const body = tokens(caller, ['Need the weather.']).length;
    const budgeted = await h.generate({
      model: 'caller',
      messages: [{ role: 'user', content: 'Weather in Tokyo?' }],
      tools,
      maxNewTokens: 256,
      thinkingBudget: body + 2,
      sampling: { greedy: true },
    }).result;
    expect(budgeted.tokenIds).toEqual(r.tokenIds);
    expect(budgeted.rows[0]?.toolCalls?.[0]?.name).toBe('get_weather');
  });

  it("matches stop strings only against what the model wrote, never kvdesk's markup around a call", async () => {
    const parts = [...CALL_PARTS, '<|call|>'];
    const p = harmonyPackage('stop-caller', parts);
    await h.loadModel(p.dir, { id: 'stop-caller' });
    const ask = { model: 'stop-caller', messages: WEATHER, maxNewTokens: 256, sampling: { greedy: true } };
    // The Hermes text kvdesk hands the call on in has line breaks; the model wrote none.
    const r = await h.generate({ ...ask, tools: WEATHER_TOOLS, stop: ['\n', '"name"'] }).result;
    expect(r.rows[0]?.toolCalls?.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([
      ['get_weather', { city: 'Paris' }],
    ]);
    expect(r.text).toBe('');
    expect(r.finishReason).toBe('tool_calls');
    // A stop string the model wrote in the arguments cuts the call: it is text, as far as the model wrote it.
    const cut = await h.generate({ ...ask, tools: WEATHER_TOOLS, stop: ['Paris'] }).result;
    expect(cut.rows[0]?.toolCalls).toBeUndefined();
    expect(cut.text).toBe('{"city": "');
    expect(cut.finishReason).toBe('stop');
  });

  it("matches stop strings only against what the model wrote, never kvdesk's blank line between two messages", async () => {
    const parts = [
      '<|channel|>',
      'commentary',
      '<|message|>',
      'Let me see.',
      '<|end|>',
      '<|start|>',
      'assistant',
      '<|channel|>',
      'final',
      '<|message|>',
      'It is 4.',
    ];
    const p = harmonyPackage('two-messages', parts);
    await h.loadModel(p.dir, { id: 'two-messages' });
    const ask = { model: 'two-messages', messages: ASK, maxNewTokens: 256, sampling: { greedy: true } };
    const frames: StreamFrame[] = [];
    const r = await h.generate({ ...ask, stop: ['\n\n', '\n', '.I'] }, (f) => frames.push(f)).result;
    expect(r.text).toBe('Let me see.\n\nIt is 4.');
    expect(r.finishReason).toBe('eos');
    expect(r.rows[0]?.stopSequence).toBeUndefined();
    const rows = frames.flatMap((f) => (f.type === 'tokens' ? f.rows : []));
    expect(rows.map((row) => row.text).join('')).toBe('Let me see.\n\nIt is 4.');
    // A stop string the model wrote in the second message still ends the reply there.
    const cut = await h.generate({ ...ask, stop: ['\n\n', 'is 4'] }).result;
    expect(cut.text).toBe('Let me see.\n\nIt ');
    expect(cut.finishReason).toBe('stop');
    expect(cut.rows[0]?.stopSequence).toBe('is 4');
  });

  it('gives a call not read as one back as the body the model wrote, without markup', async () => {
    const p = harmonyPackage('plain-caller', [...CALL_PARTS, '<|call|>']);
    await h.loadModel(p.dir, { id: 'plain-caller' });
    const ask = { model: 'plain-caller', messages: WEATHER, maxNewTokens: 256, sampling: { greedy: true } };
    for (const req of [{}, { tools: WEATHER_TOOLS, toolChoice: 'none' as const }]) {
      const frames: StreamFrame[] = [];
      const r = await h.generate({ ...ask, ...req }, (f) => frames.push(f)).result;
      expect(r.text).toBe('{"city": "Paris"}');
      expect(r.rows[0]?.toolCalls).toBeUndefined();
      const rows = frames.flatMap((f) => (f.type === 'tokens' ? f.rows : []));
      expect(rows.map((row) => row.text).join('')).toBe('{"city": "Paris"}');
    }
    // Cut by max tokens inside its arguments: what the model wrote of them, no brace or tag of kvdesk's.
    const upTo = tokens(p, CALL_PARTS.slice(0, -1)).length + tokens(p, ['{"city":']).length;
    expect(tokens(p, ['{"city":'])).toEqual(tokens(p, ['{"city": "Paris"}']).slice(0, tokens(p, ['{"city":']).length));
    const cut = await h.generate({ ...ask, tools: WEATHER_TOOLS, maxNewTokens: upTo }).result;
    expect(cut.rows[0]?.toolCalls).toBeUndefined();
    expect(cut.text).toBe('{"city":');
    expect(cut.finishReason).toBe('length');
  });

  it('lists no log-probability for the end token the reply ended at (its text is read, as <|return|>)', async () => {
    const r = await run({ logprobs: 0 });
    expect(r.finishReason).toBe('eos');
    const listed = r.rows[0]?.logprobs ?? [];
    expect(listed.length).toBe(r.tokenIds.length - 1);
    expect(listed.map((l) => l.id)).toEqual(r.tokenIds.slice(0, -1));
  });

  it("continues a final message's text (a prefill) as the answer, not as a message's header", async () => {
    const more = harmonyPackage('more', [' because of', ' Rayleigh scattering.', '<|return|>']);
    await h.loadModel(more.dir, { id: 'more' });
    try {
      const r = await h.generate({
        model: 'more',
        messages: [...ASK, { role: 'assistant', content: 'Blue light scatters more' }],
        continueFinal: true,
        maxNewTokens: 64,
        sampling: { greedy: true },
      }).result;
      expect(r.text).toBe(' because of Rayleigh scattering.');
      expect(r.reasoning ?? '').toBe('');
    } finally {
      await h.unloadModel('more');
    }
  });

  it('sends a calling turn back with its preamble joined to its reasoning, which the template takes', () => {
    const calling = (content: string): ChatMessage[] => [
      { role: 'user', content: 'Weather in Tokyo?' },
      {
        role: 'assistant',
        content,
        reasoning: 'Need the weather.',
        toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city":"Tokyo"}' }],
      },
      { role: 'tool', content: '{"temp": 20}', toolCallId: 'c1' },
    ];
    const measure = (content: string) => h.measurePrompt({ model: 'reply', messages: calling(content) }).promptTokens;
    // Both would make gpt-oss's template refuse the conversation; the preamble goes in the analysis instead.
    const joined = tokens(reply, ['Need the weather.\n\nLet me check.']).length;
    const alone = tokens(reply, ['Need the weather.']).length;
    expect(measure('Let me check.') - measure('')).toBe(joined - alone);
  });
});
