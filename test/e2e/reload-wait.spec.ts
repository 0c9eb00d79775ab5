/**
 * A reply sent while its model loads again (here another front end loads it with a chat template of its own): the
 * window says the model is loading again, the reply says it waits for that load, the inspector lists it as waiting
 * (it reserves nothing yet), and once the load is in it runs on the new load. The engine holds the load for as long
 * as the test needs (its KVDESK_ENGINE_HOLD_LOADS failpoint), so nothing here races a load's few hundred ms.
 */
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import type { BudgetSnapshot } from '../../src/shared/scheduler-types';
import { defaultModelDir } from '../helpers/fixtures';
import { apiSnapshot, lastReply, send, wsCall } from './fixtures';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
let root: string;
let hold: string;
test.beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-reload-'));
  cpSync(defaultModelDir, path.join(root, 'mine'), { recursive: true });
  hold = path.join(root, 'hold-loads');
  server = await startServe(['--model', path.join(root, 'mine')], undefined, undefined, undefined, {
    KVDESK_ENGINE_HOLD_LOADS: hold,
  });
});
test.afterAll(async () => {
  if (existsSync(hold)) rmSync(hold);
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const TEMPLATE =
  "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

test('a reply sent while its model loads again waits for the load, says so, and runs on it', async ({ page }) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await page.getByTestId('model-picker').selectOption('mine');
  if (!(await page.getByTestId('inspector').isVisible())) await page.getByTestId('inspector-toggle').click();

  // Another front end loads the model again (a backend named with a template: a template alone is taken without a
  // load); the engine holds that load until the test lets it go.
  writeFileSync(hold, '');
  const loading = wsCall(
    server,
    'loadModel',
    { path: path.join(root, 'mine'), chatTemplate: TEMPLATE, backend: 'cpu' },
    undefined,
    120_000,
  );
  const picker = page.getByTestId('model-picker-loading');
  await expect(picker).toHaveText(/^loading .+ again…$/);

  await send(page, 'Are you there?');
  const reply = lastReply(page);
  await expect(reply.getByTestId('reload-wait')).toHaveText(/^waiting for .+ to load again…$/);
  const threadId = (await page.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '';
  // In the inspector and the budget: waiting, with no reservation, under its chat; nothing queued or running.
  const row = page.locator('[data-testid="request-row"][data-state="reload-wait"]');
  await expect(row).toContainText('for mine to load again');
  await expect(row).toContainText('Are you there?');
  const snap = (await apiSnapshot(server)) as BudgetSnapshot;
  expect(snap.reloadWaits).toEqual([
    { requestId: expect.any(String), modelId: 'mine', threadId, since: expect.any(Number) },
  ]);
  expect([...snap.queue, ...snap.running]).toEqual([]);
  // The card says so too, and offers nothing that would race the load.
  await page.getByTestId('models-toggle').click();
  const card = page.locator('[data-testid="loaded-model-card"][data-model-id="mine"]');
  await expect(card.getByTestId('model-reloading')).toHaveText('loading again…');
  await expect(card.getByTestId('model-unload')).toBeDisabled();
  await page.getByTestId('models-toggle').click();

  // Let the load go: it comes in with the template, and the reply that waited runs on it.
  rmSync(hold);
  expect(await loading).toMatchObject({ ok: true });
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  await expect(reply.getByTestId('reload-wait')).toHaveCount(0);
  await expect(picker).toHaveCount(0);
  await expect(row).toHaveCount(0);
  await expect(
    page.locator(`[data-testid="request-row"][data-request-id="${snap.reloadWaits?.[0]?.requestId}"]`),
  ).toHaveAttribute('data-state', 'finished');
  expect(((await apiSnapshot(server)) as BudgetSnapshot).reloadWaits).toBeUndefined();
  expect(errors).toEqual([]);
});
