/**
 * A chat as a screen reader meets it: each message's buttons say which message they act on (not "copy, copy,
 * copy"), and a copy is said politely by the message it copied, and by no other.
 */
import { expect, lastReply, newChat, send, setSettings, test } from './fixtures';

test("a message's buttons name their message, and a copy is announced", async ({ app }) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 4 });
  await send(app, 'first question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await send(app, 'second question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });

  const users = app.getByTestId('message-user');
  const replies = app.getByTestId('message-assistant');
  await expect(users.first().getByTestId('edit-message')).toHaveAccessibleName('Edit your message 1');
  await expect(users.last().getByTestId('edit-message')).toHaveAccessibleName('Edit your message 2');
  await expect(replies.first().getByTestId('message-copy')).toHaveAccessibleName('Copy reply 1');
  await expect(replies.last().getByTestId('message-copy')).toHaveAccessibleName('Copy reply 2');
  await expect(replies.last().getByTestId('regenerate')).toHaveAccessibleName('Regenerate reply 2');
  // Every button in the chat has a name of its own.
  const names = [...(await app.getByTestId('message-list').ariaSnapshot()).matchAll(/- button "([^"]*)"/g)].map(
    (m) => m[1],
  );
  expect(names.length).toBeGreaterThanOrEqual(10);
  expect(new Set(names).size, names.join(', ')).toBe(names.length);

  // The copy is said by the reply it copied; the other messages say nothing.
  await app.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  const said = replies.first().getByRole('status');
  await expect(said).toHaveText('');
  await replies.first().hover();
  await replies.first().getByTestId('message-copy').click();
  await expect(said).toHaveText('Reply 1 copied');
  await expect(replies.first().getByTestId('message-copy')).toHaveText('copied');
  await expect(app.getByTestId('message-list').getByRole('status').filter({ hasText: /./ })).toHaveCount(1);
  // Said once: the region empties with the button's "copied".
  await expect(replies.first().getByTestId('message-copy')).toHaveText('copy');
  await expect(said).toHaveText('');
});
