/**
 * Static-cache graphs (onnx-genai `static_cache`) on the real onnxruntime-node:
 * the engine feeds each sequence's cache buffers and binds the same tensors as
 * the graph's cache outputs, so every run writes its positions into them. The
 * oracle is a twin package with the same weights and a growing past/present
 * cache (both built on ONNX's Attention op), run by the engine's batcher; and,
 * for onnx-genai's own fixture, a recompute of the whole sequence each step.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rowSeed } from '../../src/main/engine/batcher';
import { type GenerationHooks, type GenerationJob, LoadedDecoder, type SessionKv } from '../../src/main/engine/decoder';
import type { FinishReason } from '../../src/main/engine/protocol';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import type { StreamFrame } from '../../src/shared/contract';
import type { ModelSpec } from '../../src/shared/model-spec';
import { fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';
import { GREEDY } from '../helpers/generation';
import { rejection } from '../helpers/rejection';
import { writeTwinPackages } from '../helpers/static-cache-models';

const CAPACITY = 48;
const root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-static-'));
const twins = writeTwinPackages(root, { layers: 2, hidden: 64, heads: 4, capacity: CAPACITY, seed: 11 });
const decoders: LoadedDecoder[] = [];

afterAll(async () => {
  await Promise.all(decoders.map((d) => d.dispose()));
  rmSync(root, { recursive: true, force: true });
});

async function load(dir: string, prefillChunkTokens?: number): Promise<LoadedDecoder> {
  const spec = await loadModelSpec(dir);
  const d = await LoadedDecoder.load(spec, {
    intraOpNumThreads: 2,
    executionProviders: ['cpu'],
    ...(prefillChunkTokens ? { prefillChunkTokens } : {}),
  });
  decoders.push(d);
  return d;
}

interface Run {
  ids: number[][];
  finish: FinishReason;
  kvBytes: number[];
  started: { prefill: number; reused: number };
  runs: number;
  prefill: number[];
}

/** One generation through LoadedDecoder.generate, with what its hooks saw. */
async function generate(
  d: LoadedDecoder,
  job: Partial<GenerationJob> & { rows: number[][] },
  stopAfterRuns = Number.POSITIVE_INFINITY,
): Promise<Run> {
  const run: Run = {
    ids: job.rows.map(() => []),
    finish: 'eos',
    kvBytes: [],
    started: { prefill: -1, reused: -1 },
    runs: 0,
    prefill: [],
  };
  const hooks: GenerationHooks = {
    onStart: (prefill, reused) => {
      run.started = { prefill, reused };
    },
    onPrefill: (done) => run.prefill.push(done),
    onStep: (ids, kvBytes) => {
      for (const [r, id] of ids.entries()) if (id >= 0) run.ids[r]?.push(id);
      run.kvBytes.push(kvBytes);
    },
    stopRequested: () => (run.runs >= stopAfterRuns ? 'cancelled' : null),
    countRun: () => {
      run.runs++;
    },
  };
  const outcome = await d.generate({ maxNewTokens: 200, sampling: GREEDY, eosTokenIds: [], ...job }, hooks);
  run.finish = outcome.finishReason;
  return run;
}

/** Prompt ids below the tokenizer's special tokens. */
function prompt(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => 3 + ((i * 53 + salt * 17) % 500));
}

describe('static-cache graphs: twin packages with the same weights', () => {
  let dynamic: LoadedDecoder;
  let fixed: LoadedDecoder;
  let chunked: LoadedDecoder;
  let spec: ModelSpec;
  beforeAll(async () => {
    dynamic = await load(twins.dynamicDir);
    fixed = await load(twins.staticDir);
    chunked = await load(twins.staticDir, 5);
    spec = fixed.spec;
  }, 60_000);

  it('recognises the package and loads it with the last-position head', () => {
    expect(spec.kv.kind).toBe('static');
    expect(spec.contextLength).toBe(CAPACITY);
    // 2 layers × (key + value) × 64 floats per position.
    expect(spec.bpt).toBe(2 * 2 * 64 * 4);
    expect(fixed.logits.last).toBe(true);
    expect(fixed.batchable).toBe(false);
    // The card says what such a cache costs.
    expect(spec.warnings.some((w) => w.includes(`a static KV cache holds all ${CAPACITY} positions`))).toBe(true);
  });

  it('generates the past/present twin’s tokens at every prompt length, up to the end of the cache, in one prefill or in chunks', async () => {
    for (const [length, salt] of [
      [1, 1],
      [2, 2],
      [9, 3],
      [31, 4],
      [CAPACITY - 3, 5],
      [CAPACITY, 6],
    ] as const) {
      const rows = [prompt(length, salt)];
      const want = await generate(dynamic, { rows });
      // The context ends every one of these generations (200 new tokens asked): the twin fills its 48 positions.
      expect(want.finish).toBe('context');
      expect(want.ids[0]).toHaveLength(CAPACITY - length + 1);
      // Not a degenerate model: a long continuation uses several tokens.
      if ((want.ids[0]?.length ?? 0) >= 10) expect(new Set(want.ids[0]).size).toBeGreaterThanOrEqual(3);
      for (const d of [fixed, chunked]) {
        const got = await generate(d, { rows });
        expect(got.ids, `prompt of ${length}`).toEqual(want.ids);
        expect(got.finish).toBe('context');
      }
    }
    const long = await generate(chunked, { rows: [prompt(23, 7)], maxNewTokens: 1 });
    // 23 positions in chunks of at most 5: five runs, progress after each but the last.
    expect(long.prefill).toEqual([5, 10, 15, 20]);
    expect(long.runs).toBe(5);
  });

  it('holds one buffer set per sequence, capacity × bpt, and reports it as the KV bytes', async () => {
    const capacityBytes = CAPACITY * spec.bpt;
    const run = await generate(fixed, { rows: [prompt(4, 8)], maxNewTokens: 6 });
    expect(run.kvBytes).toEqual(Array(6).fill(capacityBytes));
    expect(run.finish).toBe('length');
    const session: SessionKv = { tokens: [], past: new Map() };
    await generate(fixed, { rows: [prompt(4, 8)], maxNewTokens: 6, session });
    const held = [...session.past.values()];
    expect(held).toHaveLength(4);
    expect(held.reduce((n, t) => n + (t.data as Float32Array).byteLength, 0)).toBe(capacityBytes);
    for (const t of held) expect(t.dims).toEqual([1, CAPACITY, 64]);

    // A spec whose bpt disagrees with the graph's buffers is caught before the first run.
    const wrong = await LoadedDecoder.load(
      { ...spec, bpt: spec.bpt * 2 },
      { intraOpNumThreads: 1, executionProviders: ['cpu'] },
    );
    decoders.push(wrong);
    const err = await rejection(generate(wrong, { rows: [prompt(4, 8)], maxNewTokens: 2 }));
    expect(err.code).toBe('ENGINE_FAILED');
    expect(err.message).toContain('KV geometry does not match');
  });

  it('a session turn keeps its buffers, computes only what differs, and equals a fresh run', async () => {
    const session: SessionKv = { tokens: [], past: new Map() };
    const first = prompt(10, 9);
    const turn1 = await generate(fixed, { rows: [first], maxNewTokens: 5, session });
    // The last sampled token was never fed: the cache holds the prompt and the first four.
    expect(session.tokens).toEqual([...first, ...(turn1.ids[0] as number[]).slice(0, 4)]);
    const buffers = [...session.past.values()];

    const second = [...first, ...(turn1.ids[0] as number[]), 77, 78, 79];
    const turn2 = await generate(fixed, { rows: [second], maxNewTokens: 8, session });
    expect(turn2.started).toEqual({ prefill: second.length - 14, reused: 14 });
    expect([...session.past.values()]).toEqual(buffers);
    for (const [i, t] of [...session.past.values()].entries()) expect(t).toBe(buffers[i]);
    expect(turn2.ids).toEqual((await generate(dynamic, { rows: [second], maxNewTokens: 8 })).ids);

    // An edit in the middle: positions from the first difference on are overwritten.
    const edited = [...first.slice(0, 3), 400, 401, ...first.slice(5)];
    const turn3 = await generate(fixed, { rows: [edited], maxNewTokens: 8, session });
    expect(turn3.started.reused).toBe(3);
    expect(turn3.ids).toEqual((await generate(dynamic, { rows: [edited], maxNewTokens: 8 })).ids);
  });

  it('rows of one request take turns, each with its own random stream, and concurrent requests interleave run by run', async () => {
    const sampled = { ...GREEDY, greedy: false, temperature: 1.5, seed: 5 };
    const rows = [prompt(6, 10), prompt(6, 10)];
    const both = await generate(fixed, { rows, maxNewTokens: 12, sampling: sampled });
    expect(both.ids[0]).not.toEqual(both.ids[1]);
    const row0 = await generate(fixed, { rows: [rows[0] as number[]], maxNewTokens: 12, sampling: sampled });
    const row1 = await generate(fixed, {
      rows: [rows[1] as number[]],
      maxNewTokens: 12,
      sampling: { ...sampled, seed: rowSeed({ seed: 5 }, 1) },
    });
    expect(both.ids).toEqual([row0.ids[0], row1.ids[0]]);

    const a = prompt(7, 11);
    const b = prompt(12, 12);
    const order: string[] = [];
    const tagged = (tag: string, rowsOf: number[][]) => {
      const ids: number[] = [];
      return fixed
        .generate(
          { rows: rowsOf, maxNewTokens: 10, sampling: GREEDY, eosTokenIds: [] },
          {
            onStart: () => {},
            onStep: (got) => ids.push(got[0] as number),
            stopRequested: () => null,
            countRun: () => order.push(tag),
          },
        )
        .then(() => ids);
    };
    const [gotA, gotB] = await Promise.all([tagged('a', [a]), tagged('b', [b])]);
    expect(gotA).toEqual((await generate(dynamic, { rows: [a], maxNewTokens: 10 })).ids[0]);
    expect(gotB).toEqual((await generate(dynamic, { rows: [b], maxNewTokens: 10 })).ids[0]);
    // Neither ran to its end before the other started: their runs alternate.
    expect(order.indexOf('b')).toBeLessThan(order.lastIndexOf('a'));
    expect(order.indexOf('a')).toBeLessThan(order.lastIndexOf('b'));
  });

  it('ends between prefill chunks when asked, and refuses a prompt longer than the cache', async () => {
    const stopped = await generate(chunked, { rows: [prompt(20, 13)] }, 2);
    expect(stopped.finish).toBe('cancelled');
    expect(stopped.runs).toBe(2);
    expect(stopped.ids).toEqual([[]]);

    // A session turn stopped the same way keeps the positions it wrote, and the next turn builds on them.
    const session: SessionKv = { tokens: [], past: new Map() };
    const long = prompt(20, 13);
    await generate(chunked, { rows: [long], session }, 2);
    expect(session.tokens).toEqual(long.slice(0, 10));
    const resumed = await generate(chunked, { rows: [long], maxNewTokens: 6, session });
    expect(resumed.started).toEqual({ prefill: 10, reused: 10 });
    expect(resumed.ids).toEqual((await generate(dynamic, { rows: [long], maxNewTokens: 6 })).ids);

    const err = await rejection(generate(fixed, { rows: [prompt(CAPACITY + 1, 14)] }));
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toContain(`holds ${CAPACITY} positions`);
  });

  it('a prediction lookup decoding cannot use says why: the static graph can check no draft; a reply that never ran alone', async () => {
    const promptIds = prompt(8, 21);
    const hooks = (ids: number[]): GenerationHooks => ({
      onStart: () => {},
      onStep: (step) => ids.push(...step.filter((id) => id >= 0)),
      stopRequested: () => null,
      countRun: () => {},
    });
    const job = (maxNewTokens: number, prediction?: number[]): GenerationJob => ({
      rows: [promptIds],
      maxNewTokens,
      sampling: GREEDY,
      eosTokenIds: [],
      ...(prediction ? { prediction } : {}),
    });
    // The prediction is the reply itself: where lookup runs (the dynamic twin, alone), every draft is taken.
    const reply: number[] = [];
    const plain = await dynamic.generate(job(12), hooks(reply));
    expect(plain.predictionUnused).toBeUndefined();
    const drafted = await dynamic.generate(job(12, reply), hooks([]));
    expect(drafted.lookup?.accepted).toBeGreaterThan(0);
    expect(drafted.predictionUnused).toBeUndefined();
    // The static twin writes the same reply, and says the prediction went unused, and why.
    const ids: number[] = [];
    const unused = await fixed.generate(job(12, reply), hooks(ids));
    expect(ids).toEqual(reply);
    expect(unused.lookup).toBeUndefined();
    expect(unused.predictionUnused).toEqual({ reason: 'lookup_unavailable', detail: expect.stringMatching(/static/) });
    // On the dynamic twin beside a longer reply all along, the predicted reply never ran alone (lookup's condition).
    const other = dynamic.generate(job(30), hooks([]));
    const beside = await dynamic.generate(job(12, reply), hooks([]));
    await other;
    expect(beside.lookup).toBeUndefined();
    expect(beside.predictionUnused).toEqual({ reason: 'batched' });
  });

  it('runs through the host: the scheduler reserves the whole cache, and a session holds it between turns', async () => {
    const h = new RunnerService({ intraOpNumThreads: 2 });
    try {
      const info = await h.loadModel(twins.staticDir, { id: 'static' });
      expect(info.logits.last).toBe(true);
      const capacityBytes = CAPACITY * spec.bpt;
      const promptIds = prompt(8, 15);
      const frames: StreamFrame[] = [];
      const r = await h.generate({ promptIds, maxNewTokens: 6, sampling: { greedy: true }, sessionId: 's' }, (f) =>
        frames.push(f),
      ).result;
      // The stream says from the start that the request needs the whole cache (the chat shows it while queued).
      expect(frames[0]).toMatchObject({ type: 'accepted', fixedTokens: CAPACITY });
      expect(r.reservedBytes).toBe(capacityBytes);
      expect(r.kvBytes).toBe(capacityBytes);
      expect(r.tokenIds).toEqual((await generate(dynamic, { rows: [promptIds], maxNewTokens: 6 })).ids[0]);
      expect(h.scheduler.sessionInfo('s')?.heldBytes).toBe(capacityBytes);
      const stats = await h.engine.stats();
      expect(stats.sessions).toEqual([{ sessionId: 's', tokens: 8 + 5, kvBytes: capacityBytes }]);
      const next = [...promptIds, ...r.tokenIds, 90];
      const turn2 = await h.generate({ promptIds: next, maxNewTokens: 4, sampling: { greedy: true }, sessionId: 's' })
        .result;
      expect(turn2.reusedTokens).toBe(13);
      expect(turn2.tokenIds).toEqual((await generate(dynamic, { rows: [next], maxNewTokens: 4 })).ids[0]);
      // A reply a stop string ended holds the whole cache too, as one that ran to its max tokens.
      const stop = r.text.slice(2, 4);
      const stopped = await h.generate({ promptIds, maxNewTokens: 6, sampling: { greedy: true }, stop: [stop] }).result;
      expect(stopped.finishReason).toBe('stop');
      expect(stopped.kvBytes).toBe(capacityBytes);
    } finally {
      await h.close();
    }
  });
});

describe('static-cache sessions through the host', () => {
  it('a turn the person stopped keeps its KV as far as its reply went; the next turn reuses it and matches a cold run', async () => {
    // A cache long enough (each step reads and copies all of it) that the turn still runs, for seconds, when its
    // first tokens reach the host and it is stopped, however loaded the machine.
    const dirs = writeTwinPackages(path.join(root, 'long'), {
      layers: 2,
      hidden: 128,
      heads: 4,
      capacity: 4096,
      seed: 12,
    });
    const h = new RunnerService({ intraOpNumThreads: 2 });
    try {
      await h.loadModel(dirs.staticDir, { id: 'long' });
      const promptIds = prompt(6, 16);
      let cancelled = false;
      const handle = h.generate({ promptIds, maxNewTokens: 4000, sampling: { greedy: true }, sessionId: 'c' }, (f) => {
        if (f.type === 'tokens' && !cancelled) {
          cancelled = true;
          handle.cancel('user');
        }
      });
      expect((await rejection(handle.result)).code).toBe('CANCELLED');
      const held = h.scheduler.sessionInfo('c');
      expect(held?.tokens).toBeGreaterThan(promptIds.length);
      expect((await h.engine.stats()).sessions.map((s) => s.sessionId)).toEqual(['c']);
      const kept = h.sessionMirror('c')?.tokens ?? [];
      expect(kept.slice(0, promptIds.length)).toEqual(promptIds);
      const again = [...kept, 9, 10];
      const next = await h.generate({ promptIds: again, maxNewTokens: 3, sampling: { greedy: true }, sessionId: 'c' })
        .result;
      expect(next.reusedTokens).toBe(kept.length);
      const cold = await h.generate({ promptIds: again, maxNewTokens: 3, sampling: { greedy: true } }).result;
      expect(next.tokenIds).toEqual(cold.tokenIds);
    } finally {
      await h.close();
    }
  });
});

describe.skipIf(!haveFixtures)(`onnx-genai tiny-llm-scatter (${fixturesSkipReason})`, () => {
  /** Greedy continuation that recomputes the whole sequence into a fresh cache at every step. */
  async function recompute(session: ort.InferenceSession, ids: number[], steps: number): Promise<number[]> {
    const seq = ids.slice();
    const out: number[] = [];
    const int64 = (v: number[], dims: number[]) =>
      new ort.Tensor(
        'int64',
        BigInt64Array.from(v, (x) => BigInt(x)),
        dims,
      );
    for (let s = 0; s < steps; s++) {
      const res = await session.run({
        input_ids: int64(seq, [1, seq.length]),
        'key_cache.0': new ort.Tensor('float32', new Float32Array(16 * 16), [1, 16, 16]),
        'value_cache.0': new ort.Tensor('float32', new Float32Array(16 * 16), [1, 16, 16]),
        write_indices: int64([0], [1]),
        nonpad_kv_seqlen: int64([seq.length], [1]),
      });
      const logits = (res.logits as ort.Tensor).data as Float32Array;
      const last = logits.subarray(logits.length - 32);
      let best = 0;
      for (let i = 1; i < 32; i++) if ((last[i] as number) > (last[best] as number)) best = i;
      out.push(best);
      seq.push(best);
    }
    return out;
  }

  it('equals a recompute of the whole sequence at every step, for every prompt length up to the cache', async () => {
    const dir = fixture('onnx-genai/tiny-llm-scatter');
    const d = await load(dir, 3);
    const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), { logSeverityLevel: 4 });
    try {
      for (let length = 1; length <= 12; length++) {
        const ids = Array.from({ length }, (_, i) => 4 + ((i * 7 + length) % 28));
        const got = await generate(d, { rows: [ids] });
        expect(got.finish).toBe('context');
        expect(got.ids[0], `prompt of ${length}`).toEqual(await recompute(session, ids, 16 - length + 1));
      }
    } finally {
      await session.release();
    }
  });
});
