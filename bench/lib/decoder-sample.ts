/**
 * One greedy generation on kvdesk's own LoadedDecoder in the calling process,
 * timed per token: the in-process contender of bench/profile.ts
 * (workers/kvdesk-inproc.ts) and the lookup-decoding section.
 */
import type { LoadedDecoder } from '../../src/main/engine/decoder';
import type { LookupCount, StepLogprob } from '../../src/main/engine/protocol';
import { GREEDY } from '../../test/helpers/generation';
import { generationTimes } from './stats';
import type { GenerationSample } from './worker-protocol';

export interface DecoderSampleOptions {
  eosTokenIds?: number[];
  /** Every this many tokens, two full collections then [tokens in the KV, rss(), ArrayBuffer bytes]. */
  memoryEvery?: number;
  rss?: () => number;
  /** Each token's log-probability with this many alternatives. */
  logprobs?: number;
  /** A predicted reply (lookup decoding drafts from it first). */
  prediction?: number[];
}

export interface DecoderSample extends GenerationSample {
  /** Lookup decoding's drafted and accepted tokens (null when nothing was drafted). */
  lookup: LookupCount | null;
  logprobs: StepLogprob[];
}

export async function decoderSample(
  decoder: LoadedDecoder,
  promptIds: number[],
  maxNew: number,
  o: DecoderSampleOptions = {},
): Promise<DecoderSample> {
  const ids: number[] = [];
  const stamps: number[] = [];
  const logprobs: StepLogprob[] = [];
  const memory: Array<[number, number, number]> = [];
  const every = o.memoryEvery ?? 0;
  const started = performance.now();
  const outcome = await decoder.generate(
    {
      rows: [promptIds],
      maxNewTokens: maxNew,
      sampling: GREEDY,
      eosTokenIds: o.eosTokenIds ?? [],
      ...(o.logprobs ? { logprobs: o.logprobs } : {}),
      ...(o.prediction ? { prediction: o.prediction } : {}),
    },
    {
      onStart: () => {},
      onStep: (step, _kv, stepLogprobs) => {
        const id = step[0] as number;
        if (id < 0) return;
        ids.push(id);
        stamps.push(performance.now());
        const lp = stepLogprobs?.[0];
        if (lp) logprobs.push(lp);
        if (every > 0 && ids.length % every === 0) {
          (globalThis as { gc?: () => void }).gc?.();
          (globalThis as { gc?: () => void }).gc?.();
          memory.push([promptIds.length + ids.length, o.rss?.() ?? 0, process.memoryUsage().arrayBuffers]);
        }
      },
      stopRequested: () => null,
      countRun: () => {},
    },
  );
  return {
    ids,
    ...generationTimes(ids.length, started, stamps[0] ?? started, stamps.at(-1) ?? started),
    ...(every > 0 ? { memory } : {}),
    lookup: outcome.lookup ?? null,
    logprobs,
  };
}
