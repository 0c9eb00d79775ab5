/**
 * The library: packages loaded before (remembered across restarts by the host), one compact row each, with
 * Load and Forget. A package whose folder is gone, or whose files no longer validate, says so and what to do.
 */
import { useEffect, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { LibraryEntry } from '../../shared/api';
import { useApp, useBridge } from '../bridge/context';
import { fitClass, fitLabel, modelFit } from '../lib/fit';
import { formatInteger } from '../lib/format';
import { lastLoaded, unloadedEntries } from '../lib/library';
import { focusWhenDone } from '../lib/model-focus';
import { Bytes } from './Bytes';

function Row({ entry, busy }: { entry: LibraryEntry; busy: boolean }) {
  const bridge = useBridge();
  const snapshot = useApp((s) => s.snapshot);
  // Deleting an upload's files takes a second click.
  const [confirming, setConfirming] = useState(false);
  // The focus follows the question: to Keep (the safe answer) when it is asked, back to Delete when kept; the
  // button that had it is gone each time.
  const forgetButton = useRef<HTMLButtonElement>(null);
  const keepButton = useRef<HTMLButtonElement>(null);
  const asked = useRef(false);
  useEffect(() => {
    if (confirming) {
      asked.current = true;
      keepButton.current?.focus();
    } else if (asked.current) {
      asked.current = false;
      if (document.activeElement === document.body || document.activeElement === null) forgetButton.current?.focus();
    }
  }, [confirming]);
  const spec = entry.spec;
  const fit = spec ? modelFit(spec, false, snapshot?.devices ?? []).fit : null;
  const broken = entry.error !== undefined;
  const forgetLabel = entry.uploaded ? 'Delete' : 'Forget';
  return (
    <div
      className={`card library-row${broken ? ' error' : ''}`}
      data-testid="library-row"
      data-root={entry.root}
      data-model-id={entry.id}
      data-state={entry.missing ? 'missing' : broken ? 'invalid' : spec ? 'ok' : 'checking'}
    >
      <div className="top">
        <h3 dir="auto" title={spec?.displayName ?? entry.id}>
          {spec?.displayName ?? entry.id}
        </h3>
        {entry.uploaded && !entry.source && (
          <span className="badge" title="kvdesk's copy of a folder dropped in the browser">
            uploaded
          </span>
        )}
        {entry.source && (
          <span
            className="badge"
            data-testid="library-source"
            title={`Downloaded from the Hugging Face Hub: ${entry.source.repo} at ${entry.source.revision}${entry.source.commit ? ` (commit ${entry.source.commit.slice(0, 12)})` : ''}, variant ${entry.source.variant}`}
          >
            hf.co/{entry.source.repo} · {entry.source.variant}
          </span>
        )}
        {entry.load && (
          <span
            className="badge"
            data-testid="library-pick"
            title="How you last loaded it: it loads the same way (pick again on its card once loaded)"
          >
            loads as{' '}
            {[
              entry.load.variant,
              entry.load.backend === undefined ? undefined : `on ${entry.load.backend}`,
              entry.load.trustInstalled ? 'trusted' : undefined,
            ]
              .filter(Boolean)
              .join(' · ')}
          </span>
        )}
        {fit && (
          <span className={`badge ${fitClass(fit)}`} data-testid="library-fit" title={fit.explanation}>
            {fitLabel(fit.level)}
          </span>
        )}
        {entry.missing && <span className="badge bad">folder missing</span>}
        {!entry.missing && broken && <span className="badge bad">{entry.error?.code}</span>}
        {!spec && !broken && <span className="badge">checking…</span>}
      </div>
      {spec && (
        <div className="library-facts muted">
          <span>
            {spec.layout}
            {spec.modelType ? ` · ${spec.modelType}` : ''}
          </span>
          <span>
            weights <Bytes value={spec.weightsBytes} />
          </span>
          <span>{formatInteger(spec.bpt)} B/token</span>
          <span>{formatInteger(spec.contextLength)} tok context</span>
          <span data-testid="library-when">
            {entry.neverLoaded
              ? `added ${lastLoaded(entry.addedAt, Date.now())}, not loaded yet`
              : `last loaded ${lastLoaded(entry.lastLoadedAt, Date.now())}`}
          </span>
        </div>
      )}
      {broken && entry.error && (
        <div className="msg" data-testid="library-error">
          {entry.error.message}
          {entry.error.file && (
            <>
              {' '}
              (file <b className="mono">{entry.error.file}</b>
              {entry.error.field && (
                <>
                  , field <b className="mono">{entry.error.field}</b>
                </>
              )}
              )
            </>
          )}
        </div>
      )}
      <div className="path" title={entry.root}>
        {entry.root}
      </div>
      <div className="buttons">
        {spec && (
          <button
            type="button"
            className="primary"
            data-testid="library-load"
            disabled={busy || confirming}
            // Loaded, the focus goes to its Unload among the loaded models (this row goes).
            onClick={(e) => void focusWhenDone(bridge.loadPackage(entry.root), e.currentTarget, entry.root)}
          >
            {busy ? 'Loading…' : 'Load'}
          </button>
        )}
        {!confirming && (
          <button
            type="button"
            data-testid="library-forget"
            ref={forgetButton}
            disabled={busy}
            title={
              entry.uploaded
                ? 'Deletes kvdesk’s copy of this uploaded package'
                : 'Removes it from this list; the folder stays where it is'
            }
            onClick={() => {
              if (entry.uploaded) setConfirming(true);
              else void bridge.forgetPackage(entry.root);
            }}
          >
            {forgetLabel}
          </button>
        )}
        {confirming && (
          <>
            <span className="muted">Delete the uploaded files?</span>
            <button
              type="button"
              className="danger"
              data-testid="library-delete-confirm"
              onClick={() => {
                setConfirming(false);
                void bridge.forgetPackage(entry.root);
              }}
            >
              Delete
            </button>
            <button
              type="button"
              ref={keepButton}
              data-testid="library-delete-keep"
              onClick={() => setConfirming(false)}
              onKeyDown={(e) => {
                if (e.key !== 'Escape') return;
                // The question's answer, not a stop of the reply streaming (App's Esc).
                e.preventDefault();
                setConfirming(false);
              }}
            >
              Keep
            </button>
          </>
        )}
      </div>
    </div>
  );
}

export function LibraryList({ shownRoot }: { shownRoot: string | undefined }) {
  const { library, models, busyModels } = useApp(
    useShallow((s) => ({ library: s.library, models: s.models, busyModels: s.busyModels })),
  );
  const entries = unloadedEntries(library, models, shownRoot);
  if (entries.length === 0) return null;
  return (
    <>
      <h2 className="section-title">Library</h2>
      <div className="library" data-testid="library">
        {entries.map((e) => (
          <Row key={e.root} entry={e} busy={busyModels.includes(e.root)} />
        ))}
      </div>
    </>
  );
}
