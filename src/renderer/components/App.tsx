/** The window: header, threads, chat or models, inspector; drop-anywhere and keyboard shortcuts. */
import { Fragment, useEffect, useRef, useState } from 'react';
import { useApp, useAppStore, useBridge } from '../bridge/context';
import { isolateRuns } from '../lib/direction';
import { installFocusRescue } from '../lib/focus-rescue';
import { captureDrop } from '../lib/folder-drop';
import { Announcer, useElsewhereReplies } from './Announcer';
import { ChatView } from './ChatView';
import { ATTACH_EVENT, CHAT_INPUT_ID } from './Composer';
import {
  CHAT_LIST_ID,
  closeDrawers,
  Header,
  INSPECTOR_TOGGLE_ID,
  MODEL_PICKER_ID,
  narrowWindow,
  SIDEBAR_TOGGLE_ID,
  useInspectorShown,
} from './Header';
import { Inspector } from './Inspector';
import { ModelsView } from './ModelsView';
import { ThreadList } from './ThreadList';

function hasFiles(e: DragEvent): boolean {
  return Array.from(e.dataTransfer?.types ?? []).includes('Files');
}

/**
 * Names that make a drop of files a package, wherever it lands: a graph, or a layout's own manifest. A
 * `config.json` or `tokenizer.json` alone is not a package (none loads without its graph): in the chat, it is a file
 * to ask about.
 */
const PACKAGE_FILE = /(\.onnx|\.ort)$|^(genai_config\.json|inference_metadata\.ya?ml)$/i;

/** Files (no folder) that are not a package's: in the chat, they go with the message, as on the message box. */
function looseFiles(dt: DataTransfer): boolean {
  const entries = Array.from(dt.items).map((i) => i.webkitGetAsEntry?.());
  const files = Array.from(dt.files);
  return files.length > 0 && !entries.some((x) => x?.isDirectory) && !files.some((f) => PACKAGE_FILE.test(f.name));
}

/** Folder drops anywhere on the window go to the Models view; other files dropped on the chat are attached. */
function useWindowDrop(): boolean {
  const bridge = useBridge();
  const store = useAppStore();
  const [over, setOver] = useState(false);
  const depth = useRef(0);
  useEffect(() => {
    const enter = (e: DragEvent) => {
      if (!hasFiles(e)) return;
      depth.current += 1;
      setOver(true);
    };
    const leave = () => {
      depth.current = Math.max(0, depth.current - 1);
      if (depth.current === 0) setOver(false);
    };
    const overHandler = (e: DragEvent) => {
      if (!hasFiles(e)) return;
      e.preventDefault(); // without this the browser opens the file instead of dropping it here
      if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
    };
    const drop = (e: DragEvent) => {
      depth.current = 0;
      setOver(false);
      // Files dropped on the message box were attached to the message there.
      if (e.defaultPrevented) return;
      const dt = e.dataTransfer;
      // Only files are packages (dragged text falls where it is dropped, as in any text box).
      if (!dt || !hasFiles(e)) return;
      e.preventDefault();
      if (store.getState().view === 'chat' && looseFiles(dt)) {
        window.dispatchEvent(new CustomEvent(ATTACH_EVENT, { detail: Array.from(dt.files) }));
        return;
      }
      const first = dt.files[0];
      const path = first ? bridge.pathForFile(first) : undefined;
      if (path && dt.files.length === 1) {
        void bridge.importPath(first?.name ?? 'package', path);
        return;
      }
      const read = captureDrop(dt);
      store.getState().setPackageImport({ name: first?.name ?? 'package', status: 'reading' });
      store.getState().setView('models');
      read().then(
        (pkg) => bridge.importFiles(pkg.name, pkg.files),
        (err: unknown) =>
          store.getState().setPackageImport({
            name: first?.name ?? 'package',
            status: 'error',
            error: { code: 'PACKAGE_INVALID', message: err instanceof Error ? err.message : String(err) },
          }),
      );
    };
    window.addEventListener('dragenter', enter);
    window.addEventListener('dragleave', leave);
    window.addEventListener('dragover', overHandler);
    window.addEventListener('drop', drop);
    return () => {
      window.removeEventListener('dragenter', enter);
      window.removeEventListener('dragleave', leave);
      window.removeEventListener('dragover', overHandler);
      window.removeEventListener('drop', drop);
    };
  }, [bridge, store]);
  return over;
}

/**
 * Whether an Esc is the chat's, to stop its reply: pressed in the chat view (its messages, its message box and
 * buttons), or with the focus on nothing. Not in the chat's settings (a field being typed in), nor anywhere else in
 * the window (the header's pickers, the chat list, the inspector): there it backs out of what it is in, and a reply
 * lost to it could not be had back.
 */
function escForTheChat(): boolean {
  const at = document.activeElement;
  if (!at || at === document.body) return true;
  const chat = document.querySelector('[data-testid="chat-view"]');
  return (chat?.contains(at) ?? false) && !at.closest('[data-testid="settings-panel"]');
}

/**
 * Ctrl/Cmd+N or Ctrl/Cmd+Shift+O (a new chat: a browser keeps Ctrl+N for a window, the page never sees it),
 * Ctrl/Cmd+K (the model picker), Esc (a drawer, else the reply, from the chat: see escForTheChat).
 */
function useShortcuts(): void {
  const bridge = useBridge();
  const store = useAppStore();
  useEffect(() => {
    /** The message box's focus after Ctrl+N, due on the next frame (a key pressed before then wins). */
    let focusInput = 0;
    const onKey = (e: KeyboardEvent) => {
      const mod = e.ctrlKey || e.metaKey;
      const key = e.key.toLowerCase();
      if (mod && !e.altKey && ((!e.shiftKey && key === 'n') || (e.shiftKey && key === 'o'))) {
        e.preventDefault();
        // The field being typed in is left first, as a click on New chat leaves it: what it holds is taken (a
        // setting typed goes with the chat it was typed for, and on to the new one as its other settings do).
        if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
        // A narrow window's drawer closes first: the focus must not go under it.
        closeDrawers(store);
        bridge.newThread();
        focusInput = requestAnimationFrame(() => document.getElementById(CHAT_INPUT_ID)?.focus());
      } else if (mod && !e.shiftKey && !e.altKey && key === 'k') {
        e.preventDefault();
        cancelAnimationFrame(focusInput);
        closeDrawers(store);
        document.getElementById(MODEL_PICKER_ID)?.focus();
      } else if (e.key === 'Escape' && !e.defaultPrevented) {
        const s = store.getState();
        // A narrow window's inspector drawer closes first (focus back on its button when it was in the drawer).
        if (s.inspectorDrawer && narrowWindow()) {
          e.preventDefault();
          const inDrawer = document.querySelector('.inspector')?.contains(document.activeElement) ?? false;
          s.setInspectorDrawer(false);
          if (inDrawer || document.activeElement === document.body) {
            document.getElementById(INSPECTOR_TOGGLE_ID)?.focus();
          }
          return;
        }
        // A narrow window's chat drawer closes first (focus back on its button when it was in the drawer).
        if (s.sidebarOpen && narrowWindow()) {
          e.preventDefault();
          const inDrawer = document.getElementById(CHAT_LIST_ID)?.contains(document.activeElement) ?? false;
          s.setSidebarOpen(false);
          if (inDrawer || document.activeElement === document.body) document.getElementById(SIDEBAR_TOGGLE_ID)?.focus();
          return;
        }
        if (
          s.view === 'chat' &&
          escForTheChat() &&
          s.activeThreadId &&
          (Object.values(s.live).some((l) => l.threadId === s.activeThreadId) ||
            s.sendWaiting[s.activeThreadId] !== undefined)
        ) {
          e.preventDefault();
          bridge.stop();
        }
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [bridge, store]);
}

/** How long a notice stays (the connection's stays until it is back): it must not sit over the controls for good. */
const NOTICE_MS = 10_000;

/**
 * A notice's text, each name in it a <bdi> (see isolateRuns): a right-to-left chat title keeps its place in the
 * sentence, and copying the notice copies no invisible marks.
 */
function NoticeText({ text }: { text: string }) {
  return (
    <span>
      {isolateRuns(text).map((run, i) =>
        // The runs of one notice never move: their place is their key.
        // biome-ignore lint/suspicious/noArrayIndexKey: see above
        run.isolated ? <bdi key={i}>{run.text}</bdi> : <Fragment key={i}>{run.text}</Fragment>,
      )}
    </span>
  );
}

/** The notices under the header: one that stays until dismissed, above the passing one. */
function Notices() {
  const notice = useApp((s) => s.notice);
  const urgent = useApp((s) => s.noticeUrgent);
  const sticky = useApp((s) => s.stickyNotice);
  const earlier = useApp((s) => s.earlierNotices);
  const setNotice = useApp((s) => s.setNotice);
  const dropNotice = useApp((s) => s.dropNotice);
  const offline = useApp((s) => s.connection === 'reconnecting');
  const store = useAppStore();
  useEffect(() => {
    if (!notice || offline) return;
    const timer = setTimeout(() => {
      if (store.getState().notice === notice) setNotice(null);
    }, NOTICE_MS);
    return () => clearTimeout(timer);
  }, [notice, offline, setNotice, store]);
  // Each earlier one goes a notice's time after a newer one came over it (the first to go first).
  useEffect(() => {
    const first = earlier[0];
    if (!first || offline) return;
    const timer = setTimeout(() => dropNotice(first.text), Math.max(0, first.since + NOTICE_MS - Date.now()));
    return () => clearTimeout(timer);
  }, [earlier, offline, dropNotice]);
  // Under the header, whose height changes as it wraps in a narrow window.
  useEffect(() => {
    const header = document.querySelector('.header');
    if (!header || typeof ResizeObserver === 'undefined') return;
    const observer = new ResizeObserver(() => {
      document.documentElement.style.setProperty('--header-height', `${header.getBoundingClientRect().height}px`);
    });
    observer.observe(header);
    return () => observer.disconnect();
  }, []);
  // One polite live region, always on the page: a region that appears with its text is often not read out. An
  // urgent notice is an alert of its own, not nested in it (some screen readers would say it twice).
  return (
    <div className="notices" role={notice && urgent ? undefined : 'status'}>
      {sticky && (
        <div className="notice" data-testid="sticky-notice">
          <NoticeText text={sticky} />
          <button
            type="button"
            className="small"
            aria-label="Dismiss the notice that stays"
            onClick={() => setNotice(null, true)}
          >
            dismiss
          </button>
        </div>
      )}
      {earlier.map((n) => (
        // Said when it came (the newest then; not again now): shown on while a newer one is said below it.
        <div className="notice" data-testid="notice-earlier" key={n.seq} aria-live="off">
          <NoticeText text={n.text} />
          <button
            type="button"
            className="small"
            aria-label="Dismiss the earlier notice"
            onClick={() => dropNotice(n.text)}
          >
            dismiss
          </button>
        </div>
      ))}
      {notice && (
        // A failure the person must hear now (a model that did not load or unload) is an alert of its own.
        <div
          className="notice"
          data-testid="notice"
          key={urgent ? 'alert' : 'notice'}
          role={urgent ? 'alert' : undefined}
        >
          <NoticeText text={notice} />
          <button type="button" className="small" aria-label="Dismiss the notice" onClick={() => setNotice(null)}>
            dismiss
          </button>
        </div>
      )}
    </div>
  );
}

/** The person's light or dark (data-theme on the root, which styles.css's light-dark() colours follow). */
function useTheme(): void {
  const theme = useApp((s) => s.ui.theme);
  useEffect(() => {
    const root = document.documentElement;
    if (theme) root.dataset.theme = theme;
    else delete root.dataset.theme;
  }, [theme]);
}

export function App() {
  const view = useApp((s) => s.view);
  // A narrow window's inspector is a drawer over the chat, opened there on purpose; a wide one's stays as set.
  const { shown: inspectorOpen, narrow, show: showInspector } = useInspectorShown();
  const sidebarOpen = useApp((s) => s.sidebarOpen);
  const setSidebarOpen = useApp((s) => s.setSidebarOpen);
  const store = useAppStore();
  // A drawer opened in a narrow window closes as the window widens (the list and the inspector are beside the chat
  // there): narrowed again, the window opens on the chat, as it does at first, not under a drawer opened back then.
  useEffect(() => {
    if (!narrow) closeDrawers(store);
  }, [narrow, store]);
  const dragging = useWindowDrop();
  useShortcuts();
  useTheme();
  useElsewhereReplies();
  // A control that goes away under the keyboard's focus hands it to its part of the window.
  useEffect(() => installFocusRescue(document), []);
  return (
    <div className="app" data-testid="app">
      <Header />
      <div className="body">
        <ThreadList />
        {/* A narrow window's chat drawer: a click beside it closes it (styles.css shows this only there). */}
        {sidebarOpen && (
          // biome-ignore lint/a11y/noStaticElementInteractions: the mouse's way to close; Esc is the keyboard's
          // biome-ignore lint/a11y/useKeyWithClickEvents: Esc closes the drawer (App's shortcuts)
          <div className="sidebar-backdrop" data-testid="sidebar-backdrop" onClick={() => setSidebarOpen(false)} />
        )}
        {view === 'models' ? <ModelsView /> : <ChatView />}
        {inspectorOpen && narrow && (
          // biome-ignore lint/a11y/noStaticElementInteractions: the mouse's way to close; Esc is the keyboard's
          // biome-ignore lint/a11y/useKeyWithClickEvents: Esc closes the drawer (App's shortcuts)
          <div
            className="inspector-backdrop"
            data-testid="inspector-backdrop"
            onClick={() => {
              showInspector(false);
              document.getElementById(INSPECTOR_TOGGLE_ID)?.focus();
            }}
          />
        )}
        {inspectorOpen && <Inspector />}
      </div>
      <Notices />
      <Announcer />
      {dragging && <div className="drop-overlay">Drop a model package folder to validate it</div>}
    </div>
  );
}
