/**
 * ModelSpec: the one normalized description of a model package that the rest of
 * kvdesk sees (engine, scheduler, UI). Produced by src/main/packages from any
 * supported layout; never partially filled: a package either yields a complete
 * spec or a PACKAGE_INVALID error.
 */
import type { ReasoningSpec } from './reasoning';

/** Which on-disk layout a package was recognised as (PACKAGES.md numbering). */
export type PackageLayout = 'onnx-genai' | 'ort-genai' | 'hf-optimum' | 'ort-package';

/** Element types kvdesk supports for KV tensors. */
export type KvDtype = 'float32' | 'float16' | 'bfloat16';

/** Element types of graph ports as onnxruntime names them. */
export type PortDtype = 'int32' | 'int64' | 'float32' | 'float16' | 'bfloat16' | 'bool' | 'uint8' | 'int8';

/** A named graph input or output with its declared shape (symbolic dims as strings). */
export interface GraphPort {
  name: string;
  dtype: PortDtype;
  shape: Array<number | string>;
}

/**
 * One KV cache tensor pair: a past input and the present output the graph
 * produces from it. Split layouts have one pair for keys and one for values per
 * layer; the combined layout (`past_%d`, shape [2, batch, heads, seq, dim]) has
 * one pair per layer holding both.
 */
export interface KvTensorSpec {
  layer: number;
  role: 'key' | 'value' | 'combined';
  past: string;
  present: string;
  dtype: KvDtype;
  /**
   * The past shape: the batch axis and the sequence axis symbolic, every other axis a number (a size the graph
   * leaves symbolic is the one the package config gives).
   */
  shape: Array<number | string>;
  batchAxis: number;
  seqAxis: number;
  /** Number of KV heads (the fixed dim before seq in both layouts). */
  kvHeads: number;
  headDim: number;
  /** Bytes one more position adds to this tensor at batch 1: fixed dims × dtype width. */
  bytesPerToken: number;
  /** The sizes in `shape` the graph leaves symbolic and the package config gave (checked against a run at load). */
  configured?: ConfiguredKvSize[];
}

/** Where the package config says a KV size is: the file (relative to the package root) and the field that sets it. */
export interface KvSizeSource {
  file: string;
  field: string;
  /** How the size was read when `field` is absent, e.g. `num_attention_heads`. */
  readFrom?: string;
}

/** A KV size the graph leaves symbolic, as the package config gave it. */
export interface ConfiguredKvSize extends KvSizeSource {
  /** The axis of the tensor's shape it sizes. */
  axis: number;
  size: number;
  what: 'KV heads' | 'head size' | 'width';
}

/** Static (pre-allocated, written in place) cache ports, as in onnx-genai `static_cache`. */
export interface StaticCacheSpec {
  writeIndicesInput: string;
  kvSequenceLengthInput: string;
  /** Element types of the two control inputs, as the graph declares them. */
  writeIndicesDtype: 'int32' | 'int64';
  kvSequenceLengthDtype: 'int32' | 'int64';
  keyCacheInputs: string[];
  valueCacheInputs: string[];
  keyCacheOutputs: string[];
  valueCacheOutputs: string[];
  /** Declared shape of each cache input (all equal), e.g. [batch, maxSeq, width]. */
  shape: Array<number | string>;
  dtype: KvDtype;
  /**
   * Axis of `shape` that holds the pre-allocated sequence length (1 for
   * [batch, maxSeq, width], 2 for [batch, heads, maxSeq, dim]); stated because a
   * shape like [batch, 16, 16] cannot tell it apart from the width.
   */
  seqAxis?: number;
}

/** KV cache description: dynamic past/present pairs, a static cache, or none at all. */
export type KvSpec =
  | { kind: 'dynamic'; tensors: KvTensorSpec[] }
  | { kind: 'static'; cache: StaticCacheSpec }
  | { kind: 'none' };

/** Ports of the decoder graph that the engine binds by name (never guessed when metadata names them). */
export interface DecoderPorts {
  inputIds: GraphPort;
  attentionMask?: GraphPort;
  positionIds?: GraphPort;
  logits: GraphPort;
}

/** A file that belongs to the package, relative to the package root, with its size. */
export interface PackageFile {
  path: string;
  bytes: number;
}

/** Sampling defaults from the package (generation_config.json, genai_config search block). */
export interface SearchDefaults {
  doSample?: boolean;
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  maxNewTokens?: number;
}

/** Where the tokenizer lives and what the package says about special tokens. */
export interface TokenizerSpec {
  /** Absolute path of tokenizer.json. */
  tokenizerJson: string;
  /** Absolute path of tokenizer_config.json, when present. */
  tokenizerConfig?: string;
  bosToken?: string;
  eosToken?: string;
  padToken?: string;
  unkToken?: string;
  /** Whether the package asks for BOS to be prepended (tokenizer_config add_bos_token). */
  addBosToken?: boolean;
}

/** One selectable graph file of a package (Optimum `model.onnx`, `model_fp16.onnx`, `model_q4.onnx`, …). */
export interface GraphVariant {
  /** Variant name: the file-name suffix (`fp16`, `quantized`, `q4`), `fp32` for the plain `model.onnx`. */
  name: string;
  /** Path relative to the package root. */
  path: string;
  bytes: number;
}

/** Graph variants best first on a CPU: 4-bit MatMulNBits, then 8-bit, then full precision; half precision is slow there. */
const CPU_ORDER = ['q4', 'int8', 'quantized', 'uint8', 'fp32', 'q4f16', 'fp16', 'bnb4'];

/** Where a graph variant's name stands among those that run best on a CPU (lower is better; unknown names last). */
export function cpuVariantRank(name: string): number {
  const at = CPU_ORDER.indexOf(name);
  return at < 0 ? CPU_ORDER.length : at;
}

/**
 * One variant of an ORT model package (PACKAGES.md layout 4): a folder built
 * for one execution provider. Listed in the spec so the person and the
 * inspector can see every backend the package offers and what each would cost.
 */
export interface PackageVariantInfo {
  /** Component the variant belongs to (the text model's). */
  component: string;
  /** Variant name (its key in the manifest). */
  name: string;
  /** Execution provider, ORT name (`CUDAExecutionProvider`). */
  ep: string;
  /** `cpu` | `gpu` | `npu`, as the manifest says. */
  device?: string;
  /** `additional_metadata.precision` (`fp32`, `fp16`, `int4`, …). */
  precision?: string;
  /** Opaque EP compatibility token from the manifest. */
  compatibilityString?: string;
  /** Variant folder relative to the package root. */
  directory: string;
  /** Whether this machine can use `ep` (per the backends the loader was given). */
  usable: boolean;
  /** Layout of the variant folder (1–3), when it could be read. */
  layout?: PackageLayout;
  /** Graph plus external weights, when the variant could be read. */
  weightsBytes?: number;
  /** KV bytes per token at batch 1, when the variant could be read. */
  bpt?: number;
  contextLength?: number;
  /** Why the figures above are missing (the variant folder could not be read). */
  unreadable?: string;
}

/** What an ORT model package's manifest.json says about itself. */
export interface PackageManifestInfo {
  schemaVersion: string;
  layout: 'portable' | 'installed';
  packageName?: string;
  packageVersion?: string;
  description?: string;
  /** The component used as the text model. */
  component: string;
}

/** The normalized model package. */
export interface ModelSpec {
  /** Stable id used by the API (`model` field), derived from the folder name. */
  id: string;
  displayName: string;
  layout: PackageLayout;
  /** Absolute path of the package root. */
  root: string;
  /** model.type / model_type when the package says so. */
  modelType?: string;
  files: PackageFile[];
  /** Bytes of the graph plus its external weights. */
  weightsBytes: number;
  /** Absolute path of the decoder ONNX graph. */
  graphPath: string;
  ports: DecoderPorts;
  kv: KvSpec;
  numLayers: number;
  /** KV bytes per token at batch 1 (SCHEDULER.md "bpt"). */
  bpt: number;
  contextLength: number;
  /** Where the package config declares the context length (for messages about it); absent in specs made elsewhere. */
  contextSource?: { file: string; field: string };
  vocabSize: number;
  eosTokenIds: number[];
  bosTokenId?: number;
  padTokenId?: number;
  chatTemplate?: string;
  /**
   * The file the package's chat template was read from, as messages name it: `chat_template.jinja`,
   * `tokenizer_config.json (field chat_template)` (paths relative to the package root).
   */
  chatTemplateSource?: string;
  /** The chat template is the person's own, not the package's (LoadModelRequest.chatTemplate). */
  chatTemplateEdited?: true;
  /** A thinking model's reasoning markers and switch (from its chat template). */
  reasoning?: ReasoningSpec;
  tokenizer: TokenizerSpec;
  search: SearchDefaults;
  /** Execution providers the package offers (ORT names). */
  backends: string[];
  /** Session options the package asks for (genai_config session_options), passed through verbatim. */
  sessionOptions?: Record<string, unknown>;
  /** Graph files the package offers to choose from (loadModelSpec option `graphVariant`), when it has several. */
  graphVariants?: GraphVariant[];
  /** Name of the variant `graphPath` is, when the package has variants. */
  graphVariant?: string;
  /** ORT model packages: every variant of the text model, in manifest order. */
  variants?: PackageVariantInfo[];
  /** ORT model packages: name of the variant this spec describes (its graph, tokenizer, ports). */
  selectedVariant?: string;
  /**
   * The execution provider (ORT name) the chosen variant was built for; the
   * engine must create the session with it. Absent for layouts 1–3 (CPU).
   */
  executionProvider?: string;
  /** Provider options for that provider (`executor_info.ort.provider_options`), strings as ORT takes them. */
  providerOptions?: Record<string, string>;
  /**
   * onnxruntime session config entries (`executor_info.ort.session_options`,
   * e.g. `session.intra_op_thread_count`), path values already resolved to
   * absolute paths; pass them as SessionOptions `extra`.
   */
  sessionConfigEntries?: Record<string, string>;
  /** ORT model packages: the manifest's own description of the package. */
  packageInfo?: PackageManifestInfo;
  warnings: string[];
}

/**
 * Positions a static cache allocates per row, all held from a request's first
 * token (undefined for a growing cache or none).
 */
export function staticPositions(spec: Pick<ModelSpec, 'kv' | 'contextLength'>): number | undefined {
  if (spec.kv.kind !== 'static') return undefined;
  const { shape, seqAxis } = spec.kv.cache;
  const capacity = shape[seqAxis ?? 1];
  return typeof capacity === 'number' ? capacity : spec.contextLength;
}

/**
 * The start of the card's warning for a package whose chat template cannot be used (not valid Jinja, or it fails on
 * a one-message chat): every chat is refused.
 */
export const BROKEN_TEMPLATE_WARNING = "The package's chat template cannot be used";

/** What a package's template that fails says to do (the window says it its own way, on the model's card). */
export const FIX_PACKAGE_TEMPLATE = 'Fix the template or remove it to use the default ChatML template.';
