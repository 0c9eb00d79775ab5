/**
 * Long texts are tokenized on a worker thread of their tokenizer (off-thread.ts), not on the host's thread that every
 * stream, the UI and the API clients share: a request with a long prompt is prepared once its text is tokenized
 * there, with the very ids the host's own tokenizer gives, while requests sent after it go ahead meanwhile.
 */
import { cpSync, mkdtempSync, rmSync, utimesSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RunnerService } from '../../../src/main/host/runner-service';
import { loadTokenizer, type TextTokenizer } from '../../../src/main/tokenizer';
import {
  afterLongTexts,
  deferringLongTexts,
  LongTextPending,
  MAX_DEFERRALS,
  OFF_THREAD_CHARS,
} from '../../../src/main/tokenizer/off-thread';
import type { StreamFrame } from '../../../src/shared/contract';
import { fixture, fixturesSkipReason, haveFixtures } from '../../helpers/fixtures';
import { generatedModel } from '../../helpers/models';

const WORDS = ['river', 'town', 'Willow', 'naïve', '東京', '🙂', 'ünïcode', '42', '\n', 'the', 'über', 'ß'];

/** A text of about `chars` characters of `words` (numbers, accents and emoji), different for each `seed`. */
function longText(chars: number, seed: number, words = WORDS): string {
  let out = `${seed}:`;
  for (let i = 0; out.length < chars; i++) out += `${words[(i * 7 + seed) % words.length]} `;
  return out;
}

function tokenizerOf(dir: string): Promise<TextTokenizer> {
  return loadTokenizer(
    { tokenizerJson: path.join(dir, 'tokenizer.json'), tokenizerConfig: path.join(dir, 'tokenizer_config.json') },
    { vocabSize: 1_000_000 },
  );
}

describe.skipIf(!haveFixtures)('a tokenizer loaded from its files %s', () => {
  // GPT-2's byte-level BPE of 50,257 tokens: a character may span several.
  const dir = haveFixtures ? fixture('onnxruntime-genai/tiny-random-gpt2-fp32') : '';
  let tok: TextTokenizer;
  let here: TextTokenizer;
  beforeAll(async () => {
    tok = await tokenizerOf(dir);
    here = await tokenizerOf(dir);
  });
  afterAll(() => {
    tok?.close();
    here?.close();
  });

  it('tokenizes a long text on its worker, asked under deferringLongTexts, and gives the ids the host gives', async () => {
    const text = longText(3 * OFF_THREAD_CHARS, 1);
    let pending: unknown;
    try {
      deferringLongTexts(() => tok.encode(text));
    } catch (err) {
      pending = err;
    }
    // Not tokenized here: the encode threw before it began.
    expect(pending).toBeInstanceOf(LongTextPending);
    await (pending as LongTextPending).ready;
    const ids = deferringLongTexts(() => tok.encode(text));
    expect(ids).toEqual(here.encode(text));
    // Kept for a while: asked again (another request with the same prompt), it is there.
    expect(deferringLongTexts(() => tok.encode(text))).toEqual(ids);
  });

  it('any long text, with or without special tokens: the same ids as on the host', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }),
        fc.integer({ min: 0, max: 1000 }),
        fc.boolean(),
        async (piece, seed, addSpecialTokens) => {
          const text = `${piece}${longText(OFF_THREAD_CHARS, seed)}${piece}`;
          const ids = await afterLongTexts(() => tok.encode(text, { addSpecialTokens }));
          expect(ids).toEqual(here.encode(text, { addSpecialTokens }));
        },
      ),
      { numRuns: 8 },
    );
  });

  it('a pass that meets many long texts ends: after MAX_DEFERRALS waits it is finished on the host', async () => {
    const texts = Array.from({ length: MAX_DEFERRALS + 2 }, (_, i) => longText(OFF_THREAD_CHARS, 100 + i));
    let runs = 0;
    const all = await afterLongTexts(() => {
      runs++;
      return texts.map((t) => tok.encode(t));
    });
    expect(all).toEqual(texts.map((t) => here.encode(t)));
    expect(runs).toBe(MAX_DEFERRALS + 1);
  });

  it('a short text is tokenized where it is asked for', () => {
    const text = longText(OFF_THREAD_CHARS - 100, 2);
    expect(deferringLongTexts(() => tok.encode(text))).toEqual(here.encode(text));
  });

  it('files changed since the load: tokenized on the host again, rightly', async () => {
    const copy = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-off-thread-'));
    try {
      cpSync(dir, copy, { recursive: true });
      const changed = await tokenizerOf(copy);
      const later = new Date(Date.now() + 60_000);
      utimesSync(path.join(copy, 'tokenizer.json'), later, later);
      const text = longText(2 * OFF_THREAD_CHARS, 3);
      await expect(afterLongTexts(() => changed.encode(text))).resolves.toEqual(here.encode(text));
      // Off for good: the next one is not deferred.
      const next = longText(2 * OFF_THREAD_CHARS, 4);
      expect(deferringLongTexts(() => changed.encode(next))).toEqual(here.encode(next));
      changed.close();
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });
});
if (!haveFixtures) it.skip(`off-thread tokenizing of the fixtures: ${fixturesSkipReason}`, () => {});

describe('a request with a long prompt', () => {
  // The default preset with a context long enough for prompts of tens of thousands of characters.
  const MODEL = 'long-context';
  let runner: RunnerService;
  beforeAll(async () => {
    runner = new RunnerService({ intraOpNumThreads: 1 });
    await runner.loadModel(generatedModel('context-16k', { maxPositions: 16_384 }), { id: MODEL });
  }, 120_000);
  afterAll(async () => {
    await runner?.close();
  });

  const request = (prompt: string) => ({ model: MODEL, prompt, maxNewTokens: 1, sampling: { greedy: true } });
  // English words: a few characters a token, so the prompt fits the context.
  const english = (seed: number) => longText(OFF_THREAD_CHARS + 100, seed, ['river', 'town', 'the', 'Willow', 'and']);

  it('lets a request sent after it start first, and answers as its prompt tokenized on the host would', async () => {
    const prompt = english(5);
    const order: string[] = [];
    const seen = (name: string) => (f: StreamFrame) => {
      if (f.type === 'accepted') order.push(name);
    };
    const long = runner.generate(request(prompt), seen('long'));
    const short = runner.generate(request('Hello there'), seen('short'));
    const [a] = await Promise.all([long.result, short.result]);
    // The short one was taken while the long one's text was tokenized on the worker.
    expect(order).toEqual(['short', 'long']);
    // Its prompt as the host's own tokenizer makes it (the ids themselves: the tests above).
    const here = await tokenizerOf(generatedModel('context-16k', { maxPositions: 16_384 }));
    expect(a.promptTokens).toBe(here.encode(prompt).length);
    here.close();
  }, 60_000);

  it('a long predicted output (OpenAI’s prediction) is tokenized off the thread too, before the request is taken', async () => {
    const order: string[] = [];
    const seen = (name: string) => (f: StreamFrame) => {
      if (f.type === 'accepted') order.push(name);
    };
    const long = runner.generate({ ...request('Hello'), prediction: english(8) }, seen('long'));
    const short = runner.generate(request('Hello there'), seen('short'));
    await Promise.all([long.result, short.result]);
    expect(order).toEqual(['short', 'long']);
  });

  it('measured (the window’s context meter, count_tokens) off the thread too, as counted on it', async () => {
    const req = request(english(7));
    const measured = await runner.measurePromptOffThread(req);
    expect(measured.promptTokens).toBe(runner.countPromptTokens(req));
  });

  it('stopped while its prompt is tokenized: cancelled before it started, nothing sent', async () => {
    const frames: StreamFrame[] = [];
    const h = runner.generate(request(english(6)), (f) => frames.push(f));
    h.cancel();
    await expect(h.result).rejects.toMatchObject({
      code: 'CANCELLED',
      message: expect.stringMatching(/before it started/),
    });
    expect(frames).toEqual([]);
    expect(runner.snapshot().queue).toEqual([]);
  });

  /** Chat template renders while `fn` runs (every render goes through the library's Template.render). */
  async function rendersOf<T>(fn: () => Promise<T>): Promise<{ value: T; renders: number }> {
    const spy = vi.spyOn(Template.prototype, 'render');
    try {
      const value = await fn();
      return { value, renders: spy.mock.calls.length };
    } finally {
      spy.mockRestore();
    }
  }

  it('a long conversation cut to fit (drop-oldest): each prompt tried is rendered once, over all its waits', async () => {
    // 200 turns of ~400 characters: five times the context, so the search for the turns to keep meets a long prompt
    // not tokenized yet in each of several passes, and each wait prepares the request again.
    const messages = Array.from({ length: 201 }, (_, i) => ({
      role: i % 2 ? ('assistant' as const) : ('user' as const),
      content: longText(400, i, ['river', 'town', 'the', 'Willow', 'and']),
    }));
    const req = { model: MODEL, messages, contextOverflow: 'drop-oldest', maxNewTokens: 1, sampling: { greedy: true } };
    // One pass, everything tokenized on the host: each prompt the search tries is rendered once.
    const once = await rendersOf(async () => runner.countPromptTokens(req));
    const passes = vi.spyOn(runner as unknown as { generateAs: () => unknown }, 'generateAs');
    const accepted: number[] = [];
    const generated = await rendersOf(() => {
      const h = runner.generate(req, (f) => {
        if (f.type !== 'accepted') return;
        accepted.push(f.promptTokens);
        // Prepared, its renders all made: stopped (a prefill of 16k tokens takes seconds).
        setImmediate(() => h.cancel());
      });
      return h.result.catch((err: unknown) => err);
    });
    const prepared = passes.mock.calls.length;
    passes.mockRestore();
    expect(generated.value).toMatchObject({ code: 'CANCELLED' });
    expect(accepted).toEqual([once.value]);
    expect(prepared).toBeGreaterThan(2);
    // Each pass rendered again every prompt an earlier one had (84 renders of these 13).
    expect(generated.renders).toBe(once.renders);
    // The window's meter, off the thread: the same.
    const measured = await rendersOf(() => runner.measurePromptOffThread(req));
    expect(measured.value.promptTokens).toBe(once.value);
    expect(measured.renders).toBe(once.renders);
  });
});
