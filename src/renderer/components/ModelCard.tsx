/** A validated model package: what it is, what its KV costs, whether it fits the budget, and load/unload. */
import { type ReactNode, useEffect, useRef, useState } from 'react';
import type { LoadModelRequest, ModelInfo } from '../../shared/api';
import { backendName } from '../../shared/devices';
import { formatDuration } from '../../shared/duration';
import { BROKEN_TEMPLATE_WARNING, type ModelSpec, staticPositions } from '../../shared/model-spec';
import { reasoningWhere } from '../../shared/reasoning';
import { useApp, useBridge } from '../bridge/context';
import { FIT_CONCURRENCY, fitClass, fitLabel, modelFit } from '../lib/fit';
import { exactBytes, formatBytes, formatInteger } from '../lib/format';
import { focusWhenDone } from '../lib/model-focus';
import { Bytes } from './Bytes';
import { BackendOptions, useBackends, whyNotUsable } from './backends';

function kvShape(spec: ModelSpec): { heads: string; headDim: string; dtype: string; kind: string } {
  if (spec.kv.kind === 'dynamic') {
    const t = spec.kv.tensors[0];
    return {
      heads: t ? String(t.kvHeads) : '—',
      headDim: t ? String(t.headDim) : '—',
      dtype: t?.dtype ?? '—',
      kind: t?.role === 'combined' ? 'combined K/V' : 'split K/V',
    };
  }
  if (spec.kv.kind === 'static') {
    return { heads: '—', headDim: '—', dtype: spec.kv.cache.dtype, kind: `static [${spec.kv.cache.shape.join(', ')}]` };
  }
  return { heads: '—', headDim: '—', dtype: '—', kind: 'no KV cache' };
}

const CPU = 'CPUExecutionProvider';

/** What the package would load as now: its variant (graph file or ORT variant) and its backend. */
function currentPick(spec: ModelSpec): { variant: string; backend: string } {
  return {
    variant: spec.selectedVariant ?? spec.graphVariant ?? '',
    backend: backendName(spec.executionProvider ?? CPU),
  };
}

/** What a card's controls for how the package loads take: the package, whether it is loaded, and the load. */
interface LoadControlProps {
  spec: ModelSpec;
  loaded: boolean;
  busy?: boolean | undefined;
  /** Resolves with why the person's chat template was refused (null: loaded, or refused for another reason, said). */
  onLoad: (how: LoadModelRequest) => Promise<string | null>;
}

/**
 * The person's pick of how the package runs (UI.md's `CPU ▾`; PACKAGES.md: "let the person choose"): its graph
 * variant (fp32, q4, fp16…) or an ORT package's variant, and — for a package whose graph runs anywhere — the
 * backend, among those onnxruntime can use here (the others listed with why not). Loaded, the model loads again
 * with the pick; not loaded, Load takes it.
 */
function RunWith({ spec, loaded, busy, onLoad }: LoadControlProps) {
  const now = currentPick(spec);
  const [variant, setVariant] = useState(now.variant);
  const [backend, setBackend] = useState(now.backend);
  // The model loaded again (or another spec shown): the pick follows it.
  useEffect(() => {
    setVariant(now.variant);
    setBackend(now.backend);
  }, [now.variant, now.backend]);
  const ortVariants = spec.variants ?? [];
  const graphVariants = spec.graphVariants ?? [];
  const pickBackend = ortVariants.length === 0;
  const backends = useBackends(pickBackend);
  const unusable = backends?.filter((b) => !b.usable) ?? [];
  if (loaded && ortVariants.length < 2 && graphVariants.length < 2 && !pickBackend) return null;
  const how: LoadModelRequest = {
    ...(variant !== now.variant ? { variant } : {}),
    ...(pickBackend && backend !== now.backend ? { backend } : {}),
  };
  const changed = variant !== now.variant || backend !== now.backend;
  // An ORT package's variants (each built for a backend), else a package's graph files, when there are several.
  const choices =
    ortVariants.length > 1
      ? {
          label: 'variant',
          testId: 'model-variant',
          title: undefined,
          options: ortVariants.map((v) => ({
            value: v.name,
            text: `${v.name} · ${backendName(v.ep)}${v.usable ? '' : ' (not usable here)'}`,
            disabled: !v.usable,
          })),
        }
      : ortVariants.length === 0 && graphVariants.length > 1
        ? {
            label: 'graph',
            testId: 'model-graph',
            title:
              "The package's graph files (model.onnx, model_q4.onnx, …): quantized ones are smaller and often faster on a CPU",
            options: graphVariants.map((v) => ({
              value: v.name,
              text: `${v.name} (${formatBytes(v.bytes)})`,
              disabled: false,
            })),
          }
        : undefined;
  return (
    <div className="row run-with" data-testid="model-run-with" data-variant={now.variant} data-backend={now.backend}>
      {choices && (
        <label title={choices.title}>
          {choices.label}{' '}
          <select
            data-testid={choices.testId}
            value={variant}
            disabled={busy}
            onChange={(e) => setVariant(e.target.value)}
          >
            {choices.options.map((o) => (
              <option key={o.value} value={o.value} disabled={o.disabled}>
                {o.text}
              </option>
            ))}
          </select>
        </label>
      )}
      {pickBackend && (
        <label>
          run on{' '}
          <select
            data-testid="model-backend-pick"
            value={backend}
            disabled={busy || backends === null}
            onChange={(e) => setBackend(e.target.value)}
          >
            <BackendOptions list={backends ?? [{ name: now.backend, usable: true }]} />
          </select>
        </label>
      )}
      {(!loaded || changed) && (
        <button
          type="button"
          className="primary"
          data-testid={loaded ? 'model-reload' : 'model-load'}
          disabled={busy}
          // Loaded, the focus goes to its Unload (the button goes).
          onClick={(e) => void focusWhenDone(onLoad(how), e.currentTarget, spec.root)}
        >
          {busy ? 'Loading…' : loaded ? 'Load again with these' : 'Load'}
        </button>
      )}
      {unusable.length > 0 && (
        // Why each is not usable, a click away (a disabled option's tooltip does not show in an open select).
        <details className="muted backends-missing" data-testid="model-backends-missing">
          <summary>{unusable.map((b) => b.name).join(', ')} not usable here: why</summary>
          <ul>
            {unusable.map((b) => (
              <li key={b.name} data-testid="model-backend-why" data-backend={b.name}>
                <b>{b.name}</b>: {whyNotUsable(b)}
              </li>
            ))}
          </ul>
        </details>
      )}
    </div>
  );
}

/**
 * The chat template the model's prompts are written with (Jinja, as transformers renders it), and one of the
 * person's own instead (LM Studio's prompt template, Ollama's TEMPLATE): for a package whose template is missing,
 * broken or not what they want. Kept with the model's pick, so it loads so again; "the package's" drops it.
 */
function ChatTemplate({ spec, loaded, busy, onLoad }: LoadControlProps) {
  const bridge = useBridge();
  const current = spec.chatTemplate ?? '';
  const [draft, setDraft] = useState(current);
  // What the draft writes for a short conversation, or why it cannot (shown until the draft changes).
  const [preview, setPreview] = useState<{ text: string; error?: boolean } | null>(null);
  // The model loaded again (with this template, or the package's): the editor shows what it uses now.
  useEffect(() => setDraft(current), [current]);
  // The draft a preview answers for: a new draft clears the preview, and an answer that comes after it is dropped.
  const asked = useRef('');
  useEffect(() => {
    asked.current = draft;
    setPreview(null);
  }, [draft]);
  // A preview on its way (a template that runs long takes up to the host's limit): one at a time.
  const [previewing, setPreviewing] = useState(false);
  const showPreview = async () => {
    const shown = draft;
    setPreviewing(true);
    const r = await bridge.previewChatTemplate(shown, loaded ? spec.id : undefined).finally(() => setPreviewing(false));
    if (asked.current !== shown) return;
    setPreview(r.ok ? { text: r.value.text } : { text: r.error.message, error: true });
  };
  // The host checks the template as it will use it (one user message: some templates refuse a system message,
  // which the preview's conversation has); one it refuses is said here, beside the editor, and the model keeps its
  // own.
  const [loading, setLoading] = useState(false);
  // What the last change did, for a loaded model (it takes effect without a sign otherwise); dropping one's own
  // template can be undone.
  const [status, setStatus] = useState<{ text: string; undo?: string } | null>(null);
  const load = async (sent = draft) => {
    setLoading(true);
    const refused = await onLoad({ chatTemplate: sent });
    setLoading(false);
    if (refused && asked.current === sent) setPreview({ text: refused, error: true });
    // An undo refused (the editor holds another template): said where the undo was offered.
    else if (refused) setStatus({ text: refused });
    if (!refused && loaded) setStatus({ text: 'Yours is in use from the next reply.' });
  };
  const reset = async () => {
    const mine = spec.chatTemplate;
    const refused = await onLoad({ chatTemplate: null });
    if (!refused && loaded) setStatus({ text: "The package's template is in use from the next reply.", undo: mine });
  };
  const whose = spec.chatTemplateEdited ? 'yours' : spec.chatTemplate ? 'the package’s' : 'none: kvdesk uses ChatML';
  return (
    <details className="chat-template" data-testid="model-template" data-edited={spec.chatTemplateEdited === true}>
      <summary title="The Jinja template that turns a chat into the model's prompt">
        chat template · <span data-testid="model-template-whose">{whose}</span>
      </summary>
      <textarea
        data-testid="model-template-text"
        aria-label="chat template"
        spellCheck={false}
        rows={10}
        value={draft}
        placeholder="{% for m in messages %}…{% endfor %}"
        onChange={(e) => {
          setDraft(e.target.value);
          setStatus(null);
        }}
      />
      <div className="row">
        <button
          type="button"
          className="primary"
          data-testid="model-template-apply"
          disabled={busy || loading || draft.trim() === '' || draft === current}
          onClick={() => void load()}
        >
          {loading ? 'Checking…' : loaded ? 'Use this template' : 'Load with this template'}
        </button>
        <button
          type="button"
          data-testid="model-template-preview-button"
          disabled={draft.trim() === '' || previewing}
          title="What this template writes for a short conversation (a system message, two turns), as the model would read it"
          onClick={() => void showPreview()}
        >
          {previewing ? 'Previewing…' : 'Preview'}
        </button>
        {spec.chatTemplateEdited && (
          <button type="button" data-testid="model-template-reset" disabled={busy} onClick={() => void reset()}>
            Use the package’s template
          </button>
        )}
        {status && (
          <span className="template-status" role="status" data-testid="model-template-status">
            {status.text}
            {status.undo !== undefined && (
              <button
                type="button"
                className="ghost small"
                data-testid="model-template-undo"
                disabled={busy || loading}
                onClick={() => void load(status.undo)}
              >
                Undo
              </button>
            )}
          </span>
        )}
        <span className="muted">
          Jinja, as transformers renders it (messages, add_generation_prompt, tools…); checked before it is{' '}
          {loaded ? 'used (the model does not load again)' : 'loaded'}
        </span>
      </div>
      {preview && (
        <pre
          className={`template-preview${preview.error ? ' error' : ''}`}
          data-testid="model-template-preview"
          data-error={preview.error === true}
        >
          {preview.text}
        </pre>
      )}
    </details>
  );
}

function Field({ k, children, testId }: { k: string; children: ReactNode; testId?: string }) {
  return (
    <div data-testid={testId}>
      <span className="k">{k}</span>
      <span className="num">{children}</span>
    </div>
  );
}

export function ModelCard({
  spec,
  loaded,
  backend,
  isDefault,
  active,
  busy,
  reloading,
  onLoad,
  onUnload,
  onUse,
  onClose,
  note,
  firstUse,
  testId = 'model-card',
}: {
  spec: ModelSpec;
  /** Loaded by a request that named it: unloads once idle for its time to live. */
  firstUse?: ModelInfo['firstUse'];
  loaded: boolean;
  backend?: string;
  isDefault?: boolean;
  active?: boolean;
  busy?: boolean;
  /** Being loaded again (by this window or another front end): requests on it wait until the load is in. */
  reloading?: boolean | undefined;
  onLoad?: (how: LoadModelRequest) => Promise<string | null>;
  onUnload?: () => Promise<void>;
  onUse?: () => void;
  /** The card of a package just chosen: closing it leaves the package where it is (loaded, or in the library). */
  onClose?: () => void;
  /** A line of its own above the path (where the package is kept, say). */
  note?: ReactNode;
  testId?: string;
}) {
  const snapshot = useApp((s) => s.snapshot);
  const kv = kvShape(spec);
  const { device, fit } = modelFit(spec, loaded, snapshot?.devices ?? []);
  const positions = staticPositions(spec);
  const badgeClass = fitClass(fit);
  const oneContext = spec.bpt * (positions ?? spec.contextLength);
  return (
    <div className="card" data-testid={testId} data-model-id={spec.id} data-root={spec.root} data-loaded={loaded}>
      <div className="top">
        <h3 data-testid="model-name" dir="auto" title={spec.displayName}>
          {spec.displayName}
        </h3>
        {isDefault && <span className="badge">default</span>}
        {firstUse && (
          <span
            className="badge"
            data-testid="model-first-use"
            title={`A request named it and kvdesk loaded it from the library. ${
              firstUse.ttlMs === null
                ? 'It stays loaded until unloaded.'
                : `It unloads after ${formatDuration(firstUse.ttlMs)} without requests.`
            }`}
          >
            loaded on first use
            {firstUse.ttlMs !== null ? ` · unloads after ${formatDuration(firstUse.ttlMs)} idle` : ''}
          </span>
        )}
        {spec.reasoning && (
          <span
            className="badge"
            data-testid="model-thinks"
            title={`A thinking model: it reasons in ${reasoningWhere(spec.reasoning)} before it replies. A chat can tell it to reply at once (system & sampling → thinking)${
              spec.reasoning.toggle
                ? ', through its chat template’s switch.'
                : ': its chat template has no switch, so kvdesk closes the reasoning in the prompt.'
            }`}
          >
            thinks
          </span>
        )}
        {loaded && reloading ? (
          <span
            className="badge warn"
            data-testid="model-reloading"
            title="It is being loaded again (another variant, backend or chat template). Requests sent to it wait until the load is in, then run on it."
          >
            loading again…
          </span>
        ) : loaded ? (
          <span className="badge ok" data-testid="model-loaded">
            loaded{backend ? ` · ${backend.replace(/ExecutionProvider$/, '')}` : ''}
          </span>
        ) : (
          <span className="badge" data-testid="model-not-loaded">
            validated · not loaded
          </span>
        )}
        {fit && (
          <span
            className={`badge ${badgeClass}`}
            data-testid="fit-badge"
            data-level={fit.level}
            title={fit.explanation}
          >
            {fitLabel(fit.level)}
          </span>
        )}
        {/* It fits, yet no chat can run on it: the card's head says so beside the fit. */}
        {spec.warnings.some((w) => w.startsWith(BROKEN_TEMPLATE_WARNING)) && (
          <span
            className="badge warn"
            data-testid="template-broken-badge"
            title="Its chat template is not valid Jinja: every chat is refused until it has another (the chat template below)"
          >
            chats refused: template
          </span>
        )}
      </div>
      <div className="spec">
        <Field k="layout" testId="model-layout">
          {spec.layout}
          {spec.modelType ? ` · ${spec.modelType}` : ''}
        </Field>
        <Field k="layers">{spec.numLayers}</Field>
        <Field k="KV heads × head dim">
          {kv.heads} × {kv.headDim}
        </Field>
        <Field k="KV dtype">
          {kv.dtype} <span className="muted">({kv.kind})</span>
        </Field>
        <Field k="bytes per token" testId="model-bpt">
          <span title={exactBytes(spec.bpt)} data-bytes={spec.bpt}>
            {formatInteger(spec.bpt)} B
          </span>
        </Field>
        <Field k="context">{formatInteger(spec.contextLength)} tok</Field>
        <Field k="weights">
          <Bytes value={spec.weightsBytes} />
        </Field>
        <Field k="backends">{spec.backends.map((b) => b.replace(/ExecutionProvider$/, '')).join(', ') || '—'}</Field>
      </div>
      <div className="kvline" data-testid="model-kv-line">
        <span>
          one full context = <Bytes value={oneContext} testId="model-one-context" />, {FIT_CONCURRENCY} at once ={' '}
          <Bytes value={oneContext * FIT_CONCURRENCY} />
        </span>
        {fit && (
          <span className="muted" data-testid="model-fit-device" data-device={device}>
            against <span title={exactBytes(fit.budgetBytes)}>{formatBytes(fit.budgetBytes)}</span> {device} budget —{' '}
            {fit.explanation}
          </span>
        )}
        {!fit && snapshot && (
          <span className="muted" data-testid="model-fit-device" data-device={device}>
            {device} has no budget yet: kvdesk reads its memory when the first model is placed there (
            <code>kvdesk inspect</code> shows the figures before loading)
          </span>
        )}
      </div>
      {spec.warnings.length > 0 && (
        <ul className="warnings">
          {spec.warnings.map((w) => (
            <li key={w}>{w}</li>
          ))}
        </ul>
      )}
      {note && (
        <div className="muted" data-testid="model-card-note">
          {note}
        </div>
      )}
      <div className="path" title={spec.root}>
        {spec.root}
      </div>
      {onLoad && <RunWith spec={spec} loaded={loaded} busy={busy || reloading} onLoad={onLoad} />}
      {onLoad && <ChatTemplate spec={spec} loaded={loaded} busy={busy || reloading} onLoad={onLoad} />}
      <div className="buttons">
        {loaded && onUse && (
          <button type="button" data-testid="model-use" disabled={active} onClick={onUse}>
            {active ? 'In use for new replies' : 'Use for new replies'}
          </button>
        )}
        {loaded && onUnload && (
          <button
            type="button"
            data-testid="model-unload"
            disabled={busy || reloading}
            // Unloaded, the focus goes to its Load, wherever its card is then.
            onClick={(e) => void focusWhenDone(onUnload(), e.currentTarget, spec.root)}
          >
            {busy && !reloading ? 'Unloading…' : 'Unload'}
          </button>
        )}
        {onClose && (
          <button type="button" className="ghost" data-testid="model-card-close" disabled={busy} onClick={onClose}>
            Close
          </button>
        )}
      </div>
    </div>
  );
}
