/**
 * What the LM head's 8-bit screen (src/main/engine/head-screen.ts) gives a lone greedy stream, or one that draws
 * among a top-k, by min-p, by top-p or over the whole vocabulary.
 * `node bin/run-ts.cjs bench/head-screen.ts [--shape gpt2-small] [--reps 5] [--tokens 96]
 *   [--top-k K | --min-p P | --top-p P | --whole] [--temperature T] [--repetition-penalty R]`
 *
 * Four decoders of the same package in this process (LoadedDecoder, lookup decoding off, kvdesk's threads), loaded
 * screened, full, full, screened: on this VM a decoder loaded later decodes a few per cent faster (bench/README.md,
 * "The load-order bias"), and the A B B A order gives each kind the same share of it. Each round runs all four in
 * rotated order and pools each kind's two times (their mean); each round one greedy reply of `--tokens` tokens after
 * a 32-token prompt (with `--top-k`, a draw at temperature 0.7, top-p 0.9 among the top K, seed 7, past any
 * end-of-text; with `--min-p`, a draw at temperature 0.7 with min-p P alone, seed 7; with `--top-p`, a draw at
 * temperature 0.7 with top-p P alone, seed 7; with `--whole`, a draw at temperature 0.7 over the whole vocabulary,
 * seed 7; `--temperature` sets the draws' temperature in place of 0.7; `--repetition-penalty` adds that penalty over
 * the prompt and reply). Prints decode ms per token (medians), their ratio, the tokens the screen scored again per
 * pick or draw, and fails when two greedy replies differ (draws are the same draws either way, but a near tie of
 * float32 scores may part them, so their sameness is said, not required).
 */
import os from 'node:os';
import { LoadedDecoder } from '../src/main/engine/decoder';
import { loadModelSpec } from '../src/main/packages';
import { GREEDY, greedyIds } from '../test/helpers/generation';
import { flagValue } from './lib/args';
import { log, rotate } from './lib/context';
import { type BenchShape, ensureModel } from './lib/models';
import { fmt, median } from './lib/stats';

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const shape = flagValue(argv, '--shape', 'gpt2-small') as BenchShape;
  const reps = Math.max(3, Number(flagValue(argv, '--reps', '5')));
  const tokens = Number(flagValue(argv, '--tokens', '96'));
  const topK = Number(flagValue(argv, '--top-k', '0'));
  const whole = argv.includes('--whole');
  const minP = Number(flagValue(argv, '--min-p', '0'));
  const topP = Number(flagValue(argv, '--top-p', '1'));
  const temperature = Number(flagValue(argv, '--temperature', '0.7'));
  const drawn = { ...GREEDY, greedy: false, temperature, seed: 7 };
  const penalty = Number(flagValue(argv, '--repetition-penalty', '1'));
  const { sampling: chosen, what: named } =
    topK > 0
      ? { sampling: { ...drawn, topK, topP: 0.9 }, what: `draw among the top ${topK}` }
      : minP > 0
        ? { sampling: { ...drawn, minP }, what: `draw by min-p ${minP}` }
        : topP < 1
          ? { sampling: { ...drawn, topP }, what: `draw by top-p ${topP}` }
          : whole
            ? { sampling: drawn, what: 'draw over the whole vocabulary' }
            : { sampling: GREEDY, what: 'pick' };
  const sampling = { ...chosen, repetitionPenalty: penalty };
  const what = penalty !== 1 ? `${named} with repetition penalty ${penalty}` : named;
  const threads = Math.max(1, os.availableParallelism());
  const { dir } = ensureModel(shape, log);
  const spec = await loadModelSpec(dir);
  const base = { intraOpNumThreads: threads, executionProviders: ['cpu'], lookupDraftTokens: 0 };
  const contenders: Array<{ name: string; d: LoadedDecoder; ms: number[]; ids: number[][] }> = [];
  for (const [name, headScreen] of [
    ['screened', true],
    ['full', false],
    ['full', false],
    ['screened', true],
  ] as const) {
    const started = performance.now();
    const d = await LoadedDecoder.load(spec, { ...base, headScreen });
    log(
      `${name} decoder loaded in ${fmt(performance.now() - started, 0)} ms${headScreen ? `: ${d.logits.screen}` : ''}`,
    );
    contenders.push({ name, d, ms: [], ids: [] });
  }
  const prompt = Array.from({ length: 32 }, (_, i) => 300 + ((i * 7919) % 20000));
  for (const c of contenders) await greedyIds((job, hooks) => c.d.generate(job, hooks), [prompt], 4);
  for (let r = 0; r < reps; r++) {
    for (const c of rotate(contenders, r)) {
      let first = 0;
      let last = 0;
      const ids: number[] = [];
      await c.d.generate(
        {
          rows: [prompt],
          maxNewTokens: tokens,
          sampling,
          eosTokenIds: [],
        },
        {
          onStart: () => {},
          onStep: (step) => {
            last = performance.now();
            if (ids.length === 0) first = last;
            ids.push(step[0] as number);
          },
          stopRequested: () => null,
          countRun: () => {},
        },
      );
      c.ms.push((last - first) / (ids.length - 1));
      c.ids.push(ids);
    }
    log(`round ${r + 1}: ${contenders.map((c) => `${c.name} ${fmt(c.ms[r] ?? Number.NaN, 2)} ms/token`).join(', ')}`);
  }
  // Each kind's two decoders pooled round by round (the mean of their times).
  const kind = (name: string) => {
    const [a, b] = contenders.filter((c) => c.name === name) as [(typeof contenders)[0], (typeof contenders)[0]];
    return { a, b, ms: a.ms.map((m, i) => (m + (b.ms[i] as number)) / 2) };
  };
  const s = kind('screened');
  const f = kind('full');
  const reference = (contenders[0] as (typeof contenders)[0]).ids;
  const same = contenders.every((c) => c.ids.every((ids, i) => ids.join() === reference[i]?.join()));
  let candidates = 0;
  let picks = 0;
  for (const { d } of [s.a, s.b]) {
    const stats = d.screenStats;
    candidates += stats.candidates;
    picks += stats.screenedPicks + stats.fullPicks + stats.screenedDraws + stats.fullDraws;
  }
  console.log(`| ${shape} | ms/token (two decoders each, loaded A B B A, pooled per round) | tok/s |`);
  console.log('| --- | ---: | ---: |');
  for (const [name, k] of [
    ['screened', s],
    ['full', f],
  ] as const) {
    console.log(`| ${name} | ${fmt(median(k.ms), 2)} | ${fmt(1000 / median(k.ms), 1)} |`);
  }
  const ratios = s.ms.map((m, i) => (f.ms[i] as number) / m);
  console.log(
    `\nscreened ÷ full tok/s: ${fmt(median(ratios), 2)}× (paired rounds: ${ratios.map((r) => fmt(r, 2)).join(' / ')}); tokens scored again per ${what}: ${fmt(candidates / Math.max(1, picks), 1)}; replies identical: ${same ? 'yes' : 'NO'}`,
  );
  for (const c of contenders) await c.d.dispose();
  if (!same && sampling.greedy) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
