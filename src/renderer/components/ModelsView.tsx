/** Model packages: drop or choose a folder, see it validated (or why not), load and unload; the library of packages loaded before. */
import { useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import { useApp, useBridge } from '../bridge/context';
import { fromFileList } from '../lib/folder-drop';
import { formatBytes, formatInteger } from '../lib/format';
import { LOADED_HEADING_ID } from '../lib/model-focus';
import { ApiServerPanel } from './ApiServerPanel';
import { HubDownload } from './HubDownload';
import { LibraryList } from './LibraryList';
import { ModelCard } from './ModelCard';

function ImportResult() {
  const bridge = useBridge();
  const imp = useApp((s) => s.packageImport);
  const setPackageImport = useApp((s) => s.setPackageImport);
  const { models, busyModels, activeModelId } = useApp(
    useShallow((s) => ({ models: s.models, busyModels: s.busyModels, activeModelId: s.activeModelId })),
  );
  if (!imp) return null;
  if (imp.status === 'reading' || imp.status === 'uploading') {
    // An upload: its bytes sent so far, then (all sent) the host's checks and load.
    const sending = imp.status === 'uploading' && (imp.total === undefined || (imp.sent ?? 0) < imp.total);
    const share = imp.total ? Math.min(1, (imp.sent ?? 0) / imp.total) : 0;
    return (
      <div className="card" data-testid="model-import-progress" data-sent={imp.sent ?? 0} data-total={imp.total ?? 0}>
        <div className="top">
          <h3>{imp.name}</h3>
          <span className="badge">
            {imp.status === 'reading' ? 'validating…' : sending ? 'uploading…' : 'validating…'}
          </span>
        </div>
        {imp.files !== undefined && (
          <div className="muted">
            {formatInteger(imp.files)} files, {formatBytes(imp.bytes ?? 0)}
          </div>
        )}
        {imp.status === 'uploading' && (
          <div className="upload-progress">
            <span
              className="meter"
              role="progressbar"
              aria-label={`Upload of ${imp.name}`}
              aria-valuemin={0}
              aria-valuemax={100}
              aria-valuenow={Math.floor(share * 100)}
            >
              <span style={{ width: `${(share * 100).toFixed(1)}%` }} />
            </span>
            <span className="num" data-testid="upload-progress-text">
              {imp.total === undefined
                ? 'starting…'
                : sending
                  ? `${formatBytes(imp.sent ?? 0)} of ${formatBytes(imp.total)} sent (${Math.floor(share * 100)} %)`
                  : 'sent; kvdesk checks it…'}
            </span>
            {sending && (
              <button type="button" className="small" data-testid="upload-cancel" onClick={() => bridge.cancelImport()}>
                Cancel
              </button>
            )}
          </div>
        )}
      </div>
    );
  }
  if (imp.status === 'error' && imp.error) {
    return (
      <div
        className="card error"
        role="alert"
        data-testid="model-error"
        data-code={imp.error.code}
        data-root={imp.path ?? imp.spec?.root}
      >
        <div className="top">
          <h3>{imp.name}</h3>
          <span className="badge bad">{imp.error.code}</span>
        </div>
        <div className="msg" data-testid="model-error-message">
          {imp.error.message}
        </div>
        {(imp.error.file || imp.error.field) && (
          <div className="where">
            {/* "." is the package folder itself (no file of it was recognised): named as the folder. */}
            {imp.error.file === '.' ? (
              <span>
                folder{' '}
                <b className="mono" data-testid="model-error-folder">
                  {imp.path ?? imp.name}
                </b>
              </span>
            ) : (
              imp.error.file && (
                <span>
                  file{' '}
                  <b className="mono" data-testid="model-error-file">
                    {imp.error.file}
                  </b>
                </span>
              )
            )}
            {imp.error.field && (
              <span>
                field{' '}
                <b className="mono" data-testid="model-error-field">
                  {imp.error.field}
                </b>
              </span>
            )}
          </div>
        )}
        <div className="buttons">
          {imp.path && !imp.trusted && imp.error.file === 'manifest.json' && imp.error.field === 'layout' && (
            <button
              type="button"
              data-testid="model-error-trust"
              title="Its manifest may name files anywhere on this computer: trust it only if you know where it comes from"
              onClick={() => void bridge.importPath(imp.name, imp.path as string, true)}
            >
              Trust this package
            </button>
          )}
          <button type="button" data-testid="model-error-dismiss" onClick={() => setPackageImport(null)}>
            Dismiss
          </button>
        </div>
      </div>
    );
  }
  if (!imp.spec) return null;
  const loadedModel = models.find((m) => m.id === imp.modelId || m.spec.root === imp.spec?.root);
  const path = imp.path ?? imp.spec.root;
  return (
    <ModelCard
      spec={loadedModel?.spec ?? imp.spec}
      loaded={loadedModel !== undefined}
      backend={loadedModel?.backend}
      active={loadedModel?.id === activeModelId}
      busy={busyModels.includes(path) || (loadedModel !== undefined && busyModels.includes(loadedModel.id))}
      reloading={loadedModel?.reloading}
      // Chosen to be used: once loaded, new replies go to it.
      onLoad={(how) => bridge.loadAndUse(path, imp.trusted ? { ...how, trustInstalled: true } : how)}
      onUnload={loadedModel ? () => bridge.unloadModel(loadedModel.id) : undefined}
      onUse={loadedModel ? () => bridge.setActiveModel(loadedModel.id) : undefined}
      onClose={() => setPackageImport(null)}
      note={
        imp.existing
          ? 'These very files are in your library already: this is the copy kvdesk kept of them (no second one was made).'
          : imp.nameTaken
            ? `Kept in your library as ${imp.spec.id}: a package named ${imp.name} with other files is there already.`
            : imp.uploaded
              ? 'Kept in your library (kvdesk’s own copy of the folder, until you delete it there).'
              : undefined
      }
    />
  );
}

export function ModelsView() {
  const bridge = useBridge();
  const { models, busyModels, activeModelId, importedRoot } = useApp(
    useShallow((s) => ({
      models: s.models,
      busyModels: s.busyModels,
      activeModelId: s.activeModelId,
      importedRoot: s.packageImport?.spec?.root,
    })),
  );
  const setPackageImport = useApp((s) => s.setPackageImport);
  const choosing = useApp((s) => s.packageImport !== null);
  const inputRef = useRef<HTMLInputElement>(null);
  const [readError, setReadError] = useState<string | null>(null);

  const onChoose = async (files: FileList | null) => {
    setReadError(null);
    if (!files) return;
    if (files.length === 0) {
      // An empty folder chosen (a cancelled dialog changes nothing, so sends no change): refused as a dropped
      // empty folder is (PACKAGES.md), never ignored. It has no file to name it by.
      setPackageImport({
        name: 'The chosen folder',
        status: 'error',
        error: { code: 'PACKAGE_INVALID', message: 'The folder is empty.' },
      });
      return;
    }
    const list = Array.from(files);
    const path = list[0] ? bridge.pathForFile(list[0]) : undefined;
    try {
      if (path) {
        // Electron: the host reads the folder itself; the first file's folder is the package.
        const rel = list[0]?.webkitRelativePath ?? '';
        const depth = rel.split('/').length - 1;
        const root = path
          .split(/[\\/]/)
          .slice(0, -depth || undefined)
          .join('/');
        await bridge.importPath(rel.split('/')[0] ?? 'package', root);
      } else {
        const pkg = await fromFileList(list);
        await bridge.importFiles(pkg.name, pkg.files);
      }
    } catch (err) {
      setReadError(err instanceof Error ? err.message : String(err));
    } finally {
      if (inputRef.current) inputRef.current.value = '';
    }
  };

  return (
    <main className="models" aria-label="Models" data-testid="models-view" tabIndex={-1} data-focus-home="self">
      <div className="models-inner">
        {/* The view's outline for a screen reader's headings list: Models, then its sections (Loaded, Library…). */}
        <h1 className="sr-only">Models</h1>
        <div className="drop-zone" data-testid="model-drop-zone">
          <strong>Drop a model package folder</strong> anywhere on this window, or{' '}
          <button
            type="button"
            data-testid="model-choose"
            onClick={() => {
              const choose = bridge.chooseFolder;
              if (!choose) {
                inputRef.current?.click();
                return;
              }
              // Electron: the OS dialog gives a path and the host reads the folder in place.
              void choose().then((dir) => {
                if (dir) void bridge.importPath(dir.split(/[\\/]/).filter(Boolean).pop() ?? 'package', dir);
              });
            }}
          >
            choose a folder…
          </button>
          <input
            ref={inputRef}
            type="file"
            className="sr-only"
            // The "choose a folder…" button is its keyboard way: the input itself is no Tab stop.
            tabIndex={-1}
            aria-hidden="true"
            data-testid="model-file-input"
            // webkitdirectory is not in React's typings; set as a plain attribute.
            {...{ webkitdirectory: '', directory: '' }}
            multiple
            onChange={(e) => void onChoose(e.target.files)}
          />
          <div className="muted" style={{ marginTop: 6 }} data-testid="model-layouts">
            onnx-genai (inference_metadata.yaml), onnxruntime-genai (genai_config.json), Hugging Face Optimum
            (config.json + onnx/) or ORT model package (manifest.json) layouts. kvdesk validates the graph and computes
            its KV bytes per token before anything is loaded. No package at hand? Download one from Hugging Face below.
          </div>
          {readError && (
            <div className="refusal failed" data-testid="model-read-error">
              {readError}
            </div>
          )}
        </div>
        {choosing && (
          <section aria-labelledby="models-chosen">
            <h2 className="sr-only" id="models-chosen">
              Chosen package
            </h2>
            <ImportResult />
          </section>
        )}
        <HubDownload />
        <ApiServerPanel />
        {/* The focus comes here when a model unloaded has no card left (focusWhenDone). */}
        <h2 className="section-title" id={LOADED_HEADING_ID} tabIndex={-1}>
          Loaded
        </h2>
        {/* One loaded from the card above is listed there, not twice. */}
        {models.length === 0 ? (
          <div className="muted">No model is loaded.</div>
        ) : (
          models.every((m) => m.spec.root === importedRoot) && (
            <div className="muted" data-testid="loaded-shown-above">
              <bdi>{models[0]?.spec.displayName}</bdi> is loaded: its card is above.
            </div>
          )
        )}
        {models
          .filter((m) => m.spec.root !== importedRoot)
          .map((m) => (
            <ModelCard
              key={m.id}
              testId="loaded-model-card"
              spec={m.spec}
              loaded
              backend={m.backend}
              isDefault={m.isDefault}
              firstUse={m.firstUse}
              active={m.id === activeModelId}
              busy={busyModels.includes(m.id)}
              reloading={m.reloading}
              onLoad={(how) => bridge.loadPackage(m.spec.root, how)}
              onUnload={() => bridge.unloadModel(m.id)}
              onUse={() => bridge.setActiveModel(m.id)}
            />
          ))}
        <LibraryList shownRoot={importedRoot} />
      </div>
    </main>
  );
}
