import path from 'node:path';
import type { DecoderPorts, KvSpec, ModelSpec } from '../../shared/model-spec';
import { ConfigFields, readConfigFile } from './config-file';
import { knownProviderName } from './execution-providers';
import {
  bindOptionalPort,
  bindPort,
  describeGraphIo,
  ID_DTYPES,
  inputKind,
  LOGITS_DTYPES,
  loadGraph,
  MASK_DTYPES,
  type PortSource,
  refuseUnboundInputs,
} from './graph';
import { buildDynamicKv, matchKvTemplates } from './kv-geometry';
import type { LoadOptions } from './load-options';
import { packageError } from './package-error';
import { findFile, type PackageContext, relName, resolveConfigPath } from './package-fs';
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

/** Execution providers named in `session_options.provider_options` (a list of `{ name: {options} }`). */
function providersFrom(ctx: PackageContext, cfg: ConfigFields, field: string): string[] {
  const value = cfg.get(field);
  if (value === undefined) return [];
  if (!Array.isArray(value)) return cfg.fail(field, 'is not a list', 'Write it as a list like [{ "cuda": {} }].');
  const out: string[] = [];
  value.forEach((entry, i) => {
    if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) {
      cfg.fail(`${field}[${i}]`, 'is not an object', 'Write each provider as { "<name>": { options } }.');
    }
    for (const key of Object.keys(entry as object)) {
      const known = knownProviderName(key);
      if (known !== undefined) {
        out.push(known);
      } else {
        const name = key.endsWith('ExecutionProvider') ? key : `${key}ExecutionProvider`;
        ctx.warnings.push(
          `${cfg.file}: \`${field}[${i}]\` names the provider "${key}", which kvdesk does not know; offering it as ${name}.`,
        );
        out.push(name);
      }
    }
  });
  return out;
}

/** Loads an onnxruntime-genai package (PACKAGES.md layout 2) from genai_config.json. */
export async function loadOrtGenaiLayout(ctx: PackageContext, options: LoadOptions): Promise<ModelSpec> {
  const configPath = await findFile(ctx, 'genai_config.json');
  if (configPath === undefined) throw packageError('genai_config.json is missing.', { file: 'genai_config.json' });
  const cfg = new ConfigFields(await readConfigFile(ctx, configPath));
  const file = cfg.file;
  // The tokenizer may live elsewhere, typically a `sha256:` shared asset several variants of an ORT package use.
  const tokenizerField = ['tokenizer_dir', 'model.tokenizer_dir'].find((f) => cfg.has(f));
  const tokenizerRef = tokenizerField === undefined ? undefined : cfg.str(tokenizerField);
  const tokenizerDir =
    tokenizerField === undefined || tokenizerRef === undefined
      ? ctx.dir
      : await resolveConfigPath(ctx, tokenizerRef, cfg.where(tokenizerField), ctx.dir, 'dir');
  const tokenizer = await readTokenizerFiles(ctx, tokenizerDir);

  const contextLength = cfg.int('model.context_length', 1);
  if (contextLength === undefined)
    throw missingField(
      file,
      'model.context_length',
      'Add the context window in tokens, e.g. "context_length": 4096 under "model".',
    );
  const filename = cfg.str('model.decoder.filename');
  if (filename === undefined)
    throw missingField(
      file,
      'model.decoder.filename',
      'Name the decoder graph file, e.g. "filename": "model.onnx" under "model.decoder".',
    );
  if (options.graphVariant !== undefined) {
    ctx.warnings.push(
      `A graph pick (--variant ${options.graphVariant}) does not apply to onnxruntime-genai packages: ${file} names the one decoder graph.`,
    );
  }
  const named = await resolveConfigPath(ctx, filename, cfg.where('model.decoder.filename'));
  let graphPath = named;
  if (options.graphFile !== undefined) {
    // An ORT package's executor_info.ort.model_file is what onnxruntime itself would load, so it wins.
    graphPath = options.graphFile;
    if (path.resolve(graphPath) !== path.resolve(named)) {
      ctx.warnings.push(
        `${file}: \`model.decoder.filename\` names ${JSON.stringify(filename)}, but the package's executor_info.ort.model_file names ${relName(ctx, graphPath)}; kvdesk loads ${relName(ctx, graphPath)}.`,
      );
    }
  }
  const graph = await loadGraph(ctx, graphPath);

  // Names come from decoder.inputs/outputs when given; otherwise onnxruntime-genai's defaults apply.
  const portName = (field: string, fallback: string): { name: string; source: PortSource } => {
    const full = `model.decoder.${field}`;
    const name = cfg.str(full);
    const hint = `\`${full}\` in ${file}`;
    return name === undefined
      ? { name: fallback, source: { where: undefined, hint } }
      : { name, source: { where: cfg.where(full), hint } };
  };
  const ids = portName('inputs.input_ids', 'input_ids');
  const logits = portName('outputs.logits', 'logits');
  const mask = portName('inputs.attention_mask', 'attention_mask');
  const pos = portName('inputs.position_ids', 'position_ids');
  const ports: DecoderPorts = {
    inputIds: bindPort(graph, 'input', ids.name, ids.source, ID_DTYPES),
    logits: bindPort(graph, 'output', logits.name, logits.source, LOGITS_DTYPES),
  };
  const attentionMask = bindOptionalPort(graph, 'input', mask.name, mask.source, MASK_DTYPES);
  if (attentionMask !== undefined) ports.attentionMask = attentionMask;
  const positionIds = bindOptionalPort(graph, 'input', pos.name, pos.source, ID_DTYPES);
  if (positionIds !== undefined) ports.positionIds = positionIds;

  const combinedPast = cfg.str('model.decoder.inputs.past_names');
  const combinedPresent = cfg.str('model.decoder.outputs.present_names');
  if ((combinedPast === undefined) !== (combinedPresent === undefined)) {
    const missing =
      combinedPast === undefined ? 'model.decoder.inputs.past_names' : 'model.decoder.outputs.present_names';
    throw missingField(
      file,
      missing,
      'A combined KV cache needs both past_names and present_names templates (e.g. "past_%d" and "present_%d").',
    );
  }
  const templates =
    combinedPast !== undefined && combinedPresent !== undefined
      ? [
          {
            role: 'combined' as const,
            past: combinedPast,
            present: combinedPresent,
            pastField: 'model.decoder.inputs.past_names',
            presentField: 'model.decoder.outputs.present_names',
          },
        ]
      : [
          {
            role: 'key' as const,
            past: cfg.str('model.decoder.inputs.past_key_names') ?? 'past_key_values.%d.key',
            present: cfg.str('model.decoder.outputs.present_key_names') ?? 'present.%d.key',
            pastField: 'model.decoder.inputs.past_key_names',
            presentField: 'model.decoder.outputs.present_key_names',
          },
          {
            role: 'value' as const,
            past: cfg.str('model.decoder.inputs.past_value_names') ?? 'past_key_values.%d.value',
            present: cfg.str('model.decoder.outputs.present_value_names') ?? 'present.%d.value',
            pastField: 'model.decoder.inputs.past_value_names',
            presentField: 'model.decoder.outputs.present_value_names',
          },
        ];
  for (const t of templates) {
    for (const [field, template] of [
      [t.pastField, t.past],
      [t.presentField, t.present],
    ] as const) {
      if (template.split('%d').length !== 2) {
        cfg.fail(
          field,
          `is ${JSON.stringify(template)}, which does not contain exactly one %d`,
          'Write the name template with one %d where the layer index goes, e.g. "past_key_values.%d.key".',
        );
      }
    }
  }
  const pairs = matchKvTemplates(
    graph,
    templates.map((t) => ({
      role: t.role,
      past: t.past,
      present: t.present,
      where: cfg.where(t.pastField),
      presentWhere: cfg.where(t.presentField),
    })),
  );
  const declaredLayers = cfg.int('model.decoder.num_hidden_layers', 1);
  if (pairs.length === 0) {
    throw packageError(
      `${file}: no input of ${graph.file} matches the KV name templates ${templates.map((t) => `"${t.past}"`).join(' / ')}` +
        `${templates.some((t) => cfg.has(t.pastField)) ? '' : ' (onnxruntime-genai defaults)'}. ${describeGraphIo(graph)}. ` +
        "Set model.decoder.inputs.past_key_names/past_value_names (or past_names for a combined cache) and the matching outputs to the graph's KV port names.",
      { file, field: templates[0]?.pastField ?? 'model.decoder.inputs' },
      { graphInputs: graph.info.inputs.map((i) => i.name) },
    );
  }
  const numHeads = cfg.int('model.decoder.num_attention_heads', 1);
  const hidden = cfg.int('model.decoder.hidden_size', 1);
  const headSize =
    cfg.int('model.decoder.head_size', 1) ??
    (hidden !== undefined && numHeads !== undefined ? hidden / numHeads : undefined);
  const fallback = {
    source: `${file} model.decoder`,
    fieldsHint: `Add \`model.decoder.num_key_value_heads\` and \`model.decoder.head_size\` to ${file}, or re-export the graph with fixed head dims.`,
    ...definedNumbers({
      kvHeads: cfg.int('model.decoder.num_key_value_heads', 1) ?? numHeads,
      headDim: headSize !== undefined && Number.isInteger(headSize) ? headSize : undefined,
    }),
    kvHeadsFrom: readFrom(cfg, 'model.decoder.num_key_value_heads', '`model.decoder.num_attention_heads`'),
    headDimFrom: readFrom(
      cfg,
      'model.decoder.head_size',
      '`model.decoder.hidden_size` / `model.decoder.num_attention_heads`',
    ),
  };
  const d = buildDynamicKv(ctx, graph, pairs, fallback);
  const kv: KvSpec = { kind: 'dynamic', tensors: d.tensors };
  const { bpt, numLayers } = d;
  if (declaredLayers !== undefined && declaredLayers !== numLayers) {
    ctx.warnings.push(
      `${file}: \`model.decoder.num_hidden_layers\` is ${declaredLayers} but ${graph.file} has KV inputs for ${numLayers} layers; the graph's ${numLayers} are used.`,
    );
  }
  const bound = new Set(
    [ports.inputIds.name, ports.attentionMask?.name, ports.positionIds?.name, ...pairs.map((p) => p.past)].filter(
      (n): n is string => n !== undefined,
    ),
  );

  refuseUnboundInputs(graph, bound, (input) => {
    const kind = inputKind(input);
    const field =
      kind === 'mask'
        ? 'model.decoder.inputs.attention_mask'
        : kind === 'positions'
          ? 'model.decoder.inputs.position_ids'
          : kind === 'kv'
            ? (templates[0]?.pastField ?? 'model.decoder.inputs.past_key_names')
            : 'model.decoder.inputs';
    const fix =
      kind === 'kv'
        ? `Set the KV name templates (\`model.decoder.inputs.past_key_names\`/\`past_value_names\`, or \`past_names\` for a combined cache, and the matching outputs) in ${file} so they match it.`
        : field === 'model.decoder.inputs'
          ? `kvdesk feeds input_ids, attention_mask, position_ids and the KV cache only: name it under \`model.decoder.inputs\` in ${file} if it is one of those, or use a graph without it.`
          : `Set \`${field}\` in ${file} to "${input}".`;
    return { where: { file, field }, fix };
  });

  const vocabDeclared = cfg.int('model.vocab_size', 1);
  const vocabSize = resolveVocab(
    ctx,
    vocabDeclared === undefined ? undefined : { value: vocabDeclared, file, field: 'model.vocab_size' },
    ports.logits,
    graph,
    tokenizer,
  );
  const idsAt = (field: string): TokenIds | undefined => {
    const list = cfg.intList(field);
    return list === undefined ? undefined : { ids: list, file, field, declared: true };
  };
  const eos = idsAt('model.eos_token_id');
  if (eos === undefined)
    throw missingField(
      file,
      'model.eos_token_id',
      'Add the end-of-sequence token id (an integer or a list), e.g. "eos_token_id": 2 under "model".',
    );
  const bos = idsAt('model.bos_token_id');
  const pad = declaredPad(ctx, cfg, 'model.pad_token_id');

  const sessionOptions = cfg.object('model.decoder.session_options');
  const modelType = cfg.str('model.type');
  return finishSpec(ctx, {
    layout: 'ort-genai',
    ...(modelType === undefined ? {} : { modelType }),
    graph,
    ports,
    kv,
    numLayers,
    bpt,
    contextLength,
    contextSource: { file, field: 'model.context_length' },
    vocabSize,
    eos,
    ...(bos === undefined ? {} : { bos }),
    ...(pad === undefined ? {} : { pad }),
    tokenizer,
    search: readSearchDefaults(cfg, 'search'),
    backends: providersFrom(ctx, cfg, 'model.decoder.session_options.provider_options'),
    ...(sessionOptions === undefined ? {} : { sessionOptions }),
  });
}
