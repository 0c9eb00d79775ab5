/**
 * The batcher frees each step's dead KV at once (kv-cache.ts releaseKv): while a batch decodes, the memory held
 * in ArrayBuffers stays near the live KV instead of piling up every step's copy until a garbage collection.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import * as ort from 'onnxruntime-node';
import { describe, expect, it, vi } from 'vitest';
import { LoadedDecoder, type SessionKv } from '../../src/main/engine/decoder';
import { createEngineCore } from '../../src/main/engine/engine-core';
import { KV_GROWTH_POSITIONS, tensorsBytes } from '../../src/main/engine/kv-cache';
import type { EngineEvent } from '../../src/main/engine/protocol';
import { loadModelSpec } from '../../src/main/packages';
import { defaultModelDir } from '../helpers/fixtures';
import { GREEDY } from '../helpers/generation';

// A full garbage collection (the test process runs without --expose-gc).
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

describe('dead KV', () => {
  it('is freed step by step while a batch decodes, not left to the collector', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    const decoder = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: 0,
    });
    try {
      const rows = [0, 1, 2, 3].map((r) => Array.from({ length: 24 }, (_, i) => 3 + ((i * 37 + r * 11) % 400)));
      const base = process.memoryUsage().arrayBuffers;
      let worst = 0;
      let steps = 0;
      await decoder.generate(
        { rows, maxNewTokens: 120, sampling: GREEDY, eosTokenIds: [] },
        {
          onStart: () => {},
          onStep: (_ids, kvBytes) => {
            steps++;
            // Beyond what was there before, once the KV outweighs the run's small buffers: what the batch holds now
            // (kvBytes) is all that should be.
            if (steps >= 20) worst = Math.max(worst, (process.memoryUsage().arrayBuffers - base) / kvBytes);
          },
          stopRequested: () => null,
          countRun: () => {},
        },
      );
      expect(steps).toBe(120);
      // Each step's dead KV kept until a collection reached ~50× the live KV by the end (the steps' copies add
      // up); freed at once, it stays at ~3× (the live KV and the run's other buffers), however many steps run.
      expect(worst).toBeLessThan(8);
    } finally {
      await decoder.dispose();
    }
  });

  it('is freed chunk by chunk while a long prompt prefills, not left to the collector', async () => {
    const spec = await loadModelSpec(defaultModelDir);
    const decoder = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: 0,
      prefillChunkTokens: 32,
    });
    try {
      const rows = [Array.from({ length: 640 }, (_, i) => 3 + ((i * 37) % 400))];
      const base = process.memoryUsage().arrayBuffers;
      let worst = 0;
      let chunks = 0;
      await decoder.generate(
        { rows, maxNewTokens: 1, sampling: GREEDY, eosTokenIds: [] },
        {
          onStart: () => {},
          onPrefill: (_done, _length, kvBytes) => {
            chunks++;
            if (chunks >= 8) worst = Math.max(worst, (process.memoryUsage().arrayBuffers - base) / kvBytes);
          },
          onStep: () => {},
          stopRequested: () => null,
          countRun: () => {},
        },
      );
      expect(chunks).toBe(19);
      // Each chunk's replaced KV kept until a collection: the prefixes add up (1 + 2 + … chunks' worth, ~10× the
      // live KV by the last chunk); freed at once, ~1.2×: the live KV and the chunk's other buffers.
      expect(worst).toBeLessThan(2);
    } finally {
      await decoder.dispose();
    }
  });

  it.each([
    ['one request', 1],
    ['two requests that end together', 2],
  ])('is freed when the last request leaves the batch (%s)', async (_, requests) => {
    const spec = await loadModelSpec(defaultModelDir);
    if (spec.kv.kind !== 'dynamic') throw new Error('the default model has a dynamic KV');
    const name = spec.kv.tensors[0]?.past as string;
    const decoder = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: 0,
    });
    // The buffer under the first KV input of each run (onnxruntime's own run, watched, not replaced): the last
    // step's is the batch's KV at its end (its positions written in place, as the room reaches the last one).
    const fed: ArrayBufferLike[] = [];
    const proto = (ort.InferenceSession as unknown as { prototype: ort.InferenceSession }).prototype;
    const run = proto.run;
    const watch = vi.spyOn(proto, 'run').mockImplementation(function (
      this: ort.InferenceSession,
      ...args: Parameters<ort.InferenceSession['run']>
    ) {
      const past = (args[0] as Record<string, ort.Tensor>)[name];
      if (past) fed.push((past.data as Float32Array).buffer);
      return run.apply(this, args);
    });
    try {
      const quiet = { onStart: () => {}, onStep: () => {}, stopRequested: () => null, countRun: () => {} };
      await Promise.all(
        Array.from({ length: requests }, (_, r) =>
          decoder.generate(
            {
              rows: [Array.from({ length: 24 }, (_, i) => 3 + ((i * 37 + r) % 400))],
              maxNewTokens: 40,
              sampling: GREEDY,
              eosTokenIds: [],
            },
            quiet,
          ),
        ),
      );
      expect(fed).toHaveLength(40);
      // Each step's replaced KV was freed as it went; the batch's last one too, once its last request had left.
      expect(new Set(fed.filter((b) => b.byteLength > 0)).size).toBe(0);
    } finally {
      watch.mockRestore();
      await decoder.dispose();
    }
  });

  it.each([
    ['continues it', (told: number[]) => [...told, 7, 8, 9, 10, 11]],
    ['shares part of it', (told: number[]) => [...told.slice(0, 60), 7, 8, 9, 10, 11]],
    ['shares none of it', () => [7, 8, 9, 10, 11]],
  ])(
    "of a chat session is freed when its next turn starts, whose reservation counts it, not left beside the turn's own (a turn that %s)",
    async (_, next) => {
      const spec = await loadModelSpec(defaultModelDir);
      const decoder = await LoadedDecoder.load(spec, {
        intraOpNumThreads: 2,
        executionProviders: ['cpu'],
        lookupDraftTokens: 0,
      });
      try {
        const quiet = { onStart: () => {}, stopRequested: () => null, countRun: () => {} };
        const job = { maxNewTokens: 10, sampling: GREEDY, eosTokenIds: [] };
        const session: SessionKv = { tokens: [], past: new Map() };
        const first = Array.from({ length: 100 }, (_, i) => 3 + ((i * 37) % 400));
        await decoder.generate({ ...job, rows: [first], session }, { ...quiet, onStep: () => {} });
        const told = session.tokens.slice();
        expect(told).toHaveLength(100 + 10 - 1);
        const old = [...session.past.values()];
        expect(tensorsBytes(old)).toBe(told.length * spec.bpt);
        const prompt = next(told);
        const cold: number[] = [];
        await decoder.generate({ ...job, rows: [prompt] }, { ...quiet, onStep: (ids) => cold.push(ids[0] as number) });
        // While the turn runs, the engine holds its own KV only (the prefix it reuses, copied or fed, is in it): the
        // session refers to no KV, and the last turn's buffers are freed.
        const ids: number[] = [];
        const during: number[] = [];
        await decoder.generate(
          { ...job, rows: [prompt], session },
          {
            ...quiet,
            onStep: (step) => {
              ids.push(step[0] as number);
              during.push(tensorsBytes(old) + tensorsBytes(session.past.values()));
            },
          },
        );
        expect(during).toEqual(Array(10).fill(0));
        expect(ids).toEqual(cold);
        // The session holds this turn's KV when it ends.
        expect(session.tokens).toEqual([...prompt, ...ids.slice(0, -1)]);
        expect(tensorsBytes(session.past.values())).toBe(session.tokens.length * spec.bpt);
      } finally {
        await decoder.dispose();
      }
    },
  );

  it.each([
    ['a dense KV', false],
    ['a KV with room after its positions', true],
  ])('is freed before a draft check samples and sends its tokens, as before a step does (%s)', async (_, kvGap) => {
    const spec = await loadModelSpec(defaultModelDir);
    const drafts = 4;
    const decoder = await LoadedDecoder.load(spec, {
      intraOpNumThreads: 2,
      executionProviders: ['cpu'],
      lookupDraftTokens: drafts,
      kvGap,
    });
    // One copy of the KV holds up to KV_GROWTH_POSITIONS more positions as room either way (appendSeq's buffers
    // keep it after the rows, withRoom's after each row), with room also the positions of a check the model did not take.
    const room = (KV_GROWTH_POSITIONS + drafts) * spec.bpt;
    try {
      const rows = [Array.from({ length: 24 }, (_, i) => 3 + ((i * 37) % 400))];
      const job = { rows, maxNewTokens: 160, sampling: GREEDY, eosTokenIds: [] };
      const quiet = { onStart: () => {}, stopRequested: () => null, countRun: () => {} };
      // The reply itself as the prediction: every run after the prompt is a draft check that takes its whole draft.
      const reply: number[] = [];
      await decoder.generate({ ...job }, { ...quiet, onStep: (ids) => reply.push(ids[0] as number) });
      collect();
      const base = process.memoryUsage().arrayBuffers;
      let worst = 0;
      let steps = 0;
      const result = await decoder.generate(
        { ...job, prediction: reply },
        {
          ...quiet,
          onStep: (_ids, kvBytes) => {
            steps++;
            // After a full collection (this model's other buffers outweigh its KV as garbage): what is still held.
            collect();
            if (steps >= 40) worst = Math.max(worst, (process.memoryUsage().arrayBuffers - base) / (kvBytes + room));
          },
        },
      );
      expect(result.lookup?.accepted).toBeGreaterThan(100);
      // One copy of the KV while the check's tokens go out (and the run's small buffers); the replaced KV held
      // until the check ended made it two.
      expect(worst).toBeLessThan(1.5);
    } finally {
      await decoder.dispose();
    }
  });
});

describe("a session's KV", () => {
  it('is freed when the session is dropped or its model unloaded, not left to a collection an idle engine never makes', async () => {
    const events: EngineEvent[] = [];
    const core = createEngineCore((e) => events.push(e));
    const answered = (pick: (e: EngineEvent) => boolean) =>
      vi.waitFor(
        () => {
          const e = events.find(pick);
          if (!e) throw new Error('not yet');
          return e;
        },
        { timeout: 30_000, interval: 5 },
      );
    const spec = await loadModelSpec(defaultModelDir);
    const load = (callId: number) => {
      core.handle({
        type: 'load',
        callId,
        modelId: 'm',
        spec,
        options: { intraOpNumThreads: 2, executionProviders: ['cpu'], lookupDraftTokens: 0 },
      });
      return answered((e) => e.type === 'reply' && e.callId === callId);
    };
    /** Chats of a 400-token prompt each, their KV kept in the engine under their session ids. */
    const chats = async (ids: string[]) => {
      for (const id of ids) {
        core.handle({
          type: 'generate',
          requestId: id,
          grantToken: 'grant',
          modelId: 'm',
          rows: [Array.from({ length: 400 }, (_, i) => 3 + ((i * 37) % 400))],
          maxNewTokens: 4,
          sampling: GREEDY,
          eosTokenIds: [],
          sessionId: id,
        });
        const end = await answered((e) => (e.type === 'done' || e.type === 'failed') && e.requestId === id);
        expect(end.type).toBe('done');
      }
    };
    const held = () => core.stats().sessions.reduce((sum, s) => sum + s.kvBytes, 0);
    expect(((await load(1)) as { ok: boolean }).ok).toBe(true);
    try {
      await chats(['a', 'b', 'c']);
      const kept = held();
      expect(kept).toBeGreaterThan(3 * 400 * spec.bpt);
      // Dropped (a chat deleted, a prompt cache pruned): its bytes go at once, with no collection.
      let before = process.memoryUsage().arrayBuffers;
      for (const id of ['a', 'b', 'c']) core.handle({ type: 'dropSession', sessionId: id });
      expect(core.stats().sessions).toEqual([]);
      expect(before - process.memoryUsage().arrayBuffers).toBeGreaterThanOrEqual(kept * 0.95);
      // Its model unloaded: the same for the sessions on it.
      await chats(['d', 'e']);
      const second = held();
      before = process.memoryUsage().arrayBuffers;
      core.handle({ type: 'unload', callId: 2, modelId: 'm' });
      await answered((e) => e.type === 'reply' && e.callId === 2);
      expect(before - process.memoryUsage().arrayBuffers).toBeGreaterThanOrEqual(second * 0.95);
    } finally {
      core.handle({ type: 'unload', callId: 3, modelId: 'm' });
      await answered((e) => e.type === 'reply' && e.callId === 3);
    }
  });
});
