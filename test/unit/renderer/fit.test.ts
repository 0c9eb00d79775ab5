import { describe, expect, it } from 'vitest';
import { FIT_CONCURRENCY, fitBadge, fitLabel } from '../../../src/renderer/lib/fit';

// The default model: bpt 1024, context 2048 → one full context = 2 MiB, 4 at once = 8 MiB.
const model = { bpt: 1024, contextLength: 2048, weightsBytes: 1_000_000, loaded: true };
const MiB = 1024 ** 2;

describe('fitBadge', () => {
  it('computes one full context and N at once', () => {
    const r = fitBadge(model, { limitBytes: 100 * MiB });
    expect(r.oneContextBytes).toBe(2 * MiB);
    expect(r.concurrentBytes).toBe(FIT_CONCURRENCY * 2 * MiB);
    expect(r.fullContextsAtOnce).toBe(50);
  });

  it('says how many full contexts there is room for, with its unit and thousands separators', () => {
    const tiny = { bpt: 2, contextLength: 1, weightsBytes: 0, loaded: true };
    const r = fitBadge(tiny, { limitBytes: 2 * 5_908_370 });
    expect(r.explanation).toContain('room for 5,908,370 full contexts');
  });

  it('fits exactly at 4 full contexts, tight just below', () => {
    expect(fitBadge(model, { limitBytes: 8 * MiB }).level).toBe('fits');
    expect(fitBadge(model, { limitBytes: 8 * MiB - 1 }).level).toBe('tight');
  });

  it("tight down to exactly one full context, won't fit below", () => {
    const tight = fitBadge(model, { limitBytes: 2 * MiB });
    expect(tight.level).toBe('tight');
    expect(tight.fullContextsAtOnce).toBe(1);
    expect(tight.explanation).toContain('Only 1 full context fit');
    expect(fitBadge(model, { limitBytes: 2 * MiB - 1 }).level).toBe('wont-fit');
  });

  it('counts a static cache whole, even where it holds more positions than the context', () => {
    const fixed = { ...model, contextLength: 16, staticPositions: 48 };
    expect(fitBadge(fixed, { limitBytes: 100 * MiB }).oneContextBytes).toBe(48 * 1024);
    const tooSmall = fitBadge(fixed, { limitBytes: 48 * 1024 - 1 });
    expect(tooSmall.level).toBe('wont-fit');
    expect(tooSmall.explanation).toContain('nothing can run');
  });

  it('subtracts the weights of a model not loaded yet from a derived budget', () => {
    const notLoaded = { ...model, loaded: false };
    const derived = { limitBytes: 8 * MiB, derivation: { source: 'derived' as const } };
    const r = fitBadge(notLoaded, derived);
    expect(r.budgetBytes).toBe(8 * MiB - 1_000_000);
    expect(r.level).toBe('tight');
    // Explicit budgets do not move when a model loads; loaded models are already subtracted.
    expect(fitBadge(notLoaded, { limitBytes: 8 * MiB, derivation: { source: 'explicit' } }).level).toBe('fits');
    expect(fitBadge(model, derived).level).toBe('fits');
  });

  it('a model without KV always fits', () => {
    const r = fitBadge({ ...model, bpt: 0 }, { limitBytes: 0 });
    expect(r.level).toBe('fits');
    expect(r.fullContextsAtOnce).toBe(Number.POSITIVE_INFINITY);
  });

  it('labels', () => {
    expect(fitLabel('fits')).toBe('fits');
    expect(fitLabel('tight')).toBe('tight');
    expect(fitLabel('wont-fit')).toBe("won't fit");
  });
});
