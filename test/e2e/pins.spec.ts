/** Pinned chats, in Chromium against a real serve: a pinned chat stays at the top of the list, across a reload. */
import { expect, newChat, test } from './fixtures';

test('a pinned chat stays at the top whatever is newer, and a reload keeps it', async ({ app }) => {
  const older = await newChat(app);
  await app.getByTestId('chat-input').fill('older chat');
  await app.getByTestId('chat-input').press('Enter');
  await expect(app.getByTestId('message-assistant').last()).toHaveAttribute('data-state', /done|cancelled/, {
    timeout: 30_000,
  });
  const newer = await newChat(app);
  await app.getByTestId('chat-input').fill('newer chat');
  await app.getByTestId('chat-input').press('Enter');
  await expect(app.getByTestId('message-assistant').last()).toHaveAttribute('data-state', /done|cancelled/, {
    timeout: 30_000,
  });
  const items = app.getByTestId('thread-item');
  const order = () => items.evaluateAll((els) => els.map((e) => e.getAttribute('data-thread-id')));
  expect((await order()).indexOf(newer)).toBeLessThan((await order()).indexOf(older));

  const item = app.locator(`[data-testid="thread-item"][data-thread-id="${older}"]`);
  await item.hover();
  await item.getByTestId('thread-pin').click();
  await expect(item).toHaveAttribute('data-pinned', 'true');
  await expect.poll(async () => (await order())[0]).toBe(older);
  // Kept with the chat.
  await expect(async () => {
    await app.reload();
    await expect(items.first()).toHaveAttribute('data-thread-id', older, { timeout: 2000 });
  }).toPass({ timeout: 20_000 });
  await expect(item).toHaveAttribute('data-pinned', 'true');
  // Unpinned: back to its place by activity.
  await item.hover();
  await item.getByTestId('thread-pin').click();
  await expect(item).toHaveAttribute('data-pinned', 'false');
  await expect.poll(async () => (await order()).indexOf(newer) < (await order()).indexOf(older)).toBe(true);
});
