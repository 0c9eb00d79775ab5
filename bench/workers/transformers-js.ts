/**
 * transformers.js (@huggingface/transformers from bench/node_modules) on the
 * same package folder, local files only. Greedy generation through its own
 * generate(); a streamer timestamps each new token. The package is loaded by
 * a computed specifier so the project typechecks without bench/node_modules.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { physicalCores } from '../lib/cores';
import { generationTimes } from '../lib/stats';
import { runWorker, send } from '../lib/worker-main';
import type { GenerationSample, WorkerCommand } from '../lib/worker-protocol';

/** The part of transformers.js this worker uses. */
interface TransformersJs {
  env: {
    allowRemoteModels: boolean;
    allowLocalModels: boolean;
    localModelPath: string;
    useFSCache?: boolean;
    version?: string;
  };
  AutoModelForCausalLM: {
    from_pretrained(name: string, options: Record<string, unknown>): Promise<TjsModel>;
  };
  Tensor: new (type: string, data: BigInt64Array, dims: number[]) => unknown;
  BaseStreamer: new () => { put(value: bigint[][]): void; end(): void };
}
interface TjsModel {
  generate(options: Record<string, unknown>): Promise<unknown>;
  dispose(): Promise<unknown>;
}

let tjs: TransformersJs | null = null;
let model: TjsModel | null = null;

/** Resolves @huggingface/transformers from bench/node_modules only. */
export function transformersEntry(): string | null {
  try {
    const req = createRequire(path.resolve(__dirname, '..', 'package.json'));
    return req.resolve('@huggingface/transformers');
  } catch {
    return null;
  }
}

async function load(modelDir: string, threads: number | null): Promise<string> {
  const entry = transformersEntry();
  if (!entry)
    throw new Error(
      '@huggingface/transformers is not installed in bench/node_modules (cd bench && npm install --ignore-scripts)',
    );
  tjs = (await import(pathToFileURL(entry).href)) as TransformersJs;
  tjs.env.allowRemoteModels = false;
  tjs.env.allowLocalModels = true;
  tjs.env.localModelPath = `${path.dirname(modelDir)}/`;
  const sessionOptions = threads === null ? {} : { intraOpNumThreads: threads, interOpNumThreads: 1 };
  model = await tjs.AutoModelForCausalLM.from_pretrained(path.basename(modelDir), {
    dtype: 'fp32',
    device: 'cpu',
    local_files_only: true,
    session_options: sessionOptions,
  });
  const version = tjs.env.version ?? '?';
  const cores = physicalCores();
  const defaults = `default session options${cores === null ? '' : ` (onnxruntime: one intra-op thread per physical core, ${cores} here)`}`;
  return `@huggingface/transformers ${version}, ${threads === null ? defaults : `${threads} intra-op threads`}`;
}

async function generate(promptIds: number[], maxNew: number, eos: number[]): Promise<GenerationSample> {
  if (!tjs || !model) throw new Error('no model loaded');
  const ids: number[] = [];
  const stamps: number[] = [];
  let prompt = true;
  const streamer = new tjs.BaseStreamer();
  streamer.put = (value: bigint[][]) => {
    // The first put carries the prompt; every later one the new token of each row.
    if (prompt) {
      prompt = false;
      return;
    }
    const row = value[0] ?? [];
    for (const v of row) {
      ids.push(Number(v));
      stamps.push(performance.now());
    }
  };
  streamer.end = () => {};
  const input = new tjs.Tensor(
    'int64',
    BigInt64Array.from(promptIds, (v) => BigInt(v)),
    [1, promptIds.length],
  );
  const mask = new tjs.Tensor('int64', new BigInt64Array(promptIds.length).fill(1n), [1, promptIds.length]);
  const started = performance.now();
  await model.generate({
    input_ids: input,
    attention_mask: mask,
    max_new_tokens: maxNew,
    min_new_tokens: 0,
    do_sample: false,
    num_beams: 1,
    repetition_penalty: 1,
    eos_token_id: eos,
    streamer,
  });
  return { ids, ...generationTimes(ids.length, started, stamps[0] ?? started, stamps.at(-1) ?? started) };
}

async function handle(cmd: WorkerCommand): Promise<void> {
  switch (cmd.type) {
    case 'load': {
      const t0 = performance.now();
      const detail = await load(cmd.modelDir, cmd.threads);
      send({ type: 'loaded', loadMs: performance.now() - t0, detail });
      return;
    }
    case 'generate':
      send({ type: 'result', sample: await generate(cmd.promptIds, cmd.maxNewTokens, cmd.eosTokenIds) });
      return;
    case 'exit':
      await model?.dispose();
      process.exit(0);
  }
}

runWorker(handle, false);
