import { defineConfig } from '@playwright/test';
import { CHROMIUM_ARGS, TEST_CHROMIUM } from './test/e2e/chromium';

// Browser end-to-end tests: `npx playwright test` (this config). They drive the renderer in Debian
// Chromium against a real `kvdesk serve --port 0` (real engine and scheduler), started once per worker.
// Two workers, each with its own server, whatever the core count: a test mostly waits (on the page, a reply, a
// server it starts), so two take about a quarter off the run on 2 cores. A file's tests run in order in one
// worker: they share its server and some of them change its budget.
export default defineConfig({
  testDir: 'test/e2e',
  testMatch: '*.spec.ts',
  globalSetup: './test/e2e/global-setup.ts',
  fullyParallel: false,
  workers: 2,
  retries: 0,
  timeout: 60_000,
  expect: { timeout: 15_000 },
  outputDir: 'test-results/e2e',
  reporter: [['list']],
  use: {
    browserName: 'chromium',
    headless: true,
    viewport: { width: 1400, height: 900 },
    screenshot: 'only-on-failure',
    launchOptions: { executablePath: TEST_CHROMIUM, args: CHROMIUM_ARGS },
  },
});
