import { promises as fs } from 'node:fs';
import { onnx } from 'onnx-proto';
import {
  DATA_LOCATION_EXTERNAL,
  GRAPH_INITIALIZER,
  GRAPH_INPUT,
  GRAPH_OUTPUT,
  MODEL_GRAPH,
  MODEL_IR_VERSION,
  MODEL_OPSET_IMPORT,
  TENSOR_DATA_LOCATION,
  TENSOR_DATA_TYPE,
  TENSOR_DIMS,
  TENSOR_EXTERNAL_DATA,
  TENSOR_NAME,
  WIRE_FIXED32,
  WIRE_FIXED64,
  WIRE_LEN,
  WIRE_VARINT,
} from '../../shared/onnx-fields';
import { isLfsPointerFile, lfsPointerError } from './lfs-pointer';
import { packageError } from './package-error';

/**
 * A graph input or output as declared in the ONNX file. `shape` is undefined
 * when the graph declares no shape; a dim with neither value nor name is '?'.
 */
export interface OnnxValueInfo {
  name: string;
  /** onnx.TensorProto.DataType; 0 when the value is not a tensor. */
  elemType: number;
  shape: Array<number | string> | undefined;
}

/** An initializer whose bytes live in another file (ONNX external data). */
export interface OnnxExternalRef {
  tensor: string;
  /** `location` as written, relative to the graph's folder. */
  location: string;
  offset: number;
  /** `length` when written; otherwise computed from dims × element width when the type has a fixed width. */
  length: number | undefined;
  /** dims × element width, when the type has a fixed width: what onnxruntime will read, whatever `length` says. */
  tensorBytes: number | undefined;
  dims: number[];
  /** onnx.TensorProto.DataType. */
  elemType: number;
}

/** What kvdesk needs to know about a graph, read without loading its weights. */
export interface OnnxGraphInfo {
  irVersion: number;
  opsets: Array<{ domain: string; version: number }>;
  inputs: OnnxValueInfo[];
  outputs: OnnxValueInfo[];
  externalData: OnnxExternalRef[];
  initializerCount: number;
  fileBytes: number;
}

/** Small messages decoded whole; a ValueInfoProto bigger than this is not a real port description. */
const MAX_DECODED_MESSAGE = 1024 * 1024;
const CHUNK = 64 * 1024;

/** Byte width of fixed-width tensor element types, by onnx.TensorProto.DataType. */
const ELEMENT_BYTES: Record<number, number> = {
  1: 4,
  2: 1,
  3: 1,
  4: 2,
  5: 2,
  6: 4,
  7: 8,
  9: 1,
  10: 2,
  11: 8,
  12: 4,
  13: 8,
  14: 8,
  15: 16,
  16: 2,
  17: 1,
  18: 1,
  19: 1,
  20: 1,
};

/** Thrown inside the reader; turned into PACKAGE_INVALID with the file name by readOnnxGraphInfo. */
class MalformedOnnx extends Error {}

/**
 * Positioned reads with a small window cache: fields are decoded from the
 * window and large values are skipped by offset, so a 650 MB graph with
 * embedded weights costs a few hundred small reads, not 650 MB of memory.
 */
class PositionedReader {
  private window: Buffer = Buffer.alloc(0);
  private windowStart = 0;

  constructor(
    private readonly handle: fs.FileHandle,
    readonly size: number,
  ) {}

  async bytes(pos: number, length: number): Promise<Buffer> {
    if (pos < 0 || pos + length > this.size)
      throw new MalformedOnnx(
        `needs bytes ${pos}..${pos + length} past the end of the file (${this.size} bytes): the file is truncated`,
      );
    if (pos >= this.windowStart && pos + length <= this.windowStart + this.window.length) {
      return this.window.subarray(pos - this.windowStart, pos - this.windowStart + length);
    }
    const want = Math.min(Math.max(length, CHUNK), this.size - pos);
    // A fresh buffer per refill keeps earlier subarrays valid for their callers.
    const buf = Buffer.allocUnsafe(want);
    let filled = 0;
    while (filled < want) {
      const { bytesRead } = await this.handle.read(buf, filled, want - filled, pos + filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    if (filled < length) throw new MalformedOnnx('the file changed size while it was read');
    this.window = buf.subarray(0, filled);
    this.windowStart = pos;
    return this.window.subarray(0, length);
  }

  /** Decodes a base-128 varint; values above 2^53 lose precision, which no length or version reaches. */
  async varint(pos: number, end: number): Promise<{ value: number; next: number }> {
    const available = Math.min(10, end - pos);
    if (available <= 0) throw new MalformedOnnx(`a field ends at byte ${pos}, inside its enclosing message`);
    const buf = await this.bytes(pos, available);
    let value = 0;
    let scale = 1;
    for (let i = 0; i < buf.length; i += 1) {
      const byte = buf[i] as number;
      value += (byte & 0x7f) * scale;
      if ((byte & 0x80) === 0) return { value, next: pos + i + 1 };
      scale *= 128;
    }
    throw new MalformedOnnx(`an integer at byte ${pos} runs past its message`);
  }
}

interface Field {
  number: number;
  wire: number;
  /** The varint value (wire type 0). */
  value: number;
  /** For length-delimited fields: where the payload starts and ends. */
  start: number;
  end: number;
}

/** Walks the fields of one message occupying [start, end) of the file. */
async function forEachField(
  reader: PositionedReader,
  start: number,
  end: number,
  visit: (field: Field) => Promise<void> | void,
): Promise<void> {
  let pos = start;
  while (pos < end) {
    const tag = await reader.varint(pos, end);
    const number = Math.floor(tag.value / 8);
    const wire = tag.value % 8;
    if (number === 0) throw new MalformedOnnx(`byte ${pos} holds field number 0, which protobuf never writes`);
    pos = tag.next;
    const field: Field = { number, wire, value: 0, start: pos, end: pos };
    if (wire === WIRE_VARINT) {
      const v = await reader.varint(pos, end);
      field.value = v.value;
      pos = v.next;
    } else if (wire === WIRE_FIXED64 || wire === WIRE_FIXED32) {
      pos += wire === WIRE_FIXED64 ? 8 : 4;
    } else if (wire === WIRE_LEN) {
      const len = await reader.varint(pos, end);
      field.start = len.next;
      pos = len.next + len.value;
    } else {
      throw new MalformedOnnx(`byte ${tag.next - 1} uses protobuf wire type ${wire}, which ONNX files never contain`);
    }
    field.end = pos;
    if (pos > end) {
      throw new MalformedOnnx(
        end === reader.size
          ? `field ${number} needs ${pos - end} bytes more than the file has: the file is truncated`
          : `field ${number} at byte ${field.start} runs past the end of its enclosing message`,
      );
    }
    await visit(field);
  }
}

function toNumber(v: number | { toNumber(): number } | null | undefined): number {
  if (v === null || v === undefined) return 0;
  return typeof v === 'number' ? v : v.toNumber();
}

async function decodeSmall<T>(
  reader: PositionedReader,
  field: Field,
  what: string,
  decode: (buf: Uint8Array) => T,
): Promise<T> {
  const length = field.end - field.start;
  if (length > MAX_DECODED_MESSAGE)
    throw new MalformedOnnx(`a ${what} of ${length} bytes at byte ${field.start} is far larger than any real one`);
  const buf = await reader.bytes(field.start, length);
  try {
    return decode(buf);
  } catch (err) {
    throw new MalformedOnnx(
      `the ${what} at byte ${field.start} does not decode (${err instanceof Error ? err.message : String(err)})`,
    );
  }
}

function valueInfoFrom(proto: onnx.ValueInfoProto): OnnxValueInfo {
  const tensor = proto.type?.tensorType;
  const dims = tensor?.shape?.dim;
  const shape = dims
    ? dims.map((dim): number | string => {
        // decode() returns Dimension instances; `value` is protobufjs's oneof discriminator.
        const d = dim as onnx.TensorShapeProto.Dimension;
        if (d.value === 'dimValue') return toNumber(d.dimValue);
        if (d.value === 'dimParam') return d.dimParam ?? '?';
        return '?';
      })
    : undefined;
  return { name: proto.name, elemType: tensor?.elemType ?? 0, shape };
}

async function readTensorHeader(
  reader: PositionedReader,
  start: number,
  end: number,
): Promise<{ name: string; dims: number[]; dataType: number; external: Map<string, string>; isExternal: boolean }> {
  const header = {
    name: '',
    dims: [] as number[],
    dataType: 0,
    external: new Map<string, string>(),
    isExternal: false,
  };
  await forEachField(reader, start, end, async (f) => {
    if (f.number === TENSOR_NAME && f.wire === WIRE_LEN) {
      header.name = (await reader.bytes(f.start, f.end - f.start)).toString('utf8');
    } else if (f.number === TENSOR_DIMS && f.wire === WIRE_VARINT) {
      header.dims.push(f.value);
    } else if (f.number === TENSOR_DIMS && f.wire === WIRE_LEN) {
      let pos = f.start;
      while (pos < f.end) {
        const v = await reader.varint(pos, f.end);
        header.dims.push(v.value);
        pos = v.next;
      }
    } else if (f.number === TENSOR_DATA_TYPE && f.wire === WIRE_VARINT) {
      header.dataType = f.value;
    } else if (f.number === TENSOR_DATA_LOCATION && f.wire === WIRE_VARINT) {
      header.isExternal = f.value === DATA_LOCATION_EXTERNAL;
    } else if (f.number === TENSOR_EXTERNAL_DATA && f.wire === WIRE_LEN) {
      const entry = await decodeSmall(reader, f, 'external-data entry', (b) => onnx.StringStringEntryProto.decode(b));
      header.external.set(entry.key, entry.value);
    }
    // raw_data and the typed data fields are skipped by offset: that is the point of this reader.
  });
  return header;
}

/**
 * Reads a ModelProto's IR version, opset imports, graph inputs/outputs and the
 * external-data references of its initializers, without loading weights.
 * `file` is the name used in messages (relative to the package root).
 * Refuses anything that is not a well-formed ONNX model.
 */
export async function readOnnxGraphInfo(absPath: string, file: string): Promise<OnnxGraphInfo> {
  const handle = await fs.open(absPath, 'r');
  try {
    const size = (await handle.stat()).size;
    // A clone without Git LFS: its "graph" is a few lines of text, which would read as a broken protobuf.
    if (await isLfsPointerFile(absPath, size)) throw lfsPointerError(file);
    const reader = new PositionedReader(handle, size);
    const info: OnnxGraphInfo = {
      irVersion: 0,
      opsets: [],
      inputs: [],
      outputs: [],
      externalData: [],
      initializerCount: 0,
      fileBytes: size,
    };
    const initializerNames = new Set<string>();
    let sawGraph = false;
    try {
      await forEachField(reader, 0, size, async (f) => {
        if (f.number === MODEL_IR_VERSION && f.wire === WIRE_VARINT) {
          info.irVersion = f.value;
        } else if (f.number === MODEL_OPSET_IMPORT && f.wire === WIRE_LEN) {
          const op = await decodeSmall(reader, f, 'opset import', (b) => onnx.OperatorSetIdProto.decode(b));
          info.opsets.push({ domain: op.domain, version: toNumber(op.version) });
        } else if (f.number === MODEL_GRAPH && f.wire === WIRE_LEN) {
          sawGraph = true;
          await forEachField(reader, f.start, f.end, async (g) => {
            if (g.wire !== WIRE_LEN) return;
            if (g.number === GRAPH_INPUT || g.number === GRAPH_OUTPUT) {
              const vi = await decodeSmall(reader, g, 'graph input/output', (b) => onnx.ValueInfoProto.decode(b));
              (g.number === GRAPH_INPUT ? info.inputs : info.outputs).push(valueInfoFrom(vi));
            } else if (g.number === GRAPH_INITIALIZER) {
              info.initializerCount += 1;
              const t = await readTensorHeader(reader, g.start, g.end);
              initializerNames.add(t.name);
              const location = t.external.get('location');
              if (t.isExternal || location !== undefined) {
                if (location === undefined)
                  throw new MalformedOnnx(`initializer "${t.name}" is marked external but names no location`);
                const offset = Number(t.external.get('offset') ?? 0);
                const lengthText = t.external.get('length');
                const width = ELEMENT_BYTES[t.dataType];
                const computed = width === undefined ? undefined : t.dims.reduce((a, b) => a * b, 1) * width;
                const length = lengthText === undefined ? computed : Number(lengthText);
                if (
                  !Number.isSafeInteger(offset) ||
                  offset < 0 ||
                  (length !== undefined && (!Number.isSafeInteger(length) || length < 0))
                ) {
                  throw new MalformedOnnx(`initializer "${t.name}" has an invalid external offset/length`);
                }
                info.externalData.push({
                  tensor: t.name,
                  location,
                  offset,
                  length,
                  tensorBytes: computed,
                  dims: t.dims,
                  elemType: t.dataType,
                });
              }
            }
          });
        }
      });
    } catch (err) {
      if (err instanceof MalformedOnnx) throw notOnnx(file, err.message);
      throw err;
    }
    if (!sawGraph) throw notOnnx(file, size === 0 ? 'the file is empty' : 'it has no graph');
    if (info.irVersion === 0) throw notOnnx(file, 'it declares no IR version');
    // IR < 4 lists initializers among the inputs; they are weights, not ports.
    info.inputs = info.inputs.filter((i) => !initializerNames.has(i.name));
    if (info.inputs.length === 0 || info.outputs.length === 0)
      throw notOnnx(file, 'its graph has no inputs or no outputs');
    return info;
  } finally {
    await handle.close();
  }
}

function notOnnx(file: string, reason: string): Error {
  return packageError(
    `${file} is not a valid ONNX model: ${reason}. Replace it with the complete .onnx file (re-download or re-export it).`,
    { file },
    { reason },
  );
}

/** Element byte width of an onnx.TensorProto.DataType, undefined for variable or sub-byte types. */
export function elementBytes(elemType: number): number | undefined {
  return ELEMENT_BYTES[elemType];
}
