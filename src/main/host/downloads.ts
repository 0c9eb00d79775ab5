/**
 * The host's model downloads from the Hugging Face Hub (src/main/host/hub-download.ts): each runs in the
 * background into the data directory's models folder, its progress goes out as the `downloads` event (at most
 * a few times a second while bytes arrive), and a finished one joins the library. One download per repository
 * and variant at a time: a second API pull of it follows the running one (as Ollama's does); a cancelled or failed
 * one leaves its staging folder, which the next download of it resumes.
 */
import { randomUUID } from 'node:crypto';
import type { DownloadStatus, HubSearchHit, HubVariantsInfo } from '../../shared/api';
import { KvdeskError, toErrorInfo } from '../../shared/errors';
import {
  type DownloadProgress,
  downloadedAlready,
  downloadHubModel,
  type HubOptions,
  listHubVariants,
  planDownload,
} from './hub-download';
import { searchHub } from './hub-search';
import { canonicalPath, type ModelLibrary } from './model-library';
import { RateMeter } from './rate-meter';

/** How often progress goes out while bytes arrive. */
const PROGRESS_MS = 250;
/** Ended downloads kept in the list (the newest). */
const KEEP_ENDED = 20;

/** Who follows a running download. */
interface Followers {
  /** Progress listeners: the one that started it, then those of the pulls that followed it. */
  listeners: Set<(p: DownloadProgress) => void>;
  /** Pulls (API clients) waiting on it; null when the window started it (no client's going stops it). */
  pulls: number | null;
  /** Settles with its status when it ends. */
  ended: Promise<DownloadStatus>;
}

export class Downloads {
  private readonly all: DownloadStatus[] = [];
  private readonly aborts = new Map<string, AbortController>();
  private readonly running = new Set<Promise<unknown>>();
  private readonly followers = new Map<string, Followers>();
  private closed = false;
  private lastSent = 0;
  private pending: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly modelsDir: string,
    private readonly library: ModelLibrary,
    private readonly emit: (list: DownloadStatus[]) => void,
    private readonly hub: HubOptions = {},
    /** Where a completed download says what it cleared (its stopped downloads at other revisions). */
    private readonly log?: (line: string) => void,
  ) {}

  list(): DownloadStatus[] {
    return this.all.map((d) => ({ ...d }));
  }

  /** Repositories on the hub with ONNX language models whose name matches `query`. */
  search(query: string, limit?: number): Promise<HubSearchHit[]> {
    return searchHub(query, { ...this.hub, ...(limit !== undefined ? { limit } : {}) });
  }

  /** A repository's packages (for the picker), without downloading anything. */
  async variants(repo: string): Promise<HubVariantsInfo> {
    const l = await listHubVariants(repo, this.hub);
    return {
      repo: l.repo,
      revision: l.revision,
      recommended: l.recommended,
      variants: l.variants.map((v) => ({ name: v.name, layout: v.layout, bytes: v.bytes, files: v.files.length })),
    };
  }

  /**
   * Starts a download (`spec`: owner/name[@revision]); the status comes back at once, and `done` settles when it
   * ends (also on failure, with the status saying why). Refused at once: a bad name, a repository or variant the
   * hub does not have, one downloaded already (`detail.present`, `detail.root`) or downloading now — but for an
   * API pull (`pull`), which follows the running download instead (`followed`: its progress, then its end), as
   * Ollama's second pull of a model does. One being cancelled is waited for, then downloaded afresh. A pull's client
   * that goes away calls `leave`.
   */
  async start(
    spec: string,
    variant?: string,
    onProgress?: (p: DownloadProgress) => void,
    how: { pull?: boolean } = {},
  ): Promise<{ status: DownloadStatus; done: Promise<DownloadStatus>; followed?: true }> {
    if (this.closed) throw new KvdeskError('CANCELLED', 'kvdesk is shutting down: download it after the restart.');
    const listing = await listHubVariants(spec, this.hub);
    let plan = await planDownload(listing, this.modelsDir, variant);
    const name = plan.variant.name;
    const runningNow = () =>
      this.all.find((d) => d.state === 'running' && d.repo === listing.repo && d.variant === name);
    // One being cancelled is not followed to its "cancelled": a fresh download, once it has let go of its
    // staging folder (which the fresh one resumes).
    for (let d = runningNow(); d && this.aborts.get(d.id)?.signal.aborted; d = runningNow()) {
      await this.followers.get(d.id)?.ended;
      plan = await planDownload(listing, this.modelsDir, variant);
    }
    if (this.closed) throw new KvdeskError('CANCELLED', 'kvdesk is shutting down: download it after the restart.');
    if (plan.present) throw downloadedAlready(plan);
    const running = runningNow();
    if (running) {
      const following = how.pull ? this.followers.get(running.id) : undefined;
      if (!following) {
        throw new KvdeskError('BAD_REQUEST', `${listing.repo} (${name}) is downloading already.`, { field: 'repo' });
      }
      if (onProgress) following.listeners.add(onProgress);
      if (following.pulls !== null) following.pulls++;
      return { status: { ...running }, done: following.ended, followed: true };
    }
    const status: DownloadStatus = {
      id: randomUUID(),
      repo: listing.repo,
      revision: listing.revision,
      variant: name,
      state: 'running',
      doneBytes: 0,
      totalBytes: plan.variant.bytes,
      startedAt: Date.now(),
    };
    const abort = new AbortController();
    const meter = new RateMeter();
    const measure = () => {
      // Every byte in: the package is being checked, which is no transfer speed.
      if (status.totalBytes > 0 && status.doneBytes >= status.totalBytes) {
        delete status.bytesPerSecond;
        return;
      }
      meter.add(status.doneBytes, Date.now());
      const rate = meter.rate();
      if (rate !== undefined) status.bytesPerSecond = Math.round(rate);
    };
    // Measured every second too, so a transfer that stalls shows it (no progress comes then) — from the first
    // progress on: before it, the files of an earlier try are being checked.
    let ticker: NodeJS.Timeout | undefined;
    const tick = () => {
      if (this.closed || status.state !== 'running') return;
      measure();
      this.changed(false);
    };
    const listeners = new Set(onProgress ? [onProgress] : []);
    this.all.unshift(status);
    this.aborts.set(status.id, abort);
    this.changed(true);
    const first = downloadHubModel(listing.repo, this.modelsDir, {
      ...this.hub,
      plan,
      signal: abort.signal,
      ...(this.log ? { log: this.log } : {}),
      onProgress: (p) => {
        status.doneBytes = p.doneBytes;
        status.totalBytes = p.totalBytes;
        measure();
        if (!ticker) {
          ticker = setInterval(tick, 1000);
          ticker.unref();
        }
        for (const listener of listeners) listener(p);
        this.changed(false);
      },
    });
    const done = first
      .then(
        async ({ root }) => {
          status.root = root;
          if (!this.closed) {
            await this.library.refresh();
            const at = await canonicalPath(root);
            const id = this.library.list().find((e) => e.root === at)?.id;
            if (id) status.libraryId = id;
          }
          status.state = 'done';
          delete status.bytesPerSecond;
        },
        (err) => {
          delete status.bytesPerSecond;
          const info = toErrorInfo(err);
          status.state = abort.signal.aborted ? 'cancelled' : 'failed';
          if (status.state === 'failed') status.error = { code: info.code, message: info.message };
        },
      )
      .catch((err: unknown) => {
        // The package arrived, but the library could not take it in: said, not left running.
        status.state = 'failed';
        delete status.bytesPerSecond;
        status.error = { code: 'INTERNAL', message: `the download finished, but ${toErrorInfo(err).message}` };
      })
      .finally(() => clearInterval(ticker));
    const ended = done.then(() => {
      this.aborts.delete(status.id);
      this.followers.delete(status.id);
      this.trim();
      if (!this.closed) this.changed(true);
      return { ...status };
    });
    this.followers.set(status.id, { listeners, pulls: how.pull ? 1 : null, ended });
    this.running.add(ended);
    void ended.finally(() => this.running.delete(ended));
    return { status: { ...status }, done: ended };
  }

  /** Stops a running download; false when there is none, or every byte has arrived (it is being checked). */
  cancel(id: string): boolean {
    const abort = this.aborts.get(id);
    const status = this.all.find((d) => d.id === id);
    if (!abort || !status || (status.totalBytes > 0 && status.doneBytes >= status.totalBytes)) return false;
    abort.abort();
    return true;
  }

  /**
   * A pull's client went away (`onProgress` as it gave it to `start`): it no longer hears of the download, which
   * stops once no pull follows it (as Ollama's pull stops when its last client goes), unless the window started
   * it. True when that stopped it.
   */
  leave(id: string, onProgress?: (p: DownloadProgress) => void): boolean {
    const following = this.followers.get(id);
    if (!following) return false;
    if (onProgress) following.listeners.delete(onProgress);
    if (following.pulls === null) return false;
    following.pulls--;
    return following.pulls === 0 && this.cancel(id);
  }

  /** Stops every download and waits for them to end (shutdown); their staging folders stay for a later resume. */
  async close(): Promise<void> {
    this.closed = true;
    for (const a of this.aborts.values()) a.abort();
    await Promise.allSettled([...this.running]);
    if (this.pending) clearTimeout(this.pending);
  }

  private trim(): void {
    const ended = this.all.filter((d) => d.state !== 'running');
    for (const d of ended.slice(KEEP_ENDED)) this.all.splice(this.all.indexOf(d), 1);
  }

  /** Sends the list: now for a change of state, else at most every PROGRESS_MS. */
  private changed(now: boolean): void {
    const wait = PROGRESS_MS - (Date.now() - this.lastSent);
    if (now || wait <= 0) {
      if (this.pending) clearTimeout(this.pending);
      this.pending = null;
      this.lastSent = Date.now();
      this.emit(this.list());
    } else if (!this.pending) {
      this.pending = setTimeout(() => {
        this.pending = null;
        this.lastSent = Date.now();
        this.emit(this.list());
      }, wait);
      this.pending.unref?.();
    }
  }
}
