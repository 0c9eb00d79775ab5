/** Building the id/mask/position tensors a decoder graph is fed. */
import * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';
import type { GraphPort, ModelSpec } from '../../shared/model-spec';

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

/**
 * The attention mask of a right-padded batch: each row is `lengths[b]` ones (its own positions, first) then zeros
 * up to `length`. Attention that counts a row's positions from the mask's sum (GroupQueryAttention: `seqlens_k` is
 * the sum − 1) reads that many positions from the row's start and writes a run's new positions right after them.
 */
export function rightMaskTensor(port: GraphPort, lengths: number[], length: number): ort.Tensor {
  const B = lengths.length;
  const dims = [B, length];
  if (port.dtype === 'int64') {
    const data = new BigInt64Array(B * length);
    for (const [b, n] of lengths.entries()) data.fill(1n, b * length, b * length + Math.min(n, length));
    return new ort.Tensor('int64', data, dims);
  }
  if (port.dtype === 'int32') {
    const data = new Int32Array(B * length);
    for (const [b, n] of lengths.entries()) data.fill(1, b * length, b * length + Math.min(n, length));
    return new ort.Tensor('int32', data, dims);
  }
  throw new KvdeskError(
    'MODEL_LOAD_FAILED',
    `graph input ${port.name} has type ${port.dtype}; attention masks must be int32 or int64`,
  );
}

/** onnxruntime's words for an index past a table: Gather's "indices element out of data bounds", the contrib ops' "out of range". */
const INDEX_OUT_OF_RANGE = /out of (data )?bounds|out of range/i;

/**
 * The error of a run that failed mid-generation. A run at positions `from`..`to` (0-based, the last one included)
 * that failed on an index out of range most likely read a position table shorter than the declared context (the load
 * probes this only for graphs fed their positions): the message names the package field that declares the context,
 * the positions and what to set.
 */
export function generationFailed(spec: ModelSpec, err: unknown, from: number, to: number): KvdeskError {
  const reason = err instanceof Error ? err.message : String(err);
  const source = spec.contextSource;
  if (source === undefined || (from === 0 && to === 0) || !INDEX_OUT_OF_RANGE.test(reason)) {
    return new KvdeskError('ENGINE_FAILED', `onnxruntime failed during generation: ${reason}`);
  }
  const at = from === to ? `position ${to}` : `positions ${from}..${to}`;
  const ran = from > 0 ? ` (it ran up to position ${from - 1})` : '';
  return new KvdeskError(
    'ENGINE_FAILED',
    `onnxruntime failed during generation at ${at}: ${reason}. An index out of range there means the graph most likely ` +
      `holds fewer positions than the ${spec.contextLength}-token context \`${source.field}\` in ${source.file} declares${ran}. ` +
      `Set \`${source.field}\` in ${source.file} to the number of positions the model was built for (at most ${to}), ` +
      'and keep prompt and reply shorter than that until then.',
    { file: source.file, field: source.field, contextLength: spec.contextLength, from, to },
  );
}
