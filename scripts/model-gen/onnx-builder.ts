/**
 * A small ONNX graph builder over onnx-proto, and a streaming writer.
 *
 * The writer does not hand the whole ModelProto to protobufjs: protobufjs would
 * copy every weight into its own buffer and then again into the final one, which
 * for the 600 MB benchmark shapes means several copies in memory. Instead the
 * graph without initializers is encoded by protobufjs and each initializer is
 * framed by hand (lengths are known from the dims) and written straight from the
 * Float32Array it was generated into, one tensor at a time.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { endianness } from 'node:os';
import { onnx } from 'onnx-proto';

/** Element types the generated graphs use. */
export type ElemType = 'float32' | 'int64' | 'bool';

/** A dimension: a fixed size or a symbolic name. */
export type Dim = number | string;

/** Values a generated initializer can hold. */
export type TensorData = Float32Array | BigInt64Array;

/** A node attribute value; floats are tagged because a JS number cannot say whether 1 is INT or FLOAT. */
export type AttrValue = { int: number } | { float: number } | { ints: number[] } | { string: string };

/** An initializer whose data is produced only when the file is written. */
export interface LazyInitializer {
  name: string;
  dims: number[];
  elemType: 'float32' | 'int64';
  data: () => TensorData;
}

/** Metadata of the written model. */
export interface ModelMeta {
  producerName: string;
  producerVersion: string;
  opsetVersion: number;
  irVersion: number;
  docString?: string;
  metadata?: Record<string, string>;
}

/** ONNX (and protobuf's signed 32-bit length) limit for a single-file model. */
export const PROTOBUF_LIMIT_BYTES = 2 ** 31 - 1;

const ELEM: Record<ElemType, onnx.TensorProto.DataType> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  int64: onnx.TensorProto.DataType.INT64,
  bool: onnx.TensorProto.DataType.BOOL,
};

const ELEM_BYTES: Record<'float32' | 'int64', number> = { float32: 4, int64: 8 };

// Protobuf tags (field number << 3 | wire type 2) of the fields framed by hand.
const TAG_MODEL_GRAPH = (7 << 3) | 2;
const TAG_GRAPH_INITIALIZER = (5 << 3) | 2;
const TAG_TENSOR_RAW_DATA = (9 << 3) | 2;

/** Shorthand for an INT attribute. */
export function int(value: number): AttrValue {
  return { int: value };
}

/** Shorthand for an INTS attribute. */
export function ints(values: number[]): AttrValue {
  return { ints: values };
}

/** Shorthand for a FLOAT attribute. */
export function float(value: number): AttrValue {
  return { float: value };
}

function toAttribute(name: string, value: AttrValue): onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if ('int' in value) return { name, type: T.INT, i: value.int };
  if ('float' in value) return { name, type: T.FLOAT, f: value.float };
  if ('ints' in value) return { name, type: T.INTS, ints: value.ints };
  return { name, type: T.STRING, s: new TextEncoder().encode(value.string) };
}

function valueInfo(name: string, elemType: ElemType, shape: Dim[]): onnx.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: ELEM[elemType],
        shape: { dim: shape.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

/** Collects nodes, graph inputs/outputs and lazy initializers with deterministic names. */
export class GraphBuilder {
  readonly nodes: onnx.INodeProto[] = [];
  readonly inputs: onnx.IValueInfoProto[] = [];
  readonly outputs: onnx.IValueInfoProto[] = [];
  readonly initializers: LazyInitializer[] = [];
  private readonly used = new Set<string>();
  private readonly constants = new Map<string, string>();
  private counter = 0;

  constructor(readonly graphName: string) {}

  private claim(name: string): string {
    if (this.used.has(name)) throw new Error(`model-gen: value name ${name} is used twice in graph ${this.graphName}`);
    this.used.add(name);
    return name;
  }

  /** A fresh intermediate value name; the counter keeps names (and thus the file) deterministic. */
  fresh(hint: string): string {
    let name = `/${hint}_${this.counter++}`;
    while (this.used.has(name)) name = `/${hint}_${this.counter++}`;
    return this.claim(name);
  }

  /** Declares a graph input and returns its name. */
  input(name: string, elemType: ElemType, shape: Dim[]): string {
    this.inputs.push(valueInfo(this.claim(name), elemType, shape));
    return name;
  }

  /** Declares a graph output; `value` must already be produced under exactly this name. */
  output(name: string, elemType: ElemType, shape: Dim[]): void {
    this.outputs.push(valueInfo(name, elemType, shape));
  }

  /** Adds a float32 weight produced lazily by `data` (called once, while writing). */
  weight(name: string, dims: number[], data: () => Float32Array): string {
    const size = dims.reduce((a, b) => a * b, 1);
    this.initializers.push({
      name: this.claim(name),
      dims,
      elemType: 'float32',
      data: () => {
        const values = data();
        if (values.length !== size) {
          throw new Error(`model-gen: weight ${name} has ${values.length} values, dims ${dims.join('x')} need ${size}`);
        }
        return values;
      },
    });
    return name;
  }

  /** An int64 constant (1-D, or a scalar when `scalar`), shared between uses of the same value. */
  int64(values: number[], scalar = false): string {
    const key = `i64:${scalar ? 's' : 'v'}:${values.join(',')}`;
    const known = this.constants.get(key);
    if (known) return known;
    const name = this.claim(`const_i64_${this.constants.size}`);
    this.initializers.push({
      name,
      dims: scalar ? [] : [values.length],
      elemType: 'int64',
      data: () => BigInt64Array.from(values, (v) => BigInt(v)),
    });
    this.constants.set(key, name);
    return name;
  }

  /** A float32 scalar constant, shared between uses of the same value. */
  scalar(value: number): string {
    const key = `f32:${Object.is(value, -0) ? '-0' : String(value)}`;
    const known = this.constants.get(key);
    if (known) return known;
    const name = this.claim(`const_f32_${this.constants.size}`);
    this.initializers.push({ name, dims: [], elemType: 'float32', data: () => Float32Array.of(value) });
    this.constants.set(key, name);
    return name;
  }

  /**
   * Adds one node. `outputs` is either how many fresh outputs to create or the
   * exact names to produce (graph outputs such as `present.0.key`).
   */
  opN(
    opType: string,
    inputs: string[],
    attrs: Record<string, AttrValue> = {},
    outputs: number | string[] = 1,
  ): string[] {
    const hint = opType.toLowerCase();
    const outs =
      typeof outputs === 'number'
        ? Array.from({ length: outputs }, () => this.fresh(hint))
        : outputs.map((n) => this.claim(n));
    this.nodes.push({
      name: `${opType}_${this.nodes.length}`,
      opType,
      input: inputs,
      output: outs,
      attribute: Object.entries(attrs).map(([k, v]) => toAttribute(k, v)),
    });
    return outs;
  }

  /**
   * Checks that nodes are in topological order and every output is produced:
   * ORT would also refuse such a graph, but with a message about node numbers
   * rather than about the architecture code that built it.
   */
  validate(): void {
    const known = new Set<string>([...this.inputs.map((v) => v.name ?? ''), ...this.initializers.map((i) => i.name)]);
    for (const node of this.nodes) {
      for (const input of node.input ?? []) {
        if (input !== '' && !known.has(input)) {
          throw new Error(`model-gen: node ${node.name} (${node.opType}) reads ${input} before anything produces it`);
        }
      }
      for (const output of node.output ?? []) known.add(output);
    }
    for (const output of this.outputs) {
      if (!known.has(output.name ?? '')) throw new Error(`model-gen: graph output ${output.name} is never produced`);
    }
  }

  /** Adds a single-output node and returns the output name (or produces `outputName` exactly). */
  op(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, outputName?: string): string {
    const [out] = this.opN(opType, inputs, attrs, outputName === undefined ? 1 : [outputName]);
    if (out === undefined) throw new Error(`model-gen: ${opType} produced no output`);
    return out;
  }
}

/** Bytes needed to encode `n` as a protobuf varint. */
export function varintLength(n: number): number {
  let len = 1;
  let v = n;
  while (v >= 0x80) {
    v = Math.floor(v / 128);
    len++;
  }
  return len;
}

function varint(n: number): Uint8Array {
  const out = new Uint8Array(varintLength(n));
  let v = n;
  let i = 0;
  while (v >= 0x80) {
    out[i++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  out[i] = v;
  return out;
}

/** Bytes of the raw data of an initializer. */
export function initializerBytes(init: LazyInitializer): number {
  return init.dims.reduce((a, b) => a * b, 1) * ELEM_BYTES[init.elemType];
}

/**
 * Writes the graph as a single-file ONNX model and returns the file size. The
 * layout of the bytes depends only on the builder's content, so equal builders
 * give byte-identical files.
 */
export function writeOnnxModel(filePath: string, graph: GraphBuilder, meta: ModelMeta): number {
  if (endianness() !== 'LE') {
    // raw_data is little-endian by definition; the typed arrays are written as they lie in memory.
    throw new Error('model-gen: writing ONNX raw_data from typed arrays needs a little-endian machine');
  }
  graph.validate();
  const skeleton = onnx.GraphProto.encode({
    name: graph.graphName,
    node: graph.nodes,
    input: graph.inputs,
    output: graph.outputs,
  }).finish();

  const frames = graph.initializers.map((init) => {
    const header = onnx.TensorProto.encode({
      name: init.name,
      dims: init.dims,
      dataType: ELEM[init.elemType],
    }).finish();
    const raw = initializerBytes(init);
    const tensorLen = header.length + 1 + varintLength(raw) + raw;
    return { init, header, raw, tensorLen, frameLen: 1 + varintLength(tensorLen) + tensorLen };
  });
  const graphLen = skeleton.length + frames.reduce((a, f) => a + f.frameLen, 0);

  const modelHeader = onnx.ModelProto.encode({
    irVersion: meta.irVersion,
    opsetImport: [{ domain: '', version: meta.opsetVersion }],
    producerName: meta.producerName,
    producerVersion: meta.producerVersion,
    docString: meta.docString ?? '',
    metadataProps: Object.entries(meta.metadata ?? {}).map(([key, value]) => ({ key, value })),
  }).finish();
  const total = modelHeader.length + 1 + varintLength(graphLen) + graphLen;
  if (total > PROTOBUF_LIMIT_BYTES) {
    throw new Error(
      `model-gen: the model would be ${(total / 2 ** 30).toFixed(2)} GiB, over the 2 GiB single-file protobuf limit; ` +
        'choose a smaller shape (fewer layers, smaller hidden size or vocabulary)',
    );
  }

  const fd = openSync(filePath, 'w');
  try {
    const put = (bytes: Uint8Array): void => {
      let off = 0;
      while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    };
    put(modelHeader);
    put(Uint8Array.of(TAG_MODEL_GRAPH));
    put(varint(graphLen));
    put(skeleton);
    for (const f of frames) {
      put(Uint8Array.of(TAG_GRAPH_INITIALIZER));
      put(varint(f.tensorLen));
      put(f.header);
      put(Uint8Array.of(TAG_TENSOR_RAW_DATA));
      put(varint(f.raw));
      const data = f.init.data();
      if (data.byteLength !== f.raw) {
        throw new Error(`model-gen: initializer ${f.init.name} has ${data.byteLength} bytes, expected ${f.raw}`);
      }
      put(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    }
  } finally {
    closeSync(fd);
  }
  return total;
}
