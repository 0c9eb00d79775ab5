/**
 * Download from the Hugging Face Hub, in the Models view (as LM Studio's and Ollama's model pulls): a repository
 * (owner/name), the ONNX packages it offers with their sizes (the one that runs best on a CPU picked), Download;
 * each download's progress with Cancel; a finished one is in the library below, one click from Load.
 */
import { useState } from 'react';
import type { DownloadStatus, HubVariantsInfo } from '../../shared/api';
import { useApp, useBridge } from '../bridge/context';
import { formatBytes } from '../lib/format';

function DownloadRow({ d }: { d: DownloadStatus }) {
  const bridge = useBridge();
  const pct = d.totalBytes > 0 ? Math.min(100, (d.doneBytes / d.totalBytes) * 100) : 0;
  return (
    <li className="download" data-testid="download" data-state={d.state} data-repo={d.repo} data-variant={d.variant}>
      <div className="row">
        <span className="mono">
          {d.repo}
          {d.revision !== 'main' ? `@${d.revision}` : ''} <span className="muted">({d.variant})</span>
        </span>
        <span className="num muted" data-testid="download-bytes">
          {formatBytes(d.doneBytes)} / {formatBytes(d.totalBytes)}
        </span>
        {d.state === 'running' ? (
          <button
            type="button"
            className="small"
            data-testid="download-cancel"
            onClick={() => bridge.cancelDownload(d.id)}
          >
            Cancel
          </button>
        ) : (
          <span className={`badge ${d.state === 'done' ? 'ok' : d.state === 'failed' ? 'bad' : ''}`}>
            {d.state === 'done' ? `in the library as ${d.libraryId ?? d.root}` : d.state}
          </span>
        )}
      </div>
      {d.state === 'running' && (
        <div
          className="progress"
          role="progressbar"
          aria-valuenow={Math.round(pct)}
          aria-valuemin={0}
          aria-valuemax={100}
        >
          <div style={{ width: `${pct}%` }} />
        </div>
      )}
      {d.error && (
        <div className="note" data-testid="download-error">
          {d.error.message}
        </div>
      )}
      {d.state === 'cancelled' && (
        <div className="muted small-text">What arrived is kept: downloading it again resumes there.</div>
      )}
    </li>
  );
}

export function HubDownload() {
  const bridge = useBridge();
  const downloads = useApp((s) => s.downloads);
  const [repo, setRepo] = useState('');
  const [listing, setListing] = useState<HubVariantsInfo | null>(null);
  const [variant, setVariant] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const lookUp = async () => {
    setBusy(true);
    setError(null);
    setListing(null);
    const r = await bridge.hubVariants(repo.trim());
    setBusy(false);
    if (!r.ok) {
      setError(r.error.message);
      return;
    }
    setListing(r.value);
    setVariant(r.value.recommended);
  };
  const download = async () => {
    if (!listing) return;
    setBusy(true);
    setError(null);
    // The revision looked up (a branch other than main goes with the name).
    const spec = listing.revision === 'main' ? listing.repo : `${listing.repo}@${listing.revision}`;
    const why = await bridge.downloadModel(spec, variant);
    setBusy(false);
    if (why) setError(why);
    else setListing(null);
  };

  return (
    <div className="card hub-download" data-testid="hub-download">
      <div className="top">
        <h3>Download from Hugging Face</h3>
      </div>
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          if (repo.trim()) void lookUp();
        }}
      >
        <input
          type="text"
          data-testid="hub-repo"
          placeholder="owner/name, e.g. onnx-community/Qwen3-0.6B-ONNX"
          value={repo}
          onChange={(e) => {
            setRepo(e.target.value);
            // What was looked up is another repository's now.
            setListing(null);
            setError(null);
          }}
        />
        <button type="submit" data-testid="hub-lookup" disabled={busy || !repo.trim()}>
          Look up
        </button>
      </form>
      {error && (
        <div className="note" data-testid="hub-error" role="alert">
          {error}
        </div>
      )}
      {listing && (
        <div className="row" data-testid="hub-variants">
          <select data-testid="hub-variant" value={variant} onChange={(e) => setVariant(e.target.value)}>
            {listing.variants.map((v) => (
              <option key={v.name} value={v.name}>
                {v.name} — {formatBytes(v.bytes)}
                {v.name === listing.recommended ? ' (best on a CPU)' : ''}
              </option>
            ))}
          </select>
          <button type="button" className="primary" data-testid="hub-download-start" disabled={busy} onClick={download}>
            Download
          </button>
        </div>
      )}
      {downloads.length > 0 && (
        <ul className="downloads" data-testid="downloads">
          {downloads.map((d) => (
            <DownloadRow key={d.id} d={d} />
          ))}
        </ul>
      )}
      <div className="muted small-text">
        ONNX exports only (onnx-community/…, Microsoft's -onnx repositories). Gated models need a token: start kvdesk
        with HF_TOKEN set.
      </div>
    </div>
  );
}
