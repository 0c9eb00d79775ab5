/**
 * What the HTTP API's prompt cache saves: time to first token of each turn of a conversation whose client sends
 * the whole history every time (as OpenAI clients do), with the cache and without it.
 * `node bin/run-ts.cjs bench/prompt-cache.ts [--reps 3] [--turns 6] [--shape gpt2-small]`
 *
 * One host (RunnerService) on the bench model (bench/models/<shape>, generated when missing). Each rep is a
 * fresh conversation; at every turn the same request runs once through the prompt cache (`promptCache`, as the
 * OpenAI routes send it) and once without, alternating which goes first; greedy replies must be identical.
 * Medians over the reps, per turn; the last line is one JSON object.
 */
import os from 'node:os';
import { RunnerService } from '../src/main/host/runner-service';
import type { ChatMessage, GenerationResult } from '../src/shared/contract';
import { flagValue } from './lib/args';
import { log } from './lib/context';
import { type BenchShape, ensureModel } from './lib/models';
import { fmt, median } from './lib/stats';

const QUESTIONS = [
  'Tell me about the history of lighthouses along rocky coasts, and why they were built where they were.',
  'How did the keepers live, and what did a normal day of work look like for them through the seasons?',
  'What kinds of lamps and lenses were used, and how did they change over the nineteenth century?',
  'Why did most lighthouses become automatic, and what happened to the keepers and their families then?',
  'Which lighthouses are the most famous today, and what makes each of them special for visitors?',
  'If I wanted to visit some of them on one trip, how would you plan the route and the time of year?',
  'Summarise everything we talked about in a few sentences, as a note I could keep for later.',
  'Thank you. One last question: how do ships find their way at night now, without keepers?',
];

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const reps = Math.max(1, Number(flagValue(argv, '--reps', '3')));
  const turns = Math.min(QUESTIONS.length, Math.max(2, Number(flagValue(argv, '--turns', '6'))));
  const shape = flagValue(argv, '--shape', 'gpt2-small') as BenchShape;
  const model = ensureModel(shape, log);
  const host = new RunnerService({ intraOpNumThreads: Math.min(2, os.availableParallelism()) });
  try {
    await host.loadModel(model.dir, { id: shape });
    const rows: Array<{ prompt: number[]; cached: number[]; warm: number[]; cold: number[] }> = Array.from(
      { length: turns },
      () => ({ prompt: [], cached: [], warm: [], cold: [] }),
    );
    for (let rep = 0; rep < reps; rep++) {
      let messages: ChatMessage[] = [];
      for (let turn = 0; turn < turns; turn++) {
        messages = [...messages, { role: 'user', content: `(${rep}) ${QUESTIONS[turn]}` }];
        const ask = (promptCache: boolean): Promise<GenerationResult> =>
          host.generate({ model: shape, messages, maxNewTokens: 48, sampling: { greedy: true }, promptCache }).result;
        const order = (rep + turn) % 2 === 0 ? [true, false] : [false, true];
        const got = new Map<boolean, GenerationResult>();
        for (const cache of order) got.set(cache, await ask(cache));
        const warm = got.get(true) as GenerationResult;
        const cold = got.get(false) as GenerationResult;
        if (warm.text !== cold.text) throw new Error(`turn ${turn + 1}: the cached reply differs from the cold one`);
        const row = rows[turn] as (typeof rows)[number];
        row.prompt.push(warm.promptTokens);
        row.cached.push(warm.reusedTokens);
        row.warm.push(warm.timings.ttftMs);
        row.cold.push(cold.timings.ttftMs);
        messages = [...messages, { role: 'assistant', content: warm.text }];
        log(`rep ${rep + 1} turn ${turn + 1}: ${warm.promptTokens} prompt tokens, ${warm.reusedTokens} cached`);
      }
    }
    const lines = [
      `## Prompt cache: time to first token per turn (${shape}, ${reps} conversations, medians)`,
      '',
      '| turn | prompt tokens | cached | TTFT without cache (ms) | TTFT with cache (ms) | ratio |',
      '| ---: | ---: | ---: | ---: | ---: | ---: |',
    ];
    const ratios: number[] = [];
    for (const [i, r] of rows.entries()) {
      const ratio = median(r.cold) / median(r.warm);
      if (i > 0) ratios.push(ratio);
      lines.push(
        `| ${i + 1} | ${median(r.prompt)} | ${median(r.cached)} | ${fmt(median(r.cold))} | ${fmt(median(r.warm))} | ${fmt(ratio, 2)} |`,
      );
    }
    console.log(lines.join('\n'));
    const last = rows[rows.length - 1] as (typeof rows)[number];
    console.log(
      JSON.stringify({
        shape,
        turns,
        lastTurnPromptTokens: median(last.prompt),
        lastTurnTtftMsCold: Math.round(median(last.cold)),
        lastTurnTtftMsCached: Math.round(median(last.warm)),
        medianSpeedupAfterFirstTurn: Number(median(ratios).toFixed(2)),
      }),
    );
  } finally {
    await host.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
