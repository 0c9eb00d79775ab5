/**
 * Chats in and out of kvdesk, in Chromium against a real serve: a chat exports as Markdown and as kvdesk's JSON
 * (real downloads), the JSON imports back as a new chat that survives a reload, a file that is not a chat is
 * refused naming the field (and adds nothing), the search box finds chats by title or by what was said, and a
 * chat branches from any message into a new one.
 */
import { readFileSync } from 'node:fs';
import { expect, lastReply, newChat, send, setSettings, test } from './fixtures';

test('a chat exports as Markdown and JSON, and the JSON imports back as a new chat', async ({ app: page }) => {
  await newChat(page);
  await setSettings(page, { maxNewTokens: 8, seed: 3 });
  await send(page, 'Where do the albatrosses nest?');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  const reply = (await lastReply(page).getByTestId('message-text').textContent()) ?? '';

  const [md] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-md').click()]);
  expect(md.suggestedFilename()).toBe('where-do-the-albatrosses-nest.md');
  const markdown = readFileSync(await md.path(), 'utf8');
  expect(markdown).toContain('# Where do the albatrosses nest?');
  expect(markdown).toMatch(/### You\n\nWhere do the albatrosses nest\?\n\n### Assistant\n/);

  const [json] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-json').click()]);
  const text = readFileSync(await json.path(), 'utf8');
  const exported = JSON.parse(text) as { kind: string; thread: { id: string; messages: unknown[] } };
  expect(exported.kind).toBe('kvdesk.thread');
  expect(exported.thread.messages).toHaveLength(2);

  const items = page.getByTestId('thread-item');
  const before = await items.count();
  await page.getByTestId('import-thread-file').setInputFiles({
    name: 'albatross.json',
    mimeType: 'application/json',
    buffer: Buffer.from(text),
  });
  await expect(items).toHaveCount(before + 1);
  // The import is open, a new chat (new id) with the same messages.
  const imported = await page.getByTestId('chat-view').getAttribute('data-thread-id');
  expect(imported).not.toBe(exported.thread.id);
  await expect(page.getByTestId('message-user').getByTestId('message-text')).toHaveText([
    'Where do the albatrosses nest?',
  ]);
  await expect(page.getByTestId('message-assistant').getByTestId('message-text')).toHaveText([reply]);
  // Beside the chat it came from, its title says it is the import.
  await expect(page.locator(`[data-testid="thread-item"][data-thread-id="${imported}"]`)).toHaveAttribute(
    'title',
    'Where do the albatrosses nest? (imported)',
  );
  // Again: the next number.
  await page.getByTestId('import-thread-file').setInputFiles({
    name: 'albatross.json',
    mimeType: 'application/json',
    buffer: Buffer.from(text),
  });
  await expect(items).toHaveCount(before + 2);
  // (Open, and named so; not necessarily first in the list: a chat an earlier test pinned goes above it.)
  await expect(page.getByTestId('chat-title')).toHaveText('Where do the albatrosses nest? (imported 2)');
  // Saved like any chat.
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(items).toHaveCount(before + 2);
  await expect(page.locator(`[data-testid="thread-item"][data-thread-id="${imported}"]`)).toHaveCount(1);
});

test('a file that is not a chat is refused, naming the field, and adds nothing', async ({ app: page }) => {
  await newChat(page);
  const items = page.getByTestId('thread-item');
  const before = await items.count();
  await page.getByTestId('import-thread-file').setInputFiles({
    name: 'tools.json',
    mimeType: 'application/json',
    buffer: Buffer.from(
      JSON.stringify({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'tool', content: '42' },
        ],
      }),
    ),
  });
  await expect(page.getByTestId('import-error')).toContainText(
    'tools.json: messages[1].tool_call_id must be the id of a call',
  );
  await page.getByTestId('import-thread-file').setInputFiles({
    name: 'notes.txt',
    mimeType: 'text/plain',
    buffer: Buffer.from('just some notes'),
  });
  await expect(page.getByTestId('import-error')).toContainText(
    'notes.txt is a text file: kvdesk imports a chat from its JSON export',
  );
  await expect(items).toHaveCount(before);
  // An OpenAI-style conversation imports (its system message becomes the chat's system prompt).
  await page.getByTestId('import-thread-file').setInputFiles({
    name: 'conversation.json',
    mimeType: 'application/json',
    buffer: Buffer.from(
      JSON.stringify({
        title: 'Imported from elsewhere',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hello' },
          { role: 'assistant', content: 'Hi there.' },
        ],
      }),
    ),
  });
  await expect(page.getByTestId('import-error')).toHaveCount(0);
  await expect(items).toHaveCount(before + 1);
  await expect(page.getByTestId('chat-title')).toHaveText('Imported from elsewhere');
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('system-prompt')).toHaveValue('Be brief.');
});

test('the search box finds chats by title or by what was said', async ({ app: page }) => {
  await newChat(page);
  await setSettings(page, { maxNewTokens: 4, seed: 1 });
  await send(page, 'Tell me about the quokka please');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await send(page, 'And the wombat burrows?');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  const quokka = await page.getByTestId('chat-view').getAttribute('data-thread-id');
  await newChat(page);
  await send(page, 'Something else entirely');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');

  const search = page.getByTestId('thread-search');
  const items = page.getByTestId('thread-item');
  // A word of a later message, not of the title: the quokka chat only.
  await search.fill('WOMBAT');
  await expect(items).toHaveCount(1);
  await expect(items).toHaveAttribute('data-thread-id', quokka ?? '');
  // Every word must match.
  await search.fill('quokka entirely');
  await expect(items).toHaveCount(0);
  await expect(page.getByTestId('thread-search-empty')).toContainText('No chat mentions');
  await search.press('Escape');
  await expect(search).toHaveValue('');
  expect(await items.count()).toBeGreaterThanOrEqual(2);
});

test('a chat made while a search is typed shows in the list: the search empties (a chat deleted keeps it)', async ({
  app: page,
}) => {
  const openId = () => page.getByTestId('chat-view').getAttribute('data-thread-id');
  await newChat(page);
  await setSettings(page, { maxNewTokens: 2 });
  await send(page, 'About the pangolin');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  const first = await openId();
  await newChat(page);
  await send(page, 'The pangolin again');
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
  const second = await openId();

  const search = page.getByTestId('thread-search');
  const items = page.getByTestId('thread-item');
  const listed = (id: string | null) => items.and(page.locator(`[data-thread-id="${id}"]`));
  await search.fill('pangolin');
  await expect(items).toHaveCount(2);
  // New chat: the list shows every chat again, the new one first and marked open.
  await page.getByTestId('new-thread').click();
  await expect(page.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', second ?? '');
  const made = await openId();
  await expect(search).toHaveValue('');
  await expect(page.getByTestId('thread-search-empty')).toHaveCount(0);
  await expect(items.first()).toHaveAttribute('data-thread-id', made ?? '');
  await expect(items.first().getByTestId('thread-title')).toHaveAttribute('aria-current', 'page');

  // New chat again, the new chat untouched: it opens again (the open chat stays the same), and shows in the list.
  await search.fill('pangolin');
  await expect(listed(made)).toHaveCount(0);
  await page.getByTestId('new-thread').click();
  await expect(search).toHaveValue('');
  expect(await openId()).toBe(made);
  await expect(listed(made).getByTestId('thread-title')).toHaveAttribute('aria-current', 'page');
  // The same with Ctrl+N from the search box.
  await search.fill('pangolin');
  await expect(listed(made)).toHaveCount(0);
  await search.focus();
  await page.keyboard.press('ControlOrMeta+n');
  await expect(search).toHaveValue('');
  expect(await openId()).toBe(made);
  await expect(listed(made).getByTestId('thread-title')).toHaveAttribute('aria-current', 'page');

  // Ctrl+N from the search box, the open chat one the search shows: the same.
  await search.fill('pangolin');
  await listed(second).getByTestId('thread-title').click();
  await search.focus();
  await page.keyboard.press('ControlOrMeta+n');
  await expect(page.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', second ?? '');
  await expect(search).toHaveValue('');
  await expect(items.first().getByTestId('thread-title')).toHaveAttribute('aria-current', 'page');
  await expect(items.first()).toHaveAttribute('data-thread-id', (await openId()) ?? '');

  // A chat deleted while searching: the chat that opens instead is not one made here, and the search stays.
  await search.fill('pangolin');
  const doomed = listed(first);
  await doomed.getByTestId('thread-title').click();
  await doomed.hover();
  await doomed.getByTestId('thread-delete').click();
  await doomed.getByTestId('thread-delete').click();
  await expect(doomed).toHaveCount(0);
  await expect(search).toHaveValue('pangolin');
  await expect(items).toHaveCount(1);
  await expect(items).toHaveAttribute('data-thread-id', second ?? '');
});

test('branch: a new chat with the messages up to a reply, going on without touching the original', async ({
  app: page,
}) => {
  await newChat(page);
  await setSettings(page, { maxNewTokens: 4, seed: 5 });
  await send(page, 'First question about herons');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await send(page, 'Second question');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  const original = await page.getByTestId('chat-view').getAttribute('data-thread-id');

  const firstReply = page.getByTestId('message-assistant').first();
  await firstReply.hover(); // a message's tools show on hover
  await firstReply.getByTestId('branch').click();
  await expect(page.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', original ?? '');
  await expect(page.getByTestId('chat-title')).toHaveText('First question about herons (branch)');
  await expect(page.getByTestId('message-user').getByTestId('message-text')).toHaveText([
    'First question about herons',
  ]);
  await expect(page.getByTestId('message-assistant')).toHaveCount(1);
  // The branch keeps the settings and goes its own way.
  await expect(page.getByTestId('settings-summary')).toContainText('max 4');
  await send(page, 'A different second question');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(page.getByTestId('message-user')).toHaveCount(2);

  // The original is as it was.
  await page.locator(`[data-testid="thread-item"][data-thread-id="${original}"]`).getByTestId('thread-title').click();
  await expect(page.getByTestId('message-user').getByTestId('message-text')).toHaveText([
    'First question about herons',
    'Second question',
  ]);
});

test("a reply's stats line says how many tokens lookup decoding gave, and its title what that means", async ({
  app: page,
}) => {
  await newChat(page);
  await setSettings(page, { maxNewTokens: 6, seed: 5 });
  await send(page, 'Repeat after me: one two three');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  // The default model's random weights never repeat themselves, so its replies take no lookup tokens: no mention.
  await expect(lastReply(page).getByTestId('message-stats')).not.toContainText('lookup');
  const [json] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-json').click()]);
  const exported = JSON.parse(readFileSync(await json.path(), 'utf8')) as {
    thread: { messages: Array<{ role: string; stats?: Record<string, unknown> }> };
  };
  const reply = exported.thread.messages.find((m) => m.role === 'assistant');
  if (!reply?.stats) throw new Error('the exported reply has no stats');
  // As a reply that repeated text it had seen saves them (the engine's figures, kept with the chat).
  reply.stats.lookup = { drafted: 40, accepted: 31 };
  await page.getByTestId('import-thread-file').setInputFiles({
    name: 'lookup.json',
    mimeType: 'application/json',
    buffer: Buffer.from(JSON.stringify(exported)),
  });
  const stats = lastReply(page).getByTestId('message-stats');
  await expect(stats).toContainText('31 by lookup');
  await expect(stats).toHaveAttribute('title', /31 of the 40 tokens guessed from earlier text were right/);
});
