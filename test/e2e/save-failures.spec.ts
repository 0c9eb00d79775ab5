/**
 * Saves that cannot be made are said in the window (and the server's log), in Chromium against a real serve: a chat's save larger than
 * the server takes in one message (here `--max-message 4KiB`; by default 256MiB), whether the page knew the limit
 * (it does not send it) or not (the server closes the socket, the page reconnects: the notice stays), and settings
 * that could not be saved (a settings.json kvdesk cannot read).
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test as base, expect, type Page } from '@playwright/test';
import { newChat, savedThreads, send, setSettings } from './fixtures';
import { type ServeHandle, startServe } from './serve';

const test = base.extend<{ page: Page }, { smallServer: ServeHandle }>({
  smallServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const server = await startServe(['--max-message', '4KiB']);
      await use(server);
      await server.stop();
    },
    { scope: 'worker', timeout: 120_000 },
  ],
});

async function open(page: Page, server: ServeHandle): Promise<void> {
  await page.goto(server.url);
  await expect(page.getByTestId('model-picker')).toHaveValue(/.+/);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
}

/** The chats as the host has them. */
async function saved(server: ServeHandle): Promise<Array<{ id: string; messages: Array<{ content: string }> }>> {
  return ((await savedThreads(server)).value ?? []) as Array<{
    id: string;
    messages: Array<{ content: string }>;
  }>;
}

test('a chat too large to save in one message is said at once, and the connection stays', async ({
  page,
  smallServer,
}) => {
  let sockets = 0;
  page.on('websocket', () => sockets++);
  await open(page, smallServer);
  const id = await newChat(page);
  await setSettings(page, { maxNewTokens: 2 });
  await send(page, 'a short question');
  await expect(page.getByTestId('message-assistant').last()).toHaveAttribute('data-state', 'done', {
    timeout: 30_000,
  });
  const long = `a long question ${'x'.repeat(5000)}`;
  await page.getByTestId('chat-input').fill(long);
  await page.getByTestId('chat-input').press('Enter');
  const alert = page.getByTestId('notice');
  await expect(alert).toHaveAttribute('role', 'alert');
  await expect(alert).toContainText('“a short question” was not saved: 5');
  await expect(alert).toContainText('bytes to send is more than the 4096 bytes kvdesk takes in one message');
  await expect(alert).toContainText('lost when this page closes');
  // Not sent, so the socket was not closed over it: the page never lost its connection.
  expect(sockets).toBe(1);
  const chat = (await saved(smallServer)).find((t) => t.id === id);
  expect(chat?.messages.map((m) => m.content)).not.toContain(long);
});

test('a save the server closed the connection over (the page did not know its limit): said, and still said once it is back', async ({
  page,
  smallServer,
}) => {
  // A server that does not say how large a message may be (as one before it did).
  await page.routeWebSocket(/\/ws/, (ws) => {
    const host = ws.connectToServer();
    host.onMessage((m) => {
      if (typeof m === 'string' && m.startsWith('{"t":"hello"')) {
        const hello = JSON.parse(m) as Record<string, unknown>;
        delete hello.maxMessageBytes;
        ws.send(JSON.stringify(hello));
      } else ws.send(m);
    });
  });
  let sockets = 0;
  page.on('websocket', () => sockets++);
  await open(page, smallServer);
  await newChat(page);
  await page.getByTestId('chat-input').fill(`too long ${'y'.repeat(5000)}`);
  await page.getByTestId('chat-input').press('Enter');
  const alert = page.getByTestId('notice');
  await expect(alert).toContainText('was not saved: kvdesk closed the connection over a message larger than it takes');
  // Reconnected, and not sent again and again (each would close the connection again): the turn's save and the
  // interrupted reply's at most, then the connection stays…
  await expect.poll(() => sockets).toBeGreaterThanOrEqual(2);
  await expect(page.getByTestId('connection')).toHaveCount(0, { timeout: 15_000 });
  await page.waitForTimeout(2000);
  const settled = sockets;
  await page.waitForTimeout(2000);
  expect(sockets).toBe(settled);
  expect(sockets).toBeLessThanOrEqual(3);
  // …and the notice is still there to read.
  await expect(alert).toContainText('was not saved: kvdesk closed the connection');
});

test('settings that could not be saved are said, and the server log says so', async ({ page, smallServer }) => {
  await open(page, smallServer);
  const file = path.join(smallServer.dataDir, 'settings.json');
  // A settings.json kvdesk cannot read (here a folder in its place): saves are refused, never written over it.
  rmSync(file, { force: true });
  mkdirSync(file);
  try {
    await page.getByTestId('theme-toggle').click();
    const alert = page.getByTestId('notice');
    await expect(alert).toHaveAttribute('role', 'alert');
    await expect(alert).toContainText('Your settings were not saved');
    await expect(alert).toContainText(file);
    await expect(alert).toContainText('lost when this page closes');
    expect(smallServer.log()).toContain(`the settings file ${file} could not be read`);
  } finally {
    rmSync(file, { recursive: true, force: true });
    writeFileSync(file, '{}');
  }
});

test('a delete the host refuses puts the chat back in its place, open as it was with its draft, and says why; the settings notice does not hide it', async ({
  page,
  smallServer,
}) => {
  // Short, so that the chat deleted scrolls.
  await page.setViewportSize({ width: 1280, height: 560 });
  await open(page, smallServer);
  const titles = ['first to keep', 'second to delete', 'third to keep'];
  const ids: string[] = [];
  for (const t of titles) {
    ids.push(await newChat(page));
    await setSettings(page, { maxNewTokens: 2 });
    const turns =
      t === 'second to delete' ? [t, ...[1, 2, 3].map((n) => `turn ${n}: ${'words to scroll by '.repeat(12)}`)] : [t];
    for (const turn of turns) {
      await send(page, turn);
      await expect(page.getByTestId('message-assistant').last()).toHaveAttribute('data-state', 'done', {
        timeout: 30_000,
      });
    }
  }
  const target = ids[1] as string;
  const rows = page.getByTestId('thread-list').locator('[data-testid="thread-item"][data-thread-id]');
  const order = () => rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-thread-id')));
  await expect.poll(order).toEqual(expect.arrayContaining(ids));
  const before = await order();
  // The host cannot note the delete (a folder where deleted-threads.json goes), nor save the settings that the
  // delete changes (the chat open next): two refusals, one after the other.
  const deleted = path.join(smallServer.dataDir, 'deleted-threads.json');
  const settings = path.join(smallServer.dataDir, 'settings.json');
  for (const f of [deleted, settings]) {
    rmSync(f, { recursive: true, force: true });
    mkdirSync(f);
    writeFileSync(path.join(f, 'keep'), 'x');
  }
  try {
    await page.getByTestId('thread-list').locator(`[data-thread-id="${target}"]`).first().click();
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', target);
    // Scrolled up to its first message, a reply being written.
    const list = page.getByTestId('message-list');
    await expect(list.locator('[data-message-id]')).toHaveCount(8);
    await list.evaluate((el) => {
      el.scrollTop = 0;
    });
    await expect(page.getByTestId('jump-to-end')).toBeVisible();
    const input = page.getByTestId('chat-input');
    await input.fill('a reply half written');
    const row = page.locator(`[data-testid="thread-item"][data-thread-id="${target}"]`);
    await row.hover();
    await row.getByTestId('thread-delete').click();
    await row.getByTestId('thread-delete').click();
    const notices = page.locator('[data-testid="notice"], [data-testid="notice-earlier"]');
    await expect(notices.filter({ hasText: 'Could not delete “second to delete”:' })).toHaveCount(1);
    await expect(notices.filter({ hasText: 'Your settings were not saved' })).toHaveCount(1);
    // Back in the list, where it was; open again, scrolled as it was, with its draft.
    await expect.poll(order).toEqual(before);
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', target);
    await expect(input).toHaveValue('a reply half written');
    await expect(page.getByTestId('jump-to-end')).toBeVisible();
    await expect(list.getByTestId('message-user').first()).toBeInViewport();
    expect(await list.evaluate((el) => el.scrollTop)).toBeLessThan(5);
    await expect(notices.filter({ hasText: 'Could not delete “second to delete”:' })).toContainText(deleted);
  } finally {
    for (const f of [deleted, settings]) rmSync(f, { recursive: true, force: true });
    writeFileSync(settings, '{}');
  }
  // The host has it still: a reload lists it.
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(page.getByTestId('thread-list').locator(`[data-thread-id="${target}"]`).first()).toBeVisible();
});
