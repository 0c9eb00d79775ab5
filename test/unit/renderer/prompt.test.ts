import { describe, expect, it } from 'vitest';
import { buildChatRequest, conversationOf, newId, parseSchema } from '../../../src/renderer/bridge/prompt';
import { GenerateRequest } from '../../../src/shared/contract';
import { thread } from './fixtures';

describe('chat requests', () => {
  const history = [
    { id: 'u1', role: 'user' as const, content: 'hi', createdAt: 1 },
    {
      id: 'a1',
      role: 'assistant' as const,
      content: '',
      createdAt: 2,
      stats: { error: { code: 'KV_BUDGET_EXCEEDED', message: 'no' } },
    },
    { id: 'u2', role: 'user' as const, content: 'hi again', createdAt: 3 },
    { id: 'a2', role: 'assistant' as const, content: 'hello', createdAt: 4 },
    { id: 'u3', role: 'user' as const, content: 'and?', createdAt: 5 },
  ];

  it('leaves refused and empty replies out of the conversation', () => {
    expect(conversationOf(history).map((m) => m.content)).toEqual(['hi', 'hi again', 'hello', 'and?']);
  });

  it('uses the thread id as session and thread, with the thread settings', () => {
    const t = thread('t9', { systemPrompt: ' Be brief. ', sampling: { temperature: 0.2, seed: 7 }, maxNewTokens: 64 });
    const req = buildChatRequest(t, history, 'default');
    expect(req).toMatchObject({
      model: 'default',
      system: 'Be brief.',
      maxNewTokens: 64,
      sampling: { temperature: 0.2, seed: 7 },
      sessionId: 't9',
      threadId: 't9',
    });
    expect(GenerateRequest.safeParse(req).success).toBe(true);
  });

  it('omits empty settings so the package defaults apply', () => {
    const req = buildChatRequest(thread('t1', { systemPrompt: '  ', sampling: {} }), history, null);
    expect(req).not.toHaveProperty('system');
    expect(req).not.toHaveProperty('sampling');
    expect(req).not.toHaveProperty('model');
    expect(req).not.toHaveProperty('maxNewTokens');
    expect(GenerateRequest.safeParse(req).success).toBe(true);
  });

  it('sends the thread’s JSON schema with JSON mode on (and only then)', () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } } };
    const on = buildChatRequest(
      thread('t1', { responseFormat: 'json', jsonSchema: JSON.stringify(schema) }),
      history,
      null,
    );
    expect(on.jsonSchema).toEqual(schema);
    expect(on).not.toHaveProperty('responseFormat');
    expect(GenerateRequest.safeParse(on).success).toBe(true);
    const off = buildChatRequest(thread('t1', { jsonSchema: JSON.stringify(schema) }), history, null);
    expect(off).not.toHaveProperty('jsonSchema');
    // Text that is not a JSON object (the settings panel keeps none) falls back to any JSON object.
    expect(buildChatRequest(thread('t1', { responseFormat: 'json', jsonSchema: '[1]' }), history, null)).toMatchObject({
      responseFormat: 'json',
    });
    expect(parseSchema(' ')).toBeUndefined();
    expect(parseSchema('{"type": "object"}')).toEqual({ type: 'object' });
  });

  it('asks for JSON mode when the thread has it on', () => {
    const req = buildChatRequest(thread('t1', { responseFormat: 'json' }), history, null);
    expect(req.responseFormat).toBe('json');
    expect(GenerateRequest.safeParse(req).success).toBe(true);
    expect(buildChatRequest(thread('t1', { responseFormat: 'text' }), history, null)).not.toHaveProperty(
      'responseFormat',
    );
  });

  it('ids are unique and carry their prefix', () => {
    const ids = new Set(Array.from({ length: 200 }, () => newId('m')));
    expect(ids.size).toBe(200);
    expect([...ids].every((id) => id.startsWith('m-'))).toBe(true);
  });
});
