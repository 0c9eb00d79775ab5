/** Markdown code fences (pure): a block no line of its text can close early. */

/** `text` in a fenced block (with an info string such as `json`), fenced longer than any run of backticks in it. */
export function fenced(text: string, info = ''): string {
  const longest = Math.max(0, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  const fence = '`'.repeat(Math.max(3, longest + 1));
  return `${fence}${info}\n${text}\n${fence}`;
}
