import { readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { describe, expect, it, vi } from 'vitest';
import {
  applyChat,
  createTextTokenizer,
  DEFAULT_CHAT_TEMPLATE,
  loadTokenizer,
  renderChatTemplate,
} from '../../../src/main/tokenizer';
import { exactNumber, templateProblem } from '../../../src/main/tokenizer/chat-template';
import { KvdeskError } from '../../../src/shared/errors';
import { QWEN3_CODER_CALLS } from '../../helpers/chat-templates';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { byteFallbackTokenizerJson, byteLevelTokenizerJson } from './tokenizer-builders';

function thrown(fn: () => unknown): KvdeskError {
  try {
    fn();
  } catch (err) {
    if (err instanceof KvdeskError) return err;
    throw err;
  }
  throw new Error('expected a KvdeskError, nothing was thrown');
}

const SOURCE = 'tokenizer_config.json field chat_template';
const conversation = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hi' },
];

describe('renderChatTemplate', () => {
  it('renders the default ChatML template', () => {
    expect(renderChatTemplate(DEFAULT_CHAT_TEMPLATE, conversation, { addGenerationPrompt: true })).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(renderChatTemplate(DEFAULT_CHAT_TEMPLATE, conversation, { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n',
    );
  });

  it('passes bos_token and eos_token, and empty strings when the package has none', () => {
    // `+` on an undefined value is an error in Jinja, so missing tokens must arrive as ''.
    const template = '{% for m in messages %}{{ bos_token + m.content + eos_token }}{% endfor %}';
    const opts = { addGenerationPrompt: false, bosToken: '<s>', eosToken: '</s>' };
    expect(renderChatTemplate(template, conversation, opts)).toBe('<s>Be brief.</s><s>Hi</s>');
    expect(renderChatTemplate(template, conversation, { addGenerationPrompt: false })).toBe('Be brief.Hi');
  });

  it('names the source and the Jinja message for a syntax error', () => {
    const err = thrown(() =>
      renderChatTemplate('{% for m in messages %}{{ m.content }', conversation, {
        addGenerationPrompt: true,
        source: SOURCE,
      }),
    );
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain(SOURCE);
    expect(err.message).toContain('Expected closing expression token');
    // One full stop between the parser's sentence and the advice (the parser ends its own with one).
    expect(err.message).not.toContain('..');
    expect(err.message).toMatch(/CloseExpression\. Fix the template/);
    expect(err.detail).toEqual({ source: SOURCE });
  });

  it('names the source for a template that fails while rendering', () => {
    const err = thrown(() =>
      renderChatTemplate('{{ messages[0].content.nope() }}', conversation, {
        addGenerationPrompt: true,
        source: SOURCE,
      }),
    );
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain(SOURCE);
    expect(err.message).toContain('Cannot call something that is not a function');
  });

  describe('a template that would hold the host is stopped, and says why', () => {
    const opts = { addGenerationPrompt: true, source: SOURCE };

    it('stops a render that runs too long (two nested loops of 100 000 turns)', () => {
      const loops = '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}';
      const started = performance.now();
      const err = thrown(() =>
        renderChatTemplate(loops, conversation, { ...opts, limits: { ms: 200, chars: 1e6, listItems: 1e5 } }),
      );
      expect(performance.now() - started).toBeLessThan(5000);
      expect(err.code).toBe('PACKAGE_INVALID');
      expect(err.message).toMatch(
        /^The tokenizer_config\.json field chat_template did not finish rendering: it ran for over 0\.2 s and was stopped\. Fix the template/,
      );
    });

    it("a package's template that ran past the limit when it was read is not run again for each chat", () => {
      // A loop of its own text (no other test's template), flagged as its package is read.
      const loops = '{% for i in range(100000) %}{% for j in range(99999) %}{% endfor %}{% endfor %}';
      expect(templateProblem(loops)).toMatch(/^did not finish rendering a one-message chat \(it ran for over 1 s/);
      // Given a minute, a render would run that long (past this test's time): it fails at once, as it did then.
      const err = thrown(() =>
        renderChatTemplate(loops, conversation, { ...opts, limits: { ms: 60_000, chars: 1e6, listItems: 1e5 } }),
      );
      expect(err.code).toBe('PACKAGE_INVALID');
      expect(err.message).toMatch(
        /^The tokenizer_config\.json field chat_template did not finish rendering: it ran for over 1 s and was stopped\. Fix the template/,
      );
    });

    it('a template that ran past the limit with thinking on (or tools) still renders a chat without them', () => {
      const thinkingOnly =
        '{% if enable_thinking %}{% for i in range(100000) %}{% for j in range(99997) %}{% endfor %}{% endfor %}{% endif %}' +
        '{% for m in messages %}{{ m.content }};{% endfor %}';
      const tenth = { ms: 100, chars: 1e6, listItems: 1e5 };
      const on = { ...opts, vars: { enable_thinking: true }, limits: tenth };
      expect(thrown(() => renderChatTemplate(thinkingOnly, conversation, on)).message).toMatch(/did not finish/);
      const off = { ...opts, vars: { enable_thinking: false }, limits: { ms: 3000, chars: 1e6, listItems: 1e5 } };
      expect(renderChatTemplate(thinkingOnly, conversation, off)).toBe('Be brief.;Hi;');
      // With thinking on again, it fails at once for a minute.
      const started = performance.now();
      expect(
        thrown(() => renderChatTemplate(thinkingOnly, conversation, { ...on, limits: off.limits })).message,
      ).toMatch(/did not finish rendering: it ran for over 0\.1 s/);
      expect(performance.now() - started).toBeLessThan(500);
    });

    it("a template that ran past the limit with one client's tools still renders another's of the same names", () => {
      // Slow only on a tool with a `slow` parameter: the same tool name, another schema, is another render.
      const slowSchema =
        '{% if tools and tools[0].function.parameters.properties.slow is defined %}' +
        '{% for i in range(100000) %}{% for j in range(99996) %}{% endfor %}{% endfor %}{% endif %}' +
        '{% for m in messages %}{{ m.content }};{% endfor %}';
      const tool = (properties: Record<string, unknown>) => ({
        type: 'function',
        function: { name: 'lookup', parameters: { type: 'object', properties } },
      });
      const slow = [tool({ slow: { type: 'boolean' } })];
      const quick = [tool({ query: { type: 'string' } })];
      const tenth = { ms: 100, chars: 1e6, listItems: 1e5 };
      const roomy = { ms: 3000, chars: 1e6, listItems: 1e5 };
      expect(
        thrown(() => renderChatTemplate(slowSchema, conversation, { ...opts, tools: slow, limits: tenth })).message,
      ).toMatch(/did not finish rendering: it ran for over 0\.1 s/);
      expect(renderChatTemplate(slowSchema, conversation, { ...opts, tools: quick, limits: roomy })).toBe(
        'Be brief.;Hi;',
      );
      // The slow tools again fail at once, for a minute.
      const started = performance.now();
      expect(
        thrown(() => renderChatTemplate(slowSchema, conversation, { ...opts, tools: slow, limits: roomy })).message,
      ).toMatch(/did not finish rendering: it ran for over 0\.1 s/);
      expect(performance.now() - started).toBeLessThan(500);
    });

    it('a template that ran past the limit on a chat fails at once on chats as long for a minute, and renders shorter ones', () => {
      // Slow only on chats of more than two messages: the one-message trial when its package is read passes.
      const longOnly =
        '{% if messages|length > 2 %}{% for i in range(100000) %}{% for j in range(99998) %}{% endfor %}{% endfor %}{% endif %}' +
        '{% for m in messages %}{{ m.content }};{% endfor %}';
      expect(templateProblem(longOnly)).toBeUndefined();
      const three = [...conversation, { role: 'assistant', content: 'Hello' }];
      const tenth = { ms: 100, chars: 1e6, listItems: 1e5 };
      const stoppedAt = /did not finish rendering: it ran for over 0\.1 s and was stopped\. Fix the template/;
      expect(thrown(() => renderChatTemplate(longOnly, three, { ...opts, limits: tenth })).message).toMatch(stoppedAt);
      // Given 3 s, a render would run that long: a chat as long or longer fails at once, with the first stop's reason.
      const roomy = { ms: 3000, chars: 1e6, listItems: 1e5 };
      for (const chat of [three, [...three, { role: 'user', content: 'More' }]]) {
        const started = performance.now();
        const err = thrown(() => renderChatTemplate(longOnly, chat, { ...opts, limits: roomy }));
        expect(performance.now() - started).toBeLessThan(500);
        expect(err.code).toBe('PACKAGE_INVALID');
        expect(err.message).toMatch(stoppedAt);
      }
      // A shorter chat does not loop, and still renders.
      expect(renderChatTemplate(longOnly, conversation, { ...opts, limits: roomy })).toBe('Be brief.;Hi;');
      // A minute on, it is run again (and stopped again).
      const now = Date.now();
      const later = vi.spyOn(Date, 'now').mockReturnValue(now + 61_000);
      try {
        const started = performance.now();
        expect(thrown(() => renderChatTemplate(longOnly, three, { ...opts, limits: tenth })).message).toMatch(
          stoppedAt,
        );
        expect(performance.now() - started).toBeGreaterThanOrEqual(100);
      } finally {
        later.mockRestore();
      }
    });

    it('refuses a range() over the limit before making it', () => {
      const err = thrown(() => renderChatTemplate('{{ range(1000000000) | length }}', conversation, opts));
      expect(err.code).toBe('PACKAGE_INVALID');
      expect(err.message).toContain('range() of 1,000,000,000 numbers is over the 100,000 kvdesk allows');
    });

    it('keeps range() as Jinja has it under the limit', () => {
      const text = '{{ range(3) | join(",") }}|{{ range(1, 7, 2) | join(",") }}|{{ range(5, 0, -2) | join(",") }}';
      expect(renderChatTemplate(text, conversation, opts)).toBe('0,1,2|1,3,5|5,3,1');
      expect(renderChatTemplate('{{ range(5, 1) | length }}', conversation, opts)).toBe('0');
      expect(thrown(() => renderChatTemplate('{{ range(1, 5, 0) }}', conversation, opts)).message).toContain(
        'range() step must not be zero',
      );
    });

    it('stops a text that grows past the limit', () => {
      const doubling =
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}";
      const err = thrown(() =>
        renderChatTemplate(doubling, conversation, { ...opts, limits: { ms: 5000, chars: 1000, listItems: 1e5 } }),
      );
      expect(err.message).toContain('it built a text of 1,024 characters, over the 1,000 kvdesk allows');
    });

    it('stops a list that grows past the limit without range() (doubling it)', () => {
      // Then a loop with an empty body over it, with nothing after: no call between its turns.
      const doubling =
        '{% set ns = namespace(l=[0]) %}{% for i in range(22) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{% for c in ns.l %}{% endfor %}';
      const started = performance.now();
      const err = thrown(() => renderChatTemplate(doubling, conversation, opts));
      expect(performance.now() - started).toBeLessThan(3000);
      expect(err.message).toContain('it made a list of 131,072 items, over the 100,000 kvdesk allows');
    });

    it('keeps `range` as a name of attributes, and of macro parameters passed by keyword', () => {
      const text = '{% set ns = namespace(range=3) %}[{{ ns.range }}|{{ range(2) | length }}]';
      expect(renderChatTemplate(text, conversation, opts)).toBe('[3|2]');
      const macros =
        '{% macro a(range=5) %}{{ range }}{% endmacro %}{% macro b(range) %}{{ range }}{% endmacro %}{{ a() }}|{{ b(range=1) }}';
      expect(renderChatTemplate(macros, conversation, opts)).toBe('5|1');
    });

    it('leaves Jinja unguarded outside its renders, after one it stopped', () => {
      const tiny = { ms: 5000, chars: 10, listItems: 1e5 };
      expect(() => renderChatTemplate(DEFAULT_CHAT_TEMPLATE, conversation, { ...opts, limits: tiny })).toThrow();
      // Another user of the library in this process: its render knows nothing of kvdesk's limits.
      const other = new Template('{% for m in messages %}{{ m.content }}{% endfor %}');
      expect(
        other.render({ messages: Array.from({ length: 20 }, () => ({ content: 'longer than ten' })) }),
      ).toHaveLength(300);
    });
  });

  it("reports the template's own raise_exception as a request problem", () => {
    const template =
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ m.content }}{% endfor %}";
    const err = thrown(() => renderChatTemplate(template, conversation, { addGenerationPrompt: true, source: SOURCE }));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toContain('System role not supported');
    expect(err.message).toContain(SOURCE);
    expect(renderChatTemplate(template, [{ role: 'user', content: 'ok' }], { addGenerationPrompt: true })).toBe('ok');
  });

  it('refuses messages without a string role and content', () => {
    const bad = [{ role: 'user', content: 3 }] as unknown as Array<{ role: string; content: string }>;
    const err = thrown(() => renderChatTemplate(DEFAULT_CHAT_TEMPLATE, bad, { addGenerationPrompt: true }));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.detail).toEqual({ index: 0 });
  });
});

describe.skipIf(!haveFixtures)(
  `tiny-reasoning chat template (${haveFixtures ? 'fixtures' : fixturesSkipReason})`,
  () => {
    const dir = fixture('onnx-genai/tiny-reasoning');
    const template = haveFixtures
      ? (JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8')) as { chat_template: string }).chat_template
      : '';

    it('renders the conversation and opens a <think> block for the answer', () => {
      const messages = [{ role: 'user', content: 'hello world' }];
      expect(renderChatTemplate(template, messages, { addGenerationPrompt: true, source: SOURCE })).toBe(
        '<|user|>\nhello world\n<|assistant|>\n<think>\n',
      );
      expect(renderChatTemplate(template, messages, { addGenerationPrompt: false })).toBe('<|user|>\nhello world\n');
    });

    it('applyChat encodes it with one <bos> (the post-processor would add it) and no <eos>', async () => {
      const tok = await loadTokenizer(
        { tokenizerJson: `${dir}/tokenizer.json`, tokenizerConfig: `${dir}/tokenizer_config.json` },
        { vocabSize: 32 },
      );
      const { ids, text, usedDefaultTemplate } = applyChat(tok, template, [{ role: 'user', content: 'hello world' }]);
      expect(usedDefaultTemplate).toBe(false);
      expect(text).toBe('<|user|>\nhello world\n<|assistant|>\n<think>\n');
      // The Whitespace pre-tokenizer splits "<|user|>" into "<|" "user" "|>" and "<think>" into "<" "think" ">":
      // all unknown words, so <unk>=1.
      expect(ids).toEqual([2, 1, 1, 1, 4, 5, 1, 1, 1, 1, 1, 1]);
    });
  },
);

describe("the string filter writes values as Python's str() does", () => {
  const render = (args: Record<string, unknown>) =>
    renderChatTemplate(
      QWEN3_CODER_CALLS,
      [
        { role: 'user', content: 'go' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }],
        },
      ],
      { addGenerationPrompt: false },
    );
  const param = (name: string, text: string) => `<parameter=${name}>\n${text}\n</parameter>\n`;

  it('null, true and false render as None, True and False (null failed the render)', () => {
    expect(render({ a: null, b: true, c: false })).toBe(
      `\n<tool_call>\n<function=f>\n${param('a', 'None')}${param('b', 'True')}${param('c', 'False')}</function>\n</tool_call>`,
    );
  });

  it('numbers, strings, lists and objects render as before', () => {
    expect(render({ n: 2, x: 2.5, s: 'null', t: 'True', l: [1, true, null], o: { k: false, v: null } })).toBe(
      `\n<tool_call>\n<function=f>\n${param('n', '2')}${param('x', '2.5')}${param('s', 'null')}${param('t', 'True')}${param('l', '[1, true, null]')}${param('o', '{"k": false, "v": null}')}</function>\n</tool_call>`,
    );
  });

  it('tojson of the same values does not change; other values under string do not either', () => {
    const out = renderChatTemplate(
      '{{ v | tojson }} {{ b | tojson }}|{{ 3 | string }}|{{ "s" | string }}|{{ [none] | string }}|{{ nope | string }}',
      [{ role: 'user', content: 'x' }],
      { addGenerationPrompt: false, vars: { v: null, b: true } },
    );
    expect(out).toBe('null true|3|s|[null]|');
  });
});

// Expected texts are what Jinja2 3.1 (transformers' renderer) gives for the same template and values.
describe('printing writes values as Jinja2 does (Python str())', () => {
  const print = (template: string, vars: Record<string, unknown> = {}) =>
    renderChatTemplate(template, [{ role: 'user', content: 'x' }], { addGenerationPrompt: false, vars });

  it("a tool call's argument values printed bare: None, True and False (they printed '', true and false)", () => {
    const template =
      '{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name }}({% for k, v in c.function.arguments | items %}{{ k }}={{ v }};{% endfor %}){% endfor %}{% endfor %}';
    const out = renderChatTemplate(
      template,
      [
        { role: 'user', content: 'go' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [
            {
              id: 'c1',
              type: 'function',
              function: { name: 'ls', arguments: { path: 'a', recursive: true, hidden: false, depth: null, n: 2 } },
            },
          ],
        },
      ],
      { addGenerationPrompt: false },
    );
    expect(out).toBe('ls(path=a;recursive=True;hidden=False;depth=None;n=2;)');
  });

  it('None, True and False print so; an undefined value prints nothing', () => {
    expect(
      print("{{ v }}|{{ b }}|{{ f }}|{{ missing }}|{{ d.nope }}|{{ d.get('k') }}|{{ 'y' if f }}", {
        v: null,
        b: true,
        f: false,
        d: {},
      }),
    ).toBe('None|True|False|||None|');
  });

  it('a set, a macro or a comment prints nothing, as before', () => {
    expect(print('{% set x = none %}{% macro m() %}{% endmacro %}{# c #}[{{ x }}]{{ m() }}')).toBe('[None]');
  });

  it('~ writes each side as printing does (None failed the render, an undefined side too)', () => {
    expect(print("{{ 'a' ~ none ~ true ~ nope ~ 1.0 ~ [1] }}")).toBe('aNoneTrue1.0[1]');
    // (A number of an earlier call's arguments is written as the model wrote it, as printing writes it.)
    expect(print("{{ 'n=' ~ n }}|{{ n }}", { n: exactNumber('1.50') })).toBe('n=1.50|1.50');
  });

  it('tojson still writes JSON: null, true, false', () => {
    expect(print('{{ v | tojson }} {{ b | tojson }} {{ [v, false] | tojson }}', { v: null, b: true })).toBe(
      'null true [null, false]',
    );
  });
});

describe('applyChat', () => {
  const fallback = createTextTokenizer({ tokenizerJson: byteFallbackTokenizerJson(), vocabSize: 270 });
  const bos = fallback.specialTokens.bos?.id;

  it('does not add a second BOS when the template writes bos_token', () => {
    const { ids, text } = applyChat(fallback, '{{ bos_token }}{{ messages[0].content }}', [
      { role: 'user', content: 'hello' },
    ]);
    expect(text).toBe('<s>hello');
    expect(bos).toBe(1);
    expect(ids.filter((id) => id === bos)).toHaveLength(1);
    expect(ids[0]).toBe(bos);
  });

  it('adds BOS when the template does not write it and the tokenizer starts prompts with it', () => {
    const { ids } = applyChat(fallback, '{{ messages[0].content }}', [{ role: 'user', content: 'hello' }]);
    expect(ids[0]).toBe(bos);
    expect(ids.filter((id) => id === bos)).toHaveLength(1);
  });

  describe('continueFinal: the prompt ends where the final assistant message ends', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    const chatml =
      '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';
    const messages = [
      { role: 'user' as const, content: 'Say >' },
      { role: 'assistant' as const, content: '>' },
    ];

    it('cuts right after the text as written (not at a look-alike in the end-of-turn markup)', () => {
      const { text } = applyChat(tok, chatml, messages, { continueFinal: true });
      expect(text).toBe('<|im_start|>user\nSay ><|im_end|>\n<|im_start|>assistant\n>');
    });

    it('keeps trailing white space even where the template trims it', () => {
      const trimming = chatml.replace('{{ m.content }}', '{{ m.content | trim }}');
      const { text } = applyChat(tok, trimming, [messages[0] as never, { role: 'assistant', content: 'Here: ' }], {
        continueFinal: true,
      });
      expect(text.endsWith('<|im_start|>assistant\nHere: ')).toBe(true);
    });

    it('an empty final message is a new reply; no final assistant message, or a template that hides it, is refused', () => {
      const open = applyChat(tok, chatml, [messages[0] as never, { role: 'assistant', content: '' }], {
        continueFinal: true,
      }).text;
      expect(open).toBe(applyChat(tok, chatml, [messages[0] as never]).text);
      expect(() => applyChat(tok, chatml, [messages[0] as never], { continueFinal: true })).toThrow(
        'only a final assistant message can be continued',
      );
      const upper = chatml.replace('{{ m.content }}', '{{ m.content | upper }}');
      expect(() => applyChat(tok, upper, messages, { continueFinal: true, source: 'test template' })).toThrow(
        "the test template does not show the final assistant message's text as written",
      );
    });
  });

  it('adds nothing for a tokenizer that does not start prompts with BOS', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    const { ids } = applyChat(tok, '{{ messages[0].content }}', [{ role: 'user', content: 'hi' }]);
    expect(ids).toEqual([104, 105]);
  });

  it('falls back to ChatML and says so when the package has no template', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    const r = applyChat(tok, undefined, [{ role: 'user', content: 'hi' }]);
    expect(r.usedDefaultTemplate).toBe(true);
    expect(r.text).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    expect(tok.decode(r.ids)).toBe(r.text);
    expect(applyChat(tok, '   ', [{ role: 'user', content: 'hi' }]).usedDefaultTemplate).toBe(true);
  });

  it('refuses a rendered prompt the model vocabulary does not cover', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 120 });
    expect(thrown(() => applyChat(tok, '{{ messages[0].content }}', [{ role: 'user', content: 'hi~' }])).code).toBe(
      'TOKEN_OUT_OF_VOCAB',
    );
  });
});
