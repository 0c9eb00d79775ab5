/**
 * A chat's stop strings as the settings panel's field writes them (lib/stop-strings.ts): `\n`, `\r`, `\t` and `\\`
 * in a line; any stop a chat holds is shown as a line that reads back as that stop, and a line typed before escapes
 * were read (no backslash before n, r, t or another backslash) means what it did.
 */
import { describe, expect, it } from 'vitest';
import { readStops, stopAsLine, stopFromLine, stopsAsText } from '../../../src/renderer/lib/stop-strings';
import { STOP_MAX_CHARS, STOP_MAX_COUNT, Thread } from '../../../src/shared/api';

describe('stop strings in the settings field', () => {
  it('writes a line break, a tab, a carriage return and a backslash so a line holds them', () => {
    expect(stopAsLine('\n\nUser:')).toBe('\\n\\nUser:');
    expect(stopAsLine('a\tb\r\nc')).toBe('a\\tb\\r\\nc');
    expect(stopAsLine('C:\\new')).toBe('C:\\\\new');
    expect(stopsAsText(['###', '\n\nUser:'])).toBe('###\n\\n\\nUser:');
    expect(stopsAsText(undefined)).toBe('');
  });

  it('reads them back: odd runs of backslashes leave an escape, even ones are backslashes', () => {
    expect(stopFromLine('\\n\\nUser:')).toBe('\n\nUser:');
    expect(stopFromLine('\\\\n')).toBe('\\n');
    expect(stopFromLine('\\\\\\n')).toBe('\\\n');
    expect(stopFromLine('\\\\\\\\n')).toBe('\\\\n');
    // A backslash before another character, or at the end, is itself.
    expect(stopFromLine('a\\b')).toBe('a\\b');
    expect(stopFromLine('end\\')).toBe('end\\');
    expect(stopFromLine('\\')).toBe('\\');
    expect(stopFromLine('plain ### text')).toBe('plain ### text');
  });

  it('round trips every stop a chat may hold, the odd backslashes included', () => {
    const pieces = ['\\', '\n', '\r', '\t', 'n', 'r', 't', 'x', ' ', '\\\\', 'ש', '😀'];
    let seed = 7;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed;
    };
    for (let i = 0; i < 2000; i++) {
      let stop = '';
      const n = 1 + (next() % 8);
      for (let k = 0; k < n; k++) stop += pieces[next() % pieces.length];
      const line = stopAsLine(stop);
      expect(line).not.toMatch(/[\n\r]/);
      expect(stopFromLine(line)).toBe(stop);
      expect(readStops(stopsAsText([stop, 'x']))).toEqual({ stops: [stop, 'x'] });
    }
  });

  it('takes what the host saves: the length counts the stop, not its escapes; too many or too long are said', () => {
    const long = `${'\\n'.repeat(STOP_MAX_CHARS)}`;
    const read = readStops(`a\n\n${long}`);
    expect(read).toEqual({ stops: ['a', '\n'.repeat(STOP_MAX_CHARS)] });
    if (!('stops' in read)) throw new Error('not read');
    const thread = { id: 't', title: 'x', createdAt: 0, updatedAt: 0, messages: [], stop: read.stops };
    expect(Thread.safeParse(thread).success).toBe(true);
    expect(Thread.safeParse({ ...thread, stop: ['\n'.repeat(STOP_MAX_CHARS + 1)] }).success).toBe(false);
    expect(readStops(`a\n\n${long}x`)).toEqual({
      error: `the stop string on line 3 has ${STOP_MAX_CHARS + 1} characters: at most ${STOP_MAX_CHARS} (\\n counts as one)`,
    });
    const many = Array.from({ length: STOP_MAX_COUNT + 1 }, (_, i) => `s${i}`).join('\n');
    expect(readStops(many)).toEqual({ error: `17 stop strings: a chat takes at most ${STOP_MAX_COUNT}, one per line` });
    expect(readStops('\n\n')).toEqual({ stops: undefined });
  });
});
