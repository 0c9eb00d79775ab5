/**
 * Pieces both decoder families share: the Optimum port names and shapes, the
 * additive attention bias (causal ∧ attention_mask), multi-/grouped-query
 * attention over a growing KV cache, and the LM head.
 */
import type { ModelGenConfig } from './config';
import { type GraphBuilder, int, ints } from './onnx-builder';
import { tensorSeed, uniformTensor } from './prng';

/** Symbolic dims as Optimum names them. */
export const DIMS = {
  batch: 'batch_size',
  seq: 'sequence_length',
  past: 'past_sequence_length',
  total: 'past_sequence_length + sequence_length',
} as const;

/**
 * The additive value for positions a query may not see. Large and finite rather
 * than -inf: a left-padding query row sees nothing at all, and softmax over a
 * row of -inf is NaN, while a row of equal finite values is merely uniform.
 */
export const MASKED_BIAS = -1e9;

/** Graph input/output names of one layer's cache. */
export interface KvPortNames {
  pastKey: string;
  pastValue: string;
  presentKey: string;
  presentValue: string;
}

/** The declared decoder inputs. */
export interface DecoderInputs {
  inputIds: string;
  attentionMask: string;
  positionIds: string;
  kv: KvPortNames[];
}

/** Declares the Optimum inputs (the outputs are declared by `declareDecoderOutputs` once produced). */
export function declareDecoderInputs(b: GraphBuilder, config: ModelGenConfig): DecoderInputs {
  const inputIds = b.input('input_ids', 'int64', [DIMS.batch, DIMS.seq]);
  const attentionMask = b.input('attention_mask', 'int64', [DIMS.batch, DIMS.total]);
  const positionIds = b.input('position_ids', 'int64', [DIMS.batch, DIMS.seq]);
  const kv: KvPortNames[] = [];
  for (let layer = 0; layer < config.numLayers; layer++) {
    const pastKey = b.input(`past_key_values.${layer}.key`, 'float32', [
      DIMS.batch,
      config.numKvHeads,
      DIMS.past,
      config.headDim,
    ]);
    const pastValue = b.input(`past_key_values.${layer}.value`, 'float32', [
      DIMS.batch,
      config.numKvHeads,
      DIMS.past,
      config.headDim,
    ]);
    kv.push({ pastKey, pastValue, presentKey: `present.${layer}.key`, presentValue: `present.${layer}.value` });
  }
  return { inputIds, attentionMask, positionIds, kv };
}

/** Declares logits and the present tensors; call after the graph produced them under these names. */
export function declareDecoderOutputs(b: GraphBuilder, config: ModelGenConfig, inputs: DecoderInputs): void {
  b.output('logits', 'float32', [DIMS.batch, DIMS.seq, config.vocabSize]);
  for (const kv of inputs.kv) {
    b.output(kv.presentKey, 'float32', [DIMS.batch, config.numKvHeads, DIMS.total, config.headDim]);
    b.output(kv.presentValue, 'float32', [DIMS.batch, config.numKvHeads, DIMS.total, config.headDim]);
  }
}

/** A weight filled with seeded uniform values of the given standard deviation (and mean, for norm gains). */
export function randomWeight(
  b: GraphBuilder,
  config: ModelGenConfig,
  name: string,
  dims: number[],
  std: number,
  mean = 0,
): string {
  const size = dims.reduce((a, c) => a * c, 1);
  return b.weight(name, dims, () => uniformTensor(size, tensorSeed(config.seed, name), std, mean));
}

/** A weight of one constant value (biases start at zero, norm gains at one). */
export function constantWeight(b: GraphBuilder, name: string, dims: number[], value: number): string {
  const size = dims.reduce((a, c) => a * c, 1);
  return b.weight(name, dims, () => new Float32Array(size).fill(value));
}

/**
 * Standard deviation of the token embedding. An untied head can take unit-scale
 * embeddings. A tied head scores token j by e_j · h, and the current token's own
 * e_t · e_t grows with the square of the scale: at unit scale it outweighs what
 * the layers add and greedy output repeats its input token forever. At the usual
 * 0.02 (transformers' initializer_range) the layers decide.
 */
export function embeddingStd(config: ModelGenConfig): number {
  return config.tieWordEmbeddings ? 0.02 : 1;
}

/**
 * Extra scale of the query projection's initial weights. With plain 1/√fan-in
 * weights attention is nearly uniform, every layer averages the positions
 * together, and in deep stacks (30 layers) every state ends up alike: greedy
 * text repeats one token. Sharper attention keeps positions apart. It is folded
 * into the weights, so the graph computes standard attention (scores / √headDim).
 */
export const QUERY_INIT_GAIN = 8;

/**
 * The additive attention bias, shape [batch, 1, 1, seq, total], broadcast over
 * KV heads and query groups. Query i of this run sits at cache index
 * past + i (= total − seq + i) and may see cache index j when j ≤ past + i and
 * attention_mask[j] = 1; everything else gets MASKED_BIAS.
 */
export function attentionBias(b: GraphBuilder, inputs: DecoderInputs): string {
  const total = b.op('Shape', [inputs.attentionMask], { start: int(1), end: int(2) });
  const seq = b.op('Shape', [inputs.inputIds], { start: int(1), end: int(2) });
  const zero = b.int64([0], true);
  const one = b.int64([1], true);
  const totalScalar = b.op('Squeeze', [total, b.int64([0])]);
  const seqScalar = b.op('Squeeze', [seq, b.int64([0])]);
  const firstQuery = b.op('Sub', [totalScalar, seqScalar]);
  const keyIndex = b.op('Range', [zero, totalScalar, one]);
  const queryIndex = b.op('Range', [firstQuery, totalScalar, one]);
  const causal = b.op('LessOrEqual', [
    b.op('Unsqueeze', [keyIndex, b.int64([0])]), // [1, total]
    b.op('Unsqueeze', [queryIndex, b.int64([1])]), // [seq, 1]
  ]); // [seq, total]
  const maskBool = b.op('Cast', [inputs.attentionMask], { to: int(9) }); // 9 = BOOL
  const padding = b.op('Unsqueeze', [maskBool, b.int64([1, 2, 3])]); // [batch, 1, 1, 1, total]
  const visible = b.op('And', [padding, causal]); // [batch, 1, 1, seq, total]
  return b.op('Where', [visible, b.scalar(0), b.scalar(MASKED_BIAS)]);
}

/** Optional rotary embedding for attention: cos/sin of shape [batch, seq, headDim]. */
export interface Rotary {
  cos: string;
  sin: string;
}

/** cos and sin of position_ids × inv_freq, in the rotate-half layout of Hugging Face Llama. */
export function rotaryTables(b: GraphBuilder, config: ModelGenConfig, positionIds: string): Rotary {
  const half = config.headDim / 2;
  const invFreq = b.weight('rotary_emb.inv_freq', [half], () =>
    Float32Array.from({ length: half }, (_, i) => 1 / config.ropeTheta ** ((2 * i) / config.headDim)),
  );
  const positions = b.op('Unsqueeze', [b.op('Cast', [positionIds], { to: int(1) }), b.int64([2])]); // [batch, seq, 1]
  const freqs = b.op('Mul', [positions, invFreq]); // [batch, seq, half]
  const angles = b.op('Concat', [freqs, freqs], { axis: int(-1) }); // [batch, seq, headDim]
  return { cos: b.op('Cos', [angles]), sin: b.op('Sin', [angles]) };
}

function applyRotary(b: GraphBuilder, x: string, cos: string, sin: string, half: number): string {
  const [x1, x2] = b.opN('Split', [x, b.int64([half, half])], { axis: int(-1) }, 2);
  if (x1 === undefined || x2 === undefined) throw new Error('model-gen: Split produced no halves');
  const rotated = b.op('Concat', [b.op('Neg', [x2]), x1], { axis: int(-1) });
  return b.op('Add', [b.op('Mul', [x, cos]), b.op('Mul', [rotated, sin])]);
}

/** Inputs of one attention block: projections of shape [batch, seq, heads × headDim]. */
export interface AttentionArgs {
  q: string;
  k: string;
  v: string;
  kv: KvPortNames;
  bias: string;
  rotary?: Rotary;
}

/**
 * Attention over past + new keys/values; writes present.N.key/value and returns
 * the context [batch, seq, numHeads × headDim]. Grouped-query attention without
 * repeating K/V: queries are laid out [batch, kvHeads, group, seq, dim] and keys
 * [batch, kvHeads, 1, dim, total], so MatMul broadcasts each KV head over its
 * group of query heads (head h uses KV head ⌊h / group⌋, as Hugging Face's
 * repeat_kv does).
 */
export function attention(b: GraphBuilder, config: ModelGenConfig, args: AttentionArgs): string {
  const { numHeads, numKvHeads, headDim } = config;
  const group = numHeads / numKvHeads;
  let q = b.op('Transpose', [b.op('Reshape', [args.q, b.int64([0, 0, numKvHeads, group, headDim])])], {
    perm: ints([0, 2, 3, 1, 4]),
  }); // [batch, kvHeads, group, seq, dim]
  let k = b.op('Transpose', [b.op('Reshape', [args.k, b.int64([0, 0, numKvHeads, headDim])])], {
    perm: ints([0, 2, 1, 3]),
  });
  const v = b.op('Transpose', [b.op('Reshape', [args.v, b.int64([0, 0, numKvHeads, headDim])])], {
    perm: ints([0, 2, 1, 3]),
  });
  if (args.rotary) {
    const half = headDim / 2;
    const cos4 = b.op('Unsqueeze', [args.rotary.cos, b.int64([1])]);
    const sin4 = b.op('Unsqueeze', [args.rotary.sin, b.int64([1])]);
    const cos5 = b.op('Unsqueeze', [args.rotary.cos, b.int64([1, 2])]);
    const sin5 = b.op('Unsqueeze', [args.rotary.sin, b.int64([1, 2])]);
    q = applyRotary(b, q, cos5, sin5, half);
    k = applyRotary(b, k, cos4, sin4, half);
  }
  const presentKey = b.op('Concat', [args.kv.pastKey, k], { axis: int(2) }, args.kv.presentKey);
  const presentValue = b.op('Concat', [args.kv.pastValue, v], { axis: int(2) }, args.kv.presentValue);
  // Transpose straight into MatMul, as exporters write `q @ k.transpose(-1, -2)`: onnxruntime folds it into the
  // MatMul (FusedMatMul transB). An Unsqueeze between them blocked that, and every step copied the whole key cache.
  const keysT = b.op('Transpose', [b.op('Unsqueeze', [presentKey, b.int64([2])])], { perm: ints([0, 1, 2, 4, 3]) });
  const values = b.op('Unsqueeze', [presentValue, b.int64([2])]);
  const scaledQ = b.op('Mul', [q, b.scalar(1 / Math.sqrt(headDim))]);
  const scores = b.op('Add', [b.op('MatMul', [scaledQ, keysT]), args.bias]); // [batch, kvHeads, group, seq, total]
  const probs = b.op('Softmax', [scores], { axis: int(-1) });
  const context = b.op('MatMul', [probs, values]); // [batch, kvHeads, group, seq, dim]
  const merged = b.op('Transpose', [context], { perm: ints([0, 3, 1, 2, 4]) }); // [batch, seq, kvHeads, group, dim]
  return b.op('Reshape', [merged, b.int64([0, 0, numHeads * headDim])]);
}

/**
 * Produces `logits` from the final hidden states. A tied head multiplies by the
 * embedding matrix itself (Gemm with transB) so the file holds the [vocab,
 * hidden] matrix once, as the real SmolLM and GPT-2 checkpoints do.
 */
export function lmHead(
  b: GraphBuilder,
  config: ModelGenConfig,
  hidden: string,
  embedding: string,
  inputIds: string,
  logitBias: Float32Array,
): string {
  const bias = b.weight('lm_head.bias', [config.vocabSize], () => logitBias);
  if (!config.tieWordEmbeddings) {
    const head = randomWeight(
      b,
      config,
      'lm_head.weight',
      [config.hiddenSize, config.vocabSize],
      1 / Math.sqrt(config.hiddenSize),
    );
    return b.op('Add', [b.op('MatMul', [hidden, head]), bias], {}, 'logits');
  }
  const flat = b.op('Reshape', [hidden, b.int64([-1, config.hiddenSize])]);
  const scores = b.op('Gemm', [flat, embedding, bias], { transB: int(1) });
  const shape = b.op('Concat', [b.op('Shape', [inputIds]), b.int64([config.vocabSize])], { axis: int(0) });
  return b.op('Reshape', [scores, shape], {}, 'logits');
}
