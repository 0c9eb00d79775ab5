import { describe, expect, it } from 'vitest';
import { createFrameCoalescer } from '../../../src/renderer/bridge/frame-coalescer';
import { createAppStore } from '../../../src/renderer/store';
import { INTERRUPTED, partialReply, sortThreads, titleFrom, UNTITLED } from '../../../src/renderer/store/chat-slice';
import type { ModelInfo } from '../../../src/shared/api';
import type { StreamFrame } from '../../../src/shared/contract';
import { result, thread, tokens } from './fixtures';

function storeWithThread() {
  const store = createAppStore();
  store.getState().loadThreads([thread('t1', { title: UNTITLED })]);
  return store;
}

function start(store: ReturnType<typeof createAppStore>, text = 'hello') {
  store.getState().startReply({
    threadId: 't1',
    assistantId: 'a1',
    append: [{ id: 'u1', role: 'user', content: text, createdAt: 5 }],
    now: 10,
    modelId: 'default',
  });
}

const accepted = {
  type: 'accepted',
  requestId: 'r1',
  modelId: 'default',
  promptTokens: 7,
  rows: 1,
  maxNewTokens: 64,
} as const;
const admitted = { type: 'admitted', requestId: 'r1', reservedBytes: 71 * 1024, admittedMaxTokens: 64 } as const;

describe('thread operations', () => {
  it('loads threads newest first and reopens the last open thread', () => {
    const store = createAppStore();
    store
      .getState()
      .loadThreads([thread('a', { updatedAt: 1 }), thread('b', { updatedAt: 3 }), thread('c', { updatedAt: 2 })], 'c');
    const s = store.getState();
    expect(s.threads.map((t) => t.id)).toEqual(['b', 'c', 'a']);
    expect(s.activeThreadId).toBe('c');
    expect(s.threadsLoaded).toBe(true);
  });

  it('opens the newest thread when the last open one is gone', () => {
    const store = createAppStore();
    store.getState().loadThreads([thread('a', { updatedAt: 1 }), thread('b', { updatedAt: 3 })], 'deleted');
    expect(store.getState().activeThreadId).toBe('b');
    const empty = createAppStore();
    empty.getState().loadThreads([]);
    expect(empty.getState().activeThreadId).toBeNull();
  });

  it('adds, renames and removes; removing the open thread opens the next', () => {
    const store = createAppStore();
    store.getState().loadThreads([thread('a', { updatedAt: 1 })]);
    store.getState().addThread(thread('b', { updatedAt: 2 }));
    expect(store.getState().activeThreadId).toBe('b');
    expect(store.getState().threads.map((t) => t.id)).toEqual(['b', 'a']);
    store.getState().renameThread('a', '  Story time  ');
    expect(store.getState().threads.find((t) => t.id === 'a')?.title).toBe('Story time');
    // An empty name keeps the one it had.
    store.getState().renameThread('a', '   ');
    expect(store.getState().threads.find((t) => t.id === 'a')?.title).toBe('Story time');
    store.getState().removeThread('b');
    expect(store.getState().threads.map((t) => t.id)).toEqual(['a']);
    expect(store.getState().activeThreadId).toBe('a');
  });

  it('removing a thread drops its live replies', () => {
    const store = storeWithThread();
    start(store);
    expect(Object.keys(store.getState().live)).toEqual(['a1']);
    store.getState().removeThread('t1');
    expect(store.getState().live).toEqual({});
  });

  it('titles a new thread from its first message', () => {
    expect(titleFrom('Tell me a story\nabout dragons')).toBe('Tell me a story');
    expect(titleFrom('   ')).toBe(UNTITLED);
    const long = titleFrom('word '.repeat(30));
    expect(long.length).toBeLessThanOrEqual(49);
    expect(long.endsWith('…')).toBe(true);
    const store = storeWithThread();
    start(store, 'Tell me a story');
    expect(store.getState().threads[0]?.title).toBe('Tell me a story');
  });

  it('a thread saved in another tab or window takes its place by its activity: one that went on moves first', () => {
    const store = createAppStore();
    store
      .getState()
      .loadThreads([thread('a', { updatedAt: 3 }), thread('b', { updatedAt: 2 }), thread('c', { updatedAt: 1 })], 'a');
    // Another tab sent in "c": it comes back newer than the others and goes to the top, the open chat unchanged.
    store.getState().receiveThread(thread('c', { updatedAt: 10 }));
    expect(store.getState().threads.map((t) => t.id)).toEqual(['c', 'a', 'b']);
    expect(store.getState().activeThreadId).toBe('a');
    // A new one from there goes where its time puts it.
    store.getState().receiveThread(thread('d', { updatedAt: 5 }));
    expect(store.getState().threads.map((t) => t.id)).toEqual(['c', 'd', 'a', 'b']);
    // A chat not opened here (listed as its summary) comes as its summary: placed by its activity too.
    const summary = (id: string, updatedAt: number) => {
      const { messages: _, ...fields } = thread(id, { updatedAt });
      return { ...fields, bytes: 100 };
    };
    const listed = createAppStore();
    listed.getState().loadThreads([summary('a', 3), summary('b', 2), summary('c', 1)], 'a');
    listed.getState().receiveSummary(summary('c', 10));
    expect(listed.getState().threads.map((t) => t.id)).toEqual(['c', 'a', 'b']);
  });

  it('a message waiting for a chat to open is kept by chat until it is sent or given back', () => {
    const store = createAppStore();
    store.getState().setSendWaiting('t1', 'hello');
    store.getState().setSendWaiting('t2', 'there');
    expect(store.getState().sendWaiting).toEqual({ t1: 'hello', t2: 'there' });
    const before = store.getState().sendWaiting;
    store.getState().setSendWaiting('t3', null);
    expect(store.getState().sendWaiting).toBe(before);
    store.getState().setSendWaiting('t1', null);
    expect(store.getState().sendWaiting).toEqual({ t2: 'there' });
  });

  it('sortThreads breaks ties by creation time', () => {
    expect(sortThreads([thread('a', { createdAt: 1 }), thread('b', { createdAt: 2 })]).map((t) => t.id)).toEqual([
      'b',
      'a',
    ]);
  });
});

describe('replies', () => {
  it('startReply appends the user message and an empty assistant message with a live entry', () => {
    const store = storeWithThread();
    start(store);
    const t = store.getState().threads[0];
    expect(t?.messages.map((m) => [m.role, m.content])).toEqual([
      ['user', 'hello'],
      ['assistant', ''],
    ]);
    expect(t?.modelId).toBe('default');
    expect(store.getState().live.a1).toMatchObject({ threadId: 't1', phase: 'sending', tokens: 0 });
  });

  it('startReply with keepBefore drops that message and everything after (edit-and-resend, regenerate)', () => {
    const store = createAppStore();
    store.getState().loadThreads([
      thread('t1', {
        messages: [
          { id: 'u1', role: 'user', content: 'one', createdAt: 1 },
          { id: 'a1', role: 'assistant', content: 'reply one', createdAt: 2 },
          { id: 'u2', role: 'user', content: 'two', createdAt: 3 },
          { id: 'a2', role: 'assistant', content: 'reply two', createdAt: 4 },
        ],
      }),
    ]);
    store.getState().startReply({
      threadId: 't1',
      assistantId: 'a3',
      append: [{ id: 'u3', role: 'user', content: 'two, edited', createdAt: 5 }],
      keepBefore: 'u2',
      now: 6,
    });
    expect(store.getState().threads[0]?.messages.map((m) => m.id)).toEqual(['u1', 'a1', 'u3', 'a3']);
  });

  it('moves through queued → running and appends tokens', () => {
    const store = storeWithThread();
    start(store);
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted] }], 11);
    expect(store.getState().live.a1).toMatchObject({
      phase: 'queued',
      requestId: 'r1',
      promptTokens: 7,
      maxNewTokens: 64,
    });
    store
      .getState()
      .applyFrames([{ messageId: 'a1', frames: [admitted, tokens('Hel', [1, 2]), tokens('lo', [3])] }], 12);
    expect(store.getState().live.a1).toMatchObject({ phase: 'running', reservedBytes: 71 * 1024, tokens: 3 });
    expect(store.getState().threads[0]?.messages[1]?.content).toBe('Hello');
  });

  it('keeps the positions of a static KV cache the request waits for', () => {
    const store = storeWithThread();
    start(store);
    store.getState().applyFrames([{ messageId: 'a1', frames: [{ ...accepted, fixedTokens: 48 }] }], 11);
    expect(store.getState().live.a1).toMatchObject({ phase: 'queued', fixedTokens: 48 });
  });

  it("a long prompt's reading progress shows until the first token", () => {
    const store = storeWithThread();
    start(store);
    const prefill = (doneTokens: number) =>
      ({ type: 'prefill', requestId: 'r1', doneTokens, totalTokens: 700 }) as const;
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, prefill(256), prefill(512)] }], 11);
    expect(store.getState().live.a1).toMatchObject({ phase: 'running', tokens: 0, prefill: { done: 512, total: 700 } });
    store.getState().applyFrames([{ messageId: 'a1', frames: [tokens('Hi', [4])] }], 12);
    expect(store.getState().live.a1).toMatchObject({ tokens: 1 });
    expect(store.getState().threads[0]?.messages[1]?.content).toBe('Hi');
  });

  it('done sets the final text and the stats, including the budget cap, the clip and lookup decoding', () => {
    const store = storeWithThread();
    start(store);
    const budgetCap = {
      requestedMaxTokens: 512,
      admittedMaxTokens: 96,
      requestedBytes: 4096,
      admittedBytes: 1024,
      availableBytes: 1024,
    };
    const clipped = { requestedMaxTokens: 5000, clippedMaxTokens: 512, contextLength: 2048 };
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [
            accepted,
            admitted,
            tokens('ab'),
            {
              type: 'done',
              requestId: 'r1',
              result: result({ text: 'abc', budgetCap, clipped, lookup: { drafted: 8, accepted: 5 } }),
            },
          ],
        },
      ],
      20,
    );
    const s = store.getState();
    expect(s.live).toEqual({});
    const m = s.threads[0]?.messages[1];
    expect(m?.content).toBe('abc');
    expect(m?.stats).toEqual({
      ttftMs: 12,
      tokensPerSecond: 100,
      tokens: 3,
      promptTokens: 5,
      finishReason: 'eos',
      budgetCap,
      clipped,
      lookup: { drafted: 8, accepted: 5 },
    });
    expect(s.threads[0]?.updatedAt).toBe(20);
  });

  it('a refusal becomes an error on the message, with its full detail kept for this run', () => {
    const store = storeWithThread();
    start(store);
    const error = {
      code: 'KV_BUDGET_EXCEEDED' as const,
      message: 'needs 8.0 KiB but the KV budget is 4.0 KiB',
      detail: { requiredBytes: 8192, budgetBytes: 4096, bpt: 1024, promptTokens: 7, rows: 1 },
    };
    store.getState().applyFrames([{ messageId: 'a1', frames: [{ type: 'error', requestId: 'r1', error }] }], 30);
    const s = store.getState();
    expect(s.live).toEqual({});
    expect(s.threads[0]?.messages[1]?.stats?.error).toEqual({ code: 'KV_BUDGET_EXCEEDED', message: error.message });
    expect(s.errorDetails.a1).toEqual(error);
  });

  it('a stop (CANCELLED) keeps the partial reply and records it as stopped, with the window’s ttft and rate', () => {
    const store = storeWithThread();
    start(store);
    store.getState().markStopping('a1');
    expect(store.getState().live.a1?.stopping).toBe(true);
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens('par', [1, 2])] }], 40);
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [
            tokens('tial', [3, 4, 5]),
            { type: 'error', requestId: 'r1', error: { code: 'CANCELLED', message: 'cancelled' } },
          ],
        },
      ],
      140,
    );
    const m = store.getState().threads[0]?.messages[1];
    expect(m?.content).toBe('partial');
    // Accepted with 7 prompt tokens before the stop: the context the conversation fills is kept. The host sends no
    // figures for a stop: the first tokens came 30 ms after the send (at 10), the 3 after them in 100 ms.
    expect(m?.stats).toEqual({
      ttftMs: 30,
      tokensPerSecond: 30,
      tokens: 5,
      promptTokens: 7,
      finishReason: 'cancelled',
    });
    expect(store.getState().errorDetails).toEqual({});
  });

  it('kvdesk stopping (or the connection lost) mid-reply leaves it interrupted, not stopped by the person', () => {
    for (const reason of ['shutdown', 'disconnect'] as const) {
      const store = storeWithThread();
      start(store);
      store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens('par', [1, 2])] }], 40);
      const error = { code: 'CANCELLED' as const, message: `cancelled (${reason})`, detail: { reason } };
      store
        .getState()
        .applyFrames(
          [{ messageId: 'a1', frames: [tokens('tial', [3, 4, 5]), { type: 'error', requestId: 'r1', error }] }],
          140,
        );
      expect(store.getState().live).toEqual({});
      const m = store.getState().threads[0]?.messages[1];
      expect(m?.content).toBe('partial');
      expect(m?.stats).toEqual({
        ttftMs: 30,
        tokensPerSecond: 30,
        tokens: 5,
        promptTokens: 7,
        finishReason: INTERRUPTED,
        interruptedBy: reason,
      });
    }
  });

  it('a reply keeps the model the host ran it on (its name as shown); a continuation on another model adds it', () => {
    const store = storeWithThread();
    const model = (id: string, displayName: string) =>
      ({ id, isDefault: id === 'default', backend: 'cpu', loadMs: 1, spec: { id, displayName } }) as ModelInfo;
    store.getState().setModels([model('default', 'Tiny Llama'), model('other', 'Other 1B')]);
    start(store);
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted] }], 11);
    const written = [{ id: 'default', name: 'Tiny Llama' }];
    expect(store.getState().threads[0]?.messages[1]?.writtenBy).toEqual(written);
    const done = { type: 'done', requestId: 'r1', result: result({ text: 'Once' }) } as const;
    store.getState().applyFrames([{ messageId: 'a1', frames: [admitted, tokens('Once', [1]), done] }], 12);
    expect(store.getState().threads[0]?.messages[1]?.writtenBy).toEqual(written);
    // Continued on the other model, stopped before it wrote anything: still the first model's alone.
    const onOther = { ...accepted, requestId: 'r2', modelId: 'other' };
    const stop = { type: 'error', requestId: 'r2', error: { code: 'CANCELLED' as const, message: 'stopped' } } as const;
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 20, modelId: 'other' });
    store.getState().applyFrames([{ messageId: 'a1', frames: [onOther, stop] }], 21);
    expect(store.getState().threads[0]?.messages[1]?.writtenBy).toEqual(written);
    // Once it writes, both wrote it, in order.
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 30, modelId: 'other' });
    store.getState().applyFrames([{ messageId: 'a1', frames: [onOther, admitted, tokens(' upon', [2])] }], 31);
    expect(store.getState().threads[0]?.messages[1]?.writtenBy).toEqual([
      ...written,
      { id: 'other', name: 'Other 1B' },
    ]);
  });

  it('a reply stopped before its first token says where it was: sent, queued, or reading its prompt', () => {
    const stop = { type: 'error', requestId: 'r1', error: { code: 'CANCELLED' as const, message: 'stopped' } } as const;
    const prefill = { type: 'prefill', requestId: 'r1', doneTokens: 2, totalTokens: 7 } as const;
    for (const [frames, where] of [
      [[], 'sending'],
      [[accepted], 'queued'],
      [[accepted, admitted, prefill], 'reading'],
    ] as const) {
      const store = storeWithThread();
      start(store);
      store.getState().applyFrames([{ messageId: 'a1', frames: [...frames, stop] }], 20);
      const m = store.getState().threads[0]?.messages[1];
      expect(m?.content).toBe('');
      expect(m?.stats).toMatchObject({ tokens: 0, finishReason: 'cancelled', stoppedWhile: where });
    }
    // One that wrote something is a reply stopped part way, not one stopped before it began.
    const store = storeWithThread();
    start(store);
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens('Hi', [1]), stop] }], 20);
    expect(store.getState().threads[0]?.messages[1]?.stats).not.toHaveProperty('stoppedWhile');
  });

  it('a reply saved before it wrote anything (the page going) is interrupted where it was, as a stop there says', () => {
    const prefill = { type: 'prefill', requestId: 'r1', doneTokens: 2, totalTokens: 7 } as const;
    for (const [frames, where] of [
      [[], 'sending'],
      [[accepted], 'queued'],
      [[accepted, admitted, prefill], 'reading'],
    ] as const) {
      const store = storeWithThread();
      start(store);
      store.getState().applyFrames([{ messageId: 'a1', frames: [...frames] }], 20);
      const live = store.getState().live.a1;
      const m = store.getState().threads[0]?.messages[1];
      if (!m || !live) throw new Error('no reply');
      expect(partialReply(m, live).stats).toMatchObject({
        tokens: 0,
        finishReason: 'interrupted',
        stoppedWhile: where,
      });
    }
    // One that wrote something was cut off part way, and a continuation had its text: neither says where it stopped.
    const store = storeWithThread();
    start(store);
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens('Hi', [1])] }], 20);
    const m = store.getState().threads[0]?.messages[1];
    const live = store.getState().live.a1;
    if (!m || !live) throw new Error('no reply');
    expect(partialReply(m, live).stats).not.toHaveProperty('stoppedWhile');
    const continuing = { ...live, tokens: 0, continues: { text: 'Hi', tokens: 1 } };
    expect(partialReply(m, continuing).stats).not.toHaveProperty('stoppedWhile');
  });

  it('a context drop shows from acceptance and stays on the reply, finished or stopped', () => {
    const contextDrop = { messages: 6, contextLength: 256 };
    for (const end of [
      { type: 'done', requestId: 'r1', result: result({ text: 'ab', contextDrop }) } as const,
      { type: 'error', requestId: 'r1', error: { code: 'CANCELLED', message: 'cancelled' } } as const,
    ]) {
      const store = storeWithThread();
      start(store);
      store.getState().applyFrames([{ messageId: 'a1', frames: [{ ...accepted, contextDrop }] }], 11);
      expect(store.getState().live.a1?.contextDrop).toEqual(contextDrop);
      store.getState().applyFrames([{ messageId: 'a1', frames: [admitted, tokens('ab', [1, 2]), end] }], 12);
      expect(store.getState().threads[0]?.messages[1]?.stats?.contextDrop).toEqual(contextDrop);
    }
  });

  it('a continued reply appends to what it said; its tokens count both parts; a failure leaves it as it was', () => {
    const store = storeWithThread();
    start(store);
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [
            accepted,
            admitted,
            tokens('Once', [1]),
            { type: 'done', requestId: 'r1', result: result({ text: 'Once' }) },
          ],
        },
      ],
      20,
    );
    const before = store.getState().threads[0]?.messages[1];
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 30 });
    expect(store.getState().live.a1).toMatchObject({ phase: 'sending', continues: { text: 'Once', tokens: 3 } });
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens(' upon', [7])] }], 31);
    expect(store.getState().threads[0]?.messages[1]?.content).toBe('Once upon');
    store
      .getState()
      .applyFrames(
        [{ messageId: 'a1', frames: [{ type: 'done', requestId: 'r1', result: result({ text: ' upon a time' }) }] }],
        32,
      );
    const m = store.getState().threads[0]?.messages[1];
    expect(m?.content).toBe('Once upon a time');
    expect(m?.stats?.tokens).toBe(6); // 3 before, 3 now
    // The continuation's prompt (5) held the first part (3): the conversation before the reply is 2, so the
    // context it fills is 2 + 6, not counted twice.
    expect(m?.stats?.promptTokens).toBe(2);

    // Stopped before it wrote anything: the reply and its stats stay as they were.
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 35 });
    const cancelled = { code: 'CANCELLED' as const, message: 'cancelled' };
    store
      .getState()
      .applyFrames([{ messageId: 'a1', frames: [{ type: 'error', requestId: 'r3', error: cancelled }] }], 36);
    expect(store.getState().threads[0]?.messages[1]).toEqual(m);
    expect(store.getState().threads[0]?.messages).toHaveLength(2);

    // A continuation refused keeps the reply and its stats as they were.
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 40 });
    const error = { code: 'CONTEXT_OVERFLOW' as const, message: 'full' };
    store.getState().applyFrames([{ messageId: 'a1', frames: [{ type: 'error', requestId: 'r2', error }] }], 41);
    expect(store.getState().threads[0]?.messages[1]).toEqual(m);
    expect(store.getState().live).toEqual({});
    expect(before?.stats?.error).toBeUndefined();
  });

  it("an edited reply says the person's text, and continuing it goes on from that text", () => {
    const store = storeWithThread();
    store.getState().loadThreads([thread('t0', { updatedAt: 99 })]);
    start(store);
    const done = { type: 'done', requestId: 'r1', result: result({ text: 'Once' }) } as const;
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens('Once', [1]), done] }], 20);
    // Not a reply, or a reply streaming now: nothing changes.
    const untouched = store.getState().threads;
    store.getState().editReply('t1', 'u1', 'changed', 25);
    store.getState().editReply('t1', 'nope', 'changed', 25);
    expect(store.getState().threads).toBe(untouched);
    store.getState().setEditing('a1');
    store.getState().editReply('t1', 'a1', 'In the beginning', 30);
    const t = store.getState().threads[0];
    expect(t?.id).toBe('t1'); // to the top, as a new turn goes
    expect(t?.updatedAt).toBe(30);
    expect(t?.messages[1]).toMatchObject({ content: 'In the beginning', edited: true, stats: { tokens: 3 } });
    expect(t?.messages[0]?.content).toBe('hello');
    expect(store.getState().editingMessageId).toBeNull();
    // Continuing: its old token count is not the text's any more; the new text counts on its own.
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 40 });
    expect(store.getState().live.a1?.continues).toEqual({ text: 'In the beginning', tokens: 0 });
    store.getState().editReply('t1', 'a1', 'while streaming', 41);
    expect(store.getState().threads[0]?.messages[1]?.content).toBe('In the beginning');
    const more = { type: 'done', requestId: 'r2', result: result({ text: ' was', tokenIds: [5] }) } as const;
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, more] }], 42);
    expect(store.getState().threads[0]?.messages[1]).toMatchObject({
      content: 'In the beginning was',
      edited: true,
      stats: { tokens: 1 },
    });
  });

  it("keeps each token's probability as it streams; a continuation adds to them, a new reply or an edit starts over", () => {
    const store = storeWithThread();
    start(store);
    const lp = (id: number, bytes: number[], logprob: number, top: Array<[string, number]> = []) => ({
      id,
      token: '',
      bytes,
      logprob,
      textOffset: 0,
      top: top.map(([token, l]) => ({ id: 0, token, bytes: [], logprob: l })),
    });
    const withLogprobs = (text: string, logprobs: ReturnType<typeof lp>[]): StreamFrame => ({
      type: 'tokens',
      requestId: 'r1',
      rows: [{ ids: logprobs.map((l) => l.id), text, logprobs }],
    });
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [
            accepted,
            admitted,
            withLogprobs('Hi', [
              lp(1, [72, 105], -0.1, [
                ['Hi', -0.1],
                ['Yo', -2.5],
              ]),
            ]),
            // A masked alternative's -Infinity is kept as -1e4 (JSON has no -Infinity).
            withLogprobs(' \u00e9', [
              lp(2, [32, 0xc3], -1.5, [[' x', Number.NEGATIVE_INFINITY]]),
              lp(3, [0xa9], -0.01),
            ]),
          ],
        },
      ],
      20,
    );
    const first = store.getState().threads[0]?.messages[1]?.probabilities;
    expect(first).toEqual([
      {
        b: [72, 105],
        lp: -0.1,
        top: [
          { t: 'Hi', lp: -0.1 },
          { t: 'Yo', lp: -2.5 },
        ],
      },
      { b: [32, 0xc3], lp: -1.5, top: [{ t: ' x', lp: -1e4 }] },
      { b: [0xa9], lp: -0.01, top: [] },
    ]);
    store
      .getState()
      .applyFrames([{ messageId: 'a1', frames: [{ type: 'done', requestId: 'r1', result: result() }] }], 21);
    // Continued: the list goes on.
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 30 });
    store
      .getState()
      .applyFrames([{ messageId: 'a1', frames: [accepted, admitted, withLogprobs('!', [lp(4, [33], -0.2)])] }], 31);
    expect(store.getState().threads[0]?.messages[1]?.probabilities?.map((p) => p.b)).toEqual([
      [72, 105],
      [32, 0xc3],
      [0xa9],
      [33],
    ]);
    // Done brings the continuation's whole list (a token held back by a stop string's check came with it only):
    // the reply's first three, then the continuation's.
    const whole = [lp(4, [33], -0.2), lp(5, [63], -0.3)];
    const row = { tokenIds: [4, 5], text: '!?', finishReason: 'length' as const, logprobs: whole };
    store
      .getState()
      .applyFrames(
        [{ messageId: 'a1', frames: [{ type: 'done', requestId: 'r1', result: result({ rows: [row] }) }] }],
        32,
      );
    expect(store.getState().threads[0]?.messages[1]?.probabilities?.map((p) => p.b)).toEqual([
      [72, 105],
      [32, 0xc3],
      [0xa9],
      [33],
      [63],
    ]);
    // Edited: the probabilities were the model's text's, not the person's.
    store.getState().editReply('t1', 'a1', 'Hello', 40);
    expect(store.getState().threads[0]?.messages[1]?.probabilities).toBeUndefined();
    // A reply without them (a thread not set to keep them) has none.
    store.getState().startReply({ threadId: 't1', assistantId: 'a3', append: [], now: 45 });
    // Several frames, then Stop: every token's kept (no done to bring the whole list).
    for (const [i, b] of [[65], [66], [67]].entries()) {
      store.getState().applyFrames(
        [
          {
            messageId: 'a3',
            frames: [...(i === 0 ? [accepted, admitted] : []), withLogprobs('x', [lp(i, b, -0.5)])],
          },
        ],
        46 + i,
      );
    }
    const stop = { type: 'error', requestId: 'r1', error: { code: 'CANCELLED' as const, message: 'stopped' } } as const;
    store.getState().applyFrames([{ messageId: 'a3', frames: [stop] }], 49);
    expect(
      store
        .getState()
        .threads[0]?.messages.at(-1)
        ?.probabilities?.map((p) => p.b),
    ).toEqual([[65], [66], [67]]);
    store.getState().startReply({ threadId: 't1', assistantId: 'a2', append: [], now: 50 });
    store.getState().applyFrames([{ messageId: 'a2', frames: [accepted, admitted, tokens('x')] }], 51);
    expect(store.getState().threads[0]?.messages.at(-1)?.probabilities).toBeUndefined();
  });

  it("keeps a reply's tool calls as they are written and as done says, and one answer per call", () => {
    const store = storeWithThread();
    start(store);
    const call = { id: 'c1', name: 'add', arguments: '{"a":1,"b":2}' };
    const written: StreamFrame = { type: 'tokens', requestId: 'r1', rows: [{ ids: [5], text: '', toolCalls: [call] }] };
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, written] }], 20);
    expect(store.getState().threads[0]?.messages[1]?.toolCalls).toEqual([call]);
    const row = { tokenIds: [5], text: '', finishReason: 'tool_calls' as const, toolCalls: [call] };
    store
      .getState()
      .applyFrames(
        [{ messageId: 'a1', frames: [{ type: 'done', requestId: 'r1', result: result({ rows: [row] }) }] }],
        21,
      );
    expect(store.getState().threads[0]?.messages[1]?.toolCalls).toEqual([call]);
    store.getState().setToolRoutes('t1', 'a1', { add: { server: 'calc', tool: 'add' } });
    expect(store.getState().threads[0]?.messages[1]?.toolRoutes).toEqual({ add: { server: 'calc', tool: 'add' } });
    const answer = { id: 'x', role: 'tool' as const, content: '3', toolCallId: 'c1', toolName: 'add', createdAt: 30 };
    store.getState().addToolResult('t1', answer);
    store.getState().addToolResult('t1', { ...answer, id: 'y', content: 'again' });
    expect(store.getState().threads[0]?.messages.slice(2)).toEqual([answer]);
    expect(store.getState().threads[0]?.updatedAt).toBe(30);
  });

  it('ignores frames after the end and frames for unknown messages', () => {
    const store = storeWithThread();
    start(store);
    store
      .getState()
      .applyFrames(
        [{ messageId: 'a1', frames: [{ type: 'done', requestId: 'r1', result: result() }, tokens('late')] }],
        50,
      );
    store.getState().applyFrames(
      [
        { messageId: 'a1', frames: [tokens('later')] },
        { messageId: 'nope', frames: [tokens('x')] },
      ],
      51,
    );
    expect(store.getState().threads[0]?.messages[1]?.content).toBe('abc');
  });

  it('failReply ends a reply that never got a frame', () => {
    const store = storeWithThread();
    start(store);
    store.getState().failReply('a1', { code: 'INTERNAL', message: 'connection lost' });
    expect(store.getState().live).toEqual({});
    expect(store.getState().threads[0]?.messages[1]?.stats?.error?.code).toBe('INTERNAL');
  });
});

describe('coalescer + store', () => {
  it('a burst of tokens from two chats costs one store update per animation frame', () => {
    const store = createAppStore();
    store.getState().loadThreads([thread('t1'), thread('t2')]);
    for (const [t, a] of [
      ['t1', 'a1'],
      ['t2', 'a2'],
    ] as const) {
      store.getState().startReply({ threadId: t, assistantId: a, append: [], now: 1 });
    }
    let updates = 0;
    store.subscribe(() => {
      updates += 1;
    });
    let frame: (() => void) | null = null;
    const c = createFrameCoalescer({
      schedule: (fn) => {
        frame = fn;
      },
      apply: (f) => store.getState().applyFrames(f.batches, 2),
    });
    for (let i = 0; i < 500; i++) {
      c.frame('a1', tokens('x'));
      c.frame('a2', tokens('y'));
    }
    expect(updates).toBe(0);
    (frame as unknown as () => void)();
    expect(updates).toBe(1);
    const byId = Object.fromEntries(store.getState().threads.map((t) => [t.id, t.messages[0]?.content]));
    expect(byId).toEqual({ t1: 'x'.repeat(500), t2: 'y'.repeat(500) });
    expect(store.getState().live.a1?.tokens).toBe(500);
  });
});

describe('saved threads arriving late', () => {
  it('keep a chat started before they arrived, and keep it open', () => {
    const store = createAppStore();
    store.getState().addThread(thread('fresh', { updatedAt: 100 }));
    store.getState().loadThreads([thread('old', { updatedAt: 1 })], 'old');
    const s = store.getState();
    expect(s.threads.map((t) => t.id)).toEqual(['fresh', 'old']);
    expect(s.activeThreadId).toBe('fresh');
  });
});

describe("a thinking model's reply", () => {
  it('collects its reasoning beside its text, and says how long and how many tokens it thought', () => {
    const store = storeWithThread();
    start(store);
    const reasoning = (text: string, ids: number[]): StreamFrame => ({
      type: 'tokens',
      requestId: 'r1',
      rows: [{ ids, text: '', reasoning: text }],
    });
    store
      .getState()
      .applyFrames(
        [{ messageId: 'a1', frames: [accepted, admitted, reasoning('Sky ', [1]), reasoning('scatters.', [2, 3])] }],
        20,
      );
    let m = store.getState().threads[0]?.messages.find((x) => x.id === 'a1');
    expect(m).toMatchObject({ content: '', reasoning: 'Sky scatters.' });
    store.getState().applyFrames([{ messageId: 'a1', frames: [tokens('Blue.', [4, 5])] }], 30);
    const done = result({
      text: 'Blue.',
      reasoning: 'Sky scatters.',
      reasoningTokens: 4,
      tokenIds: [1, 2, 3, 4, 5],
      timings: { queueMs: 1, ttftMs: 12, totalMs: 30, tokensPerSecond: 200 },
    });
    store.getState().applyFrames([{ messageId: 'a1', frames: [{ type: 'done', requestId: 'r1', result: done }] }], 40);
    m = store.getState().threads[0]?.messages.find((x) => x.id === 'a1');
    expect(m).toMatchObject({ content: 'Blue.', reasoning: 'Sky scatters.' });
    // Four reasoning tokens at 200 tokens a second: 20 ms.
    expect(m?.stats).toMatchObject({ reasoningTokens: 4, reasoningMs: 20, tokens: 5 });
  });

  it("a continued reply keeps its reasoning and adds the continuation's figures", () => {
    const store = storeWithThread();
    start(store);
    const done = result({
      reasoning: 'Hm.',
      reasoningTokens: 4,
      timings: { queueMs: 1, ttftMs: 1, totalMs: 9, tokensPerSecond: 200 },
    });
    const reasoning: StreamFrame = {
      type: 'tokens',
      requestId: 'r1',
      rows: [{ ids: [1], text: '', reasoning: 'Hm.' }],
    };
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [accepted, admitted, reasoning, tokens('abc'), { type: 'done', requestId: 'r1', result: done }],
        },
      ],
      20,
    );
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 30 });
    const more = result({ text: 'def', reasoning: '', reasoningTokens: 0 });
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [accepted, admitted, tokens('def'), { type: 'done', requestId: 'r1', result: more }],
        },
      ],
      40,
    );
    const m = store.getState().threads[0]?.messages.find((x) => x.id === 'a1');
    expect(m).toMatchObject({ content: 'abcdef', reasoning: 'Hm.', stats: { reasoningTokens: 4, reasoningMs: 20 } });
    // Stopped while continuing, it keeps them too.
    store.getState().resumeReply({ threadId: 't1', messageId: 'a1', now: 50 });
    store.getState().applyFrames([{ messageId: 'a1', frames: [accepted, admitted, tokens('g')] }], 60);
    store.getState().failReply('a1', { code: 'CANCELLED', message: 'stopped' });
    const stopped = store.getState().threads[0]?.messages.find((x) => x.id === 'a1');
    expect(stopped?.stats).toMatchObject({ reasoningTokens: 4, reasoningMs: 20, finishReason: 'cancelled' });
  });

  it('a reply without reasoning has none', () => {
    const store = storeWithThread();
    start(store);
    store.getState().applyFrames(
      [
        {
          messageId: 'a1',
          frames: [accepted, admitted, tokens('abc'), { type: 'done', requestId: 'r1', result: result() }],
        },
      ],
      20,
    );
    const m = store.getState().threads[0]?.messages.find((x) => x.id === 'a1');
    expect(m).not.toHaveProperty('reasoning');
    expect(m?.stats).not.toHaveProperty('reasoningMs');
  });
});
