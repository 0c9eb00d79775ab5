/**
 * Two pages on one chat, the second not hearing of the first's save (as when its saves waited while it was
 * offline, or crossed the other's): its save is refused, not written over the other's turns, and both are kept.
 */
import { expect, lastReply, newChat, send, setSettings, test, wsCall } from './fixtures';

interface Saved {
  id: string;
  title: string;
  messages: Array<{ role: string; content: string }>;
}

test("a page that had not seen another's save keeps its turn as a copy of the chat, and the other's stays", async ({
  app,
  server,
}) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'the first question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });

  // The second page hears nothing of the chats saved from the moment `deaf` is set.
  let deaf = false;
  const other = await app.context().newPage();
  await other.routeWebSocket(/\/ws/, (ws) => {
    const host = ws.connectToServer();
    host.onMessage((m) => {
      if (deaf && typeof m === 'string' && m.startsWith('{"t":"event","event":"thread"')) return;
      ws.send(m);
    });
  });
  try {
    await other.goto(server.url);
    await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    await expect(other.getByTestId('message-user')).toHaveCount(1);
    deaf = true;

    // The first page's turn, saved (each of its saves in a row taken)…
    await send(app, 'asked in the first tab');
    await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    const listed = async () => ((await wsCall(server, 'listThreads', {})).value ?? []) as Saved[];
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.messages.length).toBe(4);
    await expect(other.getByTestId('message-user')).toHaveCount(1);

    // …then the second page's own, made from the chat as it was before.
    await send(other, 'asked in the second tab');
    await expect(lastReply(other)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    await expect(other.getByTestId('notice')).toContainText('was changed in another window or tab');
    await expect(other.getByTestId('notice')).toContainText('the first question (conflicted copy)');

    // Both kept: the chat as the first page saved it, and the second page's turn in a chat of its own.
    await expect(async () => {
      const threads = await listed();
      const chat = threads.find((t) => t.id === id);
      expect(chat?.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual([
        'the first question',
        'asked in the first tab',
      ]);
      const copy = threads.find((t) => t.title === 'the first question (conflicted copy)');
      expect(copy?.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual([
        'the first question',
        'asked in the second tab',
      ]);
      expect(copy?.messages.at(-1)?.role).toBe('assistant');
      expect(copy?.messages.at(-1)?.content.length).toBeGreaterThan(0);
    }).toPass({ timeout: 10_000 });
    // The second page shows the chat as saved, with the copy beside it in the list; the first page was told nothing.
    await expect(other.getByTestId('message-user')).toHaveText([/the first question/, /asked in the first tab/]);
    await expect(other.getByTestId('thread-list')).toContainText('the first question (conflicted copy)');
    await expect(app.getByTestId('notice')).toHaveCount(0);

    // Its next turn in the chat builds on the saved one, and is saved.
    deaf = false;
    await send(other, 'asked again in the second tab');
    await expect(lastReply(other)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.messages.length).toBe(6);
    await expect(app.getByTestId('message-user')).toHaveCount(3);

    // Renamed in both, the second not hearing of the first's: the first's name stands, and the second is told.
    deaf = true;
    const rename = async (page: typeof app, title: string) => {
      await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).dblclick();
      await page.getByTestId('thread-rename-input').fill(title);
      await page.getByTestId('thread-rename-input').press('Enter');
    };
    await rename(app, 'Named in the first tab');
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.title).toBe('Named in the first tab');
    await rename(other, 'Named in the second tab');
    await expect(other.getByTestId('notice')).toContainText(
      "before this one's change of its name or settings was saved: it shows that one now",
    );
    await expect(other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toContainText(
      'Named in the first tab',
    );
    expect((await listed()).find((t) => t.id === id)?.messages).toHaveLength(6);
  } finally {
    await other.close();
  }
});
