/**
 * The composition root (src/main/index.ts) run in Node against a recording
 * stand-in for `electron`, with the real HostApi, RunnerService, scheduler and
 * engine process behind it: what the Electron binary would do, minus pixels.
 * Checks the start-up order, the IPC round trip from the trusted window,
 * streaming over a port, the window closing mid-stream (reservation released),
 * and a clean quit that stops the engine process.
 */
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CHANNELS } from '../../../src/main/ipc/channels';
import type { StreamFrame } from '../../../src/shared/contract';
import type { SchedulerSnapshot } from '../../../src/shared/scheduler-types';
import { repoRoot } from '../../helpers/fixtures';
import { noEndBias } from '../../helpers/hold-replies';
import { slowModel } from '../../helpers/models';

const fake = vi.hoisted(() => {
  const { EventEmitter: Emitter } = require('node:events') as typeof import('node:events');
  const state = {
    appEvents: new Emitter(),
    handlers: new Map<string, (...args: unknown[]) => unknown>(),
    listeners: new Map<string, (...args: unknown[]) => unknown>(),
    windows: [] as Array<Record<string, unknown>>,
    paths: new Map<string, string>(),
    quitCalls: 0,
    preventedQuits: 0,
    /** Runs when a quit goes through (nothing prevented it): the process would end here. */
    onQuitCompleted: null as null | (() => void),
    exitCode: null as number | null,
    protocolHandlers: new Map<string, unknown>(),
    schemes: [] as unknown[],
    sandboxed: false,
    lockRequested: false,
    nextId: 1,
    /** For each window the app closed: whether IPC still answered as it closed. */
    closesWithIpc: [] as boolean[],
  };
  return state;
});

vi.mock('electron', () => {
  const { EventEmitter: Emitter } = require('node:events') as typeof import('node:events');
  class BrowserWindow extends Emitter {
    static fromWebContents() {
      return null;
    }
    webContents: EventEmitter & {
      id: number;
      sent: unknown[][];
      send: (...a: unknown[]) => void;
      isDestroyed(): boolean;
    };
    destroyed = false;
    url: string | null = null;
    constructor(readonly options: Record<string, unknown>) {
      super();
      const wc = new Emitter() as BrowserWindow['webContents'];
      wc.id = fake.nextId++;
      wc.sent = [];
      wc.send = (...a: unknown[]) => wc.sent.push(a);
      wc.isDestroyed = () => this.destroyed;
      this.webContents = wc;
      fake.windows.push(this as unknown as Record<string, unknown>);
    }
    loadURL(url: string) {
      this.url = url;
      return Promise.resolve();
    }
    isDestroyed() {
      return this.destroyed;
    }
    isMinimized() {
      return false;
    }
    restore() {}
    focus() {}
    show() {}
    /** The app closes the window: its page's last save (pagehide) calls the host, as a page does. */
    close() {
      fake.closesWithIpc.push(fake.handlers.size > 0);
      this.closeNow();
    }
    /** The person closes the window. */
    closeNow() {
      this.destroyed = true;
      this.emit('closed');
      this.webContents.emit('destroyed');
    }
  }
  const ses = Object.assign(new Emitter(), {
    setPermissionRequestHandler: () => {},
    setPermissionCheckHandler: () => {},
    setDevicePermissionHandler: () => {},
    protocol: { handle: (scheme: string, fn: unknown) => fake.protocolHandlers.set(scheme, fn) },
    webRequest: { onHeadersReceived: () => {} },
  });
  const app = {
    isPackaged: false,
    setPath: (name: string, p: string) => fake.paths.set(name, p),
    getPath: (name: string) => fake.paths.get(name) ?? os.tmpdir(),
    getAppPath: () => repoRoot,
    requestSingleInstanceLock: () => {
      fake.lockRequested = true;
      return true;
    },
    enableSandbox: () => {
      fake.sandboxed = true;
    },
    on: (event: string, fn: (...a: unknown[]) => void) => fake.appEvents.on(event, fn),
    whenReady: () => Promise.resolve(),
    isReady: () => true,
    quit: () => {
      fake.quitCalls++;
      // Electron emits before-quit; a handler that prevents it keeps the app alive.
      let prevented = false;
      fake.appEvents.emit('before-quit', { preventDefault: () => (prevented = true) });
      if (prevented) fake.preventedQuits++;
      else {
        fake.appEvents.emit('will-quit');
        fake.onQuitCompleted?.();
      }
    },
    exit: (code: number) => {
      fake.exitCode = code;
    },
  };
  return {
    app,
    BrowserWindow,
    session: { defaultSession: ses },
    protocol: { registerSchemesAsPrivileged: (s: unknown[]) => fake.schemes.push(...s) },
    ipcMain: {
      handle: (c: string, fn: (...a: unknown[]) => unknown) => fake.handlers.set(c, fn),
      removeHandler: (c: string) => fake.handlers.delete(c),
      on: (c: string, fn: (...a: unknown[]) => unknown) => fake.listeners.set(c, fn),
      off: (c: string) => fake.listeners.delete(c),
    },
    dialog: { showOpenDialog: async () => ({ canceled: true, filePaths: [] }) },
    shell: { openExternal: async () => {} },
  };
});

type FakeWindow = EventEmitter & {
  options: { webPreferences: Record<string, unknown> };
  url: string | null;
  webContents: EventEmitter & { id: number; sent: unknown[][] };
  closeNow(): void;
};

class FakePort extends EventEmitter {
  frames: StreamFrame[] = [];
  closed = false;
  private waiters: Array<() => void> = [];
  postMessage(m: StreamFrame) {
    this.frames.push(m);
    for (const w of this.waiters.splice(0)) w();
  }
  start() {}
  close() {
    this.closed = true;
  }
  /** Resolves once a frame matching `pred` was posted. */
  until(pred: (f: StreamFrame) => boolean, timeoutMs = 60_000): Promise<StreamFrame> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no such frame; got ${this.frames.map((f) => f.type).join(',')}`)),
        timeoutMs,
      );
      const check = () => {
        const f = this.frames.find(pred);
        if (f) {
          clearTimeout(timer);
          resolve(f);
        } else this.waiters.push(check);
      };
      check();
    });
  }
}

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-main-'));
const signalListenersBefore = { SIGINT: process.listeners('SIGINT'), SIGTERM: process.listeners('SIGTERM') };

function mainWindow(): FakeWindow {
  const w = fake.windows.at(-1);
  if (!w) throw new Error('no window was created');
  return w as unknown as FakeWindow;
}

function trustedEvent(win: FakeWindow, ports: FakePort[] = []) {
  return {
    sender: { id: win.webContents.id },
    senderFrame: { url: 'kvdesk://app/index.html', parent: null, isDestroyed: () => false },
    ports,
  };
}

async function invoke(name: string, request: unknown, win = mainWindow()) {
  const handler = fake.handlers.get(CHANNELS.invoke);
  if (!handler) throw new Error('kvdesk:invoke is not registered');
  return (await handler(trustedEvent(win), name, request)) as {
    ok: boolean;
    value?: unknown;
    error?: { code: string };
  };
}

function generate(request: unknown, win = mainWindow()): FakePort {
  const port = new FakePort();
  const listener = fake.listeners.get(CHANNELS.generate);
  if (!listener) throw new Error('kvdesk:generate is not registered');
  listener(trustedEvent(win, [port]), request);
  return port;
}

async function snapshot(): Promise<SchedulerSnapshot> {
  const r = await invoke('getSnapshot', {});
  if (!r.ok) throw new Error('getSnapshot failed');
  return r.value as SchedulerSnapshot;
}

beforeAll(async () => {
  process.env.KVDESK_DATA_DIR = dataDir;
  await import('../../../src/main/index');
  await vi.waitFor(() => expect(fake.windows).toHaveLength(1), { timeout: 10_000 });
});

afterAll(() => {
  delete process.env.KVDESK_DATA_DIR;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    for (const fn of process.listeners(signal))
      if (!signalListenersBefore[signal].includes(fn)) process.off(signal, fn);
  }
  rmSync(dataDir, { recursive: true, force: true });
});

describe('the Electron main process (against a stand-in for electron)', () => {
  it('sets up before the window: data dir, lock, sandbox, scheme, protocol', () => {
    expect(fake.paths.get('userData')).toBe(dataDir);
    expect(fake.lockRequested).toBe(true);
    expect(fake.sandboxed).toBe(true);
    expect(fake.schemes).toEqual([expect.objectContaining({ scheme: 'kvdesk' })]);
    expect(fake.protocolHandlers.has('kvdesk')).toBe(true);
    const win = mainWindow();
    expect(win.url).toBe('kvdesk://app/index.html');
    expect(win.options.webPreferences).toMatchObject({ contextIsolation: true, sandbox: true, nodeIntegration: false });
    expect(String(win.options.webPreferences.preload)).toMatch(/preload[\\/]index\.js$/);
  });

  it('answers the window over IPC with the default model loaded', async () => {
    const r = await invoke('listModels', {});
    expect(r.ok).toBe(true);
    expect(r.value).toEqual([expect.objectContaining({ isDefault: true })]);
    expect((await invoke('nope', {})).error?.code).toBe('BAD_REQUEST');
    expect((await invoke('configureBudget', { maxRunning: -1 })).error?.code).toBe('BAD_REQUEST');
  });

  it('streams a generation over its port and releases the reservation at the end', async () => {
    const port = generate({ prompt: 'Hello', chat: true, maxNewTokens: 8, sampling: { greedy: true } });
    const done = await port.until((f) => f.type === 'done' || f.type === 'error');
    expect(done.type).toBe('done');
    expect(port.frames.map((f) => f.type)[0]).toBe('accepted');
    expect(port.frames.map((f) => f.type)).toContain('admitted');
    expect(port.closed).toBe(true);
    expect((await snapshot()).reservedBytes).toBe(0);
  });

  it('sends host events to the window', async () => {
    await vi.waitFor(() => {
      const names = mainWindow()
        .webContents.sent.filter((m) => m[0] === CHANNELS.events)
        .map((m) => m[1]);
      expect(names).toContain('budget');
      expect(names).toContain('scheduler');
    });
  });

  it('closing the window mid-stream cancels its generation and frees its KV', async () => {
    const win = mainWindow();
    // On the slow model (milliseconds a token), its end-of-text banned and its length clipped only by its context
    // (about 4,000 tokens), the reply runs for many seconds: it is still streaming when the window closes, however
    // slow the machine. (The engine client is inside src/main here, so its replies' ends cannot be held.)
    const slow = await invoke('loadModel', { path: slowModel() });
    expect(slow.ok).toBe(true);
    const model = (slow.value as { id: string }).id;
    const port = generate(
      {
        model,
        prompt: 'Tell me everything',
        chat: true,
        maxNewTokens: 100_000,
        sampling: { greedy: true, logitBias: noEndBias(slowModel()) },
      },
      win,
    );
    await port.until((f) => f.type === 'tokens');
    expect((await snapshot()).reservedBytes).toBeGreaterThan(0);
    win.closeNow();
    const framesAtClose = port.frames.length;
    // A new window (macOS 'activate') reads the budget: the closed window's reservation is gone.
    fake.appEvents.emit('activate');
    expect(fake.windows).toHaveLength(2);
    await vi.waitFor(async () => expect((await snapshot()).reservedBytes).toBe(0), { timeout: 20_000 });
    const snap = await snapshot();
    expect(snap.running).toEqual([]);
    expect(snap.recent.at(-1)?.state).toBe('cancelled');
    // Nothing was posted to the port after its window went away.
    expect(port.frames.length).toBe(framesAtClose);
    // The next tests run on the default model alone, as before.
    expect((await invoke('unloadModel', { id: model })).ok).toBe(true);
  });

  it('refuses calls from the closed window', async () => {
    const closed = fake.windows[0] as unknown as FakeWindow;
    const r = await invoke('listModels', {}, closed);
    expect(r.ok).toBe(false);
    expect((r.error as { message?: string } | undefined)?.message).toMatch(/IPC refused/);
  });

  it('quits cleanly: the window closed first, streams stopped, engine process gone, no window opened meanwhile', async () => {
    const port = generate({ prompt: 'Count to a thousand', chat: true, maxNewTokens: 100_000 });
    await port.until((f) => f.type === 'tokens');
    const enginePids = await findEnginePids();
    expect(enginePids.length).toBeGreaterThan(0);
    let aliveWhenQuitWentThrough: number[] | null = null;
    fake.onQuitCompleted = () => {
      aliveWhenQuitWentThrough = enginePids.filter(alive);
    };
    const windows = fake.windows.length;
    fake.appEvents.emit('window-all-closed');
    // A second launch while it quits opens no window (it would have no IPC), nor does macOS's activate.
    fake.appEvents.emit('second-instance');
    fake.appEvents.emit('activate');
    expect(fake.windows).toHaveLength(windows);
    await vi.waitFor(() => expect(aliveWhenQuitWentThrough).not.toBeNull(), { timeout: 10_000 });
    // The open window was closed first, while IPC still answered its page's last save.
    expect(fake.closesWithIpc).toEqual([true]);
    // The first quit waited for the host to close; the process may end only once the engine is gone.
    expect(fake.preventedQuits).toBe(1);
    expect(aliveWhenQuitWentThrough).toEqual([]);
    expect(fake.exitCode).toBeNull();
    expect(fake.handlers.size).toBe(0);
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Engine processes forked by this test process (ps: Linux and macOS). */
async function findEnginePids(): Promise<number[]> {
  const { execFileSync } = await import('node:child_process');
  const out = execFileSync('ps', ['-A', '-o', 'pid=,ppid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && Number(m[2]) === process.pid && /engine/.test(m[3] ?? ''))
    .map((m) => Number(m[1]));
}
