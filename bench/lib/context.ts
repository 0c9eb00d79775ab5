/** What every section gets: the options of this run and a progress logger (stderr, so stdout stays table + JSON). */
import type { BenchShape } from './models';
import type { NoiseGuard } from './noise';

/** Sizes of one run; --quick shrinks them. */
export interface BenchOptions {
  quick: boolean;
  shapes: BenchShape[];
  /** Repetitions of every A/B measurement (median of these). */
  reps: number;
  /** New tokens of the decode comparison (prompt 32 tokens). */
  decodeTokens: number;
  /** New tokens of the sampled and lookup comparisons: the decode comparison's, fewer in quick mode. */
  sideTokens: number;
  /** Prompt length of the long TTFT figure. */
  longPrompt: number;
  /** New tokens per stream in the concurrency figure. */
  streamTokens: number;
  streamCounts: number[];
  /** Prompt and new tokens of the KV-growth measurement. */
  kvPrompt: number;
  kvTokens: number;
  /** Intra-op threads of kvdesk, the raw loop and "transformers.js at equal threads". */
  threads: number;
  skip: Set<string>;
  /** Markdown report to write (full mode default bench/results/<date>.md), or null. */
  reportPath: string | null;
  /** Repeats samples that other processes disturbed. */
  guard: NoiseGuard;
}

/** Progress line on stderr. */
export function log(line: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
}

/** Round-robin order for round r: every contender takes every position equally often. */
export function rotate<T>(items: readonly T[], r: number): T[] {
  const k = items.length === 0 ? 0 : r % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}
