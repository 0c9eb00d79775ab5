/** Message box with Send/Stop, a one-line summary of the thread's settings, and the settings themselves. */
import { useEffect, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { Attachment, PromptMeasure, Thread } from '../../shared/api';
import type { SamplingSettings } from '../../shared/contract';
import { useApp, useBridge } from '../bridge/context';
import { lastReplyDrop, parseSchema } from '../bridge/prompt';
import { attachmentFrom, MAX_ATTACHMENTS } from '../lib/attachments';
import { formatBytes, formatInteger } from '../lib/format';
import { FileIcon, PaperclipIcon } from './Icons';

/** Id of the message box, focused after sending and on thread switch. */
export const CHAT_INPUT_ID = 'chat-input';

function summary(thread: Thread | undefined): string {
  const s = thread?.sampling ?? {};
  const parts: string[] = [];
  if (s.greedy) parts.push('greedy');
  parts.push(`temp ${s.temperature ?? 'default'}`);
  if (s.topP !== undefined) parts.push(`top-p ${s.topP}`);
  if (s.topK !== undefined) parts.push(`top-k ${s.topK}`);
  if (s.minP !== undefined) parts.push(`min-p ${s.minP}`);
  if (s.repetitionPenalty !== undefined) parts.push(`rep ${s.repetitionPenalty}`);
  if (s.repetitionWindow !== undefined) parts.push(`rep window ${s.repetitionWindow || 'all'}`);
  if (s.frequencyPenalty !== undefined) parts.push(`freq ${s.frequencyPenalty}`);
  if (s.presencePenalty !== undefined) parts.push(`presence ${s.presencePenalty}`);
  if (s.seed !== undefined) parts.push(`seed ${s.seed}`);
  parts.push(`max ${thread?.maxNewTokens ?? 'default'}`);
  if (thread?.responseFormat === 'json') parts.push(thread.jsonSchema ? 'JSON schema' : 'JSON');
  if (thread?.contextOverflow === 'refuse') parts.push('no context overflow');
  if (thread?.stop?.length) parts.push(`stop ×${thread.stop.length}`);
  return parts.join(' · ');
}

type NumField = {
  key: keyof SamplingSettings;
  label: string;
  min: number;
  max?: number;
  step: number;
  int?: boolean;
  placeholder: string;
};

const FIELDS: NumField[] = [
  { key: 'temperature', label: 'temperature', min: 0, max: 10, step: 0.05, placeholder: '0.7' },
  { key: 'topP', label: 'top-p', min: 0.01, max: 1, step: 0.01, placeholder: '1' },
  { key: 'topK', label: 'top-k', min: 0, step: 1, int: true, placeholder: '0 (off)' },
  { key: 'minP', label: 'min-p', min: 0, max: 1, step: 0.01, placeholder: '0' },
  { key: 'repetitionPenalty', label: 'repetition penalty', min: 0.01, max: 10, step: 0.05, placeholder: '1' },
  {
    key: 'repetitionWindow',
    label: 'repetition window (tokens)',
    min: 0,
    max: 1_000_000,
    step: 1,
    int: true,
    placeholder: '0 (all)',
  },
  { key: 'frequencyPenalty', label: 'frequency penalty', min: -2, max: 2, step: 0.1, placeholder: '0' },
  { key: 'presencePenalty', label: 'presence penalty', min: -2, max: 2, step: 0.1, placeholder: '0' },
  { key: 'seed', label: 'seed', min: 0, step: 1, int: true, placeholder: 'random' },
];

/** Reads a number box: empty means "model default" (undefined); out-of-range values are clamped by the host's schema, so refuse them here. */
function readNumber(text: string, f: Pick<NumField, 'min' | 'max' | 'int'>): number | undefined | null {
  if (text.trim() === '') return undefined;
  const n = Number(text);
  if (!Number.isFinite(n) || n < f.min || (f.max !== undefined && n > f.max) || (f.int && !Number.isInteger(n)))
    return null;
  return n;
}

/** What the settings panel needs from the composer for presets (kept there: applying one remounts the panel). */
interface PresetProps {
  onApplied: () => void;
  /** The preset last applied or saved (its delete button shows). */
  picked: string;
  setPicked: (name: string) => void;
}

/**
 * Presets: named chat settings saved from a chat and given to another (system prompt, sampling, max tokens, stop
 * strings, the overflow choice). `onApplied` lets the panel show the new values (its fields keep what they show).
 */
function PresetRow({ thread, onApplied, picked, setPicked }: PresetProps & { thread: Thread }) {
  const bridge = useBridge();
  const presets = useApp((s) => s.ui.presets) ?? [];
  const [name, setName] = useState('');
  return (
    <div className="presets" data-testid="presets">
      <label>
        preset
        <select
          data-testid="preset-select"
          // Always back on "apply a preset…", so picking the same preset again applies it again.
          value=""
          onChange={(e) => {
            setPicked(e.target.value);
            if (e.target.value) {
              bridge.applyPreset(thread.id, e.target.value);
              onApplied();
            }
          }}
        >
          <option value="">{presets.length > 0 ? 'apply a preset…' : 'no presets yet'}</option>
          {presets.map((p) => (
            <option key={p.name} value={p.name}>
              {p.name}
            </option>
          ))}
        </select>
      </label>
      {picked && (
        <button
          type="button"
          className="ghost small"
          data-testid="preset-delete"
          onClick={() => {
            bridge.deletePreset(picked);
            setPicked('');
          }}
        >
          delete “{picked}”
        </button>
      )}
      <label>
        save these settings as
        <span className="row">
          <input
            type="text"
            data-testid="preset-name"
            maxLength={80}
            placeholder="name"
            value={name}
            onChange={(e) => setName(e.target.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && name.trim()) {
                bridge.savePreset(thread.id, name);
                setPicked(name.trim());
                setName('');
              }
            }}
          />
          <button
            type="button"
            data-testid="preset-save"
            disabled={!name.trim()}
            onClick={() => {
              bridge.savePreset(thread.id, name);
              setPicked(name.trim());
              setName('');
            }}
          >
            Save
          </button>
        </span>
      </label>
    </div>
  );
}

function SettingsPanel({ thread, presets }: { thread: Thread; presets: PresetProps }) {
  const bridge = useBridge();
  const sampling = thread.sampling ?? {};
  const setSampling = (key: keyof SamplingSettings, value: number | boolean | undefined) => {
    const next: SamplingSettings = { ...sampling };
    if (value === undefined) delete next[key];
    else (next as Record<string, number | boolean>)[key] = value;
    bridge.updateThreadSettings(thread.id, { sampling: next });
  };
  return (
    <div className="settings" data-testid="settings-panel">
      <PresetRow thread={thread} {...presets} />
      <label className="system">
        system prompt
        <textarea
          data-testid="system-prompt"
          defaultValue={thread.systemPrompt ?? ''}
          placeholder="You are a helpful assistant."
          onBlur={(e) => {
            if (e.target.value !== (thread.systemPrompt ?? ''))
              bridge.updateThreadSettings(thread.id, { systemPrompt: e.target.value });
          }}
        />
      </label>
      {FIELDS.map((f) => (
        <label key={f.key}>
          {f.label}
          <input
            type="number"
            data-testid={`setting-${f.key}`}
            min={f.min}
            max={f.max}
            step={f.step}
            placeholder={f.placeholder}
            defaultValue={(sampling[f.key] as number | undefined) ?? ''}
            onBlur={(e) => {
              const v = readNumber(e.target.value, f);
              if (v === null) e.target.setCustomValidity(`between ${f.min} and ${f.max ?? '∞'}`);
              else {
                e.target.setCustomValidity('');
                if (v !== sampling[f.key]) setSampling(f.key, v);
              }
              e.target.reportValidity();
            }}
          />
        </label>
      ))}
      <label>
        max tokens
        <input
          type="number"
          data-testid="setting-maxNewTokens"
          min={1}
          step={1}
          placeholder="model default"
          defaultValue={thread.maxNewTokens ?? ''}
          onBlur={(e) => {
            const v = readNumber(e.target.value, { min: 1, max: 1_000_000, int: true });
            if (v === null) return;
            if (v !== thread.maxNewTokens) bridge.updateThreadSettings(thread.id, { maxNewTokens: v });
          }}
        />
      </label>
      <label>
        greedy
        <input
          type="checkbox"
          data-testid="setting-greedy"
          checked={sampling.greedy === true}
          onChange={(e) => setSampling('greedy', e.target.checked ? true : undefined)}
        />
      </label>
      <label
        className="wide"
        title="A chat longer than the model's context leaves out its oldest messages (whole exchanges; the system prompt stays), or refuses the next turn."
      >
        when the chat outgrows the context
        <select
          data-testid="setting-contextOverflow"
          value={thread.contextOverflow ?? 'drop-oldest'}
          onChange={(e) =>
            bridge.updateThreadSettings(thread.id, {
              contextOverflow: e.target.value === 'refuse' ? 'refuse' : undefined,
            })
          }
        >
          <option value="drop-oldest">leave out the oldest messages</option>
          <option value="refuse">stop with an error</option>
        </select>
      </label>
      <label
        className="wide"
        title="A reply ends where one of these would appear (the string itself is not shown). One per line, at most 16."
      >
        stop strings (one per line)
        <textarea
          className="mono"
          rows={2}
          data-testid="setting-stop"
          defaultValue={(thread.stop ?? []).join('\n')}
          placeholder={'e.g. ###\nUser:'}
          onBlur={(e) => {
            const lines = e.target.value.split('\n').filter((l) => l.length > 0);
            if (lines.length > 16 || lines.some((l) => l.length > 200)) {
              e.target.setCustomValidity('at most 16 stop strings of at most 200 characters');
              e.target.reportValidity();
              return;
            }
            e.target.setCustomValidity('');
            const next = lines.length > 0 ? lines : undefined;
            if (JSON.stringify(next) !== JSON.stringify(thread.stop))
              bridge.updateThreadSettings(thread.id, { stop: next });
          }}
        />
      </label>
      <label title="Every reply is one JSON object: sampling keeps to tokens that can continue one, and the reply ends when it closes. Ask for JSON in your message too, so the model means it.">
        JSON output
        <input
          type="checkbox"
          data-testid="setting-json"
          checked={thread.responseFormat === 'json'}
          onChange={(e) =>
            bridge.updateThreadSettings(thread.id, { responseFormat: e.target.checked ? 'json' : undefined })
          }
        />
      </label>
      {thread.responseFormat === 'json' && (
        <label
          className="system schema"
          title="Structured output: every reply conforms to this JSON Schema (kvdesk's subset: see the README). Leave it empty for any JSON object."
        >
          JSON schema (optional)
          <textarea
            className="mono"
            maxLength={100_000}
            data-testid="setting-json-schema"
            defaultValue={thread.jsonSchema ?? ''}
            placeholder='{"type": "object", "properties": {"answer": {"type": "string"}}}'
            onBlur={(e) => {
              const text = e.target.value;
              if (text.trim() !== '' && !parseSchema(text)) {
                e.target.setCustomValidity('not a JSON object: a JSON Schema starts with {');
                e.target.reportValidity();
                return;
              }
              e.target.setCustomValidity('');
              const next = text.trim() === '' ? undefined : text;
              if (next !== thread.jsonSchema) bridge.updateThreadSettings(thread.id, { jsonSchema: next });
            }}
          />
        </label>
      )}
      <div className="hint">Empty fields use the model package's defaults. The same seed gives the same reply.</div>
    </div>
  );
}

/**
 * What sending the draft would do to the context, measured by the host as the draft is typed (after a pause):
 * the next prompt's tokens against the model's context, and whether the oldest messages would be left out (or,
 * set to refuse, the turn refused).
 */
function DraftMeasure({ threadId, text, files }: { threadId: string; text: string; files: Attachment[] }) {
  const bridge = useBridge();
  const { thread, streaming } = useApp(
    useShallow((s) => ({
      thread: s.threads.find((t) => t.id === threadId),
      streaming: Object.values(s.live).some((l) => l.threadId === threadId),
    })),
  );
  const [measure, setMeasure] = useState<PromptMeasure | null>(null);
  const messages = thread?.messages.length ?? 0;
  const model = useApp((s) => s.activeModelId);
  // One measure in flight at a time: a pause while one runs measures again once it is back.
  const inFlight = useRef(false);
  const [again, setAgain] = useState(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: measured again when the draft, the chat or the model changes
  useEffect(() => {
    if ((!text.trim() && files.length === 0) || streaming) {
      setMeasure(null);
      return;
    }
    let current = true;
    const timer = setTimeout(() => {
      if (inFlight.current) return;
      inFlight.current = true;
      void bridge.measureDraft(threadId, text, files).then((m) => {
        inFlight.current = false;
        if (current) setMeasure(m);
        else setAgain((n) => n + 1); // the draft changed meanwhile: measure what it is now
      });
    }, 250);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [
    text,
    files,
    threadId,
    messages,
    streaming,
    model,
    again,
    thread?.contextOverflow,
    thread?.systemPrompt,
    thread?.maxNewTokens,
  ]);
  if (!measure || (!text.trim() && files.length === 0) || !thread) return null;
  const before = lastReplyDrop(thread.messages)?.messages ?? 0;
  const more = (measure.droppedMessages ?? 0) - before;
  const over = thread.contextOverflow === 'refuse' && measure.promptTokens >= measure.contextLength;
  return (
    <span
      className={`num draft-measure ${over ? 'over' : ''}`}
      data-testid="draft-measure"
      data-prompt-tokens={measure.promptTokens}
      data-context={measure.contextLength}
      title="The prompt the model would read if you sent this now (the conversation, your message and the template), against its context."
    >
      {formatInteger(measure.promptTokens)} / {formatInteger(measure.contextLength)} tokens
      {more > 0 ? ` · the oldest ${more} more messages would be left out` : ''}
      {over ? ' · too long for the context' : ''}
    </span>
  );
}

export function Composer({ threadId }: { threadId: string | null }) {
  const bridge = useBridge();
  const { thread, streaming } = useApp(
    useShallow((s) => ({
      thread: s.threads.find((t) => t.id === threadId),
      streaming: threadId !== null && Object.values(s.live).some((l) => l.threadId === threadId),
    })),
  );
  const noModel = useApp((s) => s.models.length === 0);
  const [text, setText] = useState('');
  const [files, setFiles] = useState<Attachment[]>([]);
  const [fileError, setFileError] = useState<string | null>(null);
  const [open, setOpen] = useState(false);
  /** Presets applied: the settings panel starts over to show their values. */
  const [applied, setApplied] = useState(0);
  const [picked, setPicked] = useState('');
  // The preset last applied or saved is this chat's: another chat starts without one.
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs when the open chat changes
  useEffect(() => setPicked(''), [threadId]);
  const ref = useRef<HTMLTextAreaElement>(null);
  const fileInput = useRef<HTMLInputElement>(null);
  /** Files attached or being read. */
  const slots = useRef(0);

  const send = () => {
    if ((!text.trim() && files.length === 0) || streaming) return;
    bridge.send(text, files);
    setText('');
    setFiles([]);
    slots.current = 0;
    setFileError(null);
  };
  /** Reads chosen or dropped files as text; what is not text (or too big, or too many) is refused, named. */
  const attach = async (list: FileList | File[]) => {
    const errors: string[] = [];
    const added: Attachment[] = [];
    for (const f of Array.from(list)) {
      // Slots are taken before a file is read, so two quick drops cannot add more than a message takes.
      if (slots.current >= MAX_ATTACHMENTS) {
        errors.push(`${f.name}: a message takes at most ${MAX_ATTACHMENTS} files.`);
        continue;
      }
      slots.current++;
      const r = attachmentFrom(f.name, new Uint8Array(await f.arrayBuffer()));
      if (r.ok) added.push(r.attachment);
      else {
        slots.current--;
        errors.push(r.error);
      }
    }
    if (added.length > 0) setFiles((had) => [...had, ...added]);
    setFileError(errors.length > 0 ? errors.join(' ') : null);
  };

  return (
    <section
      className="composer"
      aria-label="Message"
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
              <FileIcon /> {f.name}{' '}
              <span className="muted">{formatBytes(new TextEncoder().encode(f.text).length)}</span>
              <button
                type="button"
                className="ghost small"
                aria-label={`Remove ${f.name}`}
                data-testid="composer-attachment-remove"
                onClick={() => {
                  slots.current--;
                  setFiles((had) => had.filter((_, j) => j !== i));
                }}
              >
                ✕
              </button>
            </span>
          ))}
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
          rows={Math.min(8, Math.max(1, text.split('\n').length))}
          placeholder={noModel ? 'Load a model to chat (Models)…' : 'Message… (Enter sends, Shift+Enter new line)'}
          value={text}
          onChange={(e) => setText(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
              e.preventDefault();
              send();
            }
          }}
        />
        {streaming ? (
          <button
            type="button"
            className="danger"
            data-testid="stop-button"
            onClick={() => bridge.stop(threadId ?? undefined)}
            title="Stop (Esc)"
          >
            Stop
          </button>
        ) : (
          <button
            type="button"
            className="primary"
            data-testid="send-button"
            disabled={!text.trim() && files.length === 0}
            onClick={send}
            title="Send (Enter)"
          >
            Send
          </button>
        )}
      </div>
      <div className="summary">
        <span className="num" data-testid="settings-summary">
          {summary(thread)}
        </span>
        {thread?.systemPrompt && <span title={thread.systemPrompt}>· system prompt set</span>}
        {threadId && <DraftMeasure threadId={threadId} text={text} files={files} />}
        <button
          type="button"
          className="ghost"
          data-testid="settings-toggle"
          onClick={() => setOpen(!open)}
          disabled={!thread}
        >
          {open ? 'hide settings' : 'system & sampling…'}
        </button>
      </div>
      {open && thread && (
        <SettingsPanel
          key={`${thread.id}:${applied}`}
          thread={thread}
          presets={{ onApplied: () => setApplied((n) => n + 1), picked, setPicked }}
        />
      )}
    </section>
  );
}
