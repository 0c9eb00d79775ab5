/**
 * Searching the Hugging Face Hub for ONNX language models (src/main/host/hub-search.ts) against a local imitation
 * of the hub's model list (test/helpers/fake-hub.ts): what is asked of the hub, what comes back and in what order,
 * and each way the hub can fail, said as it is.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SEARCH_LIMIT, searchHub } from '../../../src/main/host/hub-search';
import { KvdeskError } from '../../../src/shared/errors';
import { type FakeHub, startFakeHub } from '../../helpers/fake-hub';

const onnxRepo = { 'config.json': '{}', 'onnx/model.onnx': 'graph' };
let hub: FakeHub;

beforeAll(async () => {
  hub = await startFakeHub(
    {
      'onnx-community/Qwen3-0.6B-ONNX': onnxRepo,
      'onnx-community/Qwen3-1.7B-ONNX': onnxRepo,
      'Qwen/Qwen3-0.6B': { 'config.json': '{}', 'model.safetensors': 'weights' },
      'someone/qwen3-embedding-onnx': onnxRepo,
      'org/gated-qwen3-onnx': onnxRepo,
      'org/llama-onnx': onnxRepo,
    },
    {
      gated: new Set(['org/gated-qwen3-onnx']),
      token: 'hf_good',
      meta: {
        'onnx-community/Qwen3-0.6B-ONNX': {
          downloads: 52_000,
          likes: 40,
          lastModified: '2026-05-02T10:00:00.000Z',
          library_name: 'transformers.js',
        },
        'onnx-community/Qwen3-1.7B-ONNX': { downloads: 9_000, likes: 12 },
        'Qwen/Qwen3-0.6B': { downloads: 900_000 },
        'someone/qwen3-embedding-onnx': { downloads: 70_000, pipeline_tag: 'feature-extraction' },
        'org/gated-qwen3-onnx': { downloads: 100 },
      },
    },
  );
});
afterAll(() => hub?.close());

/** What `fetch` would answer, for the hub's failures the imitation does not make. */
const answer = (status: number, body: string) => async () =>
  new Response(body, { status, headers: { 'content-type': 'application/json' } });

describe('searchHub', () => {
  it('finds the ONNX text-generation repositories matching a word, most downloaded first', async () => {
    const hits = await searchHub('qwen3', { endpoint: hub.url });
    // Not the safetensors original (no onnx tag), not the embedding model (another pipeline).
    expect(hits.map((h) => h.repo)).toEqual([
      'onnx-community/Qwen3-0.6B-ONNX',
      'onnx-community/Qwen3-1.7B-ONNX',
      'org/gated-qwen3-onnx',
    ]);
    expect(hits[0]).toEqual({
      repo: 'onnx-community/Qwen3-0.6B-ONNX',
      downloads: 52_000,
      likes: 40,
      updatedAt: '2026-05-02T10:00:00.000Z',
      gated: false,
      library: 'transformers.js',
    });
    // The hub's "manual" (or "auto") gating is a flag: a token is needed.
    expect(hits[2]).toMatchObject({ repo: 'org/gated-qwen3-onnx', gated: true });
    // What the hub was asked: the word, ONNX, text generation, by downloads, the fields the hits show.
    const asked = new URL(hub.requests.at(-1)?.path ?? '', hub.url);
    expect(asked.pathname).toBe('/api/models');
    expect(asked.searchParams.get('search')).toBe('qwen3');
    expect(asked.searchParams.getAll('filter')).toEqual(['onnx']);
    expect(asked.searchParams.get('pipeline_tag')).toBe('text-generation');
    expect(asked.searchParams.get('sort')).toBe('downloads');
    expect(asked.searchParams.get('direction')).toBe('-1');
    expect(asked.searchParams.get('limit')).toBe(String(SEARCH_LIMIT));
    expect(asked.searchParams.getAll('expand')).toEqual(expect.arrayContaining(['downloads', 'likes', 'gated']));
  });

  it('asks for as many hits as the limit says (at most 100), and takes no more', async () => {
    const one = await searchHub('onnx', { endpoint: hub.url, limit: 1 });
    expect(one.map((h) => h.repo)).toEqual(['onnx-community/Qwen3-0.6B-ONNX']);
    await searchHub('onnx', { endpoint: hub.url, limit: 5000 });
    expect(new URL(hub.requests.at(-1)?.path ?? '', hub.url).searchParams.get('limit')).toBe('100');
    // A hub that answers more than asked: the limit holds.
    const many = JSON.stringify(Array.from({ length: 30 }, (_, i) => ({ id: `o/m${i}`, downloads: 30 - i })));
    const capped = await searchHub('m', { endpoint: hub.url, limit: 3, fetch: answer(200, many) });
    expect(capped.map((h) => h.repo)).toEqual(['o/m0', 'o/m1', 'o/m2']);
  });

  it('trims the words, matches any part of the name, and finds nothing without an error', async () => {
    expect((await searchHub('  1.7B  ', { endpoint: hub.url })).map((h) => h.repo)).toEqual([
      'onnx-community/Qwen3-1.7B-ONNX',
    ]);
    expect(new URL(hub.requests.at(-1)?.path ?? '', hub.url).searchParams.get('search')).toBe('1.7B');
    expect(await searchHub('no-such-model', { endpoint: hub.url })).toEqual([]);
  });

  it('of several words, asks the hub for the longest and keeps the hits that hold them all', async () => {
    const hits = await searchHub('qwen3  0.6B', { endpoint: hub.url, limit: 5 });
    expect(hits.map((h) => h.repo)).toEqual(['onnx-community/Qwen3-0.6B-ONNX']);
    const asked = new URL(hub.requests.at(-1)?.path ?? '', hub.url).searchParams;
    expect(asked.get('search')).toBe('qwen3');
    expect(asked.get('limit')).toBe('100');
    expect(await searchHub('qwen3 8b', { endpoint: hub.url })).toEqual([]);
  });

  it('sends the token to the hub when there is one', async () => {
    await searchHub('llama', { endpoint: hub.url, token: 'hf_good' });
    expect(hub.requests.at(-1)?.auth).toBe('Bearer hf_good');
    await searchHub('llama', { endpoint: hub.url, token: '' });
    expect(hub.requests.at(-1)?.auth).toBeUndefined();
  });

  it('refuses an empty search or an overlong one, naming the field, without asking the hub', async () => {
    const before = hub.requests.length;
    for (const q of ['', '   ', 'x'.repeat(201)]) {
      const err = await searchHub(q, { endpoint: hub.url }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(KvdeskError);
      expect(err).toMatchObject({ code: 'BAD_REQUEST', detail: { field: 'query' } });
    }
    expect(hub.requests.length).toBe(before);
  });

  it('says what went wrong when the hub fails, refuses the token, answers garbage or cannot be reached', async () => {
    const fail = (opts: Parameters<typeof searchHub>[1]) => searchHub('qwen', opts).catch((e: KvdeskError) => e);
    expect(await fail({ endpoint: hub.url, fetch: answer(503, '{}') })).toMatchObject({
      code: 'DOWNLOAD_FAILED',
      message: expect.stringMatching(/HTTP 503 to the search: try again later/),
    });
    // A mirror that wants a token, none set: said so.
    expect(await fail({ endpoint: hub.url, token: '', fetch: answer(401, '{}') })).toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(/wants a token .*set HF_TOKEN/),
    });
    // A bad token: the hub's 401 names HF_TOKEN.
    expect(await fail({ endpoint: hub.url, token: 'hf_old', fetch: answer(401, '{}') })).toMatchObject({
      code: 'BAD_REQUEST',
      detail: { field: 'HF_TOKEN' },
      message: expect.stringMatching(/token in HF_TOKEN is not valid/),
    });
    for (const body of ['<html>', '{"error":"x"}', '[{"downloads":3}]']) {
      expect(await fail({ endpoint: hub.url, fetch: answer(200, body) })).toMatchObject({
        code: 'DOWNLOAD_FAILED',
        message: expect.stringMatching(/not a list of models kvdesk can read/),
      });
    }
    // Nothing listens there.
    expect(await fail({ endpoint: 'http://127.0.0.1:9' })).toMatchObject({
      code: 'DOWNLOAD_FAILED',
      message: expect.stringMatching(/could not reach http:\/\/127\.0\.0\.1:9.*HF_ENDPOINT/),
    });
  });
});
