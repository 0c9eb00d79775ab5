import { describe, expect, it } from 'vitest';
import { MAX_FILES, selectPackageFiles, splitRelative } from '../../../src/renderer/lib/package-files';

const f = (path: string) => ({ path, data: new Blob([new Uint8Array(1)]) });

describe('package folder files', () => {
  it('splits a relative path into the folder and the path inside it', () => {
    expect(splitRelative('tiny-llm/onnx/model.onnx')).toEqual({ root: 'tiny-llm', rest: 'onnx/model.onnx' });
    expect(splitRelative('/tiny-llm/model.onnx')).toEqual({ root: 'tiny-llm', rest: 'model.onnx' });
    expect(splitRelative('pkg\\tokenizer.json')).toEqual({ root: 'pkg', rest: 'tokenizer.json' });
    expect(splitRelative('model.onnx')).toEqual({ root: null, rest: 'model.onnx' });
  });

  it('drops OS litter and git internals', () => {
    const kept = selectPackageFiles([
      f('model.onnx'),
      f('.DS_Store'),
      f('onnx/Thumbs.db'),
      f('.git/HEAD'),
      f('tokenizer.json'),
    ]);
    expect(kept.map((x) => x.path)).toEqual(['model.onnx', 'tokenizer.json']);
  });

  it('refuses an empty folder and an enormous one', () => {
    expect(() => selectPackageFiles([f('.DS_Store')])).toThrow(/empty/);
    expect(() => selectPackageFiles(Array.from({ length: MAX_FILES + 1 }, (_, i) => f(`x${i}`)))).toThrow(
      /package folder itself/,
    );
  });

  it('refuses GGUF and a transformers checkpoint before uploading them, saying what each is and what to do', () => {
    expect(() => selectPackageFiles([f('qwen-q4_k_m.gguf')])).toThrow(
      /^qwen-q4_k_m\.gguf is a GGUF file: GGUF is llama\.cpp's format.*optimum-cli export onnx --model/,
    );
    expect(() => selectPackageFiles([f('a.gguf'), f('README.md')])).toThrow(/^The folder holds GGUF files \(a\.gguf\)/);
    expect(() => selectPackageFiles([f('config.json'), f('tokenizer.json'), f('model.safetensors')])).toThrow(
      /^The folder is a transformers \(PyTorch\) checkpoint.*optimum-cli export onnx/,
    );
    // An ONNX package that also ships its checkpoint (many Hub repos do) is a package: uploaded.
    const both = [f('config.json'), f('tokenizer.json'), f('model.safetensors'), f('onnx/model.onnx')];
    expect(selectPackageFiles(both)).toHaveLength(4);
  });
});
