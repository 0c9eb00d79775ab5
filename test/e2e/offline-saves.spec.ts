/**
 * Changes made while kvdesk cannot be reached (serve stopped) are kept in the browser: a reload before it is back
 * loses none of them, and the next page makes them once it is; where the browser cannot keep them, the window says
 * the change is not saved yet.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { expect, test, wsCall } from './fixtures';
import { startServe } from './serve';

interface Saved {
  id: string;
  title: string;
}

/** How many changes the page's browser keeps for kvdesk (pending-changes.ts). */
const keptChanges = (page: Page) =>
  page.evaluate<number>(`new Promise((resolve) => {
    const req = indexedDB.open('kvdesk-pending', 1);
    req.onupgradeneeded = () => req.result.createObjectStore('changes');
    req.onerror = () => resolve(-1);
    req.onsuccess = () => {
      const count = req.result.transaction('changes').objectStore('changes').count();
      count.onsuccess = () => {
        resolve(count.result);
        req.result.close();
      };
    };
  })`);

/** A page whose browser storage refuses every write (full, or a private window's that keeps nothing). */
const STORAGE_FULL = `IDBObjectStore.prototype.put = () => {
  throw new DOMException('The quota has been exceeded.', 'QuotaExceededError');
};`;

test('a rename and a delete made while kvdesk is down, the page reloaded before it is back: both made once it is', async ({
  page,
}) => {
  test.setTimeout(120_000);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-offline-'));
  let server = await startServe([], 90_000, undefined, dataDir);
  const port = new URL(server.url).port;
  const chat = (id: string, title: string) => ({ id, title, createdAt: 1, updatedAt: 2, messages: [] });
  for (const [id, title] of [
    ['tkept', 'Renamed offline'],
    ['tgone', 'Deleted offline'],
    ['tfull', 'Renamed where nothing is kept'],
  ] as const) {
    expect((await wsCall(server, 'saveThread', chat(id, title))).ok).toBe(true);
  }
  const stored = async () => ((await wsCall(server, 'listThreads', {})).value ?? []) as Saved[];
  const row = (p: Page, id: string) => p.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
  const rename = async (p: Page, id: string, title: string) => {
    await row(p, id).dblclick();
    await p.getByTestId('thread-rename-input').fill(title);
    await p.getByTestId('thread-rename-input').press('Enter');
  };
  // A second tab, whose browser keeps nothing.
  const full = await page.context().newPage();
  await full.addInitScript(STORAGE_FULL);
  try {
    for (const p of [page, full]) {
      await p.goto(server.url);
      await expect(p.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    }
    await server.stop();
    await expect(page.getByTestId('offline-note')).toBeVisible();

    await rename(page, 'tkept', 'Renamed while kvdesk was down');
    const item = row(page, 'tgone');
    await item.hover();
    await item.getByTestId('thread-delete').click();
    await item.getByTestId('thread-delete').click();
    await expect(item).toHaveCount(0);
    await expect.poll(() => keptChanges(page)).toBe(2);
    // Where nothing can be kept, the window says the change is not saved yet, at once.
    await rename(full, 'tfull', 'Renamed in the tab that keeps nothing');
    await expect(full.getByTestId('notice')).toContainText(
      "Your change to “Renamed in the tab that keeps nothing” is not saved yet: kvdesk cannot be reached, and this browser could not keep the change until it can (the browser's storage for this page is full). Keep this page open",
    );

    // Reloaded while kvdesk is down (the browser's error page), then kvdesk is back on its address.
    await page.reload().catch(() => {});
    server = await startServe(['--port', port], 90_000, undefined, dataDir);
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect
      .poll(async () => (await stored()).map((t) => [t.id, t.title]).sort())
      .toEqual([
        ['tfull', 'Renamed in the tab that keeps nothing'],
        ['tkept', 'Renamed while kvdesk was down'],
      ]);
    await expect(row(page, 'tkept')).toContainText('Renamed while kvdesk was down');
    await expect(row(page, 'tgone')).toHaveCount(0);
    await expect.poll(() => keptChanges(page)).toBe(0);
    await expect(page.getByTestId('notice')).toHaveCount(0);
  } finally {
    await full.close();
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a pin made from the list while kvdesk is down, the chat renamed elsewhere meanwhile: the page says so, nothing written over', async ({
  page,
}) => {
  test.setTimeout(120_000);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-offline-'));
  let server = await startServe([], 90_000, undefined, dataDir);
  const port = new URL(server.url).port;
  const chat = { id: 'tpin', title: 'Pinned offline', createdAt: 1, updatedAt: 2, messages: [] };
  expect((await wsCall(server, 'saveThread', chat)).ok).toBe(true);
  // The newer chat is the one open (fetched whole): the page has only the summary of the other.
  const open = { id: 'topen', title: 'Open', createdAt: 1, updatedAt: 5, messages: [] };
  expect((await wsCall(server, 'saveThread', open)).ok).toBe(true);
  const opened = async () =>
    (await wsCall(server, 'openThread', { id: 'tpin' })).value as { title: string; pinned?: boolean; revision: number };
  const row = page.getByTestId('thread-list').locator('[data-thread-id="tpin"]');
  try {
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', 'topen');
    await server.stop();
    await expect(page.getByTestId('offline-note')).toBeVisible();
    await row.hover();
    await row.getByTestId('thread-pin').click();
    await expect(row).toHaveClass(/\bpinned\b/);
    await expect.poll(() => keptChanges(page)).toBe(1);

    await page.reload().catch(() => {});
    server = await startServe(['--port', port], 90_000, undefined, dataDir);
    // Another saver renames it (from revision 1) before the page is back.
    expect((await wsCall(server, 'saveThread', { ...chat, title: 'Renamed elsewhere', revision: 1 })).ok).toBe(true);
    await page.goto(server.url);
    await expect(page.getByTestId('notice')).toContainText(
      '“Renamed elsewhere” was changed in another window or tab before a change of its name or pin made while kvdesk could not be reached was saved: it shows that one now.',
    );
    await expect.poll(() => keptChanges(page)).toBe(0);
    expect(await opened()).toMatchObject({ title: 'Renamed elsewhere', revision: 2 });
    expect((await opened()).pinned).toBeUndefined();
    await expect(row).toContainText('Renamed elsewhere');
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a change kept for one data folder's kvdesk waits for it: another kvdesk on the same address does not get it", async ({
  page,
}) => {
  test.setTimeout(120_000);
  const dirA = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-offline-a-'));
  const dirB = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-offline-b-'));
  let server = await startServe([], 90_000, undefined, dirA);
  const port = new URL(server.url).port;
  expect(
    (await wsCall(server, 'saveThread', { id: 'ta', title: 'A', createdAt: 1, updatedAt: 2, messages: [] })).ok,
  ).toBe(true);
  const row = page.getByTestId('thread-list').locator('[data-thread-id="ta"]');
  try {
    await page.goto(server.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await server.stop();
    await expect(page.getByTestId('offline-note')).toBeVisible();
    await row.dblclick();
    await page.getByTestId('thread-rename-input').fill('Renamed for A');
    await page.getByTestId('thread-rename-input').press('Enter');
    await expect.poll(() => keptChanges(page)).toBe(1);
    await page.reload().catch(() => {});

    // Another data folder's kvdesk on the same address: the change waits, said once.
    server = await startServe(['--port', port], 90_000, undefined, dirB);
    await page.goto(server.url);
    await expect(page.getByTestId('notice')).toContainText(
      'belong to another kvdesk data folder than the one kvdesk runs on now: they are kept',
    );
    expect((await wsCall(server, 'listThreads', {})).value).toEqual([]);
    expect(await keptChanges(page)).toBe(1);
    await server.stop();

    // Its own kvdesk back: made there.
    server = await startServe(['--port', port], 90_000, undefined, dirA);
    await page.goto(server.url);
    await expect(row).toContainText('Renamed for A');
    await expect.poll(() => keptChanges(page)).toBe(0);
  } finally {
    await server.stop();
    rmSync(dirA, { recursive: true, force: true });
    rmSync(dirB, { recursive: true, force: true });
  }
});

test("a page kept open while kvdesk is started again on another data folder: its change and its draft wait for their own folder's kvdesk, and the page shows the other's chats", async ({
  page,
}) => {
  test.setTimeout(150_000);
  const dirA = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-live-a-'));
  const dirB = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-live-b-'));
  // The same chat in both folders (one copied from the other, its kvdesk-id left out): a change made for one would
  // be taken by the other.
  const chat = (title: string) => ({ id: 'tboth', title, createdAt: 1, updatedAt: 2, messages: [] });
  let server = await startServe([], 90_000, undefined, dirB);
  expect((await wsCall(server, 'saveThread', chat('Kept in B'))).ok).toBe(true);
  await server.stop();
  server = await startServe([], 90_000, undefined, dirA);
  const port = new URL(server.url).port;
  expect((await wsCall(server, 'saveThread', chat('Kept in A'))).ok).toBe(true);
  // And a chat only A has.
  expect((await wsCall(server, 'saveThread', { ...chat('Only in A'), id: 'tonly' })).ok).toBe(true);
  const titleThere = async () => ((await wsCall(server, 'openThread', { id: 'tboth' })).value as Saved).title;
  const row = page.getByTestId('thread-list').locator('[data-thread-id="tboth"]');
  const input = page.getByTestId('chat-input');
  const attached = page.getByTestId('composer-attachment');
  const openChat = async (id = 'tboth') => {
    await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
  };
  const draftTexts = () =>
    page.evaluate<string[]>(`Object.values(JSON.parse(localStorage.getItem('kvdesk.drafts') ?? '{}')).sort()`);
  try {
    await page.goto(server.url);
    await expect(row).toContainText('Kept in A');
    // Drafts (not sent) in A's chats, one with a file.
    await openChat('tonly');
    await input.fill('a draft for the chat only A has');
    await openChat();
    await input.fill('a draft meant for A');
    await page.getByTestId('attach-input').setInputFiles({
      name: 'notes.txt',
      mimeType: 'text/plain',
      buffer: Buffer.from('notes for A\n'),
    });
    await expect(attached).toHaveText(/notes\.txt/);
    await server.stop();
    await expect(page.getByTestId('offline-note')).toBeVisible();
    await row.dblclick();
    await page.getByTestId('thread-rename-input').fill('Renamed for A');
    await page.getByTestId('thread-rename-input').press('Enter');
    await expect.poll(() => keptChanges(page)).toBe(1);

    // The same page (not reloaded) meets B's kvdesk on the address: the rename is not made there, the page says
    // why and shows B's chats.
    server = await startServe(['--port', port], 90_000, undefined, dirB);
    await expect(page.getByTestId('offline-note')).toBeHidden({ timeout: 20_000 });
    // What a page sends as it connects has reached kvdesk by then (nothing to wait for when none is sent).
    await page.waitForTimeout(2000);
    expect(await titleThere()).toBe('Kept in B');
    await expect(row).toContainText('Kept in B');
    await expect(page.getByTestId('sticky-notice')).toContainText(
      'This kvdesk keeps another data folder than the one this page showed: it shows its chats now. 1 unsaved change made here is kept in this browser for the data folder it was made in',
    );
    await expect(page.getByTestId('sticky-notice')).toContainText(
      '2 unsent drafts written here are kept in this browser for the data folder they were written in',
    );
    expect(await keptChanges(page)).toBe(1);
    // B's chat of the same id does not show A's draft; A's are kept in the browser all the same.
    await openChat();
    await expect(input).toHaveValue('');
    await expect(attached).toHaveCount(0);
    expect(await draftTexts()).toEqual(['a draft for the chat only A has', 'a draft meant for A']);
    // A change made here now is B's.
    await row.dblclick();
    await page.getByTestId('thread-rename-input').fill('Renamed in B');
    await page.getByTestId('thread-rename-input').press('Enter');
    await expect.poll(titleThere).toBe('Renamed in B');
    await server.stop();

    // A's kvdesk back: the page shows A's chats, and the rename kept for A is made there.
    server = await startServe(['--port', port], 90_000, undefined, dirA);
    await expect.poll(titleThere, { timeout: 20_000 }).toBe('Renamed for A');
    await expect(row).toContainText('Renamed for A');
    await expect.poll(() => keptChanges(page)).toBe(0);
    // A's chat has its draft again, its file too; and after a reload.
    await openChat();
    await expect(input).toHaveValue('a draft meant for A');
    await expect(attached).toHaveText(/notes\.txt/);
    await openChat('tonly');
    await expect(input).toHaveValue('a draft for the chat only A has');
    await page.reload();
    await openChat();
    await expect(input).toHaveValue('a draft meant for A');
    await expect(attached).toHaveText(/notes\.txt/);
  } finally {
    await server.stop();
    rmSync(dirA, { recursive: true, force: true });
    rmSync(dirB, { recursive: true, force: true });
  }
});

test("a message waiting for its chat to open when the page meets another data folder's kvdesk: it is that chat's draft, shown again with its folder's kvdesk", async ({
  page,
}) => {
  test.setTimeout(150_000);
  const dirA = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-wait-a-'));
  const dirB = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-wait-b-'));
  let server = await startServe([], 90_000, undefined, dirA);
  const port = new URL(server.url).port;
  const messages = [
    { id: 'm1', role: 'user', content: 'the first question', createdAt: 1 },
    { id: 'm2', role: 'assistant', content: 'the first answer', createdAt: 2 },
  ];
  const chat = { id: 'twait', title: 'Waits in A', createdAt: 1, updatedAt: 2, messages };
  expect((await wsCall(server, 'saveThread', chat)).ok).toBe(true);
  // The page's openThread calls are held while `holding` (the chat's messages never come from A).
  let holding = false;
  let held = 0;
  await page.routeWebSocket(/\/ws/, (ws) => {
    const host = ws.connectToServer();
    ws.onMessage((m) => {
      const msg = typeof m === 'string' ? (JSON.parse(m) as { t?: string; name?: string }) : {};
      if (holding && msg.t === 'invoke' && msg.name === 'openThread') held++;
      else host.send(m);
    });
  });
  const input = page.getByTestId('chat-input');
  const row = page.getByTestId('thread-list').locator('[data-thread-id="twait"]');
  try {
    await page.goto(server.url);
    await row.click();
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', 'twait');
    // Loaded again on that chat, its messages held: a message sent now waits for them.
    holding = true;
    await page.reload();
    await expect(page.getByTestId('thread-opening')).toBeVisible();
    await expect.poll(() => held).toBeGreaterThan(0);
    await input.fill('a message that waited for A');
    await input.press('Enter');
    await expect(input).toHaveValue('');
    await server.stop();
    holding = false;

    // B's kvdesk on the address: the message is not sent there, nor lost.
    server = await startServe(['--port', port], 90_000, undefined, dirB);
    await expect(page.getByTestId('sticky-notice')).toContainText('another data folder', { timeout: 20_000 });
    await expect(row).toHaveCount(0);
    await server.stop();

    // A's again: the chat has the message in its box.
    server = await startServe(['--port', port], 90_000, undefined, dirA);
    await row.click({ timeout: 20_000 });
    await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', 'twait');
    await expect(input).toHaveValue('a message that waited for A');
    expect((await wsCall(server, 'openThread', { id: 'twait' })).value).toMatchObject({ messages });
  } finally {
    await server.stop();
    rmSync(dirA, { recursive: true, force: true });
    rmSync(dirB, { recursive: true, force: true });
  }
});
