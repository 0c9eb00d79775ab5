/**
 * `kvdesk serve --allow-origin`, in Chromium: a page of another site (a plain HTTP server on another port) calls
 * the OpenAI API with the token, through the browser's own CORS checks (the preflight included); a page of an
 * origin not allowed cannot read an answer, and neither can the allowed one reach kvdesk's own management routes.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect, test } from '@playwright/test';
import { type ServeHandle, startServe } from './serve';

const TOKEN = 'cors-e2e-secret';
let kvdesk: ServeHandle;
let sites: Server[] = [];

/** A site of its own origin that serves one empty page. */
async function site(): Promise<string> {
  const s = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>a chat client</title>');
  });
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  sites.push(s);
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

let allowed: string;
let other: string;
test.beforeAll(async () => {
  allowed = await site();
  other = await site();
  kvdesk = await startServe(['--token', TOKEN, '--allow-origin', allowed]);
});
test.afterAll(async () => {
  await kvdesk.stop();
  for (const s of sites) s.close();
  sites = [];
});

/** What a page's fetch of kvdesk's `path` gets: the status and body, or the browser's refusal. */
async function fetchFrom(page: import('@playwright/test').Page, url: string, init: Record<string, unknown>) {
  return page.evaluate(
    async ({ url, init }) => {
      try {
        const res = await fetch(url, init as RequestInit);
        return { status: res.status, body: await res.text() };
      } catch (err) {
        return { refused: String(err) };
      }
    },
    { url, init },
  );
}

test('a page of an allowed origin calls the model API with the token; other origins and routes are refused', async ({
  page,
}) => {
  const chat = {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
  };
  await page.goto(allowed);
  const ok = await fetchFrom(page, `${kvdesk.url}/v1/chat/completions`, chat);
  expect(ok).toMatchObject({ status: 200 });
  expect(JSON.parse((ok as { body: string }).body).usage.completion_tokens).toBeGreaterThan(0);
  // Without the token: an answer the page can read, and it says why.
  const anonymous = await fetchFrom(page, `${kvdesk.url}/v1/models`, {});
  expect(anonymous).toMatchObject({ status: 401 });
  expect((anonymous as { body: string }).body).toContain('invalid_token');
  // kvdesk's own routes are not the model APIs: the browser gets no answer it may read.
  const budget = await fetchFrom(page, `${kvdesk.url}/v1/kvdesk/budget`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(budget).toMatchObject({ refused: expect.stringMatching(/Failed to fetch/) });

  await page.goto(other);
  expect(await fetchFrom(page, `${kvdesk.url}/v1/chat/completions`, chat)).toMatchObject({
    refused: expect.stringMatching(/Failed to fetch/),
  });
});
