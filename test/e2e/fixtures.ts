/**
 * The browser tests' fixtures: one real `kvdesk serve` per worker, a page
 * opened on it, and the small steps every test repeats (new chat, settings, send).
 */
import { test as base, expect, type Page } from '@playwright/test';
import type { SchedulerSnapshot } from '../../src/shared/scheduler-types';
import { naturalThinkingQuestion } from '../helpers/models';
import { type ServeHandle, startServe } from './serve';

export const test = base.extend<{ app: Page }, { server: ServeHandle }>({
  server: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const server = await startServe();
      await use(server);
      await server.stop();
    },
    { scope: 'worker', timeout: 120_000 },
  ],
  app: async ({ page, server }, use) => {
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(server.url);
    await expect(page.getByTestId('model-picker')).toHaveValue(/.+/);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await use(page);
    expect(errors, 'uncaught errors in the page').toEqual([]);
  },
});

export { expect };

/** The scheduler's own snapshot, as the HTTP API serves it. */
export async function apiSnapshot(server: ServeHandle): Promise<SchedulerSnapshot> {
  const res = await fetch(`${server.url}/v1/kvdesk/budget`);
  expect(res.status).toBe(200);
  const body = (await res.json()) as SchedulerSnapshot | { snapshot: SchedulerSnapshot };
  return 'snapshot' in body ? body.snapshot : body;
}

/**
 * Starts a new chat and returns its thread id: an empty chat open (the open one, when it is untouched: no messages,
 * its settings as they were made — New chat opens it instead of adding another).
 */
export async function newChat(page: Page): Promise<string> {
  await page.getByTestId('new-thread').click();
  await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', /.+/);
  await expect(page.getByTestId('message-list').locator('[data-message-id]')).toHaveCount(0);
  return (await page.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
}

/** Sets the open thread's sampling/limits through the settings panel (each taken at once as its field is left). */
export async function setSettings(
  page: Page,
  s: { greedy?: boolean; maxNewTokens?: number; seed?: number; frequencyPenalty?: number; presencePenalty?: number },
): Promise<void> {
  const panel = page.getByTestId('settings-panel');
  if (!(await panel.isVisible())) await page.getByTestId('settings-toggle').click();
  if (s.maxNewTokens !== undefined) {
    await panel.getByTestId('setting-maxNewTokens').fill(String(s.maxNewTokens));
    await panel.getByTestId('setting-maxNewTokens').blur();
  }
  if (s.seed !== undefined) {
    await panel.getByTestId('setting-seed').fill(String(s.seed));
    await panel.getByTestId('setting-seed').blur();
  }
  for (const key of ['frequencyPenalty', 'presencePenalty'] as const) {
    const v = s[key];
    if (v === undefined) continue;
    await panel.getByTestId(`setting-${key}`).fill(String(v));
    await panel.getByTestId(`setting-${key}`).blur();
  }
  if (s.greedy !== undefined) await panel.getByTestId('setting-greedy').setChecked(s.greedy);
  if (s.maxNewTokens !== undefined)
    await expect(page.getByTestId('settings-summary')).toContainText(`max ${s.maxNewTokens}`);
  await page.getByTestId('settings-toggle').click();
}

/** Types a message and sends it with Enter. */
export async function send(page: Page, text: string): Promise<void> {
  await page.getByTestId('chat-input').fill(text);
  await page.getByTestId('chat-input').press('Enter');
  await expect(page.getByTestId('message-user').last()).toContainText(text);
}

/** The last assistant message of the open thread. */
export function lastReply(page: Page) {
  return page.getByTestId('message-assistant').last();
}

/**
 * The chats saved, each whole (the list answers their summaries: each is opened), as listThreads answered before
 * the list was made of summaries. One connection for all of them (a worker's server has a hundred chats and more by
 * its last tests, and a connection each made every poll of this take seconds).
 */
export async function savedThreads(server: ServeHandle, token?: string): Promise<{ ok: boolean; value?: unknown }> {
  return wsSession(server, token, 15_000, async (call) => {
    const listed = await call('listThreads', {});
    if (!listed.ok) return listed;
    const ids = (listed.value as Array<{ id: string }>).map((t) => t.id);
    const opened = await Promise.all(ids.map((id) => call('openThread', { id })));
    return { ok: true, value: opened.filter((r) => r.ok).map((r) => r.value) };
  });
}

/** One contract call over the server's WebSocket, as another front end would make it. */
export async function wsCall(
  server: ServeHandle,
  name: string,
  request: unknown,
  /** The server's token, where it needs one. */
  token?: string,
  /** How long the answer may take (a load the test holds takes as long as the test holds it). */
  answerMs = 15_000,
): Promise<{ ok: boolean; value?: unknown }> {
  return wsSession(server, token, answerMs, (call) => call(name, request));
}

/** Contract calls over one WebSocket to the server (opened for `use`, closed after it), each answered in `answerMs`. */
async function wsSession<T>(
  server: ServeHandle,
  token: string | undefined,
  answerMs: number,
  use: (call: (name: string, request: unknown) => Promise<{ ok: boolean; value?: unknown }>) => Promise<T>,
): Promise<T> {
  const { WebSocket } = await import('ws');
  const query = token === undefined ? '' : `?token=${encodeURIComponent(token)}`;
  const ws = new WebSocket(`${server.url.replace(/^http/, 'ws')}/ws${query}`);
  const waiting = new Map<number, (result: { ok: boolean; value?: unknown }) => void>();
  let closed: Error | null = null;
  const failers = new Set<(err: Error) => void>();
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('/ws did not open within 15 s')), 15_000);
      ws.once('open', () => {
        clearTimeout(timer);
        resolve();
      });
      ws.once('error', reject);
    });
    ws.on('message', (data) => {
      const msg = JSON.parse(String(data)) as { t: string; id?: number; result?: { ok: boolean; value?: unknown } };
      if (msg.t === 'result' && msg.id !== undefined && msg.result) waiting.get(msg.id)?.(msg.result);
    });
    ws.once('close', (code) => {
      closed = new Error(`/ws closed (${code})`);
      for (const fail of failers) fail(closed);
    });
    let nextId = 1;
    const call = (name: string, request: unknown) =>
      new Promise<{ ok: boolean; value?: unknown }>((resolve, reject) => {
        const id = nextId++;
        const fail = (err: Error) => {
          clearTimeout(timer);
          reject(new Error(`${name}: ${err.message} before answering`));
        };
        const timer = setTimeout(() => {
          failers.delete(fail);
          waiting.delete(id);
          reject(new Error(`${name}: no answer over /ws within ${answerMs / 1000} s`));
        }, answerMs);
        if (closed) return fail(closed);
        failers.add(fail);
        waiting.set(id, (result) => {
          clearTimeout(timer);
          failers.delete(fail);
          waiting.delete(id);
          resolve(result);
        });
        ws.send(JSON.stringify({ t: 'invoke', id, name, request }));
      });
    return await use(call);
  } finally {
    ws.close();
  }
}

/** A question the thinking model (test/helpers/models.ts) reasons about, then answers, and its greedy reply. */
export interface ThinkingQuestion {
  question: string;
  reasoning: string;
  content: string;
  reasoningTokens: number;
}

/** Finds a ThinkingQuestion through a serve's OpenAI API (greedy, 16 tokens), its thinking model named `model`. */
export async function apiThinkingQuestion(url: string, model = 'thinking'): Promise<ThinkingQuestion> {
  const { question, reply } = await naturalThinkingQuestion(async (content) => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: 16, temperature: 0 }),
    });
    const body = (await res.json()) as {
      choices: Array<{ message: { content: string; reasoning_content?: string } }>;
      usage: { completion_tokens_details?: { reasoning_tokens: number } };
    };
    const m = body.choices[0]?.message;
    return {
      text: m?.content ?? '',
      reasoning: m?.reasoning_content,
      reasoningTokens: body.usage.completion_tokens_details?.reasoning_tokens ?? 0,
    };
  });
  return { question, reasoning: reply.reasoning ?? '', content: reply.text, reasoningTokens: reply.reasoningTokens };
}

/**
 * A chat saved through the host as another window would save it (its messages, timed a millisecond apart, and any
 * other fields of the thread), then opened: its id.
 */
export async function openSavedChat(
  app: Page,
  server: ServeHandle,
  name: string,
  messages: Array<Record<string, unknown>>,
  fields: Record<string, unknown> = {},
): Promise<string> {
  const now = Date.now();
  const id = `t-${name}-${now}`;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: name,
    createdAt: now,
    updatedAt: now,
    ...fields,
    messages: messages.map((m, i) => ({ createdAt: now + i, ...m })),
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  return id;
}

/**
 * A saved chat of one question and a short answer (it leaves out the oldest messages, as new chats do), with any
 * other fields of the thread, opened; its id.
 */
export function openGreeting(
  app: Page,
  server: ServeHandle,
  name: string,
  fields: Record<string, unknown> = {},
): Promise<string> {
  return openSavedChat(
    app,
    server,
    name,
    [
      { id: 'u0', role: 'user', content: 'Hi' },
      { id: 'a0', role: 'assistant', content: 'Hello.', stats: { tokens: 2, promptTokens: 10, finishReason: 'eos' } },
    ],
    fields,
  );
}
