/**
 * The desktop window's API server card in Chromium: a serve whose page gets the window's own control
 * (test/e2e/serve-window.ts), so start, the API key (shown, copied, replaced), the local network and stop run as in
 * the window, against real HTTP requests to the server it starts.
 */
import { expect, test } from '@playwright/test';
import { lanAddresses } from '../../src/main/server/api-server-control';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startServe([], 90_000, 'test/e2e/serve-window.ts');
});
test.afterAll(async () => {
  await server.stop();
});

/** The status of GET url/v1/models with the key (or without), or 'refused' when nothing listens there. */
async function models(url: string, key?: string): Promise<number | 'refused'> {
  try {
    const res = await fetch(`${url}/v1/models`, {
      headers: { connection: 'close', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    });
    return res.status;
  } catch {
    return 'refused';
  }
}

test('the window’s API server: started with the key, a new key, the local network, then stopped', async ({
  page,
  context,
}) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.goto(server.url);
  await expect(page.getByTestId('model-picker')).toHaveValue(/.+/);
  await page.getByTestId('models-toggle').click();
  const card = page.getByTestId('api-server');
  await expect(card.getByTestId('api-server-state')).toHaveText('off');
  await expect(card).toContainText('API server');

  // Asked for the key before it starts (any free port): it starts wanting it.
  await card.getByTestId('api-server-port').fill('0');
  await card.getByTestId('api-server-key-toggle').check();
  await card.getByTestId('api-server-start').click();
  await expect(card.getByTestId('api-server-state')).toHaveText('on');
  const url = (await card.getByTestId('api-server-url').textContent()) ?? '';
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  await expect(card).toContainText('with the API key');
  // Hidden until shown; Copy puts it on the clipboard.
  const value = card.getByTestId('api-key-value');
  await expect(value).toHaveText(/^kvd-•{12}$/);
  await card.getByTestId('api-key-show').click();
  await expect(value).toHaveText(/^kvd-[A-Za-z0-9_-]{43}$/);
  const key = (await value.textContent()) ?? '';
  const copy = card.getByRole('button', { name: 'Copy the API key' });
  await copy.click();
  await expect(copy).toHaveText('copied');
  await expect(card.getByTestId('api-key').getByRole('status')).toHaveText('The API key copied');
  // Said for a moment, then the button is as it was (the next press says it again).
  await expect(copy).toHaveText('Copy');
  const clipboard = () =>
    (
      globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }
    ).navigator.clipboard.readText();
  expect(await page.evaluate(clipboard)).toBe(key);
  // The page's own link carries the key for a browser.
  await expect(card.getByTestId('api-server-url')).toHaveAttribute('href', `${url}/?token=${key}`);
  expect(await models(url)).toBe(401);
  expect(await models(url, key)).toBe(200);

  // A new key: the old one is refused at once.
  await card.getByTestId('api-key-new').click();
  await expect(value).not.toHaveText(key);
  const renewed = (await value.textContent()) ?? '';
  expect(renewed).toMatch(/^kvd-[A-Za-z0-9_-]{43}$/);
  expect(await models(url, key)).toBe(401);
  expect(await models(url, renewed)).toBe(200);

  // On the local network: the key cannot be turned off there; the addresses are listed and answer.
  await card.getByTestId('api-server-lan-toggle').check();
  await expect(card.getByTestId('api-server-lan')).toBeVisible();
  await expect(card.getByTestId('api-server-key-toggle')).toBeDisabled();
  await expect(card.getByTestId('api-server-key-toggle')).toBeChecked();
  await expect(card.getByTestId('api-server-url')).toHaveText(url); // it stays on its port
  const lanUrls = await card.locator('.lan-url').allTextContents();
  expect(lanUrls).toHaveLength(lanAddresses().length);
  for (const lanUrl of lanUrls) {
    expect(lanUrl).toMatch(new RegExp(`^http://[0-9.]+:${new URL(url).port}$`));
    expect(await models(lanUrl)).toBe(401);
    expect(await models(lanUrl, renewed)).toBe(200);
  }

  // The settings stay with the page's next load.
  await page.reload();
  await page.getByTestId('models-toggle').click();
  await expect(card.getByTestId('api-server-lan-toggle')).toBeChecked();
  await expect(card.getByTestId('api-server-state')).toHaveText('on');

  // This computer only, without the key: no key shown, requests without one answered, the network refused.
  await card.getByTestId('api-server-lan-toggle').uncheck();
  await expect(card.getByTestId('api-server-lan')).toHaveCount(0);
  await card.getByTestId('api-server-key-toggle').uncheck();
  await expect(card.getByTestId('api-key')).toHaveCount(0);
  await expect(card).not.toContainText('with the API key');
  expect(await models(url)).toBe(200);
  for (const lanUrl of lanUrls) expect(await models(lanUrl)).toBe('refused');

  // Web pages of other sites (CORS): said at once, with the warning a keyless server needs; a preflight answered.
  const preflight = async () =>
    (
      await fetch(`${url}/v1/chat/completions`, {
        method: 'OPTIONS',
        headers: { origin: 'https://chat.example', 'access-control-request-method': 'POST' },
      })
    ).status;
  expect(await preflight()).toBe(403);
  await card.getByTestId('api-server-cors-toggle').check();
  await expect(card.getByTestId('api-server-cors')).toContainText('any site you open');
  expect(await preflight()).toBe(204);
  await card.getByTestId('api-server-cors-toggle').uncheck();
  await expect(card.getByTestId('api-server-cors')).toHaveCount(0);
  expect(await preflight()).toBe(403);

  await card.getByTestId('api-server-stop').click();
  await expect(card.getByTestId('api-server-state')).toHaveText('off');
  expect(await models(url)).toBe('refused');
  expect(errors).toEqual([]);
});
