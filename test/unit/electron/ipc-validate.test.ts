import { describe, expect, it } from 'vitest';
import {
  checkSender,
  HOST_EVENT_NAMES,
  isCallName,
  isStreamCancel,
  originOf,
  parseCallName,
  parseImportFiles,
  parseImportPath,
  type SenderInfo,
  type TrustedSender,
} from '../../../src/main/ipc/validate';
import { CallSchemas } from '../../../src/shared/api';

const trusted: TrustedSender = { webContentsId: 7, origin: 'kvdesk://app' };
const good: SenderInfo = { webContentsId: 7, frame: { url: 'kvdesk://app/index.html', isTopFrame: true } };

function codeOf(r: { ok: boolean; error?: { code: string } }): string | null {
  return r.ok ? null : (r.error?.code ?? null);
}

describe('the IPC sender check', () => {
  it("accepts the main window's top frame at the app origin", () => {
    expect(checkSender(good, trusted)).toEqual({ ok: true, value: null });
    expect(checkSender({ ...good, frame: { url: 'KVDESK://APP/x?y#z', isTopFrame: true } }, trusted).ok).toBe(true);
  });

  it('refuses another webContents (a second window, devtools, a webview)', () => {
    const r = checkSender({ ...good, webContentsId: 8 }, trusted);
    expect(codeOf(r)).toBe('BAD_REQUEST');
    expect(r.ok ? '' : r.error.message).toContain('webContents 8');
  });

  it('refuses a subframe even of the right origin', () => {
    const r = checkSender({ ...good, frame: { url: 'kvdesk://app/index.html', isTopFrame: false } }, trusted);
    expect(r.ok ? '' : r.error.message).toMatch(/top frame/);
  });

  it('refuses a frame that navigated away or was destroyed', () => {
    const r = checkSender({ ...good, frame: null }, trusted);
    expect(r.ok ? '' : r.error.message).toMatch(/navigated away|destroyed/);
  });

  it('refuses other origins, including look-alikes', () => {
    for (const url of [
      'https://evil.example/',
      'kvdesk://app.evil/index.html',
      'kvdesk://evil/app',
      'file:///work/out/renderer/index.html',
      'about:blank',
      'data:text/html,hi',
      'http://app/',
      '',
    ]) {
      expect(checkSender({ ...good, frame: { url, isTopFrame: true } }, trusted).ok, url).toBe(false);
    }
  });

  it('refuses everything while there is no window', () => {
    expect(checkSender(good, { ...trusted, webContentsId: null }).ok).toBe(false);
  });

  it('accepts the dev server origin when that is the trusted one', () => {
    const dev = { webContentsId: 7, origin: 'http://localhost:5173' };
    expect(checkSender({ ...good, frame: { url: 'http://localhost:5173/', isTopFrame: true } }, dev).ok).toBe(true);
    expect(checkSender({ ...good, frame: { url: 'http://localhost:5174/', isTopFrame: true } }, dev).ok).toBe(false);
  });

  it('computes origins for custom schemes (Node says "null" for them)', () => {
    expect(originOf('kvdesk://app/index.html')).toBe('kvdesk://app');
    expect(originOf('http://LOCALHOST:5173/a')).toBe('http://localhost:5173');
    expect(originOf('file:///x')).toBeNull();
    expect(originOf('garbage')).toBeNull();
  });
});

describe('call names', () => {
  it('accepts exactly the contract entries', () => {
    for (const name of Object.keys(CallSchemas)) expect(isCallName(name), name).toBe(true);
  });

  it('refuses prototype keys, unknown names and non-strings with BAD_REQUEST', () => {
    for (const name of [
      'constructor',
      '__proto__',
      'toString',
      'hasOwnProperty',
      'valueOf',
      'generate',
      'send',
      '',
      'LISTMODELS',
    ]) {
      expect(codeOf(parseCallName(name)), name).toBe('BAD_REQUEST');
    }
    for (const name of [undefined, null, 42, {}, ['listModels'], Symbol.iterator]) {
      expect(codeOf(parseCallName(name))).toBe('BAD_REQUEST');
    }
    const r = parseCallName('nope');
    expect(r.ok ? '' : r.error.message).toContain('listModels');
  });
});

describe('import inputs', () => {
  it('accepts a folder path', () => {
    expect(parseImportPath('/home/me/models/tiny')).toEqual({ ok: true, value: '/home/me/models/tiny' });
  });

  it('refuses non-strings, empty, over-long and NUL paths', () => {
    for (const raw of [undefined, null, 1, {}, ['x'], '', 'a'.repeat(4097), '/tmp/a\0b']) {
      expect(codeOf(parseImportPath(raw))).toBe('BAD_REQUEST');
    }
    expect(parseImportPath('a'.repeat(4096)).ok).toBe(true);
  });

  it('accepts files as ArrayBuffers or typed arrays and hands over Uint8Arrays', () => {
    const buf = new Uint8Array([1, 2, 3, 4]);
    const r = parseImportFiles({
      name: 'tiny',
      files: [
        { path: 'tiny/config.json', data: new ArrayBuffer(2) },
        { path: 'tiny/model.onnx', data: buf.subarray(1, 3) },
      ],
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.name).toBe('tiny');
    expect(r.value.files.map((f) => f.data.byteLength)).toEqual([2, 2]);
    expect([...(r.value.files[1]?.data ?? [])]).toEqual([2, 3]);
    expect(r.value.files.every((f) => f.data instanceof Uint8Array)).toBe(true);
  });

  it('refuses malformed uploads with BAD_REQUEST', () => {
    const ok = { path: 'a', data: new ArrayBuffer(1) };
    for (const raw of [
      null,
      'x',
      { files: [ok] },
      { name: '', files: [ok] },
      { name: 'n'.repeat(256), files: [ok] },
      { name: 'x', files: 'nope' },
      { name: 'x', files: [null] },
      { name: 'x', files: [{ path: '', data: new ArrayBuffer(1) }] },
      { name: 'x', files: [{ path: 'a', data: 'bytes' }] },
      { name: 'x', files: [{ path: 'a', data: [1, 2] }] },
      { name: 'x', files: [{ path: 7, data: new ArrayBuffer(1) }] },
    ]) {
      expect(codeOf(parseImportFiles(raw)), JSON.stringify(raw)).toBe('BAD_REQUEST');
    }
  });
});

describe('stream control and events', () => {
  it("recognizes only { type: 'cancel' } as a cancel", () => {
    expect(isStreamCancel({ type: 'cancel' })).toBe(true);
    for (const m of ['cancel', null, undefined, {}, { type: 'CANCEL' }, { kind: 'cancel' }])
      expect(isStreamCancel(m)).toBe(false);
  });

  it('lists every host event', () => {
    expect([...HOST_EVENT_NAMES].sort()).toEqual([
      'apiServer',
      'budget',
      'downloads',
      'library',
      'models',
      'scheduler',
      'settings',
      'thread',
      'threadDeleted',
    ]);
  });
});
