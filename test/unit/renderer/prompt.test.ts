import { describe, expect, it } from 'vitest';
import {
  buildChatRequest,
  contextStartIndex,
  contextUsed,
  conversationOf,
  currentDrop,
  lastReplyDrop,
  leftOutMessages,
  newId,
  parseSchema,
  schemaProblem,
} from '../../../src/renderer/bridge/prompt';
import type { LiveReply } from '../../../src/renderer/store/types';
import type { StoredMessage } from '../../../src/shared/api';
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

  it('leaves refused and empty replies out of the conversation, and the messages they left unanswered', () => {
    expect(conversationOf(history).map((m) => m.content)).toEqual(['hi again', 'hello', 'and?']);
  });

  it('a message left unanswered (refused, failed, stopped or cut off before a word) goes once the chat goes on', () => {
    const user = (id: string, content: string): StoredMessage => ({ id, role: 'user', content, createdAt: 0 });
    const reply = (id: string, extra: Partial<StoredMessage> = {}): StoredMessage => ({
      id,
      role: 'assistant',
      content: '',
      createdAt: 0,
      ...extra,
    });
    const refused = reply('r-refused', { stats: { error: { code: 'KV_BUDGET_EXCEEDED', message: 'no' } } });
    const stopped = reply('r-stopped', { stats: { tokens: 0, finishReason: 'cancelled', stoppedWhile: 'queued' } });
    const reloaded = reply('r-reloaded', { stats: { tokens: 0, finishReason: 'interrupted', stoppedWhile: 'queued' } });
    const messages = [
      user('u1', 'one'),
      reply('r1', { content: 'first answer' }),
      user('u2', 'refused question'),
      refused,
      user('u3', 'stopped question'),
      stopped,
      user('u4', 'reloaded question'),
      reloaded,
      user('u5', 'two'),
      reply('r5', { content: 'second answer' }),
      user('u6', 'last'),
    ];
    const conversation = conversationOf(messages);
    expect(conversation.map((m) => m.content)).toEqual(['one', 'first answer', 'two', 'second answer', 'last']);
    // User and assistant alternate, as the templates of Gemma, Mistral and Llama 2 insist.
    expect(conversation.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user']);
    expect([...leftOutMessages(messages)]).toEqual(['u2', 'r-refused', 'u3', 'r-stopped', 'u4', 'r-reloaded']);
    // The last message and its refusal stay until the chat goes on: a regenerate sends it again.
    const lastRefused = [...messages.slice(0, 2), user('u2', 'refused question'), refused];
    expect(conversationOf(lastRefused).map((m) => m.content)).toEqual(['one', 'first answer', 'refused question']);
    expect(leftOutMessages(lastRefused).size).toBe(0);
    // A reply that only reasoned, or only called tools, answered: its message stays.
    const thought = [user('u1', 'one'), reply('r1', { reasoning: 'Hm' }), user('u2', 'two')];
    expect(conversationOf(thought)).toHaveLength(3);
    // Two messages of the person's in a row with no reply between (an imported chat) are as they were written.
    expect(conversationOf([user('u1', 'one'), user('u2', 'two')])).toHaveLength(2);
  });

  it('uses the thread id as session and thread, with the thread settings', () => {
    const t = thread('t9', {
      systemPrompt: ' Be brief. ',
      sampling: { temperature: 0.2, seed: 7 },
      maxNewTokens: 64,
      stop: ['###', 'User:'],
    });
    const req = buildChatRequest(t, history, 'default');
    expect(req).toMatchObject({
      model: 'default',
      system: 'Be brief.',
      maxNewTokens: 64,
      sampling: { temperature: 0.2, seed: 7 },
      stop: ['###', 'User:'],
      sessionId: 't9',
      threadId: 't9',
    });
    expect(GenerateRequest.safeParse(req).success).toBe(true);
  });

  it("sends a reply's tool calls and each tool's answer; a reply of calls only is a turn", () => {
    const call = { id: 'c1', name: 'add', arguments: '{"a":1}' };
    const withTools = [
      ...history,
      {
        id: 'a3',
        role: 'assistant' as const,
        content: '',
        toolCalls: [call],
        toolRoutes: { add: { server: 's', tool: 'add' } },
        createdAt: 9,
      },
      { id: 't1', role: 'tool' as const, content: '2', toolCallId: 'c1', toolName: 'add', createdAt: 10 },
    ];
    expect(conversationOf(withTools).slice(-2)).toEqual([
      { role: 'assistant', content: '', toolCalls: [call] },
      { role: 'tool', content: '2', toolCallId: 'c1', name: 'add' },
    ]);
    const tools = { definitions: [{ name: 'add', parameters: { type: 'object' } }], required: true };
    const req = buildChatRequest(thread('t1'), withTools, 'default', undefined, tools);
    expect(req).toMatchObject({ tools: tools.definitions, toolChoice: 'required' });
    expect(GenerateRequest.safeParse(req).success).toBe(true);
    expect(
      buildChatRequest(thread('t1'), withTools, 'default', undefined, { ...tools, required: false }).toolChoice,
    ).toBe('auto');
    // No tools known (the servers did not start): none offered.
    expect(
      buildChatRequest(thread('t1'), withTools, 'default', undefined, { definitions: [], required: true }).tools,
    ).toBeUndefined();
    // JSON output: a turn that must call a tool is the call alone; the reply after the answers is the JSON (or more
    // calls).
    const json = thread('t1', { responseFormat: 'json', jsonSchema: '{"type": "object", "properties": {}}' });
    expect(buildChatRequest(json, withTools, 'default', undefined, tools)).not.toHaveProperty('jsonSchema');
    expect(buildChatRequest(json, withTools, 'default', undefined, { ...tools, required: false })).toMatchObject({
      toolChoice: 'auto',
      jsonSchema: { type: 'object', properties: {} },
    });
    expect(buildChatRequest(json, withTools, 'default', undefined, { definitions: [], required: true })).toHaveProperty(
      'jsonSchema',
    );
  });

  it("asks for each token's probability and 5 alternatives only in a thread set to keep them", () => {
    expect(buildChatRequest(thread('t1'), history, 'default').logprobs).toBeUndefined();
    const req = buildChatRequest(thread('t1', { showProbabilities: true }), history, 'default');
    expect(req.logprobs).toBe(5);
    expect(GenerateRequest.safeParse(req).success).toBe(true);
  });

  it("sends a reply's reasoning with it, and the thread's thinking setting to a thinking model only", () => {
    const withThought = history.map((m) => (m.id === 'a2' ? { ...m, reasoning: 'A greeting back.' } : m));
    expect(conversationOf(withThought)[1]).toEqual({
      role: 'assistant',
      content: 'hello',
      reasoning: 'A greeting back.',
    });
    // A reply cut off while it reasoned has no text, but is a turn (no two user messages in a row).
    const cut = [
      ...history,
      { id: 'a3', role: 'assistant' as const, content: '', reasoning: 'Hm', createdAt: 6 },
      { id: 'u4', role: 'user' as const, content: 'well?', createdAt: 7 },
    ];
    expect(conversationOf(cut).slice(-3)).toEqual([
      { role: 'user', content: 'and?' },
      { role: 'assistant', content: '', reasoning: 'Hm' },
      { role: 'user', content: 'well?' },
    ]);
    const off = thread('t1', { thinking: false });
    const qwen = { contextLength: 4096, reasoning: { open: '<think>', close: '</think>', toggle: 'enable_thinking' } };
    expect(buildChatRequest(off, history, 'q', qwen).thinking).toBe(false);
    expect(buildChatRequest(thread('t1', { thinking: true }), history, 'q', qwen).thinking).toBe(true);
    expect(buildChatRequest(thread('t1'), history, 'q', qwen)).not.toHaveProperty('thinking');
    // A thinking model without the switch is told too (the host closes its reasoning); one that does not think,
    // or an unknown model, is not (the host would refuse to make it think).
    const r1 = { contextLength: 4096, reasoning: { open: '<think>', close: '</think>' } };
    expect(buildChatRequest(off, history, 'r1', r1).thinking).toBe(false);
    expect(buildChatRequest(off, history, 'plain', { contextLength: 4096 })).not.toHaveProperty('thinking');
    expect(buildChatRequest(off, history, null)).not.toHaveProperty('thinking');
    // A thinking budget goes with thinking (not with it off), to a thinking model.
    const budget = thread('t1', { thinkingBudget: 64 });
    expect(buildChatRequest(budget, history, 'q', qwen).thinkingBudget).toBe(64);
    expect(buildChatRequest({ ...budget, thinking: false }, history, 'q', qwen)).not.toHaveProperty('thinkingBudget');
    expect(buildChatRequest(budget, history, 'plain', { contextLength: 4096 })).not.toHaveProperty('thinkingBudget');
    // The chat's reasoning effort: unless thinking is off, also to a model without markers kvdesk knows (gpt-oss's
    // template reads it from its own channels).
    const effort = thread('t1', { reasoningEffort: 'low' });
    expect(buildChatRequest(effort, history, 'q', qwen).reasoningEffort).toBe('low');
    expect(buildChatRequest({ ...effort, thinking: false }, history, 'q', qwen)).not.toHaveProperty('reasoningEffort');
    expect(buildChatRequest(effort, history, 'plain', { contextLength: 4096 }).reasoningEffort).toBe('low');
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

  it('says why a text cannot be a JSON Schema: not JSON (with the parser’s words), or JSON but no object', () => {
    expect(schemaProblem('')).toBeNull();
    expect(schemaProblem('{"type": "object"}')).toBeNull();
    expect(schemaProblem('{"type": ')).toMatch(/^not JSON \(.+\)$/);
    expect(schemaProblem('[1]')).toBe('an array, not an object: a JSON Schema is {…}');
    expect(schemaProblem('null')).toBe('null, not an object: a JSON Schema is {…}');
    expect(schemaProblem('"x"')).toBe('a string, not an object: a JSON Schema is {…}');
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

describe('a chat longer than the context', () => {
  const drop = (messages: number) => ({ contextDrop: { messages, contextLength: 256 } });
  const history: StoredMessage[] = [
    { id: 'u1', role: 'user', content: 'one', createdAt: 1 },
    { id: 'a1', role: 'assistant', content: 'r1', createdAt: 2, stats: { tokens: 1 } },
    { id: 'u2', role: 'user', content: 'two', createdAt: 3 },
    // Refused, and the chat went on: neither it nor the message it did not answer is part of the conversation, so
    // neither is counted.
    { id: 'a2', role: 'assistant', content: '', createdAt: 4, stats: { error: { code: 'X', message: 'no' } } },
    { id: 'u3', role: 'user', content: 'three', createdAt: 5 },
    { id: 'a3', role: 'assistant', content: 'r3', createdAt: 6, stats: { tokens: 1, ...drop(2) } },
    { id: 'u4', role: 'user', content: 'four', createdAt: 7 },
  ];

  it('asks to leave out the oldest messages, from where the last reply started, for the same context', () => {
    const req = buildChatRequest(thread('t1'), history, null, { contextLength: 256 });
    expect(req).toMatchObject({ contextOverflow: 'drop-oldest', droppedMessages: 2 });
    expect(GenerateRequest.safeParse(req).success).toBe(true);
    // Before any drop, the hint is 0 (the host then leaves out enough for several turns when it must).
    expect(buildChatRequest(thread('t1'), history.slice(0, 3), null, { contextLength: 256 }).droppedMessages).toBe(0);
    // A model with another context (a switch to one with more room): the earlier drop does not hold.
    expect(buildChatRequest(thread('t1'), history, 'big', { contextLength: 32_768 }).droppedMessages).toBe(0);
    expect(buildChatRequest(thread('t1'), history, null).droppedMessages).toBe(0);
    // A thread set to refuse sends neither.
    const refuse = buildChatRequest(thread('t1', { contextOverflow: 'refuse' }), history, null, { contextLength: 256 });
    expect(refuse.contextOverflow).toBeUndefined();
    expect(refuse.droppedMessages).toBeUndefined();
  });

  it('the last reply the model answered counts; refused ones and ones stopped before they began do not', () => {
    expect(lastReplyDrop(history)).toEqual({ messages: 2, contextLength: 256 });
    expect(lastReplyDrop(history.slice(0, 4))).toBeUndefined();
    const refused: StoredMessage = {
      id: 'a4',
      role: 'assistant',
      content: '',
      createdAt: 8,
      stats: { error: { code: 'X', message: 'no' } },
    };
    const stoppedEarly: StoredMessage = {
      id: 'a5',
      role: 'assistant',
      content: '',
      createdAt: 9,
      stats: { tokens: 0, finishReason: 'cancelled' },
    };
    expect(lastReplyDrop([...history, refused])?.messages).toBe(2);
    expect(lastReplyDrop([...history, stoppedEarly])?.messages).toBe(2);
    // Nor do they hide the divider.
    expect(currentDrop([...history, stoppedEarly], {})).toMatchObject({ start: 4 });
  });

  it('the context starts at the first conversation message the reply saw, skipping refused exchanges', () => {
    // Conversation: one, r1, three, r3, four — two left out: it starts at "three", past the refused exchange.
    expect(contextStartIndex(history, 1)).toBe(1);
    expect(contextStartIndex(history, 2)).toBe(4);
    expect(contextStartIndex(history, 3)).toBe(5);
    expect(contextStartIndex(history, 0)).toBeUndefined();
  });

  it('the divider follows the streaming reply once accepted, else the last finished one', () => {
    const streaming: StoredMessage = { id: 'a4', role: 'assistant', content: '', createdAt: 8 };
    const messages = [...history, streaming];
    const live = (l: Partial<LiveReply>): Record<string, LiveReply> => ({
      a4: { threadId: 't1', messageId: 'a4', phase: 'running', startedAt: 0, tokens: 0, ...l },
    });
    expect(currentDrop(messages, {})).toMatchObject({ start: 4 });
    expect(currentDrop(messages, live({ phase: 'sending' }))).toMatchObject({ start: 4 });
    expect(currentDrop(messages, live(drop(4)))).toMatchObject({ start: 6, drop: { messages: 4 } });
    // An accepted reply that saw everything: no divider.
    expect(currentDrop(messages, live({}))).toBeUndefined();
  });

  it('the context the conversation fills: the latest accepted reply, its prompt and its tokens so far', () => {
    const withPrompt = history.map((m) => (m.id === 'a3' ? { ...m, stats: { ...m.stats, promptTokens: 120 } } : m));
    expect(contextUsed(withPrompt, {})).toBe(121);
    const streaming: StoredMessage = { id: 'a4', role: 'assistant', content: '', createdAt: 8 };
    const live = (l: Partial<LiveReply>): Record<string, LiveReply> => ({
      a4: { threadId: 't1', messageId: 'a4', phase: 'running', startedAt: 0, tokens: 0, ...l },
    });
    expect(contextUsed([...withPrompt, streaming], live({ promptTokens: 150, tokens: 9 }))).toBe(159);
    // Not accepted yet: the last finished reply's figure stands.
    expect(contextUsed([...withPrompt, streaming], live({ phase: 'sending' }))).toBe(121);
    // Replies stored before kvdesk kept the prompt's size: unknown.
    expect(contextUsed(history, {})).toBeUndefined();
  });
});
