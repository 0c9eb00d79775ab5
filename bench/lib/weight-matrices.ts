/**
 * The weight matrices an ONNX decoder multiplies one row by in a batch-1 decode
 * step: every MatMul or Gemm whose second input is a float32 initializer of two
 * dimensions, read from the file's structure (bench/sections/floor.ts builds a
 * graph of those products alone). Reads names, dims and types, not the weights.
 */
import { FileBytes, fields, readSignedVarint, type WireField } from '../../src/main/engine/onnx-wire';
import {
  ATTR_I,
  ATTR_NAME,
  GRAPH_INITIALIZER,
  GRAPH_NODE,
  MODEL_GRAPH,
  NODE_ATTRIBUTE,
  NODE_INPUT,
  NODE_OP_TYPE,
  TENSOR_DATA_TYPE,
  TENSOR_DIMS,
  TENSOR_NAME,
  WIRE_LEN,
  WIRE_VARINT,
} from '../../src/shared/onnx-fields';

/** TensorProto.DataType FLOAT. */
const FLOAT = 1;

export interface WeightMatrix {
  name: string;
  /** [K, N]: the row it multiplies has K values, the product N (a Gemm's transposed B is given as multiplied). */
  dims: [number, number];
}

function text(src: FileBytes, f: WireField): string {
  return src.read(f.valueStart, f.end - f.valueStart).toString('utf8');
}

/** Every MatMul/Gemm's float32 2-D initializer B, in node order, each once. */
export function weightMatrices(modelFile: string): WeightMatrix[] {
  const src = new FileBytes(modelFile);
  try {
    const graph = [...fields(src, 0, src.size)].find((f) => f.field === MODEL_GRAPH && f.wire === WIRE_LEN);
    if (!graph) throw new Error(`${modelFile} holds no graph`);
    const matrices = new Map<string, [number, number]>();
    const uses: { op: string; b: string; transB: boolean }[] = [];
    for (const f of fields(src, graph.valueStart, graph.end)) {
      if (f.wire !== WIRE_LEN) continue;
      if (f.field === GRAPH_INITIALIZER) {
        let name = '';
        let type = 0;
        const dims: number[] = [];
        for (const g of fields(src, f.valueStart, f.end)) {
          if (g.field === TENSOR_NAME && g.wire === WIRE_LEN) name = text(src, g);
          else if (g.field === TENSOR_DATA_TYPE && g.wire === WIRE_VARINT) type = g.varint;
          else if (g.field === TENSOR_DIMS && g.wire === WIRE_VARINT) dims.push(g.varint);
          else if (g.field === TENSOR_DIMS && g.wire === WIRE_LEN) {
            for (let pos = g.valueStart; pos < g.end; ) {
              const [v, next] = readSignedVarint(src, pos);
              dims.push(v);
              pos = next;
            }
          }
        }
        if (type === FLOAT && dims.length === 2) matrices.set(name, dims as [number, number]);
      } else if (f.field === GRAPH_NODE) {
        let op = '';
        const inputs: string[] = [];
        let transB = false;
        for (const g of fields(src, f.valueStart, f.end)) {
          if (g.field === NODE_OP_TYPE && g.wire === WIRE_LEN) op = text(src, g);
          else if (g.field === NODE_INPUT && g.wire === WIRE_LEN) inputs.push(text(src, g));
          else if (g.field === NODE_ATTRIBUTE && g.wire === WIRE_LEN) {
            let name = '';
            let value = 0;
            for (const a of fields(src, g.valueStart, g.end)) {
              if (a.field === ATTR_NAME && a.wire === WIRE_LEN) name = text(src, a);
              else if (a.field === ATTR_I && a.wire === WIRE_VARINT) value = a.varint;
            }
            if (name === 'transB') transB = value !== 0;
          }
        }
        if ((op === 'MatMul' || op === 'Gemm') && inputs[1] !== undefined) uses.push({ op, b: inputs[1], transB });
      }
    }
    const out: WeightMatrix[] = [];
    const seen = new Set<string>();
    for (const u of uses) {
      const dims = matrices.get(u.b);
      if (!dims || seen.has(u.b)) continue;
      seen.add(u.b);
      out.push({ name: u.b, dims: u.op === 'Gemm' && u.transB ? [dims[1], dims[0]] : dims });
    }
    return out;
  } finally {
    src.close();
  }
}
