/**
 * Esc stops the open chat's reply from the chat only (its messages, its message box, or with the focus on
 * nothing): an Esc that backs out of something elsewhere in the window — the model picker after Ctrl+K, the chat's
 * system prompt, the Models view's Hugging Face field, a library question's Keep — leaves the reply streaming.
 * Against a serve with the slow model (endless.ts), whose chat's reply runs until it is stopped.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { openChat, openServer, saveEndlessChat, startSlowServe } from './endless';
import { apiSnapshot, expect, lastReply, send, test, wsCall } from './fixtures';
import { ROOT, type ServeHandle } from './serve';

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startSlowServe();
});
test.afterAll(async () => {
  await server.stop();
});

/** Uploads the default package's files into the library, not loaded (as a browser drop with load=false sends it). */
async function uploadToLibrary(name: string): Promise<void> {
  const dir = path.join(ROOT, 'resources/models/default');
  const files = readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((f) => f.isFile())
    .map((f) => {
      const at = path.join(f.parentPath, f.name);
      return { path: `${name}/${path.relative(dir, at)}`, dataBase64: readFileSync(at).toString('base64') };
    });
  const res = await fetch(`${server.url}/api/models/upload?load=false`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, files }),
  });
  expect(res.status).toBe(200);
}

/**
 * Esc pressed where the focus is now leaves the reply streaming (given the time a stop would take): the host still
 * runs it (the Models view does not show the chat), and the chat, where it shows, says so.
 */
async function escLeavesReply(page: Page): Promise<void> {
  await page.keyboard.press('Escape');
  await page.waitForTimeout(400);
  expect((await apiSnapshot(server)).running).toHaveLength(1);
  if (await page.getByTestId('chat-view').isVisible()) {
    await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
    await expect(lastReply(page).locator('.phase')).not.toHaveText('stopping…');
  }
}

test('Esc elsewhere in the window backs out of what it is in; the reply streams on until Esc in the chat', async ({
  page,
}) => {
  await uploadToLibrary('upload-llm');
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 });
  await openServer(page, server);
  await openChat(page, id);
  await send(page, 'Tell me a long story');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');

  // Ctrl+K, then Esc to back out of the model picker.
  await page.keyboard.press('Control+k');
  await expect(page.getByTestId('model-picker')).toBeFocused();
  await escLeavesReply(page);

  // Esc in the chat's system prompt.
  await page.getByTestId('settings-toggle').click();
  await page.getByTestId('system-prompt').focus();
  await escLeavesReply(page);
  await page.getByTestId('settings-toggle').click();

  // The Models view: Esc in the Hugging Face field, and on Keep of the question before an upload is deleted.
  await page.getByTestId('models-toggle').click();
  await page.getByTestId('hub-repo').fill('qwen');
  await escLeavesReply(page);
  const upload = page.locator('[data-testid="library-row"][data-model-id="upload-llm"]');
  await upload.getByTestId('library-forget').click();
  await expect(upload.getByTestId('library-delete-keep')).toBeFocused();
  await escLeavesReply(page);
  await expect(upload.getByTestId('library-delete-keep')).toHaveCount(0);
  await expect(upload.getByTestId('library-forget')).toBeFocused();

  // Back in the chat, Esc in the message box stops it.
  await page.getByTestId('models-toggle').click();
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
  await page.getByTestId('chat-input').focus();
  await page.keyboard.press('Escape');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'cancelled');
});

test('a reply that ends by itself while Stop has the focus hands it to the message box', async ({ page }) => {
  // Long enough to Tab onto Stop while it runs; it ends at its max tokens.
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 30 });
  await openServer(page, server);
  await openChat(page, id);
  await send(page, 'Count to three');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
  await page.keyboard.press('Tab');
  await expect(page.getByTestId('stop-button')).toBeFocused();
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(page.getByTestId('chat-input')).toBeFocused();
});

test('Send clicked with the mouse: its focus, on Stop while the reply runs, goes to the message box when it ends', async ({
  page,
}) => {
  // It runs past the 5 s in which the page puts back the focus of a control just clicked that went away: its max
  // tokens take far longer than that, and it is ended from outside the page (another front end's cancel, nothing
  // this page does) once those 5 s are over.
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1500 });
  await openServer(page, server);
  await openChat(page, id);
  await page.getByTestId('chat-input').fill('Count to three');
  await page.getByTestId('send-button').click();
  const clicked = Date.now();
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
  await expect(page.getByTestId('stop-button')).toBeFocused();
  const running = (await apiSnapshot(server)).running;
  expect(running).toHaveLength(1);
  await page.waitForTimeout(Math.max(0, clicked + 5_600 - Date.now()));
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
  expect((await wsCall(server, 'cancel', { requestId: running[0]?.id })).value).toEqual({ cancelled: true });
  await expect(lastReply(page)).toHaveAttribute('data-state', 'cancelled');
  expect(Date.now() - clicked).toBeGreaterThan(5_500);
  await expect(page.getByTestId('chat-input')).toBeFocused();
});
