/** The budget inspector against the scheduler's own snapshot: three chats at once, and refusals with their numbers. */
import type { Page } from '@playwright/test';
import { sessionsDroppedBy } from '../../src/renderer/lib/limit-change';
import type { SchedulerRequestView } from '../../src/shared/scheduler-types';
import { openChat, openServer, saveEndlessChat, startSlowServe } from './endless';
import { apiSnapshot, expect, lastReply, newChat, send, setSettings, test } from './fixtures';
import type { ServeHandle } from './serve';

const LONG = 'Tell me a long story';

// The three chats that run at once go to the slow model with their end of text banned (endless.ts): none can end
// before the last one starts (on the default model a greedy reply of thousands of tokens a second can).
let slow: ServeHandle;
test.beforeAll(async () => {
  slow = await startSlowServe();
});
test.afterAll(async () => {
  await slow.stop();
});

async function uiRequestRows(page: Page): Promise<Array<{ id: string; state: string; reserved: number }>> {
  return page.getByTestId('request-row').evaluateAll((rows) =>
    rows.map((r) => ({
      id: r.getAttribute('data-request-id') ?? '',
      state: r.getAttribute('data-state') ?? '',
      reserved: Number(r.getAttribute('data-reserved-bytes')),
    })),
  );
}

test('three chats at once show three reservations whose bytes equal the scheduler snapshot', async ({ app }) => {
  const threads: string[] = [];
  for (let i = 0; i < 3; i++) threads.push(await saveEndlessChat(slow, { greedy: true, maxNewTokens: 1900 }));
  await openServer(app, slow);
  for (const id of threads) {
    await openChat(app, id);
    await send(app, LONG);
  }

  // While all three run, the inspector's rows, its reserved total, the header bar and the HTTP API
  // agree byte for byte (polled: snapshots reach the page at ≤ 10 Hz).
  await expect
    .poll(
      async () => {
        const api = await apiSnapshot(slow);
        const ui = await uiRequestRows(app);
        const uiReserved = Number(await app.getByTestId('budget-reserved-bytes').getAttribute('data-bytes'));
        const headerReserved = Number(await app.getByTestId('budget-bar').getAttribute('data-reserved-bytes'));
        const mine = api.running.filter((r) => r.threadId && threads.includes(r.threadId));
        const uiRunning = ui.filter((r) => r.state === 'running');
        return {
          running: mine.length,
          sameRows: mine.every((r) =>
            uiRunning.some((u) => u.id === r.id && u.reserved === r.reservedBytes && r.reservedBytes > 0),
          ),
          sameTotal: uiReserved === api.reservedBytes && headerReserved === api.reservedBytes,
          totalIsSum: api.reservedBytes === mine.reduce((n, r) => n + r.reservedBytes, 0),
        };
      },
      { timeout: 10_000, intervals: [100] },
    )
    .toEqual({ running: 3, sameRows: true, sameTotal: true, totalIsSum: true });
  await expect(app.getByTestId('budget-running-count')).toContainText('running 3/');
  // Their sessions' KV is their requests' while they run (not "0 tokens · 0 B").
  for (const id of threads) {
    await expect(
      app.locator(`[data-testid="session-row"][data-session-id="${id}"]`).getByTestId('session-in-request'),
    ).toHaveText('in its request');
  }
  const limit = Number(await app.getByTestId('budget-limit-bytes').getAttribute('data-bytes'));
  expect(limit).toBe((await apiSnapshot(slow)).limitBytes);

  // Stop all three: every reservation comes back.
  for (const id of threads) {
    await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    // A reply may end on its own between looking and clicking; either way its bytes come back.
    await app
      .getByTestId('stop-button')
      .click({ timeout: 1000 })
      .catch(() => {});
  }
  await expect.poll(async () => (await apiSnapshot(slow)).reservedBytes).toBe(0);
  await expect(app.getByTestId('budget-reserved-bytes')).toHaveAttribute('data-bytes', '0');
  // Ended requests stay in the table with what they had reserved.
  const api = await apiSnapshot(slow);
  const ended = api.recent.filter((x) => x.threadId && threads.includes(x.threadId));
  expect(ended).toHaveLength(3);
  const ui = await uiRequestRows(app);
  for (const r of ended) expect(ui.find((u) => u.id === r.id)?.reserved).toBe(r.reservedBytes);
});

test('a request over a small budget is refused with its numbers; a partial fit is capped', async ({ app, server }) => {
  // A chat whose KV is kept (an idle session), which a small limit would drop; the window shows it.
  const kept = await newChat(app);
  await setSettings(app, { maxNewTokens: 4, seed: 3 });
  await send(app, 'Keep my cache');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const keptRow = app.locator(`[data-testid="session-row"][data-session-id="${kept}"]`);
  await expect.poll(async () => Number(await keptRow.getAttribute('data-held-bytes'))).toBeGreaterThan(8192);
  // With the other tests' sessions on this server: the ones 8 KiB would drop, as the scheduler drops them.
  const held = sessionsDroppedBy(await apiSnapshot(server), 8 * 1024);
  expect(held).toBeGreaterThanOrEqual(1);
  await newChat(app);
  await setSettings(app, { maxNewTokens: 200, seed: 3 });
  // 8 KiB holds 8 tokens of the default model (1 KiB per token): less than any chat prompt. Set, it would drop
  // every idle chat's kept KV: asked first; Cancel keeps the limit and the KV.
  const before = (await apiSnapshot(server)).limitBytes;
  await app.getByTestId('budget-limit-input').fill('8KiB');
  await app.getByTestId('budget-limit-apply').click();
  await expect(app.getByTestId('budget-limit-ask')).toContainText(
    `8.00 KiB drops the kept KV of ${held} idle ${held === 1 ? 'session' : 'sessions'} (chats, API prompt caches)`,
  );
  await app.getByTestId('budget-limit-cancel').click();
  await expect(app.getByTestId('budget-limit-ask')).toHaveCount(0);
  expect((await apiSnapshot(server)).limitBytes).toBe(before);
  expect((await apiSnapshot(server)).heldBytes).toBeGreaterThan(8192);
  await app.getByTestId('budget-limit-input').fill('8KiB');
  await app.getByTestId('budget-limit-apply').click();
  await app.getByTestId('budget-limit-confirm').click();
  await expect(app.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', '8192');
  expect((await apiSnapshot(server)).limitBytes).toBe(8192);
  expect((await apiSnapshot(server)).heldBytes).toBe(0);

  await send(app, 'Please tell me about the KV cache');
  const refusal = lastReply(app).getByTestId('refusal');
  await expect(refusal).toHaveAttribute('data-code', 'KV_BUDGET_EXCEEDED');
  await expect(refusal.getByTestId('refusal-budget')).toHaveAttribute('data-bytes', '8192');
  const required = Number(await refusal.getByTestId('refusal-required').getAttribute('data-bytes'));
  const prompt = Number(((await refusal.getByTestId('refusal-prompt').textContent()) ?? '').replace(/\D/g, ''));
  expect(prompt).toBeGreaterThan(8);
  expect(required).toBe((prompt + 1) * 1024); // rows × (prompt + 1) × bpt
  await expect(refusal).toContainText('The KV budget is set in the inspector (Controls → limit).');
  // One row, said as one; no advice about rows a chat does not send.
  await expect(refusal).toContainText('(1 row × (');
  await expect(refusal).not.toContainText('fewer rows');
  await expect(app.getByTestId('send-button')).toBeVisible();
  // Its row in the request table says why it was refused.
  const refusedId = (await apiSnapshot(server)).recent.find((r) => r.error?.code === 'KV_BUDGET_EXCEEDED')?.id;
  const refusedRow = app.locator(`[data-testid="request-row"][data-request-id="${refusedId}"]`);
  await expect(refusedRow.getByTestId('request-error')).toHaveText('KV_BUDGET_EXCEEDED');

  // Room for the prompt and 20 more tokens, while 200 were asked: admitted with a capped reply.
  await newChat(app);
  await app.getByTestId('budget-limit-input').fill(String((prompt + 20) * 1024));
  await app.getByTestId('budget-limit-apply').click();
  await send(app, 'Please tell me about the KV cache');
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', /done|cancelled/, { timeout: 30_000 });
  await expect(reply.getByTestId('budget-cap-note')).toHaveAttribute('data-admitted', '20');
  await expect(reply.getByTestId('budget-cap-note')).toHaveAttribute('data-requested', '200');
  // The chat's first reply: its prompt is the message alone, so a new chat would give it no more room.
  await expect(reply.getByTestId('budget-cap-note')).toContainText(
    'raise the limit in the inspector, or send a shorter message (the reply has what its prompt leaves).',
  );

  // A limit past the machine's memory is taken, and the derivation says what that gives up.
  await app.getByTestId('budget-limit-input').fill('999TiB');
  await app.getByTestId('budget-limit-apply').click();
  await expect(app.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(999 * 1024 ** 4));
  await expect(app.getByTestId('budget-derivation')).toContainText(
    '999.0 TiB is more than system RAM holds beside the weights',
  );

  // Back to the derived limit for the other tests.
  await app.getByTestId('budget-use-derived').click();
  await expect(app.getByTestId('budget-derivation')).toHaveAttribute('data-source', 'derived');
  expect((await apiSnapshot(server)).derivation.source).toBe('derived');
});

test('max running changes live: with one slot a second chat waits in the queue', async ({ app, server }) => {
  // A value it cannot take: said as an alert, tied to its field (marked invalid, described by it).
  await app.getByTestId('max-running-input').fill('0');
  await app.getByTestId('max-running-apply').click();
  await expect(app.getByTestId('budget-control-error')).toHaveRole('alert');
  await expect(app.getByTestId('max-running-input')).toHaveAttribute('aria-invalid', 'true');
  await expect(app.getByTestId('max-running-input')).toHaveAccessibleDescription(
    'Max running is a whole number from 1 to 256.',
  );
  await expect(app.getByTestId('budget-limit-input')).not.toHaveAttribute('aria-invalid', 'true');
  await app.getByTestId('max-running-input').fill('1');
  await app.getByTestId('max-running-apply').click();
  await expect.poll(async () => (await apiSnapshot(server)).maxRunning).toBe(1);
  await expect(app.getByTestId('max-running-input')).not.toHaveAttribute('aria-invalid', 'true');
  // The one slot goes to a request that runs for a while (64 sampled rows of up to 1,900 tokens): a chat's own
  // reply on this fast model could end before the test looks at the one queued behind it.
  const hog = new AbortController();
  const running = fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'default', prompt: 'Once', max_tokens: 1900, n: 64, temperature: 1, stream: true }),
    signal: hog.signal,
  }).catch(() => undefined);
  await expect.poll(async () => (await apiSnapshot(server)).running.length).toBe(1);
  await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 1900 });
  await send(app, LONG);
  await expect(lastReply(app).getByTestId('queued-indicator')).toBeVisible();
  await expect(app.getByTestId('budget-queued-count')).toContainText('queued 1/');
  // Why it waits, and what to do.
  const reason = lastReply(app).getByTestId('queued-reason');
  await expect(reason).toHaveAttribute('data-reason', 'slots');
  await expect(reason).toContainText('the one running slot is taken: it starts when a reply ends — stop one, or raise');
  // The KV is not what it waits for (the budget has room): the note does not say so.
  await expect(lastReply(app).getByTestId('queued-kv')).toHaveText('nothing is reserved yet');
  // With the inspector closed, the note opens it.
  await app.getByTestId('inspector-toggle').click();
  await reason.getByTestId('queued-open-inspector').click();
  await expect(app.getByTestId('budget-queued-count')).toBeVisible();
  // The running request ends (its client goes away): the queued chat gets the slot.
  hog.abort();
  await running;
  await expect(lastReply(app)).toHaveAttribute('data-state', /running|done/);
  await expect(lastReply(app).getByTestId('queued-indicator')).toHaveCount(0);
  if ((await lastReply(app).getAttribute('data-state')) === 'running') await app.getByTestId('stop-button').click();
  await app.getByTestId('max-running-input').fill('4');
  await app.getByTestId('max-running-apply').click();
  await expect.poll(async () => (await apiSnapshot(server)).maxRunning).toBe(4);
});

test('an OpenAI API conversation keeps its KV as an "API prompt cache" session in the inspector', async ({
  app,
  server,
}) => {
  // Sessions earlier tests' API requests left are not this one's.
  const before = new Set((await apiSnapshot(server)).sessions.map((s) => s.sessionId));
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'default',
      messages: [{ role: 'user', content: 'Hello from the API' }],
      max_tokens: 8,
      temperature: 0,
    }),
  });
  expect(res.status).toBe(200);
  const ids = (await apiSnapshot(server)).sessions.map((s) => s.sessionId).filter((x) => !before.has(x));
  expect(ids).toHaveLength(1);
  const id = ids[0] as string;
  expect(id.startsWith('prompt-cache-')).toBe(true);
  const row = app.locator(`[data-testid="session-row"][data-session-id="${id}"]`);
  await expect(row).toContainText('API prompt cache');
  const held = (await apiSnapshot(server)).sessions.find((s) => s.sessionId === id)?.heldBytes;
  expect(held).toBeGreaterThan(0);
  await expect(row).toHaveAttribute('data-held-bytes', String(held));
});

test("the timeline counts back from its latest event, and says how long ago that was by the page's clock", async ({
  app,
  server,
}) => {
  // The page's clock is the test's (installed for the context, so from the reload on): its age line reads it,
  // and the test sets it instead of waiting out seconds a loaded machine could stretch past "just now".
  await app.clock.install();
  await app.reload();
  await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const thread = await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 4 });
  await send(app, 'Hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done');
  // The latest event is this reply's release: it carries the time its request ended (the host's clock).
  let request: SchedulerRequestView | undefined;
  await expect
    .poll(async () => {
      request = (await apiSnapshot(server)).recent.filter((r) => r.threadId === thread).at(-1);
      return request?.endedAt ?? 0;
    })
    .toBeGreaterThan(0);
  const endedAt = request?.endedAt as number;
  const events = app.getByTestId('timeline-event');
  await expect(events.first()).toHaveAttribute('data-type', 'released');
  await expect(events.first()).toContainText(`#${request?.id.slice(0, 6)}`);
  await expect(events.first().locator('.t')).toHaveText('latest');
  await expect(events.nth(1).locator('.t')).toHaveText(/^−\d+\.\d\ds$/);
  const age = app.getByTestId('timeline-latest-age');
  // Half a second after it, by the page's clock, it is "just now" (the line re-reads the clock every second).
  await app.clock.setFixedTime(endedAt + 500);
  await expect(age).toContainText('latest just now');
  // Nothing happens for a few seconds: the latest event is no longer "now", and the line says its age.
  await app.clock.setFixedTime(endedAt + 5_000);
  await expect(age).toContainText('latest 5 s ago');
  await expect(events.first().locator('.t')).toHaveText('latest');
});

test('new timeline events leave the rows and ticks of earlier ones in place (neither is rebuilt at each event)', async ({
  app,
}) => {
  await newChat(app);
  await setSettings(app, { greedy: true, maxNewTokens: 4 });
  await send(app, 'Hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done');
  const events = app.getByTestId('timeline-event');
  await expect(events.first()).toHaveAttribute('data-type', 'released');
  // Each row on screen now is tagged (a property of the element, not markup React could rewrite), and so is each
  // tick of the strip, with its style as it is.
  const before = await events.evaluateAll((rows) => {
    for (const r of rows) (r as unknown as { kvdeskSeen?: boolean }).kvdeskSeen = true;
    return rows.length;
  });
  expect(before).toBeGreaterThan(0);
  const ticks = app.getByTestId('timeline-tick');
  const ticksBefore = await ticks.evaluateAll((all) => {
    for (const t of all) {
      const tick = t as unknown as { kvdeskStyle?: string; getAttribute(n: string): string | null };
      tick.kvdeskStyle = tick.getAttribute('style') ?? '';
    }
    return all.length;
  });
  expect(ticksBefore).toBe(before);
  await send(app, 'Hello again');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done');
  await expect(events.first()).toHaveAttribute('data-type', 'released');
  const after = await events.evaluateAll((rows) =>
    rows.map((r) => (r as unknown as { kvdeskSeen?: boolean }).kvdeskSeen === true),
  );
  // The newer events came in at the top, as new rows; below them, every earlier one is the element it was (as many
  // as the list's 120 rows still hold).
  const fresh = after.indexOf(true);
  expect(fresh).toBeGreaterThan(0);
  expect(after.slice(fresh).every(Boolean)).toBe(true);
  expect(after.length - fresh).toBe(Math.min(before, 120 - fresh));
  // The strip: the earlier ticks are the elements they were, styled as they were (the track slid, not they); and
  // every tick is where its time puts it, the newest at the right end, one a minute old at the left.
  const strip = await ticks.evaluateAll((all) =>
    all.map((t) => {
      const tick = t as unknown as {
        kvdeskStyle?: string;
        getAttribute(n: string): string | null;
        getBoundingClientRect(): { x: number };
        closest(s: string): { getBoundingClientRect(): { x: number; width: number } } | null;
      };
      const box = tick.closest('.timeline-strip')?.getBoundingClientRect() ?? { x: 0, width: 0 };
      return {
        kept: tick.kvdeskStyle === undefined ? null : tick.kvdeskStyle === tick.getAttribute('style'),
        at: Number(tick.getAttribute('data-at')),
        x: tick.getBoundingClientRect().x - box.x,
        width: box.width,
      };
    }),
  );
  expect(strip.filter((t) => t.kept !== null)).toHaveLength(ticksBefore);
  expect(strip.filter((t) => t.kept === false)).toEqual([]);
  const newest = Math.max(...strip.map((t) => t.at));
  for (const t of strip) {
    expect(t.width).toBeGreaterThan(100);
    expect(Math.abs(t.x - (t.width * (1 - (newest - t.at) / 60_000) - 3))).toBeLessThan(1);
  }
});

test("the budget names each model's bytes per token, from its load on (not one model's figure for all)", async ({
  app,
}) => {
  await openServer(app, slow);
  if (!(await app.getByTestId('inspector').isVisible())) await app.getByTestId('inspector-toggle').click();
  // Both models' KV lives on the CPU: each named with its own bpt, as its spec says (1 KiB and 16 KiB a token).
  const bpts = app.getByTestId('inspector-budget').getByTestId('budget-bpt-model');
  await expect(bpts).toHaveCount(2);
  await expect(bpts.nth(1)).toHaveAttribute('data-model-id', 'slow-llama');
  await expect(app.getByTestId('budget-bpt')).toHaveText('bpt default 1,024 B · slow-llama 16,384 B');
});

test("a control's error goes once its field is changed; a 0 B limit is asked about, saying it refuses every request", async ({
  app,
  server,
}) => {
  const running = app.getByTestId('max-running-input');
  const error = app.getByTestId('budget-control-error');
  await running.fill('0');
  await running.press('Enter');
  await expect(error).toHaveText('Max running is a whole number from 1 to 256.');
  // Corrected (not yet set): what was said about 0 no longer stands.
  await running.fill('3');
  await expect(error).toHaveCount(0);
  await expect(running).not.toHaveAttribute('aria-invalid', 'true');
  await running.fill('');
  const limit = app.getByTestId('budget-limit-input');
  await limit.fill('lots');
  await limit.press('Enter');
  await expect(error).toContainText('"lots" is not a size');
  await limit.fill('64');
  await expect(error).toHaveCount(0);
  await expect(limit).not.toHaveAttribute('aria-invalid', 'true');

  // 0 B: asked first, whether or not idle sessions hold KV, saying what it does; Cancel keeps the limit.
  const before = (await apiSnapshot(server)).limitBytes;
  await limit.fill('0');
  await limit.press('Enter');
  const ask = app.getByTestId('budget-limit-ask');
  await expect(ask.getByTestId('budget-limit-zero')).toContainText(
    'A 0 B budget refuses every request that needs KV (every chat reply, every API request of a model with a KV cache) until the limit is raised',
  );
  await expect(ask.getByTestId('budget-limit-zero')).toHaveText(
    /raised(, and drops the kept KV of \d+ idle sessions? \(chats, API prompt caches\))?\. Set it\?$/,
  );
  await app.getByTestId('budget-limit-cancel').click();
  await expect(ask).toHaveCount(0);
  expect((await apiSnapshot(server)).limitBytes).toBe(before);
  await limit.fill('');
});

test("a deleted chat's requests say so in the inspector, not its raw id", async ({ app }) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'A chat to delete soon');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const row = app
    .getByTestId('request-row')
    .filter({ has: app.locator('td.thread .ellipsis', { hasText: 'A chat to delete soon' }) });
  await expect(row).toHaveCount(1);
  const requestId = (await row.getAttribute('data-request-id')) ?? '';
  const item = app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
  await item.hover();
  await item.getByTestId('thread-delete').click();
  await item.getByTestId('thread-delete').click();
  await expect(item).toHaveCount(0);
  const after = app.locator(`[data-testid="request-row"][data-request-id="${requestId}"] td.thread .ellipsis`);
  await expect(after).toHaveText('deleted chat');
  await expect(app.locator(`[data-testid="request-row"][data-request-id="${requestId}"] td.thread`)).toHaveAttribute(
    'title',
    `A chat deleted since (${id})`,
  );
});

// A Hebrew title read left to right was cut at its end's side (the right), leaving its last words, not its first.
test("a Hebrew chat's title in the requests table reads right to left, cut at its end (the left)", async ({ app }) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  const words = 'בקשה ארוכה מאוד עם כותרת בעברית שנחתכת בטבלה';
  await send(app, words);
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  if (!(await app.getByTestId('inspector').isVisible())) await app.getByTestId('inspector-toggle').click();
  const cell = app.getByTestId('request-row').filter({ hasText: 'בקשה ארוכה' }).locator('td.thread');
  await expect(cell).toHaveCount(1);
  const title = cell.getByTestId('request-chat');
  const direction = (el: typeof title) =>
    el.evaluate(
      (e) =>
        (globalThis as unknown as { getComputedStyle(e: unknown): { direction: string } }).getComputedStyle(e)
          .direction,
    );
  // The inspector just opened: its rows settle first.
  await expect(title).toBeVisible();
  await expect.poll(() => direction(title)).toBe('rtl');
  const laid = await title.evaluate((el) => {
    const g = globalThis as unknown as {
      getComputedStyle(e: unknown): { direction: string };
      document: {
        createRange(): { setStart(n: unknown, o: number): void; setEnd(n: unknown, o: number): void } & {
          getBoundingClientRect(): { left: number; right: number };
        };
      };
    };
    const div = el as unknown as {
      firstChild: unknown;
      scrollWidth: number;
      clientWidth: number;
      getBoundingClientRect(): { left: number; right: number };
    };
    const first = g.document.createRange();
    first.setStart(div.firstChild, 0);
    first.setEnd(div.firstChild, 1);
    return {
      direction: g.getComputedStyle(el).direction,
      cut: div.scrollWidth > div.clientWidth,
      first: first.getBoundingClientRect(),
      box: div.getBoundingClientRect(),
    };
  });
  expect(laid.direction).toBe('rtl');
  expect(laid.cut).toBe(true);
  // Its first word shows, at the right; the cut is at the left.
  expect(laid.first.right).toBeGreaterThan(laid.box.right - 8);
  expect(laid.first.right).toBeLessThanOrEqual(laid.box.right + 1);
  // The request's id and model read left to right.
  expect(await direction(cell.getByTestId('request-id'))).toBe('ltr');
});
