/**
 * Model downloads from a Hugging Face Hub (src/main/host/hub-download.ts) against a local imitation of its file API
 * (test/helpers/fake-hub.ts), with real files: the generated default model served as a transformers.js-style repo,
 * and (with the shared fixtures) an onnxruntime-genai export. A download lists the variants, fetches one, checks
 * every file, resumes what was cut off, and the package it leaves loads and generates as the original does.
 */
import { createHash } from 'node:crypto';
import { existsSync, promises as fs, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type DownloadProgress,
  downloadHubModel,
  hubSourceOf,
  listHubFiles,
  listHubVariants,
  planDownload,
} from '../../../src/main/host/hub-download';
import { RunnerService } from '../../../src/main/host/runner-service';
import { loadModelSpec } from '../../../src/main/packages';
import { type FakeHub, startFakeHub } from '../../helpers/fake-hub';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { graphVariantsModel } from '../../helpers/models';

const GENAI_FIXTURE = fixture('onnxruntime-genai/tiny-random-gpt2-fp32');
const haveGenai = haveFixtures && (await fs.stat(GENAI_FIXTURE).catch(() => null)) !== null;

const SIDE = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'];
const read = (rel: string) => fs.readFile(path.join(defaultModelDir, rel));
const side: Record<string, Buffer> = {};
for (const f of SIDE) side[f] = await read(f);
const graph = await read('onnx/model.onnx');
const fp16Data = createHash('sha256').update('weights').digest(); // any bytes: fp16 is listed, not loaded

const CHAT = 'onnx-community/tiny-chat';
const chatRepo: Record<string, Buffer | string> = {
  ...side,
  'README.md': '# tiny chat\n',
  '.gitattributes': '*.onnx filter=lfs diff=lfs merge=lfs -text\n',
  'onnx/model.onnx': graph,
  'onnx/model_q4.onnx': Buffer.from(graph),
  'onnx/model_fp16.onnx': Buffer.from(graph),
  'onnx/model_fp16.onnx_data': fp16Data,
};
const GATED = 'org/gated-chat';
const REPOS: Record<string, Record<string, Buffer | string>> = {
  [CHAT]: chatRepo,
  [GATED]: { ...side, 'onnx/model.onnx': graph },
  'org/readme-only': { 'README.md': '# nothing to run\n', 'config.json': '{}' },
  // Files the hub lists and serves whole, whose graph is no ONNX graph.
  'org/broken': { ...side, 'onnx/model.onnx': Buffer.concat([Buffer.from('not onnx'), Buffer.alloc(200_000, 7)]) },
  // Another owner's repository of the same name, whose generation_config.json differs.
  'other-org/tiny-chat': {
    ...chatRepo,
    'generation_config.json': Buffer.from(
      JSON.stringify({ ...JSON.parse((chatRepo['generation_config.json'] as Buffer).toString('utf8')), top_k: 7 }),
    ),
  },
};
if (haveGenai) {
  const repo: Record<string, Buffer> = {};
  for (const name of await fs.readdir(GENAI_FIXTURE)) {
    const data = await fs.readFile(path.join(GENAI_FIXTURE, name));
    repo[`cpu_and_mobile/cpu-fp32/${name}`] = data;
    repo[`cuda/cuda-fp32/${name}`] = data;
  }
  REPOS['org/tiny-gpt2-genai'] = { 'README.md': 'genai\n', ...repo };
}

const sizeOf = (files: string[]) => files.reduce((n, f) => n + Buffer.byteLength(chatRepo[f] as Buffer), 0);
const Q4 = [...SIDE, 'onnx/model_q4.onnx'];

let hub: FakeHub;
let modelsDir: string;
let savedToken: string | undefined;
const opts = () => ({ endpoint: hub.url });
/** The package folders in the models folder (the staging folder starts with a dot). */
const packages = async () => (await fs.readdir(modelsDir)).filter((n) => !n.startsWith('.')).sort();
/** The staging folder of a package folder's download (one per repository, revision and variant). */
const staging = (folder: string) => {
  const names = readdirSync(modelsDir).filter((n) => n.startsWith(`.${folder}.`) && n.endsWith('.partial'));
  return path.join(modelsDir, names[0] ?? `.${folder}.none.partial`);
};
/** Whether these files of the chat package's download are whole in its staging folder (checked and renamed). */
const placed = (files: string[]) => files.every((f) => existsSync(path.join(staging('tiny-chat-q4'), f)));
const missing = (p: string) =>
  fs.stat(p).then(
    () => false,
    (e: NodeJS.ErrnoException) => e.code === 'ENOENT',
  );

beforeAll(async () => {
  savedToken = process.env.HF_TOKEN;
  delete process.env.HF_TOKEN;
  hub = await startFakeHub(REPOS, { gated: new Set([GATED]), token: 'hf_secret', lfsMinBytes: 10_000 });
});
afterAll(async () => {
  await hub.close();
  if (savedToken !== undefined) process.env.HF_TOKEN = savedToken;
});
beforeEach(async () => {
  modelsDir = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-hub-'));
  hub.requests.length = 0;
  hub.served.clear();
  hub.faults.cutAfter = undefined;
  hub.faults.corrupt.clear();
  hub.faults.ignoreRange = false;
  hub.faults.refuseRange = false;
  hub.faults.stall = undefined;
  hub.faults.silent = false;
  hub.options.pageSize = Number.POSITIVE_INFINITY;
});
afterEach(async () => {
  await fs.rm(modelsDir, { recursive: true, force: true });
});

describe('listHubVariants', () => {
  it('q4, fp32, fp16 in that order, q4 recommended; each: the side files, its graph and its own data', async () => {
    const listing = await listHubVariants(CHAT, opts());
    expect(listing).toMatchObject({ repo: CHAT, revision: 'main', recommended: 'q4' });
    expect(listing.variants.map((v) => [v.name, v.layout])).toEqual([
      ['q4', 'hf-optimum'],
      ['fp32', 'hf-optimum'],
      ['fp16', 'hf-optimum'],
    ]);
    const want: Record<string, string[]> = {
      q4: Q4,
      fp32: [...SIDE, 'onnx/model.onnx'],
      fp16: [...SIDE, 'onnx/model_fp16.onnx', 'onnx/model_fp16.onnx_data'],
    };
    for (const v of listing.variants) {
      const files = want[v.name] as string[];
      expect(v.files.map((f) => f.path).sort()).toEqual([...files].sort());
      expect(v.files.map((f) => f.to).sort()).toEqual([...files].sort());
      for (const f of v.files) expect(f.size).toBe(Buffer.byteLength(chatRepo[f.path] as Buffer));
      expect(v.bytes).toBe(sizeOf(files));
    }
    // LFS files carry their SHA-256, the others their git blob hash.
    const q4 = listing.variants[0]?.files ?? [];
    expect(q4.find((f) => f.path === 'onnx/model_q4.onnx')?.sha256).toBe(
      createHash('sha256').update(graph).digest('hex'),
    );
    expect(q4.find((f) => f.path === 'config.json')?.blob).toMatch(/^[0-9a-f]{40}$/);
  });

  it('a paged listing (2 entries a page) still has every file', async () => {
    hub.options.pageSize = 2;
    const files = await listHubFiles(CHAT, opts());
    expect(files.map((f) => f.path).sort()).toEqual(Object.keys(chatRepo).sort());
    const pages = hub.requests.filter((r) => r.path.includes('/tree/'));
    expect(pages.length).toBeGreaterThanOrEqual(5); // 8 files and a folder, 2 a page
    expect(pages.slice(1).every((r) => r.path.includes('cursor='))).toBe(true);
    expect((await listHubVariants(CHAT, opts())).variants.map((v) => v.bytes)).toEqual([
      sizeOf(Q4),
      sizeOf([...SIDE, 'onnx/model.onnx']),
      sizeOf([...SIDE, 'onnx/model_fp16.onnx', 'onnx/model_fp16.onnx_data']),
    ]);
  });
});

describe('downloadHubModel', () => {
  let reference: RunnerService;
  let referenceTokens: number[];
  const hosts: RunnerService[] = [];
  const greedy = async (h: RunnerService) =>
    (
      await h.generate({ messages: [{ role: 'user', content: 'Hi' }], maxNewTokens: 8, sampling: { greedy: true } })
        .result
    ).tokenIds;
  beforeAll(async () => {
    reference = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(reference);
    await reference.loadModel(defaultModelDir, { id: 'x' });
    referenceTokens = await greedy(reference);
  }, 60_000);
  afterAll(async () => {
    for (const h of hosts) await h.close();
  });

  it('the recommended variant (q4): a package in the models folder that generates as the original', async () => {
    const progress: DownloadProgress[] = [];
    const { root, variant, listing } = await downloadHubModel(CHAT, modelsDir, {
      ...opts(),
      onProgress: (p) => progress.push(p),
    });
    const folder = path.basename((await planDownload(listing, modelsDir, 'q4')).root);
    expect(folder).toBe('tiny-chat-q4');
    expect(root).toBe(path.join(modelsDir, folder));
    expect(variant.name).toBe('q4');
    expect(await packages()).toEqual([folder]);
    expect(await fs.readdir(modelsDir)).toEqual([folder]); // no staging folder left
    for (const f of Q4) expect((await fs.readFile(path.join(root, f))).equals(chatRepo[f] as Buffer)).toBe(true);
    // It says where it came from (the library and Ollama's names read it); no lock is left in it.
    expect(await hubSourceOf(root)).toEqual({ repo: CHAT, revision: 'main', variant: 'q4', commit: hub.head(CHAT) });
    expect(await missing(path.join(root, '.lock'))).toBe(true);
    expect(await missing(path.join(root, 'onnx/model.onnx'))).toBe(true);
    expect(await missing(path.join(root, 'README.md'))).toBe(true);

    const done = progress.map((p) => p.doneBytes);
    expect(progress.every((p) => p.totalBytes === sizeOf(Q4) && p.repo === CHAT && p.variant === 'q4')).toBe(true);
    expect(done[0]).toBe(0);
    expect(done.at(-1)).toBe(sizeOf(Q4));
    expect(done.every((d, i) => i === 0 || d >= (done[i - 1] as number))).toBe(true);
    // LFS files came from the CDN the hub redirected to.
    expect(hub.requests.some((r) => r.path.startsWith('/cdn/'))).toBe(true);

    const h = new RunnerService({ intraOpNumThreads: 2 });
    hosts.push(h);
    await h.loadModel(root, { id: 'x' });
    expect(await greedy(h)).toEqual(referenceTokens);
    expect(referenceTokens.length).toBeGreaterThan(0);
  });

  it('a download cut off fails with DOWNLOAD_FAILED, saying to run it again', async () => {
    hub.faults.cutAfter = { path: 'onnx/model_q4.onnx', bytes: 300_000 };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({
      code: 'DOWNLOAD_FAILED',
      message: expect.stringMatching(/cut off.*run it again to resume/),
    });
  });

  it('a download cut off fails, leaves nothing in the models folder, and resumes where it stopped', async () => {
    const FILE = 'onnx/model_q4.onnx';
    const size = graph.length;
    // The side files complete before the cut (three files download at a time: one queued behind the graph would
    // otherwise be stopped by it, and fetched on the resume).
    hub.faults.cutAfter = { path: FILE, bytes: 300_000, after: () => placed(SIDE) };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toThrow();
    expect(await packages()).toEqual([]);
    const firstBytes = hub.served.get(FILE) ?? 0;
    expect(firstBytes).toBe(300_000);

    hub.requests.length = 0;
    const progress: DownloadProgress[] = [];
    const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), onProgress: (p) => progress.push(p) });
    // One ranged request (the hub's resolve, and the CDN it redirects to, with the same Range).
    const ranged = hub.requests.filter((r) => r.range);
    expect(ranged.map((r) => r.path.split('/')[1])).toEqual([CHAT.split('/')[0], 'cdn']);
    expect(ranged[1]?.range).toBe(ranged[0]?.range);
    const from = Number(/^bytes=(\d+)-$/.exec(ranged[0]?.range ?? '')?.[1]);
    expect(from).toBeGreaterThan(0);
    expect(from).toBeLessThanOrEqual(300_000);
    // Across both tries, about the file once: what the cut sent, then the rest from where the .part ended.
    expect((hub.served.get(FILE) ?? 0) - firstBytes).toBe(size - from);
    expect(hub.served.get(FILE)).toBeLessThan(size * 1.5);
    // The side files were not fetched again.
    expect(hub.requests.filter((r) => r.path.includes('/resolve/')).map((r) => r.path)).toEqual([
      `/${CHAT}/resolve/${hub.head(CHAT)}/${FILE}`,
    ]);
    expect(progress[0]?.doneBytes).toBe(sizeOf(SIDE) + from);
    expect(progress.at(-1)?.doneBytes).toBe(sizeOf(Q4));
    expect((await fs.readFile(path.join(root, FILE))).equals(graph)).toBe(true);
    expect(await fs.readdir(modelsDir)).toEqual(['tiny-chat-q4']);
    expect((await loadModelSpec(root)).layout).toBe('hf-optimum');
  });

  it('a server that ignores the range: the resume starts the file over, and succeeds', async () => {
    const FILE = 'onnx/model_q4.onnx';
    hub.faults.cutAfter = { path: FILE, bytes: 300_000 };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toThrow();
    hub.faults.ignoreRange = true;
    const progress: DownloadProgress[] = [];
    const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), onProgress: (p) => progress.push(p) });
    expect(hub.requests.some((r) => r.range)).toBe(true);
    expect(hub.served.get(FILE)).toBe(300_000 + graph.length);
    expect(progress.at(-1)?.doneBytes).toBe(sizeOf(Q4));
    expect((await fs.readFile(path.join(root, FILE))).equals(graph)).toBe(true);
    await loadModelSpec(root);
  });

  it('a part the hub will not resume (416): the file comes whole in the same download, which succeeds', async () => {
    const FILE = 'onnx/model_q4.onnx';
    hub.faults.cutAfter = { path: FILE, bytes: 300_000 };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({ code: 'DOWNLOAD_FAILED' });
    hub.faults.refuseRange = true;
    hub.requests.length = 0;
    hub.served.clear();
    const progress: DownloadProgress[] = [];
    const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), onProgress: (p) => progress.push(p) });
    // The ranged request refused, then the file whole.
    expect(hub.requests.filter((r) => r.path.endsWith(FILE)).map((r) => r.range)).toEqual([
      expect.stringMatching(/^bytes=\d+-$/),
      undefined,
    ]);
    expect(hub.served.get(FILE)).toBe(graph.length);
    expect(progress.at(-1)?.doneBytes).toBe(sizeOf(Q4));
    expect(progress.every((p) => p.doneBytes <= p.totalBytes)).toBe(true);
    expect((await fs.readFile(path.join(root, FILE))).equals(graph)).toBe(true);
  });

  it("a part whose bytes are not the file's (complete or not): fetched whole in the same download", async () => {
    const FILE = 'onnx/model_q4.onnx';
    hub.faults.cutAfter = { path: FILE, bytes: 300_000, after: () => placed(SIDE) };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({ code: 'DOWNLOAD_FAILED' });
    const part = path.join(staging('tiny-chat-q4'), `${FILE}.part`);
    // The part as the cut left it (resumed, then found wrong at its end), then one of the file's length.
    const cases: Array<[Buffer, unknown[]]> = [
      [await fs.readFile(part), [expect.stringMatching(/^bytes=\d+-$/), undefined]],
      [Buffer.from(graph), [undefined]],
    ];
    for (const [bytes, ranges] of cases) {
      bytes[10] = (bytes[10] as number) ^ 0xff;
      await fs.writeFile(part, bytes);
      hub.requests.length = 0;
      const progress: DownloadProgress[] = [];
      const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), onProgress: (p) => progress.push(p) });
      expect(hub.requests.filter((r) => r.path.endsWith(FILE)).map((r) => r.range)).toEqual(ranges);
      expect(progress.at(-1)?.doneBytes).toBe(sizeOf(Q4));
      expect(progress.every((p) => p.doneBytes <= p.totalBytes)).toBe(true);
      expect((await fs.readFile(path.join(root, FILE))).equals(graph)).toBe(true);
      // Staged again for the complete part's turn.
      await fs.rm(root, { recursive: true });
      await fs.mkdir(path.dirname(part), { recursive: true });
    }
  });

  it('a complete part (cut before its rename) is checked, not asked for: no range past its end', async () => {
    const FILE = 'onnx/model_q4.onnx';
    hub.faults.cutAfter = { path: FILE, bytes: 300_000, after: () => placed(SIDE) };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({ code: 'DOWNLOAD_FAILED' });
    await fs.writeFile(path.join(staging('tiny-chat-q4'), `${FILE}.part`), graph);
    hub.requests.length = 0;
    const { root } = await downloadHubModel(CHAT, modelsDir, opts());
    expect(hub.requests.filter((r) => r.path.includes('/resolve/') || r.path.startsWith('/cdn/'))).toEqual([]);
    expect((await fs.readFile(path.join(root, FILE))).equals(graph)).toBe(true);
  });

  it.each([
    ['onnx/model_q4.onnx', 'SHA-256'],
    ['tokenizer.json', 'SHA-256'],
    ['config.json', 'git hash'],
  ])('a corrupt %s fails naming it and its %s, is deleted, and a rerun succeeds', async (file, check) => {
    hub.faults.corrupt.add(file);
    const err = await downloadHubModel(CHAT, modelsDir, opts()).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'DOWNLOAD_FAILED', detail: { file } });
    expect((err as Error).message).toContain(file);
    expect((err as Error).message).toContain(check);
    expect(await packages()).toEqual([]);
    expect(await missing(path.join(staging('tiny-chat-q4'), `${file}.part`))).toBe(true);
    expect(await missing(path.join(staging('tiny-chat-q4'), file))).toBe(true);
    hub.faults.corrupt.clear();
    const { root } = await downloadHubModel(CHAT, modelsDir, opts());
    expect((await fs.readFile(path.join(root, file))).equals(chatRepo[file] as Buffer)).toBe(true);
  });

  it('a gated repo: refused without a token (HF_TOKEN named), downloaded with one', async () => {
    for (const token of [undefined, 'hf_wrong']) {
      await expect(
        downloadHubModel(GATED, modelsDir, { ...opts(), ...(token ? { token } : {}) }),
      ).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: expect.stringContaining('HF_TOKEN'),
      });
    }
    hub.requests.length = 0;
    const { root } = await downloadHubModel(GATED, modelsDir, { ...opts(), token: 'hf_secret' });
    expect(root).toBe(path.join(modelsDir, 'gated-chat')); // the only variant: the repo's name alone
    // The graph came from the CDN, another origin, without the token (a signed URL refuses a second credential).
    const cdnSide = hub.requests.filter((r) => r.path.startsWith('/cdn/'));
    expect(cdnSide.length).toBeGreaterThan(0);
    expect(cdnSide.every((r) => r.auth === undefined)).toBe(true);
    const hubSide = hub.requests.filter((r) => !r.path.startsWith('/cdn/'));
    expect(hubSide.some((r) => r.path.includes('/tree/'))).toBe(true);
    expect(hubSide.some((r) => r.path.includes('/resolve/'))).toBe(true);
    expect(hubSide.every((r) => r.auth === 'Bearer hf_secret')).toBe(true);
    await loadModelSpec(root);
  });

  it('HF_TOKEN from the environment when no token is given', async () => {
    process.env.HF_TOKEN = 'hf_secret';
    try {
      await downloadHubModel(GATED, modelsDir, opts());
    } finally {
      delete process.env.HF_TOKEN;
    }
    expect(await packages()).toEqual(['gated-chat']);
  });

  it('refusals: unknown repo or revision, nothing to run, bad names, unknown variant, downloaded already', async () => {
    // As the hub: an unknown repository is a 401 without a token (it hides private ones), a 404 with one.
    await expect(downloadHubModel('nobody/nothing', modelsDir, opts())).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      detail: { status: 401 },
      message: expect.stringMatching(/HTTP 401.*does not exist, or is gated or private: check its owner\/name/),
    });
    for (const [spec, token] of [
      ['nobody/nothing', 'hf_secret'],
      [`${CHAT}@v9`, undefined],
    ] as const) {
      await expect(downloadHubModel(spec, modelsDir, { ...opts(), ...(token ? { token } : {}) })).rejects.toMatchObject(
        {
          code: 'BAD_REQUEST',
          detail: { status: 404 },
          message: expect.stringContaining('HTTP 404'),
        },
      );
    }
    await expect(downloadHubModel('org/readme-only', modelsDir, opts())).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(/no ONNX model.*looks for onnx\/model\*\.onnx beside config\.json/),
    });
    hub.requests.length = 0;
    for (const spec of ['nope', '../x/y', 'a/b/c']) {
      await expect(downloadHubModel(spec, modelsDir, opts())).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: expect.stringContaining('is not a Hugging Face repository'),
      });
    }
    expect(hub.requests).toEqual([]); // refused before asking the hub
    await expect(downloadHubModel(CHAT, modelsDir, { ...opts(), variant: 'int3' })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(/no variant "int3": it offers q4 \(.*\), fp32 \(.*\), fp16 \(.*\)/),
    });
    expect(await fs.readdir(modelsDir)).toEqual([]);

    await downloadHubModel(CHAT, modelsDir, { ...opts(), variant: 'fp32' });
    await expect(downloadHubModel(CHAT, modelsDir, { ...opts(), variant: 'fp32' })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('downloaded already'),
    });
    expect(await packages()).toEqual(['tiny-chat-fp32']);
  });
});

describe.skipIf(!haveGenai)(`onnxruntime-genai exports${haveGenai ? '' : ` (skipped: ${fixturesSkipReason})`}`, () => {
  const REPO = 'org/tiny-gpt2-genai';
  it('variants by folder, the cpu one recommended; its files at the package root, which loads', async () => {
    const listing = await listHubVariants(REPO, opts());
    expect(listing.variants.map((v) => [v.name, v.layout])).toEqual([
      ['cpu_and_mobile/cpu-fp32', 'ort-genai'],
      ['cuda/cuda-fp32', 'ort-genai'],
    ]);
    expect(listing.recommended).toBe('cpu_and_mobile/cpu-fp32');
    const { root } = await downloadHubModel(REPO, modelsDir, { ...opts(), listing });
    expect(root).toBe(path.join(modelsDir, 'tiny-gpt2-genai-cpu_and_mobile-cpu-fp32'));
    expect((await fs.readdir(root)).sort()).toEqual(
      [...(await fs.readdir(GENAI_FIXTURE)), '.kvdesk-source.json'].sort(),
    );
    expect(hub.requests.every((r) => !r.path.includes('/cuda/'))).toBe(true);
    const spec = await loadModelSpec(root);
    expect(spec.layout).toBe('ort-genai');
    expect(spec.numLayers).toBe((await loadModelSpec(GENAI_FIXTURE)).numLayers);
  });
});

describe('what the models folder holds already', () => {
  it("another owner's repository of the same name lands beside it, with its own files", async () => {
    const a = await downloadHubModel(CHAT, modelsDir, opts());
    const b = await downloadHubModel('other-org/tiny-chat', modelsDir, opts());
    expect(path.basename(b.root)).toBe('other-org-tiny-chat-q4');
    const gen = (root: string) => fs.readFile(path.join(root, 'generation_config.json'));
    expect((await gen(a.root)).equals(chatRepo['generation_config.json'] as Buffer)).toBe(true);
    expect((await gen(b.root)).equals(REPOS['other-org/tiny-chat']?.['generation_config.json'] as Buffer)).toBe(true);
    // Each is "downloaded already" under its own name.
    const plan = await planDownload(await listHubVariants('other-org/tiny-chat', opts()), modelsDir);
    expect(plan).toMatchObject({ present: true, root: b.root });
    await expect(downloadHubModel('other-org/tiny-chat', modelsDir, opts())).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      detail: { present: true, root: b.root },
    });
  });

  it('a staged file that no longer matches the hub (a revision moved on) is fetched again; progress ends at the total', async () => {
    hub.faults.cutAfter = {
      path: 'onnx/model_q4.onnx',
      bytes: 1000,
      after: () => placed(['generation_config.json', 'config.json']),
    };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({ code: 'DOWNLOAD_FAILED' });
    const dir = staging('tiny-chat-q4');
    // A complete side file that is not the hub's any more (same size), and a part longer than its file.
    const gen = path.join(dir, 'generation_config.json');
    const bytes = await fs.readFile(gen);
    bytes[0] = (bytes[0] as number) ^ 0x01;
    await fs.writeFile(gen, bytes);
    await fs.writeFile(path.join(dir, 'config.json.part'), Buffer.alloc(50_000));
    await fs.rm(path.join(dir, 'config.json'));
    const progress: DownloadProgress[] = [];
    const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), onProgress: (p) => progress.push(p) });
    expect(
      (await fs.readFile(path.join(root, 'generation_config.json'))).equals(
        chatRepo['generation_config.json'] as Buffer,
      ),
    ).toBe(true);
    expect(progress.at(-1)?.doneBytes).toBe(sizeOf(Q4));
    expect(progress.every((p) => p.doneBytes <= p.totalBytes)).toBe(true);
  });

  it('a branch that moves during a download: every file comes from the commit it was at, which the package records', async () => {
    const listed = hub.head(CHAT);
    const moved = {
      ...chatRepo,
      'tokenizer_config.json': Buffer.from('{"moved": true}'),
      'onnx/model_q4.onnx': Buffer.concat([chatRepo['onnx/model_q4.onnx'] as Buffer, Buffer.from('moved')]),
    };
    let pushed = false;
    try {
      const { root } = await downloadHubModel(CHAT, modelsDir, {
        ...opts(),
        // Once the download has listed the files and begins: the branch moves on.
        onProgress: () => {
          if (!pushed) hub.push(CHAT, moved);
          pushed = true;
        },
      });
      expect(hub.head(CHAT)).not.toBe(listed);
      for (const f of Q4) expect((await fs.readFile(path.join(root, f))).equals(chatRepo[f] as Buffer), f).toBe(true);
      expect((await hubSourceOf(root))?.commit).toBe(listed);
      const fetched = hub.requests.filter((r) => r.path.includes('/resolve/')).map((r) => r.path);
      expect(fetched.length).toBe(Q4.length);
      expect(fetched.every((p) => p.startsWith(`/${CHAT}/resolve/${listed}/`))).toBe(true);
      expect(await packages()).toEqual(['tiny-chat-q4']);
    } finally {
      hub.push(CHAT, chatRepo);
    }
  });

  it('a try after the branch moved on: the parts of the earlier commit are dropped, the new commit downloads whole', async () => {
    const FILE = 'onnx/model_q4.onnx';
    // Cut among the weights (the graphs' first bytes, their structure, are the same in both commits).
    hub.faults.cutAfter = { path: FILE, bytes: Math.floor((chatRepo[FILE] as Buffer).length * 0.8) };
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({ code: 'DOWNLOAD_FAILED' });
    // A later commit's graph: another valid one (other weights), as a re-export would be.
    const changed = await fs.readFile(path.join(graphVariantsModel(), 'onnx/model_q4.onnx'));
    expect(changed.equals(chatRepo[FILE] as Buffer)).toBe(false);
    const later = hub.push(CHAT, { ...chatRepo, [FILE]: changed });
    try {
      hub.served.clear();
      hub.requests.length = 0;
      const { root } = await downloadHubModel(CHAT, modelsDir, opts());
      expect((await fs.readFile(path.join(root, FILE))).equals(changed)).toBe(true);
      expect((await hubSourceOf(root))?.commit).toBe(later);
      // Fetched whole (no range from the earlier commit's part), and no marker left in the package.
      expect(hub.requests.filter((r) => r.path.endsWith(FILE)).map((r) => r.range)).toEqual([undefined]);
      expect(hub.served.get(FILE)).toBe(changed.length);
      expect(await missing(path.join(root, '.kvdesk-commit'))).toBe(true);
    } finally {
      hub.push(CHAT, chatRepo);
    }
  });

  it('files arrive side by side: the graph comes while a side file stalls; a cancel stops them all', async () => {
    hub.faults.stall = 'config.json';
    const abort = new AbortController();
    const run = downloadHubModel(CHAT, modelsDir, { ...opts(), signal: abort.signal }).catch((e: unknown) => e);
    const graphFile = 'onnx/model_q4.onnx';
    // The hub has sent it all and the download has checked it and put it in place (the client can lag the
    // server's last byte, so wait for the file itself, not the hub's count).
    const placed = async () =>
      (hub.served.get(graphFile) ?? 0) >= graph.length &&
      !(await missing(path.join(staging('tiny-chat-q4'), graphFile)));
    for (let i = 0; i < 400 && !(await placed()); i++) await new Promise((r) => setTimeout(r, 25));
    expect(hub.served.get(graphFile)).toBe(graph.length);
    expect(await placed()).toBe(true);
    expect(hub.served.get('config.json') ?? 0).toBeLessThan(chatRepo['config.json']?.length ?? 0);
    abort.abort();
    const err = await run;
    expect((err as Error).name).toBe('AbortError');
    expect(await packages()).toEqual([]);
    // The stalled file's half stays for the next try; the graph is complete in the staging folder.
    expect(await missing(path.join(staging('tiny-chat-q4'), graphFile))).toBe(false);
  });

  it('one download of a package at a time: a second one is refused while the first runs', async () => {
    hub.faults.stall = 'onnx/model_q4.onnx';
    const abort = new AbortController();
    const first = downloadHubModel(CHAT, modelsDir, { ...opts(), signal: abort.signal });
    // Wait until the first holds the staging folder (it has asked for the graph).
    while (!hub.requests.some((r) => r.path.includes('model_q4.onnx'))) await new Promise((r) => setTimeout(r, 10));
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringMatching(/being downloaded already/),
    });
    abort.abort();
    await expect(first).rejects.toThrow();
    hub.faults.stall = undefined;
    // Released: the next one resumes and finishes.
    const { root } = await downloadHubModel(CHAT, modelsDir, opts());
    expect(await missing(path.join(root, '.lock'))).toBe(true);
  });
});

describe('a hub that does not answer', () => {
  it('one that takes the connection and never answers fails within the timeout, saying so', async () => {
    hub.faults.silent = true;
    const started = Date.now();
    const err = await listHubVariants(CHAT, { ...opts(), timeoutMs: 300 }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'DOWNLOAD_FAILED',
      message: `the hub at ${hub.url} accepted the connection but did not answer within 300 ms: try again later, or check HF_ENDPOINT.`,
    });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(hub.requests.length).toBe(1);
  });

  it('a download that stops sending is cut after the timeout without data, and the next try resumes it', async () => {
    hub.faults.stall = 'onnx/model_q4.onnx';
    const err = await downloadHubModel(CHAT, modelsDir, { ...opts(), timeoutMs: 500 }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'DOWNLOAD_FAILED',
      message:
        'onnx/model_q4.onnx: the download was cut off (no data for 500 ms); run it again to resume where it stopped.',
    });
    hub.faults.stall = undefined;
    hub.requests.length = 0;
    const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), timeoutMs: 500 });
    expect(await packages()).toEqual(['tiny-chat-q4']);
    expect(hub.requests.find((r) => r.path.startsWith('/cdn/'))?.range).toBe(`bytes=${graph.length >> 1}-`);
    expect(await missing(path.join(root, '.lock'))).toBe(true);
  });

  it('an endpoint that is no http(s) address is a BAD_REQUEST naming it, not an unreachable hub', async () => {
    for (const endpoint of ['notaurl', 'ftp://hub.example']) {
      await expect(listHubVariants(CHAT, { endpoint })).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: expect.stringContaining(`the hub endpoint "${endpoint}" is not an http(s) address`),
      });
    }
  });
});

describe('a lock left in a staging folder', () => {
  /** The staging folder of the chat package's q4 download, made, with a lock file of `text` in it. */
  async function lockedWith(text: string): Promise<string> {
    const plan = await planDownload(await listHubVariants(CHAT, opts()), modelsDir, 'q4');
    await fs.mkdir(plan.staging, { recursive: true });
    const file = path.join(plan.staging, '.lock');
    await fs.writeFile(file, text);
    return file;
  }

  it('naming this very process (a container started again hands out the dead one’s pid) is stale: taken over', async () => {
    // kvdesk before these locks wrote the bare pid; a pull killed in a container left its pid, which the next
    // container's kvdesk has again.
    await lockedWith(String(process.pid));
    const { root } = await downloadHubModel(CHAT, modelsDir, opts());
    expect(await packages()).toEqual(['tiny-chat-q4']);
    expect(await missing(path.join(root, '.lock'))).toBe(true);
  });

  it('a lock of this pid that none of this process’s downloads holds is stale too', async () => {
    const os = await import('node:os');
    // As this process would write it (its namespace too), but from a process that started earlier.
    const ns = await fs.readlink('/proc/self/ns/pid').catch(() => undefined);
    await lockedWith(JSON.stringify({ pid: process.pid, start: '1', ns, host: os.hostname(), token: 'left-behind' }));
    await downloadHubModel(CHAT, modelsDir, opts());
    expect(await packages()).toEqual(['tiny-chat-q4']);
  });

  it('a lock of a process that lives is refused, naming the lock file to delete; once it is gone, taken over', async () => {
    const { spawn } = await import('node:child_process');
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    try {
      const file = await lockedWith(String(child.pid));
      await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: expect.stringContaining(`being downloaded already`),
      });
      await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toThrow(
        `by process ${child.pid}): wait for it to end. If no kvdesk is downloading it, delete ${file} and download again.`,
      );
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
    await downloadHubModel(CHAT, modelsDir, opts());
    expect(await packages()).toEqual(['tiny-chat-q4']);
  });

  it('a holder out of sight (another container or machine) holds it while it touches the file, then not', async () => {
    const holder = { pid: 1, ns: 'pid:[1]', host: 'another-box', token: 'theirs', since: '2025-01-01T00:00:00Z' };
    const file = await lockedWith(JSON.stringify(holder));
    await expect(downloadHubModel(CHAT, modelsDir, opts())).rejects.toThrow(
      /being downloaded already \(into .*, by process 1 on another-box \(since 2025-01-01T00:00:00Z\), in another container or machine, which touched the lock \d+ s ago; it is taken over once untouched for 20 s\)/,
    );
    // Not touched for a minute: its holder is gone.
    const old = new Date(Date.now() - 60_000);
    await fs.utimes(file, old, old);
    await downloadHubModel(CHAT, modelsDir, opts());
    expect(await packages()).toEqual(['tiny-chat-q4']);
  });
});

describe('staging folders that no download would ever use', () => {
  it('a download whose files arrive but do not make a package deletes them, and says so', async () => {
    const err = await downloadHubModel('org/broken', modelsDir, opts()).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'PACKAGE_INVALID',
      message: expect.stringMatching(
        /org\/broken \(fp32\) downloaded, but is not a package kvdesk can load: .*onnx\/model\.onnx.*Its files \(.*\) were deleted: downloading it again brings the same package/,
      ),
    });
    expect((err as Error).message).not.toContain('.partial');
    expect((err as Error).message).not.toContain('..');
    expect(await fs.readdir(modelsDir)).toEqual([]);
  });

  it('once a package is in place, its stopped downloads at other revisions go; other packages’ and held ones stay', async () => {
    const { spawn } = await import('node:child_process');
    hub.options.revisions = ['main', 'v1', 'v2', 'v3'];
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    try {
      hub.faults.stall = 'onnx/model_q4.onnx';
      for (const rev of ['v1', 'v2']) {
        const abort = new AbortController();
        hub.requests.length = 0;
        const run = downloadHubModel(`${CHAT}@${rev}`, modelsDir, { ...opts(), signal: abort.signal });
        while (!hub.requests.some((r) => r.path.includes('model_q4.onnx'))) await new Promise((r) => setTimeout(r, 10));
        abort.abort();
        await expect(run).rejects.toThrow();
      }
      hub.faults.stall = undefined;
      const stopped = (await fs.readdir(modelsDir)).filter((n) => n.endsWith('.partial'));
      expect(stopped).toHaveLength(2);
      // One at v3 another kvdesk is writing now (its lock names a live process), and another package's.
      const v3 = (await planDownload(await listHubVariants(`${CHAT}@v3`, opts()), modelsDir, 'q4')).staging;
      await fs.mkdir(v3);
      await fs.writeFile(path.join(v3, '.lock'), String(child.pid));
      const other = path.join(modelsDir, '.tiny-chat-fp16.0123456789ab.partial');
      await fs.mkdir(other);
      const log: string[] = [];
      const { root } = await downloadHubModel(CHAT, modelsDir, { ...opts(), log: (l) => log.push(l) });
      expect((await fs.readdir(modelsDir)).sort()).toEqual(
        [path.basename(other), path.basename(v3), path.basename(root)].sort(),
      );
      expect(log).toHaveLength(2);
      for (const name of stopped) {
        expect(log.join('\n')).toContain(`removed ${path.join(modelsDir, name)} (`);
      }
      expect(log[0]).toContain(`which no download resumes: ${root} is there already`);
    } finally {
      hub.options.revisions = ['main'];
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
  });
});
