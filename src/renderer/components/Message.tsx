/**
 * One message: user text (editable, sent again), or an assistant reply with its live phase, stats, notes and
 * refusals (its text editable: later turns, and continuing it, go on from the person's text).
 */
import { parse as losslessParse, stringify as losslessStringify } from 'lossless-json';
import { memo, type ReactNode, useDeferredValue, useEffect, useLayoutEffect, useMemo, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { StoredMessage } from '../../shared/api';
import { useApp, useBridge } from '../bridge/context';
import { attachmentBytes } from '../lib/attachments';
import { busyElsewhere } from '../lib/busy-elsewhere';
import { directionKeeper, isolated, textDirection } from '../lib/direction';
import { capitalized, exactBytes, formatBytes, formatInteger, formatMs, formatRate } from '../lib/format';
import { SKIPPED_ANSWER } from '../lib/mcp-tools';
import { type QueueWait, queueWait } from '../lib/queue-wait';
import { describeRefusal, type RefusalContext } from '../lib/refusal';
import { clipNote, cutByBudgetCap, interruptedNote, reasoningCutNote } from '../lib/reply-notes';
import { endedEmpty } from '../lib/versions';
import { INTERRUPTED } from '../store/chat-slice';
import type { LiveReply } from '../store/types';
import { Bytes } from './Bytes';
import { useInspectorShown } from './Header';
import { FileIcon } from './Icons';
import { CopyButton, jsonBlock, Markdown } from './Markdown';
import { TokenView } from './TokenView';

type Stats = NonNullable<StoredMessage['stats']>;

function StatsLine({
  stats,
  edited,
  writtenBy,
}: {
  stats: Stats;
  edited?: boolean | undefined;
  writtenBy?: StoredMessage['writtenBy'];
}) {
  const parts: string[] = [];
  if (stats.ttftMs !== undefined) parts.push(`ttft ${formatMs(stats.ttftMs)}`);
  if (stats.tokensPerSecond !== undefined && stats.tokensPerSecond > 0) parts.push(formatRate(stats.tokensPerSecond));
  if (stats.tokens !== undefined) parts.push(`${formatInteger(stats.tokens)} tok`);
  const lookup = stats.lookup;
  if (lookup && lookup.accepted > 0) parts.push(`${formatInteger(lookup.accepted)} by lookup`);
  if (stats.finishReason) parts.push(stats.finishReason === 'cancelled' ? 'stopped' : stats.finishReason);
  // `interrupted`: the page went while the reply was being written (its text so far was saved).
  if (edited) parts.push('edited');
  if (parts.length === 0 && !writtenBy) return null;
  // Which model wrote it (a chat can go from one model to another); a chat saved before kvdesk kept this has none.
  const model = writtenBy && (
    <span
      data-testid="message-model"
      data-model-id={writtenBy.map((m) => m.id).join(' ')}
      title={`Written by ${writtenBy
        .map((m) => (m.name && m.name !== m.id ? `${isolated(m.name)} (${isolated(m.id)})` : isolated(m.id)))
        .join(', then ')}`}
    >
      {writtenBy.map((m) => m.name ?? m.id).join(' + ')}
    </span>
  );
  return (
    <div
      className="stats num"
      data-testid="message-stats"
      data-finish-reason={stats.finishReason}
      title={
        lookup
          ? `Lookup decoding: ${lookup.accepted} of the ${lookup.drafted} tokens guessed from earlier text were right; each one took no decode step of its own`
          : undefined
      }
    >
      {model && <bdi>{model}</bdi>}
      {model && parts.length > 0 && ' · '}
      {parts.join(' · ')}
    </div>
  );
}

/**
 * A thinking model's reasoning, above its reply: open while the model reasons (the text streams in), then
 * folded to one line saying how long it thought; a click opens or folds it.
 */
function Reasoning({
  text,
  live,
  stats,
  hasReply,
}: {
  text: string;
  live: LiveReply | undefined;
  stats: Stats | undefined;
  hasReply: boolean;
}) {
  // null: as the reply goes (open while only reasoning has come); a click makes it the reader's.
  const [opened, setOpened] = useState<boolean | null>(null);
  const deferred = useDeferredValue(text);
  const thinking = live !== undefined && live.phase === 'running' && !live.stopping;
  // A reply that is all reasoning (it ran out of tokens, or was stopped, before it answered) stays open.
  const unanswered = !live && !hasReply;
  const open = opened ?? ((thinking && !hasReply) || unanswered);
  const ms = live ? undefined : stats?.reasoningMs;
  const label =
    thinking && !hasReply
      ? 'Thinking…'
      : `Thought${ms !== undefined && ms > 0 ? ` for ${formatMs(ms)}` : ''}${
          stats?.reasoningTokens ? ` · ${formatInteger(stats.reasoningTokens)} tok` : ''
        }${unanswered ? unansweredNote(stats?.finishReason) : ''}`;
  const shown = live ? deferred : text;
  // Its box follows the reasoning as it streams (as the chat follows a reply); scrolled up in it, it stays where the
  // person put it, until they scroll back to its end.
  const box = useRef<HTMLDivElement>(null);
  const follow = useRef(true);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the text shown, and the box opening, are the triggers
  useLayoutEffect(() => {
    const el = box.current;
    if (el && live && follow.current) el.scrollTop = el.scrollHeight;
  }, [shown, open, live]);
  return (
    <div className={`reasoning ${open ? 'open' : ''}`} data-testid="reasoning" data-open={open}>
      <button
        type="button"
        className="reasoning-toggle"
        data-testid="reasoning-toggle"
        aria-expanded={open}
        onClick={() => setOpened(!open)}
      >
        <span className="caret">{open ? '▾' : '▸'}</span> {label}
      </button>
      {open && (
        <div
          className="reasoning-text"
          data-testid="reasoning-text"
          dir="auto"
          ref={box}
          onScroll={(e) => {
            const el = e.currentTarget;
            follow.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
          }}
        >
          {shown}
        </div>
      )}
    </div>
  );
}

/** What a reply stopped before it wrote anything says in place of its text, by where it was stopped. */
const STOPPED_EMPTY = {
  sending: 'stopped before it was sent — no reply',
  queued: 'stopped while queued — no reply',
  reading: 'stopped while it read the prompt — no reply',
} as const;

/** Why a reply that is all reasoning has no answer. */
function unansweredNote(finishReason: string | undefined): string {
  if (finishReason === 'length' || finishReason === 'context') return ' · ran out of tokens before it replied';
  if (finishReason === 'cancelled') return ' · stopped before it replied';
  return finishReason ? ' · no reply after it' : '';
}

/**
 * A reply the KV budget's cap cut (it ran into it), and what gives it more room: a new chat only where its prompt
 * held earlier turns (a chat's first reply has the message alone).
 */
function CapNote({ cap, earlierTurns }: { cap: NonNullable<Stats['budgetCap']>; earlierTurns: boolean }) {
  return (
    <div
      className="note"
      data-testid="budget-cap-note"
      data-admitted={cap.admittedMaxTokens}
      data-requested={cap.requestedMaxTokens}
    >
      ⚠ Reply capped at {formatInteger(cap.admittedMaxTokens)} tokens by the KV budget (asked{' '}
      {formatInteger(cap.requestedMaxTokens)}:{' '}
      <span title={exactBytes(cap.requestedBytes)}>{formatBytes(cap.requestedBytes)}</span> needed,{' '}
      <span title={exactBytes(cap.availableBytes)}>{formatBytes(cap.availableBytes)}</span> free) —{' '}
      {!earlierTurns
        ? 'raise the limit in the inspector, or send a shorter message (the reply has what its prompt leaves).'
        : "raise the limit in the inspector, or go on in a new chat (a reply's prompt is the whole conversation so far)."}
    </div>
  );
}

/**
 * A reply on its way whose reservation the KV budget capped: a fact, not yet a warning (it may end on its own
 * before the cap; CapNote says so only once the cap has cut it).
 */
function CapInfo({ cap }: { cap: NonNullable<Stats['budgetCap']> }) {
  return (
    <div
      className="note subtle"
      data-testid="budget-cap-info"
      data-admitted={cap.admittedMaxTokens}
      data-requested={cap.requestedMaxTokens}
    >
      Room for {formatInteger(cap.admittedMaxTokens)} of the {formatInteger(cap.requestedMaxTokens)} tokens asked: the
      KV budget capped this reply's reservation, so it stops there unless it ends first.
    </div>
  );
}

function ClipNote({ text }: { text: string }) {
  return (
    <div className="note" data-testid="context-clip-note">
      {text}
    </div>
  );
}

function DropNote({ drop }: { drop: NonNullable<Stats['contextDrop']> }) {
  return (
    <div className="note subtle" data-testid="context-drop-note">
      ↥ Did not see the first {formatInteger(drop.messages)} messages: the chat outgrew the model's{' '}
      {formatInteger(drop.contextLength)}-token context.
    </div>
  );
}

/** Refusals already said as an alert: shown again (the chat opened again, its row back in view), they are not news. */
const refusalsAlerted = new Set<string>();

function Refusal({
  messageId,
  threadId,
  error,
}: {
  messageId: string;
  threadId: string;
  error: NonNullable<Stats['error']>;
}) {
  const bridge = useBridge();
  // The full detail (numbers) is known for refusals seen in this run; after a reload the host's sentence carries them.
  const detail = useApp((s) => s.errorDetails[messageId]);
  // An alert only for a refusal that came while its chat was open here (the detail comes with it); the earlier
  // refusals of a chat opened are read where they are, not each said at once.
  const [news] = useState(() => detail !== undefined && !refusalsAlerted.has(messageId));
  useEffect(() => {
    refusalsAlerted.add(messageId);
  }, [messageId]);
  // A prompt too long for the context, in a chat with a system prompt: how much of the context that takes alone.
  const systemPrompt = useApp((s) => s.threads.find((t) => t.id === threadId)?.systemPrompt?.trim());
  const model = useApp((s) => s.activeModelId);
  const [measured, setMeasured] = useState<RefusalContext['systemPrompt']>(undefined);
  const overflow = error.code === 'CONTEXT_OVERFLOW';
  // biome-ignore lint/correctness/useExhaustiveDependencies: measured again when the model changes
  useEffect(() => {
    setMeasured(undefined);
    if (!overflow || !systemPrompt) return;
    let current = true;
    void bridge.measureSystemPrompt(threadId).then((m) => {
      if (current && m) setMeasured({ tokens: m.promptTokens, contextLength: m.contextLength });
    });
    return () => {
      current = false;
    };
  }, [bridge, overflow, systemPrompt, threadId, model]);
  const view = describeRefusal(
    detail ?? { code: error.code as never, message: error.message },
    measured ? { systemPrompt: measured } : {},
  );
  return (
    <div
      className={`refusal ${view.refused ? '' : 'failed'}`}
      data-testid="refusal"
      data-code={view.code}
      role={news ? 'alert' : undefined}
    >
      <div className="title">{view.title}</div>
      {view.figures.length > 0 && (
        <div className="figures">
          {view.figures.map((f) => (
            <span
              key={f.label}
              data-testid={`refusal-${f.label.replace(/\s+/g, '-')}`}
              data-bytes={f.bytes}
              title={f.bytes === undefined ? undefined : exactBytes(f.bytes)}
            >
              {f.label} <b className="num">{f.text}</b>
            </span>
          ))}
        </div>
      )}
      <div className="detail">{view.message}</div>
      {view.action && <div className="action">{view.action}</div>}
    </div>
  );
}

/** Why a queued reply waits, with the numbers, and the one thing to do (UI.md). */
function QueueReason({ wait }: { wait: QueueWait }) {
  const inspector = useInspectorShown();
  const where = wait.device === 'cpu' ? '' : ` on ${wait.device}`;
  const text =
    wait.reason === 'slots'
      ? `${wait.maxRunning === 1 ? 'the one running slot' : `all ${wait.maxRunning} running slots`}${where} ${wait.maxRunning === 1 ? 'is' : 'are'} taken: it starts when a reply ends — stop one, or raise "max running" in the inspector`
      : wait.reason === 'behind'
        ? `${wait.position} ${wait.position === 1 ? 'request is' : 'requests are'} ahead of it${where} (first come, first served)`
        : wait.reason === 'reloading'
          ? 'the engine stopped, and its model is being loaded again: it starts once the model is back, in its turn'
          : wait.reason === 'padding'
            ? `its ${formatBytes(wait.ownBytes ?? 0)} would fit (${formatBytes(wait.freeBytes)} free), but beside the running replies its rows would be padded to the longest one's ${wait.batchWidth} positions: it starts when that reply ends — stop it, or raise the limit in the inspector`
            : `the KV budget${where} is committed (${formatBytes(wait.freeBytes)} free of ${formatBytes(wait.limitBytes)}): it starts when a reply ends and frees its KV — stop one, or raise the limit in the inspector`;
  return (
    <span data-testid="queued-reason" data-reason={wait.reason}>
      {text}
      {!inspector.shown && wait.reason !== 'behind' && wait.reason !== 'reloading' && (
        <>
          {' '}
          <button
            type="button"
            className="small"
            data-testid="queued-open-inspector"
            onClick={() => inspector.show(true)}
          >
            Open the inspector
          </button>
        </>
      )}
    </span>
  );
}

function LivePhase({ live }: { live: LiveReply }) {
  const wait = useApp(
    useShallow((s) =>
      live.phase === 'queued'
        ? queueWait(s.snapshot, live.requestId, new Set(s.models.filter((m) => m.reloading).map((m) => m.id)))
        : null,
    ),
  );
  // Sent while its model loads again (another variant, backend or template): it starts once the load is in.
  const reloading = useApp((s) => {
    if (live.phase !== 'sending') return null;
    const id = s.threads.find((t) => t.id === live.threadId)?.modelId ?? s.activeModelId;
    const model = s.models.find((m) => m.id === id);
    return model?.reloading ? model.spec.displayName : null;
  });
  if (live.stopping) return <div className="phase">stopping…</div>;
  if (live.phase === 'sending') {
    return (
      <div className="phase" data-testid="sending-indicator">
        <span className="spinner" />{' '}
        {reloading ? (
          <span data-testid="reload-wait">
            waiting for <bdi>{reloading}</bdi> to load again…
          </span>
        ) : (
          'sending…'
        )}
      </div>
    );
  }
  if (live.phase === 'queued') {
    return (
      <div className="phase queued-phase" data-testid="queued-indicator">
        <span className="spinner" />
        <span className="queued">queued</span>
        {wait && <span>position {wait.position + 1}</span>}
        <span data-testid="queued-kv">
          {/* What it waits for is KV only where the budget is why (not a running slot, not the requests ahead). */}
          {wait && (wait.reason === 'slots' || wait.reason === 'behind' || wait.reason === 'reloading')
            ? ''
            : live.fixedTokens !== undefined
              ? `waiting for a static KV cache of ${formatInteger(live.fixedTokens)} positions to be free — `
              : `waiting for ${formatInteger((live.promptTokens ?? 0) + (live.maxNewTokens ?? 0))} tokens of KV to be free — `}
          nothing is reserved yet
        </span>
        {wait && <QueueReason wait={wait} />}
      </div>
    );
  }
  if (live.tokens === 0 && live.prefill) {
    return (
      <div className="phase num" data-testid="prefill-indicator">
        <span className="spinner" /> reading the prompt: {formatInteger(live.prefill.done)} /{' '}
        {formatInteger(live.prefill.total)} tokens
        {live.reservedBytes !== undefined && (
          <>
            {' '}
            · reserved <Bytes value={live.reservedBytes} />
          </>
        )}
      </div>
    );
  }
  return (
    <div className="phase num" data-testid="running-indicator">
      {live.tokens === 0 && <span className="spinner" />}
      {formatInteger(live.tokens)} / {formatInteger(live.admittedMaxTokens ?? live.maxNewTokens ?? 0)} tok
      {live.reservedBytes !== undefined && (
        <>
          {' '}
          · reserved <Bytes value={live.reservedBytes} />
        </>
      )}
    </div>
  );
}

/** A call's arguments as a person reads them: indented JSON, numbers as written (as written when it is not JSON). */
function prettyArguments(text: string): string {
  try {
    return losslessStringify(losslessParse(text), null, 2) ?? text;
  } catch {
    return text;
  }
}

/** What a call's card says of it, by its state (a skipped call is an error answer: said apart). */
const CALL_LABELS = {
  done: 'ran',
  error: 'ran: it failed',
  running: 'running…',
  waiting: 'the model asks to run this tool',
  unanswered: 'not run',
} as const;

/**
 * The MCP tool calls a reply made: each with its arguments, and Run / Skip while it waits for the person (as LM
 * Studio asks before a tool runs); once every call is answered the model reads the answers and goes on.
 */
function ToolCalls({ message, threadId, live }: { message: StoredMessage; threadId: string; live: boolean }) {
  const bridge = useBridge();
  const messages = useApp((s) => s.threads.find((t) => t.id === threadId)?.messages);
  const busy = useApp((s) => Object.values(s.live).some((l) => l.threadId === threadId));
  const { answers, later } = useMemo(() => {
    const all = messages ?? [];
    const after = all.slice(all.findIndex((m) => m.id === message.id) + 1);
    // The chat went on past these calls: a later message that is no tool's answer.
    return { answers: after.filter((m) => m.role === 'tool'), later: after.some((m) => m.role !== 'tool') };
  }, [messages, message.id]);
  const running = useApp((s) => s.toolRuns);
  // A reply refused or failed part way: its calls were never the model's to make.
  const failed = message.stats?.error !== undefined;
  return (
    <div className="tool-calls" data-testid="tool-calls">
      {(message.toolCalls ?? []).map((call) => {
        const answer = answers.find((m) => m.toolCallId === call.id);
        const route = message.toolRoutes?.[call.name];
        const state: keyof typeof CALL_LABELS = answer
          ? answer.isError
            ? 'error'
            : 'done'
          : running[call.id]
            ? 'running'
            : live || later || busy || failed
              ? 'unanswered'
              : 'waiting';
        const act = (run: boolean) => void bridge.answerToolCall(threadId, message.id, call.id, run);
        return (
          <div key={call.id} className={`tool-call ${state}`} data-testid="tool-call" data-state={state}>
            <div className="tool-call-head">
              <span className="mono">
                {call.name}
                {route && route.tool !== call.name
                  ? ` (${route.server} · ${route.tool})`
                  : route
                    ? ` · ${route.server}`
                    : ''}
              </span>
              <span className="muted small-text" data-testid="tool-call-state">
                {state === 'error' && answer?.content === SKIPPED_ANSWER ? 'skipped' : CALL_LABELS[state]}
              </span>
              {state === 'waiting' && (
                <>
                  <button type="button" className="small primary" data-testid="tool-run" onClick={() => act(true)}>
                    Run
                  </button>
                  {route && (
                    <button
                      type="button"
                      className="small"
                      data-testid="tool-always"
                      title={`Run it, and from now on every call of ${isolated(route.tool)} in this chat without asking`}
                      onClick={() => void bridge.alwaysRunTool(threadId, message.id, call.id)}
                    >
                      Always
                    </button>
                  )}
                  <button type="button" className="small" data-testid="tool-skip" onClick={() => act(false)}>
                    Skip
                  </button>
                </>
              )}
            </div>
            <pre className="mono" data-testid="tool-call-arguments">
              {prettyArguments(call.arguments)}
            </pre>
          </div>
        );
      })}
    </div>
  );
}

/** A tool's answer, folded: what the model read after its call. */
function ToolResult({ message }: { message: StoredMessage }) {
  return (
    <details className={`tool-result ${message.isError ? 'error' : ''}`} data-testid="tool-result">
      <summary className="muted">
        {message.isError ? '✗' : '↳'} {message.toolName ?? 'tool'} answered ({message.content.length.toLocaleString()}{' '}
        characters)
      </summary>
      <pre className="mono" data-testid="message-text">
        {message.content}
      </pre>
    </details>
  );
}

/**
 * A message's text in a box to change it: the send button — or its key (Enter for a message of the person's,
 * Ctrl/Cmd+Enter for a reply, whose text has lines of its own) — takes it, Cancel or Esc leaves it as it was.
 */
function EditBox({
  who,
  draft,
  setDraft,
  inputTestId,
  sendTestId,
  sendLabel,
  modEnter,
  canSend,
  onSend,
  describedBy,
  children,
}: {
  children?: ReactNode;
  /** The id of a warning about what sending does (the box's description). */
  describedBy?: string | undefined;
  who: string;
  draft: string;
  setDraft: (text: string) => void;
  inputTestId: string;
  sendTestId: string;
  sendLabel: string;
  modEnter: boolean;
  canSend: boolean;
  onSend: () => void;
}) {
  const setEditing = useApp((s) => s.setEditing);
  const editingId = useApp((s) => s.editingMessageId);
  /** Closes the box without sending: the message's edit button takes the focus back. */
  const cancel = () => {
    editEnded = editingId;
    setEditing(null);
  };
  const box = useRef<HTMLTextAreaElement>(null);
  // Opened: the caret at the end of the text (where a change usually goes). The list keeps the whole box in view —
  // its label too, which a focus's own scroll would leave under the header.
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    el.focus({ preventScroll: true });
    el.setSelectionRange(el.value.length, el.value.length);
  }, []);
  return (
    <>
      <div className="who">{who}</div>
      <textarea
        ref={box}
        data-testid={inputTestId}
        aria-label={inputTestId === 'edit-input' ? 'Edit your message' : "Edit the model's reply"}
        dir="auto"
        aria-describedby={describedBy}
        value={draft}
        {...(modEnter ? { rows: Math.min(20, Math.max(4, draft.split('\n').length + 1)) } : {})}
        onChange={(e) => setDraft(e.target.value)}
        onKeyDown={(e) => {
          const mod = e.ctrlKey || e.metaKey;
          const sends = modEnter ? mod : !e.shiftKey && !e.nativeEvent.isComposing;
          if (e.key === 'Enter' && sends) {
            e.preventDefault();
            if (canSend) onSend();
          }
          if (e.key === 'Escape') {
            e.stopPropagation();
            cancel();
          }
        }}
      />
      {children}
      <div className="row">
        <button type="button" onClick={cancel}>
          Cancel
        </button>
        <button
          type="button"
          className="primary"
          data-testid={sendTestId}
          disabled={!canSend}
          {...(modEnter ? { title: 'Ctrl/Cmd+Enter' } : {})}
          onClick={onSend}
        >
          {sendLabel}
        </button>
      </div>
    </>
  );
}

/** A reply's text in a box to change it: Save (Ctrl/Cmd+Enter) keeps the person's text, Cancel (Esc) the model's. */
function ReplyEditor({ message, threadId }: { message: StoredMessage; threadId: string }) {
  const bridge = useBridge();
  const setEditing = useApp((s) => s.setEditing);
  const threadBusy = useApp((s) => Object.values(s.live).some((l) => l.threadId === threadId));
  const [draft, setDraft] = useState(message.content);
  const save = () => {
    // Closed: the reply's edit button takes the focus back, as after Cancel.
    editEnded = message.id;
    if (draft !== message.content) bridge.editReply(threadId, message.id, draft);
    else setEditing(null);
  };
  // A reply with nothing left (and no reasoning before it) would be a turn that says nothing.
  const empty = !draft.trim() && !message.reasoning;
  return (
    <div className="message assistant edit-box" data-testid="message-assistant" data-message-id={message.id}>
      <EditBox
        who="assistant (editing: the model reads your text from now on)"
        draft={draft}
        setDraft={setDraft}
        inputTestId="reply-edit-input"
        sendTestId="reply-edit-save"
        sendLabel="Save"
        modEnter
        canSend={!empty && !threadBusy}
        onSend={save}
      />
    </div>
  );
}

function AssistantMessage({
  message,
  threadId,
  isLast,
  nth,
  leftOut,
}: {
  message: StoredMessage;
  threadId: string;
  isLast: boolean;
  nth: number;
  leftOut: boolean;
}) {
  const editing = useApp((s) => s.editingMessageId === message.id);
  if (editing) return <ReplyEditor message={message} threadId={threadId} />;
  return (
    <AssistantReply
      message={message}
      threadId={threadId}
      isLast={isLast}
      which={messageWhich('assistant', nth)}
      leftOut={leftOut}
    />
  );
}

function AssistantReply({
  message,
  threadId,
  isLast,
  which,
  leftOut,
}: {
  message: StoredMessage;
  threadId: string;
  isLast: boolean;
  which: string;
  leftOut: boolean;
}) {
  const bridge = useBridge();
  const setEditing = useApp((s) => s.setEditing);
  const editButton = useFocusAfterEdit(message.id, false);
  const live = useApp((s) => s.live[message.id]);
  const [showTokens, setShowTokens] = useState(false);
  const probabilities = live ? undefined : message.probabilities;
  // Another window or tab writes this chat's next reply: what it saved so far is not interrupted.
  const elsewhere = useApp((s) => isLast && busyElsewhere(s.snapshot, threadId, Object.values(s.live), s.events));
  const threadBusy = useApp((s) => Object.values(s.live).some((l) => l.threadId === threadId)) || elsewhere;
  // A thread now in JSON mode writes replies from their start: its replies are not continued.
  const jsonThread = useApp((s) => s.threads.find((t) => t.id === threadId)?.responseFormat === 'json');
  // While streaming, React may skip intermediate texts under load instead of parsing Markdown for each.
  const deferred = useDeferredValue(message.content);
  const text = live ? deferred : message.content;
  // Worked out again as the reply streams only while it can still change (its first 16 KB).
  const directionOf = useMemo(() => directionKeeper(), []);
  const stats = message.stats;
  // The cap of the request on its way (a continued reply's stats hold its last one's), else of the one that wrote it.
  const cap = live ? live.budgetCap : stats?.budgetCap;
  // Warned of only where it cut the reply: a capped reply that ended on its own lost nothing to it.
  const capCut = !live && cutByBudgetCap(stats);
  const clip = stats?.clipped ?? live?.clipped;
  const drop = stats?.contextDrop ?? live?.contextDrop;
  // Whether the reply's prompt held earlier turns of the chat (more than the person's message before it, and not
  // all of them left out): only then would a new chat have left the reply more room.
  const earlierTurns = useApp((s) => {
    const messages = s.threads.find((t) => t.id === threadId)?.messages ?? [];
    const before = messages.findIndex((m) => m.id === message.id);
    return before > 1 + (drop?.messages ?? 0);
  });
  const clipText = clip && !live ? clipNote(clip, stats?.finishReason, earlierTurns) : null;
  const writtenElsewhere = !live && stats?.finishReason === INTERRUPTED && elsewhere;
  const interrupted = !live && stats?.finishReason === INTERRUPTED && !elsewhere;
  const nothingWritten = !stats?.tokens && !message.content && !message.reasoning && !message.toolCalls?.length;
  // What continue can go on from: an answer begun (a reply that only reasoned is regenerated; bridge.continueReply),
  // not JSON, nor a reply that called tools (it goes on once they answer).
  const continuable =
    message.content.length > 0 && message.format !== 'json' && !jsonThread && !message.toolCalls?.length;
  // Stopped before its first token (queued, say), by the person or by the page going: nothing to show but that.
  const stoppedEmpty = (stats?.finishReason === 'cancelled' || interrupted) && nothingWritten;
  const state = live
    ? live.phase
    : writtenElsewhere
      ? 'elsewhere'
      : stats?.error
        ? 'error'
        : stats?.finishReason === 'cancelled'
          ? 'cancelled'
          : interrupted
            ? 'interrupted'
            : 'done';
  return (
    <article
      className="message assistant"
      aria-label={capitalized(which)}
      data-testid="message-assistant"
      data-message-id={message.id}
      data-state={state}
      data-left-out={leftOut || undefined}
    >
      <div className="who">
        assistant
        {!live && <VersionNav message={message} threadId={threadId} which={which} busy={threadBusy} last={isLast} />}
        {!live && (
          <span className="tools">
            {message.content && <CopyButton text={message.content} what={which} testId="message-copy" />}
            {/* A reply that only reasoned (it ended, or was stopped, before its answer): its reasoning to copy. */}
            {!message.content && message.reasoning && (
              <CopyButton
                text={message.reasoning}
                what={`reasoning of ${which}`}
                label="copy reasoning"
                testId="message-copy-reasoning"
              />
            )}
            {isLast && !threadBusy && (
              <button
                type="button"
                className="small"
                data-testid="regenerate"
                aria-label={`Regenerate ${which}`}
                onClick={() => bridge.regenerate(threadId)}
              >
                regenerate
              </button>
            )}
            {isLast &&
              !threadBusy &&
              continuable &&
              // Cut short, or the person wrote its start: the model goes on from there.
              (stats?.finishReason === 'length' ||
                stats?.finishReason === 'cancelled' ||
                interrupted ||
                message.edited) && (
                <button
                  type="button"
                  className="small"
                  data-testid="continue"
                  aria-label={`Continue ${which}`}
                  title="Go on writing this reply where it stopped"
                  onClick={() => bridge.continueReply(threadId)}
                >
                  continue
                </button>
              )}
            {probabilities && probabilities.length > 0 && (
              <button
                type="button"
                className="small"
                data-testid="toggle-probabilities"
                aria-label={`Probabilities of ${which}`}
                aria-pressed={showTokens}
                title="Show each token with its probability (pressed), or the reply as text"
                onClick={() => setShowTokens((v) => !v)}
              >
                {/* One word, pressed or not (the state is the button's): the name starts with what it shows. */}
                probabilities
              </button>
            )}
            {!threadBusy && !stats?.error && (
              <button
                type="button"
                className="small"
                data-testid="edit-reply"
                aria-label={`Edit ${which}`}
                ref={editButton}
                title="Change the reply's text: later turns (and continue) go on from yours"
                onClick={() => setEditing(message.id)}
              >
                edit
              </button>
            )}
            <BranchButton threadId={threadId} messageId={message.id} which={which} />
          </span>
        )}
      </div>
      {message.reasoning && (
        <Reasoning text={message.reasoning} live={live} stats={stats} hasReply={message.content.length > 0} />
      )}
      {/* The reply's direction, its first words' (each of its blocks has its own: see rehypeDirection). */}
      <div
        className={`bubble ${live?.phase === 'running' ? 'streaming' : ''}`}
        data-testid="message-text"
        dir={(text && directionOf(text)) || 'auto'}
      >
        {showTokens && probabilities ? (
          <TokenView tokens={probabilities} which={which} />
        ) : (
          text && <Markdown text={message.format === 'json' ? jsonBlock(text) : text} streaming={live !== undefined} />
        )}
        {!live && stoppedEmpty && (
          <span className="muted empty-reply" data-testid="stopped-empty" data-while={stats?.stoppedWhile}>
            {stats?.stoppedWhile ? STOPPED_EMPTY[stats.stoppedWhile] : 'stopped before it wrote anything — no reply'}
          </span>
        )}
        {!live && endedEmpty(message) && (
          <span className="muted empty-reply" data-testid="empty-reply">
            the model ended without writing anything
          </span>
        )}
      </div>
      {message.toolCalls && message.toolCalls.length > 0 && (
        <ToolCalls message={message} threadId={threadId} live={live !== undefined} />
      )}
      {live && <LivePhase live={live} />}
      {stats?.error && <Refusal messageId={message.id} threadId={threadId} error={stats.error} />}
      {cap && live && <CapInfo cap={cap} />}
      {cap && capCut && <CapNote cap={cap} earlierTurns={earlierTurns} />}
      {clipText && <ClipNote text={clipText} />}
      {drop && !stats?.error && <DropNote drop={drop} />}
      {writtenElsewhere && (
        <div className="note subtle" data-testid="elsewhere-note">
          Being written in another window or tab: its text so far is shown, and the rest comes when it ends there (stop
          it there).
        </div>
      )}
      {interrupted && (
        <div className="note subtle" data-testid="interrupted-note" data-by={stats?.interruptedBy}>
          {interruptedNote(stats?.interruptedBy, nothingWritten, continuable)}
        </div>
      )}
      {!live && !message.content && message.reasoning && stats?.finishReason === 'length' && !cap && !clip && (
        <div className="note" data-testid="reasoning-cut-note">
          {reasoningCutNote(stats.tokens)}
        </div>
      )}
      {leftOut && (
        <div className="note subtle" data-testid="left-out-note">
          Left out: the chat went on without a reply to your message above, so the model no longer sees it (send it
          again to ask it).
        </div>
      )}
      {(stats || message.edited) && !live && (
        <StatsLine stats={stats ?? {}} edited={message.edited} writtenBy={message.writtenBy} />
      )}
    </article>
  );
}

/**
 * What a message's buttons call it, by its place among its writer's messages in the chat: "your message 2",
 * "reply 3". Each button's name says its action and this ("Copy reply 3"), so a screen reader tabbing through a chat
 * hears which message each one is for, not "copy, copy, copy"; the name starts with the button's visible word, so
 * speech control finds it by what it shows.
 */
function messageWhich(role: StoredMessage['role'], nth: number): string {
  return role === 'user' ? `your message ${nth}` : `reply ${nth}`;
}

/**
 * ‹ 2 / 3 ›: the versions regenerating kept of this reply (none: nothing shown). Only the last reply's turn: the
 * turns after an earlier one were written to the version it shows (branch from it to go another way).
 */
function VersionNav({
  message,
  threadId,
  which,
  busy,
  last,
}: {
  message: StoredMessage;
  threadId: string;
  which: string;
  busy: boolean;
  last: boolean;
}) {
  const bridge = useBridge();
  const prev = useRef<HTMLButtonElement>(null);
  const next = useRef<HTMLButtonElement>(null);
  const pressed = useRef<HTMLButtonElement | null>(null);
  // The arrow pressed greys out at the first or the last version: the focus goes to the other arrow, not away.
  useLayoutEffect(() => {
    const from = pressed.current;
    if (!from?.disabled) return;
    pressed.current = null;
    const to = from === prev.current ? next.current : prev.current;
    const active = document.activeElement;
    if (to && !to.disabled && (active === from || active === null || active === document.body)) {
      to.focus({ preventScroll: true });
    }
  });
  const count = (message.alternatives?.length ?? 0) + 1;
  if (count < 2) return null;
  const at = Math.min(message.altIndex ?? count - 1, count - 1);
  const go = (i: number) => bridge.showVersion(threadId, message.id, i);
  return (
    <span
      className="versions num"
      data-testid="versions"
      data-at={at + 1}
      data-count={count}
      title={last ? undefined : 'The chat went on from this version: branch from here to go on from another.'}
    >
      <button
        type="button"
        className="ghost small"
        data-testid="version-prev"
        aria-label={`Previous version of ${which}`}
        ref={prev}
        disabled={busy || !last || at === 0}
        onClick={(e) => {
          pressed.current = e.currentTarget;
          go(at - 1);
        }}
      >
        ‹
      </button>
      {at + 1} / {count}
      <button
        type="button"
        className="ghost small"
        data-testid="version-next"
        aria-label={`Next version of ${which}`}
        ref={next}
        disabled={busy || !last || at === count - 1}
        onClick={(e) => {
          pressed.current = e.currentTarget;
          go(at + 1);
        }}
      >
        ›
      </button>
    </span>
  );
}

/** A new chat from the start of this one up to this message (the rest of this chat stays as it is). */
function BranchButton({ threadId, messageId, which }: { threadId: string; messageId: string; which: string }) {
  const bridge = useBridge();
  return (
    <button
      type="button"
      className="small"
      data-testid="branch"
      aria-label={`Branch from ${which}`}
      title="A new chat with the messages up to here, to go another way from this point"
      onClick={() => bridge.branchThread(threadId, messageId)}
    >
      branch
    </button>
  );
}

/** The message whose edit box was just closed without sending: its edit button takes the focus back. */
let editEnded: string | null = null;

/** The edit button's ref: focused once the message's edit box closes (the box had the focus, now gone with it). */
function useFocusAfterEdit(messageId: string, editing: boolean) {
  const ref = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (editing || editEnded !== messageId) return;
    editEnded = null;
    // Without the focus's own scroll: the list keeps the message where its editor was.
    if (document.activeElement === document.body || document.activeElement === null)
      ref.current?.focus({ preventScroll: true });
  }, [editing, messageId]);
  return ref;
}

function UserMessage({
  message,
  threadId,
  isLast,
  nth,
  leftOut,
}: {
  message: StoredMessage;
  threadId: string;
  isLast: boolean;
  nth: number;
  leftOut: boolean;
}) {
  const which = messageWhich('user', nth);
  const bridge = useBridge();
  const { editing, threadBusy } = useApp(
    useShallow((s) => ({
      editing: s.editingMessageId === message.id,
      // Writing a reply here, or in another window or tab.
      threadBusy:
        Object.values(s.live).some((l) => l.threadId === threadId) ||
        busyElsewhere(s.snapshot, threadId, Object.values(s.live), s.events),
    })),
  );
  const setEditing = useApp((s) => s.setEditing);
  const editButton = useFocusAfterEdit(message.id, editing);
  // What sending the edit takes away: every message after this one (their versions and edits with them).
  const later = useApp((s) => {
    if (!editing) return 0;
    const messages = s.threads.find((t) => t.id === threadId)?.messages ?? [];
    const at = messages.findIndex((m) => m.id === message.id);
    return at < 0 ? 0 : messages.length - at - 1;
  });
  const [draft, setDraft] = useState(message.content);
  if (editing) {
    const warningId = `edit-removes-${message.id}`;
    const canSend = draft.trim() !== '' && !threadBusy;
    return (
      <div className="message user edit-box" data-testid="message-user" data-message-id={message.id}>
        <EditBox
          who="you (editing)"
          draft={draft}
          setDraft={setDraft}
          inputTestId="edit-input"
          sendTestId="edit-send"
          sendLabel="Send"
          modEnter={false}
          canSend={canSend}
          onSend={() => bridge.editAndResend(threadId, message.id, draft)}
          describedBy={later > 0 ? warningId : undefined}
        >
          {later > 0 && (
            <div className="note edit-warning" data-testid="edit-removes" data-count={later}>
              <span className="edit-warning-text" id={warningId}>
                Send removes {later === 1 ? 'the message' : `the ${formatInteger(later)} messages`} after this one (with{' '}
                {later === 1 ? 'its' : 'their'} versions and edits) — Branch keeps them: it sends your edit in a new
                chat.
              </span>
              <button
                type="button"
                className="small"
                data-testid="edit-branch"
                disabled={!canSend}
                title="A new chat with the messages before this one, where your edit is sent; this chat stays as it is"
                onClick={() => bridge.editInBranch(threadId, message.id, draft)}
              >
                Branch
              </button>
            </div>
          )}
        </EditBox>
      </div>
    );
  }
  return (
    <article
      className="message user"
      aria-label={capitalized(which)}
      data-testid="message-user"
      data-message-id={message.id}
      data-left-out={leftOut || undefined}
    >
      <div className="who">
        you
        <span className="tools">
          <CopyButton text={message.content} what={which} />
          <BranchButton threadId={threadId} messageId={message.id} which={which} />
          {!threadBusy && (
            <button
              type="button"
              className="small"
              data-testid="edit-message"
              aria-label={`Edit ${which}`}
              ref={editButton}
              onClick={() => {
                setDraft(message.content);
                setEditing(message.id);
              }}
            >
              edit
            </button>
          )}
        </span>
      </div>
      {/* Each line in the direction of its letters (as a reply's blocks: lib/direction.ts), the box in its whole text's. */}
      <div className="bubble" data-testid="message-text" dir={textDirection(message.content) ?? 'auto'}>
        <MessageLines text={message.content} />
      </div>
      {message.attachments && message.attachments.length > 0 && <SentFiles files={message.attachments} />}
      {/* The chat ends with this message and no reply (imported so, say): a button asks the model for one. */}
      {isLast && !threadBusy && (
        <div className="note subtle unanswered" data-testid="unanswered-note">
          No reply yet.{' '}
          <button
            type="button"
            className="small"
            data-testid="get-reply"
            aria-label={`Get a reply to ${which}`}
            title="The model answers this message (the chat as it is, nothing removed)"
            onClick={() => bridge.regenerate(threadId)}
          >
            Get a reply
          </button>
        </div>
      )}
    </article>
  );
}

/** How much of a file the message shows when opened (the model read all of it). */
const SHOWN_FILE_CHARS = 20_000;

/** A sent message's files: each chip opens what the model read of it (and closes it again). */
function SentFiles({ files }: { files: NonNullable<StoredMessage['attachments']> }) {
  const [open, setOpen] = useState<number | null>(null);
  const shown = open === null ? undefined : files[open];
  return (
    <>
      <div className="attachments" data-testid="message-attachments">
        {files.map((a, i) => (
          <button
            type="button"
            className="chip"
            // biome-ignore lint/suspicious/noArrayIndexKey: a sent message's files never change or move
            key={i}
            data-testid="message-attachment"
            aria-expanded={open === i}
            title={open === i ? 'Hide the file' : 'Show the file as the model read it'}
            onClick={() => setOpen(open === i ? null : i)}
          >
            <FileIcon /> {a.name} <span className="muted">{formatBytes(attachmentBytes(a))}</span>
          </button>
        ))}
      </div>
      {shown && (
        <pre className="attachment-text" data-testid="message-attachment-text">
          {shown.text.slice(0, SHOWN_FILE_CHARS)}
          {shown.text.length > SHOWN_FILE_CHARS &&
            `\n… (${formatInteger(shown.text.length - SHOWN_FILE_CHARS)} more characters, which the model read too)`}
        </pre>
      )}
    </>
  );
}

export const Message = memo(function Message({
  message,
  threadId,
  isLast,
  nth,
  leftOut = false,
}: {
  message: StoredMessage;
  threadId: string;
  isLast: boolean;
  /** Its place among its writer's messages in the chat, from 1 (what its buttons' names call it: messageWhich). */
  nth: number;
  /** Part of an exchange the chat went on past without a reply: not in the conversation (prompt.ts leftOutMessages). */
  leftOut?: boolean;
}) {
  return message.role === 'user' ? (
    <UserMessage message={message} threadId={threadId} isLast={isLast} nth={nth} leftOut={leftOut} />
  ) : message.role === 'assistant' ? (
    <AssistantMessage message={message} threadId={threadId} isLast={isLast} nth={nth} leftOut={leftOut} />
  ) : message.role === 'tool' ? (
    <div className="message tool" data-testid="message-tool" data-message-id={message.id}>
      <ToolResult message={message} />
    </div>
  ) : (
    <div className="message system muted">system: {message.content}</div>
  );
});

/** Lines of a message past this many are not set apart (a pasted file of thousands): the box's direction is theirs. */
const DIRECTED_LINES = 500;

/**
 * A message's text, each line a block of its own in the direction of its letters (its newline kept in it: the text
 * reads, copies and is found as it was written).
 */
const MessageLines = memo(function MessageLines({ text }: { text: string }) {
  const lines = text.split('\n');
  if (lines.length === 1 || lines.length > DIRECTED_LINES) return <>{text}</>;
  return (
    <>
      {lines.map((line, i) => (
        // biome-ignore lint/suspicious/noArrayIndexKey: a line is where it is in the text, which does not change.
        <span key={i} className="line" dir={textDirection(line)}>
          {i < lines.length - 1 ? `${line}\n` : line}
        </span>
      ))}
    </>
  );
});
