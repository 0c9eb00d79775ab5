/**
 * Left column: new chat, import, search, and the threads — pinned ones first, then newest activity first — with
 * pin, rename and delete.
 */
import { memo, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { StoredMessage, Thread } from '../../shared/api';
import { useApp, useBridge } from '../bridge/context';
import { MAX_IMPORT_BYTES } from '../lib/thread-export';

/**
 * A message's searchable text (its content and files, lower case), kept while the message object is unchanged:
 * a reply streaming while a search is typed re-reads only itself each frame, not its whole chat.
 */
const haystacks = new WeakMap<StoredMessage, string>();
function haystack(m: StoredMessage): string {
  let h = haystacks.get(m);
  if (h === undefined) {
    h = [m.content, ...(m.attachments ?? []).flatMap((a) => [a.name, a.text])].join('\n').toLowerCase();
    haystacks.set(m, h);
  }
  return h;
}

/** The chats whose title or messages contain every word of the query (all of them for an empty query). */
export function matchingThreadIds(threads: Thread[], query: string): string[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return threads.map((t) => t.id);
  const found = (t: Thread, w: string) =>
    t.title.toLowerCase().includes(w) || t.messages.some((m) => haystack(m).includes(w));
  return threads.filter((t) => words.every((w) => found(t, w))).map((t) => t.id);
}

const ThreadItem = memo(function ThreadItem({ id }: { id: string }) {
  const bridge = useBridge();
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
          value={renaming}
          // biome-ignore lint/a11y/noAutofocus: renaming is started on purpose by the person
          autoFocus
          onChange={(e) => setRenaming(e.target.value)}
          onBlur={commit}
          onKeyDown={(e) => {
            if (e.key === 'Enter') commit();
            if (e.key === 'Escape') {
              e.stopPropagation();
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
      aria-current={active}
      title={title}
    >
      {streaming && <span className="dot" title="replying" />}
      {pinned && (
        <span className="pin-mark" title="pinned">
          📌
        </span>
      )}
      <button
        type="button"
        className="title"
        data-testid="thread-title"
        onClick={() => bridge.selectThread(id)}
        onDoubleClick={() => setRenaming(title)}
        onKeyDown={(e) => {
          if (e.key === 'F2') setRenaming(title);
        }}
      >
        {title}
      </button>
      <span className="actions">
        <button
          type="button"
          className="ghost small"
          data-testid="thread-pin"
          title={pinned ? 'Unpin: back to its place by activity' : 'Pin: keep it at the top'}
          aria-pressed={pinned}
          onClick={(e) => {
            e.stopPropagation();
            bridge.pinThread(id, !pinned);
          }}
        >
          {pinned ? '⊘' : '📌'}
        </button>
        <button
          type="button"
          className="ghost small"
          data-testid="thread-rename"
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
          title={confirmDelete ? 'Click again to delete' : 'Delete'}
          onClick={(e) => {
            e.stopPropagation();
            if (confirmDelete) bridge.deleteThread(id);
            else setConfirmDelete(true);
          }}
          onBlur={() => setConfirmDelete(false)}
        >
          {confirmDelete ? 'delete?' : '✕'}
        </button>
      </span>
    </li>
  );
});

export function ThreadList() {
  const bridge = useBridge();
  const [query, setQuery] = useState('');
  // Pinned chats first, each group by activity.
  const ids = useApp(
    useShallow((s) => {
      const found = new Set(matchingThreadIds(s.threads, query));
      const at = (pinned: boolean) => s.threads.filter((t) => found.has(t.id) && (t.pinned === true) === pinned);
      return [...at(true), ...at(false)].map((t) => t.id);
    }),
  );
  const total = useApp((s) => s.threads.length);
  const loaded = useApp((s) => s.threadsLoaded);
  const [importError, setImportError] = useState<string | null>(null);
  const file = useRef<HTMLInputElement>(null);
  const importFile = async (f: File) => {
    if (f.size > MAX_IMPORT_BYTES) {
      setImportError(
        `${f.name} is ${Math.round(f.size / 1048576)} MiB: a chat to import is at most ${MAX_IMPORT_BYTES / 1048576} MiB.`,
      );
      return;
    }
    setImportError(bridge.importThread(await f.text(), f.name));
  };
  return (
    <nav className="sidebar" aria-label="Chats">
      <div className="sidebar-actions">
        <button
          type="button"
          className="new primary"
          data-testid="new-thread"
          onClick={() => bridge.newThread()}
          title="New chat (Ctrl/Cmd+N)"
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
          value={query}
          onChange={(e) => setQuery(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === 'Escape') setQuery('');
          }}
        />
      )}
      <ul className="thread-list" data-testid="thread-list" data-loaded={loaded}>
        {ids.map((id) => (
          <ThreadItem key={id} id={id} />
        ))}
      </ul>
      {query && ids.length === 0 && (
        <div className="hint" data-testid="thread-search-empty">
          No chat mentions “{query}”.
        </div>
      )}
    </nav>
  );
}
