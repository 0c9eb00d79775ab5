/**
 * Length of the common prefix of two id sequences: how much of a kept KV (its tokens) a new prompt can reuse. The
 * host uses it too, for its mirror of the engine's sessions: this module holds no onnxruntime, which the host's
 * processes (the CLI, serve, Electron's main) never load.
 */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
