/**
 * The inspector says why, in its rows: an API request's refusal (with its numbers and what to do, the host's whole
 * message a key press away), a queued request's place and what it waits for, a reservation's padding, a limit
 * lowered under what running replies hold; and under load it lists the head of the queue, not all of it.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { formatBytes } from '../../src/shared/format';
import type { SchedulerRequestView } from '../../src/shared/scheduler-types';
import { slowModel } from '../helpers/models';
import { openServer } from './endless';
import { apiSnapshot, expect, test, wsCall } from './fixtures';
import { type ServeHandle, startServe } from './serve';

// The budget of the review that found these (1.5 MiB: 1,536 tokens of the default model), a queue of 24, and the
// slow model, whose replies (their end of text banned) run until they are stopped or write their max tokens.
let server: ServeHandle;
test.beforeAll(async () => {
  server = await startServe(['--model', slowModel(), '--kv-budget', '1536KiB', '--max-queue', '24']);
});
test.afterAll(async () => {
  await server.stop();
});

const MiB = 1024 * 1024;

/** A logit bias that bans the slow model's end-of-text tokens. */
function noEnd(): Record<string, number> {
  const config = JSON.parse(readFileSync(path.join(slowModel(), 'generation_config.json'), 'utf8'));
  return Object.fromEntries((config.eos_token_id as number[]).map((id) => [String(id), -100]));
}

/** An API request from outside the window, held open (its stream read) until the test aborts it. */
function hold(route: string, body: object): { abort(): void; done: Promise<unknown> } {
  const ac = new AbortController();
  const done = fetch(`${server.url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ stream: true, ...body }),
    signal: ac.signal,
  })
    .then((r) => r.text())
    .catch(() => undefined);
  return { abort: () => ac.abort(), done };
}

/** A slow-model reply of `maxTokens` that cannot end before it is stopped. */
function endless(prompt: string, maxTokens: number) {
  return hold('/v1/completions', { model: 'slow-llama', prompt, max_tokens: maxTokens, logit_bias: noEnd() });
}

async function post(body: object): Promise<number> {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  await res.text();
  return res.status;
}

/**
 * A slow-model reply near its context (4,096 tokens): about half a minute on this machine, where the tests that hold
 * it take a few seconds. The engine ends it at its max tokens whatever the test, so each test checks at its end that
 * what it held still runs ({@link stillHeld}).
 */
const LONG = 4000;

/** The running requests' ids. */
async function runningIds(): Promise<string[]> {
  return (await apiSnapshot(server)).running.map((r) => r.id).sort();
}

/** Fails as an expired set-up (not as a wrong row) where a held reply ended before the test was done with it. */
async function stillHeld(ids: string[]): Promise<void> {
  expect(await runningIds(), 'set-up expired: a held reply ended before the test was done; hold it longer').toEqual(
    ids,
  );
}

async function budget(patch: { kvBudgetBytes?: number; maxRunning?: number }): Promise<void> {
  expect((await wsCall(server, 'configureBudget', patch)).ok).toBe(true);
}

async function open(page: Page): Promise<void> {
  await openServer(page, server);
  if (!(await page.getByTestId('inspector').isVisible())) await page.getByTestId('inspector-toggle').click();
}

function row(page: Page, id: string | undefined) {
  return page.locator(`[data-testid="request-row"][data-request-id="${id}"]`);
}

/** The newest ended request that ended with `code`. */
async function refusedWith(code: string): Promise<SchedulerRequestView> {
  const r = (await apiSnapshot(server)).recent.filter((x) => x.error?.code === code).at(-1);
  expect(r, `a request refused with ${code}`).toBeDefined();
  return r as SchedulerRequestView;
}

test("an API request's refusal says why in its row, with its numbers and what to do; the whole message opens from the keyboard", async ({
  page,
}) => {
  await open(page);
  // 1,606 prompt tokens of the default model (1 KiB a token): at least 1,607 KiB, over the 1,536 KiB budget.
  expect(await post({ model: 'default', prompt: 'a '.repeat(1605), max_tokens: 10 })).toBe(400);
  const refused = await refusedWith('KV_BUDGET_EXCEEDED');
  expect(refused.error?.detail?.requiredBytes).toBe(1607 * 1024);
  const r = row(page, refused.id);
  await expect(r).toHaveAttribute('data-state', 'refused');
  // In the row's own text (what a screen reader reads in the table), not only in a tooltip.
  await expect(r.getByTestId('request-reason')).toHaveText(
    'needs 1.57 MiB, budget 1.50 MiB — shorten the prompt or raise the limit',
  );
  await expect(
    page.getByRole('row', { name: /needs 1\.57 MiB, budget 1\.50 MiB — shorten the prompt or raise the limit/ }),
  ).toHaveCount(1);
  // Its figures in exact bytes on hover.
  await expect(r.getByTestId('request-reason')).toHaveAttribute(
    'title',
    'needs 1,645,568 bytes, budget 1,572,864 bytes',
  );
  // Its KV cell says what it needed (it reserved nothing), not "0 B / 0 B".
  await expect(r.getByTestId('request-needed')).toHaveText('needs1.57 MiB');
  await expect(r.getByTestId('request-needed').locator('[data-bytes]')).toHaveAttribute(
    'data-bytes',
    String(1607 * 1024),
  );
  // The host's whole message: behind the code, a button that the keyboard reaches and opens.
  const code = r.getByTestId('request-error');
  const message = r.getByTestId('request-message');
  await expect(code).toHaveText('KV_BUDGET_EXCEEDED');
  await expect(code).toHaveAccessibleName("KV_BUDGET_EXCEEDED: the host's whole message");
  await expect(code).toHaveAttribute('aria-expanded', 'false');
  await expect(message).toBeHidden();
  await code.focus();
  await page.keyboard.press('Enter');
  await expect(code).toHaveAttribute('aria-expanded', 'true');
  await expect(message).toBeVisible();
  await expect(message).toHaveText(refused.error?.message ?? '');
  await expect(message).toContainText('Shorten the prompt, or raise the KV budget.');
  await page.keyboard.press('Enter');
  await expect(message).toBeHidden();
  // The timeline says it in the same words.
  await expect(
    page
      .getByTestId('timeline-event')
      .filter({ hasText: `#${refused.id.slice(0, 6)}` })
      .filter({ hasText: 'needs' }),
  ).toHaveText(/rejected.*KV_BUDGET_EXCEEDED: needs 1\.57 MiB, budget 1\.50 MiB$/);

  // A prompt longer than the model's context (2,048 tokens): said with its numbers too.
  expect(await post({ model: 'default', prompt: 'a '.repeat(2100), max_tokens: 10 })).toBe(400);
  const long = row(page, (await refusedWith('CONTEXT_OVERFLOW')).id);
  await expect(long.getByTestId('request-reason')).toHaveText(
    '2,101 tokens fill the 2,048-token context — shorten the prompt',
  );
  await expect(long.getByTestId('request-needed')).toHaveText('none');
});

test("queued rows say their place and what they wait for; a reservation's padding is said in words", async ({
  page,
}) => {
  await budget({ kvBudgetBytes: 128 * MiB, maxRunning: 4 });
  await open(page);
  const held: Array<ReturnType<typeof hold>> = [];
  try {
    // A long reply, and a shorter one batched beside it: padded to the long one's width.
    held.push(endless('Once', LONG));
    await expect.poll(async () => (await apiSnapshot(server)).running.length).toBe(1);
    held.push(endless('Hi', LONG - 1000));
    await expect.poll(async () => (await apiSnapshot(server)).running.length).toBe(2);
    // A third one no longer fits (it would be as wide): it waits for KV; a short chat waits behind it.
    held.push(endless('Hey', 1000));
    await expect.poll(async () => (await apiSnapshot(server)).queue.length).toBe(1);
    held.push(
      hold('/v1/chat/completions', { model: 'default', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 9 }),
    );
    await expect.poll(async () => (await apiSnapshot(server)).queue.length).toBe(2);
    const snap = await apiSnapshot(server);
    const holding = await runningIds();
    const [head, behind] = snap.queue as [SchedulerRequestView, SchedulerRequestView];
    const padded = snap.running.find((x) => (x.paddingBytes ?? 0) > 0) as SchedulerRequestView;
    expect(padded.paddingBytes).toBeGreaterThan(10 * MiB);

    await expect(row(page, head.id).getByTestId('request-queue-note')).toHaveText(
      `position 1 · waits for KV: ${formatBytes(snap.freeBytes)} free of 128 MiB`,
    );
    // Its own reservation is the least it takes: joining the long reply's batch pads it to that width (more).
    const wants = row(page, head.id).getByTestId('request-wants');
    await expect(wants).toHaveText(
      `needs at least${formatBytes(head.rows * (head.sessionPrefixTokens + head.promptTokens + head.maxNewTokens) * head.bpt)}`,
    );
    await expect(wants).toHaveAttribute('title', /at least this.*pads its rows to their width, which takes more/);
    // Behind the head, its place alone (why the queue waits is the head's line), the rule on hover and to a screen
    // reader.
    const behindNote = row(page, behind.id).getByTestId('request-queue-note');
    await expect(behindNote).toHaveText('position 2 (first come, first served)');
    await expect(behindNote.locator('.sr-only')).toHaveText(/^\s*\(first come, first served\)$/);
    await expect(behindNote).toHaveAttribute('title', 'waits for the request ahead of it: first come, first served');
    await expect(page.getByRole('row', { name: /position 2(?!\d)/ })).toHaveCount(1);
    await expect(row(page, padded.id).getByTestId('request-padding-note')).toHaveText(
      `incl. ${formatBytes(padded.paddingBytes as number)} padding`,
    );
    // The side panel stays narrow: the table fits the inspector, and the drawer of a narrow window.
    for (const width of [1000, 800]) {
      await page.setViewportSize({ width, height: 800 });
      // The window turns the side panel into a closed drawer a moment after the resize: opened once it has.
      await expect(async () => {
        if (!(await page.getByTestId('inspector').isVisible())) await page.getByTestId('inspector-toggle').click();
        await expect(page.getByTestId('request-table')).toBeVisible({ timeout: 1000 });
      }).toPass({ timeout: 10_000 });
      const fits = await page.getByTestId('request-table').evaluate((el) => {
        const wrap = el.parentElement as unknown as { clientWidth: number };
        return el.getBoundingClientRect().width <= wrap.clientWidth + 1;
      });
      expect(fits, `the request table fits at ${width} px`).toBe(true);
    }
    await stillHeld(holding);
  } finally {
    for (const h of held) h.abort();
    await Promise.all(held.map((h) => h.done));
  }
});

test('under load the table lists the running requests and the head of the queue; prompt caches in their requests are not listed again', async ({
  page,
}) => {
  await budget({ kvBudgetBytes: 128 * MiB, maxRunning: 1 });
  await open(page);
  const long = endless('Once', LONG);
  const queued: Array<ReturnType<typeof hold>> = [];
  try {
    await expect.poll(async () => (await apiSnapshot(server)).running.length).toBe(1);
    const holding = await runningIds();
    for (let i = 0; i < 24; i++) {
      queued.push(
        hold('/v1/chat/completions', {
          model: 'default',
          messages: [{ role: 'user', content: `Hello number ${i}` }],
          max_tokens: 5,
        }),
      );
    }
    await expect.poll(async () => (await apiSnapshot(server)).queue.length, { timeout: 30_000 }).toBe(24);
    // One more: the queue is full.
    expect(
      await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'And me' }], max_tokens: 5 }),
      }).then((r) => r.status),
    ).toBe(429);
    const full = row(page, (await refusedWith('QUEUE_FULL')).id);
    await expect(full.getByTestId('request-reason')).toHaveText(
      /^the queue was full \(24 waiting, limit 24\) — try again in about \d+ s$/,
    );

    // The running one and the first 20 queued; the 4 behind them counted.
    await expect(page.locator('[data-testid="request-row"][data-state="running"]')).toHaveCount(1);
    await expect(page.locator('[data-testid="request-row"][data-state="queued"]')).toHaveCount(20);
    await expect(page.getByTestId('requests-more-queued')).toHaveText(
      'and 4 more queued behind them (the first 20 are shown)',
    );
    const snap = await apiSnapshot(server);
    const shown = await page
      .locator('[data-testid="request-row"][data-state="queued"]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-request-id')));
    expect(shown).toEqual(snap.queue.slice(0, 20).map((q) => q.id));
    // Each API request's prompt cache is that request while it waits or runs: no row of its own, counted (those of
    // the 4 queued requests the table does not show said apart).
    const busy = snap.sessions.filter((s) => s.state !== 'idle').map((s) => s.sessionId);
    expect(busy).toHaveLength(25);
    const listed = await page
      .getByTestId('session-row')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-session-id')));
    expect(listed.filter((id) => busy.includes(id ?? ''))).toEqual([]);
    await expect(page.getByTestId('sessions-in-requests')).toHaveText(
      /^(and )?25 API prompt caches in their requests, queued or running \(4 of them queued beyond the rows shown\)$/,
    );
    await stillHeld(holding);
  } finally {
    // The long one stops; the queued ones then run and end.
    long.abort();
    await long.done;
    await Promise.all(queued.map((h) => h.done));
    await budget({ maxRunning: 4 });
  }
  // The prompt caches they leave (idle) are listed, each with its id and model.
  // The one used last: the table lists the latest first (the worker's server keeps other files' sessions too).
  const idle = (await apiSnapshot(server)).sessions
    .filter((s) => s.state === 'idle' && s.modelId === 'default')
    .sort((a, b) => b.lastUsedAt - a.lastUsedAt);
  expect(idle.length).toBeGreaterThan(0);
  const cache = idle[0]?.sessionId as string;
  const cacheRow = page.locator(`[data-testid="session-row"][data-session-id="${cache}"]`);
  await expect(cacheRow).toContainText('API prompt cache');
  await expect(cacheRow.getByTestId('session-id')).toHaveText(`${cache.slice('prompt-cache-'.length, 19)} · default`);
});

test('a limit lowered under what running replies hold says by how much, and that nothing new starts until under', async ({
  page,
}) => {
  await budget({ kvBudgetBytes: 128 * MiB, maxRunning: 4 });
  await open(page);
  const long = endless('Once', LONG);
  try {
    await expect.poll(async () => (await apiSnapshot(server)).running.length).toBe(1);
    const holding = await runningIds();
    await expect(page.getByTestId('budget-over-limit')).toHaveCount(0);
    // Set in the window as a person would (asked first where it drops idle sessions' KV).
    await page.getByTestId('budget-limit-input').fill('8MiB');
    await page.getByTestId('budget-limit-input').press('Enter');
    const ask = page.getByTestId('budget-limit-confirm');
    await expect
      .poll(async () => (await ask.isVisible()) || (await apiSnapshot(server)).limitBytes === 8 * MiB)
      .toBe(true);
    if (await ask.isVisible()) await ask.click();
    await expect(page.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(8 * MiB));
    const snap = await apiSnapshot(server);
    const over = snap.reservedBytes + snap.heldBytes - snap.limitBytes;
    expect(over).toBeGreaterThan(20 * MiB);
    await expect(page.getByTestId('budget-over-limit')).toHaveText(
      `${formatBytes(over)} over the limit: running replies finish, nothing new starts until it is under`,
    );
    // The header's bar, which has no line of its own, says it on its limit's mark and to a screen reader.
    const said = `limit ${formatBytes(8 * MiB)}, ${formatBytes(over)} over it`;
    await expect(page.getByTestId('budget-bar-limit-mark')).toHaveAttribute('title', new RegExp(`^${said}: `));
    await expect(page.getByTestId('budget-bar')).toHaveAttribute('aria-label', new RegExp(`; ${said}: `));
    await stillHeld(holding);
  } finally {
    long.abort();
    await long.done;
    await budget({ kvBudgetBytes: 64 * MiB });
  }
  await expect(page.getByTestId('budget-over-limit')).toHaveCount(0);
});
