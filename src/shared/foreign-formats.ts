/**
 * Models in the formats kvdesk does not run, as people who come from Ollama or LM Studio (GGUF) or from transformers
 * (a PyTorch checkpoint: config, tokenizer and model.safetensors) bring them: what each is and how to get the ONNX
 * export kvdesk runs. Said the same by the host (a folder on its disk) and the browser (a folder it uploads).
 */

/** How to get a model kvdesk can run, from where it stands. */
const GET_ONNX =
  'Get the ONNX export of the model instead (on Hugging Face, often a repo of onnx-community, ' +
  '`kvdesk pull onnx-community/<name>`), or export it yourself from its transformers checkpoint with Optimum: ' +
  '`optimum-cli export onnx --model <owner/name or folder> <output folder>`, then load the output folder.';

/** Whether a file name is a GGUF file's. */
export function isGguf(name: string): boolean {
  return /\.gguf$/i.test(name);
}

/** Whether a file name is a transformers checkpoint's weights (safetensors or PyTorch's .bin, sharded or not). */
export function isCheckpointWeights(name: string): boolean {
  return /(^|\/)(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)$/i.test(name);
}

/** `what` (a file, or a folder with `files` among its files) is GGUF: llama.cpp's format, which kvdesk does not run. */
export function ggufMessage(what: string, files?: readonly string[]): string {
  const held = files === undefined ? 'is a GGUF file' : `holds GGUF files (${shortList(files)}) and no ONNX graph`;
  return (
    `${what} ${held}: GGUF is llama.cpp's format (the one Ollama and LM Studio use); kvdesk runs ONNX models, ` +
    `so it cannot load it. ${GET_ONNX}`
  );
}

/** `what` is a transformers checkpoint (config, tokenizer, weights in `weights`) without the ONNX graph kvdesk runs. */
export function checkpointMessage(what: string, weights: readonly string[]): string {
  return (
    `${what} is a transformers (PyTorch) checkpoint: its weights are in ${shortList(weights)}, but it has no ` +
    `ONNX graph (onnx/model.onnx or model.onnx), which is what kvdesk runs. ${GET_ONNX}`
  );
}

function shortList(names: readonly string[]): string {
  return names.slice(0, 3).join(', ') + (names.length > 3 ? `, … (${names.length} in all)` : '');
}
