import { describe, expect, it } from 'vitest';
import { loadedAnnouncement, unloadedAnnouncement } from '../../../src/renderer/lib/model-announcement';

describe('model announcements', () => {
  it('says a backend of a few letters by its letters, the others as the card writes them', () => {
    expect(loadedAnnouncement('pkg2', 'cpu', false)).toBe('pkg2 loaded on CPU');
    expect(loadedAnnouncement('pkg2', 'cuda', true)).toBe('pkg2 loaded again on CUDA');
    expect(loadedAnnouncement('pkg2', 'CUDAExecutionProvider', false)).toBe('pkg2 loaded on CUDA');
    expect(loadedAnnouncement('pkg2', 'coreml', false)).toBe('pkg2 loaded on coreml');
  });

  it('says an unload by the model’s name', () => {
    expect(unloadedAnnouncement('default')).toBe('default unloaded');
  });
});
