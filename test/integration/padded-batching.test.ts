/**
 * A graph whose left-padded rows score differently from the same rows alone (onnxruntime's GroupQueryAttention
 * takes a row's first `seqlens_k + 1` positions as its own, which left padding breaks): the load-time probe finds
 * it, and its requests then share a batch only where no row is padded, so each gets the tokens it gets alone.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LoadedDecoder } from '../../src/main/engine/decoder';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';
import { greedyIds } from '../helpers/generation';

const GQA = 'onnx-genai/tiny-llm-sharedbuffer';
/** The fixtures' README: greedy from [5,6,7] on tiny-llm and its GroupQueryAttention twin. */
const FROM_567 = [22, 22, 20, 1, 1, 18, 22, 25];

const hosts: RunnerService[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

async function host(dir: string): Promise<RunnerService> {
  const h = new RunnerService({ intraOpNumThreads: 1, maxRunning: 8 });
  hosts.push(h);
  await h.loadModel(dir);
  return h;
}

async function load(dir: string): Promise<LoadedDecoder> {
  return LoadedDecoder.load(await loadModelSpec(dir), { intraOpNumThreads: 1, executionProviders: ['cpu'] });
}

describe.skipIf(!haveFixtures)(
  `batching a GroupQueryAttention graph${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it('two prompts of different lengths in one request each get exactly their solo greedy tokens', async () => {
      const h = await host(fixture(GQA));
      const solo = async (p: number[]) =>
        (await h.generate({ promptIds: p, maxNewTokens: 8, sampling: { greedy: true } }).result).tokenIds;
      const alone = [await solo([5, 6, 7]), await solo([2, 4, 5, 3])];
      expect(alone[0]).toEqual(FROM_567);
      const both = await h.generate({
        promptIdRows: [
          [5, 6, 7],
          [2, 4, 5, 3],
        ],
        maxNewTokens: 8,
        sampling: { greedy: true },
      }).result;
      expect(both.rows.map((r) => r.tokenIds)).toEqual(alone);
      // Two clients at once, the shorter prompt second: neither changes the other's tokens or their scores.
      const withScores = (p: number[]) =>
        h.generate({ promptIds: p, maxNewTokens: 8, sampling: { greedy: true }, logprobs: 2 }).result;
      const [a, b] = await Promise.all([withScores([2, 4, 5, 3]), withScores([5, 6, 7])]);
      expect([b?.tokenIds, a?.tokenIds]).toEqual(alone);
      // No row was padded, and none was charged padding.
      expect([a?.paddingBytes, b?.paddingBytes]).toEqual([undefined, undefined]);
      expect(b?.rows[0]?.logprobs).toEqual((await withScores([5, 6, 7])).rows[0]?.logprobs);
    });

    it('prompts of one length still share a batch, and each gets its solo tokens', async () => {
      const h = await host(fixture(GQA));
      const rows = [
        [5, 6, 7],
        [4, 9, 2],
      ];
      const alone: number[][] = [];
      for (const p of rows) {
        alone.push((await h.generate({ promptIds: p, maxNewTokens: 8, sampling: { greedy: true } }).result).tokenIds);
      }
      const both = await h.generate({ promptIdRows: rows, maxNewTokens: 8, sampling: { greedy: true } }).result;
      expect(both.rows.map((r) => r.tokenIds)).toEqual(alone);
      expect((await h.engine.stats()).peakBatchRows).toBe(2);
    });

    it("the load-time probe: the GroupQueryAttention graph's padded rows differ, other graphs' verdicts stay", async () => {
      const dirs = [
        fixture(GQA),
        fixture('onnx-genai/tiny-llm'),
        fixture('onnxruntime-genai/tiny-random-gpt2-fp32'),
        defaultModelDir,
      ];
      const verdicts: Array<[boolean, boolean, string | undefined]> = [];
      for (const dir of dirs) {
        const d = await load(dir);
        try {
          verdicts.push([d.batchable, d.padded, d.logits.batching]);
          // Whatever the verdict, rows of different lengths in one job get their solo tokens.
          const rows = [[5, 6, 7], [2, 4, 5, 3], [9]];
          const batched = await greedyIds((j, hk) => d.generate(j, hk), rows, 6);
          const alone: number[][] = [];
          for (const r of rows) alone.push(...(await greedyIds((j, hk) => d.generate(j, hk), [r], 6)));
          expect(batched).toEqual(alone);
        } finally {
          await d.dispose();
        }
      }
      // tiny-llm (ONNX Attention) already failed the two-row run before this probe: its rows take turns, as then.
      expect(verdicts.map(([batchable, padded]) => [batchable, batchable && padded])).toEqual([
        [true, false],
        [false, false],
        [true, true],
        [true, true],
      ]);
      expect(verdicts[0]?.[2]).toMatch(/^only rows that need no padding .*a left-padded row scored differently/);
      expect(verdicts[1]?.[2]).toMatch(/^requests take turns: a run of two rows failed/);
      for (const v of verdicts.slice(2)) expect(v[2]).toMatch(/^requests share one batch, each row left-padded/);
    });
  },
);
