/**
 * A copy of a package whose embedding row of one token is NaN: a request whose prompt holds that token computes
 * scores that are not numbers, every other request the same scores as ever (a batch's rows do not mix). Found
 * with the engine's own protobuf walk: the initializer of shape [vocab, hidden] whose name says it embeds.
 */
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fields, readVarint } from '../../src/main/engine/onnx-wire';
import {
  GRAPH_INITIALIZER,
  MODEL_GRAPH,
  TENSOR_DIMS,
  TENSOR_NAME,
  TENSOR_RAW_DATA,
  WIRE_LEN,
} from '../../src/shared/onnx-fields';

export function nanEmbeddingCopy(from: string, to: string, tokenId: number, graph = 'onnx/model.onnx'): void {
  cpSync(from, to, { recursive: true });
  const file = path.join(to, graph);
  const bytes = readFileSync(file);
  const graphField = [...fields(bytes, 0, bytes.length)].find((f) => f.field === MODEL_GRAPH);
  if (!graphField) throw new Error(`${file}: no graph`);
  for (const init of fields(bytes, graphField.valueStart, graphField.end)) {
    if (init.field !== GRAPH_INITIALIZER) continue;
    let name = '';
    const dims: number[] = [];
    let raw: { start: number; end: number } | undefined;
    for (const f of fields(bytes, init.valueStart, init.end)) {
      if (f.field === TENSOR_NAME) name = bytes.subarray(f.valueStart, f.end).toString('utf8');
      else if (f.field === TENSOR_DIMS && f.wire === WIRE_LEN) {
        // Packed dims: varints one after another.
        for (let at = f.valueStart; at < f.end; ) {
          const [d, next] = readVarint(bytes, at);
          dims.push(d);
          at = next;
        }
      } else if (f.field === TENSOR_DIMS) dims.push(f.varint);
      else if (f.field === TENSOR_RAW_DATA) raw = { start: f.valueStart, end: f.end };
    }
    if (dims.length !== 2 || !raw || !/emb|wte|tok/i.test(name)) continue;
    const hidden = dims[1] as number;
    if (tokenId >= (dims[0] as number)) throw new Error(`${name} has ${dims[0]} rows, not ${tokenId + 1}`);
    const row = Buffer.alloc(hidden * 4);
    for (let i = 0; i < hidden; i++) row.writeFloatLE(Number.NaN, i * 4);
    row.copy(bytes, raw.start + tokenId * hidden * 4);
    writeFileSync(file, bytes);
    return;
  }
  throw new Error(`${file}: no embedding initializer with raw data found`);
}
