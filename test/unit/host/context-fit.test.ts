/**
 * dropOldest (the `drop-oldest` context overflow policy) without a model: a conversation's prompt is measured
 * as the sum of its messages' sizes plus a template overhead, so every property can be checked against the
 * sizes directly.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { dropOldest, keptMessages, promptUpTo, turnStarts } from '../../../src/main/host/context-fit';
import type { ChatMessage } from '../../../src/shared/contract';

const msg = (role: ChatMessage['role'], size: number): ChatMessage => ({ role, content: 'x'.repeat(size) });
/** A prompt as long as the kept messages' contents plus 3 tokens per message and 5 for the template. */
const render = (kept: ChatMessage[]): number[] =>
  new Array(5 + kept.reduce((n, m) => n + m.content.length + 3, 0)).fill(0);
const size = (kept: ChatMessage[]) => render(kept).length;

describe('turnStarts', () => {
  it('starts a turn at every user message after the first message; system messages are not counted', () => {
    const conv = [
      msg('system', 1),
      msg('user', 1), // 0
      msg('assistant', 1), // 1
      msg('user', 1), // 2
      msg('assistant', 1), // 3
      msg('tool', 1), // 4: a tool result stays with the call before it
      msg('assistant', 1), // 5
      msg('system', 1),
      msg('user', 1), // 6
    ];
    expect(turnStarts(conv)).toEqual([0, 2, 6]);
    expect(keptMessages(conv, 2).map((m) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'assistant',
      'system',
      'user',
    ]);
  });

  it('a conversation opening with a reply can start at its first user message', () => {
    expect(turnStarts([msg('assistant', 1), msg('user', 1), msg('assistant', 1)])).toEqual([0, 1]);
  });
});

describe('dropOldest', () => {
  const turns = (n: number, each = 10): ChatMessage[] =>
    Array.from({ length: n }, () => [msg('user', each), msg('assistant', each)]).flat();

  it('leaves a conversation that fits as it is, rendering it once', () => {
    let renders = 0;
    const conv = turns(3);
    const fit = dropOldest(
      conv,
      (k) => {
        renders++;
        return render(k);
      },
      { limit: 1000, target: 1000, atLeast: 0 },
    );
    expect(fit).toMatchObject({ dropped: 0, messages: conv });
    expect(renders).toBe(1);
  });

  it('leaves out the fewest whole turns that fit the limit', () => {
    // 10 turns of 2 × 13 tokens + 5: 265 tokens. Within 100: 3 turns (83).
    const fit = dropOldest(turns(10), render, { limit: 100, target: 100, atLeast: 0 });
    expect(fit.dropped).toBe(14);
    expect(fit.prompt.length).toBe(83);
    expect(fit.messages[0]?.role).toBe('user');
  });

  it('goes down to the target when anything must go, and keeps an earlier drop while it fits', () => {
    const conv = turns(10);
    const first = dropOldest(conv, render, { limit: 100, target: 50, atLeast: 0 });
    expect(first.dropped).toBe(18); // 2 turns (57) do not fit 50: 1 turn (31)
    // The next turn (one more exchange) keeps the same start: it still fits the limit.
    const next = [...conv, msg('user', 10), msg('assistant', 10)];
    expect(dropOldest(next, render, { limit: 100, target: 50, atLeast: first.dropped }).dropped).toBe(18);
  });

  it('keeps the last turn when nothing fits, whatever the hint', () => {
    const conv = [...turns(2), msg('user', 500)];
    expect(dropOldest(conv, render, { limit: 100, target: 50, atLeast: 0 }).dropped).toBe(4);
    expect(dropOldest(conv, render, { limit: 100, target: 50, atLeast: 99 }).dropped).toBe(4);
  });

  it('falls back to the limit when the target cannot be met', () => {
    // System prompt of 60: no start reaches 50, the first within 100 is taken.
    const conv = [msg('system', 60), ...turns(4)];
    const fit = dropOldest(conv, render, { limit: 100, target: 50, atLeast: 0 });
    expect(fit.dropped).toBe(6);
    expect(fit.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant']);
  });

  it('prefers a start whose prompt is worth keeping, among those within the limit, over the target', () => {
    const conv = turns(10); // 265 tokens; within 100: from 14 on; within 50: from 18 on
    const startsAt = (p: number[]) => p.length; // the prompt's size tells its start here
    const preferred = (dropped: number) => (p: number[]) => startsAt(p) === size(keptMessages(conv, dropped));
    expect(dropOldest(conv, render, { limit: 100, target: 50, atLeast: 0, prefer: preferred(16) }).dropped).toBe(16);
    // Not within the limit: not taken.
    expect(dropOldest(conv, render, { limit: 100, target: 50, atLeast: 0, prefer: preferred(12) }).dropped).toBe(18);
    // Nothing preferred: the target as before.
    expect(dropOldest(conv, render, { limit: 100, target: 50, atLeast: 0, prefer: () => false }).dropped).toBe(18);
    // Short turns: the earlier turn's start lies near the target's, far from the fewest that fit.
    const many = turns(100, 1); // 8 tokens a turn
    const target = dropOldest(many, render, { limit: 400, target: 200, atLeast: 0 }).dropped;
    const previous = target - 2; // the last turn's start, one exchange before where the target is now
    const keep = (p: number[]) => p.length === size(keptMessages(many, previous));
    expect(dropOldest(many, render, { limit: 400, target: 200, atLeast: 0, prefer: keep }).dropped).toBe(previous);
    // Nothing has to go: the conversation as it is, preferred or not.
    expect(dropOldest(conv, render, { limit: 1000, target: 500, atLeast: 0, prefer: preferred(16) }).dropped).toBe(0);
  });

  const role = fc.constantFrom<ChatMessage['role']>('system', 'user', 'user', 'assistant', 'assistant', 'tool');
  const conversation = fc.array(fc.tuple(role, fc.integer({ min: 0, max: 60 })), { minLength: 1, maxLength: 40 });

  it('property: a turn start at or past the hint, within the limit when any start is, and no more than that needs', () => {
    fc.assert(
      fc.property(
        conversation,
        fc.integer({ min: 1, max: 600 }),
        fc.integer({ min: 0, max: 100 }),
        fc.integer({ min: 0, max: 45 }),
        (spec, limit, targetPercent, atLeast) => {
          const conv = spec.map(([r, n]) => msg(r, n));
          const target = Math.floor((limit * targetPercent) / 100);
          let renders = 0;
          const fit = dropOldest(
            conv,
            (k) => {
              renders++;
              return render(k);
            },
            { limit, target, atLeast },
          );
          const starts = turnStarts(conv);
          const last = starts[starts.length - 1] as number;
          const first = starts.find((s) => s >= atLeast) ?? last;
          expect(starts).toContain(fit.dropped);
          expect(fit.dropped).toBeGreaterThanOrEqual(first);
          expect(fit.messages).toEqual(keptMessages(conv, fit.dropped));
          expect(fit.prompt.length).toBe(size(fit.messages));
          // System messages and the last user message always stay.
          expect(fit.messages.filter((m) => m.role === 'system')).toHaveLength(
            conv.filter((m) => m.role === 'system').length,
          );
          const lastUser = conv.findLastIndex((m) => m.role === 'user');
          if (lastUser >= 0) expect(fit.messages).toContain(conv[lastUser]);
          if (fit.prompt.length > limit) expect(fit.dropped).toBe(last);
          if (fit.dropped > first) {
            // Something had to go, and the start before this one was not enough.
            expect(size(keptMessages(conv, first))).toBeGreaterThan(limit);
            const before = starts[starts.indexOf(fit.dropped) - 1] as number;
            const bound = fit.prompt.length <= target ? target : limit;
            if (fit.prompt.length <= limit) expect(size(keptMessages(conv, before))).toBeGreaterThan(bound);
          }
          // A binary search: a handful of renders, not one per turn.
          expect(renders).toBeLessThanOrEqual(3 + 2 * Math.ceil(Math.log2(starts.length + 1)));
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('a conversation far longer than the limit', () => {
  // 2,000 turns of 2 × 103 tokens: 412,005 tokens, for a limit of 1,000.
  const long = Array.from({ length: 2000 }, () => [msg('user', 100), msg('assistant', 100)]).flat();
  const sized = () => {
    const rendered: number[] = [];
    return {
      rendered,
      render: (k: ChatMessage[]) => {
        const p = render(k);
        rendered.push(p.length);
        return p;
      },
    };
  };

  it('dropOldest renders only prompts near the limit (searched from the newest turn), with the same result', () => {
    const { rendered, render: counted } = sized();
    const fit = dropOldest(long, counted, { limit: 1000, target: 500, atLeast: 0 });
    // The fewest turns within the target: 2 turns (417), not 3 (623).
    expect(fit.dropped).toBe(long.length - 4);
    expect(fit.prompt.length).toBe(417);
    expect(Math.max(...rendered)).toBeLessThan(4000);
    expect(rendered.reduce((a, b) => a + b, 0)).toBeLessThan(12_000);
  });

  it('promptUpTo counts the whole when it is within the cap, else only newest turns that pass it', () => {
    const { rendered, render: counted } = sized();
    const over = promptUpTo(long, counted, 1000);
    expect(over.whole).toBe(false);
    expect(over.prompt.length).toBeGreaterThan(1000);
    expect(over.prompt.length).toBeLessThanOrEqual(size(long));
    expect(rendered.reduce((a, b) => a + b, 0)).toBeLessThan(6000);
    // Within the cap: the whole, once.
    const short = long.slice(-20);
    expect(promptUpTo(short, render, 10_000)).toEqual({ prompt: render(short), whole: true });
    // A few characters a token of the cap: rendered whole first, so counted exactly even when past it.
    const fewTurns = long.slice(-6); // 600 characters, 623 tokens
    expect(promptUpTo(fewTurns, render, 38)).toEqual({ prompt: render(fewTurns), whole: true });
    const newest = promptUpTo(fewTurns, render, 10);
    expect(newest).toMatchObject({ whole: false });
    expect(newest.prompt.length).toBe(size(fewTurns.slice(-2)));
  });
});
