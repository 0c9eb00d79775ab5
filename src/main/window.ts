/**
 * The main window and everything that keeps web content in its box
 * (ARCHITECTURE.md, "Electron security (non-negotiable)"): isolated, sandboxed
 * renderers without Node, a strict Content-Security-Policy, no navigation, no
 * new windows, no permissions, no downloads, no <webview>.
 *
 * The renderer is served from a privileged custom scheme (kvdesk://app/) rather
 * than file://, so it has a real origin that the IPC sender check and the CSP
 * can name, and so the CSP travels as a response header on every document.
 *
 * The decisions are pure exported functions (unit-tested without the Electron
 * binary); the Electron glue at the bottom only wires them up.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import {
  app,
  BrowserWindow,
  dialog,
  protocol,
  type Session,
  shell,
  type WebContents,
  type WebPreferences,
} from 'electron';
import { RECOVERED_FRAGMENT } from '../shared/api';
import { contentTypeOf } from '../shared/content-types';
import { originOf } from './ipc/validate';

/** Scheme the renderer is served from. */
export const APP_SCHEME = 'kvdesk';
/** Host part of the renderer's URLs. */
export const APP_HOST = 'app';
/** Origin of the renderer (the only origin IPC accepts in a production run). */
export const APP_ORIGIN = `${APP_SCHEME}://${APP_HOST}`;
/** The document the window loads. */
export const APP_ENTRY_URL = `${APP_ORIGIN}/index.html`;

/** The only permission the renderer may get: writing sanitized text to the clipboard (copy buttons). */
const ALLOWED_PERMISSIONS: ReadonlySet<string> = new Set(['clipboard-sanitized-write']);

/**
 * webPreferences of every kvdesk window. Pure so a unit test can check it
 * without the binary: isolation, sandbox, no Node anywhere, web security on.
 */
export function buildWebPreferences(preloadPath: string): WebPreferences {
  return {
    preload: preloadPath,
    contextIsolation: true,
    sandbox: true,
    nodeIntegration: false,
    nodeIntegrationInWorker: false,
    nodeIntegrationInSubFrames: false,
    webSecurity: true,
    allowRunningInsecureContent: false,
    webviewTag: false,
    experimentalFeatures: false,
    // A folder dropped outside the drop zone must not turn into a navigation to file://.
    navigateOnDragDrop: false,
    safeDialogs: true,
    spellcheck: false,
  };
}

/**
 * The Content-Security-Policy of the renderer. Scripts only from the app's own
 * origin (no inline script, no eval, nothing remote); the renderer talks to the
 * host through the preload, so connect-src is the app origin only. Inline
 * styles are allowed: they cannot run code, and React and the virtualized list
 * set element styles. `devServerOrigin` (electron-vite dev only) adds the Vite
 * server and its HMR socket, plus the inline React-refresh preamble.
 */
export function buildContentSecurityPolicy(options: { devServerOrigin?: string } = {}): string {
  const dev = options.devServerOrigin;
  const devWs = dev ? dev.replace(/^http/, 'ws') : undefined;
  const directives: Array<[string, string[]]> = [
    ['default-src', ["'self'"]],
    ['script-src', dev ? ["'self'", "'unsafe-inline'", dev] : ["'self'"]],
    ['style-src', ["'self'", "'unsafe-inline'"]],
    ['img-src', ["'self'", 'data:', 'blob:']],
    ['font-src', ["'self'", 'data:']],
    ['connect-src', dev && devWs ? ["'self'", dev, devWs] : ["'self'"]],
    ['worker-src', ["'self'"]],
    ['media-src', ["'none'"]],
    ['object-src', ["'none'"]],
    ['frame-src', ["'none'"]],
    ['child-src', ["'none'"]],
    ['frame-ancestors', ["'none'"]],
    ['base-uri', ["'none'"]],
    ['form-action', ["'none'"]],
  ];
  return directives.map(([name, sources]) => `${name} ${sources.join(' ')}`).join('; ');
}

/** True for URLs the OS browser may open: http and https only (no file:, javascript:, custom schemes). */
export function isExternalWebUrl(url: string): boolean {
  try {
    const u = new URL(url);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.host !== '';
  } catch {
    return false;
  }
}

/** What to do with a navigation the renderer started. */
export interface NavigationDecision {
  /** Only navigations inside the app's own origin go ahead. */
  allow: boolean;
  /** A web link the OS browser should open instead, or null. */
  openExternal: string | null;
}

/** Decides a `will-navigate` / `will-redirect`: stay inside `appOrigin`; web links go to the OS browser. */
export function decideNavigation(url: string, appOrigin: string): NavigationDecision {
  const origin = originOf(url);
  if (origin !== null && origin === appOrigin.toLowerCase()) return { allow: true, openExternal: null };
  return { allow: false, openExternal: isExternalWebUrl(url) ? url : null };
}

/** Decides a `window.open` / target=_blank: never a new window; web links go to the OS browser. */
export function decideWindowOpen(url: string): { action: 'deny'; openExternal: string | null } {
  return { action: 'deny', openExternal: isExternalWebUrl(url) ? url : null };
}

/**
 * Decides a permission request or check: everything is refused except writing
 * sanitized text to the clipboard, and that only for the app's own origin.
 */
export function decidePermission(permission: string, requestingUrl: string | undefined, appOrigin: string): boolean {
  if (!ALLOWED_PERMISSIONS.has(permission)) return false;
  return requestingUrl !== undefined && originOf(requestingUrl) === appOrigin.toLowerCase();
}

/**
 * Maps a kvdesk://app/… request to a file inside the renderer build, or null
 * when it is not ours or would leave the build folder (`..`, encoded slashes,
 * NUL bytes, absolute paths).
 */
export function resolveAppAsset(rendererDir: string, requestUrl: string): { file: string; contentType: string } | null {
  let u: URL;
  try {
    u = new URL(requestUrl);
  } catch {
    return null;
  }
  if (u.protocol !== `${APP_SCHEME}:` || u.host !== APP_HOST) return null;
  let rel: string;
  try {
    rel = decodeURIComponent(u.pathname);
  } catch {
    return null;
  }
  if (rel.includes('\0') || rel.includes('\\')) return null;
  if (rel === '' || rel === '/') rel = '/index.html';
  const root = path.resolve(rendererDir);
  const file = path.resolve(root, `.${rel}`);
  const inside = path.relative(root, file);
  if (inside === '' || inside.startsWith('..') || path.isAbsolute(inside)) return null;
  return { file, contentType: contentTypeOf(file) };
}

// ---------------------------------------------------------------- Electron glue

/** Registers kvdesk:// as a standard, secure scheme. Must run before the app is ready. */
export function registerAppScheme(): void {
  protocol.registerSchemesAsPrivileged([
    {
      scheme: APP_SCHEME,
      privileges: { standard: true, secure: true, supportFetchAPI: true, corsEnabled: true, codeCache: true },
    },
  ]);
}

/** Serves the renderer build on kvdesk://app/ with the CSP and no-sniff headers on every response. */
export function installAppProtocol(ses: Session, rendererDir: string, csp: string): void {
  const headers = (contentType: string): Record<string, string> => ({
    'content-type': contentType,
    'content-security-policy': csp,
    'x-content-type-options': 'nosniff',
    'cache-control': 'no-cache',
  });
  ses.protocol.handle(APP_SCHEME, async (request) => {
    const asset = resolveAppAsset(rendererDir, request.url);
    if (asset) {
      try {
        return new Response(await readFile(asset.file), { status: 200, headers: headers(asset.contentType) });
      } catch {
        // Missing file: fall through to 404.
      }
    }
    return new Response('not found', { status: 404, headers: headers('text/plain; charset=utf-8') });
  });
}

/**
 * Opens web links in the OS browser, at most once per URL within `windowMs`:
 * `will-navigate` and `will-frame-navigate` can both report the same click.
 */
export function createExternalOpener(
  open: (url: string) => void,
  now: () => number = Date.now,
  windowMs = 1000,
): (url: string | null) => boolean {
  let last: { url: string; at: number } | null = null;
  return (url) => {
    if (url === null || !isExternalWebUrl(url)) return false;
    const t = now();
    if (last && last.url === url && t - last.at < windowMs) return false;
    last = { url, at: t };
    open(url);
    return true;
  };
}

/**
 * Permission requests and checks denied (see decidePermission); downloads refused but the app's own files (a chat
 * saved as Markdown or JSON: a `blob:` URL of the app's origin, which Electron then asks where to save).
 */
export function hardenSession(ses: Session, appOrigin: string): void {
  ses.setPermissionRequestHandler((contents, permission, callback, details) => {
    callback(decidePermission(permission, details.requestingUrl ?? contents.getURL(), appOrigin));
  });
  ses.setPermissionCheckHandler((_contents, permission, requestingOrigin) =>
    decidePermission(permission, requestingOrigin, appOrigin),
  );
  ses.setDevicePermissionHandler(() => false);
  ses.on('will-download', (event, item) => {
    if (!item.getURL().toLowerCase().startsWith(`blob:${appOrigin.toLowerCase()}/`)) event.preventDefault();
  });
}

/** Adds the CSP header to dev-server documents (electron-vite dev only; production uses the protocol handler). */
export function applyDevCsp(ses: Session, devServerOrigin: string, csp: string): void {
  ses.webRequest.onHeadersReceived((details, callback) => {
    if (originOf(details.url) !== devServerOrigin.toLowerCase()) {
      callback({});
      return;
    }
    callback({ responseHeaders: { ...details.responseHeaders, 'Content-Security-Policy': [csp] } });
  });
}

/** Navigation, redirects, new windows and <webview> denied for one webContents. */
export function hardenWebContents(contents: WebContents, appOrigin: string): void {
  const openExternally = createExternalOpener((url) => void shell.openExternal(url));
  const onNavigate = (event: { url: string; preventDefault(): void }, mayOpen: boolean) => {
    const decision = decideNavigation(event.url, appOrigin);
    if (decision.allow) return;
    event.preventDefault();
    if (mayOpen) openExternally(decision.openExternal);
  };
  contents.on('will-navigate', (event) => onNavigate(event, true));
  contents.on('will-frame-navigate', (event) => onNavigate(event, event.isMainFrame));
  contents.on('will-redirect', (event) => onNavigate(event, false));
  contents.setWindowOpenHandler(({ url }) => {
    const decision = decideWindowOpen(url);
    openExternally(decision.openExternal);
    return { action: decision.action };
  });
  contents.on('will-attach-webview', (event) => event.preventDefault());
}

/** Times within CRASH_WINDOW_MS the window's page is loaded again after its process was gone, before giving up. */
export const CRASH_RELOADS = 3;
const CRASH_WINDOW_MS = 60_000;

/**
 * What to do when the window's page process is gone (`render-process-gone`'s reason): load the page again, or, when
 * it was gone CRASH_RELOADS times within a minute already, give up (a page that crashes as it loads would loop);
 * nothing for a clean exit.
 */
export function createCrashPolicy(now: () => number = Date.now): (reason: string) => 'reload' | 'give-up' | 'none' {
  const times: number[] = [];
  return (reason) => {
    if (reason === 'clean-exit') return 'none';
    const t = now();
    while (times.length > 0 && t - (times[0] as number) >= CRASH_WINDOW_MS) times.shift();
    if (times.length >= CRASH_RELOADS) return 'give-up';
    times.push(t);
    return 'reload';
  };
}

/** Where the window's renderer comes from. */
export interface WindowSource {
  /** Absolute path of the built preload (out/preload/index.js). */
  preloadPath: string;
  /** URL to load: APP_ENTRY_URL, or the electron-vite dev server. */
  url: string;
  /** The window's icon (resources/icon.png; macOS takes the app bundle's instead). */
  iconPath?: string;
}

/** Creates the main window; it shows itself once the first paint is ready. */
export function createMainWindow(source: WindowSource): BrowserWindow {
  const win = new BrowserWindow({
    width: 1320,
    height: 860,
    minWidth: 880,
    minHeight: 560,
    show: false,
    title: 'kvdesk',
    ...(source.iconPath ? { icon: source.iconPath } : {}),
    backgroundColor: '#111318',
    webPreferences: buildWebPreferences(source.preloadPath),
  });
  win.once('ready-to-show', () => win.show());
  // A page whose process crashed (or was killed for memory) is loaded again, not left blank: the replies it was
  // streaming were stopped with it (their KV kept), their text saved up to the last second.
  const crashed = createCrashPolicy();
  win.webContents.on('render-process-gone', (_event, details) => {
    const what = crashed(details.reason);
    if (what === 'none' || win.isDestroyed()) return;
    process.stderr.write(
      `kvdesk: the window's page stopped (${details.reason}, exit code ${details.exitCode})${what === 'reload' ? '; loading it again' : ''}\n`,
    );
    if (what === 'reload') {
      // (A page that crashes as it loads rejects the load: the next crash comes here again.)
      win.loadURL(source.url + RECOVERED_FRAGMENT).catch(() => {});
    } else {
      // Not showErrorBox: that one blocks this process, the host and its API server with it, until answered.
      void dialog.showMessageBox(win, {
        type: 'error',
        title: 'kvdesk',
        message: `The window's page stopped (${details.reason}) ${CRASH_RELOADS + 1} times within a minute, so kvdesk does not load it again.`,
        detail:
          'Your chats are saved. Quit kvdesk and start it again; if it keeps happening, start it from a terminal (npm start) and report what it prints.',
      });
    }
  });
  void win.loadURL(source.url);
  return win;
}

/** Applies the per-app policies: sandbox for every renderer, hardened webContents. Call before ready. */
export function hardenApp(appOrigin: () => string): void {
  app.enableSandbox();
  app.on('web-contents-created', (_event, contents) => hardenWebContents(contents, appOrigin()));
}
