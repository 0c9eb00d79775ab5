/**
 * Messages left without a reply — refused, stopped while queued, or cut off by a reload before the reply began — on
 * a model whose chat template insists that user and assistant turns alternate (as Gemma's, Mistral's and Llama 2's
 * do): the chat goes on past them (the model no longer sees them, and the chat says so), and a reply the reload cut
 * off shows where it was, to regenerate. The slow model (endless.ts), loaded with that template, on one running slot
 * so that a second chat's reply queues.
 */
import type { Page } from '@playwright/test';
import { ALTERNATING_CHATML } from '../helpers/chat-templates';
import { slowModel } from '../helpers/models';
import { openChat, openServer, saveEndlessChat } from './endless';
import { expect, lastReply, send, test, wsCall } from './fixtures';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startServe(['--max-running', '1']);
  const loaded = await wsCall(
    server,
    'loadModel',
    { path: slowModel(), chatTemplate: ALTERNATING_CHATML },
    undefined,
    90_000,
  );
  expect(loaded.ok).toBe(true);
});
test.afterAll(async () => {
  await server.stop();
});

/** Sets the KV budget's limit in the inspector (no chat holds KV yet on this serve: nothing is asked). */
async function setLimit(page: Page, limit: string, bytes: number): Promise<void> {
  await page.getByTestId('budget-limit-input').fill(limit);
  await page.getByTestId('budget-limit-apply').click();
  await expect(page.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(bytes));
}

test('a refused message, then another once there is room: the chat goes on past the refused one, and says so', async ({
  page,
}) => {
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 4 });
  await openServer(page, server);
  await openChat(page, id);
  // 64 KiB holds 4 tokens of the slow model (16 KiB each): less than any chat prompt.
  await setLimit(page, '64KiB', 64 * 1024);
  await send(page, 'First question');
  await expect(lastReply(page).getByTestId('refusal')).toHaveAttribute('data-code', 'KV_BUDGET_EXCEEDED');
  await page.getByTestId('budget-use-derived').click();
  await expect(page.getByTestId('budget-derivation')).toHaveAttribute('data-source', 'derived');

  // Answered: the refused message is not sent again before it (two user turns in a row, which this template
  // refuses, as it refused every later message of the chat).
  await send(page, 'Second question');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(lastReply(page).getByTestId('refusal')).toHaveCount(0);
  await expect(lastReply(page).getByTestId('message-stats')).toContainText('4 tok');
  // The refused exchange stays in the chat, which says the model no longer sees it.
  const refused = page.getByRole('article', { name: 'Reply 1' });
  await expect(refused.getByTestId('refusal')).toHaveAttribute('data-code', 'KV_BUDGET_EXCEEDED');
  await expect(refused.getByTestId('left-out-note')).toHaveText(
    'Left out: the chat went on without a reply to your message above, so the model no longer sees it (send it again to ask it).',
  );
  await expect(refused).toHaveAttribute('data-left-out', 'true');
  await expect(page.getByRole('article', { name: 'Your message 1' })).toHaveAttribute('data-left-out', 'true');
  await expect(page.getByRole('article', { name: 'Reply 2' }).getByTestId('left-out-note')).toHaveCount(0);
  await expect(page.getByRole('article', { name: 'Your message 2' })).not.toHaveAttribute('data-left-out');
});

test('a reload while a reply waits in the queue keeps it, interrupted there, to regenerate; a stopped one is passed by', async ({
  page,
}) => {
  // The one running slot is taken by a reply that runs until it is stopped; this chat's replies queue behind it.
  const busy = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 });
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 4 });
  await openServer(page, server);
  await openChat(page, busy);
  await send(page, 'Tell me a long story');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
  await openChat(page, id);
  await send(page, 'A question I stop while it waits');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'queued');
  await page.keyboard.press('Escape');
  await expect(lastReply(page).getByTestId('stopped-empty')).toHaveAttribute('data-while', 'queued');
  await send(page, 'A question still waiting at the reload');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'queued');

  // The page goes while the reply waits (its chat's request, and the other's, end with it).
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  await expect(page.getByTestId('message-user').getByTestId('message-text')).toHaveText([
    'A question I stop while it waits',
    'A question still waiting at the reload',
  ]);
  // The reply is there, saying where it was and what to do: not a question alone with nothing to do.
  const reply = page.getByRole('article', { name: 'Reply 2' });
  await expect(reply).toHaveAttribute('data-state', 'interrupted');
  await expect(reply.getByTestId('stopped-empty')).toHaveText('stopped while queued — no reply');
  await expect(reply.getByTestId('interrupted-note')).toHaveText(
    'Interrupted: the page was closed or reloaded (or kvdesk stopped) before this reply began (regenerate it).',
  );
  // The stopped one before it is passed by: the chat went on without its reply.
  await expect(page.getByRole('article', { name: 'Reply 1' }).getByTestId('left-out-note')).toBeVisible();
  await expect(reply.getByTestId('left-out-note')).toHaveCount(0);

  // Regenerate, from the keyboard: answered (the stopped question is not sent before it, which the template refuses).
  const regenerate = reply.getByRole('button', { name: 'Regenerate reply 2' });
  await regenerate.focus();
  await page.keyboard.press('Enter');
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(reply.getByTestId('refusal')).toHaveCount(0);
  await expect(reply.getByTestId('stopped-empty')).toHaveCount(0);
  await expect(reply.getByTestId('interrupted-note')).toHaveCount(0);
  await expect(reply.getByTestId('message-stats')).toContainText('4 tok');
});
