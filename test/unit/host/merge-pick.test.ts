/** A new pick of how a package loads over the kept one (model-library.ts mergePick). */
import { describe, expect, it } from 'vitest';
import { mergePick } from '../../../src/main/host/model-library';

describe('mergePick', () => {
  it('what the new pick names replaces the kept field; the rest stays', () => {
    expect(mergePick({ variant: 'q4', backend: 'cuda', trustInstalled: true }, { backend: 'cpu' }, false)).toEqual({
      variant: 'q4',
      backend: 'cpu',
      trustInstalled: true,
    });
    expect(mergePick(undefined, { variant: 'fp16' }, false)).toEqual({ variant: 'fp16' });
    expect(mergePick({ variant: 'q4' }, {}, false)).toEqual({ variant: 'q4' });
  });

  it("an ORT package's variant is built for one backend: naming one drops the other's kept value", () => {
    expect(mergePick({ variant: 'cuda-fp16', trustInstalled: true }, { backend: 'cpu' }, true)).toEqual({
      backend: 'cpu',
      trustInstalled: true,
    });
    expect(mergePick({ backend: 'cuda' }, { variant: 'cpu-int4' }, true)).toEqual({ variant: 'cpu-int4' });
  });
});
