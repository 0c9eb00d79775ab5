/**
 * The engine process dies under a running reply with another queued behind it (one running slot): the running
 * reply ends with the engine's failure, the queued one lost nothing and waits for its model to load again — the
 * chat says so, and the inspector's row says what it waits for —, and once the model is back it runs. The engine's
 * KVDESK_ENGINE_HOLD_LOADS failpoint holds the recovery's load (the file is made after the first load), so nothing
 * here races a load's few hundred ms.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { slowModel } from '../helpers/models';
import { openChat, openServer, saveEndlessChat } from './endless';
import { apiSnapshot, expect, lastReply, send, test } from './fixtures';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
let root: string;
let hold: string;
test.beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-crash-'));
  hold = path.join(root, 'hold-loads');
  server = await startServe(['--model', slowModel(), '--max-running', '1'], undefined, undefined, undefined, {
    KVDESK_ENGINE_HOLD_LOADS: hold,
  });
});
test.afterAll(async () => {
  if (existsSync(hold)) rmSync(hold);
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

/** The server's engine process: the one of its process group that runs the engine's entry. */
function enginePid(group: number): number {
  const pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && Number(p) !== group);
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const pgrp = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (pgrp === group && cmdline.some((a) => /engine(\.js|[/\\]process\.ts)$/.test(a))) return Number(pid);
    } catch {
      // gone while read
    }
  }
  throw new Error(`no engine process in process group ${group}:\n${server.log()}`);
}

test('a reply queued when the engine dies waits for its model to load again, says so, and then runs', async ({
  page,
}) => {
  test.skip(process.platform !== 'linux', 'finds the engine process through /proc');
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const running = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 });
  const queued = await saveEndlessChat(server, { greedy: true, maxNewTokens: 6 });
  await openServer(page, server);
  if (!(await page.getByTestId('inspector').isVisible())) await page.getByTestId('inspector-toggle').click();

  await openChat(page, running);
  await send(page, 'Tell me a long story');
  await expect(lastReply(page)).toHaveAttribute('data-state', 'running');
  await openChat(page, queued);
  await send(page, 'And a short one');
  const reply = lastReply(page);
  await expect(reply.getByTestId('queued-reason')).toHaveAttribute('data-reason', 'slots');
  const requestId = (await apiSnapshot(server)).queue[0]?.id;
  expect(requestId).toBeDefined();
  const row = page.locator(`[data-testid="request-row"][data-request-id="${requestId}"]`);
  await expect(row).toHaveAttribute('data-state', 'queued');
  await expect(row.getByTestId('request-held')).toHaveCount(0);

  // The engine dies; its recovery's load waits on the hold file.
  writeFileSync(hold, '');
  process.kill(enginePid(server.pid), 'SIGKILL');
  await expect(reply.getByTestId('queued-reason')).toHaveAttribute('data-reason', 'reloading');
  await expect(reply.getByTestId('queued-reason')).toContainText('the engine stopped');
  await expect(row).toHaveAttribute('data-state', 'queued');
  await expect(row.getByTestId('request-held')).toHaveText('for slow-llama to load again');
  // Still queued in the scheduler, reserving nothing; the reply that ran ended with the engine's failure.
  const snap = await apiSnapshot(server);
  expect(snap.queue.map((r) => r.id)).toEqual([requestId]);
  expect(snap.running).toEqual([]);
  await openChat(page, running);
  await expect(lastReply(page)).toHaveAttribute('data-state', 'error');

  // The model is back: the queued reply runs to its end, and the row no longer waits.
  rmSync(hold);
  await expect(row).toHaveAttribute('data-state', 'finished', { timeout: 60_000 });
  await expect(row.getByTestId('request-held')).toHaveCount(0);
  await openChat(page, queued);
  await expect(lastReply(page)).toHaveAttribute('data-state', 'done');
  expect(errors).toEqual([]);
});
