/**
 * Find in a chat (Ctrl/Cmd+F), in Chromium against a real serve: a long thread (virtualized: most rows are not in
 * the page) is searched whole, each occurrence is scrolled to and marked (the CSS Custom Highlight API), Enter and
 * Shift+Enter go through them, Esc closes and takes the marks away.
 */
import { expect, test, wsCall } from './fixtures';

/** The current mark: its text, its message, and whether it is inside the message list's visible box. */
interface Mark {
  text: string;
  messageId: string | null;
  visible: boolean;
  marks: number;
}

const currentMark = (page: import('@playwright/test').Page) =>
  page.evaluate((): Mark | null => {
    interface Box {
      top: number;
      bottom: number;
      height: number;
    }
    interface Mark {
      toString(): string;
      getBoundingClientRect(): Box;
      startContainer: {
        parentElement: { closest(s: string): { getAttribute(n: string): string | null } | null } | null;
      };
    }
    const g = globalThis as unknown as {
      CSS: { highlights: Map<string, Set<Mark>> };
      document: { querySelector(s: string): { getBoundingClientRect(): Box } | null };
    };
    const all = g.CSS.highlights.get('kvdesk-find')?.size ?? 0;
    const cur = g.CSS.highlights.get('kvdesk-find-current');
    const range = cur ? [...cur][0] : undefined;
    if (!range) return null;
    const box = range.getBoundingClientRect();
    const list = g.document.querySelector('[data-testid="message-list"]')?.getBoundingClientRect();
    const el = range.startContainer.parentElement?.closest('[data-message-id]');
    return {
      text: range.toString(),
      messageId: el?.getAttribute('data-message-id') ?? null,
      visible: !!list && box.top >= list.top && box.bottom <= list.bottom && box.height > 0,
      marks: all + 1,
    };
  });

test('Ctrl+F finds a word in the whole thread, goes through it, and closes', async ({ app, server }) => {
  const now = Date.now();
  const id = `t-find-${now}`;
  const content = (i: number) =>
    i === 10
      ? 'The **needle** is here.'
      : i === 300
        ? 'Needle and needle, twice.'
        : i === 590
          ? 'İİ: a last needle.'
          : `message ${i}: hay, hay and more hay.`;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Haystack',
    createdAt: now,
    updatedAt: now,
    messages: Array.from({ length: 600 }, (_, i) => ({
      id: `m${i}`,
      role: i % 2 === 0 ? 'user' : 'assistant',
      content: content(i),
      createdAt: now + i,
    })),
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  await expect(app.getByTestId('message-assistant').last()).toContainText('message 599');

  await app.keyboard.press('Control+f');
  const input = app.getByTestId('find-input');
  await expect(input).toBeFocused();
  await input.fill('needle');
  const count = app.getByTestId('find-count');
  // Four in all; the newest first (the view is at the chat's end).
  await expect(count).toHaveText('4 / 4');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'needle', messageId: 'm590', visible: true });

  // Up: the second of message 300's two (case aside), then its first, then message 10's (inside bold text).
  await input.press('Shift+Enter');
  await expect(count).toHaveText('3 / 4');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'needle', messageId: 'm300', visible: true });
  await input.press('Shift+Enter');
  await expect(count).toHaveText('2 / 4');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'Needle', messageId: 'm300', visible: true });
  // Both of message 300's are marked while it is on screen.
  expect((await currentMark(app))?.marks).toBeGreaterThanOrEqual(2);
  await app.getByTestId('find-prev').click();
  await expect(count).toHaveText('1 / 4');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'needle', messageId: 'm10', visible: true });
  // Down from the first wraps to... the second; and past the last to the first.
  await input.press('Enter');
  await expect(count).toHaveText('2 / 4');
  await input.press('Enter');
  await input.press('Enter');
  await input.press('Enter');
  await expect(count).toHaveText('1 / 4');

  await input.fill('no such word');
  await expect(count).toHaveText('no matches');
  await expect.poll(() => currentMark(app)).toBeNull();

  // Ctrl+F again selects the box's text; Esc closes the bar and takes the marks away.
  await input.fill('hay');
  // Three in each of the 597 other messages; the last first.
  await expect(count).toHaveText('1791 / 1791');
  await app.getByTestId('message-list').click();
  await app.keyboard.press('Control+f');
  await expect(input).toBeFocused();
  await app.keyboard.type('needle');
  await expect(input).toHaveValue('needle');
  await input.press('Escape');
  await expect(app.getByTestId('find-bar')).toHaveCount(0);
  expect(
    await app.evaluate(
      () => (globalThis as unknown as { CSS: { highlights: Map<string, unknown> } }).CSS.highlights.size,
    ),
  ).toBe(0);
});

test('Ctrl+F finds an accent however it was typed, as the chat list does, and marks the text as written', async ({
  app,
  server,
}) => {
  const now = Date.now();
  const id = `t-find-accent-${now}`;
  const contents = ['Le caf\u00e9, le CAF\u00c9.', 'Un cafe\u0301 noir, \u0130\u0130 \u0130stanbul.', 'a cafe, plain'];
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Accents',
    createdAt: now,
    updatedAt: now,
    messages: contents.map((content, i) => ({
      id: `m${i}`,
      role: i % 2 === 0 ? 'user' : 'assistant',
      content,
      createdAt: now + i,
    })),
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  await expect(app.getByTestId('message-user').last()).toContainText('plain');

  await app.keyboard.press('Control+f');
  const input = app.getByTestId('find-input');
  const count = app.getByTestId('find-count');
  // Typed decomposed (e + U+0301): the composed ones are found too, each marked on its own characters.
  await input.fill('cafe\u0301');
  await expect(count).toHaveText('3 / 3');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'cafe\u0301', messageId: 'm1' });
  await input.press('Shift+Enter');
  await expect(count).toHaveText('2 / 3');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'CAF\u00c9', messageId: 'm0' });
  await input.press('Shift+Enter');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'caf\u00e9', messageId: 'm0' });
  // Typed composed: the decomposed one is found; a word without the accent is another word, as in the list.
  await input.fill('f\u00e9 noir');
  await expect(count).toHaveText('1 / 1');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'fe\u0301 noir', messageId: 'm1' });
  await input.fill('cafe');
  await expect(count).toHaveText('1 / 1');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'cafe', messageId: 'm2' });
  // After characters whose lower case is longer (İ lowers to i + U+0307), the mark is still on the word.
  await input.fill('stanbul');
  await expect(count).toHaveText('1 / 1');
  await expect.poll(() => currentMark(app)).toMatchObject({ text: 'stanbul', messageId: 'm1' });
});
