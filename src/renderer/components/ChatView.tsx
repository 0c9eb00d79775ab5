/** The open thread: title, messages (with Ctrl/Cmd+F's find bar), composer. */
import { useEffect, useMemo, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { StoredMessage } from '../../shared/api';
import { useApp, useAppStore, useBridge } from '../bridge/context';
import { contextUsed, currentDrop } from '../bridge/prompt';
import { findMatches, MAX_MATCHES } from '../lib/find';
import { formatInteger } from '../lib/format';
import { replyAnnouncement } from '../lib/reply-announcement';
import { exportFileName, threadToJson, threadToMarkdown } from '../lib/thread-export';

/** Saves text as a file (the browser's download; Electron asks where). */
function download(name: string, text: string, type: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

const EXPORTS: ReadonlyArray<readonly ['md' | 'json', string]> = [
  ['md', 'Save this chat as Markdown'],
  ['json', 'Save this chat as kvdesk JSON (Import… in the chat list reads it back)'],
];

/** Export the open chat as Markdown (to read or share) or kvdesk's JSON (to import again, here or elsewhere). */
function ExportButtons({ threadId }: { threadId: string }) {
  const store = useAppStore();
  const save = (format: 'md' | 'json') => {
    const s = store.getState();
    const thread = s.threads.find((t) => t.id === threadId);
    if (!thread) return;
    const model = s.models.find((m) => m.id === thread.modelId)?.spec.displayName;
    if (format === 'md') download(exportFileName(thread, 'md'), threadToMarkdown(thread, model), 'text/markdown');
    else download(exportFileName(thread, 'json'), threadToJson(thread), 'application/json');
  };
  return (
    <span className="export">
      {EXPORTS.map(([format, title]) => (
        <button
          key={format}
          type="button"
          className="ghost small"
          data-testid={`export-${format}`}
          title={title}
          onClick={() => save(format)}
        >
          ⤓ .{format}
        </button>
      ))}
    </span>
  );
}

import { CHAT_INPUT_ID, Composer } from './Composer';
import { closeDrawers } from './Header';
import { type FindView, MessageList } from './MessageList';

const EMPTY: never[] = [];

/**
 * Find in this chat: the occurrences of what is typed in its messages, counted over the whole thread (also the
 * rows not on screen); Enter goes to the next, Shift+Enter to the one before, Esc closes. It starts at the last
 * occurrence, the one nearest the chat's end, where the view is.
 */
function FindBar({
  threadId,
  focusKey,
  onView,
  onClose,
}: {
  threadId: string;
  focusKey: number;
  onView: (v: FindView) => void;
  onClose: () => void;
}) {
  const messages = useApp((s) => s.threads.find((t) => t.id === threadId)?.messages ?? EMPTY);
  const [query, setQuery] = useState('');
  const [at, setAt] = useState(0);
  const [reveals, setReveals] = useState(0);
  const input = useRef<HTMLInputElement>(null);
  const matches = useMemo(() => findMatches(messages, query), [messages, query]);
  const index = matches.length === 0 ? -1 : Math.min(at, matches.length - 1);
  const current = index >= 0 ? (matches[index] ?? null) : null;
  // Ctrl/Cmd+F again: back to the box, its text selected.
  // biome-ignore lint/correctness/useExhaustiveDependencies: each ask focuses
  useEffect(() => {
    input.current?.focus();
    input.current?.select();
  }, [focusKey]);
  // biome-ignore lint/correctness/useExhaustiveDependencies: current's fields are what matter
  useEffect(() => onView({ query, current, reveals }), [query, current?.messageId, current?.nth, reveals]);
  const go = (step: number) => {
    if (matches.length === 0) return;
    setAt((index + step + matches.length) % matches.length);
    setReveals((n) => n + 1);
  };
  const count =
    matches.length === 0
      ? query.trim()
        ? 'no matches'
        : ''
      : `${index + 1} / ${matches.length >= MAX_MATCHES ? `${MAX_MATCHES}+` : matches.length}`;
  return (
    <div className="find-bar" data-testid="find-bar">
      <input
        ref={input}
        type="search"
        data-testid="find-input"
        placeholder="Find in this chat"
        dir="auto"
        aria-label="Find in this chat"
        value={query}
        onChange={(e) => {
          const q = e.target.value;
          setQuery(q);
          // The newest occurrence first (the view is at the chat's end): `index` clamps this to the last one.
          setAt(Number.MAX_SAFE_INTEGER);
          setReveals((n) => n + 1);
        }}
        onKeyDown={(e) => {
          if (e.key === 'Enter') {
            e.preventDefault();
            go(e.shiftKey ? -1 : 1);
          } else if (e.key === 'Escape') {
            // Not a stop of the reply streaming (App's Esc): the find closes.
            e.preventDefault();
            onClose();
          }
        }}
      />
      <span className="num muted" data-testid="find-count" aria-live="polite">
        {count}
      </span>
      <button
        type="button"
        className="small"
        data-testid="find-prev"
        aria-label="Previous match"
        title="Previous (Shift+Enter)"
        onClick={() => go(-1)}
      >
        ↑
      </button>
      <button
        type="button"
        className="small"
        data-testid="find-next"
        aria-label="Next match"
        title="Next (Enter)"
        onClick={() => go(1)}
      >
        ↓
      </button>
      <button
        type="button"
        className="small ghost"
        data-testid="find-close"
        aria-label="Close find"
        title="Close (Esc)"
        onClick={onClose}
      >
        ✕
      </button>
    </div>
  );
}

function EmptyThread() {
  const { model, noModels } = useApp(
    useShallow((s) => ({
      model: s.models.find((m) => m.id === s.activeModelId)?.spec.displayName,
      noModels: s.models.length === 0,
    })),
  );
  return (
    <div className="empty" data-testid="empty-thread">
      <h2>{noModels ? 'No model loaded' : `Chat with ${model ?? 'the model'}`}</h2>
      <p>
        {noModels
          ? 'Drop a model package folder anywhere on this window, or open Models.'
          : 'Each chat keeps its KV cache between turns, so follow-up questions only compute what is new. The inspector shows what every reply reserves.'}
      </p>
    </div>
  );
}

/**
 * How much of the model's context the conversation fills (after its latest reply, or so far while one streams),
 * as LM Studio shows it; and how many messages are out of view once it outgrew it. The context is the picked
 * model's, which the next turn runs on (the tokens are counted as the latest reply's model counted them).
 */
function ContextMeter({ threadId }: { threadId: string }) {
  const bridge = useBridge();
  // A reply the person edited: the counts the replies kept are the model's text's, not the chat's now. The host
  // counts the chat again (as the next turn would send it); until it answers, an estimate from the characters.
  // A chat ending with the person's message (imported so, say): no reply counted it; the host counts the prompt its
  // reply would read.
  const { messages, edits, pickedId } = useApp(
    useShallow((s) => {
      const t = s.threads.find((x) => x.id === threadId);
      const all = t?.messages ?? EMPTY;
      const idle = !Object.values(s.live).some((l) => l.threadId === threadId);
      return {
        messages: all,
        edits: idle && (all.some((m) => m.role === 'assistant' && m.edited) || all.at(-1)?.role === 'user'),
        pickedId: s.activeModelId,
      };
    }),
  );
  const unanswered = messages.at(-1)?.role === 'user';
  const [recount, setRecount] = useState<{
    of: StoredMessage[];
    model: string | null;
    tokens: number;
    dropped: number;
    /** Longer than the context: counted only until its newest turns passed it (`tokens` is theirs). */
    more: boolean;
  } | null>(null);
  useEffect(() => {
    if (!edits) return;
    let current = true;
    // All of it, not what would be left once the oldest messages are left out (a reply edited past the context
    // would count as the few tokens after them).
    void bridge.measureContext(threadId).then((m) => {
      if (current && m)
        setRecount({
          of: messages,
          model: pickedId,
          tokens: m.promptTokens,
          dropped: m.droppedMessages ?? 0,
          more: m.countedUpTo !== undefined,
        });
    });
    return () => {
      current = false;
    };
  }, [bridge, threadId, messages, edits, pickedId]);
  const counts = edits && recount?.of === messages && recount.model === pickedId ? recount : undefined;
  const counted = counts?.tokens;
  // Past the context, the count stopped there: the chat has more tokens than shown (at least those).
  const more = counts?.more === true;
  const {
    used: kept,
    context,
    left,
    estimate,
    refuses,
  } = useApp(
    useShallow((s) => {
      const t = s.threads.find((x) => x.id === threadId);
      const messages = t?.messages ?? [];
      // The context the next turn has: the picked model's (the next turn runs on it), or, while a reply
      // streams, the context of the model writing it.
      const streaming = Object.values(s.live).some((l) => l.threadId === threadId);
      const pickedId = streaming ? t?.modelId : (s.activeModelId ?? t?.modelId);
      const model = s.models.find((m) => m.id === pickedId) ?? s.models.find((m) => m.id === t?.modelId);
      return {
        used: contextUsed(messages, s.live),
        context: model?.spec.contextLength,
        left: currentDrop(messages, s.live)?.drop.messages ?? 0,
        estimate: editedEstimate(messages),
        refuses: t?.contextOverflow === 'refuse',
      };
    }),
  );
  const approximate = edits && !unanswered && counted === undefined;
  const used = counted ?? (approximate && kept !== undefined ? kept + estimate : kept);
  if (used === undefined || context === undefined) return null;
  // Full or outgrown (a reply stopped at the end of the context, an edited reply longer than it, a model with less
  // context picked): the bar full, and what the next turn does: leaves out the oldest messages, or, in a chat set
  // to refuse, is refused.
  const over = used >= context;
  const dropped = Math.max(left, counts?.dropped ?? 0);
  const share = Math.min(1, used / context);
  return (
    <div
      className={`context-meter ${share >= 0.8 ? 'high' : ''}`}
      data-testid="context-meter"
      data-used={used}
      data-context={context}
      data-count={counted !== undefined ? 'recounted' : approximate ? 'estimate' : 'kept'}
      data-more={more ? 'true' : undefined}
      title={
        (more
          ? `The conversation as the model sees it is more than its ${formatInteger(context)} tokens of context (counted from its newest messages up to there: ${formatInteger(used)} tokens or more).`
          : used > context
            ? `The conversation as the model sees it is ${approximate ? 'about ' : ''}${formatInteger(used)} tokens, more than its ${formatInteger(context)} tokens of context.`
            : over
              ? `The conversation as the model sees it fills ${approximate ? 'about ' : ''}all ${formatInteger(context)} tokens of its context.`
              : `The conversation as the model sees it fills ${approximate ? 'about ' : ''}${formatInteger(used)} of its ${formatInteger(context)} tokens of context.`) +
        (counted !== undefined
          ? unanswered
            ? ' Counted as the reply to your last message would read it.'
            : ' Counted again after your edit of a reply (as the next turn would send it).'
          : approximate
            ? ' Your edit of a reply is estimated from its characters until it is counted.'
            : '') +
        (dropped > left
          ? ` The next turn leaves out the first ${dropped} messages.`
          : dropped > 0
            ? ` The first ${dropped} messages are out of view.`
            : over
              ? refuses
                ? ' The next turn is refused: shorten a message, or start a new chat.'
                : ' The next turn leaves out the oldest messages.'
              : refuses
                ? ' When it is full, the next turn is refused.'
                : ' When it is full, the oldest messages are left out.')
      }
    >
      <span className="num">
        context {approximate ? '≈' : more ? '≥' : ''}
        {formatInteger(used)} / {formatInteger(context)}
        {dropped > left
          ? ` · ${dropped} will be left out`
          : dropped > 0
            ? ` · ${dropped} out of view`
            : over
              ? refuses
                ? ' · too long for the context'
                : ' · the oldest will be left out'
              : ''}
      </span>
      <span className="meter">
        <span style={{ width: `${(share * 100).toFixed(1)}%` }} />
      </span>
    </div>
  );
}

/**
 * What the last reply's edit changed in the count, roughly: its text's characters over 4 (a typical token's),
 * instead of the tokens the model wrote; nothing when the last reply is not edited (an earlier edit is only known
 * once the host counts it).
 */
function editedEstimate(messages: StoredMessage[]): number {
  const last = messages.findLast((m) => m.role === 'assistant');
  if (!last?.edited) return 0;
  return Math.ceil((last.content.length + (last.reasoning?.length ?? 0)) / 4) - (last.stats?.tokens ?? 0);
}

/**
 * A polite live region that says the open chat's reply's state as it changes (sent, queued, replying, done or
 * stopped, capped): a screen reader hears that Enter did something, without a word per token. Opening a chat says
 * nothing of its last reply.
 */
function ReplyAnnouncer({ threadId }: { threadId: string | null }) {
  const text = useApp((s) => {
    if (threadId === null) return '';
    const live = Object.values(s.live).find((l) => l.threadId === threadId);
    const last = s.threads.find((t) => t.id === threadId)?.messages.at(-1);
    return replyAnnouncement(live ? { phase: live.phase } : { ...(last ? { last } : {}) });
  });
  const live = useApp((s) => threadId !== null && Object.values(s.live).some((l) => l.threadId === threadId));
  const [said, setSaid] = useState('');
  // How a reply ended is said only for a reply seen running here: a chat opened (or the page loaded) shows its
  // messages after its summary, and its last reply's end then is no news.
  const before = useRef({ threadId, text, sawLive: live });
  useEffect(() => {
    const was = before.current;
    if (was.threadId !== threadId) {
      setSaid('');
      before.current = { threadId, text, sawLive: live };
      return;
    }
    let sawLive = was.sawLive || live;
    if (was.text !== text && sawLive) {
      setSaid(text);
      if (!live && text) sawLive = false;
    }
    before.current = { threadId, text, sawLive };
  }, [threadId, text, live]);
  return (
    <div className="sr-only" role="status" aria-live="polite" data-testid="reply-announcer">
      {said}
    </div>
  );
}

export function ChatView() {
  const { threadId, title, count, loaded, opening, openFailed, waiting } = useApp(
    useShallow((s) => {
      const t = s.threads.find((x) => x.id === s.activeThreadId);
      return {
        threadId: t?.id ?? null,
        title: t?.title ?? '',
        count: t?.messages.length ?? 0,
        loaded: s.threadsLoaded,
        // Listed, its messages on their way (openThread): their size said while they come.
        opening: t ? s.summaries[t.id]?.bytes : undefined,
        openFailed: t ? s.openFailed[t.id] : undefined,
        waiting: t ? s.sendWaiting[t.id] !== undefined : false,
      };
    }),
  );
  const store = useAppStore();
  // Ctrl/Cmd+F: the find bar (the page's own find cannot see the rows off screen); again: back to its box. A
  // narrow window's drawer closes first (the bar would be under it).
  const [findAsk, setFindAsk] = useState(0);
  const [find, setFind] = useState<FindView | undefined>(undefined);
  // An empty chat has nothing to find (the page's own find stays).
  const hasMessages = useRef(false);
  hasMessages.current = threadId !== null && count > 0;
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (!hasMessages.current) return;
      if ((e.ctrlKey || e.metaKey) && !e.shiftKey && !e.altKey && e.key.toLowerCase() === 'f') {
        e.preventDefault();
        closeDrawers(store);
        setFindAsk((n) => n + 1);
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [store]);
  // Another chat: the find starts over.
  // biome-ignore lint/correctness/useExhaustiveDependencies: the thread is the trigger
  useEffect(() => {
    setFindAsk(0);
    setFind(undefined);
  }, [threadId]);
  const findOpen = findAsk > 0 && threadId !== null && count > 0;
  return (
    <main
      className="main"
      aria-label="Chat"
      data-testid="chat-view"
      data-thread-id={threadId ?? ''}
      data-focus-home="#chat-input"
    >
      <div className="chat-head">
        <h1 data-testid="chat-title" dir="auto">
          {threadId ? title : 'kvdesk'}
        </h1>
        {threadId && count > 0 && <ContextMeter threadId={threadId} />}
        {threadId && count > 0 && <ExportButtons threadId={threadId} />}
      </div>
      {findOpen && (
        <FindBar
          key={threadId}
          threadId={threadId}
          focusKey={findAsk}
          onView={setFind}
          onClose={() => {
            setFindAsk(0);
            setFind(undefined);
            // Back to writing: the message box has the focus again.
            document.getElementById(CHAT_INPUT_ID)?.focus();
          }}
        />
      )}
      {opening !== undefined && openFailed !== undefined ? (
        <div className="empty" data-testid="thread-open-failed" role="alert">
          <p>This chat could not be opened: {openFailed}</p>
        </div>
      ) : opening !== undefined ? (
        <div className="empty" data-testid="thread-opening" role="status">
          <p>Opening the chat{opening > 1_048_576 ? ` (${Math.round(opening / 1_048_576)} MB saved)` : ''}…</p>
          {waiting && (
            <p data-testid="send-waiting">
              Your message is sent once its messages are here (Esc: not sent, back to the box).
            </p>
          )}
        </div>
      ) : threadId && count > 0 ? (
        <MessageList threadId={threadId} find={findOpen ? find : undefined} />
      ) : loaded ? (
        <EmptyThread />
      ) : (
        <div className="empty" />
      )}
      <Composer threadId={threadId} />
      <ReplyAnnouncer threadId={threadId} />
    </main>
  );
}
