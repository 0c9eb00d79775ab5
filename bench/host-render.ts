/**
 * How long preparing one chat request holds the host's thread (the one every stream, page and API client waits on):
 * the chat template rendered and the prompt tokenized, for conversations of 200 and 1000 long turns, sent whole
 * with `drop-oldest` (as the window and `truncation: auto` send them) and with `refuse`.
 * `node bin/run-ts.cjs bench/host-render.ts [--reps 3] [--chars 400]`
 *
 * One host (RunnerService) on the bundled default model (2 048 positions) and on the default preset with 16 384
 * (generated under the temp dir when missing). Each request is stopped once accepted (its prompt prepared): the
 * figures are the preparing alone. A request whose long texts are tokenized off the thread (off-thread.ts) is
 * prepared again after each wait: `passes` counts them, `held` sums what they held the thread, `longest` is the
 * longest of them, `renders` counts chat-template renders per request, `whole` is one render of the whole
 * conversation. Medians over the reps; the last line is one JSON object.
 */
import os from 'node:os';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { generateModelPackage, presetConfig } from '../scripts/model-gen';
import { RunnerService } from '../src/main/host/runner-service';
import { DEFAULT_CHAT_TEMPLATE, renderChatTemplate } from '../src/main/tokenizer';
import type { ChatMessage } from '../src/shared/contract';
import { flagValue } from './lib/args';
import { fmt, median } from './lib/stats';

const WORDS = ['river', 'town', 'the', 'Willow', 'and', 'sky', 'blue', 'over'];

function conversation(turns: number, chars: number): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (let i = 0; i < turns; i++) {
    let text = `${i}:`;
    for (let j = 0; text.length < chars; j++) text += `${WORDS[(i * 7 + j) % WORDS.length]} `;
    out.push({ role: i % 2 ? 'assistant' : 'user', content: text });
  }
  out.push({ role: 'user', content: 'And then?' });
  return out;
}

let renders = 0;
const render = Template.prototype.render;
Template.prototype.render = function counted(this: Template, ...args: Parameters<Template['render']>) {
  renders++;
  return render.apply(this, args);
};

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const reps = Math.max(1, Number(flagValue(argv, '--reps', '3')));
  const chars = Math.max(20, Number(flagValue(argv, '--chars', '400')));
  const longDir = path.join(os.tmpdir(), 'kvdesk-bench-models', 'context-16k');
  generateModelPackage(longDir, { ...presetConfig('default'), maxPositions: 16_384, name: 'context-16k' });
  const host = new RunnerService({ intraOpNumThreads: 1 });
  // Each pass that prepares a request is one call of generateAs, synchronous: what it holds the thread.
  const passes: number[] = [];
  const inner = host as unknown as { generateAs: (...args: unknown[]) => unknown };
  const generateAs = inner.generateAs;
  inner.generateAs = function timed(this: unknown, ...args: unknown[]) {
    const began = performance.now();
    try {
      return generateAs.apply(this, args);
    } finally {
      passes.push(performance.now() - began);
    }
  };
  const rows: string[] = [];
  const json: Record<string, unknown>[] = [];
  try {
    await host.loadModel(path.resolve(__dirname, '../resources/models/default'), { id: 'default' });
    await host.loadModel(longDir, { id: 'context-16k' });
    for (const model of ['default', 'context-16k']) {
      for (const turns of [200, 1000]) {
        const messages = conversation(turns, chars);
        const whole: number[] = [];
        renderChatTemplate(DEFAULT_CHAT_TEMPLATE, messages, { addGenerationPrompt: true });
        for (let rep = 0; rep < reps; rep++) {
          const began = performance.now();
          renderChatTemplate(DEFAULT_CHAT_TEMPLATE, messages, { addGenerationPrompt: true });
          whole.push(performance.now() - began);
        }
        for (const overflow of ['drop-oldest', 'refuse'] as const) {
          const got = {
            passes: [] as number[],
            held: [] as number[],
            longest: [] as number[],
            renders: [] as number[],
          };
          for (let rep = 0; rep < reps; rep++) {
            // Another conversation each rep (its last message differs, as each prompt tried holds it): nothing is
            // found tokenized already.
            const asked = [...messages.slice(0, -1), { role: 'user' as const, content: `And then? (${rep})` }];
            passes.length = 0;
            renders = 0;
            const h = host.generate(
              { model, messages: asked, contextOverflow: overflow, maxNewTokens: 1, sampling: { greedy: true } },
              (f) => {
                if (f.type === 'accepted') setImmediate(() => h.cancel());
              },
            );
            await h.result.catch(() => undefined);
            got.passes.push(passes.length);
            got.held.push(passes.reduce((a, b) => a + b, 0));
            got.longest.push(Math.max(...passes));
            got.renders.push(renders);
          }
          const row = {
            model,
            turns,
            overflow,
            passes: median(got.passes),
            renders: median(got.renders),
            heldMs: median(got.held),
            longestMs: median(got.longest),
            wholeRenderMs: median(whole),
          };
          json.push(row);
          rows.push(
            `| ${model} | ${turns} | ${overflow} | ${row.passes} | ${row.renders} | ${fmt(row.heldMs, 1)} | ${fmt(row.longestMs, 1)} | ${fmt(row.wholeRenderMs, 1)} |`,
          );
        }
      }
    }
  } finally {
    await host.close();
  }
  console.log(`Conversations of ${chars}-character turns; medians of ${reps} reps.\n`);
  console.log('| model | turns | overflow | passes | renders | held ms | longest ms | whole render ms |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
  console.log(JSON.stringify({ hostRender: json }));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
