/**
 * The weight matrices an ONNX decoder multiplies one row by in a batch-1 decode
 * step: every MatMul or Gemm whose second input is a float32 initializer of two
 * dimensions, read from the file's structure with the engine's own readers
 * (bench/sections/floor.ts builds a graph of those products alone). Reads names,
 * dims and types, not the weights.
 */
import { readNode, tensorHeader } from '../../src/main/engine/last-position';
import { FileBytes, fields } from '../../src/main/engine/onnx-wire';
import { GRAPH_INITIALIZER, GRAPH_NODE, MODEL_GRAPH, TENSOR_FLOAT, WIRE_LEN } from '../../src/shared/onnx-fields';

export interface WeightMatrix {
  name: string;
  /** [K, N]: the row it multiplies has K values, the product N (a Gemm's transposed B is given as multiplied). */
  dims: [number, number];
}

/** Every MatMul/Gemm's float32 2-D initializer B, in node order, each once. */
export function weightMatrices(modelFile: string): WeightMatrix[] {
  const src = new FileBytes(modelFile);
  try {
    const graph = [...fields(src, 0, src.size)].find((f) => f.field === MODEL_GRAPH && f.wire === WIRE_LEN);
    if (!graph) throw new Error(`${modelFile} holds no graph`);
    const matrices = new Map<string, [number, number]>();
    const uses: { b: string; transposed: boolean }[] = [];
    for (const f of fields(src, graph.valueStart, graph.end)) {
      if (f.wire !== WIRE_LEN) continue;
      if (f.field === GRAPH_INITIALIZER) {
        const { name, dims, dataType } = tensorHeader(src, f.valueStart, f.end);
        if (dataType === TENSOR_FLOAT && dims.length === 2) matrices.set(name, dims as [number, number]);
      } else if (f.field === GRAPH_NODE) {
        const node = readNode(src, f);
        const b = node.inputs[1];
        if ((node.opType === 'MatMul' || node.opType === 'Gemm') && b !== undefined) {
          uses.push({ b, transposed: node.opType === 'Gemm' && (node.ints.get('transB') ?? 0) !== 0 });
        }
      }
    }
    const out: WeightMatrix[] = [];
    const seen = new Set<string>();
    for (const u of uses) {
      const dims = matrices.get(u.b);
      if (!dims || seen.has(u.b)) continue;
      seen.add(u.b);
      out.push({ name: u.b, dims: u.transposed ? [dims[1], dims[0]] : dims });
    }
    return out;
  } finally {
    src.close();
  }
}
