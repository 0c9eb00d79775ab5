/**
 * A chat is refused with the file the package's chat template is in: a broken chat_template.jinja used to be
 * blamed on "tokenizer_config.json field chat_template". And a template that parses but fails on every chat says
 * so when the model loads (it loaded without a word, and then every chat failed).
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { toErrorInfo } from '../../../src/shared/errors';
import { BROKEN_TEMPLATE_WARNING } from '../../../src/shared/model-spec';
import { copyDefault, editJson, editsHost } from './edited-default';

const edits = editsHost();

async function chatError(model: string) {
  try {
    await edits.host.generate({ model, messages: [{ role: 'user', content: 'hi' }], maxNewTokens: 2 }).result;
  } catch (err) {
    return toErrorInfo(err);
  }
  throw new Error('the chat was not refused');
}

describe("the package's chat template, named by its file", () => {
  it('a broken chat_template.jinja: the card and the chat name chat_template.jinja; completions work', async () => {
    const dir = await copyDefault('jinja-broken');
    await fs.writeFile(path.join(dir, 'chat_template.jinja'), '{% if %}');
    const info = await edits.host.loadModel(dir, { id: 'jinja-broken' });
    expect(info.spec.warnings.find((w) => w.startsWith(BROKEN_TEMPLATE_WARNING))).toContain(
      'the one in chat_template.jinja is not valid Jinja',
    );
    const err = await chatError('jinja-broken');
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toMatch(/^The chat template in chat_template\.jinja is not a valid Jinja template: /);
    expect(err.message).not.toContain('tokenizer_config.json');
    const done = await edits.host.generate({ model: 'jinja-broken', prompt: 'hello', maxNewTokens: 2 }).result;
    expect(done.tokenIds).toHaveLength(2);
  });

  it('a chat_template field that parses but always fails: warned at load, and the chat names the field', async () => {
    const dir = await copyDefault('field-fails');
    await editJson(dir, 'tokenizer_config.json', (j) => {
      j.chat_template = '{{ messages | nosuchfilter }}';
    });
    const info = await edits.host.loadModel(dir, { id: 'field-fails' });
    expect(info.spec.warnings.find((w) => w.startsWith(BROKEN_TEMPLATE_WARNING))).toContain(
      'the one in tokenizer_config.json (field chat_template) fails on a one-message chat',
    );
    const err = await chatError('field-fails');
    expect(err.message).toMatch(
      /^The chat template in tokenizer_config\.json \(field chat_template\) failed while rendering: .*nosuchfilter/,
    );
  });

  it('a template that writes nothing of the messages: the chat names the template, not the prompt', async () => {
    const dir = await copyDefault('writes-nothing');
    await fs.writeFile(path.join(dir, 'chat_template.jinja'), '{{ messages[5].content }}');
    await edits.host.loadModel(dir, { id: 'writes-nothing' });
    const err = await chatError('writes-nothing');
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toBe(
      "the chat template in chat_template.jinja wrote no text for these messages, so there is nothing to send the model. Check that the template writes each message's content (fix it, or give the model another chat template).",
    );
  });
});
