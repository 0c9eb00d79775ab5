/**
 * kvdesk's own model generator: small seeded decoder LLM packages in the
 * Hugging Face / Optimum layout, so kvdesk runs and tests on a fresh machine
 * without downloading anything. The CLI is scripts/generate-model.ts.
 */
export {
  type Architecture,
  bytesPerToken,
  isPresetName,
  type ModelGenConfig,
  PRESET_NAMES,
  type PresetName,
  parameterCount,
  presetConfig,
  SPECIAL_TOKENS,
  type SpecialTokenIds,
  specialTokenIds,
  validateConfig,
} from './config';
export { MASKED_BIAS } from './decoder-common';
export { GraphBuilder, writeOnnxModel } from './onnx-builder';
export {
  buildDecoderGraph,
  configHash,
  GENERATOR_VERSION,
  type GeneratedFile,
  type GenerateOptions,
  type GenerateResult,
  generateModelPackage,
  hfConfig,
  hfGenerationConfig,
  isUpToDate,
  MODEL_FILE,
  OPSET_VERSION,
  STAMP_FILE,
} from './package-writer';
export { buildTokenizer, byteSymbols, CHATML_TEMPLATE, learnBpe, tokenLogitBias } from './tokenizer';
