/**
 * `kvdesk list`'s text for a terminal: what a terminal would not show as itself is escaped, what is part of how a
 * name is written (joiners, a flag's tags) is kept, so a folder's path can be pasted back into a shell.
 */
import { describe, expect, it } from 'vitest';
import { printable } from '../../../src/cli/main';

describe('printable', () => {
  it('keeps the zero-width joiner and non-joiner, variation selectors and the tags of a flag', () => {
    for (const name of [
      '👩🏽\u200d💻',
      'می\u200cخواهم',
      'क्\u200dष',
      '❤\ufe0f',
      '🏴\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f}',
    ]) {
      expect(printable(name)).toBe(name);
    }
  });

  // A joiner anywhere else would make two ids look alike: `model\u200d` printed as `model`.
  it('escapes a joiner that joins nothing: at an end, beside ASCII', () => {
    expect(printable('model\u200d')).toBe('model\\u200d');
    expect(printable('\u200dmodel')).toBe('\\u200dmodel');
    expect(printable('mo\u200cdel')).toBe('mo\\u200cdel');
    expect(printable('👩🏽\u200d')).toBe('👩🏽\\u200d');
    expect(printable('a\u200d💻')).toBe('a\\u200d💻');
  });

  it('escapes bidi overrides, embeddings, isolates and marks, and other invisible or control characters', () => {
    const bidi = [
      '\u202a',
      '\u202b',
      '\u202c',
      '\u202d',
      '\u202e',
      '\u2066',
      '\u2067',
      '\u2068',
      '\u2069',
      '\u200e',
      '\u200f',
      '\u061c',
    ];
    for (const c of bidi) expect(printable(`a${c}b`)).toBe(`a\\u${c.codePointAt(0)?.toString(16).padStart(4, '0')}b`);
    expect(printable('zero\u200bwidth\u2060joined\ufeff')).toBe('zero\\u200bwidth\\u2060joined\\ufeff');
    expect(printable('soft\u00adhyphen\u0007\n\u2028')).toBe('soft\\xadhyphen\\x07\\x0a\\u2028');
    // A tag outside a flag's emoji hides text: escaped, as U+FFFD is.
    expect(printable('ok\u{e0041}\ufffd')).toBe('ok\\u{e0041}\\ufffd');
  });
});
