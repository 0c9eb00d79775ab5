import { describe, expect, it } from 'vitest';
import { describeRefusal } from '../../../src/renderer/lib/refusal';

describe('describeRefusal', () => {
  it('KV_BUDGET_EXCEEDED: required vs budget bytes, and what to do', () => {
    const v = describeRefusal({
      code: 'KV_BUDGET_EXCEEDED',
      message: 'This request needs at least 35.0 KiB…',
      detail: { requiredBytes: 35840, budgetBytes: 4096, bpt: 1024, promptTokens: 34, rows: 1, sessionTokens: 0 },
    });
    expect(v.refused).toBe(true);
    expect(v.action).toBe('Raise the limit or shorten the prompt.');
    const byLabel = Object.fromEntries(v.figures.map((f) => [f.label, f]));
    expect(byLabel.required).toMatchObject({ text: '35.0 KiB', bytes: 35840 });
    expect(byLabel.budget).toMatchObject({ text: '4.00 KiB', bytes: 4096 });
    expect(byLabel.prompt?.text).toBe('34 tok');
    expect(byLabel.session).toBeUndefined(); // no earlier turns: not worth a figure
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

  it('other failures are not refusals', () => {
    expect(describeRefusal({ code: 'ENGINE_FAILED', message: 'boom' }).refused).toBe(false);
  });
});
