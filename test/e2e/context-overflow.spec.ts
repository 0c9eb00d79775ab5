/**
 * A chat that outgrows the model's context, in Chromium, against a real serve with a generated model of a
 * 256-token context: the chat goes on, leaving out its oldest messages (the reply says so, a line marks where the
 * model's view starts, the messages above it are dimmed, and all of it survives a reload); a thread set to
 * refuse gets the refusal instead.
 */
import { test as base, expect, type Page } from '@playwright/test';
import { smallContextModel } from '../helpers/models';
import { lastReply, newChat, send, setSettings, wsCall } from './fixtures';
import { type ServeHandle, startServe } from './serve';

const test = base.extend<object, { smallServer: ServeHandle }>({
  smallServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const server = await startServe(['--model', smallContextModel()]);
      await use(server);
      await server.stop();
    },
    { scope: 'worker', timeout: 120_000 },
  ],
});

// Tall enough that the virtualized list mounts every message of these chats.
test.use({ viewport: { width: 1280, height: 2400 } });

const QUESTION = (i: number) =>
  `Question ${i}: what is the name of the river that runs through the old town number ${i}, and is it long?`;

async function openSmallChat(page: Page, server: ServeHandle): Promise<void> {
  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await page.getByTestId('model-picker').selectOption('context-256');
  await setSettings(page, { greedy: true, maxNewTokens: 16 });
}

/** Sends a message and waits for its reply to end (done or refused). */
async function turn(page: Page, text: string): Promise<void> {
  await send(page, text);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|error/);
}

test('a chat longer than the context goes on without its oldest messages, and says so', async ({
  page,
  smallServer: server,
}) => {
  await openSmallChat(page, server);
  // About 45 tokens a turn: the fifth or sixth no longer fits with the first ones. The header's meter fills
  // up turn by turn (prompt and reply, of 256).
  const meter = page.getByTestId('context-meter');
  const used = async () => Number(await meter.getAttribute('data-used'));
  let i = 1;
  let before = 0;
  while ((await page.getByTestId('context-drop-note').count()) === 0) {
    expect(i, 'the chat should outgrow 256 tokens within 10 turns').toBeLessThanOrEqual(10);
    // The draft says, before it is sent, whether the oldest messages would have to go.
    await page.getByTestId('chat-input').fill(QUESTION(i));
    await expect(page.getByTestId('draft-measure')).toHaveAttribute('data-context', '256');
    const said = (await page.getByTestId('draft-measure').textContent()) ?? '';
    const predicted = said.includes('would be left out');
    // In words: "2 more of the oldest messages would be left out".
    if (predicted) expect(said).toMatch(/· \d+ more of the oldest messages would be left out/);
    await turn(page, QUESTION(i++));
    await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
    expect(await lastReply(page).getByTestId('context-drop-note').count()).toBe(predicted ? 1 : 0);
    await expect(meter).toHaveAttribute('data-context', '256');
    if ((await page.getByTestId('context-drop-note').count()) === 0) {
      expect(await used()).toBeGreaterThan(before);
      before = await used();
    }
  }
  // Leaving turns out made room: the meter fell, and says how many messages are out of view.
  expect(await used()).toBeLessThan(before);
  expect(await used()).toBeLessThanOrEqual(256);
  // Typing the next message says, before it is sent, what it would read (and whether more would go).
  const measure = page.getByTestId('draft-measure');
  await page.getByTestId('chat-input').fill(QUESTION(i));
  await expect(measure).toHaveAttribute('data-context', '256');
  expect(Number(await measure.getAttribute('data-prompt-tokens'))).toBeGreaterThan(await used());
  await page.getByTestId('chat-input').fill('');
  await expect(measure).toHaveCount(0);
  const note = lastReply(page).getByTestId('context-drop-note');
  await expect(note).toContainText("the chat outgrew the model's 256-token context");
  const dropped = Number(/first (\d+) messages/.exec((await note.textContent()) ?? '')?.[1]);
  expect(dropped).toBeGreaterThan(0);
  await expect(meter).toContainText(`${dropped} out of view`);
  // The line sits above the first message the model still sees; the ones above it are dimmed.
  const divider = page.getByTestId('context-start');
  await expect(divider).toHaveCount(1);
  const startRow = page.locator('.message-row', { has: divider });
  await expect(startRow.getByTestId('message-user')).toContainText(`Question ${dropped / 2 + 1}:`);
  await expect(page.locator('.message-row.outside-context')).toHaveCount(dropped);
  await expect(startRow).not.toHaveClass(/outside-context/);

  // The next turn keeps the same start (so the thread's KV carries over) while it fits.
  await turn(page, 'Which one is the longest?');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(lastReply(page).getByTestId('context-drop-note')).toContainText(`first ${dropped} messages`);

  // Picking another model: the meter measures against the context the next turn has, that model's.
  const picker = page.getByTestId('model-picker');
  const other = await picker
    .locator('option')
    .evaluateAll((os) =>
      os.map((o) => (o as unknown as { value: string }).value).find((v) => v !== '' && v !== 'context-256'),
    );
  expect(other, 'serve loads the default model beside the small one').toBeDefined();
  await picker.selectOption(other as string);
  await expect(meter).not.toHaveAttribute('data-context', '256');
  await picker.selectOption('context-256');
  await expect(meter).toHaveAttribute('data-context', '256');

  // All of it is stored with the thread.
  await page.reload();
  await expect(page.getByTestId('context-start')).toHaveCount(1);
  await expect(page.locator('.message-row.outside-context')).toHaveCount(dropped);
});

test('a thread set to stop at the limit gets the refusal instead', async ({ page, smallServer: server }) => {
  await openSmallChat(page, server);
  await page.getByTestId('settings-toggle').click();
  await page.getByTestId('setting-contextOverflow').selectOption('refuse');
  await expect(page.getByTestId('settings-summary')).toContainText('no context overflow');
  await page.getByTestId('settings-toggle').click();
  let i = 1;
  do {
    expect(i, 'the chat should outgrow 256 tokens within 10 turns').toBeLessThanOrEqual(10);
    // Before sending, the draft's measure says whether it will fit.
    await page.getByTestId('chat-input').fill(QUESTION(i));
    const measure = page.getByTestId('draft-measure');
    await expect(measure).toHaveAttribute('data-context', '256');
    const tooLong = Number(await measure.getAttribute('data-prompt-tokens')) >= 256;
    await expect(measure).toHaveClass(tooLong ? /over/ : /^(?!.*over)/);
    await turn(page, QUESTION(i++));
    // What the draft said is what happened: refused exactly when it said too long.
    expect(await lastReply(page).getAttribute('data-state')).toBe(tooLong ? 'error' : 'done');
  } while ((await lastReply(page).getAttribute('data-state')) !== 'error');
  await expect(lastReply(page).getByTestId('refusal')).toHaveAttribute('data-code', 'CONTEXT_OVERFLOW');
  await expect(page.getByTestId('context-drop-note')).toHaveCount(0);
  await expect(page.getByTestId('context-start')).toHaveCount(0);
});

test('a model picked in a chat is its model from then on, before any reply: opening it again or reloading keeps the pick', async ({
  page,
  smallServer: server,
}) => {
  await openSmallChat(page, server);
  const small = (await page.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
  await turn(page, 'Hello small model');
  const other = await newChat(page);
  await page.getByTestId('model-picker').selectOption('default');
  await turn(page, 'Hello default model');

  const picker = page.getByTestId('model-picker');
  const open = (id: string) =>
    page.getByTestId('thread-list').locator(`[data-thread-id="${id}"] [data-testid="thread-title"]`).click();
  // The chat that last ran on context-256 gets default, with no reply since.
  await open(small);
  await expect(picker).toHaveValue('context-256');
  await picker.selectOption('default');
  await open(other);
  await expect(picker).toHaveValue('default');
  // …and the other chat context-256.
  await picker.selectOption('context-256');
  await open(small);
  await expect(picker).toHaveValue('default');
  await open(other);
  await expect(picker).toHaveValue('context-256');
  // Kept with the chats: after a reload too.
  await open(small);
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', small, { timeout: 2000 });
    await expect(picker).toHaveValue('default', { timeout: 2000 });
  }).toPass({ timeout: 20_000 });
  await open(other);
  await expect(picker).toHaveValue('context-256');
});

test('a chat keeps its model: opening it again, or reloading, picks it; a model no longer loaded is named', async ({
  page,
  smallServer: server,
}) => {
  await openSmallChat(page, server);
  const small = (await page.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
  await turn(page, 'Hello small model');
  // Another chat, with the default model.
  const other = await newChat(page);
  await page.getByTestId('model-picker').selectOption('default');
  await turn(page, 'Hello default model');

  const picker = page.getByTestId('model-picker');
  const open = (id: string) =>
    page.getByTestId('thread-list').locator(`[data-thread-id="${id}"] [data-testid="thread-title"]`).click();
  await open(small);
  await expect(picker).toHaveValue('context-256');
  await open(other);
  await expect(picker).toHaveValue('default');
  await open(small);
  await expect(picker).toHaveValue('context-256');
  // The last open chat opens again after a reload, with its model.
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', small, { timeout: 2000 });
    await expect(picker).toHaveValue('context-256', { timeout: 2000 });
  }).toPass({ timeout: 20_000 });
  await expect(page.getByTestId('thread-model-note')).toHaveCount(0);

  // Its model unloaded: the picker stays as it is, and the chat says which model it was with.
  await open(other);
  expect((await wsCall(server, 'unloadModel', { id: 'context-256' })).ok).toBe(true);
  try {
    await expect(picker.locator('option[value="context-256"]')).toHaveCount(0);
    await open(small);
    await expect(picker).toHaveValue('default');
    await expect(page.getByTestId('thread-model-note')).toContainText('context-256');
    // One sentence, the names inside it with a space each side (no flex gap around the bold names).
    const note = page.getByTestId('thread-model-note-text');
    await expect(note).toHaveText(/^This chat was with context-256, which is not loaded: new replies go to \S+\./);
    const gaps = await note.evaluate((el) => {
      const bold = [...el.querySelectorAll('b')].map((b) => b.getBoundingClientRect());
      const text = el.getBoundingClientRect();
      return { count: bold.length, inline: bold.every((b) => b.top >= text.top - 1 && b.bottom <= text.bottom + 1) };
    });
    expect(gaps).toEqual({ count: 2, inline: true });
  } finally {
    expect((await wsCall(server, 'loadModel', { path: smallContextModel() })).ok).toBe(true);
  }
  await expect(picker.locator('option[value="context-256"]')).toHaveCount(1);
});
