import { Readable } from 'node:stream';
import { text as readAll } from 'node:stream/consumers';
import { describe, expect, it } from 'vitest';
import { decodeText, TextInput, textStream } from '../../../src/cli/text-input';

const BOM8 = [0xef, 0xbb, 0xbf];
const utf16le = (s: string) => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(s, 'utf16le')]);
const utf16be = (s: string) => Buffer.concat([Buffer.from([0xfe, 0xff]), Buffer.from(s, 'utf16le').swap16()]);
const refusal = (bytes: number[] | Buffer, what = 'stdin') => {
  try {
    return `decoded ${JSON.stringify(decodeText(Buffer.from(bytes as Buffer), what))}`;
  } catch (err) {
    return (err as Error).message;
  }
};

describe('decodeText', () => {
  const sample = 'émoji 👩🏽‍💻 می‌خواهم\n';

  it('reads UTF-8, its byte order mark dropped, and UTF-16 LE or BE after theirs', () => {
    expect(decodeText(Buffer.from(sample), 'stdin')).toBe(sample);
    expect(decodeText(Buffer.concat([Buffer.from(BOM8), Buffer.from(sample)]), 'stdin')).toBe(sample);
    expect(decodeText(utf16le(sample), 'stdin')).toBe(sample);
    expect(decodeText(utf16be(sample), 'stdin')).toBe(sample);
    // Only the first mark is the encoding's: one after it is text (as in the middle).
    expect(decodeText(Buffer.from(`\ufeff\ufeffx`), 'stdin')).toBe('\ufeffx');
    expect(decodeText(Buffer.from(BOM8), 'stdin')).toBe('');
    expect(decodeText(Buffer.alloc(0), 'stdin')).toBe('');
  });

  it('refuses bytes that are not UTF-8 (no BOM), naming where and what to do, rather than reading U+FFFD', () => {
    // "café" in Latin-1.
    expect(refusal([0x63, 0x61, 0x66, 0xe9, 0x21])).toBe(
      'stdin is not UTF-8 text (byte 0xe9 at offset 3): save it as UTF-8',
    );
    // The offset counts the BOM too: it is the file's byte.
    expect(refusal([...BOM8, 0x61, 0xff], '--tools tools.json')).toBe(
      '--tools tools.json is not UTF-8 text (byte 0xff at offset 4): save it as UTF-8',
    );
    // An overlong form, a surrogate, past U+10FFFF: none is UTF-8.
    expect(refusal([0x41, 0xc0, 0x80])).toMatch(/byte 0xc0 at offset 1/);
    expect(refusal([0xed, 0xa0, 0x80])).toMatch(/byte 0xed at offset 0/);
    expect(refusal([0xf4, 0x90, 0x80, 0x80])).toMatch(/byte 0xf4 at offset 0/);
    // Cut off by the end (a file truncated mid-character).
    expect(refusal([0x61, 0xe2, 0x82])).toBe(
      'stdin is not UTF-8 text (byte 0xe2 at offset 1, where it ends inside a character): save it as UTF-8',
    );
  });

  it('refuses UTF-16 its BOM names that is not UTF-16, and UTF-32', () => {
    expect(refusal([0xff, 0xfe, 0x00, 0xd8, 0x41, 0x00])).toBe(
      'stdin begins with the byte order mark of UTF-16 LE but is not UTF-16 text (half a surrogate pair at byte offset 2): save it as UTF-8',
    );
    expect(refusal([0xfe, 0xff, 0x00, 0x41, 0x00])).toMatch(/UTF-16 BE .*ends inside a character, at byte offset 4/);
    expect(refusal([0xff, 0xfe, 0x00, 0x00, 0x41, 0x00, 0x00, 0x00])).toBe(
      'stdin is UTF-32 text (its byte order mark says so): save it as UTF-8',
    );
  });

  it('decodes chunk by chunk, a character split anywhere, as it decodes the whole; offsets count from the start', () => {
    for (const bytes of [Buffer.from(`\ufeff${sample}`), utf16le(sample), utf16be(sample)]) {
      for (let split = 0; split <= bytes.length; split++) {
        const input = new TextInput('stdin');
        const got = input.push(bytes.subarray(0, split)) + input.push(bytes.subarray(split)) + input.end();
        expect(got, `split at ${split}`).toBe(sample);
      }
    }
    const bad = Buffer.concat([Buffer.from('ab\nc'), Buffer.from([0xff]), Buffer.from('d')]);
    for (let split = 0; split <= bad.length; split++) {
      const input = new TextInput('stdin');
      // The text before the byte, then what is wrong with it.
      const got = input.push(bad.subarray(0, split)) + input.push(bad.subarray(split)) + input.end();
      expect(got, `split at ${split}`).toBe('ab\nc');
      expect(input.error?.message, `split at ${split}`).toBe(
        'stdin is not UTF-8 text (byte 0xff at offset 4): save it as UTF-8',
      );
    }
  });

  it('gives a short first chunk at once unless it may begin a byte order mark (a piped chat’s "hi" is a turn)', () => {
    expect(new TextInput('stdin').push(Buffer.from('hi\n'))).toBe('hi\n');
    expect(new TextInput('stdin').push(Buffer.from('é'))).toBe('é');
    const utf16 = new TextInput('stdin');
    expect(utf16.push(Buffer.from([0xff, 0xfe]))).toBe('');
    expect(utf16.push(Buffer.from([0x68, 0x00]))).toBe('h');
    const bom8 = new TextInput('stdin');
    expect(bom8.push(Buffer.from([0xef, 0xbb]))).toBe('');
    expect(bom8.push(Buffer.from([0xbf, 0x79]))).toBe('y');
  });

  it('as a stream: the text of what came before, then the error', async () => {
    const stream = Readable.from([utf16le('one\ntwo\n').subarray(0, 7), utf16le('one\ntwo\n').subarray(7)]);
    expect(await readAll(stream.pipe(textStream('stdin')))).toBe('one\ntwo\n');
    const decoded = Readable.from([Buffer.from('one\n'), Buffer.from([0x74, 0xff])]).pipe(textStream('stdin'));
    const seen: string[] = [];
    const error = await new Promise<Error>((resolve) => {
      decoded.on('data', (c: Buffer) => seen.push(c.toString()));
      decoded.on('error', resolve);
    });
    expect(seen.join('')).toBe('one\nt');
    expect(error.message).toBe('stdin is not UTF-8 text (byte 0xff at offset 5): save it as UTF-8');
  });
});
