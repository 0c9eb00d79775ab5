/**
 * Logits of the last position only. A decoder graph scores every position it
 * runs: a 256-token prefill chunk multiplies 256 hidden states by the whole
 * vocabulary matrix (on the GPT-2 shape ~20 GFLOP, a third of the chunk's time)
 * and returns rows × 256 × vocab floats, of which kvdesk samples one row each.
 * Generation only ever reads the last position, so before loading, the engine
 * feeds the LM head a Slice of the final hidden states (the last position of
 * every row: rows are left-padded, so it is the same index for all) and, where
 * the head's output is reshaped back to [batch, seq, vocab], reshapes it to
 * [batch, 1, vocab] instead. Everything before the head is untouched, so the
 * KV cache and the last position's logits are what the original graph gives.
 *
 * The rewritten graph is written to memory, small: each weight stored inside
 * the .onnx file becomes an external-data reference to its bytes in that same
 * file (offset and length), and onnxruntime reads them from there as it reads
 * any external data; weights already external stay as they are. When the
 * graph's head is not recognised the original file loads unchanged, with the
 * reason.
 */
import path from 'node:path';
import {
  type Bytes,
  FileBytes,
  fields,
  lenField,
  stringField,
  varintField,
  WIRE_LEN,
  WIRE_VARINT,
  type WireField,
} from './onnx-wire';

// Field numbers from onnx.proto.
const MODEL_GRAPH = 7;
const MODEL_OPSET_IMPORT = 8;
const OPSET_DOMAIN = 1;
const OPSET_VERSION = 2;
const GRAPH_NODE = 1;
const GRAPH_INITIALIZER = 5;
const NODE_INPUT = 1;
const NODE_OUTPUT = 2;
const NODE_NAME = 3;
const NODE_OP_TYPE = 4;
const NODE_ATTRIBUTE = 5;
const NODE_DOMAIN = 7;
const ATTR_NAME = 1;
const ATTR_I = 3;
const TENSOR_DIMS = 1;
const TENSOR_DATA_TYPE = 2;
const TENSOR_NAME = 8;
const TENSOR_RAW_DATA = 9;
const TENSOR_EXTERNAL_DATA = 13;
const TENSOR_DATA_LOCATION = 14;
const ENTRY_KEY = 1;
const ENTRY_VALUE = 2;
const DATA_LOCATION_EXTERNAL = 1;
const INT64 = 7;

/** An inline tensor payload bigger than this (not raw_data) means a layout this rewrite does not handle. */
const MAX_INLINE_TYPED_BYTES = 16 * 1024 * 1024;
/**
 * Raw payloads under this stay inline in the copy: onnxruntime's shape
 * inference reads small constants (split sizes, shapes, axes) from the graph
 * and cannot read them from external data. Weights are far larger.
 */
const KEEP_INLINE_BYTES = 64 * 1024;
/** Ops between the head and the logits output that act on each position alone. */
const ELEMENTWISE = new Set(['Add', 'Sub', 'Mul', 'Div']);
const UNARY = new Set(['Cast', 'Identity', 'Tanh']);

interface Node {
  /** The node's bytes in the file: [tagStart, end) of its GRAPH_NODE field. */
  field: WireField;
  inputs: string[];
  outputs: string[];
  opType: string;
  domain: string;
  ints: Map<string, number>;
}

/** The rewritten model, or why the graph loads as it is. */
export type LastPositionResult =
  | { ok: true; bytes: Buffer; folder: string; detail: string }
  | { ok: false; reason: string };

function text(src: Bytes, f: WireField): string {
  const raw =
    src instanceof FileBytes ? src.slice(f.valueStart, f.end - f.valueStart) : src.subarray(f.valueStart, f.end);
  return raw.toString('utf8');
}

function readNode(file: FileBytes, f: WireField): Node {
  const buf = Buffer.from(file.slice(f.valueStart, f.end - f.valueStart));
  const node: Node = { field: f, inputs: [], outputs: [], opType: '', domain: '', ints: new Map() };
  for (const g of fields(buf, 0, buf.length)) {
    if (g.field === NODE_INPUT && g.wire === WIRE_LEN) node.inputs.push(text(buf, g));
    else if (g.field === NODE_OUTPUT && g.wire === WIRE_LEN) node.outputs.push(text(buf, g));
    else if (g.field === NODE_OP_TYPE && g.wire === WIRE_LEN) node.opType = text(buf, g);
    else if (g.field === NODE_DOMAIN && g.wire === WIRE_LEN) node.domain = text(buf, g);
    else if (g.field === NODE_ATTRIBUTE && g.wire === WIRE_LEN) {
      let name = '';
      let value: number | undefined;
      for (const a of fields(buf, g.valueStart, g.end)) {
        if (a.field === ATTR_NAME && a.wire === WIRE_LEN) name = text(buf, a);
        else if (a.field === ATTR_I && a.wire === WIRE_VARINT) value = a.varint;
      }
      if (value !== undefined) node.ints.set(name, value);
    }
  }
  return node;
}

/** The node's bytes with some inputs renamed; every other field is copied as it was, in order. */
function renameInputs(file: FileBytes, node: Node, rename: Map<number, string>): Buffer {
  const buf = Buffer.from(file.slice(node.field.valueStart, node.field.end - node.field.valueStart));
  const parts: Buffer[] = [];
  let index = 0;
  for (const g of fields(buf, 0, buf.length)) {
    if (g.field === NODE_INPUT && g.wire === WIRE_LEN) {
      const renamed = rename.get(index++);
      if (renamed !== undefined) {
        parts.push(stringField(NODE_INPUT, renamed));
        continue;
      }
    }
    parts.push(buf.subarray(g.tagStart, g.end));
  }
  return lenField(GRAPH_NODE, Buffer.concat(parts));
}

function newNode(opType: string, inputs: string[], output: string, name: string): Buffer {
  return lenField(
    GRAPH_NODE,
    Buffer.concat([
      ...inputs.map((i) => stringField(NODE_INPUT, i)),
      stringField(NODE_OUTPUT, output),
      stringField(NODE_NAME, name),
      stringField(NODE_OP_TYPE, opType),
    ]),
  );
}

function int64Initializer(name: string, values: bigint[]): Buffer {
  return lenField(
    GRAPH_INITIALIZER,
    Buffer.concat([
      varintField(TENSOR_DIMS, values.length),
      varintField(TENSOR_DATA_TYPE, INT64),
      stringField(TENSOR_NAME, name),
      lenField(TENSOR_RAW_DATA, Buffer.from(BigInt64Array.from(values).buffer)),
    ]),
  );
}

/**
 * An initializer as an external-data reference to its own raw bytes in `file`;
 * null when it is already external or stores no raw_data (copied as it is).
 */
function externalised(file: FileBytes, f: WireField, location: string): Buffer | null {
  const parts: Buffer[] = [];
  let raw: WireField | undefined;
  let typedBytes = 0;
  for (const g of fields(file, f.valueStart, f.end)) {
    if (g.field === TENSOR_DATA_LOCATION && g.varint === DATA_LOCATION_EXTERNAL) return null;
    if (g.field === TENSOR_EXTERNAL_DATA) return null;
    if (g.field === TENSOR_RAW_DATA) {
      raw = g;
      continue;
    }
    if (g.wire === WIRE_LEN && g.field !== TENSOR_NAME) typedBytes += g.end - g.valueStart;
    parts.push(Buffer.from(file.slice(g.tagStart, g.end - g.tagStart)));
  }
  if (!raw) {
    if (typedBytes > MAX_INLINE_TYPED_BYTES) throw new Error('an initializer stores its data in typed fields');
    return null;
  }
  if (raw.end - raw.valueStart < KEEP_INLINE_BYTES) return null;
  const entry = (key: string, value: string) =>
    lenField(TENSOR_EXTERNAL_DATA, Buffer.concat([stringField(ENTRY_KEY, key), stringField(ENTRY_VALUE, value)]));
  parts.push(
    entry('location', location),
    entry('offset', String(raw.valueStart)),
    entry('length', String(raw.end - raw.valueStart)),
    varintField(TENSOR_DATA_LOCATION, DATA_LOCATION_EXTERNAL),
  );
  return lenField(GRAPH_INITIALIZER, Buffer.concat(parts));
}

function initializerName(file: FileBytes, f: WireField): string {
  for (const g of fields(file, f.valueStart, f.end)) {
    if (g.field === TENSOR_NAME && g.wire === WIRE_LEN) return text(file, g);
  }
  return '';
}

function defaultOpset(file: FileBytes, model: WireField[]): number {
  for (const f of model) {
    if (f.field !== MODEL_OPSET_IMPORT) continue;
    let domain = '';
    let version = 0;
    for (const g of fields(file, f.valueStart, f.end)) {
      if (g.field === OPSET_DOMAIN && g.wire === WIRE_LEN) domain = text(file, g);
      else if (g.field === OPSET_VERSION) version = g.varint;
    }
    if (domain === '' || domain === 'ai.onnx') return version;
  }
  return 0;
}

/** What to change: the edge into the head's path, and the reshape back to [batch, seq, vocab] if there is one. */
interface Plan {
  /** The node that reads the final hidden states (its first input) on the way to the head. */
  entry: Node;
  hidden: string;
  /** The Reshape nearest the logits output, when the head's output is reshaped. */
  unflatten?: Node;
  head: Node;
}

function plan(nodes: Node[], constants: Set<string>, logits: string): Plan | string {
  const producer = new Map<string, Node>();
  const consumers = new Map<string, number>();
  for (const n of nodes) {
    for (const o of n.outputs) producer.set(o, n);
    for (const i of n.inputs) consumers.set(i, (consumers.get(i) ?? 0) + 1);
    if (n.opType === 'Constant' && n.domain === '') for (const o of n.outputs) constants.add(o);
  }
  const isConst = (t: string) => constants.has(t);
  const single = (t: string) => (consumers.get(t) ?? 0) === 1;
  // From the logits output back to the head through per-position ops and reshapes.
  let cur = logits;
  let head: Node | undefined;
  const reshapes: Node[] = [];
  for (let steps = 0; steps < 16 && !head; steps++) {
    const n = producer.get(cur);
    if (!n) return `"${cur}" is not computed by a node`;
    if (n.domain !== '' && n.domain !== 'ai.onnx') return `"${cur}" comes from ${n.domain}.${n.opType}`;
    if (n.opType === 'MatMul' && n.inputs.length === 2 && isConst(n.inputs[1] as string)) head = n;
    else if (n.opType === 'Gemm' && isConst(n.inputs[1] as string) && (n.ints.get('transA') ?? 0) === 0) head = n;
    else if (ELEMENTWISE.has(n.opType)) {
      const live = n.inputs.filter((i) => !isConst(i));
      if (live.length !== 1) return `${n.opType} on the way to the logits mixes two computed tensors`;
      cur = live[0] as string;
    } else if (UNARY.has(n.opType)) cur = n.inputs[0] as string;
    else if (n.opType === 'Reshape') {
      reshapes.push(n);
      cur = n.inputs[0] as string;
    } else return `the logits come from ${n.opType}, not from a MatMul or Gemm with a weight`;
    if (!head && !single(cur)) return `"${cur}" on the way to the logits is also read elsewhere`;
  }
  if (!head) return 'no MatMul or Gemm with a weight within 16 nodes of the logits';
  if (reshapes.length > 1) return 'the head output is reshaped more than once';
  // From the head back to the final hidden states through constant-shape reshapes (a flatten before a Gemm).
  let entry = head;
  let hidden = head.inputs[0] as string;
  for (let steps = 0; steps < 4; steps++) {
    const n = producer.get(hidden);
    if (n?.opType !== 'Reshape' || !isConst(n.inputs[1] as string) || !single(hidden)) break;
    entry = n;
    hidden = n.inputs[0] as string;
  }
  if (head.opType === 'Gemm' && reshapes.length === 0) return 'a Gemm head whose output is not reshaped to 3-D';
  const found: Plan = { entry, hidden, head };
  if (reshapes[0]) found.unflatten = reshapes[0];
  return found;
}

/**
 * Builds the last-position copy of the graph at `graphPath` whose logits output
 * is `logits`. Reads the file's structure only (weights are referenced, not read).
 */
export function lastPositionGraph(graphPath: string, logits: string): LastPositionResult {
  let file: FileBytes;
  try {
    file = new FileBytes(graphPath);
  } catch (err) {
    return { ok: false, reason: `cannot read ${graphPath}: ${err instanceof Error ? err.message : String(err)}` };
  }
  try {
    const model = [...fields(file, 0, file.size)];
    const graphField = model.find((f) => f.field === MODEL_GRAPH && f.wire === WIRE_LEN);
    if (!graphField) return { ok: false, reason: 'the file holds no graph' };
    if (defaultOpset(file, model) < 10) return { ok: false, reason: 'opset below 10 has no Slice with inputs' };
    const graph = [...fields(file, graphField.valueStart, graphField.end)];
    const nodes: Node[] = [];
    const constants = new Set<string>();
    for (const f of graph) {
      if (f.field === GRAPH_NODE && f.wire === WIRE_LEN) nodes.push(readNode(file, f));
      else if (f.field === GRAPH_INITIALIZER && f.wire === WIRE_LEN) constants.add(initializerName(file, f));
    }
    const found = plan(nodes, constants, logits);
    if (typeof found === 'string') return { ok: false, reason: found };

    const tag = `/kvdesk/last_position`;
    const sliced = `${found.hidden}${tag}`;
    const names = { starts: `${tag}/starts`, ends: `${tag}/ends`, axes: `${tag}/axes`, shape: `${tag}/shape` };
    if ([sliced, ...Object.values(names)].some((n) => constants.has(n) || nodes.some((x) => x.outputs.includes(n)))) {
      return { ok: false, reason: 'the graph already uses the names this rewrite needs' };
    }
    const location = path.basename(graphPath);
    const nodeOf = new Map(nodes.map((n) => [n.field, n]));
    const parts: Buffer[] = [];
    for (const f of graph) {
      const node = nodeOf.get(f);
      if (node) {
        if (node === found.entry) {
          parts.push(newNode('Slice', [found.hidden, names.starts, names.ends, names.axes], sliced, `${tag}/Slice`));
          parts.push(renameInputs(file, node, new Map([[0, sliced]])));
        } else if (node === found.unflatten) parts.push(renameInputs(file, node, new Map([[1, names.shape]])));
        else parts.push(Buffer.from(file.slice(f.tagStart, f.end - f.tagStart)));
      } else if (f.field === GRAPH_INITIALIZER && f.wire === WIRE_LEN) {
        parts.push(externalised(file, f, location) ?? Buffer.from(file.slice(f.tagStart, f.end - f.tagStart)));
      } else parts.push(Buffer.from(file.slice(f.tagStart, f.end - f.tagStart)));
    }
    parts.push(
      int64Initializer(names.starts, [-1n]),
      int64Initializer(names.ends, [9223372036854775807n]),
      int64Initializer(names.axes, [1n]),
    );
    // [rows, 1, vocab] from the head's [rows, vocab] (or [rows, 1, vocab]): 0 keeps dim 0, -1 takes the rest.
    if (found.unflatten) parts.push(int64Initializer(names.shape, [0n, 1n, -1n]));
    const out: Buffer[] = [];
    for (const f of model) {
      if (f === graphField) out.push(lenField(MODEL_GRAPH, Buffer.concat(parts)));
      else out.push(Buffer.from(file.slice(f.tagStart, f.end - f.tagStart)));
    }
    const detail = `LM head ${found.head.opType} fed the last position of "${found.hidden}"`;
    return { ok: true, bytes: Buffer.concat(out), folder: path.dirname(graphPath), detail };
  } catch (err) {
    return {
      ok: false,
      reason: `could not read the graph's structure: ${err instanceof Error ? err.message : String(err)}`,
    };
  } finally {
    file.close();
  }
}
