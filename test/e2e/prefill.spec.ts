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
      document: {
        body: unknown;
        querySelector(s: string): { textContent: string | null; checkVisibility(): boolean } | null;
      };
      MutationObserver: new (
        f: () => void,
      ) => { observe(n: unknown, o: { subtree: boolean; childList: boolean; characterData: boolean }): void };
    };
    g.seenPrefill = [];
    new g.MutationObserver(() => {
      const shown = g.document.querySelector('[data-testid="prefill-indicator"]');
      // Only what is there to see counts (the log stands for the indicator's having been visible).
      const text = shown?.checkVisibility() ? (shown.textContent ?? '') : '';
      if (text && g.seenPrefill.at(-1) !== text) g.seenPrefill.push(text);
    }).observe(g.document.body, { subtree: true, childList: true, characterData: true });
  });
  // About 1,200 tokens, twice what a few hundred would need (under the default model's 2,048 with the reply's 8):
  // seconds of runs of one position, for the page to show several of them even with its frames slowed by a loaded
  // machine.
  await send(page, 'The boats came home to the harbour before the storm. '.repeat(80).trim());

  const reply = lastReply(page);
  const indicator = reply.getByTestId('prefill-indicator');
  // No wait for the indicator itself: it is there only while the prompt is read, which a late check can miss.
  // The log above is what shows it was there, and moved. The reply arrives, and the indicator is gone.
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 60_000 });
  await expect(indicator).toHaveCount(0);
  await expect(reply.getByTestId('message-stats')).toContainText('tok');
  // It moved on while the prompt was read: positions read so far, rising, of one total over 1,000.
  const seen = await page.evaluate(() => (globalThis as unknown as { seenPrefill: string[] }).seenPrefill);
  const read = seen.map((t) => /reading the prompt: ([\d,]+) \/ ([\d,]+) tokens/.exec(t)).filter((m) => m !== null);
  const done = read.map((m) => Number(m[1]?.replace(/,/g, '')));
  const totals = new Set(read.map((m) => Number(m[2]?.replace(/,/g, ''))));
  expect(totals.size).toBe(1);
  const total = [...totals][0] as number;
  expect(total).toBeGreaterThan(1_000);
  expect(done.length).toBeGreaterThanOrEqual(2);
  expect(done).toEqual([...done].sort((a, b) => a - b));
  expect(new Set(done).size).toBe(done.length);
  expect(Math.max(...done)).toBeLessThanOrEqual(total);
});
