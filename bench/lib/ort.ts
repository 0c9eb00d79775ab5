/**
 * onnxruntime-node exactly as kvdesk loads it (the repository's node_modules),
 * never the copy transformers.js brings into bench/node_modules: the raw loop
 * must run the same runtime build as the engine.
 */
import { createRequire } from 'node:module';
import path from 'node:path';

const requireFromRoot = createRequire(path.resolve(__dirname, '..', '..', 'package.json'));

export const ort = requireFromRoot('onnxruntime-node') as typeof import('onnxruntime-node');
export type Tensor = import('onnxruntime-node').Tensor;
export type InferenceSession = import('onnxruntime-node').InferenceSession;
