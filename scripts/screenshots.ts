/**
 * Screenshots of the running app for the README: docs/chat.png, docs/models.png,
 * docs/inspector.png, docs/devices.png, docs/prefill.png, docs/json.png, docs/library.png,
 * docs/long-chat.png, docs/thinking.png, docs/downloads.png, docs/markdown.png, docs/find.png,
 * docs/probabilities.png, docs/tools.png, docs/dark.png, docs/chat-template.png, docs/narrow.png,
 * docs/narrow-new-chat.png. Starts a real `kvdesk serve` (real engine and scheduler)
 * with a small KV budget so the budget bar has something to show, drives
 * Debian Chromium through the same steps a person would, and captures the window.
 *
 *   node bin/run-ts.cjs scripts/screenshots.ts           # all of them
 *   node bin/run-ts.cjs scripts/screenshots.ts prefill   # only docs/prefill.png (json, library, long-chat, thinking:
 *                                                         # only theirs)
 *
 * Needs Chromium at /usr/bin/chromium (or KVDESK_CHROMIUM) and a renderer build
 * (it runs the renderer build first unless KVDESK_E2E_SKIP_BUILD=1).
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS } from '../test/e2e/chromium';
import { apiThinkingQuestion, wsCall } from '../test/e2e/fixtures';
import globalSetup from '../test/e2e/global-setup';
import { ROOT, startServe } from '../test/e2e/serve';
import { defaultModelRepo, startFakeHub } from '../test/helpers/fake-hub';
import { graphVariantsModel, smallContextModel, thinkingModel } from '../test/helpers/models';
import { writeTwinPackages } from '../test/helpers/static-cache-models';

const DOCS = path.join(ROOT, 'docs');
const FIXTURE = path.resolve(ROOT, '../shared/fixtures/onnx-genai/tiny-llm');
/** 6 MiB: three full-length replies of the default model (1 KiB per token) fit, a fourth would queue. */
const BUDGET = '6MiB';

async function newChat(page: Page, title: string): Promise<void> {
  await page.getByTestId('new-thread').click();
  await page.waitForTimeout(100);
  void title;
}

async function settings(
  page: Page,
  s: { maxNewTokens?: number; greedy?: boolean; seed?: number; system?: string },
): Promise<void> {
  await page.getByTestId('settings-toggle').click();
  const panel = page.getByTestId('settings-panel');
  if (s.system !== undefined) {
    await panel.getByTestId('system-prompt').fill(s.system);
    await panel.getByTestId('system-prompt').blur();
  }
  if (s.maxNewTokens !== undefined) {
    await panel.getByTestId('setting-maxNewTokens').fill(String(s.maxNewTokens));
    await panel.getByTestId('setting-maxNewTokens').blur();
  }
  if (s.seed !== undefined) {
    await panel.getByTestId('setting-seed').fill(String(s.seed));
    await panel.getByTestId('setting-seed').blur();
  }
  if (s.greedy !== undefined) await panel.getByTestId('setting-greedy').setChecked(s.greedy);
  await page.getByTestId('settings-toggle').click();
}

async function say(page: Page, text: string, wait = true): Promise<void> {
  await page.getByTestId('chat-input').fill(text);
  await page.getByTestId('chat-input').press('Enter');
  if (wait) await page.getByTestId('send-button').waitFor({ state: 'visible', timeout: 60_000 });
}

async function rename(page: Page, title: string): Promise<void> {
  const id = await page.getByTestId('chat-view').getAttribute('data-thread-id');
  const item = page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`);
  // The rename button (hover shows it): a double click on a narrow list's title can land on the pin.
  await item.hover();
  await item.getByTestId('thread-rename').click();
  await page.getByTestId('thread-rename-input').fill(title);
  await page.getByTestId('thread-rename-input').press('Enter');
}

async function setLimit(page: Page, text: string): Promise<void> {
  await page.getByTestId('budget-limit-input').fill(text);
  await page.getByTestId('budget-limit-apply').click();
  // A limit that drops idle chats' kept KV asks first.
  await page.waitForTimeout(100);
  if (await page.getByTestId('budget-limit-ask').isVisible()) await page.getByTestId('budget-limit-confirm').click();
  await page.waitForTimeout(200);
}

async function main(): Promise<void> {
  globalSetup();
  mkdirSync(DOCS, { recursive: true });
  const only = {
    prefill: prefillShot,
    json: jsonShot,
    library: libraryShot,
    'long-chat': longChatShot,
    thinking: thinkingShot,
    downloads: downloadsShot,
    markdown: markdownShot,
    probabilities: probabilitiesShot,
    tools: toolsShot,
    'api-server': apiServerShot,
    variants: variantsShot,
    'chat-template': chatTemplateShot,
    narrow: narrowShot,
  }[process.argv[2] ?? ''];
  if (only) {
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      await only(browser);
    } finally {
      await browser.close();
    }
    return;
  }
  const server = await startServe(['--kv-budget', BUDGET]);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage({
      viewport: { width: 1440, height: 900 },
      deviceScaleFactor: 1,
      colorScheme: 'light',
    });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();

    // A few threads, so the list looks lived in.
    for (const [title, prompt] of [
      ['Notes', 'Summarise my notes'],
      ['Code help', 'Why is my loop slow?'],
    ] as const) {
      await newChat(page, title);
      await settings(page, { maxNewTokens: 24, seed: 2 });
      await say(page, prompt);
      await rename(page, title);
    }

    // The chat: two turns of one thread (the second reuses the session's KV), the second capped by the budget.
    await newChat(page, 'Story time');
    await settings(page, { maxNewTokens: 96, seed: 11, system: 'You are a storyteller.' });
    await say(page, 'Tell me a story about a lighthouse keeper.');
    await rename(page, 'Story time');
    // Room for the prompt plus a few dozen tokens only: the reply is admitted with a capped length.
    await setLimit(page, '300KiB');
    await settings(page, { maxNewTokens: 512 });
    await say(page, 'Make it longer, with a twist at the end.');
    await setLimit(page, BUDGET);
    // A draft with a file attached: the chip, and the prompt it would make against the context.
    await page.getByTestId('attach-input').setInputFiles({
      name: 'keeper-log.md',
      mimeType: 'text/markdown',
      buffer: Buffer.from('# Keeper log\n\n- 1887: the lamp changed to oil.\n- 1902: a storm took the jetty.\n'),
    });
    await page.getByTestId('chat-input').fill('Use my log for the dates.');
    await page.getByTestId('draft-measure').waitFor();
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'chat.png'), animations: 'disabled' });
    console.log('wrote docs/chat.png');
    await page.getByTestId('composer-attachment-remove').click();
    await page.getByTestId('chat-input').fill('');

    // The inspector: three replies streaming at once against the 6 MiB budget, sessions holding KV.
    const long = [] as string[];
    for (let i = 0; i < 3; i++) {
      await newChat(page, `Long ${i}`);
      // Greedy decoding of this prompt runs for over a thousand tokens on the default model.
      if (i === 0) await settings(page, { maxNewTokens: 1800, greedy: true, system: '' });
      await say(page, 'Tell me a long story', false);
      long.push((await page.getByTestId('chat-view').getAttribute('data-thread-id')) ?? '');
    }
    await page.getByTestId('budget-running-count').filter({ hasText: 'running 3/' }).waitFor({ timeout: 10_000 });
    // Two API clients beside them: one whose prompt does not fit what the three leave (it queues, and says for
    // what), and one asking five replies to a long prompt, more than the whole budget (refused, saying why).
    const api = (words: number, extra: Record<string, unknown>) =>
      fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'default',
          messages: [{ role: 'user', content: 'the keeper '.repeat(words) }],
          ...extra,
        }),
      }).then((r) => r.text());
    const queued = api(300, { max_tokens: 64 }).catch(() => '');
    await api(700, { max_tokens: 16, n: 5 });
    await page.getByTestId('request-reason').first().waitFor({ timeout: 10_000 });
    // Taken while the queued one still waits (a sampled story may end, and let it in).
    await page.getByTestId('request-queue-note').first().waitFor({ timeout: 10_000 });
    await page.screenshot({ path: path.join(DOCS, 'inspector.png'), animations: 'disabled' });
    console.log('wrote docs/inspector.png');
    for (const id of long) {
      await page.getByTestId('thread-list').locator(`[data-thread-id="${id}"]`).click();
      await page
        .getByTestId('stop-button')
        .click({ timeout: 1000 })
        .catch(() => {});
    }
    await queued;

    // The models view: a dropped fixture package, validated and loaded, beside the default model; then a package
    // with a static KV cache, checked and shown before it loads.
    await page.getByTestId('models-toggle').click();
    if (existsSync(FIXTURE)) {
      // The folder chooser (<input webkitdirectory>) gives the files with their folder name, as a real drop does.
      await page.getByTestId('model-file-input').setInputFiles(FIXTURE);
      await page.getByTestId('model-card').getByTestId('model-load').click({ timeout: 30_000 });
      await page.getByTestId('model-card').getByTestId('model-loaded').waitFor({ timeout: 30_000 });
    } else {
      console.log(`(fixture ${FIXTURE} absent: the models screenshot shows the default model only)`);
    }
    // A package with a static KV cache: its card shows the cache and what it costs.
    const twins = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-shot-static-'));
    try {
      const { staticDir } = writeTwinPackages(twins, { layers: 2, hidden: 64, heads: 4, capacity: 48, seed: 11 });
      await page.getByTestId('model-file-input').setInputFiles(staticDir);
      await page.locator('[data-testid="model-card"][data-model-id="static"]').getByTestId('model-not-loaded').waitFor({
        timeout: 30_000,
      });
    } finally {
      rmSync(twins, { recursive: true, force: true });
    }
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'models.png'), animations: 'disabled' });
    console.log('wrote docs/models.png');
  } finally {
    await server.stop();
  }
  try {
    await devicesShot(browser);
    await prefillShot(browser);
    await jsonShot(browser);
    await libraryShot(browser);
    await longChatShot(browser);
    await thinkingShot(browser);
    await downloadsShot(browser);
    await markdownShot(browser);
    await probabilitiesShot(browser);
    await toolsShot(browser);
    await apiServerShot(browser);
    await variantsShot(browser);
  } finally {
    await browser.close();
  }
}

/**
 * docs/devices.png: the inspector with two device budgets. This machine has no GPU, so
 * test/e2e/serve-devices.ts budgets the `gpu-twin` copy of the default model on webgpu:0
 * (given 4 GiB with --device-memory) while the engine runs it on the CPU.
 */
async function devicesShot(browser: Browser): Promise<void> {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-shot-'));
  const twin = path.join(tmp, 'gpu-twin');
  cpSync(path.join(ROOT, 'resources/models/default'), twin, { recursive: true });
  const server = await startServe(
    ['--kv-budget', BUDGET, '--model', twin, '--device-memory', 'webgpu:0=4GiB'],
    90_000,
    'test/e2e/serve-devices.ts',
  );
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    for (const model of ['default', 'gpu-twin', 'gpu-twin']) {
      await newChat(page, model);
      await page.getByTestId('model-picker').selectOption(model);
      await settings(page, { maxNewTokens: 1800, greedy: true });
      await say(page, 'Tell me a long story', false);
    }
    await page.waitForTimeout(900);
    await page.screenshot({ path: path.join(DOCS, 'devices.png'), animations: 'disabled' });
    console.log('wrote docs/devices.png');
  } finally {
    await server.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * docs/prefill.png: a long message being read. The server prefills one position per run
 * (--prefill-chunk 1), so the default model takes long enough to show the progress.
 */
async function prefillShot(browser: Browser): Promise<void> {
  const server = await startServe(['--prefill-chunk', '1']);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await newChat(page, 'Long read');
    await settings(page, { maxNewTokens: 64, seed: 3 });
    await say(page, 'The boats came home to the harbour before the storm, one by one. '.repeat(60).trim(), false);
    await page.getByTestId('prefill-indicator').waitFor({ state: 'visible', timeout: 30_000 });
    await page.waitForTimeout(700);
    await page.screenshot({ path: path.join(DOCS, 'prefill.png'), animations: 'disabled' });
    console.log('wrote docs/prefill.png');
  } finally {
    await server.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

/**
 * docs/library.png: the Models view after a restart. Fixture packages were loaded (by path, and one uploaded as a
 * browser drop uploads it) in a first run on the same data directory; one folder was deleted since; an API
 * request has loaded one of them on first use.
 */
async function libraryShot(browser: Browser): Promise<void> {
  const work = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-shot-library-'));
  const dataDir = path.join(work, 'data');
  const fixtures = path.resolve(ROOT, '../shared/fixtures');
  const packages = ['onnx-genai/tiny-reasoning', 'onnxruntime-genai/tiny-random-gpt2-fp32', 'onnx-genai/tiny-llm']
    .map((rel) => path.join(fixtures, rel))
    .filter((dir) => existsSync(dir));
  try {
    let server = await startServe([], 90_000, undefined, dataDir);
    try {
      for (const dir of packages) {
        const copy = path.join(work, path.basename(dir));
        cpSync(dir, copy, { recursive: true });
        const r = await wsCall(server, 'loadModel', { path: copy });
        if (!r.ok) throw new Error(`${dir} did not load: ${JSON.stringify(r)}`);
      }
      const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
      await page.goto(server.url);
      await page.getByTestId('models-toggle').click();
      if (existsSync(FIXTURE)) {
        await page.getByTestId('model-file-input').setInputFiles(FIXTURE);
        await page.getByTestId('model-card').getByTestId('model-load').click({ timeout: 30_000 });
        await page.getByTestId('model-card').getByTestId('model-loaded').waitFor({ timeout: 30_000 });
      }
      await page.close();
    } finally {
      await server.stop();
    }
    // A package whose folder went away since.
    rmSync(path.join(work, 'tiny-llm'), { recursive: true, force: true });
    server = await startServe([], 90_000, undefined, dataDir);
    try {
      const page = await browser.newPage({ viewport: { width: 1440, height: 1280 }, deviceScaleFactor: 1 });
      await page.goto(server.url);
      await page.getByTestId('models-toggle').click();
      await page.locator('[data-testid="library-row"][data-state="ok"]').first().waitFor({ timeout: 30_000 });
      // An API request names a library package: it loads on first use (its card says so).
      const reply = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'tiny-reasoning',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
        }),
      });
      if (reply.status !== 200) throw new Error(`the first-use request failed: ${await reply.text()}`);
      await page.getByTestId('model-first-use').waitFor({ timeout: 30_000 });
      // The loaded models at the top of the view, the library below.
      await page
        .locator('.section-title')
        .first()
        .evaluate((el) => {
          (el as unknown as { scrollIntoView(o: unknown): void }).scrollIntoView({ block: 'start' });
        });
      await page.mouse.move(0, 0);
      await page.waitForTimeout(300);
      await page.screenshot({ path: path.join(DOCS, 'library.png'), animations: 'disabled' });
      console.log('wrote docs/library.png');
    } finally {
      await server.stop();
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * docs/narrow.png: an 800×600 window. The chat has the width (the chat list and the inspector are drawers from the
 * header); the inspector drawer is open over a chat whose new chat took the settings of the one before, and says so.
 */
async function narrowShot(browser: Browser): Promise<void> {
  const server = await startServe([]);
  try {
    const page = await browser.newPage({ viewport: { width: 800, height: 600 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor({ state: 'attached' });
    await page.getByTestId('sidebar-toggle').click();
    await newChat(page, 'Lighthouses');
    await settings(page, { maxNewTokens: 40, seed: 3, system: 'You are a lighthouse keeper.' });
    await say(page, 'What does a lighthouse keeper do at night?');
    await page.getByTestId('sidebar-toggle').click();
    await newChat(page, 'Next');
    await page.screenshot({ path: path.join(DOCS, 'narrow-new-chat.png'), animations: 'disabled' });
    console.log('wrote docs/narrow-new-chat.png');
    await page.getByTestId('sidebar-toggle').click();
    await page.getByTestId('thread-list').getByTestId('thread-title').filter({ hasText: 'lighthouse keeper' }).click();
    await page.getByTestId('inspector-toggle').click();
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'narrow.png'), animations: 'disabled' });
    console.log('wrote docs/narrow.png');
  } finally {
    await server.stop();
  }
}

/** docs/json.png: a thread with JSON output and a schema (settings open), its reply shown as a JSON code block. */
async function jsonShot(browser: Browser): Promise<void> {
  const server = await startServe([]);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await newChat(page, 'JSON');
    // A seed whose reply (the default model is random) closes its object well within max tokens.
    await settings(page, { maxNewTokens: 160, seed: 14 });
    await page.getByTestId('settings-toggle').click();
    await page.getByTestId('setting-json').check();
    await page.getByTestId('setting-temperature').fill('1');
    await page.getByTestId('setting-temperature').blur();
    await page.getByTestId('setting-presencePenalty').fill('0.5');
    await page.getByTestId('setting-presencePenalty').blur();
    await page
      .getByTestId('setting-json-schema')
      .fill(
        '{"type": "object", "properties": {"name": {"type": "string"}, "height_m": {"type": "integer"}}, "required": ["name", "height_m"]}',
      );
    await page.getByTestId('setting-json-schema').blur();
    await say(page, 'List three lighthouses as JSON, with their heights.');
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'json.png'), animations: 'disabled' });
    console.log('wrote docs/json.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/long-chat.png: a chat that outgrew its model's context (a generated model of 256 tokens): the line where
 * the model's view starts, the dimmed messages above it, and the replies' notes.
 */
async function longChatShot(browser: Browser): Promise<void> {
  const server = await startServe(['--model', smallContextModel()]);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await newChat(page, 'Rivers');
    await page.getByTestId('model-picker').selectOption('context-256');
    await settings(page, { maxNewTokens: 16, greedy: true, system: 'You answer in one short sentence.' });
    for (let i = 1; i <= 6; i++) {
      await say(page, `Question ${i}: which river runs through the old town number ${i}, and how long is it?`);
    }
    await rename(page, 'Rivers');
    await page.getByTestId('context-start').scrollIntoViewIfNeeded();
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'long-chat.png'), animations: 'disabled' });
    console.log('wrote docs/long-chat.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/thinking.png: a thinking model's replies (a generated model made one: Qwen3's template, `</think>` one
 * token): a reply's reasoning, opened above it.
 */
async function thinkingShot(browser: Browser): Promise<void> {
  const server = await startServe(['--model', thinkingModel()]);
  try {
    // A question on which the random model ends its reasoning by itself, so the reply has both parts.
    const { question } = await apiThinkingQuestion(server.url);
    const page = await browser.newPage({ viewport: { width: 1200, height: 560 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await newChat(page, 'Sky');
    await page.getByTestId('model-picker').selectOption('thinking');
    await settings(page, { maxNewTokens: 16, greedy: true });
    await say(page, question);
    await rename(page, 'Why is the sky blue?');
    await page.getByTestId('reasoning-toggle').first().click();
    // The inspector lists the requests of the search above: closed, the chat has the window.
    await page.getByTestId('inspector-toggle').click();
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'thinking.png'), animations: 'disabled' });
    console.log('wrote docs/thinking.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/downloads.png: the Models view's Download from Hugging Face, against a local imitation of the hub's file API
 * serving the generated default model: a download done (in the library), one under way, a search's hits.
 */
async function downloadsShot(browser: Browser): Promise<void> {
  const repo = 'onnx-community/tiny-chat';
  const onnx = { 'config.json': '{}', 'onnx/model.onnx': 'graph' };
  const hub = await startFakeHub(
    { [repo]: defaultModelRepo(), 'someone/tiny-chat-instruct-onnx': onnx, 'someone/tiny-chat-onnx': onnx },
    {
      lfsMinBytes: 10_000,
      meta: {
        [repo]: { downloads: 5_200, likes: 31, lastModified: '2026-10-20T08:00:00.000Z' },
        'someone/tiny-chat-instruct-onnx': { downloads: 870, likes: 4, lastModified: '2026-09-02T08:00:00.000Z' },
        'someone/tiny-chat-onnx': { downloads: 12, likes: 0, lastModified: '2026-06-11T08:00:00.000Z' },
      },
    },
  );
  process.env.HF_ENDPOINT = hub.url;
  const server = await startServe([]);
  delete process.env.HF_ENDPOINT;
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('models-toggle').click();
    const box = page.getByTestId('hub-download');
    await box.getByTestId('hub-repo').fill(repo);
    await box.getByTestId('hub-lookup').click();
    await box.getByTestId('hub-download-start').click();
    await box.locator('[data-testid="download"][data-state="done"]').waitFor({ timeout: 30_000 });
    // A second one stalls half way through its graph: its progress bar shows.
    hub.faults.stall = 'onnx/model.onnx';
    await box.getByTestId('hub-lookup').click();
    await box.getByTestId('hub-variant').selectOption('fp32');
    await box.getByTestId('hub-download-start').click();
    await box.locator('[data-testid="download"][data-state="running"]').getByTestId('download-rate').waitFor();
    // A search by a word of the name: the hub's ONNX language models, most downloaded first.
    await box.getByTestId('hub-repo').fill('tiny chat');
    await box.getByTestId('hub-lookup').click();
    await box.getByTestId('hub-hit').first().waitFor();
    await page.mouse.move(0, 0);
    await page.screenshot({ path: path.join(DOCS, 'downloads.png'), animations: 'disabled' });
    console.log('wrote docs/downloads.png');
  } finally {
    await server.stop();
    await hub.close();
  }
}

/**
 * docs/variants.png: a loaded package with two graph variants (fp32 and q4), its graph and backend picks open to
 * a change — the backends this machine cannot use listed, disabled.
 */
async function variantsShot(browser: Browser): Promise<void> {
  const server = await startServe(['--model', graphVariantsModel()]);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('models-toggle').click();
    const card = page.locator('[data-testid="loaded-model-card"][data-model-id="graph-variants"]');
    await card.getByTestId('model-backend-pick').locator('option[value="cuda"]').waitFor({ state: 'attached' });
    await card.getByTestId('model-graph').selectOption('q4');
    await card.scrollIntoViewIfNeeded();
    await page.mouse.move(0, 0);
    await page.screenshot({ path: path.join(DOCS, 'variants.png'), animations: 'disabled' });
    console.log('wrote docs/variants.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/chat-template.png: the default model's card with its chat template open, being changed into one of the
 * person's own, and its preview (not loaded: the shot changes nothing).
 */
async function chatTemplateShot(browser: Browser): Promise<void> {
  const server = await startServe([]);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('models-toggle').click();
    const card = page.locator('[data-testid="loaded-model-card"][data-model-id="default"]');
    await card.getByTestId('model-template').locator('summary').click();
    const text = card.getByTestId('model-template-text');
    const packaged = await text.inputValue();
    await text.fill(packaged.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant\\n<think>\\n'"));
    await card.getByTestId('model-template-preview-button').click();
    await card.getByTestId('model-template-preview').waitFor();
    await card.getByTestId('model-template-preview').scrollIntoViewIfNeeded();
    await page.mouse.move(0, 0);
    await page.screenshot({ path: path.join(DOCS, 'chat-template.png'), animations: 'disabled' });
    console.log('wrote docs/chat-template.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/api-server.png: the desktop window's API server card (its own control, as test/e2e/serve-window.ts gives
 * the page), running on the local network with the API key.
 */
async function apiServerShot(browser: Browser): Promise<void> {
  const server = await startServe([], 90_000, 'test/e2e/serve-window.ts');
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('models-toggle').click();
    const card = page.getByTestId('api-server');
    await card.getByTestId('api-server-port').fill('0');
    await card.getByTestId('api-server-lan-toggle').check();
    await card.getByTestId('api-server-start').click();
    await card.getByTestId('api-key').waitFor();
    await card.scrollIntoViewIfNeeded();
    await page.mouse.move(0, 0);
    await page.screenshot({ path: path.join(DOCS, 'api-server.png'), animations: 'disabled' });
    console.log('wrote docs/api-server.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/markdown.png: how a reply's Markdown renders — math (LaTeX's delimiters and $…$), a highlighted code block,
 * money left as it is. The default model writes no such reply: the thread is saved as a person's import would be.
 */
async function markdownShot(browser: Browser): Promise<void> {
  const server = await startServe([]);
  try {
    const now = Date.now();
    const reply = [
      'For $ax^2 + bx + c = 0$ with \\( a \\neq 0 \\), the roots are',
      '',
      '\\[ x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a} \\]',
      '',
      'They are real when the discriminant $\\Delta = b^2 - 4ac \\ge 0$. In Python (the book costs $5 and the course $10):',
      '',
      '```python',
      'import math',
      '',
      'def roots(a: float, b: float, c: float) -> tuple[float, float]:',
      '    """Both roots of ax² + bx + c (a ≠ 0, real roots only)."""',
      "    d = math.sqrt(b * b - 4 * a * c)  # the discriminant's root",
      '    return (-b + d) / (2 * a), (-b - d) / (2 * a)',
      '```',
    ].join('\n');
    const saved = await wsCall(server, 'saveThread', {
      id: `t-markdown-${now}`,
      title: 'Quadratic roots',
      createdAt: now,
      updatedAt: now,
      messages: [
        { id: 'u', role: 'user', content: 'How do I solve a quadratic equation?', createdAt: now },
        { id: 'a', role: 'assistant', content: reply, createdAt: now + 1 },
      ],
    });
    if (!saved.ok) throw new Error('saveThread failed');
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await page.getByTestId('thread-list').locator(`[data-thread-id="t-markdown-${now}"]`).click();
    await page.locator('.katex-display').waitFor();
    await page.waitForFunction(
      () => (globalThis as unknown as { document: { fonts: { status: string } } }).document.fonts.status === 'loaded',
    );
    await page.mouse.move(0, 0);
    await page.screenshot({ path: path.join(DOCS, 'markdown.png'), animations: 'disabled' });
    console.log('wrote docs/markdown.png');
    // docs/find.png: Ctrl+F in the same chat, its occurrences marked, the current one apart.
    await page.keyboard.press('Control+f');
    await page.getByTestId('find-input').fill('root');
    await page.getByTestId('find-input').press('Shift+Enter');
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'find.png'), animations: 'disabled' });
    console.log('wrote docs/find.png');
    // docs/dark.png: the same chat, dark (the OS's scheme; the header's theme button picks one too).
    await page.getByTestId('find-input').press('Escape');
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.waitForTimeout(200);
    await page.screenshot({ path: path.join(DOCS, 'dark.png'), animations: 'disabled' });
    console.log('wrote docs/dark.png');
  } finally {
    await server.stop();
  }
}

/** docs/probabilities.png: a chat set to keep token probabilities, a reply shown as its tokens. */
async function probabilitiesShot(browser: Browser): Promise<void> {
  const server = await startServe([]);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(server.url);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await newChat(page, 'Probabilities');
    await settings(page, { maxNewTokens: 400, seed: 1 });
    await page.getByTestId('settings-toggle').click();
    await page.getByTestId('setting-probabilities').check();
    await page.getByTestId('settings-toggle').click();
    await say(page, 'Write two sentences about lighthouses.');
    await rename(page, 'Lighthouses');
    const reply = page.getByTestId('message-assistant').last();
    await reply.hover();
    await reply.getByTestId('toggle-probabilities').click();
    await reply.getByTestId('token-view').waitFor();
    await page.mouse.move(0, 0);
    await page.waitForTimeout(200);
    await page.screenshot({ path: path.join(DOCS, 'probabilities.png'), animations: 'disabled' });
    console.log('wrote docs/probabilities.png');
  } finally {
    await server.stop();
  }
}

/**
 * docs/tools.png: a chat with an MCP server's tools (test/helpers/mcp-server.ts, named in the data directory's
 * mcp.json): the model's call, run, its answer opened, and the reply after it.
 */
async function toolsShot(browser: Browser): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-shot-tools-'));
  // Its `echo` tool alone: a string the random model writes reads better than its numbers.
  const notes = {
    command: process.execPath,
    args: [path.join(ROOT, 'bin/run-ts.cjs'), path.join(ROOT, 'test/helpers/mcp-server.ts')],
    env: { KVDESK_TEST_MCP_ONLY: 'echo' },
  };
  writeFileSync(path.join(dataDir, 'mcp.json'), JSON.stringify({ mcpServers: { notes } }, null, 2));
  // Tools run only where the page needs a token.
  const server = await startServe(['--token', 'shot'], 90_000, undefined, dataDir);
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(`${server.url}/?token=shot`);
    await page.getByTestId('thread-list').and(page.locator('[data-loaded="true"]')).waitFor();
    await newChat(page, 'Tools');
    await settings(page, { maxNewTokens: 400, seed: 1 });
    await page.getByTestId('settings-toggle').click();
    await page.locator('[data-testid="mcp-server"][data-server="notes"]').getByTestId('mcp-server-toggle').check();
    await page.getByTestId('setting-tools-required').check();
    await page.getByTestId('settings-toggle').click();
    await say(page, 'Say hello back to me.');
    const card = page.getByTestId('tool-call').first();
    await card.and(page.locator('[data-state="waiting"]')).waitFor({ timeout: 60_000 });
    await card.getByTestId('tool-run').click();
    await page.getByTestId('message-tool').first().waitFor();
    await page
      .getByTestId('message-assistant')
      .nth(1)
      .and(page.locator('[data-state="done"]'))
      .waitFor({ timeout: 60_000 });
    await page.getByTestId('tool-result').first().locator('summary').click();
    await rename(page, 'Tools');
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(DOCS, 'tools.png'), animations: 'disabled' });
    console.log('wrote docs/tools.png');
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
