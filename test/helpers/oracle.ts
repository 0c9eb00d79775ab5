/**
 * An oracle independent of the engine: one run of the package's original graph
 * over a whole sequence with an empty past, on onnxruntime-node directly.
 */
import * as ort from 'onnxruntime-node';
import type { ModelSpec } from '../../src/shared/model-spec';

/** Feeds for one run of `rows` (of equal length) with an empty past. */
export function firstRunFeeds(spec: ModelSpec, rows: number[][]): Record<string, ort.Tensor> {
  const B = rows.length;
  const S = (rows[0] as number[]).length;
  const int64 = (values: number[], dims: number[]) =>
    new ort.Tensor(
      'int64',
      BigInt64Array.from(values, (v) => BigInt(v)),
      dims,
    );
  const feeds: Record<string, ort.Tensor> = {};
  feeds[spec.ports.inputIds.name] = int64(rows.flat(), [B, S]);
  if (spec.ports.attentionMask) feeds[spec.ports.attentionMask.name] = int64(new Array(B * S).fill(1), [B, S]);
  if (spec.ports.positionIds) {
    feeds[spec.ports.positionIds.name] = int64(
      rows.flatMap((r) => r.map((_, i) => i)),
      [B, S],
    );
  }
  if (spec.kv.kind === 'dynamic') {
    for (const t of spec.kv.tensors) {
      const dims = t.shape.map((d, i) => (i === t.batchAxis ? B : i === t.seqAxis ? 0 : (d as number)));
      feeds[t.past] = new ort.Tensor('float32', new Float32Array(0), dims);
    }
  }
  return feeds;
}

/** log-softmax (float64) of the last position's logits of `ids`, recomputed from scratch by `session`. */
export async function recomputedLogprobs(
  session: ort.InferenceSession,
  spec: ModelSpec,
  ids: number[],
): Promise<number[]> {
  const out = await session.run(firstRunFeeds(spec, [ids]));
  const logits = out[spec.ports.logits.name] as ort.Tensor;
  const V = logits.dims[2] as number;
  const data = logits.data as Float32Array;
  const last = [...data.subarray(data.length - V)];
  const max = Math.max(...last);
  const logZ = max + Math.log(last.reduce((sum, v) => sum + Math.exp(v - max), 0));
  return last.map((v) => v - logZ);
}
