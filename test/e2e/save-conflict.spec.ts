/**
 * Two pages on one chat, the second not hearing of the first's save (as when its saves waited while it was
 * offline, or crossed the other's): its save is refused, not written over the other's turns, and both are kept.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page, WebSocketRoute } from '@playwright/test';
import { openChat, openServer, saveEndlessChat, startSlowServe } from './endless';
import { expect, lastReply, newChat, savedThreads, send, setSettings, test } from './fixtures';
import { type ServeHandle, startServe } from './serve';

// Once in three full CI runs (2026-12-06, a quiet machine) the routed page of the deleted-copy test lost its
// connection to kvdesk before its own turn, cause not found (not the server's ping: a routed socket answers it; no
// close of it was logged by the server in about twenty runs under load). Under load (2 busy cores) that test failed
// in about half its runs otherwise, both mended: no copy made while the routed page's saves were answered slower
// than its reply made them (see the slow-saves test), and a check that needed a notice showing. The retry stays for
// the lost connection; a real regression fails both tries.
test.describe.configure({ retries: 1 });

interface Saved {
  id: string;
  title: string;
  messages: Array<{ role: string; content: string }>;
}

/** A page's connection to kvdesk, routed: `deaf`, it hears nothing of the chats saved; `down`, it cannot connect. */
interface Route {
  deaf: boolean;
  down: boolean;
  /** How long the answers to its saves take to come (ms; 0: as they come), as over a slow connection. */
  slowSaves: number;
  /** Closes the page's open connections (it reconnects, unless `down`). */
  cut(): Promise<void>;
}

async function route(page: Page): Promise<Route> {
  const sockets = new Set<WebSocketRoute>();
  const ctl: Route = {
    deaf: false,
    down: false,
    slowSaves: 0,
    cut: async () => {
      for (const ws of [...sockets]) await ws.close();
    },
  };
  await page.routeWebSocket(/\/ws/, (ws) => {
    if (ctl.down) {
      void ws.close();
      return;
    }
    const host = ws.connectToServer();
    sockets.add(ws);
    const saves = new Set<number>();
    ws.onMessage((m) => {
      const msg = typeof m === 'string' ? (JSON.parse(m) as { t?: string; name?: string; id?: number }) : {};
      if (msg.t === 'invoke' && msg.name === 'saveThread' && typeof msg.id === 'number') saves.add(msg.id);
      host.send(m);
    });
    host.onMessage((m) => {
      if (ctl.deaf && typeof m === 'string' && m.startsWith('{"t":"event","event":"thread"')) return;
      const answer = typeof m === 'string' && m.startsWith('{"t":"result"') ? (JSON.parse(m) as { id: number }) : null;
      if (answer && saves.delete(answer.id) && ctl.slowSaves > 0) {
        setTimeout(() => ws.send(m), ctl.slowSaves);
        return;
      }
      ws.send(m);
    });
    ws.onClose(() => {
      sockets.delete(ws);
      void host.close();
    });
  });
  return ctl;
}

/**
 * `page` (routed by `ctl`) and `other` open an endless chat; `page` stops hearing of its saves, `other` sends a turn
 * (stopped), then `page` sends its own: refused, its reply runs on as a conflicted copy. The chat's id.
 */
async function copyWhileReplying(page: Page, other: Page, ctl: Route, server: ServeHandle): Promise<string> {
  const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 });
  await openServer(page, server);
  await openChat(page, id);
  await openServer(other, server);
  await openChat(other, id);
  ctl.deaf = true;
  // The other page's turn, saved; this page does not hear of it.
  await send(other, 'asked in the other tab');
  await expect(lastReply(other).getByTestId('message-text')).not.toBeEmpty();
  // This page hears of that reply from the budget (not deaf to it), and holds its own turn while it runs: an Enter
  // pressed before it has heard of the stop is not a send (the note says why and the text stays in the box).
  await expect(page.getByTestId('elsewhere-busy-note')).toBeVisible();
  await other.getByTestId('stop-button').click();
  await expect(lastReply(other)).toHaveAttribute('data-state', 'cancelled');
  await expect(page.getByTestId('elsewhere-busy-note')).toHaveCount(0);
  // This page's turn, made from the chat as it was before: its saves are refused, and its reply runs on.
  await send(page, 'asked in this tab');
  // Said as the save is refused: checked before waiting for the reply's first text (a notice goes after 10 s).
  await expect(page.getByTestId('notice')).toContainText('Endless (conflicted copy)');
  await expect(lastReply(page).getByTestId('message-text')).not.toBeEmpty();
  return id;
}

test("a page that had not seen another's save keeps its turn as a copy of the chat, and the other's stays", async ({
  app,
  server,
}) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'the first question');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });

  // The second page hears nothing of the chats saved from the moment it is deaf.
  const other = await app.context().newPage();
  const heard = await route(other);
  try {
    await other.goto(server.url);
    await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    await expect(other.getByTestId('message-user')).toHaveCount(1);
    heard.deaf = true;

    // The first page's turn, saved (each of its saves in a row taken)…
    await send(app, 'asked in the first tab');
    await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    const listed = async () => ((await savedThreads(server)).value ?? []) as Saved[];
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.messages.length).toBe(4);
    await expect(other.getByTestId('message-user')).toHaveCount(1);

    // …then the second page's own, made from the chat as it was before.
    await send(other, 'asked in the second tab');
    await expect(lastReply(other)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    await expect(other.getByTestId('notice')).toContainText('was changed in another window or tab');
    await expect(other.getByTestId('notice')).toContainText('the first question (conflicted copy)');

    // Both kept: the chat as the first page saved it, and the second page's turn in a chat of its own.
    await expect(async () => {
      const threads = await listed();
      const chat = threads.find((t) => t.id === id);
      expect(chat?.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual([
        'the first question',
        'asked in the first tab',
      ]);
      const copy = threads.find((t) => t.title === 'the first question (conflicted copy)');
      expect(copy?.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual([
        'the first question',
        'asked in the second tab',
      ]);
      expect(copy?.messages.at(-1)?.role).toBe('assistant');
      expect(copy?.messages.at(-1)?.content.length).toBeGreaterThan(0);
    }).toPass({ timeout: 10_000 });
    // The second page shows the chat as saved, with the copy beside it in the list; the first page was told nothing.
    await expect(other.getByTestId('message-user')).toHaveText([/the first question/, /asked in the first tab/]);
    await expect(other.getByTestId('thread-list')).toContainText('the first question (conflicted copy)');
    await expect(app.getByTestId('notice')).toHaveCount(0);

    // Its next turn in the chat builds on the saved one, and is saved.
    heard.deaf = false;
    await send(other, 'asked again in the second tab');
    await expect(lastReply(other)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.messages.length).toBe(6);
    await expect(app.getByTestId('message-user')).toHaveCount(3);

    // Renamed in both, the second not hearing of the first's: the first's name stands, and the second is told.
    heard.deaf = true;
    const rename = async (page: typeof app, title: string) => {
      await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).dblclick();
      await page.getByTestId('thread-rename-input').fill(title);
      await page.getByTestId('thread-rename-input').press('Enter');
    };
    await rename(app, 'Named in the first tab');
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.title).toBe('Named in the first tab');
    await rename(other, 'Named in the second tab');
    await expect(other.getByTestId('notice')).toContainText(
      "before this one's change of its name or settings was saved: it shows that one now",
    );
    await expect(other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toContainText(
      'Named in the first tab',
    );
    expect((await listed()).find((t) => t.id === id)?.messages).toHaveLength(6);
  } finally {
    await other.close();
  }
});

test("kvdesk stopping with a page's save unanswered: the page saves it again once kvdesk is back, as its own", async ({
  page,
}) => {
  test.setTimeout(180_000);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-saves-'));
  let server = await startServe([], 90_000, undefined, dataDir);
  const port = new URL(server.url).port;
  // What happens to the page's chat saves on the way: sent and answered, never sent, or sent and their answer lost.
  let saves: 'pass' | 'swallow' | 'mute' = 'pass';
  const muted = new Set<number>();
  await page.routeWebSocket(/\/ws/, (ws) => {
    const host = ws.connectToServer();
    ws.onMessage((m) => {
      const sent = typeof m === 'string' ? (JSON.parse(m) as { t?: string; id?: number; name?: string }) : {};
      if (sent.t === 'invoke' && sent.name === 'saveThread' && saves !== 'pass') {
        if (saves === 'swallow') return;
        muted.add(sent.id ?? -1);
      }
      host.send(m);
    });
    host.onMessage((m) => {
      const got = typeof m === 'string' ? (JSON.parse(m) as { t?: string; id?: number }) : {};
      if (got.t === 'result' && muted.has(got.id ?? -1)) return;
      ws.send(m);
    });
  });
  const stored = async () =>
    ((await savedThreads(server)).value as Saved[] | undefined)?.find((t) => t.id === id)?.title;
  const rename = async (title: string) => {
    await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).dblclick();
    await page.getByTestId('thread-rename-input').fill(title);
    await page.getByTestId('thread-rename-input').press('Enter');
  };
  const restart = async () => {
    await server.stop();
    await expect(page.getByTestId('offline-note')).toBeVisible();
    server = await startServe(['--port', port], 90_000, undefined, dataDir);
  };
  let id = '';
  try {
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    id = await newChat(page);
    await setSettings(page, { maxNewTokens: 2 });
    await send(page, 'a question');
    await expect(lastReply(page)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    await expect.poll(stored).toBe('a question');

    // A change whose save never reached kvdesk before it stopped: saved once kvdesk is back, nothing else done.
    saves = 'swallow';
    await rename('Renamed as kvdesk stopped');
    await page.waitForTimeout(300);
    expect(await stored()).toBe('a question');
    await restart();
    saves = 'pass';
    await expect(page.getByTestId('offline-note')).toHaveCount(0, { timeout: 30_000 });
    await expect.poll(stored).toBe('Renamed as kvdesk stopped');

    // One kvdesk wrote, its answer lost as it stopped; then one made while it was away: this page's own, in a row.
    saves = 'mute';
    await rename('Renamed before the restart');
    await expect.poll(stored).toBe('Renamed before the restart');
    await restart();
    saves = 'pass';
    await rename('Renamed while kvdesk was away');
    await expect(page.getByTestId('offline-note')).toHaveCount(0, { timeout: 30_000 });
    await expect.poll(stored).toBe('Renamed while kvdesk was away');
    await page.waitForTimeout(1000);
    await expect(page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toContainText(
      'Renamed while kvdesk was away',
    );
    await expect(page.getByTestId('notice')).toHaveCount(0);
    expect(await stored()).toBe('Renamed while kvdesk was away');
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a page whose saves are refused while its reply runs keeps its turn as a copy at once: a reload then loses nothing', async ({
  page,
}) => {
  test.setTimeout(180_000);
  const server = await startSlowServe();
  const ctl = await route(page);
  const other = await page.context().newPage();
  try {
    const id = await copyWhileReplying(page, other, ctl, server);
    const listed = async () => ((await savedThreads(server)).value ?? []) as Saved[];
    const copy = async () => (await listed()).find((t) => t.title === 'Endless (conflicted copy)');
    // The copy is saved while the reply runs, its text so far with it.
    await expect
      .poll(async () => (await copy())?.messages.map((m) => [m.role, m.content.length > 0]))
      .toEqual([
        ['user', true],
        ['assistant', true],
      ]);
    expect((await copy())?.messages[0]?.content).toBe('asked in this tab');
    await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
    // Reloaded before the reply ends: its question and reply so far are kept in the copy, the other's in the chat.
    await page.reload();
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('thread-list')).toContainText('Endless (conflicted copy)');
    const kept = await copy();
    expect(kept?.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(kept?.messages[1]?.content.length).toBeGreaterThan(0);
    const chat = (await listed()).find((t) => t.id === id);
    expect(chat?.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(['asked in the other tab']);
  } finally {
    await other.close();
    await server.stop();
  }
});

test('a page whose saves are answered slower than its reply makes them still keeps its turn as a copy while the reply runs', async ({
  page,
}) => {
  test.setTimeout(180_000);
  const server = await startSlowServe();
  const ctl = await route(page);
  const other = await page.context().newPage();
  try {
    // Each answer takes longer than the second between a streaming reply's saves: one is always on its way.
    ctl.slowSaves = 2500;
    await copyWhileReplying(page, other, ctl, server);
    await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
    await expect(page.getByTestId('thread-list')).toContainText('Endless (conflicted copy)');
    await page.getByTestId('stop-button').click();
    await expect(lastReply(page)).not.toHaveAttribute('data-state', 'running');
  } finally {
    await other.close();
    await server.stop();
  }
});

test("a tab renaming a chat while another tab's reply streams in it: the name is taken, the reply not copied", async ({
  page,
}) => {
  test.setTimeout(180_000);
  const server = await startSlowServe();
  const other = await page.context().newPage();
  // The other tab hears nothing of the chats saved from the moment it is deaf: the reply it shows stays behind.
  const heard = await route(other);
  try {
    const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 });
    await openServer(page, server);
    await openChat(page, id);
    await openServer(other, server);
    await openChat(other, id);
    await send(page, 'asked in the first tab');
    await expect(other.getByTestId('message-assistant').getByTestId('message-text')).not.toBeEmpty();
    heard.deaf = true;
    const listed = async () => ((await savedThreads(server)).value ?? []) as Saved[];
    const reply = async () => (await listed()).find((t) => t.id === id)?.messages[1]?.content.length ?? 0;
    const shown = (await other.getByTestId('message-assistant').getByTestId('message-text').textContent()) ?? '';
    await expect.poll(reply).toBeGreaterThan(shown.length);
    // Renamed in the other tab, from the chat as it last heard of it: refused (the reply was saved since), then
    // taken, as the name is all it changed.
    await other.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).dblclick();
    await other.getByTestId('thread-rename-input').fill('Named in the other tab');
    await other.getByTestId('thread-rename-input').press('Enter');
    await expect.poll(async () => (await listed()).find((t) => t.id === id)?.title).toBe('Named in the other tab');
    heard.deaf = false;
    await expect(page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`)).toContainText(
      'Named in the other tab',
    );
    await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
    await page.getByTestId('stop-button').click();
    await expect(lastReply(page)).toHaveAttribute('data-state', 'cancelled');
    await page.waitForTimeout(1500);
    const threads = await listed();
    expect(threads.filter((t) => t.title.includes('conflicted copy')).map((t) => t.title)).toEqual([]);
    expect(threads.find((t) => t.id === id)?.title).toBe('Named in the other tab');
    await expect(other.getByTestId('notice')).toHaveCount(0);
    await expect(page.getByTestId('notice')).toHaveCount(0);
  } finally {
    await other.close();
    await server.stop();
  }
});

test('a conflicted copy deleted while its reply runs stays deleted, and the chat then shows the one saved', async ({
  page,
}) => {
  test.setTimeout(180_000);
  const server = await startSlowServe();
  const ctl = await route(page);
  const other = await page.context().newPage();
  try {
    await copyWhileReplying(page, other, ctl, server);
    const listed = async () => ((await savedThreads(server)).value ?? []) as Saved[];
    const copyId = async () => (await listed()).find((t) => t.title === 'Endless (conflicted copy)')?.id;
    await expect.poll(copyId).toBeDefined();
    const copy = (await copyId()) as string;
    // Deleted here while the reply it keeps runs on: not made again, in the list or on disk, and no alert.
    const row = page.getByTestId('thread-list').locator(`[data-thread-id="${copy}"]`);
    await row.hover();
    await row.getByTestId('thread-delete').click();
    await row.getByTestId('thread-delete').click();
    await expect(row).toHaveCount(0);
    await page.waitForTimeout(2500);
    await expect(row).toHaveCount(0);
    expect(await copyId()).toBeUndefined();
    // No such notice: not `notice` not containing it, which fails when no notice shows at all (the copy's own has
    // gone 10 s after it came, which under load is before this line).
    await expect(page.getByTestId('notice').filter({ hasText: 'was not saved' })).toHaveCount(0);
    await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
    await page.getByTestId('stop-button').click();
    // The reply ended: the chat here is the one saved (the other tab's turn), with no copy made again.
    await expect(page.getByTestId('message-user')).toHaveCount(1);
    await expect(page.getByTestId('message-user')).toContainText('asked in the other tab');
    await page.waitForTimeout(1500);
    expect((await listed()).filter((t) => t.title.includes('conflicted copy'))).toEqual([]);
    await expect(row).toHaveCount(0);
  } finally {
    await other.close();
    await server.stop();
  }
});

test("the connection lost while a conflicted copy's reply runs: once back, the chat shows the one saved, and the next turn makes no second copy", async ({
  page,
}) => {
  test.setTimeout(180_000);
  const server = await startSlowServe();
  const ctl = await route(page);
  const other = await page.context().newPage();
  try {
    const id = await copyWhileReplying(page, other, ctl, server);
    const listed = async () => ((await savedThreads(server)).value ?? []) as Saved[];
    const copies = async () => (await listed()).filter((t) => t.title === 'Endless (conflicted copy)');
    await expect.poll(async () => (await copies()).length).toBe(1);
    // The connection goes (the reply with it) and stays away a while; then it is back.
    ctl.down = true;
    await ctl.cut();
    await expect(lastReply(page)).not.toHaveAttribute('data-state', 'running');
    await page.waitForTimeout(2000);
    ctl.deaf = false;
    ctl.down = false;
    // Back: the chat here is the one saved (the other tab's turn); this tab's is in the copy.
    await expect(page.getByTestId('message-user')).toHaveCount(1, { timeout: 20_000 });
    await expect(page.getByTestId('message-user')).toContainText('asked in the other tab');
    await send(page, 'asked next in this tab');
    await expect(lastReply(page).getByTestId('message-text')).not.toBeEmpty();
    await page.getByTestId('stop-button').click();
    await expect(lastReply(page)).toHaveAttribute('data-state', 'cancelled');
    await expect
      .poll(async () => (await listed()).find((t) => t.id === id)?.messages.filter((m) => m.role === 'user').length)
      .toBe(2);
    expect(await copies()).toHaveLength(1);
  } finally {
    await other.close();
    await server.stop();
  }
});
