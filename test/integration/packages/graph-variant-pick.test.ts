/**
 * A Hugging Face package with both `model.onnx` and `onnx/model.onnx` (both fp32) must be loaded by naming one graph,
 * and the refusal says to pick it by its path; but the pick matched name, path and file name at once, so
 * `model.onnx` (the root's path, and the other's file name) matched both, as `fp32` does: neither could be loaded.
 * An exact path wins now, then a name, then a file name.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editsHost } from './edited-default';

const edits = editsHost();

/** The default package with its graph at the root too, and a model_q4.onnx beside it there. */
async function bothGraphs(name: string): Promise<string> {
  const dir = await copyDefault(name);
  await fs.copyFile(path.join(dir, 'onnx/model.onnx'), path.join(dir, 'model.onnx'));
  await fs.copyFile(path.join(dir, 'onnx/model.onnx'), path.join(dir, 'model_q4.onnx'));
  return dir;
}

describe('picking one graph of several by --variant', () => {
  it('by path: model.onnx is the root one, onnx/model.onnx the other', async () => {
    const dir = await bothGraphs('pick-path');
    expect((await loadModelSpec(dir, { graphVariant: 'model.onnx' })).graphPath).toBe(path.join(dir, 'model.onnx'));
    expect((await loadModelSpec(dir, { graphVariant: 'onnx/model.onnx' })).graphPath).toBe(
      path.join(dir, 'onnx/model.onnx'),
    );
    // Loaded so, it runs.
    const info = await edits.host.loadModel(dir, { id: 'pick-path', variant: 'model.onnx' });
    expect(info.spec.graphPath).toBe(path.join(dir, 'model.onnx'));
  });

  it('by name, then by file name', async () => {
    const dir = await bothGraphs('pick-name');
    expect((await loadModelSpec(dir, { graphVariant: 'q4' })).graphPath).toBe(path.join(dir, 'model_q4.onnx'));
    expect((await loadModelSpec(dir, { graphVariant: 'model_q4.onnx' })).graphPath).toBe(
      path.join(dir, 'model_q4.onnx'),
    );
  });

  it('a name two graphs share is refused, naming both and how to pick one', async () => {
    const dir = await bothGraphs('pick-shared');
    const err = await refusal(loadModelSpec(dir, { graphVariant: 'fp32' }), { file: '.' });
    expect(err.message).toContain('Graph variant "fp32" matches several graphs (onnx/model.onnx, model.onnx)');
    expect(err.message).toContain('Pick one by its path (e.g. onnx/model.onnx).');
    expect(err.detail?.candidates).toEqual(['onnx/model.onnx', 'model.onnx']);
  });
});
