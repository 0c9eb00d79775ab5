/** Left column: new chat, and the threads (newest activity first) with rename and delete. */
import { memo, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import { useApp, useBridge } from '../bridge/context';

const ThreadItem = memo(function ThreadItem({ id }: { id: string }) {
  const bridge = useBridge();
  const { title, active, streaming } = useApp(
    useShallow((s) => ({
      title: s.threads.find((t) => t.id === id)?.title ?? '',
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
    <li className="thread-item" data-testid="thread-item" data-thread-id={id} aria-current={active} title={title}>
      {streaming && <span className="dot" title="replying" />}
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
  const ids = useApp(useShallow((s) => s.threads.map((t) => t.id)));
  const loaded = useApp((s) => s.threadsLoaded);
  return (
    <nav className="sidebar" aria-label="Chats">
      <button
        type="button"
        className="new primary"
        data-testid="new-thread"
        onClick={() => bridge.newThread()}
        title="New chat (Ctrl/Cmd+N)"
      >
        + New chat
      </button>
      <ul className="thread-list" data-testid="thread-list" data-loaded={loaded}>
        {ids.map((id) => (
          <ThreadItem key={id} id={id} />
        ))}
      </ul>
    </nav>
  );
}
