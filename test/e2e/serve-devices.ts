/**
 * `kvdesk serve` with two device budgets on a CPU-only machine, for the
 * inspector's per-device view: a model whose package folder is named
 * `gpu-twin` is budgeted on `webgpu:0` (the host's budgetDeviceOf test
 * setting; the engine still runs it on the CPU). Everything else is the real
 * serve: flags, engine process, schedulers, transport. Run as
 * `node bin/run-ts.cjs test/e2e/serve-devices.ts serve [serve flags]`.
 */
import { serve } from '../../src/cli/serve';

const args = process.argv.slice(2);
serve(
  args[0] === 'serve' ? args.slice(1) : args,
  {
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
  },
  {
    settings: { budgetDeviceOf: (spec) => (spec.id === 'gpu-twin' ? 'webgpu:0' : 'cpu') },
  },
).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`serve-devices: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
