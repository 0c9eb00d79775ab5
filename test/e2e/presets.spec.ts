/**
 * Presets in Chromium against a real serve: a chat's settings saved under a name are given to another chat in
 * one pick (the settings panel shows them, the summary says so), survive a reload, and go when deleted; every page
 * open on the same kvdesk sees them at once.
 */
import type { Page } from '@playwright/test';
import { expect, newChat, test } from './fixtures';

async function openSettings(page: Page) {
  if (!(await page.getByTestId('settings-panel').isVisible())) await page.getByTestId('settings-toggle').click();
}

async function setField(page: Page, testId: string, value: string) {
  await page.getByTestId(testId).fill(value);
  await page.getByTestId(testId).blur();
}

test('a preset saves a chat’s settings and gives them to another chat; it survives a reload until deleted', async ({
  app: page,
}) => {
  await newChat(page);
  await openSettings(page);
  await setField(page, 'system-prompt', 'You are a careful pirate.');
  await setField(page, 'setting-temperature', '0.3');
  await setField(page, 'setting-stop', '###');
  await expect(page.getByTestId('settings-summary')).toContainText('temp 0.3');
  await page.getByTestId('preset-name').fill('Pirate');
  await page.getByTestId('preset-save').click();
  await expect(page.getByTestId('preset-delete')).toHaveText('delete “Pirate”');
  // Saved, it is the preset in effect.
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');
  // Saving under that name again asks first; Cancel keeps the preset as it was.
  await setField(page, 'setting-temperature', '0.5');
  await expect(page.getByTestId('preset-select')).toHaveValue('');
  await page.getByTestId('preset-name').fill('Pirate');
  await page.getByTestId('preset-save').click();
  await expect(page.getByTestId('preset-ask')).toContainText('Replace preset “Pirate” with these settings?');
  // The name is set apart from the sentence (a Hebrew or Arabic one takes none of its punctuation).
  await expect(page.getByTestId('preset-ask').locator('bdi')).toHaveText('Pirate');
  // The question has the focus, on its safe answer; Esc answers no too.
  await expect(page.getByTestId('preset-ask-cancel')).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(page.getByTestId('preset-ask')).toHaveCount(0);
  await setField(page, 'setting-temperature', '0.3');
  // The same settings as the preset again: it shows as in effect.
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');

  // Another chat, which takes these settings: the preset they are is named there too.
  await newChat(page);
  await openSettings(page);
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');
  // Its settings cleared.
  await setField(page, 'system-prompt', '');
  await setField(page, 'setting-temperature', '');
  await setField(page, 'setting-stop', '');
  await expect(page.getByTestId('settings-summary')).toContainText('temp default');
  // Its settings are no longer the preset's (the picker applies it again), though it came with them.
  await expect(page.getByTestId('preset-select')).toHaveValue('');
  // Browsing the picker with the arrow keys opens its list: nothing is applied until one is chosen.
  await page.getByTestId('preset-select').focus();
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Escape');
  await expect(page.getByTestId('preset-select')).toHaveValue('');
  await expect(page.getByTestId('system-prompt')).toHaveValue('');
  await page.getByTestId('preset-select').selectOption('Pirate');
  await expect(page.getByTestId('system-prompt')).toHaveValue('You are a careful pirate.');
  await expect(page.getByTestId('setting-temperature')).toHaveValue('0.3');
  await expect(page.getByTestId('setting-stop')).toHaveValue('###');
  await expect(page.getByTestId('settings-summary')).toContainText('temp 0.3');
  await expect(page.getByTestId('settings-summary')).toContainText('stop ×1');
  // The picker shows the preset in effect, until a setting changes; then it applies again.
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');
  await setField(page, 'setting-temperature', '0.9');
  await expect(page.getByTestId('settings-summary')).toContainText('temp 0.9');
  await expect(page.getByTestId('preset-select')).toHaveValue('');
  await page.getByTestId('preset-select').selectOption('Pirate');
  await expect(page.getByTestId('settings-summary')).toContainText('temp 0.3');
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');
  // Saved over after asking: the preset takes this chat's settings.
  await setField(page, 'setting-topP', '0.8');
  await page.getByTestId('preset-name').fill('Pirate');
  await page.getByTestId('preset-name').press('Enter');
  await page.getByTestId('preset-replace-confirm').click();
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');
  await expect(page.getByTestId('preset-select').locator('option', { hasText: 'Pirate' })).toHaveCount(1);
  await setField(page, 'setting-topP', '');
  await page.getByTestId('preset-select').selectOption('Pirate');
  await expect(page.getByTestId('settings-summary')).toContainText('top-p 0.8');

  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await openSettings(page);
  await expect(page.getByTestId('preset-select').locator('option', { hasText: 'Pirate' })).toHaveCount(1);
  // The chat kept what the preset gave it, and the picker still says which preset that is.
  await expect(page.getByTestId('settings-summary')).toContainText('temp 0.3');
  await expect(page.getByTestId('settings-summary')).toContainText('top-p 0.8');
  await expect(page.getByTestId('preset-select')).toHaveValue('Pirate');

  // Deleting asks once more.
  await page.getByTestId('preset-delete').click();
  await expect(page.getByTestId('preset-ask')).toContainText('Delete preset “Pirate”?');
  await expect(page.getByTestId('preset-ask').locator('bdi')).toHaveText('Pirate');
  await expect(page.getByTestId('preset-select').locator('option', { hasText: 'Pirate' })).toHaveCount(1);
  await page.getByTestId('preset-delete-confirm').click();
  await expect(page.getByTestId('preset-select').locator('option', { hasText: 'Pirate' })).toHaveCount(0);
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await openSettings(page);
  await expect(page.getByTestId('preset-select').locator('option', { hasText: 'Pirate' })).toHaveCount(0);

  // New chats inherit the open one's settings: clear them for the tests that follow.
  await setField(page, 'system-prompt', '');
  await setField(page, 'setting-temperature', '');
  await setField(page, 'setting-stop', '');
  await setField(page, 'setting-topP', '');
  await expect(page.getByTestId('settings-summary')).toContainText('temp default');
  await expect(page.getByTestId('settings-summary')).not.toContainText('top-p');
});

test('a preset saved in one page shows in another open on the same kvdesk, without a reload', async ({
  app: page,
  server,
}) => {
  const other = await page.context().newPage();
  await other.goto(server.url);
  await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await openSettings(other);
  await newChat(page);
  await openSettings(page);
  await page.getByTestId('preset-name').fill('Shared');
  await page.getByTestId('preset-save').click();
  await expect(other.getByTestId('preset-select').locator('option', { hasText: 'Shared' })).toHaveCount(1);
  // Deleted there, gone here.
  await other.getByTestId('preset-select').selectOption('Shared');
  await other.getByTestId('preset-delete').click();
  await other.getByTestId('preset-delete-confirm').click();
  await expect(page.getByTestId('preset-select').locator('option', { hasText: 'Shared' })).toHaveCount(0);
  await other.close();
});

test('a new chat says whose settings it took, and starts from the defaults in one click', async ({ app: page }) => {
  await newChat(page);
  await openSettings(page);
  await setField(page, 'system-prompt', 'You are terse.');
  await setField(page, 'setting-temperature', '1.5');
  await page.getByTestId('settings-toggle').click();
  const from = (await page.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
  const fromTitle = (await page.locator(`#chat-list [data-thread-id="${from}"]`).getAttribute('title')) ?? '';
  // The new chat takes them, and says from where.
  const id = await newChat(page);
  expect(id).not.toBe(from);
  await expect(page.getByTestId('settings-summary')).toContainText('temp 1.5');
  await expect(page.getByTestId('carried-settings')).toHaveText(`· from “${fromTitle}”use the defaults`);
  // Its tooltip sets the title apart (U+2068 … U+2069), as the <bdi> does on the page.
  await expect(page.getByTestId('carried-settings').locator('.from')).toHaveAttribute(
    'title',
    `This new chat took the settings of “\u2068${fromTitle}\u2069”`,
  );
  // Open settings show the defaults at once after the click, and the chat is still the untouched one New chat opens.
  await openSettings(page);
  await expect(page.getByTestId('setting-temperature')).toHaveValue('1.5');
  await page.getByTestId('carried-reset').click();
  await expect(page.getByTestId('carried-settings')).toHaveCount(0);
  await expect(page.getByTestId('settings-summary')).toContainText('temp default');
  await expect(page.getByTestId('setting-temperature')).toHaveValue('');
  await expect(page.getByTestId('system-prompt')).toHaveValue('');
  expect(await newChat(page)).toBe(id);
  // A chat whose carried settings the person changed no longer says they are another chat's.
  await page.locator(`#chat-list [data-thread-id="${from}"] [data-testid="thread-title"]`).click();
  const second = await newChat(page);
  await expect(page.getByTestId('carried-settings')).toBeVisible();
  await openSettings(page);
  await setField(page, 'setting-temperature', '0.9');
  await expect(page.getByTestId('carried-settings')).toHaveCount(0);
  expect(second).not.toBe(from);
  // The next tests' chats start from the defaults (a new chat takes the open one's settings).
  await newChat(page);
  await page.getByTestId('carried-reset').click();
  await expect(page.getByTestId('settings-summary')).toContainText('temp default');
  await expect(page.getByTestId('system-prompt')).toHaveValue('');
});
