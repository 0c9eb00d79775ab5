import { defineConfig } from 'vitest/config';

// onnxruntime-node needs a real Node context: the vm* pools break its typed-array checks.
export default defineConfig({
  test: {
    pool: 'forks',
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: ['test/global-setup.ts'],
  },
});
