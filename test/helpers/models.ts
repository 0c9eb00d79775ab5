import {
  chmodSync,
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { threadId } from 'node:worker_threads';
import { generateModelPackage, type ModelGenConfig, presetConfig } from '../../scripts/model-gen';
import { GraphBuilder, int, writeOnnxModel } from '../../scripts/model-gen/onnx-builder';
import type { ChatMessage } from '../../src/shared/contract';
import { defaultModelDir } from './fixtures';

/**
 * Writes (once per machine, cached under the temp dir) a generated model
 * package with the given overrides of the default preset, and returns its path.
 */
export function generatedModel(name: string, overrides: Partial<ModelGenConfig>): string {
  const config: ModelGenConfig = { ...presetConfig('default'), ...overrides, name };
  const dir = path.join(os.tmpdir(), 'kvdesk-test-models', name);
  generateModelPackage(dir, config);
  return dir;
}

/**
 * A package with two graph variants, as a transformers.js repository has them: the default preset's
 * onnx/model.onnx (fp32) and an onnx/model_q4.onnx sibling of the same shape with other weights (another seed), so
 * the two write different tokens.
 */
export function graphVariantsModel(): string {
  const dir = generatedModel('graph-variants', {});
  const other = generatedModel('graph-variants-other-seed', { seed: 7 });
  const source = path.join(other, 'onnx/model.onnx');
  const target = path.join(dir, 'onnx/model_q4.onnx');
  // Test files in other workers call this while one of them loads the package: never write the file in place (a
  // reader would see it change size); put a whole copy beside it and rename it over, and only when it differs.
  if (sizeOrNull(target) !== statSync(source).size) {
    const temp = `${target}.tmp-${process.pid}-${threadId}`;
    copyFileSync(source, temp);
    renameSync(temp, target);
  }
  return dir;
}

/**
 * The package `name` under the shared test-models folder, as `build` writes it. Test files in other workers read it
 * while another calls this, so it is never written in place: `build` writes a private folder, which replaces the
 * package whole, and only when they differ.
 */
function sharedPackage(name: string, build: (dir: string) => void): string {
  const root = path.join(os.tmpdir(), 'kvdesk-test-models');
  const dir = path.join(root, name);
  mkdirSync(root, { recursive: true });
  const temp = mkdtempSync(path.join(root, `.${name}.tmp-`));
  // mkdtemp makes it 0700; the package should read like any other folder.
  chmodSync(temp, 0o755 & ~process.umask());
  try {
    build(temp);
    if (sameTree(temp, dir)) return dir;
    const old = `${temp}.old`;
    try {
      renameSync(dir, old);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    try {
      renameSync(temp, dir);
    } catch (error) {
      // Another worker put its build (the same package) in place meanwhile.
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
    }
    rmSync(old, { recursive: true, force: true });
    return dir;
  } finally {
    rmSync(temp, { recursive: true, force: true });
  }
}

/** Whether the folders hold the same files with the same bytes. */
function sameTree(a: string, b: string): boolean {
  const list = (dir: string) => readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
  let theirs: string[];
  try {
    theirs = list(b)
      .map((e) => path.relative(b, path.join(e.parentPath, e.name)))
      .sort();
  } catch {
    return false;
  }
  const ours = list(a)
    .map((e) => path.relative(a, path.join(e.parentPath, e.name)))
    .sort();
  if (ours.join('\n') !== theirs.join('\n')) return false;
  return ours.every((file) => readFileSync(path.join(a, file)).equals(readFileSync(path.join(b, file))));
}

function sizeOrNull(file: string): number | null {
  try {
    return statSync(file).size;
  } catch {
    return null;
  }
}

/**
 * An ORT model package of the "installed" layout: only a manifest.json, whose one CPU variant is the default
 * model's folder, named by its absolute path (outside the package) — loaded only when the person trusts it.
 */
export function installedPackage(): string {
  return sharedPackage('installed-ort', (dir) => {
    const manifest = {
      schema_version: '1.0',
      layout: 'installed',
      package_name: 'installed-ort',
      components: {
        model: {
          variants: {
            cpu: {
              ep: 'CPUExecutionProvider',
              device: 'cpu',
              variant_directory: defaultModelDir,
              executor_info: { ort: { model_file: 'onnx/model.onnx' } },
            },
          },
        },
      },
    };
    writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2));
  });
}

/** The context of {@link smallContextModel}. */
export const SMALL_CONTEXT = 256;

/** The default preset with a context of 256 tokens: a conversation outgrows it in a few turns. */
export function smallContextModel(): string {
  return generatedModel('context-256', { maxPositions: SMALL_CONTEXT });
}

/** Twelve exchanges of about 40 tokens each: far more than {@link SMALL_CONTEXT} tokens. */
export const LONG_CONVERSATION: ChatMessage[] = Array.from({ length: 12 }, (_, i) => [
  {
    role: 'user' as const,
    content: `Question ${i + 1}: what is the name of the river that runs through town number ${i + 1}?`,
  },
  {
    role: 'assistant' as const,
    content: `The river through town number ${i + 1} is called the Willow, as it always was.`,
  },
]).flat();

/** A model big enough that one prefill takes a noticeable time on a CPU (≈25M parameters). */
export function slowModel(): string {
  return generatedModel('slow-llama', {
    numLayers: 8,
    hiddenSize: 512,
    numHeads: 8,
    numKvHeads: 4,
    headDim: 64,
    intermediateSize: 1376,
    vocabSize: 2048,
    maxPositions: 4096,
  });
}

/**
 * A valid onnx-genai package whose graph onnxruntime refuses to load (it uses
 * an operator no onnxruntime build has): for the engine's load-failure paths.
 */
export function unloadablePackage(): string {
  return sharedPackage('unloadable', (dir) => {
    const b = new GraphBuilder('unloadable');
    const ids = b.input('input_ids', 'int64', ['batch', 'seq']);
    const embed = b.weight('embed', [512, 8], () => new Float32Array(512 * 8));
    const hidden = b.op('KvdeskNoSuchOperator', [b.op('Gather', [embed, ids], { axis: int(0) })]);
    b.op('MatMul', [hidden, b.weight('head', [8, 512], () => new Float32Array(8 * 512))], {}, 'logits');
    b.output('logits', 'float32', ['batch', 'seq', 512]);
    writeOnnxModel(path.join(dir, 'model.onnx'), b, {
      producerName: 'kvdesk-tests',
      producerVersion: '1',
      opsetVersion: 17,
      irVersion: 8,
    });
    writeFileSync(
      path.join(dir, 'inference_metadata.yaml'),
      'model:\n  max_sequence_length: 64\n  io:\n    token_input: input_ids\n    logits_output: logits\n',
    );
    copyFileSync(path.join(defaultModelDir, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
  });
}

/**
 * The default package with a limit of its own on a reply's tokens (generation_config's max_new_tokens): `limit`,
 * short enough that a reply stops there.
 */
export function replyLimitModel(limit = 8): string {
  return sharedPackage(`reply-limit-${limit}`, (dir) => {
    cpSync(defaultModelDir, dir, { recursive: true });
    const at = path.join(dir, 'generation_config.json');
    writeFileSync(at, JSON.stringify({ ...JSON.parse(readFileSync(at, 'utf8')), max_new_tokens: limit }));
  });
}

/** The id of `</think>` in {@link thinkingModel}: one token (the unused `<|endoftext|>`, renamed), as in Qwen3's vocabulary. */
export const THINK_END_ID = 509;

/**
 * The default package as a thinking model with Qwen3's switch: its template opens the reply with `<think>` (as
 * DeepSeek-R1's does), or with `enable_thinking=false` closes it empty (as Qwen3's does), and `</think>` is one
 * token, so a logit bias makes the random model end its reasoning after a few tokens. `template`: another
 * template for the same package (under another `name`).
 */
export function thinkingModel(name = 'thinking', template = THINKING_TEMPLATE): string {
  return sharedPackage(name, (dir) => {
    cpSync(defaultModelDir, dir, { recursive: true });
    asThinkingModel(dir, THINK_END_ID, 511, template);
  });
}

/** The id of `</think>` in {@link slowThinkingModel} (its unused `<|endoftext|>`, renamed). */
export const SLOW_THINK_END_ID = 2045;

/**
 * The slow model ({@link slowModel}: milliseconds a token on a CPU) as a thinking model, as {@link thinkingModel}
 * makes the default one: with `</think>` and its end-of-text banned, a reply reasons until it is stopped.
 */
export function slowThinkingModel(): string {
  const base = slowModel();
  return sharedPackage('slow-thinking', (dir) => {
    cpSync(base, dir, { recursive: true });
    asThinkingModel(dir, SLOW_THINK_END_ID, 2047, THINKING_TEMPLATE);
  });
}

/** Makes the package in `dir` a thinking model: token `endId` becomes `</think>`, `eosId` its only end of text. */
function asThinkingModel(dir: string, endId: number, eosId: number, template: string): void {
  const edit = (file: string, change: (json: Record<string, unknown>) => void) => {
    const at = path.join(dir, file);
    const json = JSON.parse(readFileSync(at, 'utf8'));
    change(json);
    writeFileSync(at, JSON.stringify(json));
  };
  edit('tokenizer.json', (t) => {
    const added = (t.added_tokens as Array<{ id: number }>).find((a) => a.id === endId);
    Object.assign(added as object, { content: '</think>', special: false });
  });
  edit('tokenizer_config.json', (c) => {
    (c.added_tokens_decoder as Record<string, unknown>)[String(endId)] = {
      content: '</think>',
      special: false,
    };
    c.bos_token = null;
    c.pad_token = null;
    c.chat_template = template;
  });
  edit('generation_config.json', (g) => {
    g.eos_token_id = eosId;
  });
  edit('config.json', (c) => {
    c.bos_token_id = null;
    c.pad_token_id = null;
  });
}

/**
 * ChatML with Qwen3's reasoning: an assistant turn's reasoning shown when it has some (Qwen3 shows it after the
 * last user message only), the reply opened with `<think>` (as DeepSeek-R1's) unless switched off.
 */
export const THINKING_TEMPLATE =
  "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}" +
  "{% if m.reasoning_content %}{{ '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' }}{% endif %}" +
  "{{ m.content + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}" +
  "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}";

/**
 * The first of a few hundred questions on which `ask`'s greedy reply (16 tokens of {@link thinkingModel}) reasons
 * and then answers: the random model ends its reasoning by itself on a few, so an API without a logit bias sees
 * both. Throws when none does.
 */
export async function naturalThinkingQuestion<T extends { reasoning?: string | undefined; text: string }>(
  ask: (question: string) => Promise<T>,
): Promise<{ question: string; reply: T }> {
  for (let i = 0; i < 300; i++) {
    const question = `Question ${i}: why is the sky blue?`;
    const reply = await ask(question);
    if (reply.reasoning && reply.text.trim()) return { question, reply };
  }
  throw new Error('no question of the 300 tried made the thinking model end its reasoning within 16 tokens');
}
