/**
 * GPT-2-style decoder: token + learned absolute position embeddings (gathered
 * by position_ids, so left-padded rows get the same positions as when alone),
 * pre-LayerNorm blocks with a fused QKV projection, multi-head attention, a
 * tanh-GELU MLP, final LayerNorm, and an LM head tied to the token embedding.
 */
import type { ModelGenConfig } from './config';
import {
  attention,
  attentionBias,
  constantWeight,
  declareDecoderInputs,
  declareDecoderOutputs,
  embeddingStd,
  lmHead,
  QUERY_INIT_GAIN,
  randomWeight,
} from './decoder-common';
import { float, GraphBuilder, int } from './onnx-builder';
import { tensorSeed, uniformTensor } from './prng';

function layerNorm(b: GraphBuilder, x: string, prefix: string, config: ModelGenConfig): string {
  const gain = constantWeight(b, `${prefix}.weight`, [config.hiddenSize], 1);
  const shift = constantWeight(b, `${prefix}.bias`, [config.hiddenSize], 0);
  return b.op('LayerNormalization', [x, gain, shift], { axis: int(-1), epsilon: float(config.normEps) });
}

/** GPT-2's gelu_new: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
export function geluTanh(b: GraphBuilder, x: string): string {
  const cube = b.op('Mul', [b.op('Mul', [x, x]), x]);
  const inner = b.op('Mul', [
    b.op('Add', [x, b.op('Mul', [cube, b.scalar(0.044715)])]),
    b.scalar(Math.sqrt(2 / Math.PI)),
  ]);
  return b.op('Mul', [b.op('Mul', [x, b.scalar(0.5)]), b.op('Add', [b.op('Tanh', [inner]), b.scalar(1)])]);
}

function linear(
  b: GraphBuilder,
  config: ModelGenConfig,
  x: string,
  name: string,
  inDim: number,
  outDim: number,
): string {
  const weight = randomWeight(b, config, `${name}.weight`, [inDim, outDim], 1 / Math.sqrt(inDim));
  return b.op('Add', [b.op('MatMul', [x, weight]), constantWeight(b, `${name}.bias`, [outDim], 0)]);
}

/**
 * A projection whose columns sum to zero. GELU's output has a positive mean
 * (≈ 0.28 for unit inputs), which a random projection turns into the same
 * vector for every token; summed over the layers it swamps the residual stream,
 * every state scores the same token highest, and greedy text repeats one token.
 * Zero column sums map that common part to nothing.
 */
function centeredWeight(b: GraphBuilder, config: ModelGenConfig, name: string, inDim: number, outDim: number): string {
  return b.weight(name, [inDim, outDim], () => {
    const w = uniformTensor(inDim * outDim, tensorSeed(config.seed, name), 1 / Math.sqrt(inDim));
    for (let o = 0; o < outDim; o++) {
      let sum = 0;
      for (let i = 0; i < inDim; i++) sum += w[i * outDim + o] ?? 0;
      const mean = sum / inDim;
      for (let i = 0; i < inDim; i++) w[i * outDim + o] = (w[i * outDim + o] ?? 0) - mean;
    }
    return w;
  });
}

/** Builds the whole GPT-2 graph. */
export function buildGpt2Graph(config: ModelGenConfig, logitBias: Float32Array): GraphBuilder {
  const b = new GraphBuilder(`kvdesk-${config.name}`);
  const h = config.hiddenSize;
  const inputs = declareDecoderInputs(b, config);

  const wte = randomWeight(b, config, 'transformer.wte.weight', [config.vocabSize, h], embeddingStd(config));
  // Half the token scale, as GPT-2 initialises wpe (0.01 against 0.02).
  const wpe = randomWeight(b, config, 'transformer.wpe.weight', [config.maxPositions, h], embeddingStd(config) / 2);
  let x = b.op('Add', [
    b.op('Gather', [wte, inputs.inputIds], { axis: int(0) }),
    b.op('Gather', [wpe, inputs.positionIds], { axis: int(0) }),
  ]);
  const bias = attentionBias(b, inputs);

  inputs.kv.forEach((kv, layer) => {
    const p = `transformer.h.${layer}`;
    const attnWeight = b.weight(`${p}.attn.c_attn.weight`, [h, 3 * h], () => {
      const w = uniformTensor(h * 3 * h, tensorSeed(config.seed, `${p}.attn.c_attn.weight`), 1 / Math.sqrt(h));
      // The first h columns are the query projection.
      for (let i = 0; i < h; i++)
        for (let o = 0; o < h; o++) w[i * 3 * h + o] = (w[i * 3 * h + o] ?? 0) * QUERY_INIT_GAIN;
      return w;
    });
    const qkv = b.op('Add', [
      b.op('MatMul', [layerNorm(b, x, `${p}.ln_1`, config), attnWeight]),
      constantWeight(b, `${p}.attn.c_attn.bias`, [3 * h], 0),
    ]);
    const [q, k, v] = b.opN('Split', [qkv, b.int64([h, h, h])], { axis: int(-1) }, 3);
    if (q === undefined || k === undefined || v === undefined)
      throw new Error('model-gen: QKV split produced too few outputs');
    const context = attention(b, config, { q, k, v, kv, bias });
    x = b.op('Add', [x, linear(b, config, context, `${p}.attn.c_proj`, h, h)]);

    const hidden = linear(b, config, layerNorm(b, x, `${p}.ln_2`, config), `${p}.mlp.c_fc`, h, config.intermediateSize);
    const down = centeredWeight(b, config, `${p}.mlp.c_proj.weight`, config.intermediateSize, h);
    const mlpOut = b.op('Add', [
      b.op('MatMul', [geluTanh(b, hidden), down]),
      constantWeight(b, `${p}.mlp.c_proj.bias`, [h], 0),
    ]);
    x = b.op('Add', [x, mlpOut]);
  });

  const final = layerNorm(b, x, 'transformer.ln_f', config);
  lmHead(b, config, final, wte, inputs.inputIds, logitBias);
  declareDecoderOutputs(b, config, inputs);
  return b;
}
