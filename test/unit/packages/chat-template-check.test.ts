/**
 * A package whose chat template cannot be used loads (completions need no template) and says so on its card,
 * naming the file the template is in (the host checks it: packages read no Jinja), and what to do; a template of
 * the person's own takes the warning away. "Cannot be used": not valid Jinja, or it fails, raises or loops on a
 * one-message chat, which the check renders (such templates loaded without a word, and every chat then failed).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkedTemplate, differsOnlyInTemplate, withChatTemplate } from '../../../src/main/host/chat-template-pick';
import { loadModelSpec } from '../../../src/main/packages/index';
import { BROKEN_TEMPLATE_WARNING } from '../../../src/shared/model-spec';
import { HF_TOKENIZER_CONFIG, hfPackage, removeTempDirs } from './package-builder';

afterAll(removeTempDirs);

const tokenizerConfig = (chat_template: string) => ({ ...HF_TOKENIZER_CONFIG, chat_template });
const broken = (warnings: string[]) => warnings.find((w) => w.startsWith(BROKEN_TEMPLATE_WARNING));

describe("a package's chat template that does not parse", () => {
  it('loads with a warning that names the file, the parser error and what to do', async () => {
    const dir = await hfPackage({ 'tokenizer_config.json': tokenizerConfig('{{ messages ') });
    const spec = checkedTemplate(await loadModelSpec(dir));
    expect(spec.chatTemplateSource).toBe('tokenizer_config.json (field chat_template)');
    const warning = broken(spec.warnings);
    expect(warning).toMatch(
      /^The package's chat template cannot be used: the one in tokenizer_config\.json \(field chat_template\) is not valid Jinja \(.*Unexpected end of input\)/,
    );
    expect(warning).toMatch(/chats are refused until it is fixed/);
    expect(warning).toMatch(/--chat-template FILE/);
    // A template of the person's own replaces it, and with it the warning; swapping it is a template-only change.
    const mine = withChatTemplate(spec, '{% for m in messages %}{{ m.content }}{% endfor %}');
    expect(broken(mine.warnings)).toBeUndefined();
    expect(mine.chatTemplateSource).toBeUndefined();
    expect(differsOnlyInTemplate(spec, mine)).toBe(true);
  });

  it('in chat_template.jinja: the warning names chat_template.jinja, not tokenizer_config.json', async () => {
    const dir = await hfPackage({ 'chat_template.jinja': '{% if %}' });
    const spec = checkedTemplate(await loadModelSpec(dir));
    expect(spec.chatTemplateSource).toBe('chat_template.jinja');
    expect(broken(spec.warnings)).toMatch(/the one in chat_template\.jinja is not valid Jinja/);
    expect(broken(spec.warnings)).toMatch(/or fix it in chat_template\.jinja; completions work\.$/);
    expect(broken(spec.warnings)).not.toContain('tokenizer_config.json');
  });

  it('a template that parses and renders gives no such warning', async () => {
    const spec = checkedTemplate(await loadModelSpec(await hfPackage()));
    expect(spec.warnings.some((w) => w.includes('chat template'))).toBe(false);
  });
});

describe('a chat template that parses but cannot render a one-message chat', () => {
  const cases = [
    ['calls what is not a function', '{{ messages[0].content.nope.deeper() }}', /fails on a one-message chat \(/],
    ['uses a filter Jinja lacks', '{{ messages | nosuchfilter }}', /fails on a one-message chat \(.*nosuchfilter/],
    [
      'raises always',
      "{{ raise_exception('This template always fails') }}",
      /rejects even a one-message chat \(it raises: This template always fails\)/,
    ],
  ] as const;
  for (const [what, template, says] of cases) {
    it(`one that ${what}: a warning naming the file`, async () => {
      const spec = checkedTemplate(await loadModelSpec(await hfPackage({ 'chat_template.jinja': template })));
      expect(broken(spec.warnings)).toMatch(says);
      expect(broken(spec.warnings)).toContain('the one in chat_template.jinja');
    });
  }

  it('one that loops is stopped (the render is bounded in time) and warned about', async () => {
    const loop = '{% for i in range(100000) %}{% for k in range(100000) %}{% endfor %}{% endfor %}';
    const spec = await loadModelSpec(await hfPackage({ 'tokenizer_config.json': tokenizerConfig(loop) }));
    const started = performance.now();
    const checked = checkedTemplate(spec);
    expect(performance.now() - started).toBeLessThan(5000);
    expect(broken(checked.warnings)).toMatch(/did not finish rendering a one-message chat \(it ran for over 1 s/);
  });

  it("one that rejects only a system message (as Gemma's does) gives no warning", async () => {
    const template =
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
    const spec = checkedTemplate(await loadModelSpec(await hfPackage({ 'chat_template.jinja': template })));
    expect(broken(spec.warnings)).toBeUndefined();
  });
});
