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
  await send(page, 'The boats came home to the harbour before the storm. '.repeat(40).trim());

  const reply = lastReply(page);
  const indicator = reply.getByTestId('prefill-indicator');
  await expect(indicator).toBeVisible();
  const read = async (): Promise<[number, number]> => {
    const m = /reading the prompt: ([\d,]+) \/ ([\d,]+) tokens/.exec((await indicator.textContent()) ?? '');
    return m ? [Number(m[1]?.replace(/,/g, '')), Number(m[2]?.replace(/,/g, ''))] : [0, 0];
  };
  const [first, total] = await read();
  expect(total).toBeGreaterThan(300);
  expect(first).toBeLessThan(total);
  // It moves on while the prompt is read.
  await expect.poll(async () => (await read())[0]).toBeGreaterThan(first);
  // The reply arrives, and the indicator is gone.
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 60_000 });
  await expect(indicator).toHaveCount(0);
  await expect(reply.getByTestId('message-stats')).toContainText('tok');
});
