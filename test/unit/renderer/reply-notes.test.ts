import { describe, expect, it } from 'vitest';
import { clipNote } from '../../../src/renderer/lib/reply-notes';

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
