/**
 * gpt-oss's Harmony replies in Chromium, against a real serve with a package whose model writes a Harmony reply
 * token by token (test/helpers/harmony-model.ts): the window folds the analysis message above the reply as its
 * reasoning and shows the final message alone — no headers, no markers —, as the OpenAI API gives the same turn.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import { ANALYSIS, ANSWER, harmonyPackage, REPLY, tokens } from '../helpers/harmony-model';
import { lastReply, newChat, send, setSettings } from './fixtures';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
let root: string;
/** The reply's reasoning tokens: the analysis message's header, body and end. */
let reasoningTokens: number;
test.beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-harmony-'));
  const pkg = harmonyPackage(path.join(root, 'gpt-oss-scripted'), REPLY);
  reasoningTokens = tokens(pkg, REPLY.slice(0, 5)).length;
  server = await startServe(['--model', pkg.dir]);
});
test.afterAll(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

test('a gpt-oss reply: its analysis folds above the answer, which shows alone, as the API gives them', async ({
  page,
}) => {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'gpt-oss-scripted',
      messages: [{ role: 'user', content: 'Why is the sky blue?' }],
      temperature: 0,
    }),
  });
  expect(res.status).toBe(200);
  const api = (await res.json()) as { choices: Array<{ message: { content: string; reasoning_content?: string } }> };
  expect(api.choices[0]?.message).toMatchObject({ content: ANSWER, reasoning_content: ANALYSIS });

  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await page.getByTestId('model-picker').selectOption('gpt-oss-scripted');
  await setSettings(page, { greedy: true, maxNewTokens: 200 });
  await send(page, 'Why is the sky blue?');
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-state', 'done');
  await expect(reply.getByTestId('message-text')).toHaveText(ANSWER);
  const reasoning = reply.getByTestId('reasoning');
  await expect(reasoning.getByTestId('reasoning-toggle')).toHaveText(
    new RegExp(`^▸ Thought for [\\d.,]+ m?s · ${reasoningTokens} tok$`),
  );
  await reasoning.getByTestId('reasoning-toggle').click();
  await expect(reasoning.getByTestId('reasoning-text')).toHaveText(ANALYSIS);
  // No Harmony marker reaches the page.
  await expect(reply).not.toContainText('<|');
  // The model card says how it thinks.
  await page.getByTestId('models-toggle').click();
  const card = page.locator('[data-testid="loaded-model-card"][data-model-id="gpt-oss-scripted"]');
  await expect(card.getByTestId('model-thinks')).toHaveAttribute('title', /Harmony's analysis channel/);
});
