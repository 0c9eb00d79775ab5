/**
 * The thinking budget's constraint (src/main/engine/reasoning-budget.ts) over a small vocabulary: it counts the
 * reasoning's tokens (the prompt's or the reply's own opening), then allows only the close's tokens in order, and
 * nothing more once the reasoning is over; a reasoning closed in time is left alone; an inner constraint (tool
 * calls) still holds.
 */
import { describe, expect, it } from 'vitest';
import { CallConstraint, compileCallGrammar } from '../../../src/main/engine/call-constraint';
import { tokenTable } from '../../../src/main/engine/json-constraint';
import { compileBudget, ReasoningBudget } from '../../../src/main/engine/reasoning-budget';

const VOCAB = ['<think>', '</think>', '\n', 'a', 'b', ' ', '<th', 'ink>', '<tool_call>', '{"', 'x', '</', 'think>'];
const table = tokenTable(
  VOCAB.map((p) => [...Buffer.from(p)]),
  [],
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
});
