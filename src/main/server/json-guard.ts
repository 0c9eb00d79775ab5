/**
 * A cheap look at JSON text before JSON.parse reads it on the server's one thread. JSON.parse's time and memory
 * grow with the values a text holds, not its bytes: 20 MiB of `[{},{},…]` is 7 million objects, which held the
 * server for half a minute (250 MiB for good, past SIGTERM). Counting the values first takes a byte scan (strings
 * skipped with indexOf), a text with too many is refused before it is parsed.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const COMMA = 0x2c;

/** The bytes of an API body's size limit each JSON value it allows takes (maxJsonValuesFor). */
export const BYTES_PER_VALUE = 64;
/**
 * The same for a message of the browser UI, which saves chats: one whose replies kept their token probabilities
 * (about 22 values a token) holds one value per 9–12 bytes, so any save within the size limit is read.
 */
export const UI_BYTES_PER_VALUE = 8;

/**
 * The values a JSON text of at most `maxBytes` bytes may hold: one per `bytesPerValue` bytes, and at least a million.
 * A request's texts and a chat's attachments are strings (a few values each): an API body holds far fewer;
 * `[{},{},…]` is one per 1.5 bytes. Raising the byte limit raises this one with it.
 */
export function maxJsonValuesFor(maxBytes: number, bytesPerValue = BYTES_PER_VALUE): number {
  return Math.max(1_000_000, Math.floor(maxBytes / bytesPerValue));
}

/**
 * The values JSON `text` holds, counted no further than `max + 1`: its objects and arrays (`{`, `[`) and the
 * commas between their items outside strings, plus the text itself. Not a validation (JSON.parse does that);
 * for valid JSON it is at least the number of objects and arrays and items in them, less the first item of each.
 */
export function countJsonValues(text: Uint8Array, max: number): number {
  let count = 1;
  const n = text.length;
  const buf = Buffer.isBuffer(text) ? text : Buffer.from(text.buffer, text.byteOffset, text.byteLength);
  let i = 0;
  while (i < n) {
    const b = buf[i];
    if (b === QUOTE) {
      // To the string's closing quote: the next quote not escaped (after an even run of backslashes).
      let end = buf.indexOf(QUOTE, i + 1);
      while (end !== -1) {
        let slashes = 0;
        for (let k = end - 1; k > i && buf[k] === BACKSLASH; k--) slashes++;
        if (slashes % 2 === 0) break;
        end = buf.indexOf(QUOTE, end + 1);
      }
      if (end === -1) return count; // unterminated: JSON.parse refuses it
      i = end + 1;
      continue;
    }
    if (b === OPEN_BRACE || b === OPEN_BRACKET || b === COMMA) {
      count++;
      if (count > max) return count;
    }
    i++;
  }
  return count;
}

/** Thousands grouped with commas (4,194,304). */
export function grouped(n: number): string {
  return n.toLocaleString('en-US');
}
