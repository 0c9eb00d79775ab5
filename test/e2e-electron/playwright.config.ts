import { defineConfig } from '@playwright/test';

// The Electron end-to-end suite: `npx playwright test -c test/e2e-electron/playwright.config.ts`.
// It drives the real app (real engine process, real scheduler) through _electron.launch and skips,
// printing why, where the Electron binary or a display is missing.
export default defineConfig({
  testDir: '.',
  testMatch: '*.e2e.ts',
  timeout: 120_000,
  expect: { timeout: 30_000 },
  workers: 1,
  retries: 0,
  outputDir: '../../test-results/e2e-electron',
  reporter: [['list']],
});
