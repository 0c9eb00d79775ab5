/**
 * `kvdesk serve --log-requests` (request-log.ts): a line per HTTP request once it is answered or its client went
 * away, with its ids (kvdesk's and the client's x-request-id), and never the query, where a browser's token goes.
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './server-helpers';

const TOKEN = 'log-test-secret';
let t: TestServer;
const lines: string[] = [];
beforeAll(async () => {
  t = await startTestServer({}, { token: TOKEN, requestLog: (line) => lines.push(line) });
});
afterAll(async () => {
  await t?.close();
});

/** The logged line whose request matches `pattern`, once written. */
async function lineOf(pattern: RegExp): Promise<string> {
  await expect.poll(() => lines.find((l) => pattern.test(l)), { timeout: 10_000 }).toBeDefined();
  return lines.find((l) => pattern.test(l)) as string;
}

it('names the request, its status and both ids, and leaves out the query (a browser token)', async () => {
  const res = await fetch(`${t.url}/v1/models?token=${TOKEN}`, { headers: { 'x-request-id': 'client 42' } });
  expect(res.status).toBe(200);
  const line = await lineOf(/ GET \/v1\/models 200 /);
  expect(line).toMatch(/^kvdesk: \d{4}-\d\d-\d\dT[\d:.]+Z 127\.0\.0\.1 GET \/v1\/models 200 \d+ ms /);
  expect(line).toContain(`id=${res.headers.get('request-id')}`);
  expect(line).toContain('x-request-id="client 42"');
  expect(line).not.toContain(TOKEN);
});

it("logs a refusal, and a generation under its reply's id", async () => {
  const refused = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', body: '{}' });
  expect(refused.status).toBe(401);
  await lineOf(/ POST \/v1\/chat\/completions 401 /);
  const res = await fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { id: string };
  const line = await lineOf(/ POST \/v1\/chat\/completions 200 /);
  // The reply's own id (chatcmpl-<kvdesk's id>) is the one logged.
  expect(body.id).toContain(res.headers.get('request-id'));
  expect(line).toContain(`id=${res.headers.get('request-id')}`);
  expect(line).not.toContain('x-request-id=');
});

it('says a request whose client went away before its answer was cut', async () => {
  const { port } = new URL(t.url);
  const socket = net.connect(Number(port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  // A body promised and never sent: the client goes away while the server waits for it.
  socket.write(
    `POST /api/chat HTTP/1.1\r\nHost: ${new URL(t.url).host}\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":`,
  );
  await new Promise((resolve) => setTimeout(resolve, 200));
  socket.destroy();
  const line = await lineOf(/ POST \/api\/chat /);
  // Its address as it came; no status, as none was sent.
  expect(line).toMatch(/ 127\.0\.0\.1 POST \/api\/chat - \(cut: the client went away before the end\) \d+ ms/);
});
