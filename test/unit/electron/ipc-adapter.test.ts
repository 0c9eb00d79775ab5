import { EventEmitter } from 'node:events';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { StreamFrame } from '../../../src/shared/contract';

// ipcMain, dialog and BrowserWindow replaced by recorders: the adapter's glue runs without the binary.
const fake = vi.hoisted(() => ({
  handlers: new Map<string, (...args: unknown[]) => unknown>(),
  listeners: new Map<string, (...args: unknown[]) => unknown>(),
  showOpenDialog: vi.fn(async (..._args: unknown[]) => ({ canceled: false, filePaths: ['/chosen/pkg'] })),
}));
vi.mock('electron', () => ({
  ipcMain: {
    handle: (channel: string, fn: (...args: unknown[]) => unknown) => fake.handlers.set(channel, fn),
    removeHandler: (channel: string) => fake.handlers.delete(channel),
    on: (channel: string, fn: (...args: unknown[]) => unknown) => fake.listeners.set(channel, fn),
    off: (channel: string) => fake.listeners.delete(channel),
  },
  dialog: { showOpenDialog: fake.showOpenDialog },
  BrowserWindow: { fromWebContents: () => ({ id: 1 }) },
}));

import { registerIpc } from '../../../src/main/ipc';
import { CHANNELS } from '../../../src/main/ipc/channels';

class FakePort extends EventEmitter {
  posted: unknown[] = [];
  closed = false;
  postMessage(m: unknown) {
    this.posted.push(m);
  }
  start() {}
  close() {
    this.closed = true;
  }
}

function makeWindow(id = 7) {
  const webContents = Object.assign(new EventEmitter(), { id, isDestroyed: () => false, send: vi.fn() });
  const win = Object.assign(new EventEmitter(), { webContents, isDestroyed: () => false });
  return win;
}

function makeHost() {
  const eventFns = new Map<string, (p: unknown) => void>();
  const generations: Array<{ request: unknown; onFrame: (f: StreamFrame) => void; cancels: unknown[] }> = [];
  return {
    eventFns,
    generations,
    call: vi.fn(async (name: string, request: unknown) => ({ ok: true, value: { name, request } })),
    importPath: vi.fn(async (p: string) => ({ ok: true, value: { id: p } })),
    importFiles: vi.fn(async (u: unknown) => ({ ok: true, value: { u } })),
    generate: vi.fn((request: unknown, onFrame: (f: StreamFrame) => void) => {
      const g = { request, onFrame, cancels: [] as unknown[] };
      generations.push(g);
      return { requestId: `r${generations.length}`, cancel: (reason?: unknown) => g.cancels.push(reason) };
    }),
    on: vi.fn((event: string, fn: (p: unknown) => void) => {
      eventFns.set(event, fn);
      return () => eventFns.delete(event);
    }),
    close: vi.fn(async () => {}),
  };
}

function event(opts: { id?: number; url?: string; top?: boolean; frame?: boolean; ports?: FakePort[] } = {}) {
  return {
    sender: { id: opts.id ?? 7 },
    senderFrame:
      opts.frame === false
        ? null
        : {
            url: opts.url ?? 'kvdesk://app/index.html',
            parent: opts.top === false ? {} : null,
            isDestroyed: () => false,
          },
    ports: opts.ports ?? [],
  };
}

const flush = () => new Promise((r) => setTimeout(r, 0));

let host: ReturnType<typeof makeHost>;
let win: ReturnType<typeof makeWindow>;
let ipc: ReturnType<typeof registerIpc>;

beforeEach(() => {
  fake.handlers.clear();
  fake.listeners.clear();
  host = makeHost();
  win = makeWindow();
  ipc = registerIpc({
    host: Promise.resolve(host as never),
    getWindow: () => win as never,
    trustedOrigin: 'kvdesk://app',
  });
  ipc.attachWindow(win as never);
});

function handler(channel: string) {
  const fn = fake.handlers.get(channel);
  if (!fn) throw new Error(`no handler for ${channel}`);
  return fn;
}

describe('kvdesk:invoke', () => {
  it('forwards a known call from the main window to HostApi.call, request untouched', async () => {
    const r = await handler(CHANNELS.invoke)(event(), 'loadModel', { path: '/m' });
    expect(host.call).toHaveBeenCalledWith('loadModel', { path: '/m' });
    expect(r).toEqual({ ok: true, value: { name: 'loadModel', request: { path: '/m' } } });
  });

  it('refuses unknown and prototype call names before the host sees them', async () => {
    for (const name of ['nope', '__proto__', 'constructor', 42, undefined]) {
      const r = (await handler(CHANNELS.invoke)(event(), name, {})) as { ok: boolean; error: { code: string } };
      expect(r.ok).toBe(false);
      expect(r.error.code).toBe('BAD_REQUEST');
    }
    expect(host.call).not.toHaveBeenCalled();
  });

  it('refuses other windows, subframes, foreign origins and vanished frames', async () => {
    for (const e of [
      event({ id: 8 }),
      event({ top: false }),
      event({ url: 'https://evil.example/' }),
      event({ url: 'file:///x/index.html' }),
      event({ frame: false }),
    ]) {
      const r = (await handler(CHANNELS.invoke)(e, 'listModels', {})) as { ok: boolean; error: { message: string } };
      expect(r.ok).toBe(false);
      expect(r.error.message).toMatch(/^IPC refused/);
    }
    expect(host.call).not.toHaveBeenCalled();
  });

  it('answers with the start-up failure when the host did not start', async () => {
    const failing = Promise.reject(Object.assign(new Error('disk full'), { code: 'INTERNAL' }));
    failing.catch(() => {});
    fake.handlers.clear();
    registerIpc({ host: failing as never, getWindow: () => win as never, trustedOrigin: 'kvdesk://app' });
    const r = (await handler(CHANNELS.invoke)(event(), 'listModels', {})) as {
      ok: boolean;
      error: { message: string };
    };
    expect(r.ok).toBe(false);
    expect(r.error.message).toContain('disk full');
  });
});

describe('imports and the folder chooser', () => {
  it('imports a dropped folder by path and refuses a bad path', async () => {
    expect(await handler(CHANNELS.importPath)(event(), '/pkg')).toEqual({ ok: true, value: { id: '/pkg' } });
    const bad = (await handler(CHANNELS.importPath)(event(), { path: '/pkg' })) as { ok: boolean };
    expect(bad.ok).toBe(false);
    expect(host.importPath).toHaveBeenCalledTimes(1);
  });

  it('uploads files as Uint8Arrays and refuses a malformed upload', async () => {
    await handler(CHANNELS.importFiles)(event(), { name: 'p', files: [{ path: 'p/a', data: new ArrayBuffer(3) }] });
    const arg = host.importFiles.mock.calls[0]?.[0] as { files: Array<{ data: unknown }> };
    expect(arg.files[0]?.data).toBeInstanceOf(Uint8Array);
    const bad = (await handler(CHANNELS.importFiles)(event(), { name: 'p', files: [{ path: 'p/a', data: 'x' }] })) as {
      ok: boolean;
    };
    expect(bad.ok).toBe(false);
    const unclear = (await handler(CHANNELS.importFiles)(event(), {
      name: 'p',
      files: [{ path: 'p/a', data: new ArrayBuffer(3) }],
      load: 'no',
    })) as { ok: boolean; error?: { message: string } };
    expect(unclear.error?.message).toBe('importFiles: load must be true or false');
    expect(host.importFiles).toHaveBeenCalledTimes(1);
    await handler(CHANNELS.importFiles)(event(), { name: 'p', files: [], load: false });
    expect(host.importFiles.mock.calls[1]?.[0]).toMatchObject({ load: false });
  });

  it('refuses imports from a foreign sender', async () => {
    expect(((await handler(CHANNELS.importPath)(event({ id: 9 }), '/pkg')) as { ok: boolean }).ok).toBe(false);
    expect(host.importPath).not.toHaveBeenCalled();
  });

  it('opens a folder-only dialog and returns the chosen path (null when cancelled)', async () => {
    expect(await handler(CHANNELS.chooseFolder)(event())).toEqual({ ok: true, value: '/chosen/pkg' });
    const options = fake.showOpenDialog.mock.calls[0]?.[1] as { properties: string[] };
    expect(options.properties).toEqual(['openDirectory']);
    fake.showOpenDialog.mockResolvedValueOnce({ canceled: true, filePaths: [] });
    expect(await handler(CHANNELS.chooseFolder)(event())).toEqual({ ok: true, value: null });
    expect(((await handler(CHANNELS.chooseFolder)(event({ url: 'https://x/' }))) as { ok: boolean }).ok).toBe(false);
  });
});

describe('kvdesk:generate', () => {
  const generate = (e: ReturnType<typeof event>, request: unknown) => {
    const fn = fake.listeners.get(CHANNELS.generate);
    if (!fn) throw new Error('no generate listener');
    fn(e, request);
  };

  it('streams frames on the port it was given', async () => {
    const port = new FakePort();
    generate(event({ ports: [port] }), { prompt: 'hi' });
    await flush();
    expect(host.generate).toHaveBeenCalledWith({ prompt: 'hi' }, expect.any(Function));
    const g = host.generations[0];
    g?.onFrame({ type: 'tokens', requestId: 'r1', rows: [{ ids: [1], text: 'a' }] });
    expect(port.posted).toHaveLength(1);
  });

  it('refuses a foreign sender on the port with an error frame, without starting anything', async () => {
    const port = new FakePort();
    generate(event({ id: 3, ports: [port] }), { prompt: 'hi' });
    await flush();
    expect(host.generate).not.toHaveBeenCalled();
    expect(port.posted).toEqual([
      expect.objectContaining({ type: 'error', error: expect.objectContaining({ code: 'BAD_REQUEST' }) }),
    ]);
    expect(port.closed).toBe(true);
  });

  it("cancels the window's generations when it closes", async () => {
    const ports = [new FakePort(), new FakePort()];
    for (const p of ports) generate(event({ ports: [p] }), { prompt: 'x' });
    await flush();
    win.emit('closed');
    expect(host.generations.map((g) => g.cancels)).toEqual([['disconnect'], ['disconnect']]);
  });

  it('cancels them when the page reloads or the renderer crashes, but not on in-page navigation', async () => {
    const port = new FakePort();
    generate(event({ ports: [port] }), { prompt: 'x' });
    await flush();
    win.webContents.emit('did-start-navigation', { isMainFrame: true, isSameDocument: true });
    expect(host.generations[0]?.cancels).toEqual([]);
    win.webContents.emit('did-start-navigation', { isMainFrame: true, isSameDocument: false });
    expect(host.generations[0]?.cancels).toEqual(['disconnect']);

    const port2 = new FakePort();
    generate(event({ ports: [port2] }), { prompt: 'y' });
    await flush();
    win.webContents.emit('render-process-gone', {}, { reason: 'crashed' });
    expect(host.generations[1]?.cancels).toEqual(['disconnect']);
  });

  it('dispose removes every handler and cancels every stream', async () => {
    const port = new FakePort();
    generate(event({ ports: [port] }), { prompt: 'x' });
    await flush();
    ipc.dispose();
    expect(host.generations[0]?.cancels).toEqual(['disconnect']);
    expect(fake.handlers.size).toBe(0);
    expect(fake.listeners.size).toBe(0);
  });
});

describe('events to the window', () => {
  it('sends host events to the main window on the events channel', async () => {
    await flush();
    host.eventFns.get('budget')?.({ limitBytes: 1 });
    expect(win.webContents.send).toHaveBeenCalledWith(CHANNELS.events, 'budget', [{ limitBytes: 1 }]);
  });
});
