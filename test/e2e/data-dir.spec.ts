/**
 * Saved data kvdesk cannot use is said in the window, named, and kept: a chat file that is not JSON is left as it is
 * and named in a notice that stays until dismissed; a settings file that is not JSON is moved aside, not written over.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import { RECOVERED_FRAGMENT } from '../../src/shared/api';
import { startServe } from './serve';

test('a damaged chat file and settings file: named in the window, left on disk, the rest of the chats there', async ({
  page,
}) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-data-'));
  mkdirSync(path.join(dataDir, 'threads'));
  const good = {
    id: 't-good',
    title: 'A chat that reads fine',
    createdAt: 1,
    updatedAt: 2,
    messages: [{ id: 'm1', role: 'user', content: 'hello', createdAt: 1 }],
  };
  writeFileSync(path.join(dataDir, 'threads', 't-good.json'), JSON.stringify(good));
  writeFileSync(path.join(dataDir, 'threads', 't-cut.json'), '{"id": "t-cut", "title": "cut short');
  writeFileSync(path.join(dataDir, 'settings.json'), '{"theme": "dark", "presets": [');
  const server = await startServe([], 90_000, undefined, dataDir);
  try {
    // The page's clock, to run past the other notices' 10 s without waiting them out.
    await page.clock.install();
    // (As a page loaded again after its process was gone: that is said in the same notice.)
    await page.goto(server.url + RECOVERED_FRAGMENT);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(page.getByTestId('thread-list').locator('[data-thread-id="t-good"]')).toBeVisible();
    const notice = page.getByTestId('sticky-notice');
    await expect(notice).toContainText("kvdesk's window stopped unexpectedly and was loaded again");
    await expect(notice).toContainText('Some saved data could not be used');
    await expect(notice).toContainText('t-cut.json is not valid JSON');
    await expect(notice).toContainText('1 more');
    await expect(notice.locator('span')).toHaveText(/see kvdesk's log\)\.$/);
    // The damaged chat file is where it was, as it was; the settings file is kept aside, whole.
    expect(readFileSync(path.join(dataDir, 'threads', 't-cut.json'), 'utf8')).toBe(
      '{"id": "t-cut", "title": "cut short',
    );
    const aside = readdirSync(dataDir).find((f) => f.startsWith('settings.json.unreadable-'));
    expect(aside, readdirSync(dataDir).join(', ')).toBeDefined();
    expect(readFileSync(path.join(dataDir, aside as string), 'utf8')).toBe('{"theme": "dark", "presets": [');
    // It stays past the time other notices take (10 s) until dismissed.
    await page.clock.fastForward(11_000);
    await expect(notice).toBeVisible();
    // In a phone's width it stays inside the window, under the header (which wraps there), not over it.
    await page.setViewportSize({ width: 380, height: 700 });
    await expect(async () => {
      const box = await notice.boundingBox();
      const header = await page.locator('.header').boundingBox();
      expect(box && header).toBeTruthy();
      if (!box || !header) return;
      expect(box.x).toBeGreaterThanOrEqual(0);
      expect(box.x + box.width).toBeLessThanOrEqual(380);
      expect(box.y).toBeGreaterThanOrEqual(header.y + header.height);
    }).toPass();
    await notice.getByRole('button', { name: 'dismiss' }).click();
    await expect(notice).toHaveCount(0);
    expect(existsSync(path.join(dataDir, 'threads', 't-cut.json'))).toBe(true);
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
