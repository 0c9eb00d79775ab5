/**
 * The message box: Send/Stop, attached files, the draft's prompt against the context, a one-line summary of the
 * thread's settings, and the settings themselves.
 */
import { useEffect, useLayoutEffect, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { Attachment, Thread } from '../../shared/api';
import type { SearchDefaults } from '../../shared/model-spec';
import { useApp, useBridge } from '../bridge/context';
import { attachmentBytes, attachmentFrom, MAX_ATTACHMENTS } from '../lib/attachments';
import { busyElsewhere } from '../lib/busy-elsewhere';
import { quoted } from '../lib/direction';
import { drafts } from '../lib/drafts';
import { formatBytes } from '../lib/format';
import { DraftMeasure } from './DraftMeasure';
import { FileIcon, PaperclipIcon } from './Icons';
import { greedyByPackage, SettingsPanel } from './SettingsPanel';

/** Id of the message box, focused after sending and on thread switch. */
export const CHAT_INPUT_ID = 'chat-input';
/** The window's event for files dropped on the chat outside the message box (detail: the files): attached. */
export const ATTACH_EVENT = 'kvdesk:attach';

/** The message box grows with its text (wrapped lines too) up to this height, then scrolls. */
const MAX_INPUT_HEIGHT = 200;

/**
 * Sizes the message box to its text: its content's height (borders included), at most MAX_INPUT_HEIGHT or the
 * style's max-height (a short window's is less), scrolling past that.
 */
function fitHeight(el: HTMLTextAreaElement): void {
  // Measured at its least height ('auto'), the box around it held at its size meanwhile: let shrink for that
  // moment, it would make the message list above taller in the layout the measure forces, and the browser would
  // clamp the list's scroll position to that taller list's end, a scroll up the list took for the person's (a chat
  // following its end stopped following it as a draft of several lines was typed).
  const holder = el.parentElement;
  const held = holder?.style.minHeight ?? '';
  if (holder) holder.style.minHeight = `${holder.getBoundingClientRect().height}px`;
  el.style.height = 'auto';
  const border = el.offsetHeight - el.clientHeight;
  const needed = el.scrollHeight + border;
  const styled = Number.parseFloat(getComputedStyle(el).maxHeight);
  const most = Number.isFinite(styled) ? Math.min(MAX_INPUT_HEIGHT, styled) : MAX_INPUT_HEIGHT;
  el.style.height = `${Math.min(most, needed)}px`;
  el.style.overflowY = needed > most ? 'auto' : 'hidden';
  if (holder) holder.style.minHeight = held;
}

/**
 * The chat's settings in one line; `search`: the model's defaults (generation_config.json), said beside what the
 * chat leaves to them, as the host resolves them.
 */
function summary(thread: Thread | undefined, search: SearchDefaults | undefined): string {
  const s = thread?.sampling ?? {};
  const parts: string[] = [];
  if (s.greedy) parts.push('greedy');
  else if (s.greedy === false) parts.push('sampled');
  const greedyByDefault = greedyByPackage(s, search) && s.greedy === undefined;
  parts.push(`temp ${s.temperature ?? `default (${greedyByDefault ? 'greedy' : (search?.temperature ?? 0.7)})`}`);
  if (s.topP !== undefined) parts.push(`top-p ${s.topP}`);
  if (s.topK !== undefined) parts.push(`top-k ${s.topK}`);
  if (s.minP !== undefined) parts.push(`min-p ${s.minP}`);
  if (s.repetitionPenalty !== undefined) parts.push(`rep ${s.repetitionPenalty}`);
  if (s.repetitionWindow !== undefined) parts.push(`rep window ${s.repetitionWindow || 'all'}`);
  if (s.frequencyPenalty !== undefined) parts.push(`freq ${s.frequencyPenalty}`);
  if (s.presencePenalty !== undefined) parts.push(`presence ${s.presencePenalty}`);
  if (s.seed !== undefined) parts.push(`seed ${s.seed}`);
  parts.push(
    `max ${thread?.maxNewTokens ?? `default${search?.maxNewTokens !== undefined ? ` (${search.maxNewTokens})` : ''}`}`,
  );
  if (thread?.responseFormat === 'json') parts.push(thread.jsonSchema ? 'JSON schema' : 'JSON');
  if (thread?.contextOverflow === 'refuse') parts.push('no context overflow');
  if (thread?.stop?.length) parts.push(`stop ×${thread.stop.length}`);
  if (thread?.thinking !== undefined) parts.push(thread.thinking ? 'thinking on' : 'thinking off');
  if (thread?.thinkingBudget !== undefined && thread.thinking !== false)
    parts.push(`thinking budget ${thread.thinkingBudget}`);
  if (thread?.reasoningEffort !== undefined && thread.thinking !== false)
    parts.push(`effort ${thread.reasoningEffort}`);
  if (thread?.showProbabilities) parts.push('probabilities');
  if (thread?.mcpServers?.length)
    parts.push(`tools: ${thread.mcpServers.join(', ')}${thread.toolsRequired ? ' (must call)' : ''}`);
  return parts.join(' · ');
}

/**
 * A chat whose replies went to a model that is not loaded now: new replies go to the one picked, and the chat
 * says so (with the library's Load where the package is there, and that it is gone where the library no longer
 * has it: deleted, or forgotten).
 */
export function ThreadModelNote({ thread }: { thread: Thread }) {
  const bridge = useBridge();
  const { loaded, known, active, entry, gone, busy } = useApp(
    useShallow((s) => {
      const entry = s.library.find((e) => e.id === thread.modelId && !e.missing && !e.error);
      return {
        loaded: s.models.some((m) => m.id === thread.modelId),
        known: s.models.length > 0,
        active: s.models.find((m) => m.id === s.activeModelId)?.spec.displayName ?? s.activeModelId,
        entry,
        // A library not read yet is empty (a loaded model is always in it): nothing is said gone until it is read.
        gone: s.library.length > 0 && !s.library.some((e) => e.id === thread.modelId),
        busy: entry ? s.busyModels.includes(entry.root) : false,
      };
    }),
  );
  if (!thread.modelId || loaded || !known) return null;
  return (
    <div className="model-note" role="note" data-testid="thread-model-note">
      {/* One flex item: the bold names stay inside the sentence (the note's gap is between it and Load). */}
      <span data-testid="thread-model-note-text">
        {/* Names set apart (dir="auto" isolates them): an Arabic one keeps its place in the sentence. */}
        This chat was with <b dir="auto">{thread.modelId}</b>, which is not loaded: new replies go to{' '}
        <b dir="auto">{active}</b>.
        {entry
          ? ''
          : gone
            ? ' It is no longer in the library: add it again in Models to go on with it.'
            : ' Load it in Models to go on with it.'}
      </span>
      {entry && (
        <button
          type="button"
          className="small"
          data-testid="thread-model-load"
          disabled={busy}
          onClick={() => void bridge.loadAndUse(entry.root)}
        >
          {busy ? 'loading…' : `Load ${thread.modelId}`}
        </button>
      )}
    </div>
  );
}

/**
 * A model picked while the chat's reply runs: that reply goes on with the model it started on (a reply cannot
 * change model midway), the next one goes to the pick; said here rather than left to the picker to imply.
 */
function PickWhileReplying({ thread, streaming }: { thread: Thread; streaming: boolean }) {
  const { writing, next } = useApp(
    useShallow((s) => {
      const name = (id: string | null | undefined) => s.models.find((m) => m.id === id)?.spec.displayName ?? id;
      return streaming && thread.modelId && s.activeModelId && s.activeModelId !== thread.modelId
        ? { writing: name(thread.modelId), next: name(s.activeModelId) }
        : { writing: undefined, next: undefined };
    }),
  );
  if (!writing || !next) return null;
  return (
    <div className="model-note" role="status" data-testid="pick-while-replying">
      <span>
        This reply goes on with <b dir="auto">{writing}</b>; your next message goes to <b dir="auto">{next}</b>.
      </span>
    </div>
  );
}

/** Whether two drafts' files are the same (none is none, however made). */
function sameFiles(a: Attachment[], b: Attachment[]): boolean {
  return a === b || (a.length === 0 && b.length === 0);
}

export function Composer({ threadId }: { threadId: string | null }) {
  const bridge = useBridge();
  const { thread, streaming } = useApp(
    useShallow((s) => ({
      thread: s.threads.find((t) => t.id === threadId),
      streaming: threadId !== null && Object.values(s.live).some((l) => l.threadId === threadId),
    })),
  );
  // A message sent while the chat opens, waiting for its messages: Stop (Esc) gives it back to the box.
  const waiting = useApp((s) => threadId !== null && s.sendWaiting[threadId] !== undefined);
  const busy = streaming || waiting;
  const noModel = useApp((s) => s.models.length === 0);
  // The connection to the host lost (serve stopped, the network): a message sent now would fail; it stays here.
  const offline = useApp((s) => s.connection === 'reconnecting');
  // Another window or tab writes this chat's reply: a turn sent now would be refused as busy.
  const elsewhere = useApp(
    (s) => threadId !== null && !streaming && busyElsewhere(s.snapshot, threadId, Object.values(s.live), s.events),
  );
  // The model replies go to: what the chat's settings leave to it.
  const search = useApp((s) => s.models.find((m) => m.id === s.activeModelId)?.spec.search);
  const line = summary(thread, search);
  // Each chat's own draft (text and files): opening another chat shows that one's.
  const [text, setText] = useState(() => drafts().get(threadId).text);
  const [files, setFiles] = useState<Attachment[]>(() => drafts().get(threadId).files);
  const [fileError, setFileError] = useState<string | null>(null);
  const [open, setOpen] = useState(false);
  /** Presets applied: the settings panel starts over to show their values. */
  const [applied, setApplied] = useState(0);
  // The settings a new chat took from the chat open before it (while they are still as taken).
  const carriedFrom = thread ? bridge.settingsCarriedFrom(thread.id) : null;
  const ref = useRef<HTMLTextAreaElement>(null);
  const placeholder = noModel ? 'Load a model to chat (Models)…' : 'Message… (Enter sends, Shift+Enter new line)';
  // The box's height follows its text (or its placeholder), also where long lines wrap (and again when the
  // window's width changes).
  // biome-ignore lint/correctness/useExhaustiveDependencies: the text and the placeholder are what change the height
  useLayoutEffect(() => {
    if (ref.current) fitHeight(ref.current);
  }, [text, placeholder]);
  // The reply ended while Stop had the focus (it ended by itself, or as Stop was pressed): Stop turns into Send,
  // greyed while the box is empty, and the browser would drop the focus to the page. It goes to the message box.
  const stopFocused = useRef(false);
  const sendOrStop = useRef<HTMLButtonElement>(null);
  useLayoutEffect(() => {
    if (busy) {
      // Send clicked with the mouse keeps the focus as it turns into Stop (React keeps the one button): no focus
      // event says so.
      if (document.activeElement !== null && document.activeElement === sendOrStop.current) stopFocused.current = true;
      return;
    }
    if (!stopFocused.current) return;
    stopFocused.current = false;
    const active = document.activeElement;
    if (active === null || active === document.body || active === sendOrStop.current) {
      ref.current?.focus({ preventScroll: true });
    }
  }, [busy]);
  // The window opens ready to type (where nothing else took the focus first).
  useEffect(() => {
    if (document.activeElement === document.body || document.activeElement === null) ref.current?.focus();
  }, []);
  useEffect(() => {
    const el = ref.current;
    if (!el || typeof ResizeObserver === 'undefined') return;
    let width = el.clientWidth;
    const observer = new ResizeObserver(() => {
      if (el.clientWidth === width) return;
      width = el.clientWidth;
      fitHeight(el);
    });
    observer.observe(el);
    // A window made shorter or taller changes the box's max-height (a short window's is 30 % of it).
    const onResize = () => fitHeight(el);
    window.addEventListener('resize', onResize);
    return () => {
      observer.disconnect();
      window.removeEventListener('resize', onResize);
    };
  }, []);
  const fileInput = useRef<HTMLInputElement>(null);
  /** Files attached or being read. */
  const slots = useRef(files.length);
  /** Files attached or removed here, not yet kept in the drafts (the effect below keeps them). */
  const filesEdited = useRef(false);
  /** The chat whose draft the box shows. */
  const shownFor = useRef(threadId);
  useLayoutEffect(() => {
    const was = shownFor.current;
    if (was === threadId) return;
    shownFor.current = threadId;
    let next = drafts().get(threadId);
    // The chat made for what was typed before there was one (a first start) takes it.
    if (was === null && next.text === '' && next.files.length === 0) {
      next = drafts().get(null);
      drafts().set(null, { text: '', files: [] });
      drafts().set(threadId, next);
    }
    setText(next.text);
    setFiles(next.files);
    filesEdited.current = false;
    slots.current = next.files.length;
    setFileError(null);
  }, [threadId]);
  // What is changed here is kept (what is typed as it is typed; files attached or removed once the box has them).
  // What the box took from the drafts (another chat opened, another tab's change) is not written back: the drafts
  // may be newer by then, from another tab.
  useEffect(() => {
    if (!filesEdited.current) return;
    filesEdited.current = false;
    drafts().setFiles(shownFor.current, files);
  }, [files]);
  // Another tab or window changed the draft shown (sent it, wrote more of it): the box shows what it has now, unless
  // it was changed here since (then what is here stays, and is kept at its next change).
  const shown = useRef({ text, files });
  shown.current = { text, files };
  useEffect(
    () =>
      drafts().onChangedElsewhere((id, before) => {
        if (id !== shownFor.current) return;
        const now = drafts().get(id);
        const here = shown.current;
        if (here.text === before.text) setText(now.text);
        // Files being read here (slots taken, not yet attached), or not yet kept, are a change here.
        if (sameFiles(here.files, before.files) && slots.current === here.files.length && !filesEdited.current) {
          setFiles(now.files);
          slots.current = now.files.length;
        }
      }),
    [],
  );
  // The files kept from before a reload come a moment after the page: the draft shown takes its own then (unless
  // files were attached meanwhile).
  useEffect(() => {
    const take = () => {
      const kept = drafts().get(shownFor.current).files;
      if (kept.length === 0 || slots.current > 0) return;
      slots.current = kept.length;
      setFiles(kept);
    };
    take();
    return drafts().onFilesRead(take);
  }, []);

  const send = () => {
    if ((!text.trim() && files.length === 0) || busy || offline || elsewhere) return;
    // Not sent now (a tool of the chat still runs: the notice says so): the text and files stay.
    // The sent draft is gone now, in its store too: sending from no chat makes one, which would take the draft of
    // "no chat" (still this text until the effect below ran) as its own.
    drafts().set(shownFor.current, { text: '', files: [] });
    if (!bridge.send(text, files)) {
      drafts().set(shownFor.current, { text, files });
      return;
    }
    setText('');
    setFiles([]);
    // Files attached a moment ago and not yet kept (their effect not run yet) are sent: not kept as a draft now.
    filesEdited.current = false;
    slots.current = 0;
    setFileError(null);
  };
  /** Reads chosen or dropped files as text; what is not text (or too big, or too many) is refused, named. */
  const attach = async (list: FileList | File[]) => {
    const errors: string[] = [];
    const added: Attachment[] = [];
    // The chat the files were given to: another opened while they are read does not get them.
    const chat = shownFor.current;
    const here = () => shownFor.current === chat;
    for (const f of Array.from(list)) {
      // Slots are taken before a file is read, so two quick drops cannot add more than a message takes.
      if (here() && slots.current >= MAX_ATTACHMENTS) {
        errors.push(`${f.name}: a message takes at most ${MAX_ATTACHMENTS} files.`);
        continue;
      }
      if (here()) slots.current++;
      const r = attachmentFrom(f.name, new Uint8Array(await f.arrayBuffer()));
      if (r.ok) added.push(r.attachment);
      else {
        if (here()) slots.current--;
        errors.push(r.error);
      }
    }
    if (!here()) {
      // Read after another chat was opened: they join their own chat's draft.
      const d = drafts().get(chat);
      if (added.length > 0) drafts().set(chat, { text: d.text, files: [...d.files, ...added] });
      return;
    }
    if (added.length > 0) {
      filesEdited.current = true;
      setFiles((had) => [...had, ...added]);
    }
    setFileError(errors.length > 0 ? errors.join(' ') : null);
  };

  // Files dropped elsewhere on the chat (App's window drop): attached as here.
  const attachRef = useRef(attach);
  attachRef.current = attach;
  useEffect(() => {
    const onAttach = (e: Event) => void attachRef.current((e as CustomEvent<File[]>).detail);
    window.addEventListener(ATTACH_EVENT, onAttach);
    return () => window.removeEventListener(ATTACH_EVENT, onAttach);
  }, []);

  return (
    <section
      className="composer"
      aria-label="Compose"
      // Files dropped on the message box are attached to the message (a folder anywhere else is a model package).
      onDragOver={(e) => {
        if (Array.from(e.dataTransfer.items).some((i) => i.kind === 'file')) e.preventDefault();
      }}
      onDrop={(e) => {
        const entries = Array.from(e.dataTransfer.items).map((i) => i.webkitGetAsEntry?.());
        if (e.dataTransfer.files.length === 0 || entries.some((x) => x?.isDirectory)) return;
        // Handled: the window's drop (a model package) sees it prevented and leaves it.
        e.preventDefault();
        void attach(e.dataTransfer.files);
      }}
    >
      {files.length > 0 && (
        <div className="attachments" data-testid="composer-attachments">
          {files.map((f, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: chips are only appended or removed, and hold no state
            <span className="chip" key={i} data-testid="composer-attachment" title={f.name}>
              <FileIcon /> {f.name} <span className="muted">{formatBytes(attachmentBytes(f))}</span>
              <button
                type="button"
                className="ghost small"
                aria-label={`Remove ${f.name}`}
                data-testid="composer-attachment-remove"
                onClick={() => {
                  slots.current--;
                  filesEdited.current = true;
                  setFiles((had) => had.filter((_, j) => j !== i));
                }}
              >
                ✕
              </button>
            </span>
          ))}
        </div>
      )}
      {thread && <ThreadModelNote thread={thread} />}
      {thread && <PickWhileReplying thread={thread} streaming={streaming} />}
      {offline && (
        <div className="model-note" role="status" data-testid="offline-note">
          kvdesk cannot be reached (reconnecting…): what you write stays here; send it once the connection is back.
        </div>
      )}
      {elsewhere && !offline && (
        <div className="model-note" role="status" data-testid="elsewhere-busy-note">
          A reply to this chat is being written in another window or tab: what you write stays here; send it once that
          reply ends.
        </div>
      )}
      {fileError && (
        <div className="refusal failed" role="alert" data-testid="attachment-error">
          {fileError}
        </div>
      )}
      <div className="box">
        <button
          type="button"
          className="ghost attach"
          data-testid="attach-button"
          // A short name; the title says the rest (its description).
          aria-label="Attach files"
          title="Attach text files (notes, code, CSV, JSON…): the model reads them with your message. Or drop them here."
          disabled={streaming}
          onClick={() => fileInput.current?.click()}
        >
          <PaperclipIcon />
        </button>
        <input
          ref={fileInput}
          type="file"
          multiple
          hidden
          data-testid="attach-input"
          onChange={(e) => {
            const list = e.target.files;
            if (list) void attach(Array.from(list));
            e.target.value = '';
          }}
        />
        <textarea
          id={CHAT_INPUT_ID}
          ref={ref}
          data-testid="chat-input"
          aria-label="Message"
          // Hebrew or Arabic typed reads right to left (each line in its own direction).
          dir="auto"
          rows={1}
          placeholder={placeholder}
          value={text}
          onChange={(e) => {
            setText(e.target.value);
            drafts().setText(shownFor.current, e.target.value);
          }}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
              e.preventDefault();
              send();
            }
          }}
        />
        {busy ? (
          <button
            type="button"
            className="danger"
            data-testid="stop-button"
            ref={sendOrStop}
            onFocus={() => {
              stopFocused.current = true;
            }}
            onBlur={() => {
              stopFocused.current = false;
            }}
            onClick={() => bridge.stop(threadId ?? undefined)}
            title={waiting ? 'Do not send it (Esc): your message goes back to the box' : 'Stop (Esc)'}
          >
            Stop
          </button>
        ) : (
          <button
            type="button"
            className="primary"
            data-testid="send-button"
            ref={sendOrStop}
            disabled={(!text.trim() && files.length === 0) || offline || elsewhere}
            onClick={send}
            title={
              offline
                ? 'kvdesk cannot be reached: your message stays here until it is back'
                : elsewhere
                  ? 'A reply to this chat is being written in another window or tab: send once it ends'
                  : 'Send (Enter)'
            }
          >
            Send
          </button>
        )}
      </div>
      <div className="summary">
        <span className="num settings-line" data-testid="settings-summary" title={line}>
          {line}
        </span>
        {thread?.systemPrompt && <span title={thread.systemPrompt}>· system prompt set</span>}
        {carriedFrom !== null && threadId && (
          <span className="carried" data-testid="carried-settings">
            <span className="from" title={`This new chat took the settings of ${quoted(carriedFrom)}`}>
              · from “<bdi>{carriedFrom}</bdi>”
            </span>
            <button
              type="button"
              className="ghost small"
              data-testid="carried-reset"
              title="This new chat took the settings of the chat you were in (system prompt, sampling, limits). Start from the model's defaults instead."
              onClick={() => {
                bridge.startFromDefaults(threadId);
                setApplied((n) => n + 1);
              }}
            >
              use the defaults
            </button>
          </span>
        )}
        {threadId && <DraftMeasure threadId={threadId} text={text} files={files} />}
        <button
          type="button"
          className="ghost"
          data-testid="settings-toggle"
          aria-expanded={open && thread !== undefined}
          // No chat yet (a first start): the settings are a new chat's, made for them.
          onClick={() => {
            if (!thread) bridge.newThread();
            setOpen(!thread || !open);
          }}
        >
          {open ? 'hide settings' : 'system & sampling…'}
        </button>
      </div>
      {open && thread && (
        <SettingsPanel
          key={`${thread.id}:${applied}`}
          thread={thread}
          presets={{ onApplied: () => setApplied((n) => n + 1) }}
        />
      )}
    </section>
  );
}
