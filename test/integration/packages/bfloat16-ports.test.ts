/**
 * bfloat16 at a graph's edges. onnxruntime-node (the runtime kvdesk has) refuses to open such a graph at all, so
 * a package whose KV cache is bfloat16 is refused while it is read, with that reason and what to use instead. It
 * used to pass validation and then fail to load with "Unsupported data type: 16" blamed on operators or a damaged
 * file. The first test keeps the reason true: if a newer onnxruntime-node opens such a graph, it fails, and the
 * refusal should give way to an engine that feeds bfloat16.
 */
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onnx } from 'onnx-proto';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editGraph, editsHost } from './edited-default';

const BF16 = 16;
const castTo = (to: number, input: string, output: string): onnx.INodeProto => ({
  opType: 'Cast',
  input: [input],
  output: [output],
  attribute: [{ name: 'to', type: onnx.AttributeProto.AttributeType.INT, i: to }],
});

const edits = editsHost();

describe('bfloat16 graph ports', () => {
  it('onnxruntime-node cannot open a graph with a bfloat16 output (the reason the refusal gives)', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'kvdesk-bf16-'));
    const file = path.join(dir, 'cast.onnx');
    const port = (name: string, elemType: number) => ({
      name,
      type: { tensorType: { elemType, shape: { dim: [{ dimValue: 2 }] } } },
    });
    await fs.writeFile(
      file,
      onnx.ModelProto.encode({
        irVersion: 8,
        opsetImport: [{ domain: '', version: 17 }],
        graph: { name: 'g', input: [port('x', 1)], output: [port('y', BF16)], node: [castTo(BF16, 'x', 'y')] },
      }).finish(),
    );
    try {
      await expect(ort.InferenceSession.create(file)).rejects.toThrow('Unsupported data type: 16');
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });

  it('the default model with a bfloat16 KV cache is refused before it loads, naming the graph and the port', async () => {
    const dir = await copyDefault('bf16-kv');
    // The cache is cast to bfloat16 at the graph's edges and computed in float32 inside, as an export would be.
    await editGraph(dir, (g) => {
      const before: onnx.INodeProto[] = [];
      const after: onnx.INodeProto[] = [];
      for (const v of g.input ?? []) {
        if (!v.name?.startsWith('past_key_values.')) continue;
        const inner = `${v.name}__f32`;
        for (const n of g.node ?? []) n.input = (n.input ?? []).map((x) => (x === v.name ? inner : x));
        before.push(castTo(1, v.name, inner));
        (v.type?.tensorType as { elemType: number }).elemType = BF16;
      }
      for (const v of g.output ?? []) {
        if (!v.name?.startsWith('present.')) continue;
        const inner = `${v.name}__f32`;
        for (const n of g.node ?? []) n.output = (n.output ?? []).map((x) => (x === v.name ? inner : x));
        after.push(castTo(BF16, inner, v.name));
        (v.type?.tensorType as { elemType: number }).elemType = BF16;
      }
      g.node = [...before, ...(g.node ?? []), ...after];
    });
    const err = await refusal(edits.host.loadModel(dir), {
      file: 'onnx/model.onnx',
      field: 'input "past_key_values.0.key"',
    });
    expect(err.message).toContain('cannot open a graph whose inputs or outputs are bfloat16');
    expect(err.message).toContain('Use a float16 or float32 export of this model');
    expect(err.message).not.toContain('operators');
  });
});
