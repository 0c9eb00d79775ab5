/**
 * Chat with the default model (the slow one for the replies Stop and Esc end, and for the one the list follows): a
 * reply streams in, the list keeps its end in view unless the person scrolls up, Stop (button and Esc) ends it and
 * returns its reservation.
 */

import type { Page } from '@playwright/test';
import { openChat, openServer, saveEndlessChat, startSlowServe } from './endless';
import { apiSnapshot, expect, lastReply, newChat, savedThreads, send, setSettings, test, wsCall } from './fixtures';
import type { ServeHandle } from './serve';

// The replies a test stops go to the slow model with their end of text banned (endless.ts): they run to their max
// tokens, a few hundred a second at most, so there is time to see them stream and to stop them (on the default model
// a greedy reply of thousands of tokens a second can end before the click).
const LONG = 'Tell me a long story';
let slow: ServeHandle;
test.beforeAll(async () => {
  slow = await startSlowServe();
});
test.afterAll(async () => {
  await slow.stop();
});

/** Opens a new endless chat on the slow serve and sends it LONG: a greedy reply that runs until it is stopped. */
async function longReplyOnSlow(app: Page): Promise<string> {
  const id = await saveEndlessChat(slow, { greedy: true, maxNewTokens: 1900 });
  await openServer(app, slow);
  await openChat(app, id);
  await send(app, LONG);
  return id;
}

test('a reply streams in, shows its stats, and Stop ends it', async ({ app }) => {
  await longReplyOnSlow(app);

  const reply = lastReply(app);
  // Streaming: the reply is running and already has text before it ends.
  await expect(reply).toHaveAttribute('data-state', 'running');
  await expect(reply.getByTestId('message-text')).not.toHaveText(/^\s*$/);
  const early = (await reply.getByTestId('message-text').textContent()) ?? '';
  await expect(app.getByTestId('stop-button')).toBeVisible();
  // The text keeps growing while it streams.
  await expect
    .poll(async () => ((await reply.getByTestId('message-text').textContent()) ?? '').length)
    .toBeGreaterThan(early.length);

  // From the keyboard: Stop goes away once the reply has stopped, and the focus goes to the message box (not to
  // the page, where a screen reader would lose its place).
  await app.getByTestId('stop-button').focus();
  await app.keyboard.press('Enter');
  await expect(reply).toHaveAttribute('data-state', 'cancelled');
  await expect(app.getByTestId('send-button')).toBeVisible();
  await expect(app.getByTestId('chat-input')).toBeFocused();
  // A screen reader is told, once: the live region says the reply stopped, with its tokens.
  const announcer = app.getByTestId('reply-announcer');
  await expect(announcer).toHaveAttribute('aria-live', 'polite');
  await expect(announcer).toHaveText(/^Reply stopped after [\d,]+ tokens\.$/);
  await expect(reply.getByTestId('message-stats')).toContainText('stopped');
  // A stopped reply keeps its time to first token and its rate (as the window measured them).
  await expect(reply.getByTestId('message-stats')).toContainText(/ttft [\d.,]+ m?s/);
  await expect(reply.getByTestId('message-stats')).toContainText(/[\d.,]+ tok\/s/);
  // The count, not the rate before it (`41.5 tok/s · 120 tok`).
  const tokens = Number(
    /([\d,]+) tok(?!\/s)/.exec((await reply.getByTestId('message-stats').textContent()) ?? '')?.[1]?.replace(/,/g, ''),
  );
  expect(tokens).toBeGreaterThan(0);
  expect(tokens).toBeLessThan(1900);
  // Stopping returned the reservation: nothing is reserved any more.
  await expect.poll(async () => (await apiSnapshot(slow)).reservedBytes).toBe(0);
});

test('a reply ending in a chat other than the open one is said with its chat, by the window’s announcer', async ({
  app,
}) => {
  const id = await longReplyOnSlow(app);
  await expect(lastReply(app)).toHaveAttribute('data-state', 'running');
  const running = (await apiSnapshot(slow)).running;
  expect(running).toHaveLength(1);
  // Another chat opened: the first one's row says it replies, and only a sighted person sees its dot go.
  await newChat(app);
  const row = app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
  await expect(row.getByRole('img', { name: 'replying' })).toBeVisible();
  const title = (await row.getAttribute('title')) ?? '';
  expect(title).not.toBe('');
  const announcer = app.getByTestId('announcer');
  await expect(announcer).toHaveText('');
  expect((await wsCall(slow, 'cancel', { requestId: running[0]?.id })).value).toEqual({ cancelled: true });
  await expect(row.getByRole('img', { name: 'replying' })).toHaveCount(0);
  await expect(announcer).toHaveText(new RegExp(`^In “${title}”: Reply stopped after [\\d,]+ tokens\\.$`));
  // The open chat's own announcer says nothing of it.
  await expect(app.getByTestId('reply-announcer')).toHaveText('');

  // The open chat's reply ending behind the Models view (its chat, and the chat's announcer, not shown): said too.
  const said = await announcer.locator('span').elementHandle();
  await openChat(app, id);
  await send(app, LONG);
  await expect(lastReply(app)).toHaveAttribute('data-state', 'running');
  const again = (await apiSnapshot(slow)).running;
  await app.getByTestId('models-toggle').click();
  await expect(app.getByTestId('chat-view')).toHaveCount(0);
  expect((await wsCall(slow, 'cancel', { requestId: again[0]?.id })).value).toEqual({ cancelled: true });
  await expect.poll(() => said?.evaluate((e) => e.isConnected)).toBe(false);
  await expect(announcer).toHaveText(new RegExp(`^In “${title}”: Reply stopped after [\\d,]+ tokens\\.$`));
});

test('a reply taller than the window keeps its end in view; scrolled up, the list stays put until the button brings it back', async ({
  app,
}) => {
  // Its waits are for text the slow model writes: ~60 tokens a second on a loaded machine (the reply has 1 900).
  test.setTimeout(150_000);
  // A short window, so that the reply outgrows the list early.
  await app.setViewportSize({ width: 1400, height: 500 });
  await longReplyOnSlow(app);
  const reply = lastReply(app);
  const list = app.getByTestId('message-list');
  const jump = app.getByTestId('jump-to-end');
  const text = () => reply.getByTestId('message-text').evaluate((el) => (el.textContent ?? '').length);
  const grows = async (by: number) => {
    const before = await text();
    await expect.poll(text, { timeout: 60_000 }).toBeGreaterThan(before + by);
  };
  const at = () =>
    list.evaluate((el) => ({ top: el.scrollTop, fromEnd: el.scrollHeight - el.scrollTop - el.clientHeight }));
  // Followed: once the reply outgrows the list, its newest line stays in view as more text comes.
  await expect
    .poll(() => list.evaluate((el) => el.scrollHeight - el.clientHeight), { timeout: 60_000 })
    .toBeGreaterThan(150);
  for (let i = 0; i < 3; i++) {
    await grows(80);
    expect((await at()).fromEnd).toBeLessThan(60);
  }
  await expect(reply).toHaveAttribute('data-state', 'running');
  await expect(jump).toHaveCount(0);

  // Scrolled up by the wheel while it streams: the list stays where the person put it, and says the reply goes on.
  await list.hover();
  await app.mouse.wheel(0, -400);
  await expect(jump).toHaveText('↓ reply going on below');
  await expect(jump).toHaveAttribute('data-streaming', 'true');
  const held = (await at()).top;
  await grows(200);
  expect((await at()).top).toBe(held);
  expect((await at()).fromEnd).toBeGreaterThan(60);

  // The button goes back to the end, and the list follows the reply again.
  await jump.click();
  await expect(jump).toHaveCount(0);
  await grows(80);
  expect((await at()).fromEnd).toBeLessThan(60);
  await expect(reply).toHaveAttribute('data-state', 'running');
  await app.getByTestId('stop-button').click();
  await expect(reply).toHaveAttribute('data-state', 'cancelled');
});

test('a finished reply shows ttft, rate, tokens and finish reason; Esc stops the next one', async ({ app }) => {
  const id = await saveEndlessChat(slow, { maxNewTokens: 24, seed: 1 });
  await openServer(app, slow);
  await openChat(app, id);
  await send(app, 'Hello!');
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const stats = reply.getByTestId('message-stats');
  await expect(stats).toContainText(/ttft [\d.]+ m?s/);
  await expect(stats).toContainText(/tok\/s/);
  await expect(stats).toHaveAttribute('data-finish-reason', /^(eos|length|stop)$/);
  await expect(app.getByTestId('message-user')).toHaveCount(1);
  await expect(app.getByTestId('reply-announcer')).toHaveText(/^Reply done: [\d,]+ tokens\.$/);
  // Opening a chat says nothing of its last reply (only what changes while it is open).
  await app.getByTestId('new-thread').click();
  await openChat(app, id);
  await expect(app.getByTestId('reply-announcer')).toHaveText('');

  // Esc in the chat (the message box here) stops a streaming reply.
  await setSettings(app, { greedy: true, maxNewTokens: 1900 });
  await send(app, LONG);
  await expect(lastReply(app)).toHaveAttribute('data-state', 'running');
  await app.keyboard.press('Escape');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'cancelled');
  await expect(app.getByTestId('message-assistant')).toHaveCount(2);
});

test('regenerate replaces the last reply and keeps the old one as a version; edit-and-resend replaces the turn', async ({
  app,
}) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 8, seed: 1, greedy: false });
  await send(app, 'first question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const firstId = await lastReply(app).getAttribute('data-message-id');
  const text = () => lastReply(app).getByTestId('message-text');
  const first = (await text().textContent()) ?? '';
  await expect(lastReply(app).getByTestId('versions')).toHaveCount(0);

  // Another seed, another reply: the first stays as version 1 of 2.
  await setSettings(app, { seed: 2 });
  await lastReply(app).hover();
  await app.getByTestId('regenerate').click();
  await expect(lastReply(app)).not.toHaveAttribute('data-message-id', firstId ?? '');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(app.getByTestId('message-assistant')).toHaveCount(1);
  const versions = lastReply(app).getByTestId('versions');
  await expect(versions).toHaveAttribute('data-count', '2');
  await expect(versions).toHaveAttribute('data-at', '2');
  const second = (await text().textContent()) ?? '';
  expect(second).not.toBe(first);
  await versions.getByTestId('version-prev').click();
  await expect(versions).toHaveAttribute('data-at', '1');
  await expect(text()).toHaveText(first);
  await expect(versions.getByTestId('version-prev')).toBeDisabled();
  // The version shown is kept with the chat.
  await app.reload();
  await expect(lastReply(app).getByTestId('versions')).toHaveAttribute('data-at', '1');
  await expect(text()).toHaveText(first);
  await lastReply(app).getByTestId('version-next').click();
  await expect(text()).toHaveText(second);
  // Regenerating again adds a third.
  await lastReply(app).hover();
  await app.getByTestId('regenerate').click();
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(lastReply(app).getByTestId('versions')).toHaveAttribute('data-count', '3');
  // Once the chat goes on, an earlier reply's versions stay as they are (the next turn was written to it).
  const earlier = lastReply(app);
  const earlierId = await earlier.getAttribute('data-message-id');
  await send(app, 'and then?');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const kept = app.locator(`[data-message-id="${earlierId}"]`).getByTestId('versions');
  await expect(kept).toHaveAttribute('data-count', '3');
  await expect(kept.getByTestId('version-prev')).toBeDisabled();

  const user = app.getByTestId('message-user').first();
  // Editing an earlier message says, before Send, what sending takes away — and Branch keeps it all.
  const original = (await app.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
  await user.hover();
  await user.getByTestId('edit-message').click();
  await expect(app.getByTestId('edit-removes')).toHaveAttribute('data-count', '3');
  await expect(app.getByTestId('edit-removes')).toContainText('Send removes the 3 messages after this one');
  await app.getByTestId('edit-input').fill('branched question');
  await app.getByTestId('edit-branch').click();
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', original);
  await expect(app.getByTestId('message-user')).toHaveCount(1);
  await expect(app.getByTestId('message-user')).toContainText('branched question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  // The chat it came from is whole: its 4 messages, the reply's 3 versions.
  await app.getByTestId('thread-list').locator(`[data-thread-id="${original}"]`).click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', original);
  await expect(app.getByTestId('message-user')).toHaveCount(2);
  await expect(app.locator(`[data-message-id="${earlierId}"]`).getByTestId('versions')).toHaveAttribute(
    'data-count',
    '3',
  );
  // The last message's editor: Send replaces only the reply after it.
  const lastUser = app.getByTestId('message-user').last();
  await lastUser.hover();
  await lastUser.getByTestId('edit-message').click();
  await expect(app.getByTestId('edit-removes')).toContainText('Send removes the message after this one');
  // The editor opens with the caret after the text, its label in view (not under the header).
  await expect(app.getByTestId('edit-input')).toBeFocused();
  await app.keyboard.type('!');
  await expect(app.getByTestId('edit-input')).toHaveValue('and then?!');
  const label = await app.getByTestId('edit-input').locator('xpath=preceding-sibling::div[1]').boundingBox();
  const list = await app.getByTestId('message-list').boundingBox();
  expect(label?.y).toBeGreaterThanOrEqual(list?.y ?? Number.POSITIVE_INFINITY);
  await app.getByTestId('edit-input').press('Escape');
  // Esc closes the editor; the focus goes back to the message's edit button, not to the page.
  await expect(lastUser.getByTestId('edit-message')).toBeFocused();
  await user.hover();
  await user.getByTestId('edit-message').click();
  await app.getByTestId('edit-input').fill('second question');
  await app.getByTestId('edit-input').press('Enter');
  await expect(app.getByTestId('message-user')).toHaveCount(1);
  await expect(app.getByTestId('message-user')).toContainText('second question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  // A new turn's reply has no versions of the one before it.
  await expect(lastReply(app).getByTestId('versions')).toHaveCount(0);
  // New chats inherit the open one's settings: no seed for the tests that follow.
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-seed').fill('');
  await app.getByTestId('setting-seed').blur();
  await expect(app.getByTestId('settings-summary')).not.toContainText('seed');
  await app.getByTestId('settings-toggle').click();
});

test('keyboard: Ctrl+N starts a chat, Ctrl+K focuses the model picker, Shift+Enter is a new line', async ({ app }) => {
  // The open chat has messages: Ctrl+N adds a chat.
  await newChat(app);
  await send(app, 'hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const before = await app.getByTestId('thread-item').count();
  // Pressed one right after the other, as a person may: the picker keeps the focus Ctrl+K gave it.
  await app.keyboard.press('Control+n');
  await app.keyboard.press('Control+k');
  await expect(app.getByTestId('thread-item')).toHaveCount(before + 1);
  await expect(app.getByTestId('model-picker')).toBeFocused();
  const input = app.getByTestId('chat-input');
  await input.click();
  await input.pressSequentially('line one');
  await input.press('Shift+Enter');
  await input.pressSequentially('line two');
  await expect(input).toHaveValue('line one\nline two');
  await expect(app.getByTestId('message-user')).toHaveCount(0);
  await input.fill('');
  // The new chat untouched (no messages, its settings as made): Ctrl+N and + New chat open it, adding none.
  const fresh = await app.getByTestId('chat-view').getAttribute('data-thread-id');
  await app.getByTestId('thread-list').locator('[data-testid="thread-item"]').nth(1).click();
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', fresh ?? '');
  await app.getByTestId('thread-list').locator(`[data-thread-id="${fresh}"]`).click();
  await app.keyboard.press('Control+n');
  await app.getByTestId('new-thread').click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', fresh ?? '');
  await expect(app.getByTestId('thread-item')).toHaveCount(before + 1);
  // Its settings changed: New chat adds one.
  await setSettings(app, { maxNewTokens: 7 });
  await app.getByTestId('new-thread').click();
  await expect(app.getByTestId('thread-item')).toHaveCount(before + 2);
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', fresh ?? '');
  // (New chats inherit the open one's settings: back to the default for the tests that follow.)
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-maxNewTokens').fill('');
  await app.getByTestId('setting-maxNewTokens').blur();
  await expect(app.getByTestId('settings-summary')).toContainText('max default');
  await app.getByTestId('settings-toggle').click();
});

test('keyboard: Ctrl+Shift+O starts a chat too (a browser keeps Ctrl+N for a new window)', async ({ app }) => {
  await newChat(app);
  await send(app, 'hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const before = await app.getByTestId('thread-item').count();
  const open = await app.getByTestId('chat-view').getAttribute('data-thread-id');
  await app.getByTestId('chat-view').click();
  await app.keyboard.press('ControlOrMeta+Shift+O');
  await expect(app.getByTestId('thread-item')).toHaveCount(before + 1);
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', open ?? '');
  await expect(app.getByTestId('chat-input')).toBeFocused();
});

test('a thread’s frequency and presence penalties reach the model: the same greedy question gets another reply', async ({
  app,
}) => {
  const replyTo = async (settings: Parameters<typeof setSettings>[1]) => {
    await newChat(app);
    await setSettings(app, { greedy: true, maxNewTokens: 24, ...settings });
    await send(app, 'Hello!');
    await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    return (await lastReply(app).getByTestId('message-text').textContent()) ?? '';
  };
  const plain = await replyTo({});
  expect(plain.trim().length).toBeGreaterThan(0);
  expect(await replyTo({})).toBe(plain);
  expect(await replyTo({ presencePenalty: 1.5 })).not.toBe(plain);
  await expect(app.getByTestId('settings-summary')).toContainText('presence 1.5');
  expect(await replyTo({ frequencyPenalty: 1.5 })).not.toBe(plain);
  await expect(app.getByTestId('settings-summary')).toContainText('freq 1.5');
  // New chats inherit the open one's settings: clear the penalties for the tests that follow.
  await app.getByTestId('settings-toggle').click();
  for (const key of ['frequencyPenalty', 'presencePenalty']) {
    await app.getByTestId(`setting-${key}`).fill('');
    await app.getByTestId(`setting-${key}`).blur();
  }
  await expect(app.getByTestId('settings-summary')).not.toContainText(/freq|presence/);
  await app.getByTestId('settings-toggle').click();
});

test('a thread’s stop strings end its replies where one would appear', async ({ app }) => {
  await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 32 });
  await send(app, 'Hello there!');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const plain = (await lastReply(app).getByTestId('message-text').textContent()) ?? '';
  // Three letters from the middle of the greedy reply: the same question stops right before them.
  const at = plain.slice(plain.length >> 2).search(/[a-z]{3}/) + (plain.length >> 2);
  expect(at, `a reply with three letters in a row: ${plain}`).toBeGreaterThan(0);
  const stop = plain.slice(at, at + 3);
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-stop').fill(stop);
  await app.getByTestId('setting-stop').blur();
  await expect(app.getByTestId('settings-summary')).toContainText('stop ×1');
  await app.getByTestId('settings-toggle').click();
  await lastReply(app).hover();
  await app.getByTestId('regenerate').click();
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(lastReply(app).getByTestId('message-stats')).toHaveAttribute('data-finish-reason', 'stop');
  const cut = (await lastReply(app).getByTestId('message-text').textContent()) ?? '';
  expect(cut).not.toContain(stop);
  expect(plain.startsWith(cut.trim())).toBe(true);
  // New chats inherit the open one's settings: clear them for the tests that follow.
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-stop').fill('');
  await app.getByTestId('setting-stop').blur();
  await expect(app.getByTestId('settings-summary')).not.toContainText('stop ×');
  await app.getByTestId('settings-toggle').click();
});

test('continue: a reply cut by max tokens goes on where it stopped, in the same message', async ({ app }) => {
  await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 8 });
  await send(app, 'Tell me about the tides.');
  const cut = lastReply(app);
  await expect(cut).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(cut.getByTestId('message-stats')).toHaveAttribute('data-finish-reason', 'length');
  const first = (await cut.getByTestId('message-text').textContent()) ?? '';
  // What the page asks the host for, on the wire: a continuation of the reply, not a new turn after it.
  const sent: string[] = [];
  app.on('websocket', (ws) => ws.on('framesent', (f) => sent.push(String(f.payload))));
  await app.reload();
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await lastReply(app).hover();
  await lastReply(app).getByTestId('continue').click();
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  // One reply that goes on from its text (the model reads that text again, so its next tokens may differ from
  // one longer reply's), and its stats count all of it.
  await expect(app.getByTestId('message-assistant')).toHaveCount(1);
  const whole = (await lastReply(app).getByTestId('message-text').textContent()) ?? '';
  expect(whole.startsWith(first.trimEnd())).toBe(true);
  expect(whole.length).toBeGreaterThan(first.length);
  await expect(lastReply(app).getByTestId('message-stats')).toContainText('16 tok');
  const generate = sent.map((p) => JSON.parse(p) as { t: string; request?: Record<string, unknown> });
  const asked = generate.filter((m) => m.t === 'generate').map((m) => m.request);
  expect(asked).toHaveLength(1);
  expect(asked[0]).toMatchObject({ continueFinal: true });
  expect(((asked[0]?.messages ?? []) as Array<{ role: string; content: string }>).at(-1)).toEqual({
    role: 'assistant',
    content: first,
  });
  // New chats inherit the open one's settings: back to the defaults for the tests that follow.
  await setSettings(app, { greedy: false });
});

test("edit a reply: the model reads the person's text, and continue goes on from it", async ({ app, server }) => {
  await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 8 });
  await send(app, 'Tell me about the moon.');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const original = (await lastReply(app).getByTestId('message-text').textContent()) ?? '';

  // Esc leaves the reply as the model wrote it.
  await lastReply(app).hover();
  await lastReply(app).getByTestId('edit-reply').click();
  const input = app.getByTestId('reply-edit-input');
  await expect(input).toBeFocused();
  await input.fill('Something else');
  await input.press('Escape');
  await expect(lastReply(app).getByTestId('message-text')).toHaveText(original);
  await expect(lastReply(app).getByTestId('message-stats')).not.toContainText('edited');

  // An empty reply cannot be saved; the person's text can (Ctrl+Enter).
  await lastReply(app).hover();
  await lastReply(app).getByTestId('edit-reply').click();
  await input.fill('  ');
  await expect(app.getByTestId('reply-edit-save')).toBeDisabled();
  const mine = 'The moon is';
  await input.fill(mine);
  await input.press('Control+Enter');
  await expect(lastReply(app).getByTestId('message-text')).toHaveText(mine);
  await expect(lastReply(app).getByTestId('message-stats')).toContainText('edited');

  // Kept: after a reload the edit is there, and continue goes on from the person's text.
  const sent: string[] = [];
  app.on('websocket', (ws) => ws.on('framesent', (f) => sent.push(String(f.payload))));
  await expect(async () => {
    await app.reload();
    await expect(lastReply(app).getByTestId('message-text')).toHaveText(mine, { timeout: 2000 });
  }).toPass({ timeout: 20_000 });
  await lastReply(app).hover();
  await lastReply(app).getByTestId('continue').click();
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const whole = (await lastReply(app).getByTestId('message-text').textContent()) ?? '';
  const asked = sent
    .map((p) => JSON.parse(p) as { t: string; request?: { messages?: unknown[]; continueFinal?: boolean } })
    .filter((m) => m.t === 'generate')
    .map((m) => m.request);
  expect(asked).toHaveLength(1);
  expect(asked[0]?.continueFinal).toBe(true);
  expect(asked[0]?.messages?.at(-1)).toEqual({ role: 'assistant', content: mine });
  // What the model wrote is its greedy continuation of the person's text, as the API gives it.
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'default',
      messages: [
        { role: 'user', content: 'Tell me about the moon.' },
        { role: 'assistant', content: mine },
      ],
      continue_final_message: true,
      max_tokens: 8,
      temperature: 0,
    }),
  });
  expect(res.status).toBe(200);
  const api = (await res.json()) as { choices: Array<{ message: { content: string } }> };
  expect(whole).toBe(mine + (api.choices[0]?.message.content ?? ''));
  expect(whole.length).toBeGreaterThan(mine.length);
  // Its stats count the new tokens only; it stays marked as edited.
  await expect(lastReply(app).getByTestId('message-stats')).toContainText(/8 tok.*edited/);
  await setSettings(app, { greedy: false });
});

test('a finished reply is continued only once the person has edited it; a refusal is not edited', async ({
  app,
  server,
}) => {
  const now = Date.now();
  const id = `t-edit-${now}`;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Finished',
    createdAt: now,
    updatedAt: now,
    messages: [
      { id: 'u1', role: 'user', content: 'Hi', createdAt: now },
      {
        id: 'a1',
        role: 'assistant',
        content: 'Refused',
        createdAt: now + 1,
        stats: { error: { code: 'QUEUE_FULL', message: 'full' } },
      },
      { id: 'u2', role: 'user', content: 'Hi again', createdAt: now + 2 },
      { id: 'a2', role: 'assistant', content: 'Hello.', createdAt: now + 3, stats: { tokens: 2, finishReason: 'eos' } },
    ],
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  const refused = app.locator('[data-testid="message-assistant"][data-message-id="a1"]');
  await refused.hover();
  await expect(refused.getByTestId('edit-reply')).toHaveCount(0);
  await lastReply(app).hover();
  await expect(lastReply(app).getByTestId('continue')).toHaveCount(0);
  await lastReply(app).getByTestId('edit-reply').click();
  await app.getByTestId('reply-edit-input').fill('Hello. Also,');
  await app.getByTestId('reply-edit-save').click();
  await lastReply(app).hover();
  await expect(lastReply(app).getByTestId('continue')).toBeVisible();
  await expect(lastReply(app).getByTestId('message-stats')).toHaveText('2 tok · eos · edited');
});

test('JSON output: the thread’s replies are JSON objects, shown as a JSON code block', async ({ app }) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 120, seed: 5 });
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-json').check();
  await expect(app.getByTestId('settings-summary')).toContainText('JSON');
  await app.getByTestId('settings-toggle').click();
  await send(app, 'Reply in JSON.');
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const code = reply.getByTestId('message-text').locator('pre code');
  await expect(code).toHaveClass(/language-json/);
  const text = (await code.textContent()) ?? '';
  expect(text.startsWith('{')).toBe(true);
  const finish = await reply.getByTestId('message-stats').getAttribute('data-finish-reason');
  if (finish === 'eos') expect(typeof JSON.parse(text)).toBe('object');
  else expect(finish).toBe('length');
  // A new chat starts in plain text (the other settings carry over).
  await newChat(app);
  await expect(app.getByTestId('settings-summary')).toContainText('max 120');
  await expect(app.getByTestId('settings-summary')).not.toContainText('JSON');
});

test('JSON schema: replies conform to the thread’s schema; one kvdesk cannot enforce is refused in the thread', async ({
  app,
}) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 24, greedy: true });
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-json').check();
  const schemaBox = app.getByTestId('setting-json-schema');
  // Text that is not a JSON object is not kept, and the field says why.
  await schemaBox.fill('{"type": "object", "properties": {"answer": ');
  await schemaBox.blur();
  await expect(app.getByTestId('setting-error-jsonSchema')).toContainText('not JSON (');
  await expect(app.getByTestId('settings-summary')).not.toContainText('JSON schema');
  await schemaBox.fill('[1, 2]');
  await schemaBox.blur();
  await expect(app.getByTestId('setting-error-jsonSchema')).toHaveText(
    'an array, not an object: a JSON Schema is {…}: not taken',
  );
  await schemaBox.fill('{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}');
  await schemaBox.blur();
  await expect(app.getByTestId('settings-summary')).toContainText('JSON schema');
  await app.getByTestId('settings-toggle').click();
  await send(app, 'Is the sky blue?');
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  expect([{ ok: true }, { ok: false }]).toContainEqual(
    JSON.parse(((await reply.getByTestId('message-text').locator('pre code').textContent()) ?? '').trim()),
  );

  await app.getByTestId('settings-toggle').click();
  await schemaBox.fill('{"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}');
  await schemaBox.blur();
  await app.getByTestId('settings-toggle').click();
  await send(app, 'Give me an address.');
  await expect(lastReply(app).getByTestId('refusal')).toContainText('schema.properties.mail.format');
  // Later chats start in plain text again, without the schema.
  await newChat(app);
  await expect(app.getByTestId('settings-summary')).not.toContainText('JSON');
});

test('another tab opens the chat this one writes a reply in: it shows the reply on its way there, not interrupted, and sends nothing until it ends', async ({
  app,
}) => {
  const id = await longReplyOnSlow(app);
  await expect(lastReply(app)).toHaveAttribute('data-state', 'running');
  // The reply's text so far is saved as it goes (every second): the other tab gets it with the chat.
  await expect(lastReply(app).getByTestId('message-text')).not.toHaveText(/^\s*$/);
  const other = await app.context().newPage();
  try {
    await openServer(other, slow);
    await openChat(other, id);
    const there = lastReply(other);
    await expect(there).toHaveAttribute('data-state', 'elsewhere');
    await expect(there.getByTestId('elsewhere-note')).toContainText('Being written in another window or tab');
    await expect(there.getByTestId('interrupted-note')).toHaveCount(0);
    await expect(there.getByTestId('regenerate')).toHaveCount(0);
    await expect(there.getByTestId('continue')).toHaveCount(0);
    await expect(other.getByTestId('elsewhere-busy-note')).toBeVisible();
    await other.getByTestId('chat-input').fill('a question for later');
    await expect(other.getByTestId('send-button')).toBeDisabled();
    // Stopped there: here it is a stopped reply, and the message box sends again.
    await app.getByTestId('stop-button').click();
    await expect(lastReply(app)).toHaveAttribute('data-state', 'cancelled');
    await expect(there).toHaveAttribute('data-state', 'cancelled');
    await expect(other.getByTestId('elsewhere-busy-note')).toHaveCount(0);
    await expect(other.getByTestId('send-button')).toBeEnabled();
  } finally {
    await other.close();
  }
});

test('another tab renames a chat while this one writes a reply in it: the reply ends without undoing the rename', async ({
  app,
}) => {
  const id = await longReplyOnSlow(app);
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'running');

  const other = await app.context().newPage();
  try {
    await openServer(other, slow);
    const item = other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
    await item.dblclick();
    await other.getByTestId('thread-rename-input').fill('Renamed in the other tab');
    await other.getByTestId('thread-rename-input').press('Enter');
    // This tab shows the new name while its reply still runs…
    await expect(app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toContainText(
      'Renamed in the other tab',
    );
    await expect(reply).toHaveAttribute('data-state', 'running');
    await app.getByTestId('stop-button').click();
    await expect(reply).toHaveAttribute('data-state', 'cancelled');
    // …and its last save keeps both: the other tab's name and this tab's reply.
    await expect(async () => {
      const listed = (await savedThreads(slow)) as {
        value?: Array<{ id: string; title: string; messages: Array<{ role: string; content: string }> }>;
      };
      const saved = listed.value?.find((t) => t.id === id);
      expect(saved?.title).toBe('Renamed in the other tab');
      expect(saved?.messages.find((m) => m.role === 'assistant')?.content.length).toBeGreaterThan(0);
    }).toPass({ timeout: 10_000 });
    await expect(other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toContainText(
      'Renamed in the other tab',
    );
  } finally {
    await other.close();
  }
});

test('a model picked while the chat replies: the chat says the reply goes on with its model and the next goes to the pick', async ({
  app,
}) => {
  const other = await saveEndlessChat(slow, { maxNewTokens: 8 });
  const id = await longReplyOnSlow(app);
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'running');
  const picker = app.getByTestId('model-picker');
  const note = app.getByTestId('pick-while-replying');
  await expect(note).toHaveCount(0);
  await picker.selectOption('default');
  // Said where the person looks, while the reply keeps running on the model it started on.
  await expect(note).toHaveText('This reply goes on with slow-llama; your next message goes to default.');
  await expect(note).toHaveAttribute('role', 'status');
  await expect(reply).toHaveAttribute('data-state', 'running');
  // Another chat and back while it still runs: the pick is still this chat's.
  await openChat(app, other);
  await expect(note).toHaveCount(0);
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
  await expect(picker).toHaveValue('default');
  await expect(note).toBeVisible();
  // Picked back: nothing to say.
  await picker.selectOption('slow-llama');
  await expect(note).toHaveCount(0);
  await picker.selectOption('default');
  await expect(note).toBeVisible();
  // The reply ends: the pick is the chat's model, kept over a reload.
  await expect(reply).toHaveAttribute('data-state', 'running');
  await app.getByTestId('stop-button').click();
  await expect(reply).toHaveAttribute('data-state', 'cancelled');
  await expect(note).toHaveCount(0);
  await expect(picker).toHaveValue('default');
  await app.reload();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  await expect(picker).toHaveValue('default');
  // The next message goes to the pick.
  await send(app, 'and now?');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const threads = (await savedThreads(slow)) as {
    ok: boolean;
    value?: Array<{ id: string; modelId?: string }>;
  };
  expect(threads.value?.find((t) => t.id === id)?.modelId).toBe('default');
});
