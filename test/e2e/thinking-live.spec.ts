/**
 * A thinking model's reasoning as it streams and where it ends without an answer, against a serve with the slow
 * thinking model (test/helpers/models.ts; endless.ts bans its `</think>` and end of text, so a reply reasons until
 * it is stopped or runs out of tokens): the reasoning's box follows the text unless the person scrolled up in it.
 */
import type { Locator } from '@playwright/test';
import { openChat, openServer, SLOW_THINKING, saveEndlessChat, startSlowThinkingServe } from './endless';
import { expect, lastReply, send, test } from './fixtures';
import type { ServeHandle } from './serve';

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startSlowThinkingServe();
});
test.afterAll(async () => {
  await server.stop();
});

/** How far the box's end is below what it shows (0: scrolled to its end), and how far it is scrolled. */
function scroll(box: Locator) {
  return box.evaluate((el) => ({ below: el.scrollHeight - el.scrollTop - el.clientHeight, top: el.scrollTop }));
}

test('the reasoning box follows the reasoning as it streams; scrolled up in it, it stays there', async ({ page }) => {
  test.setTimeout(90_000);
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 }, true);
  await openServer(page, server);
  await openChat(page, id, SLOW_THINKING);
  await send(page, 'Think about a long story');
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'running');
  const box = reply.getByTestId('reasoning-text');
  // Once it overflows its box (and again as it grows), the end of the reasoning is what it shows.
  await expect
    .poll(() => box.evaluate((el) => el.scrollHeight - el.clientHeight), { timeout: 30_000 })
    .toBeGreaterThan(100);
  await expect.poll(async () => (await scroll(box)).below).toBeLessThan(4);
  const grown = await box.evaluate((el) => el.scrollHeight);
  await expect.poll(() => box.evaluate((el) => el.scrollHeight)).toBeGreaterThan(grown + 60);
  await expect.poll(async () => (await scroll(box)).below).toBeLessThan(4);

  // Scrolled up in it: it stays where the person put it while the reasoning goes on below.
  await box.hover();
  await page.mouse.wheel(0, -150);
  await expect.poll(async () => (await scroll(box)).below).toBeGreaterThan(100);
  const put = (await scroll(box)).top;
  const then = await box.evaluate((el) => el.scrollHeight);
  await expect.poll(() => box.evaluate((el) => el.scrollHeight)).toBeGreaterThan(then + 60);
  expect((await scroll(box)).top).toBe(put);
});
