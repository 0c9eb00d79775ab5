import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { z } from 'zod';
import { KvdeskError } from '../../shared/errors';
import type { TokenizerSpec } from '../../shared/model-spec';
import { libraryDefaults, OffThreadEncoder, type RawEncoding, type TokenizerFiles } from './off-thread';

/** A special token as the tokenizer knows it: its text and its id. */
export interface SpecialToken {
  token: string;
  id: number;
}

/** The special tokens kvdesk resolved for a package; a role is absent when the package has no such token. */
export interface SpecialTokens {
  bos?: SpecialToken;
  eos?: SpecialToken;
  pad?: SpecialToken;
  unk?: SpecialToken;
}

/** Options of {@link TextTokenizer.encode}. */
export interface EncodeOptions {
  /** Apply the tokenizer's post-processor (BOS/EOS templates). Default true, as in tokenizers. */
  addSpecialTokens?: boolean;
}

/** A token's text and bytes ({@link TextTokenizer.tokenPiece}). */
export interface TokenPiece {
  token: string;
  bytes: number[];
  /** A SentencePiece byte token (`<0x41>`): its text and bytes may be another token's too (`A`). */
  byte?: true;
}

/** Options of {@link TextTokenizer.decode}. */
export interface DecodeOptions {
  /** Drop special tokens (bos/eos/pad/unk and added tokens marked special) from the text. Default false. */
  skipSpecialTokens?: boolean;
  /** With skipSpecialTokens: special tokens kept all the same (a tool-call marker such as `[TOOL_CALLS]`). */
  keepSpecialIds?: ReadonlySet<number>;
}

/**
 * A loaded tokenizer bound to one model's vocabulary size: every id it hands out
 * is checked against what the model's embedding table can take.
 */
export interface TextTokenizer {
  /**
   * Text → ids. Throws TOKEN_OUT_OF_VOCAB when an id is ≥ the model's vocabulary size. A long text is tokenized on
   * a worker thread where asked under deferringLongTexts (off-thread.ts).
   */
  encode(text: string, opts?: EncodeOptions): number[];
  /** Ends what the tokenizer runs beside the host (its worker thread, if it started one). */
  close(): void;
  /** Ids → text. Ids the tokenizer has no token for contribute nothing, as in tokenizers' decode. */
  decode(ids: readonly number[], opts?: DecodeOptions): string;
  idToToken(id: number): string | undefined;
  /**
   * One token on its own, as OpenAI's logprobs show it: its text (special tokens included; a piece of a
   * multi-byte character decodes to U+FFFD) and its UTF-8 bytes — exact for byte-level and byte-fallback
   * vocabularies, where a token may hold part of a character.
   */
  tokenPiece(id: number): TokenPiece;
  tokenToId(token: string): number | undefined;
  isSpecial(id: number): boolean;
  /**
   * The fewest tokens `encode(text, { addSpecialTokens: false })` can give, without tokenizing: the text's length over
   * the longest any token covers (0 when the tokenizer's parts allow no such bound). Encoding takes time on the
   * calling thread (seconds for a few hundred kB of one long word); this takes a pass over the text.
   */
  fewestTokens(text: string): number;
  /** Checks prompt ids given directly; throws TOKEN_OUT_OF_VOCAB (or BAD_REQUEST) naming the position. */
  validateIds(ids: readonly number[]): void;
  /** Size of the tokenizer's own id space (highest id + 1, added tokens included). */
  readonly vocabSize: number;
  /** Size of the model's vocabulary this tokenizer is checked against. */
  readonly modelVocabSize: number;
  readonly specialTokens: SpecialTokens;
  /** Whether prompts for this model start with BOS (tokenizer_config add_bos_token, else the post-processor). */
  readonly addBosToken: boolean;
  /** Inconsistencies found while loading that did not stop it (the caller surfaces them). */
  readonly warnings: readonly string[];
}

/** What {@link createTextTokenizer} needs: the parsed files and where they came from. */
export interface TextTokenizerInput {
  tokenizerJson: unknown;
  tokenizerConfig?: unknown;
  /** Special-token names the package declared; they win over what the files say. */
  spec?: Omit<TokenizerSpec, 'tokenizerJson' | 'tokenizerConfig'>;
  vocabSize: number;
  /** File names used in error messages. */
  source?: { tokenizerJson?: string; tokenizerConfig?: string };
  /** The files the input was read from: long texts are tokenized off the host's thread from them (off-thread.ts). */
  files?: TokenizerFiles;
}

/** Loads tokenizer.json (and tokenizer_config.json when the spec names one) for a model with `vocabSize` ids. */
export async function loadTokenizer(spec: TokenizerSpec, options: { vocabSize: number }): Promise<TextTokenizer> {
  const tokenizerJson = await readJsonFile(spec.tokenizerJson);
  const tokenizerConfig = spec.tokenizerConfig === undefined ? undefined : await readJsonFile(spec.tokenizerConfig);
  const { tokenizerJson: _json, tokenizerConfig: _config, ...names } = spec;
  return createTextTokenizer({
    tokenizerJson,
    tokenizerConfig,
    spec: names,
    vocabSize: options.vocabSize,
    source: { tokenizerJson: spec.tokenizerJson, tokenizerConfig: spec.tokenizerConfig },
    files: {
      tokenizerJson: spec.tokenizerJson,
      ...(spec.tokenizerConfig !== undefined ? { tokenizerConfig: spec.tokenizerConfig } : {}),
    },
  });
}

async function readJsonFile(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `Cannot read ${path.basename(file)} (${file}): ${errorMessage(err)}. Check that the model package is complete.`,
      { file },
    );
  }
  try {
    // A UTF-8 BOM (files saved on Windows) is not an error: the package's validation skips it too.
    return JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text) as unknown;
  } catch (err) {
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `${path.basename(file)} is not valid JSON (${file}): ${errorMessage(err)}. Replace it with the file from the model's source.`,
      { file },
    );
  }
}

// Only the parts kvdesk reads itself; everything else goes to the library untouched.
const AddedTokenSchema = z.looseObject({
  id: z.number().int().nonnegative(),
  content: z.string(),
  special: z.boolean().optional(),
});
const TokenizerJsonSchema = z.looseObject({
  model: z.looseObject({
    type: z.string().optional(),
    // Checked for shape only: copying a 250k-entry vocabulary through zod would cost more than loading it.
    vocab: z.custom<Record<string, number> | unknown[]>(
      (v) => isRecord(v) || Array.isArray(v),
      'model.vocab must be an object or an array',
    ),
    unk_token: z.string().nullish(),
  }),
  added_tokens: z.array(AddedTokenSchema).nullish(),
  normalizer: z.unknown().optional(),
  pre_tokenizer: z.unknown().optional(),
  post_processor: z.unknown().optional(),
  decoder: z.unknown().optional(),
});
type TokenizerJson = z.infer<typeof TokenizerJsonSchema>;

const ConfigTokenSchema = z.union([z.string(), z.looseObject({ content: z.string() }), z.null()]).optional();
const TokenizerConfigSchema = z.looseObject({
  bos_token: ConfigTokenSchema,
  eos_token: ConfigTokenSchema,
  pad_token: ConfigTokenSchema,
  unk_token: ConfigTokenSchema,
  add_bos_token: z.boolean().nullish(),
  additional_special_tokens: z.array(z.union([z.string(), z.looseObject({ content: z.string() })])).nullish(),
  added_tokens_decoder: z
    .record(z.string(), z.looseObject({ content: z.string(), special: z.boolean().optional() }))
    .nullish(),
});
type TokenizerConfig = z.infer<typeof TokenizerConfigSchema>;

/** Builds a {@link TextTokenizer} from already parsed files (loadTokenizer reads them from disk). */
export function createTextTokenizer(input: TextTokenizerInput): TextTokenizer {
  const jsonName = input.source?.tokenizerJson ?? 'tokenizer.json';
  const configName = input.source?.tokenizerConfig ?? 'tokenizer_config.json';
  const modelVocabSize = input.vocabSize;
  if (!Number.isInteger(modelVocabSize) || modelVocabSize <= 0) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `The model's vocabulary size must be a positive integer, got ${modelVocabSize}.`,
      {
        vocabSize: modelVocabSize,
      },
    );
  }

  const parsedJson = TokenizerJsonSchema.safeParse(input.tokenizerJson);
  if (!parsedJson.success) {
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `${path.basename(jsonName)} is not a tokenizers file: ${z.prettifyError(parsedJson.error).replaceAll('\n', ' ')}. Replace it with the tokenizer.json from the model's source.`,
      { file: jsonName },
    );
  }
  let config: TokenizerConfig = {};
  if (input.tokenizerConfig !== undefined) {
    const parsedConfig = TokenizerConfigSchema.safeParse(input.tokenizerConfig);
    if (!parsedConfig.success) {
      throw new KvdeskError(
        'PACKAGE_INVALID',
        `${path.basename(configName)} is malformed: ${z.prettifyError(parsedConfig.error).replaceAll('\n', ' ')}.`,
        { file: configName },
      );
    }
    config = parsedConfig.data;
  }

  const json: TokenizerJson = { ...parsedJson.data };
  for (const [key, value] of Object.entries(libraryDefaults())) {
    (json as Record<string, unknown>)[key] ??= value;
  }
  let lib: Tokenizer;
  try {
    lib = new Tokenizer(json, config);
  } catch (err) {
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `${path.basename(jsonName)} could not be loaded: ${errorMessage(err)}. kvdesk supports the tokenizer components of @huggingface/tokenizers (BPE, WordPiece, WordLevel, Unigram).`,
      { file: jsonName },
    );
  }
  const model = lib.model;
  if (model === null) {
    throw new KvdeskError('PACKAGE_INVALID', `${path.basename(jsonName)} has no tokenizer model.`, { file: jsonName });
  }
  const vocabSize = model.vocab.length;

  const warnings: string[] = [];
  const resolve = (role: keyof SpecialTokens, fromSpec: string | undefined, fromFiles: Array<string | undefined>) =>
    resolveSpecial(lib, role, fromSpec, fromFiles, warnings);
  const template = templateSpecialTokens(json.post_processor);
  const specialTokens: SpecialTokens = {};
  const bos = resolve('bos', input.spec?.bosToken, [configToken(config.bos_token), template.first, ...WELL_KNOWN.bos]);
  const eos = resolve('eos', input.spec?.eosToken, [configToken(config.eos_token), template.last, ...WELL_KNOWN.eos]);
  const pad = resolve('pad', input.spec?.padToken, [configToken(config.pad_token), ...WELL_KNOWN.pad]);
  const unk = resolve('unk', input.spec?.unkToken, [
    configToken(config.unk_token),
    json.model.unk_token ?? undefined,
    ...WELL_KNOWN.unk,
  ]);
  if (bos) specialTokens.bos = bos;
  if (eos) specialTokens.eos = eos;
  if (pad) specialTokens.pad = pad;
  if (unk) specialTokens.unk = unk;

  const specialIds = new Set<number>();
  for (const t of json.added_tokens ?? []) if (t.special) specialIds.add(t.id);
  for (const id of template.ids) specialIds.add(id);
  for (const t of [bos, eos, pad, unk]) if (t) specialIds.add(t.id);
  for (const t of config.additional_special_tokens ?? []) {
    const id = lib.token_to_id(typeof t === 'string' ? t : t.content);
    if (id !== undefined) specialIds.add(id);
  }
  for (const [id, t] of Object.entries(config.added_tokens_decoder ?? {})) {
    if (t.special && lib.id_to_token(Number(id)) === t.content) specialIds.add(Number(id));
  }

  const addBosToken =
    input.spec?.addBosToken ?? config.add_bos_token ?? (bos !== undefined && template.first === bos.token);

  const outOfVocab = (subject: string, id: number, position: number, others = 0): KvdeskError =>
    new KvdeskError(
      'TOKEN_OUT_OF_VOCAB',
      `${subject} is outside the model's vocabulary of ${modelVocabSize} ids (0–${modelVocabSize - 1})${others === 1 ? ', and so is 1 more token' : others > 1 ? `, and so are ${others} more tokens` : ''}${vocabSize > modelVocabSize ? `: this package's ${path.basename(jsonName)} has ${vocabSize} tokens but the model only ${modelVocabSize}. Use text the model covers, or send prompt ids below ${modelVocabSize}.` : `. Send prompt ids below ${modelVocabSize}.`}`,
      { id, position, modelVocabSize, tokenizerVocabSize: vocabSize, outOfVocabCount: others + 1 },
    );

  function decode(ids: readonly number[], opts?: DecodeOptions): string {
    const kept: number[] = [];
    for (const [position, id] of ids.entries()) {
      if (!Number.isInteger(id) || id < 0) {
        throw new KvdeskError('BAD_REQUEST', `Cannot decode id ${id} at position ${position}: ids are integers ≥ 0.`, {
          id,
          position,
        });
      }
      // Ids past the tokenizer's table (models often pad their vocabulary) have no text, as in tokenizers.
      if (lib.id_to_token(id) === undefined) continue;
      if (opts?.skipSpecialTokens && specialIds.has(id) && !opts.keepSpecialIds?.has(id)) continue;
      kept.push(id);
    }
    // The library throws on an empty list, and tokenizer.json files without added_tokens would not
    // let its own skip_special_tokens see bos/eos, so filtering is done above.
    if (kept.length === 0) return '';
    // clean_up_tokenization_spaces is a transformers-only rewrite (" ." → ".") that corrupts code and
    // cannot be streamed token by token; tokenizers and onnxruntime-genai never apply it.
    return lib.decode(kept, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  const decoders = decoderTypes(json.decoder);
  const byteLevel = decoders.has('ByteLevel');
  // SentencePiece vocabularies: `▁` stands for a space, `<0xNN>` for one byte of a character it lacks.
  const sentencePiece = decoders.has('ByteFallback') || decoders.has('Metaspace');
  const addedIds = new Set((json.added_tokens ?? []).map((t) => t.id));
  const pieces = new Map<number, TokenPiece>();
  function tokenPiece(id: number): TokenPiece {
    const cached = pieces.get(id);
    if (cached) return cached;
    const raw = lib.id_to_token(id);
    let piece: TokenPiece | undefined;
    // Added tokens hold their text as it is, not in the model's byte alphabet.
    if (raw !== undefined && !addedIds.has(id) && !specialIds.has(id)) {
      if (byteLevel) {
        const bytes = byteLevelBytes(raw);
        if (bytes) piece = { token: Buffer.from(bytes).toString('utf8'), bytes };
      } else if (sentencePiece) {
        const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(raw);
        if (m) {
          const bytes = [Number.parseInt(m[1] as string, 16)];
          piece = { token: Buffer.from(bytes).toString('utf8'), bytes, byte: true };
        } else {
          // Decoding one token alone would strip its leading space (the decoder's Strip / prepend_scheme).
          const token = raw.replaceAll('▁', ' ');
          piece = { token, bytes: [...Buffer.from(token, 'utf8')] };
        }
      }
    }
    if (!piece) {
      const token = decode([id]);
      piece = { token, bytes: [...Buffer.from(token, 'utf8')] };
    }
    pieces.set(id, piece);
    return piece;
  }

  function describeToken(id: number, position: number): string {
    const token = lib.id_to_token(id) ?? '';
    const text = decode([id]);
    const tokenPart = text === token ? '' : `token ${JSON.stringify(token)}, `;
    return `The text ${JSON.stringify(text)} (${tokenPart}id ${id}, position ${position})`;
  }

  const bound = tokenLengthBound(json);
  const encodeHere = (text: string, special: boolean): RawEncoding => {
    const encoded = lib.encode(text, { add_special_tokens: special });
    return { ids: encoded.ids, tokenAt: (position) => encoded.tokens[position] ?? '' };
  };
  const offThread = input.files ? new OffThreadEncoder(input.files, encodeHere) : undefined;

  return {
    vocabSize,
    modelVocabSize,
    specialTokens,
    addBosToken,
    warnings,
    fewestTokens(text) {
      if (!bound || text.length === 0) return 0;
      if (bound.unit === 'bytes') return Math.ceil(Buffer.byteLength(text, 'utf8') / bound.perToken);
      return Math.ceil(codePoints(text) / bound.shrink / bound.perToken);
    },
    encode(text, opts) {
      if (typeof text !== 'string') {
        throw new KvdeskError('BAD_REQUEST', `Text to encode must be a string, got ${typeof text}.`);
      }
      const addSpecialTokens = opts?.addSpecialTokens ?? true;
      const encoded = offThread ? offThread.encode(text, addSpecialTokens) : encodeHere(text, addSpecialTokens);
      const ids: number[] = [];
      for (let position = 0; position < encoded.ids.length; position++) {
        let id = encoded.ids[position];
        // WordLevel (the library's Legacy model) only knows unk from tokenizer_config.json, and BPE without
        // byte fallback has none for unseen characters: both yield undefined instead of an id.
        if (id === undefined) {
          const word = encoded.tokenAt(position);
          if (unk === undefined) {
            throw new KvdeskError(
              'TOKEN_OUT_OF_VOCAB',
              `The word ${JSON.stringify(word)} at position ${position} is not in this package's ${path.basename(jsonName)} and the tokenizer has no unknown token to stand for it. Rephrase without it, or send prompt ids.`,
              { word, position, tokenizerVocabSize: vocabSize, modelVocabSize },
            );
          }
          id = unk.id;
        }
        ids.push(id);
      }
      if (addSpecialTokens && addBosToken && bos !== undefined && ids[0] !== bos.id) ids.unshift(bos.id);
      const bad = ids.findIndex((id) => id >= modelVocabSize);
      if (bad >= 0) {
        const id = ids[bad] as number;
        const count = ids.filter((x) => x >= modelVocabSize).length;
        throw outOfVocab(describeToken(id, bad), id, bad, count - 1);
      }
      return ids;
    },
    close: () => offThread?.close(),
    decode,
    idToToken: (id) => lib.id_to_token(id),
    tokenPiece,
    tokenToId: (token) => lib.token_to_id(token),
    isSpecial: (id) => specialIds.has(id),
    validateIds(ids) {
      for (const [position, id] of ids.entries()) {
        if (!Number.isInteger(id) || id < 0) {
          throw new KvdeskError(
            'BAD_REQUEST',
            `Prompt id ${id} at position ${position} is not a token id: ids are integers from 0 to ${modelVocabSize - 1}.`,
            { id, position, modelVocabSize },
          );
        }
        if (id >= modelVocabSize) throw outOfVocab(`Prompt id ${id} at position ${position}`, id, position);
      }
    },
  };
}

const WELL_KNOWN: Record<keyof SpecialTokens, string[]> = {
  bos: ['<s>', '<bos>', '<|begin_of_text|>', '<|startoftext|>', '[BOS]'],
  eos: ['</s>', '<eos>', '<|end_of_text|>', '<|endoftext|>', '[EOS]'],
  pad: ['<pad>', '[PAD]', '<|pad|>', '<|padding|>'],
  unk: ['<unk>', '[UNK]', '<|unk|>'],
};

function resolveSpecial(
  lib: Tokenizer,
  role: keyof SpecialTokens,
  fromSpec: string | undefined,
  fromFiles: Array<string | undefined>,
  warnings: string[],
): SpecialToken | undefined {
  if (fromSpec !== undefined) {
    const id = lib.token_to_id(fromSpec);
    if (id !== undefined) return { token: fromSpec, id };
    warnings.push(
      `The package names ${JSON.stringify(fromSpec)} as its ${role} token, but tokenizer.json has no such token.`,
    );
  }
  for (const token of fromFiles) {
    if (token === undefined) continue;
    const id = lib.token_to_id(token);
    if (id !== undefined) return { token, id };
  }
  return undefined;
}

function configToken(value: string | { content: string } | null | undefined): string | undefined {
  if (value === null || value === undefined) return undefined;
  return typeof value === 'string' ? value : value.content;
}

/**
 * Special tokens a TemplateProcessing post-processor puts around a single sequence: the one before
 * `$A` is the BOS the tokenizer adds, the one after it the EOS.
 */
function templateSpecialTokens(postProcessor: unknown): { first?: string; last?: string; ids: number[] } {
  const ids: number[] = [];
  let first: string | undefined;
  let last: string | undefined;
  const visit = (node: unknown): void => {
    if (!isRecord(node)) return;
    if (node.type === 'Sequence' && Array.isArray(node.processors)) {
      for (const p of node.processors) visit(p);
      return;
    }
    if (node.type !== 'TemplateProcessing') return;
    if (isRecord(node.special_tokens)) {
      for (const entry of Object.values(node.special_tokens)) {
        if (isRecord(entry) && Array.isArray(entry.ids)) {
          for (const id of entry.ids) if (typeof id === 'number') ids.push(id);
        }
      }
    }
    if (!Array.isArray(node.single)) return;
    let seenSequence = false;
    for (const item of node.single) {
      if (!isRecord(item)) continue;
      if ('Sequence' in item) seenSequence = true;
      const special = isRecord(item.SpecialToken) ? item.SpecialToken.id : undefined;
      if (typeof special !== 'string') continue;
      if (!seenSequence) first ??= special;
      else last = special;
    }
  };
  visit(postProcessor);
  const out: { first?: string; last?: string; ids: number[] } = { ids };
  if (first !== undefined) out.first = first;
  if (last !== undefined) out.last = last;
  return out;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The `type`s of a tokenizer.json decoder, looking into a Sequence's decoders. */
function decoderTypes(decoder: unknown): Set<string> {
  const types = new Set<string>();
  const visit = (d: unknown): void => {
    if (!d || typeof d !== 'object') return;
    const { type, decoders } = d as { type?: unknown; decoders?: unknown };
    if (typeof type === 'string') types.add(type);
    if (Array.isArray(decoders)) for (const inner of decoders) visit(inner);
  };
  visit(decoder);
  return types;
}

/**
 * GPT-2's byte-level alphabet, reversed: each of the 256 bytes is written as one printable character
 * (printable Latin-1 bytes as themselves, the others as U+0100 onwards, in byte order).
 */
const BYTE_OF_CHAR: ReadonlyMap<number, number> = (() => {
  const map = new Map<number, number>();
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map.set(printable ? b : next++, b);
  }
  return map;
})();

/** The bytes a byte-level token stands for; undefined when it holds a character outside the alphabet (an added token). */
function byteLevelBytes(token: string): number[] | undefined {
  const bytes: number[] = [];
  for (const ch of token) {
    const b = BYTE_OF_CHAR.get(ch.codePointAt(0) as number);
    if (b === undefined) return undefined;
    bytes.push(b);
  }
  return bytes;
}

/**
 * How much text one token covers at most, for {@link TextTokenizer.fewestTokens}: `perToken` bytes of the text (a
 * byte-level vocabulary without a normalizer), or code points of it after a normalizer that shrinks the text's code
 * points at most `shrink` times (Unicode composition joins at most 4 into one). Undefined where no true bound is known:
 * a token that may stand for any run of text (an unknown word's `<unk>`, fused unknowns, an added token that takes
 * in the spaces beside it), or parts that drop text (whitespace-splitting pre-tokenizers, accent stripping, Strip,
 * Replace by a pattern, a Split that removes what it matches).
 */
function tokenLengthBound(
  json: TokenizerJson,
): { unit: 'bytes' | 'codePoints'; perToken: number; shrink: number } | undefined {
  const model = json.model as {
    type?: unknown;
    vocab: unknown;
    unk_token?: unknown;
    byte_fallback?: unknown;
    fuse_unk?: unknown;
  };
  if (model.type !== 'BPE' || !isRecord(model.vocab)) return undefined;
  const byteLevel = decoderTypes(json.decoder).has('ByteLevel');
  // Unknown text is one `<unk>` a character at the least, unless unknowns are fused (a run of them one token): byte
  // fallback leaves none only where every byte has its `<0xNN>` token.
  const unfused = model.unk_token == null || model.fuse_unk !== true;
  const vocab = model.vocab;
  const everyByte = () =>
    Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`).every(
      (t) => t in vocab,
    );
  const noUnknowns = (model.byte_fallback === true && (unfused || everyByte())) || (byteLevel && unfused);
  if (!noUnknowns) return undefined;
  const shrink = normalizerShrink(json.normalizer);
  if (shrink === undefined || !preTokenizerKeepsText(json.pre_tokenizer)) return undefined;
  let perToken = 1;
  // A vocabulary token's text is what it covers, one character of a byte-level alphabet a byte (a byte-fallback
  // `<0x41>` covers one byte, less than its text): its UTF-16 length is at least the code points and bytes it covers.
  for (const token of Object.keys(model.vocab)) if (token.length > perToken) perToken = token.length;
  for (const t of json.added_tokens ?? []) {
    const { lstrip, rstrip } = t as { lstrip?: unknown; rstrip?: unknown };
    if (lstrip === true || rstrip === true) return undefined;
    perToken = Math.max(perToken, Buffer.byteLength(t.content, 'utf8'));
  }
  if (byteLevel && json.normalizer === null) return { unit: 'bytes', perToken, shrink: 1 };
  return { unit: 'codePoints', perToken, shrink };
}

/** How many times at most a normalizer shrinks a text's code points; undefined: it may drop any of them. */
function normalizerShrink(n: unknown): number | undefined {
  if (n === null || n === undefined) return 1;
  if (!isRecord(n)) return undefined;
  switch (n.type) {
    case 'Sequence': {
      if (!Array.isArray(n.normalizers)) return undefined;
      let shrink = 1;
      for (const inner of n.normalizers) {
        const s = normalizerShrink(inner);
        if (s === undefined) return undefined;
        shrink *= s;
      }
      return shrink;
    }
    case 'Prepend':
    case 'Lowercase':
      return 1;
    case 'NFC':
    case 'NFD':
    case 'NFKC':
    case 'NFKD':
      return 4;
    case 'Replace': {
      // A literal string replaced by one at least as long (SentencePiece's " " → "▁").
      const pattern = isRecord(n.pattern) ? n.pattern.String : undefined;
      if (typeof pattern !== 'string' || typeof n.content !== 'string' || pattern.length === 0) return undefined;
      return codePoints(n.content) >= codePoints(pattern) ? 1 : undefined;
    }
    default:
      return undefined;
  }
}

/** Whether a pre-tokenizer keeps every character of the text (splits it without dropping any). */
function preTokenizerKeepsText(p: unknown): boolean {
  if (p === null || p === undefined) return true;
  if (!isRecord(p)) return false;
  switch (p.type) {
    case 'Sequence':
      return Array.isArray(p.pretokenizers) && p.pretokenizers.every(preTokenizerKeepsText);
    case 'ByteLevel':
    case 'Metaspace':
    case 'Digits':
      return true;
    case 'Split':
    case 'Punctuation':
      return typeof p.behavior !== 'string' || p.behavior.toLowerCase() !== 'removed';
    default:
      return false;
  }
}

/** A string's code points (a surrogate pair is one). */
function codePoints(text: string): number {
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff && i > 0) {
      const before = text.charCodeAt(i - 1);
      if (before >= 0xd800 && before <= 0xdbff) n--;
    }
  }
  return n;
}
