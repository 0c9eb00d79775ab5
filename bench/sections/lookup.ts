/**
 * Lookup decoding (src/main/engine/lookup.ts): decode tok/s of one stream with
 * lookup off, with the real drafter on the bench's prompt, with the real
 * drafter given the reply as the client's prediction, with a drafter that
 * is always right (the reply known in advance: the most a reply that repeats
 * text it has seen can gain) and one that is always wrong (what a miss costs,
 * with the engine's rest after each miss). The bench's models have random
 * weights: their replies do not repeat the prompt, so the real drafter finds
 * little here, and the two bounds say what it is worth where text repeats.
 * Measured in this process on the engine's own decoder (a drafter cannot be
 * swapped across the engine process's boundary), alternating the four
 * contenders round by round. Every reply must equal lookup-off's, except where
 * the two likeliest tokens of lookup-off's step are within rounding of each
 * other (a check scores several positions in one wider product, whose sums
 * round differently, as a batch's do): such a near tie is reported, not failed.
 */
import { LoadedDecoder } from '../../src/main/engine/decoder';
import { type Drafter, LOOKUP_DRAFT_TOKENS, lookupDraft } from '../../src/main/engine/lookup';
import type { LookupCount } from '../../src/main/engine/protocol';
import { loadModelSpec } from '../../src/main/packages';
import { type BenchOptions, log, rotate } from '../lib/context';
import { type DecoderSample, decoderSample } from '../lib/decoder-sample';
import type { PromptSource } from '../lib/prompts';
import { median } from '../lib/stats';

export type LookupMode = 'off' | 'real' | 'predicted' | 'right' | 'wrong';

export interface LookupResult {
  tokens: number;
  maxDraft: number;
  /** Decode tok/s of every round, per mode. */
  tps: Record<LookupMode, number[]>;
  /** Per-round ratios to lookup off (paired). */
  vsOff: Record<Exclude<LookupMode, 'off'>, number[]>;
  /** Drafted and accepted tokens of the last round, per mode. */
  counts: Record<Exclude<LookupMode, 'off'>, LookupCount | null>;
  /** A reply that differed from lookup-off's where its two likeliest tokens were not a near tie (fails the run). */
  mismatch: string | null;
  /** Replies that went the other way at a near tie of lookup-off's two likeliest tokens. */
  nearTies: string[];
}

/**
 * Two logits closer than this are a near tie: rounding of a wider product can order them either way (the
 * engine's own check of the last-position copy allows 1e-3 of the logits' scale between two runs).
 */
const NEAR_TIE = 1e-3;

/**
 * Null when `got` is the reference reply; otherwise where it differs, and whether lookup-off's two likeliest
 * tokens there were a near tie that `got` took the other way.
 */
function compare(reference: DecoderSample, got: number[]): { at: number; tie: boolean; gap: number } | null {
  const ref = reference.ids;
  const at = ref.findIndex((id, i) => got[i] !== id);
  if (at < 0 && got.length === ref.length) return null;
  const top = reference.logprobs[at]?.top ?? [];
  const gap = top.length >= 2 ? (top[0]?.logprob as number) - (top[1]?.logprob as number) : Number.POSITIVE_INFINITY;
  const scale = Math.max(1, Math.abs(top[0]?.logprob ?? 0));
  return { at, gap, tie: at >= 0 && got[at] === top[1]?.id && gap <= NEAR_TIE * scale };
}

export async function runLookup(opts: BenchOptions, dir: string, prompts: PromptSource): Promise<LookupResult> {
  const spec = await loadModelSpec(dir);
  const decoder = await LoadedDecoder.load(spec, { intraOpNumThreads: opts.threads, executionProviders: ['cpu'] });
  const lookup = decoder.lookup;
  if (!lookup) {
    await decoder.dispose();
    throw new Error(`lookup decoding is off for ${dir} (${decoder.logits.detail})`);
  }
  const tokens = opts.sideTokens;
  const prompt = prompts.prompt(32);
  const tps: LookupResult['tps'] = { off: [], real: [], predicted: [], right: [], wrong: [] };
  const vsOff: LookupResult['vsOff'] = { real: [], predicted: [], right: [], wrong: [] };
  const counts: LookupResult['counts'] = { real: null, predicted: null, right: null, wrong: null };
  let mismatch: string | null = null;
  /** Near ties by what happened (mode, token, gap), with the rounds it happened in. */
  const ties = new Map<string, number[]>();
  try {
    lookup.maxDraft = 0;
    const reference = await decoderSample(decoder, prompt, tokens, { logprobs: 2 });
    const text = [...prompt, ...reference.ids];
    const drafters: Record<Exclude<LookupMode, 'off'>, Drafter> = {
      real: lookupDraft,
      predicted: lookupDraft,
      right: (history, max) => text.slice(history.length, history.length + max),
      wrong: (history, max) =>
        Array.from({ length: max }, (_, i) => ((text[history.length + i] ?? 0) + 1) % spec.vocabSize),
    };
    const modes: LookupMode[] = ['off', 'real', 'predicted', 'right', 'wrong'];
    for (let r = 0; r < opts.reps; r++) {
      const round: Partial<Record<LookupMode, number>> = {};
      for (const mode of rotate(modes, r)) {
        lookup.maxDraft = mode === 'off' ? 0 : LOOKUP_DRAFT_TOKENS;
        lookup.drafter = mode === 'off' ? lookupDraft : drafters[mode];
        // Predicted: kvdesk's drafter given the reply as the client's prediction (Predicted Outputs).
        const predicted = mode === 'predicted' ? reference.ids : undefined;
        const s = await opts.guard.sample(`lookup ${mode}, round ${r + 1}`, () =>
          decoderSample(decoder, prompt, tokens, predicted ? { prediction: predicted } : {}),
        );
        const diff = compare(reference, s.ids);
        if (diff) {
          const at = diff.at < 0 ? s.ids.length : diff.at;
          const gap = diff.gap.toExponential(1);
          if (diff.tie) {
            const key = `lookup decoding (${mode}) went another way at token ${at}: a near tie of lookup-off's two likeliest tokens (${gap} apart)`;
            ties.set(key, [...(ties.get(key) ?? []), r + 1]);
          } else {
            mismatch ??= `lookup decoding (${mode}, round ${r + 1}) went another way at token ${at}, where lookup-off's two likeliest tokens were ${gap} apart: not rounding`;
          }
        }
        round[mode] = s.decodeTokensPerSecond;
        tps[mode].push(s.decodeTokensPerSecond);
        if (mode !== 'off') counts[mode] = s.lookup ?? { drafted: 0, accepted: 0 };
      }
      for (const mode of ['real', 'predicted', 'right', 'wrong'] as const) {
        vsOff[mode].push((round[mode] as number) / (round.off as number));
      }
      log(`  lookup round ${r + 1}/${opts.reps}: ${modes.map((m) => `${m} ${round[m]?.toFixed(1)}`).join(', ')} tok/s`);
    }
  } finally {
    await decoder.dispose();
  }
  log(
    `  lookup: right ×${median(vsOff.right).toFixed(2)}, predicted ×${median(vsOff.predicted).toFixed(2)}, wrong ×${median(vsOff.wrong).toFixed(2)}, real ×${median(vsOff.real).toFixed(2)} (took ${counts.real?.accepted ?? 0} of ${counts.real?.drafted ?? 0})`,
  );
  const nearTies = [...ties].map(
    ([what, rounds]) => `${what}, round${rounds.length > 1 ? 's' : ''} ${rounds.join(', ')}`,
  );
  for (const t of nearTies) log(`  ${t}`);
  return { tokens, maxDraft: LOOKUP_DRAFT_TOKENS, tps, vsOff, counts, mismatch, nearTies };
}
