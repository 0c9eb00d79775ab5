/**
 * A model card's pick of how the package runs, in Chromium against a real serve: a package with two graph
 * variants (test/helpers/models.ts graphVariantsModel) loads again as the one picked — its tokens change —, the
 * library keeps the pick for its next load, and the backend choice lists what onnxruntime can use here, the others
 * disabled with why.
 */
import { expect, test } from '@playwright/test';
import { graphVariantsModel } from '../helpers/models';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
test.beforeAll(async () => {
  server = await startServe(['--model', graphVariantsModel()]);
});
test.afterAll(async () => {
  await server.stop();
});

/** The greedy tokens the model writes for a fixed prompt, through the OpenAI API. */
async function tokens(): Promise<string> {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'graph-variants', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: Array<{ text: string }> }).choices[0]?.text ?? '';
}

test('a graph variant picked on the card: the model loads again as that one; unusable backends say why', async ({
  page,
}) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const fp32 = await tokens();
  await page.goto(server.url);
  await page.getByTestId('models-toggle').click();
  const card = page.locator('[data-testid="loaded-model-card"][data-model-id="graph-variants"]');
  const pick = card.getByTestId('model-run-with');
  await expect(pick).toHaveAttribute('data-variant', 'fp32');
  await expect(pick).toHaveAttribute('data-backend', 'cpu');
  await expect(card.getByTestId('model-graph')).toHaveValue('fp32');
  expect(await card.getByTestId('model-graph').locator('option').allTextContents()).toEqual([
    expect.stringMatching(/^fp32 \(/),
    expect.stringMatching(/^q4 \(/),
  ]);
  // Nothing changed yet: nothing to load again.
  await expect(card.getByTestId('model-reload')).toHaveCount(0);

  // The backends onnxruntime knows: CPU usable; the others (no GPU on this machine) disabled, with their reason.
  const backend = card.getByTestId('model-backend-pick');
  await expect(backend).toBeEnabled();
  await expect(backend.locator('option[value="cpu"]')).toBeEnabled();
  const cuda = backend.locator('option[value="cuda"]');
  await expect(cuda).toBeDisabled();
  await expect(cuda).toHaveText('cuda (not usable here)');
  expect(await cuda.getAttribute('title')).toMatch(/not installed|npm run setup:cuda/);
  // …and, a click away on the card, each one's reason as sentences (a disabled option's tooltip does not show in an
  // open select).
  const missing = card.getByTestId('model-backends-missing');
  await expect(missing).toContainText('cuda');
  const why = missing.locator('[data-testid="model-backend-why"][data-backend="cuda"]');
  await expect(why).toBeHidden();
  await missing.locator('summary').click();
  await expect(why).toBeVisible();
  await expect(why).toHaveText(`cuda: ${(await cuda.getAttribute('title'))?.replace(/^Not usable here: /, '')}`);
  await expect(why).toHaveText(/\.$/);

  await card.getByTestId('model-graph').selectOption('q4');
  await card.getByTestId('model-reload').click();
  await expect(pick).toHaveAttribute('data-variant', 'q4', { timeout: 30_000 });
  await expect(card.getByTestId('model-graph')).toHaveValue('q4');
  await expect(card.getByTestId('model-reload')).toHaveCount(0);
  const q4 = await tokens();
  expect(q4).not.toBe(fp32);

  // Unloaded, the library says how it loads, and it loads so again.
  await card.getByTestId('model-unload').click();
  const row = page.locator('[data-testid="library-row"][data-model-id="graph-variants"]');
  await expect(row.getByTestId('library-pick')).toHaveText('loads as q4');
  await row.getByTestId('library-load').click();
  await expect(pick).toHaveAttribute('data-variant', 'q4', { timeout: 30_000 });
  expect(await tokens()).toBe(q4);

  // And back.
  await card.getByTestId('model-graph').selectOption('fp32');
  await card.getByTestId('model-reload').click();
  await expect(pick).toHaveAttribute('data-variant', 'fp32', { timeout: 30_000 });
  expect(await tokens()).toBe(fp32);
  expect(errors).toEqual([]);
});
