/**
 * Text files attached to a message, in Chromium against a real serve: a file chosen with the paper clip shows as a chip
 * (kept with the draft through a reload), the draft's prompt grows by it before sending, the message goes with it (its chip stays with the message, after a
 * reload too), the model reads it (the reply's prompt holds it), search finds the chat by it, and a file that
 * is not text is refused, named.
 */
import type { Page } from '@playwright/test';
import { apiSnapshot, expect, lastReply, newChat, setSettings, test } from './fixtures';

const NOTES = 'Lighthouse keeping notes.\n'.repeat(40);

test('a text file goes with the message; one that is not text is refused, named', async ({ app: page, server }) => {
  const threadId = await newChat(page);
  await setSettings(page, { maxNewTokens: 4, seed: 2 });
  const measure = page.getByTestId('draft-measure');
  await page.getByTestId('chat-input').fill('Summarise my notes.');
  await expect(measure).toBeVisible();
  const without = Number(await measure.getAttribute('data-prompt-tokens'));

  await page.getByTestId('attach-input').setInputFiles({
    name: 'notes.txt',
    mimeType: 'text/plain',
    buffer: Buffer.from(NOTES),
  });
  await expect(page.getByTestId('composer-attachment')).toHaveText(/notes\.txt/);
  // The host measures the message with the file in it: hundreds of tokens more.
  await expect
    .poll(async () => Number(await measure.getAttribute('data-prompt-tokens')) - without)
    .toBeGreaterThan(200);

  // Not text: refused, named; the text file stays attached.
  await page.getByTestId('attach-input').setInputFiles({
    name: 'photo.jpg',
    mimeType: 'image/jpeg',
    buffer: Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10]),
  });
  await expect(page.getByTestId('attachment-error')).toContainText('photo.jpg is not text');
  await expect(page.getByTestId('composer-attachment')).toHaveCount(1);

  // Not sent yet, the draft outlives a reload: its text, and its file a moment after.
  await page.reload();
  await expect(page.getByTestId('chat-input')).toHaveValue('Summarise my notes.');
  await expect(page.getByTestId('composer-attachment')).toHaveText(/notes\.txt/);
  await page.getByTestId('chat-input').press('Enter');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(page.getByTestId('composer-attachment')).toHaveCount(0);
  // Sent, it is no draft any more: a reload does not bring it back.
  await page.reload();
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(page.getByTestId('composer-attachment')).toHaveCount(0);
  const sent = page.getByTestId('message-user').last();
  await expect(sent.getByTestId('message-attachment')).toHaveText(/notes\.txt/);
  // Its chip opens what the model read of it, and closes it again.
  await sent.getByTestId('message-attachment').click();
  await expect(sent.getByTestId('message-attachment-text')).toContainText('keeping notes');
  await expect(sent.getByTestId('message-attachment')).toHaveAttribute('aria-expanded', 'true');
  await sent.getByTestId('message-attachment').click();
  await expect(sent.getByTestId('message-attachment-text')).toHaveCount(0);
  // The model read it: the reply's prompt is as long as the draft said.
  const turn = (await apiSnapshot(server)).recent.filter((q) => q.threadId === threadId);
  expect(turn).toHaveLength(1);
  expect(turn[0]?.promptTokens).toBeGreaterThan(without + 200);

  // The chat is found by what its files say.
  await page.getByTestId('thread-search').fill('keeping notes');
  await expect(page.getByTestId('thread-item')).toHaveAttribute('data-thread-id', threadId);
  await page.getByTestId('thread-search').fill('');

  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(page.getByTestId('message-user').last().getByTestId('message-attachment')).toHaveText(/notes\.txt/);
});

/** The page's DOM, typed just enough for a drop (this file is type-checked without the DOM library). */
interface DropDom {
  DataTransfer: new () => { items: { add(file: unknown): void } };
  File: new (parts: unknown[], name: string) => unknown;
  DragEvent: new (type: string, init: { bubbles: boolean; cancelable: boolean; dataTransfer: unknown }) => unknown;
  document: { querySelector(s: string): { dispatchEvent(event: unknown): boolean } | null };
}

/** Drops files of these names and contents on the conversation (not the message box). */
async function dropOnChat(page: Page, files: Array<[name: string, text: string]>): Promise<void> {
  await page.evaluate((files) => {
    const w = globalThis as unknown as DropDom;
    const dt = new w.DataTransfer();
    for (const [name, text] of files) dt.items.add(new w.File([text], name));
    w.document
      .querySelector('[data-testid="chat-view"]')
      ?.dispatchEvent(new w.DragEvent('drop', { bubbles: true, cancelable: true, dataTransfer: dt }));
  }, files);
}

test('a text file dropped on the conversation (not the message box) is attached, not taken for a model', async ({
  app: page,
}) => {
  await newChat(page);
  await dropOnChat(page, [['dropped.txt', 'Dropped notes.\n']]);
  await expect(page.getByTestId('composer-attachment')).toHaveText(/dropped\.txt/);
  await expect(page.getByTestId('chat-view')).toBeVisible();
  await expect(page.getByTestId('models-view')).toHaveCount(0);
  await page.getByTestId('composer-attachment-remove').click();
  await expect(page.getByTestId('composer-attachment')).toHaveCount(0);
  // A model's config.json alone is a file to ask about too (no package loads without its graph)…
  await dropOnChat(page, [['config.json', '{"model_type": "gpt2", "n_layer": 12}\n']]);
  await expect(page.getByTestId('composer-attachment')).toHaveText(/config\.json/);
  await expect(page.getByTestId('models-view')).toHaveCount(0);
  await page.getByTestId('composer-attachment-remove').click();
  // …but files with a graph are a package, and go to the Models view.
  await dropOnChat(page, [
    ['config.json', '{}'],
    ['model.onnx', 'not really a graph'],
  ]);
  await expect(page.getByTestId('models-view')).toBeVisible();
  await expect(page.getByTestId('composer-attachment')).toHaveCount(0);
});

test('the paper clip is named in two words; what it takes is its description', async ({ app: page }) => {
  const clip = page.getByTestId('attach-button');
  // A screen reader says the name before anything else: not a sentence of 100 characters.
  await expect(page.getByRole('button', { name: 'Attach files', exact: true })).toHaveCount(1);
  await expect(clip).toHaveAccessibleName('Attach files');
  await expect(clip).toHaveAccessibleDescription(/^Attach text files \(notes, code, CSV, JSON…\): .*drop them here\.$/);
});

test('a file sent the moment it is attached does not come back as the chat’s draft', async ({ app: page }) => {
  const id = await newChat(page);
  await setSettings(page, { maxNewTokens: 2 });
  await page.getByTestId('chat-input').fill('About these notes');
  // Enter pressed as soon as the file's chip shows (before the box has kept it in the drafts).
  await page.evaluate(() => {
    const w = globalThis as unknown as {
      MutationObserver: new (
        cb: () => void,
      ) => { observe(node: unknown, o: { childList: boolean; subtree: boolean }): void; disconnect(): void };
      KeyboardEvent: new (type: string, init: { key: string; bubbles: boolean; cancelable: boolean }) => unknown;
      document: {
        body: unknown;
        querySelector(s: string): { dispatchEvent(event: unknown): boolean } | null;
      };
    };
    const observer = new w.MutationObserver(() => {
      if (!w.document.querySelector('[data-testid="composer-attachment"]')) return;
      observer.disconnect();
      w.document
        .querySelector('[data-testid="chat-input"]')
        ?.dispatchEvent(new w.KeyboardEvent('keydown', { key: 'Enter', bubbles: true, cancelable: true }));
    });
    observer.observe(w.document.body, { childList: true, subtree: true });
  });
  await dropOnChat(page, [['sent.txt', 'Sent notes.\n']]);
  await expect(page.getByTestId('message-user')).toHaveCount(1);
  await expect(page.getByTestId('message-user')).toContainText('sent.txt');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  // Another chat opened and this one again: its draft is empty, no file in it.
  await newChat(page);
  await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).getByTestId('thread-title').click();
  await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  await expect(page.getByTestId('chat-input')).toHaveValue('');
  await expect(page.getByTestId('composer-attachment')).toHaveCount(0);
});
