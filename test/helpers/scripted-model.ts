/**
 * A package whose model writes a script: after any prompt, its greedy reply is the script's tokens, then its
 * end token. The graph is a real past/present decoder as far as kvdesk can tell (one layer, one head of size
 * one); its logits are a table looked up by the reply's step. The step is the position less the prompt's
 * length, which the cache itself carries: the prompt's run (the one with no past) writes 1 for each of its
 * tokens, later runs 0, so the cache sums to the prompt's length. So a script holds only for prompts read in
 * one run with an empty cache (no session, no prompt cache, fewer tokens than a prefill chunk).
 *
 * The tokenizer is the default model's with extra special tokens appended (ids 512 on), and the chat template
 * the caller's: enough for a format that rests on special tokens (Harmony's) to be read on the real engine.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { GraphBuilder, int, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import { createTextTokenizer, type TextTokenizer } from '../../src/main/tokenizer';
import { defaultModelDir } from './fixtures';

export interface ScriptedPackage {
  dir: string;
  /** The package's tokenizer, for writing scripts and reading replies. */
  tokenizer: TextTokenizer;
  /** Ids of the extra special tokens, by content. */
  ids: Record<string, number>;
}

const BASE_VOCAB = 512;

/**
 * Writes the package under `dir`. `script(tok)`: the reply's tokens, from the package's tokenizer; `end`: the
 * extra token that ends it (its end-of-sequence ids are `ends`, by content).
 */
export function scriptedPackage(
  dir: string,
  o: {
    template: string;
    specials: readonly string[];
    ends: readonly string[];
    script: (p: ScriptedPackage) => number[];
  },
): ScriptedPackage {
  mkdirSync(dir, { recursive: true });
  const tokenizerJson = JSON.parse(readFileSync(path.join(defaultModelDir, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(readFileSync(path.join(defaultModelDir, 'tokenizer_config.json'), 'utf8'));
  const ids: Record<string, number> = {};
  o.specials.forEach((content, i) => {
    const id = BASE_VOCAB + i;
    ids[content] = id;
    const token = { content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
    tokenizerJson.added_tokens.push({ id, ...token });
    config.added_tokens_decoder[String(id)] = token;
  });
  const vocab = BASE_VOCAB + o.specials.length;
  config.chat_template = o.template;
  config.eos_token = o.ends[0];
  writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tokenizerJson));
  writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config, null, 2));
  const tokenizer = createTextTokenizer({ tokenizerJson, tokenizerConfig: config, vocabSize: vocab });
  const pkg: ScriptedPackage = { dir, tokenizer, ids };
  const steps = [...o.script(pkg), ids[o.ends[0] as string] as number];
  const capacity = 1024;

  const b = new GraphBuilder('scripted');
  const inputIds = b.input('input_ids', 'int64', ['batch', 'seq']);
  const positions = b.input('position_ids', 'int64', ['batch', 'seq']);
  const past = ['key', 'value'].map((kind) => b.input(`past.0.${kind}`, 'float32', ['batch', 1, 'past', 1]));
  // 1 in this run's cache entries when it is the prompt's (no past), else 0.
  const pastLength = b.op('Gather', [b.op('Shape', [past[0] as string]), b.int64([2], true)], { axis: int(0) });
  const first = b.op('Cast', [b.op('Equal', [pastLength, b.int64([0], true)])], { to: int(1) });
  const ones = b.op('Add', [b.op('Mul', [b.op('Cast', [inputIds], { to: int(1) }), b.scalar(0)]), b.scalar(1)]);
  const entries = b.op('Unsqueeze', [b.op('Mul', [ones, first]), b.int64([1, 3])]);
  const present = ['key', 'value'].map((kind, i) =>
    b.op('Concat', [past[i] as string, entries], { axis: int(2) }, `present.0.${kind}`),
  );
  // The reply's step: position − prompt length + 1 (0 at the prompt's last token), held to the table.
  const promptLength = b.op(
    'Cast',
    [b.op('ReduceSum', [present[0] as string, b.int64([1, 2, 3])], { keepdims: int(0) })],
    {
      to: int(7),
    },
  );
  const step = b.op('Add', [
    b.op('Sub', [positions, b.op('Unsqueeze', [promptLength, b.int64([1])])]),
    b.int64([1], true),
  ]);
  const clipped = b.op('Clip', [step, b.int64([0], true), b.int64([steps.length - 1], true)]);
  const table = b.weight('script', [steps.length, vocab], () => {
    const t = new Float32Array(steps.length * vocab);
    steps.forEach((id, s) => {
      t[s * vocab + id] = 10;
    });
    return t;
  });
  b.op('Gather', [table, clipped], { axis: int(0) }, 'logits');
  b.output('logits', 'float32', ['batch', 'seq', vocab]);
  for (const kind of ['key', 'value']) b.output(`present.0.${kind}`, 'float32', ['batch', 1, 'total', 1]);
  b.validate();
  writeOnnxModel(path.join(dir, 'model.onnx'), b, {
    producerName: 'kvdesk-tests',
    producerVersion: '1',
    opsetVersion: 17,
    irVersion: 8,
  });
  const endIds = o.ends.map((e) => ids[e]);
  writeFileSync(
    path.join(dir, 'inference_metadata.yaml'),
    [
      'model:',
      `  max_sequence_length: ${capacity}`,
      `  eos_token_id: [${endIds.join(', ')}]`,
      '  io:',
      '    token_input: input_ids',
      '    position_ids_input: position_ids',
      '    logits_output: logits',
      '    kv_inputs: [past.0.key, past.0.value]',
      '    kv_outputs: [present.0.key, present.0.value]',
      '',
    ].join('\n'),
  );
  return pkg;
}
