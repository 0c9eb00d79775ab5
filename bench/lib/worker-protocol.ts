/**
 * Messages between the bench orchestrator and its contender processes (the raw
 * onnxruntime loop and transformers.js). Each contender runs in its own forked
 * process, like kvdesk's engine, so none of them blocks the orchestrator's event
 * loop and none shares a heap or an onnxruntime environment with another.
 */

/** Orchestrator → contender. */
export type WorkerCommand =
  | { type: 'load'; modelDir: string; threads: number | null }
  | { type: 'generate'; promptIds: number[]; maxNewTokens: number; eosTokenIds: number[]; memoryEvery?: number }
  /** workers/raw-ort.ts: greedy decode of prompts of one length as the rows of one batch (no end of sequence). */
  | { type: 'generateBatch'; prompts: number[][]; maxNewTokens: number }
  /** workers/weight-floor.ts: time `runs` runs of the loaded matrix chain. */
  | { type: 'floor'; runs: number }
  | { type: 'exit' };

/** Timings and tokens of one greedy generation, measured inside the contender. */
export interface GenerationSample {
  ids: number[];
  /** From the call to the first sampled token (prefill + first argmax). */
  ttftMs: number;
  /** (tokens − 1) / (time of last token − time of first token). */
  decodeTokensPerSecond: number;
  totalMs: number;
  /** Time spent inside session.run and how many runs (only when the contender measures it: bench/profile.ts). */
  runMs?: number;
  runs?: number;
  /** Time of the first run (the prefill). */
  prefillRunMs?: number;
  /** [tokens in the KV, VmRSS bytes, ArrayBuffer bytes] every `memoryEvery` steps (KV-truth reference). */
  memory?: Array<[number, number, number]>;
}

/** Contender → orchestrator. */
export type WorkerEvent =
  | { type: 'ready'; pid: number }
  | { type: 'loaded'; loadMs: number; detail: string }
  | { type: 'result'; sample: GenerationSample }
  /** The rows of a batch: each row's ids, and the time from the call to the last token. */
  | { type: 'batchResult'; rows: number[][]; totalMs: number }
  /** workers/weight-floor.ts: ms of each timed run. */
  | { type: 'floor'; ms: number[] }
  | { type: 'error'; message: string }
  /** An engine event forwarded like the engine process forwards it to the host (workers/kvdesk-core.ts); ignored. */
  | { type: 'engine'; event: unknown };
