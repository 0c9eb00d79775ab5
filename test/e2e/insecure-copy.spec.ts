/**
 * The copy buttons of the UI opened from another computer on the local network, over plain http by the server's
 * name (`serve --host 0.0.0.0 --token`, as the README has it): not a secure context, so the page has no Clipboard
 * API. They copy all the same (the text reaches the clipboard: pasted back with the keyboard), and where the
 * browser takes it neither way they say so instead of doing nothing. Chromium reaches this computer's name at
 * 127.0.0.1 (--host-resolver-rules), as another computer would reach its address.
 */
import os from 'node:os';
import { expect, test } from '@playwright/test';
import { COPY_UNAVAILABLE } from '../../src/renderer/lib/copy-unavailable';
import { CHROMIUM_ARGS, TEST_CHROMIUM } from './chromium';
import { lastReply, newChat, send, setSettings } from './fixtures';
import { type ServeHandle, startServe } from './serve';

const TOKEN = 'lan-copy-token';
// The name the server answers to when bound to every address (with its addresses): this computer's.
const NAME = os.hostname().toLowerCase();

test.use({
  launchOptions: {
    executablePath: TEST_CHROMIUM,
    args: [...CHROMIUM_ARGS, `--host-resolver-rules=MAP ${NAME} 127.0.0.1`],
  },
});

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startServe(['--host', '0.0.0.0', '--token', TOKEN]);
});
test.afterAll(async () => {
  await server.stop();
});

test('over plain http by name, the code and reply copy buttons copy, and say when they cannot', async ({ page }) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const port = new URL(server.url).port;
  await page.goto(`http://${NAME}:${port}/?token=${TOKEN}`);
  await expect(page.getByTestId('model-picker')).toHaveValue(/.+/);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  // What a browser on another computer has here: no secure context, no Clipboard API.
  expect(
    await page.evaluate(() => {
      const g = globalThis as unknown as { isSecureContext: boolean; navigator: { clipboard?: unknown } };
      return { secure: g.isSecureContext, clipboard: g.navigator.clipboard !== undefined };
    }),
  ).toEqual({ secure: false, clipboard: false });

  await newChat(page);
  await setSettings(page, { maxNewTokens: 4 });
  await send(page, 'hi');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const reply = '```sh\necho hello\n```';
  await lastReply(page).hover();
  await lastReply(page).getByTestId('edit-reply').click();
  await page.getByTestId('reply-edit-input').fill(reply);
  await page.getByTestId('reply-edit-save').click();
  const copyCode = lastReply(page).getByTestId('code-copy');
  await expect(copyCode).toBeVisible();

  // What is on the clipboard: pasted with the keyboard into the empty message box.
  const input = page.getByTestId('chat-input');
  const pasted = async () => {
    await input.fill('');
    await input.focus();
    await page.keyboard.press('ControlOrMeta+V');
    return input.inputValue();
  };

  // The code block's copy: the code on the clipboard, said, and the focus still on the button.
  await copyCode.click();
  await expect(copyCode).toHaveText('copied');
  await expect(lastReply(page).locator('.code-block').getByRole('status')).toHaveText('Code copied');
  await expect(copyCode).toBeFocused();
  expect(await pasted()).toBe('echo hello');

  // The reply's copy: its Markdown source.
  await lastReply(page).hover();
  const copyReply = lastReply(page).getByTestId('message-copy');
  await copyReply.click();
  await expect(copyReply).toHaveText('copied');
  expect(await pasted()).toBe(reply);

  // A browser that takes it neither way: the button says so (and what to do), for sight and for a screen reader.
  await page.evaluate(() => {
    (globalThis as unknown as { document: { execCommand: () => boolean } }).document.execCommand = () => false;
  });
  await copyCode.click();
  await expect(copyCode).toHaveText(COPY_UNAVAILABLE);
  await expect(lastReply(page).locator('.code-block').getByRole('status')).toHaveText(
    `Code not copied: ${COPY_UNAVAILABLE}`,
  );
  expect(errors, 'uncaught errors in the page').toEqual([]);
});
