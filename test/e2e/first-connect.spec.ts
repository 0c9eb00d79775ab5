/**
 * A page whose first connection to kvdesk closes before it is answered (kvdesk restarting as the page loads, a proxy
 * dropping the first socket): its chats and settings are read once the connection is there, not said unreadable
 * with an empty list for good.
 */
import { expect, test, wsCall } from './fixtures';

test('a first connection that closes before the chats came: they are read once the page connects', async ({
  page,
  server,
}) => {
  const chat = { id: 'tfirst', title: 'Saved before the page', createdAt: 1, updatedAt: Date.now(), messages: [] };
  expect((await wsCall(server, 'saveThread', chat)).ok).toBe(true);
  let connections = 0;
  await page.routeWebSocket(/\/ws/, (ws) => {
    connections++;
    if (connections === 1) {
      void ws.close();
      return;
    }
    ws.connectToServer();
  });
  try {
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list').locator('[data-thread-id="tfirst"]')).toBeVisible();
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('notice').filter({ hasText: 'Could not read saved chats' })).toHaveCount(0);
    expect(connections).toBeGreaterThanOrEqual(2);
  } finally {
    await wsCall(server, 'deleteThread', { id: 'tfirst' });
  }
});
