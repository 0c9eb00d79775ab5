/**
 * Download from Hugging Face in the Models view, in Chromium, against a real serve whose hub is a local imitation
 * of the Hub's file API (test/helpers/fake-hub.ts) serving the generated default model: look up a repository, see
 * its variants with the CPU's best picked, download with progress, find it in the library and load it; a stalled
 * download cancels; a repository that does not exist says so; a word searches the hub, and a repository without
 * ONNX is followed by the ONNX exports of its name.
 */
import { test as base, expect } from '@playwright/test';
import { defaultModelRepo, type FakeHub, startFakeHub } from '../helpers/fake-hub';
import { type ServeHandle, startServe } from './serve';

const REPO = 'onnx-community/tiny-chat';

const test = base.extend<object, { hubServer: ServeHandle & { hub: FakeHub } }>({
  hubServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const hub = await startFakeHub(
        {
          [REPO]: defaultModelRepo(),
          // Another ONNX export (less downloaded), and the original it was made from (no ONNX in it).
          'someone/tiny-chat-onnx': { 'config.json': '{}', 'onnx/model.onnx': 'graph' },
          'Tiny/tiny-chat': { 'config.json': '{}', 'model.safetensors': 'weights' },
        },
        {
          lfsMinBytes: 10_000,
          meta: {
            [REPO]: { downloads: 5_200, likes: 31, lastModified: '2026-10-20T08:00:00.000Z' },
            'someone/tiny-chat-onnx': { downloads: 12 },
            'Tiny/tiny-chat': { downloads: 90_000 },
          },
        },
      );
      // serve reads the hub's address from its environment, as a person's mirror would be set.
      const saved = process.env.HF_ENDPOINT;
      process.env.HF_ENDPOINT = hub.url;
      const server = await startServe();
      if (saved === undefined) delete process.env.HF_ENDPOINT;
      else process.env.HF_ENDPOINT = saved;
      await use({ ...server, hub });
      await server.stop();
      await hub.close();
    },
    { scope: 'worker', timeout: 120_000 },
  ],
});

test('a repository is looked up, downloaded with progress into the library, and loads', async ({
  page,
  hubServer: server,
}) => {
  await page.goto(server.url);
  await page.getByTestId('models-toggle').click();
  const box = page.getByTestId('hub-download');
  await box.getByTestId('hub-repo').fill(REPO);
  await box.getByTestId('hub-lookup').click();
  // The variants with their sizes, the best on a CPU picked.
  const select = box.getByTestId('hub-variant');
  await expect(select).toHaveValue('q4');
  await expect(select.locator('option')).toHaveText([/^q4 — .* \(best on a CPU\)$/, /^fp32 — /]);
  await box.getByTestId('hub-download-start').click();
  const row = box.locator(`[data-testid="download"][data-repo="${REPO}"][data-variant="q4"]`);
  await expect(row).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(row).toContainText('in the library as tiny-chat-q4');
  // Every byte arrived: done / total are equal.
  const [done, total] = ((await row.getByTestId('download-bytes').textContent()) ?? '').split(' / ');
  expect(done).toBe(total);
  // In the library, one click from loaded.
  const lib = page.locator('[data-testid="library-row"][data-model-id="tiny-chat-q4"]');
  await expect(lib).toHaveAttribute('data-state', 'ok');
  await expect(lib.getByTestId('library-source')).toHaveText(`hf.co/${REPO} · q4`);
  await lib.getByTestId('library-load').click();
  await expect(page.locator('[data-testid="loaded-model-card"][data-model-id="tiny-chat-q4"]')).toBeVisible({
    timeout: 30_000,
  });
});

test('a stalled download cancels, and an unknown repository says so', async ({ page, hubServer: server }) => {
  await page.goto(server.url);
  await page.getByTestId('models-toggle').click();
  const box = page.getByTestId('hub-download');
  server.hub.faults.stall = 'onnx/model.onnx';
  await box.getByTestId('hub-repo').fill(REPO);
  await box.getByTestId('hub-lookup').click();
  await box.getByTestId('hub-variant').selectOption('fp32');
  await box.getByTestId('hub-download-start').click();
  const row = box.locator(`[data-testid="download"][data-variant="fp32"]`).first();
  await expect(row).toHaveAttribute('data-state', 'running');
  // Its speed over the last seconds: once half the graph has come and nothing more does, it says it stalled.
  await expect(row.getByTestId('download-rate')).toContainText('/s · stalled', { timeout: 15_000 });
  await row.getByTestId('download-cancel').click();
  await expect(row).toHaveAttribute('data-state', 'cancelled');
  await expect(row).toContainText('downloading it again resumes there');
  server.hub.faults.stall = undefined;

  await box.getByTestId('hub-repo').fill('nobody/nothing');
  await box.getByTestId('hub-lookup').click();
  await expect(box.getByTestId('hub-error')).toContainText('does not exist, or is gated or private');
  await expect(box.getByTestId('hub-variants')).toHaveCount(0);
});

test('a word searches the hub; a hit is looked up; a repository without ONNX shows the exports of its name', async ({
  page,
  hubServer: server,
}) => {
  await page.goto(server.url);
  await page.getByTestId('models-toggle').click();
  const box = page.getByTestId('hub-download');
  const input = box.getByTestId('hub-repo');
  const button = box.getByTestId('hub-lookup');
  await input.fill('tiny');
  await expect(button).toHaveText('Search');
  await button.click();
  // ONNX text-generation repositories only, most downloaded first.
  const hits = box.getByTestId('hub-hit');
  await expect(hits).toHaveCount(2);
  await expect(hits.nth(0)).toHaveAttribute('data-repo', REPO);
  await expect(hits.nth(1)).toHaveAttribute('data-repo', 'someone/tiny-chat-onnx');
  await expect(hits.nth(0)).toContainText('↓ 5.2K · ♥ 31 · 2026-10-20');
  await expect(box.getByTestId('hub-search-note')).toContainText('2 ONNX language models matching "tiny"');
  // A hit picked: its name in the box, its variants to choose from.
  await hits.nth(0).click();
  await expect(input).toHaveValue(REPO);
  await expect(button).toHaveText('Look up');
  await expect(box.getByTestId('hub-variant')).toHaveValue('q4');
  await expect(box.getByTestId('hub-search')).toHaveCount(0);

  // The original, without ONNX: said, and the ONNX exports of its name offered.
  await input.fill('Tiny/tiny-chat');
  await button.click();
  await expect(box.getByTestId('hub-error')).toContainText('has no ONNX model kvdesk can run');
  await expect(box.getByTestId('hub-search-note')).toContainText('ONNX models on the hub named like tiny-chat');
  await expect(hits).toHaveCount(2);
  await hits.nth(1).click();
  await expect(input).toHaveValue('someone/tiny-chat-onnx');
  await expect(box.getByTestId('hub-error')).toHaveCount(0);

  await input.fill('zzz');
  await button.click();
  await expect(box.getByTestId('hub-search-note')).toContainText('No ONNX language model on the hub matches "zzz"');
  await expect(hits).toHaveCount(0);
});
