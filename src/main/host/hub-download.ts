/**
 * Model packages from the Hugging Face Hub (or a mirror of its API: `HF_ENDPOINT`), as `ollama pull` gets
 * models: a repository's files are listed, its ONNX variants found (transformers.js / Optimum exports:
 * `onnx/model_q4.onnx` and siblings; onnxruntime-genai exports: folders with `genai_config.json`; onnx-genai
 * folders), and one variant's files downloaded into the data directory's models folder, where the library finds
 * it. Each file is checked against the hub's listing (its size, and its SHA-256 for large files or its git blob
 * hash for small ones) before it counts; a download cut off resumes where it stopped (HTTP ranges); nothing
 * reaches the models folder until every file is there and the package validates.
 */
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, statfs, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { KvdeskError } from '../../shared/errors';
import { formatBytes } from '../../shared/format';
import { cpuVariantRank } from '../../shared/model-spec';
import { loadModelSpec } from '../packages';
import { packageProblem } from '../packages/package-error';
import { describeHolder, takeLock } from './folder-lock';
import { proxyFetch } from './proxy-fetch';
import { sweepStaging } from './staging-sweep';

/** Where the hub answers and who asks (a token for gated or private repositories). */
export interface HubOptions {
  /** Default `HF_ENDPOINT`, else https://huggingface.co. */
  endpoint?: string;
  /** Default `HF_TOKEN`. */
  token?: string;
  revision?: string;
  fetch?: typeof fetch;
  /**
   * How long the hub may take to answer a request (its headers), and a download may go without a byte, before it
   * fails. Default `KVDESK_HUB_TIMEOUT_MS`, else 30 s.
   */
  timeoutMs?: number;
}

/** A file of a repository, as the hub lists it. */
export interface HubFile {
  path: string;
  size: number;
  /** SHA-256 of a large (LFS) file. */
  sha256?: string;
  /** The git blob hash of a small file. */
  blob?: string;
}

/** One package a repository offers: its files and where each goes in the package folder. */
export interface HubVariant {
  /** `q4`, `fp16`, `fp32` (model.onnx)… for exports with onnx/model_<name>.onnx; the folder for genai exports. */
  name: string;
  layout: 'hf-optimum' | 'ort-genai' | 'onnx-genai';
  files: Array<HubFile & { to: string }>;
  bytes: number;
}

export interface HubListing {
  repo: string;
  revision: string;
  /** The commit `revision` was at when listed: every file is fetched from it, whatever the branch does meanwhile. */
  commit: string;
  variants: HubVariant[];
  /** The variant kvdesk takes when none is named: the one that runs best on a CPU. */
  recommended: string;
}

/** A download's progress, after each piece written. */
export interface DownloadProgress {
  repo: string;
  variant: string;
  file: string;
  doneBytes: number;
  totalBytes: number;
}

const REPO = /^[A-Za-z0-9][\w.-]{0,95}\/[A-Za-z0-9][\w.-]{0,95}$/;
const REVISION = /^[\w.\-/]{1,200}$/;

/** A repository named as its page's address is (`https://huggingface.co/owner/name`, `hf.co/owner/name`): `owner/name`. */
export function stripHubPrefix(name: string): string {
  return name.replace(/^(https?:\/\/)?(www\.)?(hf\.co|huggingface\.co)\//, '');
}

/** A repository id and revision as `owner/name[@revision]`, checked. */
export function parseRepo(spec: string, revision?: string): { repo: string; revision: string } {
  const bare = stripHubPrefix(spec);
  const at = bare.indexOf('@');
  const repo = at < 0 ? bare : bare.slice(0, at);
  const named = at < 0 ? undefined : bare.slice(at + 1);
  if (revision !== undefined && named !== undefined && revision !== named) {
    throw new KvdeskError('BAD_REQUEST', `"${spec}" names revision ${named}, and the request ${revision}: give one.`, {
      field: 'revision',
    });
  }
  const rev = revision ?? named ?? 'main';
  if (!REPO.test(repo) || repo.includes('..')) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `"${spec}" is not a Hugging Face repository: write it as owner/name, e.g. onnx-community/Qwen3-0.6B-ONNX.`,
      { field: 'repo' },
    );
  }
  if (!REVISION.test(rev) || rev.includes('..')) {
    throw new KvdeskError('BAD_REQUEST', `"${rev}" is not a revision (a branch, tag or commit).`, {
      field: 'revision',
    });
  }
  return { repo, revision: rev };
}

const TreeEntry = z.object({
  type: z.string(),
  path: z.string(),
  size: z.number().int().min(0).optional(),
  oid: z.string().optional(),
  lfs: z
    .object({ oid: z.string(), size: z.number().int().min(0) })
    .partial()
    .optional(),
});

/** The hub's address: checked, as a wrong HF_ENDPOINT would otherwise fail as an unreachable hub. */
export function endpointOf(opts: HubOptions): string {
  const given = opts.endpoint ?? process.env.HF_ENDPOINT;
  const endpoint = (given || 'https://huggingface.co').replace(/\/+$/, '');
  let url: URL | null = null;
  try {
    url = new URL(endpoint);
  } catch {}
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    const what = opts.endpoint !== undefined ? 'the hub endpoint' : 'HF_ENDPOINT';
    throw new KvdeskError(
      'BAD_REQUEST',
      `${what} "${given}" is not an http(s) address: set it to the hub or a mirror of its API, e.g. https://huggingface.co or https://hf-mirror.com (or unset it).`,
      { field: opts.endpoint !== undefined ? 'endpoint' : 'HF_ENDPOINT' },
    );
  }
  return endpoint;
}

const DEFAULT_TIMEOUT_MS = 30_000;

export function timeoutOf(opts: HubOptions): number {
  const env = Number(process.env.KVDESK_HUB_TIMEOUT_MS);
  return opts.timeoutMs ?? (Number.isFinite(env) && env > 0 ? env : DEFAULT_TIMEOUT_MS);
}

const seconds = (ms: number) => (ms >= 1000 ? `${Math.round(ms / 1000)} s` : `${ms} ms`);

export function headersOf(opts: HubOptions): Record<string, string> {
  const token = opts.token ?? process.env.HF_TOKEN;
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** What a refused or failed answer from the hub means, and what to do. */
function hubError(res: Response, what: string, repo: string, opts: HubOptions): KvdeskError {
  // The body says nothing kvdesk shows: let the connection go.
  void res.body?.cancel().catch(() => {});
  if (res.status === 401 || res.status === 403) {
    // Without a token the hub answers 401 for a repository that does not exist too (it hides private ones).
    const why = headersOf(opts).authorization
      ? `${repo} is gated or private, and the token (HF_TOKEN) does not open it: accept its terms on huggingface.co with the token's account`
      : `${repo} does not exist, or is gated or private: check its owner/name; for a gated model, accept its terms on huggingface.co, then set HF_TOKEN to a token of yours`;
    return new KvdeskError('BAD_REQUEST', `the hub refused ${what} (HTTP ${res.status}): ${why}.`, {
      status: res.status,
      repo,
      field: 'repo',
    });
  }
  if (res.status === 404) {
    return new KvdeskError(
      'BAD_REQUEST',
      `the hub has no ${what} (HTTP 404): check the repository's owner/name and revision (${repo}).`,
      { status: 404, repo, field: 'repo' },
    );
  }
  return new KvdeskError('DOWNLOAD_FAILED', `the hub answered HTTP ${res.status} for ${what}: try again later.`, {
    status: res.status,
    repo,
  });
}

/**
 * A request to the hub, failed when it does not answer (its headers) within the timeout: undici waits 5 minutes.
 * The body is not timed here (a download's stalls are: streamTo).
 */
export async function hubGet(url: string, opts: HubOptions, init: RequestInit = {}): Promise<Response> {
  const ms = timeoutOf(opts);
  const timer = new AbortController();
  const late = setTimeout(() => timer.abort(), ms);
  const signal = init.signal ? AbortSignal.any([init.signal, timer.signal]) : timer.signal;
  const origin = URL.canParse(url) ? new URL(url).origin : url;
  const viaProxy = opts.fetch ? undefined : proxyFetch(url);
  try {
    return await (opts.fetch ?? viaProxy?.fetch ?? fetch)(url, {
      ...init,
      signal,
      headers: { ...headersOf(opts), ...(init.headers as Record<string, string> | undefined) },
    });
  } catch (err) {
    if (timer.signal.aborted && !init.signal?.aborted) {
      throw new KvdeskError(
        'DOWNLOAD_FAILED',
        `the hub at ${origin} accepted the connection but did not answer within ${seconds(ms)}: try again later, or check HF_ENDPOINT.`,
        { url },
      );
    }
    if ((err as Error).name === 'AbortError') throw err;
    // fetch says only "fetch failed": what failed is its cause (ECONNREFUSED, ENOTFOUND, a certificate…).
    const cause = (err as Error).cause as (Error & { code?: string }) | undefined;
    const why = cause ? ` (${[cause.code, cause.message].filter(Boolean).join(': ')})` : '';
    throw new KvdeskError(
      'DOWNLOAD_FAILED',
      viaProxy
        ? `could not reach ${origin} through the proxy ${viaProxy.proxy}: ${(err as Error).message}${why}. ` +
            'Check the proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) and the network (or HF_ENDPOINT).'
        : `could not reach ${origin}: ${(err as Error).message}${why}. Check the network (or HF_ENDPOINT).`,
      { url, ...(cause?.code ? { cause: cause.code } : {}) },
    );
  } finally {
    clearTimeout(late);
  }
}

/** Every file of a repository at a revision (the hub pages long listings). */
export async function listHubFiles(repo: string, opts: HubOptions = {}): Promise<HubFile[]> {
  const revision = opts.revision ?? 'main';
  let url: string | null =
    `${endpointOf(opts)}/api/models/${repo}/tree/${encodeURIComponent(revision)}?recursive=true&expand=false`;
  const files: HubFile[] = [];
  const seen = new Set<string>();
  const origin = new URL(endpointOf(opts)).origin;
  for (let page = 0; url; page++) {
    // The token goes to the hub only; a listing of over 100 pages is none kvdesk can download anyway.
    if (page === 100 || new URL(url).origin !== origin) {
      throw new KvdeskError('DOWNLOAD_FAILED', `the hub's file list of ${repo} goes on past what kvdesk reads.`, {
        repo,
      });
    }
    const res = await hubGet(url, opts);
    if (!res.ok) throw hubError(res, `repository ${repo} at ${revision}`, repo, opts);
    const parsed = z.array(TreeEntry).safeParse(await res.json().catch(() => null));
    if (!parsed.success) {
      throw new KvdeskError('DOWNLOAD_FAILED', `the hub's file list of ${repo} is not one kvdesk can read.`, { repo });
    }
    for (const e of parsed.data) {
      // A path that could leave the package folder is no file kvdesk takes (the hub never lists one).
      if (e.type !== 'file' || !safePath(e.path) || seen.has(e.path)) continue;
      seen.add(e.path);
      const size = e.lfs?.size ?? e.size ?? 0;
      files.push({
        path: e.path,
        size,
        ...(e.lfs?.oid ? { sha256: e.lfs.oid } : e.oid ? { blob: e.oid } : {}),
      });
    }
    const next = nextPage(res.headers.get('link'));
    url = next ? new URL(next, url).href : null;
  }
  return files;
}

function safePath(p: string): boolean {
  return (
    p.length > 0 &&
    !p.startsWith('/') &&
    !p.includes('\\') &&
    p.split('/').every((s) => s !== '' && s !== '.' && s !== '..')
  );
}

function nextPage(link: string | null): string | null {
  const m = link?.match(/<([^>]+)>;\s*rel="next"/);
  return m?.[1] ?? null;
}

/** transformers.js / Optimum graph names: model.onnx, model_q4.onnx, model_fp16.onnx… */
const GRAPH = /^model(?:_([\w-]+))?\.onnx$/;
/** Files a transformers.js / Optimum package needs beside its graph (configs, tokenizer, chat template). */
const SIDE_FILE = /\.(json|jinja|txt|model|tiktoken)$/i;

/** The packages a repository's files make. */
export function hubVariants(files: readonly HubFile[]): HubVariant[] {
  const variants: HubVariant[] = [];
  const dirOf = (p: string) => path.posix.dirname(p);
  const make = (name: string, layout: HubVariant['layout'], list: Array<HubFile & { to: string }>): HubVariant => ({
    name,
    layout,
    files: list,
    bytes: list.reduce((n, f) => n + f.size, 0),
  });
  // onnxruntime-genai: each folder with a genai_config.json is a package of that folder's files.
  for (const cfg of files.filter((f) => path.posix.basename(f.path) === 'genai_config.json')) {
    const dir = dirOf(cfg.path);
    const list = files.filter((f) => dirOf(f.path) === dir).map((f) => ({ ...f, to: path.posix.basename(f.path) }));
    variants.push(make(dir === '.' ? 'default' : dir, 'ort-genai', list));
  }
  if (variants.length > 0) return variants;
  const root = files.filter((f) => dirOf(f.path) === '.');
  // An onnx-genai folder: the package is the repository's root.
  if (root.some((f) => /^inference_metadata\.(ya?ml|json)$/.test(f.path))) {
    return [
      make(
        'default',
        'onnx-genai',
        root.map((f) => ({ ...f, to: f.path })),
      ),
    ];
  }
  if (!root.some((f) => f.path === 'config.json')) return [];
  const side = root.filter((f) => SIDE_FILE.test(f.path)).map((f) => ({ ...f, to: f.path }));
  // Graphs in onnx/ first (a variant found there wins over the same name at the root, as the loader reads it).
  const graphs = [...files].sort((a, b) => Number(dirOf(b.path) === 'onnx') - Number(dirOf(a.path) === 'onnx'));
  for (const g of graphs) {
    const dir = dirOf(g.path);
    const m = GRAPH.exec(path.posix.basename(g.path));
    if (!m || (dir !== 'onnx' && dir !== '.')) continue;
    // Its external weights: model_q4.onnx_data, model_q4.onnx_data_1…, or model_q4.onnx.data.
    const data = files.filter(
      (f) =>
        dirOf(f.path) === dir &&
        (f.path.startsWith(`${g.path}_data`) || f.path.startsWith(`${g.path}.data`)) &&
        f.path !== g.path,
    );
    const name = m[1] ?? 'fp32';
    if (variants.some((v) => v.name === name)) continue; // onnx/ first, as the loader reads it
    variants.push(make(name, 'hf-optimum', [...side, ...[g, ...data].map((f) => ({ ...f, to: f.path }))]));
  }
  return variants.sort((a, b) => cpuVariantRank(a.name) - cpuVariantRank(b.name));
}

const Revision = z.object({ sha: z.string().regex(/^[0-9a-f]{40}$/) });

/** The commit a revision (a branch, a tag, a commit) of a repository is at now. */
export async function resolveCommit(repo: string, revision: string, opts: HubOptions = {}): Promise<string> {
  const res = await hubGet(`${endpointOf(opts)}/api/models/${repo}/revision/${encodeURIComponent(revision)}`, opts);
  if (!res.ok) throw hubError(res, `repository ${repo} at ${revision}`, repo, opts);
  const parsed = Revision.safeParse(await res.json().catch(() => null));
  if (!parsed.success) {
    throw new KvdeskError('DOWNLOAD_FAILED', `the hub did not say which commit ${repo} at ${revision} is.`, { repo });
  }
  return parsed.data.sha;
}

/** A repository's packages at the commit its revision is at now, and the one kvdesk would take. */
export async function listHubVariants(spec: string, opts: HubOptions = {}): Promise<HubListing> {
  const { repo, revision } = parseRepo(spec, opts.revision);
  const commit = await resolveCommit(repo, revision, opts);
  const variants = hubVariants(await listHubFiles(repo, { ...opts, revision: commit }));
  if (variants.length === 0) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `${repo} has no ONNX model kvdesk can run (it looks for onnx/model*.onnx beside config.json, folders with genai_config.json, or inference_metadata.yaml). kvdesk runs ONNX exports: look for an ONNX version, e.g. under onnx-community/.`,
      { repo, field: 'repo' },
    );
  }
  // On a CPU, a genai export built for it first.
  const cpu = variants.find((v) => v.layout === 'ort-genai' && /cpu/i.test(v.name));
  return { repo, revision, commit, variants, recommended: (cpu ?? (variants[0] as HubVariant)).name };
}

/** What a package folder downloaded from the hub says of where it came from (its `SOURCE_FILE`). */
export interface HubSource {
  repo: string;
  revision: string;
  variant: string;
  /** The commit its files are from (packages downloaded before kvdesk recorded it have none). */
  commit?: string;
}

/** In a staging folder: the commit its files are from (a later try at another commit drops its parts). */
const COMMIT_FILE = '.kvdesk-commit';

/** In a staging folder: who is downloading into it now (folder-lock.ts). */
export const LOCK_FILE = '.lock';

/** Written into a downloaded package: where it came from (the library and Ollama's names read it). */
export const SOURCE_FILE = '.kvdesk-source.json';

/** Where a package's files came from, when it was downloaded from the hub (undefined otherwise). */
export async function hubSourceOf(root: string): Promise<HubSource | undefined> {
  try {
    const v = JSON.parse(await readFile(path.join(root, SOURCE_FILE), 'utf8')) as Partial<HubSource>;
    return typeof v.repo === 'string' && typeof v.variant === 'string' && typeof v.revision === 'string'
      ? {
          repo: v.repo,
          revision: v.revision,
          variant: v.variant,
          ...(typeof v.commit === 'string' && /^[0-9a-f]{40}$/.test(v.commit) ? { commit: v.commit } : {}),
        }
      : undefined;
  } catch {
    return undefined;
  }
}

const sameRepo = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/**
 * What a pull names (`kvdesk pull`, /api/pull): `[hf.co/]owner/name[@revision][:variant]`, the variant after the
 * colon as `ollama pull` takes it (`latest`, or none: the one kvdesk would take), the revision before it or after it
 * (`owner/name:variant@revision`: a revision holds no colon, a variant no `@`), each apart. Without a colon the
 * repository and revision are as given, for parseRepo to refuse when they are no such thing (`repoSpec` joins them
 * again); undefined when no repository comes before a colon (parseRepo then refuses the name as given). Two
 * different revisions are refused.
 */
export function splitPullName(name: string): PulledName | undefined {
  const bare = stripHubPrefix(name);
  const colon = bare.lastIndexOf(':');
  const head = colon < 0 ? bare : bare.slice(0, colon);
  const at = head.indexOf('@');
  const repo = at < 0 ? head : head.slice(0, at);
  const before = at < 0 ? undefined : head.slice(at + 1);
  if (colon < 0) return { repo, ...(before !== undefined ? { revision: before } : {}) };
  if (!REPO.test(repo)) return undefined;
  const tail = bare.slice(colon + 1);
  const at2 = tail.indexOf('@');
  const tag = at2 < 0 ? tail : tail.slice(0, at2);
  const after = at2 < 0 ? undefined : tail.slice(at2 + 1);
  if (before !== undefined && after !== undefined && before !== after) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `"${name}" names two revisions, ${before} and ${after}: name one, as owner/name@revision:variant.`,
      { field: 'revision' },
    );
  }
  const revision = before ?? after;
  return {
    repo,
    ...(tag !== '' && tag !== 'latest' ? { variant: tag } : {}),
    ...(revision !== undefined ? { revision } : {}),
  };
}

/** The repository as parseRepo, listHubVariants and the downloads take it: `owner/name[@revision]`. */
export function repoSpec(named: { repo: string; revision?: string }): string {
  return named.revision === undefined ? named.repo : `${named.repo}@${named.revision}`;
}

/** A name a package may have been pulled by: its repository, the variant it names and the revision. */
export interface PulledName {
  repo: string;
  /** None (`latest`, or no colon): any variant. */
  variant?: string;
  /** None: whatever revision it was pulled at. */
  revision?: string;
}

/**
 * A name as `kvdesk pull` and /api/pull take it (splitPullName): `[hf.co/]owner/name[@revision][:variant]`, or
 * `owner/name:variant@revision`. Undefined for a name that is no repository (`default`, `./folder`); a name of two
 * different revisions is refused, as pull refuses it.
 */
export function pulledNameOf(name: string): PulledName | undefined {
  const named = splitPullName(name);
  if (!named) return undefined;
  if (!REPO.test(named.repo) || (named.revision !== undefined && !REVISION.test(named.revision))) return undefined;
  return named;
}

/** The name `kvdesk pull` and /api/pull take for it: `owner/name[@revision][:variant]`. */
export function pullNameOf(named: PulledName): string {
  return `${named.repo}${named.revision !== undefined ? `@${named.revision}` : ''}${named.variant !== undefined ? `:${named.variant}` : ''}`;
}

/**
 * Whether a package from `source` is at the revision a name names: the branch or tag it was pulled at, or its
 * commit (in full, or its first 7 or more hex digits, in either case: the hub writes commits in lowercase). A
 * package that recorded neither is taken at any revision.
 */
function atRevision(source: HubSource, revision: string | undefined): boolean {
  if (revision === undefined || (source.revision === '' && source.commit === undefined)) return true;
  if (revision === source.revision) return true;
  return (
    source.commit !== undefined &&
    /^[0-9a-f]{7,40}$/i.test(revision) &&
    source.commit.startsWith(revision.toLowerCase())
  );
}

/**
 * The first of `entries` (most recently loaded first) pulled from the hub under that name (pulledNameOf): the
 * repository in any case, the variant it names (none: any) at the revision it names (none: any). A name whose
 * repository and variant were pulled, but at another revision, is refused saying which revision is there and how
 * to have the one named instead (`replace`: the command or request that deletes `entry`, then pulls `name`).
 */
export function pulledEntry<E extends { id: string; root: string; source?: HubSource | undefined }>(
  entries: readonly E[],
  name: string,
  replace: (entry: E, name: PulledName) => string,
): E | undefined {
  const named = pulledNameOf(name);
  if (!named) return undefined;
  const pulled = entries.filter(
    (e): e is E & { source: HubSource } =>
      e.source !== undefined &&
      sameRepo(e.source.repo, named.repo) &&
      (named.variant === undefined || e.source.variant === named.variant),
  );
  const entry = pulled.find((e) => atRevision(e.source, named.revision));
  const other = pulled[0];
  if (entry || !other || named.revision === undefined) return entry;
  const { source } = other;
  const at = `${source.revision || 'a revision not recorded'}${source.commit ? ` (commit ${source.commit.slice(0, 12)})` : ''}`;
  const itself = pullNameOf({ repo: source.repo, variant: source.variant });
  throw new KvdeskError(
    'BAD_REQUEST',
    `"${name}" names ${named.repo}${named.variant !== undefined ? ` (${named.variant})` : ''} at revision ${named.revision}, and the library's ${other.id} was pulled from ${itself} at ${at}, not at ${named.revision}: name it as ${itself}${source.revision ? ` or ${pullNameOf({ repo: source.repo, revision: source.revision, variant: source.variant })}` : ''}, or, to have ${named.revision} instead, ${replace(other, { ...named, variant: source.variant })}.`,
    { field: 'model', root: other.root, revision: source.revision },
  );
}

/** A download about to run: its variant, where it lands and is staged, and what is there already. */
export interface DownloadPlan {
  listing: HubListing;
  variant: HubVariant;
  root: string;
  staging: string;
  /** The package is in the models folder already (from this repository and variant). */
  present: boolean;
}

/**
 * Where a variant lands: `<name>` (or `<name>-<variant>` when the repository offers several), else with the owner
 * in front when a package of another repository has that folder. Staged in a folder of its own per repository,
 * revision and variant, which a later try resumes.
 */
export async function planDownload(
  listing: HubListing,
  modelsDir: string,
  variantName?: string,
): Promise<DownloadPlan> {
  const { repo, revision } = listing;
  const name = variantName ?? listing.recommended;
  const variant = listing.variants.find((v) => v.name === name);
  if (!variant) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `${repo} has no variant "${name}": it offers ${listing.variants.map((v) => `${v.name} (${formatBytes(v.bytes)})`).join(', ')}.`,
      { field: 'variant', repo },
    );
  }
  const [owner, base] = repo.split('/') as [string, string];
  const suffix = listing.variants.length === 1 ? '' : `-${variant.name.replace(/[^\w.-]+/g, '-')}`;
  let root = '';
  let present = false;
  for (const folder of [`${base}${suffix}`, `${owner}-${base}${suffix}`]) {
    root = path.join(modelsDir, folder);
    if (!(await exists(root))) break;
    const source = await hubSourceOf(root);
    if (source && sameRepo(source.repo, repo) && source.variant === variant.name) {
      present = true;
      break;
    }
  }
  if (!present && (await exists(root))) {
    throw new KvdeskError('BAD_REQUEST', `${root} is taken by another package: move it, then download again.`, {
      field: 'repo',
      root,
    });
  }
  const key = createHash('sha256').update(`${repo}@${revision}#${variant.name}`).digest('hex').slice(0, 12);
  const staging = path.join(modelsDir, `.${path.basename(root)}.${key}.partial`);
  return { listing, variant, root, staging, present };
}

/** The refusal of a download whose package is in the models folder already (`detail.present`, `detail.root`). */
export function downloadedAlready(plan: DownloadPlan): KvdeskError {
  return new KvdeskError(
    'BAD_REQUEST',
    `${plan.listing.repo} (${plan.variant.name}) is downloaded already, in ${plan.root}: load it from the library (to download it again, delete it there first).`,
    { field: 'repo', root: plan.root, present: true },
  );
}

/**
 * Downloads one variant of a repository into the models folder (staged beside it, where a later call resumes) and
 * validates it; returns the package folder. One that is there already is refused (`detail.present`).
 */
export async function downloadHubModel(
  spec: string,
  modelsDir: string,
  opts: HubOptions & {
    variant?: string;
    signal?: AbortSignal;
    onProgress?: (p: DownloadProgress) => void;
    /** The listing, or the whole plan, when the caller has it already. */
    listing?: HubListing;
    plan?: DownloadPlan;
    /** Where what the download removes is said (the staging folders of this package at other revisions). */
    log?: (line: string) => void;
    /**
     * What an earlier try left, said once before anything is fetched (not when it left nothing): of each such
     * file, `doneBytes` of its `totalBytes` arrived (all of them: the whole file, checked, is kept; fewer: it
     * resumes from there).
     */
    onResume?: (files: Array<{ file: string; doneBytes: number; totalBytes: number }>) => void;
  } = {},
): Promise<{ root: string; variant: HubVariant; listing: HubListing }> {
  const plan =
    opts.plan ?? (await planDownload(opts.listing ?? (await listHubVariants(spec, opts)), modelsDir, opts.variant));
  const { listing, variant, root, staging } = plan;
  const { repo, revision, commit } = listing;
  if (plan.present) throw downloadedAlready(plan);
  await mkdir(staging, { recursive: true });
  const release = await lock(staging, repo);
  try {
    // Parts of an earlier try at another commit (the branch moved on between the tries) are not this commit's
    // bytes: they go (complete files are checked against the listing below, and stay when they match).
    const marker = path.join(staging, COMMIT_FILE);
    const before = (await readFile(marker, 'utf8').catch(() => '')).trim();
    if (before !== '' && before !== commit) {
      for (const name of await readdir(staging, { recursive: true })) {
        if (name.endsWith('.part')) await rm(path.join(staging, name), { force: true });
      }
    }
    await writeFile(marker, `${commit}\n`);
    // What arrived before (a download cut off): complete files checked again (the revision may have moved on),
    // parts resumed.
    let have = 0;
    const resumed: Array<{ file: string; doneBytes: number; totalBytes: number }> = [];
    for (const f of variant.files) {
      const to = path.join(staging, f.to);
      const whole = await stat(to).catch(() => null);
      let arrived = 0;
      if (whole?.isFile() && whole.size === f.size && (await matches(to, f))) arrived = f.size;
      else {
        await rm(to, { force: true });
        const part = await sizeOf(`${to}.part`);
        if (part <= f.size) arrived = part; // a complete part (cut before its rename) is checked, not fetched
      }
      have += arrived;
      if (arrived > 0) resumed.push({ file: f.path, doneBytes: arrived, totalBytes: f.size });
    }
    if (resumed.length > 0) opts.onResume?.(resumed);
    await checkRoom(modelsDir, variant.bytes - have);
    let done = have;
    const report = (file: string) =>
      opts.onProgress?.({ repo, variant: variant.name, file, doneBytes: done, totalBytes: variant.bytes });
    report('');
    const pending: HubVariant['files'] = [];
    for (const f of variant.files) if (!(await exists(path.join(staging, f.to)))) pending.push(f); // checked above
    await fetchAll(pending, staging, opts.signal, async (f, to, signal) => {
      await mkdir(path.dirname(to), { recursive: true });
      await fetchFile(repo, commit, f, to, { ...opts, signal }, (n) => {
        done += n;
        report(f.path);
      });
    });
    // Complete: the package must validate before it joins the models folder.
    try {
      await loadModelSpec(staging, { availableBackends: ['CPUExecutionProvider'] });
    } catch (err) {
      const problem = packageProblem(err);
      // Its files are the hub's (each checked): a download again brings the same package. Kept, they would lie in
      // a hidden folder for good; deleted while the lock is held, so no other download starts on them meanwhile.
      await rm(staging, { recursive: true, force: true });
      throw new KvdeskError(
        'PACKAGE_INVALID',
        `${repo} (${variant.name}) downloaded, but is not a package kvdesk can load: ${problem.message.split(`${staging}${path.sep}`).join('').split(staging).join('the package').replace(/\.$/, '')}. Its files (${formatBytes(variant.bytes)}, as the hub has them) were deleted: downloading it again brings the same package; pick another variant or repository.`,
        { repo, ...(problem.file ? { file: problem.file } : {}), ...(problem.field ? { field: problem.field } : {}) },
      );
    }
    const source: HubSource = { repo, revision, variant: variant.name, commit };
    await writeFile(path.join(staging, SOURCE_FILE), `${JSON.stringify(source)}\n`);
    await rm(marker, { force: true });
    await release();
    try {
      await rename(staging, root);
    } catch (err) {
      throw new KvdeskError(
        'DOWNLOAD_FAILED',
        `${repo} (${variant.name}) is complete in ${staging}, but could not become ${root}: ${(err as Error).message}. Move it there by hand, or remove what is in the way and download again.`,
        { repo, root },
      );
    }
    // Stopped downloads of this folder at other revisions can never resume now that it is there.
    await sweepStaging(modelsDir, { only: path.basename(root), ...(opts.log ? { log: opts.log } : {}) });
    return { root, variant, listing };
  } finally {
    await release();
  }
}

/** Files fetched at once: a repository's side files and a graph split in parts arrive side by side. */
const PARALLEL_FILES = 3;

/**
 * Runs `fetch` over the files, PARALLEL_FILES at a time. The first failure stops the others (what they wrote
 * stays, for the next try to resume) and is what this throws; a cancel of `signal` stops them all.
 */
async function fetchAll(
  files: Array<HubFile & { to: string }>,
  staging: string,
  signal: AbortSignal | undefined,
  fetch: (f: HubFile, to: string, signal: AbortSignal) => Promise<void>,
): Promise<void> {
  const inner = new AbortController();
  const stop = () => inner.abort(signal?.reason);
  if (signal?.aborted) stop();
  signal?.addEventListener('abort', stop, { once: true });
  const queue = [...files];
  let failure: { err: unknown } | undefined;
  const worker = async (): Promise<void> => {
    for (let f = queue.shift(); f && !failure; f = queue.shift()) {
      try {
        await fetch(f, path.join(staging, f.to), inner.signal);
      } catch (err) {
        failure ??= { err };
        inner.abort(err);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(PARALLEL_FILES, queue.length) }, worker));
  } finally {
    signal?.removeEventListener('abort', stop);
  }
  if (failure) throw failure.err;
}

/** Whether a complete file is the one the hub lists (its hash; a file without one, by its size alone). */
async function matches(file: string, f: HubFile): Promise<boolean> {
  const hash = hasherOf(f);
  if (!hash) return true;
  await hashFile(file, hash);
  return hash.digest('hex') === (f.sha256 ?? f.blob);
}

function hasherOf(f: HubFile): Hash | null {
  return f.sha256 ? createHash('sha256') : f.blob ? createHash('sha1').update(`blob ${f.size}\0`) : null;
}

/**
 * Takes a staging folder for this process (another kvdesk downloading into it — the window and `kvdesk pull` —
 * is refused; a lock left by one that is gone is taken over, also one a container started again left under the
 * pid this process has now). Returns its release (safe to call twice).
 */
async function lock(staging: string, repo: string): Promise<() => Promise<void>> {
  const file = path.join(staging, LOCK_FILE);
  const got = await takeLock(file);
  if ('release' in got) return got.release;
  throw new KvdeskError(
    'BAD_REQUEST',
    `${repo} is being downloaded already (into ${staging}, by ${describeHolder(got)}): wait for it to end. If no kvdesk is downloading it, delete ${file} and download again.`,
    // busy: no fault of the request; `kvdesk pull` exits 4 (try again), not 2.
    { field: 'repo', file, busy: true },
  );
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

/** The size of a file (0: there is none). */
async function sizeOf(file: string): Promise<number> {
  const s = await stat(file).catch(() => null);
  return s?.isFile() ? s.size : 0;
}

/** The bytes this user may still write on the disk of `dir`; undefined where the system does not say. */
export async function freeBytes(dir: string): Promise<number | undefined> {
  const fs = await statfs(dir).catch(() => null);
  return fs ? Number(fs.bavail) * Number(fs.bsize) : undefined;
}

async function checkRoom(dir: string, need: number): Promise<void> {
  const free = await freeBytes(dir);
  if (free === undefined) return;
  if (need > free) {
    throw new KvdeskError(
      'DOWNLOAD_FAILED',
      `not enough disk space in ${dir}: the download needs ${formatBytes(need)} more, ${formatBytes(free)} is free. Free some space, or choose another data directory.`,
      { needBytes: need, freeBytes: free },
    );
  }
}

/**
 * One file, into `to.part` (resumed from its length with an HTTP range), checked against the listing, then
 * renamed to `to`. `progress` gets the bytes of each piece written (less, when a part is dropped).
 */
async function fetchFile(
  repo: string,
  revision: string,
  f: HubFile,
  to: string,
  opts: HubOptions & { signal?: AbortSignal },
  progress: (bytes: number) => void,
): Promise<void> {
  const part = `${to}.part`;
  let from = await sizeOf(part);
  if (from > f.size) {
    await rm(part, { force: true });
    from = 0;
  }
  let wrong = await fetchPart(repo, revision, f, part, from, opts, progress);
  // What an earlier try left may not be this file's start (other bytes, or a range the server will not serve:
  // 416): it goes, and the file comes whole once more before the download fails for it.
  if (wrong && from > 0) {
    progress(-(await sizeOf(part)));
    await rm(part, { force: true });
    wrong = await fetchPart(repo, revision, f, part, 0, opts, progress);
  }
  if (wrong) {
    await rm(part, { force: true });
    throw wrong;
  }
  await rename(part, to);
}

/**
 * The file into `part` from byte `from` (what is there before it counted already); what is wrong with the part
 * then (its size or hash is not the listing's, or the server refused the range), else undefined.
 */
async function fetchPart(
  repo: string,
  revision: string,
  f: HubFile,
  part: string,
  from: number,
  opts: HubOptions & { signal?: AbortSignal },
  progress: (bytes: number) => void,
): Promise<KvdeskError | undefined> {
  const url = `${endpointOf(opts)}/${repo}/resolve/${encodeURIComponent(revision)}/${f.path
    .split('/')
    .map(encodeURIComponent)
    .join('/')}`;
  const hash = hasherOf(f);
  let res: Response | null = null;
  if (from < f.size || f.size === 0) {
    res = await hubGet(url, opts, {
      ...(from > 0 ? { headers: { range: `bytes=${from}-` } } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (res.status === 416 && from > 0) {
      void res.body?.cancel().catch(() => {});
      return new KvdeskError(
        'DOWNLOAD_FAILED',
        `${f.path}: the hub would not resume it from byte ${from} (HTTP 416): run the download again.`,
        { file: f.path, repo },
      );
    }
    if (!res.ok) throw hubError(res, f.path, repo, opts);
    // A server that ignores the range sends the whole file: start over.
    if (from > 0 && res.status !== 206) {
      progress(-from);
      from = 0;
      await rm(part, { force: true });
    }
  }
  if (hash && from > 0) await hashFile(part, hash);
  if (res?.body) {
    const body = Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>);
    await streamTo(
      body,
      async function* (source: AsyncIterable<Buffer>) {
        for await (const chunk of source) {
          hash?.update(chunk);
          progress(chunk.length);
          yield chunk;
        }
      },
      createWriteStream(part, { flags: from > 0 ? 'a' : 'w' }),
      opts.signal,
      f.path,
      timeoutOf(opts),
    );
  }
  const size = await sizeOf(part);
  const digest = hash?.digest('hex');
  const expected = f.sha256 ?? f.blob;
  if (size === f.size && (!expected || digest === expected)) return undefined;
  return new KvdeskError(
    'DOWNLOAD_FAILED',
    size !== f.size
      ? `${f.path}: ${formatBytes(size)} arrived of ${formatBytes(f.size)}; the download was cut off: run it again to resume.`
      : `${f.path} does not match the hub's ${f.sha256 ? 'SHA-256' : 'git hash'} (${expected}, got ${digest}): it was deleted; run the download again.`,
    { file: f.path, repo },
  );
}

/**
 * The body into the file through `transform`. A connection lost part way, or silent for `stallMs`, is
 * DOWNLOAD_FAILED (what arrived stays in the file, for the next try to resume from); a cancel stays an abort.
 */
async function streamTo(
  body: Readable,
  transform: (source: AsyncIterable<Buffer>) => AsyncIterable<Buffer>,
  out: NodeJS.WritableStream,
  signal: AbortSignal | undefined,
  file: string,
  stallMs: number,
): Promise<void> {
  let stalled = false;
  const stall = () =>
    setTimeout(() => {
      stalled = true;
      body.destroy(new Error(`no data for ${seconds(stallMs)}`));
    }, stallMs);
  let timer = stall();
  const timed = async function* (source: AsyncIterable<Buffer>) {
    for await (const chunk of source) {
      clearTimeout(timer);
      timer = stall();
      yield chunk;
    }
  };
  try {
    await pipeline(body, timed, transform, out, ...(signal ? [{ signal }] : []));
  } catch (err) {
    if (signal?.aborted || ((err as Error).name === 'AbortError' && !stalled)) throw err;
    throw new KvdeskError(
      'DOWNLOAD_FAILED',
      `${file}: the download was cut off (${(err as Error).message}); run it again to resume where it stopped.`,
      { file },
    );
  } finally {
    clearTimeout(timer);
  }
}

async function hashFile(file: string, hash: Hash): Promise<void> {
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
}
