/**
 * Small tokenizer.json documents written here so the streaming and encoding tests run without
 * the shared fixtures. They follow the layouts real packages use (GPT-2 byte-level BPE, Llama-2
 * style SentencePiece BPE with `<0xNN>` byte fallback, WordLevel with a WordPiece decoder).
 */

/** GPT-2's reversible byte → printable character table (bytes_to_unicode). */
export function bytesToUnicode(): Map<number, string> {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map = new Map<number, string>();
  for (const b of printable) map.set(b, String.fromCodePoint(b));
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    if (!map.has(b)) map.set(b, String.fromCodePoint(256 + shifted++));
  }
  return map;
}

/**
 * Byte-level BPE: ids 0–255 are the bytes themselves, 256 is `<|endoftext|>`. `merges` lets a
 * test add multi-byte tokens that straddle character boundaries.
 */
export function byteLevelTokenizerJson(merges: Array<[string, string]> = []): Record<string, unknown> {
  const b2u = bytesToUnicode();
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[b2u.get(b) as string] = b;
  let next = 257;
  for (const [a, b] of merges) vocab[a + b] ??= next++;
  return {
    version: '1.0',
    added_tokens: [
      {
        id: 256,
        content: '<|endoftext|>',
        special: true,
        normalized: false,
        lstrip: false,
        rstrip: false,
        single_word: false,
      },
    ],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      vocab,
      merges,
      unk_token: null,
      dropout: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
    },
  };
}

/** Bytes of a string as GPT-2 byte-level token text. */
export function byteLevelText(s: string): string {
  const b2u = bytesToUnicode();
  return [...new TextEncoder().encode(s)].map((b) => b2u.get(b) as string).join('');
}

/**
 * Llama-2 style: `▁`-prefixed BPE pieces for a few letters, `<0x00>`–`<0xFF>` byte fallback for
 * everything else, `<s>` added by the post-processor, and the Replace/ByteFallback/Fuse/Strip decoder.
 */
export function byteFallbackTokenizerJson(): Record<string, unknown> {
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  let next = 259;
  for (const piece of ['▁', 'h', 'e', 'l', 'o', 'w', 'r', 'd', '▁h', 'll', '▁w']) vocab[piece] = next++;
  const special = (id: number, content: string) => ({
    id,
    content,
    special: true,
    normalized: false,
    lstrip: false,
    rstrip: false,
    single_word: false,
  });
  return {
    version: '1.0',
    added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ],
    },
    model: {
      type: 'BPE',
      vocab,
      merges: [
        ['▁', 'h'],
        ['l', 'l'],
        ['▁', 'w'],
      ],
      unk_token: '<unk>',
      dropout: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
    },
  };
}

/** WordLevel over a few words with a WordPiece decoder (spaces between words, `##` joins). */
export function wordLevelTokenizerJson(options: { unkToken?: string | null } = {}): Record<string, unknown> {
  // Without an unk token the vocabulary must not hold one of the usual names either, or kvdesk finds it.
  const words = [options.unkToken === null ? 'pad' : '[UNK]', '[CLS]', 'hello', 'world', '##s', '.', ',', 'é', '中'];
  const vocab: Record<string, number> = {};
  for (const [i, w] of words.entries()) vocab[w] = i;
  const model: Record<string, unknown> = { type: 'WordLevel', vocab };
  if (options.unkToken !== null) model.unk_token = options.unkToken ?? '[UNK]';
  return {
    version: '1.0',
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model,
  };
}
