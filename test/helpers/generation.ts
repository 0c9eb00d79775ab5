import type { GenerationHooks, GenerationJob } from '../../src/main/engine/decoder';

/** Greedy sampling as the engine takes it. */
export const GREEDY = { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 };

/**
 * Greedy ids of each row, from a decode loop (LoadedDecoder.generate or
 * ContinuousBatcher.submit) run without an end token.
 */
export async function greedyIds(
  run: (job: GenerationJob, hooks: GenerationHooks) => Promise<unknown>,
  rows: number[][],
  maxNewTokens: number,
): Promise<number[][]> {
  const out: number[][] = rows.map(() => []);
  const hooks: GenerationHooks = {
    onStart: () => {},
    onStep: (ids) => {
      for (const [r, id] of ids.entries()) if (id >= 0) out[r]?.push(id);
    },
    stopRequested: () => null,
    countRun: () => {},
  };
  await run({ rows, maxNewTokens, sampling: GREEDY, eosTokenIds: [] }, hooks);
  return out;
}
