/**
 * The Models view's API card under `kvdesk serve`, in Chromium: it says where the APIs answer (this server's own
 * address, which answers them) and offers no start or stop (serve runs its server as long as it runs). The
 * desktop window's switch is covered by test/integration/server/api-server-control.test.ts and the Electron e2e.
 */
import { expect, test } from './fixtures';

test('under kvdesk serve, the Models view says where the APIs answer', async ({ app: page, server }) => {
  await page.getByTestId('models-toggle').click();
  const card = page.getByTestId('api-server');
  await expect(card).toHaveAttribute('data-running', 'true');
  await expect(card).toContainText('kvdesk serve');
  await expect(card.getByTestId('api-server-url')).toHaveText(server.url);
  await expect(card.getByTestId('api-server-start')).toHaveCount(0);
  await expect(card.getByTestId('api-server-stop')).toHaveCount(0);
  const models = await fetch(`${(await card.getByTestId('api-server-url').textContent()) ?? ''}/v1/models`);
  expect(models.status).toBe(200);
  // The base URLs an SDK or an Ollama client takes, copied with a click.
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  const clipboard = () =>
    page.evaluate(() =>
      (
        globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }
      ).navigator.clipboard.readText(),
    );
  await card.getByTestId('api-copy-v1').click();
  await expect.poll(clipboard).toBe(`${server.url}/v1`);
  await expect(card.getByTestId('api-copy-v1')).toHaveText('copied');
  await card.getByTestId('api-copy-base').click();
  await expect.poll(clipboard).toBe(server.url);
});
