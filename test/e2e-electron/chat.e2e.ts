/**
 * The chat flow in the real Electron app: the window opens with the preload's
 * API (and nothing of Node) in the page, the default model loads, a reply
 * streams, stop works and leaves no reservation behind, the API server starts
 * and stops from the Models view, and closing the app stops the engine process.
 *
 * Runs where the Electron binary exists (node_modules/electron/dist, or
 * ELECTRON_OVERRIDE_DIST_PATH) and a display is available (Linux: DISPLAY or
 * WAYLAND_DISPLAY; use xvfb-run on a server); otherwise it is skipped and says
 * why. Run: npx playwright test -c test/e2e-electron/playwright.config.ts
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type ElectronApplication, _electron as electron, expect, type Page, test } from '@playwright/test';
import { ensureAppBuild, lacksDisplay, locateElectron } from '../../src/cli/start';

const root = path.resolve(__dirname, '../..');
const location = locateElectron({
  electronDir: path.join(root, 'node_modules/electron'),
  env: process.env,
  platform: process.platform,
});
const skipReason = !location.found
  ? `Electron e2e skipped: ${location.reason}. Install the binary with \`node node_modules/electron/install.js\` (needs internet) or set ELECTRON_OVERRIDE_DIST_PATH.`
  : lacksDisplay(process.platform, process.env)
    ? 'Electron e2e skipped: no display (DISPLAY / WAYLAND_DISPLAY unset); run it under xvfb-run.'
    : null;
if (skipReason) console.log(`[kvdesk e2e-electron] ${skipReason}`);

test.describe.configure({ mode: 'serial' });
test.skip(skipReason !== null, skipReason ?? '');

let app: ElectronApplication;
let page: Page;
let dataDir: string;

test.beforeAll(async () => {
  expect(ensureAppBuild(), 'the app must build (npx electron-vite build)').toBe(true);
  expect(
    existsSync(path.join(root, 'resources/models/default')),
    'the default model (npm run generate:models -- --default)',
  ).toBe(true);
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-electron-e2e-'));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== 'ELECTRON_RUN_AS_NODE') env[k] = v;
  env.KVDESK_DATA_DIR = dataDir;
  // Chromium refuses its sandbox as root (CI containers); elsewhere the OS sandbox stays on.
  const args = process.platform === 'linux' && process.getuid?.() === 0 ? ['--no-sandbox', root] : [root];
  app = await electron.launch({ executablePath: (location as { path: string }).path, args, env, cwd: root });
  page = await app.firstWindow();
});

// biome-ignore lint/correctness/noEmptyPattern: Playwright reads fixtures from a destructuring pattern; this hook needs none.
test.afterEach(async ({}, testInfo) => {
  if (testInfo.status !== testInfo.expectedStatus && page) {
    const file = testInfo.outputPath('failure.png');
    await page.screenshot({ path: file }).catch(() => {});
    await testInfo.attach('screenshot', { path: file, contentType: 'image/png' }).catch(() => {});
  }
});

test.afterAll(async () => {
  await app?.close().catch(() => {});
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

test('the window is isolated: the preload API only, no Node, no new windows', async () => {
  await expect(page).toHaveURL(/^kvdesk:\/\/app\//);
  const surface = await page.evaluate(() => {
    const w = globalThis as unknown as Record<string, unknown>;
    const api = w.kvdesk as Record<string, unknown> | undefined;
    return {
      require: typeof w.require,
      process: typeof w.process,
      transport: api?.transport,
      keys: api ? Object.keys(api) : [],
    };
  });
  expect(surface.require).toBe('undefined');
  expect(surface.process).toBe('undefined');
  expect(surface.transport).toBe('electron');
  expect(surface.keys).not.toContain('ipcRenderer');
  // window.open is denied: no second window appears (the link would go to the OS browser; a non-web URL goes nowhere).
  await page.evaluate(() =>
    (globalThis as unknown as { open(u: string, t: string): unknown }).open('kvdesk-test:nowhere', '_blank'),
  );
  expect(await app.evaluate(({ BrowserWindow }) => BrowserWindow.getAllWindows().length)).toBe(1);
});

test('chat with the default model streams a reply', async () => {
  await expect
    .poll(
      async () =>
        page.evaluate(async () => {
          const r = await (
            globalThis as unknown as { kvdesk: { listModels(): Promise<{ ok: boolean; value?: unknown[] }> } }
          ).kvdesk.listModels();
          return r.ok ? (r.value?.length ?? 0) : -1;
        }),
      { timeout: 60_000 },
    )
    .toBeGreaterThan(0);
  await page.getByTestId('chat-input').fill('Hello! Who are you?');
  await page.getByTestId('send-button').click();
  await expect(page.getByTestId('message-user').last()).toContainText('Hello! Who are you?');
  const reply = page.getByTestId('message-assistant').last();
  await expect(reply).toBeVisible();
  await expect(page.getByTestId('send-button')).toBeVisible({ timeout: 60_000 });
  await expect(reply).not.toHaveText(/^\s*$/);
});

test('stop ends the reply and releases its reservation', async () => {
  await page.getByTestId('chat-input').fill('Tell me a very long story about caches.');
  await page.getByTestId('send-button').click();
  const stop = page.getByTestId('stop-button');
  // A tiny model may finish first; either way nothing must stay reserved afterwards.
  await stop.click({ timeout: 5_000 }).catch(() => {});
  await expect(page.getByTestId('send-button')).toBeVisible({ timeout: 60_000 });
  await expect
    .poll(async () =>
      page.evaluate(async () => {
        const r = await (
          globalThis as unknown as {
            kvdesk: { getSnapshot(): Promise<{ ok: boolean; value?: { reservedBytes: number } }> };
          }
        ).kvdesk.getSnapshot();
        return r.ok ? r.value?.reservedBytes : -1;
      }),
    )
    .toBe(0);
});

/** Processes whose parent is `ppid` and whose command line mentions `needle` (ps: Linux and macOS). */
function childProcesses(ppid: number, needle: string): number[] {
  const out = execFileSync('ps', ['-A', '-o', 'pid=,ppid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null && Number(m[2]) === ppid && (m[3] ?? '').includes(needle))
    .map((m) => Number(m[1]));
}

test('the API server starts from the Models view, answers with the window’s models, and stops', async () => {
  await page.getByTestId('models-toggle').click();
  const card = page.getByTestId('api-server');
  await expect(card).toHaveAttribute('data-running', 'false');
  await card.getByTestId('api-server-port').fill('0'); // any free port
  await card.getByTestId('api-server-start').click();
  await expect(card).toHaveAttribute('data-running', 'true');
  const url = (await card.getByTestId('api-server-url').textContent()) ?? '';
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string }> };
  expect(models.data.map((m) => m.id)).toContain('default');
  await card.getByTestId('api-server-stop').click();
  await expect(card).toHaveAttribute('data-running', 'false');
  await expect(fetch(`${url}/v1/models`)).rejects.toThrow();
  await page.getByTestId('models-toggle').click();
});

test('the engine runs in its own process, and closing the app stops it', async () => {
  test.skip(process.platform === 'win32', 'uses ps');
  const mainPid = app.process().pid;
  expect(mainPid).toBeDefined();
  const engines = childProcesses(mainPid as number, 'engine.js');
  expect(engines).toHaveLength(1);
  await app.close();
  await expect
    .poll(
      () => {
        try {
          process.kill(engines[0] as number, 0);
          return 'alive';
        } catch {
          return 'gone';
        }
      },
      { timeout: 10_000 },
    )
    .toBe('gone');
});
