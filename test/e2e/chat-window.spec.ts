/**
 * The chat window as a reviewer met it in a long chat: what the model no longer sees is faded but still usable (its
 * editor, buttons and refusals at full strength), a chat ending with the person's message can be answered, the
 * list keeps following the newest reply when the window changes size, and the chat list's keyboard focus is the
 * open chat's.
 */
import type { Locator, Page } from '@playwright/test';
import { expect, openSavedChat, test } from './fixtures';

/** The element's opacity as drawn: its own times its ancestors'. */
function drawnOpacity(locator: Locator): Promise<number> {
  return locator.evaluate((el) => {
    interface Node {
      parentElement: Node | null;
    }
    const w = globalThis as unknown as { getComputedStyle(e: Node): { opacity: string } };
    let o = 1;
    for (let n: Node | null = el as unknown as Node; n; n = n.parentElement) o *= Number(w.getComputedStyle(n).opacity);
    return o;
  });
}

/**
 * A chat whose latest reply left out its first two messages (the model's view starts at "Third question"), with a
 * refused reply above that line.
 */
function outgrownChat(page: Page, server: Parameters<typeof openSavedChat>[1]): Promise<string> {
  const ok = (n: number) => ({ tokens: 4, promptTokens: 100 + n, finishReason: 'eos' });
  return openSavedChat(page, server, 'outgrown', [
    { id: 'u0', role: 'user', content: 'First question' },
    { id: 'a0', role: 'assistant', content: 'First answer.', stats: ok(0) },
    { id: 'u1', role: 'user', content: 'Second question' },
    {
      id: 'a1',
      role: 'assistant',
      content: '',
      stats: { error: { code: 'KV_BUDGET_EXCEEDED', message: 'The request needs more KV than the budget has.' } },
    },
    { id: 'u2', role: 'user', content: 'Third question' },
    { id: 'a2', role: 'assistant', content: 'Third answer.', stats: ok(2) },
    { id: 'u3', role: 'user', content: 'Fourth question' },
    {
      id: 'a3',
      role: 'assistant',
      content: 'Fourth answer.',
      stats: { ...ok(3), contextDrop: { messages: 2, contextLength: 2048 } },
    },
  ]);
}

test('above the "no longer sees" line the text is faded, not the buttons, refusals or an editor', async ({
  app,
  server,
}) => {
  await outgrownChat(app, server);
  const list = app.getByTestId('message-list');
  await expect(list.getByTestId('context-start')).toHaveCount(1);
  const first = list.locator('[data-message-id="u0"]');
  // The hint stays: the text of a message the model no longer sees is faded.
  expect(await drawnOpacity(first.getByTestId('message-text'))).toBeLessThan(0.7);
  // Its buttons (shown on hover) and the refusal above the line are drawn at full strength.
  await first.hover();
  await expect.poll(() => drawnOpacity(first.getByTestId('edit-message'))).toBe(1);
  const refusal = list.locator('[data-message-id="a1"]').getByTestId('refusal');
  await expect(refusal).toBeVisible();
  expect(await drawnOpacity(refusal)).toBe(1);
  // Editing it: the editor, its warning and its buttons are all at full strength.
  await first.getByTestId('edit-message').click();
  const editor = list.locator('[data-message-id="u0"]');
  await expect(editor.getByTestId('edit-input')).toBeFocused();
  for (const id of ['edit-input', 'edit-removes', 'edit-branch', 'edit-send']) {
    expect(await drawnOpacity(editor.getByTestId(id)), id).toBe(1);
  }
  await app.keyboard.press('Escape');
  await expect(first.getByTestId('edit-message')).toBeVisible();
});

test("a chat ending with the person's message (imported so) shows its context and gets a reply on a click", async ({
  app,
  server,
}) => {
  await openSavedChat(
    app,
    server,
    'unanswered',
    [
      { id: 'u0', role: 'user', content: 'Hi there' },
      { id: 'a0', role: 'assistant', content: 'Hello! Here is a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |' },
      { id: 'u1', role: 'user', content: 'thanks' },
    ],
    { maxNewTokens: 8 },
  );
  // The meter counts the prompt the reply would read (no reply counted it yet).
  const meter = app.getByTestId('context-meter');
  await expect(meter).toHaveAttribute('data-count', 'recounted');
  expect(Number(await meter.getAttribute('data-used'))).toBeGreaterThan(0);
  await expect(meter).toHaveAttribute('title', /Counted as the reply to your last message would read it/);
  // Only the last message offers a reply.
  const list = app.getByTestId('message-list');
  await expect(list.getByTestId('get-reply')).toHaveCount(1);
  const ask = list.locator('[data-message-id="u1"]').getByRole('button', { name: 'Get a reply to your message 2' });
  await expect(ask).toBeVisible();
  await ask.click();
  const reply = list.getByTestId('message-assistant').last();
  await expect(reply).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  await expect(reply).toHaveAttribute('data-state', 'done');
  // The chat as it was, and the reply after it.
  await expect(list.locator('[data-message-id]')).toHaveCount(4);
  await expect(list.locator('[data-message-id]').nth(2)).toHaveAttribute('data-message-id', 'u1');
  await expect(list.getByTestId('get-reply')).toHaveCount(0);
  await expect(meter).toHaveAttribute('data-count', 'kept');
});

test('made narrower and shorter, or zoomed in, the list stays at the newest reply and follows it', async ({
  app,
  server,
}) => {
  await app.setViewportSize({ width: 1400, height: 900 });
  const messages = Array.from({ length: 30 }, (_, i) => ({
    id: `m${i}`,
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `Message ${i}: ${'words that wrap again when the window gets narrower '.repeat(6 + (i % 5))}`,
  }));
  await openSavedChat(app, server, 'resized', messages);
  const list = app.getByTestId('message-list');
  const fromEnd = () => list.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
  await expect.poll(fromEnd).toBeLessThan(2);
  for (const size of [
    { width: 1000, height: 600 },
    { width: 700, height: 500 },
    { width: 1400, height: 900 },
  ]) {
    await app.setViewportSize(size);
    await expect.poll(fromEnd, `at ${size.width}×${size.height}`).toBeLessThan(2);
    await expect(app.getByTestId('jump-to-end')).toHaveCount(0);
    await expect(list.locator('[data-message-id="m29"]')).toBeInViewport();
  }
  // A draft of many lines grows the message box and shortens the list: still at its end.
  await app.setViewportSize({ width: 1000, height: 600 });
  await expect.poll(fromEnd).toBeLessThan(2);
  await app.getByTestId('chat-input').fill(Array.from({ length: 8 }, (_, i) => `line ${i}`).join('\n'));
  await expect.poll(fromEnd).toBeLessThan(2);
  await expect(app.getByTestId('jump-to-end')).toHaveCount(0);
});

test("the chat list's keyboard stop is the open chat, also one opened without the list", async ({ app, server }) => {
  const picked = await openSavedChat(app, server, 'picked', [{ id: 'u0', role: 'user', content: 'A chat clicked' }]);
  // Opened another way: Ctrl+Shift+O makes a new chat and opens it.
  await app.getByTestId('chat-view').click();
  await app.keyboard.press('ControlOrMeta+Shift+O');
  await expect(app.getByTestId('chat-view')).not.toHaveAttribute('data-thread-id', picked);
  const open = (await app.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
  const title = (id: string) => app.locator(`#chat-list [data-thread-id="${id}"] [data-testid="thread-title"]`);
  await expect(title(open)).toBeVisible();
  // Tab into the list: the open chat, not the one clicked before (Enter there would switch away).
  await app.getByTestId('thread-search').focus();
  await app.keyboard.press('Tab');
  await expect(title(open)).toBeFocused();
  // The drawer of a narrow window focuses the same chat.
  await app.getByTestId('chat-input').focus();
  await app.setViewportSize({ width: 700, height: 800 });
  await app.getByTestId('sidebar-toggle').click();
  await expect(title(open)).toBeFocused();
  await app.keyboard.press('Escape');
  await app.setViewportSize({ width: 1400, height: 900 });
});
