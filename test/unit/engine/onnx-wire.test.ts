/** The engine's protobuf wire reader/writer (it reads graph files without a protobuf library). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FileBytes, fields, lenField, readVarint, stringField, varintField } from '../../../src/main/engine/onnx-wire';

describe('varints', () => {
  it('round-trip every value up to 2^53', () => {
    fc.assert(
      fc.property(fc.maxSafeNat(), fc.nat(100), (value, field) => {
        const bytes = varintField(field + 1, value);
        const [tag, afterTag] = readVarint(bytes, 0);
        expect(tag).toBe((field + 1) * 8);
        expect(readVarint(bytes, afterTag)).toEqual([value, bytes.length]);
      }),
    );
  });

  it('are the bytes protobuf writes', () => {
    expect([...varintField(1, 300)]).toEqual([0x08, 0xac, 0x02]);
    expect([...varintField(2, 2 ** 32)]).toEqual([0x10, 0x80, 0x80, 0x80, 0x80, 0x10]);
  });

  it('refuse to run past their message', () => {
    expect(() => readVarint(Buffer.from([0x80, 0x80]), 0)).toThrow(/past the end/);
  });
});

describe('fields', () => {
  const message = Buffer.concat([
    varintField(1, 7),
    stringField(4, 'Slice'),
    lenField(5, Buffer.concat([stringField(1, 'axis'), varintField(3, 1)])),
  ]);

  it('lists a message field by field, nested payloads included', () => {
    const top = [...fields(message, 0, message.length)];
    expect(top.map((f) => [f.field, f.wire])).toEqual([
      [1, 0],
      [4, 2],
      [5, 2],
    ]);
    expect(top[0]?.varint).toBe(7);
    const name = top[1];
    expect(message.subarray(name?.valueStart, name?.end).toString()).toBe('Slice');
    const attr = top[2];
    const inner = [...fields(message, attr?.valueStart as number, attr?.end as number)];
    expect(inner.map((f) => f.field)).toEqual([1, 3]);
  });

  it('reads the same from a file through a small window as from memory', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-wire-'));
    try {
      const big = Buffer.concat([lenField(9, Buffer.alloc(100_000, 1)), message]);
      writeFileSync(path.join(dir, 'm.bin'), big);
      const file = new FileBytes(path.join(dir, 'm.bin'), 16);
      try {
        const fromFile = [...fields(file, 0, file.size)].map(({ field, valueStart, end }) => [field, valueStart, end]);
        const fromMemory = [...fields(big, 0, big.length)].map(({ field, valueStart, end }) => [
          field,
          valueStart,
          end,
        ]);
        expect(fromFile).toEqual(fromMemory);
        expect(() => file.read(file.size - 2, 4)).toThrow(/outside the file/);
      } finally {
        file.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a field longer than its message', () => {
    const cut = message.subarray(0, message.length - 2);
    expect(() => [...fields(cut, 0, cut.length)]).toThrow(/runs past the end/);
  });
});
