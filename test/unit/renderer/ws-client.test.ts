import { describe, expect, it, vi } from 'vitest';
import {
  addressWithoutToken,
  createWsClient,
  type FolderChange,
  OTHER_FOLDER,
  type SocketLike,
  urlsFromLocation,
} from '../../../src/renderer/transport/ws-client';
import type { WsClientMessage, WsServerMessage } from '../../../src/shared/api';
import type { StreamFrame } from '../../../src/shared/contract';
import { snapshot } from './fixtures';

class FakeSocket implements SocketLike {
  readyState = 0;
  sent: WsClientMessage[] = [];
  onopen: ((ev: unknown) => void) | null = null;
  onclose: ((ev: unknown) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  constructor(readonly url: string) {}
  send(data: string) {
    this.sent.push(JSON.parse(data));
  }
  close() {
    this.readyState = 3;
    this.onclose?.({});
  }
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  /** Opens, and says the server's hello (its data folder's id), as kvdesk does first on each connection. */
  ready(dataId = 'folder-a') {
    this.open();
    this.receive({ t: 'hello', build: 'b1', dataId });
  }
  receive(msg: WsServerMessage) {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
}

function setup() {
  const sockets: FakeSocket[] = [];
  const timers: Array<{ fn: () => void; ms: number }> = [];
  /** The waits for a hello (each socket's, as it opens). */
  const helloTimers: Array<{ fn: () => void; ms: number }> = [];
  const client = createWsClient({
    url: 'ws://127.0.0.1:1/ws',
    uploadUrl: 'http://127.0.0.1:1/api/models/upload',
    createSocket: (url) => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    },
    helloWaitMs: 60_000,
    setTimer: (fn, ms) => (ms === 60_000 ? helloTimers : timers).push({ fn, ms }),
  });
  const last = () => sockets[sockets.length - 1] as FakeSocket;
  return { client, sockets, timers, helloTimers, last };
}

describe('WebSocket client', () => {
  it('builds same-origin URLs and passes the page token through', () => {
    expect(urlsFromLocation({ protocol: 'http:', host: '127.0.0.1:8080', search: '' })).toEqual({
      url: 'ws://127.0.0.1:8080/ws',
      uploadUrl: 'http://127.0.0.1:8080/api/models/upload',
    });
    expect(urlsFromLocation({ protocol: 'https:', host: 'box:443', search: '?token=a b&x=1' })).toEqual({
      url: 'wss://box:443/ws?token=a%20b',
      uploadUrl: 'https://box:443/api/models/upload?token=a%20b',
      token: 'a b',
    });
  });

  it('an upload with load false asks the server so, after the token, and answers the package; loaded, the model', async () => {
    const urls: string[] = [];
    const spec = { id: 'p', root: '/data/models/p', bpt: 128 };
    const answers = [
      { ok: true, value: { root: spec.root, spec } },
      { ok: true, value: { id: 'p', spec } },
    ];
    const client = createWsClient({
      url: 'ws://127.0.0.1:1/ws?token=t',
      uploadUrl: 'http://127.0.0.1:1/api/models/upload?token=t',
      createSocket: (url) => new FakeSocket(url),
      setTimer: () => {},
      post: async (url) => {
        urls.push(url);
        return { status: 200, text: JSON.stringify(answers.shift()) };
      },
    });
    const upload = { kind: 'files' as const, name: 'p', files: [{ path: 'config.json', data: new ArrayBuffer(2) }] };
    expect(await client.importPackage(upload, { load: false })).toEqual({ ok: true, value: { root: spec.root, spec } });
    expect(await client.importPackage(upload)).toEqual({
      ok: true,
      value: { root: spec.root, spec, model: { id: 'p', spec } },
    });
    expect(urls).toEqual([
      'http://127.0.0.1:1/api/models/upload?token=t&load=false',
      'http://127.0.0.1:1/api/models/upload?token=t',
    ]);
    client.close();
  });

  it("tells the data folder's id of the open connection's server once its hello says it; null when it closes first", async () => {
    const { client, timers, last } = setup();
    last().open();
    const first = client.hello();
    last().receive({ t: 'hello', build: 'b1', dataId: 'folder-a' });
    expect(await first).toEqual({ dataId: 'folder-a' });
    expect(client.dataId).toBe('folder-a');
    // A new connection: asked before its hello, told that one's; one closed first answers null.
    last().close();
    timers.shift()?.fn();
    last().open();
    const cut = client.hello();
    last().close();
    expect(await cut).toBeNull();
    timers.shift()?.fn();
    last().open();
    const second = client.hello();
    last().receive({ t: 'hello', build: 'b1', dataId: 'folder-b' });
    expect(await second).toEqual({ dataId: 'folder-b' });
    expect(client.dataId).toBe('folder-b');
    client.close();
  });

  it('says the page is out of date when a connection names another UI build than its first did, at each one', () => {
    const { client, sockets, timers, last } = setup();
    let said = 0;
    client.onOutdated(() => said++);
    const reconnect = (build: string) => {
      last().close();
      timers.shift()?.fn();
      last().open();
      last().receive({ t: 'hello', build });
    };
    last().open();
    last().receive({ t: 'hello', build: 'b1' });
    reconnect('b1');
    expect(said).toBe(0);
    reconnect('b2');
    expect(said).toBe(1);
    reconnect('b2');
    expect(said).toBe(2);
    expect(sockets).toHaveLength(4);
    client.close();
  });

  it('takes the token out of the address the page shows, keeping the rest', () => {
    expect(addressWithoutToken('http://127.0.0.1:8080/?token=s3cret')).toBe('/');
    expect(addressWithoutToken('http://h:1/?x=1&token=a%20b&y=2#t=5')).toBe('/?x=1&y=2#t=5');
    expect(addressWithoutToken('http://h:1/?x=1')).toBeNull();
  });

  it("queues calls until the socket opens and its server's hello came, and routes results by id", async () => {
    const { client, last } = setup();
    const a = client.invoke('listThreads', {});
    const b = client.invoke('getSettings', {});
    expect(last().sent).toEqual([]);
    last().open();
    expect(last().sent).toEqual([]);
    expect(client.state).toBe('connecting');
    last().receive({ t: 'hello', build: 'b1', dataId: 'folder-a' });
    expect(client.state).toBe('open');
    expect(last().sent).toEqual([
      { t: 'invoke', id: 1, name: 'listThreads', request: {} },
      { t: 'invoke', id: 2, name: 'getSettings', request: {} },
    ]);
    last().receive({ t: 'result', id: 2, result: { ok: true, value: { lastThreadId: 'x' } } });
    last().receive({ t: 'result', id: 1, result: { ok: true, value: [] } });
    expect(await b).toEqual({ ok: true, value: { lastThreadId: 'x' } });
    expect(await a).toEqual({ ok: true, value: [] });
  });

  it('multiplexes generations by id and cancels only live ones', () => {
    const { client, last } = setup();
    last().ready();
    const got: Record<string, StreamFrame[]> = { one: [], two: [] };
    const cancelOne = client.generate({ prompt: 'a' }, (f) => got.one?.push(f));
    client.generate({ prompt: 'b' }, (f) => got.two?.push(f));
    const [g1, g2] = last().sent as Array<Extract<WsClientMessage, { t: 'generate' }>>;
    expect(g1?.t).toBe('generate');
    expect(g1?.id).not.toBe(g2?.id);
    last().receive({
      t: 'frame',
      id: g2?.id ?? '',
      frame: { type: 'tokens', requestId: 'r2', rows: [{ ids: [1], text: 'x' }] },
    });
    last().receive({
      t: 'frame',
      id: g1?.id ?? '',
      frame: { type: 'admitted', requestId: 'r1', reservedBytes: 1, admittedMaxTokens: 1 },
    });
    expect(got.one?.map((f) => f.type)).toEqual(['admitted']);
    expect(got.two?.map((f) => f.type)).toEqual(['tokens']);
    cancelOne();
    expect(last().sent[2]).toEqual({ t: 'cancel', id: g1?.id });
    last().receive({
      t: 'frame',
      id: g1?.id ?? '',
      frame: { type: 'error', requestId: 'r1', error: { code: 'CANCELLED', message: 'x' } },
    });
    cancelOne(); // the stream ended: nothing more to cancel
    expect(last().sent).toHaveLength(3);
  });

  it('delivers host events to listeners until they unsubscribe', () => {
    const { client, last } = setup();
    last().ready();
    const seen: number[] = [];
    const off = client.on('budget', (s) => seen.push(s.at));
    last().receive({ t: 'event', event: 'budget', payload: snapshot({ at: 7 }) });
    off();
    last().receive({ t: 'event', event: 'budget', payload: snapshot({ at: 8 }) });
    expect(seen).toEqual([7]);
  });

  it('on close: ends pending calls and streams with an error, then reconnects with backoff', async () => {
    const { client, sockets, timers, last } = setup();
    const states: string[] = [];
    client.onConnection((s) => states.push(s));
    last().ready();
    const pending = client.invoke('listModels', {});
    const frames: StreamFrame[] = [];
    client.generate({ prompt: 'x' }, (f) => frames.push(f));
    last().close();
    const r = await pending;
    expect(r.ok).toBe(false);
    expect(frames).toHaveLength(1);
    expect(frames[0]?.type).toBe('error');
    // Not answered, not stopped by the person: the host cancelled them as the socket closed (the page shows the
    // reply interrupted).
    expect(r.ok === false && r.error.detail?.reason).toBe('disconnect');
    expect(frames[0]).toMatchObject({ error: { code: 'CANCELLED', detail: { reason: 'disconnect' } } });
    expect(states).toEqual(['open', 'reconnecting']);
    expect(timers).toHaveLength(1);
    timers[0]?.fn();
    expect(sockets).toHaveLength(2);
    const again = client.invoke('listModels', {});
    last().ready();
    expect(states).toEqual(['open', 'reconnecting', 'open']);
    expect(last().sent).toEqual([{ t: 'invoke', id: 2, name: 'listModels', request: {} }]);
    last().receive({ t: 'result', id: 2, result: { ok: true, value: [] } });
    expect((await again).ok).toBe(true);
  });

  it("says why kvdesk refuses a socket (a browser's WebSocket hears no reason): asked with a POST, once per run of refusals", async () => {
    const REASON = 'Origin "http://proxy.example" is not this server\'s UI';
    const asked: string[] = [];
    let answer: () => Response = () =>
      new Response(JSON.stringify({ error: { message: REASON, code: 'origin_not_allowed' } }), { status: 403 });
    vi.stubGlobal('fetch', async (url: string, init?: RequestInit) => {
      asked.push(`${init?.method} ${url}`);
      return answer();
    });
    try {
      const { client, timers, last } = setup();
      const refused: string[] = [];
      client.onRefused((m) => refused.push(m));
      // Closed before it opened: kvdesk is asked why, at the socket's address.
      last().close();
      await vi.waitFor(() => expect(refused).toEqual([REASON]));
      expect(asked).toEqual(['POST http://127.0.0.1:1/ws']);
      // Refused again: said already, not asked again.
      timers.shift()?.fn();
      last().close();
      await new Promise((r) => setTimeout(r, 5));
      expect(asked).toHaveLength(1);
      // Open, then closed: no refusal (kvdesk went away), nothing asked.
      timers.shift()?.fn();
      last().ready();
      last().close();
      await new Promise((r) => setTimeout(r, 5));
      expect(asked).toHaveLength(1);
      // Away (no answer): asked again at the next try; Ollama's shape of the reason is read too.
      answer = () => {
        throw new TypeError('fetch failed');
      };
      timers.shift()?.fn();
      last().close();
      expect(asked).toHaveLength(2);
      await new Promise((r) => setTimeout(r, 5));
      answer = () => new Response(JSON.stringify({ error: 'This server requires its access token' }), { status: 401 });
      timers.shift()?.fn();
      last().close();
      await vi.waitFor(() => expect(refused).toEqual([REASON, 'This server requires its access token']));
      // An answer that refuses nothing (405: the socket failed for another reason) says nothing.
      answer = () => new Response('{}', { status: 405 });
      timers.shift()?.fn();
      last().ready();
      last().close();
      timers.shift()?.fn();
      last().close();
      await vi.waitFor(() => expect(asked).toHaveLength(4));
      await new Promise((r) => setTimeout(r, 5));
      expect(refused).toHaveLength(2);
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it('tries again after 250 ms, then sooner than a second each time while kvdesk is away; back, it starts over', () => {
    const { timers, last } = setup();
    last().ready();
    const waits: number[] = [];
    last().close();
    for (let i = 0; i < 6; i++) {
      const timer = timers.shift();
      waits.push(timer?.ms ?? -1);
      timer?.fn();
      last().close();
    }
    expect(waits).toEqual([250, 500, 1000, 1000, 1000, 1000]);
    timers.shift()?.fn();
    last().ready();
    last().close();
    expect(timers.map((t) => t.ms)).toEqual([250]);
  });

  it('what was written while no socket was open, and ended by a close, is not sent once one opens', async () => {
    const { client, timers, last } = setup();
    // Written before the first socket opens: they wait in the outbox.
    const call = client.invoke('saveThread', { id: 't1' } as never);
    const frames: StreamFrame[] = [];
    client.generate({ prompt: 'x' }, (f) => frames.push(f));
    last().close();
    // Ended (not answered, the reply interrupted)…
    expect((await call).ok).toBe(false);
    expect(frames[0]?.type).toBe('error');
    timers[0]?.fn();
    last().open();
    // …so not sent once a socket opens: no save of what the page has since changed, no reply nobody hears.
    expect(last().sent).toEqual([]);
  });

  it('a message larger than the server takes (its hello says how large) is refused, not sent: the socket stays', async () => {
    const { client, sockets, last } = setup();
    last().open();
    last().receive({ t: 'hello', maxMessageBytes: 1000 });
    expect(client.state).toBe('open');
    // 'é' is two bytes in UTF-8: 480 of them fit in characters, not in bytes.
    const big = client.invoke('saveThread', { id: 't1', title: 'é'.repeat(480) } as never);
    const frames: StreamFrame[] = [];
    client.generate({ prompt: 'x'.repeat(1000) }, (f) => frames.push(f));
    const refused = await big;
    expect(refused.ok).toBe(false);
    expect(refused.ok === false && refused.error).toMatchObject({
      code: 'BAD_REQUEST',
      detail: { reason: 'too-large', limit: 1000 },
    });
    expect(refused.ok === false && refused.error.message).toMatch(
      /^10\d\d bytes to send is more than the 1000 bytes kvdesk takes in one message/,
    );
    expect(refused.ok === false && (refused.error.detail?.bytes as number)).toBeGreaterThan(900);
    expect(frames).toEqual([
      expect.objectContaining({ type: 'error', error: expect.objectContaining({ code: 'BAD_REQUEST' }) }),
    ]);
    expect(last().sent).toEqual([]);
    // What fits goes, on the same socket.
    const small = client.invoke('saveThread', { id: 't1', title: 'é'.repeat(300) } as never);
    expect(last().sent).toHaveLength(1);
    last().receive({ t: 'result', id: 2, result: { ok: true, value: { revision: 1 } } });
    expect((await small).ok).toBe(true);
    expect(sockets).toHaveLength(1);
  });

  it("what waited is sent only to a kvdesk of the data folder it was written for; another folder's ends it unsent, said first", async () => {
    const { client, timers, last } = setup();
    const heard: string[] = [];
    client.onConnection((s) => heard.push(s));
    client.onOtherFolder((c: FolderChange) => heard.push(`other ${c.from} -> ${c.to}`));
    last().ready('folder-a');
    const down = () => {
      last().close();
      timers.shift()?.fn();
    };
    // kvdesk gone; the page saves and starts a reply meanwhile.
    down();
    const save = client.invoke('saveThread', { id: 't1' } as never);
    const frames: StreamFrame[] = [];
    client.generate({ prompt: 'x' }, (f) => frames.push(f));
    // Another data folder's kvdesk on the address: nothing is sent before its hello, nor after it.
    last().open();
    expect(last().sent).toEqual([]);
    last().receive({ t: 'hello', build: 'b1', dataId: 'folder-b' });
    expect(last().sent).toEqual([]);
    const ended = await save;
    expect(ended.ok === false && ended.error.detail?.reason).toBe(OTHER_FOLDER);
    expect(frames).toEqual([
      expect.objectContaining({
        type: 'error',
        error: expect.objectContaining({ code: 'CANCELLED', detail: { reason: OTHER_FOLDER } }),
      }),
    ]);
    // Said before the connection is open (the page forgets the other folder's chats first), then open.
    expect(heard).toEqual(['open', 'reconnecting', 'other folder-a -> folder-b', 'open']);
    // The page's writes are for this folder now: sent to it.
    const now = client.invoke('listThreads', {});
    expect(last().sent).toEqual([{ t: 'invoke', id: 2, name: 'listThreads', request: {} }]);
    last().receive({ t: 'result', id: 2, result: { ok: true, value: [] } });
    expect((await now).ok).toBe(true);
    // The same folder's kvdesk again: what waited is sent once its hello says so.
    down();
    client.invoke('saveThread', { id: 't2' } as never);
    last().open();
    expect(last().sent).toEqual([]);
    last().receive({ t: 'hello', build: 'b1', dataId: 'folder-b' });
    expect(last().sent).toEqual([{ t: 'invoke', id: 3, name: 'saveThread', request: { id: 't2' } }]);
    expect(heard.filter((h) => h.startsWith('other'))).toHaveLength(1);
    client.close();
  });

  it('a server that says no hello in time is taken as one that says no data folder', async () => {
    const { client, timers, helloTimers, last } = setup();
    const changes: FolderChange[] = [];
    client.onOtherFolder((c) => changes.push(c));
    // The first connection: any folder is the page's.
    const first = client.invoke('listThreads', {});
    last().open();
    expect(last().sent).toEqual([]);
    helloTimers.shift()?.fn();
    expect(client.state).toBe('open');
    expect(last().sent).toHaveLength(1);
    last().receive({ t: 'result', id: 1, result: { ok: true, value: [] } });
    expect((await first).ok).toBe(true);
    // A page whose folder is known meets one that says none: its writes are not sent there.
    last().close();
    timers.shift()?.fn();
    last().ready('folder-a'); // none said before: taken as the page's
    expect(changes).toEqual([]);
    last().close();
    timers.shift()?.fn();
    const save = client.invoke('saveThread', { id: 't1' } as never);
    last().open();
    helloTimers.pop()?.fn();
    expect(last().sent).toEqual([]);
    expect(((await save) as { error?: { detail?: unknown } }).error?.detail).toEqual({ reason: OTHER_FOLDER });
    expect(changes).toEqual([{ from: 'folder-a', to: undefined }]);
    // A hello that comes after the wait changes nothing.
    last().receive({ t: 'hello', build: 'b1', dataId: 'folder-a' });
    expect(changes).toHaveLength(1);
    client.close();
  });

  it('ignores malformed server messages', () => {
    const { client, last } = setup();
    last().open();
    const seen: unknown[] = [];
    client.on('models', (m) => seen.push(m));
    last().onmessage?.({ data: 'not json' });
    last().onmessage?.({ data: new ArrayBuffer(2) });
    expect(seen).toEqual([]);
  });
});
