/**
 * Where bytes stop being UTF-8: the CLI's text input (cli/text-input.ts) and the server's request bodies
 * (server/http-util.ts parseJson) both refuse such bytes naming the offset, rather than read them as U+FFFD.
 */

/** What is wrong at a byte offset: a byte (or UTF-16 unit) that is no character's, or a character the end cuts off. */
export interface Utf8Fault {
  at: number;
  cut: boolean;
}

/**
 * The first character of `bytes` that is not well-formed UTF-8 (RFC 3629: no overlong form, no surrogate, nothing
 * past U+10FFFF), at the offset of its first byte; `cut` when it is well begun and only the end cuts it off. Null
 * when every character is whole.
 */
export function firstBadUtf8(bytes: Uint8Array): Utf8Fault | null {
  const n = bytes.length;
  let i = 0;
  while (i < n) {
    const b = bytes[i] as number;
    if (b < 0x80) {
      i++;
      continue;
    }
    // The continuation bytes this lead byte takes, and the range its first one must fall in.
    let more: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) more = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      more = 2;
      if (b === 0xe0) lo = 0xa0;
      else if (b === 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      more = 3;
      if (b === 0xf0) lo = 0x90;
      else if (b === 0xf4) hi = 0x8f;
    } else return { at: i, cut: false };
    for (let k = 1; k <= more; k++) {
      if (i + k >= n) return { at: i, cut: true };
      const c = bytes[i + k] as number;
      if (k === 1 ? c < lo || c > hi : c < 0x80 || c > 0xbf) return { at: i, cut: false };
    }
    i += more + 1;
  }
  return null;
}
