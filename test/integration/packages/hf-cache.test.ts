/**
 * A package in the Hugging Face download cache (`hf download` without --local-dir): every file of
 * `models--me--tiny/snapshots/<revision>/` is a symlink into `models--me--tiny/blobs/`. It was refused ("resolves
 * through a symlink … outside the package folder"); it loads and runs now, its external weights read through their
 * link too, and gives the same tokens as the same package with real files.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { asHfCache, removeTempDirs } from '../../unit/packages/package-builder';
import { copyDefault, editsHost, externalWeights } from './edited-default';

const edits = editsHost();
afterAll(removeTempDirs);

describe('a snapshot of the Hugging Face cache', () => {
  it('loads through its links into blobs/ (graph and external weights) and generates as the real files do', async () => {
    const plain = await copyDefault('plain');
    await externalWeights(plain);
    const { snapshot } = await asHfCache(plain);
    const run = async (dir: string, id: string) => {
      const info = await edits.host.loadModel(dir, { id });
      const done = await edits.host.generate({
        model: id,
        promptIds: [1, 2, 3, 4],
        maxNewTokens: 6,
        sampling: { greedy: true },
      }).result;
      return { info, tokens: done.tokenIds };
    };
    const real = await run(plain, 'plain');
    const cached = await run(snapshot, 'me-tiny');
    expect(cached.info.spec.displayName).toBe('me/tiny');
    expect(cached.info.spec.weightsBytes).toBe(real.info.spec.weightsBytes);
    expect(cached.tokens).toHaveLength(6);
    expect(cached.tokens).toEqual(real.tokens);
  });
});
