import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createReasoningSplitter, promptOpensReasoning } from '../../../src/main/tokenizer';
import { reasoningOf } from '../../../src/shared/reasoning';
import { chunked } from '../../helpers/chunked';

const THINK = { open: '<think>', close: '</think>' };

/** Feeds chunks and joins what came out, as a stream's reader would. */
function run(chunks: string[], inside: boolean, spec = THINK) {
  const s = createReasoningSplitter(spec, { inside });
  let reasoning = '';
  let content = '';
  const states: string[] = [];
  for (const c of chunks) {
    const out = s.push(c);
    reasoning += out.reasoning;
    content += out.content;
    states.push(s.state);
  }
  const tail = s.flush();
  return { reasoning: reasoning + tail.reasoning, content: content + tail.content, states };
}

/** The split of a whole reply, written plainly: the specification the streaming splitter must meet. */
function oracle(text: string, inside: boolean, spec = THINK): { reasoning: string; content: string } {
  let rest = text;
  if (!inside) {
    const body = text.trimStart();
    if (!body.startsWith(spec.open)) return { reasoning: '', content: text };
    rest = body.slice(spec.open.length);
  }
  const at = rest.indexOf(spec.close);
  if (at < 0) return { reasoning: rest.trim(), content: '' };
  return { reasoning: rest.slice(0, at).trim(), content: rest.slice(at + spec.close.length).trimStart() };
}

describe('createReasoningSplitter', () => {
  it('splits a reply opened by the prompt at its closing marker', () => {
    expect(run(['\nThe sky', ' scatters blue.\n</thi', 'nk>\n\nBecause', ' of Rayleigh.'], true)).toMatchObject({
      reasoning: 'The sky scatters blue.',
      content: 'Because of Rayleigh.',
    });
  });

  it("reads a reply that opens its own reasoning (Qwen3's), and takes a later marker as text", () => {
    expect(run(['  <th', 'ink>\nhm', 'm</think>Yes. <think> is a tag.'], false)).toMatchObject({
      reasoning: 'hmm',
      content: 'Yes. <think> is a tag.',
    });
    expect(run(['Plain answer, </think> and all.'], false)).toMatchObject({
      reasoning: '',
      content: 'Plain answer, </think> and all.',
    });
  });

  it('keeps reasoning cut off before its end as reasoning, and an empty reasoning as none', () => {
    expect(run(['thinking about it  '], true)).toMatchObject({ reasoning: 'thinking about it', content: '' });
    expect(run(['\n\n</think>\n\nHello'], true)).toMatchObject({ reasoning: '', content: 'Hello' });
  });

  it('says where the text ends: before anything, inside the reasoning, after it, in the answer', () => {
    expect(run([' <th', 'ink>', 'a', '</think>', '\n', 'b'], false).states).toEqual([
      'start',
      'inside',
      'inside',
      'after',
      'after',
      'content',
    ]);
    expect(run(['a', '<think>'], false).states).toEqual(['content', 'content']);
    expect(run(['a'], true).states).toEqual(['inside']);
  });

  it('gives out reasoning as it streams, holding back only what could start the closing marker', () => {
    const s = createReasoningSplitter(THINK, { inside: true });
    expect(s.push('one two')).toEqual({ reasoning: 'one two', content: '' });
    expect(s.push(' three </')).toEqual({ reasoning: ' three', content: '' });
    expect(s.push('b> four')).toEqual({ reasoning: ' </b> four', content: '' });
  });

  it('splits Magistral markers', () => {
    const magistral = { open: '[THINK]', close: '[/THINK]' };
    expect(run(['[THINK]plan[/THI', 'NK]answer'], false, magistral)).toMatchObject({
      reasoning: 'plan',
      content: 'answer',
    });
  });

  it('splits any text, however it is chunked, as the whole text is split', () => {
    const piece = fc.constantFrom('<think>', '</think>', '<', '</', 'think', '>', ' ', '\n', 'a', 'b c', '</thi');
    fc.assert(
      fc.property(
        fc.array(piece, { maxLength: 14 }).map((p) => p.join('')),
        fc.array(fc.nat(), { maxLength: 8 }),
        fc.boolean(),
        (text, cuts, inside) => {
          const got = run(chunked(text, cuts), inside);
          expect({ reasoning: got.reasoning, content: got.content }).toEqual(oracle(text, inside));
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('reasoningOf / promptOpensReasoning', () => {
  it("finds a thinking model's markers and switch in its chat template", () => {
    expect(reasoningOf("{{ content.split('</think>')[-1] }}{% if enable_thinking is false %}…{% endif %}")).toEqual({
      ...THINK,
      toggle: 'enable_thinking',
    });
    expect(reasoningOf('<|assistant|>\n<think>\n')).toEqual(THINK);
    expect(reasoningOf('[SYSTEM_PROMPT]…[THINK]')).toEqual({ open: '[THINK]', close: '[/THINK]' });
    expect(reasoningOf('<|im_start|>assistant\n')).toBeUndefined();
    expect(reasoningOf(undefined)).toBeUndefined();
    // A word that only contains the switch's name is not the switch.
    expect(reasoningOf('<think> my_enable_thinking_x')).toEqual(THINK);
  });

  it('sees a prompt that leaves the reply inside the reasoning', () => {
    expect(promptOpensReasoning('<|assistant|>\n<think>\n', THINK)).toBe(true);
    expect(promptOpensReasoning('<|assistant|>\n<think>\n\n</think>\n\n', THINK)).toBe(false);
    expect(promptOpensReasoning('<|im_start|>assistant\n', THINK)).toBe(false);
  });
});
