/**
 * A chat template of the person's own, on a model card in Chromium against a real serve (a copy of the default
 * package, so other tests keep theirs): previewed on a short conversation, then the model loads again with it, its prompts change,
 * a <think> in it makes the model a thinking one, the library keeps it across a page reload, a template that does
 * not render is refused with Jinja's complaint and the model keeps the one it had, and "the package's" goes back.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, type Locator, type Page, test } from '@playwright/test';
import { defaultModelDir } from '../helpers/fixtures';
import { wsCall } from './fixtures';
import { type ServeHandle, startServe } from './serve';

let server: ServeHandle;
let root: string;
test.beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-e2e-template-'));
  cpSync(defaultModelDir, path.join(root, 'mine'), { recursive: true });
  server = await startServe(['--model', path.join(root, 'mine')]);
});
test.afterAll(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

/** The prompt's tokens for one question, through the OpenAI API. */
async function promptTokens(): Promise<number> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mine', messages: [{ role: 'user', content: 'Why?' }], max_tokens: 1 }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
}

/**
 * Opens a card's chat template editor once the Models view has its host state (the API panel comes with the cards'
 * answers), and checks that it opened: one CI run's click left the editor closed and the fill then waited 60 s for
 * it. Why is not known: a probe of five loads saw the cards and the API panel appear in the same render, so the
 * panel pushing the cards down, as first thought, does not explain it.
 */
async function openTemplate(page: Page, card: Locator): Promise<void> {
  await expect(page.getByTestId('api-server')).toBeVisible();
  const template = card.getByTestId('model-template');
  await template.locator('summary').click();
  await expect(template).toHaveJSProperty('open', true);
}

const SYSTEMLESS =
  "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

const MINE =
  "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant: <think>{% endif %}";

test("a card's chat template of one's own: loaded with, kept, refused when broken, and dropped again", async ({
  page,
}) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const packaged = await promptTokens();
  await page.goto(server.url);
  await page.getByTestId('models-toggle').click();
  const card = page.locator('[data-testid="loaded-model-card"][data-model-id="mine"]');
  const template = card.getByTestId('model-template');
  await expect(card.getByTestId('model-template-whose')).toHaveText('the package’s');
  await expect(card.getByTestId('model-thinks')).toHaveCount(0);
  await openTemplate(page, card);
  const text = card.getByTestId('model-template-text');
  await expect(text).toHaveValue(/<\|im_start\|>/);
  // Nothing written yet: nothing to load.
  await expect(card.getByTestId('model-template-apply')).toBeDisabled();

  // The preview: what a template writes for a short conversation, before it is used; one that does not render
  // says why, in the card.
  await text.fill(MINE);
  await card.getByTestId('model-template-preview-button').click();
  await expect(card.getByTestId('model-template-preview')).toHaveText(
    'system: You are a helpful assistant.\nuser: Hello!\nassistant: Hi! How can I help?\nuser: What is 2 + 2?\nassistant: <think>',
  );
  await expect(card.getByTestId('model-template-preview')).toHaveAttribute('data-error', 'false');
  await text.fill('{% if %}');
  await expect(card.getByTestId('model-template-preview')).toHaveCount(0);
  await card.getByTestId('model-template-preview-button').click();
  await expect(card.getByTestId('model-template-preview')).toHaveAttribute('data-error', 'true');
  await expect(card.getByTestId('model-template-preview')).toContainText('template cannot be used');
  await expect(template).toHaveAttribute('data-edited', 'false');

  await text.fill(MINE);
  await card.getByTestId('model-template-apply').click();
  await expect(template).toHaveAttribute('data-edited', 'true', { timeout: 30_000 });
  await expect(card.getByTestId('model-template-whose')).toHaveText('yours');
  await expect(card.getByTestId('model-thinks')).toBeVisible();
  await expect(card.getByTestId('model-template-apply')).toBeDisabled();
  expect(await promptTokens()).not.toBe(packaged);

  // Kept: after a reload of the page, and as the library's pick.
  await page.reload();
  await page.getByTestId('models-toggle').click();
  await expect(card.getByTestId('model-template-whose')).toHaveText('yours');
  await openTemplate(page, card);
  await expect(text).toHaveValue(MINE);

  // A template that does not render: refused with what Jinja said, beside the editor (no notice over the page), and
  // the model keeps the one it had.
  await text.fill('{% for m in messages %}{{ m.content }');
  await card.getByTestId('model-template-apply').click();
  await expect(card.getByTestId('model-template-preview')).toHaveAttribute('data-error', 'true');
  await expect(card.getByTestId('model-template-preview')).toContainText('This chat template cannot be used');
  await expect(page.getByTestId('notice')).toHaveCount(0);
  await expect(card.getByTestId('model-template-whose')).toHaveText('yours');
  await expect(card.getByTestId('model-thinks')).toBeVisible();

  // One that refuses a system message (as Gemma's does): the preview's conversation has one, so it says so; the
  // load checks it as it is used (a user's message) and takes it.
  await text.fill(SYSTEMLESS);
  await card.getByTestId('model-template-preview-button').click();
  await expect(card.getByTestId('model-template-preview')).toContainText('System role not supported');
  await card.getByTestId('model-template-apply').click();
  await expect(card.getByTestId('model-template-whose')).toHaveText('yours');
  await expect(card.getByTestId('model-thinks')).toHaveCount(0, { timeout: 30_000 });

  // One that would hold the host: stopped at the limit, said beside the editor; Preview waits for it, once.
  await text.fill('{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}');
  const previewButton = card.getByTestId('model-template-preview-button');
  await previewButton.click();
  await expect(previewButton).toHaveText('Previewing…');
  await expect(previewButton).toBeDisabled();
  await expect(card.getByTestId('model-template-preview')).toContainText(
    'did not finish rendering: it ran for over 1 s',
  );
  await expect(previewButton).toHaveText('Preview');

  // The package's own again, with an undo: yours once more, then the package's.
  await text.fill(SYSTEMLESS);
  await card.getByTestId('model-template-reset').click();
  await expect(template).toHaveAttribute('data-edited', 'false', { timeout: 30_000 });
  await expect(card.getByTestId('model-template-status')).toHaveText(
    /^The package's template is in use from the next reply\.Undo$/,
  );
  await card.getByTestId('model-template-undo').click();
  await expect(template).toHaveAttribute('data-edited', 'true', { timeout: 30_000 });
  await expect(text).toHaveValue(SYSTEMLESS);
  await expect(card.getByTestId('model-template-status')).toHaveText('Yours is in use from the next reply.');

  // The package's own again: no longer thinking, its prompts as before.
  await card.getByTestId('model-template-reset').click();
  await expect(template).toHaveAttribute('data-edited', 'false', { timeout: 30_000 });
  await expect(card.getByTestId('model-template-whose')).toHaveText('the package’s');
  await expect(card.getByTestId('model-thinks')).toHaveCount(0);
  await expect(text).toHaveValue(/<\|im_start\|>/);
  expect(await promptTokens()).toBe(packaged);
  expect(errors).toEqual([]);
});

test("a package whose own chat template is not valid Jinja: its card says chats are refused, and the chat's refusal gives the advice once", async ({
  page,
}) => {
  const broken = path.join(root, 'broken-template');
  cpSync(defaultModelDir, broken, { recursive: true });
  const configFile = path.join(broken, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  writeFileSync(configFile, JSON.stringify({ ...config, chat_template: '{% for m in messages %}{{ m.content }' }));
  const loaded = (await wsCall(server, 'loadModel', { path: broken })) as { ok: boolean };
  expect(loaded.ok).toBe(true);
  try {
    await page.goto(server.url);
    await page.getByTestId('models-toggle').click();
    const card = page.locator('[data-testid="loaded-model-card"][data-model-id="broken-template"]');
    // It fits the budget, and still no chat can run on it: the head of the card says both.
    await expect(card.getByTestId('fit-badge')).toBeVisible();
    await expect(card.getByTestId('template-broken-badge')).toHaveText('chats refused: template');
    await expect(card).toContainText('"chat template" on this model\'s card');
    await page.getByTestId('models-toggle').click();
    await page.getByTestId('new-thread').click();
    await page.getByTestId('model-picker').selectOption('broken-template');
    await page.getByTestId('chat-input').fill('Hi');
    await page.getByTestId('chat-input').press('Enter');
    const refusal = page.getByTestId('message-assistant').last().getByTestId('refusal');
    await expect(refusal).toContainText('is not a valid Jinja template');
    await expect(refusal).toContainText('Give the model another chat template in its card');
    // The advice once (the host's own sentence for the CLI goes), and one full stop after Jinja's sentence.
    await expect(refusal).not.toContainText('Fix the template or remove it');
    expect((await refusal.textContent()) ?? '').not.toContain('..');
  } finally {
    await wsCall(server, 'unloadModel', { id: 'broken-template' });
  }
});
