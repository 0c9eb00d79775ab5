/**
 * A thinking model in Chromium, against a real serve with a generated thinking model (Qwen3's switch, replies
 * opened with <think>): the reply's reasoning folds above it ("Thought for …"), opens on a click, and is the
 * reasoning the OpenAI API gives for the same greedy turn, as the reply is its content; it survives a reload;
 * the thread's "reply at once" setting turns the reasoning off (the template closes it), and the settings say
 * what the current model does; with JSON output it reasons first, and its reply is the JSON.
 */
import { test as base, expect, type Page } from '@playwright/test';
import { thinkingModel } from '../helpers/models';
import { apiThinkingQuestion, lastReply, newChat, send, setSettings, type ThinkingQuestion } from './fixtures';
import { type ServeHandle, startServe } from './serve';

const test = base.extend<object, { thinkServer: ServeHandle & { natural: ThinkingQuestion } }>({
  thinkServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const server = await startServe(['--model', thinkingModel()]);
      // The random model ends its reasoning by itself on some prompts: find one through the API.
      const natural = await apiThinkingQuestion(server.url);
      await use({ ...server, natural });
      await server.stop();
    },
    { scope: 'worker', timeout: 180_000 },
  ],
});

async function openThinkingChat(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await page.getByTestId('model-picker').selectOption('thinking');
  await setSettings(page, { greedy: true, maxNewTokens: 16 });
}

test('a thinking model: the reasoning folds above the reply, opens on a click, and can be turned off', async ({
  page,
  thinkServer: server,
}) => {
  const { natural } = server;
  await openThinkingChat(page, server.url);
  await send(page, natural.question);
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'done');
  // Folded once the reply is written, saying how long it thought and in how many tokens.
  const reasoning = reply.getByTestId('reasoning');
  await expect(reasoning).toHaveAttribute('data-open', 'false');
  await expect(reasoning.getByTestId('reasoning-toggle')).toHaveText(
    new RegExp(`^▸ Thought for [\\d.,]+ m?s · ${natural.reasoningTokens} tok$`),
  );
  await expect(reasoning.getByTestId('reasoning-text')).toHaveCount(0);
  // The reply is the answer alone; the reasoning, opened, is the API's for the same turn.
  await expect(reply.getByTestId('message-text')).toHaveText(natural.content.trim());
  await reasoning.getByTestId('reasoning-toggle').click();
  await expect(reasoning.getByTestId('reasoning-text')).toHaveText(natural.reasoning);
  await reasoning.getByTestId('reasoning-toggle').click();
  await expect(reasoning.getByTestId('reasoning-text')).toHaveCount(0);

  // Kept with the chat (the model picker is the window's: pick the thinking model again).
  await page.reload();
  await page.getByTestId('model-picker').selectOption('thinking');
  await expect(lastReply(page).getByTestId('reasoning-toggle')).toContainText('Thought');
  await lastReply(page).getByTestId('reasoning-toggle').click();
  await expect(lastReply(page).getByTestId('reasoning-text')).toHaveText(natural.reasoning);

  // A reply cut off while it reasoned is all reasoning: it stays open, and says it never replied.
  await setSettings(page, { maxNewTokens: 2 });
  await send(page, 'And at sunset?');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(lastReply(page).getByTestId('reasoning')).toHaveAttribute('data-open', 'true');
  await expect(lastReply(page).getByTestId('reasoning-toggle')).toContainText(
    '· 2 tok · ran out of tokens before it replied',
  );
  await expect(lastReply(page).getByTestId('reasoning-text')).not.toBeEmpty();
  await expect(lastReply(page).getByTestId('message-text')).toBeEmpty();
  // With no answer to copy, its reasoning is what the copy button gives.
  await lastReply(page).hover();
  await expect(lastReply(page).getByTestId('message-copy')).toHaveCount(0);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await lastReply(page).getByTestId('message-copy-reasoning').click();
  const cutReasoning = (await lastReply(page).getByTestId('reasoning-text').textContent()) ?? '';
  await expect
    .poll(() =>
      page.evaluate(() =>
        (
          globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }
        ).navigator.clipboard.readText(),
      ),
    )
    .toBe(cutReasoning);
  await setSettings(page, { maxNewTokens: 16 });

  // A thinking budget of 2: the reasoning is closed for it after two tokens, and it answers.
  await page.getByTestId('settings-toggle').click();
  await page.getByTestId('setting-thinkingBudget').fill('2');
  await page.getByTestId('setting-thinkingBudget').blur();
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('settings-summary')).toContainText('thinking budget 2');
  await send(page, 'Why is the sea blue?');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(lastReply(page).getByTestId('reasoning-toggle')).toContainText(/· [2-4] tok$/);
  await expect(lastReply(page).getByTestId('message-text')).not.toBeEmpty();
  await page.getByTestId('settings-toggle').click();
  await page.getByTestId('setting-thinkingBudget').fill('');
  await page.getByTestId('setting-thinkingBudget').blur();
  await page.getByTestId('settings-toggle').click();

  // A reasoning effort: in the summary, and in the request the page sends.
  const sent: Array<Record<string, unknown>> = [];
  page.on('websocket', (ws) =>
    ws.on('framesent', (f) => {
      const m = JSON.parse(String(f.payload)) as { t: string; request?: Record<string, unknown> };
      if (m.t === 'generate' && m.request) sent.push(m.request);
    }),
  );
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await page.getByTestId('model-picker').selectOption('thinking');
  await page.getByTestId('settings-toggle').click();
  await page.getByTestId('setting-reasoningEffort').selectOption('low');
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('settings-summary')).toContainText('effort low');
  await send(page, 'Why is the grass green?');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  expect(sent.at(-1)?.reasoningEffort).toBe('low');
  await page.getByTestId('settings-toggle').click();
  await page.getByTestId('setting-reasoningEffort').selectOption('default');
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('settings-summary')).not.toContainText('effort');

  // Turned off: the settings say what this model does, and the next reply has no reasoning.
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('thinking-note')).toContainText('its template has a switch for it');
  await page.getByTestId('setting-thinking').selectOption('off');
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('settings-summary')).toContainText('thinking off');
  await send(page, natural.question);
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  await expect(lastReply(page).getByTestId('reasoning')).toHaveCount(0);
  await expect(lastReply(page).getByTestId('message-text')).not.toBeEmpty();
});

test('JSON output on a thinking model: it reasons first, and its reply is the JSON', async ({
  page,
  thinkServer: server,
}) => {
  const schema = {
    type: 'object',
    properties: { answer: { type: 'string', enum: ['yes', 'no'] } },
    required: ['answer'],
    additionalProperties: false,
  };
  // The same greedy turn through the API: its reasoning, then its JSON content.
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'thinking',
      messages: [{ role: 'user', content: server.natural.question }],
      max_tokens: 128,
      temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } },
    }),
  });
  const api = ((await res.json()) as { choices: Array<{ message: { content: string; reasoning_content?: string } }> })
    .choices[0]?.message;
  expect(api?.reasoning_content?.length).toBeGreaterThan(0);
  expect(JSON.parse(api?.content ?? '')).toHaveProperty('answer');

  await openThinkingChat(page, server.url);
  await setSettings(page, { maxNewTokens: 128 });
  await page.getByTestId('settings-toggle').click();
  // (A new chat takes the last one's settings: another test of this worker may have turned thinking off.)
  await page.getByTestId('setting-thinking').selectOption('default');
  await page.getByTestId('setting-json').check();
  await page.getByTestId('setting-json-schema').fill(JSON.stringify(schema));
  await page.getByTestId('setting-json-schema').blur();
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('settings-summary')).toContainText('JSON schema');
  await send(page, server.natural.question);
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'done');
  // The answer is shown as a JSON code block, folded reasoning above it.
  const code = reply.getByTestId('message-text').locator('pre code');
  await expect(code).toHaveClass(/language-json/);
  await expect(code).toHaveText(api?.content ?? '');
  await reply.getByTestId('reasoning-toggle').click();
  await expect(reply.getByTestId('reasoning-text')).toHaveText(api?.reasoning_content ?? '');
});

test('the model card says which model thinks', async ({ page, thinkServer: server }) => {
  await page.goto(server.url);
  await page.getByTestId('models-toggle').click();
  const card = (id: string) => page.locator(`[data-testid="loaded-model-card"][data-model-id="${id}"]`);
  await expect(card('thinking').getByTestId('model-thinks')).toHaveText('thinks');
  await expect(card('default').getByTestId('model-thinks')).toHaveCount(0);
});

test('the settings say when the current model does not think', async ({ page, thinkServer: server }) => {
  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await page.getByTestId('model-picker').selectOption('default');
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('thinking-note')).toHaveText('the current model does not think');
});
