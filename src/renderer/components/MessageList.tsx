/**
 * The thread's messages, virtualized: only the rows on screen (plus a few) are
 * mounted, so a thread with thousands of messages scrolls as smoothly as a
 * short one. Heights are measured as rows render (Markdown varies a lot).
 * Sticks to the bottom while a reply streams, unless the person scrolled up, or edits a message: the message being
 * edited keeps its place on screen while its editor opens, the rows re-measure, and the editor closes.
 * With a find (ChatView's find bar), the rows on screen mark its occurrences, and the current one is scrolled to.
 */
import { useVirtualizer } from '@tanstack/react-virtual';
import { useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import { useApp } from '../bridge/context';
import { currentDrop, leftOutMessages } from '../bridge/prompt';
import type { FindMatch } from '../lib/find';
import { noteScrollPlace, takeOpenPlace } from '../lib/scroll-place';
import { CHAT_INPUT_ID } from './Composer';
import { clearMarks, markMatches } from './find-marks';
import { Message } from './Message';

const EMPTY: never[] = [];
const NONE = { start: -1, contextLength: 0 };

/** What the find bar looks for, the occurrence it shows, and a count of the times it was asked to show one. */
export interface FindView {
  query: string;
  current: FindMatch | null;
  reveals: number;
}

export function MessageList({ threadId, find }: { threadId: string; find?: FindView | undefined }) {
  const messages = useApp((s) => s.threads.find((t) => t.id === threadId)?.messages ?? EMPTY);
  // Compared field by field, so streamed frames re-render the list only when the context's start moves.
  const outside = useApp(
    useShallow((s) => {
      const d = currentDrop(s.threads.find((t) => t.id === threadId)?.messages ?? EMPTY, s.live);
      return d ? { start: d.start, contextLength: d.drop.contextLength } : NONE;
    }),
  );
  // Each message's place among its writer's messages (its buttons' names say it: "Copy reply 3"), counted over the
  // whole chat, not the rows on screen.
  const nths = useMemo(() => {
    const seen = new Map<string, number>();
    return messages.map((m) => {
      const n = (seen.get(m.role) ?? 0) + 1;
      seen.set(m.role, n);
      return n;
    });
  }, [messages]);
  // The exchanges the chat went on past without a reply: the model no longer sees them (their replies say so).
  const leftOut = useMemo(() => leftOutMessages(messages), [messages]);
  const scrollRef = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  /** The list's scroll position and size at its last scroll event: less, the size the same, is the person's scroll up. */
  const seen = useRef({ top: 0, height: 0, width: 0 });
  /** Scrolled up from the end: a button brings the person back (and the list follows the reply again). */
  const [away, setAway] = useState(false);

  const virtualizer = useVirtualizer({
    count: messages.length,
    getScrollElement: () => scrollRef.current,
    estimateSize: () => 120,
    overscan: 6,
    getItemKey: (i) => messages[i]?.id ?? i,
  });

  const toBottom = useCallback(() => {
    const el = scrollRef.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, []);

  // The message being edited: its editor opens where it is (all of it in view), and stays there while the rows
  // around it re-measure; closed without sending, the message stays where its editor was.
  const editingId = useApp((s) => s.editingMessageId);
  const editingIndex = editingId === null ? -1 : messages.findIndex((m) => m.id === editingId);
  const editing = useRef(false);
  editing.current = editingIndex >= 0;
  /** The message kept in place, and its top's distance from the list's top. */
  const anchor = useRef<{ id: string; top: number } | null>(null);
  /** When the anchor goes once the editor closed (its row settled by then). */
  const release = useRef(0);
  const messagesRef = useRef(messages);
  messagesRef.current = messages;
  const holdAnchor = useCallback(() => {
    const el = scrollRef.current;
    const a = anchor.current;
    if (!el || !a) return;
    const i = messagesRef.current.findIndex((m) => m.id === a.id);
    const start = i < 0 ? undefined : virtualizer.measurementsCache[i]?.start;
    if (start === undefined) return;
    const top = start + 12 - a.top;
    if (Math.abs(el.scrollTop - top) >= 1) el.scrollTop = top;
  }, [virtualizer]);
  const edited = useRef<string | null>(null);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the message edited is the trigger
  useLayoutEffect(() => {
    const el = scrollRef.current;
    const id = editingIndex >= 0 ? editingId : null;
    const closed = edited.current;
    edited.current = id;
    if (!el) return;
    if (id !== null) {
      // Not following the chat's end while a message is edited: its editor's growth would push it up and away.
      stick.current = false;
      window.clearTimeout(release.current);
      const row = el.querySelector<HTMLElement>(`[data-index="${editingIndex}"]`);
      const start = virtualizer.measurementsCache[editingIndex]?.start;
      if (!row || start === undefined) {
        virtualizer.scrollToIndex(editingIndex, { align: 'start' });
        return;
      }
      // Where it is, moved only as far as the whole editor needs to be seen (its label first, when it is taller).
      const top = start + 12 - el.scrollTop;
      const fit = Math.min(Math.max(top, 0), Math.max(0, el.clientHeight - row.offsetHeight));
      anchor.current = { id, top: fit };
      holdAnchor();
    } else if (closed !== null) {
      if (!messages.some((m) => m.id === closed)) {
        // Sent: a new turn, which the list follows as any other.
        anchor.current = null;
        stick.current = true;
        setAway(false);
        toBottom();
        return;
      }
      holdAnchor();
      release.current = window.setTimeout(() => {
        anchor.current = null;
      }, 1000);
    }
  }, [editingId, editingIndex]);
  useEffect(() => () => window.clearTimeout(release.current), []);

  // A new thread opens at its end; one that comes back (its delete refused) where it was, its rows re-measured
  // around the message that was at the top.
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs when the thread changes
  useLayoutEffect(() => {
    const back = takeOpenPlace(threadId);
    const at = back ? messages.findIndex((m) => m.id === back.messageId) : -1;
    noteScrollPlace(threadId, null);
    window.clearTimeout(release.current);
    if (back && at >= 0) {
      stick.current = false;
      anchor.current = { id: back.messageId, top: back.top };
      setAway(true);
      virtualizer.scrollToIndex(at, { align: 'start' });
      holdAnchor();
      noteScrollPlace(threadId, back);
      release.current = window.setTimeout(() => {
        anchor.current = null;
      }, 1000);
      return;
    }
    stick.current = true;
    anchor.current = null;
    setAway(false);
    if (messages.length > 0) virtualizer.scrollToIndex(messages.length - 1, { align: 'end' });
  }, [threadId]);

  const last = messages[messages.length - 1];
  const total = virtualizer.getTotalSize();
  /** The last message at the last render: a new one from the person is a turn sent. */
  const lastSeen = useRef<{ threadId: string | null; id: string | undefined }>({ threadId, id: last?.id });
  // Follow growth (new messages, streamed text, re-measured rows) when pinned to the bottom; else the message
  // edited keeps its place.
  // biome-ignore lint/correctness/useExhaustiveDependencies: these values are the triggers
  useLayoutEffect(() => {
    const was = lastSeen.current;
    lastSeen.current = { threadId, id: last?.id };
    // A message the person sent (a new last one of theirs, in this chat): the list goes to it and follows its reply,
    // wherever it had been scrolled to, as every chat app shows what was just sent.
    // (Looked for only when the last message changed: not at each streamed token.)
    if (was.threadId === threadId && last !== undefined && last.id !== was.id && !editing.current) {
      const after = was.id === undefined ? 0 : messages.findIndex((m) => m.id === was.id) + 1;
      if (after > (was.id === undefined ? -1 : 0) && messages.slice(after).some((m) => m.role === 'user')) {
        stick.current = true;
        anchor.current = null;
        setAway(false);
      }
    }
    if (anchor.current) holdAnchor();
    else toBottom();
  }, [messages.length, last?.content.length, total]);

  // The list made shorter or narrower (a window resized, the settings opened below it): still at the chat's end if
  // it was following it.
  useEffect(() => {
    const el = scrollRef.current;
    if (!el || typeof ResizeObserver === 'undefined') return;
    const observer = new ResizeObserver(() => {
      if (!anchor.current) toBottom();
    });
    observer.observe(el);
    return () => observer.disconnect();
  }, [toBottom]);

  // The occurrence shown: its row scrolled to (the marks below bring its text to the centre once it is on screen).
  const reveal = useRef(false);
  const query = find?.query ?? '';
  const current = find?.current ?? null;
  // biome-ignore lint/correctness/useExhaustiveDependencies: the occurrence's identity and each ask are the triggers
  useLayoutEffect(() => {
    if (!current) return;
    stick.current = false;
    anchor.current = null;
    // Not following the reply any more (even when the occurrence is on screen and nothing scrolls): the button says so.
    setAway(true);
    reveal.current = true;
    virtualizer.scrollToIndex(current.index, { align: 'center' });
  }, [current?.messageId, current?.nth, find?.reveals]);
  // The marks follow the rows on screen: again whenever rows mount or their text changes.
  // biome-ignore lint/correctness/useExhaustiveDependencies: current's fields are what matter
  useEffect(() => {
    const el = scrollRef.current;
    if (!el || !query.trim()) return clearMarks();
    let frame = 0;
    const refresh = () => {
      frame = 0;
      const range = markMatches(el, query, current);
      if (range && reveal.current) {
        reveal.current = false;
        range.startContainer.parentElement?.scrollIntoView({ block: 'center' });
      }
    };
    refresh();
    const observer = new MutationObserver(() => {
      if (!frame) frame = requestAnimationFrame(refresh);
    });
    observer.observe(el, { childList: true, subtree: true, characterData: true });
    return () => {
      observer.disconnect();
      cancelAnimationFrame(frame);
      clearMarks();
    };
  }, [query, current?.messageId, current?.nth, find?.reveals]);

  const jumpToEnd = () => {
    stick.current = true;
    anchor.current = null;
    setAway(false);
    if (messages.length > 0) virtualizer.scrollToIndex(messages.length - 1, { align: 'end' });
    toBottom();
    // The button goes with the click: the focus goes to the message box, not to the page.
    document.getElementById(CHAT_INPUT_ID)?.focus();
  };
  // A reply writing (not one still queued): "going on below".
  const streaming = useApp((s) => Object.values(s.live).some((l) => l.threadId === threadId && l.tokens > 0));

  return (
    <div className="messages-wrap">
      <div
        className="messages"
        ref={scrollRef}
        data-testid="message-list"
        onScroll={(e) => {
          const el = e.currentTarget;
          // Following stops when the person scrolls up from the end, not when the end moves away on its own: a
          // window made shorter, narrower or zoomed, or a message box grown by its draft, resizes the list, and
          // Chromium then sends a scroll event (the position even moved up a little) before the resize observer
          // above puts the list back at its end.
          const last = seen.current;
          const resized = el.clientHeight !== last.height || el.clientWidth !== last.width;
          const up = el.scrollTop < last.top - 1 && !resized;
          seen.current = { top: el.scrollTop, height: el.clientHeight, width: el.clientWidth };
          const atEnd = el.scrollHeight - el.scrollTop - el.clientHeight < 60;
          if (editing.current) stick.current = false;
          else if (atEnd) stick.current = true;
          else if (up) stick.current = false;
          else toBottom();
          setAway(!stick.current);
          // Where it is, for a chat that comes back after its delete was refused: the first row on screen.
          const top = virtualizer.getVirtualItems().find((it) => it.start + 12 + it.size > el.scrollTop);
          const topId = top ? messages[top.index]?.id : undefined;
          noteScrollPlace(
            threadId,
            stick.current || !top || topId === undefined
              ? null
              : { messageId: topId, top: top.start + 12 - el.scrollTop },
          );
          // Scrolled while editing: the message edited stays where the person put it.
          const a = anchor.current;
          const i = a ? messages.findIndex((m) => m.id === a.id) : -1;
          const start = i < 0 ? undefined : virtualizer.measurementsCache[i]?.start;
          if (a && start !== undefined) a.top = start + 12 - el.scrollTop;
        }}
      >
        <div className="messages-inner" style={{ height: total + 24 }}>
          {virtualizer.getVirtualItems().map((item) => {
            const m = messages[item.index];
            if (!m) return null;
            return (
              <div
                key={item.key}
                // Faded when the model no longer sees it, but not while it is edited: its editor is to use.
                className={`message-row ${item.index < outside.start && item.index !== editingIndex ? 'outside-context' : ''}`}
                data-index={item.index}
                ref={virtualizer.measureElement}
                style={{ transform: `translateY(${item.start + 12}px)` }}
              >
                {item.index === outside.start && (
                  <div className="context-start" data-testid="context-start">
                    The model no longer sees the messages above: the chat outgrew its context of{' '}
                    {outside.contextLength.toLocaleString()} tokens.
                  </div>
                )}
                <Message
                  message={m}
                  threadId={threadId}
                  isLast={item.index === messages.length - 1}
                  nth={nths[item.index] ?? 1}
                  leftOut={leftOut.has(m.id)}
                />
              </div>
            );
          })}
        </div>
      </div>
      {away && messages.length > 0 && (
        <button
          type="button"
          className="jump-to-end"
          data-testid="jump-to-end"
          data-streaming={streaming}
          title="Back to the latest message (the list follows the reply again)"
          onClick={jumpToEnd}
        >
          ↓ {streaming ? 'reply going on below' : 'latest'}
        </button>
      )}
    </div>
  );
}
