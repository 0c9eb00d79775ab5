/**
 * A package whose chat template is not valid Jinja loads (completions need no template) and says so on its card
 * (the host checks it: packages read no Jinja), naming what to do; a template of the person's own takes the
 * warning away.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkedTemplate, differsOnlyInTemplate, withChatTemplate } from '../../../src/main/host/chat-template-pick';
import { loadModelSpec } from '../../../src/main/packages/index';
import { HF_TOKENIZER_CONFIG, hfPackage, removeTempDirs } from './package-builder';

afterAll(removeTempDirs);

const tokenizerConfig = (chat_template: string) => ({ ...HF_TOKENIZER_CONFIG, chat_template });

describe("a package's chat template that does not parse", () => {
  it('loads with a warning that names the parser error and what to do', async () => {
    const dir = await hfPackage({ 'tokenizer_config.json': tokenizerConfig('{{ messages ') });
    const spec = checkedTemplate(await loadModelSpec(dir));
    const warning = spec.warnings.find((w) => w.includes('chat template is not valid Jinja'));
    expect(warning).toMatch(/\(Unexpected end of input\)/);
    expect(warning).toMatch(/chats are refused until it is fixed/);
    expect(warning).toMatch(/--chat-template FILE/);
    // A template of the person's own replaces it, and with it the warning; swapping it is a template-only change.
    const mine = withChatTemplate(spec, '{% for m in messages %}{{ m.content }}{% endfor %}');
    expect(mine.warnings.some((w) => w.includes('chat template is not valid Jinja'))).toBe(false);
    expect(differsOnlyInTemplate(spec, mine)).toBe(true);
  });

  it('a template that parses gives no such warning', async () => {
    const spec = checkedTemplate(await loadModelSpec(await hfPackage()));
    expect(spec.warnings.some((w) => w.includes('chat template'))).toBe(false);
  });
});
