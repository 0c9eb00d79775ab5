/**
 * A chat's stop strings as the settings panel's field shows them: one per line, where `\n` stands for a line break,
 * `\r` for a carriage return, `\t` for a tab and `\\` for a backslash, so a stop may hold any of them (the common
 * "\n\nUser:"). A backslash before any other character, or at a line's end, is itself.
 */
import { STOP_MAX_CHARS, STOP_MAX_COUNT } from '../../shared/api';

const WRITTEN: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
const MEANT: Record<string, string> = { '\\': '\\', n: '\n', r: '\r', t: '\t' };

/** One stop string as a line of the field. */
export function stopAsLine(stop: string): string {
  return stop.replace(/[\\\n\r\t]/g, (c) => WRITTEN[c] ?? c);
}

/** A line of the field as the stop string it means. */
export function stopFromLine(line: string): string {
  return line.replace(/\\(.?)/gs, (all, c: string) => MEANT[c] ?? all);
}

/** The field's text for a chat's stop strings. */
export function stopsAsText(stops: readonly string[] | undefined): string {
  return (stops ?? []).map(stopAsLine).join('\n');
}

/** The stop strings the field's text means (undefined: none), or why they cannot be taken. */
export function readStops(text: string): { stops: string[] | undefined } | { error: string } {
  const lines = text.split('\n');
  const stops: string[] = [];
  for (const [i, line] of lines.entries()) {
    if (line.length === 0) continue;
    const stop = stopFromLine(line);
    if (stop.length > STOP_MAX_CHARS) {
      return {
        error: `the stop string on line ${i + 1} has ${stop.length} characters: at most ${STOP_MAX_CHARS} (\\n counts as one)`,
      };
    }
    stops.push(stop);
  }
  if (stops.length > STOP_MAX_COUNT)
    return { error: `${stops.length} stop strings: a chat takes at most ${STOP_MAX_COUNT}, one per line` };
  return { stops: stops.length > 0 ? stops : undefined };
}
