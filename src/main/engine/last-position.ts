/**
 * Logits of the last position only. A decoder graph scores every position it
 * runs: a 256-token prefill chunk multiplies 256 hidden states by the whole
 * vocabulary matrix (on the GPT-2 shape ~20 GFLOP, a third of the chunk's time)
 * and returns rows × 256 × vocab floats, of which kvdesk samples one row each.
 * Generation only ever reads the last position, so before loading, the engine
 * feeds the LM head a Slice of the final hidden states (the last position of
 * every row: rows are left-padded, so it is the same index for all; the batcher's
 * right layout pads no row of a run whose logits it reads) and, where
 * the head's output is reshaped back to [batch, seq, vocab], reshapes it to
 * [batch, 1, vocab] instead. The Slice's start is an added input, fed −1; fed
 * −n, the copy scores the last n positions (lookup decoding checks a draft so).
 * Everything before the head is untouched, so the KV cache and the scored
 * positions' logits are what the original graph gives.
 *
 * The rewritten graph is written to memory, small: each weight stored inside
 * the .onnx file becomes an external-data reference to its bytes in that same
 * file (offset and length), and onnxruntime reads them from there as it reads
 * any external data; weights already external stay where they are. Both are
 * named from the folder of the graph's real file (a package's graph may be a
 * link, as a Hugging Face cache's files are). When the graph's head is not
 * recognised the original file loads unchanged, with the reason. The engine
 * checks the copy before using it (decoder.ts).
 */
import { realpathSync } from 'node:fs';
import path from 'node:path';
import type { KvTensorSpec } from '../../shared/model-spec';
import {
  ATTR_F,
  ATTR_G,
  ATTR_GRAPHS,
  ATTR_I,
  ATTR_INTS,
  ATTR_NAME,
  ATTR_T,
  ATTR_TYPE,
  DATA_LOCATION_EXTERNAL,
  DIM_VALUE,
  ENTRY_KEY,
  ENTRY_VALUE,
  GRAPH_INITIALIZER,
  GRAPH_INPUT,
  GRAPH_NAME,
  GRAPH_NODE,
  GRAPH_OUTPUT,
  GRAPH_VALUE_INFO,
  INT64,
  MODEL_GRAPH,
  MODEL_OPSET_IMPORT,
  NODE_ATTRIBUTE,
  NODE_DOMAIN,
  NODE_INPUT,
  NODE_NAME,
  NODE_OP_TYPE,
  NODE_OUTPUT,
  OPSET_DOMAIN,
  OPSET_VERSION,
  SHAPE_DIM,
  TENSOR_BOOL,
  TENSOR_DATA_LOCATION,
  TENSOR_DATA_TYPE,
  TENSOR_DIMS,
  TENSOR_EXTERNAL_DATA,
  TENSOR_FLOAT,
  TENSOR_FLOAT16,
  TENSOR_INT8,
  TENSOR_INT64_DATA,
  TENSOR_NAME,
  TENSOR_RAW_DATA,
  TENSOR_TYPE_ELEM,
  TENSOR_TYPE_SHAPE,
  TYPE_TENSOR,
  VALUE_INFO_NAME,
  VALUE_INFO_TYPE,
  WIRE_FIXED32,
  WIRE_LEN,
  WIRE_VARINT,
} from '../../shared/onnx-fields';
import {
  buildHeadScreen,
  FileRows,
  type HeadLayout,
  type HeadRows,
  type HeadScreen,
  type PackedHead,
} from './head-screen';
import {
  type Bytes,
  FileBytes,
  fields,
  lenField,
  lenHeader,
  readSignedVarint,
  stringField,
  varintField,
  type WireField,
} from './onnx-wire';

/**
 * Raw payloads under this stay inline in the copy: onnxruntime's shape
 * inference reads small constants (split sizes, shapes, axes) from the graph
 * and cannot read them from external data. Weights are far larger.
 */
const KEEP_INLINE_BYTES = 64 * 1024;
/**
 * The copy is built on the engine's thread and held until onnxruntime has read
 * it; a graph whose structure alone is bigger (weights in Constant nodes or in
 * typed fields, which stay inline) loads as it is instead.
 */
const MAX_COPY_BYTES = 64 * 1024 * 1024;
/** Ops between the head and the logits output that act on each position alone. */
const ELEMENTWISE = new Set(['Add', 'Sub', 'Mul', 'Div']);
const UNARY = new Set(['Cast', 'Identity', 'Tanh']);

export interface Node {
  /** The node's bytes in the file: [tagStart, end) of its GRAPH_NODE field. */
  field: WireField;
  inputs: string[];
  outputs: string[];
  opType: string;
  domain: string;
  ints: Map<string, number>;
  /** Integer-list attributes (a Transpose's perm). */
  intLists: Map<string, number[]>;
  /** Float attributes (a Gemm's alpha and beta). */
  floats: Map<string, number>;
  /** Names its subgraphs (If/Loop/Scan bodies) read, their own included. */
  subgraphNames: string[];
  /** A Constant node's tensor dims. */
  constantDims?: number[];
}

/** The rewritten model, or why the graph loads as it is. */
export type LastPositionResult =
  | {
      ok: true;
      bytes: Buffer;
      folder: string;
      /** The vocabulary the head scores (its weight's output dim): the copy's logits are [rows, 1, vocab]. */
      vocab: number;
      /**
       * The copy's added int64 [1] input: the first position the head scores, counted from the end. Fed −1, the
       * logits are the last position's; fed −n, [rows, n, vocab] — the last n (a lookup draft's check, batcher.ts).
       */
      startsInput: string;
      detail: string;
      /** The 8-bit screen of the head, when asked for and the head allows it (head-screen.ts). */
      screen?: LastPositionScreen;
      /** Why the head has no screen. */
      screenReason?: string;
      /**
       * Each KV past input → the copy's output of the positions a run adds to it (its present is Concat(past,
       * added) along the sequence axis): the engine fetches these and builds the presents itself (appendSeq).
       */
      kvAdded?: Map<string, string>;
      /** Why the presents are fetched whole. */
      kvAddedReason?: string;
      /**
       * True: the copy computes attention over each past KV and the positions a run adds apart, and has no present
       * outputs (splitPlan): the engine builds the presents from kvAdded.
       */
      split?: true;
      /** Why the copy's attention reads the graph's Concat of the KV (asked for, or not asked). */
      splitReason?: string;
    }
  | { ok: false; reason: string };

/** The copy's screened head: its data, the bool input that asks for full scores, the head's input as an output. */
export interface LastPositionScreen {
  data: HeadScreen;
  fullInput: string;
  hiddenOutput: string;
}

/** Whether the model imports an opset of `domain`. */
function importsDomain(file: FileBytes, model: WireField[], domain: string): boolean {
  return model.some(
    (f) =>
      f.field === MODEL_OPSET_IMPORT &&
      [...fields(file, f.valueStart, f.end)].some((g) => g.field === OPSET_DOMAIN && text(file, g) === domain),
  );
}

/** A copy of bytes [start, end) of `file`. */
function copy(file: FileBytes, start: number, end: number): Buffer {
  return Buffer.from(file.read(start, end - start));
}

function text(src: Bytes, f: WireField): string {
  const raw =
    src instanceof FileBytes ? src.read(f.valueStart, f.end - f.valueStart) : src.subarray(f.valueStart, f.end);
  return raw.toString('utf8');
}

/** The values of a repeated int64 field, one element (unpacked) or a packed run of varints; signed. */
function pushInts(src: Bytes, f: WireField, into: number[]): void {
  if (f.wire === WIRE_VARINT) {
    into.push(readSignedVarint(src, f.valueStart)[0]);
    return;
  }
  for (let pos = f.valueStart; pos < f.end; ) {
    const [v, next] = readSignedVarint(src, pos);
    into.push(v);
    pos = next;
  }
}

/** A TensorProto's dims (packed or not) and name; reads no tensor data. */
export function tensorHeader(
  src: Bytes,
  start: number,
  end: number,
): { name: string; dims: number[]; dataType: number } {
  let name = '';
  let dataType = 0;
  const dims: number[] = [];
  for (const g of fields(src, start, end)) {
    if (g.field === TENSOR_NAME && g.wire === WIRE_LEN) name = text(src, g);
    else if (g.field === TENSOR_DATA_TYPE && g.wire === WIRE_VARINT) dataType = g.varint;
    else if (g.field === TENSOR_DIMS && (g.wire === WIRE_VARINT || g.wire === WIRE_LEN)) pushInts(src, g, dims);
  }
  return { name, dims, dataType };
}

/** Every name the nodes of a GraphProto read or write, nested subgraphs included. */
function graphNames(buf: Buffer, start: number, end: number, into: string[]): void {
  for (const g of fields(buf, start, end)) {
    if (g.field !== GRAPH_NODE || g.wire !== WIRE_LEN) continue;
    for (const f of fields(buf, g.valueStart, g.end)) {
      if ((f.field === NODE_INPUT || f.field === NODE_OUTPUT) && f.wire === WIRE_LEN) into.push(text(buf, f));
      else if (f.field === NODE_ATTRIBUTE && f.wire === WIRE_LEN) attributeGraphNames(buf, f, into);
    }
  }
}

function attributeGraphNames(buf: Buffer, attr: WireField, into: string[]): void {
  for (const a of fields(buf, attr.valueStart, attr.end)) {
    if ((a.field === ATTR_G || a.field === ATTR_GRAPHS) && a.wire === WIRE_LEN)
      graphNames(buf, a.valueStart, a.end, into);
  }
}

export function readNode(file: FileBytes, f: WireField): Node {
  const buf = copy(file, f.valueStart, f.end);
  const node: Node = {
    field: f,
    inputs: [],
    outputs: [],
    opType: '',
    domain: '',
    ints: new Map(),
    intLists: new Map(),
    floats: new Map(),
    subgraphNames: [],
  };
  for (const g of fields(buf, 0, buf.length)) {
    if (g.field === NODE_INPUT && g.wire === WIRE_LEN) node.inputs.push(text(buf, g));
    else if (g.field === NODE_OUTPUT && g.wire === WIRE_LEN) node.outputs.push(text(buf, g));
    else if (g.field === NODE_OP_TYPE && g.wire === WIRE_LEN) node.opType = text(buf, g);
    else if (g.field === NODE_DOMAIN && g.wire === WIRE_LEN) node.domain = text(buf, g);
    else if (g.field === NODE_ATTRIBUTE && g.wire === WIRE_LEN) {
      let name = '';
      let value: number | undefined;
      let float: number | undefined;
      const list: number[] = [];
      let tensor: WireField | undefined;
      for (const a of fields(buf, g.valueStart, g.end)) {
        if (a.field === ATTR_NAME && a.wire === WIRE_LEN) name = text(buf, a);
        else if (a.field === ATTR_I && a.wire === WIRE_VARINT) value = readSignedVarint(buf, a.valueStart)[0];
        else if (a.field === ATTR_F && a.wire === WIRE_FIXED32) float = buf.readFloatLE(a.valueStart);
        else if (a.field === ATTR_INTS && (a.wire === WIRE_VARINT || a.wire === WIRE_LEN)) pushInts(buf, a, list);
        else if (a.field === ATTR_T && a.wire === WIRE_LEN) tensor = a;
      }
      if (value !== undefined) node.ints.set(name, value);
      if (float !== undefined) node.floats.set(name, float);
      if (list.length > 0) node.intLists.set(name, list);
      if (tensor && name === 'value') node.constantDims = tensorHeader(buf, tensor.valueStart, tensor.end).dims;
      attributeGraphNames(buf, g, node.subgraphNames);
    }
  }
  return node;
}

/**
 * The node's bytes with some inputs (and outputs) renamed, and its name where `name` is given (a second copy of a
 * node needs its own); every other field is copied as it was, in order.
 */
function renameInputs(
  file: FileBytes,
  node: Node,
  rename: Map<number, string>,
  renameOutputs = new Map<number, string>(),
  name?: string,
): Buffer {
  const buf = copy(file, node.field.valueStart, node.field.end);
  const parts: Buffer[] = [];
  let input = 0;
  let output = 0;
  for (const g of fields(buf, 0, buf.length)) {
    const isInput = g.field === NODE_INPUT && g.wire === WIRE_LEN;
    const isOutput = g.field === NODE_OUTPUT && g.wire === WIRE_LEN;
    if (name !== undefined && g.field === NODE_NAME) continue;
    const renamed = isInput ? rename.get(input++) : isOutput ? renameOutputs.get(output++) : undefined;
    parts.push(renamed !== undefined ? stringField(g.field, renamed) : buf.subarray(g.tagStart, g.end));
  }
  if (name !== undefined) parts.push(stringField(NODE_NAME, name));
  return lenField(GRAPH_NODE, Buffer.concat(parts));
}

/** AttributeProto.type of an integer attribute. */
const ATTRIBUTE_INT = 2;
/** AttributeProto.type of a graph attribute (an If's branches). */
const ATTRIBUTE_GRAPH = 5;

function intAttribute(key: string, value: number): Buffer {
  return lenField(
    NODE_ATTRIBUTE,
    Buffer.concat([stringField(ATTR_NAME, key), varintField(ATTR_I, value), varintField(ATTR_TYPE, ATTRIBUTE_INT)]),
  );
}

/** A NodeProto (as a graph's node field) with any attributes, in any domain. */
function buildNode(opType: string, inputs: string[], output: string, name: string, attributes: Buffer[], domain = '') {
  return lenField(
    GRAPH_NODE,
    Buffer.concat([
      ...inputs.map((i) => stringField(NODE_INPUT, i)),
      stringField(NODE_OUTPUT, output),
      stringField(NODE_NAME, name),
      stringField(NODE_OP_TYPE, opType),
      ...(domain ? [stringField(NODE_DOMAIN, domain)] : []),
      ...attributes,
    ]),
  );
}

/** A ValueInfoProto's payload: a tensor of `elem` (shape unstated, or `dims`; [] is a scalar). */
function valueInfo(name: string, elem: number, dims?: number[]): Buffer {
  const shape =
    dims === undefined
      ? []
      : [lenField(TENSOR_TYPE_SHAPE, Buffer.concat(dims.map((d) => lenField(SHAPE_DIM, varintField(DIM_VALUE, d)))))];
  const tensorType = Buffer.concat([varintField(TENSOR_TYPE_ELEM, elem), ...shape]);
  return Buffer.concat([
    stringField(VALUE_INFO_NAME, name),
    lenField(VALUE_INFO_TYPE, lenField(TYPE_TENSOR, tensorType)),
  ]);
}

/** An If branch: its nodes and its one float output. */
function branchAttribute(key: string, nodes: Buffer[], output: string): Buffer {
  const graph = Buffer.concat([
    ...nodes,
    stringField(GRAPH_NAME, key),
    lenField(GRAPH_OUTPUT, valueInfo(output, TENSOR_FLOAT)),
  ]);
  return lenField(
    NODE_ATTRIBUTE,
    Buffer.concat([stringField(ATTR_NAME, key), lenField(ATTR_G, graph), varintField(ATTR_TYPE, ATTRIBUTE_GRAPH)]),
  );
}

/** An initializer holding `raw`, as parts to write in order (the payload is not copied). */
function rawInitializer(name: string, elem: number, dims: number[], raw: Uint8Array): Buffer[] {
  const head = Buffer.concat([
    ...dims.map((d) => varintField(TENSOR_DIMS, d)),
    varintField(TENSOR_DATA_TYPE, elem),
    stringField(TENSOR_NAME, name),
  ]);
  const rawHeader = lenHeader(TENSOR_RAW_DATA, raw.length);
  return [
    lenHeader(GRAPH_INITIALIZER, head.length + rawHeader.length + raw.length),
    head,
    rawHeader,
    Buffer.from(raw.buffer, raw.byteOffset, raw.length),
  ];
}

function newNode(
  opType: string,
  inputs: string[],
  output: string,
  name: string,
  ints: Record<string, number> = {},
): Buffer {
  const attributes = Object.entries(ints).map(([key, value]) => intAttribute(key, value));
  return buildNode(opType, inputs, output, name, attributes);
}

/** A graph input of type int64 and shape [length]. */
function int64Input(name: string, length: number): Buffer {
  const dim = lenField(SHAPE_DIM, varintField(DIM_VALUE, length));
  const tensorType = Buffer.concat([varintField(TENSOR_TYPE_ELEM, INT64), lenField(TENSOR_TYPE_SHAPE, dim)]);
  return lenField(
    GRAPH_INPUT,
    Buffer.concat([stringField(VALUE_INFO_NAME, name), lenField(VALUE_INFO_TYPE, lenField(TYPE_TENSOR, tensorType))]),
  );
}

function int64Initializer(name: string, values: bigint[]): Buffer {
  // raw_data is little-endian by definition, whatever the machine.
  const raw = Buffer.alloc(8 * values.length);
  values.forEach((v, i) => {
    raw.writeBigInt64LE(v, 8 * i);
  });
  return lenField(
    GRAPH_INITIALIZER,
    Buffer.concat([
      varintField(TENSOR_DIMS, values.length),
      varintField(TENSOR_DATA_TYPE, INT64),
      stringField(TENSOR_NAME, name),
      lenField(TENSOR_RAW_DATA, raw),
    ]),
  );
}

/** One key = value entry of a tensor's external_data. */
function externalEntry(key: string, value: string): Buffer {
  return lenField(TENSOR_EXTERNAL_DATA, Buffer.concat([stringField(ENTRY_KEY, key), stringField(ENTRY_VALUE, value)]));
}

/** A tensor's external_data entries (of its fields, `tensor`): key → its value and the entry's field. */
function externalEntries(file: FileBytes, tensor: WireField[]): Map<string, { value: string; entry: WireField }> {
  const entries = new Map<string, { value: string; entry: WireField }>();
  for (const g of tensor) {
    if (g.field !== TENSOR_EXTERNAL_DATA || g.wire !== WIRE_LEN) continue;
    let key = '';
    let value = '';
    for (const e of fields(file, g.valueStart, g.end)) {
      if (e.field === ENTRY_KEY) key = text(file, e);
      else if (e.field === ENTRY_VALUE) value = text(file, e);
    }
    entries.set(key, { value, entry: g });
  }
  return entries;
}

/**
 * An initializer as an external-data reference to its own raw bytes in `file`;
 * null when it is already external, small, or stores no raw_data (copied as it is).
 */
function externalised(file: FileBytes, f: WireField, location: string): Buffer | null {
  const tensor = [...fields(file, f.valueStart, f.end)];
  const external = (g: WireField) =>
    g.field === TENSOR_EXTERNAL_DATA || (g.field === TENSOR_DATA_LOCATION && g.varint === DATA_LOCATION_EXTERNAL);
  if (tensor.some(external)) return null;
  const raw = tensor.find((g) => g.field === TENSOR_RAW_DATA);
  if (!raw || raw.end - raw.valueStart < KEEP_INLINE_BYTES) return null;
  const parts = tensor
    .filter((g) => g !== raw && g.field !== TENSOR_DATA_LOCATION)
    .map((g) => copy(file, g.tagStart, g.end));
  parts.push(
    externalEntry('location', location),
    externalEntry('offset', String(raw.valueStart)),
    externalEntry('length', String(raw.end - raw.valueStart)),
    varintField(TENSOR_DATA_LOCATION, DATA_LOCATION_EXTERNAL),
  );
  return lenField(GRAPH_INITIALIZER, Buffer.concat(parts));
}

/**
 * An initializer already in external data, its location named from `folder` (where the copy's weights are read:
 * the graph's real folder) instead of from `graphDir` (the graph file's, a link's perhaps, where the original graph
 * names it from); null when that is the same name (copied as it is). Throws DataElsewhere when its real path is not
 * inside `folder`: onnxruntime refuses such a path.
 */
function relocated(file: FileBytes, f: WireField, graphDir: string, folder: string): Buffer | null {
  const tensor = [...fields(file, f.valueStart, f.end)];
  const location = externalEntries(file, tensor).get('location');
  if (!location) return null;
  const name = location.value;
  const target = realpathSync(path.join(graphDir, name));
  const from = path.relative(folder, target);
  if (from === name) return null;
  if (from.startsWith('..') || path.isAbsolute(from)) {
    throw new DataElsewhere(`the external data "${name}" is not in the folder of the graph's real file (${folder})`);
  }
  const entry = externalEntry('location', from);
  const parts = tensor.map((g) => (g === location.entry ? entry : copy(file, g.tagStart, g.end)));
  return lenField(GRAPH_INITIALIZER, Buffer.concat(parts));
}

/** The default domain's opset version; null when the file declares none. */
function defaultOpset(file: FileBytes, model: WireField[]): number | null {
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
  return null;
}

/** What to change: the edge into the head's path, and the reshape back to [batch, seq, vocab] if there is one. */
interface Plan {
  /** The node that reads the final hidden states (its first input) on the way to the head. */
  entry: Node;
  hidden: string;
  /** The Reshape nearest the logits output, when the head's output is reshaped. */
  unflatten?: Node;
  head: Node;
  /** Output dim of the head's weight: the vocabulary the logits score. */
  vocab: number;
  /** The nodes between the head and the logits output, nearest the logits first. */
  after: Node[];
  /** The node that computes each name. */
  producer: Map<string, Node>;
  /** The dims of a constant (an initializer or a Constant node's output); undefined for a computed value. */
  dimsOf: (name: string) => number[] | undefined;
}

/**
 * onnxruntime's block-quantized product (int4/int8 weights, as onnxruntime-genai
 * and Olive export LM heads): A [.., K] × packed B → [.., N]; attribute N is the
 * output width.
 */
function isQuantizedHead(n: Node): boolean {
  return n.domain === 'com.microsoft' && n.opType === 'MatMulNBits' && n.ints.has('N');
}

function plan(nodes: Node[], initializerDims: Map<string, number[]>, logits: string): Plan | string {
  const producer = new Map<string, Node>();
  const consumers = new Map<string, number>();
  const constantDims = new Map<string, number[]>();
  const read = (name: string) => consumers.set(name, (consumers.get(name) ?? 0) + 1);
  for (const n of nodes) {
    for (const o of n.outputs) producer.set(o, n);
    for (const i of n.inputs) read(i);
    // A subgraph may read any outer name: count each as one more reader.
    for (const i of new Set(n.subgraphNames)) read(i);
    if (n.opType === 'Constant' && n.domain === '' && n.constantDims) {
      for (const o of n.outputs) constantDims.set(o, n.constantDims);
    }
  }
  const dimsOf = (t: string) => initializerDims.get(t) ?? constantDims.get(t);
  const isConst = (t: string) => dimsOf(t) !== undefined;
  /**
   * The dims a weight read through a Transpose of a constant matrix has: a tied
   * head written as MatMul(h, Transpose(embedding)), the [vocab, hidden] table
   * turned [hidden, vocab]. Undefined for anything else.
   */
  const transposedDims = (t: string): number[] | undefined => {
    const n = producer.get(t);
    if (n?.opType !== 'Transpose' || (n.domain !== '' && n.domain !== 'ai.onnx')) return undefined;
    const dims = dimsOf(n.inputs[0] as string);
    const perm = n.intLists.get('perm');
    if (dims?.length !== 2 || (perm !== undefined && (perm[0] !== 1 || perm[1] !== 0))) return undefined;
    return [dims[1] as number, dims[0] as number];
  };
  const weightDims = (t: string) => dimsOf(t) ?? transposedDims(t);
  const single = (t: string) => (consumers.get(t) ?? 0) === 1;
  const allowsZero = (n: Node) => (n.ints.get('allowzero') ?? 0) !== 0;
  // From the logits output back to the head through per-position ops and reshapes.
  let cur = logits;
  let head: Node | undefined;
  const reshapes: Node[] = [];
  const after: Node[] = [];
  for (let steps = 0; steps < 16 && !head; steps++) {
    const n = producer.get(cur);
    if (!n) return `"${cur}" is not computed by a node`;
    if (isQuantizedHead(n) && isConst(n.inputs[1] as string)) head = n;
    else if (n.domain !== '' && n.domain !== 'ai.onnx') return `"${cur}" comes from ${n.domain}.${n.opType}`;
    else if (n.opType === 'MatMul' && n.inputs.length === 2 && weightDims(n.inputs[1] as string)) head = n;
    else if (n.opType === 'Gemm' && isConst(n.inputs[1] as string) && (n.ints.get('transA') ?? 0) === 0) head = n;
    else if (ELEMENTWISE.has(n.opType)) {
      after.push(n);
      const live = n.inputs.filter((i) => !isConst(i));
      if (live.length !== 1) return `${n.opType} on the way to the logits mixes two computed tensors`;
      cur = live[0] as string;
    } else if (UNARY.has(n.opType)) {
      after.push(n);
      cur = n.inputs[0] as string;
    } else if (n.opType === 'Reshape') {
      if (allowsZero(n)) return 'a Reshape with allowzero on the way to the logits';
      after.push(n);
      reshapes.push(n);
      cur = n.inputs[0] as string;
    } else return `the logits come from ${n.opType}, not from a MatMul or Gemm with a weight`;
    if (!head && !single(cur)) return `"${cur}" on the way to the logits is also read elsewhere`;
  }
  if (!head) return 'no MatMul or Gemm with a weight within 16 nodes of the logits';
  if (reshapes.length > 1) return 'the head output is reshaped more than once';
  const weight = (head.opType === 'MatMul' ? weightDims : dimsOf)(head.inputs[1] as string) ?? [];
  let vocab: number | undefined;
  if (isQuantizedHead(head)) vocab = head.ints.get('N');
  else if (weight.length === 2) {
    vocab = head.opType === 'Gemm' && (head.ints.get('transB') ?? 0) !== 0 ? weight[0] : weight[1];
  }
  if (vocab === undefined || vocab < 1) {
    return `the head's weight "${head.inputs[1]}" has dims [${weight.join(', ')}], not [hidden, vocab]`;
  }
  // From the head back to the final hidden states through constant-shape reshapes (a flatten before a Gemm).
  let entry = head;
  let hidden = head.inputs[0] as string;
  for (let steps = 0; steps < 4; steps++) {
    const n = producer.get(hidden);
    if (n?.opType !== 'Reshape' || !isConst(n.inputs[1] as string) || !single(hidden) || allowsZero(n)) break;
    entry = n;
    hidden = n.inputs[0] as string;
  }
  if (head.opType === 'Gemm' && entry === head)
    return 'a Gemm head whose input is not a flattened [batch, seq, hidden]';
  if (head.opType === 'Gemm' && reshapes.length === 0) return 'a Gemm head whose output is not reshaped to 3-D';
  const found: Plan = { entry, hidden, head, vocab, after, producer, dimsOf };
  if (reshapes[0]) found.unflatten = reshapes[0];
  return found;
}

/** The largest 8-bit head the screen builds (its bytes go inline into the copy). */
const MAX_SCREEN_BYTES = 256 * 1024 * 1024;
/** A smaller vocabulary is scored in full faster than it is screened. */
const MIN_SCREEN_VOCAB = 4096;
/** Ops on the head's scores that leave every token's score its own (the screen adds the bias itself). */
const SCREEN_PASSES = new Set(['Reshape', 'Identity']);

/** The float32 values of an initializer and where they lie (raw bytes in the file, or external data); or why not. */
function readFloats(
  file: FileBytes,
  folder: string,
  f: WireField,
  count: number,
): { values: Float32Array; path: string; offset: number } | string {
  const tensor = [...fields(file, f.valueStart, f.end)];
  const nameField = tensor.find((g) => g.field === TENSOR_NAME);
  const name = nameField ? text(file, nameField) : '?';
  const type = tensor.find((g) => g.field === TENSOR_DATA_TYPE)?.varint;
  if (type !== TENSOR_FLOAT) return `the head's weight "${name}" is not float32`;
  const out = new Float32Array(count);
  const bytes = new Uint8Array(out.buffer);
  const raw = tensor.find((g) => g.field === TENSOR_RAW_DATA && g.wire === WIRE_LEN);
  if (raw) {
    if (raw.end - raw.valueStart !== 4 * count)
      return `"${name}" holds ${raw.end - raw.valueStart} bytes, not ${4 * count}`;
    file.readInto(raw.valueStart, bytes);
    return { values: out, path: file.path, offset: raw.valueStart };
  }
  const entries = externalEntries(file, tensor);
  const location = entries.get('location')?.value;
  if (!location) return `"${name}" stores its values in a way the screen does not read`;
  const offset = Number(entries.get('offset')?.value ?? 0);
  const length = Number(entries.get('length')?.value ?? 4 * count);
  if (length !== 4 * count) return `"${name}" holds ${length} bytes, not ${4 * count}`;
  const externalPath = path.join(folder, location);
  const external = new FileBytes(externalPath);
  try {
    external.readInto(offset, bytes);
  } finally {
    external.close();
  }
  return { values: out, path: externalPath, offset };
}

/**
 * The 8-bit screen of the head (head-screen.ts), built from its weights; or why the head is scored in full
 * only. The head must be a MatMul or Gemm of a float32 weight whose scores reach the logits as they are, plus
 * a bias per token at most (a Gemm's C, or one Add).
 */
function screenPlan(
  file: FileBytes,
  folder: string,
  found: Plan,
  initializers: Map<string, WireField>,
  dimsOf: (name: string) => number[] | undefined,
  anyVocab: boolean,
): { screen: HeadScreen; head: PackedHead; gemmBias?: string } | string {
  const { head, vocab } = found;
  if (head.opType !== 'MatMul' && head.opType !== 'Gemm') return `the head is ${head.domain}.${head.opType}`;
  if (vocab < MIN_SCREEN_VOCAB && !anyVocab) return `a vocabulary of ${vocab} is scored in full faster`;
  const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
  const constant = (name: string) => initializers.get(name);
  let biasName: string | undefined;
  let gemmBias: string | undefined;
  for (const n of found.after) {
    if (SCREEN_PASSES.has(n.opType)) continue;
    const other = n.inputs.find((i) => constant(i));
    if (n.opType === 'Add' && biasName === undefined && other && count(dimsOf(other) ?? []) === vocab) {
      const dims = dimsOf(other) ?? [];
      if (dims.slice(0, -1).some((d) => d !== 1)) return `the head's bias "${other}" is not one row`;
      biasName = other;
      continue;
    }
    return `the head's scores go through ${n.opType} before they are the logits`;
  }
  let weightName = head.inputs[1] as string;
  let layout: HeadLayout;
  if (head.opType === 'Gemm') {
    if ((head.floats.get('alpha') ?? 1) !== 1 || (head.floats.get('beta') ?? 1) !== 1) {
      return 'the head Gemm scales its product or bias';
    }
    layout = (head.ints.get('transB') ?? 0) !== 0 ? 'vocab-major' : 'hidden-major';
    const c = head.inputs[2];
    if (c) {
      if (biasName !== undefined || !constant(c) || count(dimsOf(c) ?? []) !== vocab) {
        return `the head Gemm's C "${c}" is not one bias per token`;
      }
      biasName = c;
      gemmBias = c;
    }
  } else if (constant(weightName)) layout = 'hidden-major';
  else {
    // A tied head: MatMul(h, Transpose(embedding)), plan() checked the transpose.
    const t = found.producer.get(weightName);
    const source = t?.inputs[0];
    if (t?.opType !== 'Transpose' || !source || !constant(source)) return 'the head weight is not stored in the file';
    weightName = source;
    layout = 'vocab-major';
  }
  const dims = dimsOf(weightName) ?? [];
  if (dims.length !== 2 || count(dims) % vocab !== 0) return `the head weight has dims [${dims.join(', ')}]`;
  const hidden = count(dims) / vocab;
  if (vocab * hidden > MAX_SCREEN_BYTES) return `an 8-bit head of ${vocab} × ${hidden} is over 256 MiB`;
  const weight = readFloats(file, folder, constant(weightName) as WireField, vocab * hidden);
  if (typeof weight === 'string') return weight;
  let bias: Float32Array | null = null;
  if (biasName !== undefined) {
    const values = readFloats(file, folder, constant(biasName) as WireField, vocab);
    if (typeof values === 'string') return values;
    bias = values.values;
  }
  // A [vocab, hidden] head's rows are read from the file for the few candidates of each pick.
  const rows = layout === 'vocab-major' ? new FileRows(weight.path, weight.offset, hidden) : undefined;
  const built = buildHeadScreen(weight.values, layout, vocab, hidden, bias, rows);
  return gemmBias === undefined ? built : { ...built, gemmBias };
}

/**
 * Each KV past input → the value its present concatenates after it, where every present is a plain Concat of
 * its past and one other value along the KV's sequence axis (the layout of the project's generator and of most
 * exports that compute attention from ONNX ops); else why not (a contrib attention op writes its present itself).
 */
function addedPositions(nodes: Node[], kv: readonly KvTensorSpec[]): Map<string, string> | string {
  const producer = new Map<string, Node>();
  for (const n of nodes) for (const o of n.outputs) producer.set(o, n);
  const added = new Map<string, string>();
  for (const t of kv) {
    const n = producer.get(t.present);
    const axis = n?.ints.get('axis');
    const plain =
      n !== undefined &&
      n.opType === 'Concat' &&
      (n.domain === '' || n.domain === 'ai.onnx') &&
      n.inputs.length === 2 &&
      n.inputs[0] === t.past &&
      axis !== undefined &&
      (axis < 0 ? axis + t.shape.length : axis) === t.seqAxis;
    if (!plain) return `"${t.present}" is not a Concat of "${t.past}" and the new positions along its sequence axis`;
    added.set(t.past, n.inputs[1] as string);
  }
  return added;
}

/** A node between a present KV and an attention product, and which of its inputs carries the KV. */
interface KvStep {
  node: Node;
  input: number;
}

/** An attention product over a present KV: its MatMul, the steps from the present to its B input, and its kind. */
interface KvProduct {
  node: Node;
  path: KvStep[];
  /**
   * keys: the positions are the product's columns (Q·Kᵀ), so it is the Concat of the past's and the added
   * positions' products; values: they are its inner dim (P·V), so it is the sum of the past's part of P times
   * the past and the added part times the added positions.
   */
  kind: 'keys' | 'values';
}

/** One KV tensor's attention, to compute over its past and its added positions apart (see splitPlan). */
interface KvSplit {
  kv: KvTensorSpec;
  concat: Node;
  added: string;
  products: KvProduct[];
  /** Every node from the present to the products (not the products): each is copied once per side. */
  steps: Node[];
  /**
   * Shape ops reading the present or a step's output (a mask's length read from the keys): each becomes the past
   * side's shape plus the added side's along the sequence axis (`onehot`: 1 there, 0 elsewhere, over the dims the
   * Shape returns).
   */
  shapes: Array<{ node: Node; path: KvStep[]; onehot: number[] }>;
}

/**
 * Attention without the graph's Concat of the KV: where every reader of a present KV (the Concat of its past and
 * the positions a run adds) reaches a MatMul's B input through ops that keep each position its own (Unsqueeze,
 * Transpose, Identity, Cast, Mul or Div by one constant), or a Shape, each product is computed over the past and
 * over the added positions apart (KvProduct), each shape from both sides' shapes, and the present is no longer made. The Concat copied the whole KV, every layer,
 * every step; the engine builds the presents itself from the added positions (kv-cache.ts). Exact for keys (each
 * score is its own dot product); for values the sum over positions is split in two, as a blocked product splits
 * it. Else why not (the first present that does not fit): the graph then keeps its Concats.
 */
function splitPlan(
  nodes: Node[],
  kv: readonly KvTensorSpec[],
  added: ReadonlyMap<string, string>,
  outputs: ReadonlySet<string>,
  intsOf: (name: string) => number[] | undefined,
  dimsOf: (name: string) => number[] | undefined,
): KvSplit[] | string {
  const producer = new Map<string, Node>();
  const readers = new Map<string, Node[]>();
  const inSubgraph = new Set<string>();
  for (const n of nodes) {
    for (const o of n.outputs) producer.set(o, n);
    for (const i of new Set(n.inputs)) {
      const list = readers.get(i);
      if (list) list.push(n);
      else readers.set(i, [n]);
    }
    for (const i of n.subgraphNames) inSubgraph.add(i);
  }
  const isDefault = (n: Node) => n.domain === '' || n.domain === 'ai.onnx';
  const splits: KvSplit[] = [];
  const carried = new Set<string>();
  for (const t of kv) {
    const products: KvProduct[] = [];
    const steps: Node[] = [];
    const shapes: KvSplit['shapes'] = [];
    const walk = (value: string, rank: number, axis: number, path: KvStep[]): string | null => {
      if (inSubgraph.has(value)) return `"${value}" is read inside a subgraph`;
      if (value !== t.present && outputs.has(value)) return `"${value}" is an output of the graph`;
      carried.add(value);
      for (const n of readers.get(value) ?? []) {
        const at = n.inputs.indexOf(value);
        if (!isDefault(n)) return `${n.domain}.${n.opType} reads "${value}"`;
        if (n.inputs.indexOf(value, at + 1) >= 0) return `${n.opType} reads "${value}" twice`;
        if (n.opType === 'Shape' && at === 0) {
          // The dims it returns: [start, end) of the input's, counted as Slice counts them.
          const clamp = (d: number) => Math.min(rank, Math.max(0, d < 0 ? d + rank : d));
          const start = clamp(n.ints.get('start') ?? 0);
          const end = clamp(n.ints.get('end') ?? rank);
          const onehot = Array.from({ length: Math.max(0, end - start) }, (_, i) => (start + i === axis ? 1 : 0));
          shapes.push({ node: n, path, onehot });
          continue;
        }
        if (n.opType === 'MatMul') {
          if (at !== 1 || rank < 2) return `a MatMul reads "${value}" as its first input`;
          if (axis !== rank - 1 && axis !== rank - 2) return `a MatMul takes "${value}"'s positions as a batch dim`;
          products.push({ node: n, path, kind: axis === rank - 1 ? 'keys' : 'values' });
          continue;
        }
        let next: { rank: number; axis: number } | string;
        if ((n.opType === 'Identity' || n.opType === 'Cast') && at === 0) next = { rank, axis };
        else if (n.opType === 'Transpose' && at === 0) {
          const perm = n.intLists.get('perm') ?? Array.from({ length: rank }, (_, i) => rank - 1 - i);
          next = perm.length === rank ? { rank, axis: perm.indexOf(axis) } : `a Transpose of "${value}" has no perm`;
        } else if (n.opType === 'Unsqueeze' && at === 0) {
          const axes = n.intLists.get('axes') ?? (n.inputs[1] ? intsOf(n.inputs[1]) : undefined);
          if (!axes) next = `an Unsqueeze of "${value}" has axes the rewrite cannot read`;
          else {
            const out = rank + axes.length;
            const inserted = new Set(axes.map((a) => (a < 0 ? a + out : a)));
            // The input's dims fill the output's other positions in order.
            let seen = -1;
            let to = -1;
            for (let i = 0; i < out && to < 0; i++) if (!inserted.has(i) && ++seen === axis) to = i;
            next = to >= 0 ? { rank: out, axis: to } : `an Unsqueeze of "${value}" has axes out of range`;
          }
        } else if ((n.opType === 'Mul' && n.inputs.length === 2) || (n.opType === 'Div' && at === 0)) {
          const dims = dimsOf(n.inputs[1 - at] as string);
          next =
            dims && dims.length <= rank && dims.every((d) => d === 1)
              ? { rank, axis }
              : `${n.opType} of "${value}" by something other than one constant`;
        } else next = `${n.opType} reads "${value}"`;
        if (typeof next === 'string') return next;
        if (n.outputs.length !== 1) return `${n.opType} of "${value}" has ${n.outputs.length} outputs`;
        if (!steps.includes(n)) steps.push(n);
        const why = walk(n.outputs[0] as string, next.rank, next.axis, [...path, { node: n, input: at }]);
        if (why) return why;
      }
      return null;
    };
    const concat = producer.get(t.present) as Node;
    const why = walk(t.present, t.shape.length, t.seqAxis, []);
    if (why) return why;
    if (products.length === 0) return `"${t.present}" feeds no attention product`;
    splits.push({ kv: t, concat, added: added.get(t.past) as string, products, steps, shapes });
  }
  // A product of two KV tensors (one in each input) would be split twice over.
  for (const s of splits) {
    for (const p of s.products) {
      if (carried.has(p.node.inputs[0] as string)) return `a MatMul reads KV in both its inputs`;
    }
  }
  return splits;
}

/** The names the attention split writes all contain this. */
const SPLIT_TAG = '/kvdesk/split';

/** The values of a small int64 initializer (raw or typed data); undefined for anything else. */
function int64Values(file: FileBytes, f: WireField): number[] | undefined {
  const tensor = [...fields(file, f.valueStart, f.end)];
  if (tensor.find((g) => g.field === TENSOR_DATA_TYPE)?.varint !== INT64) return undefined;
  const raw = tensor.find((g) => g.field === TENSOR_RAW_DATA && g.wire === WIRE_LEN);
  if (raw) {
    const n = raw.end - raw.valueStart;
    if (n % 8 !== 0 || n > 1024) return undefined;
    const bytes = file.read(raw.valueStart, n);
    return Array.from({ length: n / 8 }, (_, i) => Number(bytes.readBigInt64LE(8 * i)));
  }
  const values: number[] = [];
  for (const g of tensor) if (g.field === TENSOR_INT64_DATA) pushInts(file, g, values);
  return values;
}

/** The name of a graph input, output or value_info field. */
function valueInfoName(file: FileBytes, f: WireField): string | undefined {
  for (const g of fields(file, f.valueStart, f.end))
    if (g.field === VALUE_INFO_NAME && g.wire === WIRE_LEN) return text(file, g);
  return undefined;
}

/**
 * Writes the split attention of splitPlan into the copy: `write` in place of each of its nodes (nothing for the
 * Concat and the steps, the product over both sides for each product), `gone` for the outputs and value infos of
 * names no node makes any more, `finish` for its constants.
 */
function splitWriter(file: FileBytes, splits: KvSplit[], push: (b: Buffer) => void) {
  const products = new Map<Node, { split: KvSplit; product: KvProduct }>();
  const shapes = new Map<Node, { split: KvSplit; shape: KvSplit['shapes'][number] }>();
  /** The one-hot constants the Shape readers use, by name. */
  const onehots = new Map<string, number[]>();
  const dropped = new Set<Node>();
  const goneNames = new Set<string>();
  for (const split of splits) {
    dropped.add(split.concat);
    goneNames.add(split.kv.present);
    for (const n of split.steps) {
      dropped.add(n);
      for (const o of n.outputs) goneNames.add(o);
    }
    for (const product of split.products) products.set(product.node, { split, product });
    for (const shape of split.shapes) shapes.set(shape.node, { split, shape });
  }
  const written = new Set<string>();
  /** The sequence axis the count of added positions is read along (set with the count). */
  let countAxis: number | undefined;
  const zero = `${SPLIT_TAG}/zero`;
  const end = `${SPLIT_TAG}/end`;
  const lastAxis = `${SPLIT_TAG}/last_axis`;
  const axisName = `${SPLIT_TAG}/count_axis`;
  /** The steps from one side (the past, or the added positions) to a product's B input, each copied once. */
  const side = (which: 'past' | 'added', from: string, path: KvStep[]): string => {
    let cur = from;
    for (const { node, input } of path) {
      const out = `${node.outputs[0]}${SPLIT_TAG}/${which}`;
      if (!written.has(out)) {
        written.add(out);
        push(renameInputs(file, node, new Map([[input, cur]]), new Map([[0, out]]), out));
      }
      cur = out;
    }
    return cur;
  };
  return {
    writes: (node: Node) => dropped.has(node) || products.has(node) || shapes.has(node),
    write(node: Node): void {
      const reader = shapes.get(node);
      if (reader) {
        // Shape(Concat(past, added)) = Shape(past) + Shape(added) · onehot(sequence axis), step by step alike.
        const { split, shape } = reader;
        const out = node.outputs[0] as string;
        const [ofPast, ofAdded] = [`${out}${SPLIT_TAG}/past`, `${out}${SPLIT_TAG}/added`];
        const onehot = `${SPLIT_TAG}/onehot_${shape.onehot.join('')}`;
        onehots.set(onehot, shape.onehot);
        push(
          renameInputs(
            file,
            node,
            new Map([[0, side('past', split.kv.past, shape.path)]]),
            new Map([[0, ofPast]]),
            ofPast,
          ),
        );
        push(
          renameInputs(
            file,
            node,
            new Map([[0, side('added', split.added, shape.path)]]),
            new Map([[0, ofAdded]]),
            ofAdded,
          ),
        );
        push(newNode('Mul', [ofAdded, onehot], `${ofAdded}/along`, `${ofAdded}/Mul`));
        push(newNode('Add', [ofPast, `${ofAdded}/along`], out, `${out}${SPLIT_TAG}/Add`));
        return;
      }
      const found = products.get(node);
      if (!found) return;
      const { split, product } = found;
      const past = side('past', split.kv.past, product.path);
      const added = side('added', split.added, product.path);
      const out = node.outputs[0] as string;
      const [fromPast, fromAdded] = [`${out}${SPLIT_TAG}/past`, `${out}${SPLIT_TAG}/added`];
      if (product.kind === 'keys') {
        push(renameInputs(file, node, new Map([[1, past]]), new Map([[0, fromPast]]), fromPast));
        push(renameInputs(file, node, new Map([[1, added]]), new Map([[0, fromAdded]]), fromAdded));
        push(newNode('Concat', [fromPast, fromAdded], out, `${out}${SPLIT_TAG}/Concat`, { axis: -1 }));
        return;
      }
      // −(the positions the run adds): every layer adds the same, so one count serves every product. The weights
      // of the added positions are the last that many; the past's, those before.
      const fromEnd = `${SPLIT_TAG}/added_from_end`;
      if (!written.has(fromEnd)) {
        written.add(fromEnd);
        countAxis = split.kv.seqAxis;
        const shape = `${fromEnd}/shape`;
        const count = `${fromEnd}/count`;
        push(newNode('Shape', [split.added], shape, `${shape}/Shape`));
        push(newNode('Gather', [shape, axisName], count, `${count}/Gather`, { axis: 0 }));
        push(newNode('Neg', [count], fromEnd, `${fromEnd}/Neg`));
      }
      const weights = node.inputs[0] as string;
      const [pastWeights, addedWeights] = [`${fromPast}/weights`, `${fromAdded}/weights`];
      push(newNode('Slice', [weights, zero, fromEnd, lastAxis], pastWeights, `${pastWeights}/Slice`));
      push(newNode('Slice', [weights, fromEnd, end, lastAxis], addedWeights, `${addedWeights}/Slice`));
      push(
        renameInputs(
          file,
          node,
          new Map([
            [0, pastWeights],
            [1, past],
          ]),
          new Map([[0, fromPast]]),
          fromPast,
        ),
      );
      push(
        renameInputs(
          file,
          node,
          new Map([
            [0, addedWeights],
            [1, added],
          ]),
          new Map([[0, fromAdded]]),
          fromAdded,
        ),
      );
      push(newNode('Add', [fromPast, fromAdded], out, `${out}${SPLIT_TAG}/Add`));
    },
    gone(source: FileBytes, f: WireField): boolean {
      if ((f.field !== GRAPH_OUTPUT && f.field !== GRAPH_VALUE_INFO) || f.wire !== WIRE_LEN) return false;
      const name = valueInfoName(source, f);
      return name !== undefined && goneNames.has(name);
    },
    finish(): void {
      push(int64Initializer(zero, [0n]));
      push(int64Initializer(end, [9223372036854775807n]));
      push(int64Initializer(lastAxis, [-1n]));
      if (countAxis !== undefined) push(int64Initializer(axisName, [BigInt(countAxis)]));
      for (const [name, values] of onehots) push(int64Initializer(name, values.map(BigInt)));
    },
  };
}

/**
 * Builds the last-position copy of the graph at `graphPath` whose logits output
 * is `logits`. Reads the file's structure only (weights are referenced, not read).
 */
export function lastPositionGraph(
  graphPath: string,
  logits: string,
  options: { screen?: boolean | 'always'; kv?: readonly KvTensorSpec[]; split?: boolean } = {},
): LastPositionResult {
  let file: FileBytes;
  try {
    file = new FileBytes(graphPath);
  } catch (err) {
    return { ok: false, reason: `cannot read ${graphPath}: ${err instanceof Error ? err.message : String(err)}` };
  }
  let screenRows: HeadRows | undefined;
  try {
    const model = [...fields(file, 0, file.size)];
    const graphField = model.find((f) => f.field === MODEL_GRAPH && f.wire === WIRE_LEN);
    if (!graphField) return { ok: false, reason: 'the file holds no graph' };
    const opset = defaultOpset(file, model);
    if (opset === null) return { ok: false, reason: 'the file declares no opset for the default ONNX domain' };
    if (opset < 10) return { ok: false, reason: `opset ${opset} has no Slice with inputs (10 or later needed)` };
    const graph = [...fields(file, graphField.valueStart, graphField.end)];
    const nodes: Node[] = [];
    const initializerDims = new Map<string, number[]>();
    const initializers = new Map<string, WireField>();
    const taken = new Set<string>();
    const outputs = new Set<string>();
    for (const f of graph) {
      if (f.field === GRAPH_NODE && f.wire === WIRE_LEN) {
        const node = readNode(file, f);
        nodes.push(node);
        for (const name of [...node.inputs, ...node.outputs, ...node.subgraphNames]) taken.add(name);
      } else if (f.field === GRAPH_INITIALIZER && f.wire === WIRE_LEN) {
        const { name, dims } = tensorHeader(file, f.valueStart, f.end);
        initializerDims.set(name, dims);
        initializers.set(name, f);
        taken.add(name);
      } else if ((f.field === GRAPH_INPUT || f.field === GRAPH_OUTPUT) && f.wire === WIRE_LEN) {
        for (const g of fields(file, f.valueStart, f.end)) {
          if (g.field !== VALUE_INFO_NAME || g.wire !== WIRE_LEN) continue;
          taken.add(text(file, g));
          if (f.field === GRAPH_OUTPUT) outputs.add(text(file, g));
        }
      }
    }
    const found = plan(nodes, initializerDims, logits);
    if (typeof found === 'string') return { ok: false, reason: found };
    const kvAdded = options.kv ? addedPositions(nodes, options.kv) : 'not asked for';
    let splits: KvSplit[] | string = 'not asked for';
    if (typeof kvAdded === 'string') splits = `the positions runs add are not returned (${kvAdded})`;
    else if (options.split && options.kv) {
      splits = [...taken].some((n) => n.includes(SPLIT_TAG))
        ? 'the graph already uses the names this rewrite needs'
        : splitPlan(
            nodes,
            options.kv,
            kvAdded,
            outputs,
            (n) => {
              const f = initializers.get(n);
              return f ? int64Values(file, f) : undefined;
            },
            found.dimsOf,
          );
    }
    const split = typeof splits === 'string' ? null : splits;

    const tag = `/kvdesk/last_position`;
    const sliced = `${found.hidden}${tag}`;
    const names = {
      starts: `${tag}/starts`,
      ends: `${tag}/ends`,
      axes: `${tag}/axes`,
      shape: `${tag}/shape`,
      hiddenShape: `${tag}/hidden_shape`,
      rowsAndPositions: `${tag}/rows_positions`,
      zero: `${tag}/zero`,
      two: `${tag}/two`,
      vocab: `${tag}/vocab`,
      full: `${tag}/full`,
      fullScores: `${tag}/full_scores`,
      screened: `${tag}/screened`,
      screenedRaw: `${tag}/screened_raw`,
      packed: `${tag}/head_q8`,
      scales: `${tag}/head_scales`,
    };
    if ([sliced, ...Object.values(names)].some((n) => taken.has(n))) {
      return { ok: false, reason: 'the graph already uses the names this rewrite needs' };
    }
    // The copy's weights lie in the graph's real file (a package may link to it: a Hugging Face cache's files link
    // to its blobs), and onnxruntime refuses external data whose real path is outside the folder it is given.
    const real = realpathSync(graphPath);
    const folder = path.dirname(real);
    const screening = options.screen
      ? screenPlan(
          file,
          path.dirname(graphPath),
          found,
          initializers,
          (n) => initializerDims.get(n),
          options.screen === 'always',
        )
      : 'not asked for';
    if (typeof screening !== 'string') screenRows = screening.screen.rows;
    const headIn = found.entry === found.head ? sliced : (found.head.inputs[0] as string);
    /** The head as an If: its own product when fed full, else the 8-bit product (plus its bias). */
    const screenedHead = (gemmBias: string | undefined): Buffer => {
      const head = found.head;
      const inputs = new Map<number, string>(found.entry === head ? [[0, sliced]] : []);
      const full = renameInputs(file, head, inputs, new Map([[0, names.fullScores]]));
      const product = buildNode(
        'DynamicQuantizeMatMul',
        [headIn, names.packed, names.scales],
        gemmBias ? names.screenedRaw : names.screened,
        `${tag}/DynamicQuantizeMatMul`,
        [],
        'com.microsoft',
      );
      const screened = gemmBias
        ? [product, buildNode('Add', [names.screenedRaw, gemmBias], names.screened, `${tag}/ScreenBias`, [])]
        : [product];
      return buildNode('If', [names.full], head.outputs[0] as string, `${tag}/If`, [
        branchAttribute('then_branch', [full], names.fullScores),
        branchAttribute('else_branch', screened, names.screened),
      ]);
    };
    const screenIf = typeof screening === 'string' ? null : screenedHead(screening.gemmBias);
    const location = path.basename(real);
    const nodeOf = new Map(nodes.map((n) => [n.field, n]));
    const parts: Buffer[] = [];
    let size = 0;
    const push = (b: Buffer) => {
      size += b.length;
      if (size > MAX_COPY_BYTES) throw new CopyTooBig();
      parts.push(b);
    };
    const splitting = split ? splitWriter(file, split, push) : null;
    for (const f of graph) {
      const node = nodeOf.get(f);
      if (node && splitting?.writes(node)) {
        // The KV's Concat and the steps after it go; each product is written over the past and the added apart.
        splitting.write(node);
      } else if (node) {
        if (node === found.entry) {
          push(newNode('Slice', [found.hidden, names.starts, names.ends, names.axes], sliced, `${tag}/Slice`));
          push(node === found.head && screenIf ? screenIf : renameInputs(file, node, new Map([[0, sliced]])));
        } else if (node === found.head && screenIf) {
          push(screenIf);
        } else if (node === found.unflatten) {
          // [rows, n, vocab]: the sliced hidden states' first two dims, then the vocabulary.
          push(newNode('Shape', [sliced], names.hiddenShape, `${tag}/Shape`));
          push(
            newNode(
              'Slice',
              [names.hiddenShape, names.zero, names.two, names.zero],
              names.rowsAndPositions,
              `${tag}/SliceShape`,
            ),
          );
          push(newNode('Concat', [names.rowsAndPositions, names.vocab], names.shape, `${tag}/Concat`, { axis: 0 }));
          push(renameInputs(file, node, new Map([[1, names.shape]])));
        } else push(copy(file, f.tagStart, f.end));
      } else if (f.field === GRAPH_INITIALIZER && f.wire === WIRE_LEN) {
        push(
          externalised(file, f, location) ??
            relocated(file, f, path.dirname(graphPath), folder) ??
            copy(file, f.tagStart, f.end),
        );
      } else if (!splitting?.gone(file, f)) push(copy(file, f.tagStart, f.end));
    }
    splitting?.finish();
    // The slice's start is an input (onnxruntime-node cannot feed an initializer that doubles as an input).
    push(int64Input(names.starts, 1));
    push(int64Initializer(names.ends, [9223372036854775807n]));
    push(int64Initializer(names.axes, [1n]));
    if (found.unflatten) {
      push(int64Initializer(names.zero, [0n]));
      push(int64Initializer(names.two, [2n]));
      push(int64Initializer(names.vocab, [BigInt(found.vocab)]));
    }
    let screen: LastPositionScreen | undefined;
    if (screenIf && typeof screening !== 'string') {
      const q = screening.screen;
      const { packed, scales } = screening.head;
      // Bounded by MAX_SCREEN_BYTES rather than the structure's limit.
      parts.push(
        ...rawInitializer(names.packed, TENSOR_INT8, [q.hidden, q.vocab], new Uint8Array(packed.buffer)),
        ...rawInitializer(names.scales, TENSOR_FLOAT, [scales.length], new Uint8Array(scales.buffer)),
      );
      push(lenField(GRAPH_INPUT, valueInfo(names.full, TENSOR_BOOL, [])));
      push(lenField(GRAPH_OUTPUT, valueInfo(headIn, TENSOR_FLOAT)));
      screen = { data: q, fullInput: names.full, hiddenOutput: headIn };
    }
    if (typeof kvAdded !== 'string') {
      for (const t of options.kv ?? []) {
        const name = kvAdded.get(t.past) as string;
        if (outputs.has(name)) continue;
        outputs.add(name);
        push(lenField(GRAPH_OUTPUT, valueInfo(name, t.dtype === 'float16' ? TENSOR_FLOAT16 : TENSOR_FLOAT)));
      }
    }
    const out: Buffer[] = [];
    for (const f of model) {
      if (f === graphField) {
        // The graph's fields go out as they are, after its header: one copy of the (screen's large) parts in all.
        out.push(
          lenHeader(
            MODEL_GRAPH,
            parts.reduce((n, b) => n + b.length, 0),
          ),
          ...parts,
        );
      } else out.push(copy(file, f.tagStart, f.end));
    }
    if (screen && !importsDomain(file, model, 'com.microsoft')) {
      out.push(
        lenField(
          MODEL_OPSET_IMPORT,
          Buffer.concat([stringField(OPSET_DOMAIN, 'com.microsoft'), varintField(OPSET_VERSION, 1)]),
        ),
      );
    }
    const detail = `LM head ${found.head.opType} fed the last position of "${found.hidden}"`;
    return {
      ok: true,
      bytes: Buffer.concat(out),
      folder,
      vocab: found.vocab,
      startsInput: names.starts,
      detail,
      ...(screen ? { screen } : { screenReason: typeof screening === 'string' ? screening : 'not built' }),
      ...(typeof kvAdded === 'string' ? { kvAddedReason: kvAdded } : { kvAdded }),
      ...(typeof splits === 'string' ? { splitReason: splits } : { split: true }),
    };
  } catch (err) {
    // A screen built before the failure holds its file open.
    screenRows?.close();
    if (err instanceof DataElsewhere) return { ok: false, reason: err.message };
    if (err instanceof CopyTooBig) {
      return {
        ok: false,
        reason: `the graph's structure alone is over ${MAX_COPY_BYTES / 2 ** 20} MiB (weights held inline)`,
      };
    }
    return {
      ok: false,
      reason: `could not read the graph's structure: ${err instanceof Error ? err.message : String(err)}`,
    };
  } finally {
    file.close();
  }
}

class CopyTooBig extends Error {}

/** Why a weight already in external data cannot be named from the copy's folder. */
class DataElsewhere extends Error {}
