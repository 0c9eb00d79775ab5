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
});
