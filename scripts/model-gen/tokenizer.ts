/**
 * A byte-level BPE tokenizer in the Hugging Face `tokenizers` JSON format (the
 * GPT-2 family): ids 0..255 are the 256 byte symbols, then merges learned from
 * the built-in English text, then filler tokens when the model's vocabulary is
 * larger than what the text can teach, then the special tokens.
 */
import { SPECIAL_TOKENS, specialTokenIds } from './config';
import { TRAINING_TEXT } from './corpus';

/** The GPT-2 pre-tokenizer split, as the ByteLevel pre-tokenizer applies it with use_regex. */
export const GPT2_SPLIT_PATTERN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** ChatML, the template of Qwen and SmolLM instruct models. */
export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/**
 * GPT-2's byte → printable character table: bytes that are printable Latin-1
 * map to themselves, the others to U+0100 upwards, so every token is a visible
 * string without spaces.
 */
export function byteSymbols(): string[] {
  const symbols: string[] = new Array(256);
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    symbols[b] = String.fromCharCode(printable ? b : 256 + shifted++);
  }
  return symbols;
}

/** Result of BPE training: learned tokens (after the 256 byte symbols) and merges in rank order. */
export interface LearnedBpe {
  tokens: string[];
  merges: Array<[string, string]>;
}

/**
 * Learns up to `maxNewTokens` merges from `text`, most frequent pair first;
 * equal counts are broken by the pair's text so the result never depends on Map
 * iteration details. Pairs seen fewer than `minFrequency` times are not merged.
 */
export function learnBpe(text: string, maxNewTokens: number, minFrequency = 2): LearnedBpe {
  const symbols = byteSymbols();
  const encoder = new TextEncoder();
  const counts = new Map<string, number>();
  for (const piece of text.match(GPT2_SPLIT_PATTERN) ?? []) {
    const word = Array.from(encoder.encode(piece), (b) => symbols[b] ?? '').join('');
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const words = [...counts]
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([w, n]) => ({ parts: Array.from(w), n }));
  const known = new Set(symbols);
  const tokens: string[] = [];
  const merges: Array<[string, string]> = [];

  while (tokens.length < maxNewTokens) {
    const pairCounts = new Map<string, number>();
    for (const { parts, n } of words) {
      for (let i = 0; i + 1 < parts.length; i++) {
        // U+0000 cannot occur inside a byte symbol, so it separates the halves unambiguously.
        const key = `${parts[i]}\u0000${parts[i + 1]}`;
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + n);
      }
    }
    let best: string | undefined;
    let bestCount = 0;
    for (const [key, n] of pairCounts) {
      if (n > bestCount || (n === bestCount && best !== undefined && key < best)) {
        best = key;
        bestCount = n;
      }
    }
    if (best === undefined || bestCount < minFrequency) break;
    const [left = '', right = ''] = best.split('\u0000');
    const merged = left + right;
    merges.push([left, right]);
    // Two different splits can spell the same string ("ab"+"c", "a"+"bc"); the token exists once.
    if (!known.has(merged)) {
      known.add(merged);
      tokens.push(merged);
    }
    for (const word of words) {
      const p = word.parts;
      const next: string[] = [];
      for (let i = 0; i < p.length; i++) {
        if (i + 1 < p.length && p[i] === left && p[i + 1] === right) {
          next.push(merged);
          i++;
        } else {
          next.push(p[i] ?? '');
        }
      }
      word.parts = next;
    }
  }
  return { tokens, merges };
}

/**
 * A fixed bias added to the logits. The weights are random, so without it
 * greedy text is full of control bytes and lone UTF-8 continuation bytes that
 * render as mojibake; with it the output reads as English-ish fragments (the
 * learned merges), which is what a person trying the built-in model expects to
 * see. Unreachable filler tokens and <|im_start|> are effectively never chosen.
 */
export function tokenLogitBias(vocabSize: number, fillerStart: number, fillerCount: number): Float32Array {
  const bias = new Float32Array(vocabSize);
  for (let b = 0; b < 256; b++) {
    const control = (b < 0x20 && b !== 0x09 && b !== 0x0a) || b === 0x7f;
    if (control) bias[b] = -8;
    else if (b >= 0x80) bias[b] = -4;
  }
  bias.fill(-30, fillerStart, fillerStart + fillerCount);
  bias[specialTokenIds(vocabSize).imStart] = -30;
  return bias;
}

/** tokenizer.json and tokenizer_config.json contents for a vocabulary size. */
export interface TokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  /** How many vocabulary entries are unreachable fillers (the text ran out of merges). */
  fillerTokens: number;
  /** Id of the first filler token. */
  fillerStart: number;
  mergeCount: number;
}

/** Builds the tokenizer files for a model with `vocabSize` tokens and a `modelMaxLength` context. */
export function buildTokenizer(vocabSize: number, modelMaxLength: number): TokenizerFiles {
  const ordinary = vocabSize - SPECIAL_TOKENS.length;
  const learned = learnBpe(TRAINING_TEXT, ordinary - 256);
  const fillerTokens = ordinary - 256 - learned.tokens.length;
  const fillers = Array.from({ length: fillerTokens }, (_, i) => `<|reserved_${i}|>`);
  const vocabList = [...byteSymbols(), ...learned.tokens, ...fillers];
  const ids = specialTokenIds(vocabSize);
  // fromEntries defines own properties, so a token spelled like "__proto__" cannot touch the prototype.
  const vocab = Object.fromEntries(vocabList.map((token, id) => [token, id]));

  const special = SPECIAL_TOKENS.map((content, i) => ({ id: ordinary + i, content }));
  const tokenAt = (id: number): string => {
    const found = special.find((s) => s.id === id);
    if (!found) throw new Error(`model-gen: special token id ${id} is not one of the special tokens`);
    return found.content;
  };
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: special.map(({ id, content }) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: learned.merges,
    },
  };
  const tokenizerConfig = {
    add_bos_token: false,
    add_eos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(
      special.map(({ id, content }) => [
        String(id),
        { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true },
      ]),
    ),
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: tokenAt(ids.bos),
    eos_token: tokenAt(ids.eos),
    pad_token: tokenAt(ids.pad),
    unk_token: null,
    chat_template: CHATML_TEMPLATE,
    clean_up_tokenization_spaces: false,
    errors: 'replace',
    model_max_length: modelMaxLength,
    tokenizer_class: 'PreTrainedTokenizerFast',
  };
  return {
    tokenizerJson,
    tokenizerConfig,
    fillerTokens,
    fillerStart: 256 + learned.tokens.length,
    mergeCount: learned.merges.length,
  };
}
