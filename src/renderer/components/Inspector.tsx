/**
 * The budget inspector: where the KV budget goes right now (bar and legend),
 * how the limit was derived, live controls, the requests and sessions behind
 * the numbers, and the scheduler's event timeline.
 */

import { memo, type ReactNode, useEffect, useMemo, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { Thread } from '../../shared/api';
import { formatDuration } from '../../shared/duration';
import { PROMPT_CACHE_PREFIX } from '../../shared/prompt-cache';
import type {
  BudgetSnapshot,
  DeviceBudgetSnapshot,
  ReloadWait,
  SchedulerRequestView,
  SchedulerSessionView,
  SchedulerSnapshot,
} from '../../shared/scheduler-types';
import { useApp, useAppStore, useBridge } from '../bridge/context';
import { OVER_LIMIT_EFFECT } from '../lib/budget-segments';
import { isolated, quoted } from '../lib/direction';
import { useFocusTrap } from '../lib/focus-trap';
import { byteChange, exactBytes, formatBytes, formatInteger, formatMs, parseByteSize } from '../lib/format';
import { derivedLimitDrops, sessionsDroppedBy } from '../lib/limit-change';
import { leastReservation, type QueueWait, queuedReservation, queueWait, queueWaitBrief } from '../lib/queue-wait';
import { refusalBrief } from '../lib/refusal';
import type { TimelineEvent } from '../store/types';
import { Announcer } from './Announcer';
import { BudgetBar } from './BudgetBar';
import { Bytes } from './Bytes';
import { INSPECTOR_ID, INSPECTOR_TOGGLE_ID, useNarrowWindow } from './Header';

/**
 * The chats' titles by id. The store's chat list is a new array with every frame of a streaming reply: read as one
 * string, which changes only when a chat is added, renamed, deleted or moved in the list (a message sent), so the
 * tables and the timeline that name chats do not redraw sixty times a second while a reply streams.
 */
function useThreadTitles(): Map<string, string> {
  const key = useApp((s) => JSON.stringify(s.threads.map((t: Thread) => [t.id, t.title])));
  return useMemo(() => new Map(JSON.parse(key) as Array<[string, string]>), [key]);
}

function Derivation({ snap }: { snap: SchedulerSnapshot }) {
  const d = snap.derivation;
  const mem = d.memory === 'device-memory' ? 'device memory' : 'RAM';
  const derivedLines = d.totalMemoryBytes !== undefined && (
    <>
      <div>
        {d.source === 'override' ? 'derivation: ' : '= '}
        <Bytes value={d.totalMemoryBytes} /> {mem} × {d.fraction ?? 1}
      </div>
      {d.weightsBytes !== undefined && (
        <div>
          − weights <Bytes value={d.weightsBytes} />
        </div>
      )}
      {d.overheadBytes !== undefined && (
        <div>
          − overhead <Bytes value={d.overheadBytes} />
        </div>
      )}
      {d.derivedBytes !== undefined && (d.source === 'override' || d.derivedBytes !== d.limitBytes) && (
        <div>
          = <Bytes value={d.derivedBytes} />
          {d.source === 'derived' ? ' (clamped)' : ''}
        </div>
      )}
    </>
  );
  return (
    <div className="derivation" data-testid="budget-derivation" data-source={d.source} title={d.formula}>
      {d.source === 'derived' && derivedLines}
      {d.source === 'override' && (
        <>
          <div>set by override</div>
          {derivedLines}
        </>
      )}
      {d.source === 'explicit' && <div>set explicitly</div>}
      {d.notes.map((n) => (
        <div key={n}>{n}</div>
      ))}
    </div>
  );
}

/**
 * KV bytes per token of each model placed on the device, named: the models' specs say it from their load on (the
 * scheduler's own figure comes with a model's first request, and only while it knows one model).
 */
export function ModelBpts({ ids }: { ids: string[] }) {
  const models = useApp(useShallow((s) => s.models.filter((m) => ids.includes(m.id))));
  if (models.length === 0) return null;
  return (
    <span data-testid="budget-bpt" title="KV bytes per token of each model whose KV lives here (batch 1)">
      bpt
      {models.map((m, i) => (
        <span key={m.id} data-testid="budget-bpt-model" data-model-id={m.id} title={exactBytes(m.spec.bpt)}>
          {i > 0 ? ' · ' : ' '}
          {/* Set apart: an Arabic name must not take the figure after it into its own order. */}
          <bdi>{m.spec.displayName}</bdi> <span className="num">{formatInteger(m.spec.bpt)} B</span>
        </span>
      ))}
    </span>
  );
}

function BudgetSection({ snap, several }: { snap: DeviceBudgetSnapshot; several: boolean }) {
  const reservedUnused = Math.max(0, snap.reservedBytes - snap.usedBytes);
  // A limit lowered under what running replies reserve (and idle sessions hold) takes effect as they end.
  const over = snap.reservedBytes + snap.heldBytes - snap.limitBytes;
  return (
    <section data-testid="inspector-budget" data-device={snap.device}>
      <h2>
        KV budget · <span data-testid="budget-device">{snap.device}</span>
      </h2>
      {several && (
        <div className="muted" data-testid="budget-device-models">
          {snap.models.length > 0 ? `models: ${snap.models.join(', ')}` : 'no model placed here'}
        </div>
      )}
      <div className="limit-line">
        limit <Bytes value={snap.limitBytes} testId="budget-limit-bytes" />
      </div>
      <Derivation snap={snap} />
      <BudgetBar snapshot={snap} testId="inspector-budget-bar" />
      <div className="legend">
        <span className="swatch used" />
        <span>used</span>
        <Bytes className="v" value={snap.usedBytes} testId="budget-used-bytes" />
        <span className="swatch reserved" />
        <span>reserved, not yet used</span>
        <Bytes className="v" value={reservedUnused} testId="budget-reserved-unused-bytes" />
        <span className="swatch held" />
        <span>held by idle sessions</span>
        <Bytes className="v" value={snap.heldBytes} testId="budget-held-bytes" />
        <span className="swatch free" />
        <span>free</span>
        <Bytes className="v" value={snap.freeBytes} testId="budget-free-bytes" />
      </div>
      <div className="totals">
        <span>
          reserved <Bytes value={snap.reservedBytes} testId="budget-reserved-bytes" /> (used + not yet used)
        </span>
        <ModelBpts ids={snap.models} />
        <span data-testid="budget-running-count">
          running {snap.running.length}/{snap.maxRunning}
        </span>
        <span data-testid="budget-queued-count">
          queued {snap.queue.length}/{snap.maxQueue}
        </span>
      </div>
      {over > 0 && (
        // The bar shows it as a thin mark past its end: said, with what happens now.
        <div className="refusal over-limit" data-testid="budget-over-limit">
          <Bytes value={over} /> over the limit: {OVER_LIMIT_EFFECT}
        </div>
      )}
      {snap.violations.length > 0 && (
        <div className="refusal failed" data-testid="budget-violations">
          {snap.violations.length} broken promise(s) recorded: {snap.violations[snap.violations.length - 1]?.message}
        </div>
      )}
    </section>
  );
}

function Controls({ devices }: { devices: DeviceBudgetSnapshot[] }) {
  const bridge = useBridge();
  const [limit, setLimit] = useState('');
  const [maxRunning, setMaxRunning] = useState('');
  const [error, setErrorText] = useState<string | null>(null);
  /** The field the error is about (its box is marked invalid and described by it). */
  const [errorOf, setErrorOf] = useState<'limit' | 'running' | null>(null);
  const setError = (text: string | null, of: 'limit' | 'running' | null = null) => {
    setErrorText(text);
    setErrorOf(text === null ? null : of);
  };
  /**
   * A limit that would drop idle sessions' kept KV, asked about once more before it is set (`derived`: the
   * derived limit again, `bytes` what it comes to).
   */
  const [asking, setAsking] = useState<{ bytes: number; drops: number; derived: boolean } | null>(null);
  const [device, setDevice] = useState('cpu');
  const snap = devices.find((d) => d.device === device) ?? (devices[0] as DeviceBudgetSnapshot);
  const store = useAppStore();
  const limitField = useRef<HTMLInputElement>(null);
  const derivedButton = useRef<HTMLButtonElement>(null);
  const apply = async (patch: Parameters<typeof bridge.configureBudget>[0]) => {
    const r = await bridge.configureBudget(
      patch.kvBudgetBytes !== undefined ? { ...patch, device: snap.device } : patch,
    );
    setError(r.ok ? null : r.error.message, patch.maxRunning !== undefined ? 'running' : 'limit');
    // Set, it shows only in the field's placeholder: said, with the figure the scheduler took.
    if (r.ok) {
      const now = store.getState().snapshot?.devices.find((d) => d.device === snap.device) ?? snap;
      const where = devices.length > 1 ? ` on ${snap.device}` : '';
      store
        .getState()
        .announce(
          patch.maxRunning !== undefined
            ? `Max running set to ${now.maxRunning}`
            : patch.kvBudgetBytes === null
              ? `KV limit${where} back to the derived ${formatBytes(now.limitBytes)}`
              : `KV limit${where} set to ${formatBytes(now.limitBytes)}`,
        );
    }
    return r.ok;
  };
  /**
   * The question answered (Set, Cancel, Esc): its buttons go, and the focus goes back to the field it is about (to
   * "use the derived limit again" when that was asked and it is still there).
   */
  const answered = (derived: boolean) => {
    setAsking(null);
    (derived ? (derivedButton.current ?? limitField.current) : limitField.current)?.focus();
  };
  /** Answered no (Cancel, Esc): nothing set, and the field shows the limit in force again, not the value refused. */
  const declined = (derived: boolean) => {
    if (!derived) setLimit('');
    answered(derived);
  };
  // Asked: the focus goes to the safe answer (Cancel), so Enter does not ask again and Esc answers no.
  const cancelButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) cancelButton.current?.focus();
  }, [asking]);
  const applyLimit = async (sure = false) => {
    const bytes = parseByteSize(limit);
    setAsking(null);
    if (bytes === null) {
      setError(`"${limit}" is not a size: try 512, 64KiB, 1.5GiB.`, 'limit');
      return;
    }
    const drops = sure ? 0 : sessionsDroppedBy(snap, bytes);
    // 0 B is asked about whatever it drops: no request that needs KV gets in until the limit is raised.
    if (drops > 0 || (!sure && bytes === 0)) {
      setError(null);
      setAsking({ bytes, drops, derived: false });
      return;
    }
    if (await apply({ kvBudgetBytes: bytes })) setLimit('');
  };
  /** Back to the derived limit: asked first too when what it comes to (where known) would drop kept KV. */
  const backToDerived = async (sure = false) => {
    setAsking(null);
    const drops = sure ? undefined : derivedLimitDrops(snap);
    if (drops) {
      setError(null);
      setAsking({ ...drops, derived: true });
      return;
    }
    await apply({ kvBudgetBytes: null });
  };
  const applyRunning = async () => {
    const n = Number(maxRunning);
    if (!Number.isInteger(n) || n < 1 || n > 256) {
      setError('Max running is a whole number from 1 to 256.', 'running');
      return;
    }
    if (await apply({ maxRunning: n })) setMaxRunning('');
  };
  return (
    <section data-testid="inspector-controls">
      <h2>Controls</h2>
      <div className="controls">
        {devices.length > 1 && (
          <>
            <label htmlFor="budget-device">device</label>
            <select
              id="budget-device"
              data-testid="budget-device-select"
              style={{ gridColumn: '2 / -1' }}
              value={snap.device}
              onChange={(e) => {
                setDevice(e.target.value);
                setAsking(null);
                setError(null);
              }}
            >
              {devices.map((d) => (
                <option key={d.device} value={d.device}>
                  {d.device}
                </option>
              ))}
            </select>
          </>
        )}
        <label htmlFor="budget-limit">limit</label>
        <input
          ref={limitField}
          id="budget-limit"
          type="text"
          data-testid="budget-limit-input"
          aria-invalid={errorOf === 'limit' || undefined}
          aria-describedby={errorOf === 'limit' ? 'budget-control-error' : undefined}
          placeholder={`${formatBytes(snap.limitBytes)} (e.g. 64KiB, 2GiB)`}
          value={limit}
          onChange={(e) => {
            setLimit(e.target.value);
            setAsking(null);
            // What was said about the value typed before goes with it.
            if (errorOf === 'limit') setError(null);
          }}
          onKeyDown={(e) => {
            if (e.key === 'Enter') {
              // Asked, the focus moves to Cancel at once: this Enter must not press it too.
              e.preventDefault();
              void applyLimit();
            }
            // Back in the field while asked: Esc answers no there too.
            if (e.key === 'Escape' && asking) {
              e.stopPropagation();
              declined(asking.derived);
            }
          }}
        />
        <button
          type="button"
          data-testid="budget-limit-apply"
          // Three buttons here read "Set": each named for what it sets.
          aria-label="Set KV limit"
          disabled={!limit.trim()}
          onClick={() => void applyLimit()}
        >
          Set
        </button>
        <label htmlFor="max-running">max running</label>
        <input
          id="max-running"
          type="number"
          min={1}
          max={256}
          data-testid="max-running-input"
          aria-invalid={errorOf === 'running' || undefined}
          aria-describedby={errorOf === 'running' ? 'budget-control-error' : undefined}
          placeholder={String(snap.maxRunning)}
          value={maxRunning}
          onChange={(e) => {
            setMaxRunning(e.target.value);
            if (errorOf === 'running') setError(null);
          }}
          onKeyDown={(e) => {
            if (e.key === 'Enter') void applyRunning();
          }}
        />
        <button
          type="button"
          data-testid="max-running-apply"
          aria-label="Set max running"
          disabled={!maxRunning.trim()}
          onClick={() => void applyRunning()}
        >
          Set
        </button>
        {snap.derivation.source !== 'derived' && (
          <button
            type="button"
            className="ghost"
            style={{ gridColumn: '1 / -1', justifySelf: 'start' }}
            data-testid="budget-use-derived"
            ref={derivedButton}
            onClick={(e) => {
              const button = e.currentTarget;
              const home = button.closest('[data-focus-home]');
              // Set at once, the button goes (at its next render): the focus goes to the limit field, unless the
              // person put it elsewhere meanwhile. Asked first, it is there already.
              void backToDerived().then(() =>
                setTimeout(() => {
                  const active = document.activeElement;
                  if (!button.isConnected && (active === document.body || active === home)) limitField.current?.focus();
                }, 0),
              );
            }}
          >
            use the derived limit again
          </button>
        )}
        {error && (
          <div className="err" id="budget-control-error" role="alert" data-testid="budget-control-error">
            {error}
          </div>
        )}
        {asking && (
          // Esc on its buttons answers "no", as elsewhere.
          <div
            className="ask"
            role="alert"
            data-testid="budget-limit-ask"
            onKeyDown={(e) => {
              if (e.key !== 'Escape') return;
              e.stopPropagation();
              declined(asking.derived);
            }}
          >
            {asking.bytes === 0 && !asking.derived ? (
              <span data-testid="budget-limit-zero">
                A 0 B budget refuses every request that needs KV (every chat reply, every API request of a model with a
                KV cache) until the limit is raised
                {asking.drops > 0
                  ? `, and drops the kept KV of ${asking.drops} idle ${asking.drops === 1 ? 'session' : 'sessions'} (chats, API prompt caches)`
                  : ''}
                . Set it?
              </span>
            ) : (
              <span>
                {asking.derived ? `The derived limit (${formatBytes(asking.bytes)})` : formatBytes(asking.bytes)} drops
                the kept KV of {asking.drops} idle {asking.drops === 1 ? 'session' : 'sessions'} (chats, API prompt
                caches): a chat's next turn then reads it whole again. Set it?
              </span>
            )}
            <button
              type="button"
              className="small danger"
              data-testid="budget-limit-confirm"
              aria-label={
                asking.derived
                  ? 'Set the derived limit and drop idle KV'
                  : asking.drops > 0
                    ? 'Set limit and drop idle KV'
                    : 'Set the 0 B limit'
              }
              onClick={() => {
                // The derived limit set, its button goes: the focus goes to the limit field either way.
                answered(false);
                void (asking.derived ? backToDerived(true) : applyLimit(true));
              }}
            >
              Set
            </button>
            <button
              type="button"
              className="small"
              data-testid="budget-limit-cancel"
              ref={cancelButton}
              onClick={() => declined(asking.derived)}
            >
              Cancel
            </button>
          </div>
        )}
      </div>
    </section>
  );
}

/** An error code that may break after its underscores (KV_BUDGET_ / EXCEEDED): its column stays narrow. */
function breakable(code: string): ReactNode[] {
  let at = 0;
  return code.split('_').flatMap((part) => {
    const start = at;
    at += part.length + 1;
    return start === 0 ? [part] : ['_', <wbr key={start} />, part];
  });
}

/** Ended requests the table shows (the newest); it counts the older ones the host still reports. */
export const SHOWN_ENDED_REQUESTS = 20;

/** Queued requests the table shows (the head of the queue, every running one besides); it counts the rest. */
export const SHOWN_QUEUED_REQUESTS = 20;

function RequestRow({
  r,
  title,
  device,
  showModel,
  wait,
}: {
  r: SchedulerRequestView;
  title: string | undefined;
  /** Shown when several devices have budgets. */
  device: string | undefined;
  /** The request's model beside its id, when the table holds requests of several models. */
  showModel: boolean;
  /** A queued request's place and why it waits (its model loading again among the reasons). */
  wait: QueueWait | null;
}) {
  const n = r.admittedMaxTokens ?? r.maxNewTokens;
  const prompt = r.sessionPrefixTokens > 0 ? `${r.sessionPrefixTokens}+${r.promptTokens}` : String(r.promptTokens);
  const [open, setOpen] = useState(false);
  const brief = r.error && r.state !== 'cancelled' ? refusalBrief(r.error, r) : null;
  const required = r.error?.code === 'KV_BUDGET_EXCEEDED' ? r.error.detail?.requiredBytes : undefined;
  const messageId = `request-message-${r.id}`;
  // Two short lines a cell (the chat over the request's id, used over reserved…): the table fits the inspector. Why
  // a request waits or was refused is the state's second line, in words (the host's whole message a click away).
  return (
    <tr
      data-testid="request-row"
      data-request-id={r.id}
      data-state={r.state}
      data-reserved-bytes={r.reservedBytes}
      data-used-bytes={r.usedBytes}
      title={r.id}
    >
      <WhoCell id={r.id} threadId={r.threadId} modelId={r.modelId} title={title} showModel={showModel} />
      {device !== undefined && <td className="mono">{device}</td>}
      <td className="state-cell">
        <span className={`state ${r.state}`}>{r.state}</span>
        {wait && (
          <div
            className="sub"
            data-testid="request-queue-note"
            data-reason={wait.reason}
            title={
              wait.reason === 'behind'
                ? `waits for the ${wait.position === 1 ? 'request' : `${wait.position} requests`} ahead of it: first come, first served`
                : undefined
            }
          >
            {wait.reason === 'reloading' ? (
              <>
                position {wait.position + 1} ·{' '}
                <span
                  data-testid="request-held"
                  title={`${isolated(r.modelId)} is loading again: the queue waits for it, whatever the budget`}
                >
                  for {r.modelId} to load again
                </span>
              </>
            ) : (
              <>
                {queueWaitBrief(wait)}
                {wait.reason === 'behind' && <span className="sr-only"> (first come, first served)</span>}
              </>
            )}
          </div>
        )}
        {r.paddingBytes ? (
          <div
            className="sub"
            data-testid="request-padding-note"
            title={`Batched with a longer reply, its ${r.rows === 1 ? 'row is' : 'rows are'} padded to that reply's width: ${exactBytes(r.paddingBytes)} of its reservation hold no token`}
          >
            incl. {formatBytes(r.paddingBytes)} padding
          </div>
        ) : null}
        {brief && r.error && (
          <>
            <div className="sub reason" data-testid="request-reason" title={brief.title}>
              {brief.reason}
              {brief.action && ` — ${brief.action}`}
            </div>
            <button
              type="button"
              className="link sub mono disclosure"
              data-testid="request-error"
              aria-expanded={open}
              aria-controls={messageId}
              aria-label={`${r.error.code}: the host's whole message`}
              onClick={() => setOpen(!open)}
            >
              {breakable(r.error.code)}
            </button>
            <div className="sub message" id={messageId} data-testid="request-message" hidden={!open}>
              {r.error.message}
            </div>
          </>
        )}
      </td>
      <td className="r num">{r.rows}</td>
      <td
        className="r num"
        title={`prompt tokens${r.sessionPrefixTokens > 0 ? ' (session prefix + new)' : ''} + max new tokens${
          r.requestedMaxTokens !== r.maxNewTokens ? ` (asked ${r.requestedMaxTokens}, clipped to the context)` : ''
        }`}
      >
        <div>{prompt}</div>
        <div>+ {n}</div>
      </td>
      <KvCell r={r} required={typeof required === 'number' ? required : undefined} limitBytes={wait?.limitBytes} />
      <CapCell r={r} />
    </tr>
  );
}

/**
 * A request's budget cap: the tokens its reservation had room for, of those asked. A fact of its reservation; once
 * it ended, whether the cap cut it (it ended by length) or it ended before the cap (then muted: the cap took nothing).
 */
export function CapCell({ r }: { r: SchedulerRequestView }) {
  const cap = r.budgetCap;
  if (!cap) return <td className="r num" />;
  const ended = r.endedAt !== undefined;
  const cut = ended && r.endReason === 'length';
  const asked = `asked ${cap.requestedMaxTokens} tokens, room reserved for ${cap.admittedMaxTokens} (the KV budget capped its reservation)`;
  return (
    <td
      className={`r num${ended && !cut ? ' muted' : ''}`}
      data-testid="request-cap"
      data-cut={ended ? String(cut) : undefined}
      title={
        !ended
          ? `${asked}: the reply stops there unless it ends first`
          : cut
            ? `${asked}: the cap ended the reply`
            : `${asked}: the reply ended before the cap (${r.endReason ?? r.state}), which cut nothing`
      }
    >
      <div>{cap.admittedMaxTokens}</div>
      <div>/ {cap.requestedMaxTokens}</div>
    </td>
  );
}

/**
 * A request's KV: used over reserved, and the padding of that in words; what a queued one waits to reserve; what a
 * refused one needed (never admitted, it reserved nothing).
 */
export function KvCell({
  r,
  required,
  limitBytes,
}: {
  r: SchedulerRequestView;
  required: number | undefined;
  /** Its device's limit, for a queued one: one whose reservation is more than it can only be admitted capped. */
  limitBytes?: number;
}) {
  // Ended before it was admitted (cancelled while queued, or failed with its model): it never had KV, which
  // "0 B / 0 B" did not say.
  if ((r.state === 'cancelled' || r.state === 'failed') && r.admittedAt === undefined) {
    return (
      <td
        className="r"
        data-testid="request-never-admitted"
        title={`${r.state === 'cancelled' ? 'Cancelled' : 'Failed'} while queued: nothing was reserved`}
      >
        <div className="muted">none</div>
      </td>
    );
  }
  if (r.state === 'queued' || r.state === 'refused') {
    const wants =
      r.state === 'queued'
        ? limitBytes === undefined
          ? { bytes: leastReservation(r), capped: false }
          : queuedReservation(r, limitBytes)
        : undefined;
    const bytes = wants ? wants.bytes : required;
    return (
      <td
        className="r"
        data-testid={r.state === 'queued' ? 'request-wants' : 'request-needed'}
        data-capped={wants?.capped ? 'true' : undefined}
        title={
          wants?.capped
            ? `Nothing is reserved while it waits. Its whole reply (${formatBytes(leastReservation(r))}) is more than the ${formatBytes(limitBytes ?? 0)} limit: admitted, its reply is capped to what fits, at most this`
            : r.state === 'queued'
              ? 'Nothing is reserved while it waits. Admitted, it reserves at least this (less only where the budget caps its reply); joining a batch of longer replies pads its rows to their width, which takes more'
              : 'Never admitted: nothing was reserved'
        }
      >
        {bytes === undefined ? (
          <div className="muted">none</div>
        ) : (
          <>
            <div className="muted">
              {wants?.capped ? 'capped: at most' : r.state === 'queued' ? 'needs at least' : 'needs'}
            </div>
            <div>
              <Bytes value={bytes} />
            </div>
          </>
        )}
      </td>
    );
  }
  return (
    <td
      className="r"
      data-testid={
        r.fixedTokens !== undefined ? 'request-static-cache' : r.paddingBytes ? 'request-padding' : undefined
      }
      title={
        r.fixedTokens !== undefined
          ? `static KV cache: ${r.rows} ${r.rows === 1 ? 'row' : 'rows'} × ${r.fixedTokens} positions × ${r.bpt} B, held whole from the first token`
          : r.paddingBytes
            ? `${exactBytes(r.paddingBytes)} of the reservation is padding: batched with a longer reply, its ${r.rows === 1 ? 'row is' : 'rows are'} padded to that reply's width`
            : undefined
      }
    >
      <div>
        <Bytes value={r.usedBytes} />
      </div>
      <div>
        / <Bytes value={r.reservedBytes} />
      </div>
    </td>
  );
}

/** A request's first cell: its chat over its id (and its model, when the table holds several). */
function WhoCell({
  id,
  threadId,
  modelId,
  title,
  showModel,
}: {
  id: string;
  threadId: string | undefined;
  modelId: string;
  title: string | undefined;
  showModel: boolean;
}) {
  // A chat's request whose chat is not in the list (once it is loaded): the chat was deleted since.
  const loaded = useApp((s) => s.threadsLoaded);
  const gone = title === undefined && threadId !== undefined && loaded;
  return (
    // The chat's title in its own direction: a Hebrew one reads, and is cut, right to left. Ids read left to right.
    <td className="thread" dir="auto" title={title ?? (gone ? `A chat deleted since (${threadId})` : threadId)}>
      <div className={`ellipsis${gone ? ' muted' : ''}`} data-testid="request-chat">
        {title ?? (threadId ? (gone ? 'deleted chat' : threadId.slice(0, 8)) : '—')}
      </div>
      <div className="sub mono" dir="ltr" data-testid="request-id" title={`${id} · ${isolated(modelId)}`}>
        {id.slice(0, 6)}
        {showModel && <span data-testid="request-model"> · {modelId}</span>}
      </div>
    </td>
  );
}

/** A request sent while its model loads again: in no scheduler yet, it reserves nothing until the load is in. */
function ReloadWaitRow({
  w,
  title,
  several,
  showModel,
}: {
  w: ReloadWait;
  title: string | undefined;
  several: boolean;
  showModel: boolean;
}) {
  return (
    <tr
      data-testid="request-row"
      data-request-id={w.requestId}
      data-state="reload-wait"
      title={`${w.requestId}: sent while ${isolated(w.modelId)} loads again; it reserves nothing until that load is in, then it is admitted as if sent then`}
    >
      <WhoCell id={w.requestId} threadId={w.threadId} modelId={w.modelId} title={title} showModel={showModel} />
      {several && <td className="mono">—</td>}
      <td>
        <span className="state reload-wait">waiting</span>
      </td>
      <td className="muted" colSpan={4}>
        for {w.modelId} to load again
      </td>
    </tr>
  );
}

function Requests({ snapshot, waits }: { snapshot: BudgetSnapshot; waits: ReloadWait[] }) {
  const devices = snapshot.devices;
  const titles = useThreadTitles();
  const models = useApp((s) => s.models);
  const reloading = useMemo(() => new Set(models.filter((m) => m.reloading).map((m) => m.id)), [models]);
  const several = devices.length > 1;
  const deviceOf = new Map<string, string>();
  for (const d of devices) for (const r of [...d.running, ...d.queue, ...d.recent]) deviceOf.set(r.id, d.device);
  // Live work first (running, then queued in admission order, then waiting for a model to load again), then what
  // ended, newest first (the latest few). A long queue shows its head: a row each for sixty queued API requests
  // would have the page lay out the table again at every snapshot, slowing the replies it shows.
  const byEnd = (a: SchedulerRequestView, b: SchedulerRequestView) => (b.endedAt ?? 0) - (a.endedAt ?? 0);
  const ended = devices.flatMap((d) => d.recent).sort(byEnd);
  const older = Math.max(0, ended.length - SHOWN_ENDED_REQUESTS);
  const queued = devices.flatMap((d) => d.queue);
  const shownQueued = queued.slice(0, SHOWN_QUEUED_REQUESTS);
  const moreQueued = queued.length - shownQueued.length;
  const live = [...devices.flatMap((d) => d.running), ...shownQueued];
  const shownEnded = ended.slice(0, SHOWN_ENDED_REQUESTS);
  const rows = [...live, ...shownEnded];
  const modelCount = new Set([...rows.map((r) => r.modelId), ...waits.map((w) => w.modelId)]).size;
  const columns = 6 + (several ? 1 : 0);
  const row = (r: SchedulerRequestView) => (
    <RequestRow
      key={r.id}
      r={r}
      title={r.threadId ? titles.get(r.threadId) : undefined}
      device={several ? deviceOf.get(r.id) : undefined}
      showModel={modelCount > 1}
      wait={r.state === 'queued' ? queueWait(snapshot, r.id, reloading) : null}
    />
  );
  return (
    <section>
      <h2>Requests</h2>
      {rows.length === 0 && waits.length === 0 ? (
        <div className="muted">No requests yet.</div>
      ) : (
        <div className="table-wrap">
          <table className="table requests" data-testid="request-table">
            <thead>
              <tr>
                <th title="the chat, over the request's id">chat · id</th>
                {several && <th>device</th>}
                <th>state</th>
                <th className="r" title="rows">
                  R
                </th>
                <th className="r" title="prompt tokens + max new tokens">
                  tokens
                </th>
                <th className="r" title="KV bytes used / reserved">
                  KV
                </th>
                <th className="r" title="budget cap: admitted / asked tokens">
                  cap
                </th>
              </tr>
            </thead>
            <tbody>
              {live.map(row)}
              {moreQueued > 0 && (
                <tr data-testid="requests-more-queued">
                  <td className="muted" colSpan={columns}>
                    and {moreQueued} more queued behind {moreQueued === 1 ? 'it' : 'them'} (the first{' '}
                    {SHOWN_QUEUED_REQUESTS} are shown)
                  </td>
                </tr>
              )}
              {waits.map((w) => (
                <ReloadWaitRow
                  key={w.requestId}
                  w={w}
                  title={w.threadId ? titles.get(w.threadId) : undefined}
                  several={several}
                  showModel={modelCount > 1}
                />
              ))}
              {shownEnded.map(row)}
            </tbody>
          </table>
          {older > 0 && (
            <div className="muted older" data-testid="requests-older">
              and {older} older {older === 1 ? 'request' : 'requests'} (the newest {SHOWN_ENDED_REQUESTS} that ended are
              shown)
            </div>
          )}
        </div>
      )}
    </section>
  );
}

/** Session rows the table shows at most; the rest are counted, with the KV they hold. */
export const SHOWN_SESSIONS = 20;

export function Sessions({ devices }: { devices: DeviceBudgetSnapshot[] }) {
  const titles = useThreadTitles();
  const all: SchedulerSessionView[] = devices.flatMap((d) => d.sessions);
  // An API request's prompt cache, while its turn is queued or running, is that request (its row above): listed
  // again, sixty queued API requests would read as sixty rows of "API prompt cache · in its request".
  const busyCache = (s: SchedulerSessionView) => s.state !== 'idle' && s.sessionId.startsWith(PROMPT_CACHE_PREFIX);
  const listed = all.filter((s) => !busyCache(s));
  // A client that keeps a prompt cache per conversation leaves hundreds: the busy ones (running, then queued) and the
  // idle ones used last are shown — the next to be evicted are the least recently used —, the rest counted with what
  // they hold (the whole list would redraw with every change of any).
  const busyRank = { running: 0, queued: 1, idle: 2 } as const;
  const ranked = [...listed].sort((a, b) => busyRank[a.state] - busyRank[b.state] || b.lastUsedAt - a.lastUsedAt);
  const sessions = ranked.slice(0, SHOWN_SESSIONS);
  const notShown = ranked.slice(SHOWN_SESSIONS);
  const notShownBytes = notShown.reduce((sum, s) => sum + s.heldBytes, 0);
  const busyCaches = all.filter(busyCache);
  const inRequests = busyCaches.length;
  // Of those, the ones whose requests wait beyond the head of the queue the request table shows: counted, not seen.
  const beyondShown = new Set(
    devices
      .flatMap((d) => d.queue)
      .slice(SHOWN_QUEUED_REQUESTS)
      .map((q) => q.sessionId),
  );
  const hidden = busyCaches.filter((s) => beyondShown.has(s.sessionId)).length;
  if (all.length === 0) return null;
  return (
    <section>
      <h2>Sessions</h2>
      {sessions.length > 0 && (
        <table className="table sessions" data-testid="session-table">
          <thead>
            <tr>
              <th>chat</th>
              <th>state</th>
              <th className="r">tokens</th>
              <th className="r">held</th>
            </tr>
          </thead>
          <tbody>
            {sessions.map((s) => {
              const cache = s.sessionId.startsWith(PROMPT_CACHE_PREFIX);
              const name = titles.get(s.sessionId) ?? (cache ? 'API prompt cache' : s.sessionId.slice(0, 10));
              // A turn running: its KV is its request's (the requests' table), the session holds it once it ends.
              const inRequest = s.state !== 'idle';
              const empty = s.state === 'idle' && s.tokens === 0;
              return (
                <tr
                  key={s.sessionId}
                  data-testid="session-row"
                  data-session-id={s.sessionId}
                  data-held-bytes={s.heldBytes}
                >
                  <td
                    className="thread"
                    dir="auto"
                    title={`${isolated(name)} (${s.sessionId} · ${isolated(s.modelId)})`}
                  >
                    {name}
                    {cache && (
                      // One prompt cache from another: its id's first characters, and its model.
                      <div className="sub mono" dir="ltr" data-testid="session-id">
                        {promptCacheShortId(s.sessionId)} · {s.modelId}
                      </div>
                    )}
                  </td>
                  <td>
                    <span
                      className={`state ${s.state === 'idle' ? 'cancelled' : s.state}`}
                      title={empty ? 'Its KV was dropped: its next turn reads the whole conversation again' : undefined}
                    >
                      {empty ? 'idle · nothing kept' : s.state}
                    </span>
                  </td>
                  {inRequest ? (
                    <td
                      className="r muted"
                      colSpan={2}
                      data-testid="session-in-request"
                      title="While its turn runs, its KV is counted in the request's row above; the session holds it once the turn ends"
                    >
                      in its request
                    </td>
                  ) : (
                    <>
                      <td className="r num">{formatInteger(s.tokens)}</td>
                      <td className="r">
                        <Bytes value={s.heldBytes} />
                      </td>
                    </>
                  )}
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {notShown.length > 0 && (
        <div className="muted" data-testid="sessions-not-shown" style={{ fontSize: 12, marginTop: 4 }}>
          and {formatInteger(notShown.length)} more {notShown.length === 1 ? 'session' : 'sessions'}, holding{' '}
          <Bytes value={notShownBytes} />
        </div>
      )}
      {inRequests > 0 && (
        <div className="muted" data-testid="sessions-in-requests" style={{ fontSize: 12, marginTop: 4 }}>
          {sessions.length > 0 ? 'and ' : ''}
          {inRequests} API prompt {inRequests === 1 ? 'cache' : 'caches'} in{' '}
          {inRequests === 1 ? 'its request' : 'their requests'}, queued or running
          {hidden > 0 && ` (${hidden} of them queued beyond the rows shown)`}
        </div>
      )}
      <div className="muted" style={{ fontSize: 12, marginTop: 4 }}>
        Idle sessions keep their KV so the next turn only computes what is new; they are evicted (least recently used
        first) when a request needs the room.
      </div>
    </section>
  );
}

function short(id: string | undefined): string {
  return id ? `#${id.slice(0, 6)}` : '';
}

/** One API prompt cache from another: the first characters of its id after the prefix. */
function promptCacheShortId(sessionId: string): string {
  return sessionId.slice(PROMPT_CACHE_PREFIX.length, PROMPT_CACHE_PREFIX.length + 6);
}

/**
 * A session as a person knows it: its chat's title, an API prompt cache, or its id. The title is isolated (between
 * U+2068 and U+2069, as <bdi> would set it apart): a Hebrew or Arabic one keeps its place in the English line.
 */
function sessionName(sessionId: string, titles?: ReadonlyMap<string, string>): string {
  const title = titles?.get(sessionId);
  if (title !== undefined) return `chat ${quoted(title)}`;
  if (sessionId.startsWith(PROMPT_CACHE_PREFIX)) return `API prompt cache ${promptCacheShortId(sessionId)}`;
  return `session ${sessionId.slice(0, 10)}`;
}

/** One line per event: what happened, with its numbers; `titles`: the chats' titles by id. */
export function describeEvent(e: TimelineEvent, titles?: ReadonlyMap<string, string>): string {
  switch (e.type) {
    case 'accepted':
      return `${short(e.requestId)} ${e.promptTokens} prompt + ${e.maxNewTokens} max tok${e.rows > 1 ? ` × ${e.rows} rows` : ''}${e.clipped ? ' (clipped)' : ''}`;
    case 'queued':
      return `${short(e.requestId)} position ${e.position + 1} of ${e.queueLength}`;
    case 'admitted':
      return `${short(e.requestId)} reserved ${formatBytes(e.reservedBytes)} for ${e.admittedMaxTokens} tok after ${formatMs(e.queueMs)}${e.budgetCap ? ` (capped from ${e.budgetCap.requestedMaxTokens})` : ''}`;
    case 'rejected':
      return `${short(e.requestId)} ${e.error.code}${e.stage === 'queued' ? ' while queued' : ''}: ${refusalBrief(e.error).reason}`;
    case 'firstToken':
      return `${short(e.requestId)} first token after ${formatMs(e.ttftMs)}`;
    case 'finished':
      return `${short(e.requestId)} ${e.reason}, ${e.generatedTokens} tok`;
    case 'cancelled':
      return `${short(e.requestId)} ${e.reason}${e.wasRunning ? '' : ' (was queued)'}`;
    case 'failed':
      return `${short(e.requestId)} ${e.error.code}`;
    case 'released':
      return `${short(e.requestId)} returned ${formatBytes(e.bytes)}${e.retainedBytes > 0 ? `, session keeps ${formatBytes(e.retainedBytes)}` : ''}`;
    case 'evicted':
      return `${sessionName(e.sessionId, titles)} dropped ${formatBytes(e.bytes)} (${e.reason})`;
    case 'reconfigured':
      return `limit ${byteChange(e.limits.before.limitBytes, e.limits.after.limitBytes)}, max running ${e.limits.after.maxRunning}${e.overLimit ? ', over the new limit' : ''}${e.rejectedRequestIds.length ? `, refused ${e.rejectedRequestIds.length} queued` : ''}`;
    case 'violation':
      return e.violation.message;
  }
}

/**
 * How long ago the latest event was, by this page's clock (the list's times count back from that event, not from
 * now: a quiet minute must not read as "now"). Ticks every second on its own, not the whole list.
 */
function LatestAge({ at }: { at: number }) {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);
  const seconds = Math.max(0, Math.floor((now - at) / 1000));
  return (
    <span
      className="muted latest-age"
      data-testid="timeline-latest-age"
      title="The event's time is the host's clock; the age, this page's (the same clock, unless kvdesk serves this page from another machine)"
    >
      {' '}
      · latest {seconds < 2 ? 'just now' : `${formatDuration(seconds * 1000)} ago`}
    </span>
  );
}

/**
 * A React key for each event: events have no id, but each is one object for as long as the page keeps it. Keyed by
 * place, every new event (the list is newest first, the strip drops what is over a minute old) would move every
 * key, and each frame with an event would build the whole list (120 rows) again.
 */
const eventKeys = new WeakMap<TimelineEvent, number>();
let nextEventKey = 0;
function eventKey(e: TimelineEvent): number {
  let key = eventKeys.get(e);
  if (key === undefined) {
    key = nextEventKey++;
    eventKeys.set(e, key);
  }
  return key;
}

const Timeline = memo(function Timeline() {
  const events = useApp((s) => s.events);
  const titles = useThreadTitles();
  const shown = events.slice(-120).reverse();
  const newest = shown[0]?.at ?? 0;
  const span = 60_000;
  // The strip's ticks sit on a track at fixed places (from the first event this page saw) and the track slides left
  // as events come: a new event moves the track, not every tick (one transform, no tick styled and laid out again).
  const origin = useRef<number | null>(null);
  if (origin.current === null && shown.length > 0) origin.current = newest;
  const from = origin.current ?? newest;
  return (
    <section>
      <h2>Timeline{shown.length > 0 && <LatestAge at={newest} />}</h2>
      <div className="timeline-strip" title="the last 60 seconds of scheduler events">
        <div
          className="timeline-track"
          data-testid="timeline-track"
          style={{ transform: `translateX(${(-(newest - from) / span) * 100}%)` }}
        >
          {events
            .filter((e) => newest - e.at <= span)
            .map((e) => (
              <span
                key={eventKey(e)}
                className={`tick ${e.type}`}
                data-testid="timeline-tick"
                data-at={e.at}
                style={{ left: `calc(${(1 + (e.at - from) / span) * 100}% - 3px)` }}
                title={`${e.type}: ${describeEvent(e, titles)}`}
              />
            ))}
        </div>
      </div>
      {shown.length === 0 ? (
        <div className="muted">No scheduler events since this page opened.</div>
      ) : (
        <ul className="events" data-testid="timeline">
          {shown.map((e, i) => (
            <li key={eventKey(e)} data-testid="timeline-event" data-type={e.type}>
              <span className="t num">{i === 0 ? 'latest' : `−${((newest - e.at) / 1000).toFixed(2)}s`}</span>
              <span className={`k ${e.type}`}>{e.type}</span>
              <span>{describeEvent(e, titles)}</span>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
});

export function Inspector() {
  const snap = useApp((s) => s.snapshot);
  const drawer = useNarrowWindow();
  const closeDrawer = useApp((s) => s.setInspectorDrawer);
  const ref = useRef<HTMLElement>(null);
  // A narrow window's drawer opens over the chat, as a dialog: the focus goes into it and stays there (Tab wraps),
  // and Esc or its ✕ closes it.
  useEffect(() => {
    if (drawer) ref.current?.focus({ preventScroll: true });
  }, [drawer]);
  useFocusTrap(ref, drawer);
  return (
    <aside
      ref={ref}
      id={INSPECTOR_ID}
      className="inspector"
      aria-label="Budget inspector"
      data-testid="inspector"
      tabIndex={-1}
      data-focus-home="self"
      {...(drawer ? { role: 'dialog', 'aria-modal': true } : {})}
    >
      <Announcer inDrawer />
      {drawer && (
        <button
          type="button"
          className="ghost drawer-close"
          data-testid="inspector-close"
          aria-label="Close the inspector"
          title="Close (Esc)"
          onClick={() => {
            closeDrawer(false);
            document.getElementById(INSPECTOR_TOGGLE_ID)?.focus();
          }}
        >
          ✕
        </button>
      )}
      {snap ? (
        <>
          {snap.devices.map((d) => (
            <BudgetSection key={d.device} snap={d} several={snap.devices.length > 1} />
          ))}
          <Controls devices={snap.devices} />
          <Requests snapshot={snap} waits={snap.reloadWaits ?? []} />
          <Sessions devices={snap.devices} />
        </>
      ) : (
        <div className="muted">Waiting for the scheduler…</div>
      )}
      <Timeline />
    </aside>
  );
}
