import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelLibrary } from '../../../src/main/host/model-library';
import { loadModelSpec } from '../../../src/main/packages/index';
import { withModelId } from '../../../src/main/packages/spec-assembly';
import { asHfCache, hfPackage, removeTempDirs } from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

describe('a package in the Hugging Face download cache', () => {
  it('loads a snapshot whose files are all symlinks into the repo blobs/', async () => {
    const plain = await loadModelSpec(await hfPackage());
    const { snapshot } = await asHfCache(await hfPackage());
    expect((await fs.lstat(path.join(snapshot, 'config.json'))).isSymbolicLink()).toBe(true);
    const spec = await loadModelSpec(snapshot);
    expect(spec.layout).toBe('hf-optimum');
    // The revision folder is a hash: the model is named after the repo.
    expect(spec.displayName).toBe('me/tiny');
    expect(spec.id).toBe('me-tiny');
    expect(spec.root).toBe(await fs.realpath(snapshot));
    // The graph is found by its name in the snapshot (external weights are looked up beside it), not as a blob.
    expect(spec.graphPath).toBe(path.join(await fs.realpath(snapshot), 'onnx', 'model.onnx'));
    expect(spec.weightsBytes).toBe(plain.weightsBytes);
    expect(spec.files).toEqual(plain.files);
    expect(spec.eosTokenIds).toEqual(plain.eosTokenIds);
    expect(spec.numLayers).toBe(plain.numLayers);
  });

  it("is given its repo's name as its id by the library (serve, the window), not its revision hash", async () => {
    const { snapshot } = await asHfCache(await hfPackage());
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-hf-library-'));
    try {
      const library = await ModelLibrary.open(dataDir);
      const real = await fs.realpath(snapshot);
      expect(await library.idFor(real)).toBe('me-tiny');
      // A second folder of that name is told apart by the repo's name too.
      const spec = await loadModelSpec(snapshot);
      expect(withModelId(spec, 'me-tiny-2').displayName).toBe('me/tiny (me-tiny-2)');
    } finally {
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  });

  it('names a folder inside the snapshot after the repo and that folder', async () => {
    const pkg = await hfPackage({}, {}, 'cpu-int4');
    const outer = path.dirname(pkg);
    const { snapshot } = await asHfCache(outer);
    const spec = await loadModelSpec(path.join(snapshot, 'cpu-int4'));
    expect(spec.displayName).toBe('me/tiny/cpu-int4');
  });

  it('still refuses a link in a snapshot that leads outside the repo blobs/', async () => {
    const { snapshot, repo } = await asHfCache(await hfPackage());
    const elsewhere = path.join(repo, 'elsewhere');
    await fs.mkdir(elsewhere);
    await fs.copyFile(path.join(snapshot, 'tokenizer.json'), path.join(elsewhere, 'tokenizer.json'));
    await fs.rm(path.join(snapshot, 'tokenizer.json'));
    await fs.symlink('../../elsewhere/tokenizer.json', path.join(snapshot, 'tokenizer.json'));
    const err = await refusal(loadModelSpec(snapshot), { file: 'tokenizer.json' });
    expect(err.message).toContain('resolves through a symlink to');
    expect(err.message).toContain('outside the package folder');
  });

  it('refuses links through a blobs that is itself a link (to / it would let a snapshot read any file)', async () => {
    const { snapshot, repo } = await asHfCache(await hfPackage());
    // The real blobs moved out of the repo, and a link to the folder above it in its place.
    const away = path.join(path.dirname(repo), 'away');
    await fs.rename(path.join(repo, 'blobs'), away);
    await fs.symlink(path.dirname(repo), path.join(repo, 'blobs'));
    const target = path.join(snapshot, 'config.json');
    const blob = path.basename(await fs.readlink(target));
    await fs.rm(target);
    await fs.symlink(path.join('..', '..', 'blobs', 'away', blob), target);
    const err = await refusal(loadModelSpec(snapshot), { file: 'config.json' });
    expect(err.message).toContain('outside the package folder');
  });

  it('refuses links into a blobs/ folder that is not a Hugging Face cache repo', async () => {
    const { snapshot, repo } = await asHfCache(await hfPackage());
    // The same tree under a folder not named models--*: nothing marks it as the cache.
    const other = path.join(path.dirname(repo), 'copies');
    await fs.rename(repo, other);
    const err = await refusal(loadModelSpec(path.join(other, 'snapshots', 'abc123')), { file: 'config.json' });
    expect(err.message).toContain('outside the package folder');
    expect(snapshot).toContain('models--me--tiny');
  });

  it('points from the repo folder to its snapshot', async () => {
    const { repo, snapshot } = await asHfCache(await hfPackage());
    const err = await refusal(loadModelSpec(repo), { file: '.' });
    expect(err.message).toContain(
      `This is a repo folder of the Hugging Face cache: pick its snapshot folder instead, ${snapshot}.`,
    );
  });
});
