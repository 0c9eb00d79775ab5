/**
 * KV tensor helpers: empty past tensors for a first run, byte counts, and
 * truncation of a session's cache to a reusable prefix.
 */
import * as ort from 'onnxruntime-node';
import type { KvDtype, KvTensorSpec } from '../../shared/model-spec';
import { KvdeskError } from '../../shared/errors';

type TypedArray = Float32Array | Uint16Array;

function allocate(dtype: KvDtype, length: number): TypedArray {
  if (dtype === 'float32') return new Float32Array(length);
  if (dtype === 'float16') return new Uint16Array(length);
  throw new KvdeskError(
    'MODEL_LOAD_FAILED',
    `KV dtype ${dtype} is not supported by onnxruntime-node's JavaScript tensors; use a float32 or float16 export of this model`,
  );
}

/** Concrete shape of a KV tensor for a batch and a sequence length. */
export function kvShape(spec: KvTensorSpec, batch: number, seq: number): number[] {
  return spec.shape.map((d, i) => {
    if (i === spec.batchAxis) return batch;
    if (i === spec.seqAxis) return seq;
    if (typeof d !== 'number') {
      throw new KvdeskError('MODEL_LOAD_FAILED', `KV input ${spec.past} has an unresolved dimension ${String(d)}`);
    }
    return d;
  });
}

/** A zero-length past tensor: what a graph expects before any token has been seen. */
export function emptyPast(spec: KvTensorSpec, batch: number): ort.Tensor {
  const shape = kvShape(spec, batch, 0);
  return new ort.Tensor(spec.dtype === 'float16' ? 'float16' : 'float32', allocate(spec.dtype, 0), shape);
}

/** Bytes held by a set of KV tensors. */
export function tensorsBytes(tensors: Iterable<ort.Tensor>): number {
  let total = 0;
  for (const t of tensors) total += (t.data as TypedArray).byteLength;
  return total;
}

/** Keeps the first `keep` positions of a KV tensor along its sequence axis. */
export function truncateSeq(spec: KvTensorSpec, tensor: ort.Tensor, keep: number): ort.Tensor {
  const dims = tensor.dims;
  const seq = dims[spec.seqAxis] as number;
  if (keep >= seq) return tensor;
  let outer = 1;
  for (let i = 0; i < spec.seqAxis; i++) outer *= dims[i] as number;
  let inner = 1;
  for (let i = spec.seqAxis + 1; i < dims.length; i++) inner *= dims[i] as number;
  const src = tensor.data as TypedArray;
  const dst = allocate(spec.dtype, outer * keep * inner);
  for (let o = 0; o < outer; o++) {
    const from = o * seq * inner;
    dst.set(src.subarray(from, from + keep * inner), o * keep * inner);
  }
  const shape = dims.slice();
  shape[spec.seqAxis] = keep;
  return new ort.Tensor(tensor.type as 'float32' | 'float16', dst, shape);
}
