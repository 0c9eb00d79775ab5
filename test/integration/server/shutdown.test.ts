/**
 * A server that stops (`kvdesk serve` on Ctrl+C, the desktop window's API server turned off) ends the generations
 * in flight over HTTP as a shutdown before it cuts their connections: a stream writes its last event, an error the
 * client may retry, and closes cleanly; a request not answered yet gets a retryable 503; a WebSocket stream gets its
 * last frame, and then, once the save its page makes of the reply as it hears of that end is answered (a moment),
 * the socket closes as going away (1001). A generation of another front end (the window, over
 * the same host) goes on.
 */
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { WsServerMessage } from '../../../src/shared/api';
import type { StreamFrame } from '../../../src/shared/contract';
import { holdReplyEnds, noEndBias } from '../../helpers/hold-replies';
import { eventually, startTestServer, type TestServer } from './server-helpers';

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const long = { model: 'default', max_tokens: 2000, logit_bias: noEndBias() };

describe('a server that stops', () => {
  it("ends its streams with a retryable error event, answers a waiting request 503, and leaves others' replies", async () => {
    t = await startTestServer();
    const server = t;
    await server.hostApi.call('configureBudget', { maxRunning: 1 });
    // The stream's end waits for the server's cancel (holdReplyEnds): it is still streaming, and the request behind
    // it still queued, when the server closes, however slow the machine. Only that first reply is held: the queued
    // one never starts, and the window's reply (started later) ends as it comes.
    const held = holdReplyEnds(server.runner.engine);
    try {
      // A stream that has begun.
      const streamed = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...long, messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
      expect(streamed.status).toBe(200);
      const reader = (streamed.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let text = decoder.decode((await reader.read()).value);
      // One queued behind it, not answered yet.
      const queued = fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...long, prompt: 'Once' }),
      });
      await eventually(
        async () => server.runner.snapshot(),
        (s) => s.queue.length === 1,
      );
      // A reply of another front end on the same host (the window's).
      const frames: StreamFrame[] = [];
      const windowReply = server.hostApi.generate(
        { model: 'default', promptIds: [5, 6, 7], maxNewTokens: 3, sampling: { greedy: true } },
        (f) => frames.push(f),
      );

      await server.server.close();

      for (;;) {
        const chunk = await reader.read();
        if (chunk.done) break;
        text += decoder.decode(chunk.value);
      }
      const events = text
        .split('\n\n')
        .filter((e) => e.startsWith('data: '))
        .map((e) => e.slice('data: '.length));
      const last = JSON.parse(events[events.length - 1] as string) as { error: { code: string; message: string } };
      expect(last.error.code).toBe('cancelled');
      expect(last.error.message).toMatch(/shut/i);
      const waiting = await queued;
      expect(waiting.status).toBe(503);
      expect(waiting.headers.get('x-should-retry')).toBe('true');
      // The host's other reply was not this server's to end.
      await eventually(
        async () => frames,
        (f) => f.some((x) => x.type === 'done' || x.type === 'error'),
      );
      expect(frames.at(-1)).toMatchObject({ type: 'done' });
      expect(windowReply.requestId).toBeTruthy();
      // The server's close stopped the stream (and nothing else reached the engine as a cancel).
      expect(held.cancelled).toHaveLength(1);
      expect(server.runner.snapshot().recent.find((r) => r.id === held.cancelled[0])).toMatchObject({
        state: 'cancelled',
        endReason: 'shutdown',
      });
    } finally {
      held.restore();
    }
  });

  it('ends the streams of its WebSocket clients with their last frame, a shutdown, then closes the socket (1001)', async () => {
    t = await startTestServer();
    const server = t;
    await server.hostApi.call('configureBudget', { maxRunning: 1 });
    // The running reply's end waits for the server's cancel; the one queued behind it never starts.
    const held = holdReplyEnds(server.runner.engine);
    try {
      const ws = new WebSocket(`${server.url.replace(/^http/, 'ws')}/ws`);
      const messages: WsServerMessage[] = [];
      // As a page does, the reply's end heard: its chat is saved as it shows it, a moment later (its next frame).
      const chat = { id: 'ws-last-save', title: 'last words', createdAt: 1, updatedAt: 1, messages: [] };
      ws.on('message', (data) => {
        const msg = JSON.parse(data.toString()) as WsServerMessage;
        messages.push(msg);
        if (msg.t === 'frame' && msg.id === 'running' && msg.frame.type === 'error') {
          setTimeout(() => ws.send(JSON.stringify({ t: 'invoke', id: 1, name: 'saveThread', request: chat })), 200);
        }
      });
      const closed = new Promise<{ code: number; reason: string }>((resolve) =>
        ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
      );
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      const request = { promptIds: [5, 6, 7], maxNewTokens: 2000, sampling: { greedy: true, logitBias: noEndBias() } };
      ws.send(JSON.stringify({ t: 'generate', id: 'running', request }));
      ws.send(JSON.stringify({ t: 'generate', id: 'queued', request }));
      const frames = (id: string) => messages.flatMap((m) => (m.t === 'frame' && m.id === id ? [m.frame] : []));
      await eventually(
        async () => frames('running').some((f) => f.type === 'tokens') && frames('queued').length > 0,
        (ready) => ready,
      );

      await server.server.close();

      // Each stream's last frame came before the socket closed, and says the server stopped it.
      expect(await closed).toEqual({ code: 1001, reason: expect.stringMatching(/shutting down/) });
      for (const id of ['running', 'queued']) {
        const last = frames(id).at(-1);
        expect(last).toMatchObject({ type: 'error', error: { code: 'CANCELLED', message: /shutdown/ } });
        expect(server.runner.snapshot().recent.find((r) => r.id === last?.requestId)).toMatchObject({
          state: 'cancelled',
          endReason: 'shutdown',
        });
      }
      expect(held.cancelled).toHaveLength(1);
      // The save the page made as it heard of the end was waited for, and answered before the socket closed.
      expect(messages.find((m) => m.t === 'result' && m.id === 1)).toEqual({
        t: 'result',
        id: 1,
        result: { ok: true, value: { revision: 1 } },
      });
      const listed = await server.hostApi.call('listThreads', undefined);
      expect(listed.ok && listed.value.map((c) => c.id)).toContain(chat.id);
    } finally {
      held.restore();
    }
  });

  it('cuts a WebSocket that does not answer its close within the grace, rather than wait on it', async () => {
    t = await startTestServer();
    const server = t;
    const ws = new WebSocket(`${server.url.replace(/^http/, 'ws')}/ws`);
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    // A client that reads nothing more never answers the server's close frame.
    (ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const started = Date.now();
    await server.server.close();
    // The grace is 2 s; ws's own close handshake would wait 30 s.
    expect(Date.now() - started).toBeLessThan(10_000);
    ws.terminate();
  });
});
