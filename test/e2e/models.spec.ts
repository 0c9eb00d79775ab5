/**
 * Model packages: a fixture package dropped on the window is validated and
 * shown (card with bpt and fit badge), then loaded by its Load; a broken
 * package chosen with the folder input shows its error with file and field.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultModelDir } from '../helpers/fixtures';
import { writeTwinPackages } from '../helpers/static-cache-models';
import { apiSnapshot, expect, lastReply, newChat, send, setSettings, test, wsCall } from './fixtures';
import { ROOT } from './serve';

const FIXTURE = path.resolve(ROOT, '../shared/fixtures/onnx-genai/tiny-llm');
const fixtureMissing = !existsSync(FIXTURE);
if (fixtureMissing) console.log(`[kvdesk e2e] model drop tests skipped: fixture package ${FIXTURE} is absent`);

/** The page's DOM, typed just enough for the drop (this file is type-checked without the DOM library). */
interface DropDom {
  DataTransfer: new () => { items: { add(file: unknown): void } };
  File: new (parts: unknown[], name: string) => unknown;
  DragEvent: new (type: string, init: { bubbles: boolean; cancelable: boolean; dataTransfer: unknown }) => unknown;
  document: { body: { dispatchEvent(event: unknown): boolean } };
  atob(s: string): string;
}

test.describe('model packages', () => {
  test.skip(fixtureMissing, `fixture package ${FIXTURE} is absent`);

  test('a package folder dropped is checked and shown first: its card says what it takes, then Load loads it', async ({
    app,
  }) => {
    const files = readdirSync(FIXTURE).map((name) => ({
      name,
      base64: readFileSync(path.join(FIXTURE, name)).toString('base64'),
    }));
    // A drop event whose dataTransfer carries the package's files, dispatched on the window's drop target.
    const drop = (list: typeof files) =>
      app.evaluate((given) => {
        const w = globalThis as unknown as DropDom;
        const dt = new w.DataTransfer();
        for (const f of given) {
          const bin = w.atob(f.base64);
          const bytes = new Uint8Array(bin.length);
          for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
          dt.items.add(new w.File([bytes], f.name));
        }
        w.document.body.dispatchEvent(new w.DragEvent('drop', { bubbles: true, cancelable: true, dataTransfer: dt }));
      }, list);
    await drop(files);

    await expect(app.getByTestId('models-view')).toBeVisible();
    const card = app.getByTestId('model-card');
    // Uploaded and checked, not loaded: what it is and what it takes, before anything is loaded.
    await expect(card.getByTestId('model-not-loaded')).toBeVisible({ timeout: 30_000 });
    await expect(card.getByTestId('model-layout')).toContainText('onnx-genai');
    // tiny-llm: 1 layer, 2 KV heads × 8 dims, float32 → 2 × 2 × 8 × 4 = 128 bytes per token; context 16.
    await expect(card.getByTestId('model-bpt').locator('[data-bytes]')).toHaveAttribute('data-bytes', '128');
    await expect(card.getByTestId('model-one-context')).toHaveAttribute('data-bytes', String(128 * 16));
    await expect(card.getByTestId('fit-badge')).toHaveAttribute('data-level', 'fits');
    await expect(card.getByTestId('model-card-note')).toContainText('Kept in your library');
    const id = (await card.getAttribute('data-model-id')) ?? '';
    const picker = app.getByTestId('model-picker');
    await expect(picker.locator(`option[value="${id}"]`)).toHaveCount(0);
    // Loaded from its card, it is the model new replies go to.
    await card.getByTestId('model-load').click();
    await expect(card.getByTestId('model-loaded')).toBeVisible({ timeout: 30_000 });
    await expect(picker.locator(`option[value="${id}"]`)).toHaveCount(1);
    await expect(picker).toHaveValue(id);

    // Unload it again: the default model is in use again.
    await card.getByTestId('model-unload').click();
    await expect(card.getByTestId('model-not-loaded')).toBeVisible();
    await expect(picker.locator(`option[value="${id}"]`)).toHaveCount(0);
    await expect(picker).toHaveValue('default');
    await expect(card.getByTestId('model-load')).toBeVisible();
    // Closed, the card leaves it where it is: in the library, its row there.
    const row = app.locator(`[data-testid="library-row"][data-model-id="${id}"]`);
    await expect(row).toHaveCount(0);
    await card.getByTestId('model-card-close').click();
    await expect(card).toHaveCount(0);
    await expect(row.getByTestId('library-when')).toHaveText('last loaded today');

    // The same files again: the library's copy, said so. Other files under the same name: a copy of their own.
    await drop(files);
    await expect(card.getByTestId('model-card-note')).toContainText('These very files are in your library already');
    await expect(card).toHaveAttribute('data-model-id', id);
    await card.getByTestId('model-card-close').click();
    const changed = files.map((f) =>
      f.name === 'tokenizer.json' ? { ...f, base64: Buffer.from(`${atob(f.base64)}\n`).toString('base64') } : f,
    );
    await drop(changed);
    await expect(card.getByTestId('model-card-note')).toContainText(
      `Kept in your library as ${id}-2: a package named ${id} with other files is there already.`,
    );
    // Deleted again: the tests after this one see the library as it was.
    await card.getByTestId('model-card-close').click();
    const copy = app.locator(`[data-testid="library-row"][data-model-id="${id}-2"]`);
    await copy.getByTestId('library-forget').click();
    await copy.getByTestId('library-delete-confirm').click();
    await expect(copy).toHaveCount(0);
  });

  test('a broken package shows its error with file and field', async ({ app }) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-bad-'));
    const bad = path.join(dir, 'broken-llm');
    try {
      cpSync(FIXTURE, bad, { recursive: true });
      const meta = path.join(bad, 'inference_metadata.yaml');
      rmSync(meta, { force: true });
      writeFileSync(
        meta,
        readFileSync(path.join(FIXTURE, 'inference_metadata.yaml'), 'utf8').replace(
          /max_sequence_length: \d+/,
          'max_sequence_length: -3',
        ),
      );
      await app.getByTestId('models-toggle').click();
      await app.getByTestId('model-file-input').setInputFiles(bad); // a folder, as <input webkitdirectory> gives it
      const error = app.getByTestId('model-error');
      await expect(error).toHaveAttribute('data-code', 'PACKAGE_INVALID', { timeout: 30_000 });
      await expect(error.getByTestId('model-error-file')).toHaveText('inference_metadata.yaml');
      await expect(error.getByTestId('model-error-field')).toHaveText('model.max_sequence_length');
      await expect(error.getByTestId('model-error-message')).toContainText('-3');
      await expect(app.getByTestId('model-card')).toHaveCount(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test('an empty folder chosen is refused with a message, as an empty folder dropped is', async ({ app }) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-empty-'));
  try {
    await app.getByTestId('models-toggle').click();
    await app.getByTestId('model-file-input').setInputFiles(dir); // a folder, as <input webkitdirectory> gives it
    const error = app.getByTestId('model-error');
    await expect(error).toHaveAttribute('data-code', 'PACKAGE_INVALID');
    await expect(error.getByTestId('model-error-message')).toHaveText('The folder is empty.');
    await error.getByTestId('model-error-dismiss').click();
    await expect(error).toHaveCount(0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a folder with no package kvdesk recognises is named as the folder, not as the file "."', async ({ app }) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-notes-'));
  const folder = path.join(dir, 'just-notes');
  try {
    mkdirSync(folder);
    writeFileSync(path.join(folder, 'notes.txt'), 'hi\n');
    await app.getByTestId('models-toggle').click();
    await app.getByTestId('model-file-input').setInputFiles(folder);
    const error = app.getByTestId('model-error');
    await expect(error).toHaveAttribute('data-code', 'PACKAGE_INVALID');
    await expect(error.getByTestId('model-error-message')).toContainText('not a model package kvdesk recognises');
    await expect(error.getByTestId('model-error-folder')).toHaveText('just-notes');
    await expect(error.getByTestId('model-error-file')).toHaveCount(0);
    await expect(error).not.toContainText('file .');
    await error.getByTestId('model-error-dismiss').click();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the default model has a card with its KV figures and a fit badge', async ({ app }) => {
  await app.getByTestId('models-toggle').click();
  // Headings to find one's way by: the view, then its sections.
  const view = app.getByTestId('models-view');
  await expect(view.getByRole('heading', { level: 1 })).toHaveText('Models');
  for (const name of ['Download from Hugging Face', 'API', 'Loaded']) {
    await expect(view.getByRole('heading', { level: 2, name, exact: true })).toBeVisible();
  }
  const card = app.getByTestId('loaded-model-card').filter({ hasText: 'default' }).first();
  await expect(card.getByTestId('model-bpt').locator('[data-bytes]')).toHaveAttribute('data-bytes', '1024');
  await expect(card.getByTestId('model-one-context')).toHaveAttribute('data-bytes', String(1024 * 2048));
  await expect(card.getByTestId('fit-badge')).toHaveAttribute('data-level', /fits|tight|wont-fit/);
  // The header says where it runs, and lists the other backends (not usable on this GPU-less machine).
  const backend = app.getByTestId('model-backend');
  await expect(backend).toHaveValue('cpu');
  await expect(backend.locator('option[value="cpu"]')).toHaveText('CPU');
  await expect(backend.locator('option[value="cuda"]')).toBeDisabled();
});

test('a static-cache package loads, chats, and the inspector shows its whole cache reserved', async ({
  app,
  server,
}) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-static-e2e-'));
  try {
    // 2 layers × (key + value) × 64 floats = 1024 B per position; the cache holds 48 of them.
    const { staticDir } = writeTwinPackages(dir, { layers: 2, hidden: 64, heads: 4, capacity: 48, seed: 11 });
    await app.getByTestId('models-toggle').click();
    await app.getByTestId('model-file-input').setInputFiles(staticDir);
    const card = app.getByTestId('model-card');
    await card.getByTestId('model-load').click({ timeout: 30_000 });
    await expect(card.getByTestId('model-loaded')).toBeVisible({ timeout: 30_000 });
    await expect(card).toContainText('static [batch, 48, 64]');
    await expect(card.locator('.warnings')).toContainText('a static KV cache holds all 48 positions');
    const id = (await card.getAttribute('data-model-id')) ?? '';
    await app.getByTestId('models-toggle').click();

    await newChat(app);
    await app.getByTestId('model-picker').selectOption(id);
    await setSettings(app, { greedy: true, maxNewTokens: 6 });
    await send(app, 'hello world');
    await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
    await expect(lastReply(app).getByTestId('message-stats')).toHaveAttribute('data-finish-reason', /^(eos|length)$/);

    // The scheduler reserved the whole cache, and the request table shows it.
    const request = (await apiSnapshot(server)).recent.find((r) => r.modelId === id);
    expect(request).toMatchObject({ fixedTokens: 48, reservedBytes: 48 * 1024 });
    const row = app.locator(`[data-testid="request-row"][data-request-id="${request?.id}"]`);
    await expect(row).toHaveAttribute('data-reserved-bytes', String(48 * 1024));
    await expect(row.getByTestId('request-static-cache')).toHaveAttribute('title', /48 positions × 1024 B/);
    // With requests of two models in the table, each row names its model beside its id.
    const other = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', prompt: 'x', max_tokens: 1 }),
    });
    expect(other.status).toBe(200);
    await expect(row.getByTestId('request-model')).toHaveText(` · ${id}`);
    // Unloaded again: the tests after this one chat with the default model.
    expect(await wsCall(server, 'unloadModel', { id })).toMatchObject({ ok: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an upload shows its bytes sent, and Cancel stops it: the host keeps nothing of it', async ({ app, server }) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-upload-'));
  // Slow enough to watch, and to cancel before it ends (the default package is about 1 MiB): 32 KiB/s up, through
  // Chromium's own throttling, is half a minute for the whole upload, far longer than the steps up to Cancel take
  // even on a loaded machine. Nothing waits for its end, so the test takes no longer.
  const cdp = await app.context().newCDPSession(app);
  try {
    const pkg = path.join(dir, 'slow-upload');
    cpSync(defaultModelDir, pkg, { recursive: true });
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: 0,
      downloadThroughput: -1,
      uploadThroughput: 32 * 1024,
    });
    await app.getByTestId('models-toggle').click();
    await app.getByTestId('model-file-input').setInputFiles(pkg);
    const progress = app.getByTestId('model-import-progress');
    await expect(app.getByTestId('upload-progress-text')).toContainText(/ of [\d.]+ [KM]iB sent \(\d+ %\)/);
    await expect.poll(async () => Number(await progress.getAttribute('data-sent'))).toBeGreaterThan(0);
    expect(Number(await progress.getAttribute('data-total'))).toBeGreaterThan(1_000_000);
    await app.getByTestId('upload-cancel').click();
    await expect(progress).toHaveCount(0);
    await expect(app.getByTestId('model-error')).toHaveCount(0);
    // Nothing of it on the host: not in the library, and no staged files left in its models folder.
    const listed = (await wsCall(server, 'listLibrary', {})) as { value?: Array<{ id: string }> };
    expect(listed.value?.some((e) => e.id === 'slow-upload')).toBe(false);
    const models = path.join(server.dataDir, 'models');
    await expect
      .poll(() =>
        (existsSync(models) ? readdirSync(models) : []).filter((f) => f.includes('incoming') || f === 'slow-upload'),
      )
      .toEqual([]);
  } finally {
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: 0,
      downloadThroughput: -1,
      uploadThroughput: -1,
    });
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the drop zone names every package layout kvdesk reads, the ORT model package too', async ({ app }) => {
  await app.getByTestId('models-toggle').click();
  const layouts = app.getByTestId('model-layouts');
  for (const file of ['inference_metadata.yaml', 'genai_config.json', 'config.json + onnx/', 'manifest.json']) {
    await expect(layouts).toContainText(file);
  }
});
