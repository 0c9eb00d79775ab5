import path from 'node:path';
import type {
  DecoderPorts,
  GraphPort,
  GraphVariant,
  KvSizeSource,
  KvSpec,
  ModelSpec,
  PackageLayout,
  SearchDefaults,
} from '../../shared/model-spec';
import { reasoningOf } from '../../shared/reasoning';
import type { ConfigFields } from './config-file';
import { CPU_PROVIDER } from './execution-providers';
import { formatShape, type LoadedGraph, logitsVocab } from './graph';
import { packageError } from './package-error';
import { hfCachePlace, listPackageFiles, type PackageContext, relName } from './package-fs';
import { idSpaceLimit, type TokenIds, type TokenizerFacts, tokenText } from './tokenizer-files';

/**
 * The pad token id `cfg` declares at `field`, or undefined (absent, or negative: older Llama conversions write
 * `"pad_token_id": -1` for none, which is said in a warning).
 */
export function declaredPad(ctx: PackageContext, cfg: ConfigFields, field: string): TokenIds | undefined {
  const id = cfg.tokenId(field);
  if (id === undefined) return undefined;
  if (id === 'none') {
    ctx.warnings.push(
      `${cfg.file}: \`${field}\` is ${String(cfg.get(field))}, which older conversions write for "no padding token": it is read as absent, as if the field were not there.`,
    );
    return undefined;
  }
  return { ids: [id], file: cfg.file, field, declared: true };
}

/** Everything a layout loader works out; finishSpec adds what is the same for every layout. */
export interface SpecParts {
  layout: PackageLayout;
  modelType?: string;
  graph: LoadedGraph;
  ports: DecoderPorts;
  kv: KvSpec;
  numLayers: number;
  bpt: number;
  contextLength: number;
  /** The config file and field that declare contextLength. */
  contextSource: { file: string; field: string };
  vocabSize: number;
  eos: TokenIds;
  bos?: TokenIds;
  pad?: TokenIds;
  tokenizer: TokenizerFacts;
  search: SearchDefaults;
  backends: string[];
  sessionOptions?: Record<string, unknown>;
  graphVariants?: GraphVariant[];
  graphVariant?: string;
}

export { CPU_PROVIDER };

/**
 * The id a folder's name gives a model (its base id): lowercase, letters and digits of any script kept (`模型`,
 * `ünï`), runs of other characters become '-'. Two folders of one name share it: the library tells them apart
 * (`model`, `model-2`: model-library.ts, assignId).
 */
export function slugify(name: string): string {
  const slug = name
    .normalize('NFC')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}._-]+/gu, '-')
    .replace(/^[-.]+|[-.]+$/g, '');
  return slug === '' ? 'model' : slug;
}

/**
 * A spec under the id the library gave it: one that is not its folder's base id (a second folder of that name,
 * `model-2`) says so in its name too, so two folders named alike are told apart wherever models are listed.
 */
export function withModelId<T extends { id: string; displayName: string; root: string }>(spec: T, id: string): T {
  if (spec.id === id) return spec;
  // A Hugging Face cache snapshot goes by its repo's name, not its revision hash.
  const folder = hfCachePlace(spec.root)?.name ?? path.basename(spec.root);
  const displayName = id === slugify(folder) ? folder : `${folder} (${id})`;
  return { ...spec, id, displayName };
}

/**
 * The vocabulary the model scores: the logits output's fixed last dim when the
 * graph declares one (it is what the engine will see), else the config's
 * declared size, else the tokenizer's size. A size far above what the tokenizer
 * has is refused: every request's scores and JSON mode's token table are sized
 * by it, and a vocab_size of 2e9 took the host down.
 */
export function resolveVocab(
  ctx: PackageContext,
  declared: { value: number; file: string; field: string } | undefined,
  logits: GraphPort,
  graph: LoadedGraph,
  tokenizer: Pick<TokenizerFacts, 'size' | 'spec'>,
): number {
  const fromGraph = logitsVocab(logits);
  const tokenizerFile = relName(ctx, tokenizer.spec.tokenizerJson);
  const most = idSpaceLimit(tokenizer.size);
  const far = `far above the ${tokenizer.size} tokens of ${tokenizerFile} (kvdesk takes at most ${most} for it)`;
  if (fromGraph !== undefined && fromGraph > most) {
    throw packageError(
      `${graph.file}: output "${logits.name}" scores ${fromGraph} tokens, ${far}. Check that ${tokenizerFile} belongs to this model, or re-export the graph.`,
      { file: graph.file, field: `output "${logits.name}"` },
      { vocabSize: fromGraph, tokenizerSize: tokenizer.size },
    );
  }
  if (declared !== undefined) {
    if (fromGraph !== undefined && fromGraph !== declared.value) {
      ctx.warnings.push(
        `${declared.file}: \`${declared.field}\` is ${declared.value} but ${graph.file} output "${logits.name}" scores ${fromGraph} tokens; using ${fromGraph}.`,
      );
      return fromGraph;
    }
    if (declared.value > most) {
      throw packageError(
        `${declared.file}: \`${declared.field}\` is ${declared.value}, ${far}, and ${graph.file} leaves it open (output "${logits.name}" ${formatShape(logits.shape)}). ` +
          `Write the model's real vocabulary size there (the rows of its embedding: the tokenizer's size, sometimes rounded up), or remove the field to use ${tokenizerFile}'s ${tokenizer.size}.`,
        { file: declared.file, field: declared.field },
        { vocabSize: declared.value, tokenizerSize: tokenizer.size },
      );
    }
    return declared.value;
  }
  if (fromGraph !== undefined) return fromGraph;
  ctx.warnings.push(
    `Neither the package config nor ${graph.file} (output "${logits.name}" ${JSON.stringify(logits.shape)}) states the vocabulary size; using ${tokenizerFile}'s ${tokenizer.size}.`,
  );
  return tokenizer.size;
}

/**
 * Token ids must be inside the vocabulary. An id a config field declares is a
 * package error (the field is wrong); an id only looked up in tokenizer files is
 * a warning, since a tokenizer larger than the model is legal (the tokenizer
 * refuses such ids at encode time) and the package still runs.
 */
function checkIdsInVocab(ctx: PackageContext, kind: string, ids: TokenIds | undefined, vocabSize: number): void {
  if (ids === undefined) return;
  const outside = ids.ids.filter((id) => id >= vocabSize);
  if (outside.length === 0) return;
  const list = outside.join(', ');
  if (ids.declared) {
    throw packageError(
      `${ids.file}: \`${ids.field}\` is ${list}, outside the model's vocabulary of ${vocabSize} tokens (valid ids 0..${vocabSize - 1}). ` +
        'Fix the token id (or the vocabulary size) in the package config.',
      { file: ids.file, field: ids.field },
      { ids: outside, vocabSize },
    );
  }
  ctx.warnings.push(
    `${kind} token id ${list} (from ${ids.file} ${ids.field}) is outside the model's vocabulary of ${vocabSize}; the model can never produce it${kind === 'eos' ? ', so generation ends only at the token limit' : ''}.`,
  );
}

/**
 * A vocabulary a few ids larger than the tokenizer, and a multiple of 16, is an embedding padded for speed
 * (Qwen2.5 scores 151936 ids for 151665 tokens, Phi-3 32064 for 32011, GPT-J 50400 and OPT 50272): those ids are
 * never trained to win.
 */
function looksPadded(vocabSize: number, missing: number): boolean {
  return vocabSize % 16 === 0 && missing <= vocabSize / 32;
}

/** The runs of ids in [0, end) that `known` lacks, as [first, last] pairs. */
function idHoles(known: ReadonlySet<number>, end: number): Array<[number, number]> {
  const holes: Array<[number, number]> = [];
  for (let id = 0; id < end; id++) {
    if (known.has(id)) continue;
    const last = holes[holes.length - 1];
    if (last && last[1] === id - 1) last[1] = id;
    else holes.push([id, id]);
  }
  return holes;
}

/** `<|im_start|>`, `<|eot_id|>`: how most chat templates write their special tokens. */
const BAR_TOKEN = /<\|[^\s|<>]{1,64}\|>/g;

/** What the warning of special tokens tokenizer.json lacks says of the text that holds them (checkTokenizerCovers). */
const ENCODED_PLAIN = 'is encoded as plain characters, so the model does not see';

/**
 * The warning that tokenizer.json lacks tokens the chat template or tokenizer_config.json writes: it is of text
 * encoded, so a prompt given as token ids (nothing rendered, nothing encoded) has no use for it.
 */
export function isTemplateTokenWarning(warning: string): boolean {
  return warning.includes(ENCODED_PLAIN);
}

/**
 * Warns when tokenizer.json cannot write every token the model may emit (it is smaller than the vocabulary,
 * beyond padding), and when it has no token for a special token the chat template writes or
 * tokenizer_config.json declares: such text is encoded as plain characters, so the model does not see its
 * markers. (An eos_token it lacks is refused where tokenizer_config.json is read.)
 */
function checkTokenizerCovers(ctx: PackageContext, tokenizer: TokenizerFacts, vocabSize: number): void {
  const file = relName(ctx, tokenizer.spec.tokenizerJson);
  const missing = vocabSize - tokenizer.size;
  if (missing > 0 && !looksPadded(vocabSize, missing)) {
    ctx.warnings.push(
      `${file} knows ${tokenizer.size} tokens but the model scores ${vocabSize}: ids ${tokenizer.size}..${vocabSize - 1} have no text, so a reply that samples one shows nothing for it. Check that ${file} belongs to this model.`,
    );
  }
  // Ids below its highest that it gives no token (a vocabulary cut short, its added tokens still at the end): the
  // text that needs them is lost from prompts, and replies that sample them show nothing. A few are let be.
  const holes = idHoles(tokenizer.known, Math.min(tokenizer.size, vocabSize));
  const count = holes.reduce((n, [a, b]) => n + b - a + 1, 0);
  if (count > Math.max(16, vocabSize / 1000)) {
    const shown = holes.slice(0, 3).map(([a, b]) => (a === b ? `${a}` : `${a}..${b}`));
    ctx.warnings.push(
      `${file} has no token for ${count} of the ids below its highest (ids ${shown.join(', ')}${holes.length > 3 ? ', …' : ''}): text that needs them is dropped from prompts, and a reply that samples one shows nothing for it. Check that ${file} belongs to this model, whole.`,
    );
  }
  const fromTemplate = new Set(tokenizer.chatTemplate?.match(BAR_TOKEN) ?? []);
  const declared = new Set<string>();
  const cfg = tokenizer.tokenizerConfig?.data;
  if (cfg !== undefined) {
    const decoder = cfg.added_tokens_decoder;
    const entries: unknown[] = [
      cfg.bos_token,
      cfg.pad_token,
      cfg.unk_token,
      ...(decoder !== null && typeof decoder === 'object' && !Array.isArray(decoder) ? Object.values(decoder) : []),
      ...(Array.isArray(cfg.additional_special_tokens) ? cfg.additional_special_tokens : []),
    ];
    for (const entry of entries) {
      const t = tokenText(entry);
      if (t !== undefined) declared.add(t);
    }
  }
  const lacking = [...new Set([...fromTemplate, ...declared])].filter((t) => tokenizer.idOf(t) === undefined);
  if (lacking.length === 0) return;
  const inTemplate = lacking.some((t) => fromTemplate.has(t));
  const inConfig = lacking.some((t) => declared.has(t));
  const by = [
    inTemplate ? 'the chat template writes' : undefined,
    inConfig ? `${tokenizer.tokenizerConfig?.file ?? 'tokenizer_config.json'} declares` : undefined,
  ]
    .filter((x) => x !== undefined)
    .join(' or ');
  const shown = lacking.slice(0, 8).join(', ') + (lacking.length > 8 ? `, … (${lacking.length} in all)` : '');
  ctx.warnings.push(
    `${file} has no token for ${shown}, which ${by}: text holding ${lacking.length === 1 ? 'it' : 'them'} ${ENCODED_PLAIN} ${lacking.length === 1 ? 'it' : 'them'} as the special ${lacking.length === 1 ? 'token' : 'tokens'} it was trained on. Use the ${file} saved with this model (its added_tokens hold them).`,
  );
}

/** Reads HF-named sampling defaults (generation_config.json, genai `search`) under `prefix`. */
export function readSearchDefaults(fields: ConfigFields, prefix: string): SearchDefaults {
  const at = (name: string): string => (prefix === '' ? name : `${prefix}.${name}`);
  const search: SearchDefaults = {};
  const doSample = fields.bool(at('do_sample'));
  if (doSample !== undefined) search.doSample = doSample;
  const temperature = fields.num(at('temperature'), 0);
  if (temperature !== undefined) search.temperature = temperature;
  const topK = fields.int(at('top_k'), 0);
  if (topK !== undefined) search.topK = topK;
  const topP = fields.num(at('top_p'), 0, 1);
  if (topP !== undefined) search.topP = topP;
  const minP = fields.num(at('min_p'), 0, 1);
  if (minP !== undefined) search.minP = minP;
  const repetitionPenalty = fields.num(at('repetition_penalty'), 0);
  if (repetitionPenalty !== undefined) search.repetitionPenalty = repetitionPenalty;
  const maxNewTokens = fields.int(at('max_new_tokens'), 1);
  if (maxNewTokens !== undefined) search.maxNewTokens = maxNewTokens;
  return search;
}

/** Adds the parts every layout shares (identity, files, id range checks) and returns the finished spec. */
export async function finishSpec(ctx: PackageContext, parts: SpecParts): Promise<ModelSpec> {
  checkIdsInVocab(ctx, 'eos', parts.eos, parts.vocabSize);
  checkIdsInVocab(ctx, 'bos', parts.bos, parts.vocabSize);
  checkIdsInVocab(ctx, 'pad', parts.pad, parts.vocabSize);
  if (parts.tokenizer.size > parts.vocabSize) {
    ctx.warnings.push(
      `tokenizer.json knows ${parts.tokenizer.size} tokens but the model's vocabulary is ${parts.vocabSize}: text that encodes to an id ≥ ${parts.vocabSize} is refused when it is tokenized.`,
    );
  }
  checkTokenizerCovers(ctx, parts.tokenizer, parts.vocabSize);
  const name = ctx.hfRepoName ?? path.basename(ctx.root);
  const spec: ModelSpec = {
    id: slugify(name),
    displayName: name,
    layout: parts.layout,
    root: ctx.root,
    files: await listPackageFiles(ctx),
    weightsBytes: parts.graph.weightsBytes,
    graphPath: parts.graph.path,
    ports: parts.ports,
    kv: parts.kv,
    numLayers: parts.numLayers,
    bpt: parts.bpt,
    contextLength: parts.contextLength,
    contextSource: parts.contextSource,
    vocabSize: parts.vocabSize,
    eosTokenIds: [...new Set(parts.eos.ids)],
    tokenizer: parts.tokenizer.spec,
    search: parts.search,
    backends: [...new Set([CPU_PROVIDER, ...parts.backends])],
    warnings: ctx.warnings,
  };
  if (parts.modelType !== undefined) spec.modelType = parts.modelType;
  if (parts.bos !== undefined && parts.bos.ids[0] !== undefined) spec.bosTokenId = parts.bos.ids[0];
  if (parts.pad !== undefined && parts.pad.ids[0] !== undefined) spec.padTokenId = parts.pad.ids[0];
  if (parts.tokenizer.chatTemplate !== undefined) {
    spec.chatTemplate = parts.tokenizer.chatTemplate;
    if (parts.tokenizer.chatTemplateSource !== undefined) spec.chatTemplateSource = parts.tokenizer.chatTemplateSource;
  }
  const reasoning = reasoningOf(parts.tokenizer.chatTemplate);
  if (reasoning) spec.reasoning = reasoning;
  if (parts.sessionOptions !== undefined) spec.sessionOptions = parts.sessionOptions;
  if (parts.graphVariants !== undefined) spec.graphVariants = parts.graphVariants;
  if (parts.graphVariant !== undefined) spec.graphVariant = parts.graphVariant;
  return spec;
}

/** A required field that is missing: the error names the field and what to write. */
export function missingField(file: string, field: string, fix: string): Error {
  return packageError(`${file}: \`${field}\` is missing. ${fix}`, { file, field });
}

/** Where a config sets a KV size: `field`, or, where the config lacks it, as `otherwise` reads it. */
export function readFrom(cfg: ConfigFields, field: string, otherwise: string): KvSizeSource {
  return cfg.has(field) ? { file: cfg.file, field } : { file: cfg.file, field, readFrom: otherwise };
}

/** Drops undefined entries so optional fields stay absent rather than present-and-undefined. */
export function definedNumbers<T extends Record<string, number | undefined>>(values: T): { [K in keyof T]?: number } {
  const out: { [K in keyof T]?: number } = {};
  for (const [k, v] of Object.entries(values)) if (v !== undefined) (out as Record<string, number>)[k] = v;
  return out;
}
