/** The open thread's settings: presets, system prompt, sampling, limits, stop strings, overflow, JSON output. */
import { type ReactNode, useEffect, useId, useRef, useState } from 'react';
import { type McpStatus, STOP_MAX_CHARS, STOP_MAX_COUNT, type Thread } from '../../shared/api';
import type { SamplingSettings } from '../../shared/contract';
import type { SearchDefaults } from '../../shared/model-spec';
import { reasoningWhere } from '../../shared/reasoning';
import { useApp, useAppStore, useBridge } from '../bridge/context';
import { schemaProblem } from '../bridge/prompt';
import { formatInteger } from '../lib/format';
import { openOnArrow } from '../lib/open-on-arrow';
import { presetInEffect, presetName } from '../lib/presets';
import { readStops, stopsAsText } from '../lib/stop-strings';

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
  { key: 'topP', label: 'top-p', min: 0, max: 1, step: 0.01, placeholder: '1' },
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
  // -1 is a random seed, as on the APIs (`seed: -1`) and `kvdesk generate --seed -1`: the field left empty.
  { key: 'seed', label: 'seed', min: -1, step: 1, int: true, placeholder: 'random' },
];

/**
 * Whether the model's package makes the chat's replies greedy (do_sample false, and no temperature set), as the host
 * resolves it: the chat's own `greedy`, when set, decides instead.
 */
export function greedyByPackage(sampling: SamplingSettings, search: SearchDefaults | undefined): boolean {
  return search?.doSample === false && sampling.temperature === undefined;
}

/**
 * What an empty field means: the model package's default where it sets one (generation_config.json), else
 * kvdesk's, as the host resolves them.
 */
function emptyMeans(f: NumField, search: SearchDefaults | undefined, sampled: boolean): string {
  // A package that asks for greedy decoding, unless the chat turned it off.
  if (f.key === 'temperature' && search?.doSample === false && !sampled) return 'greedy';
  const packaged = search?.[f.key as keyof SearchDefaults];
  if (typeof packaged !== 'number') return f.placeholder;
  return f.key === 'topK' && packaged === 0 ? '0 (off)' : String(packaged);
}

/**
 * Reads a number box: empty means "model default" (undefined); out-of-range values are clamped by the host's
 * schema, so refuse them here, as what is no number yet ("-", "1e": the field's value is empty then).
 */
function readNumber(
  field: { value: string; validity?: { badInput: boolean } },
  f: Pick<NumField, 'min' | 'max' | 'int'>,
): number | undefined | null {
  const text = field.value;
  if (field.validity?.badInput) return null;
  if (text.trim() === '') return undefined;
  const n = Number(text);
  if (!Number.isFinite(n) || n < f.min || (f.max !== undefined && n > f.max) || (f.int && !Number.isInteger(n)))
    return null;
  return n;
}

/** How long after the last key a field's value is taken (each take saves the chat: not one at every key). */
export const TAKE_AFTER_MS = 500;

/**
 * A field's value taken as it is typed: a moment after the last key, at once when the field is left, and before
 * the panel goes (another chat opened, a preset applied) or the page does (a reload, the window closed), which
 * Chromium does without a blur. `later` (on each change) waits for the keys to stop; `now` (on blur) takes it at
 * once, if it changed since it was last taken. A take reads the chat as it is then (useLatest), not as it was at
 * the key.
 */
function useTakes(): { later(key: string, take: () => void): void; now(key: string, take: () => void): void } {
  const pending = useRef(new Map<string, { take: () => void; timer: ReturnType<typeof setTimeout> }>());
  useEffect(() => {
    const all = pending.current;
    const takeAll = () => {
      for (const { take, timer } of all.values()) {
        clearTimeout(timer);
        take();
      }
      all.clear();
    };
    window.addEventListener('pagehide', takeAll);
    return () => {
      window.removeEventListener('pagehide', takeAll);
      takeAll();
    };
  }, []);
  const drop = (key: string) => {
    const had = pending.current.get(key);
    if (had) clearTimeout(had.timer);
    pending.current.delete(key);
  };
  return {
    later(key, take) {
      drop(key);
      const timer = setTimeout(() => {
        pending.current.delete(key);
        take();
      }, TAKE_AFTER_MS);
      pending.current.set(key, { take, timer });
    },
    now(key, take) {
      // Only a field changed since its last take: one left as it was would save its text (the chat's value when
      // it was typed) over a newer one (another tab's).
      if (!pending.current.has(key)) return;
      drop(key);
      take();
    },
  };
}

/**
 * The chat as it is now (the store's), for what runs after the render that made it: a take due later, the panel's
 * last one, or a second take before the panel shows the first.
 */
function useLatest(thread: Thread): () => Thread {
  const store = useAppStore();
  return () => store.getState().threads.find((t) => t.id === thread.id) ?? thread;
}

/** What the settings panel needs from the composer for presets (kept there: applying one remounts the panel). */
export interface PresetProps {
  onApplied: () => void;
}

/**
 * A field's value that cannot be taken: said beside the field, which keeps what was typed (and is marked invalid),
 * while the setting keeps its last good value. The browser's own bubble (reportValidity) is not used: it takes the
 * focus back to the field, so the person could not click anywhere else until the value was mended.
 */
function useFieldErrors(): [
  Record<string, string>,
  (key: string, field: HTMLInputElement | HTMLTextAreaElement, error: string | null) => void,
  /** The field is being edited: its refusal goes (the value is checked again when the field is left). */
  (key: string, field: HTMLInputElement | HTMLTextAreaElement) => void,
] {
  const [errors, setErrors] = useState<Record<string, string>>({});
  const check = (key: string, field: HTMLInputElement | HTMLTextAreaElement, error: string | null) => {
    field.setCustomValidity(error ?? '');
    field.setAttribute('aria-invalid', error ? 'true' : 'false');
    // The refusal, then the field's own hint where it has one (data-hint: the hint's id).
    const described = [error ? fieldErrorId(key) : '', field.dataset.hint ?? ''].filter((id) => id !== '').join(' ');
    if (described) field.setAttribute('aria-describedby', described);
    else field.removeAttribute('aria-describedby');
    setErrors((was) => {
      if ((was[key] ?? null) === error) return was;
      const next = { ...was };
      if (error) next[key] = error;
      else delete next[key];
      return next;
    });
  };
  const editing = (key: string, field: HTMLInputElement | HTMLTextAreaElement) => {
    if (errors[key] !== undefined) check(key, field, null);
  };
  return [errors, check, editing];
}

const fieldErrorId = (name: string) => `setting-error-${name}`;
/** The stop strings' hint: how a line writes a line break. */
const STOP_HINT_ID = 'setting-stop-hint';

/**
 * A field that can refuse its value: the label, then the refusal under it. The refusal is outside the label, so
 * the field's name stays the label's (a screen reader reads the refusal as the field's description).
 */
function Field({
  name,
  errors,
  className,
  children,
}: {
  name: string;
  errors: Record<string, string>;
  className?: string;
  children: ReactNode;
}) {
  const error = errors[name];
  return (
    <div className={className ? `field ${className}` : 'field'}>
      {children}
      {error && (
        <span className="field-error" role="alert" id={fieldErrorId(name)} data-testid={fieldErrorId(name)}>
          {error}: not taken
        </span>
      )}
    </div>
  );
}

/**
 * Presets: named chat settings saved from a chat and given to another (system prompt, sampling, max tokens, stop
 * strings, the overflow choice). The picker shows the preset in effect (the one last applied or saved, while the
 * chat's settings are still its); saving over a preset, and deleting one, ask once more. `onApplied` lets the
 * panel show the new values (its fields keep what they show).
 */
function PresetRow({ thread, onApplied }: PresetProps & { thread: Thread }) {
  const bridge = useBridge();
  const presets = useApp((s) => s.ui.presets) ?? [];
  const [name, setName] = useState('');
  /** Asking once more: to replace the preset of the name typed, or to delete the one picked. */
  const [asking, setAsking] = useState<{ kind: 'replace' | 'delete'; name: string } | null>(null);
  // The question takes the focus when asked (the button that asked it may be gone), on its safe answer, Cancel;
  // after the key that asked it (an Enter in the name's box) has ended, so that it does not answer it too.
  const cancelRef = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (!asking) return;
    const timer = setTimeout(() => cancelRef.current?.focus({ preventScroll: true }), 0);
    return () => clearTimeout(timer);
  }, [asking]);
  // Answered (yes, Cancel, Esc): the focus goes back to the control that asked — the name's box or Save, the
  // delete button — or, where that went (the preset deleted, Save greyed with its name taken), to the one beside.
  const selectRef = useRef<HTMLSelectElement>(null);
  const nameRef = useRef<HTMLInputElement>(null);
  const deleteRef = useRef<HTMLButtonElement>(null);
  const saveRef = useRef<HTMLButtonElement>(null);
  const asker = useRef<'name' | 'save' | 'delete'>('name');
  const answeredTo = useRef<'asker' | 'select' | null>(null);
  const answer = (to: 'asker' | 'select') => {
    const inQuestion = document.activeElement?.closest('[data-testid="preset-ask"]') != null;
    answeredTo.current = inQuestion ? to : null;
    setAsking(null);
  };
  useEffect(() => {
    if (asking || !answeredTo.current) return;
    const to = answeredTo.current;
    answeredTo.current = null;
    const usable = (el: HTMLButtonElement | null) => (el && !el.disabled ? el : null);
    const from = asker.current;
    const target =
      to === 'select'
        ? selectRef.current
        : from === 'delete'
          ? (usable(deleteRef.current) ?? selectRef.current)
          : from === 'save'
            ? (usable(saveRef.current) ?? nameRef.current)
            : nameRef.current;
    target?.focus({ preventScroll: true });
  }, [asking]);
  // The preset this chat last applied or saved (kept with the chat); none once deleted.
  const pickedPreset = presets.find((p) => p.name === thread.preset);
  const inEffect = pickedPreset && presetInEffect(thread, pickedPreset) ? pickedPreset.name : '';
  const save = (as: string) => {
    bridge.savePreset(thread.id, as);
    setName('');
    setAsking(null);
  };
  const askSave = () => {
    const clean = presetName(name);
    if (!clean) return;
    if (presets.some((p) => p.name === clean)) setAsking({ kind: 'replace', name: clean });
    else save(clean);
  };
  return (
    <div className="presets" data-testid="presets">
      <label>
        preset
        <select
          ref={selectRef}
          data-testid="preset-select"
          data-applied={inEffect || undefined}
          // The preset in effect, else "apply a preset…" (so picking one applies it).
          value={inEffect}
          onKeyDown={openOnArrow}
          onChange={(e) => {
            setAsking(null);
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
      {pickedPreset && asking?.kind !== 'delete' && (
        <button
          type="button"
          className="ghost small"
          data-testid="preset-delete"
          ref={deleteRef}
          onClick={(e) => {
            asker.current = 'delete';
            setAsking({ kind: 'delete', name: pickedPreset.name });
          }}
        >
          delete “<bdi>{pickedPreset.name}</bdi>”
        </button>
      )}
      {asking && (
        // Esc on its buttons answers "no", as the chat list's delete does.
        <span
          className="preset-ask"
          role="alert"
          data-testid="preset-ask"
          data-kind={asking.kind}
          onKeyDown={(e) => {
            if (e.key !== 'Escape') return;
            e.stopPropagation();
            answer('asker');
          }}
        >
          <span>
            {asking.kind === 'replace' ? (
              // The name set apart: a Hebrew or Arabic one takes none of the sentence's punctuation.
              <>
                Replace preset “<bdi>{asking.name}</bdi>” with these settings?
              </>
            ) : (
              <>
                Delete preset “<bdi>{asking.name}</bdi>”? (Chats keep the settings it gave them.)
              </>
            )}
          </span>
          <button
            type="button"
            className={`small ${asking.kind === 'delete' ? 'danger' : 'primary'}`}
            data-testid={asking.kind === 'replace' ? 'preset-replace-confirm' : 'preset-delete-confirm'}
            onClick={() => {
              if (asking.kind === 'replace') {
                answer('asker');
                save(asking.name);
              } else {
                answer('select');
                bridge.deletePreset(asking.name);
              }
            }}
          >
            {asking.kind === 'replace' ? 'Replace' : 'Delete'}
          </button>
          <button
            type="button"
            className="small"
            ref={cancelRef}
            data-testid="preset-ask-cancel"
            onClick={() => answer('asker')}
          >
            Cancel
          </button>
        </span>
      )}
      <label>
        save these settings as
        <span className="row">
          <input
            type="text"
            data-testid="preset-name"
            dir="auto"
            ref={nameRef}
            aria-label="preset name"
            maxLength={80}
            placeholder="name"
            value={name}
            onChange={(e) => {
              setName(e.target.value);
              if (asking?.kind === 'replace') setAsking(null);
            }}
            onKeyDown={(e) => {
              if (e.key !== 'Enter') return;
              asker.current = 'name';
              askSave();
            }}
          />
          <button
            type="button"
            data-testid="preset-save"
            ref={saveRef}
            disabled={!name.trim()}
            onClick={() => {
              asker.current = 'save';
              askSave();
            }}
          >
            Save
          </button>
        </span>
      </label>
    </div>
  );
}

/**
 * Whether a thinking model reasons before it replies: through its template's switch (`enable_thinking`, as
 * Qwen3's), else "reply at once" closes the reasoning in the prompt. The line under it says what the current
 * model does.
 */
function ThinkingSetting({ thread }: { thread: Thread }) {
  const bridge = useBridge();
  const noteId = useId();
  const reasoning = useApp((s) => s.models.find((m) => m.id === s.activeModelId)?.spec.reasoning);
  const note = !reasoning
    ? 'the current model does not think'
    : reasoning.toggle
      ? `the current model thinks in ${reasoningWhere(reasoning)}; its template has a switch for it`
      : `the current model thinks in ${reasoningWhere(reasoning)}; told not to, kvdesk closes its reasoning before it begins (its template has no switch)`;
  return (
    <label className="wide" title="A thinking model (Qwen3, DeepSeek-R1…) reasons before it replies.">
      thinking
      <select
        data-testid="setting-thinking"
        // Its name is the label's word; the note beside it describes it.
        aria-label="thinking"
        aria-describedby={noteId}
        value={thread.thinking === undefined ? 'default' : thread.thinking ? 'on' : 'off'}
        onChange={(e) =>
          bridge.updateThreadSettings(thread.id, {
            thinking: e.target.value === 'default' ? undefined : e.target.value === 'on',
          })
        }
      >
        <option value="default">as the model does</option>
        <option value="on">think before replying</option>
        <option value="off">reply at once</option>
      </select>
      <span className="hint" id={noteId} data-testid="thinking-note">
        {note}
      </span>
    </label>
  );
}

/**
 * How hard a thinking model reasons: the chat template's reasoning_effort (gpt-oss's levels), and for minimal and
 * low a bound on the reasoning when the chat sets no thinking budget (see GenerateRequest.reasoningEffort).
 */
function ReasoningEffort({ thread }: { thread: Thread }) {
  const bridge = useBridge();
  return (
    <label
      title={`How hard a thinking model reasons: its chat template gets the level (gpt-oss reads it); minimal and low also bound the reasoning (${formatInteger(256)}, ${formatInteger(1024)} tokens) when no thinking budget is set.`}
    >
      reasoning effort
      <select
        data-testid="setting-reasoningEffort"
        value={thread.reasoningEffort ?? 'default'}
        onChange={(e) => {
          const v = e.target.value;
          bridge.updateThreadSettings(thread.id, {
            reasoningEffort: v === 'minimal' || v === 'low' || v === 'medium' || v === 'high' ? v : undefined,
          });
        }}
      >
        <option value="default">as the model does</option>
        <option value="minimal">{`minimal (≤ ${formatInteger(256)} tokens)`}</option>
        <option value="low">{`low (≤ ${formatInteger(1024)} tokens)`}</option>
        <option value="medium">medium</option>
        <option value="high">high</option>
      </select>
    </label>
  );
}

/** How many tokens a thinking model may reason before its reasoning is closed for it (empty: no limit). */
function ThinkingBudget({ thread }: { thread: Thread }) {
  const bridge = useBridge();
  const [errors, check, editing] = useFieldErrors();
  const takes = useTakes();
  const latest = useLatest(thread);
  const read = (field: HTMLInputElement) => readNumber(field, { min: 0, max: 1_000_000, int: true });
  const take = (v: number | undefined | null) => {
    const t = latest();
    if (v !== null && v !== t.thinkingBudget) bridge.updateThreadSettings(t.id, { thinkingBudget: v });
  };
  return (
    <Field name="thinkingBudget" errors={errors}>
      <label title="A thinking model reasons for at most this many tokens; then kvdesk closes its reasoning and it answers. Empty: no limit but max tokens.">
        thinking budget (tokens)
        <input
          type="number"
          data-testid="setting-thinkingBudget"
          aria-label="thinking budget (tokens)"
          min={0}
          step={1}
          placeholder="no limit"
          defaultValue={thread.thinkingBudget ?? ''}
          onChange={(e) => {
            editing('thinkingBudget', e.target);
            const v = read(e.target);
            takes.later('thinkingBudget', () => take(v));
          }}
          onBlur={(e) => {
            const v = read(e.target);
            check('thinkingBudget', e.target, v === null ? 'a whole number of tokens, 0 or more' : null);
            takes.now('thinkingBudget', () => take(v));
          }}
        />
      </label>
    </Field>
  );
}

/** How often the open settings read the MCP servers' status. */
const MCP_STATUS_EVERY_MS = 2000;

/**
 * The chat's tools: the MCP servers of mcp.json whose tools the model may call (each call waits for the person's
 * Run), and whether it must call one in reply to each message.
 */
function ToolsSetting({ thread }: { thread: Thread }) {
  const bridge = useBridge();
  const [status, setStatus] = useState<McpStatus | null>(null);
  const [error, setError] = useState<string | null>(null);
  // Read while the settings are open, so a server that stops, or an edit of mcp.json, shows without reopening.
  useEffect(() => {
    let live = true;
    let last = '';
    const read = () =>
      void bridge.mcpStatus().then((r) => {
        if (!live) return;
        if (!r.ok) {
          setError(r.error.message);
          return;
        }
        setError(null);
        const seen = JSON.stringify(r.value);
        if (seen === last) return;
        last = seen;
        setStatus(r.value);
      });
    read();
    const timer = setInterval(read, MCP_STATUS_EVERY_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [bridge]);
  const chosen = thread.mcpServers ?? [];
  const toggle = (name: string, on: boolean) => {
    const next = on ? [...chosen.filter((n) => n !== name), name] : chosen.filter((n) => n !== name);
    bridge.updateThreadSettings(thread.id, { mcpServers: next.length > 0 ? next : undefined });
  };
  // Servers the chat names that mcp.json no longer has still show, so they can be turned off.
  const names = [...new Set([...(status?.servers.map((s) => s.name) ?? []), ...chosen])];
  return (
    <fieldset className="wide tools-setting" data-testid="tools-setting">
      <legend title="Tools from MCP servers (the Model Context Protocol): the model may call them; each call waits for you to let it run.">
        tools (MCP)
      </legend>
      {error && <div className="note">{error}</div>}
      {/* Only where there are servers to run: without any, "No MCP servers" below says what to do. */}
      {status?.blocked && names.length > 0 && (
        <div className="note" data-testid="mcp-blocked">
          {status.blocked}
        </div>
      )}
      {status?.error && (
        <div className="note" data-testid="mcp-config-error">
          {status.error}
        </div>
      )}
      {names.map((name) => {
        const s = status?.servers.find((x) => x.name === name);
        return (
          <label key={name} className="server" data-testid="mcp-server" data-server={name}>
            <input
              type="checkbox"
              data-testid="mcp-server-toggle"
              checked={chosen.includes(name)}
              // Where no tool can run, one chosen can still be turned off.
              disabled={status?.blocked !== undefined && !chosen.includes(name)}
              onChange={(e) => toggle(name, e.target.checked)}
            />
            <span className="mono">{name}</span>
            <span className="hint">
              {!s
                ? 'not in mcp.json any more'
                : s.state === 'ready'
                  ? `${s.tools.length} tools: ${s.tools
                      .map((t) => t.name)
                      .slice(0, 6)
                      .join(', ')}${s.tools.length > 6 ? '…' : ''}`
                  : s.state === 'failed'
                    ? `${s.remote ? 'could not connect' : 'did not start'}: ${s.error ?? ''}`
                    : s.state === 'exited'
                      ? `stopped: ${s.error ?? ''}; ${s.remote ? 'connects' : 'starts'} again when the chat uses it`
                      : s.remote
                        ? 'connects when the chat uses it'
                        : 'starts when the chat uses it'}
            </span>
          </label>
        );
      })}
      {status && !status.error && names.length === 0 && (
        <div className="hint" data-testid="mcp-none">
          No MCP servers: name them in {status.configPath} as{' '}
          {'{"mcpServers": {"name": {"command": "…", "args": […]}}}'} for a program kvdesk starts, or{' '}
          {'{"mcpServers": {"name": {"url": "https://…"}}}'} for a server at an address (the form LM Studio, Claude
          Desktop and Cursor read).
        </div>
      )}
      {(thread.toolsAllowed ?? []).length > 0 && (
        <div className="hint" data-testid="tools-allowed">
          runs without asking:{' '}
          {(thread.toolsAllowed ?? []).map((key) => (
            <button
              key={key}
              type="button"
              className="small"
              data-testid="tool-allowed"
              title="Ask again before it runs"
              onClick={() => {
                const next = (thread.toolsAllowed ?? []).filter((k) => k !== key);
                bridge.updateThreadSettings(thread.id, { toolsAllowed: next.length > 0 ? next : undefined });
              }}
            >
              {key} ✕
            </button>
          ))}
        </div>
      )}
      {chosen.length > 0 && (
        <label title="The model must call one of the tools in reply to each of your messages; after a tool's answer it may reply in words.">
          must call a tool
          <input
            type="checkbox"
            data-testid="setting-tools-required"
            checked={thread.toolsRequired === true}
            onChange={(e) => bridge.updateThreadSettings(thread.id, { toolsRequired: e.target.checked || undefined })}
          />
        </label>
      )}
    </fieldset>
  );
}

/** What a number field takes, in words: "between 0 and 1", "a whole number, 0 or more". */
function allowedRange(f: { min: number; max?: number; int?: boolean }): string {
  const n = (x: number) => (Number.isInteger(x) ? formatInteger(x) : String(x));
  const whole = f.int ? 'a whole number' : '';
  if (f.max === undefined) return whole ? `${whole}, ${n(f.min)} or more` : `${n(f.min)} or more`;
  return `${whole ? `${whole} ` : ''}between ${n(f.min)} and ${n(f.max)}`;
}

export function SettingsPanel({ thread, presets }: { thread: Thread; presets: PresetProps }) {
  const bridge = useBridge();
  const [errors, check, editing] = useFieldErrors();
  const takes = useTakes();
  // What a take reads and changes: the chat as it is when it runs (a take is due after its key).
  const latest = useLatest(thread);
  const sampling = thread.sampling ?? {};
  // What empty fields mean comes from the model replies go to.
  const search = useApp((s) => s.models.find((m) => m.id === s.activeModelId)?.spec.search);
  const greedyByDefault = greedyByPackage(sampling, search);
  const setSampling = (key: keyof SamplingSettings, value: number | boolean | undefined) => {
    const t = latest();
    const next: SamplingSettings = { ...t.sampling };
    if (value === undefined) delete next[key];
    else (next as Record<string, number | boolean>)[key] = value;
    bridge.updateThreadSettings(t.id, { sampling: next });
  };
  const takeSystemPrompt = (text: string) => {
    const t = latest();
    if (text !== (t.systemPrompt ?? '')) bridge.updateThreadSettings(t.id, { systemPrompt: text });
  };
  const takeNumber = (f: NumField, given: number | undefined | null) => {
    const v = f.key === 'seed' && given === -1 ? undefined : given;
    if (v !== null && v !== latest().sampling?.[f.key]) setSampling(f.key, v);
  };
  const readMax = (field: HTMLInputElement) => readNumber(field, { min: 1, max: 1_000_000, int: true });
  const takeMax = (v: number | undefined | null) => {
    const t = latest();
    if (v !== null && v !== t.maxNewTokens) bridge.updateThreadSettings(t.id, { maxNewTokens: v });
  };
  /** The stop strings typed (undefined: none), or null where they cannot be taken. */
  const readStop = (text: string) => {
    const read = readStops(text);
    return 'error' in read ? null : read.stops;
  };
  const takeStop = (next: string[] | undefined | null) => {
    const t = latest();
    if (next !== null && JSON.stringify(next) !== JSON.stringify(t.stop))
      bridge.updateThreadSettings(t.id, { stop: next });
  };
  const takeSchema = (text: string) => {
    const t = latest();
    if (schemaProblem(text)) return;
    const next = text.trim() === '' ? undefined : text;
    if (next !== t.jsonSchema) bridge.updateThreadSettings(t.id, { jsonSchema: next });
  };
  return (
    <div className="settings" data-testid="settings-panel">
      <PresetRow thread={thread} {...presets} />
      <label className="system">
        system prompt
        <textarea
          data-testid="system-prompt"
          dir="auto"
          defaultValue={thread.systemPrompt ?? ''}
          placeholder="None. For example: You are a helpful assistant."
          onChange={(e) => {
            const text = e.target.value;
            takes.later('systemPrompt', () => takeSystemPrompt(text));
          }}
          onBlur={(e) => {
            const text = e.target.value;
            takes.now('systemPrompt', () => takeSystemPrompt(text));
          }}
        />
      </label>
      {FIELDS.map((f) => (
        <Field key={f.key} name={f.key} errors={errors}>
          <label>
            {f.label}
            <input
              type="number"
              data-testid={`setting-${f.key}`}
              min={f.min}
              max={f.max}
              step={f.step}
              placeholder={emptyMeans(f, search, sampling.greedy === false)}
              defaultValue={(sampling[f.key] as number | undefined) ?? ''}
              onChange={(e) => {
                editing(f.key, e.target);
                const v = readNumber(e.target, f);
                // A seed of -1 is none (a random one): the field shows so at once, as it does when opened again.
                if (f.key === 'seed' && v === -1) e.target.value = '';
                takes.later(f.key, () => takeNumber(f, v));
              }}
              onBlur={(e) => {
                const v = readNumber(e.target, f);
                check(f.key, e.target, v === null ? allowedRange(f) : null);
                takes.now(f.key, () => takeNumber(f, v));
              }}
            />
          </label>
        </Field>
      ))}
      <Field name="maxNewTokens" errors={errors}>
        <label>
          max tokens
          <input
            type="number"
            data-testid="setting-maxNewTokens"
            min={1}
            step={1}
            placeholder={search?.maxNewTokens !== undefined ? String(search.maxNewTokens) : 'model default'}
            defaultValue={thread.maxNewTokens ?? ''}
            onChange={(e) => {
              editing('maxNewTokens', e.target);
              const v = readMax(e.target);
              takes.later('maxNewTokens', () => takeMax(v));
            }}
            onBlur={(e) => {
              const v = readMax(e.target);
              // Not taken, and it says why (as the other number fields do).
              check(
                'maxNewTokens',
                e.target,
                v === null
                  ? `a whole number of tokens from 1 to ${formatInteger(1_000_000)} (a reply also ends where the context does; empty: the model default)`
                  : null,
              );
              takes.now('maxNewTokens', () => takeMax(v));
            }}
          />
        </label>
      </Field>
      <label
        title={
          greedyByDefault
            ? "The model's package asks for greedy decoding (do_sample false): its replies are greedy unless a temperature is set here."
            : 'Always the likeliest token: the same reply every time.'
        }
      >
        {greedyByDefault ? "greedy (the model's default)" : 'greedy'}
        <input
          type="checkbox"
          data-testid="setting-greedy"
          checked={sampling.greedy ?? greedyByDefault}
          // What the model does anyway is kept as empty; the other way is said.
          onChange={(e) => setSampling('greedy', e.target.checked === greedyByDefault ? undefined : e.target.checked)}
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
      <ThinkingSetting thread={thread} />
      <ThinkingBudget thread={thread} />
      <ReasoningEffort thread={thread} />
      <ToolsSetting thread={thread} />
      <Field name="stop" errors={errors} className="wide">
        <label
          title={`A reply ends where one of these would appear (the string itself is not shown). One per line, at most ${STOP_MAX_COUNT} of at most ${STOP_MAX_CHARS} characters.`}
        >
          stop strings (one per line)
          <textarea
            className="mono"
            rows={2}
            data-testid="setting-stop"
            data-hint={STOP_HINT_ID}
            aria-describedby={STOP_HINT_ID}
            defaultValue={stopsAsText(thread.stop)}
            placeholder={'e.g. ###\n\\n\\nUser:'}
            onChange={(e) => {
              editing('stop', e.target);
              const next = readStop(e.target.value);
              takes.later('stop', () => takeStop(next));
            }}
            onBlur={(e) => {
              const read = readStops(e.target.value);
              check('stop', e.target, 'error' in read ? read.error : null);
              takes.now('stop', () => takeStop('error' in read ? null : read.stops));
            }}
          />
        </label>
        <span className="hint" id={STOP_HINT_ID} data-testid="setting-stop-hint">
          In a line, \n is a line break, \t a tab and \\ a backslash.
        </span>
      </Field>
      <label title="Every reply is one JSON object: sampling keeps to tokens that can continue one, and the reply ends when it closes. A thinking model reasons first, then answers in JSON. Ask for JSON in your message too, so the model means it.">
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
      <label title="Replies keep each token's probability and the 5 likeliest tokens at its place: the reply's “probabilities” button shows them, each token coloured by how likely it was. For this chat's new replies.">
        token probabilities
        <input
          type="checkbox"
          data-testid="setting-probabilities"
          checked={thread.showProbabilities === true}
          onChange={(e) => bridge.updateThreadSettings(thread.id, { showProbabilities: e.target.checked || undefined })}
        />
      </label>
      {thread.responseFormat === 'json' && (
        <Field name="jsonSchema" errors={errors} className="system schema">
          <label title="Structured output: every reply conforms to this JSON Schema (kvdesk's subset: see the README). Leave it empty for any JSON object.">
            JSON schema (optional)
            <textarea
              className="mono"
              maxLength={100_000}
              data-testid="setting-json-schema"
              defaultValue={thread.jsonSchema ?? ''}
              placeholder='{"type": "object", "properties": {"answer": {"type": "string"}}}'
              onChange={(e) => {
                editing('jsonSchema', e.target);
                const text = e.target.value;
                takes.later('jsonSchema', () => takeSchema(text));
              }}
              onBlur={(e) => {
                const text = e.target.value;
                check('jsonSchema', e.target, schemaProblem(text));
                takes.now('jsonSchema', () => takeSchema(text));
              }}
            />
          </label>
        </Field>
      )}
      <div className="hint">Empty fields use the model package's defaults. The same seed gives the same reply.</div>
    </div>
  );
}
