/**
 * One KV budget per device in the inspector, in Chromium, against a real serve
 * with two device budgets (test/e2e/serve-devices.ts: the `gpu-twin` copy of
 * the default model is budgeted on webgpu:0, whose memory is given with
 * --device-memory; this machine has no GPU, so the engine runs it on the CPU).
 */
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test as base, expect } from '@playwright/test';
import type { BudgetSnapshot } from '../../src/shared/scheduler-types';
import { newChat, send, setSettings } from './fixtures';
import { ROOT, type ServeHandle, startServe } from './serve';

const GIB = 1024 ** 3;

const test = base.extend<object, { devicesServer: ServeHandle }>({
  devicesServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const tmp = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-devices-'));
      const twin = path.join(tmp, 'gpu-twin');
      cpSync(path.join(ROOT, 'resources/models/default'), twin, { recursive: true });
      const server = await startServe(
        ['--model', twin, '--device-memory', 'webgpu:0=4GiB'],
        90_000,
        'test/e2e/serve-devices.ts',
      );
      await use(server);
      await server.stop();
      rmSync(tmp, { recursive: true, force: true });
    },
    { scope: 'worker', timeout: 120_000 },
  ],
});

async function budget(server: ServeHandle): Promise<BudgetSnapshot> {
  const res = await fetch(`${server.url}/v1/kvdesk/budget`);
  expect(res.status).toBe(200);
  return (await res.json()) as BudgetSnapshot;
}

test('each device has its own budget section, requests are charged to their device, and its limit is set apart', async ({
  page,
  devicesServer: server,
}) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(server.url);
  const snap = await budget(server);
  expect(snap.devices.map((d) => [d.device, d.models])).toEqual([
    ['cpu', ['default']],
    ['webgpu:0', ['gpu-twin']],
  ]);

  // Two sections, each with its own limit and derivation, equal to the API's.
  const cpu = page.locator('[data-testid="inspector-budget"][data-device="cpu"]');
  const gpu = page.locator('[data-testid="inspector-budget"][data-device="webgpu:0"]');
  await expect(cpu.getByTestId('budget-device')).toHaveText('cpu');
  await expect(gpu.getByTestId('budget-device')).toHaveText('webgpu:0');
  await expect(gpu.getByTestId('budget-device-models')).toHaveText('models: gpu-twin');
  await expect(gpu.getByTestId('budget-limit-bytes')).toHaveAttribute(
    'data-bytes',
    String(snap.devices[1]?.limitBytes),
  );
  await expect(cpu.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(snap.limitBytes));
  await expect(gpu.getByTestId('budget-derivation')).toContainText('device memory');
  expect(snap.devices[1]?.derivation.formula).toContain('configured');
  expect(snap.devices[1]?.limitBytes).toBe(
    Math.floor(4 * GIB * 0.9) - (snap.devices[1]?.derivation.weightsBytes ?? 0) - GIB,
  );

  // A chat on the twin is charged to webgpu:0; the request table says so.
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await page.getByTestId('model-picker').selectOption('gpu-twin');
  await setSettings(page, { greedy: true, maxNewTokens: 24 });
  // The header's budget follows the picked model's device.
  await expect(page.locator('.header-budget')).toHaveAttribute('data-device', 'webgpu:0');
  await expect(page.getByTestId('budget-bar')).toHaveAttribute('data-limit-bytes', String(snap.devices[1]?.limitBytes));
  await send(page, 'Hello from the twin');
  await expect
    .poll(async () => {
      const s = await budget(server);
      return [s.devices[0]?.counters.finished, s.devices[1]?.counters.finished];
    })
    .toEqual([0, 1]);
  const row = page.getByTestId('request-row').first();
  await expect(row).toContainText('webgpu:0');

  // The limit control sets the chosen device's budget only.
  await page.getByTestId('budget-device-select').selectOption('webgpu:0');
  await page.getByTestId('budget-limit-input').fill('64KiB');
  await page.getByTestId('budget-limit-apply').click();
  await expect(gpu.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(64 * 1024));
  await expect(cpu.getByTestId('budget-limit-bytes')).toHaveAttribute('data-bytes', String(snap.limitBytes));
  const after = await budget(server);
  expect(after.devices[1]?.limitBytes).toBe(64 * 1024);
  expect(after.devices[1]?.derivation.source).toBe('override');
  expect(after.limitBytes).toBe(snap.limitBytes);
  expect(errors, 'uncaught errors in the page').toEqual([]);
});
