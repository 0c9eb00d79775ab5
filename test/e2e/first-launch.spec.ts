/**
 * A first start (an empty data directory), in Chromium against a real serve: the window opens ready to type, the
 * settings can be set before the first message (they make the chat), and their empty fields show what the model
 * package's generation_config.json sets (resources/models/default: temperature 0.7, top-p 0.9, top-k 50, 256
 * new tokens), not kvdesk's own fallbacks.
 */
import { expect, test } from '@playwright/test';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startServe();
});
test.afterAll(async () => {
  await server.stop();
});

test('a first start: ready to type, settings before the first message, the package’s defaults shown', async ({
  page,
}) => {
  await page.goto(server.url);
  const list = page.getByTestId('thread-list');
  await expect(list).toHaveAttribute('data-loaded', 'true');
  await expect(page.getByTestId('chat-input')).toBeFocused();
  await expect(list.locator('[data-thread-id]')).toHaveCount(0);

  const toggle = page.getByTestId('settings-toggle');
  await expect(toggle).toBeEnabled();
  await toggle.click();
  await expect(page.getByTestId('settings-panel')).toBeVisible();
  await expect(list.locator('[data-thread-id]')).toHaveCount(1);
  const placeholder = (id: string) => page.getByTestId(id).getAttribute('placeholder');
  expect(await placeholder('setting-temperature')).toBe('0.7');
  expect(await placeholder('setting-topP')).toBe('0.9');
  expect(await placeholder('setting-topK')).toBe('50');
  expect(await placeholder('setting-minP')).toBe('0');
  expect(await placeholder('setting-maxNewTokens')).toBe('256');
  expect(await placeholder('system-prompt')).toMatch(/^None\./);
  // The package samples (do_sample true): greedy is off, and says nothing more.
  await expect(page.getByTestId('setting-greedy')).not.toBeChecked();

  // What is set there is the chat's: its first message goes with it.
  await page.getByTestId('setting-maxNewTokens').fill('3');
  await page.getByTestId('chat-input').fill('Hello');
  await expect(page.getByTestId('settings-summary')).toContainText('max 3');
  await page.getByTestId('chat-input').press('Enter');
  const reply = page.getByTestId('message-assistant').last();
  await expect(reply).toHaveAttribute('data-state', /done/, { timeout: 60_000 });
  await expect(reply.getByTestId('message-stats')).toContainText(/\b3 tok\b/);
  await expect(list.locator('[data-thread-id]')).toHaveCount(1);
});
