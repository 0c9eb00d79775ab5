/**
 * Text a person hands the CLI as bytes (a prompt on stdin, a chat's turns piped in, a file a flag names): UTF-8, a
 * leading byte order mark dropped (Notepad and PowerShell write one), or UTF-16 LE or BE where its byte order mark
 * says so (PowerShell 5's `>` writes that). Bytes that are none of these are refused saying where, rather than read
 * as U+FFFD or as text laced with NULs, which the model would be given as though it were what the person wrote.
 */
import { isUtf8 } from 'node:buffer';
import { Transform, type TransformCallback } from 'node:stream';
import { KvdeskError } from '../shared/errors';
import { type Utf8Fault as Fault, firstBadUtf8 } from '../shared/utf8';

type Encoding = 'utf-8' | 'utf-16le' | 'utf-16be';

/** The first unit of UTF-16 `bytes` that is half a surrogate pair, or a unit (or pair) the end cuts off. */
function firstBadUtf16(bytes: Uint8Array, encoding: 'utf-16le' | 'utf-16be'): Fault | null {
  const unit = (i: number) =>
    encoding === 'utf-16le'
      ? (bytes[i] as number) | ((bytes[i + 1] as number) << 8)
      : ((bytes[i] as number) << 8) | (bytes[i + 1] as number);
  let i = 0;
  while (i < bytes.length) {
    if (i + 1 >= bytes.length) return { at: i, cut: true };
    const u = unit(i);
    if (u >= 0xdc00 && u <= 0xdfff) return { at: i, cut: false };
    if (u >= 0xd800 && u <= 0xdbff) {
      if (i + 3 >= bytes.length) return { at: i, cut: true };
      const next = unit(i + 2);
      if (next < 0xdc00 || next > 0xdfff) return { at: i, cut: false };
      i += 4;
      continue;
    }
    i += 2;
  }
  return null;
}

/** The byte order marks start() tells apart. */
const BOMS = [
  [0xef, 0xbb, 0xbf],
  [0xff, 0xfe, 0x00, 0x00],
  [0x00, 0x00, 0xfe, 0xff],
  [0xfe, 0xff],
];

/** Whether more bytes after `bytes` could make a BOM of them, or tell which one they begin. */
function mayBeBom(bytes: Uint8Array): boolean {
  return BOMS.some((bom) => bytes.length < bom.length && bytes.every((x, i) => x === bom[i]));
}

/**
 * Bytes decoded as text a chunk at a time (stdin arrives so): the encoding the first bytes' BOM names (none:
 * UTF-8), the BOM dropped. Bytes that are not text of it are BAD_REQUEST naming `what` (`stdin`, `--tools
 * tools.json`), the offset in the whole input where it goes wrong, and what to do.
 */
export class TextInput {
  private encoding: Encoding | null = null;
  /** Bytes not decoded yet: the first (until they show a BOM or none), or a character the chunk's end cut. */
  private carry: Buffer = Buffer.alloc(0);
  /** The offset of carry's first byte in the input. */
  private offset = 0;

  /** Set once bytes that are not text came: what push and end returned is the text before them. */
  error: KvdeskError | null = null;

  constructor(private readonly what: string) {}

  /**
   * The text of the bytes so far that make whole characters; once some are not text, the text before them, and
   * `error` says what is wrong (UTF-32 is refused before any text).
   */
  push(chunk: Uint8Array): string {
    if (this.error) return '';
    const bytes = Buffer.concat([this.carry, chunk]);
    if (this.encoding !== null) return this.decode(bytes, false);
    // Held only while they may still begin a BOM (four bytes tell UTF-32's from UTF-16 LE's): a piped chat's "hi" is
    // a turn as it comes.
    if (mayBeBom(bytes)) {
      this.carry = bytes;
      return '';
    }
    return this.decode(this.start(bytes), false);
  }

  /** The text of the last bytes: a character they leave unfinished is refused. */
  end(): string {
    if (this.error) return '';
    return this.decode(this.encoding === null ? this.start(this.carry) : this.carry, true);
  }

  /** `bytes` after the BOM they begin with, if any; the encoding it names is the input's. */
  private start(bytes: Buffer): Buffer {
    const [a, b, c, d] = bytes;
    if ((a === 0x00 && b === 0x00 && c === 0xfe && d === 0xff) || (a === 0xff && b === 0xfe && c === 0 && d === 0)) {
      this.error = new KvdeskError(
        'BAD_REQUEST',
        `${this.what} is UTF-32 text (its byte order mark says so): save it as UTF-8`,
      );
      this.encoding = 'utf-8';
      return Buffer.alloc(0);
    }
    const bom =
      a === 0xef && b === 0xbb && c === 0xbf ? 3 : (a === 0xff && b === 0xfe) || (a === 0xfe && b === 0xff) ? 2 : 0;
    this.encoding = bom === 2 ? (a === 0xff ? 'utf-16le' : 'utf-16be') : 'utf-8';
    this.offset += bom;
    return bytes.subarray(bom);
  }

  private decode(bytes: Buffer, end: boolean): string {
    const encoding = this.encoding as Encoding;
    // Node's own check first (UTF-8 that is all whole characters, most chunks): the byte walk only finds where not.
    const fault = encoding === 'utf-8' ? (isUtf8(bytes) ? null : firstBadUtf8(bytes)) : firstBadUtf16(bytes, encoding);
    // A character the chunk's end cuts off: the next chunk may end it.
    const whole = fault?.cut && !end ? bytes.subarray(0, fault.at) : bytes;
    if (fault && whole === bytes) {
      this.error = this.refusal(bytes, fault);
      // The characters before it are whole.
      return this.text(bytes.subarray(0, fault.at));
    }
    this.carry = Buffer.from(bytes.subarray(whole.length));
    this.offset += whole.length;
    return this.text(whole);
  }

  private text(whole: Buffer): string {
    const encoding = this.encoding as Encoding;
    if (encoding === 'utf-8') return whole.toString('utf8');
    if (encoding === 'utf-16le') return whole.toString('utf16le');
    return Buffer.from(whole).swap16().toString('utf16le');
  }

  private refusal(bytes: Buffer, fault: Fault): KvdeskError {
    const offset = this.offset + fault.at;
    const utf8 = this.encoding === 'utf-8';
    const byte = `byte 0x${(bytes[fault.at] as number).toString(16).padStart(2, '0')} at offset ${offset}`;
    // A character cut off (a truncated file), or Latin-1's é (0xe9) as its last byte.
    const at = utf8
      ? `${byte}${fault.cut ? ', where it ends inside a character' : ''}`
      : fault.cut
        ? `it ends inside a character, at byte offset ${offset}`
        : `half a surrogate pair at byte offset ${offset}`;
    if (utf8) return new KvdeskError('BAD_REQUEST', `${this.what} is not UTF-8 text (${at}): save it as UTF-8`);
    const order = this.encoding === 'utf-16le' ? 'LE' : 'BE';
    return new KvdeskError(
      'BAD_REQUEST',
      `${this.what} begins with the byte order mark of UTF-16 ${order} but is not UTF-16 text (${at}): save it as UTF-8`,
    );
  }
}

/** `bytes` as text, as TextInput decodes it (UTF-8 or UTF-16 by its BOM, the BOM dropped), or refused naming `what`. */
export function decodeText(bytes: Uint8Array, what: string): string {
  const input = new TextInput(what);
  const text = input.push(bytes) + input.end();
  if (input.error) throw input.error;
  return text;
}

/** A stream of bytes (a chat's turns piped in) as a stream of text, decoded as TextInput decodes it. */
export function textStream(what: string): Transform {
  const input = new TextInput(what);
  return new Transform({
    decodeStrings: true,
    // The text before bytes that are not text goes on (a chat's turns before them are answered), then the error.
    transform(chunk: Buffer, _encoding, done: TransformCallback) {
      const text = input.push(chunk);
      if (!input.error) return done(null, text);
      this.push(text);
      done(input.error);
    },
    flush(done: TransformCallback) {
      const text = input.end();
      if (!input.error) return done(null, text);
      this.push(text);
      done(input.error);
    },
  });
}
