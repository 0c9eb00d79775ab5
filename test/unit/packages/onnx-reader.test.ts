import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { readOnnxGraphInfo } from '../../../src/main/packages/onnx-reader';
import { KvdeskError } from '../../../src/shared/errors';
import { decoderGraph, encodeGraph, removeTempDirs, T, tempPackageDir } from './package-builder';

afterAll(removeTempDirs);

async function writeTemp(name: string, bytes: Uint8Array | string): Promise<string> {
  const dir = await tempPackageDir();
  const p = path.join(dir, name);
  await fs.writeFile(p, bytes);
  return p;
}

async function refusal(p: string): Promise<KvdeskError> {
  const err = await readOnnxGraphInfo(p, 'model.onnx').then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(KvdeskError);
  return err as KvdeskError;
}

describe('readOnnxGraphInfo', () => {
  it('reads inputs, outputs, dims, opsets and IR version', async () => {
    const p = await writeTemp(
      'model.onnx',
      encodeGraph({
        irVersion: 9,
        opsets: [
          { domain: '', version: 21 },
          { domain: 'com.microsoft', version: 1 },
        ],
        inputs: [
          { name: 'input_ids', type: T.i32, shape: ['batch', 'seq'] },
          { name: 'kv', type: T.f16, shape: ['batch', 4, null, 64] },
          { name: 'noshape', type: T.bf16 },
        ],
        outputs: [{ name: 'logits', type: T.f32, shape: ['batch', 'seq', 32000] }],
      }),
    );
    const info = await readOnnxGraphInfo(p, 'model.onnx');
    expect(info.irVersion).toBe(9);
    expect(info.opsets).toEqual([
      { domain: '', version: 21 },
      { domain: 'com.microsoft', version: 1 },
    ]);
    expect(info.inputs).toEqual([
      { name: 'input_ids', elemType: T.i32, shape: ['batch', 'seq'] },
      { name: 'kv', elemType: T.f16, shape: ['batch', 4, '?', 64] },
      { name: 'noshape', elemType: T.bf16, shape: undefined },
    ]);
    expect(info.outputs).toEqual([{ name: 'logits', elemType: T.f32, shape: ['batch', 'seq', 32000] }]);
  });

  it('reports external-data references with offset and length, computing a missing length from dims', async () => {
    const p = await writeTemp(
      'model.onnx',
      encodeGraph({
        inputs: [{ name: 'x', type: T.f32, shape: [1] }],
        outputs: [{ name: 'y', type: T.f32, shape: [1] }],
        initializers: [
          { name: 'w1', dims: [4, 4], external: { location: 'model.onnx.data', offset: 0, length: 64 } },
          { name: 'w2', dims: [2, 3], type: T.f16, external: { location: 'model.onnx.data', offset: 64 } },
          { name: 'inline', dims: [8], rawBytes: 32 },
        ],
      }),
    );
    const info = await readOnnxGraphInfo(p, 'model.onnx');
    expect(info.initializerCount).toBe(3);
    expect(info.externalData).toEqual([
      {
        tensor: 'w1',
        location: 'model.onnx.data',
        offset: 0,
        length: 64,
        tensorBytes: 64,
        dims: [4, 4],
        elemType: T.f32,
      },
      {
        tensor: 'w2',
        location: 'model.onnx.data',
        offset: 64,
        length: 12,
        tensorBytes: 12,
        dims: [2, 3],
        elemType: T.f16,
      },
    ]);
  });

  it('drops initializers that IR<4 models also list as inputs', async () => {
    const p = await writeTemp(
      'model.onnx',
      encodeGraph({
        irVersion: 3,
        inputs: [
          { name: 'x', type: T.f32, shape: [1] },
          { name: 'w', type: T.f32, shape: [4] },
        ],
        outputs: [{ name: 'y', type: T.f32, shape: [1] }],
        initializers: [{ name: 'w', dims: [4], rawBytes: 16 }],
      }),
    );
    expect((await readOnnxGraphInfo(p, 'model.onnx')).inputs.map((i) => i.name)).toEqual(['x']);
  });

  it('skips embedded weights instead of reading them', async () => {
    const big = 48 * 1024 * 1024;
    const p = await writeTemp(
      'model.onnx',
      encodeGraph({
        inputs: [{ name: 'x', type: T.f32, shape: [1] }],
        outputs: [{ name: 'y', type: T.f32, shape: [1] }],
        initializers: [
          { name: 'w', dims: [big / 4], rawBytes: big },
          { name: 'w2', dims: [4], rawBytes: 16 },
        ],
      }),
    );
    let bytesRead = 0;
    const realOpen = fs.open.bind(fs);
    const spy = vi.spyOn(fs, 'open').mockImplementation(async (...args: Parameters<typeof fs.open>) => {
      const handle = await realOpen(...args);
      const realRead = handle.read.bind(handle);
      handle.read = (async (...readArgs: Parameters<typeof handle.read>) => {
        const r = await realRead(...(readArgs as unknown as [Uint8Array, number, number, number]));
        bytesRead += r.bytesRead;
        return r;
      }) as typeof handle.read;
      return handle;
    });
    try {
      const info = await readOnnxGraphInfo(p, 'model.onnx');
      expect(info.initializerCount).toBe(2);
      expect(info.fileBytes).toBeGreaterThan(big);
    } finally {
      spy.mockRestore();
    }
    expect(bytesRead).toBeGreaterThan(0);
    expect(bytesRead).toBeLessThan(1024 * 1024);
  });

  it('refuses a text file renamed to .onnx', async () => {
    const err = await refusal(await writeTemp('model.onnx', 'hello world, this is not a model\n'));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toMatch(/^model\.onnx is not a valid ONNX model: .*Replace it with the complete \.onnx file/);
    expect(err.detail?.file).toBe('model.onnx');
  });

  it('refuses a JSON file renamed to .onnx', async () => {
    const err = await refusal(await writeTemp('model.onnx', JSON.stringify({ model: { type: 'llama' } })));
    expect(err.message).toContain('is not a valid ONNX model');
  });

  it('refuses a truncated protobuf', async () => {
    const full = decoderGraph({ layers: 2 });
    const err = await refusal(await writeTemp('model.onnx', full.subarray(0, Math.floor(full.length * 0.6))));
    expect(err.message).toMatch(/is not a valid ONNX model: .*truncated/);
  });

  it('refuses an empty file', async () => {
    const err = await refusal(await writeTemp('model.onnx', ''));
    expect(err.message).toContain('the file is empty');
  });

  it('refuses a protobuf that is not a ModelProto (no graph)', async () => {
    const { onnx } = await import('onnx-proto');
    const tensor = onnx.TensorProto.encode({ name: 'w', dims: [2], dataType: 1, rawData: new Uint8Array(8) }).finish();
    const err = await refusal(await writeTemp('model.onnx', tensor));
    expect(err.message).toContain('is not a valid ONNX model');
  });
});
