import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTextTokenizer, loadTokenizer, type TextTokenizer } from '../../../src/main/tokenizer';
import { KvdeskError } from '../../../src/shared/errors';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { byteFallbackTokenizerJson, byteLevelTokenizerJson, wordLevelTokenizerJson } from './tokenizer-builders';

function thrown(fn: () => unknown): KvdeskError {
  try {
    fn();
  } catch (err) {
    if (err instanceof KvdeskError) return err;
    throw err;
  }
  throw new Error('expected a KvdeskError, nothing was thrown');
}

async function rejected(promise: Promise<unknown>): Promise<KvdeskError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof KvdeskError) return err;
    throw err;
  }
  throw new Error('expected a KvdeskError, the promise resolved');
}

const tinyLlm = fixture('onnx-genai/tiny-llm/tokenizer.json');
const gpt2Dir = fixture('onnxruntime-genai/tiny-random-gpt2-fp32');

describe.skipIf(!haveFixtures)(
  `tiny-llm WordLevel tokenizer (${haveFixtures ? 'fixtures' : fixturesSkipReason})`,
  () => {
    let tok: TextTokenizer;
    beforeAll(async () => {
      tok = await loadTokenizer({ tokenizerJson: tinyLlm }, { vocabSize: 32 });
    });

    it('has the 32 tokens of its vocabulary', () => {
      expect(tok.vocabSize).toBe(32);
    });

    it('encodes "hello world" with its post-processor to [2,4,5,3], and without it to [4,5]', () => {
      expect(tok.encode('hello world')).toEqual([2, 4, 5, 3]);
      expect(tok.encode('hello world', { addSpecialTokens: false })).toEqual([4, 5]);
    });

    it('maps unknown words to <unk>=1 (the library returns undefined for them)', () => {
      expect(tok.encode('hello zebra world', { addSpecialTokens: false })).toEqual([4, 1, 5]);
    });

    it('resolves bos/eos from the post-processor template and pad/unk from the vocabulary', () => {
      expect(tok.specialTokens).toEqual({
        bos: { token: '<bos>', id: 2 },
        eos: { token: '<eos>', id: 3 },
        pad: { token: '<pad>', id: 0 },
        unk: { token: '<unk>', id: 1 },
      });
      expect(tok.addBosToken).toBe(true);
      expect([0, 1, 2, 3].map((id) => tok.isSpecial(id))).toEqual([true, true, true, true]);
      expect(tok.isSpecial(4)).toBe(false);
    });

    it('decodes, optionally without special tokens even though tokenizer.json marks none as special', () => {
      expect(tok.decode([2, 4, 5, 3])).toBe('<bos> hello world <eos>');
      expect(tok.decode([2, 4, 5, 3], { skipSpecialTokens: true })).toBe('hello world');
      expect(tok.decode([])).toBe('');
    });

    it('maps single tokens both ways', () => {
      expect(tok.idToToken(9)).toBe('fox');
      expect(tok.tokenToId('fox')).toBe(9);
      expect(tok.idToToken(32)).toBeUndefined();
      expect(tok.tokenToId('zebra')).toBeUndefined();
    });

    it('gives ids past its table no text, as tokenizers does', () => {
      expect(tok.decode([4, 40, 5])).toBe('hello world');
    });

    it('refuses text whose ids the model lacks when the model vocabulary is smaller', async () => {
      const small = await loadTokenizer({ tokenizerJson: tinyLlm }, { vocabSize: 6 });
      expect(small.encode('hello world')).toEqual([2, 4, 5, 3]);
      // The first id past the model's table: "the" is 6.
      expect(thrown(() => small.encode('the')).detail).toMatchObject({ id: 6, position: 1 });
      const err = thrown(() => small.encode('hello fox'));
      expect(err.code).toBe('TOKEN_OUT_OF_VOCAB');
      expect(err.detail).toMatchObject({ id: 9, position: 2, modelVocabSize: 6, tokenizerVocabSize: 32 });
      expect(err.message).toContain('"fox"');
    });
  },
);

describe.skipIf(!haveFixtures)(
  `tiny-random-gpt2 byte-level BPE, model vocabulary 1000 (${haveFixtures ? 'fixtures' : fixturesSkipReason})`,
  () => {
    let tok: TextTokenizer;
    beforeAll(async () => {
      tok = await loadTokenizer(
        {
          tokenizerJson: path.join(gpt2Dir, 'tokenizer.json'),
          tokenizerConfig: path.join(gpt2Dir, 'tokenizer_config.json'),
        },
        { vocabSize: 1000 },
      );
    });

    it('reads tokenizer.json with tokenizer_config.json', () => {
      // 50257 BPE tokens plus the 38 whitespace tokens CodeGen added.
      expect(tok.vocabSize).toBe(50295);
      expect(tok.modelVocabSize).toBe(1000);
      expect(tok.specialTokens.eos).toEqual({ token: '<|endoftext|>', id: 50256 });
      expect(tok.addBosToken).toBe(false);
    });

    it('refuses text that tokenizes to ids ≥ 1000, naming the token, the id and 1000', () => {
      const err = thrown(() => tok.encode('in hello'));
      expect(err.code).toBe('TOKEN_OUT_OF_VOCAB');
      expect(err.message).toContain('" hello"');
      expect(err.message).toContain('23748');
      expect(err.message).toContain('1000');
      expect(err.message).toContain('50295');
      expect(err.message).toMatch(/Use text the model covers, or send prompt ids/);
      expect(err.detail).toMatchObject({ id: 23748, position: 1, modelVocabSize: 1000, tokenizerVocabSize: 50295 });
    });

    it('counts every out-of-range token in the message', () => {
      // " there" is id 612, in range; "hello" and " friend" are not.
      expect(thrown(() => tok.encode('hello there friend')).message).toContain('so is 1 more token:');
      const err = thrown(() => tok.encode('hello banana friend'));
      expect(err.detail).toMatchObject({ position: 0, outOfVocabCount: 3 });
      expect(err.message).toContain('so are 2 more tokens:');
    });

    it('refuses the special token itself: <|endoftext|> is id 50256', () => {
      expect(thrown(() => tok.encode('<|endoftext|>in')).detail).toMatchObject({ id: 50256, position: 0 });
    });

    it('accepts text whose ids are all below 1000 and decodes it back', () => {
      expect(tok.encode('in the')).toEqual([259, 262]);
      expect(tok.encode('a b c')).toEqual([64, 275, 269]);
      expect(tok.decode([259, 262])).toBe('in the');
    });

    it('does not apply clean_up_tokenization_spaces although tokenizer_config.json asks for it', () => {
      // " ," is in range: ids 837 and 11. transformers would print "a,".
      expect(tok.decode(tok.encode('a , b'))).toBe('a , b');
    });

    it('validates prompt ids, naming the position', () => {
      expect(() => tok.validateIds([0, 52, 999])).not.toThrow();
      const err = thrown(() => tok.validateIds([0, 52, 1000, 5]));
      expect(err.code).toBe('TOKEN_OUT_OF_VOCAB');
      expect(err.message).toContain('position 2');
      expect(err.message).toContain('1000');
      expect(err.detail).toMatchObject({ id: 1000, position: 2, modelVocabSize: 1000 });
      const bad = thrown(() => tok.validateIds([3, -1]));
      expect(bad.code).toBe('BAD_REQUEST');
      expect(bad.detail).toMatchObject({ id: -1, position: 1 });
      expect(thrown(() => tok.validateIds([1.5])).code).toBe('BAD_REQUEST');
    });
  },
);

describe('WordLevel unknown words (the @huggingface/tokenizers 0.2.0 quirk)', () => {
  it('the library itself still returns undefined ids for unknown WordLevel words', () => {
    // If this starts failing the library fixed the quirk and the workaround can go.
    const lib = new Tokenizer(wordLevelTokenizerJson(), {});
    expect(lib.encode('hello zebra').ids).toEqual([2, undefined]);
  });

  it('maps them to the unk token named in tokenizer.json', () => {
    const tok = createTextTokenizer({ tokenizerJson: wordLevelTokenizerJson(), vocabSize: 9 });
    expect(tok.encode('hello zebra world')).toEqual([2, 0, 3]);
    expect(tok.specialTokens.unk).toEqual({ token: '[UNK]', id: 0 });
  });

  it('refuses with the word named when the tokenizer has no unk token', () => {
    const tok = createTextTokenizer({ tokenizerJson: wordLevelTokenizerJson({ unkToken: null }), vocabSize: 9 });
    expect(tok.specialTokens.unk).toBeUndefined();
    expect(tok.encode('hello world')).toEqual([2, 3]);
    const err = thrown(() => tok.encode('hello zebra'));
    expect(err.code).toBe('TOKEN_OUT_OF_VOCAB');
    expect(err.message).toContain('"zebra"');
    expect(err.message).toContain('no unknown token');
    expect(err.detail).toMatchObject({ word: 'zebra', position: 1 });
  });

  it('lets the package name the unk token', () => {
    const tok = createTextTokenizer({ tokenizerJson: wordLevelTokenizerJson(), spec: { unkToken: ',' }, vocabSize: 9 });
    expect(tok.encode('zebra')).toEqual([6]);
  });
});

describe('special tokens and BOS', () => {
  it('prepends BOS once when the package asks for it and the post-processor does not add it', () => {
    const tok = createTextTokenizer({
      tokenizerJson: byteLevelTokenizerJson(),
      spec: { bosToken: '<|endoftext|>', addBosToken: true },
      vocabSize: 257,
    });
    expect(tok.encode('hi')).toEqual([256, 104, 105]);
    expect(tok.encode('hi', { addSpecialTokens: false })).toEqual([104, 105]);
  });

  it('does not double the BOS its post-processor already adds', () => {
    const tok = createTextTokenizer({
      tokenizerJson: byteFallbackTokenizerJson(),
      spec: { addBosToken: true },
      vocabSize: 300,
    });
    expect(tok.encode('hello')).toEqual([1, 267, 261, 268, 263]);
  });

  it('takes names from tokenizer_config.json, including AddedToken objects', () => {
    const tok = createTextTokenizer({
      tokenizerJson: byteFallbackTokenizerJson(),
      tokenizerConfig: { bos_token: { content: '</s>', __type: 'AddedToken' }, eos_token: '<s>', add_bos_token: false },
      vocabSize: 300,
    });
    expect(tok.specialTokens.bos).toEqual({ token: '</s>', id: 2 });
    expect(tok.specialTokens.eos).toEqual({ token: '<s>', id: 1 });
    expect(tok.addBosToken).toBe(false);
    // What the package spec says (packages/ already weighed the files) wins over the file.
    const fromSpec = createTextTokenizer({
      tokenizerJson: byteLevelTokenizerJson(),
      tokenizerConfig: { bos_token: '<|endoftext|>', add_bos_token: false },
      spec: { addBosToken: true },
      vocabSize: 257,
    });
    expect(fromSpec.encode('a')).toEqual([256, 97]);
  });

  it('reads BOS and EOS from a post-processor template whose tokens have no well-known names', () => {
    const json = wordLevelTokenizerJson();
    const vocab = (json.model as { vocab: Record<string, number> }).vocab;
    Object.assign(vocab, { '[BEGIN]': 9, '[ROLE]': 10, '[END]': 11 });
    const special = (id: string) => ({ SpecialToken: { id, type_id: 0 } });
    json.post_processor = {
      type: 'TemplateProcessing',
      single: [special('[BEGIN]'), special('[ROLE]'), { Sequence: { id: 'A', type_id: 0 } }, special('[END]')],
      pair: [],
      special_tokens: {
        '[BEGIN]': { id: '[BEGIN]', ids: [9], tokens: ['[BEGIN]'] },
        '[ROLE]': { id: '[ROLE]', ids: [10], tokens: ['[ROLE]'] },
        '[END]': { id: '[END]', ids: [11], tokens: ['[END]'] },
      },
    };
    const tok = createTextTokenizer({ tokenizerJson: json, vocabSize: 12 });
    expect(tok.encode('hello')).toEqual([9, 10, 2, 11]);
    expect(tok.specialTokens.bos).toEqual({ token: '[BEGIN]', id: 9 });
    expect(tok.specialTokens.eos).toEqual({ token: '[END]', id: 11 });
    expect(tok.isSpecial(10)).toBe(true);
    expect(tok.decode([9, 10, 2, 11], { skipSpecialTokens: true })).toBe('hello');
  });

  it('warns when the package names a token tokenizer.json does not have', () => {
    const tok = createTextTokenizer({
      tokenizerJson: byteFallbackTokenizerJson(),
      spec: { eosToken: '<|im_end|>' },
      vocabSize: 300,
    });
    expect(tok.specialTokens.eos).toEqual({ token: '</s>', id: 2 });
    expect(tok.warnings.join('\n')).toContain('"<|im_end|>"');
  });

  it('skips added special tokens when asked', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    const ids = [104, 256, 105];
    expect(tok.decode(ids)).toBe('h<|endoftext|>i');
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('hi');
  });

  it('rejects ids that are not token ids when decoding', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    expect(thrown(() => tok.decode([104, -3])).code).toBe('BAD_REQUEST');
  });

  it('does not rewrite " ," on decode (clean_up_tokenization_spaces defaults to on in the library)', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    expect(tok.decode(tok.encode('x , y .'))).toBe('x , y .');
  });
});

describe('broken tokenizer files', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kvdesk-tokenizer-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, text: string): string => {
    const file = path.join(dir, name);
    writeFileSync(file, text);
    return file;
  };

  it('names a tokenizer.json that is not JSON', async () => {
    const file = write('tokenizer.json', '{"model": ');
    const err = await rejected(loadTokenizer({ tokenizerJson: file }, { vocabSize: 10 }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain('tokenizer.json');
    expect(err.detail).toMatchObject({ file });
  });

  it('names a missing tokenizer.json', async () => {
    const file = path.join(dir, 'absent', 'tokenizer.json');
    const err = await rejected(loadTokenizer({ tokenizerJson: file }, { vocabSize: 10 }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.detail).toMatchObject({ file });
  });

  it('names a JSON file that is not a tokenizer', async () => {
    const file = write('not-a-tokenizer.json', JSON.stringify({ hello: 'world' }));
    const err = await rejected(loadTokenizer({ tokenizerJson: file }, { vocabSize: 10 }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain('not-a-tokenizer.json');
    expect(err.message).toContain('model');
  });

  it('names a tokenizer.json the library cannot build', async () => {
    const json = byteLevelTokenizerJson();
    json.decoder = { type: 'NoSuchDecoder' };
    const file = write('odd-tokenizer.json', JSON.stringify(json));
    const err = await rejected(loadTokenizer({ tokenizerJson: file }, { vocabSize: 300 }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain('odd-tokenizer.json');
    expect(err.message).toContain('NoSuchDecoder');
  });

  it('names a malformed tokenizer_config.json', async () => {
    const json = write('tokenizer.json', JSON.stringify(byteLevelTokenizerJson()));
    const config = write('tokenizer_config.json', JSON.stringify({ bos_token: 42 }));
    const err = await rejected(loadTokenizer({ tokenizerJson: json, tokenizerConfig: config }, { vocabSize: 300 }));
    expect(err.code).toBe('PACKAGE_INVALID');
    expect(err.message).toContain('tokenizer_config.json');
    expect(err.detail).toMatchObject({ file: config });
  });

  it('loads a tokenizer.json that leaves out the optional sections', async () => {
    const { normalizer: _n, post_processor: _p, added_tokens: _a, ...json } = byteLevelTokenizerJson();
    const file = write('lean-tokenizer.json', JSON.stringify(json));
    const tok = await loadTokenizer({ tokenizerJson: file }, { vocabSize: 300 });
    expect(tok.decode(tok.encode('ok'))).toBe('ok');
  });
});

describe('tokenPiece', () => {
  const utf8 = (bytes: number[][]) => Buffer.from(bytes.flat()).toString('utf8');

  it('byte-level: the exact bytes of each token, even a piece of a character', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteLevelTokenizerJson(), vocabSize: 257 });
    const ids = tok.encode('a é 中', { addSpecialTokens: false });
    const pieces = ids.map((id) => tok.tokenPiece(id));
    expect(pieces.flatMap((p) => p.bytes)).toEqual([...Buffer.from('a é 中', 'utf8')]);
    expect(utf8(pieces.map((p) => p.bytes))).toBe(tok.decode(ids));
    // "é" is two tokens of one byte each: on their own neither is a character.
    const e = ids.slice(2, 4).map((id) => tok.tokenPiece(id));
    expect(e).toEqual([
      { token: '\ufffd', bytes: [0xc3] },
      { token: '\ufffd', bytes: [0xa9] },
    ]);
    expect(tok.tokenPiece(tok.encode(' ', { addSpecialTokens: false })[0] as number)).toEqual({
      token: ' ',
      bytes: [32],
    });
    expect(tok.tokenPiece(256)).toEqual({ token: '<|endoftext|>', bytes: [...Buffer.from('<|endoftext|>')] });
    // An added token that is not special is plain text, not the byte alphabet ("é" is not the byte 0xE9).
    const json = byteLevelTokenizerJson();
    (json.added_tokens as unknown[]).push({
      id: 257,
      content: 'é',
      special: false,
      normalized: false,
      lstrip: false,
      rstrip: false,
      single_word: false,
    });
    const withAdded = createTextTokenizer({ tokenizerJson: json, vocabSize: 258 });
    expect(withAdded.tokenPiece(257)).toEqual({ token: 'é', bytes: [0xc3, 0xa9] });
  });

  it('byte fallback: ▁ is a space, <0xNN> one byte', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteFallbackTokenizerJson(), vocabSize: 270 });
    const ids = tok.encode('hello 中', { addSpecialTokens: false });
    const pieces = ids.map((id) => tok.tokenPiece(id));
    expect(pieces[0]).toEqual({ token: ' h', bytes: [32, 104] });
    expect(pieces.slice(-3)).toEqual([
      { token: '\ufffd', bytes: [0xe4], byte: true },
      { token: '\ufffd', bytes: [0xb8], byte: true },
      { token: '\ufffd', bytes: [0xad], byte: true },
    ]);
    expect(utf8(pieces.map((p) => p.bytes))).toBe(' hello 中');
    // A byte token whose byte is a whole character has the text of the token for it: it is marked a byte token.
    expect(tok.tokenPiece(tok.tokenToId('<0x68>') as number)).toEqual({ token: 'h', bytes: [0x68], byte: true });
    expect(tok.tokenPiece(tok.tokenToId('h') as number)).toEqual({ token: 'h', bytes: [0x68] });
    expect(tok.tokenPiece(2)).toEqual({ token: '</s>', bytes: [...Buffer.from('</s>')] });
  });

  it('other vocabularies: the token decoded on its own', () => {
    const tok = createTextTokenizer({ tokenizerJson: wordLevelTokenizerJson(), vocabSize: 9 });
    expect(tok.tokenPiece(7)).toEqual({ token: 'é', bytes: [0xc3, 0xa9] });
  });
});

describe('fewestTokens: a true lower bound on a text’s tokens, known without tokenizing it', () => {
  const texts = [
    'Hello, world! This is a sentence of ordinary English text, with punctuation; and numbers: 12345.',
    'a'.repeat(5000),
    `${' '.repeat(40)}\t\t\t\t\t\t\t\t\t${' '.repeat(31)}x`,
    'naïve café — 東京都の天気は晴れです。 🙂🙂🙂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
    'def f(x):\n    return x ** 2  # squares\n\n\n'.repeat(20),
    '<|endoftext|><|endoftext|>hello',
    'hello world hello world',
  ];

  it.skipIf(!haveFixtures)('byte-level BPE (gpt2): at most the tokens encode gives, and not nothing', async () => {
    const tok = await loadTokenizer(
      {
        tokenizerJson: path.join(gpt2Dir, 'tokenizer.json'),
        tokenizerConfig: path.join(gpt2Dir, 'tokenizer_config.json'),
      },
      { vocabSize: 50295 },
    );
    for (const text of texts) {
      const fewest = tok.fewestTokens(text);
      expect(fewest).toBeGreaterThan(0);
      expect(fewest).toBeLessThanOrEqual(tok.encode(text, { addSpecialTokens: false }).length);
    }
    // The longest of its tokens covers 128 bytes.
    expect(tok.fewestTokens('a'.repeat(128_000))).toBe(1000);
    expect(tok.fewestTokens('')).toBe(0);
  });

  it('byte-fallback BPE (SentencePiece): at most the tokens encode gives, and not nothing', () => {
    const tok = createTextTokenizer({ tokenizerJson: byteFallbackTokenizerJson(), vocabSize: 270 });
    for (const text of texts) {
      const fewest = tok.fewestTokens(text);
      expect(fewest).toBeGreaterThan(0);
      expect(fewest).toBeLessThanOrEqual(tok.encode(text, { addSpecialTokens: false }).length);
    }
  });

  it('none is known where one token may stand for any run of text, or text may be dropped', () => {
    // An unknown word is one <unk>.
    expect(createTextTokenizer({ tokenizerJson: wordLevelTokenizerJson(), vocabSize: 64 }).fewestTokens('zzzz')).toBe(
      0,
    );
    const byteLevel = byteLevelTokenizerJson();
    const variants: Array<Record<string, unknown>> = [
      { ...byteLevel, pre_tokenizer: { type: 'Whitespace' } },
      { ...byteLevel, normalizer: { type: 'Strip', strip_left: true, strip_right: true } },
      { ...byteLevel, normalizer: { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' } },
      {
        ...byteLevel,
        added_tokens: [{ id: 0, content: '<mask>', special: true, lstrip: true, rstrip: false, normalized: false }],
      },
    ];
    for (const json of variants) {
      expect(createTextTokenizer({ tokenizerJson: json, vocabSize: 300 }).fewestTokens(' '.repeat(1000))).toBe(0);
    }
    // Byte fallback without some of its byte tokens, unknowns fused: a run of CJK characters is one <unk>.
    const fallback = byteFallbackTokenizerJson();
    const model = fallback.model as { vocab: Record<string, number>; fuse_unk?: boolean };
    const gapped = { ...fallback, model: { ...model, fuse_unk: true, vocab: { ...model.vocab } } };
    for (let b = 0x80; b < 0x100; b++) delete gapped.model.vocab[`<0x${b.toString(16).toUpperCase()}>`];
    const gappedTok = createTextTokenizer({ tokenizerJson: gapped, vocabSize: 270 });
    expect(gappedTok.encode('東'.repeat(3000), { addSpecialTokens: false }).length).toBeLessThan(5);
    expect(gappedTok.fewestTokens('東'.repeat(3000))).toBe(0);
    // The same tokenizer as it is has one.
    expect(
      createTextTokenizer({ tokenizerJson: byteLevel, vocabSize: 300 }).fewestTokens(' '.repeat(1000)),
    ).toBeGreaterThan(0);
  });
});
