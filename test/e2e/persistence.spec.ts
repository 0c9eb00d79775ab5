/** Threads survive a reload (they live in the host's data dir) and the last open thread opens again. */
import { expect, lastReply, newChat, send, setSettings, test, wsCall } from './fixtures';

test('reload keeps the threads and reopens the last open thread', async ({ app }) => {
  const alpha = await newChat(app);
  await setSettings(app, { maxNewTokens: 8 });
  await send(app, 'alpha: remember me');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const beta = await newChat(app);
  await send(app, 'beta: and me');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });

  // Rename beta, then go back to alpha: alpha is the last open thread.
  const betaItem = app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`);
  await betaItem.dblclick();
  await app.getByTestId('thread-rename-input').fill('Beta renamed');
  await app.getByTestId('thread-rename-input').press('Enter');
  await expect(betaItem.getByTestId('thread-title')).toHaveText('Beta renamed');
  await app.getByTestId('thread-list').locator(`[data-thread-id="${alpha}"]`).click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', alpha);

  // Saves are asynchronous: retry the reload until what was saved is what we see.
  await expect(async () => {
    await app.reload();
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', alpha, { timeout: 2000 });
    await expect(app.getByTestId('message-user').getByTestId('message-text')).toHaveText(['alpha: remember me'], {
      timeout: 2000,
    });
    await expect(app.getByTestId('message-assistant')).toHaveCount(1, { timeout: 2000 });
    await expect(app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`)).toContainText('Beta renamed', {
      timeout: 2000,
    });
  }).toPass({ timeout: 20_000 });
  // The finished reply kept its stats.
  await expect(lastReply(app).getByTestId('message-stats')).toContainText('tok');

  // Deleting a thread is permanent too.
  const item = app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`);
  await item.hover();
  await item.getByTestId('thread-delete').click();
  await item.getByTestId('thread-delete').click();
  await expect(item).toHaveCount(0);
  await expect(async () => {
    await app.reload();
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', alpha, { timeout: 2000 });
    await expect(app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`)).toHaveCount(0, {
      timeout: 2000,
    });
  }).toPass({ timeout: 20_000 });
});

test('a thread of 3,000 messages opens at its end and mounts only the rows on screen', async ({ app, server }) => {
  const now = Date.now();
  const messages = Array.from({ length: 3000 }, (_, i) => ({
    id: `m${i}`,
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content:
      i % 2 === 0 ? `question ${i}` : `answer ${i}\n\n- a list item\n- another\n\n\`\`\`js\nconsole.log(${i});\n\`\`\``,
    createdAt: now + i,
  }));
  const id = `t-long-${now}`;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Very long thread',
    createdAt: now,
    updatedAt: now + 5000,
    messages,
  });
  expect(saved.ok).toBe(true);
  await app.reload({ timeout: 15_000 });
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  // Opens at the end: the last answer is on screen.
  await expect(app.getByTestId('message-assistant').last()).toContainText('answer 2999');
  await expect(app.getByTestId('message-assistant').last()).toBeInViewport();
  const mounted = await app.locator('.message-row').count();
  expect(mounted).toBeGreaterThan(0);
  expect(mounted).toBeLessThan(60);
  // Scrolling to the top brings the first message in, still without mounting the whole thread.
  await app.getByTestId('message-list').evaluate((el) => {
    el.scrollTop = 0;
  });
  await expect(app.getByTestId('message-user').first()).toContainText('question 0');
  expect(await app.locator('.message-row').count()).toBeLessThan(60);
  // Code blocks render with a copy button.
  await expect(app.getByTestId('code-copy').first()).toBeAttached();
});
