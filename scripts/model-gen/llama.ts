/**
 * Llama-style decoder: token embedding, RMSNorm, rotary position embeddings
 * from position_ids, grouped-query attention, SwiGLU MLP, final RMSNorm, LM head.
 * Weight names follow the Hugging Face checkpoint names so a person reading the
 * graph in Netron recognises them; matrices are stored [in, out] for MatMul.
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
  rotaryTables,
} from './decoder-common';
import { GraphBuilder, int, ints } from './onnx-builder';

/** RMSNorm, spelled Pow → ReduceMean → Add → Sqrt → Div → Mul: the pattern ORT's SimplifiedLayerNorm fusion recognises. */
export function rmsNorm(b: GraphBuilder, x: string, weight: string, eps: number): string {
  const meanSquare = b.op('ReduceMean', [b.op('Pow', [x, b.scalar(2)])], { axes: ints([-1]), keepdims: int(1) });
  const rms = b.op('Sqrt', [b.op('Add', [meanSquare, b.scalar(eps)])]);
  return b.op('Mul', [b.op('Div', [x, rms]), weight]);
}

/** Builds the whole Llama graph. */
export function buildLlamaGraph(config: ModelGenConfig, logitBias: Float32Array): GraphBuilder {
  const b = new GraphBuilder(`kvdesk-${config.name}`);
  const { hiddenSize: h, numHeads, numKvHeads, headDim: d, intermediateSize: m } = config;
  const inputs = declareDecoderInputs(b, config);
  const fanIn = (n: number): number => 1 / Math.sqrt(n);

  const embedding = randomWeight(b, config, 'model.embed_tokens.weight', [config.vocabSize, h], embeddingStd(config));
  let x = b.op('Gather', [embedding, inputs.inputIds], { axis: int(0) });
  const bias = attentionBias(b, inputs);
  const rotary = rotaryTables(b, config, inputs.positionIds);

  inputs.kv.forEach((kv, layer) => {
    const p = `model.layers.${layer}`;
    const normed = rmsNorm(b, x, constantWeight(b, `${p}.input_layernorm.weight`, [h], 1), config.normEps);
    const q = b.op('MatMul', [
      normed,
      randomWeight(b, config, `${p}.self_attn.q_proj.weight`, [h, numHeads * d], fanIn(h) * QUERY_INIT_GAIN),
    ]);
    const k = b.op('MatMul', [
      normed,
      randomWeight(b, config, `${p}.self_attn.k_proj.weight`, [h, numKvHeads * d], fanIn(h)),
    ]);
    const v = b.op('MatMul', [
      normed,
      randomWeight(b, config, `${p}.self_attn.v_proj.weight`, [h, numKvHeads * d], fanIn(h)),
    ]);
    const context = attention(b, config, { q, k, v, kv, bias, rotary });
    const attnOut = b.op('MatMul', [
      context,
      randomWeight(b, config, `${p}.self_attn.o_proj.weight`, [numHeads * d, h], fanIn(numHeads * d)),
    ]);
    x = b.op('Add', [x, attnOut]);

    const normed2 = rmsNorm(b, x, constantWeight(b, `${p}.post_attention_layernorm.weight`, [h], 1), config.normEps);
    const gate = b.op('MatMul', [normed2, randomWeight(b, config, `${p}.mlp.gate_proj.weight`, [h, m], fanIn(h))]);
    const up = b.op('MatMul', [normed2, randomWeight(b, config, `${p}.mlp.up_proj.weight`, [h, m], fanIn(h))]);
    const silu = b.op('Mul', [gate, b.op('Sigmoid', [gate])]);
    const down = b.op('MatMul', [
      b.op('Mul', [silu, up]),
      randomWeight(b, config, `${p}.mlp.down_proj.weight`, [m, h], fanIn(m)),
    ]);
    x = b.op('Add', [x, down]);
  });

  const final = rmsNorm(b, x, constantWeight(b, 'model.norm.weight', [h], 1), config.normEps);
  lmHead(b, config, final, embedding, inputs.inputIds, logitBias);
  declareDecoderOutputs(b, config, inputs);
  return b;
}
