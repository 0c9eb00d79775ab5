/**
 * The parts of tokenizer.json and tokenizer_config.json that the tokenizer library (@huggingface/tokenizers, which
 * the host loads after the package is read) needs in a given form. Packages may not import that library
 * (ARCHITECTURE.md), so the forms it takes are checked here: a file it would refuse is refused while the package is
 * read, naming the file and the field, and never gets as far as a load that fails with the library's own words.
 */
import { describeValue } from './config-file';
import { packageError } from './package-error';
import { groupDepth, MAX_GROUP_DEPTH, nestedRepeat, overlappingRepeat } from './regex-nesting';

/** Tokenizer models the library builds (WordLevel is read by its fallback model). */
const MODEL_TYPES = ['BPE', 'WordPiece', 'WordLevel', 'Unigram'] as const;

/** Component types the library builds, per component, and the key a `Sequence` of them lists them under. */
const COMPONENTS = {
  normalizer: {
    list: 'normalizers',
    types: [
      'BertNormalizer',
      'Precompiled',
      'Sequence',
      'Replace',
      'NFC',
      'NFD',
      'NFKC',
      'NFKD',
      'Strip',
      'StripAccents',
      'Lowercase',
      'Prepend',
    ],
  },
  pre_tokenizer: {
    list: 'pretokenizers',
    types: [
      'BertPreTokenizer',
      'Sequence',
      'Whitespace',
      'WhitespaceSplit',
      'Metaspace',
      'ByteLevel',
      'Split',
      'Punctuation',
      'Digits',
      'Replace',
      'FixedLength',
    ],
  },
  post_processor: {
    list: 'processors',
    types: ['TemplateProcessing', 'ByteLevel', 'BertProcessing', 'RobertaProcessing', 'Sequence'],
  },
  decoder: {
    list: 'decoders',
    types: [
      'ByteLevel',
      'WordPiece',
      'Metaspace',
      'BPEDecoder',
      'CTC',
      'Sequence',
      'Replace',
      'Fuse',
      'Strip',
      'ByteFallback',
    ],
  },
} as const;

/** The component types kvdesk's tokenizer builds (tests check the library against them). */
export const TOKENIZER_COMPONENT_TYPES: Readonly<Record<keyof typeof COMPONENTS, readonly string[]>> = {
  normalizer: COMPONENTS.normalizer.types,
  pre_tokenizer: COMPONENTS.pre_tokenizer.types,
  post_processor: COMPONENTS.post_processor.types,
  decoder: COMPONENTS.decoder.types,
};
export const TOKENIZER_MODEL_TYPES: readonly string[] = MODEL_TYPES;

const REPLACE_TOKENIZER =
  "Replace it with the tokenizer.json saved with this model (by transformers' save_pretrained).";

/** A JSON object (not an array, not null). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Field path of a key: `model.vocab.abc`, or `model.vocab["a b"]` for keys that are not plain names. */
export function fieldKey(parent: string, name: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? `${parent}.${name}` : `${parent}[${JSON.stringify(name)}]`;
}

function fail(file: string, field: string, problem: string, fix: string): never {
  throw packageError(`${file}: \`${field}\` ${problem}. ${fix}`, { file, field });
}

/**
 * Checks a parsed tokenizer.json (already known to be an object whose `model` is an object) against what the
 * tokenizer library builds; throws PACKAGE_INVALID naming `file` and the field.
 */
export function checkTokenizerJson(json: Record<string, unknown>, file: string): void {
  const model = json.model as Record<string, unknown>;
  const type = model.type;
  if (type !== undefined) {
    if (typeof type !== 'string' || !(MODEL_TYPES as readonly string[]).includes(type)) {
      fail(
        file,
        'model.type',
        `is ${describeValue(type)}, which is not a tokenizer model kvdesk can run (it runs ${MODEL_TYPES.join(', ')})`,
        REPLACE_TOKENIZER,
      );
    }
  }
  const vocab = model.vocab;
  const unigram = type === 'Unigram' || (type === undefined && Array.isArray(vocab));
  if (unigram) {
    if (!Array.isArray(vocab)) {
      fail(file, 'model.vocab', `is ${describeValue(vocab)}, not a list of [piece, score] pairs`, REPLACE_TOKENIZER);
    }
    for (const [i, entry] of vocab.entries()) {
      if (!Array.isArray(entry) || typeof entry[0] !== 'string' || typeof entry[1] !== 'number') {
        fail(file, `model.vocab[${i}]`, `is ${describeValue(entry)}, not a [piece, score] pair`, REPLACE_TOKENIZER);
      }
    }
  } else {
    if (!isRecord(vocab)) {
      fail(
        file,
        'model.vocab',
        `is ${describeValue(vocab)}, not an object of tokens and their ids${type === undefined ? ' (or a Unigram list)' : ''}`,
        REPLACE_TOKENIZER,
      );
    }
    for (const [token, id] of Object.entries(vocab)) {
      if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
        fail(
          file,
          fieldKey('model.vocab', token),
          `is ${describeValue(id)}, not a token id (an integer ≥ 0)`,
          REPLACE_TOKENIZER,
        );
      }
    }
  }
  const unk = model.unk_token;
  if (unk !== undefined && unk !== null && typeof unk !== 'string') {
    fail(file, 'model.unk_token', `is ${describeValue(unk)}, not the unknown token's text`, REPLACE_TOKENIZER);
  }
  const bpe = type === 'BPE' || (type === undefined && 'merges' in model && 'continuing_subword_prefix' in model);
  if (bpe) checkMerges(model.merges, file);
  for (const [name, spec] of Object.entries(COMPONENTS)) checkComponent(json[name], name, spec, file);
  checkAddedTokens(json.added_tokens, file);
}

/** BPE merges: `"a b"` strings, or `["a", "b"]` pairs (tokenizers ≥ 0.20), all of one form. */
function checkMerges(merges: unknown, file: string): void {
  if (!Array.isArray(merges)) {
    fail(file, 'model.merges', `is ${describeValue(merges)}, not a list of merges`, REPLACE_TOKENIZER);
  }
  const pairs = Array.isArray(merges[0]);
  for (const [i, merge] of merges.entries()) {
    const ok = pairs
      ? Array.isArray(merge) && merge.length === 2 && merge.every((p) => typeof p === 'string')
      : typeof merge === 'string';
    if (!ok) {
      fail(
        file,
        `model.merges[${i}]`,
        `is ${describeValue(merge)}, not a merge like ${pairs ? '["a", "b"] (the form the first merge has)' : '"a b"'}`,
        REPLACE_TOKENIZER,
      );
    }
  }
}

function checkComponent(
  value: unknown,
  field: string,
  spec: { list: string; types: readonly string[] },
  file: string,
): void {
  if (value === undefined || value === null) return;
  if (!isRecord(value))
    fail(file, field, `is ${describeValue(value)}, not an object with a \`type\``, REPLACE_TOKENIZER);
  const type = value.type;
  if (typeof type !== 'string' || !spec.types.includes(type)) {
    fail(
      file,
      `${field}.type`,
      `is ${describeValue(type)}, which kvdesk's tokenizer cannot build (it builds ${spec.types.join(', ')})`,
      REPLACE_TOKENIZER,
    );
  }
  const pattern = value.pattern;
  if (isRecord(pattern) && typeof pattern.Regex === 'string') {
    const deep = groupDepth(pattern.Regex);
    if (deep.depth > MAX_GROUP_DEPTH) {
      fail(
        file,
        `${field}.pattern.Regex`,
        `nests groups ${deep.depth} deep (from ${JSON.stringify(pattern.Regex.slice(deep.at, deep.at + 40))}); kvdesk reads tokenizer patterns nested at most ${MAX_GROUP_DEPTH} deep`,
        REPLACE_TOKENIZER,
      );
    }
    const at = nestedRepeat(pattern.Regex);
    if (at !== undefined) {
      fail(
        file,
        `${field}.pattern.Regex`,
        `repeats something that has a repeat inside it (${JSON.stringify(pattern.Regex.slice(at, at + 40))}): such a pattern may take hours on some text, holding kvdesk (a regular expression cannot be stopped once it runs)`,
        REPLACE_TOKENIZER,
      );
    }
    const overlap = overlappingRepeat(pattern.Regex);
    if (overlap !== undefined) {
      fail(
        file,
        `${field}.pattern.Regex`,
        `repeats a choice whose alternatives can begin with the same character, or repeats in a row what can match the same characters (${JSON.stringify(pattern.Regex.slice(overlap, overlap + 40))}): a run of such characters splits among them in very many ways, and such a pattern may take hours on some text, holding kvdesk (a regular expression cannot be stopped once it runs)`,
        REPLACE_TOKENIZER,
      );
    }
  }
  if (type !== 'Sequence') return;
  const inner = value[spec.list];
  if (inner === undefined || inner === null) return;
  if (!Array.isArray(inner)) {
    fail(file, `${field}.${spec.list}`, `is ${describeValue(inner)}, not a list`, REPLACE_TOKENIZER);
  }
  for (const [i, item] of inner.entries()) {
    if (item === null) fail(file, `${field}.${spec.list}[${i}]`, 'is null', REPLACE_TOKENIZER);
    checkComponent(item, `${field}.${spec.list}[${i}]`, spec, file);
  }
}

function checkAddedTokens(added: unknown, file: string): void {
  if (added === undefined || added === null) return;
  if (!Array.isArray(added)) fail(file, 'added_tokens', `is ${describeValue(added)}, not a list`, REPLACE_TOKENIZER);
  for (const [i, token] of added.entries()) {
    const field = `added_tokens[${i}]`;
    if (!isRecord(token)) fail(file, field, `is ${describeValue(token)}, not an object`, REPLACE_TOKENIZER);
    const { id, content, special } = token;
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      fail(file, `${field}.id`, `is ${describeValue(id)}, not a token id (an integer ≥ 0)`, REPLACE_TOKENIZER);
    }
    if (typeof content !== 'string') {
      fail(file, `${field}.content`, `is ${describeValue(content)}, not the token's text`, REPLACE_TOKENIZER);
    }
    if (special !== undefined && typeof special !== 'boolean') {
      fail(file, `${field}.special`, `is ${describeValue(special)}, not true or false`, REPLACE_TOKENIZER);
    }
  }
}

const REPLACE_CONFIG =
  "Fix the entry (a token's text, or an object with its `content`), or use the tokenizer_config.json saved with this model.";

/** Checks tokenizer_config.json's token lists the tokenizer reads (`added_tokens_decoder`, `additional_special_tokens`). */
export function checkTokenizerConfig(data: Record<string, unknown>, file: string): void {
  const decoder = data.added_tokens_decoder;
  if (decoder !== undefined && decoder !== null) {
    if (!isRecord(decoder)) {
      fail(
        file,
        'added_tokens_decoder',
        `is ${describeValue(decoder)}, not an object of ids and tokens`,
        REPLACE_CONFIG,
      );
    }
    for (const [id, entry] of Object.entries(decoder)) {
      const field = fieldKey('added_tokens_decoder', id);
      if (!isRecord(entry) || typeof entry.content !== 'string') {
        const problem = isRecord(entry)
          ? `has no \`content\` (the token's text)${entry.content === undefined ? '' : `: it is ${describeValue(entry.content)}`}`
          : `is ${describeValue(entry)}, not an object with the token's \`content\``;
        fail(file, field, problem, REPLACE_CONFIG);
      }
      if (entry.special !== undefined && typeof entry.special !== 'boolean') {
        fail(file, `${field}.special`, `is ${describeValue(entry.special)}, not true or false`, REPLACE_CONFIG);
      }
    }
  }
  const additional = data.additional_special_tokens;
  if (additional !== undefined && additional !== null) {
    if (!Array.isArray(additional)) {
      fail(file, 'additional_special_tokens', `is ${describeValue(additional)}, not a list of tokens`, REPLACE_CONFIG);
    }
    for (const [i, entry] of additional.entries()) {
      if (typeof entry !== 'string' && !(isRecord(entry) && typeof entry.content === 'string')) {
        fail(
          file,
          `additional_special_tokens[${i}]`,
          `is ${describeValue(entry)}, neither a token's text nor an object with its \`content\``,
          REPLACE_CONFIG,
        );
      }
    }
  }
}
