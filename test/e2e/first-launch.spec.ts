/**
 * A first start (an empty data directory), in Chromium against a real serve: the window opens ready to type, the
 * settings can be set before the first message (they make the chat), and their empty fields show what the model
 * package's generation_config.json sets (resources/models/default: temperature 0.7, top-p 0.9, top-k 50, 256
 * new tokens), not kvdesk's own fallbacks.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import { ROOT, type ServeHandle, startServe } from './serve';

let server: ServeHandle;
let root: string;
test.beforeAll(async () => {
  // A second package whose generation_config.json asks for greedy decoding (do_sample false).
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-greedy-'));
  const dir = path.join(root, 'greedy-model');
  cpSync(path.join(ROOT, 'resources/models/default'), dir, { recursive: true });
  const config = JSON.parse(readFileSync(path.join(dir, 'generation_config.json'), 'utf8'));
  writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ ...config, do_sample: false }));
  server = await startServe(['--model', dir]);
});
test.afterAll(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

test('a first start: ready to type, settings before the first message, the package’s defaults shown', async ({
  page,
}) => {
  // What the page asks the host to generate, on the wire.
  const sent: Array<Record<string, unknown>> = [];
  page.on('websocket', (ws) =>
    ws.on('framesent', (f) => {
      const m = JSON.parse(String(f.payload)) as { t: string; request?: Record<string, unknown> };
      if (m.t === 'generate' && m.request) sent.push(m.request);
    }),
  );
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
  // Screen readers get each field's name alone (no hint or button text in it).
  await expect(page.getByTestId('preset-name')).toHaveAccessibleName('preset name');
  await expect(page.getByTestId('setting-thinking')).toHaveAccessibleName('thinking');
  await expect(page.getByTestId('setting-thinking')).toHaveAccessibleDescription('the current model does not think');
  await expect(page.getByTestId('setting-thinkingBudget')).toHaveAccessibleName('thinking budget (tokens)');
  // No MCP servers: what to write in mcp.json, and no warning about running them (this page has no token).
  await expect(page.getByTestId('mcp-none')).toBeVisible();
  await expect(page.getByTestId('mcp-blocked')).toHaveCount(0);
  // The package samples (do_sample true): greedy is off, and says nothing more.
  await expect(page.getByTestId('setting-greedy')).not.toBeChecked();

  await expect(page.getByTestId('settings-summary')).toContainText('max default (256)');
  // What is set there is the chat's: its first message goes with it.
  await page.getByTestId('setting-maxNewTokens').fill('3');
  await page.getByTestId('chat-input').fill('Hello');
  // The summary says what the chat leaves to the model: its package's values.
  await expect(page.getByTestId('settings-summary')).toContainText('temp default (0.7)');
  await expect(page.getByTestId('settings-summary')).toContainText('max 3');
  await page.getByTestId('chat-input').press('Enter');
  const reply = page.getByTestId('message-assistant').last();
  await expect(reply).toHaveAttribute('data-state', /done/, { timeout: 60_000 });
  expect(sent.at(-1)).toMatchObject({ maxNewTokens: 3 });
  // (A sampled reply may end sooner, at its end of text.)
  await expect(reply.getByTestId('message-stats')).toContainText(/\b[1-3] tok\b/);
  await expect(list.locator('[data-thread-id]')).toHaveCount(1);
});

test("a package that asks for greedy decoding: greedy shows on, as the model's default, and can be turned off", async ({
  page,
}) => {
  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await page.getByTestId('model-picker').selectOption('greedy-model');
  await page.getByTestId('settings-toggle').click();
  const greedy = page.getByTestId('setting-greedy');
  await expect(greedy).toBeChecked();
  await expect(page.locator('label', { has: greedy })).toContainText("greedy (the model's default)");
  expect(await page.getByTestId('setting-temperature').getAttribute('placeholder')).toBe('greedy');
  await expect(page.getByTestId('settings-summary')).toContainText('temp default (greedy)');
  // Turned off: said in the summary (the chat samples although the package would not).
  await greedy.uncheck();
  await expect(greedy).not.toBeChecked();
  await expect(page.getByTestId('settings-summary')).toContainText('sampled');
  // An empty temperature is then the package's, or kvdesk's.
  expect(await page.getByTestId('setting-temperature').getAttribute('placeholder')).toBe('0.7');
  // On again: the package's default, nothing kept.
  await greedy.check();
  await expect(page.getByTestId('settings-summary')).not.toContainText('sampled');
  await expect(page.getByTestId('settings-summary')).toContainText(/^temp default \(greedy\)/);
});

test('a first start: the first message, typed before there is any chat, is sent once and leaves the box empty', async ({
  page,
}) => {
  const fresh = await startServe();
  try {
    await page.goto(fresh.url);
    const list = page.getByTestId('thread-list');
    await expect(list).toHaveAttribute('data-loaded', 'true');
    await expect(list.locator('[data-thread-id]')).toHaveCount(0);
    const input = page.getByTestId('chat-input');
    await expect(input).toBeFocused();
    await input.fill('Hello from the first start');
    await input.press('Enter');
    await expect(page.getByTestId('message-user')).toHaveText(/Hello from the first start/);
    // The chat made for it does not take the sent text back as its draft.
    await expect(input).toHaveValue('');
    await expect(page.getByTestId('message-assistant').last()).toHaveAttribute('data-state', /done|error/, {
      timeout: 60_000,
    });
    await expect(input).toHaveValue('');
    await page.reload();
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('chat-input')).toHaveValue('');
  } finally {
    await fresh.stop();
  }
});
