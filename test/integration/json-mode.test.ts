/**
 * JSON mode on the real engine and host with the default model (a random
 * model: left alone it writes anything but JSON). Every reply must start with
 * `{`, and every reply that ended by itself must be a JSON object by
 * JSON.parse; rows of one batch end on their own; the engine gets the token
 * table again after a reload and after a crash.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerService } from '../../src/main/host/runner-service';
import type { GenerateRequest, GenerationResult, StreamFrame } from '../../src/shared/contract';
import { defaultModelDir } from '../helpers/fixtures';

let host: RunnerService;
beforeAll(async () => {
  host = new RunnerService({ intraOpNumThreads: 2 });
  await host.loadModel(defaultModelDir, { id: 'default' });
}, 60_000);
afterAll(async () => {
  await host?.close();
});

const ask = (seed: number, extra: Partial<GenerateRequest> = {}) =>
  host.generate({
    messages: [{ role: 'user', content: 'Reply in JSON.' }],
    maxNewTokens: 120,
    sampling: { temperature: 1, seed },
    responseFormat: 'json',
    ...extra,
  });

/** A row that ended by itself is one JSON object; one cut by max tokens is at least its start. */
function expectJsonReply(row: { text: string; finishReason: string }, label: string): boolean {
  expect(row.text.startsWith('{'), `${label}: ${JSON.stringify(row.text)}`).toBe(true);
  if (row.finishReason !== 'eos') {
    expect(row.finishReason, label).toBe('length');
    return false;
  }
  const parsed: unknown = JSON.parse(row.text);
  expect(typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed), label).toBe(true);
  return true;
}

describe('JSON mode', () => {
  it('every reply is a JSON object, or its start when max tokens cut it; without it the model writes no JSON', async () => {
    let complete = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const r = await ask(seed).result;
      if (expectJsonReply(r, `seed ${seed}`)) complete++;
      const plain = await ask(seed, { responseFormat: 'text' }).result;
      expect(plain.text.startsWith('{'), `seed ${seed} without JSON mode`).toBe(false);
    }
    expect(complete).toBeGreaterThanOrEqual(2);
  });

  it('streams the same text it returns', async () => {
    const frames: StreamFrame[] = [];
    const r = await host.generate(
      {
        messages: [{ role: 'user', content: 'Reply in JSON.' }],
        maxNewTokens: 120,
        sampling: { temperature: 1, seed: 3 },
        responseFormat: 'json',
      },
      (f) => frames.push(f),
    ).result;
    expect(r.text.startsWith('{')).toBe(true);
    expect(frames.flatMap((f) => (f.type === 'tokens' ? f.rows.map((row) => row.text) : [])).join('')).toBe(r.text);
  });

  it('rows of one batched request each keep to JSON and end on their own', async () => {
    const r: GenerationResult = await ask(11, { rows: 4 }).result;
    expect(r.rows).toHaveLength(4);
    const lengths = new Set(r.rows.map((row) => row.tokenIds.length));
    for (const [i, row] of r.rows.entries()) expectJsonReply(row, `row ${i}`);
    // They did not all stop together: a row whose object closed ended while others went on.
    expect(r.rows.some((row) => row.finishReason === 'eos')).toBe(true);
    expect(lengths.size).toBeGreaterThan(1);
  });

  it('works after the model is reloaded and after the engine restarts (the token table is sent again)', async () => {
    const before = await ask(2).result;
    await host.loadModel(defaultModelDir, { id: 'default' });
    expect((await ask(2).result).text).toBe(before.text);
    process.kill(host.engine.pid as number, 'SIGKILL');
    let after: GenerationResult | undefined;
    for (let i = 0; i < 100 && !after; i++) {
      try {
        after = await ask(2).result;
      } catch {
        // The engine is restarting and loading the model again.
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    expect(after?.text).toBe(before.text);
  }, 60_000);
});
