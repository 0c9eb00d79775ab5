/**
 * The model library: packages loaded once are listed again after a restart (from the data directory), load
 * with one click, and can be forgotten (a folder of one's own stays on disk; an upload's copy is deleted). A
 * package whose folder went away says so.
 */
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, type Page, test } from '@playwright/test';
import { wsCall } from './fixtures';
import { ROOT, type ServeHandle, startServe } from './serve';

const FIXTURE = path.resolve(ROOT, '../shared/fixtures/onnx-genai/tiny-llm');
const fixtureMissing = !existsSync(FIXTURE);

async function open(page: Page, server: ServeHandle): Promise<void> {
  await page.goto(server.url);
  await expect(page.getByTestId('model-picker')).toHaveValue(/.+/);
  await page.getByTestId('models-toggle').click();
  await expect(page.getByTestId('models-view')).toBeVisible();
}

test.describe('model library', () => {
  test.skip(fixtureMissing, `fixture package ${FIXTURE} is absent`);

  test('remembers packages across a restart: load again, forget, a missing folder, delete an upload', async ({
    page,
  }) => {
    test.setTimeout(120_000);
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-library-'));
    const dataDir = path.join(work, 'data');
    const mine = path.join(work, 'mine-llm');
    const gone = path.join(work, 'gone-llm');
    cpSync(FIXTURE, mine, { recursive: true });
    cpSync(FIXTURE, gone, { recursive: true });
    let server: ServeHandle | null = null;
    try {
      server = await startServe([], 90_000, undefined, dataDir);
      await open(page, server);
      for (const dir of [mine, gone]) expect((await wsCall(server, 'loadModel', { path: dir })).ok).toBe(true);
      // An upload, as a browser drop sends it: into the library, not loaded.
      const files = readdirSync(FIXTURE).map((f) => ({
        path: `upload-llm/${f}`,
        dataBase64: readFileSync(path.join(FIXTURE, f)).toString('base64'),
      }));
      const up = await fetch(`${server.url}/api/models/upload?load=false`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'upload-llm', files }),
      });
      expect(up.status).toBe(200);
      await server.stop();
      rmSync(gone, { recursive: true, force: true });

      // Restart on the same data directory: only the default model is loaded; the rest is the library.
      server = await startServe([], 90_000, undefined, dataDir);
      await open(page, server);
      const rows = page.getByTestId('library-row');
      await expect(rows).toHaveCount(3);
      const row = (id: string) => page.locator(`[data-testid="library-row"][data-model-id="${id}"]`);
      await expect(row('mine-llm')).toHaveAttribute('data-state', 'ok');
      await expect(row('mine-llm').getByTestId('library-fit')).toHaveText(/fits/);
      await expect(row('mine-llm')).toContainText('last loaded today');
      await expect(row('gone-llm')).toHaveAttribute('data-state', 'missing');
      await expect(row('gone-llm').getByTestId('library-error')).toContainText(`${gone} is not there any more`);
      await expect(row('gone-llm').getByTestId('library-load')).toHaveCount(0);
      await expect(row('upload-llm')).toContainText('uploaded');
      await expect(row('upload-llm').getByTestId('library-when')).toHaveText('added today, not loaded yet');

      // One click loads it: it leaves the library for the loaded models, and chats can pick it.
      await row('mine-llm').getByTestId('library-load').click();
      const card = page.locator('[data-testid="loaded-model-card"][data-model-id="mine-llm"]');
      await expect(card).toBeVisible({ timeout: 30_000 });
      await expect(row('mine-llm')).toHaveCount(0);
      await expect(page.getByTestId('model-picker').locator('option[value="mine-llm"]')).toHaveCount(1);
      await card.getByTestId('model-unload').click();
      await expect(row('mine-llm')).toHaveAttribute('data-state', 'ok');

      // An API request that names it loads it on first use: its card says so, and when it goes.
      const api = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mine-llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      });
      expect(api.status).toBe(200);
      await expect(card.getByTestId('model-first-use')).toHaveText('loaded on first use · unloads after 1 h idle');
      await card.getByTestId('model-unload').click();
      await expect(row('mine-llm')).toHaveAttribute('data-state', 'ok');

      // The model picker lists the library too: picking a package loads it and uses it for new replies.
      const picker = page.getByTestId('model-picker');
      await expect(picker.locator(`option[value="library:${mine}"]`)).toHaveCount(1);
      await expect(picker.locator(`option[value="library:${gone}"]`)).toHaveCount(0);
      await picker.selectOption(`library:${mine}`);
      await expect(picker).toHaveValue('mine-llm', { timeout: 30_000 });
      await expect(card).toBeVisible();
      await expect(picker.locator(`option[value="library:${mine}"]`)).toHaveCount(0);
      await card.getByTestId('model-unload').click();
      await expect(row('mine-llm')).toHaveAttribute('data-state', 'ok');
      await expect(picker).not.toHaveValue('mine-llm');

      // Forgetting one's own folder keeps the files; forgetting a missing one clears it.
      await row('mine-llm').getByTestId('library-forget').click();
      await expect(row('mine-llm')).toHaveCount(0);
      expect(existsSync(path.join(mine, 'model.onnx'))).toBe(true);
      await row('gone-llm').getByTestId('library-forget').click();
      await expect(row('gone-llm')).toHaveCount(0);

      // An upload is kvdesk's copy: "Delete" asks once more, then its files go.
      const uploadRoot = (await row('upload-llm').getAttribute('data-root')) ?? '';
      expect(uploadRoot.startsWith(path.join(dataDir, 'models'))).toBe(true);
      await row('upload-llm').getByTestId('library-forget').click();
      await expect(row('upload-llm')).toHaveCount(1);
      expect(existsSync(uploadRoot)).toBe(true);
      // The question takes the focus to its safe answer; Esc keeps the files, and the focus goes back to Delete.
      await expect(row('upload-llm').getByTestId('library-delete-keep')).toBeFocused();
      await page.keyboard.press('Escape');
      await expect(row('upload-llm').getByTestId('library-forget')).toBeFocused();
      await page.keyboard.press('Enter');
      await row('upload-llm').getByTestId('library-delete-confirm').click();
      await expect(rows).toHaveCount(0);
      expect(existsSync(uploadRoot)).toBe(false);

      // What was forgotten stays forgotten after a reload.
      await page.reload();
      await page.getByTestId('models-toggle').click();
      await expect(page.getByTestId('models-view')).toBeVisible();
      await expect(rows).toHaveCount(0);
    } finally {
      await server?.stop();
      rmSync(work, { recursive: true, force: true });
    }
  });

  test('two folders of one name are two models: the picker and the library tell them apart, and Load loads the one clicked', async ({
    page,
  }) => {
    test.setTimeout(90_000);
    const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-same-name-'));
    const x = path.join(work, 'x', 'model');
    const y = path.join(work, 'y', 'model');
    cpSync(FIXTURE, x, { recursive: true });
    cpSync(FIXTURE, y, { recursive: true });
    let server: ServeHandle | null = null;
    try {
      server = await startServe([], 90_000, undefined, path.join(work, 'data'));
      await open(page, server);
      for (const dir of [x, y]) expect((await wsCall(server, 'loadModel', { path: dir })).ok).toBe(true);
      const picker = page.getByTestId('model-picker');
      await expect(picker.locator('option[value="model"]')).toHaveText('model');
      await expect(picker.locator('option[value="model-2"]')).toHaveText('model (model-2)');
      // Unloaded, the second is the library's, under its own name; its Load loads it beside the first.
      expect((await wsCall(server, 'unloadModel', { id: 'model-2' })).ok).toBe(true);
      await expect(picker.locator(`option[value="library:${y}"]`)).toHaveText('model (model-2)');
      const row = page.locator('[data-testid="library-row"][data-model-id="model-2"]');
      await expect(row).toHaveAttribute('data-root', y);
      await row.getByTestId('library-load').click();
      await expect(page.locator('[data-testid="loaded-model-card"][data-model-id="model-2"]')).toBeVisible({
        timeout: 30_000,
      });
      await expect(page.locator('[data-testid="loaded-model-card"][data-model-id="model"]')).toBeVisible();
      await expect(picker.locator('option[value="model"]')).toHaveCount(1);
      await expect(picker.locator('option[value="model-2"]')).toHaveCount(1);
    } finally {
      await server?.stop();
      rmSync(work, { recursive: true, force: true });
    }
  });
});
