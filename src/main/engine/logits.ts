/**
 * The rows of logits a step samples from, as float32. onnxruntime-node hands a
 * float16 output (fp16 exports) to JavaScript as raw half-precision bits in a
 * Uint16Array (or a Float16Array where the runtime has one): sampling those
 * bits as numbers would rank every negative logit backwards. Only the last
 * position of each row is converted.
 */
import type * as ort from 'onnxruntime-node';
import { KvdeskError } from '../../shared/errors';

/** Logits rows: `data` holds rows × seq × vocab floats; a step samples position seq − 1 of each row. */
export interface LogitsRows {
  data: Float32Array;
  seq: number;
  vocab: number;
}

let halfTable: Float32Array | null = null;

/** float32 value of every 16-bit half pattern (256 KiB, built once). */
function halves(): Float32Array {
  if (halfTable) return halfTable;
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const mant = h & 0x3ff;
    if (exp === 0) table[h] = sign * mant * 2 ** -24;
    else if (exp === 31) table[h] = mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
    else table[h] = sign * (1 + mant / 1024) * 2 ** (exp - 15);
  }
  halfTable = table;
  return table;
}

/**
 * The logits output of a run, [rows, seq, vocab], as float32 rows (float32 outputs as they are); a float16
 * output keeps the last position of each row only, unless `every` asks for every position.
 */
export function logitsRows(t: ort.Tensor, every = false): LogitsRows {
  if (t.dims.length !== 3) {
    throw new KvdeskError(
      'ENGINE_FAILED',
      `the graph's logits have shape [${t.dims.join(', ')}]; kvdesk samples logits of shape [batch, sequence, vocabulary]`,
    );
  }
  const [rows, seq, vocab] = t.dims as [number, number, number];
  if (t.type === 'float32') return { data: t.data as Float32Array, seq, vocab };
  if (t.type !== 'float16') {
    throw new KvdeskError(
      'ENGINE_FAILED',
      `the graph's logits are ${t.type}; kvdesk samples float32 or float16 logits`,
    );
  }
  const kept = every ? seq : 1;
  const out = new Float32Array(rows * kept * vocab);
  const data = t.data as ArrayLike<number>;
  const bits = data instanceof Uint16Array ? halves() : null;
  for (let r = 0; r < rows; r++) {
    for (let p = seq - kept; p < seq; p++) {
      const from = (r * seq + p) * vocab;
      const to = (r * kept + p - (seq - kept)) * vocab;
      for (let i = 0; i < vocab; i++) {
        const v = data[from + i] as number;
        out[to + i] = bits ? (bits[v] as number) : v;
      }
    }
  }
  return { data: out, seq: kept, vocab };
}
