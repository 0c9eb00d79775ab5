/** Building the id/mask/position tensors a decoder graph is fed. */
import * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';
import type { GraphPort } from '../../shared/model-spec';

/** An int32 or int64 tensor, as the graph port declares. */
export function idTensor(port: GraphPort, values: number[], dims: number[]): ort.Tensor {
  if (port.dtype === 'int64')
    return new ort.Tensor(
      'int64',
      BigInt64Array.from(values, (v) => BigInt(v)),
      dims,
    );
  if (port.dtype === 'int32') return new ort.Tensor('int32', Int32Array.from(values), dims);
  throw new KvdeskError(
    'MODEL_LOAD_FAILED',
    `graph input ${port.name} has type ${port.dtype}; kvdesk feeds token ids, masks and positions as int32 or int64`,
  );
}

/** Length of the common prefix of two id sequences. */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * The attention mask of a left-padded batch: each row is `pads[b]` zeros then
 * ones, with zeros over positions [gap[0], gap[1]) of every row too (the KV's
 * room after its positions: kv-cache.ts withRoom). Built with native fills,
 * since it is rebuilt every decode step.
 */
export function maskTensor(port: GraphPort, pads: number[], length: number, gap?: [number, number]): ort.Tensor {
  const B = pads.length;
  const dims = [B, length];
  const [from, to] = gap ?? [0, 0];
  if (port.dtype === 'int64') {
    const data = new BigInt64Array(B * length).fill(1n);
    for (const [b, pad] of pads.entries()) {
      data.fill(0n, b * length, b * length + Math.min(pad, length));
      if (to > from) data.fill(0n, b * length + from, b * length + to);
    }
    return new ort.Tensor('int64', data, dims);
  }
  if (port.dtype === 'int32') {
    const data = new Int32Array(B * length).fill(1);
    for (const [b, pad] of pads.entries()) {
      data.fill(0, b * length, b * length + Math.min(pad, length));
      if (to > from) data.fill(0, b * length + from, b * length + to);
    }
    return new ort.Tensor('int32', data, dims);
  }
  throw new KvdeskError(
    'MODEL_LOAD_FAILED',
    `graph input ${port.name} has type ${port.dtype}; attention masks must be int32 or int64`,
  );
}
