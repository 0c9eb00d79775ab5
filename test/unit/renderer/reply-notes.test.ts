import { describe, expect, it } from 'vitest';
import { clipNote, cutByBudgetCap } from '../../../src/renderer/lib/reply-notes';

const clip = { requestedMaxTokens: 256, clippedMaxTokens: 5, contextLength: 16 };

describe('clipNote', () => {
  it('says nothing of a reply that ended on its own before the clipped cap', () => {
    expect(clipNote(clip, 'eos', true)).toBeNull();
    expect(clipNote(clip, 'stop', false)).toBeNull();
    expect(clipNote(clip, 'cancelled', true)).toBeNull();
    expect(clipNote(clip, undefined, true)).toBeNull();
  });

  it('a reply cut at the clipped cap: a new chat helps only where earlier turns took the room', () => {
    expect(clipNote(clip, 'length', true)).toBe(
      "⚠ Max tokens cut from 256 to 5 so the reply fits the model's context of 16 tokens — start a new chat for a longer reply.",
    );
    const alone = clipNote({ ...clip, contextLength: 4096 }, 'length', false) ?? '';
    expect(alone).toContain("the model's context is 4,096 tokens");
    expect(alone).not.toMatch(/new chat/);
  });
});

describe('cutByBudgetCap', () => {
  const cap = {
    requestedMaxTokens: 256,
    admittedMaxTokens: 106,
    requestedBytes: 1,
    admittedBytes: 1,
    availableBytes: 1,
  };
  it('only a reply that ran into its capped reservation: by length, with the tokens it had room for', () => {
    expect(cutByBudgetCap({ tokens: 106, finishReason: 'length', budgetCap: cap })).toBe(true);
    // A continued reply counts the tokens before it too.
    expect(cutByBudgetCap({ tokens: 130, finishReason: 'length', budgetCap: cap })).toBe(true);
  });

  it('not a capped reply that ended on its own, was stopped or cut short before the cap; nor one not capped', () => {
    expect(cutByBudgetCap({ tokens: 10, finishReason: 'eos', budgetCap: cap })).toBe(false);
    expect(cutByBudgetCap({ tokens: 10, finishReason: 'stop', budgetCap: cap })).toBe(false);
    expect(cutByBudgetCap({ tokens: 50, finishReason: 'cancelled', budgetCap: cap })).toBe(false);
    expect(cutByBudgetCap({ tokens: 50, finishReason: 'length', budgetCap: cap })).toBe(false);
    expect(cutByBudgetCap({ tokens: 256, finishReason: 'length' })).toBe(false);
    expect(cutByBudgetCap(undefined)).toBe(false);
  });
});
