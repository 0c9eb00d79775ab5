/**
 * Searching the Hugging Face Hub for models kvdesk can download (LM Studio's model search): the hub's model list
 * (`GET /api/models`) narrowed to text-generation repositories tagged `onnx`, most downloaded first. A hit is a
 * repository; what it offers (its variants, their sizes) is its look-up (hub-download.ts's listHubVariants).
 */
import { z } from 'zod';
import type { HubSearchHit } from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import { endpointOf, type HubOptions, headersOf, hubGet } from './hub-download';

/** The hits a search returns when no limit is given, and the most it may ask for. */
export const SEARCH_LIMIT = 20;
export const SEARCH_LIMIT_MAX = 100;

const Entry = z.object({
  id: z.string().min(1),
  downloads: z.number().optional(),
  likes: z.number().optional(),
  lastModified: z.string().optional(),
  gated: z.union([z.boolean(), z.string()]).optional(),
  private: z.boolean().optional(),
  library_name: z.string().optional(),
  pipeline_tag: z.string().optional(),
});

/** The hub's own answer to a search, in the fields it is asked for. */
const FIELDS = ['downloads', 'likes', 'lastModified', 'gated', 'private', 'library_name', 'pipeline_tag'];

/**
 * Repositories whose name matches `query` (the hub matches any part of `owner/name`, case aside) that hold ONNX
 * text-generation models, most downloaded first. Refused: an empty query; the hub unreachable or answering
 * otherwise than with a list.
 */
export async function searchHub(query: string, opts: HubOptions & { limit?: number } = {}): Promise<HubSearchHit[]> {
  const q = query.trim();
  if (q.length === 0 || q.length > 200) {
    throw new KvdeskError(
      'BAD_REQUEST',
      'a search needs a word of the model\'s name (at most 200 characters), e.g. "qwen3".',
      {
        field: 'query',
      },
    );
  }
  const limit = Math.min(Math.max(1, Math.floor(opts.limit ?? SEARCH_LIMIT)), SEARCH_LIMIT_MAX);
  // The hub matches `search` as one piece of the name: of several words, it gets the longest, and the hits are
  // kept that hold every word (from as many hits as the hub gives, so that enough remain).
  const words = q.toLowerCase().split(/\s+/);
  const longest = words.reduce((a, b) => (b.length > a.length ? b : a));
  const params = new URLSearchParams([
    ['search', words.length > 1 ? longest : q] as [string, string],
    ['filter', 'onnx'],
    ['pipeline_tag', 'text-generation'],
    ['sort', 'downloads'],
    ['direction', '-1'],
    ['limit', String(words.length > 1 ? SEARCH_LIMIT_MAX : limit)],
    ...FIELDS.map((f): [string, string] => ['expand', f]),
  ]);
  const res = await hubGet(`${endpointOf(opts)}/api/models?${params}`, opts);
  if (!res.ok) {
    void res.body?.cancel().catch(() => {});
    if (res.status === 401 || res.status === 403) {
      throw new KvdeskError(
        'BAD_REQUEST',
        headersOf(opts).authorization
          ? `the hub refused the search (HTTP ${res.status}): the token in HF_TOKEN is not valid: make a new one on huggingface.co, or unset HF_TOKEN.`
          : `the hub refused the search (HTTP ${res.status}): it wants a token (a mirror set in HF_ENDPOINT may): set HF_TOKEN.`,
        { status: res.status, field: 'HF_TOKEN' },
      );
    }
    throw new KvdeskError('DOWNLOAD_FAILED', `the hub answered HTTP ${res.status} to the search: try again later.`, {
      status: res.status,
    });
  }
  const parsed = z.array(Entry).safeParse(await res.json().catch(() => null));
  if (!parsed.success) {
    throw new KvdeskError('DOWNLOAD_FAILED', `the hub's answer to the search is not a list of models kvdesk can read.`);
  }
  const hits =
    words.length > 1 ? parsed.data.filter((e) => words.every((w) => e.id.toLowerCase().includes(w))) : parsed.data;
  return hits.slice(0, limit).map((e) => ({
    repo: e.id,
    downloads: e.downloads ?? 0,
    likes: e.likes ?? 0,
    ...(e.lastModified ? { updatedAt: e.lastModified } : {}),
    // "auto" or "manual": the repository asks its terms accepted (and a token) before it downloads.
    gated: e.gated !== undefined && e.gated !== false,
    ...(e.private ? { private: true } : {}),
    ...(e.library_name ? { library: e.library_name } : {}),
  }));
}
