/**
 * Continuous batching on the real engine: requests admitted together share one
 * session.run per decode step, and a request's greedy tokens never depend on
 * what it was batched with.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterEach, describe, expect, it } from 'vitest';
import { ContinuousBatcher } from '../../src/main/engine/batcher';
import { type GenerationHooks, type GenerationJob, LoadedDecoder } from '../../src/main/engine/decoder';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import type { GenerationResult } from '../../src/shared/contract';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';
import { GREEDY, greedyIds } from '../helpers/generation';
import { noEndBias } from '../helpers/hold-replies';
import { nanEmbeddingCopy } from '../helpers/nan-embedding';

const hosts: RunnerService[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

async function host(dir: string, maxRunning = 8): Promise<RunnerService> {
  const h = new RunnerService({ intraOpNumThreads: 2, maxRunning });
  hosts.push(h);
  await h.loadModel(dir);
  return h;
}

function run(h: RunnerService, promptIds: number[], maxNewTokens: number): Promise<GenerationResult> {
  return h.generate({ promptIds, maxNewTokens, sampling: { greedy: true } }).result;
}

describe.skipIf(!haveFixtures)(
  `batching parity on tiny-random-gpt2-fp32${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it('two concurrent requests give exactly the onnxruntime-genai oracle', async () => {
      const h = await host(fixture('onnxruntime-genai/tiny-random-gpt2-fp32'));
      // Sent back to back, so the second joins the first's batch (the first's 500 steps outlast the second's 6);
      // the first is stopped once the second has ended (or has ended by then).
      const firstIds: number[] = [];
      const first = h.generate({ promptIds: [0, 0, 0, 52], maxNewTokens: 500, sampling: { greedy: true } }, (f) => {
        if (f.type === 'tokens') firstIds.push(...(f.rows[0]?.ids ?? []));
      });
      const b = await run(h, [0, 0, 195, 731], 6);
      first.cancel('user');
      await first.result.catch(() => {});
      expect([0, 0, 0, 52, ...firstIds.slice(0, 6)]).toEqual([0, 0, 0, 52, 204, 204, 204, 204, 204, 204]);
      expect([0, 0, 195, 731, ...b.tokenIds]).toEqual([0, 0, 195, 731, 731, 114, 114, 114, 114, 114]);
      expect((await h.engine.stats()).peakBatchRows).toBe(2);
    });

    it('the two oracle rows as one batched request give the oracle too', async () => {
      const h = await host(fixture('onnxruntime-genai/tiny-random-gpt2-fp32'));
      const r = await h.generate({
        promptIdRows: [
          [0, 0, 0, 52],
          [0, 0, 195, 731],
        ],
        maxNewTokens: 6,
        sampling: { greedy: true },
      }).result;
      expect(r.rows.map((row) => row.tokenIds)).toEqual([
        [204, 204, 204, 204, 204, 204],
        [731, 114, 114, 114, 114, 114],
      ]);
    });
  },
);

describe('batching parity on the default model', () => {
  const prompts = Array.from({ length: 8 }, (_, i) =>
    Array.from({ length: 3 + i * 5 }, (_, j) => 10 + ((i * 31 + j * 7) % 400)),
  );

  it('eight concurrent greedy requests with different prompt lengths each equal their solo run', async () => {
    const h = await host(defaultModelDir);
    // Long enough (end-of-text banned) that the eight overlap however the host's sends are spread.
    const long = (p: number[]) =>
      h.generate({ promptIds: p, maxNewTokens: 200, sampling: { greedy: true, logitBias: noEndBias() } }).result;
    const solo: number[][] = [];
    for (const p of prompts) solo.push((await long(p)).tokenIds);
    const before = (await h.engine.stats()).runs;
    const together = await Promise.all(prompts.map((p) => long(p)));
    const stats = await h.engine.stats();
    for (const [i, r] of together.entries()) expect(r.tokenIds, `request ${i}`).toEqual(solo[i]);
    // One run per step for everyone: far fewer runs than eight solo generations.
    expect(stats.peakBatchRows).toBeGreaterThanOrEqual(4);
    const soloRuns = solo.reduce((n, s) => n + s.length, 0);
    expect(stats.runs - before).toBeLessThan(soloRuns / 2);
  });

  it('newcomers arriving together are prefilled in one run, and still equal their solo runs', async () => {
    // The decoder itself (in this process): all eight are submitted before its loop starts, as when
    // their commands reach the engine in one read. Through the host, arrival timing is not controlled.
    const decoder = await LoadedDecoder.load(await loadModelSpec(defaultModelDir), {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
    });
    try {
      let runs = 0;
      const generate = (p: number[]) => {
        const ids: number[] = [];
        return decoder
          .generate(
            {
              rows: [p],
              maxNewTokens: 20,
              sampling: { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 },
              eosTokenIds: [],
            },
            {
              onStart: () => {},
              onStep: (step) => {
                if ((step[0] as number) >= 0) ids.push(step[0] as number);
              },
              stopRequested: () => null,
              countRun: () => {
                runs++;
              },
            },
          )
          .then(() => ids);
      };
      // Eight different prompts of nearly the same length: one padded prefill holds them all.
      const same = Array.from({ length: 8 }, (_, i) =>
        Array.from({ length: 12 + (i % 2) }, (_, j) => 20 + ((i * 53 + j * 11) % 450)),
      );
      const solo: number[][] = [];
      for (const p of same) solo.push(await generate(p));
      runs = 0;
      const together = await Promise.all(same.map((p) => generate(p)));
      for (const [i, ids] of together.entries()) expect(ids, `request ${i}`).toEqual(solo[i]);
      // One prefill for all eight, then one run per decode step.
      expect(runs).toBe(1 + 19);
      expect(decoder.peakBatchRows).toBe(8);
    } finally {
      await decoder.dispose();
    }
  });

  it('requests that end on the same step all leave the batch, and the one still running keeps its tokens', async () => {
    const decoder = await LoadedDecoder.load(await loadModelSpec(defaultModelDir), {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
    });
    try {
      const generate = (p: number[], maxNewTokens: number) => {
        const ids: number[] = [];
        let steps = 0;
        return decoder
          .generate(
            { rows: [p], maxNewTokens, sampling: GREEDY, eosTokenIds: [] },
            {
              onStart: () => {},
              onStep: (step) => {
                steps++;
                if ((step[0] as number) >= 0) ids.push(step[0] as number);
              },
              stopRequested: () => null,
              countRun: () => {},
            },
          )
          .then((outcome) => ({ ids, steps, outcome }));
      };
      const prompts = [0, 1, 2, 3].map((i) => Array.from({ length: 12 }, (_, j) => 30 + ((i * 61 + j * 13) % 440)));
      const lengths = [6, 6, 6, 24];
      const solo: number[][] = [];
      for (const [i, p] of prompts.entries()) solo.push((await generate(p, lengths[i] as number)).ids);
      // Three of four end on step 6 together; the fourth runs on alone.
      const together = await Promise.all(prompts.map((p, i) => generate(p, lengths[i] as number)));
      for (const [i, r] of together.entries()) {
        expect(r.ids, `request ${i}`).toEqual(solo[i]);
        // No step reached a request after it ended (a row left behind would go on being stepped).
        expect(r.steps, `request ${i}`).toBe(lengths[i]);
        expect(r.outcome.finishReason).toBe('length');
      }
      expect(decoder.peakBatchRows).toBe(4);
    } finally {
      await decoder.dispose();
    }
  });

  it('a request joining mid-way does not change the tokens of those already running', async () => {
    const h = await host(defaultModelDir);
    const long = prompts[6] as number[];
    const other = prompts[1] as number[];
    const late = prompts[4] as number[];
    // End-of-text banned, so the two running requests still write however late the host sends the third.
    const sampling = { greedy: true, logitBias: noEndBias() };
    const solo = async (p: number[], n: number) =>
      (await h.generate({ promptIds: p, maxNewTokens: n, sampling }).result).tokenIds;
    const soloLong = await solo(long, 40);
    const soloOther = await solo(other, 40);
    const soloLate = await solo(late, 10);
    // The two run with budgets near the context, which they do not reach before the third has joined and ended;
    // they are stopped once each has written the 40 tokens compared.
    const streamed = (p: number[], ids: number[], onTokens = () => {}) =>
      h.generate({ promptIds: p, maxNewTokens: 1900, sampling }, (f) => {
        if (f.type !== 'tokens') return;
        ids.push(...(f.rows[0]?.ids ?? []));
        onTokens();
      });
    const longIds: number[] = [];
    const otherIds: number[] = [];
    let joined: Promise<number[]> | undefined;
    const first = streamed(long, longIds, () => {
      joined ??= solo(late, 10);
    });
    const second = streamed(other, otherIds);
    await expect.poll(() => joined, { timeout: 30_000 }).toBeDefined();
    const c = await (joined as Promise<number[]>);
    const compared = 40;
    await expect
      .poll(() => Math.min(longIds.length, otherIds.length), { timeout: 30_000 })
      .toBeGreaterThanOrEqual(compared);
    first.cancel('user');
    second.cancel('user');
    await Promise.allSettled([first.result, second.result]);
    expect(longIds.slice(0, compared)).toEqual(soloLong);
    expect(otherIds.slice(0, compared)).toEqual(soloOther);
    expect(c).toEqual(soloLate);
    expect((await h.engine.stats()).peakBatchRows).toBe(3);
  });

  it('sampling stays per request: the same seed gives the same tokens alone and batched', async () => {
    const h = await host(defaultModelDir);
    const sampled = (p: number[], seed: number) =>
      h.generate({ promptIds: p, maxNewTokens: 16, sampling: { temperature: 0.9, topK: 40, seed } }).result;
    const alone = (await sampled(prompts[2] as number[], 11)).tokenIds;
    const [x] = await Promise.all([
      sampled(prompts[2] as number[], 11),
      sampled(prompts[3] as number[], 12),
      sampled(prompts[5] as number[], 13),
    ]);
    expect(x?.tokenIds).toEqual(alone);
  });

  it('on a graph whose rows take turns, each row of a sampled request still has its own random stream', async () => {
    const decoder = await LoadedDecoder.load(await loadModelSpec(defaultModelDir), {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
    });
    try {
      const sampling = { ...GREEDY, greedy: false, temperature: 1.2, seed: 21 };
      const p = prompts[4] as number[];
      const batched = await greedyIds((j, hk) => decoder.generate({ ...j, sampling }, hk), [p, p], 16);
      // A graph that cannot batch (as the load-time probe decides): the same request, rows one after the other.
      decoder.batchable = false;
      const turns = await greedyIds((j, hk) => decoder.generate({ ...j, sampling }, hk), [p, p], 16);
      expect(turns[0]).not.toEqual(turns[1]);
      expect(turns).toEqual(batched);
    } finally {
      await decoder.dispose();
    }
  });
});

describe('padding in a batch', () => {
  it("a short request batched with a long one is charged its padding: the engine's KV stays within the reservations", async () => {
    const h = await host(defaultModelDir, 4);
    const bpt = h.listModels()[0]?.spec.bpt as number;
    // The most the model's running requests have reserved at any moment.
    let peakReserved = 0;
    const admitted = new Map<string, number>();
    const unsubscribe = h.scheduler.subscribe((e) => {
      if (e.type === 'admitted') admitted.set(e.requestId, e.reservedBytes);
      peakReserved = Math.max(peakReserved, h.scheduler.snapshot().reservedBytes);
    });
    const long = Array.from({ length: 600 }, (_, i) => 10 + (i % 300));
    let startShort = () => {};
    const short = new Promise<GenerationResult>((resolve, reject) => {
      startShort = () => {
        startShort = () => {};
        run(h, [10, 20, 30, 40, 50], 30).then(resolve, reject);
      };
    });
    // The long one, end-of-text banned and its budget near the context, still runs however late the short one
    // comes; it is stopped once the short one has ended.
    const longBudget = 1400;
    const first = h.generate(
      { promptIds: long, maxNewTokens: longBudget, sampling: { ...GREEDY, logitBias: noEndBias() } },
      (f) => {
        if (f.type === 'tokens') startShort();
      },
    );
    const b = await short;
    first.cancel('user');
    await first.result.catch(() => {});
    unsubscribe();
    const stats = await h.engine.stats();
    // They did run as one batch, the short row padded to the long one's width.
    expect(stats.peakBatchRows).toBe(2);
    expect(stats.peakBatchKvBytes).toBeGreaterThan((600 + 5) * bpt);
    // The short one reserved its row as wide as the long one's reservation, not its own 35 positions.
    expect(admitted.get(b.requestId)).toBe((600 + longBudget) * bpt);
    expect(admitted.get(first.requestId)).toBe((600 + longBudget) * bpt);
    // Its result says so (the APIs' kvdesk.reserved_bytes): the budget held its padding too.
    expect(b.reservedBytes).toBe((600 + longBudget) * bpt);
    expect(b.paddingBytes).toBe((600 + longBudget - 35) * bpt);
    expect(stats.peakBatchKvBytes).toBeLessThanOrEqual(peakReserved);
    expect(h.scheduler.snapshot().reservedBytes).toBe(0);
  });

  it('a request that outlives the wider one beside it reports the padding it carried (its padding is 0 at its end)', async () => {
    const h = await host(defaultModelDir, 4);
    const bpt = h.listModels()[0]?.spec.bpt as number;
    // The narrow one runs long (end-of-text banned); the wide one (a long prompt, few tokens) joins and ends first.
    const narrowBudget = 400;
    let startWide = () => {};
    const wide = new Promise<GenerationResult>((resolve, reject) => {
      startWide = () => {
        startWide = () => {};
        run(
          h,
          Array.from({ length: 600 }, (_, i) => 10 + (i % 300)),
          5,
        ).then(resolve, reject);
      };
    });
    const narrow = h.generate(
      { promptIds: [10, 20, 30, 40, 50], maxNewTokens: narrowBudget, sampling: { ...GREEDY, logitBias: noEndBias() } },
      (f) => {
        if (f.type === 'tokens') startWide();
      },
    );
    const w = await wide;
    const n = await narrow.result;
    expect((await h.engine.stats()).peakBatchRows).toBe(2);
    expect(w.paddingBytes).toBeUndefined();
    // Beside the wide one its row was charged as wide as the wide one's reservation.
    expect(n.paddingBytes).toBe((600 + 5 - (5 + narrowBudget)) * bpt);
    expect(n.reservedBytes).toBe((600 + 5) * bpt);
    expect(h.scheduler.snapshot().reservedBytes).toBe(0);
  });

  it('the room the batch keeps to grow stays within that charge when the widest row is not the one with most to go', async () => {
    // The decoder itself, so the short one joins at a known step: the long one's 14th token of 20.
    const spec = await loadModelSpec(defaultModelDir);
    const decoder = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: 0,
    });
    try {
      const long = Array.from({ length: 600 }, (_, i) => 10 + (i % 300));
      let joined: Promise<number[][]> | undefined;
      let steps = 0;
      const hooks: GenerationHooks = {
        onStart: () => {},
        onStep: () => {
          if (++steps === 14) {
            joined = greedyIds((j, hk) => decoder.generate(j, hk), [[10, 20, 30, 40, 50]], 30);
          }
        },
        stopRequested: () => null,
        countRun: () => {},
      };
      await decoder.generate({ rows: [long], maxNewTokens: 20, sampling: GREEDY, eosTokenIds: [] }, hooks);
      expect((await joined)?.[0]).toHaveLength(30);
      expect(decoder.peakBatchRows).toBe(2);
      // The scheduler charges each row as wide as the widest reservation among them (scheduler.ts repad): the long
      // one's 600 + 20. The short one's 29 tokens to go once it joined must not size the shared buffers: the long
      // one leaves 6 steps later, and room for more rounded them up to 2 × 624 positions.
      expect(decoder.peakBatchKvBytes).toBeLessThanOrEqual(2 * (600 + 20) * spec.bpt);
    } finally {
      await decoder.dispose();
    }
  });

  it('the room a joint prefill keeps to grow stays within that charge too', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    const decoder = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: 0,
    });
    try {
      const prompt = (n: number) => Array.from({ length: n }, (_, i) => 10 + ((i * 7) % 300));
      // Submitted together: one prefill of 2 rows × 100 positions. The widest reservation is the short prompt's
      // 80 + 30 = 110 positions; the long one ends at its first token.
      const run = (j: GenerationJob, hk: GenerationHooks) => decoder.generate(j, hk);
      const [a, b] = await Promise.all([greedyIds(run, [prompt(100)], 1), greedyIds(run, [prompt(80)], 30)]);
      expect([a[0]?.length, b[0]?.length]).toEqual([1, 30]);
      // Room for the short one's 30 tokens after the long one's 100 positions rounded the group's buffers up to
      // 2 × 112; the group as it is ends with the long one's first token.
      expect(decoder.peakBatchKvBytes).toBeLessThanOrEqual(2 * (80 + 30) * spec.bpt);
    } finally {
      await decoder.dispose();
    }
  });
});

describe('a graph that cannot batch', () => {
  it('ends a request waiting its turn as soon as it is stopped, not when the running one is done', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a growing cache');
    const session = await ort.InferenceSession.create(spec.graphPath, { intraOpNumThreads: 2 });
    try {
      let runs = 0;
      const batcher = new ContinuousBatcher(
        spec,
        spec.kv.tensors,
        (feeds) => {
          runs++;
          return session.run(feeds);
        },
        () => false,
      );
      let stopWaiting: 'cancelled' | null = null;
      const hooks = (stop: () => 'cancelled' | null) => ({
        onStart: () => {},
        onStep: () => {
          // The waiting request is stopped while the running one is a few steps in.
          if (runs === 5) stopWaiting = 'cancelled';
        },
        stopRequested: stop,
        countRun: () => {},
      });
      let runsWhenWaitingEnded = -1;
      const running = batcher.submit(
        { rows: [[10, 20, 30]], maxNewTokens: 200, sampling: GREEDY, eosTokenIds: [] },
        hooks(() => null),
      );
      const waiting = batcher
        .submit(
          { rows: [[10, 20]], maxNewTokens: 5, sampling: GREEDY, eosTokenIds: [] },
          hooks(() => stopWaiting),
        )
        .then((o) => {
          runsWhenWaitingEnded = runs;
          return o;
        });
      expect((await waiting).finishReason).toBe('cancelled');
      expect(runsWhenWaitingEnded).toBeLessThan(10);
      expect((await running).generatedTokens).toBe(200);
    } finally {
      await session.release();
    }
  });
});

describe('a request whose scores are not numbers (NaN) in a batch', () => {
  it('fails alone, as the package; the request batched with it goes on with the tokens it has alone', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-nan-batch-'));
    try {
      // On the package as it is: the clean request's tokens, and a token T that the other request writes after
      // its first (so T is fed back in a decode step the two share) and the clean one never reads.
      const clean = [10, 11, 12, 13];
      const other = [20, 21, 22];
      const plain = await host(defaultModelDir);
      const alone = await run(plain, clean, 200);
      const otherIds = (await run(plain, other, 8)).tokenIds;
      const seen = new Set([...clean, ...alone.tokenIds, ...other]);
      const poison = otherIds.slice(1).find((t) => !seen.has(t) && t !== otherIds[0]);
      expect(poison, `a token the other request writes after its first: ${otherIds}`).toBeDefined();
      // That token's embedding NaN: the other request scores NaN once it reads it back; the clean one never does.
      const pkg = path.join(dir, 'nan-token');
      nanEmbeddingCopy(defaultModelDir, pkg, poison as number);
      const h = await host(pkg);
      let startOther = () => {};
      const failed = new Promise<unknown>((resolve) => {
        startOther = () => {
          startOther = () => {};
          run(h, other, 8).then(resolve, resolve);
        };
      });
      const ids: number[] = [];
      const together = h.generate({ promptIds: clean, maxNewTokens: 1500, sampling: { greedy: true } }, (f) => {
        if (f.type !== 'tokens') return;
        ids.push(...(f.rows[0]?.ids ?? []));
        startOther();
      });
      expect(await failed).toMatchObject({ code: 'PACKAGE_INVALID', message: expect.stringMatching(/\(NaN\)/) });
      expect((await h.engine.stats()).peakBatchRows).toBe(2);
      // The clean one still writes, and what it wrote is what it writes alone. It is compared over its first
      // `compared` tokens, so the poll waits for them (a loaded machine may not have written them yet).
      const compared = 24;
      expect(alone.tokenIds.length).toBeGreaterThanOrEqual(compared);
      const atLeast = Math.max(ids.length + 1, compared);
      await expect.poll(() => ids.length, { timeout: 30_000 }).toBeGreaterThanOrEqual(atLeast);
      together.cancel('user');
      await together.result.catch(() => {});
      expect(ids.slice(0, compared)).toEqual(alone.tokenIds.slice(0, compared));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
