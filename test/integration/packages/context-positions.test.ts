/**
 * A declared context longer than the graph's position table (tiny-llm's 16 learned positions, GPT-2's 512) used to
 * load, and then every request that reached the table's end failed mid-reply with onnxruntime's words ("indices
 * element out of data bounds, idx=16 must be within the inclusive range [-16,15]"), naming no file or field. A graph
 * fed its positions is probed at load now: one one-token run at the context's last position, and where it fails a
 * search for the graph's real limit, which the refusal names with the field to set. A graph that computes its
 * positions itself cannot be probed as cheaply: its failure names the field and the position instead.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { onnx } from 'onnx-proto';
import { describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { copyPackage, editGraph, editJson, editsHost } from './edited-default';

const edits = editsHost();
const skipped = haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`;
const METADATA = 'inference_metadata.yaml';

/** tiny-llm (16 learned positions) with `model.max_sequence_length` set to `context`. */
async function tinyLlm(name: string, context: number): Promise<string> {
  const dir = await copyPackage(fixture('onnx-genai/tiny-llm'), name);
  const file = path.join(dir, METADATA);
  const text = await fs.readFile(file, 'utf8');
  expect(text).toContain('max_sequence_length: 16\n');
  await fs.writeFile(file, text.replace('max_sequence_length: 16', `max_sequence_length: ${context}`));
  return dir;
}

/** Loading `dir` is refused with `code`; the model is then not there to run. */
async function refusedLoad(dir: string, id: string) {
  const err = await edits.host.loadModel(dir, { id }).then(
    () => undefined,
    (e: unknown) => e as { code: string; message: string; detail?: Record<string, unknown> },
  );
  expect(err?.code).toBe('PACKAGE_INVALID');
  expect(edits.host.listModels().map((m) => m.id)).not.toContain(id);
  return err as NonNullable<typeof err>;
}

const greedy = (model: string, promptIds: number[], maxNewTokens: number) =>
  edits.host.generate({ model, promptIds, maxNewTokens, sampling: { greedy: true } }).result;

describe.skipIf(!haveFixtures)(`a declared context past the graph's position table${skipped}`, () => {
  it.each([
    [100_000, 'model.max_sequence_length: 100000'],
    [17, 'one position too many'],
  ])('tiny-llm declaring %i positions is refused at load, naming the field and the 16 to set (%s)', async (context) => {
    const dir = await tinyLlm(`tiny-llm-${context}`, context);
    // The package alone cannot tell: the table's size is the graph's.
    expect((await loadModelSpec(dir)).contextLength).toBe(context);
    const t0 = Date.now();
    const err = await refusedLoad(dir, `tiny-${context}`);
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(err.message).toContain(
      `${METADATA}: \`model.max_sequence_length\` says the context is ${context} tokens, but model.onnx holds 16 positions: ` +
        'a one-token trial run at position 15 ran and one at position 16 failed (',
    );
    expect(err.message).toContain('idx=16 must be within the inclusive range [-16,15]');
    expect(err.message).toContain(`Set \`model.max_sequence_length\` to 16 in ${METADATA}.`);
    expect(err.detail).toMatchObject({
      file: METADATA,
      field: 'model.max_sequence_length',
      configured: context,
      graph: 16,
    });
  });

  it('tiny-llm as it ships (16) loads and generates to the end of its context', async () => {
    const dir = await tinyLlm('tiny-llm-16', 16);
    await edits.host.loadModel(dir, { id: 'tiny-16' });
    const out = await greedy('tiny-16', [5, 6, 7], 40);
    // Clipped to the context: 3 prompt positions and 13 new ones.
    expect(out.tokenIds).toHaveLength(13);
  });

  it('GPT-2 (ort-genai) with context_length 4096 is refused, naming genai_config.json and its 512 positions', async () => {
    const dir = await copyPackage(fixture('onnxruntime-genai/tiny-random-gpt2-fp32'), 'gpt2-4096');
    await editJson(dir, 'genai_config.json', (j) => {
      (j.model as Record<string, unknown>).context_length = 4096;
    });
    const err = await refusedLoad(dir, 'gpt2-4096');
    expect(err.message).toContain(
      'genai_config.json: `model.context_length` says the context is 4096 tokens, but past.onnx holds 512 positions',
    );
    expect(err.message).toContain('EmbedLayerNormalization');
    expect(err.message).toContain('Set `model.context_length` to 512 in genai_config.json.');
    expect(err.detail).toMatchObject({ file: 'genai_config.json', field: 'model.context_length', graph: 512 });
  });
});

/**
 * tiny-llm with its positions computed inside the graph from the cache's length (past_len .. past_len + S - 1), as
 * exports without a position_ids input do: the same table, read at the same positions, but nothing to probe it by.
 */
async function computedPositions(name: string, context: number): Promise<string> {
  const dir = await tinyLlm(name, context);
  await editGraph(
    dir,
    (g) => {
      g.input = (g.input ?? []).filter((i) => i.name !== 'position_ids');
      const scalar = (n: string, v: number) =>
        onnx.TensorProto.create({ name: n, dataType: onnx.TensorProto.DataType.INT64, dims: [], int64Data: [v] });
      const axis0 = onnx.TensorProto.create({ name: 'kvd_axis0', dataType: 7, dims: [1], int64Data: [0] });
      g.initializer = [...(g.initializer ?? []), scalar('kvd_two', 2), scalar('kvd_one', 1), axis0];
      const node = (op: string, inputs: string[], output: string) =>
        onnx.NodeProto.create({ opType: op, input: inputs, output: [output], name: `kvd_${output}` });
      g.node = [
        node('Shape', ['past_key_values.0.key'], 'kvd_past_shape'),
        node('Gather', ['kvd_past_shape', 'kvd_two'], 'kvd_past_len'),
        node('Shape', ['input_ids'], 'kvd_ids_shape'),
        node('Gather', ['kvd_ids_shape', 'kvd_one'], 'kvd_seq_len'),
        node('Add', ['kvd_past_len', 'kvd_seq_len'], 'kvd_end'),
        node('Range', ['kvd_past_len', 'kvd_end', 'kvd_one'], 'kvd_range'),
        node('Unsqueeze', ['kvd_range', 'kvd_axis0'], 'position_ids'),
        ...(g.node ?? []),
      ];
    },
    'model.onnx',
  );
  const file = path.join(dir, METADATA);
  const text = await fs.readFile(file, 'utf8');
  await fs.writeFile(file, text.replace(/^\s*position_ids_input:.*\n/m, ''));
  return dir;
}

describe.skipIf(!haveFixtures)(`a graph that computes its positions${skipped}`, () => {
  it('generates as tiny-llm does within its table', async () => {
    const dir = await computedPositions('computed-16', 16);
    const spec = await loadModelSpec(dir);
    expect(spec.ports.positionIds).toBeUndefined();
    await edits.host.loadModel(dir, { id: 'computed-16' });
    await edits.host.loadModel(await tinyLlm('fed-16', 16), { id: 'fed-16' });
    const computed = await greedy('computed-16', [5, 6, 7], 8);
    expect(computed.tokenIds).toHaveLength(8);
    expect(computed.tokenIds).toEqual((await greedy('fed-16', [5, 6, 7], 8)).tokenIds);
  });

  it('past its table: the failure names the field, the position and what to set', async () => {
    const dir = await computedPositions('computed-100000', 100_000);
    await edits.host.loadModel(dir, { id: 'computed-100000' });
    const err = await greedy('computed-100000', [5, 6, 7], 40).then(
      () => undefined,
      (e: unknown) => e as { code: string; message: string; detail?: Record<string, unknown> },
    );
    expect(err?.code).toBe('ENGINE_FAILED');
    expect(err?.message).toContain('onnxruntime failed during generation at position 16: ');
    expect(err?.message).toContain('idx=16 must be within the inclusive range [-16,15]');
    expect(err?.message).toContain(
      `holds fewer positions than the 100000-token context \`model.max_sequence_length\` in ${METADATA} declares (it ran up to position 15). ` +
        `Set \`model.max_sequence_length\` in ${METADATA} to the number of positions the model was built for (at most 16)`,
    );
    expect(err?.detail).toMatchObject({ file: METADATA, field: 'model.max_sequence_length', from: 16, to: 16 });
    // A prompt past the table fails in its prefill, naming the positions of the run.
    const long = await greedy(
      'computed-100000',
      Array.from({ length: 20 }, (_, i) => 3 + i),
      2,
    ).then(
      () => undefined,
      (e: unknown) => e as { message: string },
    );
    expect(long?.message).toMatch(
      /failed during generation at positions 0\.\.19: .*`model\.max_sequence_length` in inference_metadata\.yaml/,
    );
  });
});
