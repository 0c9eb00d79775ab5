import { describe, expect, it } from 'vitest';
import { describeRefusal, refusalBrief } from '../../../src/renderer/lib/refusal';

describe('describeRefusal', () => {
  it('KV_BUDGET_EXCEEDED: required vs budget bytes, and what to do', () => {
    const v = describeRefusal({
      code: 'KV_BUDGET_EXCEEDED',
      message: 'This request needs at least 35.0 KiB…',
      detail: { requiredBytes: 35840, budgetBytes: 4096, bpt: 1024, promptTokens: 34, rows: 1, sessionTokens: 0 },
    });
    expect(v.refused).toBe(true);
    expect(v.action).toBe('The KV budget is set in the inspector (Controls → limit).');
    // The host's "shorten the prompt", in a chat's words (its prompt is the conversation).
    const host = describeRefusal({
      code: 'KV_BUDGET_EXCEEDED',
      message:
        'This request needs at least 35.0 KiB … but the budget is 4.00 KiB. Shorten the prompt, or raise the KV budget.',
    });
    expect(host.message).toMatch(
      /Shorten the conversation \(go on in a new chat, or send a shorter message\), or raise/,
    );
    const byLabel = Object.fromEntries(v.figures.map((f) => [f.label, f]));
    expect(byLabel.required).toMatchObject({ text: '35.0 KiB', bytes: 35840 });
    expect(byLabel.budget).toMatchObject({ text: '4.00 KiB', bytes: 4096 });
    expect(byLabel.prompt?.text).toBe('34 tok');
    expect(byLabel.session).toBeUndefined(); // no earlier turns: not worth a figure
  });

  it("SESSION_INVALID for a busy chat: in the chat's words, without the scheduler's ids", () => {
    const v = describeRefusal({
      code: 'SESSION_INVALID',
      message: 'Session t-mx5q3dv4-4dnnle already has a running turn (401fdca2-1111). Wait for it or cancel it.',
      detail: { sessionId: 't-mx5q3dv4-4dnnle', state: 'running', turnRequestId: '401fdca2-1111' },
    });
    expect(v.title).toBe('This chat is busy');
    expect(v.message).toBe(
      'Another reply of this chat was still being written (in this window or another window or tab) when this turn was sent.',
    );
    expect(v.message).not.toMatch(/t-mx5q3dv4|401fdca2/);
    expect(v.action).toMatch(/once that reply has ended, send this again/i);
  });

  it('CONTEXT_OVERFLOW: prompt vs context', () => {
    const v = describeRefusal({
      code: 'CONTEXT_OVERFLOW',
      message: 'The prompt has 2100 tokens…',
      detail: { promptTokens: 2100, contextLength: 2048, sessionTokens: 0 },
    });
    expect(v.figures.map((f) => `${f.label} ${f.text}`)).toEqual(['prompt 2,100 tok', 'context 2,048 tok']);
    expect(v.action).toMatch(/shorten the prompt or start a new chat/i);
  });

  it('CONTEXT_OVERFLOW of a chat counted only until its newest turns filled the context: at least that many', () => {
    const error = {
      code: 'CONTEXT_OVERFLOW' as const,
      message: 'The prompt has at least 3267 tokens (its newest turns alone; it was not counted further), …',
      detail: { promptTokens: 3267, contextLength: 2048, sessionTokens: 0, countedUpTo: 2047 },
    };
    const v = describeRefusal(error);
    expect(v.figures.map((f) => `${f.label} ${f.text}`)).toEqual(['prompt ≥3,267 tok', 'context 2,048 tok']);
    expect(refusalBrief(error).reason).toBe('≥3,267 tokens fill the 2,048-token context');
  });

  it("CONTEXT_OVERFLOW: the advice once — none of its own where the host's sentence has it", () => {
    const host = {
      code: 'CONTEXT_OVERFLOW' as const,
      message:
        "The prompt has 19 tokens, which leaves no room for a reply in the model's context of 16 tokens. Shorten the prompt or start a new chat.",
      detail: { promptTokens: 19, contextLength: 16, sessionTokens: 0 },
    };
    const v = describeRefusal(host);
    expect(v.action).toBe('');
    expect(v.message.match(/shorten the prompt/gi)).toHaveLength(1);
    // A system prompt that alone takes most of the context: the advice names it (and the host's goes).
    const sp = describeRefusal(host, { systemPrompt: { tokens: 12, contextLength: 16 } });
    expect(sp.action).toMatch(/system prompt alone takes 12 of the model's 16 tokens/);
    expect(sp.action).toMatch(/chat's settings/);
    expect(sp.message).not.toMatch(/shorten the prompt/i);
    expect(`${sp.message} ${sp.action}`).not.toMatch(/new chat/i);
    // A short one does not.
    expect(describeRefusal(host, { systemPrompt: { tokens: 4, contextLength: 16 } }).action).toBe('');
  });

  it('QUEUE_FULL: says when to retry', () => {
    const v = describeRefusal({
      code: 'QUEUE_FULL',
      message: 'full',
      detail: { queueLength: 256, maxQueue: 256, retryAfterMs: 2500 },
    });
    expect(v.action).toBe('Try again in about 3 s.');
    expect(v.figures.map((f) => f.text)).toEqual(['256', '256']);
  });

  it('works without detail (after a reload only code and message are kept)', () => {
    const v = describeRefusal({ code: 'KV_BUDGET_EXCEEDED', message: 'needs 35 KiB, budget 4 KiB' });
    expect(v.figures).toEqual([]);
    expect(v.message).toBe('needs 35 KiB, budget 4 KiB');
  });

  it('a tool a forced call cannot follow points at the chat\'s "must call a tool", not at the API', () => {
    const v = describeRefusal({
      code: 'BAD_REQUEST',
      message:
        'tools[0].parameters.properties.code.pattern ("refschema"): kvdesk cannot make a call follow this schema: "pattern" is not supported by kvdesk. Simplify the schema, or let the model choose (toolChoice / tool_choice "auto"), where the schema is only shown to it.',
      detail: { field: 'tools[0].parameters.properties.code.pattern' },
    });
    expect(v.title).toBe('A tool of this chat cannot be called as the settings ask');
    expect(v.message).toBe(
      'tools[0].parameters.properties.code.pattern ("refschema"): kvdesk cannot make a call follow this schema: "pattern" is not supported by kvdesk.',
    );
    expect(v.action).toMatch(/^Untick "must call a tool"/);
    // Another bad request: the host's sentence says what was wrong; trying again would not help.
    expect(describeRefusal({ code: 'BAD_REQUEST', message: 'messages[1] is odd' }).action).toBe('');
  });

  it('a package\'s broken chat template: no "Try again" (it would fail the same way), the card\'s template instead', () => {
    const r = describeRefusal({
      code: 'PACKAGE_INVALID',
      message:
        'The tokenizer_config.json field chat_template is not a valid Jinja template: Parser Error: …. Fix the template or remove it to use the default ChatML template.',
    });
    expect(r.title).toBe("The model's package cannot make this reply");
    expect(r.action).toMatch(/another chat template in its card/);
    // Its advice once: the host's own sentence (for the CLI and the API) goes.
    expect(r.message).toBe(
      'The tokenizer_config.json field chat_template is not a valid Jinja template: Parser Error: ….',
    );
    expect(describeRefusal({ code: 'PACKAGE_INVALID', message: 'tokenizer.json is missing' }).action).toBe('');
  });

  it("tokens outside the vocabulary from the chat template's markup: the template is what to change", () => {
    const r = describeRefusal({
      code: 'TOKEN_OUT_OF_VOCAB',
      message: "The chat template's own markup, whatever the messages say, is outside the model's vocabulary: …",
      detail: { field: 'chatTemplate', id: 9688 },
    });
    expect(r.title).toBe("The chat template's markup is outside the model's vocabulary");
    expect(r.action).toMatch(/another chat template in its card/);
    expect(describeRefusal({ code: 'TOKEN_OUT_OF_VOCAB', message: 'The text "x"…' }).action).toMatch(/tokenizer/);
  });

  it('other failures are not refusals', () => {
    expect(describeRefusal({ code: 'ENGINE_FAILED', message: 'boom' }).refused).toBe(false);
  });
});

describe('refusalBrief', () => {
  const budget = {
    code: 'KV_BUDGET_EXCEEDED' as const,
    message:
      'This request needs at least 1.57 MiB of KV cache (1 row × (1606 prompt + 1) tokens × 1024 B/token), but the KV budget is 1.50 MiB. Shorten the prompt, or raise the KV budget.',
    detail: { requiredBytes: 1607 * 1024, budgetBytes: 1536 * 1024, bpt: 1024, promptTokens: 1606, rows: 1 },
  };

  it('a request over the budget: what it needs against the budget, from the numbers, and what to do', () => {
    expect(refusalBrief(budget)).toEqual({
      reason: 'needs 1.57 MiB, budget 1.50 MiB',
      action: 'shorten the prompt or raise the limit',
      title: 'needs 1,645,568 bytes, budget 1,572,864 bytes',
    });
    // Several rows can be fewer; a static cache cannot be shortened.
    const rows = { ...budget, detail: { ...budget.detail, rows: 4 } };
    expect(refusalBrief(rows).action).toBe('shorten the prompt, send fewer rows or raise the limit');
    expect(refusalBrief(rows, { rows: 4, fixedTokens: 48 }).action).toBe('send fewer rows or raise the limit');
    expect(refusalBrief(budget, { rows: 1, fixedTokens: 48 }).action).toBe('raise the limit');
  });

  it('sizes that round to the same figure are said in exact bytes, so they differ', () => {
    // One token (1 KiB) over: both read 1.50 MiB rounded.
    const close = { ...budget, detail: { ...budget.detail, requiredBytes: 1537 * 1024 } };
    expect(refusalBrief(close).reason).toBe('needs 1,573,888 bytes, budget 1,572,864 bytes');
  });

  it('a prompt that fills the context, and a full queue: their numbers, and what to do', () => {
    expect(
      refusalBrief({
        code: 'CONTEXT_OVERFLOW',
        message: "The prompt has 2101 tokens, which leaves no room for a reply in the model's context of 2048 tokens.",
        detail: { promptTokens: 2101, contextLength: 2048, sessionTokens: 0 },
      }),
    ).toEqual({ reason: '2,101 tokens fill the 2,048-token context', action: 'shorten the prompt' });
    // Earlier turns fill it: a new chat starts without them.
    expect(
      refusalBrief({
        code: 'CONTEXT_OVERFLOW',
        message: '…',
        detail: { promptTokens: 20, contextLength: 2048, sessionTokens: 2030 },
      }),
    ).toEqual({
      reason: '20 + 2,030 earlier tokens fill the 2,048-token context',
      action: 'start a new chat or shorten the prompt',
    });
    expect(
      refusalBrief({
        code: 'QUEUE_FULL',
        message: 'The admission queue is full (24 waiting, limit 24). Retry in about 2 s.',
        detail: { queueLength: 24, maxQueue: 24, retryAfterMs: 1820 },
      }),
    ).toEqual({ reason: 'the queue was full (24 waiting, limit 24)', action: 'try again in about 2 s' });
  });

  it("without its numbers (an error read back from disk), the host's first sentence, no action", () => {
    expect(refusalBrief({ code: 'KV_BUDGET_EXCEEDED', message: budget.message })).toEqual({
      reason:
        'This request needs at least 1.57 MiB of KV cache (1 row × (1606 prompt + 1) tokens × 1024 B/token), but the KV budget is 1.50 MiB',
      action: '',
    });
    expect(refusalBrief({ code: 'ENGINE_FAILED', message: 'The engine stopped. It is loading again.' })).toEqual({
      reason: 'The engine stopped',
      action: '',
    });
  });
});
