import { EventEmitter } from 'node:events';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';

// The Electron binary is not needed (nor present everywhere): the module is replaced by recorders.
const electron = vi.hoisted(() => {
  const windows: Array<{ options: Record<string, unknown>; url: string | null; win: unknown }> = [];
  return {
    windows,
    showMessageBox: vi.fn(async () => ({ response: 0 })),
    openExternal: vi.fn(async (_url: string) => {}),
    registerSchemesAsPrivileged: vi.fn(),
    enableSandbox: vi.fn(),
    appOn: vi.fn(),
  };
});
vi.mock('electron', () => {
  class BrowserWindow {
    readonly webContents = new EventEmitter();
    constructor(options: Record<string, unknown>) {
      electron.windows.push({ options, url: null, win: this });
    }
    once() {}
    show() {}
    isDestroyed() {
      return false;
    }
    loadURL(url: string) {
      const mine = electron.windows.find((w) => w.win === this);
      if (mine) mine.url = url;
      return Promise.resolve();
    }
  }
  return {
    app: { enableSandbox: electron.enableSandbox, on: electron.appOn },
    dialog: { showMessageBox: electron.showMessageBox },
    BrowserWindow,
    protocol: { registerSchemesAsPrivileged: electron.registerSchemesAsPrivileged },
    shell: { openExternal: electron.openExternal },
  };
});

import {
  APP_ENTRY_URL,
  APP_ORIGIN,
  buildContentSecurityPolicy,
  buildWebPreferences,
  CRASH_RELOADS,
  createCrashPolicy,
  createExternalOpener,
  createMainWindow,
  decideNavigation,
  decidePermission,
  decideWindowOpen,
  hardenSession,
  hardenWebContents,
  installAppProtocol,
  isExternalWebUrl,
  registerAppScheme,
  resolveAppAsset,
} from '../../../src/main/window';
import { RECOVERED_FRAGMENT } from '../../../src/shared/api';
import { contentTypeOf } from '../../../src/shared/content-types';

beforeEach(() => {
  electron.openExternal.mockClear();
  electron.windows.length = 0;
});

/** Parses "a b c; d e" into { a: ['b','c'], d: ['e'] }. */
function parseCsp(csp: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const part of csp.split(';')) {
    const [name, ...sources] = part.trim().split(/\s+/);
    if (name) out[name] = sources;
  }
  return out;
}

describe('webPreferences', () => {
  const prefs = buildWebPreferences('/app/out/preload/index.js');

  it('isolates the context, sandboxes the renderer and gives it no Node', () => {
    expect(prefs.contextIsolation).toBe(true);
    expect(prefs.sandbox).toBe(true);
    expect(prefs.nodeIntegration).toBe(false);
    expect(prefs.nodeIntegrationInWorker).toBe(false);
    expect(prefs.nodeIntegrationInSubFrames).toBe(false);
  });

  it('keeps web security on and the risky features off', () => {
    expect(prefs.webSecurity).toBe(true);
    expect(prefs.allowRunningInsecureContent).toBe(false);
    expect(prefs.webviewTag).toBe(false);
    expect(prefs.experimentalFeatures).toBe(false);
    expect(prefs.navigateOnDragDrop).toBe(false);
  });

  it('loads the given preload and nothing else of note', () => {
    expect(prefs.preload).toBe('/app/out/preload/index.js');
    expect(prefs).not.toHaveProperty('partition');
    expect(prefs).not.toHaveProperty('additionalArguments');
  });

  it('is what createMainWindow gives the BrowserWindow', () => {
    createMainWindow({ preloadPath: '/p/index.js', url: APP_ENTRY_URL });
    expect(electron.windows).toHaveLength(1);
    expect(electron.windows[0]?.options.webPreferences).toEqual(buildWebPreferences('/p/index.js'));
    expect(electron.windows[0]?.url).toBe('kvdesk://app/index.html');
  });
});

describe('a window whose page process is gone', () => {
  it('loads the page again, saying so in its fragment; a page that keeps crashing is given up on, and said so', () => {
    electron.showMessageBox.mockClear();
    createMainWindow({ preloadPath: '/p/index.js', url: APP_ENTRY_URL });
    const w = electron.windows[0] as { url: string | null; win: { webContents: EventEmitter } };
    const gone = (reason: string) => w.win.webContents.emit('render-process-gone', {}, { reason, exitCode: 1 });
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      w.url = null;
      gone('clean-exit');
      expect(w.url).toBeNull();
      for (let i = 0; i < CRASH_RELOADS; i++) {
        w.url = null;
        gone(i === 0 ? 'oom' : 'crashed');
        expect(w.url).toBe(`${APP_ENTRY_URL}${RECOVERED_FRAGMENT}`);
      }
      w.url = null;
      gone('crashed');
      expect(w.url).toBeNull();
      expect(electron.showMessageBox).toHaveBeenCalledTimes(1);
      const [parent, box] = electron.showMessageBox.mock.calls[0] as unknown as [unknown, { message: string }];
      expect(parent).toBe(w.win);
      expect(box.message).toMatch(/stopped \(crashed\) 4 times within a minute/);
    } finally {
      stderr.mockRestore();
    }
  });

  it('the policy: a clean exit is nothing; reloads at most CRASH_RELOADS times a minute, then again once it passed', () => {
    let t = 0;
    const policy = createCrashPolicy(() => t);
    expect(policy('clean-exit')).toBe('none');
    for (let i = 0; i < CRASH_RELOADS; i++) {
      expect(policy('crashed')).toBe('reload');
      t += 10_000;
    }
    expect(policy('killed')).toBe('give-up');
    // The first crash a minute ago no longer counts.
    t = 60_000;
    expect(policy('crashed')).toBe('reload');
    expect(policy('crashed')).toBe('give-up');
  });
});

describe('Content-Security-Policy', () => {
  const csp = parseCsp(buildContentSecurityPolicy());

  it("defaults to 'self' and runs scripts from the app only (no inline, no eval, nothing remote)", () => {
    expect(csp['default-src']).toEqual(["'self'"]);
    expect(csp['script-src']).toEqual(["'self'"]);
  });

  it('limits connections to the app origin and refuses plugins, frames, base and form targets', () => {
    expect(csp['connect-src']).toEqual(["'self'"]);
    expect(csp['object-src']).toEqual(["'none'"]);
    expect(csp['frame-src']).toEqual(["'none'"]);
    expect(csp['frame-ancestors']).toEqual(["'none'"]);
    expect(csp['base-uri']).toEqual(["'none'"]);
    expect(csp['form-action']).toEqual(["'none'"]);
  });

  it('names no remote host and no wildcard anywhere', () => {
    const all = Object.values(csp).flat();
    expect(all.filter((s) => /^(https?:|wss?:|\*)/.test(s) || s.includes('*'))).toEqual([]);
    expect(all).not.toContain("'unsafe-eval'");
  });

  it('adds the dev server (and its HMR socket) only when asked', () => {
    const dev = parseCsp(buildContentSecurityPolicy({ devServerOrigin: 'http://localhost:5173' }));
    expect(dev['script-src']).toContain('http://localhost:5173');
    expect(dev['connect-src']).toEqual(["'self'", 'http://localhost:5173', 'ws://localhost:5173']);
  });
});

describe('navigation and window.open', () => {
  it('lets the app navigate within its own origin only', () => {
    expect(decideNavigation('kvdesk://app/index.html?x=1', APP_ORIGIN)).toEqual({ allow: true, openExternal: null });
    expect(decideNavigation('kvdesk://other/index.html', APP_ORIGIN).allow).toBe(false);
    expect(decideNavigation('file:///etc/passwd', APP_ORIGIN)).toEqual({ allow: false, openExternal: null });
    expect(decideNavigation('javascript:alert(1)', APP_ORIGIN)).toEqual({ allow: false, openExternal: null });
    expect(decideNavigation('not a url', APP_ORIGIN)).toEqual({ allow: false, openExternal: null });
  });

  it('sends web links to the OS browser instead of navigating', () => {
    expect(decideNavigation('https://example.org/docs', APP_ORIGIN)).toEqual({
      allow: false,
      openExternal: 'https://example.org/docs',
    });
  });

  it('never opens a window; only http(s) links go to the OS browser', () => {
    expect(decideWindowOpen('https://example.org/')).toEqual({ action: 'deny', openExternal: 'https://example.org/' });
    expect(decideWindowOpen('http://localhost:1/')).toEqual({ action: 'deny', openExternal: 'http://localhost:1/' });
    for (const url of [
      'kvdesk://app/index.html',
      'file:///tmp/x',
      'javascript:void 0',
      'smb://host/share',
      'about:blank',
    ]) {
      expect(decideWindowOpen(url)).toEqual({ action: 'deny', openExternal: null });
    }
  });

  it('classifies external URLs strictly', () => {
    expect(isExternalWebUrl('https://a.b/')).toBe(true);
    expect(isExternalWebUrl('ftp://a.b/')).toBe(false);
    expect(isExternalWebUrl('mailto:x@y.z')).toBe(false);
    expect(isExternalWebUrl('')).toBe(false);
  });

  it('opens one click once even when two navigation events report it', () => {
    const opened: string[] = [];
    let t = 0;
    const open = createExternalOpener(
      (u) => opened.push(u),
      () => t,
    );
    expect(open('https://x.org/')).toBe(true);
    expect(open('https://x.org/')).toBe(false);
    expect(open('file:///x')).toBe(false);
    expect(open(null)).toBe(false);
    t = 5000;
    expect(open('https://x.org/')).toBe(true);
    expect(opened).toEqual(['https://x.org/', 'https://x.org/']);
  });

  it('wires the decisions into a webContents', () => {
    const contents = new EventEmitter() as EventEmitter & {
      setWindowOpenHandler: (h: (d: { url: string }) => unknown) => void;
    };
    let openHandler: ((d: { url: string }) => unknown) | null = null;
    contents.setWindowOpenHandler = (h) => {
      openHandler = h;
    };
    hardenWebContents(contents as never, APP_ORIGIN);

    const nav = (event: string, url: string, extra: Record<string, unknown> = {}) => {
      const e = { url, preventDefault: vi.fn(), ...extra };
      contents.emit(event, e);
      return e.preventDefault;
    };
    expect(nav('will-navigate', 'https://example.org/a')).toHaveBeenCalled();
    expect(nav('will-frame-navigate', 'https://example.org/a', { isMainFrame: true })).toHaveBeenCalled();
    expect(electron.openExternal).toHaveBeenCalledTimes(1);
    expect(nav('will-navigate', 'kvdesk://app/index.html')).not.toHaveBeenCalled();
    expect(nav('will-redirect', 'https://evil.example/')).toHaveBeenCalled();
    expect(nav('will-frame-navigate', 'https://sub.example/', { isMainFrame: false })).toHaveBeenCalled();
    expect(electron.openExternal).toHaveBeenCalledTimes(1);

    expect(openHandler).not.toBeNull();
    expect((openHandler as unknown as (d: { url: string }) => unknown)({ url: 'https://w.example/' })).toEqual({
      action: 'deny',
    });
    expect(electron.openExternal).toHaveBeenLastCalledWith('https://w.example/');

    const webview = { preventDefault: vi.fn() };
    contents.emit('will-attach-webview', webview);
    expect(webview.preventDefault).toHaveBeenCalled();
  });
});

describe('permissions', () => {
  it('refuses every permission request', () => {
    for (const p of [
      'media',
      'geolocation',
      'notifications',
      'openExternal',
      'clipboard-read',
      'fullscreen',
      'hid',
      'unknown',
    ]) {
      expect(decidePermission(p, 'kvdesk://app/index.html', APP_ORIGIN)).toBe(false);
    }
  });

  it('allows clipboard writes (copy buttons) for the app origin only', () => {
    expect(decidePermission('clipboard-sanitized-write', 'kvdesk://app/index.html', APP_ORIGIN)).toBe(true);
    expect(decidePermission('clipboard-sanitized-write', 'https://evil.example/', APP_ORIGIN)).toBe(false);
    expect(decidePermission('clipboard-sanitized-write', undefined, APP_ORIGIN)).toBe(false);
  });

  it('installs the handlers on the session and refuses downloads', () => {
    const installed: {
      request?: (wc: unknown, p: string, cb: (ok: boolean) => void, d: { requestingUrl?: string }) => void;
      check?: (wc: unknown, p: string, origin: string) => boolean;
      device?: () => boolean;
    } = {};
    const ses = Object.assign(new EventEmitter(), {
      setPermissionRequestHandler: (h: typeof installed.request) => {
        installed.request = h;
      },
      setPermissionCheckHandler: (h: typeof installed.check) => {
        installed.check = h;
      },
      setDevicePermissionHandler: (h: typeof installed.device) => {
        installed.device = h;
      },
    });
    hardenSession(ses as never, APP_ORIGIN);
    const { request, check, device } = installed;
    if (!request || !check || !device) throw new Error('hardenSession installed no handlers');
    const answers: boolean[] = [];
    const wc = { getURL: () => 'kvdesk://app/index.html' };
    request(wc, 'media', (ok) => answers.push(ok), {});
    request(wc, 'clipboard-sanitized-write', (ok) => answers.push(ok), {});
    request(wc, 'clipboard-sanitized-write', (ok) => answers.push(ok), { requestingUrl: 'https://evil.example/' });
    expect(answers).toEqual([false, true, false]);
    expect(check(wc, 'geolocation', 'kvdesk://app')).toBe(false);
    expect(device()).toBe(false);
    const download = (url: string) => {
      const event = { preventDefault: vi.fn() };
      ses.emit('will-download', event, { getURL: () => url });
      return event.preventDefault.mock.calls.length > 0 ? 'refused' : 'asked where';
    };
    // A chat saved from the app (its own blob: URL, Electron asks where to save it); nothing else.
    expect(download('blob:kvdesk://app/6f1c0e2a-5b1d-4e7a-9d1b-1f2e3d4c5b6a')).toBe('asked where');
    expect(download('https://evil.example/payload.exe')).toBe('refused');
    expect(download('blob:https://evil.example/6f1c0e2a')).toBe('refused');
    expect(download('blob:kvdesk://app.evil/6f1c0e2a')).toBe('refused');
    expect(download('data:text/plain,hi')).toBe('refused');
  });
});

describe('the kvdesk:// renderer protocol', () => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-renderer-'));
  mkdirSync(path.join(root, 'assets'));
  writeFileSync(path.join(root, 'index.html'), '<!doctype html><title>kvdesk</title>');
  writeFileSync(path.join(root, 'assets', 'app.js'), 'console.log(1)');

  it('registers a standard, secure scheme', () => {
    registerAppScheme();
    expect(electron.registerSchemesAsPrivileged).toHaveBeenCalledWith([
      expect.objectContaining({
        scheme: 'kvdesk',
        privileges: expect.objectContaining({ standard: true, secure: true }),
      }),
    ]);
  });

  it('maps app URLs into the build folder', () => {
    expect(resolveAppAsset(root, 'kvdesk://app/')).toEqual({
      file: path.join(root, 'index.html'),
      contentType: 'text/html; charset=utf-8',
    });
    expect(resolveAppAsset(root, 'kvdesk://app/assets/app.js?v=1')?.file).toBe(path.join(root, 'assets', 'app.js'));
    expect(resolveAppAsset(root, 'kvdesk://app/assets/app.js')?.contentType).toBe('text/javascript; charset=utf-8');
  });

  it('refuses anything that leaves the build folder or is not ours', () => {
    for (const url of [
      'kvdesk://app/assets/%2e%2e%2f%2e%2e%2fsecret',
      'kvdesk://app/%2e%2e%2fsecret',
      'kvdesk://app/a%5c..%5c..%5csecret',
      'kvdesk://app/x%00.js',
      'kvdesk://app/%E0%A4%A',
      'kvdesk://other/index.html',
      'https://app/index.html',
      'nonsense',
    ]) {
      expect(resolveAppAsset(root, url), url).toBeNull();
    }
  });

  it('keeps plain dot segments inside the build folder (the URL parser resolves them first)', () => {
    for (const url of ['kvdesk://app/../secret', 'kvdesk://app/%2e%2e/secret', 'kvdesk://app/assets/../../../secret']) {
      expect(resolveAppAsset(root, url)?.file, url).toBe(path.join(root, 'secret'));
    }
  });

  it('never sniffs unknown files into script', () => {
    expect(contentTypeOf('x.bin')).toBe('application/octet-stream');
    expect(contentTypeOf('x.CSS')).toBe('text/css; charset=utf-8');
  });

  it('serves files with the CSP header and 404s the rest', async () => {
    let handler: ((r: { url: string }) => Promise<Response>) | null = null;
    const ses = { protocol: { handle: (_s: string, h: typeof handler) => (handler = h) } };
    installAppProtocol(ses as never, root, "default-src 'self'");
    const h = handler as unknown as (r: { url: string }) => Promise<Response>;
    const ok = await h({ url: 'kvdesk://app/index.html' });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-security-policy')).toBe("default-src 'self'");
    expect(ok.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await ok.text()).toContain('<title>kvdesk</title>');
    const missing = await h({ url: 'kvdesk://app/nope.js' });
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-security-policy')).toBe("default-src 'self'");
    expect((await h({ url: 'kvdesk://app/../../etc/passwd' })).status).toBe(404);
  });
});
