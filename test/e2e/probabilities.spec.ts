/**
 * A thread set to keep token probabilities, in Chromium against a real serve: a reply's "probabilities" view
 * shows each token the model wrote with its probability and the likeliest alternatives — the same figures the
 * OpenAI API gives for the same greedy request — and they are kept with the chat.
 */
import { expect, lastReply, newChat, send, setSettings, test } from './fixtures';

const QUESTION = 'Tell me about the sea.';

test("a reply's tokens with their probabilities, as the API gives them, kept with the chat", async ({
  app,
  server,
}) => {
  await newChat(app);
  // The page opens on the chat the worker's server last had open, another test's, whose settings (a system prompt,
  // a temperature) a new chat takes: this one starts from the defaults, as the API request below does.
  if (await app.getByTestId('carried-settings').isVisible()) {
    await app.getByTestId('carried-reset').click();
    await expect(app.getByTestId('carried-settings')).toHaveCount(0);
    await expect(app.getByTestId('settings-summary')).toHaveText('temp default (0.7) · max default (256)');
  }
  await setSettings(app, { greedy: true, maxNewTokens: 8 });
  await app.getByTestId('settings-toggle').click();
  await app.getByTestId('setting-probabilities').check();
  await expect(app.getByTestId('settings-summary')).toContainText('probabilities');
  await app.getByTestId('settings-toggle').click();
  await send(app, QUESTION);
  const reply = lastReply(app);
  await expect(reply).toHaveAttribute('data-state', 'done', { timeout: 30_000 });

  // The same question through the API: its tokens' log-probabilities and alternatives.
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'default',
      messages: [{ role: 'user', content: QUESTION }],
      max_tokens: 8,
      temperature: 0,
      logprobs: true,
      top_logprobs: 5,
    }),
  });
  expect(res.status).toBe(200);
  const api = (await res.json()) as {
    choices: Array<{
      message: { content: string };
      logprobs: { content: Array<{ token: string; logprob: number; top_logprobs: Array<{ logprob: number }> }> };
    }>;
  };
  const expected = api.choices[0]?.logprobs.content ?? [];
  expect(expected).toHaveLength(8);

  await reply.hover();
  await reply.getByTestId('toggle-probabilities').click();
  const view = reply.getByTestId('token-view');
  await expect(view).toBeVisible();
  const tokens = view.getByTestId('token');
  await expect(tokens).toHaveCount(8);
  // The tokens make the reply's text, and each has the API's probability.
  expect(await view.locator('.tokens').textContent()).toBe(api.choices[0]?.message.content);
  const shown = await tokens.evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-p'))));
  shown.forEach((p, i) => {
    expect(p).toBeCloseTo(Math.exp(expected[i]?.logprob ?? 0), 3);
  });
  // Each token's card: its probability, then the five likeliest at its place.
  const title = (await tokens.first().getAttribute('title')) ?? '';
  const lines = title.split('\n');
  expect(lines[1]).toBe('likeliest here:');
  expect(lines).toHaveLength(7);
  expect(lines[0]).toMatch(/ \d+(\.\d)? %$|< 0\.1 %$/);
  // From the keyboard: the tokens are one Tab stop, the arrows go from token to token, the one focused shows its
  // card (its name the token and its probability), and Esc hides the card.
  await reply.getByTestId('branch').focus();
  await app.keyboard.press('Tab');
  await expect(tokens.first()).toBeFocused();
  const card = view.getByTestId('token-card');
  await expect(card).toBeVisible();
  await app.keyboard.press('ArrowRight');
  await expect(tokens.nth(1)).toBeFocused();
  const second = ((await tokens.nth(1).getAttribute('title')) ?? '').split('\n');
  await expect(tokens.nth(1)).toHaveAccessibleName(second[0]?.replace(/\s+/, ' ') ?? '');
  await expect(card).toContainText(second[2]?.trim().replace(/\s+/, ' ') ?? '');
  await app.keyboard.press('Escape');
  await expect(card).toHaveCount(0);
  await expect(tokens.nth(1)).toBeFocused();
  await app.keyboard.press('Tab');
  await expect(view.locator(':focus')).toHaveCount(0);
  // Back to the text.
  await reply.getByTestId('toggle-probabilities').click();
  await expect(view).toHaveCount(0);
  await expect(reply.getByTestId('message-text')).not.toBeEmpty();

  // Kept with the chat.
  await expect(async () => {
    await app.reload();
    await lastReply(app).hover();
    await lastReply(app).getByTestId('toggle-probabilities').click({ timeout: 2000 });
    await expect(lastReply(app).getByTestId('token')).toHaveCount(8, { timeout: 2000 });
  }).toPass({ timeout: 20_000 });
  // New chats start without it (and the next tests with the defaults).
  await setSettings(app, { greedy: false });
});
