/**
 * A package file that is a symbolic link looping back to itself (`model.onnx` → `a.onnx` → `model.onnx`) used to be
 * listed as a graph variant, then refused as "Could not read model.onnx (ELOOP…). Check that the folder and its
 * files are readable (their permissions)", advice no permission change could follow. It is refused as a link that
 * loops now, and a graph that cannot be followed is no variant to choose.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { onnxGenaiPackage, removeTempDirs } from '../../unit/packages/package-builder';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editsHost, externalWeights } from './edited-default';

const edits = editsHost();
afterAll(removeTempDirs);

const loops = (file: string) =>
  `${file} is a symbolic link that loops (following it leads back to itself); replace it with the real file.`;

/** `a` → `b` → `a`, inside `dir` (b left out: `a` links to itself). */
async function loop(dir: string, a: string, b = a): Promise<void> {
  await fs.rm(path.join(dir, a), { force: true });
  await fs.rm(path.join(dir, b), { force: true });
  await fs.symlink(path.basename(b), path.join(dir, a));
  if (b !== a) await fs.symlink(path.basename(a), path.join(dir, b));
}

describe('a symbolic link that loops', () => {
  it('tokenizer.json: refused as a link that loops, not as a matter of permissions', async () => {
    const dir = await copyDefault('loop-tokenizer');
    await loop(dir, 'tokenizer.json');
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json' });
    expect(err.message).toBe(loops('tokenizer.json'));
    expect(err.message).not.toMatch(/permissions|ELOOP/);
  });

  it('the only graph (model.onnx → a.onnx → model.onnx): refused naming it', async () => {
    const dir = await copyDefault('loop-graph');
    await loop(dir, 'onnx/model.onnx', 'onnx/a.onnx');
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx' });
    expect(err.message).toBe(loops('onnx/model.onnx'));
  });

  it('a graph variant beside a real one: left out of the variants, with a warning; asked for, refused', async () => {
    const dir = await copyDefault('loop-variant');
    await loop(dir, 'onnx/model_q4.onnx');
    const spec = await loadModelSpec(dir);
    expect(spec.graphPath).toBe(path.join(dir, 'onnx/model.onnx'));
    // One graph to choose from: no list of variants, none of them the loop.
    expect(spec.graphVariants).toBeUndefined();
    expect(spec.warnings).toContain(
      `${loops('onnx/model_q4.onnx')} Until then it is left out of the graphs to choose from.`,
    );
    const err = await refusal(loadModelSpec(dir, { graphVariant: 'q4' }), { file: 'onnx/model_q4.onnx' });
    expect(err.message).toBe(loops('onnx/model_q4.onnx'));
    // It loads and runs on the real graph.
    const info = await edits.host.loadModel(dir, { id: 'loop-variant' });
    expect(info.spec.graphPath).toBe(path.join(dir, 'onnx/model.onnx'));
  });

  it("the graph's external data: refused naming the data file", async () => {
    const dir = await copyDefault('loop-data');
    await externalWeights(dir);
    await loop(dir, 'onnx/model.onnx.data', 'onnx/loop-b');
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx' });
    expect(err.message).toContain(loops('onnx/model.onnx.data'));
    expect(err.message).not.toMatch(/permissions/);
  });

  it('in an onnx-genai package: decoder.onnx or the only graph refused, another graph left out of the choice', async () => {
    const decoder = await onnxGenaiPackage(
      {},
      { 'model.onnx': await fs.readFile(path.join(await onnxGenaiPackage(), 'decoder.onnx')) },
    );
    await loop(decoder, 'decoder.onnx');
    const err = await refusal(loadModelSpec(decoder), { file: 'decoder.onnx' });
    expect(err.message).toBe(loops('decoder.onnx'));

    const only = await onnxGenaiPackage();
    await loop(only, 'decoder.onnx', 'a.onnx');
    expect((await refusal(loadModelSpec(only))).message).toMatch(/^(a|decoder)\.onnx is a symbolic link that loops/);

    const two = await onnxGenaiPackage();
    await fs.rename(path.join(two, 'decoder.onnx'), path.join(two, 'model.onnx'));
    await fs.symlink('other.onnx', path.join(two, 'other.onnx'));
    // Without the loop, two graphs would need --variant: the loop is none to choose.
    const spec = await loadModelSpec(two);
    expect(spec.graphPath).toBe(path.join(two, 'model.onnx'));
    expect(spec.warnings).toContain(`${loops('other.onnx')} Until then it is left out of the graphs to choose from.`);
    await refusal(loadModelSpec(two, { graphVariant: 'other' }), { file: 'other.onnx' });
  });
});
