/**
 * MCP tools in a chat, in Chromium against a real serve whose mcp.json starts a real MCP server
 * (test/helpers/mcp-server.ts): the settings list the server, a chat turns its tools on, the model's call waits
 * for the person (Run / Skip), the tool runs and its answer goes back to the model, which goes on by itself.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test as base, expect, type Page } from '@playwright/test';
import { lastReply, newChat, send, setSettings, wsCall } from './fixtures';
import { ROOT, type ServeHandle, startServe } from './serve';

const TOKEN = 'tools-e2e-secret';

const test = base.extend<object, { toolServer: ServeHandle }>({
  toolServer: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright fixtures take their dependencies by destructuring
    async ({}, use) => {
      const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-tools-'));
      const calc = {
        command: process.execPath,
        args: [path.join(ROOT, 'bin/run-ts.cjs'), path.join(ROOT, 'test/helpers/mcp-server.ts')],
      };
      // A server with one tool whose arguments are always {} (the random model writes them whole at once).
      const broken = { ...calc, env: { KVDESK_TEST_MCP_ONLY: 'fail' } };
      // One tool whose answer is longer than the default model's whole context.
      const big = { ...calc, env: { KVDESK_TEST_MCP_ONLY: 'big' } };
      writeFileSync(path.join(dataDir, 'mcp.json'), JSON.stringify({ mcpServers: { calc, broken, big } }));
      // MCP tools only where the page needs a token (without one, any local program could run them).
      const server = await startServe(['--token', TOKEN], 90_000, undefined, dataDir);
      await use(server);
      await server.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
    { scope: 'worker', timeout: 120_000 },
  ],
});

interface Call {
  name: string;
  arguments: string;
}

/** What the page asked the host to generate, on the wire. */
function requests(page: Page): Array<Record<string, unknown>> {
  const sent: Array<Record<string, unknown>> = [];
  page.on('websocket', (ws) =>
    ws.on('framesent', (f) => {
      const m = JSON.parse(String(f.payload)) as { t: string; request?: Record<string, unknown> };
      if (m.t === 'generate' && m.request) sent.push(m.request);
    }),
  );
  return sent;
}

/**
 * The answer the test server gives a call, read as it reads the arguments (JSON.parse: a number past a double's
 * range is Infinity, which its schema refuses — the random model writes such numbers).
 */
function expected(call: Call): { text: string | RegExp; error: boolean } {
  const args = JSON.parse(call.arguments) as { a?: number; b?: number; ms?: number; text?: string };
  const finite = (n: number | undefined) => typeof n === 'number' && Number.isFinite(n);
  const huge = { text: /^The argument \w+ is a number no tool can read \(.+\): write a smaller one\.$/, error: true };
  if (call.name === 'echo') return { text: `You said: ${args.text}`, error: false };
  if (call.name === 'add') {
    return finite(args.a) && finite(args.b)
      ? { text: String((args.a as number) + (args.b as number)), error: false }
      : huge;
  }
  if (call.name === 'fail') return { text: 'it broke', error: true };
  return finite(args.ms) ? { text: /^waited -?[\d.e+-]+ ms$/, error: false } : huge;
}

test("a chat's MCP tools: the model's call waits for Run, the tool answers, the model goes on", async ({
  page,
  toolServer: server,
}) => {
  const sent = requests(page);
  await page.goto(`${server.url}/?token=${TOKEN}`);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  // The token leaves the address bar once read (the page's cookie carries it, on the reload below too).
  expect(page.url()).toBe(`${server.url}/`);
  await newChat(page);
  await setSettings(page, { maxNewTokens: 200, seed: 1 });
  await page.getByTestId('settings-toggle').click();
  const row = page.locator('[data-testid="mcp-server"][data-server="calc"]');
  await expect(row).toContainText('starts when the chat uses it');
  await row.getByTestId('mcp-server-toggle').check();
  await page.getByTestId('setting-tools-required').check();
  await expect(page.getByTestId('settings-summary')).toContainText('tools: calc (must call)');
  await page.getByTestId('settings-toggle').click();

  await send(page, 'What is 2 + 40?');
  // The reply by its id: once the tool answers, another reply comes after it.
  const id = await lastReply(page).getAttribute('data-message-id');
  const reply = page.locator(`[data-testid="message-assistant"][data-message-id="${id}"]`);
  const card = reply.getByTestId('tool-call');
  await expect(card).toHaveAttribute('data-state', 'waiting', { timeout: 60_000 });
  // The first request offered the server's three tools, and a call was required.
  expect(sent[0]).toMatchObject({ toolChoice: 'required' });
  expect(((sent[0]?.tools ?? []) as Array<{ name: string }>).map((t) => t.name)).toEqual([
    'echo',
    'add',
    'fail',
    'slow',
  ]);
  const name = ((await card.locator('.mono').first().textContent()) ?? '').split(' ')[0] as string;
  const args = (await card.getByTestId('tool-call-arguments').textContent()) ?? '';
  expect(['echo', 'add', 'fail', 'slow']).toContain(name);
  const want = expected({ name, arguments: args });

  await card.getByTestId('tool-run').click();
  await expect(card).toHaveAttribute('data-state', want.error ? 'error' : 'done');
  const answer = page.getByTestId('message-tool').last();
  await expect(answer.getByTestId('tool-result')).toContainText(`${name} answered`);
  await answer.getByTestId('tool-result').locator('summary').click();
  await expect(answer.getByTestId('message-text')).toHaveText(want.text);
  // The model read the answer and went on by itself (a call no longer required).
  await expect(page.getByTestId('message-assistant')).toHaveCount(2);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
  expect(sent).toHaveLength(2);
  expect(sent[1]).toMatchObject({ toolChoice: 'auto' });
  const messages = sent[1]?.messages as Array<Record<string, unknown>>;
  const callMessage = messages.at(-2) as { role: string; toolCalls: Array<{ id: string; name: string }> };
  expect(callMessage.role).toBe('assistant');
  expect(callMessage.toolCalls[0]?.name).toBe(name);
  expect(messages.at(-1)).toMatchObject({ role: 'tool', toolCallId: callMessage.toolCalls[0]?.id, name });

  // Regenerated: the reply to the tool's answer is written again; the call and its answer stay, nothing runs again.
  await lastReply(page).hover();
  await lastReply(page).getByTestId('regenerate').click();
  await expect.poll(() => sent.length).toBe(3);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
  await expect(page.getByTestId('message-assistant')).toHaveCount(2);
  await expect(page.getByTestId('message-tool')).toHaveCount(1);
  expect(((sent[2]?.messages ?? []) as Array<{ role: string }>).at(-1)?.role).toBe('tool');
  await expect(lastReply(page).getByTestId('versions')).toBeVisible();

  // Kept with the chat.
  await page.reload();
  await expect(page.getByTestId('message-tool')).toHaveCount(1);
  await expect(page.getByTestId('tool-call').first()).toHaveAttribute('data-state', want.error ? 'error' : 'done');
});

test('JSON output with a tool to call: the call first, then, after its answer, the JSON or more calls', async ({
  page,
  toolServer: server,
}) => {
  const sent = requests(page);
  await requiredToolChat(page, server, { maxNewTokens: 120, seed: 2 });
  await page.getByTestId('setting-json').check();
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
  await page.getByTestId('setting-json-schema').fill(JSON.stringify(schema));
  await page.getByTestId('setting-json-schema').blur();
  await expect(page.getByTestId('settings-summary')).toContainText('JSON schema');
  await page.getByTestId('settings-toggle').click();

  await send(page, 'Is 2 + 40 even?');
  const card = lastReply(page).getByTestId('tool-call');
  await expect(card).toHaveAttribute('data-state', 'waiting', { timeout: 60_000 });
  // The turn that must call a tool is the call alone: no JSON asked of it.
  expect(sent[0]).toMatchObject({ toolChoice: 'required' });
  expect(sent[0]).not.toHaveProperty('jsonSchema');
  await card.getByTestId('tool-run').click();
  await expect(page.getByTestId('message-tool')).toHaveCount(1);
  await expect(page.getByTestId('message-assistant')).toHaveCount(2);
  const next = lastReply(page);
  await expect(next).toHaveAttribute('data-state', 'done', { timeout: 60_000 });
  // After the answer: the tools beside the JSON, and a reply that is one of them — never a refusal.
  expect(sent[1]).toMatchObject({ toolChoice: 'auto', jsonSchema: schema });
  await expect(next.getByTestId('refusal')).toHaveCount(0);
  if ((await next.getByTestId('tool-call').count()) === 0) {
    const text = (await next.getByTestId('message-text').locator('pre code').textContent()) ?? '';
    expect([{ ok: true }, { ok: false }]).toContainEqual(JSON.parse(text.trim()));
  }
});

test('a page served without a token may not run tools, and says how to', async ({ page }) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-tools-open-'));
  const servers = { calc: { command: 'true' }, other: { command: 'true' } };
  writeFileSync(path.join(dataDir, 'mcp.json'), JSON.stringify({ mcpServers: servers }));
  const open = await startServe([], 90_000, undefined, dataDir);
  try {
    // A chat that took calc's tools where they could run (a page with a token, the desktop window).
    const now = Date.now();
    const id = `t-tools-open-${now}`;
    const chat = { id, title: 'Tools elsewhere', createdAt: now, updatedAt: now, messages: [], mcpServers: ['calc'] };
    expect((await wsCall(open, 'saveThread', chat)).ok).toBe(true);
    await page.goto(open.url);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    // The tools settings say at once that this page runs none; a server not chosen cannot be, the chosen one can
    // still be turned off.
    await page.getByTestId('settings-toggle').click();
    await expect(page.getByTestId('mcp-blocked')).toContainText('served without a token');
    await expect(page.getByTestId('mcp-blocked')).toContainText('kvdesk serve --token SECRET');
    const toggle = (name: string) =>
      page.locator(`[data-testid="mcp-server"][data-server="${name}"]`).getByTestId('mcp-server-toggle');
    await expect(toggle('other')).toBeDisabled();
    await expect(toggle('calc')).toBeChecked();
    await expect(toggle('calc')).toBeEnabled();
    await page.getByTestId('settings-toggle').click();
    // Sent anyway: the notice says why, and the turn goes on without tools.
    await send(page, 'Hi');
    await expect(page.getByTestId('notice')).toContainText('served without a token');
    await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
    await expect(lastReply(page).getByTestId('tool-call')).toHaveCount(0);
  } finally {
    await open.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('servers that do not start are all named in one notice, and the turn goes on without them', async ({ page }) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-tools-down-'));
  const servers = { alpha: { command: '/nonexistent/alpha-mcp' }, beta: { command: '/nonexistent/beta-mcp' } };
  writeFileSync(path.join(dataDir, 'mcp.json'), JSON.stringify({ mcpServers: servers }));
  const down = await startServe(['--token', TOKEN], 90_000, undefined, dataDir);
  try {
    const now = Date.now();
    const id = `t-tools-down-${now}`;
    const chat = {
      id,
      title: 'Tools down',
      createdAt: now,
      updatedAt: now,
      messages: [],
      mcpServers: ['alpha', 'beta'],
    };
    expect((await wsCall(down, 'saveThread', chat, TOKEN)).ok).toBe(true);
    await page.goto(`${down.url}/?token=${TOKEN}`);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
    await send(page, 'Hi');
    const notice = page.getByTestId('notice');
    await expect(notice).toContainText('These tools are not offered');
    await expect(notice).toContainText('"alpha"');
    await expect(notice).toContainText('"beta"');
    await expect(notice).toContainText('ENOENT');
    await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
  } finally {
    await down.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

/**
 * A new chat in the window with a server's tools (calc's by default) turned on, which must call one; its settings
 * left open.
 */
async function requiredToolChat(
  page: Page,
  server: ServeHandle,
  s: { maxNewTokens: number; seed: number; tools?: string },
): Promise<void> {
  await page.goto(`${server.url}/?token=${TOKEN}`);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await newChat(page);
  await setSettings(page, { maxNewTokens: s.maxNewTokens, seed: s.seed });
  await page.getByTestId('settings-toggle').click();
  const tools = s.tools ?? 'calc';
  await page.locator(`[data-testid="mcp-server"][data-server="${tools}"]`).getByTestId('mcp-server-toggle').check();
  await page.getByTestId('setting-tools-required').check();
}

/** A new chat with a server's tools (calc's by default), which must call one: its reply's call card, waiting. */
async function waitingCall(page: Page, server: ServeHandle, tools = 'calc') {
  await requiredToolChat(page, server, { maxNewTokens: 200, seed: 2, tools });
  await page.getByTestId('settings-toggle').click();
  await send(page, 'Add 3 and 4.');
  const id = await lastReply(page).getAttribute('data-message-id');
  const card = page.locator(`[data-testid="message-assistant"][data-message-id="${id}"]`).getByTestId('tool-call');
  await expect(card).toHaveAttribute('data-state', 'waiting', { timeout: 60_000 });
  return card;
}

test('a call the person skips is answered as not run, and the model goes on', async ({ page, toolServer: server }) => {
  const sent = requests(page);
  const card = await waitingCall(page, server);
  await card.getByTestId('tool-skip').click();
  await expect(card.getByTestId('tool-call-state')).toHaveText('skipped');
  await expect(page.getByTestId('message-assistant')).toHaveCount(2);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
  expect(((sent[1]?.messages ?? []) as Array<{ role: string; content: string }>).at(-1)).toMatchObject({
    role: 'tool',
    content: 'The person did not let this tool run.',
  });
});

test('writing on while a call waits skips it: the chat goes on, and so does the next turn', async ({
  page,
  toolServer: server,
}) => {
  const sent = requests(page);
  const card = await waitingCall(page, server);
  // The person writes on instead of choosing Run or Skip.
  await send(page, 'Never mind, something else.');
  await expect(card.getByTestId('tool-call-state')).toHaveText('skipped');
  for (let turn = 0; turn < 2; turn++) {
    const reply = lastReply(page);
    await expect(reply).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
    await expect(reply.getByTestId('refusal')).toHaveCount(0);
    // Its calls (it must call one) are answered too when the person writes on again.
    if (turn === 0) await send(page, 'And now?');
  }
  const second = (sent[1]?.messages ?? []) as Array<{ role: string; content: string }>;
  expect(second.slice(-2)).toMatchObject([
    { role: 'tool', content: 'The person did not let this tool run.' },
    { role: 'user', content: 'Never mind, something else.' },
  ]);
});

test('an answer longer than the model can read is cut to fit its context, and the model goes on', async ({
  page,
  toolServer: server,
}) => {
  const sent = requests(page);
  const card = await waitingCall(page, server, 'big');
  await card.getByTestId('tool-run').click();
  await expect(card).toHaveAttribute('data-state', 'done', { timeout: 30_000 });
  const reply = lastReply(page);
  await expect(page.getByTestId('message-assistant')).toHaveCount(2);
  await expect(reply).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });
  await expect(reply.getByTestId('refusal')).toHaveCount(0);
  const answer = ((sent[1]?.messages ?? []) as Array<{ role: string; content: string }>).at(-1);
  expect(answer?.role).toBe('tool');
  expect(answer?.content).toMatch(
    /\n\[kvdesk cut this answer to [\d,]+ of its 100,000 characters: the model's context is 2,048 tokens\]$/,
  );
  // The prompt that read it, tools' definitions included, leaves the reply a quarter of the context.
  expect(((sent[1]?.tools ?? []) as unknown[]).length).toBeGreaterThan(0);
  const measured = await wsCall(server, 'measurePrompt', sent[1], TOKEN);
  expect(measured.ok).toBe(true);
  expect((measured.value as { promptTokens: number }).promptTokens).toBeLessThanOrEqual(2048 * 0.75);
});

test('Always: that tool runs without asking in this chat from then on, until the settings take it back', async ({
  page,
  toolServer: server,
}) => {
  await requiredToolChat(page, server, { maxNewTokens: 64, seed: 1, tools: 'broken' });
  await page.getByTestId('settings-toggle').click();
  const calls = page.getByTestId('tool-call');
  const answers = page.getByTestId('message-tool');

  await send(page, 'First.');
  await expect(calls.nth(0)).toHaveAttribute('data-state', 'waiting', { timeout: 60_000 });
  await calls.nth(0).getByTestId('tool-always').click();
  await expect(calls.nth(0)).toHaveAttribute('data-state', 'error');
  await expect(answers.nth(0).getByTestId('message-text')).toHaveText('it broke');
  await expect(page.getByTestId('message-assistant')).toHaveCount(2);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });

  // The next call of it runs by itself, and the model goes on.
  await send(page, 'Second.');
  await expect(answers).toHaveCount(2, { timeout: 60_000 });
  await expect(calls.nth(1)).toHaveAttribute('data-state', 'error');
  await expect(page.getByTestId('message-assistant')).toHaveCount(4);
  await expect(lastReply(page)).toHaveAttribute('data-state', /done|cancelled/, { timeout: 60_000 });

  // Taken back in the settings: the next call waits again.
  await page.getByTestId('settings-toggle').click();
  await expect(page.getByTestId('tool-allowed')).toHaveText('broken/fail ✕');
  await page.getByTestId('tool-allowed').click();
  await expect(page.getByTestId('tools-allowed')).toHaveCount(0);
  await page.getByTestId('settings-toggle').click();
  await send(page, 'Third.');
  await expect(calls.nth(2)).toHaveAttribute('data-state', 'waiting', { timeout: 60_000 });
  await expect(answers).toHaveCount(2);
});

test('a wrong mcp.json shows its error alone, not also "No MCP servers"', async ({ page, toolServer: server }) => {
  const file = path.join(server.dataDir, 'mcp.json');
  const good = readFileSync(file, 'utf8');
  writeFileSync(file, '{"mcpServers": {"calc": {"command": 7}}}');
  try {
    await page.goto(`${server.url}/?token=${TOKEN}`);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await newChat(page);
    await page.getByTestId('settings-toggle').click();
    await expect(page.getByTestId('mcp-config-error')).toContainText('command');
    await expect(page.getByTestId('mcp-none')).toHaveCount(0);
    await expect(page.getByTestId('mcp-server')).toHaveCount(0);
  } finally {
    writeFileSync(file, good);
  }
});

test('the open settings follow mcp.json and the servers as they change, without reopening', async ({
  page,
  toolServer: server,
}) => {
  const file = path.join(server.dataDir, 'mcp.json');
  const good = readFileSync(file, 'utf8');
  try {
    await page.goto(`${server.url}/?token=${TOKEN}`);
    await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
    await newChat(page);
    await page.getByTestId('settings-toggle').click();
    await expect(page.locator('[data-testid="mcp-server"][data-server="calc"]')).toBeVisible();
    await expect(page.locator('[data-testid="mcp-server"][data-server="later"]')).toHaveCount(0);
    const servers = JSON.parse(good) as { mcpServers: Record<string, unknown> };
    writeFileSync(file, JSON.stringify({ mcpServers: { ...servers.mcpServers, later: { command: 'true' } } }));
    await expect(page.locator('[data-testid="mcp-server"][data-server="later"]')).toContainText(
      'starts when the chat uses it',
    );
  } finally {
    writeFileSync(file, good);
  }
});
