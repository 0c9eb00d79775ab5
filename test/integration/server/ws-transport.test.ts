/**
 * The contract over WebSocket with the `ws` client against a real server:
 * invoke, generate (frames in order, multiplexed by id), cancel, events, and a
 * socket that drops releases what it was generating.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { ModelInfo, WsServerMessage } from '../../../src/shared/api';
import type { StreamFrame } from '../../../src/shared/contract';
import { holdReplyEnds, noEndBias } from '../../helpers/hold-replies';
import { eventually, LONG_CHAT, settled, startTestServer, type TestServer } from './server-helpers';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ kvBudgetBytes: 4 * 1024 * 1024 });
});
afterAll(async () => {
  await t?.close();
});

/** A test client: every server message is kept, in order. */
class Client {
  readonly messages: WsServerMessage[] = [];
  private waiters: Array<() => void> = [];
  private nextId = 1;
  closeCode: number | null = null;
  closeReason = '';
  constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      this.messages.push(JSON.parse(data.toString()) as WsServerMessage);
      for (const w of this.waiters.splice(0)) w();
    });
    ws.on('close', (code, reason) => {
      this.closeCode = code;
      this.closeReason = reason.toString();
      for (const w of this.waiters.splice(0)) w();
    });
  }
  static async open(url: string, headers: Record<string, string> = {}): Promise<Client> {
    const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/ws`, { headers });
    const c = new Client(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return c;
  }
  async until<T>(pick: () => T | undefined, timeoutMs = 10_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = pick();
      if (v !== undefined) return v;
      if (this.closeCode !== null) throw new Error(`socket closed (${this.closeCode}) while waiting`);
      if (Date.now() > deadline) throw new Error('timed out waiting for a message');
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }
  async invoke(name: string, request: unknown): Promise<Extract<WsServerMessage, { t: 'result' }>['result']> {
    const id = this.nextId++;
    this.ws.send(JSON.stringify({ t: 'invoke', id, name, request }));
    const msg = await this.until(() => this.messages.find((m) => m.t === 'result' && m.id === id));
    return (msg as Extract<WsServerMessage, { t: 'result' }>).result;
  }
  frames(id: string): StreamFrame[] {
    return this.messages
      .filter((m): m is Extract<WsServerMessage, { t: 'frame' }> => m.t === 'frame' && m.id === id)
      .map((m) => m.frame);
  }
  async end(id: string): Promise<StreamFrame> {
    return this.until(() => this.frames(id).find((f) => f.type === 'done' || f.type === 'error'));
  }
}

describe('WebSocket transport', () => {
  it("says first which build of the UI it serves (a page of another build is out of date): its index.html's digest, and its data folder's id", async () => {
    const staticDir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-ui-'));
    const index = '<!doctype html><script type="module" src="/assets/index-abc123.js"></script>';
    await writeFile(path.join(staticDir, 'index.html'), index);
    const s = await startTestServer({}, { loadDefault: false, staticDir, dataId: 'folder-1' });
    try {
      const c = await Client.open(s.url);
      const first = await c.until(() => c.messages[0]);
      expect(first).toEqual({
        t: 'hello',
        build: createHash('sha256').update(index).digest('hex').slice(0, 16),
        dataId: 'folder-1',
        maxMessageBytes: 256 * 1024 ** 2,
      });
      c.ws.close();
    } finally {
      await s.close();
      await rm(staticDir, { recursive: true, force: true });
    }
  });

  it('saves a chat of more than 64 MiB (its attachments are in it), which once closed the socket', async () => {
    const c = await Client.open(t.url);
    const text = 'a'.repeat(1_990_000);
    const messages = Array.from({ length: 35 }, (_, i) => ({ id: `m${i}`, role: 'user', content: text, createdAt: i }));
    const chat = { id: 'ws-big', title: 'big', createdAt: 1, updatedAt: 1, messages };
    expect(JSON.stringify(chat).length).toBeGreaterThan(64 * 1024 ** 2);
    expect(await c.invoke('saveThread', chat)).toEqual({ ok: true, value: { revision: 1 } });
    expect((await stat(path.join(t.dataDir, 'threads', 'ws-big.json'))).size).toBeGreaterThan(64 * 1024 ** 2);
    expect((await c.invoke('deleteThread', { id: chat.id })).ok).toBe(true);
    c.ws.close();
  }, 60_000);

  it('answers invoke calls in the Result envelope, refusing unknown calls and bad requests', async () => {
    const c = await Client.open(t.url);
    const models = await c.invoke('listModels', {});
    expect(models.ok).toBe(true);
    expect((models as { value: ModelInfo[] }).value.map((m) => m.id)).toEqual(['default']);
    const unknown = await c.invoke('rmRf', {});
    expect(unknown).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    const bad = await c.invoke('getSnapshot', { extra: 1 });
    expect(bad).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST' } });
    c.ws.close();
  });

  it('a page served without a token may save chats, but not change the tools they run without asking', async () => {
    const c = await Client.open(t.url);
    const chat = { id: 'ws-grants', title: 'one', createdAt: 1, updatedAt: 1, messages: [] };
    expect(await c.invoke('saveThread', chat)).toEqual({ ok: true, value: { revision: 1 } });
    const granted = await c.invoke('saveThread', { ...chat, toolsAllowed: ['files/write_file'] });
    expect(granted).toMatchObject({ ok: false, error: { code: 'BAD_REQUEST', message: /served without a token/ } });
    // The window (which holds no token to check) grants one; the page saves the chat as it is, grant and all.
    const windowSave = { ...chat, toolsAllowed: ['files/read_file'], revision: 1 };
    expect((await t.hostApi.call('saveThread', windowSave)).ok).toBe(true);
    const two = { ...chat, title: 'two', toolsAllowed: ['files/read_file'], revision: 2 };
    expect(await c.invoke('saveThread', two)).toEqual({ ok: true, value: { revision: 3 } });
    expect((await c.invoke('saveThread', { ...chat, title: 'three' })).ok).toBe(false);
    // Saves sent at once land in the order sent (each checked first).
    const titles = Array.from({ length: 8 }, (_, i) => `t${i}`);
    const results = await Promise.all(
      titles.map((title) =>
        c.invoke('saveThread', { ...chat, title, toolsAllowed: ['files/read_file'], revision: 3, savedBy: 'page-c' }),
      ),
    );
    expect(results.every((r) => r.ok)).toBe(true);
    const stored = await t.hostApi.call('listThreads', undefined);
    const saved = stored.ok ? stored.value.find((x) => x.id === chat.id) : undefined;
    expect(saved).toMatchObject({ title: 't7', toolsAllowed: ['files/read_file'] });
    expect((await c.invoke('deleteThread', { id: chat.id })).ok).toBe(true);
    c.ws.close();
  });

  it('streams frames in order (accepted, admitted, started, tokens, done), multiplexed by id', async () => {
    const c = await Client.open(t.url);
    const req = (n: number) => ({ promptIds: [10, 20, 30], maxNewTokens: n, sampling: { greedy: true } });
    c.ws.send(JSON.stringify({ t: 'generate', id: 'a', request: req(5) }));
    c.ws.send(JSON.stringify({ t: 'generate', id: 'b', request: req(3) }));
    const [endA, endB] = await Promise.all([c.end('a'), c.end('b')]);
    for (const [id, end, n] of [
      ['a', endA, 5],
      ['b', endB, 3],
    ] as const) {
      expect(end.type).toBe('done');
      const frames = c.frames(id);
      const types = frames.map((f) => f.type);
      expect(types[0]).toBe('accepted');
      expect(types[1]).toBe('admitted');
      expect(types[2]).toBe('started');
      expect(types[types.length - 1]).toBe('done');
      expect(types.slice(3, -1).every((x) => x === 'tokens')).toBe(true);
      const ids = frames.flatMap((f) => (f.type === 'tokens' ? (f.rows[0]?.ids ?? []) : []));
      const result = (end as Extract<StreamFrame, { type: 'done' }>).result;
      expect(ids).toEqual(result.tokenIds);
      expect(result.tokenIds.length).toBeLessThanOrEqual(n);
      // One request id per stream, and different streams are different requests.
      expect(new Set(frames.map((f) => f.requestId)).size).toBe(1);
    }
    expect(endA.requestId).not.toBe(endB.requestId);
    c.ws.close();
  });

  it('sends an invalid generate request back as an error frame', async () => {
    const c = await Client.open(t.url);
    c.ws.send(JSON.stringify({ t: 'generate', id: 'x', request: { prompt: 'a', promptIds: [1] } }));
    const end = await c.end('x');
    expect(end).toMatchObject({ type: 'error', error: { code: 'BAD_REQUEST' } });
    c.ws.close();
  });

  it('broadcasts scheduler and budget events to every socket', async () => {
    const watcher = await Client.open(t.url);
    const c = await Client.open(t.url);
    c.ws.send(JSON.stringify({ t: 'generate', id: 'g', request: { promptIds: [1, 2, 3], maxNewTokens: 2 } }));
    const done = await c.end('g');
    for (const client of [watcher, c]) {
      const accepted = await client.until(() =>
        client.messages.find(
          (m) =>
            m.t === 'event' &&
            m.event === 'scheduler' &&
            (m.payload as { type: string; requestId: string }).requestId === done.requestId,
        ),
      );
      expect(accepted).toBeDefined();
      const budgetEvent = await client.until(() =>
        client.messages.find((m) => m.t === 'event' && m.event === 'budget'),
      );
      expect((budgetEvent as { payload: { limitBytes: number } }).payload.limitBytes).toBe(4 * 1024 * 1024);
    }
    watcher.ws.close();
    c.ws.close();
  });

  /** A request that runs until stopped: end-of-text banned, max tokens clipped only by the context. */
  const endless = { messages: LONG_CHAT, maxNewTokens: 100_000, sampling: { greedy: true, logitBias: noEndBias() } };

  it('cancel stops a generation and returns its reservation', async () => {
    // The reply's end waits for the host's cancel (holdReplyEnds): it cannot end before the cancel comes.
    const held = holdReplyEnds(t.runner.engine);
    try {
      const c = await Client.open(t.url);
      c.ws.send(JSON.stringify({ t: 'generate', id: 'long', request: endless }));
      await c.until(() => c.frames('long').find((f) => f.type === 'tokens'));
      c.ws.send(JSON.stringify({ t: 'cancel', id: 'long' }));
      const end = await c.end('long');
      expect(end).toMatchObject({ type: 'error', error: { code: 'CANCELLED' } });
      expect(held.cancelled).toEqual([end.requestId]);
      const snap = await settled(t.url);
      expect(snap.recent.find((r) => r.id === end.requestId)).toMatchObject({ state: 'cancelled', endReason: 'user' });
      c.ws.close();
    } finally {
      held.restore();
    }
  });

  it('a socket that drops cancels its generations (reason disconnect) and leaks nothing', async () => {
    const held = holdReplyEnds(t.runner.engine, 2);
    try {
      const c = await Client.open(t.url);
      c.ws.send(JSON.stringify({ t: 'generate', id: 'l1', request: endless }));
      c.ws.send(JSON.stringify({ t: 'generate', id: 'l2', request: endless }));
      const ids = await Promise.all(
        ['l1', 'l2'].map((id) => c.until(() => c.frames(id).find((f) => f.type === 'tokens')?.requestId)),
      );
      c.ws.terminate();
      const snap = await settled(t.url);
      expect([...held.cancelled].sort()).toEqual([...ids].sort());
      for (const id of ids) {
        expect(snap.recent.find((r) => r.id === id)).toMatchObject({ state: 'cancelled', endReason: 'disconnect' });
      }
      expect(snap.usedBytes).toBe(0);
    } finally {
      held.restore();
    }
  });

  it('closes the socket (1008) on a message outside the protocol', async () => {
    const c = await Client.open(t.url);
    c.ws.send('not json');
    await eventually(
      () => c.closeCode,
      (code) => code !== null,
    );
    expect(c.closeCode).toBe(1008);
  });

  it('closes the socket (1008) on an invoke whose id is past a number (1e400), which no answer could carry', async () => {
    const c = await Client.open(t.url);
    c.ws.send('{"t":"invoke","id":1e400,"name":"listModels","request":{}}');
    await eventually(
      () => c.closeCode,
      (code) => code !== null,
    );
    expect(c.closeCode).toBe(1008);
    expect(c.closeReason).toMatch(/finite numeric id/);
    expect(c.messages.filter((m) => m.t === 'result')).toEqual([]);
  });

  it("closes the socket (1008) on a generate with a live stream's id, sending that stream no end it did not have", async () => {
    const held = holdReplyEnds(t.runner.engine);
    try {
      const c = await Client.open(t.url);
      c.ws.send(JSON.stringify({ t: 'generate', id: 'dup', request: endless }));
      await c.until(() => c.frames('dup').find((f) => f.type === 'tokens'));
      c.ws.send(JSON.stringify({ t: 'generate', id: 'dup', request: { promptIds: [1, 2], maxNewTokens: 2 } }));
      await eventually(
        () => c.closeCode,
        (code) => code !== null,
      );
      expect(c.closeCode).toBe(1008);
      expect(c.closeReason).toMatch(/"dup" is already streaming/);
      // The live stream's frames are all its own: no refusal among them reads as its end.
      expect(c.frames('dup').filter((f) => f.type === 'done' || f.type === 'error')).toEqual([]);
      await settled(t.url);
    } finally {
      held.restore();
    }
  });

  it('cuts a close reason at 123 bytes without splitting a character (a long, non-ASCII message type)', async () => {
    const c = await Client.open(t.url);
    c.ws.send(JSON.stringify({ t: 'é'.repeat(100) }));
    await eventually(
      () => c.closeCode,
      (code) => code !== null,
    );
    expect(c.closeCode).toBe(1008);
    expect(c.closeReason).toMatch(/^unknown message type "é+$/);
    expect(Buffer.byteLength(c.closeReason)).toBeLessThanOrEqual(123);
  });
});
