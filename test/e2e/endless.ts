/**
 * Replies that cannot end by themselves before a test acts on them (stops them, or sees them run at once): a serve
 * that loads the slow model too (test/helpers/models.ts: milliseconds a token on a CPU, where the default model
 * takes microseconds), and chats on it whose end-of-text tokens are banned (a logit bias of -100), so that a reply
 * runs until it is stopped or has written its max tokens.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { SLOW_THINK_END_ID, slowModel, slowThinkingModel } from '../helpers/models';
import { expect, wsCall } from './fixtures';
import { type ServeHandle, startServe } from './serve';

/** The slow model's id in the picker. */
const SLOW = 'slow-llama';
/** The slow thinking model's id in the picker. */
export const SLOW_THINKING = 'slow-thinking';

/** A serve with the slow model loaded as well as the default one. */
export function startSlowServe(): Promise<ServeHandle> {
  return startServe(['--model', slowModel()]);
}

/** A serve with the slow thinking model (test/helpers/models.ts) loaded as well as the default one. */
export function startSlowThinkingServe(): Promise<ServeHandle> {
  return startServe(['--model', slowThinkingModel()]);
}

/** Opens the page of `server` (as the `app` fixture opens the shared one's). */
export async function openServer(page: Page, server: ServeHandle): Promise<void> {
  await page.goto(server.url);
  await expect(page.getByTestId('model-picker')).toHaveValue(/.+/);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
}

/**
 * Adds a chat on the slow model whose replies cannot end before `maxNewTokens` (its end-of-text tokens banned), with
 * these settings, and returns its id: the page lists it once (re)loaded, and {@link openChat} opens it. `thinking`:
 * on the slow thinking model, its `</think>` banned too (the reply reasons until it ends).
 */
export async function saveEndlessChat(
  server: ServeHandle,
  settings: { maxNewTokens: number; greedy?: boolean; seed?: number },
  thinking = false,
): Promise<string> {
  const dir = thinking ? slowThinkingModel() : slowModel();
  const config = JSON.parse(readFileSync(path.join(dir, 'generation_config.json'), 'utf8'));
  const banned = [config.eos_token_id as number | number[]].flat().concat(thinking ? [SLOW_THINK_END_ID] : []);
  const logitBias = Object.fromEntries(banned.map((id) => [String(id), -100]));
  const now = Date.now();
  const id = `t-endless-${now}-${Math.random().toString(36).slice(2, 8)}`;
  const { maxNewTokens, ...sampling } = settings;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Endless',
    createdAt: now,
    updatedAt: now,
    modelId: thinking ? SLOW_THINKING : SLOW,
    sampling: { ...sampling, logitBias },
    maxNewTokens,
    messages: [],
  });
  expect(saved.ok).toBe(true);
  return id;
}

/** Opens a chat of the list, on its own model (the slow one for {@link saveEndlessChat}'s, or `model`). */
export async function openChat(page: Page, id: string, model = SLOW): Promise<void> {
  await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
  await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  // Listed as its summary: its messages fetched. A send would wait for them, but what the tests do next reads them
  // (Get a reply, regenerate), and a page's turn must be made from the chat as fetched before another page saves.
  await expect(page.getByTestId('thread-opening')).toHaveCount(0);
  await expect(page.getByTestId('model-picker')).toHaveValue(model);
}
