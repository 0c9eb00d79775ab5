/**
 * Where the keyboard's focus goes, and what a screen reader is told, as the controls it was on change under it:
 * version arrows, the chat list's delete and search, the drawer's New chat and Import…, the preset questions; a
 * chat opened says nothing of how its last reply (or an old refusal) ended. (Stop ending under the focus: esc-stop.)
 */

import { writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { expect, lastReply, newChat, openGreeting, openSavedChat, send, setSettings, test } from './fixtures';

/** Whether the focused control's ArrowDown reaches the page as it is (not taken by the control's own handler). */
async function arrowDownTaken(page: Page): Promise<boolean> {
  await page.evaluate(() => {
    // The page's own globals (the tests' TypeScript knows no DOM).
    const w = globalThis as unknown as {
      arrowTaken?: boolean;
      document: { addEventListener(type: 'keydown', f: (e: { defaultPrevented: boolean }) => void, o: object): void };
    };
    w.arrowTaken = undefined;
    w.document.addEventListener('keydown', (e) => (w.arrowTaken = e.defaultPrevented), { once: true });
  });
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Escape');
  return page.evaluate(() => (globalThis as unknown as { arrowTaken?: boolean }).arrowTaken === true);
}

test('a chat: version arrows keep the focus, the edit box says what Send removes, a reload says nothing', async ({
  app,
}) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 4 });
  const said = app.getByTestId('reply-announcer');
  await send(app, 'first question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(said).toHaveText(/^Reply done/);
  await send(app, 'second question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });

  // A second version of the last reply; "previous" pressed at the first version greys out: the focus goes to "next".
  await lastReply(app).hover();
  await lastReply(app).getByTestId('regenerate').click();
  await expect(lastReply(app).getByTestId('versions')).toHaveAttribute('data-count', '2', { timeout: 30_000 });
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const prev = lastReply(app).getByTestId('version-prev');
  await prev.focus();
  await app.keyboard.press('Enter');
  await expect(lastReply(app).getByTestId('versions')).toHaveAttribute('data-at', '1');
  await expect(prev).toBeDisabled();
  await expect(lastReply(app).getByTestId('version-next')).toBeFocused();
  await app.keyboard.press('Enter');
  await expect(lastReply(app).getByTestId('versions')).toHaveAttribute('data-at', '2');
  await expect(prev).toBeFocused();

  // The edit box of the first message is described by what its Send takes away.
  const first = app.getByTestId('message-user').first();
  await first.hover();
  await first.getByTestId('edit-message').click();
  await expect(app.getByTestId('edit-input')).toHaveAccessibleDescription(
    /^Send removes the 3 messages after this one/,
  );
  await app.keyboard.press('Escape');

  // Loaded again on this chat: its last reply's end is not news.
  await app.reload();
  await expect(app.getByTestId('message-assistant')).toHaveCount(2);
  await app.waitForTimeout(500);
  await expect(said).toHaveText('');
});

test('refusals: one that comes is an alert, those a chat opens with are not', async ({ app, server }) => {
  await openSavedChat(app, server, 'old-refusal', [
    { id: 'u0', role: 'user', content: 'Hi' },
    {
      id: 'a0',
      role: 'assistant',
      content: '',
      stats: { error: { code: 'QUEUE_FULL', message: 'full' } },
    },
  ]);
  const old = app.getByTestId('refusal');
  await expect(old).toBeVisible();
  await expect(old).not.toHaveAttribute('role', 'alert');

  // A refusal as it comes: a JSON schema kvdesk cannot enforce.
  await newChat(app);
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-json').check();
  const schemaBox = app.getByTestId('setting-json-schema');
  await schemaBox.fill('{"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}');
  await schemaBox.blur();
  await app.getByTestId('settings-toggle').click();
  await send(app, 'Give me an address.');
  await expect(lastReply(app).getByTestId('refusal')).toHaveAttribute('role', 'alert');
});

test('the header: the backend picker opens on an arrow, the hidden transport is not read', async ({ app }) => {
  await app.getByTestId('model-backend').focus();
  expect(await arrowDownTaken(app)).toBe(true);
  await expect(app.getByTestId('model-backend')).toHaveValue('cpu');
  await expect(app.getByTestId('transport')).toHaveAttribute('aria-hidden', 'true');
  await expect(app.getByTestId('chat-input')).toHaveAccessibleName('Message');
  // The box's region has a name of its own: a screen reader entering it does not hear "Message" twice.
  await expect(app.getByRole('region', { name: 'Compose', exact: true })).toBeVisible();
  await expect(app.getByRole('region', { name: 'Message', exact: true })).toHaveCount(0);
});

test("the chat list: rows name their chat, a search's count is said, deleting its only chat keeps the focus", async ({
  app,
  server,
}) => {
  // Another chat stays listed (with none left, the search box goes too).
  await openGreeting(app, server, `other-${Date.now()}`);
  const name = `zebra-${Date.now()}`;
  const id = await openGreeting(app, server, name);
  const row = app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
  await expect(row.getByTestId('thread-title')).toHaveAttribute('aria-current', 'page');
  await expect(row.getByTestId('thread-pin')).toHaveAccessibleName(`Pin chat “${name}”`);
  await expect(row.getByTestId('thread-rename')).toHaveAccessibleName(`Rename chat “${name}”`);
  await expect(row.getByTestId('thread-delete')).toHaveAccessibleName(`Delete chat “${name}”`);
  await row.getByTestId('thread-pin').click();
  await expect(row.getByTestId('thread-title')).toHaveAccessibleDescription('pinned');

  const search = app.getByTestId('thread-search');
  const found = app.getByTestId('thread-search-said');
  await search.fill(name);
  await expect(found).toHaveText('1 chat found.');
  await expect(app.getByTestId('thread-list').getByTestId('thread-item')).toHaveCount(1);
  await row.getByTestId('thread-title').focus();
  await app.keyboard.press('Delete');
  await expect(row.getByTestId('thread-delete')).toBeFocused();
  await app.keyboard.press('Enter');
  await expect(row).toHaveCount(0);
  await expect(search).toBeFocused();
  await expect(found).toHaveText(`No chat mentions “${name}”.`);
});

test("a narrow window's drawer: New chat and Import… close it with the focus in the message box", async ({ app }) => {
  await app.setViewportSize({ width: 800, height: 700 });
  await app.getByTestId('sidebar-toggle').click();
  await expect(app.getByTestId('new-thread')).toBeVisible();
  await app.getByTestId('new-thread').click();
  await expect(app.getByTestId('chat-input')).toBeFocused();

  const file = path.join(os.tmpdir(), `kvdesk-import-focus-${process.pid}.json`);
  writeFileSync(file, JSON.stringify({ messages: [{ role: 'user', content: 'imported hello' }] }));
  await app.getByTestId('sidebar-toggle').click();
  const chooser = app.waitForEvent('filechooser');
  await app.getByTestId('import-thread').click();
  await (await chooser).setFiles(file);
  await expect(app.getByTestId('message-user').last()).toContainText('imported hello');
  await expect(app.getByTestId('chat-input')).toBeFocused();
});

test('the preset questions, answered, give the focus back to what asked', async ({ app }) => {
  await newChat(app);
  await app.getByTestId('settings-toggle').click();
  const presetName = app.getByTestId('preset-name');
  const preset = `focus ${Date.now()}`;
  await presetName.fill(preset);
  await app.getByTestId('preset-save').click();
  await expect(app.getByTestId('preset-select')).toHaveValue(preset);

  // Saved again under its name: "Replace?" — answered, the focus is back in the name's box (Save greys out).
  await presetName.fill(preset);
  await presetName.press('Enter');
  await expect(app.getByTestId('preset-ask-cancel')).toBeFocused();
  await app.getByTestId('preset-replace-confirm').click();
  await expect(app.getByTestId('preset-ask')).toHaveCount(0);
  await expect(presetName).toBeFocused();

  // Delete, Cancel: back on delete; Delete, Delete: on the picker (the button went with the preset).
  await app.getByTestId('preset-delete').click();
  await expect(app.getByTestId('preset-ask-cancel')).toBeFocused();
  await app.keyboard.press('Enter');
  await expect(app.getByTestId('preset-delete')).toBeFocused();
  await app.getByTestId('preset-delete').click();
  await app.getByTestId('preset-delete-confirm').click();
  await expect(app.getByTestId('preset-delete')).toHaveCount(0);
  await expect(app.getByTestId('preset-select')).toBeFocused();
});
