/**
 * A thinking model's replies on the real engine: a generated package made a thinking model (Qwen3's switch,
 * DeepSeek-R1's `<think>`-opened reply, `</think>` one token that a logit bias makes the random model write), and
 * the shared tiny-reasoning fixture. The split is checked against the reply's own tokens: the reasoning is the
 * text of the tokens before `</think>`, the answer the text of those after it.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RunnerService } from '../../../src/main/host/runner-service';
import type { ChatMessage, GenerateRequest, GenerationResult, StreamFrame } from '../../../src/shared/contract';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { THINK_END_ID, thinkingModel } from '../../helpers/models';

let h: RunnerService;
/** A logit bias on `</think>` that makes the greedy reply reason for a few tokens, then answer. */
let bias: number;
const ASK: ChatMessage[] = [{ role: 'user', content: 'Why is the sky blue?' }];

beforeAll(async () => {
  h = new RunnerService({ intraOpNumThreads: 2 });
  await h.loadModel(thinkingModel(), { id: 'thinking' });
  // The same package whose template opens the reasoning but has no switch (DeepSeek-R1's).
  await h.loadModel(thinkingModel('thinking-always', "{{ messages[0].content + '\\n<think>\\n' }}"), {
    id: 'always',
  });
  await h.loadModel(defaultModelDir, { id: 'default' });
  for (bias = 0.5; bias < 8; bias += 0.5) {
    const at = (await run({ maxNewTokens: 16 })).tokenIds.indexOf(THINK_END_ID);
    if (at >= 3 && at <= 10) break;
  }
}, 120_000);
afterAll(async () => {
  await h?.close();
});

function run(req: Partial<GenerateRequest>, sink?: (f: StreamFrame) => void): Promise<GenerationResult> {
  return h.generate(
    {
      model: 'thinking',
      messages: ASK,
      maxNewTokens: 16,
      sampling: { greedy: true, logitBias: { [THINK_END_ID]: bias } },
      ...req,
    },
    sink,
  ).result;
}

const decode = (ids: number[]) => h.tokenizerOf('thinking').decode(ids, { skipSpecialTokens: true });

describe('a thinking model', () => {
  it('splits the reply at its own </think>: the reasoning is the tokens before, the answer those after', async () => {
    const frames: StreamFrame[] = [];
    const r = await run({}, (f) => frames.push(f));
    const at = r.tokenIds.indexOf(THINK_END_ID);
    expect(at).toBeGreaterThanOrEqual(3);
    expect(r.reasoning).toBe(decode(r.tokenIds.slice(0, at)).trim());
    expect(r.text).toBe(decode(r.tokenIds.slice(at + 1)).trimStart());
    expect(r.reasoning?.length).toBeGreaterThan(0);
    expect(r.reasoningTokens).toBe(at + 1);
    // Streamed: reasoning pieces first, then the answer's (a frame may hold the last of one and the first of
    // the other), adding up to the result.
    const rows = frames.flatMap((f) => (f.type === 'tokens' ? f.rows : []));
    expect(rows.map((row) => row.reasoning ?? '').join('')).toBe(r.reasoning);
    expect(rows.map((row) => row.text).join('')).toBe(r.text);
    const lastReasoning = rows.findLastIndex((row) => (row.reasoning ?? '') !== '');
    const firstText = rows.findIndex((row) => row.text !== '');
    expect(lastReasoning).toBeLessThanOrEqual(firstText);
  });

  it('keeps a reply cut off while reasoning as reasoning', async () => {
    const r = await run({ maxNewTokens: 2 });
    expect(r.tokenIds).not.toContain(THINK_END_ID);
    expect(r.reasoning).toBe(decode(r.tokenIds).trim());
    expect(r.text).toBe('');
    expect(r.reasoningTokens).toBe(2);
  });

  it('thinking: false renders the template with its switch off, and the reply is all answer', async () => {
    const on = h.measurePrompt({ model: 'thinking', messages: ASK });
    const off = h.measurePrompt({ model: 'thinking', messages: ASK, thinking: false });
    expect(off.promptTokens).toBeGreaterThan(on.promptTokens);
    // Without the bias the model writes no </think>: every token is the answer's.
    const r = await run({ thinking: false, sampling: { greedy: true } });
    expect(r.tokenIds).not.toContain(THINK_END_ID);
    expect(r.reasoning).toBe('');
    expect(r.reasoningTokens).toBe(0);
    expect(r.text).toBe(decode(r.tokenIds));
    // thinking: true is the template's default.
    expect(h.measurePrompt({ model: 'thinking', messages: ASK, thinking: true })).toEqual(on);
  });

  it("gives an earlier turn's reasoning to the template, which shows it", async () => {
    const first = await run({});
    const turn: ChatMessage[] = [...ASK, { role: 'assistant', content: first.text }, { role: 'user', content: 'And?' }];
    const without = h.measurePrompt({ model: 'thinking', messages: turn });
    const withIt = h.measurePrompt({
      model: 'thinking',
      messages: turn.map((m, i) => (i === 1 ? { ...m, reasoning: first.reasoning ?? '' } : m)),
    });
    expect(withIt.promptTokens).toBeGreaterThan(without.promptTokens);
  });

  it('JSON output is the answer after the reasoning: the model reasons freely, then writes the JSON', async () => {
    const schema = {
      type: 'object',
      properties: { answer: { enum: ['yes', 'no'] } },
      required: ['answer'],
      additionalProperties: false,
    };
    const free = await run({ maxNewTokens: 128 });
    const at = free.tokenIds.indexOf(THINK_END_ID);
    for (const form of [{ jsonSchema: schema }, { responseFormat: 'json' as const }]) {
      const r = await run({ ...form, maxNewTokens: 128 });
      // The reasoning is the free reply's, up to its own </think>: nothing holds it.
      expect(r.tokenIds.slice(0, at + 1)).toEqual(free.tokenIds.slice(0, at + 1));
      expect(r.reasoning).toBe(free.reasoning);
      expect(r.reasoningTokens).toBe(at + 1);
      // Then the answer is the JSON, whole (the reply ends as its object closes).
      expect(r.finishReason).toBe('eos');
      expect(r.text).toBe(decode(r.tokenIds.slice(at + 1)).trim());
      const value = JSON.parse(r.text);
      if (form.jsonSchema) expect(['yes', 'no']).toContain(value.answer);
      else expect(typeof value).toBe('object');
    }
    // The prompt is the thinking one: nothing closes the reasoning in it.
    expect(h.measurePrompt({ model: 'thinking', messages: ASK, jsonSchema: schema })).toEqual(
      h.measurePrompt({ model: 'thinking', messages: ASK }),
    );
    // Told not to think, the prompt closes the reasoning (the template's switch) and the reply is the JSON alone.
    const off = await run({ jsonSchema: schema, thinking: false, maxNewTokens: 64 });
    expect(h.measurePrompt({ model: 'thinking', messages: ASK, jsonSchema: schema, thinking: false })).toEqual(
      h.measurePrompt({ model: 'thinking', messages: ASK, thinking: false }),
    );
    expect(off.reasoning).toBe('');
    expect(off.text.startsWith('{')).toBe(true);
    expect(JSON.parse(off.text).answer).toMatch(/^(yes|no)$/);
  });

  it('JSON output after a reasoning the prompt opened, and after a thinking budget closes it', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    const sampling = { greedy: true, logitBias: { [THINK_END_ID]: bias } };
    const r = await h.generate({ model: 'always', messages: ASK, jsonSchema: schema, maxNewTokens: 128, sampling })
      .result;
    const at = r.tokenIds.indexOf(THINK_END_ID);
    expect(at).toBeGreaterThan(0);
    expect(r.reasoning).toBe(decode(r.tokenIds.slice(0, at)).trim());
    expect(Number.isInteger(JSON.parse(r.text).n)).toBe(true);
    // A budget of 2: two tokens of reasoning, the close written for the model, then the JSON.
    const close = h.tokenizerOf('thinking').encode('\n</think>\n\n', { addSpecialTokens: false });
    const budgeted = await run({
      jsonSchema: schema,
      thinkingBudget: 2,
      maxNewTokens: 128,
      sampling: { greedy: true },
    });
    expect(budgeted.tokenIds.slice(2, 2 + close.length)).toEqual(close);
    expect(budgeted.reasoningTokens).toBe(2 + close.length - 2);
    expect(Number.isInteger(JSON.parse(budgeted.text).n)).toBe(true);
  });

  it('tools beside JSON output: after the reasoning, or with thinking off from the start, calls or the JSON', async () => {
    const tools = [
      { name: 'f', parameters: { type: 'object', properties: { x: { type: 'integer' } }, required: ['x'] } },
    ];
    for (const extra of [{}, { thinking: false }]) {
      const r = await run({ tools, responseFormat: 'json', maxNewTokens: 128, ...extra });
      const label = JSON.stringify(extra);
      if (extra.thinking === false) expect(r.reasoning ?? '', label).toBe('');
      else expect(r.reasoning?.length, label).toBeGreaterThan(0);
      // The answer is a call or the JSON: never free text.
      const calls = r.rows[0]?.toolCalls ?? [];
      if (calls.length > 0) expect(calls[0]?.name, label).toBe('f');
      else expect(r.text.startsWith('{'), `${label}: ${r.text}`).toBe(true);
    }
  });

  it('a forced tool call: the model reasons, then its opening is written for it, then the call', async () => {
    const tools = [
      { name: 'f', parameters: { type: 'object', properties: { x: { type: 'integer' } }, required: ['x'] } },
    ];
    const tok = h.tokenizerOf('thinking');
    const ids = (text: string) => tok.encode(text, { addSpecialTokens: false });
    // The call's opening the prompt ends with when the model does not reason (Hermes' form: this template shows no
    // tools, so kvdesk's).
    const forced = { messages: ASK, tools, toolChoice: 'required' as const };
    const plain = h.measurePrompt({ model: 'thinking', messages: ASK, tools });
    const opening = ids('<tool_call>\n');
    // A reasoning of four tokens (the budget closes it), then the opening, then the call; or the model's own close
    // (the bias), a blank line and the opening.
    const close = ids('\n</think>\n\n');
    const cases = [
      {
        sampling: { greedy: true, logitBias: { [THINK_END_ID]: -100 } },
        thinkingBudget: 4,
        after: [...close, ...opening],
      },
      {
        sampling: { greedy: true, logitBias: { [THINK_END_ID]: bias } },
        after: [THINK_END_ID, ...ids('\n\n<tool_call>\n')],
      },
    ];
    for (const toolChoice of ['required', { name: 'f' }] as const) {
      for (const { after, ...c } of cases) {
        const r = await run({ ...forced, toolChoice, maxNewTokens: 1024, ...c });
        const label = `${JSON.stringify(toolChoice)} ${JSON.stringify(c)}`;
        const at = r.tokenIds.indexOf(after[0] as number, 1);
        expect(at, label).toBeGreaterThan(0);
        expect(r.tokenIds.slice(at, at + after.length), label).toEqual(after);
        expect(r.reasoning?.length, label).toBeGreaterThan(0);
        expect(r.finishReason, label).toBe('tool_calls');
        const calls = r.rows[0]?.toolCalls ?? [];
        expect(
          calls.map((call) => call.name),
          label,
        ).toEqual(['f']);
        expect(Number.isInteger(JSON.parse(calls[0]?.arguments ?? '').x), label).toBe(true);
        expect(r.text, label).toBe('');
      }
    }
    // Reasoning first, the prompt is the thinking one (no call's opening in it).
    expect(h.measurePrompt({ model: 'thinking', ...forced, maxNewTokens: 1024 })).toEqual(plain);
    // A limit under 1 024 — the request's own (sized for the call), or its package's (this one's 256) where it
    // sets none — or thinking off: the call's opening ends the prompt, the reasoning closed there, and the reply is
    // the call.
    for (const extra of [{ maxNewTokens: 128 }, { maxNewTokens: undefined }, { thinking: false, maxNewTokens: 1024 }]) {
      const r = await run({ ...forced, ...extra, sampling: { greedy: true } });
      expect(r.reasoning ?? '', JSON.stringify(extra)).toBe('');
      expect(r.rows[0]?.toolCalls?.map((call) => call.name)).toEqual(['f']);
      expect(h.measurePrompt({ model: 'thinking', ...forced, ...extra }).promptTokens).toBeGreaterThan(
        plain.promptTokens,
      );
    }
  });

  it('a forced call in a form that writes the name apart: the opening written after the reasoning names the tool', async () => {
    // Magistral's manner: tools listed, calls as [TOOL_CALLS]name[ARGS]{…}, the reply opened with [THINK].
    const template =
      '{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}' +
      "{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]{% elif m.tool_calls %}" +
      '{% for c in m.tool_calls %}[TOOL_CALLS]{{ c.function.name }}[ARGS]{{ c.function.arguments | tojson }}{% endfor %}</s>' +
      '{% else %}{% if m.reasoning_content %}[THINK]{{ m.reasoning_content }}[/THINK]{% endif %}{{ m.content }}</s>{% endif %}{% endfor %}' +
      '{% if add_generation_prompt %}[THINK]{% endif %}';
    await h.loadModel(thinkingModel('thinking-name-apart', template), { id: 'apart' });
    const tools = [
      { name: 'f', parameters: { type: 'object', properties: { x: { type: 'integer' } }, required: ['x'] } },
      { name: 'g', parameters: { type: 'object', properties: { s: { type: 'string' } }, required: ['s'] } },
    ];
    const r = await h.generate({
      model: 'apart',
      messages: ASK,
      tools,
      toolChoice: { name: 'g' },
      maxNewTokens: 1024,
      thinkingBudget: 4,
      sampling: { greedy: true },
    }).result;
    const tok = h.tokenizerOf('apart');
    const written = tok.decode(r.tokenIds, { skipSpecialTokens: false });
    // The reasoning, its close as the template writes it (no line breaks around Magistral's), then the call as the
    // format writes it: the tool's name before its arguments.
    expect(written).toMatch(/^.*\[\/THINK\]\[TOOL_CALLS\]g\[ARGS\]\s*\{/s);
    expect(tok.decode(r.tokenIds.slice(4), { skipSpecialTokens: false })).toMatch(
      /^\[\/THINK\]\[TOOL_CALLS\]g\[ARGS\]/,
    );
    expect(r.reasoning?.length).toBeGreaterThan(0);
    expect(r.rows[0]?.toolCalls?.map((c) => c.name)).toEqual(['g']);
    expect(typeof JSON.parse(r.rows[0]?.toolCalls?.[0]?.arguments ?? '').s).toBe('string');
    expect(r.text).toBe('');
    await h.unloadModel('apart');
  });

  it('JSON output leaves its answer room: a reasoning that would run on is closed for the model in time', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    // A bias against </think>: the reply would reason to its limit, and never write the JSON.
    const sampling = { greedy: true, logitBias: { [THINK_END_ID]: -100 } };
    const close = h.tokenizerOf('thinking').encode('\n</think>\n\n', { addSpecialTokens: false });
    for (const [limit, room] of [
      [128, 64],
      [1000, 250],
    ] as const) {
      const r = await run({ jsonSchema: schema, maxNewTokens: limit, sampling });
      // The room is the answer's: the close written for the model comes out of the reasoning's share.
      const reasoned = limit - room - close.length;
      expect(r.tokenIds.slice(reasoned, reasoned + close.length), `${limit}`).toEqual(close);
      expect(r.finishReason).toBe('eos');
      expect(Number.isInteger(JSON.parse(r.text).n)).toBe(true);
    }
    // A smaller budget of the request's own closes it sooner; a larger one (or an effort's: low's 1 024) is cut
    // to leave the room.
    const own = await run({ jsonSchema: schema, maxNewTokens: 128, thinkingBudget: 10, sampling });
    expect(own.tokenIds.slice(10, 10 + close.length)).toEqual(close);
    for (const more of [{ thinkingBudget: 300 }, { reasoningEffort: 'low' as const }]) {
      const r = await run({ jsonSchema: schema, maxNewTokens: 128, sampling, ...more });
      const reasoned = 128 - 64 - close.length;
      expect(r.tokenIds.slice(reasoned, reasoned + close.length), JSON.stringify(more)).toEqual(close);
      expect(Number.isInteger(JSON.parse(r.text).n)).toBe(true);
    }
    // An end the model picks while it reasons closes the reasoning for it, and it answers.
    const EOS_ID = h.listModels().find((m) => m.id === 'thinking')?.spec.eosTokenIds[0] as number;
    const ending = await run({
      jsonSchema: schema,
      maxNewTokens: 128,
      sampling: { greedy: true, logitBias: { [THINK_END_ID]: -100, [EOS_ID]: 100 } },
    });
    expect(ending.tokenIds.slice(0, close.length)).toEqual(close);
    expect(Number.isInteger(JSON.parse(ending.text).n)).toBe(true);
  });

  it('thinking: false for a template without the switch closes the reasoning before it begins', async () => {
    const on = h.measurePrompt({ model: 'always', messages: ASK });
    const off = h.measurePrompt({ model: 'always', messages: ASK, thinking: false });
    expect(off.promptTokens).toBeGreaterThan(on.promptTokens);
    const r = await h.generate({ model: 'always', messages: ASK, thinking: false, maxNewTokens: 8 }).result;
    expect(r.reasoning).toBe('');
    expect(r.reasoningTokens).toBe(0);
    expect(r.text).toBe(decode(r.tokenIds));
    const always = await h.generate({ model: 'always', messages: ASK, thinking: true, maxNewTokens: 2 }).result;
    expect(always.reasoning?.length).toBeGreaterThan(0);
  });

  it('a prompt whose reasoning is closed for it is rendered and tokenized once', () => {
    const renders = vi.spyOn(Template.prototype, 'render');
    const encodes = vi.spyOn(h.tokenizerOf('always'), 'encode');
    try {
      h.measurePrompt({ model: 'always', messages: ASK, thinking: false });
      // The closing is chosen from the rendered text: it was rendered and tokenized, then again with the closing.
      expect([renders.mock.calls.length, encodes.mock.calls.length]).toEqual([1, 1]);
    } finally {
      renders.mockRestore();
      encodes.mockRestore();
    }
  });

  it('refuses thinking for a model that does not think, and for a prompt without a chat template', async () => {
    await expect(h.generate({ model: 'default', messages: ASK, thinking: true }).result).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      detail: { field: 'thinking' },
      message: expect.stringMatching(/does not think/),
    });
    await expect(h.generate({ model: 'thinking', prompt: 'Why', thinking: false }).result).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      detail: { field: 'thinking' },
      message: expect.stringMatching(/chat requests/),
    });
    // Told not to, a model that does not think runs as it would.
    const plain = await h.generate({ model: 'default', messages: ASK, thinking: false, maxNewTokens: 2 }).result;
    expect(plain.reasoning).toBeUndefined();
  });

  it('an empty final message to continue is a new reply, which the prompt opened', async () => {
    const plain = await run({});
    const continued = await run({ messages: [...ASK, { role: 'assistant', content: '' }], continueFinal: true });
    expect(continued.tokenIds).toEqual(plain.tokenIds);
    expect(continued.reasoning).toBe(plain.reasoning);
    expect(continued.text).toBe(plain.text);
  });

  it('a final message that opened the reasoning itself, thinking off: the reply is its text as written, not split', async () => {
    const prefilled = {
      messages: [...ASK, { role: 'assistant' as const, content: '<think>\nLet me' }],
      continueFinal: true,
      maxNewTokens: 64,
    };
    // Thinking on (or left to the template): the reply continues inside the reasoning and is split at its close.
    const split = await run({ ...prefilled, thinking: true });
    const at = split.tokenIds.indexOf(THINK_END_ID);
    expect(at).toBeGreaterThanOrEqual(1);
    expect(split.reasoning).toBe(decode(split.tokenIds.slice(0, at)).trim());
    expect((await run(prefilled)).reasoning).toBe(split.reasoning);
    // Off: the same tokens (the switch writes the generation prompt, which a continued reply has not), all text.
    const frames: StreamFrame[] = [];
    const off = await run({ ...prefilled, thinking: false }, (f) => frames.push(f));
    expect(off.tokenIds).toEqual(split.tokenIds);
    expect(off.text).toBe(decode(off.tokenIds));
    expect(off.text).toContain('</think>');
    expect(off.reasoning).toBeUndefined();
    const rows = frames.flatMap((f) => (f.type === 'tokens' ? f.rows : []));
    expect(rows.map((row) => row.text).join('')).toBe(off.text);
    expect(rows.some((row) => (row.reasoning ?? '') !== '')).toBe(false);
  });

  it('a stop string ends the answer; the reasoning is not searched for one', async () => {
    const plain = await run({});
    const word = (plain.reasoning ?? '').trim().split(/\s+/)[0] as string;
    expect(word.length).toBeGreaterThan(0);
    const r = await run({ stop: [word] });
    expect(r.reasoning).toBe(plain.reasoning);
    expect(r.tokenIds).toEqual(plain.tokenIds);
  });

  it('a thinking budget closes the reasoning after that many tokens, and the model answers', async () => {
    const free = await run({ sampling: { greedy: true }, maxNewTokens: 24 });
    expect(free.tokenIds.slice(0, 12)).not.toContain(THINK_END_ID);
    // What closes it, as the tokenizer writes it: </think> is one token.
    const close = h.tokenizerOf('thinking').encode('\n</think>\n\n', { addSpecialTokens: false });
    expect(close).toContain(THINK_END_ID);
    for (const budget of [0, 4]) {
      const r = await run({ sampling: { greedy: true }, maxNewTokens: 24, thinkingBudget: budget });
      // The first `budget` tokens are the free reply's; then the close is written for it.
      expect(r.tokenIds.slice(0, budget)).toEqual(free.tokenIds.slice(0, budget));
      expect(r.tokenIds.slice(budget, budget + close.length)).toEqual(close);
      const at = r.tokenIds.indexOf(THINK_END_ID);
      expect(r.reasoning).toBe(decode(r.tokenIds.slice(0, budget)).trim());
      expect(r.text.length).toBeGreaterThan(0);
      expect(r.text).toBe(decode(r.tokenIds.slice(at + 1)).trimStart());
    }
    // A budget the reply stays under changes nothing.
    const under = await run({ thinkingBudget: 100 });
    expect(under.tokenIds).toEqual((await run({})).tokenIds);
  });

  it('a reasoning effort: minimal and low bound the reasoning (256, 1024 tokens) unless a budget is given', async () => {
    const max = 300;
    // A bias against </think>: the reply would reason to its end.
    const sampling = { greedy: true, logitBias: { [THINK_END_ID]: -100 } };
    const free = await run({ sampling, maxNewTokens: max });
    expect(free.tokenIds).not.toContain(THINK_END_ID);
    const close = h.tokenizerOf('thinking').encode('\n</think>\n\n', { addSpecialTokens: false });
    const minimal = await run({ sampling, maxNewTokens: max, reasoningEffort: 'minimal' });
    expect(minimal.tokenIds.slice(0, 256)).toEqual(free.tokenIds.slice(0, 256));
    expect(minimal.tokenIds.slice(256, 256 + close.length)).toEqual(close);
    expect(minimal.text.length).toBeGreaterThan(0);
    // Low's bound (1024) is past this reply's end; medium and high set none.
    for (const effort of ['low', 'medium', 'high'] as const) {
      const r = await run({ sampling, maxNewTokens: max, reasoningEffort: effort });
      expect(r.tokenIds, effort).toEqual(free.tokenIds);
    }
    // The request's own budget wins over its effort's.
    const own = await run({
      sampling: { greedy: true },
      maxNewTokens: 24,
      reasoningEffort: 'minimal',
      thinkingBudget: 4,
    });
    expect(own.tokenIds.slice(4, 4 + close.length)).toEqual(close);
  });

  it("the effort reaches the chat template as reasoning_effort (gpt-oss's low, medium, high)", async () => {
    const template =
      "{{ messages[0].content + '\n' }}{% if reasoning_effort is defined %}{{ 'Reasoning: ' + reasoning_effort + '\n' }}{% endif %}{{ '<think>\n' }}";
    await h.loadModel(thinkingModel('thinking-effort', template), { id: 'effort' });
    const promptOf = async (reasoningEffort?: GenerateRequest['reasoningEffort']) => {
      const r = await h.generate({
        model: 'effort',
        messages: ASK,
        maxNewTokens: 1,
        sampling: { greedy: true },
        ...(reasoningEffort ? { reasoningEffort } : {}),
      }).result;
      return r.promptTokens;
    };
    const tok = h.tokenizerOf('effort');
    const count = (text: string) => tok.encode(text, { addSpecialTokens: false }).length;
    const base = await promptOf();
    expect(base).toBe(count(`${ASK[0]?.content}\n<think>\n`));
    for (const [asked, shown] of [
      ['minimal', 'low'],
      ['low', 'low'],
      ['medium', 'medium'],
      ['high', 'high'],
      ['max', 'high'],
    ] as const) {
      expect(await promptOf(asked), asked).toBe(count(`${ASK[0]?.content}\nReasoning: ${shown}\n<think>\n`));
    }
    await h.unloadModel('effort');
  });

  it('a chat reply that reasons may be up to 2 048 tokens long (a quarter of the context) where nothing sets a limit', async () => {
    const EOS_ID = h.listModels().find((m) => m.id === 'thinking')?.spec.eosTokenIds[0] as number;
    // The thinking package without the limit the default package's generation_config.json sets (Qwen3's sets none),
    // with its context (2 048) and with a longer one (RoPE: the graph takes any position).
    const unbounded = (context?: number) => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-unbounded-'));
      cpSync(thinkingModel(), dir, { recursive: true });
      const edit = (file: string, change: (json: Record<string, unknown>) => void) => {
        const json = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
        change(json);
        writeFileSync(path.join(dir, file), JSON.stringify(json));
      };
      edit('generation_config.json', (g) => delete g.max_new_tokens);
      if (context) edit('config.json', (c) => Object.assign(c, { max_position_embeddings: context }));
      return dir;
    };
    const dirs = [unbounded(), unbounded(16_384)];
    await h.loadModel(dirs[0] as string, { id: 'unbounded' });
    await h.loadModel(dirs[1] as string, { id: 'long' });
    const admitted = async (req: Partial<GenerateRequest>, model = 'unbounded') => {
      let max: number | undefined;
      const r = await h.generate(
        { model, messages: ASK, sampling: { greedy: true, logitBias: { [EOS_ID]: 100 } }, ...req },
        (f) => {
          if (f.type === 'admitted') max = f.admittedMaxTokens;
        },
      ).result;
      // A default is not clipped by the context.
      expect(r.clipped).toBeUndefined();
      return max;
    };
    expect(await admitted({}, 'long')).toBe(2048);
    expect(await admitted({})).toBe(512);
    // A forced call reasons first too; replies that do not reason: thinking off (a forced call's too), a plain prompt.
    const now = { name: 'now', parameters: { type: 'object', properties: {} } };
    expect(await admitted({ tools: [now], toolChoice: 'required' }, 'long')).toBe(2048);
    expect(await admitted({ tools: [now], toolChoice: 'required', thinking: false }, 'long')).toBe(256);
    expect(await admitted({ thinking: false })).toBe(256);
    expect(await admitted({ messages: undefined, prompt: 'Why' })).toBe(256);
    expect(await admitted({ maxNewTokens: 40 })).toBe(40);
    // The package's own limit wins.
    expect(await admitted({}, 'thinking')).toBe(256);
    await h.unloadModel('unbounded');
    await h.unloadModel('long');
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('a plain completion (no chat template) is the text as written', async () => {
    const r = await h.generate({
      model: 'thinking',
      prompt: 'Why',
      maxNewTokens: 12,
      sampling: { greedy: true, logitBias: { [THINK_END_ID]: bias } },
    }).result;
    expect(r.reasoning).toBeUndefined();
    expect(r.text).toBe(decode(r.tokenIds));
  });
});

describe.skipIf(!haveFixtures)(`tiny-reasoning (${haveFixtures ? 'shared fixture' : fixturesSkipReason})`, () => {
  it('is a thinking model whose template opens the reasoning: its chat reply reasons', async () => {
    const info = await h.loadModel(fixture('onnx-genai/tiny-reasoning'), { id: 'tiny-reasoning' });
    expect(info.spec.reasoning).toEqual({ open: '<think>', close: '</think>' });
    const r = await h.generate({
      model: 'tiny-reasoning',
      messages: [{ role: 'user', content: 'hello world' }],
      sampling: { greedy: true },
    }).result;
    const tok = h.tokenizerOf('tiny-reasoning');
    const at = r.tokenIds.indexOf(tok.tokenToId('</think>') as number);
    const before = at < 0 ? r.tokenIds : r.tokenIds.slice(0, at);
    expect(r.reasoning).toBe(tok.decode(before, { skipSpecialTokens: true }).trim());
    expect(r.reasoning?.length).toBeGreaterThan(0);
  });

  it('a thinking budget closes the reasoning with the vocabulary’s </think> token, which its text does not encode to', async () => {
    const tok = h.tokenizerOf('tiny-reasoning');
    const close = tok.tokenToId('</think>') as number;
    // Its pre-tokenizer splits the marker's text into pieces the vocabulary lacks.
    expect(tok.encode('</think>', { addSpecialTokens: false })).not.toContain(close);
    const r = await h.generate({
      model: 'tiny-reasoning',
      messages: [{ role: 'user', content: 'hello' }],
      sampling: { greedy: true },
      thinkingBudget: 1,
      maxNewTokens: 5,
    }).result;
    expect(r.tokenIds[1]).toBe(close);
    expect(r.reasoningTokens).toBe(2);
    expect(r.reasoning).toBe(tok.decode(r.tokenIds.slice(0, 1), { skipSpecialTokens: true }).trim());
    expect(r.text).toBe(tok.decode(r.tokenIds.slice(2), { skipSpecialTokens: true }).trim());
  });
});
