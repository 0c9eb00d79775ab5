/**
 * What a screen reader hears of a change made without a sign where the focus is, and where the keyboard's focus
 * goes then: a package validated, a model loaded and unloaded from its card, the library or the loaded list (the
 * card's next button, never the whole view), a load refused (an alert), and the inspector's limit and max running
 * set (the limit's question answered hands the focus back to its field; its three "Set" buttons are told apart).
 */
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultModelDir } from '../helpers/fixtures';
import { apiSnapshot, expect, lastReply, newChat, send, setSettings, test } from './fixtures';

test('a package validated, loaded and unloaded is said politely, and the focus goes to its card’s next button', async ({
  app,
}) => {
  test.setTimeout(120_000);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-announce-'));
  const announcer = app.getByTestId('announcer');
  try {
    const pkg = path.join(dir, 'pkg2');
    cpSync(defaultModelDir, pkg, { recursive: true });
    await app.getByTestId('models-toggle').click();
    await expect(announcer).toHaveRole('status');
    await expect(announcer).toHaveAttribute('aria-live', 'polite');
    await app.getByTestId('model-file-input').setInputFiles(pkg);

    // Valid: said, with what it takes (the default model's copy: 1 KiB per token).
    const card = app.getByTestId('model-card');
    await expect(card.getByTestId('model-not-loaded')).toBeVisible({ timeout: 30_000 });
    const name = (await card.getByTestId('model-name').textContent()) ?? '';
    await expect(announcer).toHaveText(`${name} validated: fits, 1,024 B/token`);

    // Load from its card, by the keyboard: said, and the focus on its Unload (the Load button is gone).
    await card.getByTestId('model-load').focus();
    await app.keyboard.press('Enter');
    await expect(card.getByTestId('model-loaded')).toBeVisible({ timeout: 30_000 });
    await expect(announcer).toHaveText(`${name} loaded on CPU`);
    await expect(card.getByTestId('model-unload')).toBeFocused();

    // Unload: said, and the focus on its Load again.
    await app.keyboard.press('Enter');
    await expect(card.getByTestId('model-not-loaded')).toBeVisible({ timeout: 30_000 });
    await expect(announcer).toHaveText(`${name} unloaded`);
    await expect(card.getByTestId('model-load')).toBeFocused();

    // From the library (Space): its row goes for a card among the loaded models, whose Unload takes the focus.
    const root = (await card.getAttribute('data-root')) ?? '';
    await card.getByTestId('model-card-close').click();
    const row = app.locator(`[data-testid="library-row"][data-root=${JSON.stringify(root)}]`);
    await row.getByTestId('library-load').focus();
    await app.keyboard.press('Space');
    const loadedCard = app.locator(`[data-testid="loaded-model-card"][data-root=${JSON.stringify(root)}]`);
    await expect(loadedCard.getByTestId('model-loaded')).toBeVisible({ timeout: 30_000 });
    await expect(announcer).toHaveText(`${name} loaded on CPU`);
    await expect(loadedCard.getByTestId('model-unload')).toBeFocused();
    await expect(app.getByTestId('models-view')).not.toBeFocused();

    // Unloaded from the loaded list: back in the library, whose Load takes the focus.
    await app.keyboard.press('Enter');
    await expect(row.getByTestId('library-load')).toBeFocused({ timeout: 30_000 });
    await expect(announcer).toHaveText(`${name} unloaded`);
    await expect(loadedCard).toHaveCount(0);

    // A load refused (its graph spoiled on disk): said at once, as an alert; its row says why, and the focus is on
    // what it has left (Delete), not the whole view.
    writeFileSync(path.join(root, 'onnx', 'model.onnx'), 'not a graph');
    await app.keyboard.press('Enter');
    const notice = app.getByTestId('notice');
    await expect(notice).toContainText('Could not load the model', { timeout: 30_000 });
    await expect(notice).toHaveRole('alert');
    await expect(row).toHaveAttribute('data-state', 'invalid');
    await expect(row.getByTestId('library-forget')).toBeFocused();

    // Gone again: the tests after this one see the library as it was.
    await row.getByTestId('library-forget').click();
    await row.getByTestId('library-delete-confirm').click();
    await expect(row).toHaveCount(0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the limit and max running set are said; the question answered gives the focus back to the limit', async ({
  app,
  server,
}) => {
  const announcer = app.getByTestId('announcer');
  const controls = app.getByTestId('inspector-controls');
  // Three buttons read "Set": each is named for what it sets.
  await expect(app.getByTestId('budget-limit-apply')).toHaveAccessibleName('Set KV limit');
  await expect(app.getByTestId('max-running-apply')).toHaveAccessibleName('Set max running');

  const limit = controls.getByRole('textbox', { name: 'limit' });
  await limit.fill('1GiB');
  await limit.press('Enter');
  await expect(app.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(1024 ** 3));
  await expect(announcer).toHaveText('KV limit set to 1.00 GiB');

  const running = app.getByTestId('max-running-input');
  const before = (await apiSnapshot(server)).maxRunning;
  // Another figure than the one there (the words must change).
  const next = before === 3 ? 4 : 3;
  await running.fill(String(next));
  await running.press('Enter');
  await expect(announcer).toHaveText(`Max running set to ${next}`);
  await running.fill(String(before));
  await controls.getByRole('button', { name: 'Set max running' }).click();
  await expect(announcer).toHaveText(`Max running set to ${before}`);

  // A chat whose KV is kept: 8 KiB drops it, so it is asked first.
  await newChat(app);
  await setSettings(app, { maxNewTokens: 4, seed: 3 });
  await send(app, 'Keep my cache');
  await expect(lastReply(app)).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect.poll(async () => (await apiSnapshot(server)).heldBytes).toBeGreaterThan(8192);
  await limit.fill('8KiB');
  await limit.press('Enter');
  const ask = app.getByTestId('budget-limit-ask');
  await expect(ask).toContainText('drops the kept KV');
  // Asked, the focus is on the safe answer (Enter does not ask again); Esc answers no: the focus is back on the
  // limit, which shows the limit in force again (the refused value gone, Set off).
  await expect(ask.getByRole('button', { name: 'Cancel' })).toBeFocused();
  await app.keyboard.press('Escape');
  await expect(ask).toHaveCount(0);
  await expect(limit).toBeFocused();
  await expect(limit).toHaveValue('');
  await expect(controls.getByRole('button', { name: 'Set KV limit' })).toBeDisabled();
  expect((await apiSnapshot(server)).heldBytes).toBeGreaterThan(8192);
  await limit.fill('8KiB');
  await limit.press('Enter');
  const confirm = ask.getByRole('button', { name: 'Set limit and drop idle KV' });
  await confirm.focus();
  await app.keyboard.press('Enter');
  await expect(app.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', '8192');
  await expect(announcer).toHaveText('KV limit set to 8.00 KiB');
  await expect(limit).toBeFocused();
  await expect(app.getByTestId('inspector')).not.toBeFocused();

  // Back to the derived limit for the other tests: said, and the focus on the limit (its button goes).
  await app.getByTestId('budget-use-derived').focus();
  await app.keyboard.press('Enter');
  await expect(app.getByTestId('budget-derivation')).toHaveAttribute('data-source', 'derived');
  await expect(announcer).toHaveText(/^KV limit back to the derived [\d.]+ [KMGT]iB$/);
  await expect(limit).toBeFocused();
});
