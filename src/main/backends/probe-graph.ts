/**
 * The tiny graph backend detection runs on every provider: y = x + x on a
 * float32 [1, 4] tensor. Built in memory so detection needs no file on disk,
 * and small enough that creating a session costs milliseconds on CPU; the
 * cost on a GPU provider is its own start-up, which is exactly what the probe
 * has to find out works.
 */
import { onnx } from 'onnx-proto';

/** Input fed to the probe session. */
export const PROBE_INPUT = Float32Array.from([1, 2, 3, 4]);

/** What a working provider must return for PROBE_INPUT. */
export const PROBE_EXPECTED = Float32Array.from([2, 4, 6, 8]);

export const PROBE_INPUT_NAME = 'x';
export const PROBE_OUTPUT_NAME = 'y';
export const PROBE_SHAPE = [1, 4] as const;

let cached: Uint8Array | undefined;

/** The probe model as ONNX bytes (opset 13 Add: every provider implements it). */
export function probeModelBytes(): Uint8Array {
  if (cached !== undefined) return cached;
  const tensor = (name: string): onnx.IValueInfoProto => ({
    name,
    type: {
      tensorType: {
        elemType: onnx.TensorProto.DataType.FLOAT,
        shape: { dim: PROBE_SHAPE.map((d) => ({ dimValue: d })) },
      },
    },
  });
  cached = onnx.ModelProto.encode({
    irVersion: 8,
    producerName: 'kvdesk-backend-probe',
    opsetImport: [{ domain: '', version: 13 }],
    graph: {
      name: 'probe',
      node: [{ opType: 'Add', name: 'add', input: [PROBE_INPUT_NAME, PROBE_INPUT_NAME], output: [PROBE_OUTPUT_NAME] }],
      input: [tensor(PROBE_INPUT_NAME)],
      output: [tensor(PROBE_OUTPUT_NAME)],
    },
  }).finish();
  return cached;
}
