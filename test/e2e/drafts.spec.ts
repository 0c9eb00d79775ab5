/**
 * What the person is writing stays with its chat: each chat keeps its own draft (through a reload too), a chat
 * deleted in another tab takes its draft with it and says so, and while the host cannot be reached the message
 * waits in the box instead of failing; a page kept open while kvdesk was updated says to reload, and its draft is
 * there after the reload.
 */
import { appendFileSync, cpSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, type Page } from '@playwright/test';
import { lastReply, newChat, savedThreads, send, setSettings, test } from './fixtures';
import { ROOT, startServe } from './serve';

const threadRow = (page: Page, id: string) => page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);

async function open(page: Page, id: string): Promise<void> {
  await threadRow(page, id).click();
  await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
}

test("each chat keeps its own draft: another chat's box is its own, Enter there sends nothing of this one", async ({
  app: page,
}) => {
  const a = await newChat(page);
  await setSettings(page, { maxNewTokens: 2 });
  await send(page, 'first turn of A');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  const input = page.getByTestId('chat-input');
  await input.fill('half a thought meant for A');
  const b = await newChat(page);
  await expect(input).toHaveValue('');
  await input.fill('draft of B');
  await open(page, a);
  await expect(input).toHaveValue('half a thought meant for A');
  await open(page, b);
  await expect(input).toHaveValue('draft of B');
  // Enter in B sends B's draft, nothing of A's.
  await setSettings(page, { maxNewTokens: 2 });
  await input.press('Enter');
  await expect(page.getByTestId('message-user').getByTestId('message-text')).toHaveText(['draft of B']);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);

  // A reload keeps the drafts (the page's storage), and a sent draft is gone from it.
  await open(page, a);
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await open(page, a);
  await expect(input).toHaveValue('half a thought meant for A');
  await input.press('Enter');
  await expect(page.getByTestId('message-user')).toHaveCount(2);
  await expect(input).toHaveValue('');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await open(page, a);
  await expect(input).toHaveValue('');
});

test('a message sent in one tab is no draft in the others: their box empties, and Enter there sends nothing', async ({
  app: page,
  server,
}) => {
  const other = await newChat(page);
  await setSettings(page, { maxNewTokens: 2 });
  await send(page, 'a chat to be on meanwhile');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  const y = await newChat(page);
  await send(page, 'first turn of Y');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  const input = page.getByTestId('chat-input');
  await input.fill('hello from tab B');
  await page.getByTestId('attach-input').setInputFiles({
    name: 'notes.txt',
    mimeType: 'text/plain',
    buffer: Buffer.from('notes from tab B\n'),
  });
  await expect(page.getByTestId('composer-attachment')).toHaveText(/notes\.txt/);

  // Two more tabs open while the draft is there: one on chat Y (the last open), one on another chat.
  const tab = async () => {
    const t = await page.context().newPage();
    await t.goto(server.url);
    await expect(t.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(t.getByTestId('chat-view')).toHaveAttribute('data-thread-id', y);
    await expect(t.getByTestId('chat-input')).toHaveValue('hello from tab B');
    await expect(t.getByTestId('composer-attachment')).toHaveText(/notes\.txt/);
    return t;
  };
  const onY = await tab();
  const elsewhere = await tab();
  try {
    await open(elsewhere, other);
    await expect(elsewhere.getByTestId('chat-input')).toHaveValue('');

    // Sent here: the tab on Y shows its box empty (its Send off), and so does the other one when it opens Y.
    await input.press('Enter');
    await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
    const userTexts = (p: Page) => p.getByTestId('message-user').getByTestId('message-text');
    const savedUserTexts = async () => {
      const r = await savedThreads(server);
      const t = (
        r.value as Array<{ id: string; maxNewTokens?: number; messages: Array<{ role: string; content: string }> }>
      ).find((x) => x.id === y);
      return { max: t?.maxNewTokens, texts: t?.messages.filter((m) => m.role === 'user').map((m) => m.content) };
    };
    for (const [i, t] of [onY, elsewhere].entries()) {
      if (t === elsewhere) await open(t, y);
      await expect(userTexts(t)).toHaveText(['first turn of Y', 'hello from tab B']);
      await expect(t.getByTestId('chat-input')).toHaveValue('');
      await expect(t.getByTestId('composer-attachment')).toHaveCount(0);
      await expect(t.getByTestId('send-button')).toBeDisabled();
      // Enter sends nothing again. Then a setting changed there: its save reaches the host after any message that
      // Enter would have sent (and has that tab's messages), so the host's chat says what Enter did.
      await t.getByTestId('chat-input').press('Enter');
      await setSettings(t, { maxNewTokens: 3 + i });
      await expect.poll(async () => (await savedUserTexts()).max).toBe(3 + i);
      expect((await savedUserTexts()).texts).toEqual(['first turn of Y', 'hello from tab B']);
      await expect(userTexts(page)).toHaveText(['first turn of Y', 'hello from tab B']);
    }

    // A draft written in one tab shows in another on the same chat, and is the one a reload there keeps.
    // Typed key by key there: each key's change reaches this tab, none comes back to undo a later one.
    await onY.getByTestId('chat-input').pressSequentially('written in the other tab', { delay: 20 });
    await expect(onY.getByTestId('chat-input')).toHaveValue('written in the other tab');
    await expect(input).toHaveValue('written in the other tab');
    await page.reload();
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await open(page, y);
    await expect(input).toHaveValue('written in the other tab');
  } finally {
    await onY.close();
    await elsewhere.close();
  }
});

test('the open chat deleted in another tab: this tab says so, and its draft does not move to the next chat', async ({
  app: page,
}) => {
  // The pages' clock (installed for the context, so from the reload on), to run the notice's 10 s at once.
  await page.clock.install();
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  // Chats with a turn (an untouched new chat is not saved, so the other tab would not list it).
  const keep = await newChat(page);
  await setSettings(page, { maxNewTokens: 2 });
  await send(page, 'the chat that stays');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  const doomed = await newChat(page);
  await send(page, 'the chat that goes');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  await page.getByTestId('chat-input').fill('draft of the chat about to go');
  const other = await page.context().newPage();
  await other.goto(page.url());
  await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const row = threadRow(other, doomed);
  await row.hover();
  await row.getByTestId('thread-delete').click();
  await row.getByTestId('thread-delete').click();
  await expect(row).toHaveCount(0);
  await expect(page.getByTestId('notice')).toContainText('was deleted in another window or tab');
  await expect(page.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', doomed);
  await expect(page.getByTestId('chat-input')).toHaveValue('');
  await open(page, keep);
  await expect(page.getByTestId('chat-input')).toHaveValue('');
  await other.close();
  // The notice goes by itself (10 s), not to sit over the window's controls for good.
  await page.clock.fastForward(11_000);
  await expect(page.getByTestId('notice')).toHaveCount(0, { timeout: 1_000 });
});

test('with the host out of reach the message waits in the box, and goes once the host is back', async ({ page }) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-offline-'));
  let server = await startServe([], 90_000, undefined, dataDir);
  const port = new URL(server.url).port;
  const restart = () => startServe(['--port', port], 90_000, undefined, dataDir);
  try {
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await newChat(page);
    await setSettings(page, { maxNewTokens: 2 });
    await server.stop();
    await expect(page.getByTestId('offline-note')).toContainText('kvdesk cannot be reached');
    const input = page.getByTestId('chat-input');
    await input.fill('written while the host was away');
    await expect(page.getByTestId('send-button')).toBeDisabled();
    await input.press('Enter');
    // Nothing goes (given time to): the message stays in its box.
    await page.waitForTimeout(500);
    await expect(page.getByTestId('message-user')).toHaveCount(0);
    await expect(input).toHaveValue('written while the host was away');
    server = await restart();
    await expect(page.getByTestId('offline-note')).toHaveCount(0, { timeout: 30_000 });
    await input.press('Enter');
    await expect(page.getByTestId('message-user')).toHaveText(/written while the host was away/);
    await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a page kept open while kvdesk was updated says to reload; the draft is there after the reload', async ({
  page,
}) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-update-'));
  // "The update": the same UI, built again (its index.html differs, as a new build's does).
  const newer = path.join(dataDir, 'newer-ui');
  cpSync(path.join(ROOT, 'out', 'renderer'), newer, { recursive: true });
  appendFileSync(path.join(newer, 'index.html'), '<!-- another build -->\n');
  let server = await startServe([], 90_000, undefined, dataDir);
  const port = new URL(server.url).port;
  try {
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await newChat(page);
    await page.getByTestId('chat-input').fill('half a thought');
    await server.stop();
    server = await startServe(['--port', port, '--static-dir', newer], 90_000, undefined, dataDir);
    const notice = page.getByTestId('sticky-notice');
    await expect(notice).toContainText('kvdesk was updated since this page opened: reload the page', {
      timeout: 30_000,
    });
    // A passing notice shows beside it, not in its place.
    await server.stop();
    await expect(page.getByTestId('notice')).toContainText('Connection to kvdesk lost');
    await expect(notice).toContainText('kvdesk was updated');
    server = await startServe(['--port', port, '--static-dir', newer], 90_000, undefined, dataDir);
    await expect(page.getByTestId('notice')).toHaveCount(0, { timeout: 30_000 });
    await expect(notice).toContainText('kvdesk was updated');
    await page.reload();
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('chat-input')).toHaveValue('half a thought');
    // This page is of the build the server serves (its hello came before the chats it listed): nothing to say.
    await expect(notice).toHaveCount(0);
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
