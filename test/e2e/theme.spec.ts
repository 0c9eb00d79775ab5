/**
 * Light and dark, in Chromium against a real serve: as the OS is (prefers-color-scheme), or the person's pick from
 * the header's theme button, kept with the settings across a reload and taken up by the other open pages.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { expect, test } from './fixtures';

const LIGHT = 'rgb(247, 247, 248)';
const DARK = 'rgb(21, 23, 26)';
const background = (page: Page) =>
  page.evaluate(() => {
    const g = globalThis as unknown as {
      getComputedStyle(e: unknown): { backgroundColor: string };
      document: { documentElement: unknown };
    };
    return g.getComputedStyle(g.document.documentElement).backgroundColor;
  });

test('the theme follows the OS, or the pick, which a reload keeps', async ({ app }) => {
  const button = app.getByTestId('theme-toggle');
  await app.emulateMedia({ colorScheme: 'light' });
  await expect(button).toHaveAttribute('data-theme', 'system');
  await expect.poll(() => background(app)).toBe(LIGHT);
  await app.emulateMedia({ colorScheme: 'dark' });
  await expect.poll(() => background(app)).toBe(DARK);

  // Picked: light whatever the OS says, then dark.
  await button.click();
  await expect(button).toHaveAttribute('data-theme', 'light');
  await expect.poll(() => background(app)).toBe(LIGHT);
  await button.click();
  await expect(button).toHaveAttribute('data-theme', 'dark');
  await app.emulateMedia({ colorScheme: 'light' });
  await expect.poll(() => background(app)).toBe(DARK);
  // Kept with the settings.
  await expect(async () => {
    await app.reload();
    await expect(button).toHaveAttribute('data-theme', 'dark', { timeout: 2000 });
  }).toPass({ timeout: 20_000 });
  await expect.poll(() => background(app)).toBe(DARK);

  // Back to the OS's.
  await button.click();
  await expect(button).toHaveAttribute('data-theme', 'system');
  await expect.poll(() => background(app)).toBe(LIGHT);
});

test('a pick in one page is taken up by the other pages open', async ({ app, context, server }) => {
  const other = await context.newPage();
  await other.goto(server.url);
  await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await app.emulateMedia({ colorScheme: 'light' });
  await other.emulateMedia({ colorScheme: 'light' });
  const button = app.getByTestId('theme-toggle');
  const theirs = other.getByTestId('theme-toggle');
  await expect(theirs).toHaveAttribute('data-theme', 'system');
  await button.click(); // light
  await button.click(); // dark
  await expect(theirs).toHaveAttribute('data-theme', 'dark');
  await expect.poll(() => background(other)).toBe(DARK);
  await button.click(); // back to the OS's
  await expect(theirs).toHaveAttribute('data-theme', 'system');
  await expect.poll(() => background(other)).toBe(LIGHT);
  await other.close();
});

test("the page's icon is kvdesk's, served beside it", async ({ app, server }) => {
  const href = await app.locator('link[rel="icon"]').getAttribute('href');
  expect(href).toBe('./icon.svg');
  const res = await fetch(new URL(href ?? '', `${server.url}/`));
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('image/svg+xml');
  expect(await res.text()).toContain('<svg');
});

/** WCAG's contrast ratio of two `rgb(r, g, b)` colours. */
function contrast(a: string, b: string): number {
  const lum = (c: string) => {
    const [r, g, bl] = (c.match(/\d+(\.\d+)?/g) ?? []).slice(0, 3).map((v) => {
      const s = Number(v) / 255;
      return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    }) as [number, number, number];
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x) as [number, number];
  return (hi + 0.05) / (lo + 0.05);
}

test('placeholders (the message box hint, the limit now) read at 4.5:1 in both themes', async ({ app }) => {
  const input = app.locator('#chat-input');
  await expect(input).toHaveAttribute('placeholder', /.+/);
  // The OS's scheme decides (no pick left by another test on this server).
  await expect(app.getByTestId('theme-toggle')).toHaveAttribute('data-theme', 'system');
  const colours = () =>
    input.evaluate((e) => {
      const g = globalThis as unknown as {
        getComputedStyle(e: unknown, pseudo?: string): { color: string; backgroundColor: string };
      };
      return {
        text: g.getComputedStyle(e, '::placeholder').color,
        own: g.getComputedStyle(e).color,
        bg: g.getComputedStyle(e).backgroundColor,
      };
    });
  for (const colorScheme of ['light', 'dark'] as const) {
    await app.emulateMedia({ colorScheme });
    await expect.poll(async () => contrast((await colours()).text, (await colours()).bg)).toBeGreaterThanOrEqual(4.5);
    // The placeholder's own colour was read (not the text's, which passes anyway).
    const { text, own } = await colours();
    expect(text).not.toBe(own);
  }
});

test('two pages changing different settings at the same moment keep both changes', async ({ app, context, server }) => {
  const other = await context.newPage();
  await other.goto(server.url);
  await expect(other.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const file = path.join(server.dataDir, 'settings.json');
  const saved = () => JSON.parse(readFileSync(file, 'utf8')) as { theme?: string; inspectorOpen?: boolean };
  const theme = app.getByTestId('theme-toggle');
  const inspector = other.getByTestId('inspector-toggle');
  await expect(theme).toHaveAttribute('data-theme', 'system');
  await expect(inspector).toHaveAttribute('aria-pressed', 'true');
  // At once: this page picks a theme, the other hides its inspector.
  await Promise.all([theme.click(), inspector.click()]);
  await expect(inspector).toHaveAttribute('aria-pressed', 'false');
  await expect.poll(saved).toMatchObject({ theme: 'light', inspectorOpen: false });
  // Then this page, which still shows its own inspector (a page keeps its own as it is), picks another theme: its
  // save is of the theme, not of an inspector shown as it was before the other page hid it.
  await expect(app.getByTestId('inspector-toggle')).toHaveAttribute('aria-pressed', 'true');
  await theme.click();
  await expect(theme).toHaveAttribute('data-theme', 'dark');
  await expect(other.getByTestId('theme-toggle')).toHaveAttribute('data-theme', 'dark');
  await expect.poll(saved).toMatchObject({ theme: 'dark', inspectorOpen: false });
  // A page opened now has both.
  await other.reload();
  await expect(other.getByTestId('theme-toggle')).toHaveAttribute('data-theme', 'dark');
  await expect(inspector).toHaveAttribute('aria-pressed', 'false');
  // As the other tests on this file's server expect them: the OS's theme, the inspector shown.
  await theme.click();
  await inspector.click();
  await expect.poll(saved).toMatchObject({ inspectorOpen: true });
  expect(saved().theme).toBeUndefined();
  await other.close();
});
