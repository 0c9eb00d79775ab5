/**
 * What a generated model package looks like: the shape of the decoder, the seed
 * of its weights, and the named presets the CLI, tests and benchmarks use.
 */

/** Decoder families the generator can build. */
export type Architecture = 'llama' | 'gpt2';

/** Names of the built-in presets. */
export type PresetName = 'default' | 'llama-small' | 'gpt2-small';

/** Everything that determines a generated package; equal configs give byte-identical packages. */
export interface ModelGenConfig {
  /** Short name written into the package metadata and the ONNX graph name. */
  name: string;
  architecture: Architecture;
  numLayers: number;
  hiddenSize: number;
  numHeads: number;
  /** KV heads: fewer than numHeads makes grouped-query attention (llama); gpt2 needs numKvHeads = numHeads. */
  numKvHeads: number;
  headDim: number;
  intermediateSize: number;
  /** Model vocabulary, including the three special tokens at the end. */
  vocabSize: number;
  /** Context length (max_position_embeddings / n_positions). */
  maxPositions: number;
  /** RMSNorm (llama) or LayerNorm (gpt2) epsilon. */
  normEps: number;
  /** RoPE base; ignored by gpt2, which learns absolute position embeddings. */
  ropeTheta: number;
  /** Share the token embedding with the LM head (as SmolLM and GPT-2 do). */
  tieWordEmbeddings: boolean;
  seed: number;
}

/** The special tokens every generated tokenizer has, in vocabulary order at the end of the vocab. */
export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const;

/** Ids of the special tokens and the roles the package gives them. */
export interface SpecialTokenIds {
  endOfText: number;
  imStart: number;
  imEnd: number;
  bos: number;
  /** The chat turn terminator (config.json eos_token_id). */
  eos: number;
  pad: number;
  /** generation_config.json eos_token_id: a turn end or the end of a document both stop generation. */
  stopIds: number[];
}

/** Where the special tokens sit for a vocabulary size. */
export function specialTokenIds(vocabSize: number): SpecialTokenIds {
  const endOfText = vocabSize - 3;
  const imStart = vocabSize - 2;
  const imEnd = vocabSize - 1;
  return { endOfText, imStart, imEnd, bos: endOfText, eos: imEnd, pad: endOfText, stopIds: [imEnd, endOfText] };
}

const BASE: Omit<ModelGenConfig, 'name'> = {
  architecture: 'llama',
  numLayers: 4,
  hiddenSize: 64,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 16,
  intermediateSize: 172,
  vocabSize: 512,
  maxPositions: 2048,
  normEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: false,
  seed: 20240611,
};

/** Returns a fresh copy of a preset (callers may tweak it without touching the preset). */
export function presetConfig(name: PresetName): ModelGenConfig {
  switch (name) {
    case 'default':
      return { ...BASE, name };
    case 'llama-small':
      // SmolLM-135M geometry.
      return {
        ...BASE,
        name,
        numLayers: 30,
        hiddenSize: 576,
        numHeads: 9,
        numKvHeads: 3,
        headDim: 64,
        intermediateSize: 1536,
        vocabSize: 49152,
        maxPositions: 2048,
        tieWordEmbeddings: true,
      };
    case 'gpt2-small':
      return {
        ...BASE,
        name,
        architecture: 'gpt2',
        numLayers: 12,
        hiddenSize: 768,
        numHeads: 12,
        numKvHeads: 12,
        headDim: 64,
        intermediateSize: 3072,
        vocabSize: 50257,
        maxPositions: 1024,
        tieWordEmbeddings: true,
      };
  }
}

/** All preset names, for the CLI's help and argument check. */
export const PRESET_NAMES: readonly PresetName[] = ['default', 'llama-small', 'gpt2-small'];

/** True when `name` is a preset name. */
export function isPresetName(name: string): name is PresetName {
  return (PRESET_NAMES as readonly string[]).includes(name);
}

/** KV bytes per token at batch 1: every layer keeps a key and a value of kvHeads × headDim float32. */
export function bytesPerToken(config: ModelGenConfig): number {
  return config.numLayers * 2 * config.numKvHeads * config.headDim * 4;
}

/** Number of weights in the decoder (the file is this × 4 bytes plus a few kB of graph). */
export function parameterCount(config: ModelGenConfig): number {
  const { hiddenSize: h, numHeads, numKvHeads, headDim: d, intermediateSize: m, vocabSize: v, numLayers: l } = config;
  const embed = v * h;
  const head = config.tieWordEmbeddings ? 0 : h * v;
  if (config.architecture === 'gpt2') {
    const layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * m + m) + (m * h + h);
    return embed + config.maxPositions * h + l * layer + 2 * h + head;
  }
  const layer = 2 * h + h * numHeads * d + 2 * h * numKvHeads * d + numHeads * d * h + 3 * h * m;
  return embed + l * layer + h + head;
}

/** Refuses shapes the graph builders cannot express, naming the field and the numbers. */
export function validateConfig(config: ModelGenConfig): void {
  const positive: Array<keyof ModelGenConfig> = [
    'numLayers',
    'hiddenSize',
    'numHeads',
    'numKvHeads',
    'headDim',
    'intermediateSize',
    'vocabSize',
    'maxPositions',
  ];
  for (const key of positive) {
    const value = config[key];
    if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
      throw new Error(`model-gen: ${key} must be a positive integer, got ${String(value)}`);
    }
  }
  if (config.numHeads % config.numKvHeads !== 0) {
    throw new Error(
      `model-gen: numHeads (${config.numHeads}) must be a multiple of numKvHeads (${config.numKvHeads}) for grouped-query attention`,
    );
  }
  if (config.architecture === 'llama' && config.headDim % 2 !== 0) {
    throw new Error(
      `model-gen: rotary embeddings rotate pairs of dims, so headDim must be even, got ${config.headDim}`,
    );
  }
  if (config.architecture === 'gpt2') {
    if (config.numKvHeads !== config.numHeads) {
      throw new Error(
        `model-gen: gpt2 has no grouped-query attention: numKvHeads (${config.numKvHeads}) must equal numHeads (${config.numHeads})`,
      );
    }
    if (config.numHeads * config.headDim !== config.hiddenSize) {
      throw new Error(
        `model-gen: gpt2 needs numHeads × headDim = hiddenSize, got ${config.numHeads} × ${config.headDim} ≠ ${config.hiddenSize}`,
      );
    }
  }
  // 256 byte symbols, at least one merge and the special tokens.
  const minVocab = 256 + 1 + SPECIAL_TOKENS.length;
  if (config.vocabSize < minVocab) {
    throw new Error(
      `model-gen: a byte-level BPE vocabulary needs at least ${minVocab} tokens, got vocabSize ${config.vocabSize}`,
    );
  }
  if (!Number.isInteger(config.seed)) throw new Error(`model-gen: seed must be an integer, got ${config.seed}`);
}
