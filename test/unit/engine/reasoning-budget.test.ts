/**
 * The thinking budget's constraint (src/main/engine/reasoning-budget.ts) over a small vocabulary: it counts the
 * reasoning's tokens (the prompt's or the reply's own opening), then allows only the close's tokens in order, and
 * nothing more once the reasoning is over; a reasoning closed in time is left alone; an inner constraint (tool
 * calls) still holds. Held (JSON output after a thinking model's reasoning): the reasoning is free text, the JSON is
 * held from its first byte after the close and white space, the reply may skip the reasoning, and it cannot end
 * before its answer is whole.
 */
import { describe, expect, it } from 'vitest';
import { CallConstraint, compileCallGrammar } from '../../../src/main/engine/call-constraint';
import { constraintFor, tokenTable } from '../../../src/main/engine/json-constraint';
import { compileBudget, MAX_GAP_WHITESPACE, ReasoningBudget } from '../../../src/main/engine/reasoning-budget';

const VOCAB = [
  ...['<think>', '</think>', '\n', 'a', 'b', ' ', '<th', 'ink>', '<tool_call>', '{"', 'x', '</', 'think>'],
  ...['":', ' 1', '}', '<|end|>', '</think>\n\n', '</think>{"', '{', '\n\n', '<', 'think>', 'tool_call>'],
];
// `<|end|>` is a special token with its text (as the host's tables give them).
const table = tokenTable(
  VOCAB.map((p) => [...Buffer.from(p)]),
  [VOCAB.indexOf('<|end|>')],
);
const id = (piece: string) => VOCAB.indexOf(piece);
const CLOSE = [id('\n'), id('</think>'), id('\n'), id('\n')];
const budget = (tokens: number, inside: boolean) =>
  compileBudget({ open: '<think>', close: '</think>', inside, tokens, force: CLOSE });
/** The ids a constraint allows now. */
const allowed = (c: ReasoningBudget) => VOCAB.map((_, i) => i).filter((i) => c.allows(i));

function write(c: ReasoningBudget, pieces: string[]): void {
  for (const p of pieces) {
    expect(c.allows(id(p)), `${JSON.stringify(p)} allowed`).toBe(true);
    c.accept(id(p));
  }
}

describe('a thinking budget', () => {
  it('inside the reasoning the prompt opened: the budget, then only the close, then anything', () => {
    const c = new ReasoningBudget(table, budget(2, true));
    expect(allowed(c)).toHaveLength(VOCAB.length);
    write(c, ['a', 'b']);
    for (const next of CLOSE) {
      expect(allowed(c)).toEqual([next]);
      c.accept(next);
    }
    expect(allowed(c)).toHaveLength(VOCAB.length);
    // The mask leaves the close's next token only, and says how many are left.
    const d = new ReasoningBudget(table, budget(0, true));
    const x = new Float32Array(VOCAB.length);
    expect(d.mask(x, VOCAB.length)).toBe(1);
    expect([...x].map((v, i) => (v === Number.NEGATIVE_INFINITY ? -1 : i)).filter((i) => i >= 0)).toEqual([id('\n')]);
  });

  it('a close the model is writing when the budget runs out gets a few tokens to end', () => {
    const c = new ReasoningBudget(table, budget(2, true));
    write(c, ['a', '</']);
    // Not forced: the marker is half written.
    expect(allowed(c)).toHaveLength(VOCAB.length);
    write(c, ['think>', 'b']);
    expect(allowed(c)).toHaveLength(VOCAB.length);
    // One that does not end it is closed for it after the marker's length in tokens.
    const d = new ReasoningBudget(table, budget(1, true));
    write(d, ['</', 'a']);
    expect(allowed(d)).toEqual([id('\n')]);
  });

  it('a reasoning the model closes in time is left alone', () => {
    const c = new ReasoningBudget(table, budget(3, true));
    write(c, ['a', '</think>', 'b', 'b', 'b', 'b']);
    expect(allowed(c)).toHaveLength(VOCAB.length);
  });

  it("a reply's own opening (whole or in pieces, after white space) starts the count; a reply without one is free", () => {
    for (const opening of [['<think>'], [' ', '<th', 'ink>']]) {
      const c = new ReasoningBudget(table, budget(1, false));
      write(c, [...opening, 'a']);
      expect(allowed(c)).toEqual([id('\n')]);
    }
    const free = new ReasoningBudget(table, budget(0, false));
    write(free, ['a', '<think>', 'b', 'b']);
    expect(allowed(free)).toHaveLength(VOCAB.length);
  });

  it('holds an inner constraint: a call after the reasoning is still held to its grammar', () => {
    const grammar = compileCallGrammar({
      trigger: '<tool_call>',
      array: false,
      close: '',
      calls: [{ head: '', schema: { type: 'object', properties: { x: { type: 'boolean' } } } }],
      reasoning: { open: '<think>', close: '</think>', inside: true },
    });
    const c = new ReasoningBudget(table, budget(1, true), new CallConstraint(table, grammar));
    write(c, ['<tool_call>']); // inside the reasoning: text
    expect(allowed(c)).toEqual([id('\n')]);
    for (const next of CLOSE) c.accept(next);
    write(c, ['<tool_call>']);
    // In the call: only what continues its object.
    expect(c.allows(id('a'))).toBe(false);
    expect(c.allows(id('{"'))).toBe(true);
  });

  describe('held: JSON output after the reasoning', () => {
    const END = id('<|end|>');
    const held = (inside: boolean, tokens?: number) =>
      new ReasoningBudget(
        table,
        compileBudget({ open: '<think>', close: '</think>', inside, force: CLOSE, held: true, tokens }),
        constraintFor({ table, json: true }),
        new Set([END]),
      );
    const ANSWER = ['{"', 'x', '":', ' 1', '}'];

    it('the reasoning is free text (its end token refused); after the close and white space, only the JSON', () => {
      const c = held(true);
      // Inside: anything but a token that closes the reasoning and goes on with the answer (the end: below).
      expect(VOCAB.filter((_, i) => i !== END && !c.allows(i))).toEqual(['</think>{"']);
      write(c, ['a', '{"', '}', '<tool_call>', 'b', '</think>']);
      expect(c.done).toBe(false);
      // The gap: white space, or the answer's start.
      expect(VOCAB.filter((_, i) => c.allows(i))).toEqual(['\n', ' ', '{"', '{', '\n\n']);
      write(c, ['\n\n', ...ANSWER]);
      expect(c.done).toBe(true);
      // A close with white space in its token leaves the gap after it.
      const d = held(true);
      write(d, ['a', '</think>\n\n']);
      expect(d.allows(id('{"'))).toBe(true);
      expect(d.allows(id('a'))).toBe(false);
      // The mask agrees with allows, and counts what is left.
      const x = new Float32Array(VOCAB.length);
      expect(d.mask(x, VOCAB.length)).toBe(5);
      expect(VOCAB.filter((_, i) => x[i] !== Number.NEGATIVE_INFINITY)).toEqual(['\n', ' ', '{"', '{', '\n\n']);
    });

    it('an end the model picks inside the reasoning closes it for the model, and the JSON follows', () => {
      const c = held(true);
      write(c, ['a']);
      expect(c.allows(END)).toBe(false);
      for (const next of CLOSE) {
        expect(VOCAB.filter((_, i) => c.allows(i))).toEqual([VOCAB[next]]);
        c.accept(next);
      }
      expect(c.allows(END)).toBe(false);
      write(c, ANSWER);
      expect(c.done).toBe(true);
      // Before a reasoning the reply did not open, the end is refused and the answer comes.
      const d = held(false);
      expect(d.allows(END)).toBe(false);
      expect(d.allows(id('{"'))).toBe(true);
    });

    it('what is written for the model after its own close (gpt-oss: the final header), then the JSON', () => {
      const c = new ReasoningBudget(
        table,
        compileBudget({
          open: '<think>',
          close: '</think>',
          inside: true,
          force: CLOSE,
          held: true,
          gap: 0,
          afterClose: [id('\n'), id('\n')],
        }),
        constraintFor({ table, json: true }),
        new Set([END]),
      );
      write(c, ['a', '</think>']);
      for (const next of [id('\n'), id('\n')]) {
        expect(VOCAB.filter((_, i) => c.allows(i))).toEqual([VOCAB[next]]);
        c.accept(next);
      }
      expect(VOCAB.filter((_, i) => c.allows(i))).toEqual(['{"', '{']);
    });

    it('white space after the close is bounded (none where the close is the answer’s header, as gpt-oss’s is)', () => {
      const c = held(true);
      write(c, ['</think>']);
      for (let i = 0; i < MAX_GAP_WHITESPACE; i++) write(c, [' ']);
      expect(c.allows(id(' '))).toBe(false);
      expect(c.allows(id('{"'))).toBe(true);
      const header = new ReasoningBudget(
        table,
        compileBudget({ open: '<think>', close: '</think>', inside: true, force: CLOSE, held: true, gap: 0 }),
        constraintFor({ table, json: true }),
      );
      expect(header.allows(id('</think>\n\n'))).toBe(false);
      write(header, ['a', '</think>']);
      expect(VOCAB.filter((_, i) => header.allows(i))).toEqual(['{"', '{']);
    });

    it('a reply the prompt did not open begins with its reasoning (the opening whole or in pieces) or its answer', () => {
      for (const opening of [['<think>'], ['<th', 'ink>']]) {
        const c = held(false);
        write(c, [...opening, 'a', '</think>', '\n', ...ANSWER]);
        expect(c.done).toBe(true);
      }
      const direct = held(false);
      // Not white space: JSON output's object comes first, or the reasoning's opening.
      expect(VOCAB.filter((_, i) => direct.allows(i))).toEqual(['<think>', '<th', '{"', '{', '<']);
      write(direct, ANSWER);
      expect(direct.done).toBe(true);
      // Half an opening is not an answer.
      const half = held(false);
      write(half, ['<th']);
      expect(half.allows(id('{"'))).toBe(false);
      expect(VOCAB.filter((_, i) => half.allows(i))).toEqual(['ink>']);
    });

    it('with a budget, the close is written for the model and the JSON follows', () => {
      const c = held(true, 1);
      write(c, ['a']);
      for (const next of CLOSE) {
        expect(VOCAB.filter((_, i) => c.allows(i))).toEqual([VOCAB[next]]);
        c.accept(next);
      }
      expect(c.allows(id('a'))).toBe(false);
      // The close's blank line counts in the gap's room: 30 more bytes of white space, not 32.
      const d = held(true, 0);
      for (const next of CLOSE) d.accept(next);
      for (let i = 0; i < MAX_GAP_WHITESPACE - 2; i++) write(d, [' ']);
      expect(d.allows(id(' '))).toBe(false);
      write(c, ANSWER);
      expect(c.done).toBe(true);
    });
  });

  /** Tool calls (an integer x) beside JSON output, after a held reasoning (opened by the prompt, or not). */
  const callsOrJson = (inside: boolean) =>
    constraintFor({
      table,
      json: true,
      calls: compileCallGrammar({
        trigger: '<tool_call>',
        array: false,
        close: '',
        calls: [{ head: '', schema: { type: 'object', properties: { x: { type: 'integer' } }, required: ['x'] } }],
      }),
      ends: new Set([id('<|end|>')]),
      budget: compileBudget({ open: '<think>', close: '</think>', inside, force: CLOSE, held: true }),
    }) as ReasoningBudget;

  it('held around tool calls beside JSON output: an opening in pieces that a call also begins keeps both readings', () => {
    const END = id('<|end|>');
    const form = () => callsOrJson(false);
    // `<` begins both the reasoning's opening and a call's: either may follow.
    const reasons = form();
    write(reasons, ['<']);
    expect(reasons.allows(id('think>'))).toBe(true);
    expect(reasons.allows(id('tool_call>'))).toBe(true);
    // The opening completed: the reasoning, then calls or JSON read from their start.
    write(reasons, ['think>', 'a', '<tool_call>', '</think>', '<tool_call>', '{"', 'x', '":', ' 1', '}']);
    expect(reasons.allows(END)).toBe(true);
    // The call's opening completed: the call, held.
    const calls = form();
    write(calls, ['<', 'tool_call>']);
    expect(calls.allows(id('a'))).toBe(false);
    expect(calls.allows(id('think>'))).toBe(false);
    write(calls, ['{"', 'x', '":', ' 1', '}']);
    expect(calls.allows(END)).toBe(true);
  });

  it('held around tool calls beside JSON output: a call written while reasoning is text; after it, calls or JSON', () => {
    const END = id('<|end|>');
    const form = callsOrJson;
    const c = form(true);
    write(c, ['<tool_call>', 'a', '</think>', '\n']);
    // After the reasoning: a call's opening or the JSON's, not text, not the end.
    expect(c.allows(id('a'))).toBe(false);
    expect(c.allows(END)).toBe(false);
    write(c, ['<tool_call>', '{"', 'x', '":', ' 1', '}']);
    // A reply of calls may end after its call.
    expect(c.allows(END)).toBe(true);
    expect(c.allows(id('a'))).toBe(false);
    const json = form(false);
    write(json, ['<think>', 'b', '</think>', '{"', 'x', '":', ' 1', '}']);
    expect(json.done).toBe(true);
  });
});
