/**
 * A reply the KV budget capped says what would give it more room: in a conversation, a new chat (its prompt is the
 * whole conversation so far); on a chat's first reply, whose prompt is the message alone, a shorter message.
 */
import { expect, openSavedChat, test } from './fixtures';

test("a capped reply's advice fits where it is in the chat", async ({ app, server }) => {
  const cap = {
    requestedMaxTokens: 256,
    admittedMaxTokens: 40,
    requestedBytes: 270_336,
    admittedBytes: 43_008,
    availableBytes: 43_008,
  };
  const stats = { tokens: 40, promptTokens: 12, finishReason: 'length', budgetCap: cap };
  await openSavedChat(app, server, 'capped', [
    { id: 'u0', role: 'user', content: 'Tell me a story' },
    { id: 'a0', role: 'assistant', content: 'Once upon a time', stats },
    { id: 'u1', role: 'user', content: 'Go on' },
    { id: 'a1', role: 'assistant', content: 'and then', stats },
  ]);
  const notes = app.getByTestId('budget-cap-note');
  await expect(notes).toHaveCount(2);
  await expect(notes.first()).toContainText('Reply capped at 40 tokens by the KV budget (asked 256');
  await expect(notes.first()).toContainText('raise the limit in the inspector, or send a shorter message');
  await expect(notes.first()).not.toContainText('new chat');
  await expect(notes.last()).toContainText(
    "raise the limit in the inspector, or go on in a new chat (a reply's prompt is the whole conversation so far)",
  );
});

test('a capped reply that ended on its own before the cap is not warned of', async ({ app, server }) => {
  // 128 KiB on the default model: room for 106 of the 256 tokens asked; the model ended after 10.
  const cap = {
    requestedMaxTokens: 256,
    admittedMaxTokens: 106,
    requestedBytes: 275_456,
    admittedBytes: 131_072,
    availableBytes: 131_072,
  };
  await openSavedChat(app, server, 'capped-ended-first', [
    { id: 'u0', role: 'user', content: 'Say hi' },
    { id: 'a0', role: 'assistant', content: 'Hi there', stats: { tokens: 10, finishReason: 'eos', budgetCap: cap } },
    { id: 'u1', role: 'user', content: 'Go on' },
    { id: 'a1', role: 'assistant', content: 'and on', stats: { tokens: 106, finishReason: 'length', budgetCap: cap } },
  ]);
  // Only the reply the cap cut says so.
  const notes = app.getByTestId('budget-cap-note');
  await expect(notes).toHaveCount(1);
  await expect(notes).toContainText('Reply capped at 106 tokens by the KV budget (asked 256');
  await expect(app.locator('[data-message-id="a0"]')).toContainText('Hi there');
  await expect(app.locator('[data-message-id="a0"]').getByTestId('budget-cap-note')).toHaveCount(0);
});
