/**
 * Number formatting for the UI. Bytes use binary units (KiB, MiB, GiB) because
 * KV budgets are powers of two in practice and the CLI prints the same units;
 * the exact integer always goes in a tooltip or a data attribute beside it.
 */

import { formatBytes, readByteSize } from '../../shared/format';

export { formatBytes };

/**
 * A byte figure's change, `11.3 GiB → 12.0 GiB`; where the rounded figures read the same (a change of a few KiB in
 * GiB), the exact bytes, so the change shows: `12,134,567,890 → 12,134,571,986 bytes (+4.00 KiB)`.
 */
export function byteChange(before: number, after: number): string {
  const from = formatBytes(before);
  const to = formatBytes(after);
  if (from !== to || before === after) return before === after ? `${from} (unchanged)` : `${from} → ${to}`;
  const delta = after - before;
  return `${formatInteger(before)} → ${formatInteger(after)} bytes (${delta > 0 ? '+' : '−'}${formatBytes(Math.abs(delta))})`;
}

/** `2097152` → `2,097,152 bytes`, for tooltips. */
export function exactBytes(bytes: number): string {
  return `${formatInteger(bytes)} bytes`;
}

/** Thousands separators independent of the machine's locale, so screenshots and tests read the same. */
export function formatInteger(n: number): string {
  if (!Number.isFinite(n)) return '—';
  const s = Math.round(Math.abs(n)).toString();
  const grouped = s.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return n < 0 ? `−${grouped}` : grouped;
}

/** Milliseconds as `180 ms` or `2.4 s`. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60_000);
  const s = Math.round((ms % 60_000) / 1000);
  return `${m} min ${s} s`;
}

/** Tokens per second, e.g. `41 tok/s`. */
export function formatRate(tokensPerSecond: number): string {
  if (!Number.isFinite(tokensPerSecond)) return '—';
  return `${tokensPerSecond >= 100 ? Math.round(tokensPerSecond) : tokensPerSecond.toFixed(1)} tok/s`;
}

/**
 * Parses what a person types in the limit box: `512`, `64KiB`, `1.5 GiB`, `2g` — as `--kv-budget` reads it
 * (the figures the window shows are binary, KiB/MiB/GiB; KB/GB are decimal, as on the command line).
 * Returns null for anything else.
 */
export function parseByteSize(text: string): number | null {
  return readByteSize(text);
}

/** A phrase as a sentence or a name starts it ("reply 3" → "Reply 3"). */
export function capitalized(phrase: string): string {
  return `${phrase.charAt(0).toUpperCase()}${phrase.slice(1)}`;
}
