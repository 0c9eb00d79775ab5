/**
 * A kvdesk's chat store in a process of its own, for the test of two kvdesks on one data folder
 * (test/integration/store/deleted-two-processes.test.ts): saves chats `<prefix>-0` … `<prefix>-<count - 1>`, says
 * "ready", waits for "go" on stdin, then deletes them one after the other as fast as it can, and says "done".
 */
import { ThreadStore } from '../../src/main/store/thread-store';

const [dataDir, prefix, countText] = process.argv.slice(2);
if (!dataDir || !prefix || !countText) {
  process.stderr.write('usage: delete-chats.ts <data-dir> <prefix> <count>\n');
  process.exit(2);
}
const count = Number(countText);
const store = new ThreadStore(dataDir, { log: (line) => process.stderr.write(`${line}\n`) });
const ids = Array.from({ length: count }, (_, i) => `${prefix}-${i}`);

async function main(): Promise<void> {
  for (const id of ids) await store.save({ id, title: id, createdAt: 1, updatedAt: 1, messages: [] });
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => {
    process.stdin.on('data', (d) => {
      if (String(d).includes('go')) resolve();
    });
  });
  for (const id of ids) await store.delete(id);
  process.stdout.write('done\n');
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
