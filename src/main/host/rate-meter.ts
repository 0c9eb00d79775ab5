/**
 * A transfer's speed over its last few seconds (a download's bytes per second, for its speed and time left):
 * what arrived between the oldest and newest samples of the window, so bytes that were there before it started
 * (a resumed download) do not count.
 */
export class RateMeter {
  private readonly samples: Array<{ at: number; bytes: number }> = [];

  constructor(
    /** How far back the speed looks. */
    private readonly windowMs = 5000,
    /** The shortest span it gives a speed for (a first burst says little). */
    private readonly minSpanMs = 1000,
  ) {}

  /** The transfer has `bytes` in all at `at` (ms). */
  add(bytes: number, at: number): void {
    this.samples.push({ at, bytes });
    while (this.samples.length > 2 && at - (this.samples[1]?.at ?? at) >= this.windowMs) this.samples.shift();
  }

  /** Bytes per second over the window; undefined before it spans `minSpanMs`. */
  rate(): number | undefined {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (!first || !last || last.at - first.at < this.minSpanMs) return undefined;
    return Math.max(0, ((last.bytes - first.bytes) * 1000) / (last.at - first.at));
  }
}
