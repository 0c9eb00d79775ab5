/**
 * gpt-oss's replies (OpenAI's Harmony format) read apart as they stream: the analysis channel is the reasoning,
 * final and commentary the answer, a message to a function a call. Checked against a plain reading of the whole
 * reply, under every chunking.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createHarmonySplitter } from '../../../src/main/tokenizer';
import { createToolCallFilter, HERMES } from '../../../src/main/tokenizer/tool-calls';
import { HARMONY, reasoningOf } from '../../../src/shared/reasoning';
import { chunked } from '../../helpers/chunked';

function run(chunks: string[], opts: { inside?: boolean; answering?: boolean } = {}) {
  const s = createHarmonySplitter({ inside: opts.inside ?? false, answering: opts.answering ?? false });
  let reasoning = '';
  let content = '';
  const states: string[] = [];
  const early: string[] = [];
  for (const c of chunks) {
    const out = s.push(c);
    reasoning += out.reasoning;
    content += out.content;
    states.push(s.state);
    early.push(content);
  }
  const tail = s.flush();
  return { reasoning: reasoning + tail.reasoning, content: content + tail.content, states, early };
}

/**
 * The reading of a whole reply, written plainly: messages are `header<|message|>body` up to an end marker or
 * the next `<|start|>`; analysis bodies (and bodies for a built-in tool) are reasoning, a function's a call,
 * the rest answer; bodies trimmed, each side's joined by a blank line.
 */
function oracle(text: string): { reasoning: string; content: string } {
  // The first header (one line, at most 256 characters) says whether the reply is Harmony at all.
  const first = text.indexOf('<|message|>');
  if (first < 0 || first > 256 || text.slice(0, first).includes('\n')) return { reasoning: '', content: text };
  const reasoning: string[] = [];
  let content = '';
  const message = /(.*?)<\|message\|>(.*?)(?:<\|end\|>|<\|call\|>|<\|return\|>|(?=<\|start\|>)|$)/gs;
  for (const [, header = '', body = ''] of text.matchAll(message)) {
    const channel = /<\|channel\|>\s*([^\s<]+)/.exec(header)?.[1];
    const to = /\bto=([^\s<]+)/.exec(header)?.[1];
    if (to?.startsWith('functions.')) {
      const args = body.trim() === '' ? `${body.trimEnd()}{}` : body.trimEnd();
      content += `${content ? '\n' : ''}<tool_call>\n{"name": "${to.slice(10)}", "arguments": ${args}}\n</tool_call>`;
    } else if (channel === 'analysis' || (to !== undefined && to !== 'assistant')) {
      if (body.trim()) reasoning.push(body.trim());
    } else if (body.trim()) {
      content += (content ? '\n\n' : '') + body.trim();
    }
  }
  return { reasoning: reasoning.join('\n\n'), content };
}

describe('createHarmonySplitter', () => {
  it('reads the analysis message as reasoning and the final one as the answer, headers and markers dropped', () => {
    const r = run([
      '<|channel|>analy',
      'sis<|message|>User asks',
      ' 2+2. Simple.<|en',
      'd|><|start|>assistant<|channel|>fin',
      'al<|message|>2 + 2',
      ' = 4.',
    ]);
    expect(r).toMatchObject({ reasoning: 'User asks 2+2. Simple.', content: '2 + 2 = 4.' });
    // The reasoning streams while it is written; the answer likewise, before the reply ends.
    expect(r.states).toEqual(['start', 'inside', 'inside', 'after', 'content', 'content']);
    expect(r.early[3]).toBe('');
    expect(r.early[4]).toBe('2 + 2');
  });

  it('gives the same split under every chunking, for replies with preambles, several analyses and calls', () => {
    const pieces = fc.constantFrom(
      '<|channel|>analysis<|message|>',
      '<|end|>',
      '<|start|>assistant',
      '<|channel|>final<|message|>',
      '<|channel|>commentary<|message|>',
      '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>',
      '<|start|>assistant to=browser.search<|channel|>analysis<|message|>',
      '{"city": "Tokyo"}',
      'Tokyo ',
      '  ',
      '\n',
      'is warm',
      '<|call|>',
      '<',
      '|',
    );
    fc.assert(
      fc.property(fc.array(pieces, { maxLength: 14 }), fc.array(fc.nat(), { maxLength: 8 }), (parts, cuts) => {
        const text = parts.join('');
        const want = oracle(text);
        const got = run(chunked(text, cuts));
        // A reply that is no Harmony at all is the answer as written.
        expect({ reasoning: got.reasoning, content: got.content }).toEqual(want);
      }),
      { numRuns: 400 },
    );
  });

  it('parts two analysis messages and a preamble from the answer with blank lines', () => {
    const text =
      '<|channel|>analysis<|message|>First thought.<|end|>' +
      '<|start|>assistant<|channel|>analysis<|message|> Second thought. <|end|>' +
      '<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>' +
      '<|start|>assistant<|channel|>final<|message|>It is 4.';
    expect(run([text])).toMatchObject({
      reasoning: 'First thought.\n\nSecond thought.',
      content: 'Let me check.\n\nIt is 4.',
    });
  });

  it("gives a message to a function as a call in kvdesk's Hermes form, which the tool-call reader takes", () => {
    const text =
      '<|channel|>analysis<|message|>Need weather.<|end|>' +
      '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Tokyo"}';
    const r = run(chunked(text, [5, 40, 80, 120, 131]));
    expect(r.reasoning).toBe('Need weather.');
    const filter = createToolCallFilter(HERMES, new Set(['get_weather']), {});
    const first = filter.push(r.content);
    const rest = filter.flush();
    const calls = [...first.calls, ...rest.calls];
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: 'get_weather' });
    expect(JSON.parse(calls[0]?.arguments ?? '')).toEqual({ city: 'Tokyo' });
    expect((first.content + rest.content).trim()).toBe('');
    // The recipient may stand in the role part of the header as well (`assistant to=functions.x<|channel|>…`).
    const before = run(['<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}']);
    expect(before.content).toBe('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>');
    // A call that writes no arguments at all is a call with none.
    const empty = run(['<|channel|>commentary to=functions.now<|message|>', '<|call|>']);
    expect(empty.content).toBe('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>');
  });

  it('reads a call to a built-in tool (browser, python), which kvdesk does not run, as reasoning', () => {
    const r = run([
      '<|channel|>analysis to=browser.search<|message|>{"query": "x"}<|end|><|start|>assistant<|channel|>final<|message|>Done.',
    ]);
    expect(r).toMatchObject({ reasoning: '{"query": "x"}', content: 'Done.' });
  });

  it('keeps a reply cut inside its analysis as reasoning, and one with no header as the answer', () => {
    expect(run(['<|channel|>analysis<|message|>Hmm, ', 'let me'])).toMatchObject({
      reasoning: 'Hmm, let me',
      content: '',
    });
    // No header: held while it could still be one, then the answer as written; a line break shows it is not.
    const plain = run(['Hello', ' there.\nHow', ' are you?']);
    expect(plain).toMatchObject({ reasoning: '', content: 'Hello there.\nHow are you?' });
    expect(plain.early).toEqual(['', 'Hello there.\nHow', 'Hello there.\nHow are you?']);
    expect(run(['Hi.'])).toMatchObject({ content: 'Hi.' });
  });

  it('starts in the body the prompt opened: the analysis (inside) or the final message (answering)', () => {
    expect(run(['Thinking.<|end|><|start|>assistant<|channel|>final<|message|>Yes.'], { inside: true })).toMatchObject({
      reasoning: 'Thinking.',
      content: 'Yes.',
    });
    const answer = run(['Straight', ' to it.'], { answering: true });
    expect(answer).toMatchObject({ reasoning: '', content: 'Straight to it.' });
    expect(answer.early[0]).toBe('Straight');
  });
});

describe('Harmony templates', () => {
  it('make a thinking model whose reasoning is the analysis message, closed into the final one', () => {
    const template =
      "{% for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}" +
      '<|message|>{{ m.content }}<|end|>{% endfor %}<|start|>assistant';
    expect(reasoningOf(template)).toEqual(HARMONY);
    expect(HARMONY.open).toBe('<|channel|>analysis<|message|>');
    expect(HARMONY.close).toBe('<|end|><|start|>assistant<|channel|>final<|message|>');
    // What the budget and thinking: false write reads as a split reply.
    expect(run([`${HARMONY.open}x${HARMONY.close}y`])).toMatchObject({ reasoning: 'x', content: 'y' });
  });
});
