/**
 * Byte sizes for people: binary units (KiB, MiB, GiB) as KV budgets are powers
 * of two in practice. Used by the renderer and the CLI so both print the same.
 */

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'] as const;

const MULTIPLIERS: Record<string, number> = {
  '': 1,
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
  tib: 1024 ** 4,
  // Single letters follow Docker and the JVM (-Xmx2g): binary.
  k: 1024,
  m: 1024 ** 2,
  g: 1024 ** 3,
  t: 1024 ** 4,
};

/**
 * A byte size as a person writes it — `512`, `64KiB`, `2 GiB`, `1.5GB`, `2g` (case-insensitive; KB/MB/GB are
 * decimal, KiB/MiB/GiB and single letters binary; fractions round down to whole bytes) — or null. One reading
 * for the CLI's flags, settings and the window's limit box.
 */
export function readByteSize(input: string): number | null {
  const match = /^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)\s*$/i.exec(input);
  // An unknown unit multiplies by NaN, which the safe-integer check turns into null.
  const bytes =
    match === null
      ? Number.NaN
      : Math.floor(Number(match[1]) * (MULTIPLIERS[(match[2] as string).toLowerCase()] ?? Number.NaN));
  return Number.isSafeInteger(bytes) ? bytes : null;
}

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
