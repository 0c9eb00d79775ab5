/**
 * What a message shows and how the list holds it. Editing a message keeps it in view: the list stops following
 * the chat's end while an editor is open, and closing the editor (Cancel, Esc, Save) leaves the message where it
 * was, its edit button focused and on screen. A reply names the model that wrote it; one stopped before it wrote
 * anything says so.
 */
import type { Locator, Page } from '@playwright/test';
import { expect, lastReply, newChat, openGreeting, send, setSettings, test, wsCall } from './fixtures';
import type { ServeHandle } from './serve';

const PARAGRAPH =
  'The lighthouse keeper climbed the stairs every evening, counting the steps as his father had, and lit the lamp ' +
  'before the fishing boats came round the point. ';

/** A saved chat of `turns` questions and answers (each answer a few lines long), opened in the page. */
async function openSeeded(app: Page, server: ServeHandle, turns: number): Promise<string> {
  const now = Date.now();
  const id = `t-view-${now}-${turns}`;
  const messages = [];
  for (let i = 0; i < turns; i++) {
    messages.push({ id: `u${i}`, role: 'user', content: `Question ${i + 1}: and then?`, createdAt: now + 2 * i });
    messages.push({
      id: `a${i}`,
      role: 'assistant',
      content: PARAGRAPH.repeat(3 + (i % 3)),
      createdAt: now + 2 * i + 1,
      stats: { tokens: 90, promptTokens: 40 * i + 20, finishReason: 'length' },
    });
  }
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: `View ${turns}`,
    createdAt: now,
    updatedAt: now,
    messages,
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  return id;
}

/** The list scrolled to its end (as a person who read the chat to its end has it), once the rows have settled. */
async function scrollToEnd(list: Locator): Promise<void> {
  await expect(list.locator('[data-message-id]').first()).toBeVisible();
  await expect
    .poll(async () =>
      list.evaluate((el) => {
        el.scrollTop = el.scrollHeight;
        return el.scrollHeight - el.clientHeight - el.scrollTop;
      }),
    )
    .toBeLessThan(2);
  await list.page().waitForTimeout(300);
}

/** Waits until `box()` gives the same top twice 250 ms apart (the list's scroll and its rows' measures settled). */
async function settledTop(page: Page, box: () => Promise<{ y: number } | null>): Promise<number> {
  let before = Number.NaN;
  for (let i = 0; i < 20; i++) {
    await page.waitForTimeout(250);
    const now = (await box())?.y ?? Number.NaN;
    if (Math.abs(now - before) < 0.5) return now;
    before = now;
  }
  return before;
}

/** `inner`'s box lies inside `outer`'s (to half a pixel). */
async function expectInside(inner: Locator, outer: Locator, what: string): Promise<void> {
  const i = await inner.boundingBox();
  const o = await outer.boundingBox();
  expect(i, what).not.toBeNull();
  expect(o).not.toBeNull();
  if (!i || !o) return;
  expect(i.y, `${what}: top inside the list`).toBeGreaterThanOrEqual(o.y - 0.5);
  expect(i.y + i.height, `${what}: bottom inside the list`).toBeLessThanOrEqual(o.y + o.height + 0.5);
}

for (const turns of [3, 12]) {
  test(`edit and Cancel keep the message in view and in place (${turns} turns, read to the end)`, async ({
    app,
    server,
  }) => {
    await openSeeded(app, server, turns);
    const list = app.getByTestId('message-list');
    await scrollToEnd(list);
    // The question before the last one: its editor is taller than it, and the rows after it fill the view.
    const user = list.locator(`[data-message-id="u${turns - 2}"]`);
    await user.scrollIntoViewIfNeeded();
    await user.hover();
    await user.getByTestId('edit-message').click();
    const input = app.getByTestId('edit-input');
    await expect(input).toBeFocused();
    const editorTop = await settledTop(app, () => user.boundingBox());
    // The whole editor in view: its label, its box and its buttons (the list does not run off to the end).
    await expectInside(user, list, 'the editor');
    await expectInside(input, list, 'the edit box');

    await app.getByRole('button', { name: 'Cancel', exact: true }).click();
    const edit = user.getByTestId('edit-message');
    await expect(edit).toBeFocused();
    const afterTop = await settledTop(app, () => user.boundingBox());
    expect(Math.abs(afterTop - editorTop), 'the message stays where its editor was').toBeLessThan(2);
    await expectInside(user.locator('.who'), list, "the message's label");
    await expect(edit).toBeFocused();

    // A reply's editor: the same, and Save leaves the reply (edited) where it was.
    const reply = list.locator(`[data-message-id="a${turns - 2}"]`);
    await reply.hover();
    await reply.getByTestId('edit-reply').click();
    const replyInput = app.getByTestId('reply-edit-input');
    await expect(replyInput).toBeFocused();
    const replyTop = await settledTop(app, () => reply.boundingBox());
    await expectInside(replyInput, list, "the reply's edit box");
    await replyInput.fill('A shorter reply.');
    await app.getByTestId('reply-edit-save').click();
    await expect(reply.getByTestId('message-text')).toHaveText('A shorter reply.');
    const savedTop = await settledTop(app, () => reply.boundingBox());
    // Where its editor was; or, the list at its end with less below than the editor took, lower by only that.
    const atEnd = await list.evaluate((el) => el.scrollHeight - el.clientHeight - el.scrollTop < 1);
    if (atEnd)
      expect(savedTop, 'the reply moved down only as the list lost height').toBeGreaterThanOrEqual(replyTop - 1);
    else expect(Math.abs(savedTop - replyTop), 'the reply stays where its editor was').toBeLessThan(2);
    await expect(reply.getByTestId('edit-reply')).toBeFocused();
    await expectInside(reply.getByTestId('edit-reply'), list, "the reply's edit button");
  });
}

test('a reply names the model that wrote it (after a reload too); one from an older chat names none', async ({
  app,
}) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 4, seed: 1 });
  await send(app, 'Hello');
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const picked = (await app.getByTestId('model-picker').locator('option:checked').textContent())?.trim() ?? '';
  const modelId = await app.getByTestId('model-picker').inputValue();
  const model = reply.getByTestId('message-model');
  await expect(model).toHaveText(picked.split(/\s+[·(]/)[0] ?? picked);
  await expect(model).toHaveAttribute('data-model-id', modelId);
  // Its tooltip sets each name apart (U+2068 … U+2069), as <bdi> does in the page: a Hebrew or Arabic name keeps
  // its place in the English sentence.
  const shown = (await model.textContent()) ?? '';
  await expect(model).toHaveAttribute(
    'title',
    shown === modelId
      ? `Written by \u2068${modelId}\u2069`
      : `Written by \u2068${shown}\u2069 (\u2068${modelId}\u2069)`,
  );
  await expect(reply.getByTestId('message-stats')).toContainText(/^.+ · ttft /);
  await app.reload();
  await expect(lastReply(app).getByTestId('message-model')).toHaveAttribute('data-model-id', modelId);
});

test('a reply stopped before it wrote anything says where it was stopped, not just "0 tok"', async ({
  app,
  server,
}) => {
  const now = Date.now();
  const id = `t-stopped-${now}`;
  const stopped = (n: number, stats: Record<string, unknown>) => ({
    id: `a${n}`,
    role: 'assistant',
    content: '',
    createdAt: now + 2 * n + 1,
    stats: { tokens: 0, finishReason: 'cancelled', ...stats },
  });
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Stopped',
    createdAt: now,
    updatedAt: now,
    messages: [
      { id: 'u0', role: 'user', content: 'One', createdAt: now },
      stopped(0, { promptTokens: 9, stoppedWhile: 'queued' }),
      { id: 'u1', role: 'user', content: 'Two', createdAt: now + 2 },
      // Saved before kvdesk said where: that it wrote nothing.
      stopped(1, { promptTokens: 9 }),
      { id: 'u2', role: 'user', content: 'Three', createdAt: now + 4 },
      {
        id: 'a2',
        role: 'assistant',
        content: 'Part',
        createdAt: now + 5,
        stats: { tokens: 1, finishReason: 'cancelled' },
      },
    ],
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  const reply = (n: number) => app.locator(`[data-testid="message-assistant"][data-message-id="a${n}"]`);
  await expect(reply(0).getByTestId('message-text')).toHaveText('stopped while queued — no reply');
  await expect(reply(1).getByTestId('message-text')).toHaveText('stopped before it wrote anything — no reply');
  // Stopped after it wrote: its text, and no such note. None of these chats kept its model: none is named.
  await expect(reply(2).getByTestId('message-text')).toHaveText('Part');
  await expect(reply(2).getByTestId('stopped-empty')).toHaveCount(0);
  await expect(app.getByTestId('message-model')).toHaveCount(0);
});

test("the context meter counts an edited reply's text, not the tokens the model wrote", async ({ app, server }) => {
  await openGreeting(app, server, 'meter');
  const meter = app.getByTestId('context-meter');
  await expect(meter).toHaveAttribute('data-used', '12');
  await expect(meter).toHaveAttribute('data-count', 'kept');
  const reply = lastReply(app);
  await reply.hover();
  await reply.getByTestId('edit-reply').click();
  await app.getByTestId('reply-edit-input').fill(PARAGRAPH.repeat(8));
  await app.getByTestId('reply-edit-save').click();
  // Counted again by the host, as the next turn would send the chat: the long text, not the 2 tokens.
  await expect(meter).toHaveAttribute('data-count', 'recounted');
  const used = Number(await meter.getAttribute('data-used'));
  expect(used).toBeGreaterThan(200);
  await expect(meter).not.toContainText('≈');
  await expect(meter).toContainText(`context ${used.toLocaleString('en-US')} /`);
});

test('a reply edited past the context fills the meter and says what the next turn leaves out', async ({
  app,
  server,
}) => {
  await openGreeting(app, server, 'meter-over');
  const meter = app.getByTestId('context-meter');
  await expect(meter).toHaveAttribute('data-used', '12');
  const reply = lastReply(app);
  await reply.hover();
  await reply.getByTestId('edit-reply').click();
  // Longer than the default model's 2,048-token context.
  await app.getByTestId('reply-edit-input').fill(PARAGRAPH.repeat(100));
  await app.getByTestId('reply-edit-save').click();
  await expect(meter).toHaveAttribute('data-count', 'recounted');
  await expect(meter).toHaveAttribute('data-context', '2048');
  // All of the chat, not the few tokens left once the next turn has left it out.
  expect(Number(await meter.getAttribute('data-used'))).toBeGreaterThanOrEqual(2048);
  // Not out of view yet (the list shows them until the next reply): the next turn leaves them out.
  await expect(meter).toContainText('2 will be left out');
  await expect(meter).toHaveAttribute('title', /The next turn leaves out the first 2 messages/);
  await expect(meter.locator('.meter > span')).toHaveAttribute('style', /width: 100%/);
});

test('a full context says the next turn leaves out the oldest messages, and "refused" only in a chat set to refuse', async ({
  app,
  server,
}) => {
  const now = Date.now();
  /** A saved chat whose reply stopped at `used` tokens of the default model's 2,048, opened in the page. */
  async function openFull(name: string, used: number, refuse: boolean) {
    const id = `t-meter-full-${name}-${now}`;
    const saved = await wsCall(server, 'saveThread', {
      id,
      title: `Meter ${name}`,
      createdAt: now,
      updatedAt: now,
      ...(refuse ? { contextOverflow: 'refuse' } : {}),
      messages: [
        { id: 'u0', role: 'user', content: 'Tell me a long story.', createdAt: now },
        {
          id: 'a0',
          role: 'assistant',
          content: PARAGRAPH,
          createdAt: now + 1,
          stats: { tokens: used - 1500, promptTokens: 1500, finishReason: 'length' },
        },
      ],
    });
    expect(saved.ok).toBe(true);
    await app.reload();
    await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  }
  const meter = app.getByTestId('context-meter');

  // A reply stopped at the end of the context, in a chat that leaves out its oldest messages (the default).
  await openFull('drop', 2048, false);
  await expect(meter).toHaveAttribute('data-used', '2048');
  await expect(meter).toHaveAttribute('data-context', '2048');
  await expect(meter).toContainText('the oldest will be left out');
  await expect(meter).not.toContainText('too long');
  await expect(meter).toHaveAttribute(
    'title',
    /fills all 2,048 tokens of its context\. The next turn leaves out the oldest messages\.$/,
  );
  await expect(meter).not.toHaveAttribute('title', /refused|more than/);

  // The same in a chat set to refuse, past the context.
  await openFull('refuse', 2100, true);
  await expect(meter).toHaveAttribute('data-used', '2100');
  await expect(meter).toContainText('too long for the context');
  await expect(meter).toHaveAttribute(
    'title',
    /2,100 tokens, more than its 2,048 tokens of context\. The next turn is refused/,
  );
});

test('a reply edited to leave the next reply too little room says what the next turn leaves out, short of the context', async ({
  app,
  server,
}) => {
  // Replies of up to 1,024 tokens: the host leaves out the oldest messages once the prompt passes 1,024 of 2,048.
  await openGreeting(app, server, 'meter-room', { maxNewTokens: 1024 });
  const meter = app.getByTestId('context-meter');
  await expect(meter).toHaveAttribute('data-used', '12');
  const reply = lastReply(app);
  await reply.hover();
  await reply.getByTestId('edit-reply').click();
  await app.getByTestId('reply-edit-input').fill(PARAGRAPH.repeat(23));
  await app.getByTestId('reply-edit-save').click();
  await expect(meter).toHaveAttribute('data-count', 'recounted');
  const used = Number(await meter.getAttribute('data-used'));
  expect(used).toBeGreaterThan(1200);
  expect(used).toBeLessThan(2048);
  await expect(meter).toContainText('2 will be left out');
  await expect(meter).toHaveAttribute('title', /The next turn leaves out the first 2 messages/);
});
