import path from 'node:path';
import { editDistance } from '../../shared/edit-distance';
import type { KvdeskError } from '../../shared/errors';
import type { DecoderPorts, KvSpec, ModelSpec } from '../../shared/model-spec';
import { ConfigFields, readConfigFile } from './config-file';
import {
  bindPort,
  ID_DTYPES,
  inputKind,
  LOGITS_DTYPES,
  loadGraph,
  MASK_DTYPES,
  type PortSource,
  refuseUnboundInputs,
  type UnboundAdvice,
} from './graph';
import { buildDynamicKv, buildStaticKv, type KvPairRef } from './kv-geometry';
import type { LoadOptions } from './load-options';
import { formatBytes, packageError } from './package-error';
import { brokenLink, findFile, listFileNames, type PackageContext, realPathInside, relName } from './package-fs';
import {
  declaredPad,
  definedNumbers,
  finishSpec,
  missingField,
  readSearchDefaults,
  resolveVocab,
} from './spec-assembly';
import { readTokenizerFiles, type TokenIds } from './tokenizer-files';

/** The metadata file names of this layout, in the order they are looked for. */
export const ONNX_GENAI_METADATA = [
  'inference_metadata.yaml',
  'inference_metadata.yml',
  'inference_metadata.json',
] as const;

async function findMetadata(ctx: PackageContext): Promise<string> {
  const found: string[] = [];
  for (const name of ONNX_GENAI_METADATA) {
    const p = await findFile(ctx, name);
    if (p !== undefined) found.push(p);
  }
  const [only, ...others] = found;
  if (only === undefined) {
    throw packageError(`${relName(ctx, path.join(ctx.dir, 'inference_metadata.yaml'))} is missing.`, {
      file: relName(ctx, ctx.dir),
    });
  }
  if (others.length > 0) {
    const names = found.map((p) => relName(ctx, p));
    throw packageError(
      `The package has several metadata files (${names.join(', ')}) and kvdesk cannot tell which is current. Keep exactly one.`,
      { file: names[0] ?? '.' },
      { candidates: names },
    );
  }
  return only;
}

/** The ports `model.io` names (a key it has besides these is read by nothing). */
const IO_FIELDS = [
  'token_input',
  'attention_mask_input',
  'position_ids_input',
  'logits_output',
  'kv_inputs',
  'kv_outputs',
  'static_cache',
] as const;

/** Which `model.io` field binds a graph input the metadata leaves unbound, with any misspelt field that was meant to. */
function unboundAdvice(meta: ConfigFields, input: string): UnboundAdvice {
  const file = meta.file;
  const kind = inputKind(input);
  const field =
    kind === 'mask'
      ? 'model.io.attention_mask_input'
      : kind === 'positions'
        ? 'model.io.position_ids_input'
        : kind === 'kv'
          ? 'model.io.kv_inputs'
          : 'model.io';
  const io = meta.object('model.io') ?? {};
  const misspelt = Object.keys(io)
    .filter((k) => !(IO_FIELDS as readonly string[]).includes(k))
    .map((k) => ({ k, near: IO_FIELDS.find((f) => editDistance(k, f) <= 3) }))
    .filter((m) => m.near !== undefined)
    .map((m) => `\`model.io.${m.k}\` (kvdesk reads \`model.io.${m.near}\`)`);
  const typo =
    misspelt.length > 0 ? ` ${file} has ${misspelt.join(' and ')}, which nothing reads: fix the spelling.` : '';
  const fix =
    field === 'model.io.kv_inputs'
      ? `List it in \`model.io.kv_inputs\` of ${file}, with its present output at the same place in \`kv_outputs\`.`
      : field === 'model.io'
        ? `Name it under \`model.io\` in ${file} (token_input, attention_mask_input, position_ids_input, kv_inputs or static_cache), or use a graph without it: kvdesk feeds nothing else.`
        : `Set \`${field}\` in ${file} to "${input}".`;
  return { where: { file, field }, fix: fix + typo };
}

/** A graph file's name as `--variant` takes it: without its `.onnx`. */
function variantName(file: string): string {
  return file.endsWith('.onnx') ? file.slice(0, -'.onnx'.length) : file;
}

/**
 * The decoder graph: `decoder.onnx`, else the only `*.onnx` in the folder; the
 * `graphVariant` option (the CLI's `--variant`) may name one of several by file name.
 */
async function findGraph(ctx: PackageContext, options: LoadOptions): Promise<string> {
  // Named by an ORT package's executor_info.ort.model_file, already checked against the package's path rules.
  if (options.graphFile !== undefined) return options.graphFile;
  // A graph that is a symbolic link kvdesk cannot follow (it loops, or leads to nothing) is none to choose from:
  // refused when it is the one asked for, the decoder.onnx or the only graph; beside others, left out with a warning.
  const onnxFiles: string[] = [];
  const unresolved = new Map<string, KvdeskError>();
  for (const name of (await listFileNames(ctx.dir)).filter((n) => n.toLowerCase().endsWith('.onnx'))) {
    const abs = path.join(ctx.dir, name);
    const error = await realPathInside(ctx, abs, { file: relName(ctx, abs) }).then(
      () => undefined,
      (err: unknown) => brokenLink(err),
    );
    if (error === undefined) onnxFiles.push(name);
    else unresolved.set(name, error);
  }
  const shown = onnxFiles.map((n) => relName(ctx, path.join(ctx.dir, n)));
  let chosen: string | undefined;
  if (options.graphVariant !== undefined) {
    const want = options.graphVariant.toLowerCase().endsWith('.onnx')
      ? options.graphVariant
      : `${options.graphVariant}.onnx`;
    chosen = onnxFiles.find((n) => n === want);
    const broken = unresolved.get(want);
    if (chosen === undefined && broken !== undefined) throw broken;
    if (chosen === undefined) {
      throw packageError(
        `Graph variant "${options.graphVariant}" is not in the package; its ONNX graphs are: ${shown.join(', ') || 'none'}. Pick one of those.`,
        { file: relName(ctx, ctx.dir) },
        { candidates: shown },
      );
    }
  } else if (onnxFiles.includes('decoder.onnx')) {
    chosen = 'decoder.onnx';
  } else if (unresolved.has('decoder.onnx')) {
    throw unresolved.get('decoder.onnx');
  } else if (onnxFiles.length === 0 && unresolved.size > 0) {
    throw [...unresolved.values()][0];
  } else if (onnxFiles.length === 1) {
    chosen = onnxFiles[0];
  } else if (onnxFiles.length === 0) {
    throw packageError(
      `No ONNX graph: ${relName(ctx, ctx.dir) === '.' ? 'the package folder' : relName(ctx, ctx.dir)} has no decoder.onnx and no other *.onnx file. Add the model graph (with its .onnx.data weights, if any).`,
      { file: relName(ctx, ctx.dir) },
    );
  } else {
    throw packageError(
      `Several ONNX graphs and no rule to choose: ${shown.join(', ')}. Rename the decoder graph to decoder.onnx or remove the others, or pick one by its file name with --variant NAME on kvdesk generate, chat or inspect (--variant ${variantName(onnxFiles[0] ?? '')} for ${shown[0]}).`,
      { file: relName(ctx, ctx.dir) },
      { candidates: shown },
    );
  }
  for (const error of unresolved.values()) {
    ctx.warnings.push(`${error.message} Until then it is left out of the graphs to choose from.`);
  }
  const real = chosen === undefined ? undefined : await findFile(ctx, chosen);
  // Listed a moment ago, gone now.
  if (real === undefined || chosen === undefined)
    throw packageError(`${chosen ?? 'The graph'} is missing (it was there a moment ago).`, {
      file: relName(ctx, path.join(ctx.dir, chosen ?? '')),
    });
  return real;
}

/** Loads an onnx-genai flat package (PACKAGES.md layout 1): ports come only from `model.io`. */
export async function loadOnnxGenaiLayout(ctx: PackageContext, options: LoadOptions): Promise<ModelSpec> {
  const meta = new ConfigFields(await readConfigFile(ctx, await findMetadata(ctx)));
  const file = meta.file;
  const tokenizer = await readTokenizerFiles(ctx);
  let contextLength = meta.int('model.max_sequence_length', 1);
  if (contextLength === undefined) {
    throw missingField(
      file,
      'model.max_sequence_length',
      'Add the context window in tokens, e.g. `max_sequence_length: 4096` under `model:`.',
    );
  }
  const graph = await loadGraph(ctx, await findGraph(ctx, options));
  if (meta.object('model.io') === undefined) {
    throw missingField(
      file,
      'model.io',
      'kvdesk never guesses port names in this layout: declare token_input, logits_output and kv_inputs/kv_outputs (or static_cache) under `model.io`.',
    );
  }
  const declared = (field: string): PortSource => ({ where: meta.where(field), hint: `\`${field}\` in ${file}` });
  const required = (field: string): string => {
    const name = meta.str(field);
    if (name === undefined)
      throw missingField(
        file,
        field,
        `Name the graph port there (${graph.file} has inputs ${graph.info.inputs.map((i) => i.name).join(', ')}).`,
      );
    return name;
  };
  const ports: DecoderPorts = {
    inputIds: bindPort(graph, 'input', required('model.io.token_input'), declared('model.io.token_input'), ID_DTYPES),
    logits: bindPort(
      graph,
      'output',
      required('model.io.logits_output'),
      declared('model.io.logits_output'),
      LOGITS_DTYPES,
    ),
  };
  const maskName = meta.str('model.io.attention_mask_input');
  if (maskName !== undefined)
    ports.attentionMask = bindPort(graph, 'input', maskName, declared('model.io.attention_mask_input'), MASK_DTYPES);
  const posName = meta.str('model.io.position_ids_input');
  if (posName !== undefined)
    ports.positionIds = bindPort(graph, 'input', posName, declared('model.io.position_ids_input'), ID_DTYPES);
  const bound = new Set([ports.inputIds.name, maskName, posName].filter((n): n is string => n !== undefined));

  let kv: KvSpec;
  let bpt = 0;
  let numLayers = 0;
  const kvInputs = meta.strList('model.io.kv_inputs');
  const kvOutputs = meta.strList('model.io.kv_outputs');
  const hasStatic = meta.object('model.io.static_cache') !== undefined;
  if (hasStatic && (kvInputs !== undefined || kvOutputs !== undefined)) {
    meta.fail(
      'model.io.static_cache',
      'is declared together with `model.io.kv_inputs`/`kv_outputs`',
      'Declare either a growing cache (kv_inputs/kv_outputs) or a static cache, not both.',
    );
  }
  if (hasStatic) {
    const field = 'model.io.static_cache';
    const str = (name: string): string => {
      const v = meta.str(`${field}.${name}`);
      if (v === undefined) throw missingField(file, `${field}.${name}`, 'Name the graph port there.');
      return v;
    };
    const list = (name: string): string[] => {
      const v = meta.strList(`${field}.${name}`);
      if (v === undefined) throw missingField(file, `${field}.${name}`, 'List the per-layer cache ports there.');
      return v;
    };
    const s = buildStaticKv(graph, {
      file,
      field,
      writeIndicesInput: str('write_indices_input'),
      kvSequenceLengthInput: str('kv_sequence_length_input'),
      keyCacheInputs: list('key_cache_inputs'),
      valueCacheInputs: list('value_cache_inputs'),
      keyCacheOutputs: list('key_cache_outputs'),
      valueCacheOutputs: list('value_cache_outputs'),
    });
    kv = { kind: 'static', cache: s.cache };
    bpt = s.bpt;
    numLayers = s.numLayers;
    ctx.warnings.push(
      `${file}: a static KV cache holds all ${s.capacity} positions, ${formatBytes(s.capacity * s.bpt)}, from a request's first token, and onnxruntime-node copies the whole cache in and out of every step; a past/present export of the same model needs less memory for short chats and runs faster.`,
    );
    if (s.capacity < contextLength) {
      ctx.warnings.push(
        `${file}: \`model.max_sequence_length\` is ${contextLength} but the static cache holds ${s.capacity} positions; the context is ${s.capacity}.`,
      );
      contextLength = s.capacity;
    }
    for (const name of [
      s.cache.writeIndicesInput,
      s.cache.kvSequenceLengthInput,
      ...s.cache.keyCacheInputs,
      ...s.cache.valueCacheInputs,
    ])
      bound.add(name);
  } else if (kvInputs !== undefined || kvOutputs !== undefined) {
    const inputs = kvInputs ?? [];
    const outputs = kvOutputs ?? [];
    if (inputs.length !== outputs.length) {
      meta.fail(
        'model.io.kv_outputs',
        `lists ${outputs.length} ports but \`model.io.kv_inputs\` lists ${inputs.length}`,
        'They pair by position: list one present output per past input.',
      );
    }
    if (inputs.length % 2 !== 0) {
      meta.fail(
        'model.io.kv_inputs',
        `lists ${inputs.length} ports, an odd number`,
        'List them per layer as [key_0, value_0, key_1, value_1, ...].',
      );
    }
    const pairs: KvPairRef[] = inputs.map((past, i) => ({
      layer: Math.floor(i / 2),
      role: i % 2 === 0 ? 'key' : 'value',
      past,
      present: outputs[i] ?? '',
      where: meta.where(`model.io.kv_inputs[${i}]`),
      presentWhere: meta.where(`model.io.kv_outputs[${i}]`),
    }));
    const fallback = {
      source: `${file} model.attention`,
      fieldsHint: `Add \`model.attention.num_kv_heads\` and \`model.attention.head_dim\` to ${file}, or re-export the graph with fixed head dims.`,
      ...definedNumbers({
        kvHeads: meta.int('model.attention.num_kv_heads', 1),
        headDim: meta.int('model.attention.head_dim', 1),
      }),
      kvHeadsFrom: { file, field: 'model.attention.num_kv_heads' },
      headDimFrom: { file, field: 'model.attention.head_dim' },
    };
    const d = buildDynamicKv(ctx, graph, pairs, fallback);
    kv = { kind: 'dynamic', tensors: d.tensors };
    bpt = d.bpt;
    numLayers = d.numLayers;
    for (const name of inputs) bound.add(name);
  } else {
    kv = { kind: 'none' };
    ctx.warnings.push(`${file}: \`model.io\` declares no KV cache; every step recomputes the whole sequence.`);
  }

  const vocabDeclared = meta.int('model.vocab_size', 1);
  const vocabSize = resolveVocab(
    ctx,
    vocabDeclared === undefined ? undefined : { value: vocabDeclared, file, field: 'model.vocab_size' },
    ports.logits,
    graph,
    tokenizer,
  );

  const idsFrom = (field: string): TokenIds | undefined => {
    const ids = meta.intList(field);
    return ids === undefined ? undefined : { ids, file, field, declared: true };
  };
  const eos = idsFrom('model.eos_token_id') ?? tokenizer.special('eos');
  if (eos === undefined) {
    throw missingField(
      file,
      'model.eos_token_id',
      'No end-of-sequence token is known: add `eos_token_id` under `model:`, or `eos_token` to tokenizer_config.json.',
    );
  }
  const bos = idsFrom('model.bos_token_id') ?? tokenizer.special('bos');
  const pad = declaredPad(ctx, meta, 'model.pad_token_id') ?? tokenizer.special('pad');

  refuseUnboundInputs(graph, bound, (input) => unboundAdvice(meta, input));

  return finishSpec(ctx, {
    layout: 'onnx-genai',
    graph,
    ports,
    kv,
    numLayers,
    bpt,
    contextLength,
    contextSource: { file, field: 'model.max_sequence_length' },
    vocabSize,
    eos,
    ...(bos === undefined ? {} : { bos }),
    ...(pad === undefined ? {} : { pad }),
    tokenizer,
    search: readSearchDefaults(meta, 'generation'),
    backends: [],
  });
}
