/**
 * Presents built from the positions a run adds (src/main/engine/kv-cache.ts appendSeq): what the graph's
 * Concat(past, added) along the sequence axis would return, grown in place where the buffer has room, and never
 * written over a past the function did not make itself. releaseKv then must not free a buffer a live present
 * still uses. The tests run with ArrayBuffer.prototype.transfer, as the engine process does (vitest.config.mts).
 */
import fc from 'fast-check';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { maskTensor } from '../../../src/main/engine/feeds';
import {
  appendGap,
  appendSeq,
  KV_GROWTH_POSITIONS,
  releaseKv,
  sliceSeq,
  withRoom,
} from '../../../src/main/engine/kv-cache';
import { KvdeskError } from '../../../src/shared/errors';
import type { KvTensorSpec } from '../../../src/shared/model-spec';

/** Split [batch, heads, seq, headDim] or combined [2, batch, heads, seq, headDim]. */
function specOf(combined: boolean, heads: number, headDim: number, dtype: 'float32' | 'float16'): KvTensorSpec {
  return {
    layer: 0,
    role: combined ? 'combined' : 'key',
    past: 'past.0',
    present: 'present.0',
    dtype,
    shape: combined ? [2, 'batch', heads, 'seq', headDim] : ['batch', heads, 'seq', headDim],
    batchAxis: combined ? 1 : 0,
    seqAxis: combined ? 3 : 2,
    kvHeads: heads,
    headDim,
    bytesPerToken: (combined ? 2 : 1) * heads * headDim * (dtype === 'float16' ? 2 : 4),
  };
}

function dimsOf(spec: KvTensorSpec, batch: number, seq: number): number[] {
  return spec.shape.map((d, i) => (i === spec.batchAxis ? batch : i === spec.seqAxis ? seq : (d as number)));
}

let counter = 1;
/** A tensor of `seq` positions whose every element is distinct (so a misplaced one shows). */
function positions(spec: KvTensorSpec, batch: number, seq: number): ort.Tensor {
  const dims = dimsOf(spec, batch, seq);
  const n = dims.reduce((a, b) => a * b, 1);
  if (spec.dtype === 'float16') {
    return new ort.Tensor(
      'float16',
      Uint16Array.from({ length: n }, () => counter++ % 65536),
      dims,
    );
  }
  return new ort.Tensor(
    'float32',
    Float32Array.from({ length: n }, () => counter++),
    dims,
  );
}

/** The graph's Concat along the sequence axis, element by element from the dims. */
function concatReference(spec: KvTensorSpec, a: ort.Tensor, b: ort.Tensor): number[] {
  const dims = a.dims.slice();
  const sa = a.dims[spec.seqAxis] as number;
  const sb = b.dims[spec.seqAxis] as number;
  dims[spec.seqAxis] = sa + sb;
  const outer = dims.slice(0, spec.seqAxis).reduce((x, y) => x * y, 1);
  const inner = dims.slice(spec.seqAxis + 1).reduce((x, y) => x * y, 1);
  const out: number[] = [];
  const da = a.data as Float32Array | Uint16Array;
  const db = b.data as Float32Array | Uint16Array;
  for (let o = 0; o < outer; o++) {
    for (let s = 0; s < sa; s++) for (let k = 0; k < inner; k++) out.push(da[(o * sa + s) * inner + k] as number);
    for (let s = 0; s < sb; s++) for (let k = 0; k < inner; k++) out.push(db[(o * sb + s) * inner + k] as number);
  }
  return out;
}

/** A KV tensor's layout: combined or not, dtype, batch, heads, head dim. */
const layouts = [
  fc.boolean(),
  fc.constantFrom<'float32' | 'float16'>('float32', 'float16'),
  fc.integer({ min: 1, max: 3 }),
  fc.integer({ min: 1, max: 3 }),
  fc.integer({ min: 1, max: 4 }),
] as const;

describe('appendSeq', () => {
  it('equals the graph’s Concat after any run of appends, in either layout and dtype', () => {
    fc.assert(
      fc.property(
        ...layouts,
        fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 12 }),
        (combined, dtype, batch, heads, headDim, runs) => {
          const spec = specOf(combined, heads, headDim, dtype);
          let present: ort.Tensor | undefined;
          let expected: number[] = [];
          let seq = 0;
          for (const n of runs) {
            const added = positions(spec, batch, n);
            const before = present ? concatReference(spec, present, added) : Array.from(added.data as Float32Array);
            present = appendSeq(spec, present, added);
            seq += n;
            expected = before;
            expect(present.dims).toEqual(dimsOf(spec, batch, seq));
            expect(present.type).toBe(dtype);
            expect(Array.from(present.data as Float32Array)).toEqual(expected);
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('grows in place while its buffer has room, then moves to one with room for more', () => {
    const spec = specOf(false, 2, 3, 'float32');
    // A whole number of KV_GROWTH_POSITIONS: the buffer still has room for more (at least one spare).
    let present = appendSeq(spec, undefined, positions(spec, 2, KV_GROWTH_POSITIONS));
    const first = (present.data as Float32Array).buffer;
    const room = 2 * KV_GROWTH_POSITIONS;
    expect(first.byteLength).toBe(2 * 2 * room * 3 * 4);
    let seq = KV_GROWTH_POSITIONS;
    while (seq < room) {
      present = appendSeq(spec, present, positions(spec, 2, 1));
      seq++;
      expect((present.data as Float32Array).buffer).toBe(first);
    }
    present = appendSeq(spec, present, positions(spec, 2, 1));
    expect((present.data as Float32Array).buffer).not.toBe(first);
    expect(present.dims).toEqual([2, 2, room + 1, 3]);
  });

  it('keeps no more room than the KV can still reach (its limit), and none past it', () => {
    const spec = specOf(false, 2, 3, 'float32');
    const bytesPer = 2 * 2 * 3 * 4;
    const near = appendSeq(spec, undefined, positions(spec, 2, 5), 7);
    expect((near.data as Float32Array).buffer.byteLength).toBe(7 * bytesPer);
    const grown = appendSeq(spec, near, positions(spec, 2, 2), 7);
    expect((grown.data as Float32Array).buffer).toBe((near.data as Float32Array).buffer);
    const beyond = appendSeq(spec, grown, positions(spec, 2, 1), 7);
    expect((beyond.data as Float32Array).buffer.byteLength).toBe(8 * bytesPer);
  });

  it('never writes over a past it did not make (a session’s saved KV stays what it was)', () => {
    const spec = specOf(false, 2, 4, 'float32');
    // A plain tensor over a buffer with room to spare: still not grown in place.
    const data = new Float32Array(2 * 2 * 64 * 4);
    const held = new ort.Tensor('float32', data.subarray(0, 2 * 2 * 6 * 4), [2, 2, 6, 4]);
    (held.data as Float32Array).forEach((_, i, a) => {
      a[i] = i + 0.5;
    });
    const copy = Array.from(held.data as Float32Array);
    const present = appendSeq(spec, held, positions(spec, 2, 3));
    expect(Array.from(held.data as Float32Array)).toEqual(copy);
    expect((present.data as Float32Array).buffer).not.toBe(data.buffer);
  });

  it('refuses added positions that do not fit the past, naming the present', () => {
    const spec = specOf(false, 2, 4, 'float32');
    const past = appendSeq(spec, undefined, positions(spec, 2, 3));
    const wrong = positions(specOf(false, 3, 4, 'float32'), 2, 1);
    expect(() => appendSeq(spec, past, wrong)).toThrow(KvdeskError);
    expect(() => appendSeq(spec, past, wrong)).toThrow(
      /present\.0: the run added float32 positions of shape \[2, 3, 1, 4\]/,
    );
    const half = positions(specOf(false, 2, 4, 'float16'), 2, 1);
    expect(() => appendSeq(spec, past, half)).toThrow(/float16 positions .* float32 past/);
  });
});

describe('appendGap (KV with room after its positions)', () => {
  it('holds the graph’s Concat in its used positions after any run of appends and cuts, in either layout and dtype', () => {
    fc.assert(
      fc.property(
        ...layouts,
        fc.array(fc.tuple(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 0, max: 3 })), {
          minLength: 1,
          maxLength: 12,
        }),
        (combined, dtype, batch, heads, headDim, runs) => {
          const spec = specOf(combined, heads, headDim, dtype);
          // The first run's positions as the batcher gets them from a prefill: a plain tensor, no room.
          let kv = positions(spec, batch, 1);
          let used = 1;
          let expected = kv;
          for (const [n, cut] of runs) {
            const added = positions(spec, batch, n);
            const want = concatReference(spec, expected, added);
            kv = appendGap(spec, kv, used, added);
            used += n;
            const capacity = kv.dims[spec.seqAxis] as number;
            expect(capacity).toBeGreaterThanOrEqual(used);
            // Room for KV_GROWTH_POSITIONS more when it was made, and the positions a cut gave back since (a cut
            // gives back less than its run added, so the room only grows past that by the latest cut).
            expect(capacity - used).toBeLessThanOrEqual(KV_GROWTH_POSITIONS + 3);
            expect(kv.type).toBe(dtype);
            expect(Array.from(sliceSeq(spec, kv, 0, used).data as Float32Array)).toEqual(want);
            // A draft check's positions that did not count become room again (a cut costs no copy).
            const keep = Math.max(1, used - Math.min(cut, n - 1));
            expected = sliceSeq(spec, kv, 0, keep);
            used = keep;
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('writes into its room in place until it is full, then moves to a buffer with room for more', () => {
    const spec = specOf(false, 2, 3, 'float32');
    let kv = withRoom(spec, positions(spec, 2, 5), 5, 8);
    const first = (kv.data as Float32Array).buffer;
    for (let used = 5; used < 8; used++) {
      kv = appendGap(spec, kv, used, positions(spec, 2, 1));
      expect((kv.data as Float32Array).buffer).toBe(first);
      expect(kv.dims).toEqual([2, 2, 8, 3]);
    }
    kv = appendGap(spec, kv, 8, positions(spec, 2, 1));
    expect((kv.data as Float32Array).buffer).not.toBe(first);
    expect(kv.dims).toEqual([2, 2, KV_GROWTH_POSITIONS, 3]);
  });

  it('keeps no more room than the KV can still reach (its limit)', () => {
    const spec = specOf(false, 2, 3, 'float32');
    const kv = appendGap(spec, positions(spec, 2, 5), 5, positions(spec, 2, 2), 9);
    expect(kv.dims).toEqual([2, 2, 9, 3]);
    expect(appendGap(spec, kv, 7, positions(spec, 2, 2), 9).dims).toEqual([2, 2, 9, 3]);
  });

  it('never writes into a past it did not make, even one with room on its sequence axis', () => {
    const spec = specOf(false, 2, 4, 'float32');
    const held = positions(spec, 2, 6);
    const copy = Array.from(held.data as Float32Array);
    const kv = appendGap(spec, held, 3, positions(spec, 2, 2));
    expect(Array.from(held.data as Float32Array)).toEqual(copy);
    expect((kv.data as Float32Array).buffer).not.toBe((held.data as Float32Array).buffer);
  });

  it('refuses added positions that do not fit the past, naming the present', () => {
    const spec = specOf(false, 2, 4, 'float32');
    const past = withRoom(spec, positions(spec, 2, 3), 3, 6);
    expect(() => appendGap(spec, past, 3, positions(specOf(false, 3, 4, 'float32'), 2, 1))).toThrow(
      /present\.0: the run added float32 positions of shape \[2, 3, 1, 4\]/,
    );
  });

  it('is fed with an attention mask that is 0 over each row’s padding and over the room', () => {
    for (const dtype of ['int64', 'int32'] as const) {
      const mask = maskTensor({ name: 'attention_mask', dtype, shape: ['batch', 'seq'] }, [1, 0], 7, [3, 5]);
      expect(mask.dims).toEqual([2, 7]);
      expect(Array.from(mask.data as BigInt64Array | Int32Array, Number)).toEqual([
        0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1,
      ]);
    }
  });
});

describe('releaseKv with presents grown in place', () => {
  it('leaves the buffer a live present grew into, and frees one nothing live uses', () => {
    const spec = specOf(false, 1, 2, 'float32');
    const past = appendSeq(spec, undefined, positions(spec, 1, 4));
    const present = appendSeq(spec, past, positions(spec, 1, 1));
    const buffer = (present.data as Float32Array).buffer;
    expect((past.data as Float32Array).buffer).toBe(buffer);
    const values = Array.from(present.data as Float32Array);
    releaseKv([past], new Map([['past.0', present]]));
    expect(buffer.byteLength).toBeGreaterThan(0);
    expect(Array.from(present.data as Float32Array)).toEqual(values);
    // The present dead in turn: a view over part of a buffer appendSeq made, freed all the same.
    releaseKv([present], new Map());
    expect(buffer.byteLength).toBe(0);
  });
});
