import type { MessagePort as NodeMessagePort } from 'node:worker_threads';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { CHANNELS } from '../../../src/main/ipc/channels';
import { CallSchemas } from '../../../src/shared/api';
import type { StreamFrame } from '../../../src/shared/contract';

// The preload runs against a fake `electron`: we see exactly what it exposes and what it sends.
const fake = vi.hoisted(() => ({
  exposed: new Map<string, unknown>(),
  invoke: vi.fn(async (..._args: unknown[]): Promise<unknown> => ({ ok: true, value: null })),
  postMessage: vi.fn((..._args: unknown[]) => {}),
  rendererListeners: new Map<string, (...args: unknown[]) => void>(),
  getPathForFile: vi.fn((_file: unknown): string => '/dropped/pkg'),
  ipcRenderer: null as unknown,
}));
vi.mock('electron', () => {
  const ipcRenderer = {
    invoke: fake.invoke,
    postMessage: fake.postMessage,
    on: (channel: string, fn: (...args: unknown[]) => void) => fake.rendererListeners.set(channel, fn),
    send: () => {
      throw new Error('the preload must not use ipcRenderer.send');
    },
    sendSync: () => {
      throw new Error('the preload must not use ipcRenderer.sendSync');
    },
  };
  fake.ipcRenderer = ipcRenderer;
  return {
    contextBridge: { exposeInMainWorld: (key: string, api: unknown) => fake.exposed.set(key, api) },
    ipcRenderer,
    webUtils: { getPathForFile: fake.getPathForFile },
  };
});

type Api = Record<string, unknown> & {
  transport: string;
  invoke(name: unknown, request?: unknown): Promise<{ ok: boolean; error?: { code: string } }>;
  generate(request: unknown, onFrame: (f: StreamFrame) => void): () => void;
  on(event: unknown, fn: (p: unknown) => void): () => void;
  importPackage(upload: unknown): Promise<{ ok: boolean; error?: { code: string; message: string } }>;
  getPathForFile(file: unknown): string;
  chooseFolder(): Promise<string | null>;
};

let api: Api;
const openPorts: NodeMessagePort[] = [];

beforeAll(async () => {
  await import('../../../src/preload/index');
  api = fake.exposed.get('kvdesk') as Api;
});

afterAll(() => {
  for (const p of openPorts) p.close();
});

beforeEach(() => {
  fake.invoke.mockClear();
  fake.postMessage.mockClear();
  fake.getPathForFile.mockClear();
});

const callNames = Object.keys(CallSchemas);

describe('window.kvdesk', () => {
  it('is the only thing exposed to the page', () => {
    expect([...fake.exposed.keys()]).toEqual(['kvdesk']);
  });

  it('exposes exactly one named method per contract call plus the KvdeskApi members', () => {
    expect(Object.keys(api).sort()).toEqual(
      [...callNames, 'transport', 'invoke', 'generate', 'on', 'importPackage', 'getPathForFile', 'chooseFolder'].sort(),
    );
    expect(api.transport).toBe('electron');
    for (const [key, value] of Object.entries(api)) {
      if (key !== 'transport') expect(typeof value, key).toBe('function');
    }
  });

  it('leaks nothing generic: no ipcRenderer, no send, no channel names, no require', () => {
    for (const key of Object.keys(api)) expect(key).not.toMatch(/ipc|send|renderer|require|process|channel|electron/i);
    const values = Object.values(api);
    expect(values).not.toContain(fake.ipcRenderer);
    for (const v of values) {
      if (typeof v === 'function') continue;
      expect(typeof v).toBe('string');
    }
  });
});

describe('named calls', () => {
  it.each(callNames)('%s sends its own name on the invoke channel', async (name) => {
    const request = { probe: name };
    await (api[name] as (r: unknown) => Promise<unknown>)(request);
    expect(fake.invoke).toHaveBeenCalledTimes(1);
    expect(fake.invoke).toHaveBeenCalledWith(CHANNELS.invoke, name, request);
  });

  it('sends {} for a call made without a request', async () => {
    await (api.listModels as () => Promise<unknown>)();
    expect(fake.invoke).toHaveBeenCalledWith(CHANNELS.invoke, 'listModels', {});
  });

  it('returns what main answered', async () => {
    fake.invoke.mockResolvedValueOnce({ ok: true, value: ['m'] });
    expect(await (api.listModels as () => Promise<unknown>)()).toEqual({ ok: true, value: ['m'] });
  });
});

describe('invoke(name, request)', () => {
  it('dispatches a contract call to its named method', async () => {
    await api.invoke('unloadModel', { id: 'x' });
    expect(fake.invoke).toHaveBeenCalledWith(CHANNELS.invoke, 'unloadModel', { id: 'x' });
  });

  it('refuses anything that is not a named method, without any IPC', async () => {
    for (const name of [
      'send',
      'generate',
      'importPackage',
      'constructor',
      '__proto__',
      'toString',
      'invoke',
      42,
      null,
    ]) {
      const r = await api.invoke(name, {});
      expect(r.ok, String(name)).toBe(false);
      expect(r.error?.code).toBe('BAD_REQUEST');
    }
    expect(fake.invoke).not.toHaveBeenCalled();
  });
});

describe('generate(request, onFrame)', () => {
  function lastPort(): NodeMessagePort {
    const call = fake.postMessage.mock.calls.at(-1) as [string, unknown, NodeMessagePort[]];
    const port = call[2][0] as NodeMessagePort;
    openPorts.push(port);
    return port;
  }

  it('sends the request with a fresh MessagePort and delivers the frames posted on it', async () => {
    const frames: StreamFrame[] = [];
    const gotTwo = new Promise<void>((resolve) => {
      api.generate({ prompt: 'hi' }, (f) => {
        frames.push(f);
        if (frames.length === 2) resolve();
      });
    });
    expect(fake.postMessage).toHaveBeenCalledTimes(1);
    const [channel, request, transfer] = fake.postMessage.mock.calls[0] as [string, unknown, unknown[]];
    expect(channel).toBe(CHANNELS.generate);
    expect(request).toEqual({ prompt: 'hi' });
    expect(transfer).toHaveLength(1);
    const main = lastPort();
    main.postMessage({ type: 'accepted', requestId: 'r', modelId: 'm', promptTokens: 1, rows: 1, maxNewTokens: 4 });
    main.postMessage({ type: 'done', requestId: 'r', result: {} });
    await gotTwo;
    expect(frames.map((f) => f.type)).toEqual(['accepted', 'done']);
  });

  it("stops a generation by posting { type: 'cancel' } on its port", async () => {
    const stop = api.generate({ prompt: 'x' }, () => {});
    const main = lastPort();
    const received = new Promise<unknown>((resolve) => main.once('message', resolve));
    stop();
    expect(await received).toEqual({ type: 'cancel' });
    expect(fake.invoke).not.toHaveBeenCalled();
  });

  it('ignores frames after the terminal one', async () => {
    const frames: string[] = [];
    let done!: () => void;
    const ended = new Promise<void>((r) => (done = r));
    api.generate({ prompt: 'x' }, (f) => {
      frames.push(f.type);
      if (f.type === 'error') setTimeout(done, 20);
    });
    const main = lastPort();
    main.postMessage({ type: 'error', requestId: 'r', error: { code: 'CANCELLED', message: 'x' } });
    main.postMessage({ type: 'tokens', requestId: 'r', rows: [] });
    await ended;
    expect(frames).toEqual(['error']);
  });
});

describe('on(event, fn)', () => {
  const emit = (name: unknown, payloads: unknown) => fake.rendererListeners.get(CHANNELS.events)?.({}, name, payloads);

  it('delivers each payload of a batch to the listeners of that event until unsubscribed', () => {
    const got: unknown[] = [];
    const off = api.on('scheduler', (p) => got.push(p));
    emit('scheduler', [{ type: 'accepted' }, { type: 'admitted' }]);
    emit('budget', [{ limitBytes: 1 }]);
    expect(got).toEqual([{ type: 'accepted' }, { type: 'admitted' }]);
    off();
    emit('scheduler', [{ type: 'released' }]);
    expect(got).toHaveLength(2);
  });

  it('ignores malformed event messages and refuses unknown event names', () => {
    const got: unknown[] = [];
    api.on('budget', (p) => got.push(p));
    emit('__proto__', [{}]);
    emit('budget', 'not an array');
    expect(got).toEqual([]);
    expect(() => api.on('anything', () => {})).toThrow(/unknown event/);
  });

  it('keeps delivering when one listener throws', () => {
    const got: unknown[] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation(() => {});
    api.on('models', () => {
      throw new Error('boom');
    });
    api.on('models', (p) => got.push(p));
    emit('models', [[]]);
    expect(got).toEqual([[]]);
    spy.mockRestore();
  });
});

describe('importPackage and chooseFolder', () => {
  it('imports a path and uploads files on their own channels', async () => {
    // A folder by path is loaded: the model, with its package as an upload's answer has it.
    const model = { id: 'pkg', spec: { root: '/pkg', id: 'pkg' } };
    fake.invoke.mockResolvedValueOnce({ ok: true, value: model });
    expect(await api.importPackage({ kind: 'path', path: '/pkg' })).toEqual({
      ok: true,
      value: { root: '/pkg', spec: model.spec, model },
    });
    expect(fake.invoke).toHaveBeenLastCalledWith(CHANNELS.importPath, '/pkg');
    const files = [{ path: 'p/config.json', data: new ArrayBuffer(1) }];
    await api.importPackage({ kind: 'files', name: 'p', files });
    expect(fake.invoke).toHaveBeenLastCalledWith(CHANNELS.importFiles, { name: 'p', files });
    // Not loaded: the host is told so (its card then loads it).
    await (api.importPackage as (u: unknown, o: unknown) => Promise<unknown>)(
      { kind: 'files', name: 'p', files },
      { load: false },
    );
    expect(fake.invoke).toHaveBeenLastCalledWith(CHANNELS.importFiles, { name: 'p', files, load: false });
    // A dropped File (a Blob) crosses IPC as its bytes.
    await api.importPackage({ kind: 'files', name: 'p', files: [{ path: 'p/a.json', data: new Blob(['{}']) }] });
    const sent = fake.invoke.mock.calls.at(-1)?.[1] as { files: Array<{ path: string; data: unknown }> };
    expect(sent.files[0]?.path).toBe('p/a.json');
    expect(sent.files[0]?.data).toBeInstanceOf(ArrayBuffer);
    expect(Buffer.from(sent.files[0]?.data as ArrayBuffer).toString()).toBe('{}');
  });

  it('resolves a dropped File to its path with webUtils.getPathForFile', async () => {
    const file = { name: 'pkg' };
    await api.importPackage(file);
    expect(fake.getPathForFile).toHaveBeenCalledWith(file);
    expect(fake.invoke).toHaveBeenLastCalledWith(CHANNELS.importPath, '/dropped/pkg');
  });

  it('refuses a File without a path on disk, and anything that is not a File', async () => {
    fake.getPathForFile.mockReturnValueOnce('');
    expect((await api.importPackage({ name: 'made-in-js' })).error?.code).toBe('BAD_REQUEST');
    fake.getPathForFile.mockImplementationOnce(() => {
      throw new TypeError('not a File');
    });
    expect((await api.importPackage(42)).error?.code).toBe('BAD_REQUEST');
    expect(fake.invoke).not.toHaveBeenCalled();
  });

  it('gives the page the path of a dropped File, and "" for anything else', () => {
    expect(api.getPathForFile({ name: 'pkg' })).toBe('/dropped/pkg');
    fake.getPathForFile.mockImplementationOnce(() => {
      throw new TypeError('not a File');
    });
    expect(api.getPathForFile('nope')).toBe('');
    expect(fake.invoke).not.toHaveBeenCalled();
  });

  it('returns the chosen folder, or null when the dialog was cancelled or refused', async () => {
    fake.invoke.mockResolvedValueOnce({ ok: true, value: '/chosen' });
    expect(await api.chooseFolder()).toBe('/chosen');
    expect(fake.invoke).toHaveBeenLastCalledWith(CHANNELS.chooseFolder);
    fake.invoke.mockResolvedValueOnce({ ok: true, value: null });
    expect(await api.chooseFolder()).toBeNull();
    fake.invoke.mockResolvedValueOnce({ ok: false, error: { code: 'BAD_REQUEST', message: 'no' } });
    expect(await api.chooseFolder()).toBeNull();
  });
});
