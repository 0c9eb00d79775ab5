/**
 * The Electron adapter: the only module that touches ipcMain. Every message is
 * checked for its sender (the main window's top frame at the app's origin)
 * and its input (call name here, the request by HostApi), then forwarded to
 * HostApi. No business logic: refusals come back in the Result envelope.
 */
import { BrowserWindow, dialog, type IpcMainEvent, type IpcMainInvokeEvent, ipcMain, type WebContents } from 'electron';
import type { Result } from '../../shared/errors';
import { toErrorInfo } from '../../shared/errors';
import type { HostApi } from '../host/host-api';
import { CHANNELS } from './channels';
import { forwardHostEvents } from './events';
import { bridgeGeneration, GenerationRegistry, type StreamPort } from './streams';
import {
  checkSender,
  parseCallName,
  parseImportFiles,
  parseImportPath,
  refusal,
  type SenderInfo,
  type TrustedSender,
} from './validate';

/** What the adapter needs from the composition root. */
export interface IpcOptions {
  /** The host; calls made while it starts wait for it. */
  host: Promise<HostApi>;
  /** The main window (the only trusted sender), or null. */
  getWindow(): BrowserWindow | null;
  /** The renderer's origin: kvdesk://app, or the dev server's in development. */
  trustedOrigin: string;
}

/** The registered adapter. */
export interface IpcHandle {
  /** Stops the generations of a window when it closes, reloads or crashes, and routes events to it. */
  attachWindow(win: BrowserWindow): void;
  /** Cancels the generations a webContents started; returns how many. */
  cancelGenerationsOf(webContentsId: number): number;
  /** Removes every handler and cancels every stream (app quitting). */
  dispose(): void;
}

function senderOf(event: IpcMainEvent | IpcMainInvokeEvent): SenderInfo {
  let frame: SenderInfo['frame'] = null;
  try {
    const f = event.senderFrame;
    if (f && !f.isDestroyed()) frame = { url: f.url, isTopFrame: f.parent === null };
  } catch {
    // A frame disposed between the message and this handler: treated as gone.
  }
  return { webContentsId: event.sender.id, frame };
}

/** Registers every IPC handler of kvdesk. Call once, after the app is ready. */
export function registerIpc(options: IpcOptions): IpcHandle {
  const registry = new GenerationRegistry();
  let stopEvents: (() => void) | null = null;
  let disposed = false;

  const trusted = (): TrustedSender => {
    const win = options.getWindow();
    return {
      webContentsId: win && !win.isDestroyed() ? win.webContents.id : null,
      origin: options.trustedOrigin,
    };
  };
  const check = (event: IpcMainEvent | IpcMainInvokeEvent): Result<null> => checkSender(senderOf(event), trusted());
  const host = (): Promise<Result<HostApi>> =>
    options.host.then(
      (value) => ({ ok: true, value }),
      (err) => {
        const info = toErrorInfo(err);
        return refusal(`the kvdesk host did not start: ${info.message}`, info.code);
      },
    );

  ipcMain.handle(CHANNELS.invoke, async (event, name: unknown, request: unknown) => {
    const sender = check(event);
    if (!sender.ok) return sender;
    const call = parseCallName(name);
    if (!call.ok) return call;
    const h = await host();
    if (!h.ok) return h;
    return h.value.call(call.value, request);
  });

  ipcMain.handle(CHANNELS.importPath, async (event, raw: unknown) => {
    const sender = check(event);
    if (!sender.ok) return sender;
    const dir = parseImportPath(raw);
    if (!dir.ok) return dir;
    const h = await host();
    if (!h.ok) return h;
    return h.value.importPath(dir.value);
  });

  ipcMain.handle(CHANNELS.importFiles, async (event, raw: unknown) => {
    const sender = check(event);
    if (!sender.ok) return sender;
    const upload = parseImportFiles(raw);
    if (!upload.ok) return upload;
    const h = await host();
    if (!h.ok) return h;
    return h.value.importFiles(upload.value);
  });

  ipcMain.handle(CHANNELS.chooseFolder, async (event): Promise<Result<string | null>> => {
    const sender = check(event);
    if (!sender.ok) return sender;
    const dialogOptions: Electron.OpenDialogOptions = {
      title: 'Choose a model package folder',
      buttonLabel: 'Use this package',
      properties: ['openDirectory'],
    };
    const win = BrowserWindow.fromWebContents(event.sender);
    const chosen = win ? await dialog.showOpenDialog(win, dialogOptions) : await dialog.showOpenDialog(dialogOptions);
    return { ok: true, value: chosen.canceled ? null : (chosen.filePaths[0] ?? null) };
  });

  const onGenerate = (event: IpcMainEvent, request: unknown) => {
    const [port, ...extra] = event.ports;
    for (const p of extra) p.close();
    if (!port) return; // Nowhere to answer: a well-formed renderer always sends its port.
    const sender = check(event);
    if (!sender.ok) {
      port.postMessage({ type: 'error', requestId: '', error: sender.error });
      port.close();
      return;
    }
    const owner = event.sender.id;
    void host().then((h) => {
      if (!h.ok || disposed) {
        port.postMessage({
          type: 'error',
          requestId: '',
          error: h.ok ? { code: 'CANCELLED', message: 'kvdesk is shutting down' } : h.error,
        });
        port.close();
        return;
      }
      let forget = () => {};
      const generation = bridgeGeneration(
        port as StreamPort,
        (onFrame) => h.value.generate(request, onFrame),
        () => forget(),
      );
      if (!generation.ended) forget = registry.add(owner, generation);
    });
  };
  ipcMain.on(CHANNELS.generate, onGenerate);

  void options.host.then(
    (h) => {
      if (disposed) return;
      stopEvents = forwardHostEvents(h, (name, payloads) => {
        const win = options.getWindow();
        if (win && !win.isDestroyed() && !win.webContents.isDestroyed()) {
          win.webContents.send(CHANNELS.events, name, payloads);
        }
      });
    },
    () => {},
  );

  const watch = (contents: WebContents) => {
    const id = contents.id;
    const stop = () => registry.cancelAll(id, 'disconnect');
    contents.on('destroyed', stop);
    contents.on('render-process-gone', stop);
    contents.on('did-start-navigation', (details) => {
      // A reload or navigation of the top frame abandons the page's streams.
      if (details.isMainFrame && !details.isSameDocument) stop();
    });
  };

  return {
    attachWindow(win) {
      const id = win.webContents.id;
      watch(win.webContents);
      win.on('closed', () => registry.cancelAll(id, 'disconnect'));
    },
    cancelGenerationsOf: (id) => registry.cancelAll(id, 'disconnect'),
    dispose() {
      if (disposed) return;
      disposed = true;
      ipcMain.removeHandler(CHANNELS.invoke);
      ipcMain.removeHandler(CHANNELS.importPath);
      ipcMain.removeHandler(CHANNELS.importFiles);
      ipcMain.removeHandler(CHANNELS.chooseFolder);
      ipcMain.off(CHANNELS.generate, onGenerate);
      stopEvents?.();
      stopEvents = null;
      registry.cancelEverything('disconnect');
    },
  };
}
