/**
 * The line under the message box that measures the draft against the model's context (the default model's 2,048
 * tokens): a message longer than the context is flagged as too long however the chat overflows (leaving out the
 * oldest messages cannot make room for it: the turn is refused), and the line follows the chat as it changes,
 * not only as messages are added.
 */
import { expect, lastReply, openGreeting, test } from './fixtures';

const PARAGRAPH =
  'The lighthouse keeper climbed the stairs every evening, counting the steps as his father had, and lit the lamp ' +
  'before the fishing boats came round the point. ';

test('a message longer than the context is flagged when the chat leaves out its oldest messages too', async ({
  app,
  server,
}) => {
  await openGreeting(app, server, 'too-long');
  const measure = app.getByTestId('draft-measure');
  // A message that fits: no flag.
  await app.getByTestId('chat-input').fill('And then?');
  await expect(measure).toHaveAttribute('data-context', '2048');
  await expect(measure).not.toHaveClass(/over/);
  // One longer than the whole context: too long, and nothing said of older messages left out (that makes no room).
  await app.getByTestId('chat-input').fill(PARAGRAPH.repeat(100));
  await expect.poll(async () => Number(await measure.getAttribute('data-prompt-tokens'))).toBeGreaterThanOrEqual(2048);
  await expect(measure).toHaveClass(/over/);
  await expect(measure).toContainText('too long for the context');
  await expect(measure).not.toContainText('left out');
  // What it said is what happens: the turn is refused.
  await app.getByTestId('chat-input').press('Enter');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'error', { timeout: 30_000 });
  await expect(lastReply(app).getByTestId('refusal')).toHaveAttribute('data-code', 'CONTEXT_OVERFLOW');
});

test('the draft is measured again when a reply is edited (the chat changed, not its number of messages)', async ({
  app,
  server,
}) => {
  await openGreeting(app, server, 'edited');
  const measure = app.getByTestId('draft-measure');
  const tokens = async () => Number(await measure.getAttribute('data-prompt-tokens'));
  await app.getByTestId('chat-input').fill('And then?');
  await expect(measure).toHaveAttribute('data-context', '2048');
  const before = await tokens();
  expect(before).toBeLessThan(100);
  // The reply made long: the draft's prompt carries it.
  const reply = lastReply(app);
  await reply.hover();
  await reply.getByTestId('edit-reply').click();
  await app.getByTestId('reply-edit-input').fill(PARAGRAPH.repeat(8));
  await app.getByTestId('reply-edit-save').click();
  await expect(reply.getByTestId('message-stats')).toContainText('edited');
  await expect(app.getByTestId('chat-input')).toHaveValue('And then?');
  await expect.poll(tokens).toBeGreaterThan(before + 200);
});
