/** A download's speed (src/main/host/rate-meter.ts): over the last seconds, not counting bytes it started with. */
import { describe, expect, it } from 'vitest';
import { RateMeter } from '../../../src/main/host/rate-meter';

describe('RateMeter', () => {
  it('no speed until it spans a second; then the bytes that arrived over the time they took', () => {
    const m = new RateMeter(5000, 1000);
    // A resumed download: 50 MB there already when it starts.
    m.add(50_000_000, 0);
    m.add(51_000_000, 500);
    expect(m.rate()).toBeUndefined();
    m.add(52_000_000, 1000);
    expect(m.rate()).toBe(2_000_000);
  });

  it('looks back over its window only: a slowdown shows once the fast part is older than that', () => {
    const m = new RateMeter(5000, 1000);
    for (let t = 0; t <= 5000; t += 1000) m.add(t * 10_000, t); // 10 MB/s
    expect(m.rate()).toBe(10_000_000);
    for (let t = 6000; t <= 12_000; t += 1000) m.add(50_000_000 + (t - 5000) * 1000, t); // 1 MB/s
    expect(m.rate()).toBeCloseTo(1_000_000, -3);
  });

  it('a transfer that starts over (bytes going back) never gives a negative speed', () => {
    const m = new RateMeter(5000, 1000);
    m.add(10_000_000, 0);
    m.add(0, 2000);
    expect(m.rate()).toBe(0);
  });
});
