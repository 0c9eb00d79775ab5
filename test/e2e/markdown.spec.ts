/**
 * Replies as Markdown, in Chromium against a real serve: math typeset by KaTeX (LaTeX's \[…\] and \(…\), $…$ read
 * as math, ```math blocks) with its fonts loaded under the page's Content-Security-Policy; money and code left as
 * written; code blocks highlighted by their language, their copy button giving the source, not the markup.
 */
import type { Page as Tab } from '@playwright/test';
import { expect, lastReply, openSavedChat, test, wsCall } from './fixtures';

/** What this test reads of the page's globals (the e2e tests type-check without the DOM's types). */
interface Page {
  cspViolations: string[];
  document: {
    addEventListener(
      type: string,
      f: (e: { violatedDirective: string; blockedURI: string; sourceFile: string; lineNumber: number }) => void,
    ): void;
    fonts: { ready: Promise<unknown> } & Iterable<{ family: string; status: string }>;
  };
  navigator: { clipboard: { readText(): Promise<string> } };
  getComputedStyle(el: unknown): { color: string };
}

const REPLY = [
  'The roots are \\[ x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a} \\] when \\( a \\neq 0 \\), and the area is $\\pi r^2$.',
  '',
  'It costs $5 and $10; run `echo $HOME $x$` to see.',
  '',
  '```math',
  'e^{i\\pi} + 1 = 0',
  '```',
  '',
  'A broken one: $$\\frac{1$$.',
  '',
  '1. Solve: \\[ y = 2 \\] then',
  '2. Check it.',
  '',
  '$$E = mc^2$$',
  '',
  '> A quote, set apart.',
  '',
  'Raw <b>bold</b> and <script>alert(1)</script> stay text.',
  '',
  '<div>a block</div>',
  '',
  '```python',
  'def area(r):',
  '    # a comment',
  '    return 3.14 * r ** 2',
  '```',
].join('\n');

/**
 * Saves a chat whose reply (message "a") stopped at its length limit with `content`, and opens it: the reply, which
 * its continue button takes on.
 */
async function openStoppedReply(
  app: Tab,
  server: Parameters<typeof wsCall>[0],
  name: string,
  content: string,
): Promise<ReturnType<typeof lastReply>> {
  await openSavedChat(app, server, name, [
    { id: 'u', role: 'user', content: 'Write' },
    { id: 'a', role: 'assistant', content, stats: { tokens: 10, finishReason: 'length' } },
  ]);
  return lastReply(app);
}

test('math is typeset, money and code stay as written, and code is highlighted', async ({ app, server }) => {
  // Every Content-Security-Policy violation the page reports (a font refused, a style attribute blocked…).
  await app.addInitScript(() => {
    const seen: string[] = [];
    const g = globalThis as unknown as Page;
    g.cspViolations = seen;
    g.document.addEventListener('securitypolicyviolation', (e) =>
      seen.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`),
    );
  });
  const now = Date.now();
  const id = `t-markdown-${now}`;
  const saved = await wsCall(server, 'saveThread', {
    id,
    title: 'Markdown',
    createdAt: now,
    updatedAt: now,
    messages: [
      { id: 'u', role: 'user', content: 'Solve it', createdAt: now },
      { id: 'a', role: 'assistant', content: REPLY, createdAt: now + 1 },
    ],
  });
  expect(saved.ok).toBe(true);
  await app.reload();
  await app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click({ timeout: 15_000 });
  const reply = app.getByTestId('message-assistant').last();

  // Four display formulas (\[…\], ```math, \[…\] in a list item, a line of $$…$$), two inline ones (\(…\) and
  // $…$), one that does not parse.
  await expect(reply.locator('.katex-display')).toHaveCount(4);
  await expect(reply.locator('.katex-display annotation').nth(3)).toHaveText('E = mc^2');
  // A quote is set apart; raw HTML is the text the model wrote, never markup, never dropped.
  const quote = reply.locator('blockquote');
  await expect(quote).toHaveText('A quote, set apart.');
  expect(
    await quote.evaluate(
      (el) =>
        (globalThis as unknown as { getComputedStyle(e: unknown): { borderLeftStyle: string } }).getComputedStyle(el)
          .borderLeftStyle,
    ),
  ).toBe('solid');
  await expect(reply).toContainText('Raw <b>bold</b> and <script>alert(1)</script> stay text.');
  await expect(reply).toContainText('<div>a block</div>');
  await expect(reply.locator('.bubble b, .bubble script, .bubble div:not([class])')).toHaveCount(0);
  // The one in the list stays in its item, and the list keeps both items.
  await expect(reply.locator('ol > li')).toHaveCount(2);
  await expect(reply.locator('ol > li').first().locator('.katex-display')).toHaveCount(1);
  await expect(reply.locator('ol > li').first()).toContainText('then');
  await expect(reply.locator('p .katex:not(.katex-display .katex)')).toHaveCount(2);
  await expect(reply.locator('.katex-display annotation').first()).toHaveText(
    'x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a}',
  );
  await expect(reply.locator('.katex-error')).toHaveText('\\frac{1');
  // Money and code are text.
  await expect(reply).toContainText('It costs $5 and $10');
  await expect(reply.locator('code', { hasText: 'echo' })).toHaveText('echo $HOME $x$');
  // KaTeX's fonts load from the app (the CSP allows nothing else).
  const fontsLoaded = await app.evaluate(async () => {
    const { fonts } = (globalThis as unknown as Page).document;
    await fonts.ready;
    return [...fonts].filter((f) => f.family.includes('KaTeX') && f.status === 'loaded').length;
  });
  expect(fontsLoaded).toBeGreaterThan(0);

  // The Python block: highlighted, and its copy button gives the source.
  const code = reply.locator('pre code.language-python');
  await expect(code.locator('.hljs-keyword').first()).toHaveText('def');
  await expect(code.locator('.hljs-comment')).toHaveText('# a comment');
  const keywordColour = await code
    .locator('.hljs-keyword')
    .first()
    .evaluate((el) => (globalThis as unknown as Page).getComputedStyle(el).color);
  const textColour = await code.evaluate((el) => (globalThis as unknown as Page).getComputedStyle(el).color);
  expect(keywordColour).not.toBe(textColour);
  // Its copy button sits above the code, not over its first line.
  const copyBox = await reply
    .locator('.code-block', { has: app.locator('code.language-python') })
    .getByTestId('code-copy')
    .boundingBox();
  const codeBox = await code.boundingBox();
  if (!copyBox || !codeBox) throw new Error('the code block or its copy button has no box');
  expect(copyBox.y + copyBox.height).toBeLessThanOrEqual(codeBox.y + 1);
  await app.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await reply
    .locator('.code-block', { has: app.locator('code.language-python') })
    .getByTestId('code-copy')
    .click();
  expect(await app.evaluate(() => (globalThis as unknown as Page).navigator.clipboard.readText())).toBe(
    'def area(r):\n    # a comment\n    return 3.14 * r ** 2',
  );
  expect(await app.evaluate(() => (globalThis as unknown as Page).cspViolations)).toEqual([]);
});

test('a reply being written colours the code blocks it went past; the growing one keeps its elements when it ends, and takes its colours in a task of its own', async ({
  app,
  server,
}) => {
  const reply = await openStoppedReply(
    app,
    server,
    'code',
    '```python\ndef first(r):\n    return r\n```\n\nThen the second:\n\n```python\ndef area(r):\n    return r\n',
  );
  await expect(reply.locator('pre code')).toHaveCount(2);
  await expect(reply.locator('pre code').nth(1).locator('.hljs-keyword').first()).toHaveText('def');
  // Every change of the reply, as the page makes it: whether it was live, and which of its code blocks were coloured.
  // While it is live, the growing block's <pre> is tagged: a property of the element, which one built again lacks.
  await app.evaluate(() => {
    interface El {
      getAttribute(n: string): string | null;
      querySelectorAll(s: string): ArrayLike<{ querySelector(s: string): unknown; kvdeskLive?: boolean }>;
    }
    const g = globalThis as unknown as {
      seen: Array<{ state: string | null; coloured: boolean[] }>;
      document: { body: unknown; querySelector(s: string): El | null };
      MutationObserver: new (
        f: () => void,
      ) => { observe(n: unknown, o: { subtree: boolean; childList: boolean; attributes: boolean }): void };
    };
    g.seen = [];
    new g.MutationObserver(() => {
      const el = g.document.querySelector('[data-testid="message-assistant"][data-message-id="a"]');
      if (!el) return;
      const codes = Array.from(el.querySelectorAll('pre code'));
      const growing = el.querySelectorAll('pre')[1];
      if (growing && !/done|cancelled/.test(el.getAttribute('data-state') ?? '')) growing.kvdeskLive = true;
      g.seen.push({
        state: el.getAttribute('data-state'),
        coloured: codes.map((c) => c.querySelector('.hljs-keyword') !== null),
      });
    }).observe(g.document.body, { subtree: true, childList: true, attributes: true });
  });
  await reply.hover();
  await reply.getByTestId('continue').click();
  await expect(reply).toHaveAttribute('data-state', /done|cancelled/, { timeout: 30_000 });
  await expect(reply.locator('pre code').nth(1).locator('.hljs-keyword').first()).toHaveText('def');
  const seen = await app.evaluate(
    () => (globalThis as unknown as { seen: Array<{ state: string | null; coloured: boolean[] }> }).seen,
  );
  const ended = (r: { state: string | null }) => r.state === 'done' || r.state === 'cancelled';
  const live = seen.filter((r) => !ended(r));
  // Live, the block it went past was coloured and the one growing was not.
  expect(live.length).toBeGreaterThan(0);
  expect(live.filter((r) => r.coloured[0] !== true || r.coloured[1] !== false)).toEqual([]);
  // The frame that ended it left the growing block plain; its colours came in a later task.
  expect(seen.find(ended)).toEqual({ state: expect.stringMatching(/done|cancelled/), coloured: [true, false] });
  expect(seen.at(-1)).toEqual({ state: expect.stringMatching(/done|cancelled/), coloured: [true, true] });
  // Neither the end nor the colours built that block again: its <pre> is the element it was while live.
  expect(
    await reply
      .locator('pre')
      .nth(1)
      .evaluate((pre) => (pre as unknown as { kvdeskLive?: boolean }).kvdeskLive === true),
  ).toBe(true);
});

test('a reply that ends keeps the elements of its finished paragraphs (only its last block is built again)', async ({
  app,
  server,
}) => {
  const reply = await openStoppedReply(
    app,
    server,
    'blocks',
    'The first paragraph, long finished.\n\nThe second one, finished too.\n\nThe third',
  );
  await expect(reply.locator('p').first()).toHaveText('The first paragraph, long finished.');
  // While the reply is live (seen by a mutation observer, synchronously), its paragraphs are tagged: a property of
  // each element, which an element built again would not have.
  await app.evaluate(() => {
    interface El {
      getAttribute(n: string): string | null;
      querySelectorAll(s: string): Iterable<{ kvdeskLive?: boolean }>;
    }
    const g = globalThis as unknown as {
      tagged: number;
      document: { body: unknown; querySelector(s: string): El | null };
      MutationObserver: new (
        f: () => void,
      ) => { observe(n: unknown, o: { subtree: boolean; childList: boolean; attributes: boolean }): void };
    };
    g.tagged = 0;
    new g.MutationObserver(() => {
      const el = g.document.querySelector('[data-testid="message-assistant"][data-message-id="a"]');
      if (!el || g.tagged > 0 || el.getAttribute('data-state') === 'done') return;
      for (const p of el.querySelectorAll('[data-testid="message-text"] p')) {
        p.kvdeskLive = true;
        g.tagged++;
      }
    }).observe(g.document.body, { subtree: true, childList: true, attributes: true });
  });
  await reply.hover();
  await reply.getByTestId('continue').click();
  await expect(reply).toHaveAttribute('data-state', /done|cancelled/, { timeout: 30_000 });
  expect(await app.evaluate(() => (globalThis as unknown as { tagged: number }).tagged)).toBeGreaterThanOrEqual(2);
  const kept = await reply
    .locator('[data-testid="message-text"] p')
    .evaluateAll((ps) => ps.slice(0, 2).map((p) => (p as unknown as { kvdeskLive?: boolean }).kvdeskLive === true));
  // The two paragraphs that were finished before the reply went on are the elements they were while it streamed.
  expect(kept).toEqual([true, true]);
  await expect(reply.locator('p').first()).toHaveText('The first paragraph, long finished.');
});

/** What the right-to-left test reads of an element and the page (the e2e tests type-check without the DOM's types). */
interface Laid {
  getComputedStyle(el: unknown): { direction: string };
  document: { createRange(): { setStart(n: unknown, o: number): void; setEnd(n: unknown, o: number): void } & Box };
}
interface Box {
  getBoundingClientRect(): { left: number; right: number };
}
interface TextHolder extends Box {
  firstChild: { nodeValue: string | null } | null;
}

/**
 * Where a block's first and last characters are (one text node holds them: a paragraph, a message), and the one at
 * `at`; its own edges, and its direction as the browser resolved it.
 */
async function laidOut(el: import('@playwright/test').Locator, at = 0) {
  return el.evaluate((node, index) => {
    const g = globalThis as unknown as Laid;
    const holder = node as unknown as TextHolder;
    const text = holder.firstChild;
    const at = (i: number) => {
      const range = g.document.createRange();
      range.setStart(text, i);
      range.setEnd(text, i + 1);
      return range.getBoundingClientRect();
    };
    // (A message's line ends with its newline, which is not laid out.)
    const n = (text?.nodeValue ?? '').replace(/\n$/, '').length;
    const box = holder.getBoundingClientRect();
    return { direction: g.getComputedStyle(node).direction, first: at(0), last: at(n - 1), char: at(index), box };
  }, at);
}

const direction = (el: import('@playwright/test').Locator) =>
  el.evaluate((node) => (globalThis as unknown as Laid).getComputedStyle(node).direction);

// Hebrew reads right to left: a question's `?` ends it on the left. Each block of a reply has its own direction (an
// English paragraph among Hebrew ones reads left to right), code reads left to right, and so do the title, the
// chat's row, a message's lines, the message box and the search box when they hold Hebrew.
test('right-to-left text reads right to left, each block of a reply in its own direction, code left to right', async ({
  app,
  server,
}) => {
  const title = 'שיחה על מזג האוויר';
  const reply = [
    'מה שלומך היום?',
    '',
    'This paragraph is English.',
    '',
    '**مرحبا** means hello.',
    '',
    '- פריט ראשון',
    '- פריט שני',
    '',
    '> ציטוט קצר',
    '',
    '```python',
    'print("hi")',
    '```',
    '',
    'פקודה `ls -la` בתוך משפט.',
  ].join('\n');
  const id = await openSavedChat(
    app,
    server,
    'rtl',
    [
      { id: 'u', role: 'user', content: 'שלום לכולם, מה שלומכם היום?\nAnd English.\nשלום means hello.' },
      { id: 'a', role: 'assistant', content: reply },
    ],
    { title },
  );
  await expect(app.getByTestId('chat-title')).toHaveText(title);
  expect(await direction(app.getByTestId('chat-title'))).toBe('rtl');
  const row = app.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).getByTestId('thread-title');
  expect(await direction(row)).toBe('rtl');

  // The message: right to left, and each line in its own direction.
  const user = app.getByTestId('message-user').last().getByTestId('message-text');
  expect(await direction(user)).toBe('rtl');
  const lines = user.locator('.line');
  const asked = await laidOut(lines.nth(0), 'שלום לכולם, מה שלומכם היום?'.length - 1);
  // Its Hebrew line starts at the right, and its `?` is left of its first letter.
  expect(asked.first.right).toBeGreaterThan(asked.box.right - 20);
  expect(asked.char.right).toBeLessThanOrEqual(asked.first.left);
  // Its English line starts at the left, and ends with its full stop on the right.
  const englishLine = await laidOut(lines.nth(1));
  expect(englishLine.first.left).toBeLessThan(englishLine.box.left + 20);
  expect(englishLine.last.left).toBeGreaterThan(englishLine.first.right);
  // A line of English that opens with a Hebrew word (a lesson): left to right, as most of its letters read.
  const lesson = await laidOut(lines.nth(2), 'שלום '.length);
  expect(lesson.first.left).toBeLessThan(lesson.box.left + 60);
  expect(lesson.last.left).toBeGreaterThan(lesson.char.right);
  // The text reads (and copies) as it was written, its newlines kept.
  expect(await user.textContent()).toBe('שלום לכולם, מה שלומכם היום?\nAnd English.\nשלום means hello.');

  const bubble = lastReply(app).getByTestId('message-text');
  expect(await direction(bubble)).toBe('rtl');
  const question = await laidOut(bubble.locator('p').first());
  expect(question.direction).toBe('rtl');
  expect(question.last.right).toBeLessThanOrEqual(question.first.left);
  const english = await laidOut(bubble.locator('p', { hasText: 'English' }));
  expect(english.direction).toBe('ltr');
  expect(english.first.left).toBeLessThan(english.box.left + 20);
  // An English paragraph that opens with an Arabic word: left to right too.
  expect(await direction(bubble.locator('p', { hasText: 'means hello' }))).toBe('ltr');
  expect(await direction(bubble.locator('ul'))).toBe('rtl');
  expect(await direction(bubble.locator('li').first())).toBe('rtl');
  expect(await direction(bubble.locator('blockquote'))).toBe('rtl');
  // A quote's bar is on the side it starts from.
  const bar = await bubble
    .locator('blockquote')
    .evaluate((el) =>
      (globalThis as unknown as { getComputedStyle(e: unknown): { borderRightStyle: string } }).getComputedStyle(el),
    );
  expect(bar.borderRightStyle).toBe('solid');
  // Code reads left to right, in a block or in a Hebrew sentence.
  expect(await direction(bubble.locator('.code-block'))).toBe('ltr');
  expect(await direction(bubble.locator('pre'))).toBe('ltr');
  expect(await direction(bubble.locator('p code'))).toBe('ltr');
  expect(await direction(bubble.locator('p', { has: app.locator('code') }))).toBe('rtl');

  // Typed: the message box and the search box read right to left once they hold Hebrew.
  const input = app.getByTestId('chat-input');
  await input.fill('שאלה חדשה?');
  expect(await direction(input)).toBe('rtl');
  await input.fill('');
  expect(await direction(input)).toBe('ltr');
  const search = app.getByTestId('thread-search');
  await search.fill('מזג');
  expect(await direction(search)).toBe('rtl');
  await expect(app.getByTestId('thread-item')).toHaveCount(1);
  await search.fill('');
});

test('KaTeX and highlight.js are loaded with the first reply that needs them, not with the page', async ({
  app,
  server,
}) => {
  const now = Date.now();
  const mathId = `t-lazy-math-${now}`;
  const saved = await wsCall(server, 'saveThread', {
    id: mathId,
    title: 'Lazy math',
    createdAt: now,
    updatedAt: now,
    messages: [
      { id: 'u', role: 'user', content: 'Solve it', createdAt: now },
      { id: 'a', role: 'assistant', content: 'It is \\( x = 2 \\), and:\n\n```python\nx = 2\n```', createdAt: now + 1 },
    ],
  });
  expect(saved.ok).toBe(true);
  const plainId = await openSavedChat(app, server, 'lazy-plain', [
    { id: 'u', role: 'user', content: 'Hello' },
    { id: 'a', role: 'assistant', content: 'Just words: nothing to typeset, nothing to colour.' },
  ]);
  // The page as it opens with that chat (the last one open) and nothing else: no math, no code.
  await expect
    .poll(
      async () => {
        await app.reload();
        await expect(app.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
        return app.getByTestId('chat-view').getAttribute('data-thread-id');
      },
      { timeout: 15_000 },
    )
    .toBe(plainId);
  await expect(lastReply(app)).toContainText('Just words');
  const extrasLoaded = () =>
    app.evaluate(() =>
      (globalThis as unknown as { performance: { getEntriesByType(t: string): Array<{ name: string }> } }).performance
        .getEntriesByType('resource')
        .some((e) => /markdown-extras/.test(e.name)),
    );
  expect(await extrasLoaded()).toBe(false);
  // A reply with math and code: they come, and it is typeset and coloured.
  await app.getByTestId('thread-list').locator(`[data-thread-id="${mathId}"]`).click();
  const reply = lastReply(app);
  await expect(reply.locator('.katex')).toHaveCount(1);
  await expect(reply.locator('pre code .hljs-keyword, pre code .hljs-number').first()).toBeVisible();
  expect(await extrasLoaded()).toBe(true);
});
