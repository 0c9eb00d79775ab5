/**
 * Just enough of protobuf's wire format to read an ONNX graph's structure from
 * its file and write a changed copy of it, without loading the weights and
 * without a protobuf library (the engine process loads no npm package but
 * onnxruntime-node: test/unit/engine/engine-imports.test.ts). Field numbers:
 * src/shared/onnx-fields.ts.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { WIRE_FIXED32, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT } from '../../shared/onnx-fields';

/** One field of a message: where its tag starts, where its value (or payload) starts and ends. */
export interface WireField {
  field: number;
  wire: number;
  /** Offset of the tag: the field's bytes are [tagStart, end). */
  tagStart: number;
  /** Offset of the value: a varint's first byte, a fixed value, or a length-delimited payload. */
  valueStart: number;
  end: number;
  /** The value of a varint field (exact up to 2^53). */
  varint: number;
}

/** Random access to a file's bytes through a cached window, so a scan costs a few reads per megabyte. */
export class FileBytes {
  private window = Buffer.alloc(0);
  private windowStart = 0;
  readonly size: number;
  private readonly fd: number;

  constructor(
    readonly path: string,
    private readonly windowBytes = 64 * 1024,
  ) {
    this.fd = openSync(path, 'r');
    try {
      this.size = fstatSync(this.fd).size;
    } catch (err) {
      closeSync(this.fd);
      throw err;
    }
  }

  close(): void {
    closeSync(this.fd);
  }

  /** Fills `into` with the bytes from `pos` (large reads, straight from the file). */
  readInto(pos: number, into: Uint8Array): void {
    if (pos < 0 || pos + into.length > this.size) {
      throw new RangeError(
        `${this.path}: bytes ${pos}..${pos + into.length} lie outside the file (${this.size} bytes)`,
      );
    }
    readFully(this.fd, into, pos);
  }

  /** `len` bytes from `pos` (a view of the window when they lie in it: copy them to keep them). */
  read(pos: number, len: number): Buffer {
    if (pos < 0 || len < 0 || pos + len > this.size) {
      throw new RangeError(`${this.path}: bytes ${pos}..${pos + len} lie outside the file (${this.size} bytes)`);
    }
    const inWindow = pos >= this.windowStart && pos + len <= this.windowStart + this.window.length;
    if (!inWindow) {
      if (len > this.windowBytes) {
        const out = Buffer.allocUnsafe(len);
        readFully(this.fd, out, pos);
        return out;
      }
      this.window = Buffer.allocUnsafe(Math.min(this.windowBytes, this.size - pos));
      readFully(this.fd, this.window, pos);
      this.windowStart = pos;
    }
    return this.window.subarray(pos - this.windowStart, pos - this.windowStart + len);
  }

  byte(pos: number): number {
    return this.read(pos, 1)[0] as number;
  }
}

function readFully(fd: number, into: Uint8Array, pos: number): void {
  let done = 0;
  while (done < into.length) {
    const n = readSync(fd, into, done, into.length - done, pos + done);
    if (n === 0) throw new RangeError('unexpected end of file');
    done += n;
  }
}

/** A byte source: a file read through its window, or a buffer. */
export type Bytes = FileBytes | Buffer;

function byteAt(src: Bytes, pos: number): number {
  if (src instanceof FileBytes) return src.byte(pos);
  const b = src[pos];
  if (b === undefined) throw new RangeError(`varint runs past the end of its message at ${pos}`);
  return b;
}

/** Reads a varint at `pos`; returns its value and the offset after it. */
export function readVarint(src: Bytes, pos: number): [number, number] {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10; i++) {
    const b = byteAt(src, pos + i);
    value += (b & 0x7f) * scale;
    scale *= 128;
    if ((b & 0x80) === 0) return [value, pos + i + 1];
  }
  throw new RangeError(`malformed varint at ${pos}`);
}

/** Reads a varint at `pos` as a signed int64 (negative values take ten bytes); returns it and the offset after it. */
export function readSignedVarint(src: Bytes, pos: number): [number, number] {
  let value = 0n;
  for (let i = 0; i < 10; i++) {
    const b = byteAt(src, pos + i);
    value |= BigInt(b & 0x7f) << BigInt(7 * i);
    if ((b & 0x80) === 0) return [Number(BigInt.asIntN(64, value)), pos + i + 1];
  }
  throw new RangeError(`malformed varint at ${pos}`);
}

/** The fields of the message stored in [start, end). */
export function* fields(src: Bytes, start: number, end: number): Generator<WireField> {
  let pos = start;
  while (pos < end) {
    const tagStart = pos;
    const [tag, afterTag] = readVarint(src, pos);
    const field = Math.floor(tag / 8);
    const wire = tag % 8;
    let valueStart = afterTag;
    let varint = 0;
    if (wire === WIRE_VARINT) [varint, pos] = readVarint(src, afterTag);
    else if (wire === WIRE_FIXED64) pos = afterTag + 8;
    else if (wire === WIRE_FIXED32) pos = afterTag + 4;
    else if (wire === WIRE_LEN) {
      const [len, payload] = readVarint(src, afterTag);
      valueStart = payload;
      pos = payload + len;
    } else throw new RangeError(`unsupported protobuf wire type ${wire} at ${tagStart}`);
    if (pos > end) throw new RangeError(`field ${field} at ${tagStart} runs past the end of its message (${end})`);
    yield { field, wire, tagStart, valueStart, end: pos, varint };
  }
}

function varintBytes(value: number): number[] {
  const out: number[] = [];
  if (value < 0) {
    // A negative int64 (an axis counted from the end) is its 64-bit two's complement: ten bytes.
    let u = BigInt.asUintN(64, BigInt(value));
    while (u >= 128n) {
      out.push(Number(u % 128n) | 0x80);
      u /= 128n;
    }
    out.push(Number(u));
    return out;
  }
  let v = value;
  while (v >= 128) {
    out.push((v % 128) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}

/** The tag and length of a length-delimited field whose payload of `length` bytes follows. */
export function lenHeader(field: number, length: number): Buffer {
  return Buffer.from([...varintBytes(field * 8 + WIRE_LEN), ...varintBytes(length)]);
}

/** A length-delimited field: tag, length, payload. */
export function lenField(field: number, payload: Uint8Array): Buffer {
  return Buffer.concat([
    Buffer.from(varintBytes(field * 8 + WIRE_LEN)),
    Buffer.from(varintBytes(payload.length)),
    payload,
  ]);
}

export function stringField(field: number, value: string): Buffer {
  return lenField(field, Buffer.from(value, 'utf8'));
}

export function varintField(field: number, value: number): Buffer {
  return Buffer.from([...varintBytes(field * 8 + WIRE_VARINT), ...varintBytes(value)]);
}
