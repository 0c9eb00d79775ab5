import path from 'node:path';
import type { TokenizerSpec } from '../../shared/model-spec';
import {
  CONFIG_MAX_BYTES,
  type ConfigDoc,
  ConfigFields,
  describeValue,
  parseJsonText,
  readConfigFile,
  readLimitedText,
} from './config-file';
import { packageError } from './package-error';
import { findFile, listFileNames, type PackageContext, relName } from './package-fs';
import { checkTokenizerConfig, checkTokenizerJson, fieldKey, isRecord } from './tokenizer-check';

/** tokenizer.json carries the whole vocabulary (Gemma's is ~33 MB); this only guards against absurd files. */
export const TOKENIZER_MAX_BYTES = 256 * 1024 * 1024;

export type SpecialKind = 'bos' | 'eos' | 'pad' | 'unk';

/** Conventional special-token spellings, tried in order when no config names the token. */
const CONVENTIONAL: Record<SpecialKind, string[]> = {
  eos: ['<eos>', '</s>', '<|endoftext|>', '<|end_of_text|>', '<|eot_id|>', '<|im_end|>', '[SEP]'],
  bos: ['<bos>', '<s>', '<|begin_of_text|>', '<|startoftext|>', '<|endoftext|>', '[CLS]'],
  pad: ['<pad>', '<|pad|>', '[PAD]', '<|padding|>'],
  unk: ['<unk>', '<|unk|>', '[UNK]'],
};

/** A special token id with where it came from, so range checks can say which field to fix. */
export interface TokenIds {
  ids: number[];
  file: string;
  field: string;
  /** True when a config field declares the id; false when it was looked up from tokenizer files. */
  declared: boolean;
}

/** What the tokenizer files say, read once and shared by every layout. */
export interface TokenizerFacts {
  spec: TokenizerSpec;
  /** Highest token id in tokenizer.json plus one (vocabulary and added tokens). */
  size: number;
  /** Every id tokenizer.json gives a token (vocabulary and added tokens). */
  known: ReadonlySet<number>;
  tokenizerConfig: ConfigDoc | undefined;
  chatTemplate: string | undefined;
  /** The file the chat template was read from, for messages: `chat_template.jinja`, `tokenizer_config.json (field chat_template)`. */
  chatTemplateSource?: string;
  /** Id of a token string in tokenizer.json (added tokens, then the model vocabulary). */
  idOf(token: string): number | undefined;
  /**
   * The id of a special token per tokenizer files: tokenizer_config's `<kind>_token`
   * first, then a conventionally named token in tokenizer.json.
   */
  special(kind: SpecialKind): TokenIds | undefined;
}

/**
 * A TemplateProcessing post-processor (alone, or in a Sequence's `processors`) adds the special tokens its `single`
 * and `pair` name, by their `special_tokens` entry's ids: a name without an entry, or an id the file gives no
 * token, failed every prompt with a refusal that blamed the prompt's words.
 */
function checkTemplateProcessing(pp: unknown, field: string, known: ReadonlySet<number>, file: string): void {
  if (!isRecord(pp)) return;
  if (pp.type === 'Sequence' && Array.isArray(pp.processors)) {
    for (const [i, inner] of pp.processors.entries())
      checkTemplateProcessing(inner, `${field}.processors[${i}]`, known, file);
    return;
  }
  if (pp.type !== 'TemplateProcessing') return;
  const specials = isRecord(pp.special_tokens) ? pp.special_tokens : {};
  const fix = `Fix ${field} (or replace ${file} with the one saved with this model).`;
  for (const [name, entry] of Object.entries(specials)) {
    const list = isRecord(entry) ? entry.ids : undefined;
    if (!Array.isArray(list)) continue;
    for (const [i, id] of list.entries()) {
      if (typeof id === 'number' && known.has(id)) continue;
      const at = `${fieldKey(`${field}.special_tokens`, name)}.ids[${i}]`;
      throw packageError(`${file}: \`${at}\` is ${JSON.stringify(id)}, an id ${file} gives no token. ${fix}`, {
        file,
        field: at,
      });
    }
  }
  // `pair` is read only for a pair of texts, which kvdesk never encodes.
  for (const part of ['single'] as const) {
    const pieces = pp[part];
    if (!Array.isArray(pieces)) continue;
    for (const [i, piece] of pieces.entries()) {
      const special = isRecord(piece) && isRecord(piece.SpecialToken) ? piece.SpecialToken.id : undefined;
      if (typeof special !== 'string' || Object.hasOwn(specials, special)) continue;
      const at = `${field}.${part}[${i}].SpecialToken.id`;
      throw packageError(
        `${file}: \`${at}\` is ${JSON.stringify(special)}, which ${field}.special_tokens does not define (so no prompt could be encoded). ${fix}`,
        { file, field: at },
      );
    }
  }
}

/**
 * The largest id space a tokenizer of `tokens` distinct ids is taken to have: twice its tokens and 65536 more. Real
 * ones are dense (added tokens follow the vocabulary; a model's vocabulary pads a few hundred ids at most), so only a
 * stray id (2000000000 in a file of 50000 tokens) or a vocabulary size with a typo goes past it.
 */
export function idSpaceLimit(tokens: number): number {
  return 2 * tokens + 65536;
}

/** A special token's text as tokenizer_config writes it: a plain string or an AddedToken object `{ content }`. */
export function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const content = (value as { content?: unknown }).content;
    if (typeof content === 'string') return content;
  }
  return undefined;
}

/** A special token field of tokenizer_config; one that is neither form is refused, naming the field. */
function tokenString(fields: ConfigFields, field: string): string | undefined {
  const value = fields.get(field);
  if (value === undefined) return undefined;
  return (
    tokenText(value) ??
    fields.fail(field, 'is neither a string nor an object with `content`', 'Write the token text, e.g. "</s>".')
  );
}

/**
 * Reads tokenizer.json (required), tokenizer_config.json and a chat template
 * (`chat_template.jinja`, tokenizer_config `chat_template`, or `chat_template.json`)
 * from `dir`: the layout folder, or a tokenizer folder a config names
 * (genai_config `tokenizer_dir`, e.g. a shared asset of an ORT package).
 */
export async function readTokenizerFiles(ctx: PackageContext, dir: string = ctx.dir): Promise<TokenizerFacts> {
  const tokenizerPath = await findFile(ctx, 'tokenizer.json', dir);
  if (tokenizerPath === undefined) {
    const present = await listFileNames(dir);
    const slow = ['vocab.json', 'merges.txt', 'tokenizer.model', 'vocab.txt', 'spiece.model'].filter((n) =>
      present.includes(n),
    );
    const file = relName(ctx, path.join(dir, 'tokenizer.json'));
    throw packageError(
      `No tokenizer: ${file} is missing. kvdesk needs a Hugging Face tokenizer.json next to the model` +
        (slow.length > 0 ? ` (found only ${slow.join(', ')}, the files of a "slow" tokenizer)` : '') +
        '. Save one with transformers: AutoTokenizer.from_pretrained(...).save_pretrained(folder), and copy tokenizer.json into the package.',
      { file },
    );
  }
  const file = relName(ctx, tokenizerPath);
  const json = parseJsonText(await readLimitedText(ctx, tokenizerPath, TOKENIZER_MAX_BYTES, 'tokenizer files'), file);
  // `typeof null` is 'object', and an array is one too: neither is a tokenizer model.
  if (!isRecord(json) || !isRecord(json.model)) {
    throw packageError(
      `${file} is not a Hugging Face tokenizer.json (it has no \`model\` object${isRecord(json) && 'model' in json ? `: \`model\` is ${describeValue(json.model)}` : ''}). Replace it with the tokenizer.json saved by the tokenizers library.`,
      { file, field: 'model' },
    );
  }
  checkTokenizerJson(json, file);
  const tok = json as {
    model: { vocab: unknown; unk_token?: unknown };
    added_tokens?: Array<{ id: number; content: string; special?: boolean }> | null;
    post_processor?: unknown;
  };
  const ids = new Map<string, number>();
  const specialIds = new Map<string, number>();
  // The highest id and the field that gives it, and every id given: a tokenizer's ids run from 0 with few gaps.
  let size = 0;
  let highest = { id: -1, field: 'model.vocab' };
  const given = new Set<number>();
  const note = (id: number, field: string): void => {
    given.add(id);
    size = Math.max(size, id + 1);
    if (id > highest.id) highest = { id, field };
  };
  const vocab = tok.model.vocab;
  if (Array.isArray(vocab)) {
    // Unigram: [[piece, score], ...], the id is the position.
    vocab.forEach((entry: [string, number], i) => {
      if (!ids.has(entry[0])) ids.set(entry[0], i);
      given.add(i);
    });
    size = vocab.length;
    highest = { id: size - 1, field: `model.vocab[${size - 1}]` };
  } else {
    for (const [piece, id] of Object.entries(vocab as Record<string, number>)) {
      ids.set(piece, id);
      note(id, fieldKey('model.vocab', piece));
    }
  }
  for (const [i, added] of (tok.added_tokens ?? []).entries()) {
    ids.set(added.content, added.id);
    if (added.special === true) specialIds.set(added.content, added.id);
    note(added.id, `added_tokens[${i}].id`);
  }
  // TemplateProcessing post-processors name the tokens they insert, with ids.
  const pp = tok.post_processor as { special_tokens?: Record<string, { ids?: unknown }> } | null | undefined;
  if (pp?.special_tokens && typeof pp.special_tokens === 'object') {
    for (const [name, entry] of Object.entries(pp.special_tokens)) {
      const first = Array.isArray(entry?.ids) ? entry.ids[0] : undefined;
      if (typeof first === 'number' && !specialIds.has(name)) specialIds.set(name, first);
    }
  }
  if (size === 0) {
    throw packageError(`${file} has an empty vocabulary. Replace it with the model's real tokenizer.json.`, {
      file,
      field: 'model.vocab',
    });
  }
  // Everything sized by the vocabulary (the model's, when it comes from here; every id's bytes for JSON mode) would
  // be as large as one stray id: 2e9 of them take the host down.
  const most = idSpaceLimit(given.size);
  if (size > most) {
    throw packageError(
      `${file}: \`${highest.field}\` is ${highest.id}, far past the ${given.size} tokens the file holds (a tokenizer's ids run from 0 with few gaps; kvdesk takes ids up to ${most - 1} for this many tokens). Fix that id, or replace ${file} with the one saved with this model.`,
      { file, field: highest.field },
      { id: highest.id, tokens: given.size },
    );
  }
  checkTemplateProcessing(tok.post_processor, 'post_processor', given, file);
  const idOf = (token: string): number | undefined => specialIds.get(token) ?? ids.get(token);

  const configPath = await findFile(ctx, 'tokenizer_config.json', dir);
  const tokenizerConfig = configPath === undefined ? undefined : await readConfigFile(ctx, configPath);
  if (tokenizerConfig !== undefined) checkTokenizerConfig(tokenizerConfig.data, tokenizerConfig.file);
  const cfg = tokenizerConfig === undefined ? undefined : new ConfigFields(tokenizerConfig);

  const spec: TokenizerSpec = { tokenizerJson: tokenizerPath };
  if (configPath !== undefined) spec.tokenizerConfig = configPath;
  // null means the config says explicitly that there is no such token (Llama's `"pad_token": null`).
  const configured: Partial<Record<SpecialKind, string | null>> = {};
  for (const kind of ['bos', 'eos', 'pad', 'unk'] as const) {
    if (tokenizerConfig?.data[`${kind}_token`] === null) configured[kind] = null;
    const text = cfg === undefined ? undefined : tokenString(cfg, `${kind}_token`);
    if (text !== undefined) configured[kind] = text;
  }
  const special = (kind: SpecialKind): TokenIds | undefined => {
    const text = configured[kind];
    if (text === null) return undefined;
    if (text !== undefined && cfg !== undefined) {
      const id = idOf(text);
      if (id === undefined) {
        return cfg.fail(
          `${kind}_token`,
          `is ${JSON.stringify(text)}, which tokenizer.json does not contain`,
          'Fix the token text or use the matching tokenizer.json.',
        );
      }
      return { ids: [id], file: cfg.file, field: `${kind}_token`, declared: false };
    }
    for (const name of CONVENTIONAL[kind]) {
      const id = specialIds.get(name) ?? ids.get(name);
      if (id !== undefined) return { ids: [id], file, field: `token "${name}"`, declared: false };
    }
    if (kind === 'unk' && typeof tok.model.unk_token === 'string') {
      const id = idOf(tok.model.unk_token);
      if (id !== undefined) return { ids: [id], file, field: 'model.unk_token', declared: false };
    }
    return undefined;
  };
  // The eos token is checked even when a config gives the eos ids: it is what the chat template ends each turn
  // with, and a tokenizer.json without it encodes that as plain text, which the model never learnt to stop at.
  if (typeof configured.eos === 'string') special('eos');
  // Token strings in the spec: what the config says, else the conventional token found in tokenizer.json.
  for (const kind of ['bos', 'eos', 'pad', 'unk'] as const) {
    let text = configured[kind];
    if (text === null) continue;
    if (text === undefined) {
      text = CONVENTIONAL[kind].find((name) => ids.has(name) || specialIds.has(name));
      if (text === undefined && kind === 'unk' && typeof tok.model.unk_token === 'string') text = tok.model.unk_token;
    }
    if (text !== undefined) spec[`${kind}Token`] = text;
  }
  const addBos = cfg?.bool('add_bos_token');
  if (addBos !== undefined) spec.addBosToken = addBos;

  const template = await readChatTemplate(ctx, cfg, dir);
  return {
    spec,
    size,
    known: given,
    tokenizerConfig,
    chatTemplate: template?.text,
    ...(template === undefined ? {} : { chatTemplateSource: template.source }),
    idOf,
    special,
  };
}

/** A chat template and the file it was read from, as messages name it (`chat_template.jinja`, `tokenizer_config.json (field chat_template)`). */
interface FoundTemplate {
  text: string;
  source: string;
}

async function readChatTemplate(
  ctx: PackageContext,
  cfg: ConfigFields | undefined,
  dir: string,
): Promise<FoundTemplate | undefined> {
  const jinja = await findFile(ctx, 'chat_template.jinja', dir);
  // transformers writes chat_template.jinja in preference to the config field, so it wins.
  if (jinja !== undefined) {
    return { text: await readLimitedText(ctx, jinja, CONFIG_MAX_BYTES, 'chat templates'), source: relName(ctx, jinja) };
  }
  const fromConfig = cfg === undefined ? undefined : templateFrom(ctx, cfg);
  if (fromConfig !== undefined) return fromConfig;
  const jsonPath = await findFile(ctx, 'chat_template.json', dir);
  if (jsonPath !== undefined) return templateFrom(ctx, new ConfigFields(await readConfigFile(ctx, jsonPath)));
  return undefined;
}

/** `chat_template`: a string, or a list of `{ name, template }` of which kvdesk uses 'default'. */
function templateFrom(ctx: PackageContext, cfg: ConfigFields): FoundTemplate | undefined {
  const value = cfg.get('chat_template');
  if (value === undefined) return undefined;
  if (typeof value === 'string') return { text: value, source: `${cfg.file} (field chat_template)` };
  if (Array.isArray(value)) {
    const names: string[] = [];
    for (const [i, entry] of value.entries()) {
      const e = entry as { name?: unknown; template?: unknown } | null;
      if (e === null || typeof e !== 'object' || typeof e.name !== 'string' || typeof e.template !== 'string') {
        cfg.fail(
          `chat_template[${i}]`,
          'is not an object with string `name` and `template`',
          'Write each entry as { "name": ..., "template": ... }.',
        );
      }
      if (e.name === 'default')
        return { text: e.template, source: `${cfg.file} (field chat_template[${i}], "default")` };
      names.push(e.name);
    }
    ctx.warnings.push(
      `${cfg.file}: \`chat_template\` lists the templates ${names.join(', ')} but none named "default"; chat formatting is off until one is chosen.`,
    );
    return undefined;
  }
  return cfg.fail(
    'chat_template',
    'is neither a string nor a list of named templates',
    'Write the Jinja template as a string.',
  );
}
