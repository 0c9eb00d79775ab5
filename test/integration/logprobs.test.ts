/**
 * Log-probabilities, OpenAI's penalties and logit bias on the real engine and
 * host. The oracle is independent of the engine: onnxruntime-node running the
 * package's original graph over the whole sequence so far, from an empty past,
 * and a log-softmax in float64. Every reported log-probability (sampled token
 * and alternatives) must be that one, whatever the sampling settings, for rows
 * of different lengths batched with padding, and for a static-cache graph whose
 * rows take turns.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GenerationJob, LoadedDecoder } from '../../src/main/engine/decoder';
import type { SamplingParams, StepLogprob } from '../../src/main/engine/protocol';
import { RunnerService } from '../../src/main/host/runner-service';
import { loadModelSpec } from '../../src/main/packages';
import type { GeneratedTokenLogprob, StreamFrame } from '../../src/shared/contract';
import type { ModelSpec } from '../../src/shared/model-spec';
import { defaultModelDir } from '../helpers/fixtures';
import { GREEDY } from '../helpers/generation';
import { recomputedLogprobs } from '../helpers/oracle';
import { rejection } from '../helpers/rejection';
import { writeTwinPackages } from '../helpers/static-cache-models';

const TOLERANCE = 1e-4;
const root = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-logprobs-'));
const twins = writeTwinPackages(root, { layers: 2, hidden: 64, heads: 4, capacity: 48, seed: 5 });
afterAll(() => rmSync(root, { recursive: true, force: true }));

function prompt(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => 3 + ((i * 41 + salt * 13) % 500));
}

/** Each row's ids and the log-probabilities the engine reported with them. */
async function generate(d: LoadedDecoder, job: Partial<GenerationJob> & { rows: number[][] }) {
  const ids: number[][] = job.rows.map(() => []);
  const lps: StepLogprob[][] = job.rows.map(() => []);
  await d.generate(
    { maxNewTokens: 6, sampling: GREEDY, eosTokenIds: [], ...job },
    {
      onStart: () => {},
      onStep: (step, _kv, logprobs) => {
        for (const [r, id] of step.entries()) {
          if (id < 0) continue;
          ids[r]?.push(id);
          const lp = logprobs?.[r];
          if (!lp) throw new Error(`row ${r} got token ${id} without its log-probability`);
          lps[r]?.push(lp);
        }
      },
      stopRequested: () => null,
      countRun: () => {},
    },
  );
  return { ids, lps };
}

/** Checks every step of every row against a recompute of its sequence so far. */
async function expectRecomputed(
  oracle: ort.InferenceSession,
  spec: ModelSpec,
  rows: number[][],
  run: Awaited<ReturnType<typeof generate>>,
  top: number,
) {
  for (const [r, row] of rows.entries()) {
    const ids = run.ids[r] as number[];
    expect(ids.length).toBeGreaterThan(0);
    for (const [i, lp] of (run.lps[r] as StepLogprob[]).entries()) {
      const ref = await recomputedLogprobs(oracle, spec, [...row, ...ids.slice(0, i)]);
      const where = `row ${r}, token ${i}`;
      expect(lp.id, where).toBe(ids[i]);
      expect(Math.abs(lp.logprob - (ref[lp.id] as number)), where).toBeLessThan(TOLERANCE);
      expect(lp.top, where).toHaveLength(top);
      const order = [...ref.keys()].sort((a, b) => (ref[b] as number) - (ref[a] as number));
      for (const [k, alt] of lp.top.entries()) {
        // The k-th most likely id, unless it ties with its neighbour within the tolerance.
        const expected = order[k] as number;
        if (Math.abs((ref[expected] as number) - (ref[alt.id] as number)) > TOLERANCE) {
          expect(alt.id, `${where}, alternative ${k}`).toBe(expected);
        }
        expect(Math.abs(alt.logprob - (ref[alt.id] as number)), `${where}, alternative ${k}`).toBeLessThan(TOLERANCE);
      }
    }
  }
}

describe('log-probabilities from the engine', () => {
  let spec: ModelSpec;
  let decoder: LoadedDecoder;
  let oracle: ort.InferenceSession;
  beforeAll(async () => {
    spec = await loadModelSpec(defaultModelDir);
    decoder = await LoadedDecoder.load(spec, { intraOpNumThreads: 2, executionProviders: ['cpu'] });
    oracle = await ort.InferenceSession.create(spec.graphPath, { intraOpNumThreads: 2, logSeverityLevel: 3 });
  }, 60_000);
  afterAll(async () => {
    await decoder?.dispose();
    await oracle?.release();
  });

  it('are the model’s own, as a recompute gives them, for sampled rows of different lengths in one batch', async () => {
    const rows = [prompt(5, 1), prompt(11, 2), prompt(3, 3)];
    // Sampled at a high temperature with penalties and a bias: the reported figures are the model's, before them.
    const sampling: SamplingParams = {
      ...GREEDY,
      greedy: false,
      temperature: 1.5,
      seed: 99,
      frequencyPenalty: 1,
      presencePenalty: 0.5,
      logitBias: [[7, 3]],
    };
    const run = await generate(decoder, { rows, sampling, logprobs: 4, maxNewTokens: 5 });
    await expectRecomputed(oracle, spec, rows, run, 4);
  });

  it('are reported with no alternatives when none are asked for, and not at all without `logprobs`', async () => {
    const rows = [prompt(4, 4)];
    const none = await generate(decoder, { rows, logprobs: 0, maxNewTokens: 3 });
    await expectRecomputed(oracle, spec, rows, none, 0);
    const hookArgs: unknown[] = [];
    await decoder.generate(
      { rows, maxNewTokens: 2, sampling: GREEDY, eosTokenIds: [] },
      {
        onStart: () => {},
        onStep: (_ids, _kv, logprobs) => hookArgs.push(logprobs),
        stopRequested: () => null,
        countRun: () => {},
      },
    );
    expect(hookArgs).toEqual([undefined, undefined]);
  });

  it('come from a static-cache graph whose rows take turns, as a recompute of its growing-cache twin gives them', async () => {
    const staticSpec = await loadModelSpec(twins.staticDir);
    const twinSpec = await loadModelSpec(twins.dynamicDir);
    const fixed = await LoadedDecoder.load(staticSpec, { intraOpNumThreads: 2, executionProviders: ['cpu'] });
    const twin = await ort.InferenceSession.create(twinSpec.graphPath, { logSeverityLevel: 3 });
    try {
      const rows = [prompt(6, 5), prompt(9, 6)];
      const run = await generate(fixed, { rows, logprobs: 3, maxNewTokens: 4 });
      await expectRecomputed(twin, twinSpec, rows, run, 3);
    } finally {
      await fixed.dispose();
      await twin.release();
    }
  }, 60_000);
});

describe('through the host', () => {
  let host: RunnerService;
  let spec: ModelSpec;
  beforeAll(async () => {
    host = new RunnerService({ intraOpNumThreads: 2 });
    spec = (await host.loadModel(defaultModelDir, { id: 'default' })).spec;
  }, 60_000);
  afterAll(async () => {
    await host?.close();
  });
  const noEnd = () => Object.fromEntries(spec.eosTokenIds.map((id) => [String(id), -100]));

  it('names each token: its bytes make up the reply, its offset points into it, and the stream carries the same', async () => {
    const frames: StreamFrame[] = [];
    const r = await host.generate(
      { prompt: 'Once upon a time', maxNewTokens: 24, sampling: { greedy: true, logitBias: noEnd() }, logprobs: 2 },
      (f) => frames.push(f),
    ).result;
    const lps = r.rows[0]?.logprobs as GeneratedTokenLogprob[];
    expect(r.finishReason).toBe('length');
    expect(lps.map((t) => t.id)).toEqual(r.tokenIds);
    expect(Buffer.from(lps.flatMap((t) => t.bytes)).toString('utf8')).toBe(r.text);
    const tok = host.tokenizerOf('default');
    for (const [i, t] of lps.entries()) {
      expect(t).toMatchObject(tok.tokenPiece(t.id));
      expect(t.top).toHaveLength(2);
      // Greedy: the chosen token is the most likely one.
      expect(t.top[0]?.id).toBe(t.id);
      expect(t.top[0]?.logprob).toBe(t.logprob);
      if (!t.token.includes('\ufffd')) expect(r.text.slice(t.textOffset).startsWith(t.token), `token ${i}`).toBe(true);
    }
    const streamed = frames.flatMap((f) => (f.type === 'tokens' ? (f.rows[0]?.logprobs ?? []) : []));
    expect(streamed).toEqual(lps);
  });

  it('with a stop string, are those of the text returned: none for text at or after the stop, in the stream too', async () => {
    const base = { prompt: 'Once upon a time', maxNewTokens: 24, logprobs: 1 } as const;
    const sampling = { greedy: true, logitBias: noEnd() };
    const full = await host.generate({ ...base, sampling }).result;
    const lps = full.rows[0]?.logprobs as GeneratedTokenLogprob[];
    /** The shortest stop string that starts at `cut` and occurs nowhere before it, at least `min` long. */
    const stopAt = (cut: number, min: number) => {
      for (let len = min; cut + len <= full.text.length; len++) {
        const stop = full.text.slice(cut, cut + len);
        if (full.text.indexOf(stop) === cut) return stop;
      }
      return undefined;
    };
    const cases: Array<{ cut: number; stop: string }> = [];
    // Inside a token: that token wrote text before the stop, so it stays.
    const inside = lps.find(
      (t, i) => i >= 3 && t.token.length >= 3 && !t.token.includes('\ufffd') && stopAt(t.textOffset + 1, 1),
    );
    if (inside) cases.push({ cut: inside.textOffset + 1, stop: stopAt(inside.textOffset + 1, 1) as string });
    // At a token's start, spanning three tokens: the matcher held their text back, and their log-probabilities.
    const at = lps.findIndex((t, i) => i >= 3 && i + 3 < lps.length && t.textOffset > (inside?.textOffset ?? 0));
    const spanEnd = (lps[at + 2]?.textOffset ?? 0) + 1;
    const cutAt = lps[at]?.textOffset as number;
    const spanning = stopAt(cutAt, spanEnd - cutAt);
    if (spanning) cases.push({ cut: cutAt, stop: spanning });
    expect(cases, 'the reply offers a stop inside a token and one across tokens').toHaveLength(2);
    for (const { cut, stop } of cases) {
      const frames: StreamFrame[] = [];
      const r = await host.generate({ ...base, sampling, stop: [stop] }, (f) => frames.push(f)).result;
      expect(r.finishReason).toBe('stop');
      expect(r.text).toBe(full.text.slice(0, cut));
      const got = r.rows[0]?.logprobs as GeneratedTokenLogprob[];
      expect(got, `stop ${JSON.stringify(stop)}`).toEqual(lps.filter((t) => t.textOffset < cut));
      const streamed = frames.flatMap((f) => (f.type === 'tokens' ? (f.rows[0]?.logprobs ?? []) : []));
      expect(streamed, `stop ${JSON.stringify(stop)}, streamed`).toEqual(got);
    }
  });

  it('applies each penalty to what was generated: every greedy pick is the best raw log-probability less its penalty', async () => {
    const base = { prompt: 'The cat sat on the', maxNewTokens: 24, logprobs: 20 } as const;
    const plain = await host.generate({ ...base, sampling: { greedy: true, logitBias: noEnd() } }).result;
    for (const [frequency, presence] of [
      [0.8, 0],
      [0, 0.8],
      [0.3, 0.5],
    ] as const) {
      const r = await host.generate({
        ...base,
        sampling: { greedy: true, frequencyPenalty: frequency, presencePenalty: presence, logitBias: noEnd() },
      }).result;
      const label = `frequency ${frequency}, presence ${presence}`;
      expect(r.tokenIds, label).not.toEqual(plain.tokenIds);
      const counts = new Map<number, number>();
      for (const [i, t] of (r.rows[0]?.logprobs ?? []).entries()) {
        const adjusted = (alt: { id: number; logprob: number }) => {
          const n = counts.get(alt.id) ?? 0;
          return alt.logprob - n * frequency - (n > 0 ? presence : 0);
        };
        expect([...t.top].sort((a, b) => adjusted(b) - adjusted(a))[0]?.id, `${label}, token ${i}`).toBe(t.id);
        counts.set(t.id, (counts.get(t.id) ?? 0) + 1);
      }
    }
  });

  it('a logit bias of 100 forces a token, and one for an id past the vocabulary is refused naming the field', async () => {
    const forced = await host.generate({
      prompt: 'hi',
      maxNewTokens: 5,
      sampling: { temperature: 1, logitBias: { 42: 100 } },
    }).result;
    expect(forced.tokenIds).toEqual([42, 42, 42, 42, 42]);
    const vocab = spec.vocabSize;
    const err = await rejection(host.generate({ prompt: 'hi', sampling: { logitBias: { [vocab]: 1 } } }).result);
    expect(err.code).toBe('BAD_REQUEST');
    expect(err.message).toContain('logitBias');
    expect(err.message).toContain(`token id ${vocab}`);
  });
});
