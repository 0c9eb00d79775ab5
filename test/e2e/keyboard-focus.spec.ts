/**
 * Where the keyboard's focus goes, and what a screen reader is told, as the controls it was on change under it:
 * version arrows, the edit box's warning, the pickers' arrows; a chat opened says nothing of how its last reply (or an old refusal) ended. (Stop ending under the focus: esc-stop.)
 */

import type { Page } from '@playwright/test';
import { expect, lastReply, newChat, openSavedChat, send, setSettings, test } from './fixtures';

/** Whether the focused control's ArrowDown reaches the page as it is (not taken by the control's own handler). */
async function arrowDownTaken(page: Page): Promise<boolean> {
  await page.evaluate(() => {
    const w = window as unknown as { arrowTaken?: boolean };
    w.arrowTaken = undefined;
    document.addEventListener('keydown', (e) => (w.arrowTaken = e.defaultPrevented), { once: true });
  });
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Escape');
  return page.evaluate(() => (window as unknown as { arrowTaken?: boolean }).arrowTaken === true);
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
});
