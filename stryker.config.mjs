// @ts-check
/**
 * Mutation testing of the KV scheduler: a surviving mutant in admission, release or
 * capping is a missing test (SCHEDULER.md). Run with `npm run test:mutation`.
 * StrykerJS is pinned to 9.x: 10.x requires Node 22, and this project supports Node 20.
 * @type {import('@stryker-mutator/api/core').PartialStrykerOptions}
 */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.stryker.config.ts' },
  mutate: ['src/main/scheduler/**/*.ts'],
  // Only what the scheduler tests import is copied to the sandbox (no models, no build output). The tsconfig
  // files stay out on purpose: Stryker would rewrite them through the TypeScript JS API, which TypeScript 7
  // (the native compiler) no longer has; vitest transpiles without them.
  ignorePatterns: ['/*', '!/src', '!/test', '!/package.json', '!/vitest.stryker.config.ts'],
  coverageAnalysis: 'perTest',
  reporters: ['clear-text', 'progress'],
  // Survivors with their diff are what matters; the list of tests behind every mutant is noise.
  clearTextReporter: { logTests: false },
  thresholds: { high: 95, low: 90, break: 90 },
  concurrency: 2,
  timeoutMS: 30000,
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
};
