/**
 * A page opens on its last chat, listed as a summary and fetched after the list (openThread): a message sent before
 * its messages came waits for them and is sent then, in that chat; one whose chat cannot be opened, is deleted
 * meanwhile, or is stopped (Esc) goes back to the message box.
 */
import type { Page } from '@playwright/test';
import { expect, lastReply, newChat, savedThreads, send, setSettings, test, wsCall } from './fixtures';

interface Saved {
  id: string;
  messages: Array<{ role: string; content: string }>;
}

/** The page's openThread calls, held until released (or answered with an error) by the test. */
interface Held {
  /** Releases the calls held, and holds no more. */
  release(): void;
  /** Answers the calls held with this error instead, and holds no more. */
  fail(message: string): void;
  /** How many are held now. */
  count(): number;
}

async function holdOpens(page: Page): Promise<Held> {
  let holding = true;
  const held: Array<{ send: () => void; fail: (message: string) => void }> = [];
  await page.routeWebSocket(/\/ws/, (ws) => {
    const host = ws.connectToServer();
    ws.onMessage((m) => {
      const msg = typeof m === 'string' ? (JSON.parse(m) as { t?: string; name?: string; id?: number }) : {};
      if (!holding || msg.t !== 'invoke' || msg.name !== 'openThread') return host.send(m);
      held.push({
        send: () => host.send(m),
        fail: (message) =>
          ws.send(
            JSON.stringify({ t: 'result', id: msg.id, result: { ok: false, error: { code: 'INTERNAL', message } } }),
          ),
      });
    });
  });
  const drain = (each: (h: (typeof held)[number]) => void) => {
    holding = false;
    for (const h of held.splice(0)) each(h);
  };
  return {
    release: () => drain((h) => h.send()),
    fail: (message) => drain((h) => h.fail(message)),
    count: () => held.length,
  };
}

/** A chat with one turn (the page's last open chat), then the page loaded again with its openThread calls held. */
async function reloadHeld(app: Page): Promise<{ id: string; held: Held }> {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'the first question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const held = await holdOpens(app);
  await app.reload();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  await expect(app.getByTestId('thread-opening')).toBeVisible();
  await expect.poll(() => held.count()).toBeGreaterThan(0);
  return { id, held };
}

async function typeAndSend(page: Page, text: string): Promise<void> {
  await page.getByTestId('chat-input').fill(text);
  await page.getByTestId('chat-input').press('Enter');
}

const saved = async (server: Parameters<typeof savedThreads>[0], id: string) =>
  (((await savedThreads(server)).value ?? []) as Saved[]).find((t) => t.id === id);

test('a message sent before the open chat came is sent once it does, in that chat, with its reply', async ({
  app,
  server,
}) => {
  const { id, held } = await reloadHeld(app);
  await typeAndSend(app, 'sent while it opened');
  // Waiting: taken from the box, said in the pane; a second one is not taken meanwhile.
  await expect(app.getByTestId('send-waiting')).toBeVisible();
  await expect(app.getByTestId('chat-input')).toHaveValue('');
  await typeAndSend(app, 'and a second');
  await expect(app.getByTestId('chat-input')).toHaveValue('and a second');
  held.release();
  await expect(app.getByTestId('message-user')).toHaveText([/the first question/, /sent while it opened/]);
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(app.getByTestId('notice')).toHaveCount(0);
  await expect(app.getByTestId('chat-input')).toHaveValue('and a second');
  await expect
    .poll(async () => (await saved(server, id))?.messages.map((m) => m.role))
    .toEqual(['user', 'assistant', 'user', 'assistant']);
});

test('a message sent while the chat opens goes to that chat even if another is opened meanwhile', async ({
  app,
  server,
}) => {
  const other = await newChat(app);
  await send(app, 'in the other chat');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const { id, held } = await reloadHeld(app);
  await typeAndSend(app, 'sent before switching');
  await expect(app.getByTestId('send-waiting')).toBeVisible();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${other}"]`).click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', other);
  held.release();
  await expect
    .poll(async () => (await saved(server, id))?.messages.map((m) => m.content.length > 0 && m.role), {
      timeout: 30_000,
    })
    .toEqual(['user', 'assistant', 'user', 'assistant']);
  expect((await saved(server, id))?.messages[2]?.content).toBe('sent before switching');
  await expect(app.getByTestId('message-user')).toHaveText([/in the other chat/]);
});

test('a chat that cannot be opened gives the message sent meanwhile back to the box, and says why', async ({ app }) => {
  const { held } = await reloadHeld(app);
  await typeAndSend(app, 'not lost');
  await expect(app.getByTestId('send-waiting')).toBeVisible();
  held.fail('the disk said no');
  await expect(app.getByTestId('chat-input')).toHaveValue('not lost');
  await expect(app.getByTestId('thread-open-failed')).toContainText('the disk said no');
  await expect(app.getByTestId('notice')).toContainText('could not be opened: the disk said no');
  await expect(app.getByTestId('notice')).toContainText('back in the message box');
  await expect(app.getByTestId('send-waiting')).toHaveCount(0);
});

test('Esc while the message waits for the chat: not sent, back in the box before what was typed since', async ({
  app,
  server,
}) => {
  const { id, held } = await reloadHeld(app);
  await typeAndSend(app, 'changed my mind');
  await expect(app.getByTestId('stop-button')).toBeVisible();
  await app.getByTestId('chat-input').fill('typed since');
  await app.getByTestId('chat-input').press('Escape');
  await expect(app.getByTestId('chat-input')).toHaveValue('changed my mind\n\ntyped since');
  await expect(app.getByTestId('send-waiting')).toHaveCount(0);
  held.release();
  await expect(app.getByTestId('message-user')).toHaveText([/the first question/]);
  await app.waitForTimeout(500);
  expect((await saved(server, id))?.messages).toHaveLength(2);
});

test('the chat deleted elsewhere while it opens: the message sent meanwhile is back in the box, and said', async ({
  app,
  server,
}) => {
  const { id, held } = await reloadHeld(app);
  await typeAndSend(app, 'to a chat about to go');
  await expect(app.getByTestId('send-waiting')).toBeVisible();
  expect((await wsCall(server, 'deleteThread', { id })).ok).toBe(true);
  await expect(app.getByTestId('notice')).toContainText('was deleted in another window or tab');
  await expect(app.getByTestId('notice')).toContainText('back in the message box');
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', id);
  await expect(app.getByTestId('chat-input')).toHaveValue('to a chat about to go');
  held.release();
  await app.waitForTimeout(500);
  expect(await saved(server, id)).toBeUndefined();
});

test('a reload while a message with a file waits for its chat: the text and the file are back in the box', async ({
  app,
}) => {
  const { held } = await reloadHeld(app);
  await app.getByTestId('attach-input').setInputFiles({
    name: 'notes.txt',
    mimeType: 'text/plain',
    buffer: Buffer.from('a note kept across the reload'),
  });
  await expect(app.getByTestId('composer-attachment')).toHaveText(/notes\.txt/);
  await typeAndSend(app, 'draft with a file');
  await expect(app.getByTestId('send-waiting')).toBeVisible();
  await expect(app.getByTestId('composer-attachment')).toHaveCount(0);
  await app.reload();
  held.release();
  await expect(app.getByTestId('chat-input')).toHaveValue('draft with a file');
  await expect(app.getByTestId('composer-attachment')).toHaveText(/notes\.txt/);
});
