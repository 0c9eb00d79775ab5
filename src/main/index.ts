/**
 * Electron composition root (the only file that creates windows): one
 * instance per user-data folder, the host (RunnerService + HostApi, the engine
 * in its own process), the IPC adapter, the hardened window, and a clean quit
 * that stops every generation and the engine.
 *
 * The engine process: RunnerService's EngineClient forks out/main/engine.js
 * with child_process.fork. Inside Electron's main process, fork runs the
 * Electron binary itself with ELECTRON_RUN_AS_NODE=1 added to the child's
 * environment (Electron patches fork to do so), so the engine is a plain Node
 * process with onnxruntime-node (an N-API addon) loaded there, never here.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { app, type BrowserWindow, session } from 'electron';
import { toErrorInfo } from '../shared/errors';
import { createHostApi, type HostApi } from './host/host-api';
import { RunnerService } from './host/runner-service';
import { type IpcHandle, registerIpc } from './ipc';
import { originOf } from './ipc/validate';
import { API_KEY_FILE, createApiServerControl } from './server';
import { chooseDataDir, dataDirFlag } from './store/data-dir';
import { dataFolderId } from './store/data-id';
import {
  APP_ENTRY_URL,
  APP_ORIGIN,
  applyDevCsp,
  buildContentSecurityPolicy,
  createMainWindow,
  hardenApp,
  hardenSession,
  installAppProtocol,
  registerAppScheme,
} from './window';

/** The host gets this long to stop generations and the engine on quit. */
const SHUTDOWN_TIMEOUT_MS = 5000;
/** The window gets this long to close (its page's last save) before the host closes. */
const WINDOW_CLOSE_MS = 1000;

// One data folder for the window and `kvdesk serve` (the browser UI `npm start` falls back to): --data-dir,
// $KVDESK_DATA_DIR, else ~/.kvdesk, or Electron's userData where only that one holds kvdesk data (chooseDataDir). Tests
// and side-by-side runs get their own (and with it their own single-instance lock).
try {
  const choice = chooseDataDir({ flag: dataDirFlag(process.argv.slice(1)), legacy: app.getPath('userData') });
  if (choice.note !== undefined) process.stderr.write(`${choice.note}\n`);
  app.setPath('userData', choice.dir);
} catch (err) {
  process.stderr.write(`kvdesk: ${toErrorInfo(err).message}\n`);
  process.exit(2);
}

// electron-vite dev serves the renderer over HTTP; a packaged or `npm start` run uses the built files.
const devServerUrl = !app.isPackaged ? process.env.ELECTRON_RENDERER_URL : undefined;
const devServerOrigin = devServerUrl ? originOf(devServerUrl) : null;
const trustedOrigin = devServerOrigin ?? APP_ORIGIN;

registerAppScheme();
hardenApp(() => trustedOrigin);

/** A file of resources/: next to the app when packaged, in the checkout otherwise. */
function resourcePath(...parts: string[]): string {
  return app.isPackaged
    ? path.join(process.resourcesPath, ...parts)
    : path.join(app.getAppPath(), 'resources', ...parts);
}

/** Where the default model package lives. */
function defaultModelDir(): string {
  return resourcePath('models', 'default');
}

let mainWindow: BrowserWindow | null = null;
let runner: RunnerService | null = null;
let hostPromise: Promise<HostApi> | null = null;
/** The host, once up (hostPromise settled with it). */
let hostUp: HostApi | null = null;
let ipc: IpcHandle | null = null;
let apiServer: ReturnType<typeof createApiServerControl> | null = null;

function openWindow(): BrowserWindow {
  const win = createMainWindow({
    preloadPath: path.join(__dirname, '../preload/index.js'),
    url: devServerUrl ?? APP_ENTRY_URL,
    iconPath: resourcePath('icon.png'),
  });
  mainWindow = win;
  ipc?.attachWindow(win);
  win.on('closed', () => {
    if (mainWindow === win) mainWindow = null;
  });
  return win;
}

function focusWindow(): void {
  const win = mainWindow ?? openWindow();
  if (win.isMinimized()) win.restore();
  win.focus();
}

async function start(): Promise<void> {
  const ses = session.defaultSession;
  const csp = buildContentSecurityPolicy(devServerOrigin ? { devServerOrigin } : {});
  hardenSession(ses, trustedOrigin);
  installAppProtocol(ses, path.join(__dirname, '../renderer'), csp);
  if (devServerOrigin) applyDevCsp(ses, devServerOrigin, csp);

  const engineEntry = path.join(__dirname, 'engine.js');
  runner = new RunnerService(existsSync(engineEntry) ? { engineEntry } : {});
  const modelDir = defaultModelDir();
  const log = (line: string) => process.stderr.write(`${line}\n`);
  // The HTTP API beside the window (Models view → API server), over this same host.
  const control = createApiServerControl({
    host: () => hostPromise ?? Promise.reject(new Error('the host is not running')),
    keyFile: path.join(app.getPath('userData'), API_KEY_FILE),
    staticDir: path.join(__dirname, '../renderer'),
    dataId: () => dataFolderId(app.getPath('userData'), log),
    log,
  });
  apiServer = control;
  hostPromise = createHostApi({
    runner,
    dataDir: app.getPath('userData'),
    ...(existsSync(modelDir) ? { defaultModelDir: modelDir } : {}),
    apiServer: control,
  });
  hostPromise.then(
    (h) => {
      hostUp = h;
    },
    (err) => {
      process.stderr.write(`kvdesk: the host did not start: ${toErrorInfo(err).message}\n`);
    },
  );
  // A server the person set to start with kvdesk.
  void hostPromise.then(
    async (host) => {
      const settings = await host.call('getSettings', {});
      const wanted = settings.ok ? settings.value.apiServer : undefined;
      // Up only as kvdesk quits (the load cut short): nothing starts.
      if (!wanted?.autostart || quitState !== 'running') return;
      // Through the host, so the window hears that it runs.
      const started = await host.call('startApiServer', {
        port: wanted.port,
        ...(wanted.lan !== undefined ? { lan: wanted.lan } : {}),
        ...(wanted.requireKey !== undefined ? { requireKey: wanted.requireKey } : {}),
        ...(wanted.cors !== undefined ? { cors: wanted.cors } : {}),
      });
      if (!started.ok) log(`kvdesk: the API server did not start on port ${wanted.port}: ${started.error.message}`);
    },
    () => {},
  );
  if (!existsSync(modelDir)) {
    process.stderr.write(
      `kvdesk: no default model at ${modelDir}; generate it with \`npm run generate:models -- --default\`, or drop a package on the window\n`,
    );
  }
  // The window opens at once; calls made while the default model loads wait for the host.
  ipc = registerIpc({ host: hostPromise, getWindow: () => mainWindow, trustedOrigin });
  openWindow();
}

let quitState: 'running' | 'closing' | 'closed' = 'running';

/**
 * Closes the window, waiting at most a second: its page's last save (on pagehide: the reply streaming, written at
 * most once a second) reaches the host while IPC still answers, and its streams end as a closed window's do.
 */
function closeWindow(): Promise<void> {
  const win = mainWindow;
  if (win === null || win.isDestroyed()) return Promise.resolve();
  return new Promise<void>((resolve) => {
    win.once('closed', () => resolve());
    setTimeout(resolve, WINDOW_CLOSE_MS).unref();
    win.close();
  });
}

/** Closes the window, then stops every stream (releasing its reservation), then the host and its engine process. */
async function shutdown(): Promise<void> {
  await closeWindow();
  ipc?.dispose();
  const closing = (async () => {
    await apiServer?.close().catch(() => {});
    if (hostUp) {
      await hostUp.close();
      return;
    }
    // Not up yet: the default model loads (seconds, minutes for a large one), its engine blocked in onnxruntime.
    // The runner stops the engine under the load now; the host, up once the load has failed, closes the rest.
    await runner?.close();
    const late = hostPromise ? await hostPromise.catch(() => null) : null;
    await late?.close();
  })();
  const timeout = new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_TIMEOUT_MS).unref());
  await Promise.race([closing.catch(() => {}), timeout]);
}

if (!app.requestSingleInstanceLock()) {
  // Another kvdesk owns this data folder; it focuses its window (second-instance) and we leave.
  app.quit();
} else {
  app.on('second-instance', () => {
    // (While quitting, a window would open without IPC, and close with the app.)
    if (app.isReady() && quitState === 'running') focusWindow();
  });
  app.on('window-all-closed', () => {
    // macOS keeps apps alive without windows; the engine stays loaded for the next window.
    if (process.platform !== 'darwin') app.quit();
  });
  app.on('activate', () => {
    if (app.isReady() && mainWindow === null && quitState === 'running') openWindow();
  });
  app.on('before-quit', (event) => {
    if (quitState === 'closed') return;
    event.preventDefault();
    if (quitState === 'closing') return;
    quitState = 'closing';
    void shutdown().finally(() => {
      quitState = 'closed';
      app.quit();
    });
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => app.quit());

  app
    .whenReady()
    .then(start)
    .catch((err: unknown) => {
      process.stderr.write(`kvdesk: the app did not start: ${toErrorInfo(err).message}\n`);
      app.exit(1);
    });
}
