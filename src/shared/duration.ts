/**
 * Durations as Ollama's `keep_alive` and kvdesk's `--first-use-ttl` take them: a number of seconds, or Go's
 * duration text ("250ms", "90s", "5m", "1h30m"). A negative value means "for ever", and so does one longer than
 * Go's longest duration (about 292 years): no clock can say when it ends.
 */

/** Go's longest duration (2^63 − 1 ns, "2562047h47m16.854775807s"), in whole milliseconds: the longest kept. */
export const MAX_DURATION_MS = 9_223_372_036_854;

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const PART = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;

/**
 * Milliseconds; null for "for ever" (a negative value, or one past MAX_DURATION_MS); undefined for something
 * that is not a duration. A bare number in text ("300") is seconds, as Ollama reads one.
 */
export function parseDuration(v: unknown): number | null | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? (v < 0 ? null : capped(v * 1000)) : undefined;
  if (typeof v !== 'string') return undefined;
  const text = v.trim();
  if (text === '') return undefined;
  const negative = text.startsWith('-');
  const body = negative || text.startsWith('+') ? text.slice(1) : text;
  let ms: number;
  if (/^(\d+(\.\d*)?|\.\d+)$/.test(body)) ms = Number(body) * 1000;
  else {
    ms = 0;
    PART.lastIndex = 0;
    let at = 0;
    while (at < body.length) {
      PART.lastIndex = at;
      const m = PART.exec(body);
      if (!m) return undefined;
      ms += Number(m[1]) * (UNIT_MS[m[2] as string] as number);
      at = PART.lastIndex;
    }
    if (at === 0) return undefined;
  }
  if (negative && ms > 0) return null;
  return capped(ms);
}

/** A time past what a clock can say (or too big to be a number at all) is for ever. */
function capped(ms: number): number | null {
  return Number.isFinite(ms) && ms <= MAX_DURATION_MS ? ms : null;
}

/** "45 s", "60 min", "1 h 30 min": a duration for people. */
export function formatDuration(ms: number): string {
  if (ms < 60_000) return `${Math.round(ms / 1000)} s`;
  const min = Math.round(ms / 60_000);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  return min % 60 === 0 ? `${h} h` : `${h} h ${min % 60} min`;
}
