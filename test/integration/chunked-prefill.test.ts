/**
 * Chunked prefill on the real engine: a long prompt runs in chunks of at most
 * `chunkTokens` tokens, gives the same greedy tokens as one run, and running
 * streams take a decode step between its chunks.
 */
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ContinuousBatcher } from '../../src/main/engine/batcher';
import type { GenerationHooks, GenerationJob, SessionKv } from '../../src/main/engine/decoder';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import type { ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';

const GREEDY = { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 };

/** A real onnxruntime session behind a batcher whose runs are recorded as "rows×positions". */
async function engine(dir: string) {
  const spec: ModelSpec = await loadModelSpec(dir);
  if (spec.kv.kind !== 'dynamic') throw new Error('test model must have a past/present KV graph');
  const kvTensors = spec.kv.tensors;
  const session = await ort.InferenceSession.create(spec.graphPath, {
    intraOpNumThreads: 2,
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
  });
  const runs: string[] = [];
  /** Sees each run's outputs (the presents the batcher keeps as its KV), with the run's "rows×positions". */
  const watch: { onRun?: (run: string, out: ort.InferenceSession.OnnxValueMapType) => void } = {};
  const batcher = (chunkTokens: number) =>
    new ContinuousBatcher(
      spec,
      kvTensors,
      async (feeds) => {
        const dims = feeds[spec.ports.inputIds.name]?.dims ?? [];
        const run = `${dims[0]}×${dims[1]}`;
        runs.push(run);
        const out = await session.run(feeds);
        watch.onRun?.(run, out);
        return out;
      },
      () => true,
      chunkTokens,
    );
  return { spec, session, runs, batcher, watch };
}

interface Gen {
  ids: number[][];
  /** onPrefill calls: [done, total] after each chunk but the last. */
  prefill: Array<[number, number]>;
  outcome: Promise<{ finishReason: string; generatedTokens: number; sessionTokens: number }>;
  stop: () => void;
}

function generate(
  b: ContinuousBatcher,
  rows: number[][],
  maxNewTokens: number,
  opts: { session?: SessionKv; onStep?: () => void; onPrefill?: () => void } = {},
): Gen {
  const ids: number[][] = rows.map(() => []);
  const prefill: Array<[number, number]> = [];
  let stop: 'cancelled' | null = null;
  const job: GenerationJob = {
    rows,
    maxNewTokens,
    sampling: GREEDY,
    eosTokenIds: [],
    ...(opts.session ? { session: opts.session } : {}),
  };
  const hooks: GenerationHooks = {
    onStart: () => {},
    onPrefill: (done, total) => {
      prefill.push([done, total]);
      opts.onPrefill?.();
    },
    onStep: (step) => {
      step.forEach((id, r) => {
        if (id >= 0) ids[r]?.push(id);
      });
      opts.onStep?.();
    },
    stopRequested: () => stop,
    countRun: () => {},
  };
  return {
    ids,
    prefill,
    outcome: b.submit(job, hooks),
    stop: () => {
      stop = 'cancelled';
    },
  };
}

/** The KV inputs and outputs of a graph with a growing cache. */
function kvTensors(spec: ModelSpec) {
  if (spec.kv.kind !== 'dynamic') throw new Error('test model must have a past/present KV graph');
  return spec.kv.tensors;
}

/** A session's KV holds exactly `tokens` positions, as `bpt` counts them. */
function expectSessionKv(spec: ModelSpec, session: SessionKv, tokens: number): void {
  for (const t of kvTensors(spec)) expect(session.past.get(t.past)?.dims[t.seqAxis]).toBe(tokens);
  const bytes = [...session.past.values()].reduce((n, t) => n + (t.data as Float32Array).byteLength, 0);
  expect(bytes).toBe(tokens * spec.bpt);
}

const prompt = (n: number, salt: number) => Array.from({ length: n }, (_, i) => 3 + ((i * 37 + salt * 101) % 500));

describe('chunked prefill on the default model (Llama family, RoPE, GQA)', () => {
  let e: Awaited<ReturnType<typeof engine>>;
  beforeAll(async () => {
    e = await engine(defaultModelDir);
  });
  afterAll(async () => {
    await e.session.release();
  });

  it('a 300-token prompt in chunks of 64 gives the tokens of one run, in balanced chunks', async () => {
    const p = prompt(300, 1);
    const whole = generate(e.batcher(100_000), [p], 12);
    await whole.outcome;
    expect(e.runs.splice(0)[0]).toBe('1×300');
    const chunked = generate(e.batcher(64), [p], 12);
    await chunked.outcome;
    expect(chunked.ids).toEqual(whole.ids);
    // ceil(300 / 64) = 5 chunks of equal width (60), then one run per further token.
    expect(e.runs.splice(0)).toEqual([...Array(5).fill('1×60'), ...Array(11).fill('1×1')]);
    // Progress after each chunk but the last (the first token follows that one); none for a single run.
    expect(chunked.prefill).toEqual([
      [60, 300],
      [120, 300],
      [180, 300],
      [240, 300],
    ]);
    expect(whole.prefill).toEqual([]);
  });

  it('two rows of different lengths, left-padded, chunked by rows × positions', async () => {
    const rows = [prompt(150, 2), prompt(97, 3)];
    const whole = generate(e.batcher(100_000), rows, 8);
    await whole.outcome;
    e.runs.length = 0;
    const chunked = generate(e.batcher(100), rows, 8);
    await chunked.outcome;
    expect(chunked.ids).toEqual(whole.ids);
    // 2 rows × 50 positions per chunk: 150 positions in 3 chunks.
    expect(e.runs.splice(0, 3)).toEqual(['2×50', '2×50', '2×50']);
    expect(chunked.prefill).toEqual([
      [50, 150],
      [100, 150],
    ]);
  });

  it("a session turn's new message is chunked after the reused prefix", async () => {
    const first = prompt(40, 4);
    const session: SessionKv = { tokens: [], past: new Map() };
    const turn1 = generate(e.batcher(64), [first], 5, { session });
    await turn1.outcome;
    const second = [...session.tokens, ...prompt(130, 5)];
    // A copy of its own: a turn takes its session's KV, and frees it once it has read it.
    const copy: SessionKv = {
      tokens: session.tokens.slice(),
      past: new Map(
        [...session.past].map(([name, t]) => [
          name,
          new ort.Tensor('float32', (t.data as Float32Array).slice(), t.dims),
        ]),
      ),
    };
    const reference = generate(e.batcher(100_000), [second], 8, { session: copy });
    await reference.outcome;
    e.runs.length = 0;
    const turn2 = generate(e.batcher(64), [second], 8, { session });
    await turn2.outcome;
    expect(turn2.ids).toEqual(reference.ids);
    // The reused prefix is not computed again; the 130 new positions go in 3 chunks of ceil(130 / 3) = 44.
    expect(e.runs.slice(0, 3)).toEqual(['1×44', '1×44', '1×42']);
    // Progress counts the reused prefix as done.
    const reused = second.length - 130;
    expect(turn2.prefill).toEqual([
      [reused + 44, second.length],
      [reused + 88, second.length],
    ]);
  });

  it('a running stream takes a decode step between the chunks of a newcomer, and both keep their tokens', async () => {
    const short = prompt(10, 6);
    const long = prompt(240, 7);
    const soloShort = generate(e.batcher(100_000), [short], 30);
    await soloShort.outcome;
    const soloLong = generate(e.batcher(100_000), [long], 6);
    await soloLong.outcome;
    e.runs.length = 0;

    const b = e.batcher(64);
    let late: Gen | undefined;
    const running = generate(b, [short], 30, {
      onStep: () => {
        if (!late) late = generate(b, [long], 6);
      },
    });
    await running.outcome;
    await (late as Gen).outcome;
    expect(running.ids).toEqual(soloShort.ids);
    expect((late as Gen).ids).toEqual(soloLong.ids);
    // The newcomer's 240 positions in 4 chunks of 60, each followed by one step of the running stream.
    const at = e.runs.indexOf('1×60');
    expect(e.runs.slice(at, at + 8)).toEqual(['1×60', '1×1', '1×60', '1×1', '1×60', '1×1', '1×60', '2×1']);
  });

  it('a newcomer cancelled during its prefill ends after the current chunk; the running stream goes on', async () => {
    const b = e.batcher(64);
    let late: Gen | undefined;
    let chunksSeen = 0;
    const running = generate(b, [prompt(10, 8)], 20, {
      onStep: () => {
        if (!late) {
          late = generate(b, [prompt(240, 9)], 6);
          return;
        }
        // The running stream's step after the newcomer's first chunk: cancel the newcomer.
        chunksSeen = e.runs.filter((r) => r === '1×60').length;
        if (chunksSeen === 1) late.stop();
      },
    });
    e.runs.length = 0;
    // The KV its one chunk computed (the run's presents, which the batcher keeps as the newcomer's KV).
    const chunkKv: ort.Tensor[] = [];
    e.watch.onRun = (run, out) => {
      if (run === '1×60') for (const t of kvTensors(e.spec)) chunkKv.push(out[t.present] as ort.Tensor);
    };
    const result = await (async () => {
      await running.outcome;
      return (late as Gen).outcome;
    })().finally(() => {
      e.watch.onRun = undefined;
    });
    expect(result).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0 });
    expect(e.runs.filter((r) => r === '1×60')).toHaveLength(1);
    expect(running.ids[0]).toHaveLength(20);
    // Freed when its only member left, not left to the collector.
    expect(chunkKv.length).toBeGreaterThan(0);
    expect(chunkKv.filter((t) => (t.data as Float32Array).byteLength > 0)).toHaveLength(0);
  });

  it('a joint prefill: a member cancelled between chunks leaves the group at once; the other goes on alone with its own tokens', async () => {
    const a = prompt(200, 10);
    const bRow = prompt(190, 11);
    const solo = generate(e.batcher(100), [bRow], 8);
    await solo.outcome;
    e.runs.length = 0;

    // Both submitted before the loop starts: one joint prefill of 2 rows × 50 positions per chunk.
    const b = e.batcher(100);
    let runsWhenAEnded = -1;
    const first: Gen = generate(b, [a], 8, { onPrefill: () => first.stop() });
    const second = generate(b, [bRow], 8);
    const ended = first.outcome.then((o) => {
      runsWhenAEnded = e.runs.length;
      return o;
    });
    expect(await ended).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0 });
    await second.outcome;
    expect(first.ids).toEqual([[]]);
    // It ended after the first chunk (its promise settles while the next chunk, already one row wide, runs),
    // not after the group's prefill; the rest of the prefill ran without its row.
    expect(runsWhenAEnded).toBe(2);
    expect(e.runs.slice(0, 4)).toEqual(['2×50', '1×50', '1×50', '1×50']);
    expect(second.ids).toEqual(solo.ids);
    // Its row lost the 10 positions of padding A's longer prompt gave it: it ran within its own 190 + 8 positions.
    expect(b.peakKvBytes).toBe((190 + 8 - 1) * e.spec.bpt);
  });

  it('a joint prefill: the rows that stay lose the padding only the stopped rows needed, in the KV so far and in the chunks to run', async () => {
    // Ordered by prompt length: C (60), A (100), B (100). Three rows × 10 positions per chunk; A and B stop after
    // the first, whose 10 columns are padding of C's row only: C's prefill starts over at its own first position.
    const rowsC = [prompt(60, 16)];
    const solo = generate(e.batcher(30), rowsC, 8);
    await solo.outcome;
    e.runs.length = 0;

    const b = e.batcher(30);
    const first: Gen = generate(b, [prompt(100, 17)], 8, { onPrefill: () => first.stop() });
    const c = generate(b, rowsC, 8);
    const second: Gen = generate(b, [prompt(100, 18)], 8, { onPrefill: () => second.stop() });
    expect(await first.outcome).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0 });
    expect(await second.outcome).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0 });
    await c.outcome;
    expect(c.ids).toEqual(solo.ids);
    // Alone, it held its own positions only (60 + 8 − 1 at its last step), within its reservation of 60 + 8.
    expect(b.peakKvBytes).toBe((60 + 8 - 1) * e.spec.bpt);
    // Its 60 positions in chunks of 10 after the first (not the rest of the padded width's 100), then 7 steps.
    expect(e.runs).toEqual(['3×10', ...Array(6).fill('1×10'), ...Array(7).fill('1×1')]);
  });

  it('a joint prefill: a two-row member in the middle of a group of three leaves it; the rows before and after keep their tokens', async () => {
    // The group is ordered by longest prompt: A (118), B (119 and 117), C (121).
    const rowsA = [prompt(118, 12)];
    const rowsB = [prompt(119, 13), prompt(117, 14)];
    const rowsC = [prompt(121, 15)];
    const solo = async (rows: number[][]) => {
      const g = generate(e.batcher(120), rows, 6);
      await g.outcome;
      return g.ids;
    };
    const [soloA, soloC] = [await solo(rowsA), await solo(rowsC)];
    e.runs.length = 0;

    // Four rows, 121 positions: five chunks of 25 (the last 21). B — rows 1–2 of the group, which is ordered by
    // prompt length — stops after the first chunk; A and C run the other four chunks two rows wide.
    const b = e.batcher(120);
    const a = generate(b, rowsA, 6);
    const middle: Gen = generate(b, rowsB, 6, { onPrefill: () => middle.stop() });
    const c = generate(b, rowsC, 6);
    expect(await middle.outcome).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0 });
    await Promise.all([a.outcome, c.outcome]);
    expect(e.runs.slice(0, 5)).toEqual(['4×25', '2×25', '2×25', '2×25', '2×21']);
    expect(middle.ids).toEqual([[], []]);
    expect(a.ids).toEqual(soloA);
    expect(c.ids).toEqual(soloC);
  });

  it("a session turn stopped between its new message's chunks keeps the conversation's KV and the part it read; the next turn on it gives a cold run's tokens", async () => {
    const session: SessionKv = { tokens: [], past: new Map() };
    await generate(e.batcher(64), [prompt(40, 19)], 5, { session }).outcome;
    const conversation = session.tokens.slice();
    const second = [...conversation, ...prompt(130, 20)];
    // Stopped once its first chunk (44 of the 130 new positions) has run: it ends before the second.
    const turn2: Gen = generate(e.batcher(64), [second], 8, { session, onPrefill: () => turn2.stop() });
    const kept = conversation.length + 44;
    expect(await turn2.outcome).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0, sessionTokens: kept });
    expect(turn2.ids).toEqual([[]]);
    expect(session.tokens).toEqual(second.slice(0, kept));
    expectSessionKv(e.spec, session, kept);
    // Sent again: only what it had not read is prefilled.
    const third = [...second, 7, 8, 9];
    e.runs.length = 0;
    const turn3 = generate(e.batcher(100_000), [third], 8, { session });
    await turn3.outcome;
    expect(e.runs[0]).toBe(`1×${third.length - kept}`);
    const cold = generate(e.batcher(100_000), [third], 8);
    await cold.outcome;
    expect(turn3.ids).toEqual(cold.ids);
  });

  it('a joint prefill: a session turn stopped between chunks keeps the KV of its own row read so far, without the padding', async () => {
    const mine = prompt(180, 21);
    const other = prompt(190, 22);
    const soloOther = generate(e.batcher(100_000), [other], 8);
    await soloOther.outcome;
    e.runs.length = 0;
    const session: SessionKv = { tokens: [], past: new Map() };
    const b = e.batcher(100);
    const first: Gen = generate(b, [mine], 8, { session, onPrefill: () => first.stop() });
    const second = generate(b, [other], 8);
    // Two rows × 48 positions per chunk (190 in 4): its row's first 10 are padding, 38 are its prompt's.
    const [stopped] = await Promise.all([first.outcome, second.outcome]);
    expect(stopped).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0, sessionTokens: 38 });
    expect(e.runs.slice(0, 2)).toEqual(['2×48', '1×48']);
    expect(second.ids).toEqual(soloOther.ids);
    expect(session.tokens).toEqual(mine.slice(0, 38));
    expectSessionKv(e.spec, session, 38);
    const next = [...mine, 7, 8];
    const turn = generate(e.batcher(100_000), [next], 8, { session });
    await turn.outcome;
    const cold = generate(e.batcher(100_000), [next], 8);
    await cold.outcome;
    expect(turn.ids).toEqual(cold.ids);
  });

  it('a session turn stopped before its prefill keeps the part of its KV that its prompt continues, and frees the rest', async () => {
    const session: SessionKv = { tokens: [], past: new Map() };
    await generate(e.batcher(64), [prompt(40, 23)], 5, { session }).outcome;
    const conversation = session.tokens.slice();
    const old = [...session.past.values()];
    // An edited message: the turn continues the conversation's first 30 positions.
    const edited = [...conversation.slice(0, 30), ...prompt(20, 24)];
    expect(edited[30]).not.toBe(conversation[30]);
    e.runs.length = 0;
    const turn = generate(e.batcher(64), [edited], 8, { session });
    // Before the batcher's loop takes it (on the next macrotask).
    turn.stop();
    expect(await turn.outcome).toMatchObject({ finishReason: 'cancelled', generatedTokens: 0, sessionTokens: 30 });
    expect(e.runs).toEqual([]);
    expect(session.tokens).toEqual(conversation.slice(0, 30));
    expectSessionKv(e.spec, session, 30);
    // What it held past them is freed, not left to the collector.
    expect(old.filter((t) => (t.data as Float32Array).byteLength > 0)).toHaveLength(0);
    const next = [...edited, 7];
    const again = generate(e.batcher(100_000), [next], 8, { session });
    await again.outcome;
    expect(e.runs[0]).toBe(`1×${next.length - 30}`);
    const cold = generate(e.batcher(100_000), [next], 8);
    await cold.outcome;
    expect(again.ids).toEqual(cold.ids);
  });
});

describe('chunked prefill through the host', () => {
  it("the host's prefillChunkTokens reaches the engine process (its own run count shows the chunks)", async () => {
    const h = new RunnerService({ intraOpNumThreads: 2, prefillChunkTokens: 16 });
    try {
      const { bpt } = (await h.loadModel(defaultModelDir)).spec;
      const before = (await h.engine.stats()).runs;
      const frames: string[] = [];
      const used: number[] = [];
      const r = await h.generate({ promptIds: prompt(50, 11), maxNewTokens: 5, sampling: { greedy: true } }, (f) => {
        if (f.type === 'prefill') {
          frames.push(`prefill ${f.doneTokens}/${f.totalTokens}`);
          used.push(h.snapshot().running[0]?.usedBytes ?? -1);
        } else if (f.type === 'tokens' && frames[frames.length - 1] !== 'tokens') frames.push('tokens');
      }).result;
      // 50 prompt positions in ceil(50 / 16) = 4 chunks, then one run per further token.
      expect((await h.engine.stats()).runs - before).toBe(4 + r.tokenIds.length - 1);
      // The caller sees the progress as frames, before the first tokens.
      expect(frames).toEqual(['prefill 13/50', 'prefill 26/50', 'prefill 39/50', 'tokens']);
      // …and the scheduler's ledger shows the KV read so far as used.
      expect(used).toEqual([13 * bpt, 26 * bpt, 39 * bpt]);
    } finally {
      await h.close();
    }
  });
});

describe.skipIf(!haveFixtures)(
  `chunked prefill on the shared fixtures (GPT-2 family with learned positions; onnx-genai packages)${haveFixtures ? '' : ` (skipped: ${fixturesSkipReason})`}`,
  () => {
    it('gives the tokens of one run', async () => {
      const e = await engine(fixture('onnxruntime-genai/tiny-random-gpt2-fp32'));
      try {
        const p = prompt(200, 10);
        const whole = generate(e.batcher(100_000), [p], 10);
        await whole.outcome;
        const chunked = generate(e.batcher(48), [p], 10);
        await chunked.outcome;
        expect(chunked.ids).toEqual(whole.ids);
        expect(e.runs.filter((r) => r !== '1×1')).toEqual(['1×200', ...Array(5).fill('1×40')]);
      } finally {
        await e.session.release();
      }
    });

    // onnx-genai's packages (context 16): chunks of 2 positions, each with its own past and mask.
    it.each(['tiny-llm', 'tiny-llm-explicit-io', 'tiny-llm-sharedbuffer', 'tiny-reasoning'])(
      'onnx-genai/%s gives the tokens of one run in chunks of 2',
      async (name) => {
        const e = await engine(fixture(`onnx-genai/${name}`));
        try {
          const p = [5, 12, 19, 26, 3, 10];
          const whole = generate(e.batcher(100_000), [p], 8);
          await whole.outcome;
          const chunked = generate(e.batcher(2), [p], 8);
          await chunked.outcome;
          expect(chunked.ids).toEqual(whole.ids);
          expect(e.runs.filter((r) => r !== '1×1')).toEqual(['1×6', '1×2', '1×2', '1×2']);
        } finally {
          await e.session.release();
        }
      },
    );
  },
);
