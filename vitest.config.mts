import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

// onnxruntime-node needs a real Node context: the vm* pools break its typed-array checks.
export default defineConfig({
  test: {
    pool: 'forks',
    // Two files at a time, whatever the core count (vitest's default on 2 cores is one): most files wait on an
    // engine process or a spawned CLI, not on this process. About a quarter off the suite on 2 cores.
    maxWorkers: 2,
    // The engine's release of dead KV (kv-cache.ts releaseKv) runs in the tests' own decoders too, as it does in
    // the engine process (the host passes the same flag where Node's V8 needs it).
    execArgv:
      typeof (ArrayBuffer.prototype as { transfer?: unknown }).transfer === 'function'
        ? []
        : ['--harmony-rab-gsab-transfer'],
    // The engines and backend probes the tests start run the bundles the global setup makes from the sources
    // (out/cli), as a person's do, rather than the sources through tsx: about a third of a second less each.
    env: { KVDESK_BUNDLE_DIR: fileURLToPath(new URL('./out/cli', import.meta.url)) },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: ['test/global-setup.ts'],
    projects: [
      {
        extends: true,
        test: {
          name: 'main',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, 'test/unit/electron/**'],
          // A worker runs file after file in one process: a fresh process (and module graph) per file cost about
          // a quarter of the suite's time. Tests clean up what they change (spies, environment variables).
          isolate: false,
        },
      },
      {
        extends: true,
        // These mock the `electron` module, each its own way: each file gets its own process.
        test: { name: 'electron', include: ['test/unit/electron/**/*.test.ts'], isolate: true },
      },
    ],
  },
});
