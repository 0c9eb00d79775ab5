import { defineConfig } from 'vitest/config';

// Mutation testing runs only the scheduler's unit tests: they are pure and fast, and the
// project config's global setup (generating a model package) is not needed for them.
export default defineConfig({
  test: {
    pool: 'forks',
    include: ['test/unit/scheduler/**/*.test.ts'],
    // A fixed seed makes the property tests kill the same mutants on every run.
    env: { KVDESK_FC_SEED: '20240611' },
  },
});
