/**
 * A thinking model's reasoning as it streams and where it ends without an answer, against a serve with the slow
 * thinking model (test/helpers/models.ts; endless.ts bans its `</think>` and end of text, so a reply reasons until
 * it is stopped or runs out of tokens): the reasoning's box follows the text unless the person scrolled up in it; a
 * reply that only reasoned (stopped, cut by a reload, out of tokens) offers no continue and says what to do instead;
 * the fold's label starts at the left when it wraps.
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
  // A narrower window (still the wide layout): shorter lines, so the box fills and grows with less text to wait for.
  await page.setViewportSize({ width: 1040, height: 900 });
  await send(page, 'Think about a long story');
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'running');
  const box = reply.getByTestId('reasoning-text');
  // Once it overflows its box (and again as it grows), the end of the reasoning is what it shows.
  await expect
    .poll(() => box.evaluate((el) => el.scrollHeight - el.clientHeight), { timeout: 30_000 })
    .toBeGreaterThan(40);
  await expect.poll(async () => (await scroll(box)).below).toBeLessThan(4);
  const grown = await box.evaluate((el) => el.scrollHeight);
  await expect.poll(() => box.evaluate((el) => el.scrollHeight)).toBeGreaterThan(grown + 30);
  await expect.poll(async () => (await scroll(box)).below).toBeLessThan(4);

  // Scrolled up in it: it stays where the person put it while the reasoning goes on below.
  await box.hover();
  await page.mouse.wheel(0, -150);
  await expect.poll(async () => (await scroll(box)).below).toBeGreaterThan(20);
  const put = (await scroll(box)).top;
  const then = await box.evaluate((el) => el.scrollHeight);
  await expect.poll(() => box.evaluate((el) => el.scrollHeight)).toBeGreaterThan(then + 30);
  expect((await scroll(box)).top).toBe(put);

  // Stopped before it answered: only reasoning, which continue cannot go on from; regenerate it.
  await page.getByTestId('chat-input').press('Escape');
  await expect(reply).toHaveAttribute('data-state', 'cancelled');
  await expect(reply.getByTestId('reasoning-toggle')).toContainText('stopped before it replied');
  await reply.hover();
  await expect(reply.getByTestId('regenerate')).toBeVisible();
  await expect(reply.getByTestId('continue')).toHaveCount(0);
});

test('a reply that only reasoned offers no continue: cut by a reload it says to regenerate it', async ({ page }) => {
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 }, true);
  await openServer(page, server);
  await openChat(page, id, SLOW_THINKING);
  await send(page, 'Think until the page goes');
  await expect(lastReply(page).getByTestId('reasoning-text')).not.toBeEmpty();
  // Saved as it streams (at most a second behind): what the reload keeps.
  await page.waitForTimeout(1500);
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'interrupted');
  await expect(reply.getByTestId('reasoning-text')).not.toBeEmpty();
  await expect(reply.getByTestId('interrupted-note')).toHaveText(
    'Interrupted: the page was closed or reloaded (or kvdesk stopped) while this reply was being written (what it wrote is kept; regenerate it).',
  );
  await reply.hover();
  await expect(reply.getByTestId('regenerate')).toBeVisible();
  await expect(reply.getByTestId('continue')).toHaveCount(0);
});

test('a reply that ran out of tokens while it reasoned says to raise max tokens; its label wraps from the left', async ({
  page,
}) => {
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 8 }, true);
  await openServer(page, server);
  await openChat(page, id, SLOW_THINKING);
  // A phone's width: the label wraps.
  await page.setViewportSize({ width: 390, height: 800 });
  await send(page, 'Think briefly');
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'done');
  const toggle = reply.getByTestId('reasoning-toggle');
  await expect(toggle).toContainText('· 8 tok · ran out of tokens before it replied');
  await expect(reply.getByTestId('reasoning-cut-note')).toHaveText(
    "All 8 of its max tokens went to its reasoning, before it answered — raise max tokens in the chat's settings (system & sampling…, under the message box), then regenerate it.",
  );
  await reply.hover();
  await expect(reply.getByTestId('continue')).toHaveCount(0);
  // Wrapped at this width (more than one line), its lines start at its left edge, as the reply's text does.
  // (12 px text: one line is at most 16 px high.)
  expect((await toggle.boundingBox())?.height ?? 0).toBeGreaterThan(24);
  await expect(toggle).toHaveCSS('text-align', 'start');
});
