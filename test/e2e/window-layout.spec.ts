/**
 * The window at the sizes people use (1280×800, 800×600, and 400×300: 800×600 at 200 % zoom, where the messages
 * keep their room): the settings panel scrolls on its own under a thread that stays in view, a narrow window
 * reaches its chats through a drawer, the header's budget keeps its bar and figures, the message box grows with
 * wrapped text, tables keep their words whole, the settings' summary stays one line, and the inspector's request
 * table fits and stays short. The keyboard: the chat list is one Tab stop (arrows inside), Esc from the find bar
 * goes back to the message box, Ctrl/Cmd+K, N and F close a drawer first.
 */
import type { Locator, Page } from '@playwright/test';
import { generatedModel } from '../helpers/models';
import { apiSnapshot, expect, lastReply, newChat, send, setSettings, test, wsCall } from './fixtures';

/** What the page's functions use of the browser's window (these tests' types have no DOM). */
interface Win {
  getComputedStyle(el: unknown): { overflowX: string; overflowY: string; overflowWrap: string; lineHeight: string };
}

async function box(locator: Locator) {
  const b = await locator.boundingBox();
  if (!b) throw new Error('not laid out');
  return b;
}

/** A thread saved through the API (as an import would be), opened in the page. */
async function openSavedThread(
  page: Page,
  server: { url: string },
  thread: { id: string; title: string; messages: Array<{ role: 'user' | 'assistant'; content: string }> },
): Promise<void> {
  const now = Date.now();
  const saved = await wsCall(server as never, 'saveThread', {
    id: thread.id,
    title: thread.title,
    createdAt: now,
    updatedAt: now,
    messages: thread.messages.map((m, i) => ({ id: `${thread.id}-${i}`, createdAt: now + i, ...m })),
  });
  expect(saved.ok).toBe(true);
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  if (!(await page.getByTestId('sidebar').isVisible())) await page.getByTestId('sidebar-toggle').click();
  await page.getByTestId('thread-list').locator(`[data-thread-id="${thread.id}"] [data-testid="thread-title"]`).click();
  await expect(page.getByTestId('chat-view')).toHaveAttribute('data-thread-id', thread.id);
}

for (const size of [
  { width: 1280, height: 800 },
  { width: 800, height: 600 },
]) {
  test(`at ${size.width}×${size.height} the settings panel scrolls on its own and the thread stays in view`, async ({
    app,
  }) => {
    await app.setViewportSize(size);
    // A narrow window: New chat is in the drawer.
    if (size.width < 900) await app.getByTestId('sidebar-toggle').click();
    await newChat(app);
    await send(app, 'hello');
    await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
    await app.getByTestId('settings-toggle').click();
    const panel = app.getByTestId('settings-panel');
    await expect(panel).toBeVisible();
    // The panel ends inside the window, the messages keep a useful height, and the panel scrolls itself.
    const p = await box(panel);
    expect(p.y + p.height).toBeLessThanOrEqual(size.height);
    expect((await box(app.getByTestId('message-list'))).height).toBeGreaterThan(100);
    const scrolls = await panel.evaluate(
      (el) => el.scrollHeight > el.clientHeight && (globalThis as unknown as Win).getComputedStyle(el).overflowY,
    );
    expect(scrolls).toBe('auto');
    // Its last controls are reachable: scrolled into view inside the panel, not past the window's edge.
    const json = panel.getByTestId('setting-json');
    await json.scrollIntoViewIfNeeded();
    const j = await box(json);
    expect(j.y + j.height).toBeLessThanOrEqual(size.height);
    // …and the window itself did not scroll to show it (its body does not scroll).
    expect(await app.getByTestId('app').evaluate((el) => el.getBoundingClientRect().top)).toBe(0);
  });
}

test('a narrow window shows the chats in a drawer from the header; Esc closes it', async ({ app }) => {
  await app.setViewportSize({ width: 800, height: 600 });
  const sidebar = app.getByTestId('sidebar');
  const toggle = app.getByTestId('sidebar-toggle');
  await expect(sidebar).toBeHidden();
  await expect(toggle).toBeVisible();
  await toggle.click();
  await expect(sidebar).toBeVisible();
  await expect(toggle).toHaveAttribute('aria-expanded', 'true');
  // Over the page as a modal dialog, named: a screen reader keeps to it, as the inspector's drawer.
  await expect(app.getByRole('dialog', { name: 'Chats' })).toBeVisible();
  await expect(sidebar).toHaveAttribute('aria-modal', 'true');
  await expect(app.getByTestId('new-thread')).toBeInViewport();
  await expect(app.getByTestId('thread-search')).toBeInViewport();
  // Focus went into the drawer, and Tab keeps it there; Esc closes it and gives the focus back to its button.
  await expect(app.locator('#chat-list :focus')).toHaveCount(1);
  for (let i = 0; i < 12; i++) await app.keyboard.press('Tab');
  await expect(app.locator('#chat-list :focus')).toHaveCount(1);
  for (let i = 0; i < 12; i++) await app.keyboard.press('Shift+Tab');
  await expect(app.locator('#chat-list :focus')).toHaveCount(1);
  await app.keyboard.press('Escape');
  await expect(sidebar).toBeHidden();
  await expect(toggle).toBeFocused();
  // New chat from the drawer opens the chat and closes the drawer.
  await toggle.click();
  await app.getByTestId('new-thread').click();
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', /.+/);
  await expect(app.getByTestId('message-list').locator('[data-message-id]')).toHaveCount(0);
  await expect(sidebar).toBeHidden();
  // A chat chosen there from the keyboard: the drawer closes, and the focus goes to its message box.
  await toggle.click();
  await app.locator('#chat-list [data-testid="thread-title"]').first().focus();
  await app.keyboard.press('Enter');
  await expect(sidebar).toBeHidden();
  await expect(app.getByTestId('chat-input')).toBeFocused();
  // A wide window has no such button: the list is always there.
  await app.setViewportSize({ width: 1280, height: 800 });
  await expect(toggle).toBeHidden();
  await expect(sidebar).toBeVisible();
  // A column beside the chat: the chats' navigation landmark, no dialog (even left open in the narrow window).
  await toggle.evaluate((el) => (el as unknown as { click(): void }).click());
  await expect(app.getByRole('navigation', { name: 'Chats' })).toBeVisible();
  await expect(sidebar).not.toHaveAttribute('role');
  await expect(sidebar).not.toHaveAttribute('aria-modal');
  await expect(app.getByRole('dialog')).toHaveCount(0);
});

test('a narrow window opens on the chat: the inspector is a drawer from the header; Esc or a click beside closes it', async ({
  app,
}) => {
  await app.setViewportSize({ width: 800, height: 600 });
  const inspector = app.getByTestId('inspector');
  const toggle = app.getByTestId('inspector-toggle');
  await expect(inspector).toHaveCount(0);
  await expect(toggle).toHaveAttribute('aria-expanded', 'false');
  // The chat has the window's width.
  const chat = await box(app.getByTestId('chat-view'));
  expect(chat.x + chat.width).toBeGreaterThan(795);
  await toggle.click();
  await expect(inspector).toBeVisible();
  await expect(toggle).toHaveAttribute('aria-expanded', 'true');
  await expect(toggle).toHaveAttribute('aria-controls', 'inspector');
  // The focus goes into the drawer: Tab reads it from its start.
  await expect(inspector).toBeFocused();
  await app.keyboard.press('Tab');
  const tabbedInside = await inspector.evaluate((el) => {
    const node = el as unknown as { contains(o: unknown): boolean; ownerDocument: { activeElement: unknown } };
    const active = node.ownerDocument.activeElement;
    return active !== el && node.contains(active);
  });
  expect(tabbedInside).toBe(true);
  // A dialog over the page: Tab and Shift+Tab stay inside it; its ✕ closes it.
  await expect(inspector).toHaveAttribute('role', 'dialog');
  await expect(inspector).toHaveAttribute('aria-modal', 'true');
  const insideAfter = async (key: string, times: number) => {
    for (let i = 0; i < times; i++) await app.keyboard.press(key);
    return inspector.evaluate((el) => {
      const node = el as unknown as { contains(o: unknown): boolean; ownerDocument: { activeElement: unknown } };
      return node.contains(node.ownerDocument.activeElement);
    });
  };
  expect(await insideAfter('Tab', 40)).toBe(true);
  expect(await insideAfter('Shift+Tab', 40)).toBe(true);
  await app.getByTestId('inspector-close').click();
  await expect(inspector).toHaveCount(0);
  await expect(toggle).toBeFocused();
  await toggle.click();
  const drawer = await box(inspector);
  expect(drawer.x + drawer.width).toBeLessThanOrEqual(800);
  expect(drawer.width).toBeLessThanOrEqual(420);
  expect(drawer.height).toBe(600);
  // Over the chat, which keeps its width under it.
  expect((await box(app.getByTestId('chat-view'))).width).toBe(chat.width);
  await app.keyboard.press('Escape');
  await expect(inspector).toHaveCount(0);
  await expect(toggle).toBeFocused();
  await toggle.click();
  await app.getByTestId('inspector-backdrop').click({ position: { x: 20, y: 300 } });
  await expect(inspector).toHaveCount(0);
  // Wide again: the inspector as it was left there (open by default).
  await app.setViewportSize({ width: 1280, height: 800 });
  await expect(inspector).toBeVisible();
  await expect(toggle).toHaveAttribute('aria-pressed', 'true');
  await expect(toggle).not.toHaveAttribute('aria-expanded');
  await expect(inspector).not.toBeFocused();
  await expect(app.getByTestId('inspector-backdrop')).toHaveCount(0);
});

/** Whether the element is the topmost thing at its centre (nothing, a drawer's backdrop say, over it). */
function uncovered(locator: Locator): Promise<boolean> {
  return locator.evaluate((el) => {
    const r = el.getBoundingClientRect();
    const doc = el.ownerDocument as unknown as { elementFromPoint(x: number, y: number): unknown };
    const top = doc.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return top === el || (el as unknown as { contains(o: unknown): boolean }).contains(top);
  });
}

test('in a narrow window Ctrl/Cmd+K, N and F close an open drawer first: the focus never lands under it', async ({
  app,
}) => {
  await app.setViewportSize({ width: 800, height: 600 });
  // A chat with a message, so that Ctrl/Cmd+F has something to find.
  await app.getByTestId('sidebar-toggle').click();
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const drawers = [
    { button: 'inspector-toggle', drawer: app.getByTestId('inspector'), backdrop: 'inspector-backdrop' },
    { button: 'sidebar-toggle', drawer: app.getByTestId('sidebar'), backdrop: 'sidebar-backdrop' },
  ];
  const shortcuts = [
    { key: 'ControlOrMeta+k', target: 'model-picker' },
    { key: 'ControlOrMeta+f', target: 'find-input' },
    { key: 'ControlOrMeta+n', target: 'chat-input' },
  ];
  for (const { button, drawer, backdrop } of drawers) {
    for (const { key, target } of shortcuts) {
      const what = `${key} from the ${button.replace('-toggle', '')} drawer`;
      await app.getByTestId(button).focus();
      await app.keyboard.press('Enter');
      await expect(drawer, what).toBeVisible();
      await app.keyboard.press(key);
      await expect(app.getByTestId(target), what).toBeFocused();
      await expect(drawer, what).toBeHidden();
      await expect(app.getByTestId(backdrop), what).toHaveCount(0);
      await expect.poll(() => uncovered(app.getByTestId(target)), { message: what }).toBe(true);
      await app.keyboard.press('Escape');
      await expect(app.getByTestId('find-bar')).toHaveCount(0);
      // Back to the chat with the message (Ctrl/Cmd+N opened an empty one).
      if (key === 'ControlOrMeta+n') {
        await app.getByTestId('sidebar-toggle').click();
        await app.locator(`#chat-list [data-thread-id="${id}"] [data-testid="thread-title"]`).click();
        await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
      }
    }
  }
});

test('at 800 px the header keeps its budget bar and figures clear of the buttons', async ({ app }) => {
  await app.setViewportSize({ width: 800, height: 600 });
  const bar = await box(app.getByTestId('budget-bar'));
  expect(bar.width).toBeGreaterThanOrEqual(40);
  const figures = await box(app.getByTestId('header-budget-figures'));
  const theme = await box(app.getByTestId('theme-toggle'));
  expect(figures.x + figures.width).toBeLessThanOrEqual(theme.x);
  expect(bar.x + bar.width).toBeLessThanOrEqual(figures.x);
  const inspector = await box(app.getByTestId('inspector-toggle'));
  expect(inspector.x + inspector.width).toBeLessThanOrEqual(800);
});

test('from 901 to 1240 px the header keeps its budget figures whole and clear of the theme button', async ({
  app,
  server,
}) => {
  // KV held by a chat: the figures at their longer ("35.0 MiB / 11.2 GiB").
  await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done');
  // A model of a long name loaded too: the picker at its widest.
  const long = generatedModel('a-model-with-a-rather-long-name', {});
  expect((await wsCall(server, 'loadModel', { path: long })).ok).toBe(true);
  try {
    await expect(
      app.locator('[data-testid="model-picker"] option[value="a-model-with-a-rather-long-name"]'),
    ).toHaveCount(1);
    await headerAtWidths(app);
    // At 683 px (1366×768 at 200 % zoom) the picked long name is cut by the picker's width, with an ellipsis.
    await app.setViewportSize({ width: 683, height: 384 });
    const picker = app.getByTestId('model-picker');
    const before = await picker.inputValue();
    await picker.selectOption('a-model-with-a-rather-long-name');
    try {
      const cut = await picker.evaluate((el) => {
        const g = globalThis as unknown as {
          getComputedStyle(e: unknown): { textOverflow: string; font: string };
          document: {
            createElement(t: 'canvas'): {
              getContext(c: '2d'): { font: string; measureText(t: string): { width: number } };
            };
          };
        };
        const style = g.getComputedStyle(el);
        const ctx = g.document.createElement('canvas').getContext('2d');
        ctx.font = style.font;
        const select = el as unknown as { clientWidth: number; selectedOptions: Array<{ text: string }> };
        const text = select.selectedOptions[0]?.text ?? '';
        return { overflow: style.textOverflow, wider: ctx.measureText(text).width > select.clientWidth };
      });
      expect(cut).toEqual({ overflow: 'ellipsis', wider: true });
    } finally {
      await picker.selectOption(before);
    }
  } finally {
    expect((await wsCall(server, 'unloadModel', { id: 'a-model-with-a-rather-long-name' })).ok).toBe(true);
    expect((await wsCall(server, 'forgetModel', { root: long })).ok).toBe(true);
  }
});

async function headerAtWidths(app: Page): Promise<void> {
  for (const width of [901, 920, 950, 1000, 1100, 1240]) {
    await app.setViewportSize({ width, height: 700 });
    const figures = app.getByTestId('header-budget-figures');
    // Whole: its text not cut inside it…
    expect(await figures.evaluate((el) => el.scrollWidth - el.clientWidth), `${width} px`).toBeLessThanOrEqual(0);
    const f = await box(figures);
    const bar = await box(app.getByTestId('budget-bar'));
    const theme = await box(app.getByTestId('theme-toggle'));
    const toggle = await box(app.getByTestId('inspector-toggle'));
    // …nor under the theme button, the bar before it and still a bar; every control inside the window.
    expect(f.x + f.width, `${width} px`).toBeLessThanOrEqual(theme.x);
    expect(bar.x + bar.width, `${width} px`).toBeLessThanOrEqual(f.x);
    expect(bar.width, `${width} px`).toBeGreaterThanOrEqual(40);
    expect(toggle.x + toggle.width, `${width} px`).toBeLessThanOrEqual(width);
    const models = await box(app.getByTestId('models-toggle'));
    expect(models.x + models.width, `${width} px`).toBeLessThanOrEqual(bar.x);
  }
}

test('at 320 px (a phone, or 200 % zoom) the header wraps: every control and the budget figures inside the window', async ({
  app,
}) => {
  // A reply's KV held by its chat: the budget's figures at their longer ("87.0 KiB / 11.3 GiB").
  await newChat(app);
  await setSettings(app, { maxNewTokens: 2 });
  await send(app, 'hello');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done');
  for (const [width, height] of [
    [320, 640],
    [640, 450],
    [700, 450],
    [761, 450],
  ] as const) {
    await app.setViewportSize({ width, height });
    // Nothing runs off the side (Tab would scroll the page sideways to it).
    expect(
      await app.evaluate(
        () =>
          (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement
            .scrollWidth,
      ),
    ).toBe(width);
    for (const id of ['models-toggle', 'theme-toggle', 'inspector-toggle', 'header-budget-figures', 'model-picker']) {
      const b = await box(app.getByTestId(id));
      expect(b.x, id).toBeGreaterThanOrEqual(0);
      expect(b.x + b.width, id).toBeLessThanOrEqual(width);
    }
    // A reply's buttons wrap: the chat never scrolls sideways to one of them.
    await lastReply(app).hover();
    expect(
      await app.getByTestId('message-list').evaluate((el) => el.scrollWidth - el.clientWidth),
      `${width} px`,
    ).toBeLessThanOrEqual(0);
    // And none under another: on the theme button's line (a short window's header puts the budget beside its last
    // buttons), the figures end before it or start after it.
    const figures = await box(app.getByTestId('header-budget-figures'));
    const theme = await box(app.getByTestId('theme-toggle'));
    if (Math.abs(figures.y - theme.y) < theme.height)
      expect(figures.x + figures.width <= theme.x || figures.x >= theme.x + theme.width, `${width} px`).toBe(true);
  }
  // Still at 761 px: a budget whose bar shows sixty chats' held KV (each drawn at least 3 px wide) keeps the header
  // one line inside the window; its bar cuts what it cannot show (its figures say the total).
  await app.getByTestId('budget-bar').evaluate((bar) => {
    const doc = (globalThis as unknown as { document: { createElement(t: string): { className: string } } }).document;
    const el = bar as unknown as { append(...n: unknown[]): void };
    el.append(...Array.from({ length: 60 }, () => Object.assign(doc.createElement('span'), { className: 'seg held' })));
  });
  expect(
    await app.evaluate(
      () =>
        (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement
          .scrollWidth,
    ),
  ).toBe(761);
});

test('the message box grows with wrapped text up to a limit, and shows its whole placeholder', async ({ app }) => {
  await app.setViewportSize({ width: 800, height: 600 });
  const input = app.getByTestId('chat-input');
  // The placeholder wraps at this width: the box is tall enough for it.
  await expect.poll(() => input.evaluate((el) => el.scrollHeight <= el.clientHeight + 1)).toBe(true);
  const empty = (await box(input)).height;
  // One line of text, wrapped many times: no \n in it, yet the box grows to show it.
  await input.fill('word '.repeat(40));
  await expect.poll(async () => (await box(input)).height).toBeGreaterThan(empty + 30);
  expect(await input.evaluate((el) => el.scrollHeight <= el.clientHeight + 1)).toBe(true);
  // A very long text stops at the limit and scrolls inside.
  await input.fill('word '.repeat(400));
  await expect.poll(async () => (await box(input)).height).toBeLessThanOrEqual(201);
  expect(await input.evaluate((el) => (globalThis as unknown as Win).getComputedStyle(el).overflowY)).toBe('auto');
  await input.fill('');
  await expect.poll(async () => (await box(input)).height).toBeLessThan(empty + 2);
});

test('a Markdown table keeps its words whole and scrolls in its own box', async ({ app, server }) => {
  await app.setViewportSize({ width: 800, height: 600 });
  const rows = Array.from({ length: 3 }, (_, i) => `| name${i} | a description of row ${i} | 12345.${i} | kilograms |`);
  const table = ['| name | description | value | unit |', '|---|---|---|---|', ...rows].join('\n');
  await openSavedThread(app, server, {
    id: `t-table-${Date.now()}`,
    title: 'Table',
    messages: [
      { role: 'user', content: 'a table' },
      { role: 'assistant', content: `Here:\n\n${table}\n\nDone.` },
    ],
  });
  const reply = lastReply(app);
  const scroll = reply.getByTestId('table-scroll');
  await expect(scroll).toBeVisible();
  expect(await scroll.evaluate((el) => (globalThis as unknown as Win).getComputedStyle(el).overflowX)).toBe('auto');
  // Each header cell is one line: no word broken inside ("nam/e").
  const heights = await reply
    .locator('th')
    .evaluateAll((cells) =>
      cells.map(
        (c) =>
          c.getBoundingClientRect().height /
          Number.parseFloat((globalThis as unknown as Win).getComputedStyle(c).lineHeight),
      ),
    );
  for (const lines of heights) expect(lines).toBeLessThan(2);
  expect(
    await reply
      .locator('td')
      .first()
      .evaluate((c) => (globalThis as unknown as Win).getComputedStyle(c).overflowWrap),
  ).toBe('normal');
});

test("the settings' summary stays one line, cut with its whole text on hover", async ({ app }) => {
  await app.setViewportSize({ width: 800, height: 600 });
  await app.getByTestId('sidebar-toggle').click();
  await newChat(app);
  await app.getByTestId('settings-toggle').click();
  const panel = app.getByTestId('settings-panel');
  for (const [key, value] of [
    ['temperature', '0.7'],
    ['topP', '0.9'],
    ['topK', '40'],
    ['minP', '0.05'],
    ['seed', '7'],
  ] as const) {
    await panel.getByTestId(`setting-${key}`).fill(value);
    await panel.getByTestId(`setting-${key}`).blur();
  }
  const summary = app.getByTestId('settings-summary');
  await expect(summary).toContainText('seed 7');
  await expect(summary).toHaveAttribute('title', /temp 0\.7 · top-p 0\.9 · top-k 40 · min-p 0\.05 · seed 7/);
  const oneLine = await summary.evaluate(
    (el) =>
      el.getBoundingClientRect().height <
      1.5 * Number.parseFloat((globalThis as unknown as Win).getComputedStyle(el).lineHeight),
  );
  expect(oneLine).toBe(true);
});

test("the inspector's request table fits its width and shows the newest 20 ended requests", async ({ app, server }) => {
  await app.setViewportSize({ width: 1000, height: 700 });
  for (let i = 0; i < 22; i++) {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 1 }),
    });
    expect(res.status).toBe(200);
  }
  const table = app.getByTestId('request-table');
  await expect(app.getByTestId('request-row')).toHaveCount(20);
  await expect(app.getByTestId('requests-older')).toContainText(/and \d+ older requests/);
  // Not clipped: the table is no wider than the inspector's room for it.
  const fits = await table.evaluate((el) => {
    const wrap = el.parentElement as unknown as { clientWidth: number };
    return el.getBoundingClientRect().width <= wrap.clientWidth + 1;
  });
  expect(fits).toBe(true);
});

/** Every header and cell of the request table inside the inspector's visible width (no column behind a scroll). */
async function requestColumnsShown(page: Page): Promise<string[]> {
  return page.getByTestId('request-table').evaluate((table) => {
    const wrap = table.parentElement as unknown as {
      getBoundingClientRect(): { left: number; right: number };
      clientWidth: number;
    };
    const inspector = table.closest('[data-testid="inspector"]') as unknown as {
      getBoundingClientRect(): { left: number; right: number };
      clientWidth: number;
    };
    const left = wrap.getBoundingClientRect().left;
    const right = Math.min(left + wrap.clientWidth, inspector.getBoundingClientRect().left + inspector.clientWidth);
    const cut: string[] = [];
    for (const cell of table.querySelectorAll('th, td')) {
      const b = cell.getBoundingClientRect();
      if (b.right > right + 0.5) cut.push(`${(cell.textContent ?? '').trim()} ends at ${b.right}, past ${right}`);
      // Nothing inside a cell runs past it either (its text cut unseen).
      const inner = cell as unknown as { scrollWidth: number; clientWidth: number };
      if (inner.scrollWidth > inner.clientWidth + 1 && !cell.matches('td.thread'))
        cut.push(`${(cell.textContent ?? '').trim()} overflows its cell`);
    }
    return cut;
  });
}

test("the inspector's request table shows every column at 1000 and 1200 px, with wide rows: refused, capped, a session's", async ({
  app,
  server,
}) => {
  const post = async (body: object) => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', temperature: 0, ...body }),
    });
    return { status: res.status, body: (await res.json()) as { choices?: Array<{ message: { content: string } }> } };
  };
  const story = 'Once upon a time a river ran through the old town, and the bakers there sang. '.repeat(30);
  try {
    // A chat of the window with a long title, whose second turn reuses the first's KV (prefix + new, four digits).
    await newChat(app);
    await send(app, story);
    await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
    await send(app, 'And then what happened to the bakers?');
    await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
    // Refused by a tiny budget (its error code under its state), then capped.
    const short = [{ role: 'user', content: 'Tell me about the river' }];
    expect((await wsCall(server, 'configureBudget', { kvBudgetBytes: 8192 })).ok).toBe(true);
    expect((await post({ messages: [{ role: 'user', content: story }], max_tokens: 1800 })).status).toBe(400);
    // The latest refusal (earlier tests on this server had theirs).
    const refused = (await apiSnapshot(server)).recent
      .filter((r) => r.error?.code === 'KV_BUDGET_EXCEEDED')
      .sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0));
    const prompt = refused[0]?.promptTokens ?? 0;
    expect(prompt).toBeGreaterThan(999);
    // Room for the short prompt and about 1,500 tokens of the 1,800 asked: capped, four digits each.
    expect((await wsCall(server, 'configureBudget', { kvBudgetBytes: 1536 * 1024 })).ok).toBe(true);
    expect((await post({ messages: short, max_tokens: 1800 })).status).toBe(200);
  } finally {
    expect((await wsCall(server, 'configureBudget', { kvBudgetBytes: null })).ok).toBe(true);
  }
  await expect(app.getByTestId('request-cap').first()).toHaveText(/^\d{4}\/ ?1800$/);
  await expect(app.getByTestId('request-error').first()).toHaveText('KV_BUDGET_EXCEEDED');
  for (const width of [1000, 1200]) {
    await app.setViewportSize({ width, height: 700 });
    await expect.poll(() => requestColumnsShown(app), { message: `at ${width} px` }).toEqual([]);
  }
});

test('the chat list is one Tab stop: arrows move in it, its pin, rename and delete are reachable', async ({ app }) => {
  const ids: string[] = [];
  // Three chats of their own (a chat given settings is no longer the untouched one New chat opens again).
  for (let i = 0; i < 3; i++) {
    ids.push(await newChat(app));
    await setSettings(app, { maxNewTokens: 4 + i });
  }
  const titles = app.getByTestId('thread-list').getByTestId('thread-title');
  // Opened with the mouse, a chat is ready to type in, and its row keeps its whole title (its buttons show on
  // hover, and while the keyboard is in the row).
  await titles.nth(0).click();
  await expect(app.getByTestId('chat-input')).toBeFocused();
  await app.mouse.move(700, 400);
  await expect(app.getByTestId('thread-list').getByTestId('thread-pin').nth(0)).toBeHidden();
  await app.getByTestId('thread-search').focus();
  await app.keyboard.press('Tab');
  // The open chat (the newest) is the list's stop.
  await expect(app.locator(`[data-thread-id="${ids[2]}"] [data-testid="thread-title"]`)).toBeFocused();
  await app.keyboard.press('ArrowDown');
  await expect(titles.nth(1)).toBeFocused();
  // Right: the chat's own buttons; left: back to its title.
  await app.keyboard.press('ArrowRight');
  await expect(app.getByTestId('thread-list').getByTestId('thread-pin').nth(1)).toBeFocused();
  await app.keyboard.press('ArrowRight');
  await expect(app.getByTestId('thread-list').getByTestId('thread-rename').nth(1)).toBeFocused();
  await app.keyboard.press('ArrowLeft');
  await app.keyboard.press('ArrowLeft');
  await expect(titles.nth(1)).toBeFocused();
  // Tab leaves the list at once, and a few more reach the message box (not every chat's buttons first).
  await app.keyboard.press('Tab');
  await expect(app.locator('#chat-list :focus')).toHaveCount(0);
  let reached = false;
  for (let i = 0; i < 8 && !reached; i++) {
    reached = await app.getByTestId('chat-input').evaluate((el) => el.matches(':focus'));
    if (!reached) await app.keyboard.press('Tab');
  }
  expect(reached).toBe(true);
  // Back in the list, Tab lands on the chat last focused there.
  await app.getByTestId('thread-search').focus();
  await app.keyboard.press('Tab');
  await expect(titles.nth(1)).toBeFocused();
  // Delete asks once more on the chat's delete button: Esc keeps the chat, Enter there deletes it.
  const secondId = await app.locator('#chat-list [data-testid="thread-item"]').nth(1).getAttribute('data-thread-id');
  const second = app.locator(`#chat-list [data-thread-id="${secondId}"]`);
  const others = await app.locator('#chat-list [data-testid="thread-item"]').count();
  await app.keyboard.press('Delete');
  await expect(second.getByTestId('thread-delete')).toBeFocused();
  await expect(second.getByTestId('thread-delete')).toHaveText('delete?');
  await app.keyboard.press('Escape');
  await expect(second.getByTestId('thread-title')).toBeFocused();
  await expect(second.getByTestId('thread-delete')).not.toHaveText('delete?');
  await app.keyboard.press('Backspace');
  await expect(second.getByTestId('thread-delete')).toBeFocused();
  await app.keyboard.press('Enter');
  await expect(second).toHaveCount(0);
  // The focus stays in the list (on its chat), not lost with the button.
  await expect(app.locator('#chat-list [data-testid="thread-title"]:focus')).toHaveCount(1);
  await expect(app.locator('#chat-list [data-testid="thread-item"]')).toHaveCount(others - 1);
});

test("from 901 to 1240 px the middle of a chat's row opens it: its buttons, shown on hover, lie over its end", async ({
  app,
}) => {
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    ids.push(await newChat(app));
    await setSettings(app, { maxNewTokens: 4 + i });
  }
  await app.setViewportSize({ width: 1100, height: 700 });
  const row = app.locator(`#chat-list [data-thread-id="${ids[0]}"]`);
  const b = await box(row);
  await app.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
  await expect(row.getByTestId('thread-pin')).toBeVisible();
  // What the pointer is over there, the buttons shown: the title.
  const under = await app.evaluate(
    ([x, y]) =>
      (
        globalThis as unknown as {
          document: {
            elementFromPoint(
              x: number,
              y: number,
            ): { closest(s: string): { dataset: { testid?: string } } | null } | null;
          };
        }
      ).document
        .elementFromPoint(x as number, y as number)
        ?.closest('button')?.dataset.testid,
    [b.x + b.width / 2, b.y + b.height / 2],
  );
  expect(under).toBe('thread-title');
  await app.mouse.click(b.x + b.width / 2, b.y + b.height / 2);
  await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', ids[0] as string);
  await expect(row).toHaveAttribute('data-pinned', 'false');
});

/** An element's computed opacity. */
function opacity(locator: Locator): Promise<string> {
  return locator.evaluate(
    (el) =>
      (globalThis as unknown as { getComputedStyle(e: unknown): { opacity: string } }).getComputedStyle(el).opacity,
  );
}

test("a message's tools: reached with Tab and shown while focused; their room kept, so hover moves nothing", async ({
  app,
}) => {
  await newChat(app);
  await setSettings(app, { maxNewTokens: 4 });
  await send(app, 'tab to me');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const user = app.getByTestId('message-user').last();
  const tools = user.locator('.who .tools');
  await app.getByTestId('chat-input').focus();
  const before = await user.boundingBox();
  expect(await opacity(tools)).toBe('0');
  await user.hover();
  expect(await opacity(tools)).toBe('1');
  expect((await user.boundingBox())?.height).toBe(before?.height);
  await app.mouse.move(0, 0);
  // Backwards from the message box: the reply's tools, then the question's.
  let reached = false;
  for (let i = 0; i < 30 && !reached; i++) {
    await app.keyboard.press('Shift+Tab');
    reached = await tools.evaluate((el) => el.matches(':focus-within'));
  }
  expect(reached).toBe(true);
  expect(await opacity(tools)).toBe('1');
});

test('the pin is drawn, not an emoji; Esc from the find bar returns to the message box', async ({ app }) => {
  const id = await newChat(app);
  await setSettings(app, { maxNewTokens: 4 });
  await send(app, 'find me');
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  const item = app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
  await item.hover();
  await expect(item.getByTestId('thread-pin').locator('svg')).toHaveCount(1);
  await expect(item.getByTestId('thread-pin')).not.toContainText('📌');
  await item.getByTestId('thread-pin').click();
  await expect(item.getByTestId('thread-pin-mark').locator('svg')).toHaveCount(1);
  await expect(item).not.toContainText('📌');
  await item.getByTestId('thread-pin').click();

  await app.getByTestId('message-list').click();
  await app.keyboard.press('ControlOrMeta+f');
  await expect(app.getByTestId('find-input')).toBeFocused();
  await app.keyboard.press('Escape');
  await expect(app.getByTestId('find-bar')).toHaveCount(0);
  await expect(app.getByTestId('chat-input')).toBeFocused();
});

test('top-p 0 (the likeliest token alone) and seed -1 (a random one) are taken, as the APIs and the CLI take them', async ({
  app,
}) => {
  await newChat(app);
  await app.getByTestId('settings-toggle').click();
  const summary = app.getByTestId('settings-summary');
  const topP = app.getByTestId('setting-topP');
  await topP.fill('0');
  await topP.blur();
  await expect(summary).toContainText('top-p 0 ');
  await expect(app.getByTestId('setting-error-topP')).toHaveCount(0);
  const seed = app.getByTestId('setting-seed');
  await seed.fill('7');
  await seed.blur();
  await expect(summary).toContainText('seed 7');
  // -1: no seed kept (a random one each reply), as an empty field; not refused.
  await seed.fill('-1');
  await seed.blur();
  await expect(summary).not.toContainText('seed');
  await expect(app.getByTestId('setting-error-seed')).toHaveCount(0);
  await seed.fill('-2');
  await seed.blur();
  await expect(app.getByTestId('setting-error-seed')).toHaveText('a whole number, −1 or more: not taken');
  await seed.fill('');
  await topP.fill('');
  await topP.blur();
  await expect(summary).not.toContainText('top-p');
});

test('a number not taken says why beside its field, and the focus goes where the person clicks', async ({ app }) => {
  await newChat(app);
  await app.getByTestId('settings-toggle').click();
  const field = app.getByTestId('setting-maxNewTokens');
  await field.fill('0');
  await field.blur();
  expect(await field.evaluate((el) => (el as unknown as { validationMessage: string }).validationMessage)).toMatch(
    /from 1 to 1,000,000/,
  );
  await expect(app.getByTestId('setting-error-maxNewTokens')).toHaveText(/from 1 to 1,000,000 .*: not taken$/);
  await expect(field).toHaveAttribute('aria-invalid', 'true');
  // The field's name stays its label; the refusal is its description.
  await expect(field).toHaveAccessibleName('max tokens');
  await expect(field).toHaveAccessibleDescription(/^a whole number of tokens from 1 to 1,000,000 .*: not taken$/);
  // Over the top: the same words, with the top named (it is not "at least 1" that was wrong).
  await field.fill('99999999');
  await field.blur();
  await expect(app.getByTestId('setting-error-maxNewTokens')).toHaveText(/from 1 to 1,000,000 .*: not taken$/);
  // A field without a top says "or more", not "∞".
  const topK = app.getByTestId('setting-topK');
  await topK.fill('-3');
  await topK.blur();
  await expect(app.getByTestId('setting-error-topK')).toHaveText('a whole number, 0 or more: not taken');
  await topK.fill('');
  await topK.blur();
  await field.fill('0');
  await field.blur();
  await expect(app.getByTestId('settings-summary')).not.toContainText('max 0');
  // A temperature out of range, then a click elsewhere: the click's field gets the focus and what is typed (the
  // browser's own validity bubble would pull the focus back to the bad field).
  const temperature = app.getByTestId('setting-temperature');
  await app.getByTestId('setting-topP').fill('');
  await temperature.fill('12');
  await app.getByTestId('setting-topP').click();
  await expect(app.getByTestId('setting-topP')).toBeFocused();
  await app.keyboard.type('0.9');
  await expect(temperature).toHaveValue('12');
  await expect(app.getByTestId('setting-error-temperature')).toHaveText('between 0 and 10: not taken');
  await app.getByTestId('chat-input').click();
  await expect(app.getByTestId('chat-input')).toBeFocused();
  await expect(app.getByTestId('setting-topP')).toHaveValue('0.9');
  await expect(app.getByTestId('settings-summary')).toContainText('top-p 0.9');
  await expect(app.getByTestId('settings-summary')).not.toContainText('temp 12');
  // A good value is taken, and the message goes.
  await field.fill('12');
  await field.blur();
  await expect(app.getByTestId('settings-summary')).toContainText('max 12');
  expect(await field.evaluate((el) => (el as unknown as { validationMessage: string }).validationMessage)).toBe('');
  await expect(app.getByTestId('setting-error-maxNewTokens')).toHaveCount(0);
  await expect(field).toHaveAttribute('aria-invalid', 'false');
  await expect(field).toHaveAccessibleDescription('');
  // Edited again, the refusal goes at once (not beside a good value until the field is left); left empty, the
  // temperature is the model's again.
  await expect(app.getByTestId('setting-error-temperature')).toBeVisible();
  await temperature.fill('');
  await expect(app.getByTestId('setting-error-temperature')).toHaveCount(0);
  await expect(temperature).toHaveAttribute('aria-invalid', 'false');
  await temperature.blur();
  await expect(app.getByTestId('setting-error-temperature')).toHaveCount(0);
});

test('scrolled up from the end, a button brings the chat back to its latest message, and so does a message sent', async ({
  app,
  server,
}) => {
  const now = Date.now();
  const id = `t-jump-${now}`;
  const messages = Array.from({ length: 30 }, (_, i) => ({
    id: `m${i}`,
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `Message ${i}: ${'words to fill the line '.repeat(8)}`,
    createdAt: now + i,
  }));
  expect((await wsCall(server, 'saveThread', { id, title: 'Long', createdAt: now, updatedAt: now, messages })).ok).toBe(
    true,
  );
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  const list = app.getByTestId('message-list');
  const jump = app.getByTestId('jump-to-end');
  const fromEnd = () => list.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
  // Opened at its end: no button.
  await expect.poll(fromEnd).toBeLessThan(60);
  await expect(jump).toHaveCount(0);
  await list.evaluate((el) => {
    el.scrollTop = 0;
  });
  await expect(jump).toHaveText('↓ latest');
  await jump.click();
  await expect.poll(fromEnd).toBeLessThan(60);
  await expect(jump).toHaveCount(0);
  await expect(app.locator('[data-message-id="m29"]')).toBeInViewport();

  // Scrolled up again, a message sent from there: the list goes to it, and follows its reply.
  await list.evaluate((el) => {
    el.scrollTop = 0;
  });
  await expect(jump).toHaveText('↓ latest');
  await send(app, 'One more question, sent from up here');
  await expect(app.getByTestId('message-user').last()).toBeInViewport();
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  await expect.poll(fromEnd).toBeLessThan(60);
  await expect(jump).toHaveCount(0);
});

test('a drawer left open in a narrow window does not come back when the window is widened and narrowed again', async ({
  app,
}) => {
  const input = app.getByTestId('chat-input');
  for (const drawer of [
    { button: 'sidebar-toggle', backdrop: 'sidebar-backdrop' },
    { button: 'inspector-toggle', backdrop: 'inspector-backdrop' },
  ]) {
    await app.setViewportSize({ width: 640, height: 720 });
    await app.getByTestId(drawer.button).click();
    await expect(app.getByTestId(drawer.backdrop)).toBeVisible();
    // Maximised, then snapped to half the screen again while typing.
    await app.setViewportSize({ width: 1280, height: 800 });
    await input.fill('hello wor');
    await app.setViewportSize({ width: 640, height: 720 });
    await expect(app.getByTestId(drawer.backdrop)).toHaveCount(0);
    await app.keyboard.type('ld');
    await expect(input).toHaveValue('hello world');
    await expect(input).toBeFocused();
  }
  await input.fill('');
});

test('a window made shorter keeps the chat at its end', async ({ app }) => {
  await app.setViewportSize({ width: 1280, height: 800 });
  await newChat(app);
  await setSettings(app, { maxNewTokens: 30 });
  await send(app, 'hello, '.repeat(150));
  await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
  // Only the height changes: no row is measured again, so no growth moves the list; its size does.
  await app.setViewportSize({ width: 1280, height: 360 });
  const messages = app.getByTestId('message-list');
  await expect
    .poll(async () => {
      const end = await lastReply(app).evaluate((el) => el.getBoundingClientRect().bottom);
      return end - ((await box(messages)).y + (await box(messages)).height);
    })
    .toBeLessThanOrEqual(1);
  await app.setViewportSize({ width: 1280, height: 800 });
});

test.describe('at 200 % zoom', () => {
  test.use({ deviceScaleFactor: 2 });

  test('an 800×600 window (400×300) keeps room for the conversation, settings open too; 1280×800 is as it was', async ({
    app,
  }) => {
    await app.setViewportSize({ width: 1280, height: 800 });
    await newChat(app);
    await setSettings(app, { maxNewTokens: 30 });
    // A message of several lines at 400 px: the chat is taller than the list there (all of it shows at 1280×800).
    await send(app, 'hello, '.repeat(40));
    await expect(lastReply(app)).toHaveAttribute('data-state', /done|error/, { timeout: 30_000 });
    const computed = (selector: string, prop: string) =>
      app
        .locator(selector)
        .first()
        .evaluate(
          (el, p) =>
            (globalThis as unknown as { getComputedStyle(e: unknown): Record<string, string> }).getComputedStyle(el)[p],
          prop,
        );
    // A window of a usual size: the header one line, everything spaced as before, the column not scrolling.
    expect((await box(app.locator('header.header'))).height).toBeLessThan(60);
    for (const [selector, prop, value] of [
      ['header.header', 'padding', '8px 12px'],
      ['.chat-head', 'padding', '8px 16px'],
      ['.composer', 'padding', '10px 24px 12px'],
      ['#chat-input', 'maxHeight', '200px'],
      ['#chat-input', 'padding', '9px 10px'],
      ['.main', 'overflowY', 'visible'],
      ['.messages-wrap', 'minHeight', '0px'],
    ] as const) {
      expect(await computed(selector, prop), `${selector} ${prop}`).toBe(value);
    }

    await app.setViewportSize({ width: 400, height: 300 });
    const column = app.getByTestId('chat-view');
    const messages = app.getByTestId('message-list');
    // The messages keep 40 % of the column (they had 21 px of its 194: a line of the reply), the reply's end
    // and the whole message box in view.
    const roomy = async (what: string) => {
      const m = (await box(messages)).height;
      expect(m, what).toBeGreaterThanOrEqual(90);
      expect(m, what).toBeGreaterThanOrEqual(0.4 * (await box(column)).height - 1);
    };
    await roomy('settings closed');
    await expect(app.getByTestId('chat-input')).toBeInViewport({ ratio: 1 });
    await expect(app.getByTestId('send-button')).toBeInViewport({ ratio: 1 });
    // The list followed the chat's end as it shrank (it showed the top of the chat once, the reply below it).
    await expect
      .poll(async () => {
        const end = await lastReply(app).evaluate((el) => el.getBoundingClientRect().bottom);
        return end - ((await box(messages)).y + (await box(messages)).height);
      })
      .toBeLessThanOrEqual(1);
    await expect(lastReply(app)).toBeInViewport();
    // A draft of many lines: the box stops at its short window's height and scrolls (it was cut off unscrollable).
    const input = app.getByTestId('chat-input');
    await input.fill(Array.from({ length: 12 }, (_, i) => `line ${i + 1}`).join('\n'));
    await expect
      .poll(() =>
        input.evaluate(
          (el) =>
            el.scrollHeight > el.clientHeight &&
            (globalThis as unknown as { getComputedStyle(e: unknown): { overflowY: string } }).getComputedStyle(el)
              .overflowY,
        ),
      )
      .toBe('auto');
    expect((await box(input)).height).toBeLessThanOrEqual(0.3 * 300 + 1);
    await input.fill('');
    // Settings open, a field of theirs focused: the messages keep their room (the column scrolls), and the
    // window's header stays where it is.
    await app.getByTestId('settings-toggle').click();
    await app.getByTestId('setting-temperature').focus();
    await expect(app.getByTestId('setting-temperature')).toBeInViewport({ ratio: 1 });
    await roomy('settings open');
    expect((await box(app.locator('header.header'))).y).toBe(0);
    await expect(app.getByTestId('inspector-toggle')).toBeInViewport({ ratio: 1 });
  });
});

test('a long chat opened at the start keeps following its end while a draft of several lines is typed at once', async ({
  app,
  server,
}) => {
  const list = app.getByTestId('message-list');
  const jump = app.getByTestId('jump-to-end');
  const input = app.getByTestId('chat-input');
  for (const size of [
    { width: 800, height: 600 },
    { width: 1366, height: 768 },
  ]) {
    await app.setViewportSize(size);
    const now = Date.now();
    const id = `t-pinned-${size.width}-${now}`;
    const messages = Array.from({ length: 30 }, (_, i) => ({
      id: `p${size.width}-${i}`,
      role: i % 2 === 0 ? 'user' : 'assistant',
      content: `Message ${i}: ${'words to fill the lines of a long message '.repeat(12)}`,
      createdAt: now + i,
    }));
    const saved = await wsCall(server, 'saveThread', { id, title: 'Long', createdAt: now, updatedAt: now, messages });
    expect(saved.ok).toBe(true);
    await app.reload();
    if (!(await app.getByTestId('sidebar').isVisible())) await app.getByTestId('sidebar-toggle').click();
    await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
    await expect
      .poll(async () => ((await wsCall(server, 'getSettings', {})).value as { lastThreadId?: string }).lastThreadId)
      .toBe(id);
    // Opened from the list, it is the last chat open: the page opens on it, at its end. Lines typed at once, the box growing with each: measuring
    // the box let it shrink for a moment, the list above it grew, and the browser clamped the list's position to
    // that, a scroll up taken for the person's (it stopped following, its end under the box).
    await app.reload();
    await expect(app.getByTestId('chat-view')).toHaveAttribute('data-thread-id', id);
    await input.click();
    for (let i = 0; i < 5; i++) {
      await app.keyboard.type(`line ${i + 1}`);
      await app.keyboard.press('Shift+Enter');
    }
    // The list's last scroll events come within a few frames.
    await app.evaluate(
      () =>
        new Promise((done) => {
          const raf = (globalThis as unknown as { requestAnimationFrame(f: () => void): number }).requestAnimationFrame;
          let frames = 10;
          const next = () => (--frames > 0 ? raf(next) : done(null));
          raf(next);
        }),
    );
    await expect(jump).toHaveCount(0);
    const end = await app
      .locator(`[data-message-id="p${size.width}-29"]`)
      .evaluate((el) => el.getBoundingClientRect().bottom);
    const b = await box(list);
    expect(end - (b.y + b.height)).toBeLessThanOrEqual(1);
    await input.fill('');
  }
});
