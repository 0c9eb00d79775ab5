/** What JSON.parse said, fit for a message a person reads (pure). */

/**
 * What JSON.parse said, without the file's text it quotes (`…, "<the file's start>" is not valid JSON`) and without
 * control characters.
 */
export function parseProblem(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const clean = message
    .replace(/,?\s*"[\s\S]*" is not valid JSON$/, '')
    // biome-ignore lint/suspicious/noControlCharactersInRegex: dropping control characters is the point
    .replace(/[\u0000-\u001f\u007f-\u009f\ufffd]/g, '')
    .trim();
  return clean ? clean.slice(0, 160) : 'not valid JSON';
}
