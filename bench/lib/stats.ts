/** Small statistics helpers: medians of repetitions, percentiles of latency samples, a least-squares slope. */

/** Median of the values (mean of the middle two for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** The p-th percentile (0–100) by nearest rank on sorted data; NaN for none. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * s.length);
  return s[Math.min(s.length - 1, Math.max(0, rank - 1))] as number;
}

/** Slope and intercept of the least-squares line through (x, y). */
export function linearFit(
  xs: readonly number[],
  ys: readonly number[],
): { slope: number; intercept: number; r2: number } {
  const n = Math.min(xs.length, ys.length);
  if (n < 2) return { slope: Number.NaN, intercept: Number.NaN, r2: Number.NaN };
  let sx = 0;
  let sy = 0;
  for (let i = 0; i < n; i++) {
    sx += xs[i] as number;
    sy += ys[i] as number;
  }
  const mx = sx / n;
  const my = sy / n;
  let sxx = 0;
  let sxy = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    const dx = (xs[i] as number) - mx;
    const dy = (ys[i] as number) - my;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  const slope = sxy / sxx;
  return { slope, intercept: my - slope * mx, r2: syy === 0 ? 1 : (sxy * sxy) / (sxx * syy) };
}

/** Rounds for the JSON line: finite numbers to `digits` decimals, anything else to null. */
export function round(value: number | null | undefined, digits = 3): number | null {
  if (value === null || value === undefined || !Number.isFinite(value)) return null;
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** A number for the table, or a dash. */
export function fmt(value: number | null | undefined, digits = 1): string {
  return value === null || value === undefined || !Number.isFinite(value) ? '—' : value.toFixed(digits);
}

/**
 * A greedy generation's timings, every contender's the same way: TTFT from the call to the first token, decode
 * tok/s = (tokens − 1) / (last token − first token), total to the last token.
 */
export function generationTimes(
  tokens: number,
  started: number,
  first: number,
  last: number,
): { ttftMs: number; decodeTokensPerSecond: number; totalMs: number } {
  return {
    ttftMs: first - started,
    decodeTokensPerSecond: tokens > 1 ? ((tokens - 1) * 1000) / (last - first) : 0,
    totalMs: last - started,
  };
}
