/**
 * A table for a terminal whose columns line up by the cells its text takes, not by its UTF-16 length: a CJK or
 * other wide character takes two cells, a combining mark none, an emoji two (string-width's measure, which
 * terminals follow). Padded with `padEnd`, a column of wide ids pushed every later column of its rows out of line.
 */

/** Each row's cells padded to their column's width in cells, two spaces apart; and those widths. */
export async function alignedRows(
  rows: readonly (readonly string[])[],
): Promise<{ lines: string[]; widths: number[] }> {
  // string-width is an ES module: imported, not required (the CLI bundle is CommonJS, and Node 20 before 20.19
  // cannot require an ES module).
  const { default: cells } = await import('string-width');
  const widths = (rows[0] ?? []).map((_, c) => Math.max(...rows.map((r) => cells(r[c] ?? ''))));
  const lines = rows.map((r) =>
    r
      .map((cell, c) => cell + ' '.repeat(Math.max(0, (widths[c] as number) - cells(cell))))
      .join('  ')
      .trimEnd(),
  );
  return { lines, widths };
}
