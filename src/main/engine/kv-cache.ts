/**
 * KV tensor helpers: empty past tensors for a first run, byte counts, and
 * truncation of a session's cache to a reusable prefix.
 */
import * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';
import type { KvDtype, KvTensorSpec } from '../../shared/model-spec';

type TypedArray = Float32Array | Uint16Array;

/** A zeroed typed array for `length` KV elements of `dtype` (float16 as raw bits, as onnxruntime-node holds it). */
export function kvArray(dtype: KvDtype, length: number): TypedArray {
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
  return new ort.Tensor(spec.dtype === 'float16' ? 'float16' : 'float32', kvArray(spec.dtype, 0), shape);
}

/** Bytes held by a set of KV tensors. */
export function tensorsBytes(tensors: Iterable<ort.Tensor>): number {
  let total = 0;
  for (const t of tensors) total += (t.data as TypedArray).byteLength;
  return total;
}

/** ArrayBuffer.prototype.transfer (ES2024; Node 20 has it behind --harmony-rab-gsab-transfer, which the host sets). */
const transfer = (ArrayBuffer.prototype as { transfer?: (length: number) => ArrayBuffer }).transfer;
/** KVDESK_KV_RELEASE=0 leaves dead KV to the garbage collector (for a comparison). */
const RELEASE = transfer !== undefined && process.env.KVDESK_KV_RELEASE !== '0';

/**
 * Frees the memory of KV tensors nothing reads any more now, instead of at some later garbage collection, by
 * detaching their buffers (`transfer(0)`): a tensor of `dead` whose buffer one of `live` still uses (a step or a
 * trim that kept it as it was, or a present grown in place over its past: appendSeq) is left alone. Fresh
 * buffers outside the JavaScript heap count against a limit that starts a collection when reached: at 8 rows
 * onnxruntime-node's copies of every present tensor made that a collection every step or two, each one marking
 * the whole heap. Where the runtime cannot detach, nothing happens and the collector frees them as before.
 */
export function releaseKv(dead: Iterable<ort.Tensor | undefined>, live: Map<string, ort.Tensor>): void {
  if (!RELEASE) return;
  const kept = new Set<ArrayBufferLike>();
  for (const t of live.values()) if (t.location === 'cpu') kept.add((t.data as TypedArray).buffer);
  for (const t of dead) {
    if (t?.location !== 'cpu') continue;
    const data = t.data as TypedArray;
    const buffer = data.buffer;
    if (!(buffer instanceof ArrayBuffer) || kept.has(buffer)) continue;
    // A buffer the tensor has to itself, or one appendSeq made (its tensors are views over a part of it); a view
    // over part of some other buffer may share it with what this code does not see.
    if (!growable.has(buffer) && (data.byteOffset !== 0 || data.byteLength !== buffer.byteLength)) continue;
    if (buffer.byteLength > 0) transfer?.call(buffer, 0);
  }
}

/**
 * Positions a buffer appendSeq makes holds for each row, rounded up to a multiple of this (at least one spare, and
 * never more than the KV can still reach): the next steps' positions are written in place until it is full, and
 * then it is made again, larger.
 */
export const KV_GROWTH_POSITIONS = 16;
/** Buffers appendSeq made: the present tensors over them may grow in place, as nothing else reads them. */
const growable = new WeakSet<ArrayBuffer>();

/**
 * A present KV tensor built from the past one fed to a run and the positions the run added (the graph's present
 * is Concat(past, added) along the sequence axis; last-position.ts exposes `added` and the run fetches it instead
 * of the present, which onnxruntime-node would copy out whole into a fresh buffer every step). Where the past's
 * buffer is one this function made and has room, every row's block moves up in place (last row first, so no
 * block overwrites one not yet moved) and the new positions go in after it: the past tensor is then stale, so
 * the caller must hold no other reference that reads it. Else a buffer with room for KV_GROWTH_POSITIONS more is
 * made and both are copied in. `past` absent: the added positions are the whole present (a first run). `limit`:
 * the most positions this KV can hold before it is dropped (the room is never more than that).
 */
export function appendSeq(
  spec: KvTensorSpec,
  past: ort.Tensor | undefined,
  added: ort.Tensor,
  limit = Number.POSITIVE_INFINITY,
): ort.Tensor {
  const a = blocks(spec, added.dims);
  const p = past ? blocks(spec, past.dims) : { ...a, seq: 0 };
  if (past) mustFit(spec, past, added);
  const rows = a.pre * a.batch * a.mid;
  const post = a.post;
  const L = p.seq;
  const total = L + a.seq;
  const need = rows * total * post;
  const src = past?.data as TypedArray | undefined;
  const add = added.data as TypedArray;
  const bytes = add.BYTES_PER_ELEMENT;
  let dst: TypedArray;
  const buffer = src?.buffer;
  if (
    src &&
    buffer instanceof ArrayBuffer &&
    growable.has(buffer) &&
    src.byteOffset === 0 &&
    buffer.byteLength >= need * bytes
  ) {
    dst = view(add, buffer, need);
    for (let i = rows - 1; i >= 1; i--) dst.copyWithin(i * total * post, i * L * post, (i + 1) * L * post);
  } else {
    const capacity = Math.max(
      total,
      Math.min(Math.ceil((total + 1) / KV_GROWTH_POSITIONS) * KV_GROWTH_POSITIONS, limit),
    );
    const made = new ArrayBuffer(rows * capacity * post * bytes);
    growable.add(made);
    dst = view(add, made, need);
    if (src) for (let i = 0; i < rows; i++) dst.set(src.subarray(i * L * post, (i + 1) * L * post), i * total * post);
  }
  for (let i = 0; i < rows; i++)
    dst.set(add.subarray(i * a.seq * post, (i + 1) * a.seq * post), (i * total + L) * post);
  return new ort.Tensor(added.type as 'float32' | 'float16', dst, withDims(spec, added.dims, a.batch, total));
}

/**
 * The KV with room: each row's block (its heads, in the [batch, heads, seq, dim] layout) holds `capacity`
 * positions, of which the first `used` are the cache and the rest a gap the runs' attention masks out (fed as
 * padding, 0 in the attention mask after the row's positions). A run's new positions go into the gap of every
 * row in place (appendGap), where appendSeq moves every row's block up by the positions added before it: a copy
 * of nearly the whole cache each step, as large as the graph's own Concat of past and new. The gap costs masked
 * positions in the attention's products instead (up to KV_GROWTH_POSITIONS, and the few a draft check the model
 * did not take gives back).
 *
 * Returns `tensor` (positions [0, used) of each row, its sequence axis `used` or longer) copied into a buffer of
 * `capacity` positions per row, made here (so later runs may write into it); the gap is zeros.
 */
export function withRoom(spec: KvTensorSpec, tensor: ort.Tensor, used: number, capacity: number): ort.Tensor {
  const b = blocks(spec, tensor.dims);
  if (used > b.seq || capacity < used) {
    throw new KvdeskError('INTERNAL', `withRoom: ${used} positions of ${b.seq}, in room for ${capacity}`);
  }
  const rows = b.pre * b.batch * b.mid;
  const src = tensor.data as TypedArray;
  const made = new ArrayBuffer(rows * capacity * b.post * src.BYTES_PER_ELEMENT);
  growable.add(made);
  const dst = view(src, made, rows * capacity * b.post);
  for (let i = 0; i < rows; i++) {
    const start = i * b.seq * b.post;
    dst.set(src.subarray(start, start + used * b.post), i * capacity * b.post);
  }
  return new ort.Tensor(tensor.type as 'float32' | 'float16', dst, withDims(spec, tensor.dims, b.batch, capacity));
}

/**
 * The KV after a run fed `past` (its sequence axis the capacity, of which `used` positions are the cache: see
 * withRoom) added the positions of `added` after them: written into the gap of every row in place where `past`
 * is a buffer this module made with room for them (`past` is then returned), else into a new one with room for
 * KV_GROWTH_POSITIONS more (never more than `limit`, the most positions the KV can reach). The sequence axis of
 * what it returns is its capacity; the caller keeps count of the positions used (`used` + added).
 */
export function appendGap(
  spec: KvTensorSpec,
  past: ort.Tensor,
  used: number,
  added: ort.Tensor,
  limit = Number.POSITIVE_INFINITY,
): ort.Tensor {
  const a = blocks(spec, added.dims);
  const p = blocks(spec, past.dims);
  mustFit(spec, past, added);
  const total = used + a.seq;
  const data = past.data as TypedArray;
  const owned =
    data.buffer instanceof ArrayBuffer &&
    growable.has(data.buffer) &&
    data.byteOffset === 0 &&
    data.length === p.pre * p.batch * p.mid * p.seq * p.post;
  let into = past;
  if (!owned || p.seq < total) {
    const capacity = Math.max(
      total,
      Math.min(Math.ceil((total + 1) / KV_GROWTH_POSITIONS) * KV_GROWTH_POSITIONS, limit),
    );
    into = withRoom(spec, past, used, capacity);
  }
  const cap = into.dims[spec.seqAxis] as number;
  const dst = into.data as TypedArray;
  const add = added.data as TypedArray;
  const post = a.post;
  const rows = a.pre * a.batch * a.mid;
  for (let i = 0; i < rows; i++) {
    dst.set(add.subarray(i * a.seq * post, (i + 1) * a.seq * post), (i * cap + used) * post);
  }
  return into;
}

/** Throws unless `added` has `past`'s type and dims but along the sequence axis (the run's positions of its rows). */
function mustFit(spec: KvTensorSpec, past: ort.Tensor, added: ort.Tensor): void {
  const a = blocks(spec, added.dims);
  const p = blocks(spec, past.dims);
  if (p.pre !== a.pre || p.batch !== a.batch || p.mid !== a.mid || p.post !== a.post || added.type !== past.type) {
    throw new KvdeskError(
      'ENGINE_FAILED',
      `${spec.present}: the run added ${added.type} positions of shape [${added.dims.join(', ')}] to a ${past.type} past of [${past.dims.join(', ')}]`,
    );
  }
}

/**
 * Bytes the KV tensors hold in memory: a present appendSeq made holds its whole buffer (its room included), any
 * other tensor its data.
 */
export function kvHeldBytes(tensors: Iterable<ort.Tensor>): number {
  let total = 0;
  for (const t of tensors) {
    const data = t.data as TypedArray;
    total += data.buffer instanceof ArrayBuffer && growable.has(data.buffer) ? data.buffer.byteLength : data.byteLength;
  }
  return total;
}

/** The first `length` elements of `buffer`, as the same kind of array as `like`. */
function view(like: TypedArray, buffer: ArrayBuffer, length: number): TypedArray {
  return like instanceof Float32Array ? new Float32Array(buffer, 0, length) : new Uint16Array(buffer, 0, length);
}

/** Keeps the first `keep` positions of a KV tensor along its sequence axis. */
export function truncateSeq(spec: KvTensorSpec, tensor: ort.Tensor, keep: number): ort.Tensor {
  return keep >= (tensor.dims[spec.seqAxis] as number) ? tensor : sliceSeq(spec, tensor, 0, keep);
}

/**
 * Views a KV tensor as [pre, batch, mid, seq, post] (the batch axis always
 * precedes the sequence axis in both split and combined layouts), so batch and
 * sequence edits are copies of contiguous blocks.
 */
function blocks(spec: KvTensorSpec, dims: readonly number[]) {
  let pre = 1;
  for (let i = 0; i < spec.batchAxis; i++) pre *= dims[i] as number;
  let mid = 1;
  for (let i = spec.batchAxis + 1; i < spec.seqAxis; i++) mid *= dims[i] as number;
  let post = 1;
  for (let i = spec.seqAxis + 1; i < dims.length; i++) post *= dims[i] as number;
  return { pre, batch: dims[spec.batchAxis] as number, mid, seq: dims[spec.seqAxis] as number, post };
}

function withDims(spec: KvTensorSpec, dims: readonly number[], batch: number, seq: number): number[] {
  const out = dims.slice();
  out[spec.batchAxis] = batch;
  out[spec.seqAxis] = seq;
  return out;
}

/**
 * Pads a KV tensor with zeros up to `seq` positions on one side of its sequence axis (masked out by the caller): the
 * left, or the right — the batch's layout for attention that takes a row's first positions as its own
 * (GroupQueryAttention's `seqlens_k`), which never reads them.
 */
function padSeq(spec: KvTensorSpec, tensor: ort.Tensor, seq: number, side: 'left' | 'right'): ort.Tensor {
  const b = blocks(spec, tensor.dims);
  if (seq === b.seq) return tensor;
  const src = tensor.data as TypedArray;
  const rows = b.pre * b.batch * b.mid;
  const dst = kvArray(spec.dtype, rows * seq * b.post);
  const from = b.seq * b.post;
  const to = seq * b.post;
  const shift = side === 'left' ? (seq - b.seq) * b.post : 0;
  for (let i = 0; i < rows; i++) dst.set(src.subarray(i * from, (i + 1) * from), i * to + shift);
  return new ort.Tensor(tensor.type as 'float32' | 'float16', dst, withDims(spec, tensor.dims, b.batch, seq));
}

/** {@link padSeq} on the left. */
export const padSeqLeft = (spec: KvTensorSpec, tensor: ort.Tensor, seq: number): ort.Tensor =>
  padSeq(spec, tensor, seq, 'left');

/** {@link padSeq} on the right. */
export const padSeqRight = (spec: KvTensorSpec, tensor: ort.Tensor, seq: number): ort.Tensor =>
  padSeq(spec, tensor, seq, 'right');

/** Drops the first `drop` positions of the sequence axis (padding every row has). */
export function trimSeqLeft(spec: KvTensorSpec, tensor: ort.Tensor, drop: number): ort.Tensor {
  if (drop <= 0) return tensor;
  return sliceSeq(spec, tensor, drop, tensor.dims[spec.seqAxis] as number);
}

/** Keeps positions [from, to) of the sequence axis. */
export function sliceSeq(spec: KvTensorSpec, tensor: ort.Tensor, from: number, to: number): ort.Tensor {
  const b = blocks(spec, tensor.dims);
  const src = tensor.data as TypedArray;
  const rows = b.pre * b.batch * b.mid;
  const keep = to - from;
  const dst = kvArray(spec.dtype, rows * keep * b.post);
  for (let i = 0; i < rows; i++) {
    const start = (i * b.seq + from) * b.post;
    dst.set(src.subarray(start, start + keep * b.post), i * keep * b.post);
  }
  return new ort.Tensor(tensor.type as 'float32' | 'float16', dst, withDims(spec, tensor.dims, b.batch, keep));
}

/** Concatenates KV tensors of equal sequence length along the batch axis. */
export function concatBatch(spec: KvTensorSpec, tensors: ort.Tensor[]): ort.Tensor {
  if (tensors.length === 1) return tensors[0] as ort.Tensor;
  const parts = tensors.map((t) => ({ t, b: blocks(spec, t.dims) }));
  const first = parts[0]?.b;
  if (!first) throw new KvdeskError('INTERNAL', 'concatBatch needs at least one tensor');
  const total = parts.reduce((n, p) => n + p.b.batch, 0);
  const unit = first.mid * first.seq * first.post;
  const dst = kvArray(spec.dtype, first.pre * total * unit);
  let offset = 0;
  for (let p = 0; p < first.pre; p++) {
    for (const part of parts) {
      if (part.b.seq !== first.seq) throw new KvdeskError('INTERNAL', 'concatBatch: sequence lengths differ');
      const src = part.t.data as TypedArray;
      const len = part.b.batch * unit;
      dst.set(src.subarray(p * len, (p + 1) * len), offset);
      offset += len;
    }
  }
  return new ort.Tensor(
    tensors[0]?.type as 'float32' | 'float16',
    dst,
    withDims(spec, tensors[0]?.dims ?? [], total, first.seq),
  );
}

/** Keeps the given batch rows, in order. */
export function selectBatch(spec: KvTensorSpec, tensor: ort.Tensor, rows: number[]): ort.Tensor {
  const b = blocks(spec, tensor.dims);
  const src = tensor.data as TypedArray;
  const unit = b.mid * b.seq * b.post;
  const dst = kvArray(spec.dtype, b.pre * rows.length * unit);
  let offset = 0;
  for (let p = 0; p < b.pre; p++) {
    for (const r of rows) {
      const start = (p * b.batch + r) * unit;
      dst.set(src.subarray(start, start + unit), offset);
      offset += unit;
    }
  }
  return new ort.Tensor(tensor.type as 'float32' | 'float16', dst, withDims(spec, tensor.dims, rows.length, b.seq));
}
