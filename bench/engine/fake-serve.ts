/**
 * The headless server as `kvdesk serve` composes it (RunnerService → HostApi →
 * startServer), with one difference: the engine process is bench/engine/fake-engine.ts,
 * so tokens arrive at a rate the benchmark chooses. Prints `fake-serve <url>` when ready;
 * SIGTERM stops it. Arguments: <data dir> <control file>.
 */
import path from 'node:path';
import { createHostApi } from '../../src/main/host/host-api';
import { RunnerService } from '../../src/main/host/runner-service';
import { startServer } from '../../src/main/server';

async function main(): Promise<void> {
  const [dataDir, control] = process.argv.slice(2);
  if (!dataDir || !control) throw new Error('usage: fake-serve.ts <data dir> <control file>');
  const root = path.resolve(__dirname, '..', '..');
  const runner = new RunnerService({
    engineEntry: path.join(__dirname, 'fake-engine.ts'),
    engineEnv: { KVDESK_BENCH_FAKE_CONTROL: control },
    maxRunning: 8,
    kvBudgetBytes: 2 * 1024 ** 3,
  });
  const hostApi = await createHostApi({
    runner,
    dataDir,
    defaultModelDir: path.join(root, 'resources/models/default'),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  const server = await startServer({ hostApi, port: 0 });
  process.stdout.write(`fake-serve ${server.url}\n`);
  const stop = async () => {
    await server.close();
    await hostApi.close();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
}

main().catch((err: unknown) => {
  process.stderr.write(`fake-serve: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
