import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createStreamDecoder,
  createTextTokenizer,
  loadTokenizer,
  MAX_STREAM_WINDOW,
  type TextTokenizer,
} from '../../../src/main/tokenizer';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import {
  byteFallbackTokenizerJson,
  byteLevelText,
  byteLevelTokenizerJson,
  wordLevelTokenizerJson,
} from './tokenizer-builders';

const SAMPLE = 'héllo wörld 😀 中文';

function stream(tok: Pick<TextTokenizer, 'decode'>, ids: number[], skipSpecialTokens = false): string[] {
  const decoder = createStreamDecoder(tok, { skipSpecialTokens });
  const chunks = ids.map((id) => decoder.push(id));
  chunks.push(decoder.flush());
  return chunks;
}

/** A chunk must be whole text: no replacement character, no half of a surrogate pair at either end. */
function expectWholeChunks(chunks: string[]): void {
  for (const chunk of chunks) {
    expect(chunk).not.toContain('\uFFFD');
    if (chunk.length === 0) continue;
    const last = chunk.charCodeAt(chunk.length - 1);
    const first = chunk.charCodeAt(0);
    expect(last >= 0xd800 && last <= 0xdbff, `chunk ${JSON.stringify(chunk)} ends with a high surrogate`).toBe(false);
    expect(first >= 0xdc00 && first <= 0xdfff, `chunk ${JSON.stringify(chunk)} starts with a low surrogate`).toBe(
      false,
    );
  }
}

/** Wraps a tokenizer to record how many ids each decode call is given. */
function countingDecode(tok: TextTokenizer): { tok: Pick<TextTokenizer, 'decode'>; sizes: number[] } {
  const sizes: number[] = [];
  return {
    sizes,
    tok: {
      decode(ids, opts) {
        sizes.push(ids.length);
        return tok.decode(ids, opts);
      },
    },
  };
}

const byteLevel = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
const byteFallback = createTextTokenizer({ tokenizerJson: byteFallbackTokenizerJson(), vocabSize: 270 });
const wordLevel = createTextTokenizer({ tokenizerJson: wordLevelTokenizerJson(), vocabSize: 9 });

describe('streaming byte-level BPE (one emoji = four byte tokens)', () => {
  it('emits each character as soon as its last byte arrives, and nothing before', () => {
    const ids = byteLevel.encode(SAMPLE);
    expect(ids).toHaveLength(25);
    const chunks = stream(byteLevel, ids);
    expect(chunks).toEqual([
      'h',
      '',
      'é',
      'l',
      'l',
      'o',
      ' ',
      'w',
      '',
      'ö',
      'r',
      'l',
      'd',
      ' ',
      '',
      '',
      '',
      '😀',
      ' ',
      '',
      '',
      '中',
      '',
      '',
      '文',
      '',
    ]);
    expectWholeChunks(chunks);
    expect(chunks.join('')).toBe(byteLevel.decode(ids));
    expect(chunks.join('')).toBe(SAMPLE);
  });

  it('sends the finished character early when a token straddles two characters', () => {
    // A merged token holding the last byte of 中 and the first byte of 文.
    const straddle = [byteLevelText('中').slice(2), byteLevelText('文').slice(0, 1)] as [string, string];
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson([straddle]), vocabSize: 258 });
    const ids = tok.encode(' 中文');
    expect(ids).toEqual([32, 228, 184, 257, 150, 135]);
    const chunks = stream(tok, ids);
    expect(chunks).toEqual([' ', '', '', '中', '', '文', '']);
    expectWholeChunks(chunks);
  });

  it('leaves special tokens out when asked, in the same places decode does', () => {
    const ids = [...byteLevel.encode('a😀'), 256, ...byteLevel.encode('b')];
    expect(stream(byteLevel, ids).join('')).toBe('a😀<|endoftext|>b');
    expect(stream(byteLevel, ids, true).join('')).toBe('a😀b');
  });

  it('ends with the replacement character decode gives when the text stops mid-character', () => {
    const ids = byteLevel.encode('ok😀').slice(0, -1);
    const chunks = stream(byteLevel, ids);
    expect(chunks.slice(0, -1).join('')).toBe('ok');
    expect(chunks.at(-1)).toBe('\uFFFD');
    expect(chunks.join('')).toBe(byteLevel.decode(ids));
  });

  it('decodes a bounded window per token on ordinary text', () => {
    const { tok, sizes } = countingDecode(byteLevel);
    const ids = byteLevel.encode(SAMPLE.repeat(40));
    expect(stream(tok, ids).join('')).toBe(SAMPLE.repeat(40));
    // Context chunk (≤ 4 byte tokens of one character) plus the new tokens.
    expect(Math.max(...sizes)).toBeLessThanOrEqual(8);
  });

  it('caps the window when a model emits bytes that never form text', () => {
    const { tok, sizes } = countingDecode(byteLevel);
    const ids = Array.from({ length: 500 }, () => 0xff);
    const chunks = stream(tok, ids);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(MAX_STREAM_WINDOW + 1);
    expect(chunks.join('')).toBe(byteLevel.decode(ids));
    expect(chunks.join('')).toBe('\uFFFD'.repeat(500));
  });

  it('can be reused after flush', () => {
    const decoder = createStreamDecoder(byteLevel);
    for (const id of byteLevel.encode('ab')) decoder.push(id);
    decoder.push(0xe4);
    expect(decoder.flush()).toBe('\uFFFD');
    expect(byteLevel.encode('中').map((id) => decoder.push(id))).toEqual(['', '', '中']);
  });

  it('property: any text streams to exactly itself, in whole characters', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (text) => {
        fc.pre(!text.includes('\uFFFD'));
        const ids = byteLevel.encode(text);
        const chunks = stream(byteLevel, ids);
        expectWholeChunks(chunks);
        expect(chunks.join('')).toBe(text);
      }),
      { numRuns: 300 },
    );
  });

  it('property: any id sequence, valid UTF-8 or not, streams to exactly decode(ids)', () => {
    // Lead and continuation bytes are weighted up so that broken and completed sequences are common.
    const byteId = fc.oneof(
      fc.integer({ min: 0x20, max: 0x7e }),
      fc.integer({ min: 0x80, max: 0xf4 }),
      fc.constant(256),
    );
    fc.assert(
      fc.property(fc.array(byteId, { maxLength: 60 }), fc.boolean(), (ids, skip) => {
        const chunks = stream(byteLevel, ids, skip);
        // Text once sent cannot be taken back, so equality also shows every U+FFFD sent early was final.
        expect(chunks.join('')).toBe(byteLevel.decode(ids, { skipSpecialTokens: skip }));
      }),
      { numRuns: 300 },
    );
  });
});

describe('streaming SentencePiece-style <0xNN> byte fallback', () => {
  it('assembles characters from byte tokens and keeps the spaces of ▁ pieces', () => {
    const ids = byteFallback.encode(SAMPLE, { addSpecialTokens: false });
    // ▁h is one piece, é is <0xC3><0xA9>, 😀 is four byte tokens.
    expect(ids.slice(0, 3)).toEqual([267, 198, 172]);
    const chunks = stream(byteFallback, ids);
    expectWholeChunks(chunks);
    expect(chunks.join('')).toBe(byteFallback.decode(ids));
    expect(chunks.join('')).toBe(SAMPLE);
    expect(chunks.slice(0, 3)).toEqual(['h', '', 'é']);
  });

  it('streams the same text with BOS and skipSpecialTokens as decode does', () => {
    const ids = byteFallback.encode(SAMPLE);
    expect(ids[0]).toBe(1);
    expect(stream(byteFallback, ids).join('')).toBe(byteFallback.decode(ids));
    expect(stream(byteFallback, ids, true).join('')).toBe(SAMPLE);
  });

  it('property: any text streams to decode(ids)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 30 }), fc.boolean(), (text, skip) => {
        fc.pre(!text.includes('\uFFFD'));
        const ids = byteFallback.encode(text);
        const chunks = stream(byteFallback, ids, skip);
        expectWholeChunks(chunks);
        expect(chunks.join('')).toBe(byteFallback.decode(ids, { skipSpecialTokens: skip }));
      }),
      { numRuns: 200 },
    );
  });
});

describe('streaming past a long run of skipped special tokens', () => {
  // The Llama-2 Replace/ByteFallback/Fuse/Strip decoder, and the same vocabulary with a Metaspace decoder:
  // both drop the space of a ▁word that opens the text, so the word before is needed as context.
  const metaspaceJson = byteFallbackTokenizerJson();
  metaspaceJson.decoder = {
    type: 'Sequence',
    decoders: [
      { type: 'ByteFallback' },
      { type: 'Fuse' },
      { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    ],
  };
  const metaspace = createTextTokenizer({ tokenizerJson: metaspaceJson, vocabSize: 270 });

  for (const [name, tok] of [
    ['Replace/Strip', byteFallback],
    ['Metaspace', metaspace],
  ] as const) {
    it(`${name}: hello + n × </s> + ▁world streams as decode does, around the window cap`, () => {
      const hello = tok.encode('hello', { addSpecialTokens: false });
      const world = tok.encode('world wide', { addSpecialTokens: false });
      for (const n of [0, 1, 10, MAX_STREAM_WINDOW - 1, MAX_STREAM_WINDOW, MAX_STREAM_WINDOW + 1, 70, 200]) {
        const ids = [...hello, ...Array<number>(n).fill(2), ...world];
        expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('hello world wide');
        expect(stream(tok, ids, true).join(''), `${n} × </s>`).toBe('hello world wide');
        expect(stream(tok, [1, ...ids], true).join(''), `<s> + ${n} × </s>`).toBe('hello world wide');
        expect(stream(tok, ids).join(''), `${n} × </s> kept`).toBe(tok.decode(ids));
      }
    });
  }

  it('a word split over byte tokens after the run keeps its space too', () => {
    const ids = [
      ...byteFallback.encode('hello', { addSpecialTokens: false }),
      ...Array<number>(MAX_STREAM_WINDOW + 5).fill(2),
      ...byteFallback.encode('wörld 😀', { addSpecialTokens: false }),
    ];
    const chunks = stream(byteFallback, ids, true);
    expectWholeChunks(chunks);
    expect(chunks.join('')).toBe(byteFallback.decode(ids, { skipSpecialTokens: true }));
    expect(chunks.join('')).toBe('hello wörld 😀');
  });

  it('still decodes a bounded window per token through the run', () => {
    const counting = countingDecode(byteFallback);
    const ids = [...byteFallback.encode('hello', { addSpecialTokens: false }), ...Array<number>(1000).fill(2)];
    stream(counting.tok, [...ids, ...byteFallback.encode('world', { addSpecialTokens: false })], true);
    expect(Math.max(...counting.sizes)).toBeLessThanOrEqual(MAX_STREAM_WINDOW + 1);
  });
});

describe('streaming WordLevel with whitespace-joining decoders', () => {
  it('puts the spaces of a WordPiece decoder between words as decode does', () => {
    const ids = wordLevel.encode('hello é world 中 . hello', { addSpecialTokens: false });
    const chunks = stream(wordLevel, [...ids, 4]);
    expect(chunks).toEqual(['hello', ' é', ' world', ' 中', '.', ' hello', 's', '']);
    expect(chunks.join('')).toBe(wordLevel.decode([...ids, 4]));
  });

  it('keeps the word before a skipped special token as context: the space after it is not lost', () => {
    const json = wordLevelTokenizerJson();
    json.added_tokens = [
      { id: 1, content: '[CLS]', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    ];
    const tok = createTextTokenizer({ tokenizerJson: json, vocabSize: 9 });
    // hello [CLS] world [CLS] [CLS] é , 中
    const ids = [2, 1, 3, 1, 1, 7, 6, 8];
    const chunks = stream(tok, ids, true);
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('hello world é, 中');
    expect(chunks.join('')).toBe('hello world é, 中');
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 8 }), { maxLength: 24 }), (seq) => {
        expect(stream(tok, seq, true).join('')).toBe(tok.decode(seq, { skipSpecialTokens: true }));
      }),
      { numRuns: 300 },
    );
  });

  it.skipIf(!haveFixtures)(
    `tiny-llm (no decoder: tokens joined by spaces) ${haveFixtures ? '' : fixturesSkipReason}`,
    async () => {
      const tok = await loadTokenizer(
        { tokenizerJson: fixture('onnx-genai/tiny-llm/tokenizer.json') },
        { vocabSize: 32 },
      );
      const ids = tok.encode('hello world the quick fox');
      const chunks = stream(tok, ids);
      expect(chunks).toEqual(['<bos>', ' hello', ' world', ' the', ' quick', ' fox', ' <eos>', '']);
      expect(chunks.join('')).toBe(tok.decode(ids));
      expect(stream(tok, ids, true).join('')).toBe('hello world the quick fox');
      // The fixture's greedy reply to [5, 6, 7] holds two <unk> (skipped): the words after them keep their space.
      const reply = [22, 22, 20, 1, 1, 18, 22, 25];
      expect(stream(tok, reply, true).join('')).toBe(tok.decode(reply, { skipSpecialTokens: true }));
      expect(stream(tok, reply, true).join('')).toBe('tok22 tok22 tok20 tok18 tok22 tok25');
    },
  );
});
