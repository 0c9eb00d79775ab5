/**
 * The settings panel's fields as a person types in them, and the notices that name a chat: a stop string holding a
 * line break (written `\n`), a seed of -1 shown as random at once, a right-to-left title in a notice kept in its place
 * (and copied without invisible marks).
 */

import type { Page } from '@playwright/test';
import { expect, lastReply, newChat, send, setSettings, test, wsCall } from './fixtures';
import type { ServeHandle } from './serve';

interface Saved {
  stop?: string[];
  sampling?: { seed?: number };
  messages: Array<{ role: string; content: string; stats?: { finishReason?: string } }>;
}

/** A chat of one exchange saved as another window would save it, titled `title`, then opened: its id. */
async function openTitled(
  app: Page,
  server: ServeHandle,
  title: string,
  fields: Record<string, unknown> = {},
): Promise<string> {
  const now = Date.now();
  const id = `t-fields-${now}`;
  const messages = [
    { id: 'u0', role: 'user', content: 'Hi', createdAt: now },
    { id: 'a0', role: 'assistant', content: 'Hello.', createdAt: now + 1, stats: { tokens: 2, finishReason: 'eos' } },
  ];
  const r = await wsCall(server, 'saveThread', { id, title, createdAt: now, updatedAt: now, ...fields, messages });
  expect(r.ok, JSON.stringify(r)).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  return id;
}

/** What of the page's DOM the notice test reads (these tests are typed without the DOM's types). */
interface RangeLike {
  setStart(node: unknown, offset: number): void;
  setEnd(node: unknown, offset: number): void;
  selectNodeContents(node: unknown): void;
  getBoundingClientRect(): { x: number };
}
interface Dom {
  document: {
    createTreeWalker(root: unknown, show: number): { nextNode(): { textContent: string | null } | null };
    createRange(): RangeLike;
  };
  getSelection(): { removeAllRanges(): void; addRange(range: RangeLike): void; toString(): string } | null;
}

async function saved(server: ServeHandle, id: string): Promise<Saved> {
  const r = await wsCall(server, 'openThread', { id });
  expect(r.ok).toBe(true);
  return r.value as Saved;
}

/** The saved chat's last reply, once it is the one done with `finish` (saves follow the page's by a moment). */
async function savedReply(server: ServeHandle, id: string, finish: string): Promise<string> {
  let text = '';
  await expect
    .poll(async () => {
      const last = (await saved(server, id)).messages.at(-1);
      text = last?.role === 'assistant' ? last.content : '';
      return last?.stats?.finishReason;
    })
    .toBe(finish);
  return text;
}

test('a stop string holding a line break, written \\n in the field, ends the reply there; saved ones show so', async ({
  app,
  server,
}) => {
  const id = await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 64 });
  // The default model's greedy reply to this holds a line break (a letter before it and after it).
  await send(app, 'Hello there!');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const plain = await savedReply(server, id, 'length');
  const at = plain.search(/[^\s\\]{2}\n[^\s\\]?/);
  expect(at, `a greedy reply with a line break after two letters: ${JSON.stringify(plain)}`).toBeGreaterThanOrEqual(0);
  const stop = plain.slice(at, at + 4);
  expect(plain.indexOf(stop)).toBe(at);
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-stop').fill(`###\n${stop.replace('\n', '\\n')}`);
  await app.getByTestId('setting-stop').blur();
  await expect(app.getByTestId('settings-summary')).toContainText('stop ×2');
  await expect.poll(async () => (await saved(server, id)).stop).toEqual(['###', stop]);
  await app.getByTestId('settings-toggle').click();
  await lastReply(app).hover();
  await app.getByTestId('regenerate').click();
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(lastReply(app).getByTestId('message-stats')).toHaveAttribute('data-finish-reason', 'stop');
  expect(await savedReply(server, id, 'stop')).toBe(plain.slice(0, at));
  // Opened again, the field writes the saved line break as it was typed.
  await app.getByTestId('settings-toggle').click();
  const field = app.getByTestId('setting-stop');
  await expect(field).toHaveValue(`###\n${stop.replace('\n', '\\n')}`);
  await expect(field).toHaveAttribute('aria-describedby', 'setting-stop-hint');
  await expect(app.getByTestId('setting-stop-hint')).toHaveText(
    'In a line, \\n is a line break, \\t a tab and \\\\ a backslash.',
  );
  // Too long a stop is refused, said beside the field (the hint still describes it); its escapes count as one.
  await field.fill(`${'\\n'.repeat(200)}x`);
  await field.blur();
  await expect(app.getByTestId('setting-error-stop')).toHaveText(
    'the stop string on line 1 has 201 characters: at most 200 (\\n counts as one): not taken',
  );
  await expect(field).toHaveAttribute('aria-describedby', 'setting-error-stop setting-stop-hint');
  await field.fill('');
  await field.blur();
  await expect(field).toHaveAttribute('aria-describedby', 'setting-stop-hint');
  await expect(app.getByTestId('settings-summary')).not.toContainText('stop ×');
  await app.getByTestId('settings-toggle').click();

  // A chat saved with stops holding a line break and a backslash: shown escaped, kept as they are when left.
  const stops = ['\n\nUser:', 'C:\\new'];
  const greeting = await openTitled(app, server, 'saved stops', { stop: stops });
  await app.getByTestId('settings-toggle').click();
  await expect(app.getByTestId('setting-stop')).toHaveValue('\\n\\nUser:\nC:\\\\new');
  await app.getByTestId('setting-stop').focus();
  await app.getByTestId('setting-stop').press('End');
  await app.getByTestId('setting-stop').blur();
  await app.getByTestId('system-prompt').fill('Be brief.');
  await app.getByTestId('system-prompt').blur();
  await expect
    .poll(async () => (await saved(server, greeting)) as unknown)
    .toMatchObject({ systemPrompt: 'Be brief.' });
  expect((await saved(server, greeting)).stop).toEqual(stops);
  await app.getByTestId('settings-toggle').click();
});

test('a seed of -1 shows as random as soon as it is typed, and the chat keeps no seed', async ({ app, server }) => {
  const id = await newChat(app);
  await app.getByTestId('settings-toggle').click();
  const seed = app.getByTestId('setting-seed');
  await seed.fill('7');
  await seed.blur();
  await expect(app.getByTestId('settings-summary')).toContainText('seed 7');
  await seed.fill('-1');
  await expect(seed).toHaveValue('');
  await expect(seed).toHaveAttribute('placeholder', 'random');
  await expect(seed).toBeFocused();
  await seed.blur();
  await expect(seed).toHaveValue('');
  await expect(app.getByTestId('settings-summary')).not.toContainText('seed');
  await expect.poll(async () => (await saved(server, id)).sampling?.seed ?? 'none').toBe('none');
  await app.getByTestId('settings-toggle').click();
});

test('a notice naming a right-to-left chat keeps the title in its place; copied, it holds no invisible marks', async ({
  app,
  server,
}) => {
  const title = 'אבג!';
  const id = await openTitled(app, server, title);
  expect((await wsCall(server, 'deleteThread', { id })).ok).toBe(true);
  const notice = app.getByTestId('notice');
  await expect(notice).toContainText(`The chat “${title}” you had open was deleted`);
  // The title reads right to left: its "!" ends it on the left, not after the English sentence's quote.
  const place = await notice.evaluate((el, t) => {
    const { document } = globalThis as unknown as Dom;
    const walker = document.createTreeWalker(el, 4 /* NodeFilter.SHOW_TEXT */);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const at = node.textContent?.indexOf(t) ?? -1;
      if (at < 0) continue;
      const x = (from: number) => {
        const range = document.createRange();
        range.setStart(node, at + from);
        range.setEnd(node, at + from + 1);
        return range.getBoundingClientRect().x;
      };
      return { alef: x(0), bang: x(3) };
    }
    return null;
  }, title);
  expect(place, 'the title in one text node of the notice').not.toBeNull();
  expect(place?.bang).toBeLessThan(place?.alef ?? Number.NEGATIVE_INFINITY);
  // What a person copies from it: the words as shown, no U+2068/U+2069 that would spoil a paste into a search.
  const copied = await notice
    .locator('span')
    .first()
    .evaluate((el) => {
      const dom = globalThis as unknown as Dom;
      const range = dom.document.createRange();
      range.selectNodeContents(el);
      const selection = dom.getSelection();
      selection?.removeAllRanges();
      selection?.addRange(range);
      return selection?.toString() ?? '';
    });
  expect(copied).toContain(`The chat “${title}” you had open was deleted`);
  expect(copied).not.toMatch(/[\u2066-\u2069]/);
});
