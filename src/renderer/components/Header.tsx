/** Top bar: model picker with its backend, the budget at a glance, the Models and Inspector toggles. */
import { useSyncExternalStore } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { ModelInfo } from '../../shared/api';
import { backendName } from '../../shared/devices';
import { useApp, useBridge } from '../bridge/context';
import { exactBytes, formatBytes } from '../lib/format';
import { unloadedEntries } from '../lib/library';
import { openOnArrow } from '../lib/open-on-arrow';
import type { AppStore } from '../store';
import { BudgetBar } from './BudgetBar';
import { BackendOptions, useBackends } from './backends';
import { MenuIcon } from './Icons';

/** Id of the chat list (the sidebar), which a narrow window shows as a drawer. */
export const CHAT_LIST_ID = 'chat-list';
/** Id of the header's button that shows the chat list in a narrow window (focus goes back to it). */
export const SIDEBAR_TOGGLE_ID = 'sidebar-toggle';
/** Where the chat list stops fitting beside the chat and becomes a drawer (as styles.css's media query). */
export const NARROW_WINDOW = '(max-width: 900px)';

function narrowQuery(): MediaQueryList | undefined {
  return typeof window === 'undefined' ? undefined : window.matchMedia?.(NARROW_WINDOW);
}
function onNarrowChange(changed: () => void): () => void {
  const query = narrowQuery();
  query?.addEventListener('change', changed);
  return () => query?.removeEventListener('change', changed);
}
/** Whether the window is narrow now (NARROW_WINDOW): the chat list and the inspector are drawers. */
export function narrowWindow(): boolean {
  return narrowQuery()?.matches === true;
}

/**
 * Closes a narrow window's drawers (the chat list, the inspector): a shortcut (Ctrl/Cmd+K, N, F) takes the focus to
 * the page under them, which must not stay covered (the person pressing it wants the picker, the chat, the find bar).
 */
export function closeDrawers(store: AppStore): void {
  const s = store.getState();
  if (s.inspectorDrawer) s.setInspectorDrawer(false);
  if (s.sidebarOpen) s.setSidebarOpen(false);
}

/** narrowWindow(), followed as the window is resized. */
export function useNarrowWindow(): boolean {
  return useSyncExternalStore(onNarrowChange, narrowWindow);
}

/**
 * Whether the inspector shows, and how to show or hide it: in a narrow window its drawer (closed until asked
 * for), in a wide one the person's setting (kept with the settings).
 */
export function useInspectorShown(): { shown: boolean; narrow: boolean; show(open: boolean): void } {
  const bridge = useBridge();
  const narrow = useNarrowWindow();
  const shown = useApp((s) => (narrow ? s.inspectorDrawer : s.ui.inspectorOpen !== false));
  const setDrawer = useApp((s) => s.setInspectorDrawer);
  return { shown, narrow, show: (open) => (narrow ? setDrawer(open) : bridge.setInspectorOpen(open)) };
}

/** Id of the header's inspector button (a narrow window's inspector drawer gives the focus back to it). */
export const INSPECTOR_TOGGLE_ID = 'inspector-toggle';

/** Id of the inspector (its button controls it). */
export const INSPECTOR_ID = 'inspector';

/** Id of the model picker; Ctrl/Cmd+K focuses it. */
export const MODEL_PICKER_ID = 'model-picker';

/** The picker's value for a library package: picking it loads it. */
const LIBRARY_VALUE = 'library:';

function ModelPicker() {
  const bridge = useBridge();
  const { models, activeModelId, library, busyModels } = useApp(
    useShallow((s) => ({
      models: s.models,
      activeModelId: s.activeModelId,
      library: s.library,
      busyModels: s.busyModels,
    })),
  );
  const active = models.find((m) => m.id === activeModelId);
  // Packages loaded before, ready to load: picking one loads it and uses it for new replies.
  const loadable = unloadedEntries(library, models, undefined).filter((e) => e.spec && !e.missing && !e.error);
  const loading = loadable.find((e) => busyModels.includes(e.root));
  return (
    <div className="picker">
      <label className="sr-only" htmlFor={MODEL_PICKER_ID}>
        Model
      </label>
      <select
        id={MODEL_PICKER_ID}
        data-testid="model-picker"
        value={activeModelId ?? ''}
        onKeyDown={openOnArrow}
        onChange={(e) => {
          const v = e.target.value;
          if (v.startsWith(LIBRARY_VALUE)) void bridge.loadAndUse(v.slice(LIBRARY_VALUE.length));
          else bridge.setActiveModel(v);
        }}
        title="This chat's model, for its next replies (Ctrl/Cmd+K); a library package loads when picked"
      >
        {models.length === 0 && <option value="">no model loaded</option>}
        <optgroup label="Loaded">
          {models.map((m) => (
            <option key={m.id} value={m.id}>
              {m.spec.displayName}
              {m.isDefault && m.spec.displayName.toLowerCase() !== 'default' ? ' (default)' : ''}
            </option>
          ))}
        </optgroup>
        {loadable.length > 0 && (
          <optgroup label="Library (loads when picked)" data-testid="model-picker-library">
            {loadable.map((e) => (
              <option key={e.root} value={`${LIBRARY_VALUE}${e.root}`} title={e.root}>
                {e.spec?.displayName ?? e.id}
              </option>
            ))}
          </optgroup>
        )}
      </select>
      {loading ? (
        <span className="badge" data-testid="model-picker-loading">
          loading <bdi>{loading.spec?.displayName ?? loading.id}</bdi>…
        </span>
      ) : (
        active?.reloading && (
          <span
            className="badge warn"
            data-testid="model-picker-loading"
            title="Replies sent now wait until the load is in, then run on it."
          >
            loading <bdi>{active.spec.displayName}</bdi> again…
          </span>
        )
      )}
      {active && <BackendPick model={active} />}
    </div>
  );
}

/**
 * Where the picked model runs (UI.md's `CPU ▾`): the backends onnxruntime can use here — for an ORT package,
 * those its variants are built for —, the others listed disabled with why. Picking one loads the model again there.
 */
function BackendPick({ model }: { model: ModelInfo }) {
  const bridge = useBridge();
  const busy = useApp((s) => s.busyModels.includes(model.id));
  const backends = useBackends();
  const current = backendName(model.backend);
  const offered = model.spec.variants ? new Set(model.spec.variants.map((v) => backendName(v.ep))) : null;
  const choices = (backends ?? []).filter((b) => offered === null || offered.has(b.name));
  const list = choices.some((b) => b.name === current)
    ? choices
    : [{ name: current, provider: model.backend, usable: true }, ...choices];
  return (
    <select
      className="backend-pick"
      data-testid="model-backend"
      value={current}
      disabled={busy}
      // Each value passed would load the model again: the arrows open the list instead.
      onKeyDown={openOnArrow}
      title="Where the model runs: pick another backend and it loads again there"
      onChange={(e) => void bridge.loadPackage(model.spec.root, { backend: e.target.value })}
    >
      <BackendOptions list={list} compact />
    </select>
  );
}

/** The budget of the device the picked model lives on (the CPU's when there is only one). */
function HeaderBudget() {
  const { snapshot, activeModelId } = useApp(
    useShallow((s) => ({ snapshot: s.snapshot, activeModelId: s.activeModelId })),
  );
  if (!snapshot) return <div className="header-budget muted">budget …</div>;
  const devices = snapshot.devices;
  const shown = devices.find((d) => activeModelId !== null && d.models.includes(activeModelId)) ?? snapshot;
  const taken = shown.reservedBytes + shown.heldBytes;
  return (
    <div
      className="header-budget"
      data-device={shown.device}
      title={`KV budget${devices.length > 1 ? ` of ${shown.device}` : ''}: reserved + held by sessions / limit`}
    >
      <span className="muted">{devices.length > 1 ? `budget · ${shown.device}` : 'budget'}</span>
      <BudgetBar snapshot={shown} testId="budget-bar" />
      <span
        className="figures num"
        data-testid="header-budget-figures"
        title={`${exactBytes(taken)} of ${exactBytes(shown.limitBytes)}`}
      >
        {formatBytes(taken)} / {formatBytes(shown.limitBytes)}
      </span>
    </div>
  );
}

export function Header() {
  const bridge = useBridge();
  const { view, theme, connection, transport } = useApp(
    useShallow((s) => ({
      view: s.view,
      theme: s.ui.theme,
      connection: s.connection,
      transport: s.transport,
    })),
  );
  const setView = useApp((s) => s.setView);
  const inspector = useInspectorShown();
  const sidebarOpen = useApp((s) => s.sidebarOpen);
  const setSidebarOpen = useApp((s) => s.setSidebarOpen);
  return (
    <header className="header">
      {/* Only in a narrow window (styles.css), where the chat list is a drawer. */}
      <button
        type="button"
        id={SIDEBAR_TOGGLE_ID}
        className="ghost sidebar-toggle"
        data-testid="sidebar-toggle"
        aria-controls={CHAT_LIST_ID}
        aria-expanded={sidebarOpen}
        aria-label="Chats"
        title={sidebarOpen ? 'Hide the chats (Esc)' : 'Show the chats: new chat, import, search'}
        onClick={() => setSidebarOpen(!sidebarOpen)}
      >
        <MenuIcon />
      </button>
      <span className="brand">kvdesk</span>
      <ModelPicker />
      <button
        type="button"
        className={view === 'models' ? 'primary' : ''}
        data-testid="models-toggle"
        aria-pressed={view === 'models'}
        onClick={() => setView(view === 'models' ? 'chat' : 'models')}
        title="Model packages: drop, validate, load"
      >
        Models
      </button>
      <div className="spacer" />
      <HeaderBudget />
      {connection !== 'open' && (
        <span className={`conn ${connection}`} data-testid="connection">
          {connection === 'connecting' ? 'connecting…' : 'reconnecting…'}
        </span>
      )}
      {/* The connection's kind, for the tests: not a word for a screen reader. */}
      <span className="sr-only" data-testid="transport" aria-hidden="true">
        {transport}
      </span>
      <button
        type="button"
        className="theme"
        data-testid="theme-toggle"
        data-theme={theme ?? 'system'}
        // As the OS is → light → dark → as the OS is.
        onClick={() => bridge.setTheme(theme === undefined ? 'light' : theme === 'light' ? 'dark' : undefined)}
        title={`Theme: ${theme ?? 'as the system is'} (click for ${theme === undefined ? 'light' : theme === 'light' ? 'dark' : 'as the system is'})`}
        aria-label={`Theme: ${theme ?? 'as the system is'}`}
      >
        {theme === 'light' ? '☀' : theme === 'dark' ? '☾' : '◐'}
      </button>
      <button
        type="button"
        id={INSPECTOR_TOGGLE_ID}
        className={inspector.shown ? 'primary' : ''}
        data-testid="inspector-toggle"
        // A drawer's button says whether the drawer is open; a side panel's, whether it is on.
        {...(inspector.narrow
          ? { 'aria-expanded': inspector.shown, 'aria-controls': INSPECTOR_ID }
          : { 'aria-pressed': inspector.shown })}
        onClick={() => inspector.show(!inspector.shown)}
        title="Budget inspector"
      >
        Inspector
      </button>
    </header>
  );
}
