/**
 * kvdesk stopping while a reply streams (its serve ended, as Ctrl+C or the system's shutdown ends it): the host
 * cancels the reply as a shutdown, which the page shows interrupted — not stopped by the person — with the text so
 * far and the same things to do as a reply a reload cut off. kvdesk, stopping, waits for the page's save of the
 * reply as it ended (a moment), so all the page shows of it is kept; a save the closing connection still left
 * unanswered is made again once kvdesk is back (refused, and settled as a conflict, where another page saved the
 * chat since). The slow model (endless.ts) writes the reply.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { slowModel } from '../helpers/models';
import { openChat, openServer, saveEndlessChat } from './endless';
import { expect, lastReply, send, test } from './fixtures';
import { startServe } from './serve';

test('a reply kvdesk stopping cut off is interrupted, not stopped, and kept so once kvdesk is back', async ({
  page,
}) => {
  test.setTimeout(180_000);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-shutdown-'));
  let server = await startServe(['--model', slowModel()], 90_000, undefined, dataDir);
  const port = new URL(server.url).port;
  try {
    const id = await saveEndlessChat(server, { greedy: true, maxNewTokens: 1900 });
    await openServer(page, server);
    await openChat(page, id);
    await send(page, 'Tell me a long story');
    const reply = lastReply(page);
    await expect(reply).toHaveAttribute('data-state', 'running');
    await expect(reply.getByTestId('message-text')).not.toBeEmpty();

    await server.stop();
    await expect(reply).toHaveAttribute('data-state', 'interrupted');
    const note =
      'Interrupted: kvdesk stopped while this reply was being written (its text so far is kept; continue or regenerate it).';
    await expect(reply.getByTestId('interrupted-note')).toHaveText(note);
    await expect(reply.getByTestId('message-stats')).toContainText('interrupted');
    await expect(reply.getByTestId('message-stats')).not.toContainText('stopped');
    await expect(page.getByTestId('reply-announcer')).toHaveText(
      /^Reply interrupted after [\d,]+ tokens: kvdesk stopped\.$/,
    );
    // The page says the connection is lost, and nothing of a save lost.
    await expect(page.getByTestId('offline-note')).toBeVisible();
    await page.waitForTimeout(500);
    await expect(page.getByText('not saved')).toHaveCount(0);
    const text = (await reply.getByTestId('message-text').textContent()) ?? '';

    // Back, and reloaded: the reply is kept interrupted as the page showed it — kvdesk, stopping, waited for the
    // page's save of the reply's end (where the last save while it streamed had less) — to continue or regenerate.
    server = await startServe(['--port', port, '--model', slowModel()], 90_000, undefined, dataDir);
    await expect(page.getByTestId('offline-note')).toHaveCount(0, { timeout: 30_000 });
    await page.reload();
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await expect(lastReply(page).getByTestId('interrupted-note')).toHaveText(note);
    await expect(lastReply(page).getByTestId('message-text')).toHaveText(text);
    await lastReply(page).hover();
    await expect(lastReply(page).getByTestId('continue')).toBeVisible();
    await expect(lastReply(page).getByTestId('regenerate')).toBeVisible();
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
