import { promises as fs } from 'node:fs';
import path from 'node:path';
import { KvdeskError } from '../../shared/errors';
import { checkpointMessage, ggufMessage, isCheckpointWeights, isGguf } from '../../shared/foreign-formats';
import {
  cpuVariantRank,
  type DecoderPorts,
  type GraphVariant,
  type KvSpec,
  type ModelSpec,
} from '../../shared/model-spec';
import { ConfigFields, readConfigFile } from './config-file';
import {
  bindOptionalPort,
  bindPort,
  ID_DTYPES,
  inputKind,
  LOGITS_DTYPES,
  type LoadedGraph,
  loadGraph,
  MASK_DTYPES,
  refuseUnboundInputs,
  type UnboundAdvice,
} from './graph';
import { buildDynamicKv, matchKvTemplates } from './kv-geometry';
import type { LoadOptions } from './load-options';
import { packageError } from './package-error';
import { brokenLink, findFile, listFileNames, type PackageContext, relName } from './package-fs';
import {
  declaredPad,
  definedNumbers,
  finishSpec,
  missingField,
  readFrom,
  readSearchDefaults,
  resolveVocab,
} from './spec-assembly';
import { readTokenizerFiles, type TokenIds } from './tokenizer-files';

// model.onnx, model_fp16.onnx, model_q4f16.onnx, model_quantized.onnx, ... (Optimum / transformers.js naming).
const VARIANT_FILE = /^model(?:_([A-Za-z0-9_]+))?\.onnx$/;

/** A graph variant with the absolute path it was found at. */
export interface FoundVariant extends GraphVariant {
  abs: string;
}

/** A graph file that is a symbolic link kvdesk cannot follow (it loops, or leads to nothing), and why. */
export interface UnresolvedVariant {
  name: string;
  path: string;
  error: KvdeskError;
}

/**
 * Graph files of an Optimum package: `onnx/model*.onnx` and `model*.onnx` at the root. A graph that is a symbolic
 * link kvdesk cannot follow is no variant to offer: it is returned apart, with its refusal.
 */
export async function findGraphVariants(
  ctx: PackageContext,
): Promise<{ variants: FoundVariant[]; otherOnnx: string[]; unresolved: UnresolvedVariant[] }> {
  const variants: FoundVariant[] = [];
  const otherOnnx: string[] = [];
  const unresolved: UnresolvedVariant[] = [];
  for (const folder of [path.join(ctx.dir, 'onnx'), ctx.dir]) {
    for (const name of await listFileNames(folder)) {
      if (!name.toLowerCase().endsWith('.onnx')) continue;
      const abs = path.join(folder, name);
      const m = VARIANT_FILE.exec(name);
      if (m === null) {
        otherOnnx.push(relName(ctx, abs));
        continue;
      }
      let found: string | undefined;
      try {
        found = await findFile(ctx, name, folder);
      } catch (err) {
        const error = brokenLink(err);
        if (error === undefined) throw err;
        unresolved.push({ name: m[1] ?? 'fp32', path: relName(ctx, abs), error });
        continue;
      }
      if (found === undefined) continue;
      variants.push({ name: m[1] ?? 'fp32', path: relName(ctx, abs), bytes: (await fs.stat(abs)).size, abs });
    }
  }
  return { variants, otherOnnx, unresolved };
}

/** The graphs `want` (a `--variant`) names: those of that path, else of that name, else of that file name. */
function variantsNamed<V extends { name: string; path: string }>(variants: V[], want: string): V[] {
  return (
    [
      variants.filter((v) => v.path === want),
      variants.filter((v) => v.name === want),
      variants.filter((v) => path.posix.basename(v.path) === want),
    ].find((m) => m.length > 0) ?? []
  );
}

/**
 * A folder with config.json but no ONNX graph that holds a model in another format: a GGUF file (Ollama, LM Studio)
 * or a transformers checkpoint's weights (model.safetensors). Refused saying what it is and how to get the ONNX export.
 */
async function refuseForeignFormat(ctx: PackageContext): Promise<void> {
  const names = (await listFileNames(ctx.dir)).sort();
  const here = { file: relName(ctx, ctx.dir) };
  const gguf = names.filter(isGguf);
  if (gguf.length > 0) throw packageError(ggufMessage('This folder', gguf), here, { candidates: gguf });
  const weights = names.filter(isCheckpointWeights);
  if (weights.length > 0) throw packageError(checkpointMessage('This folder', weights), here, { candidates: weights });
}

function chooseVariant(
  ctx: PackageContext,
  found: { variants: FoundVariant[]; otherOnnx: string[]; unresolved: UnresolvedVariant[] },
  options: LoadOptions,
): FoundVariant {
  const { variants, otherOnnx, unresolved } = found;
  const here = { file: relName(ctx, ctx.dir) };
  const listing = variants.map((v) => `${v.name} (${v.path})`).join(', ');
  // A graph that is a link kvdesk cannot follow: refused when it is the one asked for or the only one; beside
  // others it is left out of the choice, with a warning.
  const want = options.graphVariant;
  if (want !== undefined && variantsNamed(variants, want).length === 0) {
    const [broken] = variantsNamed(unresolved, want);
    if (broken !== undefined) throw broken.error;
  }
  if (variants.length === 0 && unresolved[0] !== undefined) throw unresolved[0].error;
  for (const u of unresolved)
    ctx.warnings.push(`${u.error.message} Until then it is left out of the graphs to choose from.`);
  if (variants.length === 0) {
    throw packageError(
      otherOnnx.length > 0
        ? `No ONNX graph kvdesk can use: it looks for onnx/model.onnx or model.onnx (and model_<variant>.onnx siblings), but found only ${otherOnnx.join(', ')}. ` +
            'Export the model with Optimum as a single decoder with past (model.onnx), or rename the decoder graph.'
        : 'No ONNX graph: the package has neither onnx/model.onnx nor model.onnx. Add the exported decoder graph (with its external weights, if any).',
      here,
      { candidates: otherOnnx },
    );
  }
  if (options.graphVariant !== undefined) {
    const want = options.graphVariant;
    // A path names one graph: with both model.onnx and onnx/model.onnx, "model.onnx" is the root's (it is also the
    // other's file name, and both are fp32). Then a name, then a file name (model_q4.onnx).
    const [only, ...more] = variantsNamed(variants, want);
    if (only === undefined) {
      throw packageError(
        `Graph variant "${want}" is not in the package; the package offers: ${listing}. Pick one by name or by path.`,
        here,
        { candidates: variants.map((v) => v.path) },
      );
    }
    if (more.length > 0) {
      const paths = [only, ...more].map((v) => v.path);
      throw packageError(
        `Graph variant "${want}" matches several graphs (${paths.join(', ')}); the package offers: ${listing}. Pick one by its path (e.g. ${paths[0]}).`,
        here,
        { candidates: paths },
      );
    }
    return only;
  }
  const plain = variants.filter((v) => v.name === 'fp32');
  if (plain.length > 1) {
    throw packageError(
      `Several ONNX graphs and no rule to choose (both onnx/model.onnx and model.onnx exist): ${listing}. Remove one of the two, or pick a graph by its path (the Models view's graph choice, or --variant).`,
      here,
      { candidates: variants.map((v) => v.path) },
    );
  }
  // The plain model.onnx, as its author exported it; without one, the sibling that runs best on a CPU.
  const first = plain[0] ?? [...variants].sort((a, b) => cpuVariantRank(a.name) - cpuVariantRank(b.name))[0];
  if (first === undefined) throw new Error('unreachable: variants is not empty');
  if (plain.length === 0 && variants.length > 1) {
    ctx.warnings.push(
      `There is no plain model.onnx: kvdesk picked ${first.path} (${first.name}, the one that runs best on a CPU) of ${listing}. Pick another in the Models view or with --variant.`,
    );
  }
  return first;
}

/** Whether the package has a plain model.onnx (fp32), which kvdesk picks first. */
function plainModel(variants: FoundVariant[]): boolean {
  return variants.some((v) => v.name === 'fp32');
}

const REEXPORT = 'Re-export the model with optimum-cli export onnx --task text-generation-with-past';

/**
 * What to do about a graph input this layout leaves unbound: its config names no ports, so the graph must use the
 * Optimum names for what kvdesk feeds (input_ids, attention_mask, position_ids, past_key_values.N.key|value).
 */
function optimumAdvice(graph: LoadedGraph, input: string): UnboundAdvice {
  const where = { file: graph.file, field: `input "${input}"` };
  const said = (what: string, name: string) =>
    `kvdesk feeds ${what} as "${name}", the Optimum name (a Hugging Face package's config names no ports), and this graph has "${input}" instead. ${REEXPORT}, or rename the input to "${name}".`;
  switch (inputKind(input)) {
    case 'mask':
      return { where, fix: said('the attention mask', 'attention_mask') };
    case 'positions':
      return { where, fix: said('the positions', 'position_ids') };
    case 'kv':
      return {
        where,
        fix: `kvdesk finds a Hugging Face package's KV cache by the Optimum names past_key_values.N.key|value (with present.N.key|value), and this graph names it otherwise. ${REEXPORT}, or rename its KV inputs and outputs to those names.`,
      };
    case 'cache-branch':
      return {
        where,
        fix: `It is the switch of a merged decoder (with and without past), which kvdesk does not feed. ${REEXPORT} --no-post-process, which writes the decoder with past alone.`,
      };
    default:
      return {
        where,
        fix: `kvdesk feeds input_ids, attention_mask, position_ids and past_key_values.N.key|value only. ${REEXPORT}, or use a graph without this input.`,
      };
  }
}

/** Loads a Hugging Face / Optimum / transformers.js package (PACKAGES.md layout 3). */
export async function loadHfOptimumLayout(ctx: PackageContext, options: LoadOptions): Promise<ModelSpec> {
  const configPath = await findFile(ctx, 'config.json');
  if (configPath === undefined) throw packageError('config.json is missing.', { file: 'config.json' });
  const found = await findGraphVariants(ctx);
  // No graph where the layout looks, and none named (an ORT package's executor_info names its own): a GGUF file or
  // a PyTorch checkpoint says what the folder is, before its config or tokenizer (which such folders often lack,
  // or nest) would send the person after the wrong fix.
  if (
    options.graphFile === undefined &&
    found.variants.length === 0 &&
    found.otherOnnx.length === 0 &&
    found.unresolved.length === 0
  ) {
    await refuseForeignFormat(ctx);
  }
  const cfg = new ConfigFields(await readConfigFile(ctx, configPath));
  const file = cfg.file;
  const genPath = await findFile(ctx, 'generation_config.json');
  const gen = genPath === undefined ? undefined : new ConfigFields(await readConfigFile(ctx, genPath));
  const tokenizer = await readTokenizerFiles(ctx);

  // GPT-2 style configs use n_positions/n_layer/n_head/n_embd.
  const contextField =
    ['max_position_embeddings', 'n_positions', 'n_ctx'].find((f) => cfg.has(f)) ?? 'max_position_embeddings';
  const contextLength = cfg.int(contextField, 1);
  if (contextLength === undefined) {
    throw missingField(
      file,
      'max_position_embeddings',
      'Add the context window in tokens (e.g. "max_position_embeddings": 4096); kvdesk also reads n_positions.',
    );
  }

  const { variants } = found;
  // An ORT package's executor_info.ort.model_file names the graph outright; the Optimum naming rule is then moot.
  const variant: FoundVariant | undefined =
    options.graphFile === undefined
      ? chooseVariant(ctx, found, options)
      : variants.find((v) => path.resolve(v.abs) === path.resolve(options.graphFile ?? ''));
  const graph = await loadGraph(ctx, variant?.abs ?? options.graphFile ?? '').catch((err: unknown) => {
    // kvdesk picked this graph itself: a damaged one is no reason to stop there when the package has others.
    const picked = options.graphVariant === undefined && options.graphFile === undefined;
    if (!picked || variant === undefined || !(err instanceof KvdeskError) || err.code !== 'PACKAGE_INVALID') throw err;
    const others = variants.filter((v) => v !== variant);
    if (others.length === 0) throw err;
    const listing = others.map((v) => `${v.name} (${v.path})`).join(', ');
    const first = others[0]?.name ?? '';
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `${err.message.replace(/\s+$/, '')} kvdesk picked ${variant.path} (${variant.name}) itself${plainModel(variants) ? '' : ', as the package has no plain model.onnx'}; it also has ${listing}. ` +
        `Pick one of those: \`--variant ${first}\` (inspect, generate, chat, serve --model), or remove or replace ${variant.path} so that another is picked.`,
      { ...err.detail, picked: variant.path, candidates: others.map((v) => v.path) },
    );
  });

  // This layout has no field that names a port: Optimum's exports name them so.
  const source = (name: string) => ({
    where: undefined,
    hint: 'the graph',
    fix: `Optimum's exports name that port "${name}": re-export the model with \`optimum-cli export onnx --task text-generation-with-past\`, or use the graph that belongs to this package.`,
  });
  const ports: DecoderPorts = {
    inputIds: bindPort(graph, 'input', 'input_ids', source('input_ids'), ID_DTYPES),
    logits: bindPort(graph, 'output', 'logits', source('logits'), LOGITS_DTYPES),
  };
  const attentionMask = bindOptionalPort(graph, 'input', 'attention_mask', source('attention_mask'), MASK_DTYPES);
  if (attentionMask !== undefined) ports.attentionMask = attentionMask;
  const positionIds = bindOptionalPort(graph, 'input', 'position_ids', source('position_ids'), ID_DTYPES);
  if (positionIds !== undefined) ports.positionIds = positionIds;

  const pairs = matchKvTemplates(graph, [
    { role: 'key', past: 'past_key_values.%d.key', present: 'present.%d.key' },
    { role: 'value', past: 'past_key_values.%d.value', present: 'present.%d.value' },
  ]);
  const heads = cfg.int('num_attention_heads', 1) ?? cfg.int('n_head', 1);
  const hidden = cfg.int('hidden_size', 1) ?? cfg.int('n_embd', 1);
  const headsField = cfg.has('num_attention_heads') ? 'num_attention_heads' : 'n_head';
  const hiddenField = cfg.has('hidden_size') ? 'hidden_size' : 'n_embd';
  const headDim =
    cfg.int('head_dim', 1) ??
    (hidden !== undefined && heads !== undefined && hidden % heads === 0 ? hidden / heads : undefined);
  const fallback = {
    source: `${file} (num_key_value_heads / head_dim)`,
    fieldsHint: `Add \`num_key_value_heads\` and \`head_dim\` (or \`hidden_size\` and \`num_attention_heads\`) to ${file}, or re-export the graph with fixed head dims.`,
    ...definedNumbers({ kvHeads: cfg.int('num_key_value_heads', 1) ?? heads, headDim }),
    kvHeadsFrom: readFrom(cfg, 'num_key_value_heads', `\`${headsField}\``),
    headDimFrom: readFrom(cfg, 'head_dim', `\`${hiddenField}\` / \`${headsField}\``),
  };
  let kv: KvSpec = { kind: 'none' };
  let bpt = 0;
  let numLayers = cfg.int('num_hidden_layers', 1) ?? cfg.int('n_layer', 1) ?? 0;
  if (pairs.length > 0) {
    const d = buildDynamicKv(ctx, graph, pairs, fallback);
    kv = { kind: 'dynamic', tensors: d.tensors };
    bpt = d.bpt;
    if (numLayers !== 0 && numLayers !== d.numLayers) {
      ctx.warnings.push(
        `${file}: \`num_hidden_layers\` is ${numLayers} but ${graph.file} has KV inputs for ${d.numLayers} layers; the graph's ${d.numLayers} are used.`,
      );
    }
    numLayers = d.numLayers;
  } else {
    ctx.warnings.push(
      `${graph.file} has no past_key_values.N.key/value inputs: it was exported without a KV cache, so every step recomputes the whole sequence. Export with --task text-generation-with-past for speed.`,
    );
  }
  const bound = new Set(
    [ports.inputIds.name, ports.attentionMask?.name, ports.positionIds?.name, ...pairs.map((p) => p.past)].filter(
      (n): n is string => n !== undefined,
    ),
  );

  refuseUnboundInputs(graph, bound, (input) => optimumAdvice(graph, input));

  const vocabDeclared = cfg.int('vocab_size', 1);
  const vocabSize = resolveVocab(
    ctx,
    vocabDeclared === undefined ? undefined : { value: vocabDeclared, file, field: 'vocab_size' },
    ports.logits,
    graph,
    tokenizer,
  );
  // generation_config.json is what transformers' generate() uses, so it wins over config.json.
  const idsFrom = (kind: 'eos' | 'bos' | 'pad'): TokenIds | undefined => {
    const field = `${kind}_token_id`;
    for (const source of [gen, cfg]) {
      if (source === undefined) continue;
      if (kind === 'pad') {
        const pad = declaredPad(ctx, source, field);
        if (pad !== undefined) return pad;
        continue;
      }
      const ids = source.intList(field);
      if (ids !== undefined) return { ids, file: source.file, field, declared: true };
    }
    return tokenizer.special(kind);
  };
  const eos = idsFrom('eos');
  if (eos === undefined) {
    throw missingField(
      genPath === undefined ? 'generation_config.json' : relName(ctx, genPath),
      'eos_token_id',
      'No end-of-sequence token is known: add "eos_token_id" to generation_config.json (or config.json), or "eos_token" to tokenizer_config.json.',
    );
  }
  const bos = idsFrom('bos');
  const pad = idsFrom('pad');
  const modelType = cfg.str('model_type');

  return finishSpec(ctx, {
    layout: 'hf-optimum',
    ...(modelType === undefined ? {} : { modelType }),
    graph,
    ports,
    kv,
    numLayers,
    bpt,
    contextLength,
    contextSource: { file, field: contextField },
    vocabSize,
    eos,
    ...(bos === undefined ? {} : { bos }),
    ...(pad === undefined ? {} : { pad }),
    tokenizer,
    search: gen === undefined ? {} : readSearchDefaults(gen, ''),
    backends: [],
    ...(variants.length > 1 ? { graphVariants: variants.map(({ abs: _abs, ...v }) => v) } : {}),
    ...(variants.length > 1 && variant !== undefined ? { graphVariant: variant.name } : {}),
  });
}
