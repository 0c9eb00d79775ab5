import { describe, expect, it } from 'vitest';
import { elsewhereAnnouncement, replyAnnouncement } from '../../../src/renderer/lib/reply-announcement';
import type { StoredMessage } from '../../../src/shared/api';

const reply = (stats: StoredMessage['stats']): StoredMessage =>
  ({ id: 'm', role: 'assistant', content: 'x', createdAt: 0, stats }) as StoredMessage;

describe('what a screen reader is told of a reply', () => {
  it('its phases while on its way', () => {
    expect(replyAnnouncement({ phase: 'sending' })).toBe('Sending…');
    expect(replyAnnouncement({ phase: 'queued' })).toMatch(/^The reply is queued/);
    expect(replyAnnouncement({ phase: 'running' })).toBe('Replying…');
  });

  it('how it ended: done or stopped, with its tokens and a cap by the KV budget', () => {
    expect(replyAnnouncement({ last: reply({ tokens: 1234, finishReason: 'eos' }) })).toBe('Reply done: 1,234 tokens.');
    expect(replyAnnouncement({ last: reply({ tokens: 7, finishReason: 'cancelled' }) })).toBe(
      'Reply stopped after 7 tokens.',
    );
    const cap = {
      requestedMaxTokens: 512,
      admittedMaxTokens: 113,
      requestedBytes: 1,
      admittedBytes: 1,
      availableBytes: 1,
    };
    expect(replyAnnouncement({ last: reply({ tokens: 113, finishReason: 'length', budgetCap: cap }) })).toBe(
      'Reply done: 113 tokens; capped at 113 tokens by the KV budget.',
    );
    // Capped, but ended on its own before the cap: the cap did not cut it, and is not said.
    expect(replyAnnouncement({ last: reply({ tokens: 10, finishReason: 'eos', budgetCap: cap }) })).toBe(
      'Reply done: 10 tokens.',
    );
  });

  it('interrupted, not stopped, when kvdesk stopped or the connection to it was lost', () => {
    expect(
      replyAnnouncement({ last: reply({ tokens: 202, finishReason: 'interrupted', interruptedBy: 'shutdown' }) }),
    ).toBe('Reply interrupted after 202 tokens: kvdesk stopped.');
    expect(
      replyAnnouncement({ last: reply({ tokens: 3, finishReason: 'interrupted', interruptedBy: 'disconnect' }) }),
    ).toBe('Reply interrupted after 3 tokens: the connection to kvdesk was lost.');
  });

  it('nothing for a refusal (its alert says it), a message of the person, or no message', () => {
    expect(replyAnnouncement({ last: reply({ error: { code: 'KV_BUDGET_EXCEEDED', message: 'x' } }) })).toBe('');
    expect(replyAnnouncement({ last: { ...reply({}), role: 'user' } as StoredMessage })).toBe('');
    expect(replyAnnouncement({})).toBe('');
  });

  it('a reply ending in another chat: said with the chat, a refusal too (no alert is shown there)', () => {
    expect(elsewhereAnnouncement('Trip plan', reply({ tokens: 12, finishReason: 'eos' }))).toBe(
      'In “Trip plan”: Reply done: 12 tokens.',
    );
    expect(elsewhereAnnouncement('Trip plan', reply({ tokens: 4, finishReason: 'cancelled' }))).toBe(
      'In “Trip plan”: Reply stopped after 4 tokens.',
    );
    expect(
      elsewhereAnnouncement(
        'Trip plan',
        reply({ error: { code: 'KV_BUDGET_EXCEEDED', message: 'the budget is full' } }),
      ),
    ).toBe('The reply in “Trip plan” failed: the budget is full');
    // Its messages not on the page (a chat listed only): how it ended is not known here.
    expect(elsewhereAnnouncement('', undefined)).toBe('The reply in “New chat” ended.');
  });
});
