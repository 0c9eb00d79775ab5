/**
 * A long prompt's reading progress in the chat view, in Chromium, against a
 * real serve whose prefill runs in chunks of one position (--prefill-chunk 1),
 * so the default model reads a long message in hundreds of runs.
 */
import { test as base, expect } from '@playwright/test';
import { lastReply, newChat, send, setSettings } from './fixtures';
import { type ServeHandle, startServe } from './serve';

const test = base.extend<object, { chunkedServer: ServeHandle }>({
  chunkedServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const server = await startServe(['--prefill-chunk', '1']);
      await use(server);
      await server.stop();
    },
    { scope: 'worker', timeout: 120_000 },
  ],
});

test('a long message shows "reading the prompt n / N tokens" until the first token', async ({
  page,
  chunkedServer: server,
}) => {
  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await setSettings(page, { maxNewTokens: 8, seed: 1 });
  // Every text the indicator shows, as the page changes it (polling from here could come too late to see it move).
  await page.evaluate(() => {
    const g = globalThis as unknown as {
      seenPrefill: string[];
      document: { body: unknown; querySelector(s: string): { textContent: string | null } | null };
      MutationObserver: new (
        f: () => void,
      ) => { observe(n: unknown, o: { subtree: boolean; childList: boolean; characterData: boolean }): void };
    };
    g.seenPrefill = [];
    new g.MutationObserver(() => {
      const text = g.document.querySelector('[data-testid="prefill-indicator"]')?.textContent ?? '';
      if (text && g.seenPrefill.at(-1) !== text) g.seenPrefill.push(text);
    }).observe(g.document.body, { subtree: true, childList: true, characterData: true });
  });
  await send(page, 'The boats came home to the harbour before the storm. '.repeat(40).trim());

  const reply = lastReply(page);
  const indicator = reply.getByTestId('prefill-indicator');
  await expect(indicator).toBeVisible();
  // The reply arrives, and the indicator is gone.
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 60_000 });
  await expect(indicator).toHaveCount(0);
  await expect(reply.getByTestId('message-stats')).toContainText('tok');
  // It moved on while the prompt was read: positions read so far, rising, of one total over 300.
  const seen = await page.evaluate(() => (globalThis as unknown as { seenPrefill: string[] }).seenPrefill);
  const read = seen.map((t) => /reading the prompt: ([\d,]+) \/ ([\d,]+) tokens/.exec(t)).filter((m) => m !== null);
  const done = read.map((m) => Number(m[1]?.replace(/,/g, '')));
  const totals = new Set(read.map((m) => Number(m[2]?.replace(/,/g, ''))));
  expect(totals.size).toBe(1);
  const total = [...totals][0] as number;
  expect(total).toBeGreaterThan(300);
  expect(done.length).toBeGreaterThanOrEqual(2);
  expect(done).toEqual([...done].sort((a, b) => a - b));
  expect(new Set(done).size).toBe(done.length);
  expect(Math.max(...done)).toBeLessThanOrEqual(total);
});
