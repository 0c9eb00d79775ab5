/**
 * The packages a Hugging Face repository's file list makes (hubVariants), and repository names (parseRepo): pure,
 * on synthetic listings, no network.
 */
import { describe, expect, it } from 'vitest';
import {
  type HubFile,
  type HubSource,
  hubVariants,
  listHubFiles,
  parseRepo,
  pulledEntry,
  pulledNameOf,
  pullNameOf,
  repoSpec,
  splitPullName,
} from '../../../src/main/host/hub-download';
import { pullTarget } from '../../../src/main/server/ollama-routes';

const file = (path: string, size = 10, extra: Partial<HubFile> = {}): HubFile => ({ path, size, ...extra });
const byName = (vs: ReturnType<typeof hubVariants>) => Object.fromEntries(vs.map((v) => [v.name, v]));
const paths = (v: { files: Array<{ path: string }> } | undefined) => v?.files.map((f) => f.path).sort();

describe('hubVariants: transformers.js / Optimum exports', () => {
  const SIDE = [
    'config.json',
    'generation_config.json',
    'tokenizer.json',
    'tokenizer_config.json',
    'chat_template.jinja',
    'merges.txt',
  ];
  const listing: HubFile[] = [
    ...SIDE.map((p) => file(p, 100)),
    file('README.md'),
    file('.gitattributes'),
    file('banner.png', 5000),
    file('assets/diagram.json'), // not at the root: not a side file
    file('onnx/model.onnx', 1000, { sha256: 'a'.repeat(64) }),
    file('onnx/model.onnx_data', 50_000),
    file('onnx/model.onnx_data_1', 30_000),
    file('onnx/model_q4f16.onnx', 400),
    file('onnx/model_q4.onnx', 600),
    file('onnx/model_q4.onnx_data', 9000),
    file('onnx/decoder_model_merged.onnx', 700), // not a model*.onnx graph
  ];
  const vs = hubVariants(listing);
  const v = byName(vs);

  it('one variant per graph, best on a CPU first: q4, fp32 (model.onnx), q4f16', () => {
    expect(vs.map((x) => x.name)).toEqual(['q4', 'fp32', 'q4f16']);
    expect(vs.every((x) => x.layout === 'hf-optimum')).toBe(true);
  });

  it('each variant: the root side files, its graph and its own external data only', () => {
    expect(paths(v.fp32)).toEqual(
      [...SIDE, 'onnx/model.onnx', 'onnx/model.onnx_data', 'onnx/model.onnx_data_1'].sort(),
    );
    expect(paths(v.q4)).toEqual([...SIDE, 'onnx/model_q4.onnx', 'onnx/model_q4.onnx_data'].sort());
    expect(paths(v.q4f16)).toEqual([...SIDE, 'onnx/model_q4f16.onnx'].sort());
  });

  it('files keep their place in the package (to = path), hashes and sizes; bytes add up', () => {
    for (const x of vs) {
      for (const f of x.files) expect(f.to).toBe(f.path);
      expect(x.bytes).toBe(x.files.reduce((n, f) => n + f.size, 0));
    }
    expect(v.fp32?.bytes).toBe(600 + 1000 + 50_000 + 30_000);
    expect(v.fp32?.files.find((f) => f.path === 'onnx/model.onnx')?.sha256).toBe('a'.repeat(64));
  });

  it('model.onnx.data (a dot) is a data file too; a graph at the root takes its root data', () => {
    const vs2 = hubVariants([
      file('config.json'),
      file('model.onnx'),
      file('model.onnx.data', 77),
      file('other.onnx_data'),
    ]);
    expect(vs2.map((x) => [x.name, paths(x)])).toEqual([['fp32', ['config.json', 'model.onnx', 'model.onnx.data']]]);
  });

  // The hub lists a tree sorted by path, so root graphs (model*.onnx) come before onnx/model*.onnx.
  const BOTH = [
    file('config.json'),
    file('model.onnx', 1),
    file('model_int8.onnx', 2),
    file('onnx/model.onnx', 3),
    file('onnx/model.onnx_data', 4),
  ];
  const checkBoth = (listing: HubFile[]) => {
    const vs2 = hubVariants(listing);
    const w = byName(vs2);
    expect(vs2.map((x) => x.name)).toEqual(['int8', 'fp32']);
    expect(paths(w.fp32)).toEqual(['config.json', 'onnx/model.onnx', 'onnx/model.onnx_data']);
    expect(paths(w.int8)).toEqual(['config.json', 'model_int8.onnx']);
  };

  it('graphs both in onnx/ and at the root, onnx/ listed first: onnx/ wins for a name, the root adds the others', () => {
    checkBoth([BOTH[0], BOTH[3], BOTH[4], BOTH[1], BOTH[2]] as HubFile[]);
  });

  it("graphs both in onnx/ and at the root, in the hub's order: onnx/ still wins", () => {
    checkBoth(BOTH);
  });

  it('graphs only in other folders, or no config.json: nothing runnable', () => {
    expect(hubVariants([file('config.json'), file('weights/model.onnx')])).toEqual([]);
    expect(hubVariants([file('onnx/model.onnx'), file('tokenizer.json')])).toEqual([]);
  });
});

describe('hubVariants: onnxruntime-genai folders', () => {
  const FILES = ['genai_config.json', 'model.onnx', 'model.onnx.data', 'tokenizer.json', 'tokenizer_config.json'];
  const listing: HubFile[] = [
    file('README.md'),
    file('config.json'),
    ...FILES.map((f) => file(`cpu_and_mobile/cpu-int4-rtn-block-32/${f}`, 100)),
    file('cpu_and_mobile/cpu-int4-rtn-block-32/extra/notes.txt'), // a subfolder: not the package's
    ...FILES.map((f) => file(`cuda/cuda-fp16/${f}`, 200)),
    file('cuda/README.md'), // a folder without genai_config.json
  ];
  const vs = hubVariants(listing);

  it('a variant per folder with genai_config.json, named by the folder', () => {
    expect(vs.map((v) => [v.name, v.layout])).toEqual([
      ['cpu_and_mobile/cpu-int4-rtn-block-32', 'ort-genai'],
      ['cuda/cuda-fp16', 'ort-genai'],
    ]);
  });

  it("the folder's own files only, at the package root (to = basename)", () => {
    for (const v of vs) {
      expect(v.files.map((f) => f.to).sort()).toEqual([...FILES].sort());
      for (const f of v.files) expect(f.path).toBe(`${v.name}/${f.to}`);
    }
    expect(vs.map((v) => v.bytes)).toEqual([500, 1000]);
  });

  it('genai_config.json at the root: one variant, "default", of the root files', () => {
    const root = hubVariants([file('genai_config.json'), file('model.onnx'), file('sub/x.onnx')]);
    expect(root.map((v) => [v.name, paths(v)])).toEqual([['default', ['genai_config.json', 'model.onnx']]]);
  });
});

describe('hubVariants: onnx-genai and nothing runnable', () => {
  it('inference_metadata.yaml at the root: the root is the package', () => {
    const vs = hubVariants([
      file('inference_metadata.yaml'),
      file('decoder.onnx', 500),
      file('tokenizer.json'),
      file('docs/guide.md'),
    ]);
    expect(vs).toHaveLength(1);
    expect(vs[0]).toMatchObject({ name: 'default', layout: 'onnx-genai', bytes: 520 });
    expect(paths(vs[0])).toEqual(['decoder.onnx', 'inference_metadata.yaml', 'tokenizer.json']);
    expect(vs[0]?.files.every((f) => f.to === f.path)).toBe(true);
  });

  it('no ONNX model: []', () => {
    expect(hubVariants([])).toEqual([]);
    expect(hubVariants([file('README.md'), file('config.json'), file('model.safetensors', 1e9)])).toEqual([]);
  });
});

describe('parseRepo', () => {
  it('owner/name, with a revision after @ or given', () => {
    expect(parseRepo('onnx-community/Qwen3-0.6B-ONNX')).toEqual({
      repo: 'onnx-community/Qwen3-0.6B-ONNX',
      revision: 'main',
    });
    expect(parseRepo('owner/name@v1.0')).toEqual({ repo: 'owner/name', revision: 'v1.0' });
    expect(parseRepo('owner/name@refs/pr/3')).toEqual({ repo: 'owner/name', revision: 'refs/pr/3' });
    expect(parseRepo('owner/name', 'dev')).toEqual({ repo: 'owner/name', revision: 'dev' });
    expect(parseRepo('owner/name@dev', 'dev')).toEqual({ repo: 'owner/name', revision: 'dev' });
    // Two revisions that differ are one too many.
    expect(() => parseRepo('owner/name@v1', 'dev')).toThrow(/names revision v1, and the request dev: give one/);
  });

  it('hf.co/, huggingface.co/ and https:// addresses', () => {
    expect(parseRepo('huggingface.co/owner/name')).toEqual({ repo: 'owner/name', revision: 'main' });
    expect(parseRepo('http://hf.co/owner/name')).toEqual({ repo: 'owner/name', revision: 'main' });
    expect(parseRepo('hf.co/owner/name')).toEqual({ repo: 'owner/name', revision: 'main' });
    expect(parseRepo('https://huggingface.co/owner/name')).toEqual({ repo: 'owner/name', revision: 'main' });
    expect(parseRepo('https://huggingface.co/owner/name@abc123')).toEqual({ repo: 'owner/name', revision: 'abc123' });
  });

  it.each([
    'nope',
    '../x/y',
    'a/b/c',
    'owner/../x',
    'owner/a..b',
    '/owner/name',
    'owner/',
    'owner/na me',
    'https://example.com/owner/name',
    '',
  ])('refuses %j as a repository (BAD_REQUEST, field repo)', (spec) => {
    expect(() => parseRepo(spec)).toThrow(expect.objectContaining({ code: 'BAD_REQUEST', detail: { field: 'repo' } }));
    expect(() => parseRepo(spec)).toThrow(/is not a Hugging Face repository: write it as owner\/name/);
  });

  it.each(['owner/name@', 'owner/name@../x', 'owner/name@a b'])('refuses the revision of %j', (spec) => {
    expect(() => parseRepo(spec)).toThrow(
      expect.objectContaining({ code: 'BAD_REQUEST', detail: { field: 'revision' } }),
    );
  });
});

describe('what a pull names: splitPullName (kvdesk pull) and pullTarget (/api/pull)', () => {
  it('the variant after the colon, the revision before it or after the variant', () => {
    const cases: Array<[string, { repo: string; revision?: string; variant?: string }]> = [
      ['owner/name', { repo: 'owner/name' }],
      ['hf.co/owner/name@v1', { repo: 'owner/name', revision: 'v1' }],
      ['owner/name:q4', { repo: 'owner/name', variant: 'q4' }],
      ['owner/name:latest', { repo: 'owner/name' }],
      ['owner/name@main:q4', { repo: 'owner/name', revision: 'main', variant: 'q4' }],
      // The revision after the variant: `q4@main` was taken for the variant's name.
      ['owner/name:q4@main', { repo: 'owner/name', revision: 'main', variant: 'q4' }],
      ['hf.co/owner/name:q4@abc123', { repo: 'owner/name', revision: 'abc123', variant: 'q4' }],
      ['owner/name:latest@refs/pr/3', { repo: 'owner/name', revision: 'refs/pr/3' }],
      ['owner/name@v1:q4@v1', { repo: 'owner/name', revision: 'v1', variant: 'q4' }],
      [
        'owner/name:cpu_and_mobile/cpu-int4@dev',
        { repo: 'owner/name', revision: 'dev', variant: 'cpu_and_mobile/cpu-int4' },
      ],
    ];
    for (const [name, split] of cases) {
      expect(splitPullName(name), name).toEqual(split);
      const { variant, revision } = split;
      // The downloads take the repository and its revision as one spec.
      const spec = repoSpec(split);
      expect(spec).toBe(revision === undefined ? split.repo : `${split.repo}@${revision}`);
      expect(pullTarget({ model: name }), name).toEqual({ repo: spec, stream: true, ...(variant ? { variant } : {}) });
      expect(parseRepo(spec)).toEqual({ repo: split.repo, revision: revision ?? 'main' });
    }
    // Without a colon, the repository and revision as given, apart, for parseRepo to refuse (`owner/name@` has an
    // empty revision, which it refuses as no revision).
    expect(splitPullName('./folder@x')).toEqual({ repo: './folder', revision: 'x' });
    expect(splitPullName('owner/name@')).toEqual({ repo: 'owner/name', revision: '' });
    expect(repoSpec({ repo: 'owner/name', revision: '' })).toBe('owner/name@');
    // No repository before the colon: the name goes on as given, for parseRepo to refuse.
    expect(splitPullName('https://example.com/x')).toBeUndefined();
    expect(pullTarget({ name: 'https://example.com/x:q4', stream: false })).toEqual({
      repo: 'https://example.com/x:q4',
      stream: false,
    });
  });

  it('two different revisions are refused, saying the form to use', () => {
    expect(() => splitPullName('owner/name@v1:q4@v2')).toThrow(
      expect.objectContaining({
        code: 'BAD_REQUEST',
        message: '"owner/name@v1:q4@v2" names two revisions, v1 and v2: name one, as owner/name@revision:variant.',
      }),
    );
    expect(() => pullTarget({ model: 'owner/name@v1:q4@v2' })).toThrow(
      expect.objectContaining({ status: 400, message: expect.stringContaining('names two revisions, v1 and v2') }),
    );
  });
});

describe('a pulled package by any name pull takes: pulledNameOf and pulledEntry', () => {
  const commit = 'abcdef0123456789abcdef0123456789abcdef01';
  const source = (variant: string, extra: Partial<HubSource> = {}): HubSource => ({
    repo: 'Owner/Name',
    revision: 'main',
    variant,
    commit,
    ...extra,
  });
  const entries = [
    { id: 'name-q4', root: '/m/name-q4', source: source('q4') },
    { id: 'name-fp32', root: '/m/name-fp32', source: source('fp32') },
    { id: 'own', root: '/elsewhere/own' },
  ];
  const replace = (e: { root: string }, named: Parameters<typeof pullNameOf>[0]) =>
    `delete ${e.root}, then pull ${pullNameOf(named)}`;
  const idOf = (name: string) => pulledEntry(entries, name, replace)?.id;

  it('reads the repository, the variant and the revision wherever pull takes them', () => {
    const cases: Array<[string, ReturnType<typeof pulledNameOf>]> = [
      ['owner/name', { repo: 'owner/name' }],
      ['hf.co/owner/name:latest', { repo: 'owner/name' }],
      ['owner/name@main', { repo: 'owner/name', revision: 'main' }],
      ['hf.co/owner/name:q4@main', { repo: 'owner/name', variant: 'q4', revision: 'main' }],
      ['owner/name@dev:q4', { repo: 'owner/name', variant: 'q4', revision: 'dev' }],
      ['owner/name:cpu/int4@refs/pr/3', { repo: 'owner/name', variant: 'cpu/int4', revision: 'refs/pr/3' }],
      ['default', undefined],
      ['./folder', undefined],
      ['owner/name@', undefined],
    ];
    for (const [name, named] of cases) {
      expect(pulledNameOf(name), name).toEqual(named);
      if (named) expect(pulledNameOf(pullNameOf(named)), name).toEqual(named);
    }
  });

  it('finds the package at the revision it was pulled at: the branch, the commit or its first digits', () => {
    for (const name of [
      'hf.co/owner/name:q4',
      'hf.co/owner/name:q4@main',
      'owner/name@main:q4',
      `owner/name:q4@${commit}`,
      'owner/name:q4@abcdef0',
      // A commit in capitals, as some tools print it.
      'owner/name:q4@ABCDEF0',
      `owner/name:q4@${commit.toUpperCase()}`,
      'owner/name@main',
      'owner/name',
    ]) {
      expect(idOf(name), name).toBe('name-q4');
    }
    expect(idOf('hf.co/owner/name:fp32@main')).toBe('name-fp32');
    // Not pulled at all: nothing (the caller says what there is).
    expect(idOf('owner/name:int8@main')).toBeUndefined();
    expect(idOf('other/name@main')).toBeUndefined();
    expect(idOf('default')).toBeUndefined();
  });

  it('a revision other than the one pulled is refused, naming the one there and how to have the other', () => {
    expect(() => idOf('hf.co/owner/name:q4@dev')).toThrow(
      expect.objectContaining({
        code: 'BAD_REQUEST',
        message:
          '"hf.co/owner/name:q4@dev" names owner/name (q4) at revision dev, and the library\'s name-q4 was pulled from Owner/Name:q4 at main (commit abcdef012345), not at dev: name it as Owner/Name:q4 or Owner/Name@main:q4, or, to have dev instead, delete /m/name-q4, then pull owner/name@dev:q4.',
        detail: expect.objectContaining({ field: 'model', root: '/m/name-q4' }),
      }),
    );
    // No variant named: the most recently loaded package of the repository says so, pulled again as its variant.
    expect(() => idOf('owner/name@abcdef1')).toThrow(/name-q4 was pulled .* then pull owner\/name@abcdef1:q4\.$/);
    // Two revisions: refused as pull refuses them.
    expect(() => idOf('owner/name@v1:q4@v2')).toThrow(/names two revisions, v1 and v2/);
  });

  it('a package that recorded no revision is taken at any', () => {
    const old = [{ id: 'old', root: '/m/old', source: { repo: 'owner/name', revision: '', variant: 'q4' } }];
    expect(pulledEntry(old, 'owner/name:q4@dev', replace)?.id).toBe('old');
  });
});

describe('listHubFiles: what a listing may hold', () => {
  it('leaves out paths that could leave the package folder, and reads LFS entries as their content', async () => {
    const listing = [
      { type: 'file', path: 'config.json', size: 5, oid: 'b'.repeat(40) },
      { type: 'file', path: '..', size: 5 },
      { type: 'file', path: '../evil.json', size: 5 },
      { type: 'file', path: 'onnx/../../x.onnx', size: 5 },
      { type: 'file', path: '/abs.json', size: 5 },
      { type: 'file', path: 'a\\b.json', size: 5 },
      { type: 'directory', path: 'onnx' },
      {
        type: 'file',
        path: 'onnx/model.onnx',
        size: 130,
        oid: 'c'.repeat(40),
        lfs: { oid: 'd'.repeat(64), size: 9000 },
      },
    ];
    const fetch = (async () => new Response(JSON.stringify(listing))) as typeof globalThis.fetch;
    const files = await listHubFiles('owner/repo', { endpoint: 'http://hub.invalid', fetch });
    expect(files).toEqual([
      { path: 'config.json', size: 5, blob: 'b'.repeat(40) },
      { path: 'onnx/model.onnx', size: 9000, sha256: 'd'.repeat(64) },
    ]);
  });
});
