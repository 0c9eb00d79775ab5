/**
 * Number formatting for the UI. Bytes use binary units (KiB, MiB, GiB) because
 * KV budgets are powers of two in practice and the CLI prints the same units;
 * the exact integer always goes in a tooltip or a data attribute beside it.
 */

export { formatBytes } from '../../shared/format';

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

const SIZE_RE = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$/i;
const FACTORS: Record<string, number> = { '': 1, b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/**
 * Parses what a person types in the limit box: `512`, `64KiB`, `1.5 GiB`, `2g`.
 * Decimal-looking suffixes (KB, GB) are read as binary too, because the UI shows
 * binary units and a person copying a figure from it must get that figure back.
 * Returns null for anything else.
 */
export function parseByteSize(text: string): number | null {
  const m = SIZE_RE.exec(text);
  if (!m) return null;
  const value = Number(m[1]);
  const unit = (m[2] ?? '').toLowerCase().charAt(0);
  const factor = FACTORS[unit === 'b' ? 'b' : unit];
  if (factor === undefined || !Number.isFinite(value)) return null;
  const bytes = Math.floor(value * factor);
  return Number.isSafeInteger(bytes) ? bytes : null;
}
