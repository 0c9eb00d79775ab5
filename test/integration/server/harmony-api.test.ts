/**
 * A gpt-oss (Harmony) reply that reasons again after answer text, through the Responses API's stream, on a real
 * server with a scripted Harmony package (test/helpers/harmony-model.ts). Thinking off, the prompt opens the final
 * message and the reply writes text, then an analysis message, then the final one; the engine sends the first
 * token in a frame of its own, then many a frame: the host starts a new frame where reasoning follows text, so
 * clients (which put a frame's reasoning before its text) see them in the model's order. The message item is done
 * before the reasoning item is added and the text after it is a new message, so the official client's response
 * holds all of the reply; the whole reply, which keeps no order between them, has the reasoning first. (Anthropic's
 * stream, whose thinking blocks need thinking on, is driven with the same frames in
 * test/unit/server/reasoning-events.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { harmonyPackage, nextMessage, tokens } from '../../helpers/harmony-model';
import { openaiClient, startTestServer, type TestServer } from './server-helpers';

const PREAMBLE = 'Let me check.';
const THOUGHT = 'The preamble is out.';
const FINAL = 'It is sunny.';
/**
 * A reply in the final message the prompt opened (after an empty analysis, thinking off), then an analysis
 * message, then the final one again: answer text, reasoning, answer text.
 */
const INTERLEAVED = [PREAMBLE, ...nextMessage('analysis'), THOUGHT, ...nextMessage('final'), FINAL];
/** The reply as the host splits it: answer bodies parted by a blank line. */
const TEXT = `${PREAMBLE}\n\n${FINAL}`;

/**
 * A reply cut by max tokens just after it opens another analysis message, whose only text, `<` (it could begin
 * `<|end|>`), the splitter holds until the end: the reply's last frame holds the reasoning and, with a stop
 * string, the preamble's end held back before it.
 */
const CUT_BEFORE = [PREAMBLE, ...nextMessage('analysis'), '<'];
const CUT = [...CUT_BEFORE, 'b> is bold.'];

/**
 * A preamble (a commentary message) ending in `<`, which could begin a call (`<tool_call>`): with tools the
 * tool-call reader holds it when the analysis message begins; an analysis message whose first text, `<`, the
 * splitter holds (a reply cut there ends with it), then the final message.
 */
const HELD_BY_READER = 'Let me check <';
const READER_BEFORE = ['<|channel|>', 'commentary', '<|message|>', HELD_BY_READER, ...nextMessage('analysis'), '<'];
const READER = [...READER_BEFORE, 'b> hmm.', ...nextMessage('final'), 'Done.'];
const LAMP = { type: 'function' as const, function: { name: 'lamp', parameters: { type: 'object', properties: {} } } };

let root: string;
let t: TestServer;
let openai: OpenAI;
let model: string;
let cutModel: string;
let cutTokens: number;
let readerModel: string;
let readerTokens: number;

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-harmony-api-'));
  // The scripted model's reply holds for a prompt read in one run with an empty cache: no prompt cache.
  t = await startTestServer({ intraOpNumThreads: 2, promptCacheSessions: 0 }, { loadDefault: false });
  openai = openaiClient(t.url);
  const pkg = harmonyPackage(path.join(root, 'interleaved'), INTERLEAVED);
  const r = await t.hostApi.call('loadModel', { path: pkg.dir });
  if (!r.ok) throw new Error(r.error.message);
  model = r.value.id;
  const cut = harmonyPackage(path.join(root, 'cut'), CUT);
  cutTokens = tokens(cut, CUT_BEFORE).length;
  const c = await t.hostApi.call('loadModel', { path: cut.dir });
  if (!c.ok) throw new Error(c.error.message);
  cutModel = c.value.id;
  const reader = harmonyPackage(path.join(root, 'reader'), READER);
  readerTokens = tokens(reader, READER_BEFORE).length;
  const h = await t.hostApi.call('loadModel', { path: reader.dir });
  if (!h.ok) throw new Error(h.error.message);
  readerModel = h.value.id;
}, 120_000);
afterAll(async () => {
  await t?.close();
  rmSync(root, { recursive: true, force: true });
});

const ASK = [{ role: 'user' as const, content: 'Weather in Paris?' }];

/**
 * Output items as a stream builds them: each is added at the next index while none is open, its text pieces go
 * to it, it is done once. Returns each one's type and its pieces added up.
 */
function replay(events: readonly OpenAI.Responses.ResponseStreamEvent[]): Array<{ kind: string; text: string }> {
  const built: Array<{ kind: string; text: string }> = [];
  let open: number | null = null;
  for (const e of events) {
    if (e.type === 'response.output_item.added') {
      expect(open, 'an item added while another is open').toBeNull();
      expect(e.output_index, 'an item added at the next index').toBe(built.length);
      built.push({ kind: e.item.type, text: '' });
      open = e.output_index;
    } else if (e.type === 'response.output_text.delta' || e.type === 'response.reasoning_text.delta') {
      expect(e.output_index, 'a piece of an item that is not open').toBe(open);
      (built[e.output_index] as { text: string }).text += e.delta;
    } else if (e.type === 'response.output_item.done') {
      expect(e.output_index, 'an item done that is not open').toBe(open);
      open = null;
    }
  }
  expect(open, 'an item still open at the end').toBeNull();
  return built;
}

/** Frames read as a client reads each (its reasoning, then its text), runs of one kind joined. */
function inOrder(frames: ReadonlyArray<{ text: string; reasoning: string }>): Array<{ kind: string; text: string }> {
  const order: Array<{ kind: string; text: string }> = [];
  const add = (kind: string, text: string) => {
    if (text === '') return;
    const last = order.at(-1);
    if (last?.kind === kind) last.text += text;
    else order.push({ kind, text });
  };
  for (const f of frames) {
    add('reasoning', f.reasoning);
    add('text', f.text);
  }
  return order;
}

describe('reasoning after answer text (gpt-oss: another analysis message after a preamble)', () => {
  it.each([
    ['', []],
    // The end of the preamble, "check.", could begin this stop string: held back when the reasoning begins.
    [', a stop string holding back its end', ['check. Done']],
  ])('the host reads the reply as answer text, reasoning, answer text%s', async (_, stop) => {
    const frames: Array<{ text: string; reasoning: string }> = [];
    const r = await t.runner.generate(
      { model, messages: ASK, thinking: false, maxNewTokens: 128, sampling: { greedy: true }, stop },
      (f) => {
        if (f.type === 'tokens')
          for (const row of f.rows) frames.push({ text: row.text, reasoning: row.reasoning ?? '' });
      },
    ).result;
    expect(r.reasoning).toBe(THOUGHT);
    expect(r.text).toBe(TEXT);
    expect(r.finishReason).toBe('eos');
    // The engine sends the first token in a frame of its own: answer text before any reasoning.
    expect(frames[0]?.text.length).toBeGreaterThan(0);
    expect(frames[0]?.reasoning).toBe('');
    // Read as a client reads a frame (its reasoning, then its text), the frames give the reply in the model's order:
    // no frame holds reasoning that came after text of its own.
    expect(inOrder(frames)).toEqual([
      { kind: 'text', text: PREAMBLE },
      { kind: 'reasoning', text: THOUGHT },
      { kind: 'text', text: `\n\n${FINAL}` },
    ]);
  });

  it('the Responses stream: the message is done before the reasoning item is added, and text after it is a new message', async () => {
    // Thinking off: the prompt opens the final message after an empty analysis, and the reply starts with its text.
    const params = { model, input: ASK, max_output_tokens: 128, reasoning: { effort: 'none' as const } };
    const stream = openai.responses.stream(params);
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    stream.on('event', (e) => events.push(structuredClone(e)));
    const streamed = await stream.finalResponse();
    const items = replay(events);
    // In the model's order, each part whole: a frame that holds the preamble's end and the reasoning's start (the
    // engine sends many tokens a frame) does not cut the preamble or put the reasoning before its end.
    expect(items).toEqual([
      { kind: 'message', text: PREAMBLE },
      { kind: 'reasoning', text: THOUGHT },
      { kind: 'message', text: `\n\n${FINAL}` },
    ]);
    expect(streamed.status).toBe('completed');
    // The client's response has all of it, each item complete.
    const output = streamed.output as Array<{ type: string; status: string; content: Array<{ text: string }> }>;
    expect(output.map((i) => ({ kind: i.type, text: i.content.map((c) => c.text).join('') }))).toEqual(items);
    expect(output.every((i) => i.status === 'completed')).toBe(true);
    const whole = await openai.responses.create(params);
    expect(whole.output.map((i) => i.type)).toEqual(['reasoning', 'message']);
    expect(whole.output_text).toBe(TEXT);
  });

  // The reply's last frame (the engine's end) is split as the others are: the text held back goes out before the
  // reasoning the splitter let go at the end.
  it('cut by max tokens inside the reasoning, the text held back before it goes out first', async () => {
    const frames: Array<{ text: string; reasoning: string }> = [];
    const r = await t.runner.generate(
      {
        model: cutModel,
        messages: ASK,
        thinking: false,
        maxNewTokens: cutTokens,
        sampling: { greedy: true },
        stop: ['check. Done'],
      },
      (f) => {
        if (f.type === 'tokens')
          for (const row of f.rows) frames.push({ text: row.text, reasoning: row.reasoning ?? '' });
      },
    ).result;
    expect(r.finishReason).toBe('length');
    expect(r.text).toBe(PREAMBLE);
    expect(r.reasoning).toBe('<');
    expect(inOrder(frames)).toEqual([
      { kind: 'text', text: PREAMBLE },
      { kind: 'reasoning', text: '<' },
    ]);
    // The chat stream's chunks (reasoning_content, content) in the same order.
    const stream = await openai.chat.completions.create({
      model: cutModel,
      messages: ASK,
      max_tokens: cutTokens,
      stop: ['check. Done'],
      reasoning_effort: 'none' as never,
      stream: true,
    });
    const chunks: Array<{ text: string; reasoning: string }> = [];
    for await (const c of stream) {
      const d = c.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      chunks.push({ text: d?.content ?? '', reasoning: d?.reasoning_content ?? '' });
    }
    expect(inOrder(chunks)).toEqual([
      { kind: 'text', text: PREAMBLE },
      { kind: 'reasoning', text: '<' },
    ]);
    // Ollama's stream: each line's message (its thinking, then its content) in the same order.
    const ollama = await fetch(`${t.url}/api/chat`, {
      method: 'POST',
      body: JSON.stringify({
        model: cutModel,
        messages: ASK,
        think: false,
        options: { num_predict: cutTokens, stop: ['check. Done'], temperature: 0 },
      }),
    });
    const lines = (await ollama.text())
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as { message?: { content?: string; thinking?: string } });
    expect(
      inOrder(lines.map((l) => ({ text: l.message?.content ?? '', reasoning: l.message?.thinking ?? '' }))),
    ).toEqual([
      { kind: 'text', text: PREAMBLE },
      { kind: 'reasoning', text: '<' },
    ]);
  });

  // Text the tool-call reader holds (it could begin a call) when reasoning begins cannot be a call (none spans
  // into reasoning): it goes out before the reasoning, in each frame and in the last.
  it.each([
    ['the whole reply', 128, `${HELD_BY_READER}\n\nDone.`, '<b> hmm.'],
    ['a reply cut by max tokens inside the reasoning', -1, HELD_BY_READER, '<'],
  ])('with tools, the text the call reader held goes out before the reasoning: %s', async (_, max, text, reasoning) => {
    const maxTokens = max > 0 ? max : readerTokens;
    const frames: Array<{ text: string; reasoning: string }> = [];
    const r = await t.runner.generate(
      {
        model: readerModel,
        messages: ASK,
        maxNewTokens: maxTokens,
        sampling: { greedy: true },
        tools: [LAMP.function],
      },
      (f) => {
        if (f.type === 'tokens')
          for (const row of f.rows) frames.push({ text: row.text, reasoning: row.reasoning ?? '' });
      },
    ).result;
    expect(r.text).toBe(text);
    expect(r.reasoning).toBe(reasoning);
    expect(r.rows[0]?.toolCalls ?? []).toEqual([]);
    const order = [
      { kind: 'text', text: HELD_BY_READER },
      { kind: 'reasoning', text: reasoning },
      ...(max > 0 ? [{ kind: 'text', text: '\n\nDone.' }] : []),
    ];
    expect(inOrder(frames)).toEqual(order);
    // The chat stream's chunks (reasoning_content, content) in the same order.
    const stream = await openai.chat.completions.create({
      model: readerModel,
      messages: ASK,
      max_tokens: maxTokens,
      tools: [LAMP],
      stream: true,
    });
    const chunks: Array<{ text: string; reasoning: string }> = [];
    for await (const c of stream) {
      const d = c.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      chunks.push({ text: d?.content ?? '', reasoning: d?.reasoning_content ?? '' });
    }
    expect(inOrder(chunks)).toEqual(order);
  });
});
