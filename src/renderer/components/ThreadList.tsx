/**
 * Left column: new chat, import, search, and the threads — pinned ones first, then newest activity first — with
 * pin, rename and delete. The list is one stop of the Tab order (a roving tabindex): the arrow keys move up and
 * down the chats, and right and left to a chat's pin, rename and delete. A narrow window shows the column as a
 * drawer over the chat (the header's button; Esc closes it).
 */
import { type KeyboardEvent, memo, useCallback, useEffect, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { StoredMessage, Thread } from '../../shared/api';
import { searchForm } from '../../shared/text';
import { useApp, useAppStore, useBridge } from '../bridge/context';
import { useFocusTrap } from '../lib/focus-trap';
import { importTooLarge } from '../lib/thread-export';
import { CHAT_INPUT_ID } from './Composer';
import { CHAT_LIST_ID, narrowWindow, useNarrowWindow } from './Header';
import { PinIcon } from './Icons';

/**
 * A message's searchable text (its content and files, in search's form: lower case, composed), kept while the
 * message object is unchanged: a reply streaming while a search is typed re-reads only itself each frame, not its
 * whole chat.
 */
const haystacks = new WeakMap<StoredMessage, string>();
function haystack(m: StoredMessage): string {
  let h = haystacks.get(m);
  if (h === undefined) {
    h = searchForm([m.content, ...(m.attachments ?? []).flatMap((a) => [a.name, a.text])].join('\n'));
    haystacks.set(m, h);
  }
  return h;
}

/**
 * The chats whose title or messages contain every word of the query (all of them for an empty query). A chat this
 * page has only the summary of (`unfetched`) is searched by kvdesk: found when its title has every word, or when
 * kvdesk found it (`found`, the ids its search of the saved chats answered for this query).
 */
export function matchingThreadIds(
  threads: Thread[],
  query: string,
  unfetched: Record<string, unknown> = {},
  found: ReadonlySet<string> = new Set(),
): string[] {
  const words = searchForm(query).split(/\s+/).filter(Boolean);
  if (words.length === 0) return threads.map((t) => t.id);
  const has = (t: Thread, w: string) =>
    searchForm(t.title).includes(w) || t.messages.some((m) => haystack(m).includes(w));
  return threads
    .filter((t) => (Object.hasOwn(unfetched, t.id) && found.has(t.id)) || words.every((w) => has(t, w)))
    .map((t) => t.id);
}

/** Before kvdesk is asked to search the saved chats, the query stays this long unchanged (typing goes on). */
const SEARCH_WAIT_MS = 150;

/**
 * The arrow keys in the chat list: up and down (Home, End) to another chat's title, right and left through a
 * chat's title, pin, rename and delete buttons (out of the Tab order, so Tab leaves the list at once).
 */
function moveInList(e: KeyboardEvent<HTMLUListElement>): void {
  const target = e.target as HTMLElement;
  if (target.tagName !== 'BUTTON' || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
  const item = target.closest('li');
  if (!item) return;
  const titles = Array.from(e.currentTarget.querySelectorAll<HTMLElement>('[data-testid="thread-title"]'));
  const at = titles.findIndex((b) => item.contains(b));
  const buttons = Array.from(item.querySelectorAll<HTMLElement>('button'));
  const here = buttons.indexOf(target);
  const moves: Record<string, HTMLElement | undefined> = {
    ArrowDown: titles[Math.min(at + 1, titles.length - 1)],
    ArrowUp: titles[Math.max(at - 1, 0)],
    Home: titles[0],
    End: titles[titles.length - 1],
    ArrowRight: buttons[Math.min(here + 1, buttons.length - 1)],
    ArrowLeft: buttons[Math.max(here - 1, 0)],
  };
  const next = Object.hasOwn(moves, e.key) ? moves[e.key] : undefined;
  if (!next) return;
  e.preventDefault();
  next.focus();
}

const ThreadItem = memo(function ThreadItem({
  id,
  tabbable,
  onFocusItem,
}: {
  id: string;
  /** The one chat of the list in the Tab order (roving tabindex). */
  tabbable: boolean;
  onFocusItem: (id: string) => void;
}) {
  const bridge = useBridge();
  const setSidebarOpen = useApp((s) => s.setSidebarOpen);
  const { title, active, streaming, pinned } = useApp(
    useShallow((s) => ({
      title: s.threads.find((t) => t.id === id)?.title ?? '',
      pinned: s.threads.find((t) => t.id === id)?.pinned === true,
      active: s.activeThreadId === id,
      streaming: Object.values(s.live).some((l) => l.threadId === id),
    })),
  );
  const [renaming, setRenaming] = useState<string | null>(null);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const titleRef = useRef<HTMLButtonElement>(null);
  /** A rename ended from the keyboard (Enter, Esc): the focus goes back to the chat's title, not to the page. */
  const refocusTitle = useRef(false);
  useEffect(() => {
    if (renaming !== null || !refocusTitle.current) return;
    refocusTitle.current = false;
    titleRef.current?.focus();
  }, [renaming]);
  /** Deletes the chat; a focus that was on its button goes to the list's chat (not lost with the button). */
  const deleteKeepingFocus = (button: HTMLElement) => {
    const list = button.closest('ul');
    const had = button.ownerDocument.activeElement === button;
    bridge.deleteThread(id);
    if (had && list) {
      requestAnimationFrame(() => {
        const titles = list.querySelectorAll<HTMLElement>('[data-testid="thread-title"]');
        // No chat left in the list (the last deleted, or the only one a search found): the search box, else the
        // message box.
        const nav = list.closest('nav');
        const next =
          list.querySelector<HTMLElement>('[data-testid="thread-title"][tabindex="0"]') ??
          titles[0] ??
          nav?.querySelector<HTMLElement>('[data-testid="thread-search"]') ??
          document.getElementById(CHAT_INPUT_ID);
        next?.focus();
      });
    }
  };

  if (renaming !== null) {
    const commit = () => {
      bridge.renameThread(id, renaming);
      setRenaming(null);
    };
    return (
      <li className="thread-item" data-testid="thread-item" data-thread-id={id}>
        <input
          type="text"
          data-testid="thread-rename-input"
          aria-label="Chat title"
          dir="auto"
          value={renaming}
          // biome-ignore lint/a11y/noAutofocus: renaming is started on purpose by the person
          autoFocus
          onChange={(e) => setRenaming(e.target.value)}
          onBlur={commit}
          onKeyDown={(e) => {
            if (e.key === 'Enter') {
              refocusTitle.current = true;
              commit();
            }
            if (e.key === 'Escape') {
              e.stopPropagation();
              refocusTitle.current = true;
              setRenaming(null);
            }
          }}
        />
      </li>
    );
  }

  return (
    <li
      className={`thread-item ${pinned ? 'pinned' : ''}`}
      data-testid="thread-item"
      data-thread-id={id}
      data-pinned={pinned}
      data-current={active}
      title={title}
    >
      {streaming && <span className="dot" role="img" aria-label="replying" title="replying" />}
      {pinned && (
        <span className="pin-mark" title="pinned" data-testid="thread-pin-mark">
          <PinIcon />
        </span>
      )}
      <button
        type="button"
        className="title"
        data-testid="thread-title"
        // A Hebrew or Arabic title reads, and is cut (its ellipsis), right to left.
        dir="auto"
        ref={titleRef}
        // The open chat, and a pinned one, said as the focus reaches its title (not only as the row's look).
        aria-current={active ? 'page' : undefined}
        aria-description={pinned ? 'pinned' : undefined}
        tabIndex={tabbable ? 0 : -1}
        onFocus={() => onFocusItem(id)}
        onClick={(e) => {
          // In a narrow window the list is a drawer, which closes: from the keyboard too, the focus goes on.
          const drawer = narrowWindow();
          bridge.selectThread(id);
          setSidebarOpen(false);
          // Opened with the mouse: ready to type in it (and the row's buttons, shown while it has the focus, do
          // not cut its title for as long as it is open). From the keyboard (detail 0) the focus stays in the list,
          // unless the list is a drawer that closed; the second click of a double click (a rename) leaves it to the
          // rename box.
          const clicked = e.currentTarget;
          // A mouse's only: a tap would bring up a phone's keyboard over the chat it opened to read.
          const mouse = e.detail === 1 && (e.nativeEvent as PointerEvent).pointerType === 'mouse';
          if (mouse || (drawer && e.detail === 0)) {
            setTimeout(() => {
              // Unless a double click's rename box (or anything else) took the focus meanwhile; a closed drawer's
              // title has let it go to the page.
              const now = document.activeElement;
              if (now === clicked || now === document.body || now === null) {
                document.getElementById(CHAT_INPUT_ID)?.focus();
              }
            }, 0);
          }
        }}
        onDoubleClick={() => setRenaming(title)}
        aria-keyshortcuts="F2 Delete"
        onKeyDown={(e) => {
          if (e.key === 'F2') setRenaming(title);
          // Delete (a Mac's delete key too) asks once more, on the chat's delete button: Enter (or Delete) there
          // deletes, Esc does not.
          if (e.key === 'Delete' || e.key === 'Backspace') {
            e.preventDefault();
            setConfirmDelete(true);
            e.currentTarget.closest('li')?.querySelector<HTMLElement>('[data-testid="thread-delete"]')?.focus();
          }
        }}
      >
        {title}
      </button>
      <span className="actions">
        <button
          type="button"
          className="ghost small"
          data-testid="thread-pin"
          tabIndex={-1}
          title={pinned ? 'Unpin: back to its place by activity' : 'Pin: keep it at the top'}
          // One name, its state in aria-pressed ("Unpin, pressed" said it twice).
          aria-label={`Pin chat “${title}”`}
          aria-pressed={pinned}
          onClick={(e) => {
            e.stopPropagation();
            bridge.pinThread(id, !pinned);
          }}
        >
          {pinned ? '⊘' : <PinIcon />}
        </button>
        <button
          type="button"
          className="ghost small"
          data-testid="thread-rename"
          tabIndex={-1}
          aria-label={`Rename chat “${title}”`}
          title="Rename (F2)"
          onClick={(e) => {
            e.stopPropagation();
            setRenaming(title);
          }}
        >
          ✎
        </button>
        <button
          type="button"
          className={`small ${confirmDelete ? 'danger' : 'ghost'}`}
          data-testid="thread-delete"
          tabIndex={-1}
          aria-label={
            confirmDelete ? `Delete chat “${title}”: press again to confirm (Esc keeps it)` : `Delete chat “${title}”`
          }
          title={confirmDelete ? 'Click again (or Enter) to delete; Esc keeps it' : 'Delete'}
          onClick={(e) => {
            e.stopPropagation();
            if (confirmDelete) deleteKeepingFocus(e.currentTarget);
            else setConfirmDelete(true);
          }}
          onBlur={() => setConfirmDelete(false)}
          onKeyDown={(e) => {
            if ((e.key === 'Delete' || e.key === 'Backspace') && confirmDelete) {
              e.preventDefault();
              deleteKeepingFocus(e.currentTarget);
            }
            if (e.key === 'Escape' && confirmDelete) {
              e.stopPropagation();
              setConfirmDelete(false);
              e.currentTarget.closest('li')?.querySelector<HTMLElement>('[data-testid="thread-title"]')?.focus();
            }
          }}
        >
          {confirmDelete ? 'delete?' : '✕'}
        </button>
      </span>
    </li>
  );
});

export function ThreadList() {
  const bridge = useBridge();
  const store = useAppStore();
  const [query, setQuery] = useState('');
  const open = useApp((s) => s.sidebarOpen);
  const setOpen = useApp((s) => s.setSidebarOpen);
  const activeId = useApp((s) => s.activeThreadId);
  /**
   * The chat last focused in the list, and the chat open then: its one stop in the Tab order while that chat stays
   * open (else the open chat, else the first). Another chat opened another way (Ctrl+Shift+O, a branch, an import)
   * takes the stop: Tab or the drawer lands on the chat open, not on one focused before.
   */
  const [roving, setRoving] = useState<{ id: string; openChat: string | null } | null>(null);
  const openChat = useRef(activeId);
  openChat.current = activeId;
  const onFocusItem = useCallback((id: string) => setRoving({ id, openChat: openChat.current }), []);
  const nav = useRef<HTMLElement>(null);
  // The chats this page has only the summary of are searched by kvdesk (their messages are not here).
  const [searched, setSearched] = useState<{ query: string; ids: ReadonlySet<string> }>({
    query: '',
    ids: new Set(),
  });
  const someUnfetched = useApp((s) => Object.keys(s.summaries).length > 0);
  useEffect(() => {
    if (!query.trim() || !someUnfetched) return;
    let current = true;
    const timer = setTimeout(() => {
      void bridge.searchThreads(query).then((ids) => {
        if (current && ids) setSearched({ query, ids: new Set(ids) });
      });
    }, SEARCH_WAIT_MS);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [bridge, query, someUnfetched]);
  // Until kvdesk answers for this query, its last answer stands (the list does not jump at each key).
  const hostFound = searched.ids;
  // Pinned chats first, each group by activity.
  const ids = useApp(
    useShallow((s) => {
      const found = new Set(matchingThreadIds(s.threads, query, s.summaries, hostFound));
      const at = (pinned: boolean) => s.threads.filter((t) => found.has(t.id) && (t.pinned === true) === pinned);
      return [...at(true), ...at(false)].map((t) => t.id);
    }),
  );
  const total = useApp((s) => s.threads.length);
  const loaded = useApp((s) => s.threadsLoaded);
  const [importError, setImportError] = useState<string | null>(null);
  const file = useRef<HTMLInputElement>(null);
  const importFile = async (f: File) => {
    const tooLarge = importTooLarge(f.name, f.size);
    if (tooLarge) {
      setImportError(tooLarge);
      return;
    }
    const error = bridge.importThread(await f.text(), f.name);
    setImportError(error);
    if (!error) closeToMessageBox();
  };
  /** Closes the drawer (a narrow window's) with the focus on the message box, where it was in the drawer. */
  const closeToMessageBox = () => {
    const inside = nav.current?.contains(document.activeElement) === true;
    const drawer = store.getState().sidebarOpen && narrowWindow();
    setOpen(false);
    if (inside && drawer) requestAnimationFrame(() => document.getElementById(CHAT_INPUT_ID)?.focus());
  };
  // A chat made here (New chat, Ctrl+N, a branch, an import), or the untouched open chat New chat opens again,
  // shows where the list has it: a search that would hide it empties (the store counts those chats, as the open
  // chat may be the same one). Another chat opened (one picked, the one in place of a chat deleted) leaves the
  // search as it is (the next to delete may be among its chats).
  const made = useApp((s) => s.chatsMade);
  // biome-ignore lint/correctness/useExhaustiveDependencies: only a chat made asks; the search and its chats are read as they are then
  useEffect(() => {
    if (activeId === null || !query || ids.includes(activeId)) return;
    setQuery('');
  }, [made]);
  const inList = (id: string | null): id is string => id !== null && ids.includes(id);
  const remembered = roving?.openChat === activeId ? roving.id : null;
  const tabbable = inList(remembered) ? remembered : inList(activeId) ? activeId : ids[0];
  // The drawer opened: focus goes into it (to the chat in the Tab order, else New chat).
  useEffect(() => {
    if (!open || !narrowWindow()) return;
    const list = nav.current;
    const first =
      list?.querySelector<HTMLElement>('[data-testid="thread-title"][tabindex="0"]') ??
      list?.querySelector<HTMLElement>('[data-testid="new-thread"]');
    first?.focus();
  }, [open]);
  // Open as a drawer, the list keeps the focus until it closes (Tab wraps inside it).
  const narrow = useNarrowWindow();
  const drawer = open && narrow;
  useFocusTrap(nav, drawer);
  return (
    <nav
      ref={nav}
      id={CHAT_LIST_ID}
      className={`sidebar${open ? ' open' : ''}`}
      aria-label="Chats"
      data-testid="sidebar"
      data-open={open}
      // A drawer over the page is a modal dialog (as the inspector's): a screen reader keeps to it, not to the chat
      // it covers. Beside the chat, the column is the chats' navigation.
      {...(drawer ? { role: 'dialog', 'aria-modal': true } : {})}
    >
      <div className="sidebar-actions">
        <button
          type="button"
          className="new primary"
          data-testid="new-thread"
          onClick={() => {
            bridge.newThread();
            // A narrow window's drawer closes: the focus goes on to the message box (as Ctrl+Shift+O's), not to the
            // page under it.
            if (store.getState().sidebarOpen) closeToMessageBox();
          }}
          title="New chat (Ctrl/Cmd+N; in a browser Ctrl/Cmd+Shift+O)"
        >
          + New chat
        </button>
        <button
          type="button"
          className="ghost small"
          data-testid="import-thread"
          title="Import a chat: a kvdesk JSON export, or a {messages: [{role, content}]} conversation"
          onClick={() => file.current?.click()}
        >
          Import…
        </button>
        <input
          ref={file}
          type="file"
          accept=".json,application/json"
          hidden
          data-testid="import-thread-file"
          onChange={(e) => {
            const f = e.target.files?.[0];
            e.target.value = '';
            if (f) void importFile(f);
          }}
        />
      </div>
      {importError && (
        <div className="import-error" role="alert" data-testid="import-error">
          {importError}
          <button type="button" className="ghost small" onClick={() => setImportError(null)} aria-label="Dismiss">
            ✕
          </button>
        </div>
      )}
      {total > 0 && (
        <input
          type="search"
          className="thread-search"
          data-testid="thread-search"
          placeholder="Search chats"
          aria-label="Search chats"
          dir="auto"
          value={query}
          onChange={(e) => setQuery(e.target.value)}
          onKeyDown={(e) => {
            // Esc empties the search first (with nothing to empty, a drawer's Esc closes it).
            if (e.key === 'Escape' && query) {
              e.preventDefault();
              setQuery('');
            }
          }}
        />
      )}
      <ul className="thread-list" data-testid="thread-list" data-loaded={loaded} onKeyDown={moveInList}>
        {ids.map((id) => (
          <ThreadItem key={id} id={id} tabbable={id === tabbable} onFocusItem={onFocusItem} />
        ))}
      </ul>
      {query && ids.length === 0 && (
        // Said by the live region below (not twice).
        <div className="hint" data-testid="thread-search-empty" aria-hidden="true">
          No chat mentions “<bdi>{query}</bdi>”.
        </div>
      )}
      {/* What a search found, said politely as it changes (the list itself is not read out). */}
      <div className="sr-only" role="status" aria-live="polite" data-testid="thread-search-said">
        {!query.trim()
          ? ''
          : ids.length === 0
            ? `No chat mentions “${query}”.`
            : ids.length === 1
              ? '1 chat found.'
              : `${ids.length} chats found.`}
      </div>
    </nav>
  );
}
