/** Threads survive a reload (they live in the host's data dir) and the last open thread opens again. */
import { expect, lastReply, newChat, savedThreads, send, setSettings, test, wsCall } from './fixtures';

test('reload keeps the threads and reopens the last open thread', async ({ app }) => {
  const alpha = await newChat(app);
  await setSettings(app, { maxNewTokens: 8 });
  await send(app, 'alpha: remember me');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const beta = await newChat(app);
  await send(app, 'beta: and me');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });

  // Rename beta, then go back to alpha: alpha is the last open thread.
  const betaItem = app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`);
  await betaItem.dblclick();
  await app.getByTestId('thread-rename-input').fill('Beta renamed');
  await app.getByTestId('thread-rename-input').press('Enter');
  await expect(betaItem.getByTestId('thread-title')).toHaveText('Beta renamed');
  // A rename ended from the keyboard leaves the focus on the chat (F2 and Esc too), not on the page.
  await expect(betaItem.getByTestId('thread-title')).toBeFocused();
  await app.keyboard.press('F2');
  await expect(app.getByTestId('thread-rename-input')).toBeFocused();
  await app.keyboard.press('Escape');
  await expect(betaItem.getByTestId('thread-title')).toBeFocused();
  await expect(betaItem.getByTestId('thread-title')).toHaveText('Beta renamed');
  await app.getByTestId('thread-list').locator(`[data-thread-id="${alpha}"]`).click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', alpha);

  // Saves are asynchronous: retry the reload until what was saved is what we see.
  await expect(async () => {
    await app.reload();
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', alpha, { timeout: 2000 });
    await expect(app.getByTestId('message-user').getByTestId('message-text')).toHaveText(['alpha: remember me'], {
      timeout: 2000,
    });
    await expect(app.getByTestId('message-assistant')).toHaveCount(1, { timeout: 2000 });
    await expect(app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`)).toContainText('Beta renamed', {
      timeout: 2000,
    });
  }).toPass({ timeout: 20_000 });
  // The finished reply kept its stats.
  await expect(lastReply(app).getByTestId('message-stats')).toContainText('tok');

  // Deleting a thread is permanent too.
  const item = app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`);
  await item.hover();
  await item.getByTestId('thread-delete').click();
  await item.getByTestId('thread-delete').click();
  await expect(item).toHaveCount(0);
  await expect(async () => {
    await app.reload();
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', alpha, { timeout: 2000 });
    await expect(app.getByTestId('thread-list').locator(`[data-thread-id="${beta}"]`)).toHaveCount(0, {
      timeout: 2000,
    });
  }).toPass({ timeout: 20_000 });
});

test("two tabs on one chat: each shows what the other saved, and neither writes over the other's turns", async ({
  app,
  server,
}) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 3 });
  await send(app, 'tabs: first from A');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const other = await app.context().newPage();
  try {
    await other.goto(server.url);
    await expect(other.getByTestId('model-picker')).toHaveValue(/.+/);
    await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    await expect(other.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);

    await send(app, 'tabs: second from A');
    await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
    // The other tab shows A's turn as soon as it is saved, without a reload.
    const texts = (page: typeof app) => page.getByTestId('message-user').getByTestId('message-text');
    await expect(texts(other)).toHaveText(['tabs: first from A', 'tabs: second from A']);
    await expect(other.getByTestId('message-assistant')).toHaveCount(2);

    // B's turn builds on it: the saved chat has all three, and A shows B's.
    // B's budget may list A's finished request a moment longer (it comes at most ten times a second); the host's
    // event that it finished comes as it happens (one frame), and from then B's Send button is on (busy-elsewhere.ts).
    await other.getByTestId('chat-input').fill('tabs: from B');
    await expect(other.getByTestId('send-button')).toBeEnabled();
    await send(other, 'tabs: from B');
    await expect(lastReply(other)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
    const all = ['tabs: first from A', 'tabs: second from A', 'tabs: from B'];
    await expect(texts(app)).toHaveText(all);
    await expect(async () => {
      const listed = (await savedThreads(server)) as {
        value?: Array<{ id: string; messages: Array<{ role: string; content: string }> }>;
      };
      const saved = listed.value?.find((t) => t.id === id);
      expect(saved?.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(all);
      expect(saved?.messages.filter((m) => m.role === 'assistant')).toHaveLength(3);
    }).toPass({ timeout: 10_000 });

    // A chat deleted in one tab goes from the other's list.
    const item = app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
    await item.hover();
    await item.getByTestId('thread-delete').click();
    await item.getByTestId('thread-delete').click();
    await expect(other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toHaveCount(0);
  } finally {
    await other.close();
  }
});

test('a thread of 3,000 messages opens at its end and mounts only the rows on screen', async ({ app, server }) => {
  const now = Date.now();
  const messages = Array.from({ length: 3000 }, (_, i) => ({
    id: `m${i}`,
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content:
      i % 2 === 0 ? `question ${i}` : `answer ${i}\n\n- a list item\n- another\n\n\`\`\`js\nconsole.log(${i});\n\`\`\``,
    createdAt: now + i,
  }));
  const id = `t-long-${now}`;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Very long thread',
    createdAt: now,
    updatedAt: now + 5000,
    messages,
  });
  expect(saved.ok).toBe(true);
  await app.reload({ timeout: 15_000 });
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  // Opens at the end: the last answer is on screen.
  await expect(app.getByTestId('message-assistant').last()).toContainText('answer 2999');
  await expect(app.getByTestId('message-assistant').last()).toBeInViewport();
  const mounted = await app.locator('.message-row').count();
  expect(mounted).toBeGreaterThan(0);
  expect(mounted).toBeLessThan(60);
  // Scrolling to the top brings the first message in, still without mounting the whole thread.
  await app.getByTestId('message-list').evaluate((el) => {
    el.scrollTop = 0;
  });
  await expect(app.getByTestId('message-user').first()).toContainText('question 0');
  expect(await app.locator('.message-row').count()).toBeLessThan(60);
  // Code blocks render with a copy button.
  await expect(app.getByTestId('code-copy').first()).toBeAttached();
});

test('a reload while a reply streams keeps its text so far, marked interrupted, to continue or regenerate', async ({
  app,
  server,
}) => {
  // The page's socket passes the reply's first tokens, then holds its frames: it is still streaming at the reload.
  let held = false;
  let tokens = 0;
  let passed = ''; // the text of the tokens it passed: all the page gets
  await app.routeWebSocket(/\/ws/, (ws) => {
    const hold = !held;
    held = true;
    const host = ws.connectToServer();
    host.onMessage((message) => {
      if (hold && typeof message === 'string' && message.startsWith('{"t":"frame"')) {
        const { frame } = JSON.parse(message) as { frame: { type: string; rows?: Array<{ text: string }> } };
        if (frame.type === 'tokens' && ++tokens <= 3) passed += frame.rows?.[0]?.text ?? '';
        if (tokens > 3) return;
      }
      ws.send(message);
    });
  });
  await app.reload();
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const id = await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 1900 });
  await send(app, 'Tell me a long story');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'running');
  await expect(lastReply(app).getByTestId('message-text')).not.toHaveText(/^\s*$/);

  // Saved as it streams (at most once a second): the host has the text so far.
  const savedReply = async () => {
    const r = await savedThreads(server);
    const thread = (
      r.value as Array<{
        id: string;
        messages: Array<{ role: string; content: string; stats?: { finishReason?: string } }>;
      }>
    ).find((t) => t.id === id);
    const reply = thread?.messages.at(-1);
    return reply?.role === 'assistant' ? reply : undefined;
  };
  await expect
    .poll(async () => {
      const reply = await savedReply();
      return [(reply?.content.trim().length ?? 0) > 0, reply?.stats?.finishReason];
    })
    .toEqual([true, 'interrupted']);
  // The first tokens are saved at once, the rest within a second: wait until the page has all it will get (a fourth
  // frame of tokens is held) and the host has saved all of it.
  await expect.poll(() => tokens).toBeGreaterThan(3);
  await expect.poll(async () => (await savedReply())?.content).toBe(passed);
  const saved = passed;
  // What the page shows now (its held frames never arrive) is what the reload must show again.
  const partial = ((await lastReply(app).getByTestId('message-text').textContent()) ?? '').trim();

  await app.reload();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'interrupted');
  await expect(reply.getByTestId('message-text')).toHaveText(partial);
  await expect(reply.getByTestId('interrupted-note')).toBeVisible();
  await expect(reply.getByTestId('message-stats')).toContainText('interrupted');
  await expect(reply.getByTestId('message-stats')).toContainText(/ttft [\d.,]+ m?s/);
  await reply.hover();
  await expect(reply.getByTestId('regenerate')).toBeVisible();
  // Continue goes on from the text it had (greedy, this model may end it at once: it is no longer interrupted).
  await reply.getByTestId('continue').click();
  await expect(reply.getByTestId('message-stats')).not.toContainText('interrupted');
  await app.keyboard.press('Escape');
  await expect(reply).toHaveAttribute('data-state', /done|cancelled/);
  await expect.poll(async () => (await savedReply())?.stats?.finishReason).not.toBe('interrupted');
  expect((await savedReply())?.content.startsWith(saved)).toBe(true);
});

test('a setting typed is kept without leaving its field: through a reload, and in the chat Ctrl+N leaves', async ({
  app,
  server,
}) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'settings: a turn');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const summary = app.getByTestId('settings-summary');
  const toggle = app.getByTestId('settings-toggle');
  const saved = async () => {
    const r = await savedThreads(server);
    return (r.value as Array<{ id: string; maxNewTokens?: number; systemPrompt?: string }>).find((t) => t.id === id);
  };

  // The chat's saves, as the page sends them: the temperature each one carries.
  const temperatures: Array<number | undefined> = [];
  app.on('websocket', (ws) =>
    ws.on('framesent', ({ payload }) => {
      if (typeof payload !== 'string' || !payload.includes('"name":"saveThread"')) return;
      const sent = JSON.parse(payload) as { request?: { id?: string; sampling?: { temperature?: number } } };
      if (sent.request?.id === id) temperatures.push(sent.request.sampling?.temperature);
    }),
  );

  // The page's clock, held still while keys are typed: a take a moment after the last key comes only when the
  // test moves the clock on, however slowly the machine types (installed for the context, so from the reload on).
  await app.clock.install();
  await app.reload();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  const TAKE_AFTER_MS = 500; // SettingsPanel's
  // The clock held where the page's is now: its time read, then a pause a moment ahead of it. The page's clock runs on
  // between the two calls, past that moment on a loaded machine (pauseAt: "Cannot fast-forward to the past"), and
  // then it is read again.
  const hold = async () => {
    for (let tries = 1; ; tries++) {
      const now = await app.evaluate(() => Date.now());
      try {
        return await app.clock.pauseAt(now + 20);
      } catch (err) {
        if (tries === 5 || !String(err).includes('to the past')) throw err;
      }
    }
  };

  // Typed, then the page reloaded (no blur comes then, and the clock never reaches the moment after the last key):
  // the page going takes it, and the value is the chat's.
  await toggle.click();
  await app.getByTestId('setting-maxNewTokens').click();
  await hold();
  await app.keyboard.press('ControlOrMeta+a');
  await app.keyboard.type('64');
  await app.reload();
  await app.clock.resume();
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  await expect(summary).toContainText('max 64');
  expect((await saved())?.maxNewTokens).toBe(64);
  await toggle.click();
  await expect(app.getByTestId('setting-maxNewTokens')).toHaveValue('64');

  // Typed, then left alone: taken a moment after the last key (the field still focused), in one save of the
  // value typed (none of what was there between the keys).
  const temperature = app.getByTestId('setting-temperature');
  await temperature.click();
  await hold();
  const before = temperatures.length;
  await app.keyboard.type('0.25');
  await app.clock.runFor(TAKE_AFTER_MS + 100);
  await expect(summary).toContainText('temp 0.25');
  await expect(temperature).toBeFocused();
  await expect(temperature).toHaveValue('0.25');
  await expect.poll(() => temperatures.slice(before)).toEqual([0.25]);
  // Half typed ("-" alone is no number yet): nothing is taken, the field keeps what is typed.
  await app.keyboard.press('ControlOrMeta+a');
  await app.keyboard.type('-');
  await app.clock.runFor(TAKE_AFTER_MS * 2);
  await expect(summary).toContainText('temp 0.25');
  await expect(app.getByTestId('setting-error-temperature')).toHaveCount(0);
  await app.clock.resume();
  await app.keyboard.press('Backspace');
  await app.keyboard.type('0.3');

  // The system prompt typed, then Ctrl+N without leaving it: this chat keeps it, and the new chat takes it (as it
  // takes the other settings, and as a click on New chat would).
  await app.getByTestId('system-prompt').click();
  await app.keyboard.type('Answer in French.');
  await app.keyboard.press('ControlOrMeta+n');
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', id);
  await expect(app.getByTestId('chat-input')).toBeFocused();
  await expect(app.getByTestId('system-prompt')).toHaveValue('Answer in French.');
  await expect(summary).toContainText('temp 0.3');
  await expect(summary).toContainText('max 64');
  await expect.poll(async () => (await saved())?.systemPrompt).toBe('Answer in French.');
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
  await expect(app.getByTestId('system-prompt')).toHaveValue('Answer in French.');
  await expect(summary).toContainText('temp 0.3');
  expect((await saved())?.maxNewTokens).toBe(64);
});

test("a setting's field left without an edit saves nothing: another tab's newer value stays", async ({
  app,
  server,
}) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  const summary = app.getByTestId('settings-summary');
  const saved = async () => {
    const r = await savedThreads(server);
    return (r.value as Array<{ id: string; maxNewTokens?: number; sampling?: { temperature?: number } }>).find(
      (t) => t.id === id,
    );
  };
  await expect.poll(async () => (await saved())?.maxNewTokens).toBe(2);
  await app.getByTestId('settings-toggle').click();
  // A temperature typed and taken here (the field keeps its text from then on: it shows what was typed).
  const temperature = app.getByTestId('setting-temperature');
  await temperature.fill('0.5');
  await temperature.blur();
  await expect.poll(async () => (await saved())?.sampling?.temperature).toBe(0.5);
  await temperature.click();

  // Another tab sets the temperature while this one's field has the focus (and the text typed before).
  const other = await saved();
  const changed = await wsCall(server, 'saveThread', {
    ...other,
    sampling: { temperature: 0.9 },
    updatedAt: Date.now(),
  });
  expect(changed.ok).toBe(true);
  await expect(summary).toContainText('temp 0.9');

  // Left without an edit, then another field typed and left (its save comes after anything the first one sent).
  await app.keyboard.press('Tab');
  await expect(temperature).not.toBeFocused();
  await app.getByTestId('setting-maxNewTokens').fill('7');
  await app.getByTestId('setting-maxNewTokens').blur();
  await expect.poll(async () => (await saved())?.maxNewTokens).toBe(7);
  expect((await saved())?.sampling?.temperature).toBe(0.9);
  await expect(summary).toContainText('temp 0.9');
});

test('the page going while a reply is on its way to the host and a setting is typed saves both: the reply too', async ({
  app,
  server,
}) => {
  // The page's requests for replies never reach the host: a reply sent stays on its way ('sending').
  await app.routeWebSocket(/.*/, (ws) => {
    const host = ws.connectToServer();
    ws.onMessage((message) => {
      if (typeof message === 'string' && message.includes('"t":"generate"')) return;
      host.send(message);
    });
  });
  await app.reload();
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'On its way');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'sending');
  const saved = async () => {
    const r = await savedThreads(server);
    return (r.value as Array<{ id: string; maxNewTokens?: number; messages: Array<{ role: string }> }>).find(
      (t) => t.id === id,
    );
  };

  // A setting typed and not left, then the page goes. Its pagehide, without the reload: the routed socket would
  // lose what the page sends as it unloads (a real reload of it is in 'a setting typed is kept…').
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-maxNewTokens').click();
  await app.keyboard.press('ControlOrMeta+a');
  await app.keyboard.type('64');
  await app.evaluate(() => {
    const w = globalThis as unknown as {
      PageTransitionEvent: new (type: string) => unknown;
      dispatchEvent(event: unknown): boolean;
    };
    w.dispatchEvent(new w.PageTransitionEvent('pagehide'));
  });
  // The settings' save, after the one of the replies on their way: it keeps the reply as that one did.
  await expect.poll(async () => (await saved())?.maxNewTokens).toBe(64);
  expect((await saved())?.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
});
