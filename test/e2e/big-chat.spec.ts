/**
 * A chat with big attached files (the text of PDFs, tens of MB): it imports, the chat list is made of summaries
 * (the big chat is not sent with it, nor with its saves to the other tabs), and opening it fetches its messages.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { WebSocket } from '@playwright/test';
import { expect, newChat, test, wsCall } from './fixtures';

/**
 * An export of a chat of 3 turns, each with a file of about 110 kB of text: 330 kB (bigger would only make the test
 * slower: the page reads and checks an imported file, which takes seconds for tens of MB).
 */
function bigExport(): string {
  const text = 'The page cache keeps recent pages; eviction is by age. '.repeat(2_000);
  const messages = [0, 1, 2].flatMap((k) => [
    {
      id: `u${k}`,
      role: 'user',
      content: `Compare the reports of part ${k}`,
      createdAt: 1 + k,
      attachments: Array.from({ length: 1 }, (_, j) => ({ name: `report-${k}-${j}.pdf`, text: `${k}${j} ${text}` })),
    },
    { id: `a${k}`, role: 'assistant', content: `Part ${k} says the cache is kept.`, createdAt: 2 + k },
  ]);
  const thread = { id: 'big', title: 'Reports', createdAt: 1, updatedAt: 9, messages };
  return JSON.stringify({ kind: 'kvdesk.thread', version: 1, thread }, null, 2);
}

/** The largest WebSocket message a page received (from when this is called). */
function largestReceived(page: import('@playwright/test').Page): () => number {
  let largest = 0;
  const watch = (ws: WebSocket) =>
    ws.on('framereceived', (f) => {
      largest = Math.max(largest, typeof f.payload === 'string' ? f.payload.length : f.payload.byteLength);
    });
  page.on('websocket', watch);
  return () => largest;
}

test('a big chat imports; the list comes without it, and opening it shows its messages', async ({ app, server }) => {
  test.setTimeout(90_000);
  const file = bigExport();
  expect(file.length).toBeGreaterThan(330_000);
  const small = await newChat(app);
  // From a file on disk (a buffer this big is slow to hand to the browser).
  const path = test.info().outputPath('reports.json');
  writeFileSync(path, file);
  await app.getByTestId('import-thread-file').setInputFiles(path);
  await expect(app.getByTestId('import-error')).toHaveCount(0);
  await expect(app.getByTestId('message-user')).toHaveCount(3);
  const title = app.getByTestId('chat-title');
  await expect(title).toHaveText('Reports');
  const bigId = await app.getByTestId('chat-view').getAttribute('data-thread-id');

  // Saved: the list over the WebSocket has its summary (its size on disk), not its 41 MB.
  await expect
    .poll(async () => {
      const r = await wsCall(server, 'listThreads', {});
      return (r.value as Array<{ id: string; bytes: number }>).find((t) => t.id === bigId)?.bytes ?? 0;
    })
    .toBeGreaterThan(330_000);
  const listed = await wsCall(server, 'listThreads', {});
  expect(JSON.stringify(listed).length).toBeLessThan(2_000);

  // A second tab, loaded with another chat open (the one this tab opens, as the last one open): its list has the big
  // chat, and nothing of its messages came.
  await app.locator(`[data-thread-id="${small}"] [data-testid="thread-title"]`).click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', small);
  const other = await app.context().newPage();
  const largest = largestReceived(other);
  await other.goto(server.url);
  await expect(other.locator(`[data-testid="thread-item"][data-thread-id="${bigId}"]`)).toBeVisible();
  // The first tab renames the big chat (its whole chat saved): the other tab's list says so, from its summary.
  await app.locator(`[data-testid="thread-item"][data-thread-id="${bigId}"]`).hover();
  await app.locator(`[data-thread-id="${bigId}"] [data-testid="thread-rename"]`).click();
  await app.getByTestId('thread-rename-input').fill('Reports, renamed');
  await app.getByTestId('thread-rename-input').press('Enter');
  await expect(other.locator(`[data-testid="thread-item"][data-thread-id="${bigId}"]`)).toHaveAttribute(
    'title',
    'Reports, renamed',
  );
  expect(largest()).toBeLessThan(20_000);

  // Its search finds the big chat by a word of an attached file (kvdesk searches the chats not opened there).
  const search = other.getByTestId('thread-search');
  await search.fill('EVICTION report-2-0.pdf');
  await expect(other.getByTestId('thread-item')).toHaveCount(1);
  await expect(other.getByTestId('thread-item')).toHaveAttribute('data-thread-id', bigId ?? '');
  await search.fill('');
  // Pinned there from the list, not opened: only its pin is sent (updateThread), nothing of it fetched; its messages
  // stay.
  await other.locator(`[data-testid="thread-item"][data-thread-id="${bigId}"]`).hover();
  await other.locator(`[data-thread-id="${bigId}"] [data-testid="thread-pin"]`).click();
  await expect
    .poll(async () => {
      const r = await wsCall(server, 'openThread', { id: bigId });
      const t = r.value as { pinned?: boolean; messages: unknown[] } | undefined;
      return [t?.pinned, t?.messages.length];
    })
    .toEqual([true, 6]);
  await expect(other.locator(`[data-testid="thread-item"][data-thread-id="${bigId}"]`)).toHaveClass(/\bpinned\b/);
  expect(largest()).toBeLessThan(20_000);
  // Opened there: its messages are fetched and shown.
  await other.locator(`[data-thread-id="${bigId}"] [data-testid="thread-title"]`).click();
  await expect(other.getByTestId('message-user')).toHaveCount(3);
  await expect(other.getByTestId('message-assistant').last()).toContainText('Part 2 says the cache is kept.');
  await other.close();

  // Reloaded with the big chat open: the list appears, the chat's messages follow.
  await app.reload();
  await expect(app.locator(`[data-testid="thread-item"][data-thread-id="${bigId}"]`)).toBeVisible();
  await expect(app.getByTestId('message-user')).toHaveCount(3);
  await expect(title).toHaveText('Reports, renamed');
  // Pinned, it would stay above the chats the worker's later tests make (and look for first in the list).
  expect((await wsCall(server, 'deleteThread', { id: bigId as string })).ok).toBe(true);
});

test('a chat far longer than the context, ending with your message, opens saying so from its newest turns', async ({
  app,
  server,
}) => {
  test.setTimeout(90_000);
  // 300 exchanges (about 170 kB: to a model of 2,048 tokens, as far past its context as a chat of tens of MB is to a
  // real one) ending with a question: its context meter counts the prompt the reply would read, which the host
  // counted whole (twice) to say it was longer than the context — seconds a MB, with the other tabs and the API
  // waiting. Now it is counted until its newest turns pass the context.
  const line = 'The page cache keeps recent pages; eviction is by age. '.repeat(5);
  const messages = Array.from({ length: 300 }, (_, k) => [
    { role: 'user', content: `Question ${k}: ${line}` },
    { role: 'assistant', content: `Answer ${k}: ${line}` },
  ]).flat();
  messages.push({ role: 'user', content: 'And what is evicted first?' });
  const file = test.info().outputPath('long.json');
  writeFileSync(file, JSON.stringify({ messages }));
  await app.getByTestId('import-thread-file').setInputFiles(file);
  await expect(app.getByTestId('import-error')).toHaveCount(0);
  const id = await app.getByTestId('chat-view').getAttribute('data-thread-id');
  const meter = app.getByTestId('context-meter');
  await expect(meter).toHaveAttribute('data-count', 'recounted', { timeout: 30_000 });
  await expect(meter).toHaveAttribute('data-more', 'true');
  const context = Number(await meter.getAttribute('data-context'));
  expect(Number(await meter.getAttribute('data-used'))).toBeGreaterThan(context);
  await expect(meter).toContainText(`context ≥`);
  // What the next turn leaves out is found as exactly as before, from the newest turns back.
  await expect(meter).toContainText(/ · 5\d\d will be left out/);
  await expect(meter).toHaveAttribute('title', new RegExp(`more than its ${context.toLocaleString('en-US')} tokens`));
  expect((await wsCall(server, 'deleteThread', { id: id as string })).ok).toBe(true);
});

test('a chat far longer than the context that refuses it: Get a reply is refused at once as too long, not rendered whole', async ({
  app,
  server,
}) => {
  test.setTimeout(90_000);
  // 1,000 exchanges (about 570 kB) with `refuse`, ending with a question: the reply used to render and tokenize the
  // whole chat before the refusal (a 9 MB chat: ~30 s, then the template's time limit, an error blaming the package).
  const line = 'The page cache keeps recent pages; eviction is by age. '.repeat(5);
  const messages = Array.from({ length: 1_000 }, (_, k) => [
    { id: `u${k}`, role: 'user', content: `Question ${k}: ${line}`, createdAt: 1 },
    { id: `a${k}`, role: 'assistant', content: `Answer ${k}: ${line}`, createdAt: 1 },
  ]).flat();
  messages.push({ id: 'ask', role: 'user', content: 'And what is evicted first?', createdAt: 2 });
  const thread = { id: 'refuses', title: 'Refuses', createdAt: 1, updatedAt: 2, contextOverflow: 'refuse', messages };
  const file = test.info().outputPath('refuses.json');
  writeFileSync(file, JSON.stringify({ kind: 'kvdesk.thread', version: 1, thread }));
  await app.getByTestId('import-thread-file').setInputFiles(file);
  await expect(app.getByTestId('import-error')).toHaveCount(0);
  const id = await app.getByTestId('chat-view').getAttribute('data-thread-id');
  const meter = app.getByTestId('context-meter');
  await expect(meter).toContainText('too long for the context', { timeout: 30_000 });
  const list = app.getByTestId('message-list');
  const started = Date.now();
  await list.getByTestId('get-reply').click();
  const refusal = list.getByTestId('refusal');
  await expect(refusal).toHaveAttribute('data-code', 'CONTEXT_OVERFLOW', { timeout: 30_000 });
  expect(Date.now() - started).toBeLessThan(10_000);
  await expect(refusal).toContainText("Refused: the prompt fills the model's context window");
  await expect(refusal.getByTestId('refusal-prompt')).toHaveText(/≥[\d,]+ tok/);
  await expect(refusal).toContainText('The prompt has at least');
  expect((await wsCall(server, 'deleteThread', { id: id as string })).ok).toBe(true);
});

test('a listed chat whose messages cannot be read says so in its pane, not "Opening the chat…" for good; a pin of it is refused and undone', async ({
  app,
  server,
}) => {
  // Its head reads (it is listed); its messages are not a chat's: opening it is refused, the file left as it is.
  const file = path.join(server.dataDir, 'threads', 'tdamaged.json');
  const text = JSON.stringify({
    id: 'tdamaged',
    title: 'Damaged messages',
    createdAt: 1,
    updatedAt: 99_999_999_999_999,
    revision: 2,
    messages: [{ id: 'm1', role: 'bogus', content: 5 }],
  });
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
  try {
    await app.reload();
    const row = app.locator('[data-testid="thread-item"][data-thread-id="tdamaged"]');
    // Pinned from the list: refused (the file is not a chat's), and the list shows it as its file has it.
    const item = app.getByTestId('thread-list').locator('[data-thread-id="tdamaged"]');
    await item.hover();
    await item.getByTestId('thread-pin').click();
    await expect(app.getByTestId('notice')).toContainText('“Damaged messages” was not saved:');
    await expect(item).not.toHaveClass(/\bpinned\b/);
    await row.click();
    await expect(app.getByTestId('thread-open-failed')).toContainText('This chat could not be opened:');
    await expect(app.getByTestId('thread-open-failed')).toContainText('tdamaged.json');
    await expect(app.getByTestId('thread-opening')).toHaveCount(0);
    expect(readFileSync(file, 'utf8')).toBe(text);
  } finally {
    rmSync(file, { force: true });
  }
});
