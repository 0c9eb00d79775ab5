/**
 * Byte sizes for people: binary units (KiB, MiB, GiB) as KV budgets are powers
 * of two in practice. Used by the renderer and the CLI so both print the same.
 */

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'] as const;

/** `1536` → `1.50 KiB`; three significant digits so figures keep their width while they change. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return '—';
  const sign = bytes < 0 ? '−' : '';
  let v = Math.abs(bytes);
  if (v < 1024) return `${sign}${Math.round(v)} B`;
  let unit = -1;
  while (v >= 1024 && unit < UNITS.length - 1) {
    v /= 1024;
    unit += 1;
  }
  // Rounding can carry a value to 1024 (1023.99 KiB → "1024 KiB"); move it to the next unit instead.
  if (Number(v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)) >= 1024 && unit < UNITS.length - 1) {
    v /= 1024;
    unit += 1;
  }
  const digits = v < 10 ? 2 : v < 100 ? 1 : 0;
  return `${sign}${v.toFixed(digits)} ${UNITS[unit]}`;
}
