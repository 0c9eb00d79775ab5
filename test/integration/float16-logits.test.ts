/**
 * float16 logits (fp16 exports): onnxruntime-node returns them as raw half
 * bits. The engine must sample the numbers those bits stand for. The default
 * model runs on the real onnxruntime; its float32 logits are turned into a
 * float16 tensor before the batcher sees them, and the tokens must be those of
 * the same logits rounded to half precision but handed over as float32.
 */
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ContinuousBatcher } from '../../src/main/engine/batcher';
import { logitsRows } from '../../src/main/engine/logits';
import { loadModelSpec } from '../../src/main/packages';
import type { ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir } from '../helpers/fixtures';
import { greedyIds } from '../helpers/generation';

/** IEEE half bits of a float32 value (round half up; enough for a test). */
function toHalf(value: number): number {
  const u = new Uint32Array(Float32Array.of(value).buffer)[0] as number;
  const sign = (u >>> 16) & 0x8000;
  let exp = ((u >>> 23) & 0xff) - 112;
  let mant = u & 0x7fffff;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant = (mant | 0x800000) >> (1 - exp);
    return sign | ((mant + 0x1000) >> 13);
  }
  mant += 0x1000;
  if (mant & 0x800000) {
    mant = 0;
    exp += 1;
    if (exp >= 31) return sign | 0x7c00;
  }
  return sign | (exp << 10) | (mant >> 13);
}

/** The value of half bits, by the formula (independent of the engine's table). */
function fromHalf(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

describe('float16 logits', () => {
  let spec: ModelSpec;
  let session: ort.InferenceSession;
  beforeAll(async () => {
    spec = await loadModelSpec(defaultModelDir);
    session = await ort.InferenceSession.create(spec.graphPath, { intraOpNumThreads: 2, logSeverityLevel: 3 });
  });
  afterAll(async () => {
    await session.release();
  });

  it('converts half bits to their values, last position of each row only', () => {
    const values = [0, 1, -1, 0.5, -2.25, 65504, -65504, 2 ** -24, -(2 ** -14), 1000.5];
    const bits = Uint16Array.from(values, toHalf);
    // Two rows × two positions × 5 "vocab" entries; row r's last position holds values[5r..5r+5).
    const data = new Uint16Array(20);
    data.set(bits.subarray(0, 5), 5);
    data.set(bits.subarray(5, 10), 15);
    const rows = logitsRows(new ort.Tensor('float16', data, [2, 2, 5]));
    expect(rows.seq).toBe(1);
    expect(rows.vocab).toBe(5);
    expect([...rows.data]).toEqual(values.map((v) => fromHalf(toHalf(v))));
  });

  it('converts every position of each row when asked (a lookup draft check samples them all)', () => {
    const values = Array.from({ length: 12 }, (_, i) => (i - 5.5) * 0.75);
    const rows = logitsRows(new ort.Tensor('float16', Uint16Array.from(values, toHalf), [2, 2, 3]), true);
    expect(rows.seq).toBe(2);
    expect(rows.vocab).toBe(3);
    expect([...rows.data]).toEqual(values.map((v) => fromHalf(toHalf(v))));
  });

  it('refuses logits that are not [batch, sequence, vocabulary]', () => {
    expect(() => logitsRows(new ort.Tensor('float32', new Float32Array(10), [2, 5]))).toThrow(
      /logits have shape \[2, 5\]; kvdesk samples logits of shape \[batch, sequence, vocabulary\]/,
    );
  });

  it('samples the numbers the bits stand for: the tokens of the same logits given as float32', async () => {
    const rounded = (out: ort.InferenceSession.OnnxValueMapType, asHalf: boolean) => {
      const logits = out[spec.ports.logits.name] as ort.Tensor;
      const bits = Uint16Array.from(logits.data as Float32Array, toHalf);
      const next = { ...out };
      next[spec.ports.logits.name] = asHalf
        ? new ort.Tensor('float16', bits, logits.dims)
        : new ort.Tensor('float32', Float32Array.from(bits, fromHalf), logits.dims);
      return next;
    };
    const run = async (asHalf: boolean) => {
      if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a past/present graph');
      const batcher = new ContinuousBatcher(
        spec,
        spec.kv.tensors,
        async (feeds) => rounded(await session.run(feeds), asHalf),
        () => true,
        256,
      );
      const rows = [
        Array.from({ length: 20 }, (_, i) => 3 + ((i * 37) % 500)),
        Array.from({ length: 12 }, (_, i) => 5 + ((i * 53) % 500)),
      ];
      return greedyIds((job, hooks) => batcher.submit(job, hooks), rows, 10);
    };
    const viaFloat32 = await run(false);
    expect(viaFloat32.map((r) => r.length)).toEqual([10, 10]);
    expect(await run(true)).toEqual(viaFloat32);
  });
});
