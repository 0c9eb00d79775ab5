/**
 * Sampled decoding: decode tok/s of one stream through RunnerService (the
 * engine process draws each token on the thread that runs the model) with
 * greedy picks, with temperature 0.7 over the whole vocabulary (kvdesk's
 * default for a package that names none), and with the package's own defaults
 * (the generator writes temperature 0.7, top-k 50, top-p 0.9, as many packages
 * do), and with top-p 0.9 alone (what an OpenAI client's top_p asks for: on
 * these random weights the nucleus is a few hundred tokens of a flat top of
 * about 680, all of which the 8-bit head's screen scores again exactly to place
 * its edge, where a trained model's peaked rows take a round of 64), with
 * min-p 0.05 alone, and with Qwen2.5's defaults (a repetition penalty of 1.05 with top-k 20), alternating
 * round by round. The ratio to greedy is what drawing a
 * token costs on top of the model's step. Every reply runs to its last token,
 * past any end-of-text it draws (ignoreEos): on the Llama shape a package-default
 * reply ended after 3 tokens, timed over 2.
 */
import type { RunnerService } from '../../src/main/host/runner-service';
import type { SamplingSettings } from '../../src/shared/contract';
import { type BenchOptions, log, rotate } from '../lib/context';
import { kvdeskGenerate } from '../lib/kvdesk';
import type { PromptSource } from '../lib/prompts';
import { median } from '../lib/stats';

export const SAMPLING_MODES = {
  greedy: { label: 'greedy', sampling: { greedy: true } },
  whole: {
    label: "temperature 0.7 over the whole vocabulary (kvdesk's default where a package names none)",
    sampling: { temperature: 0.7, topK: 0, topP: 1, seed: 7 },
  },
  package: { label: "the package's defaults: temperature 0.7, top-k 50, top-p 0.9", sampling: { seed: 7 } },
  nucleus: {
    label: 'temperature 0.7, top-p 0.9 without top-k (on random weights a nucleus of hundreds of tokens)',
    sampling: { temperature: 0.7, topK: 0, topP: 0.9, seed: 7 },
  },
  minP: {
    label: 'temperature 0.7, min-p 0.05 alone',
    sampling: { temperature: 0.7, topK: 0, topP: 1, minP: 0.05, seed: 7 },
  },
  penalized: {
    label: "Qwen2.5's defaults: temperature 0.7, top-k 20, top-p 0.8, repetition penalty 1.05",
    sampling: { temperature: 0.7, topK: 20, topP: 0.8, repetitionPenalty: 1.05, seed: 7 },
  },
} satisfies Record<string, { label: string; sampling: SamplingSettings }>;

export type SamplingMode = keyof typeof SAMPLING_MODES;
/** The modes that draw, each compared with greedy. */
export const SAMPLED = ['whole', 'package', 'nucleus', 'minP', 'penalized'] as const;

export interface SamplingResult {
  tokens: number;
  /** Decode tok/s of every round, per mode. */
  tps: Record<SamplingMode, number[]>;
  /** Per-round ratios to greedy (paired). */
  vsGreedy: Record<Exclude<SamplingMode, 'greedy'>, number[]>;
}

export async function runSampling(
  opts: BenchOptions,
  runner: RunnerService,
  modelId: string,
  prompts: PromptSource,
): Promise<SamplingResult> {
  const modes = Object.keys(SAMPLING_MODES) as SamplingMode[];
  const tps: SamplingResult['tps'] = { greedy: [], whole: [], package: [], nucleus: [], minP: [], penalized: [] };
  const vsGreedy: SamplingResult['vsGreedy'] = { whole: [], package: [], nucleus: [], minP: [], penalized: [] };
  const prompt = prompts.prompt(32);
  for (let r = 0; r < opts.reps; r++) {
    const round: Partial<Record<SamplingMode, number>> = {};
    for (const mode of rotate(modes, r)) {
      const trace = await opts.guard.sample(`sampling ${mode}, round ${r + 1}`, () =>
        // Past the end-of-text, as every mode draws its own reply: one that ends early is timed over fewer tokens.
        kvdeskGenerate(runner, modelId, prompt, opts.sideTokens, {
          sampling: SAMPLING_MODES[mode].sampling,
          ignoreEos: true,
        }),
      );
      round[mode] = trace.sample.decodeTokensPerSecond;
      tps[mode].push(trace.sample.decodeTokensPerSecond);
    }
    for (const mode of SAMPLED) vsGreedy[mode].push((round[mode] as number) / (round.greedy as number));
    log(`  sampling round ${r + 1}/${opts.reps}: ${modes.map((m) => `${m} ${round[m]?.toFixed(1)}`).join(', ')} tok/s`);
  }
  log(
    `  sampling: whole vocabulary ×${median(vsGreedy.whole).toFixed(2)}, package defaults ×${median(vsGreedy.package).toFixed(2)}, top-p alone ×${median(vsGreedy.nucleus).toFixed(2)}, min-p alone ×${median(vsGreedy.minP).toFixed(2)}, Qwen2.5's defaults ×${median(vsGreedy.penalized).toFixed(2)} of greedy`,
  );
  return { tokens: opts.sideTokens, tps, vsGreedy };
}
