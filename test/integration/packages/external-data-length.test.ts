/**
 * An initializer's `external_data.length` must be the tensor's size (dims × element width): onnxruntime refuses a
 * graph where it is not ("external data size mismatch. Computed size: 2048, external_data.length: 8"). Such a
 * package used to pass validation (`kvdesk inspect` said nothing) and then fail at load with onnxruntime's text; it
 * is refused now, naming the initializer, `external_data.length` and the size to set.
 */
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editsHost, externalWeights } from './edited-default';

const edits = editsHost();
const GRAPH = 'onnx/model.onnx';
const DATA = 'model.onnx.data';

/** A copy of the default package with its weights in `onnx/model.onnx.data`, the first one's length misstated. */
async function externalCopy(name: string, misstate = 0) {
  const dir = await copyDefault(name);
  return { dir, ...(await externalWeights(dir, DATA, misstate)) };
}

describe('external_data.length that is not the tensor size', () => {
  it.each([
    ['shorter', -8],
    ['longer', 8],
  ])(
    'a length %s than dims × width is refused before onnxruntime, naming the initializer and the size',
    async (_, by) => {
      const { dir, graph, tensor, bytes } = await externalCopy(`length${by}`, by);
      // What onnxruntime itself does with the graph: the check refuses what it would.
      await expect(ort.InferenceSession.create(graph)).rejects.toThrow(/external data size mismatch/);
      const field = `initializer "${tensor}" external_data.length`;
      const err = await refusal(loadModelSpec(dir), { file: GRAPH, field });
      expect(err.message).toContain(
        `${GRAPH}: initializer "${tensor}" says its external data in ${DATA} is ${bytes + by} bytes long (\`external_data.length\`), but its shape`,
      );
      expect(err.message).toContain(`takes ${bytes} bytes`);
      expect(err.message).toContain(`set that initializer's external_data.length to ${bytes}.`);
      expect(err.detail).toMatchObject({ tensor, length: bytes + by, tensorBytes: bytes });
      await refusal(edits.host.loadModel(dir, { id: `length${by}` }), { file: GRAPH, field });
      expect(edits.host.listModels().map((m) => m.id)).not.toContain(`length${by}`);
    },
  );

  it('the same package with every length right loads and generates', async () => {
    const { dir } = await externalCopy('length-right');
    const spec = await loadModelSpec(dir);
    expect(spec.files.map((f) => f.path)).toContain(`onnx/${DATA}`);
    await edits.host.loadModel(dir, { id: 'length-right' });
    const out = await edits.host.generate({
      model: 'length-right',
      prompt: 'hello world',
      maxNewTokens: 3,
      sampling: { greedy: true },
    }).result;
    expect(out.tokenIds).toHaveLength(3);
  });
});
