/**
 * Download from the Hugging Face Hub, in the Models view (as LM Studio's and Ollama's model pulls): a word of a
 * model's name searches the hub for repositories with ONNX language models (most downloaded first), a repository
 * (owner/name, or a hit picked) is looked up: the ONNX packages it offers with their sizes (the one that runs best
 * on a CPU picked), Download; each download's progress with Cancel; a finished one is in the library below, one
 * click from Load. A repository with no ONNX model (or none of that name) is followed by a search for its name.
 */
import { useRef, useState } from 'react';
import type { DownloadStatus, HubSearchHit, HubVariantsInfo } from '../../shared/api';
import { formatDuration } from '../../shared/duration';
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
        {d.state === 'running' && d.bytesPerSecond !== undefined && (
          <span className="num muted" data-testid="download-rate">
            · {formatBytes(d.bytesPerSecond)}/s
            {d.bytesPerSecond > 0
              ? ` · about ${formatDuration(((d.totalBytes - d.doneBytes) / d.bytesPerSecond) * 1000)} left`
              : ' · stalled'}
          </span>
        )}
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

const compact = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });

/** owner/name[@revision] (or the hub's address of one): looked up, not searched. */
const REPO_LIKE = /^((https?:\/\/)?(www\.)?(hf\.co|huggingface\.co)\/)?[\w.-]+\/[\w.-]+(@\S+)?$/;

function HitList({ hits, onPick }: { hits: HubSearchHit[]; onPick: (repo: string) => void }) {
  return (
    <ul className="hub-hits" data-testid="hub-hits">
      {hits.map((h) => (
        <li key={h.repo}>
          <button
            type="button"
            className="hub-hit"
            data-testid="hub-hit"
            data-repo={h.repo}
            onClick={() => onPick(h.repo)}
          >
            <span className="mono">{h.repo}</span>
            <span className="muted num" title={`${h.downloads.toLocaleString()} downloads, ${h.likes} likes`}>
              ↓ {compact.format(h.downloads)} · ♥ {compact.format(h.likes)}
              {h.updatedAt ? ` · ${h.updatedAt.slice(0, 10)}` : ''}
            </span>
            {h.gated && (
              <span
                className="badge warn"
                title="Accept its terms on huggingface.co, and start kvdesk with HF_TOKEN set"
              >
                gated
              </span>
            )}
          </button>
        </li>
      ))}
    </ul>
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
  /** A search's hits, and what was searched (a repository that failed to look up: its name). */
  const [hits, setHits] = useState<{ query: string; list: HubSearchHit[]; after?: string } | null>(null);
  /** The latest question asked (a look-up or a search); an answer to an older one, or to text since changed, is dropped. */
  const asked = useRef(0);

  /** A new question: older answers dropped, the card cleared for this one's; its number. */
  const begin = () => {
    setBusy(true);
    setError(null);
    setListing(null);
    setHits(null);
    return ++asked.current;
  };
  const search = async (query: string, after?: string) => {
    const mine = asked.current;
    const r = await bridge.searchHub(query);
    if (mine !== asked.current) return;
    if (!r.ok) {
      if (!after) setError(r.error.message);
      return;
    }
    // After a failed look-up, only hits are worth showing.
    if (!after || r.value.length > 0) setHits({ query, list: r.value, ...(after ? { after } : {}) });
  };
  const lookUp = async (name: string) => {
    const mine = begin();
    const r = await bridge.hubVariants(name);
    if (mine !== asked.current) return;
    if (!r.ok) {
      setError(r.error.message);
      // No such repository, or nothing kvdesk runs in it: ONNX exports of that name, if the hub has any.
      const base = name.replace(/@.*$/, '').split('/').pop() ?? '';
      if (r.error.code === 'BAD_REQUEST' && r.error.detail?.field === 'repo' && base) await search(base, name);
      setBusy(false);
      return;
    }
    setBusy(false);
    setListing(r.value);
    setVariant(r.value.recommended);
  };
  const submit = async () => {
    const text = repo.trim();
    if (REPO_LIKE.test(text)) return lookUp(text);
    begin();
    await search(text);
    setBusy(false);
  };
  const pick = (name: string) => {
    setRepo(name);
    void lookUp(name);
  };
  const searching = repo.trim() !== '' && !REPO_LIKE.test(repo.trim());
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
        <h2>Download from Hugging Face</h2>
      </div>
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          if (repo.trim()) void submit();
        }}
      >
        <input
          type="text"
          data-testid="hub-repo"
          placeholder="search (qwen3, phi, smollm…) or owner/name"
          value={repo}
          onChange={(e) => {
            setRepo(e.target.value);
            // What was looked up is another repository's now (an answer on its way is dropped).
            asked.current++;
            setBusy(false);
            setListing(null);
            setError(null);
            setHits(null);
          }}
        />
        <button type="submit" data-testid="hub-lookup" disabled={busy || !repo.trim()}>
          {searching ? 'Search' : 'Look up'}
        </button>
      </form>
      {error && (
        <div className="note" data-testid="hub-error" role="alert">
          {error}
        </div>
      )}
      {hits && (
        <div data-testid="hub-search">
          <div className="muted small-text" data-testid="hub-search-note">
            {hits.list.length === 0
              ? `No ONNX language model on the hub matches "${hits.query}": try a shorter word (qwen, phi, smollm…).`
              : hits.after
                ? `ONNX models on the hub named like ${hits.query}: pick one to see what it offers.`
                : `${hits.list.length} ONNX language model${hits.list.length === 1 ? '' : 's'} matching "${hits.query}", most downloaded first: pick one to see what it offers.`}
          </div>
          <HitList hits={hits.list} onPick={pick} />
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
